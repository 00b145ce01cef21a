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

use gateway_proto::{
    encode, ControlHandshake, ControlMsg, FrameDecoder, FrameError, HandshakeEvent, OpError,
    RefuseReason, Request, Secret,
};
use serde::{de::DeserializeOwned, Serialize};
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

/// How long a new connection has to open its control stream and say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
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
    /// The guest refused or failed the operation.
    #[error(transparent)]
    Guest(#[from] OpError),
}

impl TunnelError {
    /// Whether the guest may have carried out (part of) the operation.
    pub fn is_uncertain(&self) -> bool {
        matches!(self, Self::Lost(_) | Self::Protocol { .. })
    }
}

/// One connected guest.
pub struct GuestConn {
    computer: String,
    conn: quinn::Connection,
    control: mpsc::Sender<ControlMsg>,
    epoch: u64,
}

impl GuestConn {
    pub fn computer(&self) -> &str {
        &self.computer
    }

    /// Opens a stream for one operation and sends its request frame.
    pub async fn open(&self, req: &Request) -> Result<OpStream, TunnelError> {
        let (send, recv) = self
            .conn
            .open_bi()
            .await
            .map_err(|_| TunnelError::NotConnected(self.computer.clone()))?;
        let mut op = OpStream {
            tx: OpSender {
                computer: self.computer.clone(),
                send,
            },
            rx: OpReceiver {
                computer: self.computer.clone(),
                recv,
                decoder: FrameDecoder::new(),
                pending_raw: Vec::new(),
            },
        };
        op.send(req).await?;
        Ok(op)
    }

    /// Queues a control message (lease pushes). Best effort: a full or closed queue is logged,
    /// because the guest also learns fences from the commands themselves.
    pub fn push_control(&self, msg: ControlMsg) {
        if self.control.try_send(msg).is_err() {
            warn!(computer_id = %self.computer, "control message dropped: guest control queue unavailable");
        }
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
}

/// The receiving half of an operation stream.
pub struct OpReceiver {
    computer: String,
    recv: quinn::RecvStream,
    decoder: FrameDecoder,
    pending_raw: Vec<u8>,
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

    /// Sends one typed frame.
    pub async fn send<T: Serialize>(&mut self, msg: &T) -> Result<(), TunnelError> {
        let frame = encode(msg).map_err(|e| TunnelError::Protocol {
            computer: self.computer.clone(),
            detail: format!("cannot encode request: {e}"),
        })?;
        self.send.write_all(&frame).await.map_err(|_| self.lost())
    }

    /// Sends raw bytes (after a typed header).
    pub async fn write_raw(&mut self, bytes: bytes::Bytes) -> Result<(), TunnelError> {
        // write_chunk hands the buffer to quinn without copying it.
        self.send.write_chunk(bytes).await.map_err(|_| self.lost())
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

    /// Receives the next typed frame; `None` when the guest finished its side cleanly.
    pub async fn recv<T: DeserializeOwned>(&mut self) -> Result<Option<T>, TunnelError> {
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

    /// Reads up to `max` raw bytes; `None` at the end of the guest's side.
    pub async fn read_raw(&mut self, max: usize) -> Result<Option<bytes::Bytes>, TunnelError> {
        if !self.pending_raw.is_empty() {
            let take = self.pending_raw.len().min(max);
            let rest = self.pending_raw.split_off(take);
            let head = std::mem::replace(&mut self.pending_raw, rest);
            return Ok(Some(head.into()));
        }
        match self.recv.read_chunk(max, true).await {
            Ok(Some(chunk)) => Ok(Some(chunk.bytes)),
            Ok(None) => Ok(None),
            Err(_) => Err(self.lost()),
        }
    }
}

/// Connected guests by computer id.
#[derive(Default)]
pub struct Registry {
    inner: Mutex<HashMap<String, Arc<GuestConn>>>,
    changed: watch::Sender<u64>,
    epochs: AtomicU64,
}

impl Registry {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
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
    let (computer, send, recv, remainder) = match accepted {
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
    let (control_tx, control_rx) = mpsc::channel(256);
    let epoch = registry.epochs.fetch_add(1, Ordering::Relaxed) + 1;
    let guest = Arc::new(GuestConn {
        computer: computer.clone(),
        conn: conn.clone(),
        control: control_tx,
        epoch,
    });
    registry.insert(guest);
    auth.set_connected(&computer, true).await;
    info!(computer_id = %computer, %remote, "guest connected");

    let reason = control_loop(send, recv, remainder, control_rx).await;
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

/// Runs the control stream after the handshake: answers pings, forwards queued messages.
async fn control_loop(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    remainder: Vec<u8>,
    mut outgoing: mpsc::Receiver<ControlMsg>,
) -> Result<(), String> {
    let mut decoder = FrameDecoder::with_max(64 * 1024);
    decoder.push(&remainder);
    loop {
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
            msg = outgoing.recv() => match msg {
                Some(msg) => {
                    let frame = encode(&msg).map_err(|e| e.to_string())?;
                    send.write_all(&frame).await.map_err(|e| e.to_string())?;
                }
                None => return Ok(()),
            },
        }
    }
}
