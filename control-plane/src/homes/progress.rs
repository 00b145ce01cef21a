//! Progress of a checkpoint or restore: the phase, bytes done and the total, published through a
//! `watch` channel so the API can stream it while the flow runs (and a caller that went away
//! costs nothing).
//!
//! A `watch` keeps only the latest value, so a phase that starts and ends between two reads of a
//! slow reader would vanish. Each phase therefore carries a sequence number, and the final
//! reading of every phase that ended is kept (a flow has a handful of phases), so a reader can
//! still report each phase it missed: [`Progress::ended_since`].

use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// Most ended phases kept; a flow has three or four.
const MAX_ENDED: usize = 16;

/// One reading of a flow's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgressReport {
    /// A checkpoint's `waiting` (for other bots' leases), `exporting` and `committing` (the
    /// archive is all read; the store completes it and advances the revision); a restore's
    /// `verifying` (a local store's copy is checked before the guest sees a byte) and
    /// `importing`; `starting` before the first phase.
    pub phase: &'static str,
    /// Which phase of the flow this is: 0 for `starting`, then 1, 2, ...
    pub seq: u32,
    /// Archive bytes moved so far in this phase.
    pub done: u64,
    /// Expected bytes of the phase (the guest's estimate for an export, raised to `done` when
    /// the archive outgrows it: an export's framing is not in the estimate; exact for a
    /// restore); 0 when unknown.
    pub total: u64,
}

/// The sending side, held by the flow.
#[derive(Debug, Clone)]
pub struct Progress {
    tx: watch::Sender<ProgressReport>,
    /// The last reading of each phase that ended, oldest first.
    ended: Arc<Mutex<Vec<ProgressReport>>>,
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
            seq: 0,
            done: 0,
            total: 0,
        });
        Self {
            tx,
            ended: Arc::default(),
        }
    }

    /// A receiver for the API.
    pub fn subscribe(&self) -> watch::Receiver<ProgressReport> {
        self.tx.subscribe()
    }

    /// Ends the current phase and starts `phase`.
    pub fn phase(&self, phase: &'static str, total: u64) {
        let mut previous = None;
        self.tx.send_modify(|r| {
            previous = Some(*r);
            *r = ProgressReport {
                phase,
                seq: r.seq.saturating_add(1),
                done: 0,
                total,
            };
        });
        if let Some(previous) = previous.filter(|p| p.seq > 0) {
            let mut ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
            if ended.len() == MAX_ENDED {
                ended.remove(0);
            }
            ended.push(previous);
        }
    }

    pub fn add(&self, n: u64) {
        self.tx.send_modify(|r| {
            r.done = r.done.saturating_add(n);
            if r.total != 0 {
                r.total = r.total.max(r.done);
            }
        });
    }

    pub fn report(&self) -> ProgressReport {
        *self.tx.borrow()
    }

    /// The final readings of phase `seq` and of those after it that ended, oldest first.
    pub fn ended_since(&self, seq: u32) -> Vec<ProgressReport> {
        let ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        ended.iter().filter(|r| r.seq >= seq).copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_that_ended_unseen_is_still_reported() {
        let p = Progress::new();
        let rx = p.subscribe();
        p.phase("verifying", 0);
        p.add(100);
        p.phase("importing", 100);
        p.add(40);
        // The reader saw nothing in between: the watch holds only `importing`.
        let now = *rx.borrow();
        assert_eq!((now.phase, now.seq, now.done), ("importing", 2, 40));
        let missed = p.ended_since(0);
        assert_eq!(missed.len(), 1);
        assert_eq!(
            (missed[0].phase, missed[0].seq, missed[0].done),
            ("verifying", 1, 100)
        );
        assert!(p.ended_since(2).is_empty());
    }

    /// An estimate the work outgrows (a small home's archive framing) grows with it: a reader
    /// never sees more done than expected; an unknown total stays unknown.
    #[test]
    fn done_never_exceeds_a_known_total() {
        let p = Progress::new();
        p.phase("exporting", 7);
        p.add(5);
        assert_eq!((p.report().done, p.report().total), (5, 7));
        p.add(64);
        assert_eq!((p.report().done, p.report().total), (69, 69));
        p.phase("committing", 0);
        p.add(10);
        assert_eq!((p.report().done, p.report().total), (10, 0));
    }

    #[test]
    fn ended_phases_are_bounded() {
        let p = Progress::new();
        for _ in 0..(MAX_ENDED + 5) {
            p.phase("waiting", 0);
        }
        let ended = p.ended_since(0);
        assert_eq!(ended.len(), MAX_ENDED);
        assert_eq!(ended.last().map(|r| r.seq), Some(MAX_ENDED as u32 + 4));
    }
}
