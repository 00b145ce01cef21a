//! Idle suspension (contracts.md §8, §9): a running computer that nobody uses for the idle
//! timeout is claimed, its home checkpointed, and its machine stopped like `computer stop` does.
//!
//! "Used" means any of: an API operation on it in flight or within the timeout (exec, files,
//! screens, browser, terminals, live URLs, takeover, home checkpoint or restore, start/stop/
//! destroy), a live execution lease, a live user control lease, an open live stream. Lease
//! renewals are not uses (they only keep a lease alive, and the lease is looked at directly);
//! ending a run and releasing control are. A run that marked itself `waiting_takeover` does not
//! keep the computer awake by its lease: its request keeps a non-billing computer awake for the
//! keep-awake window (§8: 30 minutes), and restarts the idle timer on a billed one. After that the
//! computer suspends while the run keeps waiting: its lease stays, and its next operation gets
//! the stopped computer's 409 until someone starts it again.
//!
//! Parts: [`rules`] decides (pure), [`gate`] holds the claim and the operations in flight (the
//! API router enters it for every operation on a computer), [`store`] keeps when each computer
//! was last used and its keep-awake window on the computer row (migration 0005), and [`spawn`]
//! runs the job that looks at every running computer each [`IdleConfig::period`]. The checkpoint
//! is the homes flow's (`Core::checkpoint_home`), the stop is `Core::stop_machine`.
//!
//! Computers are looked at concurrently, at most [`CONCURRENT_CHECKS`] at a time, each in its own
//! task: a computer whose guest stalls (its checkpoint waits out the guest deadline) holds one
//! slot and its own next look, never the others. A computer still being looked at is skipped by
//! the next rounds until its look ends.
//!
//! A suspended computer is `stopped`, like one stopped by hand: its operations answer 409
//! `computer_not_running` (the message says how to start it), `POST /v1/computers/{id}/start`
//! (`rakazo computer start`) starts it again with its home in place.

pub mod config;
pub mod gate;
pub mod rules;
pub mod store;

pub use config::{IdleArgs, IdleConfig, DEFAULT_IDLE_TIMEOUT, TAKEOVER_KEEP_AWAKE};

use crate::clock::now_ms;
use crate::computers::{Computer, ComputerId, ComputerState};
use crate::core::Core;
use crate::db::Db;
use gate::{Claim, Claimed, Entered, Gate};
use rules::{Decision, Observed};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

/// What the job last decided about a computer, shown by `GET /v1/computers/{id}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub at_ms: i64,
    /// `awake`, `busy`, `blocked`, `suspending`, `failed`, `suspended`.
    pub decision: &'static str,
    pub reason: String,
    /// `awake`: not idle before then.
    pub until_ms: Option<i64>,
}

impl Report {
    fn of(d: &Decision, at_ms: i64) -> Self {
        let (decision, reason, until_ms) = match d {
            Decision::Awake {
                until_ms,
                keep_awake,
            } => (
                "awake",
                if *keep_awake {
                    "a takeover request keeps it awake".to_string()
                } else {
                    "used within the idle timeout".to_string()
                },
                Some(*until_ms),
            ),
            Decision::Busy(why) => ("busy", why.clone(), None),
            Decision::Blocked(why) => ("blocked", why.clone(), None),
            Decision::Suspend { .. } => ("suspending", "idle: checkpoint, then stop".into(), None),
        };
        Self {
            at_ms,
            decision,
            reason,
            until_ms,
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "decision": self.decision,
            "reason": self.reason,
            "at_ms": self.at_ms,
        });
        if let (Some(until), Some(map)) = (self.until_ms, v.as_object_mut()) {
            map.insert("until_ms".into(), until.into());
        }
        v
    }
}

/// Most computers looked at (and suspended) at once: bounds the checkpoints a wave of idle
/// computers puts on the store, while one stuck computer holds only its own slot.
pub const CONCURRENT_CHECKS: usize = 4;

/// Idle suspension's state in the core: settings, the gate, the row store.
pub struct Idle {
    pub config: IdleConfig,
    gate: Arc<Gate>,
    store: store::IdleStore,
    /// Slots for looks in flight.
    slots: Arc<Semaphore>,
    /// Computers being looked at now: a later round skips them.
    looking: Arc<Mutex<HashSet<String>>>,
}

/// One API operation on a computer; when it drops (its response is fully sent) the computer
/// counts as used then.
pub struct Operation {
    entered: Option<Entered>,
    store: store::IdleStore,
    write_every_ms: i64,
}

impl Drop for Operation {
    fn drop(&mut self) {
        let Some(entered) = self.entered.take() else {
            return;
        };
        let gate = entered.gate().clone();
        let computer = entered.computer().to_owned();
        drop(entered);
        persist(&gate, &self.store, &computer, self.write_every_ms);
    }
}

/// Writes the computer's last use to its row if due, in the background (a drop cannot wait).
fn persist(gate: &Gate, store: &store::IdleStore, computer: &str, every_ms: i64) {
    let Some(at) = gate.due_for_write(computer, every_ms) else {
        return;
    };
    let (Ok(id), Ok(rt)) = (
        ComputerId::new(computer),
        tokio::runtime::Handle::try_current(),
    ) else {
        return;
    };
    let store = store.clone();
    rt.spawn(async move {
        if let Err(e) = store.used(&id, at).await {
            warn!(computer_id = %id, error = %crate::homes::chain(&e), "recording a computer's last use failed");
        }
    });
}

impl Idle {
    pub fn new(config: IdleConfig, db: Db) -> Self {
        Self {
            config,
            gate: Gate::new(),
            store: store::IdleStore::new(db),
            slots: Arc::new(Semaphore::new(CONCURRENT_CHECKS)),
            looking: Arc::default(),
        }
    }

    /// An API operation on `computer` begins (see the module doc for which count). With
    /// `refuse`, it is refused while idle suspension holds its claim.
    pub fn enter(&self, computer: &str, refuse: bool) -> Result<Operation, Claimed> {
        // Ids that cannot name a computer get no slot; their handler answers 404.
        if ComputerId::new(computer).is_err() {
            return Ok(Operation {
                entered: None,
                store: self.store.clone(),
                write_every_ms: 0,
            });
        }
        let entered = self.gate.enter(computer, refuse, now_ms())?;
        let every = self.config.write_every_ms();
        persist(&self.gate, &self.store, computer, every);
        Ok(Operation {
            entered: Some(entered),
            store: self.store.clone(),
            write_every_ms: every,
        })
    }

    /// The computer booted (created, started, restarted): it counts as used now.
    pub async fn booted(&self, id: &ComputerId) -> Result<(), crate::db::DbError> {
        let now = now_ms();
        self.gate.touch(id.as_str(), now);
        self.store.used(id, now).await?;
        self.gate.written(id.as_str(), now);
        Ok(())
    }

    /// A run asked for a takeover (§8): a non-billing computer stays awake for the keep-awake
    /// window; on a billed one (`billed`: its provider's `bills_while_running`) the idle timer
    /// restarts.
    pub async fn takeover_requested(
        &self,
        id: &ComputerId,
        billed: bool,
        now_ms: i64,
    ) -> Result<(), crate::db::DbError> {
        self.gate.touch(id.as_str(), now_ms);
        self.store.used(id, now_ms).await?;
        self.gate.written(id.as_str(), now_ms);
        if !billed {
            let window = i64::try_from(self.config.keep_awake.as_millis()).unwrap_or(i64::MAX);
            self.store
                .keep_awake(id, now_ms.saturating_add(window))
                .await?;
        }
        Ok(())
    }

    /// What the job last decided about `computer`.
    pub fn report(&self, computer: &str) -> Option<Report> {
        self.gate.report(computer)
    }
}

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
/// at most [`CONCURRENT_CHECKS`] running at once; returns without waiting for them.
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
        if c.state != ComputerState::Running || !core.has_provider(&c) {
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

/// A computer's entry in [`Idle::looking`], removed when dropped.
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
    let seen = idle.gate.snapshot(id);
    let now = now_ms();
    let Some(stored) = idle.store.observe(&c.id, now).await? else {
        return Ok(());
    };
    let observed = Observed {
        connected: core.registry.get(id).is_some(),
        pending_restore: core.homes.ledger().pending_restore(&c.id).await?,
        in_flight: seen.in_flight,
        streams: core.live.streams.open_on(id),
        control: stored.control,
        runs: stored.runs,
        active_at_ms: stored.active_at_ms.max(seen.last_used_ms),
        awake_until_ms: stored.awake_until_ms,
    };
    let decision = rules::decide(&observed, timeout, now);
    let Decision::Suspend { except } = &decision else {
        debug!(computer_id = %id, ?decision, "not idle");
        idle.gate.set_report(id, Report::of(&decision, now));
        return Ok(());
    };
    // Used since the look (an operation began or ended): look again next time.
    let Some(claim) = idle.gate.try_claim(id, &seen) else {
        return Ok(());
    };
    // Reported only once claimed: whoever sees `suspending` is refused.
    idle.gate.set_report(id, Report::of(&decision, now));
    let except = except.clone();
    suspend(core, c, &except, claim).await
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
    info!(computer_id = %id, waiting_runs = ?except.iter().map(|b| b.as_str()).collect::<Vec<_>>(), "computer idle: checkpointing its home, then stopping it");
    let progress = crate::homes::Progress::new();
    // The lease wait is zero: under the claim no lease can be taken, so a holder other than
    // those in `except` means the computer is in use after all.
    if let Err(e) = core
        .checkpoint_home(&c, except, Duration::ZERO, &progress)
        .await
    {
        let error = crate::homes::chain(&e);
        warn!(computer_id = %id, error, "idle checkpoint failed; the computer keeps running and suspension is retried after another idle timeout");
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
            let now = now_ms();
            core.idle.gate.touch(id, now);
            core.idle.store.used(&c.id, now).await?;
        }
    }
    drop(claim);
    Ok(())
}
