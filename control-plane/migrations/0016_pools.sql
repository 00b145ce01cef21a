-- 0016: warm pools (docs/pools.md).
--
-- `pools`: each pool's wish: `size` members kept booted on `provider` with `limits` (JSON, as
-- computers.limits), each with a desktop and Chrome already up when `desktop` is 1. `refill_owner`
-- and `refill_until` (ms) are the claim of the replica that refills it now, so replicas on one
-- PostgreSQL never refill one pool twice.
--
-- `computers.pool_ready`: 1 once a member's boot has finished (its guest connected and, for a pool
-- of desktops, its spare desktop up): only such a member is handed out.
--
-- `computers.pool`: the pool an unassigned member waits in (NULL for every other computer). Such
-- a row is stored as a placeholder team row (workspace `~pool`, home key `~pool-<its id>`): the
-- CHECK of 0001 knows only `team` and `private`, and `~` is in no workspace or bot id. A hand-out
-- rewrites kind, workspace, bot and home key and clears `pool` in one conditional update.

ALTER TABLE computers ADD COLUMN pool TEXT NULL;
ALTER TABLE computers ADD COLUMN pool_ready BIGINT NOT NULL DEFAULT 0;

CREATE INDEX computers_by_pool ON computers (pool) WHERE pool IS NOT NULL;

CREATE TABLE pools (
    name TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    size BIGINT NOT NULL,
    desktop BIGINT NOT NULL,
    limits TEXT NOT NULL DEFAULT '{}',
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    refill_owner TEXT NULL,
    refill_until BIGINT NOT NULL DEFAULT 0
);
