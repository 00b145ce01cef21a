//! The claim on a computer that idle suspension takes before exporting its home
//! (docs/lifecycle.md#idle-suspension), and the API operations in flight it must not cut short.
//!
//! Every API operation on a computer passes the [`Gate`]: it is refused while the computer is
//! claimed, and counted while it runs. The idle job claims only a computer with nothing in
//! flight and no operation begun or ended since it looked (an `epoch` that every entry and exit
//! bumps), so an operation either starts before the claim, and the claim is not taken, or after
//! it, and is refused. Both sides decide under one mutex, so there is no window between them.
//!
//! This is process state on purpose: an operation in flight and a claim both live exactly as
//! long as this control plane does (a crash ends the operations, and the checkpoint of a claim
//! with them; a checkpoint is recorded whole or not at all). What must survive a restart, when a
//! computer was last used, is on the computer row (`super::store`); the gate's `last_used_ms` only
//! covers the few seconds between two of those (throttled) writes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

#[derive(Default)]
struct Slot {
    in_flight: u32,
    epoch: u64,
    claimed: bool,
    last_used_ms: i64,
    /// When `last_used_ms` was last written to the computer row.
    written_ms: i64,
    report: Option<super::Report>,
}

/// The computers' claims and in-flight operations in this control plane.
#[derive(Default)]
pub struct Gate {
    slots: Mutex<HashMap<String, Slot>>,
}

/// The computer is claimed by idle suspension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed;

/// One API operation in flight; it ends when this drops.
pub struct Entered {
    gate: Arc<Gate>,
    computer: String,
}

/// Idle suspension's claim; released on drop.
pub struct Claim {
    gate: Arc<Gate>,
    computer: String,
}

/// What the idle job sees before it decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    pub epoch: u64,
    pub in_flight: u32,
    pub last_used_ms: i64,
}

impl Gate {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        // Every update is a few field writes: a panic elsewhere leaves nothing half-done.
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts an operation on `computer` at `now_ms`. With `refuse`, a claimed computer refuses
    /// it; without (ending a run, releasing control), it proceeds but still counts, so a claim
    /// is not taken in its middle.
    pub fn enter(
        self: &Arc<Self>,
        computer: &str,
        refuse: bool,
        now_ms: i64,
    ) -> Result<Entered, Claimed> {
        let mut slots = self.lock();
        let slot = slots.entry(computer.to_owned()).or_default();
        if refuse && slot.claimed {
            return Err(Claimed);
        }
        slot.in_flight += 1;
        slot.epoch += 1;
        slot.last_used_ms = slot.last_used_ms.max(now_ms);
        Ok(Entered {
            gate: self.clone(),
            computer: computer.to_owned(),
        })
    }

    /// Records a use of `computer` at `now_ms` that is not an operation in flight (a boot, a
    /// takeover request).
    pub fn touch(&self, computer: &str, now_ms: i64) {
        let mut slots = self.lock();
        let slot = slots.entry(computer.to_owned()).or_default();
        slot.epoch += 1;
        slot.last_used_ms = slot.last_used_ms.max(now_ms);
    }

    fn exit(&self, computer: &str, now_ms: i64) {
        let mut slots = self.lock();
        if let Some(slot) = slots.get_mut(computer) {
            slot.in_flight = slot.in_flight.saturating_sub(1);
            slot.epoch += 1;
            slot.last_used_ms = slot.last_used_ms.max(now_ms);
        }
    }

    pub fn snapshot(&self, computer: &str) -> Snapshot {
        let slots = self.lock();
        let slot = slots.get(computer);
        Snapshot {
            epoch: slot.map_or(0, |s| s.epoch),
            in_flight: slot.map_or(0, |s| s.in_flight),
            last_used_ms: slot.map_or(0, |s| s.last_used_ms),
        }
    }

    /// Claims `computer` if nothing is in flight and nothing began or ended since `seen`.
    pub fn try_claim(self: &Arc<Self>, computer: &str, seen: &Snapshot) -> Option<Claim> {
        let mut slots = self.lock();
        let slot = slots.entry(computer.to_owned()).or_default();
        if slot.claimed || slot.in_flight > 0 || slot.epoch != seen.epoch {
            return None;
        }
        slot.claimed = true;
        Some(Claim {
            gate: self.clone(),
            computer: computer.to_owned(),
        })
    }

    pub fn is_claimed(&self, computer: &str) -> bool {
        self.lock().get(computer).is_some_and(|s| s.claimed)
    }

    /// Whether `last_used_ms` is due to be written to the row (more than `every` since the
    /// last write); marks it written if so.
    pub fn due_for_write(&self, computer: &str, every_ms: i64) -> Option<i64> {
        let mut slots = self.lock();
        let slot = slots.get_mut(computer)?;
        if slot.last_used_ms > slot.written_ms.saturating_add(every_ms) {
            slot.written_ms = slot.last_used_ms;
            Some(slot.last_used_ms)
        } else {
            None
        }
    }

    /// Marks `last_used_ms` as already written (a direct write at `at_ms`).
    pub fn written(&self, computer: &str, at_ms: i64) {
        let mut slots = self.lock();
        let slot = slots.entry(computer.to_owned()).or_default();
        slot.written_ms = slot.written_ms.max(at_ms);
    }

    pub fn set_report(&self, computer: &str, report: super::Report) {
        self.lock().entry(computer.to_owned()).or_default().report = Some(report);
    }

    pub fn report(&self, computer: &str) -> Option<super::Report> {
        self.lock().get(computer).and_then(|s| s.report.clone())
    }

    /// Forgets computers that are not in `keep` and hold nothing (destroyed ones, ids that
    /// never named a computer).
    pub fn retain(&self, keep: &std::collections::HashSet<&str>) {
        self.lock()
            .retain(|id, s| keep.contains(id.as_str()) || s.in_flight > 0 || s.claimed);
    }
}

impl Entered {
    pub fn computer(&self) -> &str {
        &self.computer
    }

    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        self.gate.exit(&self.computer, crate::clock::now_ms());
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(slot) = self.gate.lock().get_mut(&self.computer) {
            slot.claimed = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_refuses_operations_until_dropped() {
        let g = Gate::new();
        let seen = g.snapshot("c1");
        let claim = g.try_claim("c1", &seen).expect("nothing in flight");
        assert!(g.is_claimed("c1"));
        assert_eq!(g.enter("c1", true, 5).err(), Some(Claimed));
        // Ending a run or releasing control still proceeds.
        let end = g.enter("c1", false, 5).expect("not refused");
        drop(end);
        // Other computers are not concerned.
        assert!(g.enter("c2", true, 5).is_ok());
        drop(claim);
        assert!(!g.is_claimed("c1"));
        assert!(g.enter("c1", true, 6).is_ok());
    }

    #[test]
    fn an_operation_in_flight_or_since_the_look_prevents_the_claim() {
        let g = Gate::new();
        let seen = g.snapshot("c1");
        let op = g.enter("c1", true, 10).unwrap();
        assert!(g.try_claim("c1", &seen).is_none(), "in flight");
        drop(op);
        assert!(
            g.try_claim("c1", &seen).is_none(),
            "began and ended since the look"
        );
        let seen = g.snapshot("c1");
        assert_eq!(seen.in_flight, 0);
        assert!(seen.last_used_ms > 0);
        g.touch("c1", 20);
        assert!(g.try_claim("c1", &seen).is_none(), "used since the look");
        let seen = g.snapshot("c1");
        let claim = g.try_claim("c1", &seen);
        assert!(claim.is_some());
        assert!(
            g.try_claim("c1", &g.snapshot("c1")).is_none(),
            "one claim at a time"
        );
    }

    #[test]
    fn writes_are_throttled() {
        let g = Gate::new();
        g.touch("c1", 1_000);
        assert_eq!(g.due_for_write("c1", 500), Some(1_000));
        g.touch("c1", 1_200);
        assert_eq!(g.due_for_write("c1", 500), None);
        g.touch("c1", 1_600);
        assert_eq!(g.due_for_write("c1", 500), Some(1_600));
        assert_eq!(g.due_for_write("nope", 500), None);
    }
}
