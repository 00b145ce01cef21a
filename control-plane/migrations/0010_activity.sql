-- 0010: the activity feed (docs/api.md#activity).
--
-- One row per event of a computer's feed: `seq` numbers a computer's events 1, 2, 3, … (taken as
-- the computer's highest plus one by the inserting statement; the primary key makes two replicas
-- inserting at once collide, and the loser takes the next). `kind` is `command` or `lifecycle`,
-- `body` the event as JSON (schema::activity::ActivityBody), redacted before it was written.
-- Rows older than the newest `--activity-retention` of their computer are deleted on insert.
-- Rows outlive their computer (its history stays readable until the computer id is forgotten).

CREATE TABLE activity_events (
    computer_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    at_ms BIGINT NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (computer_id, seq)
);
