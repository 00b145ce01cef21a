//! The `previews` table, and a short-lived cache of lookups by label: every request to a
//! preview origin looks its preview up, and a revocation here is seen at once (the cache entry
//! goes), on another replica within [`CACHE_TTL`].

use super::{Access, LABEL_LEN, MAX_LIVE_PER_COMPUTER};
use crate::db::{column, Db, DbError};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a lookup by label is reused.
pub const CACHE_TTL: Duration = Duration::from_secs(1);
/// Most entries the lookup cache holds (then it starts afresh).
const CACHE_MAX: usize = 4096;

/// One preview, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviewRow {
    pub id: String,
    pub computer: String,
    pub port: u16,
    pub access: Access,
    /// The token name that made it (`server` for the server's own).
    pub created_by: String,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub revoked_at_ms: Option<i64>,
}

impl PreviewRow {
    /// Whether it can be visited at `now_ms`.
    pub fn live(&self, now_ms: i64) -> bool {
        self.revoked_at_ms.is_none() && now_ms < self.expires_at_ms
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    #[error("{0}")]
    Bad(String),
    #[error("no preview {0} on this computer")]
    NotFound(String),
    #[error("this computer has {MAX_LIVE_PER_COMPUTER} live previews already: revoke some")]
    TooMany,
    #[error(transparent)]
    Db(#[from] DbError),
}

/// The previews of every computer.
pub struct PreviewStore {
    db: Db,
    cache: Mutex<HashMap<String, (Instant, Option<PreviewRow>)>>,
}

fn digest(label: &str) -> String {
    hex::encode(Sha256::digest(label.to_ascii_lowercase().as_bytes()))
}

const COLUMNS: &str =
    "id, computer_id, port, access, created_by, created_at, expires_at, revoked_at";

impl PreviewStore {
    pub fn new(db: Db) -> Self {
        Self {
            db,
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn row(r: &sqlx::any::AnyRow) -> Result<PreviewRow, DbError> {
        let id: String = column(r, "previews", "?", "id")?;
        let port: i64 = column(r, "previews", &id, "port")?;
        let port = u16::try_from(port)
            .map_err(|_| DbError::corrupt("previews", &id, format!("port {port}")))?;
        let access: String = column(r, "previews", &id, "access")?;
        let access = Access::parse(&access)
            .map_err(|e| DbError::corrupt("previews", &id, format!("access: {e}")))?;
        Ok(PreviewRow {
            computer: column(r, "previews", &id, "computer_id")?,
            port,
            access,
            created_by: column(r, "previews", &id, "created_by")?,
            created_at_ms: column(r, "previews", &id, "created_at")?,
            expires_at_ms: column(r, "previews", &id, "expires_at")?,
            revoked_at_ms: column(r, "previews", &id, "revoked_at")?,
            id,
        })
    }

    /// Makes a preview of `port` on `computer`; returns it and its host label (shown once).
    pub async fn create(
        &self,
        computer: &str,
        port: u16,
        access: Access,
        created_by: &str,
        expires_at_ms: i64,
        now_ms: i64,
    ) -> Result<(PreviewRow, String), PreviewError> {
        if port == 0 {
            return Err(PreviewError::Bad("port must be 1 to 65535".into()));
        }
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM previews WHERE computer_id = $1 AND revoked_at IS NULL \
             AND expires_at > $2",
        )
        .bind(computer)
        .bind(now_ms)
        .fetch_one(self.db.pool())
        .await
        .map_err(DbError::from)?;
        let n: i64 = column(&row, "previews", computer, "n")?;
        if n >= MAX_LIVE_PER_COMPUTER {
            return Err(PreviewError::TooMany);
        }
        // 48 bits: an id, not a secret. The label is the secret: 128 bits.
        let id = format!("pv_{}", hex::encode(rand::random::<[u8; 6]>()));
        let label = hex::encode(rand::random::<[u8; 16]>());
        debug_assert_eq!(label.len(), LABEL_LEN);
        sqlx::query(
            "INSERT INTO previews (id, computer_id, port, access, label_sha256, created_by, \
             created_at, expires_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL)",
        )
        .bind(&id)
        .bind(computer)
        .bind(i64::from(port))
        .bind(access.as_str())
        .bind(digest(&label))
        .bind(created_by)
        .bind(now_ms)
        .bind(expires_at_ms)
        .execute(self.db.pool())
        .await
        .map_err(DbError::from)?;
        let row = PreviewRow {
            id,
            computer: computer.to_string(),
            port,
            access,
            created_by: created_by.to_string(),
            created_at_ms: now_ms,
            expires_at_ms,
            revoked_at_ms: None,
        };
        Ok((row, label))
    }

    /// A computer's previews, newest first; without `all`, only those still live at `now_ms`.
    pub async fn list(
        &self,
        computer: &str,
        all: bool,
        now_ms: i64,
    ) -> Result<Vec<PreviewRow>, DbError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM previews WHERE computer_id = $1 \
             ORDER BY created_at DESC, id LIMIT 1000"
        ))
        .bind(computer)
        .fetch_all(self.db.pool())
        .await?;
        let rows = rows.iter().map(Self::row).collect::<Result<Vec<_>, _>>()?;
        Ok(rows.into_iter().filter(|r| all || r.live(now_ms)).collect())
    }

    /// Revokes preview `id` of `computer`; revoking twice is no error.
    pub async fn revoke(
        &self,
        computer: &str,
        id: &str,
        now_ms: i64,
    ) -> Result<PreviewRow, PreviewError> {
        let done = sqlx::query(
            "UPDATE previews SET revoked_at = COALESCE(revoked_at, $3) \
             WHERE id = $1 AND computer_id = $2",
        )
        .bind(id)
        .bind(computer)
        .bind(now_ms)
        .execute(self.db.pool())
        .await
        .map_err(DbError::from)?;
        if done.rows_affected() == 0 {
            return Err(PreviewError::NotFound(id.chars().take(64).collect()));
        }
        self.forget();
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM previews WHERE id = $1"))
            .bind(id)
            .fetch_one(self.db.pool())
            .await
            .map_err(DbError::from)?;
        Ok(Self::row(&row)?)
    }

    /// Revokes every preview of `computer` (it was destroyed).
    pub async fn revoke_all(&self, computer: &str, now_ms: i64) -> Result<(), DbError> {
        sqlx::query(
            "UPDATE previews SET revoked_at = $2 WHERE computer_id = $1 AND revoked_at IS NULL",
        )
        .bind(computer)
        .bind(now_ms)
        .execute(self.db.pool())
        .await?;
        self.forget();
        Ok(())
    }

    /// The preview served under `label`, live or not (the caller tells a visitor which).
    pub async fn by_label(&self, label: &str) -> Result<Option<PreviewRow>, DbError> {
        let key = digest(label);
        if let Some((at, row)) = self.lock().get(&key) {
            if at.elapsed() < CACHE_TTL {
                return Ok(row.clone());
            }
        }
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM previews WHERE label_sha256 = $1"
        ))
        .bind(&key)
        .fetch_optional(self.db.pool())
        .await?;
        let row = row.as_ref().map(Self::row).transpose()?;
        let mut cache = self.lock();
        if cache.len() >= CACHE_MAX {
            cache.clear();
        }
        cache.insert(key, (crate::clock::monotonic(), row.clone()));
        Ok(row)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Option<PreviewRow>)>> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Drops every cached lookup (a revocation must be seen by the next request).
    fn forget(&self) {
        self.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_preview_is_found_by_its_label_until_revoked() {
        let store = PreviewStore::new(crate::db::testing::sqlite().await.unwrap());
        let (row, label) = store
            .create("c-1", 8000, Access::Link, "alice", 10_000, 1_000)
            .await
            .unwrap();
        assert_eq!(label.len(), LABEL_LEN);
        let found = store.by_label(&label).await.unwrap().unwrap();
        assert_eq!(found, row);
        assert!(found.live(2_000) && !found.live(10_000));
        assert_eq!(
            store.by_label(&label.to_uppercase()).await.unwrap(),
            Some(row.clone())
        );
        assert!(store.by_label(&"0".repeat(32)).await.unwrap().is_none());
        assert!(matches!(
            store.revoke("c-2", &row.id, 3_000).await,
            Err(PreviewError::NotFound(_))
        ));
        let revoked = store.revoke("c-1", &row.id, 3_000).await.unwrap();
        assert_eq!(revoked.revoked_at_ms, Some(3_000));
        let seen = store.by_label(&label).await.unwrap().unwrap();
        assert!(
            !seen.live(3_001),
            "the revocation is seen by the next lookup"
        );
        assert!(store.list("c-1", false, 3_001).await.unwrap().is_empty());
        assert_eq!(store.list("c-1", true, 3_001).await.unwrap().len(), 1);
        assert!(matches!(
            store
                .create("c-1", 0, Access::Public, "a", 10_000, 1_000)
                .await,
            Err(PreviewError::Bad(_))
        ));
    }

    #[tokio::test]
    async fn a_computer_has_a_bounded_number_of_live_previews() {
        let store = PreviewStore::new(crate::db::testing::sqlite().await.unwrap());
        for _ in 0..MAX_LIVE_PER_COMPUTER {
            store
                .create("c-1", 80, Access::Public, "a", 10_000, 1_000)
                .await
                .unwrap();
        }
        assert!(matches!(
            store
                .create("c-1", 80, Access::Public, "a", 10_000, 1_000)
                .await,
            Err(PreviewError::TooMany)
        ));
        // Expired ones do not count.
        store
            .create("c-1", 80, Access::Public, "a", 20_000, 10_000)
            .await
            .unwrap();
    }
}
