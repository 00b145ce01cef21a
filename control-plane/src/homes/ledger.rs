//! The home columns of the computers table (migration 0003): the object store's
//! [`RevisionLedger`] on the computer row, storage ids and their adoption by a replacement
//! computer, the pending-restore guard, and the set of checkpoints the reconciler keeps. The
//! multipart uploads a commit started and has not finished are rows of `home_uploads` (migration
//! 0004), which the reconciler aborts once no commit is running them.
//!
//! Ownership rules (docs/homes.md#object-store): a storage id belongs to at most one row (a unique
//! index). Destroying a computer leaves its row holding the id, revision and wrapped key, so the
//! home stays restorable; the next computer created with the same home key adopts them in one
//! transaction ([`HomeLedger::storage_id`]). A purge ([`RevisionLedger::forget`] through the
//! store's `delete`) clears the revision and key, after which the objects are unowned and the
//! reconciler deletes them.

use crate::computers::{Computer, ComputerId};
use crate::db::{Db, DbError};
use homes::seal::WrappedKey;
use homes::store::{PendingUpload, UploadId};
use homes::{HomeKey, LedgerEntry, LedgerError, Revision, RevisionLedger};
use sqlx::Row;
use std::collections::HashSet;

/// The home columns of the computers table.
#[derive(Debug, Clone)]
pub struct HomeLedger {
    db: Db,
}

fn backend(e: impl Into<DbError>) -> LedgerError {
    LedgerError::Backend(Box::new(e.into()))
}

fn revision_of(value: Option<i64>, sid: &str) -> Result<Option<Revision>, DbError> {
    match value {
        None => Ok(None),
        Some(n) => u64::try_from(n)
            .ok()
            .and_then(Revision::new)
            .map(Some)
            .ok_or_else(|| DbError::corrupt("computers", sid, format!("home_revision is {n}"))),
    }
}

fn revision_param(r: Revision) -> Result<i64, LedgerError> {
    i64::try_from(r.get())
        .map_err(|_| LedgerError::Backend(format!("revision {r} overflows").into()))
}

impl HomeLedger {
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// The storage id of `c`'s home, assigning one first if the row has none: adopted from the
    /// newest destroyed computer with the same home key that still holds one, else fresh. One
    /// write transaction, so two callers cannot both adopt or both assign.
    pub async fn storage_id(&self, c: &Computer) -> Result<HomeKey, DbError> {
        let mut tx = self.db.begin_write().await?;
        let lock = self.db.for_update();
        let row = sqlx::query(&format!(
            "SELECT home_storage_id FROM computers WHERE id = $1{lock}"
        ))
        .bind(c.id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Err(DbError::corrupt("computers", c.id.as_str(), "row vanished"));
        };
        if let Some(sid) = row.try_get::<Option<String>, _>("home_storage_id")? {
            tx.commit().await?;
            return parse_sid(&sid, &c.id);
        }
        let previous = sqlx::query(&format!(
            "SELECT id, home_storage_id, home_revision, home_wrapped_key FROM computers \
             WHERE home_key = $1 AND state = 'destroyed' AND home_storage_id IS NOT NULL \
             ORDER BY updated_at DESC, id DESC LIMIT 1{lock}"
        ))
        .bind(c.home_key.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let sid = match previous {
            Some(prev) => {
                let old_id: String = prev.try_get("id")?;
                let sid: String = prev.try_get("home_storage_id")?;
                let revision: Option<i64> = prev.try_get("home_revision")?;
                let key: Option<String> = prev.try_get("home_wrapped_key")?;
                // Clear first: the unique index allows one holder at a time.
                sqlx::query(
                    "UPDATE computers SET home_storage_id = NULL, home_revision = NULL, \
                     home_wrapped_key = NULL WHERE id = $1",
                )
                .bind(&old_id)
                .execute(&mut *tx)
                .await?;
                sqlx::query(
                    "UPDATE computers SET home_storage_id = $2, home_revision = $3, \
                     home_wrapped_key = $4 WHERE id = $1",
                )
                .bind(c.id.as_str())
                .bind(&sid)
                .bind(revision)
                .bind(key)
                .execute(&mut *tx)
                .await?;
                tracing::info!(computer_id = %c.id, previous = %old_id, home_key = %c.home_key,
                    "computer adopted the stored home of a destroyed computer");
                sid
            }
            None => {
                let sid = format!("h-{}", hex::encode(rand::random::<[u8; 12]>()));
                sqlx::query("UPDATE computers SET home_storage_id = $2 WHERE id = $1")
                    .bind(c.id.as_str())
                    .bind(&sid)
                    .execute(&mut *tx)
                    .await?;
                sid
            }
        };
        tx.commit().await?;
        parse_sid(&sid, &c.id)
    }

    /// The storage id a row holds now, without assigning one (browsing a stopped or destroyed
    /// computer's home).
    pub async fn current_storage_id(&self, id: &ComputerId) -> Result<Option<HomeKey>, DbError> {
        let row = sqlx::query("SELECT home_storage_id FROM computers WHERE id = $1")
            .bind(id.as_str())
            .fetch_optional(self.db.pool())
            .await?;
        match row.map(|r| r.try_get::<Option<String>, _>("home_storage_id")) {
            Some(Ok(Some(sid))) => parse_sid(&sid, id).map(Some),
            Some(Err(e)) => Err(e.into()),
            _ => Ok(None),
        }
    }

    /// Whether the computer's machine still has to import its stored home.
    pub async fn pending_restore(&self, id: &ComputerId) -> Result<bool, DbError> {
        let row = sqlx::query("SELECT home_pending_restore FROM computers WHERE id = $1")
            .bind(id.as_str())
            .fetch_optional(self.db.pool())
            .await?;
        Ok(match row {
            Some(r) => r.try_get::<i64, _>("home_pending_restore")? != 0,
            None => false,
        })
    }

    pub async fn set_pending_restore(&self, id: &ComputerId, pending: bool) -> Result<(), DbError> {
        sqlx::query("UPDATE computers SET home_pending_restore = $2 WHERE id = $1")
            .bind(id.as_str())
            .bind(i64::from(pending))
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// Bots holding a live execution lease on the computer, other than `except`, and bots
    /// under a user's live control lease (listed as `control:<bot>`, whoever `except` is).
    pub async fn live_lease_holders(
        &self,
        id: &ComputerId,
        except: &[&str],
        now_ms: i64,
    ) -> Result<Vec<String>, DbError> {
        let rows = sqlx::query(
            "SELECT bot, CAST(0 AS BIGINT) AS control FROM leases WHERE computer_id = $1 \
             AND owner IS NOT NULL AND expires_at > $2 \
             UNION ALL SELECT bot, CAST(1 AS BIGINT) AS control FROM live_bots WHERE computer_id = $1 \
             AND control_id IS NOT NULL AND control_expires_at > $2",
        )
        .bind(id.as_str())
        .bind(now_ms)
        .fetch_all(self.db.pool())
        .await?;
        let mut bots = Vec::new();
        for r in rows {
            let bot: String = r.try_get("bot")?;
            let control: i64 = r.try_get("control")?;
            if control != 0 {
                bots.push(format!("control:{bot}"));
            } else if !except.contains(&bot.as_str()) {
                bots.push(bot);
            }
        }
        bots.sort();
        Ok(bots)
    }

    /// The live execution leases on computer `id`: (bot, owner, fence), what a guest is told on
    /// every hello.
    pub async fn live_leases(
        &self,
        id: &ComputerId,
        now_ms: i64,
    ) -> Result<Vec<(String, String, i64)>, DbError> {
        let rows = sqlx::query(
            "SELECT bot, owner, fence FROM leases WHERE computer_id = $1 \
             AND owner IS NOT NULL AND expires_at > $2",
        )
        .bind(id.as_str())
        .bind(now_ms)
        .fetch_all(self.db.pool())
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            out.push((r.try_get("bot")?, r.try_get("owner")?, r.try_get("fence")?));
        }
        Ok(out)
    }

    /// The latest lease fence of every bot ever leased on computer `id` (held, lapsed or
    /// released: a release keeps the fence), by bot: what a home export or import acts under.
    pub async fn lease_fences(&self, id: &ComputerId) -> Result<Vec<(String, i64)>, DbError> {
        let rows = sqlx::query(
            "SELECT bot, fence FROM leases WHERE computer_id = $1 AND fence > 0 ORDER BY bot",
        )
        .bind(id.as_str())
        .fetch_all(self.db.pool())
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            out.push((r.try_get("bot")?, r.try_get("fence")?));
        }
        Ok(out)
    }

    /// Every (storage id, revision) a row names: what the reconciler keeps.
    pub async fn owned(&self) -> Result<HashSet<(HomeKey, Revision)>, DbError> {
        let rows = sqlx::query(
            "SELECT home_storage_id, home_revision FROM computers \
             WHERE home_storage_id IS NOT NULL AND home_revision IS NOT NULL",
        )
        .fetch_all(self.db.pool())
        .await?;
        let mut out = HashSet::new();
        for r in rows {
            let sid: String = r.try_get("home_storage_id")?;
            let rev: Option<i64> = r.try_get("home_revision")?;
            let Ok(key) = HomeKey::new(sid.clone()) else {
                return Err(DbError::corrupt("computers", sid, "bad home_storage_id"));
            };
            if let Some(rev) = revision_of(rev, &sid)? {
                out.insert((key, rev));
            }
        }
        Ok(out)
    }

    /// The row (destroyed or not) that holds the newest stored home for `home_key`: the live
    /// computer's if there is one, else the most recently destroyed one still holding it.
    pub async fn holder_of(&self, home_key: &str) -> Result<Option<ComputerId>, DbError> {
        let row = sqlx::query(
            "SELECT id FROM computers WHERE home_key = $1 AND home_storage_id IS NOT NULL \
             ORDER BY CASE WHEN state = 'destroyed' THEN 1 ELSE 0 END, updated_at DESC, id DESC \
             LIMIT 1",
        )
        .bind(home_key)
        .fetch_optional(self.db.pool())
        .await?;
        match row {
            Some(r) => {
                let id: String = r.try_get("id")?;
                ComputerId::new(id.clone())
                    .map(Some)
                    .map_err(|_| DbError::corrupt("computers", id, "bad id"))
            }
            None => Ok(None),
        }
    }
}

fn parse_sid(sid: &str, id: &ComputerId) -> Result<HomeKey, DbError> {
    HomeKey::new(sid).map_err(|_| DbError::corrupt("computers", id.as_str(), "bad home_storage_id"))
}

impl RevisionLedger for HomeLedger {
    async fn load(&self, home: &HomeKey) -> Result<Option<LedgerEntry>, LedgerError> {
        let row = sqlx::query(
            "SELECT home_revision, home_wrapped_key FROM computers WHERE home_storage_id = $1",
        )
        .bind(home.as_str())
        .fetch_optional(self.db.pool())
        .await
        .map_err(backend)?;
        let Some(row) = row else { return Ok(None) };
        let revision: Option<i64> = row.try_get("home_revision").map_err(backend)?;
        let key: Option<String> = row.try_get("home_wrapped_key").map_err(backend)?;
        let Some(key) = key else { return Ok(None) };
        let bytes = hex::decode(&key).map_err(|_| {
            backend(DbError::corrupt(
                "computers",
                home.as_str(),
                "home_wrapped_key is not hex",
            ))
        })?;
        Ok(Some(LedgerEntry {
            revision: revision_of(revision, home.as_str()).map_err(backend)?,
            wrapped_key: WrappedKey::from_bytes(bytes),
        }))
    }

    async fn advance(
        &self,
        home: &HomeKey,
        expected: Option<Revision>,
        next: &LedgerEntry,
    ) -> Result<(), LedgerError> {
        let next_rev = next.revision.map(revision_param).transpose()?;
        let key = hex::encode(next.wrapped_key.as_bytes());
        // The compare-and-set is the WHERE clause: one statement, atomic on both backends.
        let done = match expected {
            Some(r) => sqlx::query(
                "UPDATE computers SET home_revision = $2, home_wrapped_key = $3 \
                 WHERE home_storage_id = $1 AND home_revision = $4",
            )
            .bind(home.as_str())
            .bind(next_rev)
            .bind(&key)
            .bind(revision_param(r)?)
            .execute(self.db.pool())
            .await
            .map_err(backend)?,
            None => sqlx::query(
                "UPDATE computers SET home_revision = $2, home_wrapped_key = $3 \
                 WHERE home_storage_id = $1 AND home_revision IS NULL",
            )
            .bind(home.as_str())
            .bind(next_rev)
            .bind(&key)
            .execute(self.db.pool())
            .await
            .map_err(backend)?,
        };
        if done.rows_affected() == 1 {
            return Ok(());
        }
        let found = self.load(home).await?.and_then(|e| e.revision);
        Err(LedgerError::Conflict {
            home: home.clone(),
            expected,
            found,
        })
    }

    async fn forget(&self, home: &HomeKey) -> Result<(), LedgerError> {
        sqlx::query(
            "UPDATE computers SET home_revision = NULL, home_wrapped_key = NULL \
             WHERE home_storage_id = $1",
        )
        .bind(home.as_str())
        .execute(self.db.pool())
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn record_upload(&self, upload: &PendingUpload) -> Result<(), LedgerError> {
        // Idempotent: recording the same upload twice keeps one row.
        sqlx::query(
            "INSERT INTO home_uploads (storage_id, object_key, upload_id) VALUES ($1, $2, $3) \
             ON CONFLICT (storage_id, upload_id) DO NOTHING",
        )
        .bind(upload.home().as_str())
        .bind(upload.object())
        .bind(upload.upload_id().as_str())
        .execute(self.db.pool())
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn clear_upload(&self, upload: &PendingUpload) -> Result<(), LedgerError> {
        sqlx::query("DELETE FROM home_uploads WHERE storage_id = $1 AND upload_id = $2")
            .bind(upload.home().as_str())
            .bind(upload.upload_id().as_str())
            .execute(self.db.pool())
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn pending_uploads(&self) -> Result<Vec<PendingUpload>, LedgerError> {
        let rows = sqlx::query(
            "SELECT storage_id, object_key, upload_id FROM home_uploads \
             ORDER BY storage_id, upload_id",
        )
        .fetch_all(self.db.pool())
        .await
        .map_err(backend)?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let sid: String = r.try_get("storage_id").map_err(backend)?;
            let object: String = r.try_get("object_key").map_err(backend)?;
            let id: String = r.try_get("upload_id").map_err(backend)?;
            // Checked on the way in as well; a row that fails now was not written by us.
            let corrupt = |what: &str| backend(DbError::corrupt("home_uploads", &sid, what));
            let home = HomeKey::new(sid.clone()).map_err(|_| corrupt("bad storage_id"))?;
            let id = UploadId::new(id).map_err(|e| corrupt(&e.to_string()))?;
            let upload =
                PendingUpload::new(home, object, id).map_err(|e| corrupt(&e.to_string()))?;
            out.push(upload);
        }
        Ok(out)
    }

    /// A live `home` claim on the computer owning `home` (`crate::claims`): a checkpoint or
    /// restore holds it, in this replica or another.
    async fn busy_elsewhere(&self, home: &HomeKey) -> Result<bool, LedgerError> {
        let row = sqlx::query(
            "SELECT c.holder AS holder FROM claims c JOIN computers k ON c.subject = k.id \
             WHERE c.kind = 'home' AND k.home_storage_id = $1 AND c.expires_at > $2",
        )
        .bind(home.as_str())
        .bind(crate::clock::now_ms())
        .fetch_optional(self.db.pool())
        .await
        .map_err(backend)?;
        Ok(row.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::computers::{
        new_computer_id, ComputerKind, ComputerState, ComputerStore, NewComputer, TokenHash,
        WorkspaceId,
    };
    use crate::db::testing;

    async fn computer(store: &ComputerStore, ws: &str) -> Computer {
        let new = NewComputer {
            id: new_computer_id(),
            kind: ComputerKind::Team {
                workspace: WorkspaceId::new(ws).unwrap(),
            },
            provider: "local".into(),
            token_hash: TokenHash::of("t"),
            limits: Default::default(),
            placement: None,
        };
        store.create(new, 1).await.unwrap()
    }

    fn entry(rev: u64, key: u8) -> LedgerEntry {
        LedgerEntry {
            revision: Revision::new(rev),
            wrapped_key: WrappedKey::from_bytes(vec![key; 61]),
        }
    }

    async fn ledger_rules(db: Db) {
        let store = ComputerStore::new(db.clone());
        let ledger = HomeLedger::new(db.clone());
        let a = computer(&store, "w1").await;
        let sid = ledger.storage_id(&a).await.unwrap();
        assert_eq!(ledger.storage_id(&a).await.unwrap(), sid, "stable");
        assert_eq!(ledger.load(&sid).await.unwrap(), None);
        ledger.advance(&sid, None, &entry(1, 7)).await.unwrap();
        assert!(matches!(
            ledger.advance(&sid, None, &entry(1, 7)).await,
            Err(LedgerError::Conflict { found: Some(_), .. })
        ));
        ledger
            .advance(&sid, Revision::new(1), &entry(2, 7))
            .await
            .unwrap();
        assert_eq!(ledger.load(&sid).await.unwrap(), Some(entry(2, 7)));
        let owned = ledger.owned().await.unwrap();
        assert!(owned.contains(&(sid.clone(), Revision::new(2).unwrap())));

        // Destroy keeps ownership; the next computer with the same home key adopts it.
        store
            .set_state(&a.id, ComputerState::Destroyed, 2)
            .await
            .unwrap();
        assert_eq!(ledger.owned().await.unwrap().len(), 1);
        let b = computer(&store, "w1").await;
        assert_eq!(ledger.storage_id(&b).await.unwrap(), sid);
        assert_eq!(ledger.current_storage_id(&a.id).await.unwrap(), None);
        assert_eq!(ledger.load(&sid).await.unwrap(), Some(entry(2, 7)));
        assert_eq!(
            ledger.holder_of("team-w1").await.unwrap(),
            Some(b.id.clone())
        );

        // Another workspace gets its own id; forget makes the objects unowned.
        let c = computer(&store, "w2").await;
        assert_ne!(ledger.storage_id(&c).await.unwrap(), sid);
        ledger.forget(&sid).await.unwrap();
        assert_eq!(ledger.load(&sid).await.unwrap(), None);
        assert!(ledger.owned().await.unwrap().is_empty());

        assert!(!ledger.pending_restore(&b.id).await.unwrap());
        ledger.set_pending_restore(&b.id, true).await.unwrap();
        assert!(ledger.pending_restore(&b.id).await.unwrap());

        // Live execution leases (but the releasing bot's) and live control leases hold off a
        // checkpoint; expired ones do not.
        sqlx::query(
            "INSERT INTO leases (computer_id, bot, owner, fence, expires_at) \
             VALUES ($1, 'bot-x', 'run-1', 1, 100), ($1, 'bot-z', NULL, 3, 100)",
        )
        .bind(b.id.as_str())
        .execute(db.pool())
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO live_bots (computer_id, bot, control_id, control_expires_at) \
             VALUES ($1, 'bot-y', 'ctl-1', 100)",
        )
        .bind(b.id.as_str())
        .execute(db.pool())
        .await
        .unwrap();
        let holders = |except: &'static [&'static str], now: i64| {
            let (ledger, id) = (ledger.clone(), b.id.clone());
            async move { ledger.live_lease_holders(&id, except, now).await.unwrap() }
        };
        assert_eq!(holders(&[], 50).await, vec!["bot-x", "control:bot-y"]);
        assert_eq!(holders(&["bot-x"], 50).await, vec!["control:bot-y"]);
        assert_eq!(
            holders(&["bot-w", "bot-x"], 50).await,
            vec!["control:bot-y"]
        );
        assert!(holders(&[], 100).await.is_empty());
        // A home operation's authority names every bot's latest fence, held, lapsed or released.
        let fences = ledger.lease_fences(&b.id).await.unwrap();
        assert_eq!(fences, vec![("bot-x".into(), 1), ("bot-z".into(), 3)]);
        assert!(ledger.lease_fences(&c.id).await.unwrap().is_empty());
    }

    fn upload(sid: &HomeKey, rev: u64, id: &str) -> PendingUpload {
        PendingUpload::new(
            sid.clone(),
            format!("homes/{sid}/{rev}"),
            UploadId::new(id).unwrap(),
        )
        .unwrap()
    }

    async fn upload_records(db: Db) {
        let store = ComputerStore::new(db.clone());
        let ledger = HomeLedger::new(db.clone());
        let a = ledger
            .storage_id(&computer(&store, "w1").await)
            .await
            .unwrap();
        let b = ledger
            .storage_id(&computer(&store, "w2").await)
            .await
            .unwrap();
        assert!(ledger.pending_uploads().await.unwrap().is_empty());
        // The longest id S3 may hand us fits the column on both backends.
        let long_id = "u".repeat(homes::store::MAX_UPLOAD_ID_LEN);
        let (a1, a2, b1) = (
            upload(&a, 1, "id-a1"),
            upload(&a, 2, &long_id),
            upload(&b, 4, "id-b1"),
        );
        for u in [&a1, &a2, &b1, &a1] {
            ledger.record_upload(u).await.unwrap();
        }
        let mut want = vec![a1.clone(), a2.clone(), b1.clone()];
        want.sort_by(|x, y| (x.home(), x.upload_id()).cmp(&(y.home(), y.upload_id())));
        assert_eq!(ledger.pending_uploads().await.unwrap(), want, "idempotent");

        // Forgetting a home's checkpoints keeps its uploads: they still need aborting.
        ledger.forget(&a).await.unwrap();
        assert_eq!(ledger.pending_uploads().await.unwrap().len(), 3);
        ledger.clear_upload(&a1).await.unwrap();
        ledger.clear_upload(&a1).await.unwrap();
        want.retain(|u| u != &a1);
        assert_eq!(ledger.pending_uploads().await.unwrap(), want);
        ledger.clear_upload(&a2).await.unwrap();
        ledger.clear_upload(&b1).await.unwrap();
        assert!(ledger.pending_uploads().await.unwrap().is_empty());

        // A row the store could not have written is reported, not passed to S3.
        for (sid, object, id) in [
            (a.as_str(), format!("homes/{a}/1"), "has space"),
            (a.as_str(), format!("homes/{b}/1"), "id-x"),
            ("../x", "homes/../x/1".to_owned(), "id-y"),
        ] {
            sqlx::query(
                "INSERT INTO home_uploads (storage_id, object_key, upload_id) VALUES ($1, $2, $3)",
            )
            .bind(sid)
            .bind(&object)
            .bind(id)
            .execute(db.pool())
            .await
            .unwrap();
            let err = ledger.pending_uploads().await.unwrap_err();
            let chain = homes::error_chain(&err);
            assert!(chain.contains("home_uploads"), "{chain}");
            sqlx::query("DELETE FROM home_uploads")
                .execute(db.pool())
                .await
                .unwrap();
        }
    }

    #[tokio::test]
    async fn upload_records_on_sqlite() {
        upload_records(testing::sqlite().await.unwrap()).await;
    }

    #[tokio::test]
    async fn upload_records_on_postgres() {
        let db = testing::postgres(testing::DEFAULT_PG_URL).await.unwrap();
        upload_records(db).await;
    }

    #[tokio::test]
    async fn ledger_on_sqlite() {
        ledger_rules(testing::sqlite().await.unwrap()).await;
    }

    #[tokio::test]
    async fn ledger_on_postgres() {
        let db = testing::postgres(testing::DEFAULT_PG_URL).await.unwrap();
        ledger_rules(db).await;
    }
}
