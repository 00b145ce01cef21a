-- 0015: screen recordings (docs/recordings.md).
--
-- `recording_settings`: whether a computer's screens are recorded (`enabled` 0 or 1), who set it
-- (a token name) and when (ms). No row: its workspace's default decides.
-- `recording_workspaces`: a workspace's default for its computers without a row of their own.
-- No row for either: not recorded.
--
-- `recording_pieces`: the index of what was recorded, one row per piece pulled from a guest and
-- stored sealed beside the homes under `name` (`<bot>/<start ms>-<session>-<first seq>`).
-- `session` is the guest recorder's id and `first_seq`..`next_seq` its records in the piece (the
-- pull cursor survives a restart of the control plane); `start_ms`/`end_ms` the times of its
-- first and last records; `bytes` its size before sealing; `lost` records the guest dropped
-- before it. Rows go when their piece expires (`--recording-retention`) or their computer is
-- destroyed.

CREATE TABLE recording_settings (
    computer_id TEXT PRIMARY KEY,
    enabled BIGINT NOT NULL,
    set_by TEXT NOT NULL,
    set_at BIGINT NOT NULL
);

CREATE TABLE recording_workspaces (
    workspace TEXT PRIMARY KEY,
    enabled BIGINT NOT NULL,
    set_by TEXT NOT NULL,
    set_at BIGINT NOT NULL
);

CREATE TABLE recording_pieces (
    computer_id TEXT NOT NULL,
    name TEXT NOT NULL,
    bot TEXT NOT NULL,
    session TEXT NOT NULL,
    first_seq BIGINT NOT NULL,
    next_seq BIGINT NOT NULL,
    start_ms BIGINT NOT NULL,
    end_ms BIGINT NOT NULL,
    bytes BIGINT NOT NULL,
    lost BIGINT NOT NULL,
    PRIMARY KEY (computer_id, name)
);

CREATE INDEX recording_pieces_bot ON recording_pieces (computer_id, bot, start_ms);
CREATE INDEX recording_pieces_end ON recording_pieces (end_ms);
