-- 0004: multipart uploads of home checkpoints that were started and not yet finished
-- (docs/homes.md#object-store).
--
-- The object store records an upload here before its first part goes out and removes the row
-- after the upload is completed or aborted. A row that outlives its commit (the control plane was
-- killed mid-checkpoint) names parts S3 keeps, invisible to listings of objects, until someone
-- aborts the upload; the reconciler does, then deletes the row. S3-compatible servers need not
-- list multipart uploads (s3s-fs does not), so this table is the only way to find them.
--
-- storage_id is the home's storage id (computers.home_storage_id), object_key the object the
-- upload would create (homes/<storage id>/<revision>), upload_id the id S3 returned: not a secret,
-- but untrusted, so the store bounds and checks it before writing and again after reading.
-- No foreign key: a row must survive its computer's purge until the upload is aborted.

CREATE TABLE home_uploads (
    storage_id TEXT NOT NULL,
    object_key TEXT NOT NULL,
    upload_id TEXT NOT NULL,
    PRIMARY KEY (storage_id, upload_id)
);
