-- 0001: computers and their execution leases.
--
-- Portable between SQLite and PostgreSQL: TEXT and BIGINT only, booleans as BIGINT 0/1,
-- timestamps as BIGINT milliseconds since the epoch supplied by the caller.

CREATE TABLE computers (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('team', 'private')),
    workspace TEXT NULL,
    bot TEXT NULL,
    home_key TEXT NOT NULL,
    provider TEXT NOT NULL,
    provider_ref TEXT NULL,
    state TEXT NOT NULL CHECK (state IN ('provisioning', 'running', 'stopped', 'destroyed')),
    token_hash TEXT NOT NULL,
    connected BIGINT NOT NULL DEFAULT 0,
    last_seen_at BIGINT NULL,
    screen_generation BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    CHECK ((kind = 'team' AND workspace IS NOT NULL AND bot IS NULL)
        OR (kind = 'private' AND bot IS NOT NULL AND workspace IS NULL))
);

CREATE INDEX computers_by_created_at ON computers (created_at, id);

-- Two live computers must never share one home: they would overwrite each other's checkpoints.
CREATE UNIQUE INDEX computers_live_home_key ON computers (home_key) WHERE state <> 'destroyed';

-- One row per (computer, bot) ever leased. owner NULL means released (or never taken); the fence
-- survives release so that it only ever goes up.
CREATE TABLE leases (
    computer_id TEXT NOT NULL,
    bot TEXT NOT NULL,
    owner TEXT NULL,
    fence BIGINT NOT NULL DEFAULT 0,
    expires_at BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (computer_id, bot)
);
