//! Who is who: the computers the gateway serves, found by the source address of their traffic.
//!
//! This module owns each computer's live state: its policy and limits (swapped atomically by
//! the control plane, read by every new query and connection), its DNS record table (which
//! addresses each allowed name resolved to, until when), its rate buckets, its connection count
//! and its counters. [`Directory`] is the one lookup the servers make (peer address to
//! computer); [`Registry`] is the ready-made implementation.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::limits::{Bucket, Limits};
use crate::policy::{canonical, Policy};
use crate::secrets::SecretSet;
use crate::ComputerId;

/// At most this many (address, name) records per computer; the soonest to expire go first.
pub const MAX_RECORDS: usize = 4096;

/// Finds the computer a query or connection comes from, by its source address.
pub trait Directory: Send + Sync + 'static {
    fn computer_for(&self, peer: IpAddr) -> Option<Arc<Computer>>;
}

/// One computer as the gateway sees it.
pub struct Computer {
    id: ComputerId,
    policy: RwLock<Arc<Policy>>,
    limits: RwLock<Limits>,
    records: Mutex<Records>,
    dns_bucket: Mutex<Bucket>,
    pub(crate) up: Mutex<Bucket>,
    pub(crate) down: Mutex<Bucket>,
    active: AtomicU32,
    counters: Counters,
    secrets: RwLock<Option<Arc<SecretSet>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Computer {
    pub fn new(id: ComputerId, policy: Policy, limits: Limits) -> Computer {
        let now = crate::clock::now();
        Computer {
            id,
            policy: RwLock::new(Arc::new(policy)),
            limits: RwLock::new(limits),
            records: Mutex::new(Records::default()),
            dns_bucket: Mutex::new(Bucket::new(now)),
            up: Mutex::new(Bucket::new(now)),
            down: Mutex::new(Bucket::new(now)),
            active: AtomicU32::new(0),
            counters: Counters::default(),
            secrets: RwLock::new(None),
        }
    }

    pub fn id(&self) -> &ComputerId {
        &self.id
    }

    /// The current policy (a snapshot: a later [`Computer::set_policy`] does not change it).
    pub fn policy(&self) -> Arc<Policy> {
        self.policy
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the policy; the next query and the next connection use the new one.
    /// Connections already spliced are not cut.
    pub fn set_policy(&self, policy: Policy) {
        *self.policy.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(policy);
    }

    /// The secrets whose domains are intercepted for this computer, if any.
    pub fn secrets(&self) -> Option<Arc<SecretSet>> {
        self.secrets
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the secrets (`None`: no interception); applies to new connections.
    pub fn set_secrets(&self, secrets: Option<SecretSet>) {
        *self.secrets.write().unwrap_or_else(PoisonError::into_inner) = secrets.map(Arc::new);
    }

    pub fn limits(&self) -> Limits {
        *self.limits.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn set_limits(&self, limits: Limits) {
        *self.limits.write().unwrap_or_else(PoisonError::into_inner) = limits;
    }

    /// Takes one DNS query token; `false` when over the limit.
    pub(crate) fn take_dns_token(&self, now: Instant) -> bool {
        let limits = self.limits();
        if limits.dns_queries_per_sec == 0 {
            return true;
        }
        let rate = f64::from(limits.dns_queries_per_sec);
        lock(&self.dns_bucket).try_take(now, 1.0, rate, f64::from(limits.dns_burst))
    }

    /// Records that `name` resolved to `ip` for this computer until `expiry`.
    pub fn record(&self, ip: IpAddr, name: &str, expiry: Instant, now: Instant) {
        lock(&self.records).insert(canonical(ip), name, expiry, now);
    }

    /// The names that resolved to `ip` for this computer and have not expired.
    pub fn names_for(&self, ip: IpAddr, now: Instant) -> Vec<String> {
        lock(&self.records).names(canonical(ip), now)
    }

    /// A connection slot, or `None` at the limit. The slot is given back when dropped.
    pub(crate) fn connection_slot(self: &Arc<Self>) -> Option<ConnectionSlot> {
        let max = self.limits().max_connections;
        let taken = self
            .active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            });
        taken.ok().map(|_| ConnectionSlot(self.clone()))
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The computer's counters since it was registered.
    pub fn counter_snapshot(&self) -> CounterSnapshot {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CounterSnapshot {
            connections_allowed: get(&c.connections_allowed),
            connections_denied: get(&c.connections_denied),
            connections_active: self.active.load(Ordering::Relaxed),
            connections_limited: get(&c.connections_limited),
            bytes_up: get(&c.bytes_up),
            bytes_down: get(&c.bytes_down),
            dns_answered: get(&c.dns_answered),
            dns_refused: get(&c.dns_refused),
            dns_rate_limited: get(&c.dns_rate_limited),
        }
    }
}

/// Holds one of a computer's connection slots.
pub(crate) struct ConnectionSlot(Arc<Computer>);

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    pub connections_allowed: AtomicU64,
    pub connections_denied: AtomicU64,
    pub connections_limited: AtomicU64,
    pub bytes_up: AtomicU64,
    pub bytes_down: AtomicU64,
    pub dns_answered: AtomicU64,
    pub dns_refused: AtomicU64,
    pub dns_rate_limited: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// A computer's counters, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CounterSnapshot {
    pub connections_allowed: u64,
    pub connections_denied: u64,
    pub connections_active: u32,
    /// Refused at the concurrent connection limit (also counted in `connections_denied`).
    pub connections_limited: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub dns_answered: u64,
    /// Refused for any reason, the rate limit included.
    pub dns_refused: u64,
    pub dns_rate_limited: u64,
}

impl std::ops::AddAssign for CounterSnapshot {
    /// Sums two computers' counters (a gateway's totals).
    fn add_assign(&mut self, o: CounterSnapshot) {
        self.connections_allowed += o.connections_allowed;
        self.connections_denied += o.connections_denied;
        self.connections_active += o.connections_active;
        self.connections_limited += o.connections_limited;
        self.bytes_up += o.bytes_up;
        self.bytes_down += o.bytes_down;
        self.dns_answered += o.dns_answered;
        self.dns_refused += o.dns_refused;
        self.dns_rate_limited += o.dns_rate_limited;
    }
}

/// Address → names that resolved to it, each with its expiry.
#[derive(Default)]
struct Records {
    by_ip: HashMap<IpAddr, Vec<(String, Instant)>>,
    len: usize,
}

impl Records {
    fn insert(&mut self, ip: IpAddr, name: &str, expiry: Instant, now: Instant) {
        let names = self.by_ip.entry(ip).or_default();
        if let Some(entry) = names.iter_mut().find(|(n, _)| n == name) {
            entry.1 = entry.1.max(expiry);
            return;
        }
        names.push((name.to_string(), expiry));
        self.len += 1;
        if self.len > MAX_RECORDS {
            self.purge(now);
        }
        while self.len > MAX_RECORDS {
            self.evict_soonest();
        }
    }

    fn purge(&mut self, now: Instant) {
        let mut len = 0;
        self.by_ip.retain(|_, names| {
            names.retain(|(_, expiry)| *expiry > now);
            len += names.len();
            !names.is_empty()
        });
        self.len = len;
    }

    fn evict_soonest(&mut self) {
        let soonest = self
            .by_ip
            .iter()
            .flat_map(|(ip, names)| names.iter().map(move |(n, e)| (*e, *ip, n.clone())))
            .min();
        let Some((_, ip, name)) = soonest else {
            self.len = 0;
            return;
        };
        if let Some(names) = self.by_ip.get_mut(&ip) {
            names.retain(|(n, _)| *n != name);
            if names.is_empty() {
                self.by_ip.remove(&ip);
            }
        }
        self.len -= 1;
    }

    fn names(&self, ip: IpAddr, now: Instant) -> Vec<String> {
        self.by_ip
            .get(&ip)
            .map(|names| {
                names
                    .iter()
                    .filter(|(_, e)| *e > now)
                    .map(|(n, _)| n.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

type Registered = (Arc<Computer>, Vec<IpAddr>);

/// The computers this gateway serves, by id and by source address.
#[derive(Default)]
pub struct Registry {
    /// Each computer with the addresses it was registered with.
    by_id: RwLock<HashMap<ComputerId, Registered>>,
    by_addr: RwLock<HashMap<IpAddr, Arc<Computer>>>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Registers a computer reached from `addrs` (its namespace's addresses as the gateway
    /// sees them), replacing any earlier registration of the same id or addresses.
    pub fn add(
        &self,
        id: ComputerId,
        addrs: Vec<IpAddr>,
        policy: Policy,
        limits: Limits,
    ) -> Arc<Computer> {
        self.remove(&id);
        let computer = Arc::new(Computer::new(id.clone(), policy, limits));
        let addrs: Vec<IpAddr> = addrs.into_iter().map(canonical).collect();
        let mut by_addr = self.by_addr.write().unwrap_or_else(PoisonError::into_inner);
        for addr in &addrs {
            by_addr.insert(*addr, computer.clone());
        }
        drop(by_addr);
        self.by_id
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, (computer.clone(), addrs));
        computer
    }

    /// Forgets a computer: its addresses belong to nobody until registered again.
    pub fn remove(&self, id: &ComputerId) -> Option<Arc<Computer>> {
        let (computer, addrs) = self
            .by_id
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id)?;
        let mut by_addr = self.by_addr.write().unwrap_or_else(PoisonError::into_inner);
        for addr in addrs {
            if by_addr
                .get(&addr)
                .is_some_and(|c| Arc::ptr_eq(c, &computer))
            {
                by_addr.remove(&addr);
            }
        }
        Some(computer)
    }

    pub fn get(&self, id: &ComputerId) -> Option<Arc<Computer>> {
        self.by_id
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .map(|(c, _)| c.clone())
    }

    /// The registered computers.
    pub fn computers(&self) -> Vec<Arc<Computer>> {
        self.by_id
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(|(c, _)| c.clone())
            .collect()
    }

    /// Sets a registered computer's policy; `false` if there is no such computer.
    pub fn set_policy(&self, id: &ComputerId, policy: Policy) -> bool {
        self.get(id).map(|c| c.set_policy(policy)).is_some()
    }

    pub fn set_limits(&self, id: &ComputerId, limits: Limits) -> bool {
        self.get(id).map(|c| c.set_limits(limits)).is_some()
    }
}

impl Directory for Registry {
    fn computer_for(&self, peer: IpAddr) -> Option<Arc<Computer>> {
        self.by_addr
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&canonical(peer))
            .cloned()
    }
}

/// How long a resolution is remembered: its TTL, but at least `min` (clients cache longer than
/// they are told, and a record forgotten too early breaks their connections).
pub fn record_lifetime(ttl: u32, min: Duration) -> Duration {
    Duration::from_secs(u64::from(ttl)).max(min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_expire_and_stay_bounded() {
        let t0 = crate::clock::now();
        let c = Computer::new(ComputerId::new("c-1"), Policy::open(), Limits::default());
        let ip: IpAddr = "203.0.113.10".parse().unwrap();
        c.record(ip, "allowed.test", t0 + Duration::from_secs(10), t0);
        assert_eq!(c.names_for(ip, t0), vec!["allowed.test".to_string()]);
        // The IPv4-mapped form is the same address.
        assert_eq!(
            c.names_for("::ffff:203.0.113.10".parse().unwrap(), t0)
                .len(),
            1
        );
        assert!(c.names_for(ip, t0 + Duration::from_secs(11)).is_empty());
        for i in 0..(MAX_RECORDS + 10) {
            let ip = IpAddr::from([198, 51, (i / 256) as u8, (i % 256) as u8]);
            c.record(
                ip,
                "many.test",
                t0 + Duration::from_secs(100 + i as u64),
                t0,
            );
        }
        assert!(lock(&c.records).len <= MAX_RECORDS);
        // The soonest to expire went first.
        assert!(c.names_for(IpAddr::from([198, 51, 0, 0]), t0).is_empty());
    }

    #[test]
    fn connection_slots_stop_at_the_limit_and_come_back() {
        let limits = Limits {
            max_connections: 2,
            ..Limits::default()
        };
        let c = Arc::new(Computer::new(
            ComputerId::new("c-1"),
            Policy::open(),
            limits,
        ));
        let a = c.connection_slot();
        let b = c.connection_slot();
        assert!(a.is_some() && b.is_some());
        assert!(c.connection_slot().is_none());
        drop(a);
        assert!(c.connection_slot().is_some());
    }

    #[test]
    fn registry_finds_by_address_and_forgets() {
        let r = Registry::new();
        let id = ComputerId::new("c-1");
        r.add(
            id.clone(),
            vec!["127.0.0.2".parse().unwrap()],
            Policy::none(),
            Limits::default(),
        );
        assert!(r.computer_for("127.0.0.2".parse().unwrap()).is_some());
        assert!(r
            .computer_for("::ffff:127.0.0.2".parse().unwrap())
            .is_some());
        assert!(r.computer_for("127.0.0.3".parse().unwrap()).is_none());
        assert!(r.set_policy(&id, Policy::open()));
        assert_eq!(*r.get(&id).unwrap().policy(), Policy::open());
        r.remove(&id);
        assert!(r.computer_for("127.0.0.2".parse().unwrap()).is_none());
    }
}
