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

use gateway_proto::desktop::Action;
use gateway_proto::{
    encode, BotId, ControlHandshake, ControlMsg, FrameDecoder, FrameError, HandshakeEvent,
    LeaseToken, OpError, RefuseReason, Request, Secret,
};
use serde::{de::DeserializeOwned, Serialize};
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tracing::{debug, info, warn};

/// How long a new connection has to open its control stream and say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the control plane waits on a guest unless configured otherwise: for an answer, for
/// the next bytes of a stream, for a write to be taken. Generous: a guest quiesces browsers
/// (up to 20 s each) and walks the home before answering an export.
pub const DEFAULT_GUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// The guest's own bound on one browser_act step (`pagebrowser::STEP_TIMEOUT`).
const PAGE_STEP_ALLOWANCE: Duration = Duration::from_secs(10);
/// QUIC application close codes.
const CLOSE_REFUSED: u32 = 1;
const CLOSE_SUPERSEDED: u32 = 2;
const CLOSE_PROTOCOL: u32 = 3;
/// Stream reset code for a malformed operation stream.
pub const RESET_PROTOCOL: u32 = 3;
/// Stream reset code for an operation the control plane gave up on (client went away).
pub const RESET_ABORTED: u32 = 4;

/// Checks guest credentials and records connectivity; implemented over the computer store.
pub trait GuestAuth: Send + Sync + 'static {
    /// Whether `token` is the enrollment token of a live computer `computer_id`.
    fn verify(&self, computer_id: &str, token: &Secret) -> impl Future<Output = bool> + Send;
    /// Records that the computer's guest connected or disconnected.
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

/// The deadlines of one operation stream; `None` waits as long as the peer keeps the
/// connection up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// For each typed frame (`recv`, `expect`).
    pub reply: Option<Duration>,
    /// For each next piece of raw bytes (`read_raw`).
    pub raw_in: Option<Duration>,
    /// For each write the guest must take (`send`, `write_raw`).
    pub out: Option<Duration>,
}

impl Deadlines {
    /// Every wait bounded by `d`.
    pub fn all(d: Duration) -> Self {
        Self {
            reply: Some(d),
            raw_in: Some(d),
            out: Some(d),
        }
    }

    /// An exec with `timeout_ms`: a command may be quiet for as long as it may run (the guest
    /// ends it at its timeout, then answers within `base`); stdin is taken only as fast as the
    /// command reads it.
    pub fn for_exec(timeout_ms: Option<u64>, base: Duration) -> Self {
        let bound = timeout_ms.map(|ms| Duration::from_millis(ms) + base);
        Self {
            reply: bound,
            raw_in: bound,
            out: None,
        }
    }

    /// What `req` may legitimately take, given the base timeout.
    pub fn for_request(req: &Request, base: Duration) -> Self {
        match req {
            Request::Exec(r) => Self::for_exec(r.timeout_ms, base),
            // Until `Opened`; then a live stream is quiet while the screen is (the relay clears
            // nothing: raw bytes have no deadline here, revocation closes the stream).
            Request::Connect(_) => Self {
                reply: Some(base),
                raw_in: None,
                out: None,
            },
            Request::Act(r) => {
                let waits: u64 = r
                    .actions
                    .iter()
                    .map(|a| match a {
                        Action::Wait { ms } => u64::from(*ms),
                        _ => 0,
                    })
                    .sum();
                let settle = u64::from(r.settle_ms.unwrap_or(0));
                Self::all(base + Duration::from_millis(waits.saturating_add(settle)))
            }
            Request::PageAct(r) => {
                let steps = u32::try_from(r.steps.len()).unwrap_or(u32::MAX);
                Self::all(base + PAGE_STEP_ALLOWANCE.saturating_mul(steps))
            }
            _ => Self::all(base),
        }
    }
}

/// Awaits `fut` for at most `d` (forever with `None`).
async fn within<T>(
    d: Option<Duration>,
    computer: &str,
    fut: impl Future<Output = T>,
) -> Result<T, TunnelError> {
    match d {
        None => Ok(fut.await),
        Some(d) => tokio::time::timeout(d, fut)
            .await
            .map_err(|_| TunnelError::Timeout {
                computer: computer.to_owned(),
                waited: d,
            }),
    }
}

/// The latest lease the control plane told a guest about, per bot.
#[derive(Debug, Clone)]
struct LeaseSlot {
    token: LeaseToken,
    released: bool,
    sent: bool,
}

/// The leases to tell one guest: the latest word per bot, kept until sent.
#[derive(Debug, Default)]
struct LeaseSlots(HashMap<BotId, LeaseSlot>);

impl LeaseSlots {
    /// Records a grant (`released` false) or a release of `token`; true if there is something
    /// new to send. An older lease (a lower fence) never replaces a newer one.
    fn push(&mut self, bot: &BotId, token: &LeaseToken, released: bool) -> bool {
        match self.0.get_mut(bot) {
            Some(slot) if slot.token.fence() > token.fence() => false,
            Some(slot) if slot.token == *token => {
                let changed = released && !slot.released;
                if changed {
                    slot.released = true;
                    slot.sent = false;
                }
                changed
            }
            _ => {
                self.0.insert(
                    bot.clone(),
                    LeaseSlot {
                        token: token.clone(),
                        released,
                        sent: false,
                    },
                );
                true
            }
        }
    }

    /// The control messages of every slot not sent yet, marking them sent. A release follows
    /// its grant, so a guest that never saw the grant still learns the fence it must refuse.
    fn take_unsent(&mut self) -> Vec<ControlMsg> {
        let mut out = Vec::new();
        for (bot, slot) in self.0.iter_mut().filter(|(_, s)| !s.sent) {
            slot.sent = true;
            out.push(ControlMsg::Lease {
                bot: bot.clone(),
                lease: Some(slot.token.clone()),
            });
            if slot.released {
                out.push(ControlMsg::Lease {
                    bot: bot.clone(),
                    lease: None,
                });
            }
        }
        out
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
        let deadlines = Deadlines::for_request(req, self.timeout);
        // A guest that grants no stream (its concurrency limit) is as silent as one that does
        // not answer.
        let (send, recv) = within(Some(self.timeout), &self.computer, self.conn.open_bi())
            .await?
            .map_err(|_| TunnelError::NotConnected(self.computer.clone()))?;
        let mut op = OpStream {
            tx: OpSender {
                computer: self.computer.clone(),
                send,
                deadline: deadlines.out,
            },
            rx: OpReceiver {
                computer: self.computer.clone(),
                recv,
                decoder: FrameDecoder::new(),
                pending_raw: Vec::new(),
                reply_deadline: deadlines.reply,
                raw_deadline: deadlines.raw_in,
            },
        };
        let first = op.tx.deadline;
        op.tx.deadline = Some(self.timeout);
        let sent = op.send(req).await;
        op.tx.deadline = first;
        sent?;
        Ok(op)
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

/// One operation's stream: typed frames, then optionally raw bytes.
pub struct OpStream {
    pub tx: OpSender,
    pub rx: OpReceiver,
}

/// The sending half of an operation stream.
pub struct OpSender {
    computer: String,
    send: quinn::SendStream,
    deadline: Option<Duration>,
}

/// The receiving half of an operation stream.
pub struct OpReceiver {
    computer: String,
    recv: quinn::RecvStream,
    decoder: FrameDecoder,
    pending_raw: Vec<u8>,
    reply_deadline: Option<Duration>,
    raw_deadline: Option<Duration>,
}

impl OpStream {
    /// Sends one typed frame.
    pub async fn send<T: Serialize>(&mut self, msg: &T) -> Result<(), TunnelError> {
        self.tx.send(msg).await
    }

    /// Receives a typed frame that must be there.
    pub async fn expect<T: DeserializeOwned>(&mut self) -> Result<T, TunnelError> {
        self.rx.expect().await
    }

    /// Gives up on the operation: resets both directions so the guest sees it at once.
    pub fn abort(&mut self) {
        self.tx.abort();
        self.rx.abort();
    }
}

impl OpSender {
    fn lost(&self) -> TunnelError {
        TunnelError::Lost(self.computer.clone())
    }

    /// The deadline of each write; `None` lifts it.
    pub fn set_deadline(&mut self, d: Option<Duration>) {
        self.deadline = d;
    }

    /// Sends one typed frame.
    pub async fn send<T: Serialize>(&mut self, msg: &T) -> Result<(), TunnelError> {
        let frame = encode(msg).map_err(|e| TunnelError::Protocol {
            computer: self.computer.clone(),
            detail: format!("cannot encode request: {e}"),
        })?;
        let written = within(self.deadline, &self.computer, self.send.write_all(&frame)).await;
        self.settle(written)
    }

    /// Sends raw bytes (after a typed header).
    pub async fn write_raw(&mut self, bytes: bytes::Bytes) -> Result<(), TunnelError> {
        // write_chunk hands the buffer to quinn without copying it.
        let written = within(self.deadline, &self.computer, self.send.write_chunk(bytes)).await;
        self.settle(written)
    }

    /// A write's outcome: a timeout resets the stream, a transport error is a lost outcome.
    fn settle<E>(&mut self, r: Result<Result<(), E>, TunnelError>) -> Result<(), TunnelError> {
        match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(self.lost()),
            Err(timeout) => {
                self.abort();
                Err(timeout)
            }
        }
    }

    /// Ends our side of the stream.
    pub fn finish(&mut self) -> Result<(), TunnelError> {
        self.send.finish().map_err(|_| self.lost())
    }

    /// Resets our side so the guest sees the abort at once.
    pub fn abort(&mut self) {
        let _ = self.send.reset(RESET_ABORTED.into());
    }
}

impl OpReceiver {
    fn lost(&self) -> TunnelError {
        TunnelError::Lost(self.computer.clone())
    }

    fn protocol(&mut self, detail: impl Into<String>) -> TunnelError {
        let _ = self.recv.stop(RESET_PROTOCOL.into());
        TunnelError::Protocol {
            computer: self.computer.clone(),
            detail: detail.into(),
        }
    }

    /// Stops reading so the guest sees the abort at once.
    pub fn abort(&mut self) {
        let _ = self.recv.stop(RESET_ABORTED.into());
    }

    /// The deadlines of each typed frame and of each next piece of raw bytes; `None` lifts one.
    pub fn set_deadlines(&mut self, reply: Option<Duration>, raw: Option<Duration>) {
        self.reply_deadline = reply;
        self.raw_deadline = raw;
    }

    /// A timeout stops the stream, so the guest sees that the control plane gave up.
    fn timed_out(&mut self, e: TunnelError) -> TunnelError {
        self.abort();
        e
    }

    /// Receives the next typed frame; `None` when the guest finished its side cleanly. Fails
    /// with [`TunnelError::Timeout`] when the frame does not arrive within the reply deadline.
    pub async fn recv<T: DeserializeOwned>(&mut self) -> Result<Option<T>, TunnelError> {
        let computer = self.computer.clone();
        match within(self.reply_deadline, &computer, self.recv_inner()).await {
            Ok(r) => r,
            Err(e) => Err(self.timed_out(e)),
        }
    }

    async fn recv_inner<T: DeserializeOwned>(&mut self) -> Result<Option<T>, TunnelError> {
        loop {
            match self.decoder.next_message::<T>() {
                Ok(Some(msg)) => return Ok(Some(msg)),
                Ok(None) => {}
                Err(e) => return Err(self.protocol(e.to_string())),
            }
            match self.recv.read_chunk(64 * 1024, true).await {
                Ok(Some(chunk)) => self.decoder.push(&chunk.bytes),
                Ok(None) => {
                    return match self.decoder.finish() {
                        Ok(()) => Ok(None),
                        Err(FrameError::Truncated(_)) => Err(self.lost()),
                        Err(e) => Err(self.protocol(e.to_string())),
                    }
                }
                Err(_) => return Err(self.lost()),
            }
        }
    }

    /// Receives a typed frame that must be there.
    pub async fn expect<T: DeserializeOwned>(&mut self) -> Result<T, TunnelError> {
        match self.recv().await? {
            Some(msg) => Ok(msg),
            None => Err(self.lost()),
        }
    }

    /// Switches to raw bytes: call after the last typed frame has been received.
    pub fn start_raw(&mut self) {
        let decoder = std::mem::take(&mut self.decoder);
        self.pending_raw = decoder.into_remainder();
    }

    /// Reads up to `max` raw bytes; `None` at the end of the guest's side. Fails with
    /// [`TunnelError::Timeout`] when nothing arrives within the raw deadline (an export that
    /// stopped making progress).
    pub async fn read_raw(&mut self, max: usize) -> Result<Option<bytes::Bytes>, TunnelError> {
        if !self.pending_raw.is_empty() {
            let take = self.pending_raw.len().min(max);
            let rest = self.pending_raw.split_off(take);
            let head = std::mem::replace(&mut self.pending_raw, rest);
            return Ok(Some(head.into()));
        }
        let computer = self.computer.clone();
        match within(
            self.raw_deadline,
            &computer,
            self.recv.read_chunk(max, true),
        )
        .await
        {
            Ok(Ok(Some(chunk))) => Ok(Some(chunk.bytes)),
            Ok(Ok(None)) => Ok(None),
            Ok(Err(_)) => Err(self.lost()),
            Err(e) => Err(self.timed_out(e)),
        }
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

/// Binds the tunnel endpoint.
///
/// `reset_key` must survive restarts (it lives in the data dir): with it, a restarted control
/// plane answers packets of its predecessor's connections with valid stateless resets, so guests
/// notice the crash at once and dial again instead of waiting for their idle timeout.
pub fn bind(
    addr: SocketAddr,
    config: quinn::ServerConfig,
    reset_key: &[u8; 32],
) -> std::io::Result<quinn::Endpoint> {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, reset_key);
    let endpoint_config = quinn::EndpointConfig::new(Arc::new(key));
    let socket = std::net::UdpSocket::bind(addr)?;
    let runtime = quinn::default_runtime()
        .ok_or_else(|| std::io::Error::other("no async runtime for the tunnel"))?;
    quinn::Endpoint::new(endpoint_config, Some(config), socket, runtime)
}

/// Accepts guests until the endpoint closes.
pub async fn serve<A: GuestAuth>(endpoint: quinn::Endpoint, registry: Arc<Registry>, auth: Arc<A>) {
    while let Some(incoming) = endpoint.accept().await {
        let registry = registry.clone();
        let auth = auth.clone();
        tokio::spawn(async move {
            let remote = incoming.remote_address();
            match incoming.await {
                Ok(conn) => handle_connection(conn, registry, auth).await,
                Err(e) => info!(%remote, error = %e, "tunnel connection failed during setup"),
            }
        });
    }
}

async fn handle_connection<A: GuestAuth>(
    conn: quinn::Connection,
    registry: Arc<Registry>,
    auth: Arc<A>,
) {
    let remote = conn.remote_address();
    let accepted = tokio::time::timeout(HELLO_TIMEOUT, handshake(&conn, auth.as_ref())).await;
    let (computer, mut send, mut recv, remainder) = match accepted {
        Ok(Ok(v)) => v,
        Ok(Err(reason)) => {
            warn!(%remote, %reason, "guest connection refused");
            conn.close(CLOSE_REFUSED.into(), reason.to_string().as_bytes());
            return;
        }
        Err(_) => {
            warn!(%remote, reason = "no hello within 10 s", "guest connection refused");
            conn.close(CLOSE_REFUSED.into(), b"hello timeout");
            return;
        }
    };
    let epoch = registry.epochs.fetch_add(1, Ordering::Relaxed) + 1;
    let guest = Arc::new(GuestConn {
        computer: computer.clone(),
        conn: conn.clone(),
        leases: Mutex::default(),
        leases_changed: Notify::new(),
        epoch,
        timeout: registry.guest_timeout,
    });
    // A (re)started guest knows no fences: it learns every live lease, and has applied them
    // (its pong to our ping, which it answers in order), before any operation can reach it.
    let live = auth.live_leases(&computer).await;
    let pushed = live.len();
    for (bot, token) in &live {
        guest.push_lease(bot, token, false);
    }
    let mut decoder = FrameDecoder::with_max(64 * 1024);
    decoder.push(&remainder);
    let synced = tokio::time::timeout(
        HELLO_TIMEOUT,
        sync_leases(&mut send, &mut recv, &mut decoder, &guest),
    )
    .await;
    match synced {
        Ok(Ok(())) => {}
        Ok(Err(detail)) => {
            warn!(computer_id = %computer, %remote, %detail, "guest connection refused: its lease sync failed");
            conn.close(CLOSE_PROTOCOL.into(), b"protocol error on control stream");
            return;
        }
        Err(_) => {
            warn!(computer_id = %computer, %remote, "guest connection refused: no pong to the lease sync within 10 s");
            conn.close(CLOSE_REFUSED.into(), b"lease sync timeout");
            return;
        }
    }
    // Recorded before the registry has it: whoever waits for the connection (a start, a
    // create) reads the computer right after, and must see it connected.
    auth.set_connected(&computer, true).await;
    registry.insert(guest.clone());
    // A lease granted between the read above and the insert was pushed to no connection:
    // read again (the slots keep the higher fence, so a repeat changes nothing).
    for (bot, token) in auth.live_leases(&computer).await {
        guest.push_lease(&bot, &token, false);
    }
    // Again, now that it is the registry's: a superseded connection that ended between the
    // first write and the insert recorded `false` (it was still the registry's then).
    auth.set_connected(&computer, true).await;
    info!(computer_id = %computer, %remote, live_leases = pushed, "guest connected");

    let reason = control_loop(send, recv, decoder, &guest).await;
    match &reason {
        Ok(()) => info!(computer_id = %computer, "guest control stream ended"),
        Err(detail) => {
            warn!(computer_id = %computer, %detail, "guest control stream failed; closing connection");
            conn.close(CLOSE_PROTOCOL.into(), b"protocol error on control stream");
        }
    }
    conn.closed().await;
    if registry.remove_if(&computer, epoch) {
        auth.set_connected(&computer, false).await;
        info!(computer_id = %computer, "guest disconnected");
    }
}

type Accepted = (String, quinn::SendStream, quinn::RecvStream, Vec<u8>);

async fn handshake<A: GuestAuth>(
    conn: &quinn::Connection,
    auth: &A,
) -> Result<Accepted, RefuseReason> {
    let (mut send, mut recv) = conn
        .accept_bi()
        .await
        .map_err(|_| RefuseReason::Malformed)?;
    let mut hs = ControlHandshake::new();
    let event = loop {
        match recv.read_chunk(4096, true).await {
            Ok(Some(chunk)) => {
                if let Some(ev) = hs.handle_bytes(&chunk.bytes) {
                    break ev;
                }
            }
            Ok(None) | Err(_) => {
                break hs
                    .handle_eof()
                    .unwrap_or(HandshakeEvent::Failed(RefuseReason::Malformed))
            }
        }
    };
    let result = match event {
        HandshakeEvent::Authenticate {
            computer_id,
            token,
            agent,
        } => {
            if auth.verify(&computer_id, &token).await {
                debug!(computer_id = %computer_id, agent = %agent.chars().take(64).collect::<String>(), "guest authenticated");
                hs.accept();
                Ok(computer_id)
            } else {
                hs.refuse(RefuseReason::BadCredentials);
                Err(RefuseReason::BadCredentials)
            }
        }
        HandshakeEvent::Failed(reason) => Err(reason),
    };
    while let Some(frame) = hs.poll_transmit() {
        let _ = send.write_all(&frame).await;
    }
    if result.is_err() {
        // Let the refusal reach the guest before the connection closes: closing at once would
        // discard unacknowledged stream data.
        let _ = send.finish();
        let _ = tokio::time::timeout(Duration::from_secs(2), send.stopped()).await;
    }
    let computer = result?;
    Ok((computer, send, recv, hs.into_remainder()))
}

/// Sequence number of the ping that ends the lease sync of a new connection.
const SYNC_PING: u64 = u64::MAX;

/// Sends the connection's pending leases, then a ping, and reads until the guest's pong: the
/// guest handles control messages in order, so the pong proves the leases are applied.
async fn sync_leases(
    send: &mut quinn::SendStream,
    recv: &mut quinn::RecvStream,
    decoder: &mut FrameDecoder,
    guest: &GuestConn,
) -> Result<(), String> {
    let mut msgs = guest.unsent_leases();
    msgs.push(ControlMsg::Ping { seq: SYNC_PING });
    for msg in msgs {
        let frame = encode(&msg).map_err(|e| e.to_string())?;
        send.write_all(&frame).await.map_err(|e| e.to_string())?;
    }
    loop {
        while let Some(msg) = decoder
            .next_message::<ControlMsg>()
            .map_err(|e| e.to_string())?
        {
            match msg {
                ControlMsg::Pong { seq: SYNC_PING } => return Ok(()),
                ControlMsg::Pong { .. } => {}
                ControlMsg::Ping { seq } => {
                    let frame = encode(&ControlMsg::Pong { seq }).map_err(|e| e.to_string())?;
                    send.write_all(&frame).await.map_err(|e| e.to_string())?;
                }
                ControlMsg::Lease { .. } => return Err("guest sent a lease message".into()),
            }
        }
        match recv.read_chunk(64 * 1024, true).await {
            Ok(Some(chunk)) => decoder.push(&chunk.bytes),
            Ok(None) => return Err("control stream ended during the lease sync".into()),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Runs the control stream after the handshake: answers pings, sends lease changes.
async fn control_loop(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    mut decoder: FrameDecoder,
    guest: &GuestConn,
) -> Result<(), String> {
    loop {
        // Leases first: whatever changed since the last round (the hello's live leases on the
        // first). A guest that does not read its control stream blocks only this loop; the
        // connection's idle timeout and the operations' deadlines bound the rest.
        for msg in guest.unsent_leases() {
            let frame = encode(&msg).map_err(|e| e.to_string())?;
            send.write_all(&frame).await.map_err(|e| e.to_string())?;
        }
        while let Some(msg) = decoder
            .next_message::<ControlMsg>()
            .map_err(|e| e.to_string())?
        {
            match msg {
                ControlMsg::Ping { seq } => {
                    let frame = encode(&ControlMsg::Pong { seq }).map_err(|e| e.to_string())?;
                    send.write_all(&frame).await.map_err(|e| e.to_string())?;
                }
                ControlMsg::Pong { .. } => {}
                ControlMsg::Lease { .. } => return Err("guest sent a lease message".into()),
            }
        }
        tokio::select! {
            chunk = recv.read_chunk(64 * 1024, true) => match chunk {
                Ok(Some(chunk)) => decoder.push(&chunk.bytes),
                Ok(None) | Err(_) => return Ok(()),
            },
            () = guest.leases_changed.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_proto::desktop::ActRequest;

    fn bot(s: &str) -> BotId {
        BotId::new(s).unwrap()
    }

    fn tok(s: &str) -> LeaseToken {
        LeaseToken::parse(s).unwrap()
    }

    #[test]
    fn a_lease_push_is_kept_until_sent_and_never_lowered() {
        let mut slots = LeaseSlots::default();
        assert!(slots.push(&bot("b"), &tok("run-2:2"), false));
        // An older grant read late (the hello's database read racing an acquire) changes nothing.
        assert!(!slots.push(&bot("b"), &tok("run-1:1"), false));
        assert_eq!(
            slots.take_unsent(),
            vec![ControlMsg::Lease {
                bot: bot("b"),
                lease: Some(tok("run-2:2"))
            }]
        );
        assert!(slots.take_unsent().is_empty(), "sent once");
        // A release of the current lease is sent after its grant.
        assert!(slots.push(&bot("b"), &tok("run-2:2"), true));
        assert!(
            !slots.push(&bot("b"), &tok("run-2:2"), false),
            "a release stands"
        );
        assert_eq!(
            slots.take_unsent(),
            vec![
                ControlMsg::Lease {
                    bot: bot("b"),
                    lease: Some(tok("run-2:2"))
                },
                ControlMsg::Lease {
                    bot: bot("b"),
                    lease: None
                },
            ]
        );
        // Many pushes while the loop is busy: only the latest is sent, none is dropped.
        for fence in 3..300u64 {
            slots.push(&bot("b"), &LeaseToken::new("run-x", fence).unwrap(), false);
        }
        slots.push(&bot("c"), &tok("run-9:1"), false);
        let mut sent = slots.take_unsent();
        sent.sort_by_key(|m| format!("{m:?}"));
        assert_eq!(sent.len(), 2);
        assert!(sent.contains(&ControlMsg::Lease {
            bot: bot("b"),
            lease: Some(LeaseToken::new("run-x", 299).unwrap())
        }));
    }

    #[test]
    fn deadlines_follow_the_request() {
        let base = Duration::from_secs(7);
        assert_eq!(
            Deadlines::for_request(&Request::Ping, base),
            Deadlines::all(base)
        );
        let quiet = Deadlines::for_exec(None, base);
        assert_eq!(
            (quiet.reply, quiet.out),
            (None, None),
            "exec keeps its own semantics"
        );
        let bounded = Deadlines::for_exec(Some(60_000), base);
        assert_eq!(bounded.reply, Some(Duration::from_secs(67)));
        assert_eq!(bounded.out, None, "stdin waits for the command to read it");
        let act = Request::Act(ActRequest {
            bot: bot("b"),
            lease: tok("r:1"),
            actions: vec![Action::Wait { ms: 5000 }, Action::Wait { ms: 2000 }],
            observe: true,
            settle_ms: Some(1000),
        });
        assert_eq!(
            Deadlines::for_request(&act, base),
            Deadlines::all(Duration::from_secs(15))
        );
    }

    #[test]
    fn a_timeout_names_the_computer_and_the_deadline() {
        let e = TunnelError::Timeout {
            computer: "c-1".into(),
            waited: Duration::from_secs(4),
        };
        assert_eq!(
            e.to_string(),
            "the guest of computer c-1 did not answer within 4 s"
        );
        assert!(e.is_uncertain());
    }
}
