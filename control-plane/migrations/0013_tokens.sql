-- 0013: scoped API tokens and console sessions (docs/security.md#api-tokens).
--
-- `api_tokens`: one row per token made with `rakazo token create`. `sha256` is the hex SHA-256 of
-- the whole token (the token itself is shown once and never stored); `role` is admin, operator or
-- viewer; `workspaces` a JSON array of workspace ids, or NULL for every computer; `expires_at` and
-- `revoked_at` are ms or NULL. The server's own `--token` is no row: it is an unrestricted admin.
--
-- `console_sessions`: one row per signed-in console. `sha256` is the hex SHA-256 of the session
-- cookie's value; `token_id` the token it was opened with (NULL for the server's token), so that
-- revoking a token ends its sessions; `csrf` the token every state-changing request carries.

CREATE TABLE api_tokens (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    workspaces TEXT NULL,
    sha256 TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NULL,
    revoked_at BIGINT NULL
);

CREATE TABLE console_sessions (
    sha256 TEXT PRIMARY KEY,
    token_id TEXT NULL,
    csrf TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);

CREATE INDEX console_sessions_token ON console_sessions (token_id);
