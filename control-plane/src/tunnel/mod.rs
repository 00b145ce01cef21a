//! The control plane's end of the QUIC tunnel: accepting guests, and one stream per operation.
//!
//! Guests dial in. [`serve`] accepts connections, runs the handshake of
//! [`gateway_proto::ControlHandshake`] against a [`GuestAuth`] (the computer store) and keeps
//! each accepted connection in the [`Registry`], replacing an older connection of the same
//! computer. Operations open their own bidirectional stream with [`GuestConn::open`] and talk
//! through an [`OpStream`]. This module knows nothing of HTTP or of what operations mean; it
//! turns transport failures into [`TunnelError`]s that say whether an outcome is uncertain.
//!
//! Everything a guest sends is untrusted: frames are bounded by the decoder, a malformed frame
//! ends that stream (or, on the control stream, that connection) and nothing else.
//!
//! Every wait on a guest has a deadline ([`Registry::guest_timeout`], `--guest-timeout-secs`):
//! opening a stream, each answer, each next piece of a byte stream, each write the guest must
//! take. A guest that answers and then goes silent fails that operation with
//! [`TunnelError::Timeout`] and its stream is reset; nothing waits on it forever. The deadlines
//! of a stream follow from its request ([`Deadlines::for_request`]): exec is bounded by its
//! command's timeout (a long quiet command is legitimate), an open live stream by nothing (a
//! static screen is quiet; revocation closes it), a batch of actions by its own waits.
//!
//! Lease pushes are not a lossy queue: each connection keeps the latest lease per bot and a
//! notification, and its control loop sends whatever changed, so a push is never dropped. On
//! every hello the live leases of the computer ([`GuestAuth::live_leases`]) are pushed first, so
//! a restarted guest learns its fences before any operation reaches it.

mod accept;
mod deadlines;
mod slots;
mod stream;

pub use accept::{bind, serve, Listening};
pub use deadlines::Deadlines;
pub use stream::{OpReceiver, OpSender, OpStream};

use deadlines::within;
use gateway_proto::{BotId, ControlMsg, LeaseToken, OpError, Request, Secret};
use slots::LeaseSlots;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// How long the control plane waits on a guest unless configured otherwise: for an answer, for
/// the next bytes of a stream, for a write to be taken. Generous: a guest quiesces browsers
/// (up to 20 s each) and walks the home before answering an export.
pub const DEFAULT_GUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// QUIC application close code of a connection replaced or disconnected by the control plane.
const CLOSE_SUPERSEDED: u32 = 2;

/// Checks guest credentials and records connectivity; implemented over the computer store.
pub trait GuestAuth: Send + Sync + 'static {
    /// Whether `token` is the enrollment token of a live computer `computer_id`.
    fn verify(&self, computer_id: &str, token: &Secret) -> impl Future<Output = bool> + Send;
    /// Records that the computer's guest connected or disconnected. Disconnected is reported
    /// only for a connection that ended by itself: one the control plane closed
    /// ([`Registry::disconnect`], [`Registry::close_all`]) or a newer one replaced is forgotten
    /// before it ends, and reports nothing.
    fn set_connected(&self, computer_id: &str, connected: bool) -> impl Future<Output = ()> + Send;
    /// The live execution leases of the computer's bots, pushed to its guest on every hello so
    /// a restarted guest refuses stale fences at once. An error is the implementor's to log;
    /// it returns what it could read.
    fn live_leases(
        &self,
        computer_id: &str,
    ) -> impl Future<Output = Vec<(BotId, LeaseToken)>> + Send;
}

/// Why an operation over the tunnel failed.
#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    #[error("computer {0} is not connected")]
    NotConnected(String),
    /// The connection dropped after the request was sent: the guest may or may not have acted.
    #[error("connection to computer {0} was lost during the operation; its outcome is uncertain")]
    Lost(String),
    /// The guest sent something that breaks the protocol; the stream was reset.
    #[error("computer {computer} broke the protocol: {detail}")]
    Protocol { computer: String, detail: String },
    /// The guest did not answer, send on or take bytes within the deadline; the stream was
    /// reset. It may have acted.
    #[error("the guest of computer {computer} did not answer within {} s", waited.as_secs_f64().ceil())]
    Timeout { computer: String, waited: Duration },
    /// Idle suspension claimed the computer at the replica its guest is connected to; nothing
    /// was sent.
    #[error("computer {0} is being suspended after being idle (home checkpoint, then stop); once it is stopped, start it again")]
    Suspending(String),
    /// The guest refused or failed the operation.
    #[error(transparent)]
    Guest(#[from] OpError),
}

impl TunnelError {
    /// Whether the guest may have carried out (part of) the operation.
    pub fn is_uncertain(&self) -> bool {
        matches!(
            self,
            Self::Lost(_) | Self::Protocol { .. } | Self::Timeout { .. }
        )
    }
}

/// One connected guest.
pub struct GuestConn {
    computer: String,
    conn: quinn::Connection,
    /// Leases to push, latest per bot: the control loop sends the unsent ones.
    leases: Mutex<LeaseSlots>,
    leases_changed: Notify,
    epoch: u64,
    timeout: Duration,
}

impl GuestConn {
    pub fn computer(&self) -> &str {
        &self.computer
    }

    /// The base deadline of waits on this guest.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Opens a stream for one operation and sends its request frame, with the deadlines
    /// [`Deadlines::for_request`] gives it.
    pub async fn open(&self, req: &Request) -> Result<OpStream, TunnelError> {
        let (send, recv) = self.open_raw().await?;
        OpStream::start(self.computer.clone(), send, recv, req, self.timeout).await
    }

    /// Opens a bare stream to the guest (a replica relaying another's operation sends the
    /// request itself).
    pub async fn open_raw(&self) -> Result<(quinn::SendStream, quinn::RecvStream), TunnelError> {
        // A guest that grants no stream (its concurrency limit) is as silent as one that does
        // not answer.
        within(Some(self.timeout), &self.computer, self.conn.open_bi())
            .await?
            .map_err(|_| TunnelError::NotConnected(self.computer.clone()))
    }

    /// Tells the guest `bot`'s lease: granted (`released` false) or released. Never lost: the
    /// latest word per bot is kept until the control loop has sent it, and an older lease
    /// (a lower fence) never replaces a newer one.
    pub fn push_lease(&self, bot: &BotId, token: &LeaseToken, released: bool) {
        let changed = self
            .leases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(bot, token, released);
        if changed {
            self.leases_changed.notify_one();
        }
    }

    /// The control messages of every lease not sent yet, marking them sent.
    fn unsent_leases(&self) -> Vec<ControlMsg> {
        self.leases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_unsent()
    }
}

/// Connected guests by computer id.
pub struct Registry {
    inner: Mutex<HashMap<String, Arc<GuestConn>>>,
    changed: watch::Sender<u64>,
    epochs: AtomicU64,
    guest_timeout: Duration,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            inner: Mutex::default(),
            changed: watch::Sender::default(),
            epochs: AtomicU64::default(),
            guest_timeout: DEFAULT_GUEST_TIMEOUT,
        }
    }
}

impl Registry {
    /// A registry whose guests get [`DEFAULT_GUEST_TIMEOUT`].
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A registry whose waits on guests are bounded by `guest_timeout` (see the module doc).
    pub fn with_guest_timeout(guest_timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            guest_timeout,
            ..Self::default()
        })
    }

    /// The base deadline of every wait on a guest.
    pub fn guest_timeout(&self) -> Duration {
        self.guest_timeout
    }

    /// The live connection of a computer, if any.
    pub fn get(&self, computer: &str) -> Option<Arc<GuestConn>> {
        let map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        map.get(computer)
            .filter(|c| c.conn.close_reason().is_none())
            .cloned()
    }

    /// How many guests are connected (the `rakazo_connected_guests` gauge).
    pub fn len(&self) -> usize {
        let map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        map.values()
            .filter(|c| c.conn.close_reason().is_none())
            .count()
    }

    /// Whether no guest is connected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The live connection, or `NotConnected`.
    pub fn require(&self, computer: &str) -> Result<Arc<GuestConn>, TunnelError> {
        self.get(computer)
            .ok_or_else(|| TunnelError::NotConnected(computer.to_string()))
    }

    /// Waits until the computer's guest is connected, up to `timeout`.
    pub async fn wait_connected(
        &self,
        computer: &str,
        timeout: Duration,
    ) -> Result<Arc<GuestConn>, TunnelError> {
        let mut rx = self.changed.subscribe();
        let wait = async {
            loop {
                if let Some(c) = self.get(computer) {
                    return c;
                }
                if rx.changed().await.is_err() {
                    // The registry lives as long as the server; keep polling its map.
                    tokio::task::yield_now().await;
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| TunnelError::NotConnected(computer.to_string()))
    }

    /// Returns when the registry changes (a guest connected or left), or after `at_most`.
    pub async fn changed_or(&self, at_most: Duration) {
        let mut rx = self.changed.subscribe();
        let _ = tokio::time::timeout(at_most, rx.changed()).await;
    }

    /// Closes every guest connection with `code` (a draining replica sends its guests
    /// elsewhere).
    pub fn close_all(&self, code: u32, reason: &[u8]) {
        let all: Vec<_> = self
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .collect();
        for (_, c) in all {
            c.conn.close(code.into(), reason);
        }
        self.changed.send_modify(|v| *v += 1);
    }

    /// Closes a computer's connection (stop, destroy).
    pub fn disconnect(&self, computer: &str) {
        let removed = self
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(computer);
        if let Some(c) = removed {
            c.conn
                .close(CLOSE_SUPERSEDED.into(), b"disconnected by control plane");
        }
        self.changed.send_modify(|v| *v += 1);
    }

    fn insert(&self, conn: Arc<GuestConn>) {
        let old = self
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(conn.computer.clone(), conn);
        if let Some(old) = old {
            old.conn.close(CLOSE_SUPERSEDED.into(), b"superseded");
        }
        self.changed.send_modify(|v| *v += 1);
    }

    /// Removes the entry if it is still this connection; true if it was.
    fn remove_if(&self, computer: &str, epoch: u64) -> bool {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let current = map.get(computer).is_some_and(|c| c.epoch == epoch);
        if current {
            map.remove(computer);
        }
        drop(map);
        self.changed.send_modify(|v| *v += 1);
        current
    }
}

#[cfg(test)]
mod tests;
