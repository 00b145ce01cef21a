-- 0003: where each computer's stored home is (docs/homes.md).
--
-- home_storage_id names the home's objects in the object store (homes/<storage id>/<revision>);
-- home_revision is its current checkpoint (NULL: none yet) and home_wrapped_key its data key
-- wrapped under the content key (hex; NULL until the first checkpoint). Together they are the
-- object store's revision ledger: an object is live only if a row names its (storage id, revision).
--
-- A destroyed computer keeps its storage id, revision and key, so its home stays restorable: the
-- next computer created with the same home key adopts them (the columns move to the new row in
-- one transaction). `rakazo home purge` forgets them, which makes the objects unreadable and
-- unowned, and the reconciler deletes them.
--
-- home_pending_restore is 1 while a new or replacement machine has not imported the stored home
-- yet: checkpoints are refused meanwhile, so an empty machine can never overwrite the stored home.

ALTER TABLE computers ADD COLUMN home_storage_id TEXT NULL;
ALTER TABLE computers ADD COLUMN home_revision BIGINT NULL;
ALTER TABLE computers ADD COLUMN home_wrapped_key TEXT NULL;
ALTER TABLE computers ADD COLUMN home_pending_restore BIGINT NOT NULL DEFAULT 0;

CREATE UNIQUE INDEX computers_home_storage_id ON computers (home_storage_id)
    WHERE home_storage_id IS NOT NULL;
