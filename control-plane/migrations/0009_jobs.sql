-- 0009: maintenance jobs (docs/lifecycle.md#maintenance-jobs; control-plane/src/jobs/).
--
-- One row per update or recovery of a computer. A job in state queued, running or interrupted
-- reserves its computer: new execution leases, stop, start, destroy, takeover and idle
-- suspension are refused while it does (at most one such job per computer: the partial unique
-- index). Every change is one write transaction that locks the row and applies the pure rules
-- of `jobs::rules`, so replicas sharing PostgreSQL agree on it without any process memory.
--
-- kind: update | recover. state: queued | running | succeeded | failed | interrupted | released.
-- stage: the lifecycle stage reached (queued, waiting, checkpointing, stopping, provisioning,
-- starting, restoring, done): actual stages, not percentages; `stages` holds every stage with
-- when it began, as JSON text ([{"stage": "...", "at_ms": 0}, ...]). Progress lives here, apart
-- from the computer's own state.
-- worker: who claimed it (a replica id, or one process's id on SQLite); heartbeat_at (ms): its
-- last sign of life while running. A running job whose heartbeat is older than the heartbeat
-- timeout is marked interrupted by any control plane and stays reserved until an operator
-- releases it (`release-interrupted` with workers_stopped: true). A claimed job is never run
-- again. error: why it failed or was interrupted; warning: what the user should know (a
-- recovery's unsaved work); revision: the home revision it checkpointed (update) or restored.

CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    computer_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    state TEXT NOT NULL,
    stage TEXT NOT NULL,
    stages TEXT NOT NULL,
    worker TEXT,
    heartbeat_at BIGINT NOT NULL DEFAULT 0,
    error TEXT,
    warning TEXT,
    revision BIGINT,
    created_at BIGINT NOT NULL,
    started_at BIGINT,
    finished_at BIGINT,
    updated_at BIGINT NOT NULL
);

CREATE INDEX jobs_by_computer ON jobs (computer_id, created_at);
CREATE INDEX jobs_by_state ON jobs (state);
CREATE UNIQUE INDEX jobs_one_reservation ON jobs (computer_id)
    WHERE state IN ('queued', 'running', 'interrupted');
