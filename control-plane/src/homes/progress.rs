//! Progress of a checkpoint or restore: the phase, bytes done and the total, published through a
//! `watch` channel so the API can stream it while the flow runs (and a caller that went away
//! costs nothing).

use tokio::sync::watch;

/// One reading of a flow's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgressReport {
    /// `waiting` (for other bots' leases), `exporting`, `verifying` or `importing`.
    pub phase: &'static str,
    /// Archive bytes moved so far in this phase.
    pub done: u64,
    /// Expected bytes of the phase (the guest's estimate for an export; exact for a restore);
    /// 0 when unknown.
    pub total: u64,
}

/// The sending side, held by the flow.
#[derive(Debug, Clone)]
pub struct Progress {
    tx: watch::Sender<ProgressReport>,
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress {
    pub fn new() -> Self {
        let (tx, _rx) = watch::channel(ProgressReport {
            phase: "starting",
            done: 0,
            total: 0,
        });
        Self { tx }
    }

    /// A receiver for the API.
    pub fn subscribe(&self) -> watch::Receiver<ProgressReport> {
        self.tx.subscribe()
    }

    pub fn phase(&self, phase: &'static str, total: u64) {
        self.tx.send_replace(ProgressReport {
            phase,
            done: 0,
            total,
        });
    }

    pub fn add(&self, n: u64) {
        self.tx.send_modify(|r| r.done = r.done.saturating_add(n));
    }

    pub fn report(&self) -> ProgressReport {
        *self.tx.borrow()
    }
}
