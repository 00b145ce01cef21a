//! Idle suspension (docs/lifecycle.md#idle-suspension): a running computer that nobody uses for the
//! idle timeout is claimed, its home checkpointed, and its machine stopped like `computer stop`
//! does.
//!
//! "Used" means any of: an API operation on it in flight or within the timeout (exec, files,
//! screens, browser, terminals, live URLs, takeover, home checkpoint or restore, start/stop/
//! destroy), a live execution lease, a live user control lease, an open live stream. Lease
//! renewals are not uses (they only keep a lease alive, and the lease is looked at directly);
//! ending a run and releasing control are. A run that marked itself `waiting_takeover` does not
//! keep the computer awake by its lease: its request keeps a non-billing computer awake for the
//! keep-awake window (docs/lifecycle.md#takeover: 30 minutes), and restarts the idle timer on a
//! billed one. After that the computer suspends while the run keeps waiting: its lease stays, and
//! its next operation gets the stopped computer's 409 until someone starts it again.
//!
//! Work inside the computer is use too: a computer idle by all of the above is asked by the job
//! (the guest's `Activity` operation, within [`ACTIVITY_WAIT`]) what still works inside it:
//! commands running, processes finished commands left behind (`nohup … &`), a terminal that
//! printed within the idle timeout, CPU above `--idle-cpu-percent` (the guest's own not
//! counted). That keeps it up, but only until `--idle-background-max-secs` (4 h) after its last
//! use through the API, so a stuck process cannot keep a computer up forever. A guest that does
//! not answer in time, or refuses, counts as having nothing running (logged at INFO).
//!
//! Parts: [`rules`] decides (pure), [`gate`] holds the claim and the operations in flight (the
//! API router enters it for every operation on a computer), [`store`] keeps when each computer
//! was last used and its keep-awake window on the computer row (migration 0005), and [`spawn`]
//! runs the job ([`job`]) that looks at every running computer each [`IdleConfig::period`]; the job
//! drives the core, while the core holds only this module's state ([`Idle`]), never the job. The checkpoint
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
mod job;
pub mod rules;
pub mod store;

pub use config::{
    IdleArgs, IdleConfig, DEFAULT_BACKGROUND_MAX, DEFAULT_IDLE_TIMEOUT, TAKEOVER_KEEP_AWAKE,
};
pub use job::spawn;

use crate::clock::now_ms;
use crate::computers::ComputerId;
use crate::db::Db;
use gate::{Claimed, Entered, Gate};
use rules::Decision;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;
use tracing::warn;

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
            Decision::Suspend { overdue, .. } => (
                "suspending",
                match overdue {
                    None => "idle: checkpoint, then stop".into(),
                    Some(why) => format!(
                        "idle: checkpoint, then stop (work inside past the background maximum: {why})"
                    ),
                },
                None,
            ),
        };
        Self {
            at_ms,
            decision,
            reason,
            until_ms,
        }
    }
}

/// How long the job waits for a guest's activity report; past it the guest counts as having
/// nothing running.
pub const ACTIVITY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

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

    /// The gate operations on computers pass (the peer link enters it for relayed streams).
    pub fn gate(&self) -> Arc<Gate> {
        self.gate.clone()
    }

    /// The computer booted (created, started, restarted): it counts as used now.
    pub async fn booted(&self, id: &ComputerId) -> Result<(), crate::db::DbError> {
        let now = now_ms();
        self.gate.touch(id.as_str(), now);
        self.store.used(id, now).await?;
        self.gate.written(id.as_str(), now);
        Ok(())
    }

    /// A run asked for a takeover (docs/lifecycle.md#takeover): a non-billing computer stays awake
    /// for the keep-awake window; on a billed one (`billed`: its provider's `bills_while_running`)
    /// the idle timer restarts.
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

    /// The live execution and control leases of `id` at `now_ms` (screen eviction spares
    /// their bots); `None` if there is no such computer.
    pub async fn holders(
        &self,
        id: &ComputerId,
        now_ms: i64,
    ) -> Result<Option<store::Stored>, crate::db::DbError> {
        self.store.observe(id, now_ms).await
    }

    /// What the job last decided about `computer`.
    pub fn report(&self, computer: &str) -> Option<Report> {
        self.gate.report(computer)
    }
}
