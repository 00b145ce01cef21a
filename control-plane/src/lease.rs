//! Execution leases per (computer, bot), fenced (contracts.md §1 and §8).
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
use crate::db::{column, non_negative, Db, DbError};
use gateway_proto::{BotId, LeaseParseError, LeaseToken};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// How long an execution lease lives without renewal (contracts.md §8: 5 minutes).
pub const EXEC_LEASE_TTL: Duration = Duration::from_secs(5 * 60);
/// How often a run renews its execution lease (contracts.md §8).
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

/// The lease rules: pure, `now` in, next state out.
pub mod rules {
    use super::{LeaseState, LeaseToken};
    use std::time::Duration;

    /// Why an acquire was refused; the store names the computer and bot.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum Refusal {
        /// Another owner holds a live lease.
        Held { owner: String, expires_at_ms: i64 },
        /// The next fence would not fit a BIGINT.
        FenceExhausted,
    }

    /// A renew or release presented a token that is not allowed to act on the lease.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Mismatch {
        /// The live holder, if any.
        pub holder: Option<LeaseToken>,
    }

    /// The live holder at `now`: an owner whose claim has not lapsed (`now < expires_at`).
    pub fn holder(state: &LeaseState, now_ms: i64) -> Option<LeaseToken> {
        match &state.owner {
            Some(owner) if now_ms < state.expires_at_ms => {
                LeaseToken::new(owner.as_str(), state.fence).ok()
            }
            _ => None,
        }
    }

    fn expiry(now_ms: i64, ttl: Duration) -> i64 {
        now_ms.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
    }

    /// Grants the lease to `owner` when nobody holds it, the holder's claim lapsed, or `owner`
    /// is the holder already; the fence goes up by one either way.
    pub fn acquire(
        state: &LeaseState,
        owner: &str,
        ttl: Duration,
        now_ms: i64,
    ) -> Result<LeaseState, Refusal> {
        if let Some(holder) = holder(state, now_ms) {
            if holder.owner() != owner {
                return Err(Refusal::Held {
                    owner: holder.owner().to_owned(),
                    expires_at_ms: state.expires_at_ms,
                });
            }
        }
        // Fences are stored as BIGINT.
        let fence = state
            .fence
            .checked_add(1)
            .filter(|f| i64::try_from(*f).is_ok())
            .ok_or(Refusal::FenceExhausted)?;
        Ok(LeaseState {
            owner: Some(owner.to_owned()),
            fence,
            expires_at_ms: expiry(now_ms, ttl),
        })
    }

    /// Extends the live holder's claim to `now + ttl`. Any other token (another owner, an older
    /// fence, or a claim that already lapsed) mismatches.
    pub fn renew(
        state: &LeaseState,
        token: &LeaseToken,
        ttl: Duration,
        now_ms: i64,
    ) -> Result<LeaseState, Mismatch> {
        let holder = holder(state, now_ms);
        if holder.as_ref() != Some(token) {
            return Err(Mismatch { holder });
        }
        Ok(LeaseState {
            expires_at_ms: expiry(now_ms, ttl),
            ..state.clone()
        })
    }

    /// Releases the claim of `token`'s owner if its fence is at least the holder's, lapsed or
    /// not, keeping the fence. Releasing again with the token of the latest grant changes
    /// nothing and succeeds. A fence-0 token (a viewer's, `screen-view-<bot>:0`) can never
    /// release anything, since every grant has a fence of at least 1.
    pub fn release(
        state: &LeaseState,
        token: &LeaseToken,
        now_ms: i64,
    ) -> Result<LeaseState, Mismatch> {
        let allowed = match &state.owner {
            Some(owner) => owner == token.owner() && token.fence() >= state.fence,
            None => state.fence > 0 && token.fence() == state.fence,
        };
        if !allowed {
            return Err(Mismatch {
                holder: holder(state, now_ms),
            });
        }
        Ok(LeaseState {
            owner: None,
            fence: state.fence,
            expires_at_ms: 0,
        })
    }
}

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

/// The behaviour every [`LeaseStore`] must show, one function per case. Run them all with
/// [`lease_conformance!`](crate::lease_conformance). Cases panic on failure, like tests do.
pub mod conformance {
    use super::*;
    use std::sync::Arc;

    const T0: i64 = 1_700_000_000_000;
    const TTL: Duration = EXEC_LEASE_TTL;
    const TTL_MS: i64 = 5 * 60 * 1000;

    fn computer() -> ComputerId {
        ComputerId::new("c-conformance").expect("valid computer id")
    }

    fn bot() -> BotId {
        BotId::new("bot-1").expect("valid bot id")
    }

    fn token(owner: &str, fence: u64) -> LeaseToken {
        LeaseToken::new(owner, fence).expect("valid token")
    }

    async fn fence_now<S: LeaseStore>(store: &S, now_ms: i64) -> Option<u64> {
        get(store, now_ms).await.map(|l| l.token.fence())
    }

    /// The suite's lease at `now_ms`.
    async fn get<S: LeaseStore>(store: &S, now_ms: i64) -> Option<Lease> {
        store.get(&computer(), &bot(), now_ms).await.expect("get")
    }

    /// `owner` takes the suite's lease at `now_ms`, which must be granted.
    async fn acquire<S: LeaseStore>(store: &S, owner: &str, now_ms: i64) -> Lease {
        let granted = store.acquire(&computer(), &bot(), owner, TTL, now_ms).await;
        granted.unwrap_or_else(|e| panic!("{owner} acquires at {now_ms}: {e:?}"))
    }

    /// `token` gives the suite's lease back at `now_ms`, which must succeed.
    async fn release<S: LeaseStore>(store: &S, token: &LeaseToken, now_ms: i64) {
        let released = store.release(&computer(), &bot(), token, now_ms).await;
        released.unwrap_or_else(|e| panic!("{token} releases at {now_ms}: {e:?}"));
    }

    pub async fn acquire_free<S: LeaseStore>(store: Arc<S>) {
        assert_eq!(get(&*store, T0).await, None);
        let lease = acquire(&*store, "run-a", T0).await;
        assert_eq!(lease.computer, computer());
        assert_eq!(lease.bot, bot());
        assert_eq!(lease.token, token("run-a", 1));
        assert_eq!(lease.expires_at_ms, T0 + TTL_MS);
        assert_eq!(get(&*store, T0 + 1).await, Some(lease));
    }

    pub async fn fence_increments_across_acquires<S: LeaseStore>(store: Arc<S>) {
        let a = acquire(&*store, "run-a", T0).await;
        assert_eq!(a.token.fence(), 1);
        release(&*store, &a.token, T0 + 1).await;
        let b2 = acquire(&*store, "run-b", T0 + 2).await;
        assert_eq!(
            b2.token.fence(),
            2,
            "release keeps the fence; acquire bumps it"
        );
        // b's claim lapses and c takes over.
        let t = T0 + 2 + TTL_MS;
        let c3 = acquire(&*store, "run-c", t).await;
        assert_eq!(c3.token.fence(), 3);
        release(&*store, &c3.token, t + 1).await;
        let a4 = acquire(&*store, "run-a", t + 2).await;
        assert_eq!(a4.token, token("run-a", 4));
    }

    pub async fn same_owner_reacquire_bumps_fence<S: LeaseStore>(store: Arc<S>) {
        let (c, b) = (computer(), bot());
        let first = acquire(&*store, "run-a", T0).await;
        let second = acquire(&*store, "run-a", T0 + 10).await;
        assert_eq!(second.token, token("run-a", first.token.fence() + 1));
        assert_eq!(second.expires_at_ms, T0 + 10 + TTL_MS);
        // The earlier grant is now stale.
        let err = store
            .renew(&c, &b, &first.token, TTL, T0 + 20)
            .await
            .unwrap_err();
        assert!(matches!(err, LeaseError::Mismatch { .. }), "{err:?}");
    }

    pub async fn held_by_other_is_refused<S: LeaseStore>(store: Arc<S>) {
        let (c, b) = (computer(), bot());
        let a = acquire(&*store, "run-a", T0).await;
        // Still live one millisecond before expiry.
        let err = store
            .acquire(&c, &b, "run-b", TTL, a.expires_at_ms - 1)
            .await
            .unwrap_err();
        match err {
            LeaseError::Held {
                computer,
                bot,
                owner,
                expires_at,
            } => {
                assert_eq!((computer, bot), (c.clone(), b.clone()));
                assert_eq!(owner, "run-a");
                assert_eq!(expires_at, a.expires_at_ms);
            }
            other => panic!("expected Held, got {other:?}"),
        }
        // The refusal changed nothing.
        assert_eq!(get(&*store, T0 + 1).await, Some(a));
    }

    pub async fn expired_lease_is_taken_with_higher_fence<S: LeaseStore>(store: Arc<S>) {
        let (c, b) = (computer(), bot());
        let a = acquire(&*store, "run-a", T0).await;
        // Expiry is exclusive: at expires_at the claim has lapsed.
        assert_eq!(fence_now(&*store, a.expires_at_ms).await, None);
        let taken = acquire(&*store, "run-b", a.expires_at_ms).await;
        assert_eq!(taken.token, token("run-b", a.token.fence() + 1));
        let err = store
            .renew(&c, &b, &a.token, TTL, a.expires_at_ms + 1)
            .await
            .unwrap_err();
        match err {
            LeaseError::Mismatch {
                presented, holder, ..
            } => {
                assert_eq!(presented, a.token);
                assert_eq!(holder, Some(taken.token));
            }
            other => panic!("expected Mismatch, got {other:?}"),
        }
    }

    pub async fn renew_by_holder_extends<S: LeaseStore>(store: Arc<S>) {
        let (c, b) = (computer(), bot());
        let a = acquire(&*store, "run-a", T0).await;
        let renewed = store
            .renew(&c, &b, &a.token, TTL, T0 + 60_000)
            .await
            .expect("the holder renews");
        assert_eq!(renewed.token, a.token, "renewal keeps the fence");
        assert_eq!(renewed.expires_at_ms, T0 + 60_000 + TTL_MS);
        // Live past the original expiry.
        assert_eq!(fence_now(&*store, a.expires_at_ms + 1).await, Some(1));
    }

    pub async fn renew_with_wrong_owner_is_refused<S: LeaseStore>(store: Arc<S>) {
        let (c, b) = (computer(), bot());
        let a = acquire(&*store, "run-a", T0).await;
        let forged = token("run-b", a.token.fence());
        let err = store.renew(&c, &b, &forged, TTL, T0 + 1).await.unwrap_err();
        match err {
            LeaseError::Mismatch {
                computer,
                bot,
                presented,
                holder,
            } => {
                assert_eq!((computer, bot), (c.clone(), b.clone()));
                assert_eq!(presented, forged);
                assert_eq!(holder, Some(a.token.clone()));
            }
            other => panic!("expected Mismatch, got {other:?}"),
        }
        assert_eq!(get(&*store, T0 + 2).await, Some(a));
    }

    pub async fn renew_with_old_fence_is_refused<S: LeaseStore>(store: Arc<S>) {
        let (c, b) = (computer(), bot());
        let a1 = acquire(&*store, "run-a", T0).await;
        release(&*store, &a1.token, T0 + 1).await;
        let a2 = acquire(&*store, "run-a", T0 + 2).await;
        let err = store
            .renew(&c, &b, &a1.token, TTL, T0 + 3)
            .await
            .unwrap_err();
        assert!(matches!(err, LeaseError::Mismatch { .. }), "{err:?}");
        // A fence from the future is no better.
        let ahead = token("run-a", a2.token.fence() + 1);
        let err = store.renew(&c, &b, &ahead, TTL, T0 + 3).await.unwrap_err();
        assert!(matches!(err, LeaseError::Mismatch { .. }), "{err:?}");
    }

    pub async fn renew_after_expiry_is_refused<S: LeaseStore>(store: Arc<S>) {
        let (c, b) = (computer(), bot());
        let a = acquire(&*store, "run-a", T0).await;
        let err = store
            .renew(&c, &b, &a.token, TTL, a.expires_at_ms)
            .await
            .unwrap_err();
        match err {
            LeaseError::Mismatch { holder, .. } => assert_eq!(holder, None),
            other => panic!("expected Mismatch, got {other:?}"),
        }
    }

    pub async fn renew_of_never_acquired_is_refused<S: LeaseStore>(store: Arc<S>) {
        let err = store
            .renew(&computer(), &bot(), &token("run-a", 1), TTL, T0)
            .await
            .unwrap_err();
        assert!(
            matches!(err, LeaseError::Mismatch { holder: None, .. }),
            "{err:?}"
        );
    }

    pub async fn release_by_owner_frees<S: LeaseStore>(store: Arc<S>) {
        let a = acquire(&*store, "run-a", T0).await;
        release(&*store, &a.token, T0 + 1).await;
        assert_eq!(get(&*store, T0 + 2).await, None);
        let next = acquire(&*store, "run-b", T0 + 3).await;
        assert_eq!(next.token.fence(), 2);
    }

    pub async fn release_of_lapsed_claim_by_owner_frees<S: LeaseStore>(store: Arc<S>) {
        let a = acquire(&*store, "run-a", T0).await;
        // The owner may release a lapsed claim nobody took.
        release(&*store, &a.token, a.expires_at_ms + 10).await;
    }

    pub async fn release_by_other_owner_is_refused<S: LeaseStore>(store: Arc<S>) {
        let (c, b) = (computer(), bot());
        let a = acquire(&*store, "run-a", T0).await;
        for fence in [0, a.token.fence(), a.token.fence() + 5] {
            let other = token("run-b", fence);
            let err = store.release(&c, &b, &other, T0 + 1).await.unwrap_err();
            assert!(
                matches!(err, LeaseError::Mismatch { .. }),
                "{other}: {err:?}"
            );
        }
        assert_eq!(get(&*store, T0 + 2).await, Some(a));
    }

    pub async fn release_with_lower_fence_is_refused<S: LeaseStore>(store: Arc<S>) {
        let (c, b) = (computer(), bot());
        let a1 = acquire(&*store, "run-a", T0).await;
        let a2 = acquire(&*store, "run-a", T0 + 1).await;
        let err = store.release(&c, &b, &a1.token, T0 + 2).await.unwrap_err();
        match err {
            LeaseError::Mismatch { holder, .. } => assert_eq!(holder, Some(a2.token.clone())),
            other => panic!("expected Mismatch, got {other:?}"),
        }
        assert_eq!(get(&*store, T0 + 3).await, Some(a2.clone()));
        // A fence at or above the holder's, same owner, releases.
        let higher = token("run-a", a2.token.fence() + 1);
        release(&*store, &higher, T0 + 4).await;
        assert_eq!(get(&*store, T0 + 5).await, None);
    }

    pub async fn viewer_token_cannot_release<S: LeaseStore>(store: Arc<S>) {
        let (c, b) = (computer(), bot());
        let viewer = token(&format!("screen-view-{b}"), 0);
        // Not a run's live claim, not a lapsed one, not a released one, not even nothing.
        let err = store.release(&c, &b, &viewer, T0).await.unwrap_err();
        assert!(matches!(err, LeaseError::Mismatch { .. }), "{err:?}");
        let a = acquire(&*store, "run-a", T0).await;
        let err = store.release(&c, &b, &viewer, T0 + 1).await.unwrap_err();
        assert!(matches!(err, LeaseError::Mismatch { .. }), "{err:?}");
        let err = store
            .release(&c, &b, &viewer, a.expires_at_ms + 1)
            .await
            .unwrap_err();
        assert!(matches!(err, LeaseError::Mismatch { .. }), "{err:?}");
        assert_eq!(get(&*store, T0 + 2).await, Some(a.clone()));
        release(&*store, &a.token, T0 + 3).await;
        let err = store.release(&c, &b, &viewer, T0 + 4).await.unwrap_err();
        assert!(matches!(err, LeaseError::Mismatch { .. }), "{err:?}");
    }

    pub async fn release_is_idempotent<S: LeaseStore>(store: Arc<S>) {
        let (c, b) = (computer(), bot());
        let a = acquire(&*store, "run-a", T0).await;
        let first = store.release(&c, &b, &a.token, T0 + 1).await;
        assert_eq!(first.expect("first release"), Released::Now);
        // A repeat succeeds and says it changed nothing (the caller does not checkpoint again).
        let again = store.release(&c, &b, &a.token, T0 + 2).await;
        assert_eq!(again.expect("repeated release"), Released::Already);
        assert_eq!(get(&*store, T0 + 3).await, None);
        // Once someone else holds it again, the old token releases nothing.
        let b2 = acquire(&*store, "run-b", T0 + 4).await;
        let err = store.release(&c, &b, &a.token, T0 + 5).await.unwrap_err();
        assert!(matches!(err, LeaseError::Mismatch { .. }), "{err:?}");
        assert_eq!(get(&*store, T0 + 6).await, Some(b2));
    }

    pub async fn leases_are_per_computer_and_bot<S: LeaseStore>(store: Arc<S>) {
        let (c, b) = (computer(), bot());
        let c2 = ComputerId::new("c-other").expect("valid computer id");
        let b2 = BotId::new("bot-2").expect("valid bot id");
        let a = acquire(&*store, "run-a", T0).await;
        let x = store
            .acquire(&c, &b2, "run-x", TTL, T0)
            .await
            .expect("other bot");
        let y = store
            .acquire(&c2, &b, "run-y", TTL, T0)
            .await
            .expect("other computer");
        assert_eq!(
            [a.token.fence(), x.token.fence(), y.token.fence()],
            [1, 1, 1]
        );
        store
            .release(&c, &b2, &x.token, T0 + 1)
            .await
            .expect("release x");
        assert_eq!(get(&*store, T0 + 2).await, Some(a));
        assert_eq!(store.get(&c2, &b, T0 + 2).await.expect("get"), Some(y));
    }

    pub async fn bad_owner_is_rejected<S: LeaseStore>(store: Arc<S>) {
        for bad in ["", "run a", "run/a"] {
            let err = store
                .acquire(&computer(), &bot(), bad, TTL, T0)
                .await
                .unwrap_err();
            assert!(
                matches!(err, LeaseError::BadOwner { .. }),
                "{bad:?}: {err:?}"
            );
        }
        assert_eq!(get(&*store, T0).await, None);
    }

    /// How many owners race in the `concurrent_*` cases.
    pub const RACERS: usize = 16;

    /// Starts [`RACERS`] acquirers with different owners at once, at `now_ms`, and checks that
    /// exactly one wins with fence `fence` while every other one is told who holds it.
    async fn race<S: LeaseStore + 'static>(store: &Arc<S>, now_ms: i64, fence: u64) -> Lease {
        let barrier = Arc::new(tokio::sync::Barrier::new(RACERS));
        let racers: Vec<_> = (0..RACERS)
            .map(|i| {
                let (store, barrier) = (store.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    let owner = format!("racer-{i}");
                    let result = store
                        .acquire(&computer(), &bot(), &owner, TTL, now_ms)
                        .await;
                    (owner, result)
                })
            })
            .collect();
        let mut winners = Vec::new();
        let mut losers = Vec::new();
        for racer in racers {
            match racer.await.expect("racer task") {
                (owner, Ok(lease)) => winners.push((owner, lease)),
                (_, Err(LeaseError::Held { owner, .. })) => losers.push(owner),
                (owner, Err(e)) => panic!("{owner} failed: {e:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "exactly one winner: {winners:?}");
        let (owner, lease) = &winners[0];
        assert_eq!(lease.token, token(owner, fence));
        assert_eq!(losers.len(), RACERS - 1);
        assert!(losers.iter().all(|held_by| held_by == owner), "{losers:?}");
        assert_eq!(fence_now(&**store, now_ms + 1).await, Some(fence));
        lease.clone()
    }

    /// Rounds per `concurrent_*` case on an existing row: a lost update only shows when the
    /// racers interleave just so, so give it several chances.
    const ROUNDS: u64 = 5;

    /// The race for a pair never leased before (no row yet).
    pub async fn concurrent_acquire_has_one_winner<S: LeaseStore + 'static>(store: Arc<S>) {
        race(&store, T0, 1).await;
    }

    /// The race for a released lease (the row exists and is free).
    pub async fn concurrent_acquire_of_released_has_one_winner<S: LeaseStore + 'static>(
        store: Arc<S>,
    ) {
        let mut held = acquire(&*store, "run-a", T0).await;
        for round in 1..=ROUNDS {
            let now = T0 + 10 * round as i64;
            release(&*store, &held.token, now).await;
            held = race(&store, now + 1, round + 1).await;
        }
    }

    /// The race for a lapsed lease (the row exists and names a holder whose claim lapsed).
    pub async fn concurrent_acquire_of_lapsed_has_one_winner<S: LeaseStore + 'static>(
        store: Arc<S>,
    ) {
        let mut held = acquire(&*store, "run-a", T0).await;
        for round in 1..=ROUNDS {
            held = race(&store, held.expires_at_ms, round + 1).await;
        }
    }
}

/// Emits the [`conformance`] suite as one `#[tokio::test]` per case, in a module `$name`.
/// `$store` is an expression evaluating to a future of the store (one fresh store per case);
/// it is expanded inside that module, so it may name items of the calling file.
///
/// ```text
/// control_plane::lease_conformance!(mem, async { MemLeaseStore::new() });
/// ```
#[macro_export]
macro_rules! lease_conformance {
    ($name:ident, $store:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            $crate::lease_conformance!(@cases $store;
                acquire_free,
                fence_increments_across_acquires,
                same_owner_reacquire_bumps_fence,
                held_by_other_is_refused,
                expired_lease_is_taken_with_higher_fence,
                renew_by_holder_extends,
                renew_with_wrong_owner_is_refused,
                renew_with_old_fence_is_refused,
                renew_after_expiry_is_refused,
                renew_of_never_acquired_is_refused,
                release_by_owner_frees,
                release_of_lapsed_claim_by_owner_frees,
                release_by_other_owner_is_refused,
                release_with_lower_fence_is_refused,
                viewer_token_cannot_release,
                release_is_idempotent,
                leases_are_per_computer_and_bot,
                bad_owner_is_rejected,
                concurrent_acquire_has_one_winner,
                concurrent_acquire_of_released_has_one_winner,
                concurrent_acquire_of_lapsed_has_one_winner,
            );
        }
    };
    (@cases $store:expr; $($case:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let store = ::std::sync::Arc::new($store.await);
                $crate::lease::conformance::$case(store).await;
            }
        )*
    };
}

#[cfg(test)]
mod tests {
    use super::rules::{self, Mismatch, Refusal};
    use super::*;

    const NOW: i64 = 1_000_000;
    const TTL_MS: i64 = 300_000;

    fn tok(owner: &str, fence: u64) -> LeaseToken {
        LeaseToken::new(owner, fence).unwrap()
    }

    fn held(owner: &str, fence: u64, expires_at_ms: i64) -> LeaseState {
        LeaseState {
            owner: Some(owner.into()),
            fence,
            expires_at_ms,
        }
    }

    fn released(fence: u64) -> LeaseState {
        LeaseState {
            owner: None,
            fence,
            expires_at_ms: 0,
        }
    }

    #[test]
    fn acquire_of_a_never_leased_pair_gets_fence_one() {
        let next = rules::acquire(&LeaseState::default(), "run", EXEC_LEASE_TTL, NOW).unwrap();
        assert_eq!(next, held("run", 1, NOW + TTL_MS));
    }

    #[test]
    fn acquire_of_a_released_lease_bumps_the_kept_fence() {
        let next = rules::acquire(&released(7), "run", EXEC_LEASE_TTL, NOW).unwrap();
        assert_eq!(next, held("run", 8, NOW + TTL_MS));
    }

    #[test]
    fn acquire_against_a_live_holder_is_refused() {
        let err = rules::acquire(&held("a", 3, NOW + 1), "b", EXEC_LEASE_TTL, NOW).unwrap_err();
        assert_eq!(
            err,
            Refusal::Held {
                owner: "a".into(),
                expires_at_ms: NOW + 1
            }
        );
    }

    #[test]
    fn acquire_at_expiry_takes_over() {
        let next = rules::acquire(&held("a", 3, NOW), "b", EXEC_LEASE_TTL, NOW).unwrap();
        assert_eq!(next, held("b", 4, NOW + TTL_MS));
    }

    #[test]
    fn acquire_by_the_holder_bumps_the_fence() {
        let next = rules::acquire(&held("a", 3, NOW + 5), "a", EXEC_LEASE_TTL, NOW).unwrap();
        assert_eq!(next, held("a", 4, NOW + TTL_MS));
    }

    #[test]
    fn acquire_refuses_a_fence_past_bigint() {
        let max = i64::MAX as u64;
        let err = rules::acquire(&released(max), "a", EXEC_LEASE_TTL, NOW).unwrap_err();
        assert_eq!(err, Refusal::FenceExhausted);
        assert!(rules::acquire(&released(max - 1), "a", EXEC_LEASE_TTL, NOW).is_ok());
    }

    #[test]
    fn expiry_saturates() {
        let next = rules::acquire(&LeaseState::default(), "a", Duration::MAX, NOW).unwrap();
        assert_eq!(next.expires_at_ms, i64::MAX);
    }

    #[test]
    fn renew_by_the_holder_extends_and_keeps_the_fence() {
        let state = held("a", 3, NOW + 10);
        let next = rules::renew(&state, &tok("a", 3), EXEC_LEASE_TTL, NOW).unwrap();
        assert_eq!(next, held("a", 3, NOW + TTL_MS));
    }

    #[test]
    fn renew_mismatches() {
        let state = held("a", 3, NOW + 10);
        let live = Mismatch {
            holder: Some(tok("a", 3)),
        };
        for bad in [tok("b", 3), tok("a", 2), tok("a", 4)] {
            assert_eq!(
                rules::renew(&state, &bad, EXEC_LEASE_TTL, NOW),
                Err(live.clone()),
                "{bad}"
            );
        }
        let none = Mismatch { holder: None };
        let at_expiry = rules::renew(&state, &tok("a", 3), EXEC_LEASE_TTL, NOW + 10);
        assert_eq!(
            at_expiry,
            Err(none.clone()),
            "a lapsed claim cannot be renewed"
        );
        let after_release = rules::renew(&released(3), &tok("a", 3), EXEC_LEASE_TTL, NOW);
        assert_eq!(after_release, Err(none.clone()));
        let never = rules::renew(&LeaseState::default(), &tok("a", 0), EXEC_LEASE_TTL, NOW);
        assert_eq!(never, Err(none));
    }

    #[test]
    fn release_by_the_owner_keeps_the_fence() {
        for state in [held("a", 3, NOW + 10), held("a", 3, NOW - 10)] {
            assert_eq!(rules::release(&state, &tok("a", 3), NOW), Ok(released(3)));
            assert_eq!(rules::release(&state, &tok("a", 9), NOW), Ok(released(3)));
        }
    }

    #[test]
    fn release_refusals() {
        let state = held("a", 3, NOW + 10);
        let live = Mismatch {
            holder: Some(tok("a", 3)),
        };
        for bad in [
            tok("a", 2),
            tok("b", 3),
            tok("b", 4),
            tok("screen-view-bot", 0),
        ] {
            assert_eq!(
                rules::release(&state, &bad, NOW),
                Err(live.clone()),
                "{bad}"
            );
        }
    }

    #[test]
    fn release_of_a_released_lease() {
        let none = Err(Mismatch { holder: None });
        assert_eq!(
            rules::release(&released(3), &tok("a", 3), NOW),
            Ok(released(3))
        );
        assert_eq!(rules::release(&released(3), &tok("a", 2), NOW), none);
        assert_eq!(rules::release(&released(3), &tok("a", 4), NOW), none);
        let default = LeaseState::default();
        assert_eq!(
            rules::release(&default, &tok("screen-view-bot", 0), NOW),
            none
        );
        assert_eq!(rules::release(&default, &tok("a", 1), NOW), none);
    }

    #[test]
    fn viewer_tokens_never_release() {
        let viewer = tok("screen-view-bot", 0);
        for state in [
            LeaseState::default(),
            held("run", 1, NOW + 10),
            held("run", 1, NOW - 10),
            released(1),
            // Even a lease somehow held by the viewer's own name: grants start at fence 1.
            held("screen-view-bot", 1, NOW + 10),
        ] {
            assert!(rules::release(&state, &viewer, NOW).is_err(), "{state:?}");
        }
    }

    #[test]
    fn holder_is_live_only_before_expiry() {
        let state = held("a", 2, NOW);
        assert_eq!(rules::holder(&state, NOW - 1), Some(tok("a", 2)));
        assert_eq!(rules::holder(&state, NOW), None);
        assert_eq!(rules::holder(&released(2), NOW - 1), None);
    }
}
