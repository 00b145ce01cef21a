-- 0008: several control planes on one PostgreSQL (ARCHITECTURE.md "control-plane `cluster`").
--
-- `replicas`: every running control plane, with where its guests and its peers reach it; alive
-- while `heartbeat_at` (ms) is recent. `draining` 1: shutting down, given no new guests.
-- `guest_links`: which replica a computer's guest is connected to now (newest connection wins).
-- `claims`: exclusive work across replicas (idle suspension, a home's checkpoint or restore, the
-- reconciler): one row per (kind, subject), held by `holder` until `expires_at` (ms) unless
-- renewed; `fence` grows with every take, so a holder that lost its claim cannot renew it.
-- `cluster_secrets`: the sha256 of the secrets every replica must share (API token, capability
-- key, tunnel certificate); a replica with different ones is refused at start.

CREATE TABLE replicas (
    id TEXT PRIMARY KEY,
    tunnel_addr TEXT NOT NULL,
    peer_addr TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL,
    draining BIGINT NOT NULL DEFAULT 0
);

CREATE TABLE guest_links (
    computer_id TEXT PRIMARY KEY,
    replica_id TEXT NOT NULL,
    connected_at BIGINT NOT NULL
);

CREATE TABLE claims (
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,
    holder TEXT NOT NULL,
    fence BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (kind, subject)
);

CREATE TABLE cluster_secrets (
    name TEXT PRIMARY KEY,
    sha256 TEXT NOT NULL
);
