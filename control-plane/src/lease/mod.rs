//! Execution leases per (computer, bot), fenced (docs/lifecycle.md#leases).
//!
//! The rules live once, in [`rules`]: pure functions from the stored [`LeaseState`] and `now` to
//! the next state or a refusal. They own expiry and fencing (a fence only goes up: every acquire
//! increments it, release keeps it). The stores only persist: [`MemLeaseStore`] under a mutex,
//! [`SqlLeaseStore`] in a write transaction that locks the row, so each operation is atomic
//! under concurrency on SQLite and PostgreSQL alike. The guest enforces fences on its side;
//! pushing grants to it is the tunnel's job, not this module's.
//!
//! [`conformance`] holds the behaviour every store must show, emitted as tests by
//! [`lease_conformance!`](crate::lease_conformance).

use crate::computers::ComputerId;
use crate::db::DbError;
use gateway_proto::{BotId, LeaseParseError, LeaseToken};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// How long an execution lease lives without renewal (docs/lifecycle.md#leases: 5 minutes).
pub const EXEC_LEASE_TTL: Duration = Duration::from_secs(5 * 60);
/// How often a run renews its execution lease (docs/lifecycle.md#leases).
pub const EXEC_LEASE_RENEW_EVERY: Duration = Duration::from_secs(60);

/// A granted lease: `token` is what the run presents with every command and every renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub computer: ComputerId,
    pub bot: BotId,
    pub token: LeaseToken,
    pub expires_at_ms: i64,
}

/// Errors of the lease boundary.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("bot {bot} on computer {computer} is leased to {owner} until {expires_at}")]
    Held {
        computer: ComputerId,
        bot: BotId,
        owner: String,
        /// Milliseconds since the epoch.
        expires_at: i64,
    },
    /// The presented token is not the live holder's: the run must abort.
    #[error("lease {presented} is not the live lease of bot {bot} on computer {computer}")]
    Mismatch {
        computer: ComputerId,
        bot: BotId,
        presented: LeaseToken,
        /// The live holder, if any.
        holder: Option<LeaseToken>,
    },
    #[error("lease owner {owner:?} is invalid")]
    BadOwner {
        owner: String,
        #[source]
        source: LeaseParseError,
    },
    #[error("lease fence of bot {bot} on computer {computer} is exhausted")]
    FenceExhausted { computer: ComputerId, bot: BotId },
    #[error("lease store failed")]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for LeaseError {
    fn from(e: sqlx::Error) -> Self {
        Self::Db(DbError::Query(e))
    }
}

/// One (computer, bot) lease as stored. A pair never leased is [`LeaseState::default`]: no
/// owner, fence 0.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseState {
    /// The holder's run id; `None` once released (or never taken).
    pub owner: Option<String>,
    /// The fence of the most recent grant; kept on release so it only goes up.
    pub fence: u64,
    /// When the holder's claim lapses (exclusive), in milliseconds since the epoch.
    pub expires_at_ms: i64,
}

pub mod conformance;
pub mod rules;
mod sql;

pub use sql::SqlLeaseStore;

/// Where execution leases are kept. Every operation is atomic: two concurrent acquirers of a
/// free lease never both win.
pub trait LeaseStore: Send + Sync {
    /// Takes the lease for `owner` (a run id) for `ttl`. Succeeds when nobody holds it, the
    /// holder's claim lapsed, or `owner` holds it already; the fence is the previous one plus
    /// one. Otherwise [`LeaseError::Held`].
    fn acquire(
        &self,
        computer: &ComputerId,
        bot: &BotId,
        owner: &str,
        ttl: Duration,
        now_ms: i64,
    ) -> impl Future<Output = Result<Lease, LeaseError>> + Send;

    /// Extends the lease to `now + ttl` when `token` (owner and fence) is the live holder's;
    /// otherwise [`LeaseError::Mismatch`], and the caller aborts its run.
    fn renew(
        &self,
        computer: &ComputerId,
        bot: &BotId,
        token: &LeaseToken,
        ttl: Duration,
        now_ms: i64,
    ) -> impl Future<Output = Result<Lease, LeaseError>> + Send;

    /// Releases the lease for the same owner with a fence at least the holder's. Idempotent for
    /// the latest grant's token: a repeat answers [`Released::Already`] and changes nothing.
    /// Anything else is [`LeaseError::Mismatch`].
    fn release(
        &self,
        computer: &ComputerId,
        bot: &BotId,
        token: &LeaseToken,
        now_ms: i64,
    ) -> impl Future<Output = Result<Released, LeaseError>> + Send;

    /// The live lease, if any.
    fn get(
        &self,
        computer: &ComputerId,
        bot: &BotId,
        now_ms: i64,
    ) -> impl Future<Output = Result<Option<Lease>, LeaseError>> + Send;
}

/// What a successful release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// This call ended the holder's claim (live or lapsed).
    Now,
    /// The lease was already released by this token: nothing changed.
    Already,
}

impl Released {
    fn of(before: &LeaseState) -> Self {
        if before.owner.is_some() {
            Self::Now
        } else {
            Self::Already
        }
    }
}

fn validate_owner(owner: &str) -> Result<(), LeaseError> {
    LeaseToken::new(owner, 0)
        .map(drop)
        .map_err(|source| LeaseError::BadOwner {
            owner: owner.to_owned(),
            source,
        })
}

fn held(computer: &ComputerId, bot: &BotId, refusal: rules::Refusal) -> LeaseError {
    let (computer, bot) = (computer.clone(), bot.clone());
    match refusal {
        rules::Refusal::Held {
            owner,
            expires_at_ms,
        } => LeaseError::Held {
            computer,
            bot,
            owner,
            expires_at: expires_at_ms,
        },
        rules::Refusal::FenceExhausted => LeaseError::FenceExhausted { computer, bot },
    }
}

fn mismatch(
    computer: &ComputerId,
    bot: &BotId,
    presented: &LeaseToken,
    m: rules::Mismatch,
) -> LeaseError {
    LeaseError::Mismatch {
        computer: computer.clone(),
        bot: bot.clone(),
        presented: presented.clone(),
        holder: m.holder,
    }
}

/// The granted lease a state stands for.
fn granted(computer: &ComputerId, bot: &BotId, state: &LeaseState) -> Result<Lease, LeaseError> {
    let owner = state.owner.as_deref().unwrap_or_default();
    let token = LeaseToken::new(owner, state.fence).map_err(|source| LeaseError::BadOwner {
        owner: owner.to_owned(),
        source,
    })?;
    Ok(Lease {
        computer: computer.clone(),
        bot: bot.clone(),
        token,
        expires_at_ms: state.expires_at_ms,
    })
}

fn live(computer: &ComputerId, bot: &BotId, state: &LeaseState, now_ms: i64) -> Option<Lease> {
    rules::holder(state, now_ms).map(|token| Lease {
        computer: computer.clone(),
        bot: bot.clone(),
        token,
        expires_at_ms: state.expires_at_ms,
    })
}

/// Leases in memory, for tests and single-process setups that need no durability.
#[derive(Debug, Default)]
pub struct MemLeaseStore {
    leases: Mutex<HashMap<(ComputerId, BotId), LeaseState>>,
}

impl MemLeaseStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies `op` to the state of (computer, bot) under the lock, storing what it returns.
    fn update(
        &self,
        computer: &ComputerId,
        bot: &BotId,
        op: impl FnOnce(&LeaseState) -> Result<LeaseState, LeaseError>,
    ) -> Result<LeaseState, LeaseError> {
        // A panic elsewhere cannot leave a half-written state: each update is one assignment.
        let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (computer.clone(), bot.clone());
        let current = leases.get(&key).cloned().unwrap_or_default();
        let next = op(&current)?;
        leases.insert(key, next.clone());
        Ok(next)
    }
}

impl LeaseStore for MemLeaseStore {
    async fn acquire(
        &self,
        computer: &ComputerId,
        bot: &BotId,
        owner: &str,
        ttl: Duration,
        now_ms: i64,
    ) -> Result<Lease, LeaseError> {
        validate_owner(owner)?;
        let next = self.update(computer, bot, |state| {
            rules::acquire(state, owner, ttl, now_ms).map_err(|r| held(computer, bot, r))
        })?;
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
        let next = self.update(computer, bot, |state| {
            rules::renew(state, token, ttl, now_ms).map_err(|m| mismatch(computer, bot, token, m))
        })?;
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
        self.update(computer, bot, |state| {
            released = Released::of(state);
            rules::release(state, token, now_ms).map_err(|m| mismatch(computer, bot, token, m))
        })?;
        Ok(released)
    }

    async fn get(
        &self,
        computer: &ComputerId,
        bot: &BotId,
        now_ms: i64,
    ) -> Result<Option<Lease>, LeaseError> {
        let leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(leases
            .get(&(computer.clone(), bot.clone()))
            .and_then(|state| live(computer, bot, state, now_ms)))
    }
}

#[cfg(test)]
mod tests;
