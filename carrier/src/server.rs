//! The accepting end: many TCP connections under one quinn server endpoint.
//!
//! [`listen`] runs the accept loop. Each connection gets a synthetic peer address of its own
//! (never reused in this process), under which quinn sees its datagrams; outgoing datagrams are
//! routed to the connection by their destination, and one addressed to a connection that is gone
//! is dropped. The application holds a [`Carrier`] to map a synthetic address to the real TCP
//! peer, to confirm a connection whose QUIC connection it accepted, and to release one whose
//! QUIC connection ended.
//!
//! Bounds ([`Limits`]): at most `max_connections` at once (more are closed at accept, with one
//! WARN per 10 s summing them); a preamble within `preamble_within`; confirmation within
//! `confirm_within`; nothing received for `idle` closes a connection; a frame error closes that
//! connection alone.

use crate::frame::Decoder;
use crate::link::{self, lock, Datagram, LinkDeadlines, LinkEnd, Outbox, Stream};
use crate::{Limits, INBOUND_QUEUE};
use quinn::udp::Transmit;
use std::collections::HashMap;
use std::io;
use std::net::{Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, warn};

/// At most one WARN about refused connections per this interval.
const WARN_EVERY: Duration = Duration::from_secs(10);
/// The synthetic peers' network: a unique-local IPv6 /64 of ours; the low 64 bits count.
const SYNTHETIC_PREFIX: [u16; 4] = [0xfd72, 0x6b7a, 0x7463, 0x0001];

/// The quinn socket over every accepted carrier connection.
#[derive(Debug)]
pub struct ServerSocket {
    local: SocketAddr,
    shared: Arc<Shared>,
    inbound: Mutex<mpsc::Receiver<Datagram>>,
    accept: tokio::task::AbortHandle,
}

/// The application's handle on the accepted connections.
#[derive(Debug, Clone)]
pub struct Carrier {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    limits: Limits,
    links: Mutex<HashMap<SocketAddr, Arc<Link>>>,
    next: AtomicU64,
    refused: Mutex<Refused>,
    /// Where every connection's received datagrams go (the socket's inbound queue).
    inbound: mpsc::Sender<Datagram>,
    /// Websockets reserved and not yet confirmed or closed ([`Carrier::reserve_websocket`]).
    pending_websockets: Arc<AtomicUsize>,
}

/// A place for one websocket that is not confirmed yet ([`Carrier::reserve_websocket`]); it is
/// given back when the connection is confirmed or closes, or when this is dropped unused.
#[derive(Debug)]
pub struct WebsocketReservation {
    pending: Arc<AtomicUsize>,
}

impl Drop for WebsocketReservation {
    fn drop(&mut self) {
        self.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Debug, Default)]
struct Refused {
    since_warn: u64,
    last_warn: Option<Instant>,
}

#[derive(Debug)]
struct Link {
    tcp_peer: SocketAddr,
    /// Whether it is a websocket ([`Carrier::admit_websocket`]) rather than a TCP connection.
    websocket: bool,
    outbox: Outbox,
    confirmed: AtomicBool,
    task: OnceLock<tokio::task::AbortHandle>,
    /// A websocket's reservation, held until it is confirmed (or the link is dropped).
    reservation: Mutex<Option<WebsocketReservation>>,
}

/// Accepts carrier connections on `listener` until the returned socket is dropped.
pub fn listen(listener: TcpListener, limits: Limits) -> io::Result<(Arc<ServerSocket>, Carrier)> {
    let local = listener.local_addr()?;
    let (tx, rx) = mpsc::channel(INBOUND_QUEUE);
    let shared = Arc::new(Shared {
        limits,
        links: Mutex::default(),
        next: AtomicU64::new(1),
        refused: Mutex::default(),
        inbound: tx,
        pending_websockets: Arc::default(),
    });
    let accept = tokio::spawn(accept_loop(listener, shared.clone())).abort_handle();
    let socket = Arc::new(ServerSocket {
        local,
        shared: shared.clone(),
        inbound: Mutex::new(rx),
        accept,
    });
    Ok((socket, Carrier { shared }))
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let (stream, tcp_peer) = match listener.accept().await {
            Ok(v) => v,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                debug!(error = %e, "tcp carrier accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        shared.admit(Stream::Tcp(stream, Decoder::accepting()), tcp_peer, None);
    }
}

impl Shared {
    fn admit(
        self: &Arc<Self>,
        stream: Stream,
        tcp_peer: SocketAddr,
        reservation: Option<WebsocketReservation>,
    ) {
        let mut links = lock(&self.links);
        if links.len() >= self.limits.max_connections {
            drop(links);
            drop(stream);
            self.refused(tcp_peer);
            return;
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let [p0, p1, p2, p3] = SYNTHETIC_PREFIX;
        let ip = Ipv6Addr::new(
            p0,
            p1,
            p2,
            p3,
            (n >> 48) as u16,
            (n >> 32) as u16,
            (n >> 16) as u16,
            n as u16,
        );
        // quinn refuses port 0; the port carries no meaning.
        let addr = SocketAddr::new(ip.into(), 1);
        let link = Arc::new(Link {
            tcp_peer,
            websocket: matches!(stream, Stream::Ws(_)),
            outbox: Outbox::new(self.limits.queue_bytes),
            confirmed: AtomicBool::new(false),
            task: OnceLock::new(),
            reservation: Mutex::new(reservation),
        });
        links.insert(addr, link.clone());
        drop(links);
        let task = tokio::spawn(serve_link(stream, addr, link.clone(), self.clone()));
        let _ = link.task.set(task.abort_handle());
    }

    fn refused(&self, tcp_peer: SocketAddr) {
        let mut r = lock(&self.refused);
        r.since_warn += 1;
        let now = Instant::now();
        if r.last_warn
            .is_none_or(|t| now.duration_since(t) >= WARN_EVERY)
        {
            warn!(
                refused = r.since_warn,
                last_peer = %tcp_peer,
                max_connections = self.limits.max_connections,
                "tcp tunnel connections refused: the carrier connection cap is reached"
            );
            r.since_warn = 0;
            r.last_warn = Some(now);
        }
    }

    fn link(&self, addr: &SocketAddr) -> Option<Arc<Link>> {
        lock(&self.links).get(addr).cloned()
    }
}

async fn serve_link(stream: Stream, addr: SocketAddr, link: Arc<Link>, shared: Arc<Shared>) {
    let limits = shared.limits;
    let kind = match stream {
        Stream::Tcp(..) => "tcp",
        Stream::Ws(_) => "websocket",
    };
    let deadlines = LinkDeadlines {
        // A websocket has no preamble: its HTTP upgrade said what it is.
        preamble_by: matches!(stream, Stream::Tcp(..))
            .then(|| Instant::now() + limits.preamble_within),
        idle: limits.idle,
    };
    let unconfirmed = async {
        tokio::time::sleep(limits.confirm_within).await;
        if link.confirmed.load(Ordering::Acquire) {
            std::future::pending::<()>().await;
        }
    };
    let end = tokio::select! {
        end = link::run_stream(stream, addr, &link.outbox, &shared.inbound, deadlines) => end,
        () = unconfirmed => LinkEnd::Unconfirmed,
    };
    lock(&shared.links).remove(&addr);
    debug!(peer = %link.tcp_peer, %addr, %end, kind, "carrier connection ended");
}

impl Carrier {
    /// The real TCP peer behind a synthetic address, while its connection is open.
    pub fn tcp_peer(&self, addr: &SocketAddr) -> Option<SocketAddr> {
        self.shared.link(addr).map(|l| l.tcp_peer)
    }

    /// Whether the connection behind a synthetic address is a websocket, while it is open.
    pub fn is_websocket(&self, addr: &SocketAddr) -> bool {
        self.shared.link(addr).is_some_and(|l| l.websocket)
    }

    /// The QUIC connection from `addr` is the application's (it authenticated): the connection
    /// is no longer closed at the confirmation deadline.
    pub fn confirm(&self, addr: &SocketAddr) {
        if let Some(link) = self.shared.link(addr) {
            link.confirmed.store(true, Ordering::Release);
            lock(&link.reservation).take();
        }
    }

    /// The QUIC connection from `addr` is over: its TCP connection closes once what is queued
    /// for it is written.
    pub fn release(&self, addr: &SocketAddr) {
        if let Some(link) = self.shared.link(addr) {
            link.outbox.close();
        }
    }

    /// A place for one more websocket that is not confirmed yet, or `None` when
    /// [`Limits::max_pending_websockets`] are waiting already: take one before answering an
    /// upgrade (and refuse the upgrade without), then give it to [`Carrier::admit_websocket`].
    pub fn reserve_websocket(&self) -> Option<WebsocketReservation> {
        let pending = &self.shared.pending_websockets;
        let max = self.shared.limits.max_pending_websockets;
        pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()?;
        Some(WebsocketReservation {
            pending: pending.clone(),
        })
    }

    /// Carries a websocket on `stream`, an HTTP connection from `peer` the caller has already
    /// upgraded (answered `101 Switching Protocols`) under `reservation`: like a TCP connection
    /// accepted by [`listen`], under the same connection cap and deadlines (no preamble: the
    /// upgrade named the carrier). Over the cap, the stream is closed at once.
    pub async fn admit_websocket(
        &self,
        stream: impl crate::ws::Io,
        peer: SocketAddr,
        reservation: WebsocketReservation,
    ) {
        let boxed: Box<dyn crate::ws::Io> = Box::new(stream);
        let ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
            boxed,
            tokio_tungstenite::tungstenite::protocol::Role::Server,
            Some(crate::ws::config()),
        )
        .await;
        self.shared
            .admit(Stream::Ws(Box::new(ws)), peer, Some(reservation));
    }

    /// Carrier connections open now.
    pub fn connections(&self) -> usize {
        lock(&self.shared.links).len()
    }
}

impl Drop for ServerSocket {
    fn drop(&mut self) {
        self.accept.abort();
        for (_, link) in lock(&self.shared.links).drain() {
            if let Some(task) = link.task.get() {
                task.abort();
            }
        }
    }
}

impl ServerSocket {
    /// Queues a transmit's datagrams for their connection (see `carrier_socket!`).
    fn route(&self, transmit: &Transmit<'_>) {
        if let Some(link) = self.shared.link(&transmit.destination) {
            link::push_transmit(&link.outbox, transmit);
        }
    }
}

carrier_socket!(ServerSocket);
