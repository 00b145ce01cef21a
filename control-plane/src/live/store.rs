//! The `live_bots` table: per (computer, bot) screen generation, the user's control lease and
//! the `waiting_takeover` mark of a run (docs/security.md#capability-urls,
//! docs/lifecycle.md#takeover).
//!
//! The takeover rule itself is [`rules::takeover`], pure; [`LiveStore::take_control`] applies it
//! in one write transaction that also reads the bot's execution lease, so a run that acquires
//! its lease concurrently either is seen (and the takeover refused) or comes after the grant.
//! SQL follows the portability rules of [`crate::db`] (SQLite and PostgreSQL alike).

use crate::computers::ComputerId;
use crate::db::{column, non_negative, Db, DbError};
use crate::lease::{rules::holder, LeaseState};
use gateway_proto::{BotId, LeaseToken};
use std::time::Duration;

/// How long a user's control lease lives by default (docs/lifecycle.md#takeover: 15 minutes);
/// `rakazo serve` takes it from [`super::config::LiveArgs`].
pub const CONTROL_LEASE_TTL: Duration = super::config::DEFAULT_CONTROL_LEASE_TTL;

const TABLE: &str = "live_bots";

/// The user's control lease of one bot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlLease {
    /// Its own id (`[A-Za-z0-9_-]`), sealed into control and terminal URLs.
    pub id: String,
    pub expires_at_ms: i64,
}

/// The live state of one (computer, bot); a pair never seen is the default.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BotLive {
    pub screen_generation: u64,
    /// The control lease as stored, lapsed or not: see [`BotLive::control_at`].
    pub control: Option<ControlLease>,
    /// The execution lease of a run that asked for protected input.
    pub waiting_takeover: Option<LeaseToken>,
}

impl BotLive {
    /// The control lease if it is live at `now_ms` (expiry is exclusive).
    pub fn control_at(&self, now_ms: i64) -> Option<&ControlLease> {
        self.control.as_ref().filter(|c| now_ms < c.expires_at_ms)
    }
}

/// Why the store refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum LiveStoreError {
    /// A run holds the bot's execution lease and did not ask for a takeover.
    #[error("bot {bot} on computer {computer} is running: Stop the bot first")]
    BotRunning { computer: ComputerId, bot: BotId },
    #[error("live state store failed")]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for LiveStoreError {
    fn from(e: sqlx::Error) -> Self {
        Self::Db(DbError::Query(e))
    }
}

/// The takeover rule (docs/lifecycle.md#takeover), pure.
pub mod rules {
    use gateway_proto::LeaseToken;

    /// A user may take control when no run holds the bot's execution lease, or when the run
    /// that holds it marked itself `waiting_takeover` with that very lease.
    pub fn takeover_allowed(live_run: Option<&LeaseToken>, waiting: Option<&LeaseToken>) -> bool {
        match live_run {
            None => true,
            Some(run) => waiting == Some(run),
        }
    }
}

/// The `live_bots` table.
#[derive(Debug, Clone)]
pub struct LiveStore {
    db: Db,
}

fn key(computer: &ComputerId, bot: &BotId) -> String {
    format!("{computer}/{bot}")
}

fn from_row(row: &sqlx::any::AnyRow, k: &str) -> Result<BotLive, DbError> {
    let generation: i64 = column(row, TABLE, k, "screen_generation")?;
    let control_id: Option<String> = column(row, TABLE, k, "control_id")?;
    let control_expires_at: i64 = column(row, TABLE, k, "control_expires_at")?;
    let waiting: Option<String> = column(row, TABLE, k, "waiting_takeover")?;
    let waiting_takeover = waiting
        .map(|w| {
            LeaseToken::parse(&w)
                .map_err(|e| DbError::corrupt(TABLE, k, format!("waiting_takeover: {e}")))
        })
        .transpose()?;
    Ok(BotLive {
        screen_generation: non_negative(generation, TABLE, k, "screen_generation")?,
        control: control_id.map(|id| ControlLease {
            id,
            expires_at_ms: control_expires_at,
        }),
        waiting_takeover,
    })
}

const COLUMNS: &str = "screen_generation, control_id, control_expires_at, waiting_takeover";

/// A fresh control-lease id: 96 random bits, valid for the wire.
fn new_control_id() -> String {
    format!("cl-{}", hex::encode(rand::random::<[u8; 12]>()))
}

impl LiveStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// The bot's live state (the default for a pair never seen).
    pub async fn get(&self, computer: &ComputerId, bot: &BotId) -> Result<BotLive, LiveStoreError> {
        let sql = format!("SELECT {COLUMNS} FROM live_bots WHERE computer_id = $1 AND bot = $2");
        let row = sqlx::query(&sql)
            .bind(computer.as_str())
            .bind(bot.as_str())
            .fetch_optional(self.db.pool())
            .await?;
        match row {
            Some(row) => Ok(from_row(&row, &key(computer, bot))?),
            None => Ok(BotLive::default()),
        }
    }

    /// Opens a write transaction with the (created if missing) row of the pair locked.
    async fn locked(
        &self,
        computer: &ComputerId,
        bot: &BotId,
    ) -> Result<(sqlx::Transaction<'static, sqlx::Any>, BotLive), LiveStoreError> {
        let mut tx = self.db.begin_write().await?;
        sqlx::query(
            "INSERT INTO live_bots (computer_id, bot) VALUES ($1, $2) \
             ON CONFLICT (computer_id, bot) DO NOTHING",
        )
        .bind(computer.as_str())
        .bind(bot.as_str())
        .execute(&mut *tx)
        .await?;
        let sql = format!(
            "SELECT {COLUMNS} FROM live_bots WHERE computer_id = $1 AND bot = $2{}",
            self.db.for_update()
        );
        let row = sqlx::query(&sql)
            .bind(computer.as_str())
            .bind(bot.as_str())
            .fetch_one(&mut *tx)
            .await?;
        let state = from_row(&row, &key(computer, bot))?;
        Ok((tx, state))
    }

    /// Bumps the bot's screen generation (its desktop was released or torn down): every URL
    /// sealed before stops opening. Returns the new generation.
    pub async fn bump_generation(
        &self,
        computer: &ComputerId,
        bot: &BotId,
    ) -> Result<u64, LiveStoreError> {
        let (mut tx, state) = self.locked(computer, bot).await?;
        let next = state.screen_generation.saturating_add(1);
        let stored = i64::try_from(next).map_err(|_| {
            DbError::corrupt(TABLE, key(computer, bot), "screen_generation overflow")
        })?;
        sqlx::query(
            "UPDATE live_bots SET screen_generation = $3 WHERE computer_id = $1 AND bot = $2",
        )
        .bind(computer.as_str())
        .bind(bot.as_str())
        .bind(stored)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(next)
    }

    /// Grants (or extends) the user's control lease for `ttl` when [`rules::takeover_allowed`]:
    /// a live lease keeps its id, a lapsed or missing one gets a new id.
    pub async fn take_control(
        &self,
        computer: &ComputerId,
        bot: &BotId,
        ttl: Duration,
        now_ms: i64,
    ) -> Result<ControlLease, LiveStoreError> {
        let lease = self.control(computer, bot, ttl, now_ms, true).await?;
        lease.ok_or_else(|| DbError::corrupt(TABLE, key(computer, bot), "no control lease").into())
    }

    /// Extends the user's control of `bot` while it is live (the same refusal as
    /// [`LiveStore::take_control`] while a run holds the bot); `None`, changing nothing, when
    /// there is no live control to extend (a new takeover is [`LiveStore::take_control`]).
    pub async fn renew_control(
        &self,
        computer: &ComputerId,
        bot: &BotId,
        ttl: Duration,
        now_ms: i64,
    ) -> Result<Option<ControlLease>, LiveStoreError> {
        self.control(computer, bot, ttl, now_ms, false).await
    }

    /// Takes or extends control; a new control lease only when `new_allowed`.
    async fn control(
        &self,
        computer: &ComputerId,
        bot: &BotId,
        ttl: Duration,
        now_ms: i64,
        new_allowed: bool,
    ) -> Result<Option<ControlLease>, LiveStoreError> {
        let (mut tx, state) = self.locked(computer, bot).await?;
        let sql = format!(
            "SELECT owner, fence, expires_at FROM leases WHERE computer_id = $1 AND bot = $2{}",
            self.db.for_update()
        );
        let lease_row = sqlx::query(&sql)
            .bind(computer.as_str())
            .bind(bot.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        let run = match lease_row {
            Some(row) => {
                let k = key(computer, bot);
                let fence: i64 = column(&row, "leases", &k, "fence")?;
                holder(
                    &LeaseState {
                        owner: column(&row, "leases", &k, "owner")?,
                        fence: non_negative(fence, "leases", &k, "fence")?,
                        expires_at_ms: column(&row, "leases", &k, "expires_at")?,
                    },
                    now_ms,
                )
            }
            None => None,
        };
        if !rules::takeover_allowed(run.as_ref(), state.waiting_takeover.as_ref()) {
            return Err(LiveStoreError::BotRunning {
                computer: computer.clone(),
                bot: bot.clone(),
            });
        }
        let id = match state.control_at(now_ms) {
            Some(live) => live.id.clone(),
            None if new_allowed => new_control_id(),
            // Nothing to renew: `tx` drops, which rolls back the row `locked` may have made.
            None => return Ok(None),
        };
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let lease = ControlLease {
            id,
            expires_at_ms: now_ms.saturating_add(ttl_ms),
        };
        sqlx::query(
            "UPDATE live_bots SET control_id = $3, control_expires_at = $4 \
             WHERE computer_id = $1 AND bot = $2",
        )
        .bind(computer.as_str())
        .bind(bot.as_str())
        .bind(lease.id.as_str())
        .bind(lease.expires_at_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(lease))
    }

    /// Ends the user's control lease; returns the one that was stored (lapsed or not), if any.
    pub async fn release_control(
        &self,
        computer: &ComputerId,
        bot: &BotId,
    ) -> Result<Option<ControlLease>, LiveStoreError> {
        let (mut tx, state) = self.locked(computer, bot).await?;
        sqlx::query(
            "UPDATE live_bots SET control_id = NULL, control_expires_at = 0 \
             WHERE computer_id = $1 AND bot = $2",
        )
        .bind(computer.as_str())
        .bind(bot.as_str())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(state.control)
    }

    /// Records (or clears) that the run holding `lease` waits for a takeover. The caller has
    /// checked that `lease` is the live execution lease.
    pub async fn set_waiting_takeover(
        &self,
        computer: &ComputerId,
        bot: &BotId,
        lease: Option<&LeaseToken>,
    ) -> Result<(), LiveStoreError> {
        let (mut tx, _) = self.locked(computer, bot).await?;
        sqlx::query(
            "UPDATE live_bots SET waiting_takeover = $3 WHERE computer_id = $1 AND bot = $2",
        )
        .bind(computer.as_str())
        .bind(bot.as_str())
        .bind(lease.map(|l| l.to_string()))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::rules::takeover_allowed;
    use gateway_proto::LeaseToken;

    #[test]
    fn takeover_needs_a_free_bot_or_a_waiting_run() {
        let run = LeaseToken::new("run-1", 3).unwrap();
        let older = LeaseToken::new("run-1", 2).unwrap();
        assert!(takeover_allowed(None, None));
        assert!(takeover_allowed(None, Some(&older)));
        assert!(!takeover_allowed(Some(&run), None));
        assert!(!takeover_allowed(Some(&run), Some(&older)));
        assert!(takeover_allowed(Some(&run), Some(&run)));
    }
}
