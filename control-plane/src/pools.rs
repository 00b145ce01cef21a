//! Warm pools (docs/pools.md): the `pools` table, each pool's wish (how many members, on which
//! provider, with a desktop or not), and the claim that lets one replica refill a pool at a
//! time.
//!
//! A pool's members are computers of kind [`ComputerKind::Pool`](crate::computers::ComputerKind)
//! in the computers table; booting, handing out and replacing them is the core's
//! (`core::pool`), refilling in the background is `pool_refill`'s. This module only stores.

use crate::computers::PoolName;
use crate::db::{column, Db, DbError};
use providers::MachineLimits;
use sqlx::any::AnyRow;

/// Most members one pool may keep.
pub const MAX_POOL_SIZE: u32 = 64;
/// Most pools a control plane keeps.
pub const MAX_POOLS: usize = 64;

/// One pool as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    pub name: PoolName,
    /// The provider kind its members run on.
    pub provider: String,
    /// How many unassigned members it keeps.
    pub size: u32,
    /// Whether each member has a desktop and Chrome up before it is handed out.
    pub desktop: bool,
    pub limits: MachineLimits,
    /// The token that made it.
    pub created_by: String,
    pub created_at_ms: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("pool {0} not found")]
    NotFound(String),
    #[error("pool {0} already exists")]
    Exists(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for PoolError {
    fn from(e: sqlx::Error) -> Self {
        Self::Db(DbError::Query(e))
    }
}

const COLUMNS: &str = "name, provider, size, desktop, limits, created_by, created_at";

/// The pools table.
#[derive(Debug, Clone)]
pub struct PoolStore {
    db: Db,
}

impl PoolStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Stores a new pool; `Exists` if the name is taken, `Invalid` past [`MAX_POOLS`] or
    /// [`MAX_POOL_SIZE`].
    pub async fn create(&self, pool: &Pool) -> Result<(), PoolError> {
        if pool.size > MAX_POOL_SIZE {
            return Err(PoolError::Invalid(format!(
                "size must be at most {MAX_POOL_SIZE}, got {}",
                pool.size
            )));
        }
        if self.list().await?.len() >= MAX_POOLS {
            return Err(PoolError::Invalid(format!(
                "this control plane keeps at most {MAX_POOLS} pools: delete one first"
            )));
        }
        let done = sqlx::query(
            "INSERT INTO pools (name, provider, size, desktop, limits, created_by, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
        )
        .bind(pool.name.as_str())
        .bind(pool.provider.as_str())
        .bind(i64::from(pool.size))
        .bind(i64::from(pool.desktop))
        .bind(serde_json::to_string(&pool.limits).expect("limits serialize"))
        .bind(pool.created_by.as_str())
        .bind(pool.created_at_ms)
        .execute(self.db.pool())
        .await?;
        if done.rows_affected() == 0 {
            return Err(PoolError::Exists(pool.name.to_string()));
        }
        Ok(())
    }

    /// Changes a pool's size; `NotFound` if there is no such pool.
    pub async fn resize(&self, name: &PoolName, size: u32) -> Result<(), PoolError> {
        if size > MAX_POOL_SIZE {
            return Err(PoolError::Invalid(format!(
                "size must be at most {MAX_POOL_SIZE}, got {size}"
            )));
        }
        let done = sqlx::query("UPDATE pools SET size = $2 WHERE name = $1")
            .bind(name.as_str())
            .bind(i64::from(size))
            .execute(self.db.pool())
            .await?;
        if done.rows_affected() == 0 {
            return Err(PoolError::NotFound(name.to_string()));
        }
        Ok(())
    }

    pub async fn get(&self, name: &PoolName) -> Result<Option<Pool>, PoolError> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM pools WHERE name = $1"))
            .bind(name.as_str())
            .fetch_optional(self.db.pool())
            .await?;
        Ok(row.as_ref().map(from_row).transpose()?)
    }

    /// Every pool, by name.
    pub async fn list(&self) -> Result<Vec<Pool>, PoolError> {
        let rows = sqlx::query(&format!("SELECT {COLUMNS} FROM pools ORDER BY name"))
            .fetch_all(self.db.pool())
            .await?;
        Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
    }

    /// Forgets a pool; `false` if there was none. Its members are the caller's to destroy.
    pub async fn delete(&self, name: &PoolName) -> Result<bool, PoolError> {
        let done = sqlx::query("DELETE FROM pools WHERE name = $1")
            .bind(name.as_str())
            .execute(self.db.pool())
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Claims the refilling of pool `name` for `owner` until `until_ms`: `true` if no other
    /// replica holds it (or its claim ran out), or `owner` already does.
    pub async fn claim_refill(
        &self,
        name: &PoolName,
        owner: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<bool, PoolError> {
        let done = sqlx::query(
            "UPDATE pools SET refill_owner = $2, refill_until = $4 WHERE name = $1 \
             AND (refill_owner IS NULL OR refill_owner = $2 OR refill_until < $3)",
        )
        .bind(name.as_str())
        .bind(owner)
        .bind(now_ms)
        .bind(until_ms)
        .execute(self.db.pool())
        .await?;
        Ok(done.rows_affected() > 0)
    }
}

fn from_row(row: &AnyRow) -> Result<Pool, DbError> {
    const TABLE: &str = "pools";
    let raw: String = column(row, TABLE, "?", "name")?;
    let key = raw.as_str();
    let corrupt = |reason: String| DbError::corrupt(TABLE, key, reason);
    let name = PoolName::new(raw.clone()).map_err(|e| corrupt(e.to_string()))?;
    let size: i64 = column(row, TABLE, key, "size")?;
    let desktop: i64 = column(row, TABLE, key, "desktop")?;
    let limits: String = column(row, TABLE, key, "limits")?;
    Ok(Pool {
        name,
        provider: column(row, TABLE, key, "provider")?,
        size: u32::try_from(size).map_err(|_| corrupt(format!("size {size}")))?,
        desktop: desktop != 0,
        limits: serde_json::from_str(&limits).map_err(|e| corrupt(format!("limits: {e}")))?,
        created_by: column(row, TABLE, key, "created_by")?,
        created_at_ms: column(row, TABLE, key, "created_at")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::computers::{
        new_computer_id, ComputerError, ComputerKind, ComputerState, ComputerStore, NewComputer,
        TokenHash, WorkspaceId,
    };
    use crate::db::testing;

    async fn member(computers: &ComputerStore, pool: &PoolName) -> crate::computers::ComputerId {
        let id = new_computer_id();
        let c = computers
            .create(
                NewComputer {
                    id: id.clone(),
                    kind: ComputerKind::Pool {
                        pool: pool.clone(),
                        member: id.clone(),
                    },
                    provider: "local".into(),
                    token_hash: TokenHash::of("t"),
                    limits: MachineLimits::default(),
                    placement: None,
                },
                1,
            )
            .await
            .unwrap();
        assert_eq!(c.home_key, format!("~pool-{id}"));
        computers
            .set_state(&id, ComputerState::Running, 2)
            .await
            .unwrap();
        id
    }

    async fn rules(db: Db) {
        let pools = PoolStore::new(db.clone());
        let computers = ComputerStore::new(db);
        let name = PoolName::new("warm").unwrap();
        let pool = Pool {
            name: name.clone(),
            provider: "local".into(),
            size: 2,
            desktop: true,
            limits: MachineLimits::default(),
            created_by: "admin".into(),
            created_at_ms: 1,
        };
        pools.create(&pool).await.unwrap();
        assert!(matches!(
            pools.create(&pool).await,
            Err(PoolError::Exists(_))
        ));
        assert_eq!(pools.get(&name).await.unwrap(), Some(pool.clone()));
        assert!(matches!(
            pools.resize(&name, MAX_POOL_SIZE + 1).await,
            Err(PoolError::Invalid(_))
        ));
        pools.resize(&name, 3).await.unwrap();
        assert_eq!(pools.list().await.unwrap()[0].size, 3);

        // One replica refills at a time; a lapsed claim passes on.
        assert!(pools.claim_refill(&name, "r1", 10, 100).await.unwrap());
        assert!(!pools.claim_refill(&name, "r2", 50, 150).await.unwrap());
        assert!(pools.claim_refill(&name, "r1", 60, 160).await.unwrap());
        assert!(pools.claim_refill(&name, "r2", 161, 300).await.unwrap());

        // A member is handed out only once its boot finished, and only once.
        let a = member(&computers, &name).await;
        let ws = |w: &str| ComputerKind::Team {
            workspace: WorkspaceId::new(w).unwrap(),
        };
        assert!(computers
            .hand_out(&a, &name, &ws("w1"), 3)
            .await
            .unwrap()
            .is_none());
        computers.set_pool_ready(&a).await.unwrap();
        assert_eq!(
            computers.pool_ready_ids(&name).await.unwrap(),
            vec![a.to_string()]
        );
        let got = computers
            .hand_out(&a, &name, &ws("w1"), 3)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.kind, ws("w1"));
        assert_eq!(got.home_key, "team-w1");
        assert!(computers
            .hand_out(&a, &name, &ws("w2"), 4)
            .await
            .unwrap()
            .is_none());
        assert!(computers.pool_members(&name).await.unwrap().is_empty());
        // A retired member cannot be handed out; a handed-out one cannot be retired.
        assert!(!computers.retire_member(&a, &name).await.unwrap());
        let b = member(&computers, &name).await;
        computers.set_pool_ready(&b).await.unwrap();
        assert!(computers.retire_member(&b, &name).await.unwrap());
        assert!(computers
            .hand_out(&b, &name, &ws("w2"), 5)
            .await
            .unwrap()
            .is_none());
        // A home with a live computer is refused before any member is touched.
        let c = member(&computers, &name).await;
        computers.set_pool_ready(&c).await.unwrap();
        assert!(matches!(
            computers.hand_out(&c, &name, &ws("w1"), 6).await,
            Err(ComputerError::HomeInUse { .. })
        ));
        assert_eq!(computers.pool_members(&name).await.unwrap().len(), 2);

        assert!(pools.delete(&name).await.unwrap());
        assert!(!pools.delete(&name).await.unwrap());
    }

    #[tokio::test]
    async fn pools_on_sqlite() {
        rules(testing::sqlite().await.unwrap()).await;
    }

    #[tokio::test]
    async fn pools_on_postgres() {
        rules(testing::postgres(testing::DEFAULT_PG_URL).await.unwrap()).await;
    }
}
