//! [`SqlLeaseStore`]: leases in the `leases` table of SQLite or PostgreSQL.

use super::{
    granted, held, live, mismatch, rules, validate_owner, Lease, LeaseError, LeaseState,
    LeaseStore, Released,
};
use crate::computers::ComputerId;
use crate::db::{column, non_negative, Db, DbError};
use gateway_proto::{BotId, LeaseToken};
use std::time::Duration;

/// Leases in the `leases` table. Each operation is one write transaction that locks the row
/// (`SELECT … FOR UPDATE` on PostgreSQL; `BEGIN IMMEDIATE` takes SQLite's write lock), applies
/// [`rules`], and writes the result.
#[derive(Debug, Clone)]
pub struct SqlLeaseStore {
    db: Db,
}

const TABLE: &str = "leases";

impl SqlLeaseStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Runs `op` on the locked row of (computer, bot) and writes the state it returns. With
    /// `create`, a missing row is inserted first so that there is something to lock.
    async fn update(
        &self,
        computer: &ComputerId,
        bot: &BotId,
        create: bool,
        op: impl FnOnce(&LeaseState) -> Result<LeaseState, LeaseError>,
    ) -> Result<LeaseState, LeaseError> {
        let mut tx = self.db.begin_write().await?;
        if create {
            // FOR UPDATE locks nothing that does not exist; concurrent inserters of the same
            // key wait for each other on the primary key.
            sqlx::query(
                "INSERT INTO leases (computer_id, bot, owner, fence, expires_at) \
                 VALUES ($1, $2, NULL, 0, 0) ON CONFLICT (computer_id, bot) DO NOTHING",
            )
            .bind(computer.as_str())
            .bind(bot.as_str())
            .execute(&mut *tx)
            .await?;
        }
        let sql = format!(
            "SELECT owner, fence, expires_at FROM leases WHERE computer_id = $1 AND bot = $2{}",
            self.db.for_update()
        );
        let row = sqlx::query(&sql)
            .bind(computer.as_str())
            .bind(bot.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        let current = match row {
            Some(row) => state_from_row(&row, computer, bot)?,
            None => LeaseState::default(),
        };
        // On a refusal `tx` drops here, which rolls back (and undoes the insert above).
        let next = op(&current)?;
        if next != current {
            let fence = i64::try_from(next.fence).map_err(|_| LeaseError::FenceExhausted {
                computer: computer.clone(),
                bot: bot.clone(),
            })?;
            sqlx::query(
                "UPDATE leases SET owner = $3, fence = $4, expires_at = $5 \
                 WHERE computer_id = $1 AND bot = $2",
            )
            .bind(computer.as_str())
            .bind(bot.as_str())
            .bind(next.owner.as_deref())
            .bind(fence)
            .bind(next.expires_at_ms)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(next)
    }
}

fn state_from_row(
    row: &sqlx::any::AnyRow,
    computer: &ComputerId,
    bot: &BotId,
) -> Result<LeaseState, DbError> {
    let key = format!("{computer}/{bot}");
    let owner: Option<String> = column(row, TABLE, &key, "owner")?;
    if let Some(owner) = &owner {
        LeaseToken::new(owner.as_str(), 0)
            .map_err(|e| DbError::corrupt(TABLE, &key, format!("owner {owner:?}: {e}")))?;
    }
    let fence: i64 = column(row, TABLE, &key, "fence")?;
    Ok(LeaseState {
        owner,
        fence: non_negative(fence, TABLE, &key, "fence")?,
        expires_at_ms: column(row, TABLE, &key, "expires_at")?,
    })
}

impl LeaseStore for SqlLeaseStore {
    async fn acquire(
        &self,
        computer: &ComputerId,
        bot: &BotId,
        owner: &str,
        ttl: Duration,
        now_ms: i64,
    ) -> Result<Lease, LeaseError> {
        validate_owner(owner)?;
        let next = self
            .update(computer, bot, true, |state| {
                rules::acquire(state, owner, ttl, now_ms).map_err(|r| held(computer, bot, r))
            })
            .await?;
        granted(computer, bot, &next)
    }

    async fn renew(
        &self,
        computer: &ComputerId,
        bot: &BotId,
        token: &LeaseToken,
        ttl: Duration,
        now_ms: i64,
    ) -> Result<Lease, LeaseError> {
        let next = self
            .update(computer, bot, false, |state| {
                rules::renew(state, token, ttl, now_ms)
                    .map_err(|m| mismatch(computer, bot, token, m))
            })
            .await?;
        granted(computer, bot, &next)
    }

    async fn release(
        &self,
        computer: &ComputerId,
        bot: &BotId,
        token: &LeaseToken,
        now_ms: i64,
    ) -> Result<Released, LeaseError> {
        let mut released = Released::Already;
        self.update(computer, bot, false, |state| {
            released = Released::of(state);
            rules::release(state, token, now_ms).map_err(|m| mismatch(computer, bot, token, m))
        })
        .await?;
        Ok(released)
    }

    async fn get(
        &self,
        computer: &ComputerId,
        bot: &BotId,
        now_ms: i64,
    ) -> Result<Option<Lease>, LeaseError> {
        let row = sqlx::query(
            "SELECT owner, fence, expires_at FROM leases WHERE computer_id = $1 AND bot = $2",
        )
        .bind(computer.as_str())
        .bind(bot.as_str())
        .fetch_optional(self.db.pool())
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let state = state_from_row(&row, computer, bot)?;
        Ok(live(computer, bot, &state, now_ms))
    }
}
