//! The open live streams of this control plane, so that a decision (release of control, a
//! desktop torn down) closes them at once instead of at their next once-per-second re-check.
//!
//! Each relay registers itself and holds a [`StreamGuard`]; dropping the guard unregisters it.
//! Registration is also where the caps are kept: a URL already open in as many websockets as
//! allowed gets no more until one closes, and neither does a screen (a bot's desktop) already
//! shown in as many viewer and control windows as allowed, whatever URLs they came through (one
//! can issue many URLs for a screen). The guest bounds each screen's servers again (32 clients
//! each), which also holds across replicas.
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
    url: UrlKey,
    computer: String,
    bot: BotId,
    policy: CapabilityKind,
    cancel: CancellationToken,
}

/// Identifies one capability URL among the open streams: a sha256 of its sealed token, so the
/// registry never holds the credential itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UrlKey([u8; 32]);

impl UrlKey {
    pub fn of_token(token: &str) -> Self {
        use sha2::Digest;
        Self(sha2::Sha256::digest(token.as_bytes()).into())
    }
}

/// Why a stream was not registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    /// The URL already has as many open streams as allowed.
    #[error(
        "this link is already open in {max} windows, the most allowed at once; close one and try \
         again"
    )]
    Url { max: usize },
    /// The screen is already shown in as many viewer and control windows as allowed.
    #[error(
        "this screen is already shown in {max} windows, the most allowed at once; close one and \
         try again"
    )]
    Screen { max: usize },
}

/// The caps [`Streams::register`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Streams open at once through one capability URL.
    pub per_url: usize,
    /// View and control streams open at once on one bot's screen (terminals are shells, not
    /// the screen, and have their own cap in the guest).
    pub per_screen: usize,
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

    /// Registers a stream of `bot` on `computer` under `policy`, opened through the URL `url`,
    /// unless that URL, or for a view or control stream the bot's screen, is at its cap
    /// (counted and registered under one lock, so concurrent upgrades cannot overshoot).
    pub fn register(
        self: &Arc<Self>,
        url: UrlKey,
        caps: Caps,
        computer: &str,
        bot: &BotId,
        policy: CapabilityKind,
    ) -> Result<StreamGuard, Full> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let cancel = CancellationToken::new();
        let mut map = self.lock();
        if map.values().filter(|e| e.url == url).count() >= caps.per_url {
            return Err(Full::Url { max: caps.per_url });
        }
        let on_screen = |e: &&Entry| {
            e.computer == computer && &e.bot == bot && e.policy != CapabilityKind::Terminal
        };
        if policy != CapabilityKind::Terminal
            && map.values().filter(on_screen).count() >= caps.per_screen
        {
            return Err(Full::Screen {
                max: caps.per_screen,
            });
        }
        map.insert(
            id,
            Entry {
                url,
                computer: computer.to_string(),
                bot: bot.clone(),
                policy,
                cancel: cancel.clone(),
            },
        );
        drop(map);
        Ok(StreamGuard {
            streams: self.clone(),
            id,
            cancel,
        })
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

    /// How many streams are open by kind: (view, control, terminal) (the metrics' gauges).
    pub fn count_by_kind(&self) -> (usize, usize, usize) {
        let mut n = (0, 0, 0);
        for e in self.lock().values() {
            match e.policy {
                CapabilityKind::View => n.0 += 1,
                CapabilityKind::Control => n.1 += 1,
                CapabilityKind::Terminal => n.2 += 1,
            }
        }
        n
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

    const UNCAPPED: Caps = Caps {
        per_url: usize::MAX,
        per_screen: usize::MAX,
    };

    fn bot(s: &str) -> BotId {
        BotId::new(s).unwrap()
    }

    /// A stream on its own URL, without a cap that matters.
    fn reg(s: &Arc<Streams>, computer: &str, b: &str, policy: CapabilityKind) -> StreamGuard {
        let url = UrlKey::of_token(&format!("{computer}/{b}/{}", s.len()));
        s.register(url, UNCAPPED, computer, &bot(b), policy)
            .unwrap()
    }

    #[test]
    fn closing_control_leaves_views_open() {
        let s = Streams::new();
        let view = reg(&s, "c1", "a", CapabilityKind::View);
        let control = reg(&s, "c1", "a", CapabilityKind::Control);
        let term = reg(&s, "c1", "a", CapabilityKind::Terminal);
        let other_bot = reg(&s, "c1", "b", CapabilityKind::Control);
        let other_computer = reg(&s, "c2", "a", CapabilityKind::Terminal);
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
        let g = reg(&s, "c1", "a", CapabilityKind::View);
        assert_eq!(s.len(), 1);
        drop(g);
        assert!(s.is_empty());
        assert_eq!(s.close_computer("c1"), 0);
    }

    #[test]
    fn a_url_opens_at_most_its_cap_and_a_closed_stream_frees_a_place() {
        let s = Streams::new();
        let url = UrlKey::of_token("sealed-a");
        let other = UrlKey::of_token("sealed-b");
        let caps = Caps {
            per_url: 2,
            per_screen: usize::MAX,
        };
        let open = |u| s.register(u, caps, "c1", &bot("a"), CapabilityKind::View);
        let first = open(url).unwrap();
        let _second = open(url).unwrap();
        assert_eq!(open(url).err(), Some(Full::Url { max: 2 }));
        // Another URL of the same bot has its own count.
        let _third = open(other).unwrap();
        drop(first);
        let _again = open(url).unwrap();
        assert!(open(url).is_err());
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn a_screen_shows_in_at_most_its_cap_of_windows_whatever_their_urls() {
        let s = Streams::new();
        let caps = Caps {
            per_url: 8,
            per_screen: 2,
        };
        let open = |token: &str, b: &str, policy| {
            s.register(UrlKey::of_token(token), caps, "c1", &bot(b), policy)
        };
        let view = open("u1", "a", CapabilityKind::View).unwrap();
        let _control = open("u2", "a", CapabilityKind::Control).unwrap();
        assert_eq!(
            open("u3", "a", CapabilityKind::View).err(),
            Some(Full::Screen { max: 2 })
        );
        // Terminals are not the screen; another bot's screen has its own count.
        let _term = open("u4", "a", CapabilityKind::Terminal).unwrap();
        let _other = open("u5", "b", CapabilityKind::View).unwrap();
        drop(view);
        assert!(open("u3", "a", CapabilityKind::View).is_ok());
    }
}
