//! Decision events, aggregated so that a busy computer cannot flood the activity feed.
//!
//! This module owns [`Event`] and [`Events`], the sink every server records into. Records with
//! the same (computer, allowed, kind, target, port) within one flush window (a second, by
//! [`Events::run`]) are merged into one event whose `count`, bytes and duration are the sums.
//! Flushed events go to a bounded channel; when the consumer lags, events are dropped and
//! counted ([`Events::dropped`]), never queued without bound.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::mpsc;

use crate::{ComputerId, Reason};

/// At most this many distinct keys are held between flushes; beyond, records are dropped.
pub const MAX_PENDING: usize = 65_536;

/// The window events are merged over.
pub const WINDOW: Duration = Duration::from_secs(1);

/// What was decided about.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    Domain(String),
    Ip(IpAddr),
}

/// Which path decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A DNS query (port is 53).
    Dns,
    /// A transparently proxied connection.
    Connection,
    /// A request to the explicit HTTP proxy (CONNECT or absolute-form).
    HttpProxy,
}

/// One decision, or several merged (`count` > 1). The activity feed's `network.allowed` /
/// `network.denied`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Event {
    pub computer: ComputerId,
    pub allowed: bool,
    pub kind: EventKind,
    pub target: Target,
    pub port: u16,
    pub reason: Reason,
    /// How many decisions this event stands for.
    pub count: u64,
    /// Bytes from the computer, summed.
    pub bytes_up: u64,
    /// Bytes to the computer, summed.
    pub bytes_down: u64,
    /// Connection durations, summed.
    pub duration: Duration,
}

impl Event {
    /// A single decision with no bytes yet.
    pub fn new(
        computer: &ComputerId,
        allowed: bool,
        kind: EventKind,
        target: Target,
        port: u16,
        reason: Reason,
    ) -> Event {
        Event {
            computer: computer.clone(),
            allowed,
            kind,
            target,
            port,
            reason,
            count: 1,
            bytes_up: 0,
            bytes_down: 0,
            duration: Duration::ZERO,
        }
    }

    /// `network.allowed` or `network.denied`.
    pub fn feed_kind(&self) -> &'static str {
        if self.allowed {
            "network.allowed"
        } else {
            "network.denied"
        }
    }
}

type Key = (ComputerId, bool, EventKind, Target, u16);

/// The sink. Cheap to clone; all clones feed the same channel.
#[derive(Clone)]
pub struct Events {
    inner: Arc<Inner>,
}

struct Inner {
    pending: Mutex<HashMap<Key, Event>>,
    tx: mpsc::Sender<Event>,
    dropped: AtomicU64,
}

impl Events {
    /// A sink and the bounded receiving end (`capacity` events between reads).
    pub fn channel(capacity: usize) -> (Events, mpsc::Receiver<Event>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let inner = Inner {
            pending: Mutex::new(HashMap::new()),
            tx,
            dropped: AtomicU64::new(0),
        };
        (
            Events {
                inner: Arc::new(inner),
            },
            rx,
        )
    }

    /// Records one decision, merged with others of the same key until the next flush.
    pub fn record(&self, event: Event) {
        let key = (
            event.computer.clone(),
            event.allowed,
            event.kind,
            event.target.clone(),
            event.port,
        );
        let mut pending = self
            .inner
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(merged) = pending.get_mut(&key) {
            merged.count += event.count;
            merged.bytes_up += event.bytes_up;
            merged.bytes_down += event.bytes_down;
            merged.duration += event.duration;
            return;
        }
        if pending.len() >= MAX_PENDING {
            self.inner.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        pending.insert(key, event);
    }

    /// Sends everything pending (one event per key) to the channel, dropping what does not fit.
    pub fn flush(&self) {
        let pending = std::mem::take(
            &mut *self
                .inner
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (_, event) in pending {
            if self.inner.tx.try_send(event).is_err() {
                self.inner.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Flushes every [`WINDOW`] until the receiver is gone.
    pub async fn run(self) {
        let mut tick = tokio::time::interval(WINDOW);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !self.inner.tx.is_closed() {
            tick.tick().await;
            self.flush();
        }
    }

    /// Events lost because the channel was full or too many keys were pending.
    pub fn dropped(&self) -> u64 {
        self.inner.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(port: u16, allowed: bool, up: u64) -> Event {
        let mut e = Event::new(
            &ComputerId::new("c-1"),
            allowed,
            EventKind::Connection,
            Target::Domain("allowed.test".into()),
            port,
            if allowed {
                Reason::Allowed
            } else {
                Reason::NotAllowed
            },
        );
        e.bytes_up = up;
        e
    }

    #[test]
    fn a_burst_becomes_one_event_per_key_per_window() {
        let (events, mut rx) = Events::channel(16);
        for _ in 0..1000 {
            events.record(event(443, true, 10));
        }
        events.record(event(80, true, 1));
        events.record(event(443, false, 0));
        events.flush();
        let mut got = Vec::new();
        while let Ok(e) = rx.try_recv() {
            got.push(e);
        }
        assert_eq!(got.len(), 3);
        let busy = got.iter().find(|e| e.port == 443 && e.allowed).unwrap();
        assert_eq!((busy.count, busy.bytes_up), (1000, 10_000));
        assert_eq!(busy.feed_kind(), "network.allowed");
        events.flush();
        assert!(rx.try_recv().is_err(), "nothing twice");
    }

    #[test]
    fn a_full_channel_drops_and_counts() {
        let (events, _rx) = Events::channel(1);
        events.record(event(1, true, 0));
        events.record(event(2, true, 0));
        events.flush();
        assert_eq!(events.dropped(), 1);
    }
}
