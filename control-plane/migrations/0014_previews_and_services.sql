-- 0014: preview URLs (docs/previews.md) and services.
--
-- `previews`: one row per preview URL. `id` names it in the API (not a secret); `label_sha256`
-- is the hex SHA-256 of the random host label its URL is served under (the label itself is
-- shown once and never stored); `access` is link, session or public; `created_at`,
-- `expires_at` and `revoked_at` are ms. Rows go with their computer.

CREATE TABLE previews (
    id TEXT PRIMARY KEY,
    computer_id TEXT NOT NULL,
    port INTEGER NOT NULL,
    access TEXT NOT NULL,
    label_sha256 TEXT NOT NULL UNIQUE,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    revoked_at BIGINT NULL
);

CREATE INDEX previews_computer ON previews (computer_id);

-- `services`: detached processes a computer starts again each time it starts (docs/api.md#services).
-- `argv` is a JSON array of strings; `cwd` relative to the home or NULL; `process` the id of the
-- process last started for it (NULL: none yet).

CREATE TABLE services (
    computer_id TEXT NOT NULL,
    name TEXT NOT NULL,
    argv TEXT NOT NULL,
    cwd TEXT NULL,
    created_at BIGINT NOT NULL,
    process BIGINT NULL,
    PRIMARY KEY (computer_id, name)
);
