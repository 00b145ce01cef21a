//! The open live streams of this control plane, so that a decision (release of control, a
//! desktop torn down) closes them at once instead of at their next once-per-second re-check.
//!
//! Each relay registers itself and holds a [`StreamGuard`]; dropping the guard unregisters it.
//! Closing only cancels the guard's token: the relay sees it, ends its websocket and its guest
//! stream, and logs why. This is an accelerator, not the authority: the database re-check of
//! every stream (see `relay`) closes it anyway within a second.

use gateway_proto::live::CapabilityKind;
use gateway_proto::BotId;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio_util::sync::CancellationToken;

struct Entry {
    computer: String,
    bot: BotId,
    policy: CapabilityKind,
    cancel: CancellationToken,
}

/// Which of a bot's streams to close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseScope {
    /// Control and terminal streams (the control lease ended); views stay.
    Control,
    /// Every stream of the bot.
    All,
}

/// The registry of open streams.
#[derive(Default)]
pub struct Streams {
    inner: Mutex<HashMap<u64, Entry>>,
    next: AtomicU64,
}

/// A registered stream; unregisters on drop.
pub struct StreamGuard {
    streams: Arc<Streams>,
    id: u64,
    /// Cancelled when the stream must close.
    pub cancel: CancellationToken,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.streams.lock().remove(&self.id);
    }
}

impl Streams {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        // Each update is one insert or remove: a panic elsewhere leaves nothing half-done.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a stream of `bot` on `computer` under `policy`.
    pub fn register(
        self: &Arc<Self>,
        computer: &str,
        bot: &BotId,
        policy: CapabilityKind,
    ) -> StreamGuard {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let cancel = CancellationToken::new();
        self.lock().insert(
            id,
            Entry {
                computer: computer.to_string(),
                bot: bot.clone(),
                policy,
                cancel: cancel.clone(),
            },
        );
        StreamGuard {
            streams: self.clone(),
            id,
            cancel,
        }
    }

    /// Closes the bot's streams in `scope`; returns how many were told to close.
    pub fn close_bot(&self, computer: &str, bot: &BotId, scope: CloseScope) -> usize {
        self.close_where(|e| {
            e.computer == computer
                && &e.bot == bot
                && (scope == CloseScope::All || e.policy != CapabilityKind::View)
        })
    }

    /// Closes every stream of a computer (stopped, destroyed).
    pub fn close_computer(&self, computer: &str) -> usize {
        self.close_where(|e| e.computer == computer)
    }

    /// How many streams are open on `computer` (an open stream keeps it from idling).
    pub fn open_on(&self, computer: &str) -> usize {
        self.lock()
            .values()
            .filter(|e| e.computer == computer)
            .count()
    }

    /// How many streams are open.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no stream is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn close_where(&self, pred: impl Fn(&Entry) -> bool) -> usize {
        let map = self.lock();
        let mut n = 0;
        for e in map.values().filter(|e| pred(e)) {
            e.cancel.cancel();
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bot(s: &str) -> BotId {
        BotId::new(s).unwrap()
    }

    #[test]
    fn closing_control_leaves_views_open() {
        let s = Streams::new();
        let view = s.register("c1", &bot("a"), CapabilityKind::View);
        let control = s.register("c1", &bot("a"), CapabilityKind::Control);
        let term = s.register("c1", &bot("a"), CapabilityKind::Terminal);
        let other_bot = s.register("c1", &bot("b"), CapabilityKind::Control);
        let other_computer = s.register("c2", &bot("a"), CapabilityKind::Terminal);
        assert_eq!(s.close_bot("c1", &bot("a"), CloseScope::Control), 2);
        assert!(!view.cancel.is_cancelled());
        assert!(control.cancel.is_cancelled() && term.cancel.is_cancelled());
        assert!(!other_bot.cancel.is_cancelled() && !other_computer.cancel.is_cancelled());
        assert_eq!(s.close_bot("c1", &bot("a"), CloseScope::All), 3);
        assert!(view.cancel.is_cancelled());
        assert_eq!(s.close_computer("c2"), 1);
        assert!(other_computer.cancel.is_cancelled());
        assert!(!other_bot.cancel.is_cancelled());
    }

    #[test]
    fn a_dropped_guard_unregisters() {
        let s = Streams::new();
        let g = s.register("c1", &bot("a"), CapabilityKind::View);
        assert_eq!(s.len(), 1);
        drop(g);
        assert!(s.is_empty());
        assert_eq!(s.close_computer("c1"), 0);
    }
}
