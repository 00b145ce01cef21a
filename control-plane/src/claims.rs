//! Exclusive work across control-plane replicas: fenced claims with an expiry, in the database
//! (migration 0008 `claims`), never in process memory.
//!
//! A claim is one row per `(kind, subject)`: idle suspension of a computer, the checkpoint or
//! restore of a home, the reconciler, a computer's lifecycle action (stop, start, destroy, a
//! new takeover) against a maintenance job's creation (`crate::jobs::Jobs::act`). Taking it is one statement (insert, or take over a row
//! whose holder let it expire), so two replicas can never both hold it; every take increments
//! the row's `fence`, and renewing or releasing needs holder and fence, so a replica whose claim
//! expired (it stalled, or lost the database) can neither extend nor drop its successor's.
//! A [`Held`] claim renews itself every third of its time to live and is released when dropped;
//! a replica killed while holding one leaves a row that expires, and the next taker proceeds.
//!
//! SQL follows the portability rules of [`crate::db`] (`ON CONFLICT ... DO UPDATE ... WHERE`
//! and `RETURNING` work on SQLite and PostgreSQL alike).

use crate::clock::now_ms;
use crate::db::{column, Db, DbError};
use std::time::Duration;
use tracing::warn;

/// Who holds claims in this process, and for how long each lives unrenewed.
#[derive(Clone, Debug)]
pub struct Claims {
    db: Db,
    holder: String,
    ttl: Duration,
}

/// One taken claim: what it is and the fence it was taken with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimId {
    pub kind: &'static str,
    pub subject: String,
    pub fence: i64,
}

/// The default time a claim lives without renewal.
pub const DEFAULT_CLAIM_TTL: Duration = Duration::from_secs(30);
/// How often [`Claims::wait`] looks again at a claim someone else holds.
const WAIT_POLL: Duration = Duration::from_millis(200);

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Claims {
    /// Claims taken by `holder` (this replica's id), each living `ttl` unrenewed.
    pub fn new(db: Db, holder: impl Into<String>, ttl: Duration) -> Self {
        Self {
            db,
            holder: holder.into(),
            ttl,
        }
    }

    /// Who takes claims here.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Takes `(kind, subject)` unless a holder's claim is live at `now_ms` (ours included: a
    /// claim is one piece of work, not a replica's right).
    pub async fn try_take(
        &self,
        kind: &'static str,
        subject: &str,
        now_ms: i64,
    ) -> Result<Option<ClaimId>, DbError> {
        let row = sqlx::query(
            "INSERT INTO claims (kind, subject, holder, fence, expires_at) VALUES ($1, $2, $3, 1, $4) \
             ON CONFLICT (kind, subject) DO UPDATE SET holder = $3, fence = claims.fence + 1, \
             expires_at = $4 WHERE claims.expires_at <= $5 RETURNING fence",
        )
        .bind(kind)
        .bind(subject)
        .bind(&self.holder)
        .bind(now_ms.saturating_add(ms(self.ttl)))
        .bind(now_ms)
        .fetch_optional(self.db.pool())
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let fence: i64 = column(&row, "claims", subject, "fence")?;
        Ok(Some(ClaimId {
            kind,
            subject: subject.to_owned(),
            fence,
        }))
    }

    /// Extends our claim `id` from `now_ms`; false when it is no longer ours (it expired and
    /// was taken, or was released).
    pub async fn renew(&self, id: &ClaimId, now_ms: i64) -> Result<bool, DbError> {
        let done = sqlx::query(
            "UPDATE claims SET expires_at = $5 WHERE kind = $1 AND subject = $2 AND holder = $3 \
             AND fence = $4",
        )
        .bind(id.kind)
        .bind(&id.subject)
        .bind(&self.holder)
        .bind(id.fence)
        .bind(now_ms.saturating_add(ms(self.ttl)))
        .execute(self.db.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Drops our claim `id` (nothing if it is no longer ours). The row stays, expired, so the
    /// next take's fence is still higher than every earlier one.
    pub async fn release(&self, id: &ClaimId) -> Result<(), DbError> {
        sqlx::query(
            "UPDATE claims SET expires_at = 0 WHERE kind = $1 AND subject = $2 AND holder = $3 \
             AND fence = $4",
        )
        .bind(id.kind)
        .bind(&id.subject)
        .bind(&self.holder)
        .bind(id.fence)
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// Who holds `(kind, subject)` at `now_ms`, if anyone.
    pub async fn holder_of(
        &self,
        kind: &str,
        subject: &str,
        now_ms: i64,
    ) -> Result<Option<String>, DbError> {
        let row = sqlx::query(
            "SELECT holder FROM claims WHERE kind = $1 AND subject = $2 AND expires_at > $3",
        )
        .bind(kind)
        .bind(subject)
        .bind(now_ms)
        .fetch_optional(self.db.pool())
        .await?;
        row.map(|r| column(&r, "claims", subject, "holder"))
            .transpose()
    }

    /// Takes the claim and keeps it renewed until the returned [`Held`] drops; `None` when it
    /// is held by someone else.
    pub async fn hold(&self, kind: &'static str, subject: &str) -> Result<Option<Held>, DbError> {
        Ok(self
            .try_take(kind, subject, now_ms())
            .await?
            .map(|id| Held::start(self.clone(), id)))
    }

    /// Takes the claim, waiting while someone else holds it (its holder releases it, or it
    /// expires: a dead holder keeps nobody waiting past its time to live).
    pub async fn wait(&self, kind: &'static str, subject: &str) -> Result<Held, DbError> {
        loop {
            if let Some(held) = self.hold(kind, subject).await? {
                return Ok(held);
            }
            tokio::time::sleep(WAIT_POLL).await;
        }
    }

    /// [`Claims::wait`] for at most `patience`; `None` when it was held all that time.
    pub async fn wait_for(
        &self,
        kind: &'static str,
        subject: &str,
        patience: Duration,
    ) -> Result<Option<Held>, DbError> {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            if let Some(held) = self.hold(kind, subject).await? {
                return Ok(Some(held));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(WAIT_POLL).await;
        }
    }
}

/// A claim this process holds: renewed every third of its time to live, released on drop.
pub struct Held {
    claims: Claims,
    id: ClaimId,
    renewer: tokio::task::JoinHandle<()>,
    /// Released already by [`Held::release`]: the drop has nothing left to do.
    released: bool,
}

impl Held {
    fn start(claims: Claims, id: ClaimId) -> Self {
        let renewer = {
            let (claims, id) = (claims.clone(), id.clone());
            tokio::spawn(async move {
                let every = (claims.ttl / 3).max(Duration::from_millis(100));
                loop {
                    tokio::time::sleep(every).await;
                    match claims.renew(&id, now_ms()).await {
                        Ok(true) => {}
                        Ok(false) => {
                            warn!(kind = id.kind, subject = %id.subject, "claim lost: it expired and another replica took it");
                            return;
                        }
                        Err(e) => {
                            warn!(kind = id.kind, subject = %id.subject, error = %e, "claim renewal failed; retrying");
                        }
                    }
                }
            })
        };
        Self {
            claims,
            id,
            renewer,
            released: false,
        }
    }

    /// What is held.
    pub fn id(&self) -> &ClaimId {
        &self.id
    }

    /// Releases the claim now, before returning: the next taker (another request right after
    /// this one) finds it free, where a drop releases it in the background a moment later.
    pub async fn release(mut self) {
        self.renewer.abort();
        self.released = true;
        if let Err(e) = self.claims.release(&self.id).await {
            warn!(kind = self.id.kind, subject = %self.id.subject, error = %e, "releasing a claim failed; it expires by itself");
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.renewer.abort();
        if self.released {
            return;
        }
        let (claims, id) = (self.claims.clone(), self.id.clone());
        // Released in the background: a runtime shutting down leaves the row to expire.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = claims.release(&id).await {
                    warn!(kind = id.kind, subject = %id.subject, error = %e, "releasing a claim failed; it expires by itself");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing;

    async fn each_backend(f: impl AsyncFn(Db)) {
        f(testing::sqlite().await.unwrap()).await;
        f(testing::postgres(testing::DEFAULT_PG_URL).await.unwrap()).await;
    }

    #[tokio::test]
    async fn one_holder_at_a_time_until_release_or_expiry() {
        each_backend(async |db| {
            let a = Claims::new(db.clone(), "r-a", Duration::from_millis(1000));
            let b = Claims::new(db, "r-b", Duration::from_millis(1000));
            let first = a.try_take("idle", "c-1", 10_000).await.unwrap().unwrap();
            assert_eq!(first.fence, 1);
            // Live: nobody takes it, not even its own holder a second time.
            assert_eq!(b.try_take("idle", "c-1", 10_500).await.unwrap(), None);
            assert_eq!(a.try_take("idle", "c-1", 10_500).await.unwrap(), None);
            assert_eq!(
                b.holder_of("idle", "c-1", 10_500).await.unwrap().as_deref(),
                Some("r-a")
            );
            // Another subject or kind is another claim.
            assert!(b.try_take("idle", "c-2", 10_500).await.unwrap().is_some());
            assert!(b.try_take("home", "c-1", 10_500).await.unwrap().is_some());
            // Renewed, it lives on; expired, the next taker gets a higher fence.
            assert!(a.renew(&first, 10_900).await.unwrap());
            assert_eq!(b.try_take("idle", "c-1", 11_500).await.unwrap(), None);
            let second = b.try_take("idle", "c-1", 11_900).await.unwrap().unwrap();
            assert_eq!(second.fence, 2);
            // The old holder can neither renew nor release its successor's claim.
            assert!(!a.renew(&first, 12_000).await.unwrap());
            a.release(&first).await.unwrap();
            assert_eq!(
                a.holder_of("idle", "c-1", 12_000).await.unwrap().as_deref(),
                Some("r-b")
            );
            b.release(&second).await.unwrap();
            assert_eq!(a.holder_of("idle", "c-1", 12_000).await.unwrap(), None);
            assert_eq!(
                a.try_take("idle", "c-1", 12_000)
                    .await
                    .unwrap()
                    .unwrap()
                    .fence,
                3
            );
        })
        .await;
    }

    #[tokio::test]
    async fn a_held_claim_outlives_its_ttl_and_a_waiter_gets_it_on_drop() {
        each_backend(async |db| {
            let a = Claims::new(db.clone(), "r-a", Duration::from_millis(300));
            let b = Claims::new(db, "r-b", Duration::from_millis(300));
            let held = a.hold("home", "c-1").await.unwrap().unwrap();
            tokio::time::sleep(Duration::from_millis(700)).await;
            // Renewed in the background: still a's.
            assert!(b.hold("home", "c-1").await.unwrap().is_none());
            let waiter = tokio::spawn(async move { b.wait("home", "c-1").await.unwrap() });
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(!waiter.is_finished());
            drop(held);
            let got = tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(got.id().fence, 2);
        })
        .await;
    }
}
