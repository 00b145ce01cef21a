//! The idle job: every [`IdleConfig::period`](super::IdleConfig::period) it looks at each
//! running computer, decides ([`super::rules`]) and suspends an idle one under its claim:
//! checkpoint through `Core::checkpoint_home`, then `Core::stop_machine`.

use super::gate::Claim;
use super::rules::{self, Decision, Observed};
use super::Report;
use crate::clock::now_ms;
use crate::computers::{Computer, ComputerState};
use crate::core::Core;
use gateway_proto::op::ActivityRequest;

use crate::schema::activity::{Cause, LifecycleKind};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{debug, info, warn};

/// Starts the idle job (nothing when disabled).
pub fn spawn(core: Arc<Core>) {
    let Some(timeout) = core.idle.config.timeout else {
        info!("idle suspension disabled");
        return;
    };
    let period = core.idle.config.period();
    info!(
        timeout_secs = timeout.as_secs_f64(),
        keep_awake_secs = core.idle.config.keep_awake.as_secs_f64(),
        "idle suspension on"
    );
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(period).await;
            scan(&core, timeout).await;
        }
    });
}

/// Starts a look at every running computer not being looked at already, each in its own task,
/// at most [`CONCURRENT_CHECKS`](super::CONCURRENT_CHECKS) running at once; returns without waiting for them.
async fn scan(core: &Arc<Core>, timeout: Duration) {
    let list = match core.computers.list().await {
        Ok(list) => list,
        Err(e) => {
            warn!(error = %crate::homes::chain(&e), "idle job could not list computers");
            return;
        }
    };
    let live: std::collections::HashSet<&str> = list
        .iter()
        .filter(|c| c.state != ComputerState::Destroyed)
        .map(|c| c.id.as_str())
        .collect();
    core.idle.gate.retain(&live);
    for c in list {
        // A pool member waits to be handed out: it has no home to save and is kept up on purpose
        // (docs/pools.md).
        if c.state != ComputerState::Running || !core.has_provider(&c) || c.kind.pool().is_some() {
            continue;
        }
        let id = c.id.as_str().to_owned();
        let fresh = core
            .idle
            .looking
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.clone());
        if !fresh {
            debug!(computer_id = %id, "still being looked at: skipped this round");
            continue;
        }
        let core = core.clone();
        tokio::spawn(async move {
            // Forgets the computer however the look ends (even a panic), so the next round
            // looks again.
            let _looking = Looking(core.idle.looking.clone(), id);
            let Ok(_slot) = core.idle.slots.clone().acquire_owned().await else {
                return;
            };
            if let Err(e) = consider(&core, &c, timeout).await {
                warn!(computer_id = %c.id, error = %crate::homes::chain(e.as_ref()), "idle check failed");
            }
        });
    }
}

/// A computer's entry in [`Idle::looking`](super::Idle::looking), removed when dropped.
struct Looking(Arc<Mutex<HashSet<String>>>, String);

impl Drop for Looking {
    fn drop(&mut self) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.1);
    }
}

type DynError = Box<dyn std::error::Error + Send + Sync>;

/// Decides about one running computer and, if it is idle, suspends it.
async fn consider(core: &Arc<Core>, c: &Computer, timeout: Duration) -> Result<(), DynError> {
    let idle = &core.idle;
    let id = c.id.as_str();
    // With several replicas, the one its guest is connected to judges a computer: its gate
    // counts every replica's operations on it (they reach the guest through it).
    if core.cluster.is_some() && core.registry.get(id).is_none() {
        return Ok(());
    }
    let seen = idle.gate.snapshot(id);
    let now = now_ms();
    let Some(stored) = idle.store.observe(&c.id, now).await? else {
        return Ok(());
    };
    let mut observed = Observed {
        connected: core.registry.get(id).is_some(),
        pending_restore: core.homes.ledger().pending_restore(&c.id).await?,
        in_flight: seen.in_flight,
        streams: core.live.streams.open_on(id),
        control: stored.control,
        runs: stored.runs,
        active_at_ms: stored.active_at_ms.max(seen.last_used_ms),
        awake_until_ms: stored.awake_until_ms,
        guest: None,
    };
    let policy = rules::Policy {
        timeout,
        background_max: idle.config.background_max,
        cpu_threshold_milli: idle.config.cpu_threshold_milli,
    };
    let mut decision = rules::decide(&observed, &policy, now);
    if decision.wants_guest() && observed.connected {
        observed.guest = guest_work(core, id).await;
        decision = rules::decide(&observed, &policy, now);
    }
    // A maintenance job's reservation excludes idle suspension
    // (docs/lifecycle.md#maintenance-jobs).
    let decision = match (&decision, core.jobs.store.reservation(&c.id).await?) {
        (Decision::Suspend { .. }, Some(job)) => Decision::Blocked(format!(
            "reserved by {} job {} ({})",
            job.kind.as_str(),
            job.id,
            job.state
        )),
        _ => decision,
    };
    let Decision::Suspend { except, overdue } = &decision else {
        debug!(computer_id = %id, ?decision, "not idle");
        idle.gate.set_report(id, Report::of(&decision, now));
        return Ok(());
    };
    // Used since the look (an operation began or ended): look again next time.
    let Some(claim) = idle.gate.try_claim(id, &seen) else {
        return Ok(());
    };
    // Across replicas the claim is the database's: a replica that died holding it (its guest
    // now connected here) leaves a row that expires, and this job takes over then.
    let _held = match &core.cluster {
        None => None,
        Some(cluster) => match cluster.claims.hold("idle", id).await? {
            Some(held) => Some(held),
            None => {
                debug!(computer_id = %id, "idle claim held by another replica: looked at again next time");
                return Ok(());
            }
        },
    };
    // Reported only once claimed: whoever sees `suspending` is refused.
    idle.gate.set_report(id, Report::of(&decision, now));
    if let Some(why) = overdue {
        info!(computer_id = %id, work = %why, max_secs = idle.config.background_max.as_secs(), "work inside the computer is past the background maximum: suspending it anyway");
    }
    let except = except.clone();
    suspend(core, c, &except, claim).await
}

/// What the guest reports still working inside the computer, asked within
/// [`ACTIVITY_WAIT`](super::ACTIVITY_WAIT); `None` (no activity, logged) when it does not
/// answer in time or refuses.
async fn guest_work(core: &Arc<Core>, id: &str) -> Option<rules::GuestWork> {
    let guest = core.connected_guest(id).await?;
    let asked = tokio::time::timeout(super::ACTIVITY_WAIT, guest.call(ActivityRequest)).await;
    match asked {
        Ok(Ok(a)) => Some(rules::GuestWork {
            commands: a.commands,
            background: a.background,
            terminal_output_ago_ms: a.terminal_output_ago_ms,
            process_output_ago_ms: a.process_output_ago_ms,
            cpu_milli: a.cpu_milli,
        }),
        Ok(Err(e)) => {
            info!(computer_id = %id, error = %e, "the guest did not report its activity; counted as none");
            None
        }
        Err(_) => {
            info!(computer_id = %id, wait_secs = super::ACTIVITY_WAIT.as_secs(), "the guest did not report its activity in time; counted as none");
            None
        }
    }
}

/// Holding the claim: checkpoint, then stop. A failed checkpoint stops nothing.
async fn suspend(
    core: &Arc<Core>,
    c: &Computer,
    except: &[gateway_proto::BotId],
    claim: Claim,
) -> Result<(), DynError> {
    let id = c.id.as_str();
    // A viewer may have opened a stream between the look and the claim (capability routes do
    // not pass the gate); it keeps the computer up.
    if core.live.streams.open_on(id) > 0 {
        return Ok(());
    }
    // State as of now, under the claim: nothing else changes it until the claim drops.
    let c = core.get(id).await?;
    if c.state != ComputerState::Running {
        return Ok(());
    }
    // Looked at again under the claim: a job created after the look entered the gate (one
    // process) or found the database claim free (replicas) before this claim was taken, so its
    // reservation is visible now, and no job can be created until the claim drops.
    if let Some(job) = core.jobs.store.reservation(&c.id).await? {
        debug!(computer_id = %id, job_id = %job.id, "reserved by a maintenance job: not suspended");
        return Ok(());
    }
    info!(computer_id = %id, waiting_runs = ?except.iter().map(|b| b.as_str()).collect::<Vec<_>>(), "computer idle: checkpointing its home, then stopping it");
    let progress = crate::homes::Progress::new();
    // The lease wait is zero: under the claim no lease can be taken, so a holder other than
    // those in `except` means the computer is in use after all.
    let checkpointed = core
        .checkpoint_home(
            &c,
            except,
            Duration::ZERO,
            homes::cas::Cause::Idle,
            &progress,
        )
        .await;
    if let Ok(done) = &checkpointed {
        core.record_checkpoint(&c, done, Cause::Idle, "saved before the idle suspension")
            .await;
    }
    if let Err(e) = checkpointed {
        let error = crate::homes::chain(&e);
        warn!(computer_id = %id, error, "idle checkpoint failed; the computer keeps running and suspension is retried after another idle timeout");
        core.metrics
            .idle_suspension(crate::metrics::Suspension::CheckpointFailed);
        let now = now_ms();
        core.idle.gate.set_report(
            id,
            Report {
                at_ms: now,
                decision: "failed",
                reason: format!("checkpoint failed: {error}"),
                until_ms: None,
            },
        );
        // Restarting the idle timer spaces the retries one timeout apart.
        core.idle.gate.touch(id, now);
        core.idle.store.used(&c.id, now).await?;
        drop(claim);
        return Ok(());
    }
    match core.stop_machine(&c).await {
        Ok(_) => {
            info!(computer_id = %id, "computer suspended after being idle");
            core.metrics
                .idle_suspension(crate::metrics::Suspension::Suspended);
            let idle_secs = core.idle.config.timeout.map_or(0, |t| t.as_secs());
            core.activity
                .lifecycle(
                    id,
                    LifecycleKind::Stopped,
                    Cause::Idle,
                    format!(
                        "idle suspension: unused for {idle_secs} s (no command, run, control or \
                         viewer); home checkpointed, machine stopped; start it to use it again"
                    ),
                )
                .await;
            core.idle.gate.set_report(
                id,
                Report {
                    at_ms: now_ms(),
                    decision: "suspended",
                    reason: "idle: home checkpointed, machine stopped".into(),
                    until_ms: None,
                },
            );
        }
        Err(e) => {
            warn!(computer_id = %id, error = %crate::homes::chain(&e), "stopping an idle computer failed after its checkpoint; retried after another idle timeout");
            core.metrics
                .idle_suspension(crate::metrics::Suspension::StopFailed);
            let now = now_ms();
            core.idle.gate.touch(id, now);
            core.idle.store.used(&c.id, now).await?;
        }
    }
    drop(claim);
    Ok(())
}
