//! Several control planes on one PostgreSQL: which replicas are alive, which one each guest is
//! connected to, and reaching a guest connected to another replica (`peer`).
//!
//! Every replica registers itself in `replicas` (migration 0008) and heartbeats every
//! [`HEARTBEAT`]; one silent for `dead_after` is dead: its guest links and claims count for
//! nothing. When a guest connects, its replica records the link in `guest_links` (the newest
//! connection wins, as in one process). Any replica serves any request: an operation on a
//! computer whose guest is connected elsewhere opens its stream through that replica over the
//! peer link (`peer`: QUIC between replicas, pinned to the cluster's shared tunnel certificate
//! and authenticated with a key derived from the shared capability key), which splices it onto
//! a stream to the guest byte for byte, resets and stops included. So every decision (leases,
//! deadlines, checkpoints) is made where the request arrived, and the replica holding the guest
//! only relays; an operation in flight when that replica dies is lost (`uncertain`), and the
//! next one waits for the guest to reconnect (to any replica: guests know them all, see
//! [`Cluster::other_tunnel_addrs`]).
//!
//! Exclusive work (idle suspension, a home's checkpoint, the reconciler) takes claims in the
//! database (`crate::claims`). Shared secrets are checked at start ([`Cluster::check_secrets`]).
//! This module knows nothing of the core: the core calls it.
//!
//! The claims, one row per `(kind, subject)`, fenced and expiring: `idle/<computer>` (the idle
//! job of the replica holding the guest), `home/<computer>` (checkpoints and restores; the
//! reconciler leaves a home alone while any replica holds it), `boot/<computer>` (start-up
//! recovery restarts a machine only if its guest is connected nowhere), `lifecycle/<computer>`
//! (stop, start, destroy and a new takeover against a job's creation) and `evict/<computer>`
//! (one screen eviction at a time). A replica that dies holds nothing longer than a claim's
//! time to live.
//!
//! Which replica holds a guest is read at most once a heartbeat per computer
//! ([`Cluster::where_is_recent`]) and forgotten as soon as that replica does not take an
//! operation or its relay fails ([`Cluster::forget_link`]). A replica given SIGTERM drains: it is
//! marked `draining`, closes its guests' connections with `serve::CLOSE_DRAINING` (they dial
//! another replica at once), leaves the table and exits. At start a replica with other secrets
//! than the first one's (`cluster_secrets`) is refused, as is one whose homes would be local to
//! its data dir while others run.

pub mod peer;

use crate::claims::Claims;
use crate::clock::now_ms;
use crate::db::{column, Db, DbError};
use crate::tunnel::Registry;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tracing::{info, warn};

/// How often a replica records that it is alive.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// A replica silent this long is dead, unless configured otherwise.
pub const DEFAULT_DEAD_AFTER: Duration = Duration::from_secs(5);
/// How long a forwarded operation trusts the replica last looked up for its guest before it
/// asks the database again: one heartbeat. A guest that moved meanwhile costs no operation: the
/// replica it left answers `NotHere` before any byte is sent, and the entry is forgotten.
pub const LINK_CACHE: Duration = HEARTBEAT;
/// Past this many remembered links, expired ones are dropped before another is added.
const LINK_CACHE_PRUNE_AT: usize = 4096;

/// Another replica, as the database knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    pub id: String,
    pub tunnel_addr: SocketAddr,
    pub peer_addr: SocketAddr,
}

/// This replica's view of the cluster.
pub struct Cluster {
    db: Db,
    me: Replica,
    dead_after: Duration,
    pub registry: Arc<Registry>,
    pub peers: peer::Peers,
    pub claims: Claims,
    /// Recent look-ups of guests connected to other replicas ([`Cluster::where_is_recent`]).
    links: Mutex<HashMap<String, RecentLink>>,
}

/// A replica found holding a computer's guest, and when.
struct RecentLink {
    replica: Replica,
    read_at: tokio::time::Instant,
}

/// A new replica id: `r-` and 16 hex digits.
pub fn new_replica_id() -> String {
    format!("r-{}", hex::encode(rand::random::<[u8; 8]>()))
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Replica {
    /// A row with `id`, `tunnel_addr` and `peer_addr` columns.
    fn from_row(row: &sqlx::any::AnyRow) -> Result<Self, DbError> {
        let id: String = column(row, "replicas", "?", "id")?;
        let addr = |name: &str| -> Result<SocketAddr, DbError> {
            let text: String = column(row, "replicas", &id, name)?;
            text.parse()
                .map_err(|_| DbError::corrupt("replicas", &id, format!("{name} {text:?}")))
        };
        Ok(Self {
            tunnel_addr: addr("tunnel_addr")?,
            peer_addr: addr("peer_addr")?,
            id,
        })
    }
}

impl Cluster {
    pub fn new(
        db: Db,
        me: Replica,
        dead_after: Duration,
        registry: Arc<Registry>,
        peers: peer::Peers,
        claims: Claims,
    ) -> Self {
        Self {
            db,
            me,
            dead_after,
            registry,
            peers,
            claims,
            links: Mutex::new(HashMap::new()),
        }
    }

    /// This replica.
    pub fn me(&self) -> &Replica {
        &self.me
    }

    /// Records the secrets every replica must share; refuses when this replica's differ from
    /// those the first replica recorded, naming the files to copy.
    pub async fn check_secrets(&self, secrets: &[(&str, &[u8])]) -> anyhow::Result<()> {
        for (name, bytes) in secrets {
            let sha = hex::encode(Sha256::digest(bytes));
            sqlx::query(
                "INSERT INTO cluster_secrets (name, sha256) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
            )
            .bind(*name)
            .bind(&sha)
            .execute(self.db.pool())
            .await?;
            let row = sqlx::query("SELECT sha256 FROM cluster_secrets WHERE name = $1")
                .bind(*name)
                .fetch_one(self.db.pool())
                .await?;
            let recorded: String = column(&row, "cluster_secrets", name, "sha256")?;
            if recorded != sha {
                anyhow::bail!(
                    "refusing to start: this replica's {name} differs from the one the other \
                     replicas on this database share; every replica needs the same api-token, \
                     capability-key, tunnel-cert.pem and tunnel-key.pem: copy them from a running \
                     replica's data dir (mode 0600) into this one"
                );
            }
        }
        Ok(())
    }

    /// Registers this replica and keeps its heartbeat until the process ends.
    pub async fn register(self: &Arc<Self>) -> Result<(), DbError> {
        self.beat(true).await?;
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(HEARTBEAT).await;
                if let Err(e) = me.beat(false).await {
                    warn!(error = %e, "replica heartbeat failed; other replicas take this one for dead after {} s", me.dead_after.as_secs());
                }
            }
        });
        info!(replica = %self.me.id, tunnel = %self.me.tunnel_addr, peer = %self.me.peer_addr, "replica registered");
        Ok(())
    }

    async fn beat(&self, first: bool) -> Result<(), DbError> {
        let now = now_ms();
        let updated = sqlx::query("UPDATE replicas SET heartbeat_at = $2 WHERE id = $1")
            .bind(&self.me.id)
            .bind(now)
            .execute(self.db.pool())
            .await?;
        if first || updated.rows_affected() == 0 {
            sqlx::query(
                "INSERT INTO replicas (id, tunnel_addr, peer_addr, started_at, heartbeat_at) \
                 VALUES ($1, $2, $3, $4, $4) ON CONFLICT (id) DO UPDATE SET heartbeat_at = $4",
            )
            .bind(&self.me.id)
            .bind(self.me.tunnel_addr.to_string())
            .bind(self.me.peer_addr.to_string())
            .bind(now)
            .execute(self.db.pool())
            .await?;
            // Dead replicas' rows go, with their guests' links (their guests dial again).
            let cutoff = now - ms(self.dead_after) * 4;
            sqlx::query(
                "DELETE FROM guest_links WHERE replica_id IN (SELECT id FROM replicas WHERE heartbeat_at < $1)",
            )
            .bind(cutoff)
            .execute(self.db.pool())
            .await?;
            sqlx::query("DELETE FROM replicas WHERE heartbeat_at < $1")
                .bind(cutoff)
                .execute(self.db.pool())
                .await?;
        }
        Ok(())
    }

    /// Marks this replica as draining: no longer handed to new guests.
    pub async fn drain(&self) -> Result<(), DbError> {
        sqlx::query("UPDATE replicas SET draining = 1 WHERE id = $1")
            .bind(&self.me.id)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// Forgets this replica (a clean shutdown): its links go with it.
    pub async fn leave(&self) -> Result<(), DbError> {
        sqlx::query("DELETE FROM guest_links WHERE replica_id = $1")
            .bind(&self.me.id)
            .execute(self.db.pool())
            .await?;
        sqlx::query("DELETE FROM replicas WHERE id = $1")
            .bind(&self.me.id)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// The live replicas other than this one, not draining, oldest first.
    pub async fn others(&self) -> Result<Vec<Replica>, DbError> {
        let rows = sqlx::query(
            "SELECT id, tunnel_addr, peer_addr FROM replicas WHERE id <> $1 AND heartbeat_at > $2 \
             AND draining = 0 ORDER BY started_at, id",
        )
        .bind(&self.me.id)
        .bind(now_ms() - ms(self.dead_after))
        .fetch_all(self.db.pool())
        .await?;
        rows.iter().map(Replica::from_row).collect()
    }

    /// Where guests of new machines may also dial: every other live replica's tunnel.
    pub async fn other_tunnel_addrs(&self) -> Vec<SocketAddr> {
        match self.others().await {
            Ok(others) => others.into_iter().map(|r| r.tunnel_addr).collect(),
            Err(e) => {
                warn!(error = %e, "could not list the other replicas; new guests know only this one");
                Vec::new()
            }
        }
    }

    /// Records that `computer`'s guest is connected here (or no longer is).
    pub async fn set_link(&self, computer: &str, connected: bool) -> Result<(), DbError> {
        if connected {
            sqlx::query(
                "INSERT INTO guest_links (computer_id, replica_id, connected_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (computer_id) DO UPDATE SET replica_id = $2, connected_at = $3",
            )
            .bind(computer)
            .bind(&self.me.id)
            .bind(now_ms())
            .execute(self.db.pool())
            .await?;
        } else {
            sqlx::query("DELETE FROM guest_links WHERE computer_id = $1 AND replica_id = $2")
                .bind(computer)
                .bind(&self.me.id)
                .execute(self.db.pool())
                .await?;
        }
        Ok(())
    }

    /// The live replica `computer`'s guest is connected to, if any (this one included).
    pub async fn where_is(&self, computer: &str) -> Result<Option<Replica>, DbError> {
        let row = sqlx::query(
            "SELECT r.id AS id, r.tunnel_addr AS tunnel_addr, r.peer_addr AS peer_addr \
             FROM guest_links g JOIN replicas r ON r.id = g.replica_id \
             WHERE g.computer_id = $1 AND r.heartbeat_at > $2",
        )
        .bind(computer)
        .bind(now_ms() - ms(self.dead_after))
        .fetch_optional(self.db.pool())
        .await?;
        row.as_ref().map(Replica::from_row).transpose()
    }

    /// [`Cluster::where_is`] for a forwarded operation: the other replica found for `computer`
    /// within the last [`LINK_CACHE`], else the database's answer (remembered when it is
    /// another replica). The caller forgets the entry ([`Cluster::forget_link`]) when that
    /// replica does not take the operation.
    pub async fn where_is_recent(&self, computer: &str) -> Result<Option<Replica>, DbError> {
        if let Some(link) = self.links().get(computer) {
            if link.read_at.elapsed() < LINK_CACHE {
                return Ok(Some(link.replica.clone()));
            }
        }
        let found = self.where_is(computer).await?;
        match &found {
            Some(r) if r.id != self.me.id => {
                let mut links = self.links();
                if links.len() >= LINK_CACHE_PRUNE_AT {
                    links.retain(|_, l| l.read_at.elapsed() < LINK_CACHE);
                }
                links.insert(
                    computer.to_owned(),
                    RecentLink {
                        replica: r.clone(),
                        read_at: tokio::time::Instant::now(),
                    },
                );
            }
            _ => self.forget_link(computer),
        }
        Ok(found)
    }

    /// Drops what [`Cluster::where_is_recent`] remembers of `computer`'s guest.
    pub fn forget_link(&self, computer: &str) {
        self.links().remove(computer);
    }

    fn links(&self) -> std::sync::MutexGuard<'_, HashMap<String, RecentLink>> {
        self.links.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `computer`'s guest is connected to a live replica (this one included).
    pub async fn is_connected(&self, computer: &str) -> bool {
        if self.registry.get(computer).is_some() {
            return true;
        }
        match self.where_is(computer).await {
            Ok(r) => r.is_some_and(|r| r.id != self.me.id),
            Err(e) => {
                warn!(computer_id = computer, error = %e, "could not look up the guest's replica");
                false
            }
        }
    }

    /// Waits until `computer`'s guest is connected to a live replica, up to `timeout`.
    pub async fn wait_connected(&self, computer: &str, timeout: Duration) -> bool {
        let until = tokio::time::Instant::now() + timeout;
        loop {
            if self.is_connected(computer).await {
                return true;
            }
            if tokio::time::Instant::now() >= until {
                return false;
            }
            self.registry.changed_or(peer::RESOLVE_POLL).await;
        }
    }

    /// The computers whose guests are connected to replicas that are no longer alive: after a
    /// replica died, they are shown disconnected until their guests dial in again.
    pub async fn orphaned_links(&self) -> Result<Vec<String>, DbError> {
        let rows = sqlx::query(
            "SELECT g.computer_id AS computer_id FROM guest_links g LEFT JOIN replicas r \
             ON r.id = g.replica_id WHERE r.id IS NULL OR r.heartbeat_at <= $1",
        )
        .bind(now_ms() - ms(self.dead_after))
        .fetch_all(self.db.pool())
        .await?;
        rows.iter()
            .map(|r| column(r, "guest_links", "?", "computer_id"))
            .collect()
    }
}

/// The key replicas authenticate to each other with: derived from the capability key every
/// replica shares, so it needs no file of its own, and never the capability key itself.
pub fn peer_key(capability_key: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"rakazo peer key v1\0");
    h.update(capability_key);
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing;

    fn replica(db: &Db, id: &str) -> Arc<Cluster> {
        let peers = peer::Peers::new(
            [7; 32],
            id.to_owned(),
            &"00".repeat(32),
            Duration::from_secs(5),
        )
        .expect("peer endpoint");
        Arc::new(Cluster::new(
            db.clone(),
            Replica {
                id: id.to_owned(),
                tunnel_addr: "127.0.0.1:1".parse().expect("addr"),
                peer_addr: "127.0.0.1:2".parse().expect("addr"),
            },
            DEFAULT_DEAD_AFTER,
            Registry::new(),
            peers,
            Claims::new(db.clone(), id, Duration::from_secs(30)),
        ))
    }

    /// A forwarded open asks the database for its guest's replica at most once per
    /// [`LINK_CACHE`]; a forgotten link, or an old one, is read again.
    #[tokio::test]
    async fn a_guests_replica_is_read_once_per_heartbeat_unless_forgotten() {
        let db = testing::sqlite().await.expect("db");
        let (a, b) = (replica(&db, "r-a"), replica(&db, "r-b"));
        a.register().await.expect("register a");
        b.register().await.expect("register b");
        b.set_link("c-1", true).await.expect("link");
        let found = a.where_is_recent("c-1").await.expect("look-up");
        assert_eq!(found.as_ref().map(|r| r.id.as_str()), Some("r-b"));

        // The guest leaves r-b: the database says so at once, the recent look-up not yet.
        b.set_link("c-1", false).await.expect("unlink");
        assert_eq!(a.where_is("c-1").await.expect("look-up"), None);
        let recent = a.where_is_recent("c-1").await.expect("look-up");
        assert_eq!(recent, found, "read again within the heartbeat");

        // Forgotten (r-b did not take an operation), it is read again.
        a.forget_link("c-1");
        assert_eq!(a.where_is_recent("c-1").await.expect("look-up"), None);

        // Remembered again, then older than a heartbeat: read again.
        b.set_link("c-1", true).await.expect("link");
        assert_eq!(a.where_is_recent("c-1").await.expect("look-up"), found);
        b.set_link("c-1", false).await.expect("unlink");
        tokio::time::sleep(LINK_CACHE + Duration::from_millis(50)).await;
        assert_eq!(a.where_is_recent("c-1").await.expect("look-up"), None);

        // A guest connected here is never remembered as elsewhere.
        a.set_link("c-2", true).await.expect("link");
        let here = a.where_is_recent("c-2").await.expect("look-up");
        assert_eq!(here.map(|r| r.id), Some("r-a".to_owned()));
        assert!(a.links().is_empty());
    }
}
