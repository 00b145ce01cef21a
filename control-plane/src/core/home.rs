//! The home triggers as the core runs them (docs/homes.md#checkpoints): checkpoint and restore
//! under the home's lock, refused before the stored home was restored, after the other bots' leases
//! (a checkpoint waits for them), under the authority of every bot's latest lease fence; the
//! run-completion and before-stop triggers. The bytes themselves move in `homes::flow`.
//!
//! Authority: both flows carry the lease fences the control plane knows for the computer, read
//! as the stream opens ([`Core::home_authority`], after any lease wait), so a guest that knows a
//! newer lease refuses with `stale_lease` before it quiesces or reads anything. The home's lock
//! is a guard, released when the flow returns, whatever it returns.

use super::{Core, CoreError};
use crate::computers::{Computer, ComputerState};
use crate::db::DbError;
use crate::homes::flow::{self, Checkpointed, Restored, RunCheckpoint, DEFAULT_LEASE_WAIT};
use crate::homes::{chain, HomeError, Progress};
use crate::schema::activity::{Cause, LifecycleKind};
use gateway_proto::home::{HomeAuthority, HomeAuthorityError, LeaseFence, MAX_HOME_AUTHORITY};
use gateway_proto::BotId;
use std::time::Duration;
use tracing::{info, warn};

/// How often a checkpoint re-checks other bots' leases while it waits.
const LEASE_POLL: Duration = Duration::from_millis(500);

impl Core {
    /// Checkpoints `c`'s home now: waits up to `lease_wait` while bots other than those in
    /// `except` hold execution leases, has the guest quiesce its browsers and export, and
    /// commits the stream.
    pub async fn checkpoint_home(
        &self,
        c: &Computer,
        except: &[BotId],
        lease_wait: Duration,
        cause: homes::cas::Cause,
        progress: &Progress,
    ) -> Result<Checkpointed, CoreError> {
        // Every trigger checkpoints through here: its bytes and duration are recorded once.
        let started = crate::clock::monotonic();
        let result = self
            .checkpoint_locked(c, except, lease_wait, cause, progress)
            .await;
        let took = crate::clock::monotonic().saturating_duration_since(started);
        self.metrics
            .checkpoint(result.as_ref().ok().map(|done| done.bytes), took);
        result
    }

    async fn checkpoint_locked(
        &self,
        c: &Computer,
        except: &[BotId],
        lease_wait: Duration,
        cause: homes::cas::Cause,
        progress: &Progress,
    ) -> Result<Checkpointed, CoreError> {
        Self::require_running(c)?;
        if let Some(pool) = c.kind.pool() {
            return Err(CoreError::PoolMember {
                id: c.id.to_string(),
                pool: pool.to_string(),
            });
        }
        let _busy = self.homes.lock(&c.id).await?;
        if self.restore_pending(c).await? {
            return Err(HomeError::PendingRestore(c.id.clone()).into());
        }
        self.wait_for_leases(c, except, lease_wait, progress)
            .await?;
        let key = self.homes.key_for(c).await?;
        let guest = self.wait_guest(c, false).await?;
        let authority = self.home_authority(c).await?;
        Ok(flow::checkpoint(&guest, &self.homes, &c.id, &key, authority, cause, progress).await?)
    }

    /// Restores the latest stored home of the running computer `c` into its guest; `None` when
    /// the store has none. Clears the computer's pending-restore mark on success (or when there
    /// is nothing to restore).
    pub async fn restore_home(
        &self,
        c: &Computer,
        progress: &Progress,
    ) -> Result<Option<Restored>, CoreError> {
        Self::require_running(c)?;
        let restored = self.restore_into(c, progress).await?;
        if let Some(r) = &restored {
            self.record_restore(c, r, Cause::User, "the stored home was restored by a user")
                .await;
        }
        Ok(restored)
    }

    /// Goes back to revision `n` of `c`'s home (docs/homes.md#revisions). A running computer's
    /// home is checkpointed first, so going back never loses work; then, under the home's lock,
    /// revision `n`'s content becomes the newest revision and a running computer imports it. A
    /// stopped computer gets it at its next start (`None`: nothing was imported).
    pub async fn restore_revision(
        &self,
        c: &Computer,
        n: u64,
        progress: &Progress,
    ) -> Result<Option<Restored>, CoreError> {
        let key = self.homes.key_for(c).await?;
        // Refuse an unknown revision before saving anything.
        let revs = self.homes.revisions(&key).await?;
        if !revs.iter().any(|r| r.revision == n) {
            return Err(HomeError::NoRevision(n).into());
        }
        let running = c.state == ComputerState::Running
            && self.guest_connected(c.id.as_str()).await
            && !self.restore_pending(c).await?;
        if running {
            let saved = self
                .checkpoint_home(
                    c,
                    &[],
                    DEFAULT_LEASE_WAIT,
                    homes::cas::Cause::Manual,
                    progress,
                )
                .await?;
            let reason = format!("saved before going back to revision {n}");
            self.record_checkpoint(c, &saved, Cause::User, &reason)
                .await;
        }
        let _busy = self.homes.lock(&c.id).await?;
        let made = self
            .homes
            .recommit(&key, n, homes::cas::Cause::Restore)
            .await?;
        let reason = format!(
            "revision {n} of the stored home was made current as revision {}",
            made.revision
        );
        if !running {
            self.activity
                .lifecycle_home(
                    c.id.as_str(),
                    LifecycleKind::Restored,
                    Cause::User,
                    &reason,
                    Some(made.revision),
                    None,
                )
                .await;
            return Ok(None);
        }
        let restored = self.restore_locked(c, progress).await?;
        if let Some(r) = &restored {
            self.record_restore(c, r, Cause::User, &reason).await;
        }
        Ok(restored)
    }

    /// Forks `src`: a new computer of `kind` whose home starts from revision `n` of `src`'s
    /// (default: its latest, after a checkpoint if `src` runs, so the fork has its present
    /// work), sharing its stored data (docs/homes.md#fork).
    pub async fn fork(
        &self,
        src: &Computer,
        n: Option<u64>,
        kind: crate::computers::ComputerKind,
        provider: Option<&str>,
        limits: providers::MachineLimits,
        placement: Option<String>,
    ) -> Result<Computer, CoreError> {
        if n.is_none()
            && src.state == ComputerState::Running
            && self.guest_connected(src.id.as_str()).await
            && !self.restore_pending(src).await?
        {
            let saved = self
                .checkpoint_home(
                    src,
                    &[],
                    DEFAULT_LEASE_WAIT,
                    homes::cas::Cause::Manual,
                    &Progress::new(),
                )
                .await?;
            self.record_checkpoint(src, &saved, Cause::User, "saved before a fork")
                .await;
        }
        self.create_from(kind, provider, limits, placement, Some((src, n)))
            .await
    }

    /// Starts the home of `c` (just created, not booted) from revision `n` of `src`'s home;
    /// answers the source revision it started from. Under both computers' home locks.
    pub(crate) async fn seed_fork(
        &self,
        c: &Computer,
        src: &Computer,
        n: Option<u64>,
    ) -> Result<u64, CoreError> {
        let no_home = || HomeError::NoHome(src.home_key.clone());
        let from = self.homes.existing_key(src).await?.ok_or_else(no_home)?;
        let _src_busy = self.homes.lock(&src.id).await?;
        let _busy = self.homes.lock(&c.id).await?;
        let to = self.homes.key_for(c).await?;
        let source = match n {
            Some(n) => n,
            None => self
                .homes
                .current_revision(&from)
                .await?
                .ok_or_else(no_home)?
                .get(),
        };
        // `n` as asked: a home with only a whole-archive checkpoint forks from its latest.
        self.homes.fork(&from, n, &to).await?.ok_or_else(no_home)?;
        self.activity
            .lifecycle_home(
                src.id.as_str(),
                LifecycleKind::Forked,
                Cause::User,
                &format!("forked into computer {} from revision {source}", c.id),
                Some(source),
                None,
            )
            .await;
        Ok(source)
    }

    /// Records a restore in the computer's activity feed.
    async fn record_restore(&self, c: &Computer, r: &Restored, cause: Cause, reason: &str) {
        self.activity
            .lifecycle_home(
                c.id.as_str(),
                LifecycleKind::Restored,
                cause,
                reason,
                Some(r.revision.get()),
                Some(r.bytes),
            )
            .await;
    }

    /// Records a checkpoint in the computer's activity feed.
    pub async fn record_checkpoint(
        &self,
        c: &Computer,
        done: &Checkpointed,
        cause: Cause,
        reason: &str,
    ) {
        self.activity
            .lifecycle_home(
                c.id.as_str(),
                LifecycleKind::Checkpointed,
                cause,
                reason,
                Some(done.revision.get()),
                Some(done.bytes),
            )
            .await;
    }

    /// Restores the stored home into `c`'s fresh machine (the computer still `provisioning`),
    /// records the restore in the feed with `cause` and `reason`, and records the computer
    /// `running`: the end of a boot of a fresh machine and of a job's replacement alike.
    pub(crate) async fn restore_and_record(
        &self,
        c: &Computer,
        cause: Cause,
        reason: &str,
    ) -> Result<Option<Restored>, CoreError> {
        let restored = self.restore_into(c, &Progress::new()).await?;
        if let Some(r) = &restored {
            self.record_restore(c, r, cause, reason).await;
        }
        self.computers
            .set_state(&c.id, ComputerState::Running, crate::clock::now_ms())
            .await?;
        Ok(restored)
    }

    /// [`Core::restore_home`] without the state check: `boot` restores a fresh machine while the
    /// computer is still `provisioning`, so nothing else reaches its empty home first.
    pub(crate) async fn restore_into(
        &self,
        c: &Computer,
        progress: &Progress,
    ) -> Result<Option<Restored>, CoreError> {
        let _busy = self.homes.lock(&c.id).await?;
        self.restore_locked(c, progress).await
    }

    /// [`Core::restore_into`] under the home's lock, which the caller holds.
    async fn restore_locked(
        &self,
        c: &Computer,
        progress: &Progress,
    ) -> Result<Option<Restored>, CoreError> {
        let key = self.homes.key_for(c).await?;
        let Some(first) = self.homes.open_latest(&key).await? else {
            self.set_restored(c).await?;
            return Ok(None);
        };
        let revision = first.revision;
        let (size, archive) = flow::sized(&self.homes, &key, &c.home_key, first, progress).await?;
        let guest = self.wait_guest(c, false).await?;
        let authority = self.home_authority(c).await?;
        let imported = flow::import(&guest, &key, size, archive, authority, progress).await?;
        self.set_restored(c).await?;
        info!(computer_id = %c.id, store = self.homes.kind(), revision = revision.get(),
            bytes = size, "home restored");
        Ok(Some(Restored {
            revision,
            bytes: size,
            content_bytes: imported.content_bytes,
            entries: imported.entries,
        }))
    }

    /// Clears `c`'s pending-restore mark: its machine has its stored home (or there is none).
    async fn set_restored(&self, c: &Computer) -> Result<(), CoreError> {
        self.homes
            .ledger()
            .set_pending_restore(&c.id, false)
            .await
            .map_err(HomeError::from)?;
        Ok(())
    }

    /// The run-completion trigger (docs/homes.md#checkpoints): after `bot`'s lease is released,
    /// save the home unless another bot still holds a lease (the last run to finish saves it).
    pub(crate) async fn checkpoint_after_run(&self, c: &Computer, bot: &BotId) -> RunCheckpoint {
        if c.state != ComputerState::Running || !self.guest_connected(c.id.as_str()).await {
            return RunCheckpoint::Skipped("the guest is not connected");
        }
        match self.homes.ledger().pending_restore(&c.id).await {
            Ok(false) => {}
            Ok(true) => return RunCheckpoint::Skipped("the stored home was not restored yet"),
            Err(e) => return RunCheckpoint::Failed(chain(&e)),
        }
        match self
            .homes
            .ledger()
            .live_lease_holders(&c.id, &[bot.as_str()], crate::clock::now_ms())
            .await
        {
            Ok(bots) if !bots.is_empty() => return RunCheckpoint::Deferred(bots),
            Ok(_) => {}
            Err(e) => return RunCheckpoint::Failed(chain(&e)),
        }
        match self
            .checkpoint_home(
                c,
                std::slice::from_ref(bot),
                Duration::ZERO,
                homes::cas::Cause::RunEnd,
                &Progress::new(),
            )
            .await
        {
            Ok(done) => {
                let reason = format!("the run of bot {bot} ended (the last one out saves)");
                self.record_checkpoint(c, &done, Cause::RunEnded, &reason)
                    .await;
                RunCheckpoint::Saved(done)
            }
            Err(e) => RunCheckpoint::Failed(chain(&e)),
        }
    }

    /// The before-stop trigger (docs/homes.md#checkpoints). An error refuses the stop, so the
    /// machine keeps running with its home and the previous checkpoint stays current. Without a
    /// connected guest (or before the stored home was restored) there is nothing newer to save: the
    /// stop proceeds.
    pub(crate) async fn checkpoint_before_stop(&self, c: &Computer) -> Result<(), CoreError> {
        if c.state != ComputerState::Running || !self.guest_connected(c.id.as_str()).await {
            info!(computer_id = %c.id, "stopping without a checkpoint: the guest is not connected");
            return Ok(());
        }
        if c.kind.pool().is_some() {
            // A pool member's home is nobody's yet: nothing to save.
            return Ok(());
        }
        if self.restore_pending(c).await? {
            info!(computer_id = %c.id, "stopping without a checkpoint: the stored home was never restored");
            return Ok(());
        }
        match self
            .checkpoint_home(
                c,
                &[],
                DEFAULT_LEASE_WAIT,
                homes::cas::Cause::Stop,
                &Progress::new(),
            )
            .await
        {
            Ok(done) => {
                self.record_checkpoint(c, &done, Cause::BeforeStop, "saved before the stop")
                    .await;
                Ok(())
            }
            Err(e) => {
                warn!(computer_id = %c.id, error = %chain(&e), "checkpoint before stop failed; not stopping");
                Err(e)
            }
        }
    }

    /// What a home export or import of `c` acts under: the latest lease fence of every bot the
    /// lease store knows on it, read now (after any wait for leases), so the guest can refuse an
    /// operation begun before a lease it has already been told of.
    pub(crate) async fn home_authority(&self, c: &Computer) -> Result<HomeAuthority, CoreError> {
        let rows = self
            .homes
            .ledger()
            .lease_fences(&c.id)
            .await
            .map_err(HomeError::from)?;
        let mut fences = Vec::with_capacity(rows.len().min(MAX_HOME_AUTHORITY));
        for (bot, fence) in rows {
            let corrupt = |reason: String| {
                HomeError::from(DbError::corrupt(
                    "leases",
                    format!("{}/{bot}", c.id),
                    reason,
                ))
            };
            let id = BotId::new(bot.as_str()).map_err(|e| corrupt(e.to_string()))?;
            let fence = u64::try_from(fence).map_err(|_| corrupt(format!("fence is {fence}")))?;
            fences.push(LeaseFence { bot: id, fence });
        }
        let count = fences.len();
        HomeAuthority::new(fences).map_err(|e| match e {
            HomeAuthorityError::TooMany(_) => HomeError::TooManyLeases {
                id: c.id.clone(),
                count,
                max: MAX_HOME_AUTHORITY,
            }
            .into(),
            // (computer, bot) is the lease table's key: a bot twice is a broken database.
            HomeAuthorityError::Duplicate(_) => {
                HomeError::from(DbError::corrupt("leases", c.id.as_str(), e.to_string())).into()
            }
        })
    }

    /// Whether `c`'s machine has not imported its stored home yet.
    async fn restore_pending(&self, c: &Computer) -> Result<bool, CoreError> {
        let pending = self.homes.ledger().pending_restore(&c.id).await;
        Ok(pending.map_err(HomeError::from)?)
    }

    /// Checkpoints and restores need the computer's guest: refuse at once when it is not running.
    fn require_running(c: &Computer) -> Result<(), CoreError> {
        if c.state == ComputerState::Running {
            Ok(())
        } else {
            Err(CoreError::NotRunning {
                id: c.id.as_str().to_owned(),
                state: c.state,
            })
        }
    }

    /// Waits while bots other than `except` hold execution leases on `c`, up to `wait`.
    async fn wait_for_leases(
        &self,
        c: &Computer,
        except: &[BotId],
        wait: Duration,
        progress: &Progress,
    ) -> Result<(), CoreError> {
        let polls = wait.as_millis() / LEASE_POLL.as_millis();
        let except: Vec<&str> = except.iter().map(BotId::as_str).collect();
        for poll in 0..=polls {
            let bots = self
                .homes
                .ledger()
                .live_lease_holders(&c.id, &except, crate::clock::now_ms())
                .await
                .map_err(HomeError::from)?;
            if bots.is_empty() {
                return Ok(());
            }
            if poll == polls {
                return Err(HomeError::LeasesHeld {
                    id: c.id.clone(),
                    bots,
                }
                .into());
            }
            if poll == 0 {
                progress.phase("waiting", 0);
                info!(computer_id = %c.id, ?bots, "checkpoint waits for other bots' leases");
            }
            tokio::time::sleep(LEASE_POLL).await;
        }
        Ok(())
    }

    /// Logs what the run-completion trigger did: a failure is a WARN naming the computer, never
    /// dropped; the previous revision stays current.
    pub(crate) fn log_run_checkpoint(&self, c: &Computer, bot: &BotId, outcome: &RunCheckpoint) {
        match outcome {
            RunCheckpoint::Saved(_) => {}
            RunCheckpoint::Deferred(bots) => {
                info!(computer_id = %c.id, bot = %bot, ?bots, "checkpoint deferred: other bots still hold leases")
            }
            RunCheckpoint::Skipped(why) => {
                info!(computer_id = %c.id, bot = %bot, why, "checkpoint after the run skipped")
            }
            RunCheckpoint::Failed(error) => {
                warn!(computer_id = %c.id, bot = %bot, error, "checkpoint after the run failed; the previous revision stays current")
            }
        }
    }
}
