//! The open connections of the API's listener: the global cap, the cap per client address, and
//! which waiting connection makes room for a new one ([`SlotTable`], without atomics or tasks).
//!
//! A client address (an IPv4 address, or an IPv6 /64, which one host can fill) holds at most
//! `per_peer` connections. At that cap a new connection of the address displaces the address's own
//! connection that has waited longest for a request head, and is refused (429) when every one of
//! them is mid-request: one client holding its connections busy (trickled uploads, followed logs,
//! websockets) cannot take the server's connections from everyone else.

use super::WARN_EVERY;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// Who a connection counts against: an IPv4 address, or the /64 of an IPv6 one (IPv4-mapped
/// addresses count as their IPv4 address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Peer(IpAddr);

impl Peer {
    pub(super) fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Peer(IpAddr::V4(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Peer(IpAddr::V4(v4)),
                None => {
                    let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                    Peer(IpAddr::V6(prefix.into()))
                }
            },
        }
    }
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// Every connection of the server is mid-request.
    Full,
    /// Every connection of this client address is mid-request, at the address's cap.
    PeerFull,
}

/// The open connections, for the cap.
pub(super) struct Slots {
    cap: usize,
    per_peer: usize,
    table: Mutex<SlotTable>,
    displaced: AtomicU64,
    refused: AtomicU64,
    refused_peer: AtomicU64,
    displaced_peer: AtomicU64,
    accept_failures: AtomicU64,
    last_accept_error: Mutex<Option<String>>,
}

impl Slots {
    pub(super) fn new(cap: usize, per_peer: usize) -> Self {
        Self {
            cap,
            per_peer,
            table: Mutex::new(SlotTable::default()),
            displaced: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            refused_peer: AtomicU64::new(0),
            displaced_peer: AtomicU64::new(0),
            accept_failures: AtomicU64::new(0),
            last_accept_error: Mutex::new(None),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlotTable> {
        // The table holds no invariant a panicking holder could break halfway.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a new connection from `peer`, displacing a waiting one at a cap.
    pub(super) fn admit(
        self: &Arc<Self>,
        peer: Peer,
    ) -> Result<(SlotGuard, CancellationToken), Refused> {
        let admitted = self.lock().admit(self.cap, self.per_peer, peer);
        match admitted {
            Admission::Open { id, cancel } => Ok((self.guard(id), cancel)),
            Admission::Displacing {
                id,
                cancel,
                victim,
                own,
            } => {
                victim.cancel();
                if own {
                    &self.displaced_peer
                } else {
                    &self.displaced
                }
                .fetch_add(1, Ordering::Relaxed);
                Ok((self.guard(id), cancel))
            }
            Admission::Refused(why) => {
                match why {
                    Refused::Full => &self.refused,
                    Refused::PeerFull => &self.refused_peer,
                }
                .fetch_add(1, Ordering::Relaxed);
                Err(why)
            }
        }
    }

    fn guard(self: &Arc<Self>, id: u64) -> SlotGuard {
        SlotGuard {
            slots: self.clone(),
            id,
        }
    }

    pub(super) fn accept_failed(&self, e: &std::io::Error) {
        self.accept_failures.fetch_add(1, Ordering::Relaxed);
        *self
            .last_accept_error
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
    }
}

/// One WARN per [`WARN_EVERY`] at most, summing what happened since the last one.
pub(super) async fn report(slots: Arc<Slots>) {
    let mut tick = tokio::time::interval(WARN_EVERY);
    loop {
        tick.tick().await;
        let displaced = slots.displaced.swap(0, Ordering::Relaxed);
        let refused = slots.refused.swap(0, Ordering::Relaxed);
        if displaced + refused > 0 {
            warn!(
                cap = slots.cap,
                displaced,
                refused,
                "http connection cap reached: waiting connections closed for new ones \
                 (displaced), or new ones refused because every connection was mid-request"
            );
        }
        let displaced = slots.displaced_peer.swap(0, Ordering::Relaxed);
        let refused = slots.refused_peer.swap(0, Ordering::Relaxed);
        if displaced + refused > 0 {
            warn!(
                per_address = slots.per_peer,
                displaced,
                refused,
                "http connections of one client address reached its cap: its waiting connections \
                 closed for its new ones (displaced), or its new ones refused because all of its \
                 connections were mid-request"
            );
        }
        let failures = slots.accept_failures.swap(0, Ordering::Relaxed);
        if failures > 0 {
            let last = slots
                .last_accept_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .unwrap_or_default();
            warn!(failures, last_error = %last, "accepting http connections failed");
        }
    }
}

/// Removes its connection from the table when the socket is dropped.
pub(super) struct SlotGuard {
    slots: Arc<Slots>,
    id: u64,
}

impl SlotGuard {
    pub(super) fn mark(&self) -> SlotMark {
        SlotMark {
            slots: self.slots.clone(),
            id: self.id,
        }
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.slots.lock().remove(self.id);
    }
}

/// Records what a connection is doing (a no-op once it is gone).
#[derive(Clone)]
pub(super) struct SlotMark {
    slots: Arc<Slots>,
    id: u64,
}

impl SlotMark {
    pub(super) fn busy(&self) {
        self.slots.lock().busy(self.id);
    }

    pub(super) fn waiting(&self) {
        self.slots.lock().waiting(self.id);
    }
}

/// What an open connection is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for a request head, since `since` (a counter, not a clock); `served` once a
    /// request was answered on it.
    Waiting { served: bool, since: u64 },
    /// Handling a request, or upgraded to a websocket.
    Busy,
}

struct Entry {
    state: State,
    peer: Peer,
    cancel: CancellationToken,
}

/// The decision part of [`Slots`], without atomics or tasks.
#[derive(Default)]
struct SlotTable {
    entries: HashMap<u64, Entry>,
    /// Open connections per client address (no zero counts kept).
    per_peer: HashMap<Peer, usize>,
    next_id: u64,
    /// Orders waiting connections: every change to waiting takes the next value.
    next_since: u64,
}

enum Admission {
    Open {
        id: u64,
        cancel: CancellationToken,
    },
    Displacing {
        id: u64,
        cancel: CancellationToken,
        victim: CancellationToken,
        /// The victim is the new connection's address's own (its cap), not the server's.
        own: bool,
    },
    Refused(Refused),
}

impl SlotTable {
    /// Admits a connection from `peer` under the server's `cap` and the address's `per_peer`.
    fn admit(&mut self, cap: usize, per_peer: usize, peer: Peer) -> Admission {
        let held = self.per_peer.get(&peer).copied().unwrap_or(0);
        let victim = if held >= per_peer {
            // At its own cap an address competes only with itself.
            match self.oldest_waiting(|e| e.peer == peer) {
                Some(id) => self.take(id).map(|v| (v, true)),
                None => return Admission::Refused(Refused::PeerFull),
            }
        } else if self.entries.len() >= cap {
            match self.oldest_waiting(|_| true) {
                Some(id) => self.take(id).map(|v| (v, false)),
                None => return Admission::Refused(Refused::Full),
            }
        } else {
            None
        };
        let id = self.next_id;
        self.next_id += 1;
        let since = self.tick();
        let cancel = CancellationToken::new();
        self.entries.insert(
            id,
            Entry {
                state: State::Waiting {
                    served: false,
                    since,
                },
                peer,
                cancel: cancel.clone(),
            },
        );
        *self.per_peer.entry(peer).or_insert(0) += 1;
        match victim {
            None => Admission::Open { id, cancel },
            Some((victim, own)) => Admission::Displacing {
                id,
                cancel,
                victim,
                own,
            },
        }
    }

    /// Of the connections `which` picks, the one to displace: never-served ones first, then the
    /// one waiting longest; never one mid-request.
    fn oldest_waiting(&self, which: impl Fn(&Entry) -> bool) -> Option<u64> {
        self.entries
            .iter()
            .filter(|(_, e)| which(e))
            .filter_map(|(id, e)| match e.state {
                State::Waiting { served, since } => Some(((served, since), *id)),
                State::Busy => None,
            })
            .min()
            .map(|(_, id)| id)
    }

    fn tick(&mut self) -> u64 {
        self.next_since += 1;
        self.next_since
    }

    fn busy(&mut self, id: u64) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.state = State::Busy;
        }
    }

    fn waiting(&mut self, id: u64) {
        let since = self.tick();
        if let Some(e) = self.entries.get_mut(&id) {
            e.state = State::Waiting {
                served: true,
                since,
            };
        }
    }

    /// Removes a connection; its cancel token, to close it.
    fn take(&mut self, id: u64) -> Option<CancellationToken> {
        let e = self.entries.remove(&id)?;
        if let Some(n) = self.per_peer.get_mut(&e.peer) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&e.peer);
            }
        }
        Some(e.cancel)
    }

    fn remove(&mut self, id: u64) {
        self.take(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Peer = Peer(IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1)));
    const B: Peer = Peer(IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 2)));

    fn open(t: &mut SlotTable, cap: usize) -> (u64, CancellationToken) {
        open_as(t, cap, usize::MAX, A)
    }

    fn open_as(
        t: &mut SlotTable,
        cap: usize,
        per_peer: usize,
        peer: Peer,
    ) -> (u64, CancellationToken) {
        match t.admit(cap, per_peer, peer) {
            Admission::Open { id, cancel } => (id, cancel),
            _ => panic!("expected a free slot"),
        }
    }

    #[test]
    fn at_the_cap_the_oldest_never_served_connection_makes_room() {
        let mut t = SlotTable::default();
        let (a, a_cancel) = open(&mut t, 3);
        let (b, b_cancel) = open(&mut t, 3);
        let (c, c_cancel) = open(&mut t, 3);
        // `a` answered a request and waits again (a keep-alive client); `b` and `c` never sent
        // a whole head.
        t.busy(a);
        t.waiting(a);
        match t.admit(3, usize::MAX, A) {
            Admission::Displacing { victim, .. } => {
                victim.cancel();
                assert!(b_cancel.is_cancelled(), "b is the oldest never-served one");
            }
            _ => panic!("a waiting connection makes room"),
        }
        assert!(!a_cancel.is_cancelled() && !c_cancel.is_cancelled());
        assert!(!t.entries.contains_key(&b));
        assert!(t.entries.contains_key(&c));
    }

    #[test]
    fn a_served_connection_goes_once_no_silent_one_is_left_and_busy_ones_never() {
        let mut t = SlotTable::default();
        let (a, a_cancel) = open(&mut t, 2);
        let (b, _) = open(&mut t, 2);
        t.busy(a);
        t.waiting(a);
        t.busy(b);
        let c = match t.admit(2, usize::MAX, A) {
            Admission::Displacing { id, victim, .. } => {
                victim.cancel();
                assert!(a_cancel.is_cancelled(), "the idle keep-alive one goes");
                id
            }
            _ => panic!("a waiting connection makes room"),
        };
        t.busy(c);
        assert!(
            matches!(t.admit(2, usize::MAX, A), Admission::Refused(Refused::Full)),
            "every connection is mid-request: the new one is refused"
        );
        t.remove(b);
        assert!(
            matches!(t.admit(2, usize::MAX, A), Admission::Open { .. }),
            "b's slot is free"
        );
    }

    #[test]
    fn an_address_at_its_cap_displaces_only_its_own_and_is_refused_when_all_are_busy() {
        let mut t = SlotTable::default();
        let (b1, b1_cancel) = open_as(&mut t, 10, 2, B);
        let (a1, _) = open_as(&mut t, 10, 2, A);
        let (_, a2_cancel) = open_as(&mut t, 10, 2, A);
        t.busy(a1);
        // A's third: its own waiting one (a2) goes, never B's older, never-served one.
        match t.admit(10, 2, A) {
            Admission::Displacing { id, victim, .. } => {
                victim.cancel();
                assert!(a2_cancel.is_cancelled());
                t.busy(id);
            }
            _ => panic!("A's waiting connection makes room"),
        }
        assert!(!b1_cancel.is_cancelled());
        assert!(matches!(
            t.admit(10, 2, A),
            Admission::Refused(Refused::PeerFull)
        ));
        // B still gets in, under the same server cap.
        open_as(&mut t, 10, 2, B);
        t.remove(a1);
        assert!(
            matches!(t.admit(10, 2, A), Admission::Open { .. }),
            "a1's place is free again"
        );
        assert_eq!(t.per_peer.get(&A), Some(&2));
        t.remove(b1);
        assert_eq!(t.per_peer.get(&B), Some(&1));
    }

    #[test]
    fn ipv6_addresses_count_by_their_64_and_mapped_ones_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(Peer::of(a), Peer::of(b));
        assert_ne!(Peer::of(a), Peer::of(c));
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(Peer::of(mapped), A);
    }
}
