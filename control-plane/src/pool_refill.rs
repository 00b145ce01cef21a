//! Keeps every warm pool at its size (docs/pools.md#refill): boots the members missing, replaces
//! a member whose guest is lost, destroys members beyond the size.
//!
//! One task per control plane, woken by a hand-out, a new or resized pool (`Core::pool_wake`) and
//! every [`TICK`]. With replicas on one PostgreSQL, a pool is refilled by the replica that holds
//! its refill claim (`PoolStore::claim_refill`, renewed each round), so two replicas never boot
//! one pool's members twice. At most [`PARALLEL_BOOTS`] members of a pool boot at once, and a
//! pool whose boots fail waits longer before each next try (up to [`MAX_BACKOFF`]).

use crate::clock::{monotonic, now_ms};
use crate::computers::{new_computer_id, ComputerId, ComputerState, PoolName};
use crate::core::{Core, GUEST_LOSS_GRACE};
use crate::pools::Pool;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tracing::{info, warn};

/// How often every pool is looked at without being woken.
const TICK: Duration = Duration::from_secs(2);
/// How long a replica's refill claim on a pool lasts unless renewed.
const CLAIM: Duration = Duration::from_secs(30);
/// How many members of one pool boot at once.
const PARALLEL_BOOTS: usize = 2;
/// How long a member may stay not ready (not booting here) before it is taken as lost: past
/// the tunnel's own grace for a guest that dials in again.
const LOST_AFTER: Duration = GUEST_LOSS_GRACE.saturating_add(Duration::from_secs(5));
/// The longest wait after failed boots.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// What the refiller remembers of one pool between rounds.
#[derive(Default)]
struct PoolState {
    /// Members booting now (their ids, reserved before their rows exist).
    booting: HashSet<ComputerId>,
    /// Members seen not ready (and not booting), since when.
    unready: HashMap<ComputerId, Instant>,
    /// Failed boots in a row, and when the next may start.
    failures: u32,
    not_before: Option<Instant>,
}

type States = Arc<Mutex<HashMap<PoolName, PoolState>>>;

/// Starts the refiller.
pub fn spawn(core: Arc<Core>) {
    let owner = match &core.cluster {
        Some(c) => c.me().id.clone(),
        None => "this".to_string(),
    };
    tokio::spawn(async move {
        let states: States = Arc::default();
        loop {
            round(&core, &owner, &states).await;
            tokio::select! {
                _ = core.pool_wake.notified() => {}
                _ = tokio::time::sleep(TICK) => {}
            }
        }
    });
}

async fn round(core: &Arc<Core>, owner: &str, states: &States) {
    let pools = match core.pools.list().await {
        Ok(p) => p,
        Err(e) => {
            warn!(error = %e, "pool refiller could not list the pools");
            return;
        }
    };
    {
        let names: HashSet<&PoolName> = pools.iter().map(|p| &p.name).collect();
        lock(states).retain(|name, _| names.contains(name));
    }
    let now = now_ms();
    let until = now.saturating_add(i64::try_from(CLAIM.as_millis()).unwrap_or(i64::MAX));
    for pool in pools {
        match core.pools.claim_refill(&pool.name, owner, now, until).await {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                warn!(pool = %pool.name, error = %e, "pool refiller could not claim the pool");
                continue;
            }
        }
        if let Err(e) = refill(core, &pool, states).await {
            warn!(pool = %pool.name, error = %e, "pool refill failed");
        }
    }
}

fn lock(states: &States) -> std::sync::MutexGuard<'_, HashMap<PoolName, PoolState>> {
    states.lock().unwrap_or_else(|e| e.into_inner())
}

async fn refill(
    core: &Arc<Core>,
    pool: &Pool,
    states: &States,
) -> Result<(), crate::core::CoreError> {
    let members = core.pool_members(&pool.name).await?;
    let now = Instant::now();
    let mut lost = Vec::new();
    let mut extra = Vec::new();
    let boots = {
        let mut all = lock(states);
        let st = all.entry(pool.name.clone()).or_default();
        let listed: HashSet<&ComputerId> = members.iter().map(|(c, _)| &c.id).collect();
        st.unready.retain(|id, _| listed.contains(id));
        let mut ready = 0u64;
        for (c, is_ready) in &members {
            if *is_ready {
                ready += 1;
                st.unready.remove(&c.id);
            } else if !st.booting.contains(&c.id) {
                let since = *st.unready.entry(c.id.clone()).or_insert(now);
                let stopped = c.state == ComputerState::Stopped;
                if stopped || now.saturating_duration_since(since) >= LOST_AFTER {
                    lost.push(c.id.clone());
                }
            }
        }
        // Members beyond the size: the not-ready ones first, then the newest.
        let kept = members.len().saturating_sub(lost.len());
        let size = pool.size as usize;
        if kept > size {
            let mut candidates: Vec<&ComputerId> = members
                .iter()
                .filter(|(c, _)| !lost.contains(&c.id) && !st.booting.contains(&c.id))
                .map(|(c, _)| &c.id)
                .collect();
            candidates.sort_by_key(|id| members.iter().any(|(c, r)| &c.id == *id && *r));
            extra = candidates.into_iter().take(kept - size).cloned().collect();
        }
        for id in lost.iter().chain(&extra) {
            st.unready.remove(id);
        }
        // Booting members whose rows do not exist yet count too.
        let pending = st.booting.iter().filter(|id| !listed.contains(id)).count();
        let have = kept.saturating_sub(extra.len()) + pending;
        let deficit = size.saturating_sub(have);
        let room = PARALLEL_BOOTS.saturating_sub(st.booting.len());
        let waiting = st.not_before.is_some_and(|t| now < t);
        let boots: Vec<ComputerId> = if waiting {
            Vec::new()
        } else {
            (0..deficit.min(room)).map(|_| new_computer_id()).collect()
        };
        st.booting.extend(boots.iter().cloned());
        let starting = (members.len() as u64).saturating_sub(ready) + pending as u64;
        core.metrics
            .pool_members(pool.name.as_str(), ready, starting + boots.len() as u64);
        boots
    };
    for id in lost {
        info!(pool = %pool.name, computer_id = %id, "warm pool member lost (its guest is gone): replacing it");
        core.drop_member(&pool.name, &id).await;
    }
    for id in extra {
        info!(pool = %pool.name, computer_id = %id, "warm pool member beyond the pool's size: destroying it");
        core.drop_member(&pool.name, &id).await;
    }
    for id in boots {
        tokio::spawn(boot(core.clone(), pool.clone(), id, states.clone()));
    }
    Ok(())
}

async fn boot(core: Arc<Core>, pool: Pool, id: ComputerId, states: States) {
    let started = monotonic();
    let result = core.boot_pool_member(&pool, id.clone()).await;
    let took = monotonic().saturating_duration_since(started);
    {
        let mut all = lock(&states);
        let st = all.entry(pool.name.clone()).or_default();
        st.booting.remove(&id);
        match &result {
            Ok(_) => {
                st.failures = 0;
                st.not_before = None;
            }
            Err(_) => {
                st.failures = st.failures.saturating_add(1);
                let wait = Duration::from_secs(1u64 << st.failures.min(6)).min(MAX_BACKOFF);
                st.not_before = Some(Instant::now() + wait);
            }
        }
    }
    match result {
        Ok(c) => {
            core.metrics.pool_refill(pool.name.as_str(), took);
            info!(pool = %pool.name, computer_id = %c.id, took_ms = took.as_millis() as u64, "warm pool member ready");
        }
        Err(e) => {
            // Destroyed while it booted (its pool deleted or shrunk): nothing went wrong.
            let gone = matches!(
                core.computers.get(&id).await,
                Ok(Some(c)) if c.state == ComputerState::Destroyed
            ) || matches!(core.pools.get(&pool.name).await, Ok(None));
            if gone {
                info!(pool = %pool.name, computer_id = %id, "warm pool member destroyed while it booted");
            } else {
                warn!(pool = %pool.name, computer_id = %id, error = %e, "warm pool member did not boot")
            }
        }
    }
    core.pool_wake.notify_one();
}
