-- 0012: workspaces' secrets (docs/security.md#secrets).
--
-- One row per (workspace, name). `sealed` is the value sealed with AES-256-GCM under the control
-- plane's secrets key (derived from its capability key), bound to the workspace and name:
-- `v1:` then base64 of nonce || ciphertext || tag. The value is never stored otherwise.
-- `domains` is a JSON array of names and `*.` wildcards; `header` the optional header template;
-- `placeholder` what computers hold instead of the value, stable across rotations.

CREATE TABLE secrets (
    workspace TEXT NOT NULL,
    name TEXT NOT NULL,
    domains TEXT NOT NULL,
    header TEXT NULL,
    placeholder TEXT NOT NULL,
    sealed TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    rotated_at BIGINT NOT NULL,
    PRIMARY KEY (workspace, name)
);
