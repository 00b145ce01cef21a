//! The gateway as the control plane embeds it: configuration, the injectable edges (how a
//! destination is dialed, how a redirected connection's original destination is found), and the
//! `serve_*` entry points of each server.
//!
//! This module owns [`Gateway`] and [`Config`]. The servers themselves live in [`crate::dns`],
//! [`crate::proxy`] and [`crate::http_proxy`]; each `serve_*` runs until its listener fails and
//! is stopped by dropping (aborting) its task.

use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::socket::{getsockopt, sockopt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use crate::events::Events;
use crate::registry::Directory;
use crate::resolve::Resolve;

/// Timeouts and sizes. Every wait the gateway makes has one of these as its deadline.
#[derive(Clone, Debug)]
pub struct Config {
    /// How long the transparent proxy waits for a connection's first bytes (TLS ClientHello or
    /// HTTP request head) before deciding by address alone.
    pub peek_timeout: Duration,
    /// How long dialing a destination may take.
    pub connect_timeout: Duration,
    /// A spliced connection with no byte either way for this long is closed.
    pub idle_timeout: Duration,
    /// How long an upstream DNS resolution may take (SERVFAIL after).
    pub dns_upstream_timeout: Duration,
    /// A DNS-over-TCP connection's wait for its next message.
    pub dns_tcp_timeout: Duration,
    /// The shortest time a resolution is remembered for the proxy, whatever its TTL.
    pub min_record_lifetime: Duration,
    /// The longest TTL handed to a computer (its cache must not outlive the record table).
    pub max_answer_ttl: u32,
    /// UDP DNS queries being answered at once, all computers together (more are dropped).
    pub max_dns_in_flight: usize,
    /// How long the explicit HTTP proxy waits for a request head.
    pub http_header_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            peek_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(15 * 60),
            dns_upstream_timeout: Duration::from_secs(5),
            dns_tcp_timeout: Duration::from_secs(10),
            min_record_lifetime: Duration::from_secs(600),
            max_answer_ttl: 300,
            max_dns_in_flight: 1024,
            http_header_timeout: Duration::from_secs(10),
        }
    }
}

/// A boxed connect future, so that [`Dial`] can be a trait object.
pub type DialFuture = Pin<Box<dyn Future<Output = io::Result<TcpStream>> + Send>>;

/// Opens the gateway's own connection to an allowed destination.
pub trait Dial: Send + Sync + 'static {
    fn dial(&self, addr: SocketAddr) -> DialFuture;
}

/// Connects to the destination itself (the production dialer).
pub struct DirectDial;

impl Dial for DirectDial {
    fn dial(&self, addr: SocketAddr) -> DialFuture {
        Box::pin(TcpStream::connect(addr))
    }
}

/// Any `Fn(SocketAddr) -> DialFuture` dials (tests redirect TEST-NET addresses to loopback).
impl<F: Fn(SocketAddr) -> DialFuture + Send + Sync + 'static> Dial for F {
    fn dial(&self, addr: SocketAddr) -> DialFuture {
        self(addr)
    }
}

/// Finds where a redirected connection was going.
pub trait OriginalDst: Send + Sync + 'static {
    fn original_dst(&self, stream: &TcpStream) -> io::Result<SocketAddr>;
}

/// `SO_ORIGINAL_DST` (`IP6T_SO_ORIGINAL_DST` for IPv6) of a connection DNAT-redirected by
/// netfilter: the production lookup.
pub struct SoOriginalDst;

impl OriginalDst for SoOriginalDst {
    fn original_dst(&self, stream: &TcpStream) -> io::Result<SocketAddr> {
        if stream.local_addr()?.is_ipv4() {
            let sin = getsockopt(stream, sockopt::OriginalDst).map_err(io::Error::from)?;
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Ok(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        } else {
            let sin6 = getsockopt(stream, sockopt::Ip6tOriginalDst).map_err(io::Error::from)?;
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Ok(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                0,
                0,
            )))
        }
    }
}

/// Any `Fn(&TcpStream) -> io::Result<SocketAddr>` is a lookup (tests map by peer port).
impl<F: Fn(&TcpStream) -> io::Result<SocketAddr> + Send + Sync + 'static> OriginalDst for F {
    fn original_dst(&self, stream: &TcpStream) -> io::Result<SocketAddr> {
        self(stream)
    }
}

/// The gateway: cheap to clone, every clone serves the same computers.
#[derive(Clone)]
pub struct Gateway {
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Shared {
    pub directory: Arc<dyn Directory>,
    pub resolver: Arc<dyn Resolve>,
    pub events: Events,
    pub config: Config,
    pub dial: Arc<dyn Dial>,
    pub original_dst: Arc<dyn OriginalDst>,
    /// Queries and connections from addresses no computer has.
    pub unknown_peers: AtomicU64,
    pub dns_in_flight: Arc<tokio::sync::Semaphore>,
}

impl Gateway {
    /// A gateway with the production edges ([`DirectDial`], [`SoOriginalDst`]).
    pub fn new(
        directory: Arc<dyn Directory>,
        resolver: Arc<dyn Resolve>,
        events: Events,
        config: Config,
    ) -> Gateway {
        Gateway::with_edges(
            directory,
            resolver,
            events,
            config,
            Arc::new(DirectDial),
            Arc::new(SoOriginalDst),
        )
    }

    /// A gateway with its own dialer and original-destination lookup (tests, or a control plane
    /// that dials through something else).
    pub fn with_edges(
        directory: Arc<dyn Directory>,
        resolver: Arc<dyn Resolve>,
        events: Events,
        config: Config,
        dial: Arc<dyn Dial>,
        original_dst: Arc<dyn OriginalDst>,
    ) -> Gateway {
        let dns_in_flight = Arc::new(tokio::sync::Semaphore::new(config.max_dns_in_flight.max(1)));
        let shared = Shared {
            directory,
            resolver,
            events,
            config,
            dial,
            original_dst,
            unknown_peers: AtomicU64::new(0),
            dns_in_flight,
        };
        Gateway {
            shared: Arc::new(shared),
        }
    }

    /// Answers DNS over UDP on `socket` until it fails.
    pub async fn serve_dns_udp(&self, socket: UdpSocket) -> io::Result<()> {
        crate::dns::serve_udp(self.shared.clone(), socket).await
    }

    /// Answers DNS over TCP on `listener` until it fails.
    pub async fn serve_dns_tcp(&self, listener: TcpListener) -> io::Result<()> {
        crate::dns::serve_tcp(self.shared.clone(), listener).await
    }

    /// One DNS message from `peer`, answered (`None`: nothing to send back).
    pub async fn answer_dns(&self, peer: IpAddr, query: &[u8], max_len: usize) -> Option<Vec<u8>> {
        crate::dns::answer(&self.shared, peer, query, max_len).await
    }

    /// Proxies the connections DNAT-redirected to `listener` until it fails.
    pub async fn serve_transparent(&self, listener: TcpListener) -> io::Result<()> {
        crate::proxy::serve(self.shared.clone(), listener).await
    }

    /// Serves the explicit HTTP proxy (CONNECT and absolute-form requests) on `listener`.
    pub async fn serve_http_proxy(&self, listener: TcpListener) -> io::Result<()> {
        crate::http_proxy::serve(self.shared.clone(), listener).await
    }

    /// Queries and connections refused because their source was no registered computer.
    pub fn unknown_peers(&self) -> u64 {
        self.shared
            .unknown_peers
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Accept errors that concern one connection (or a momentary shortage) and must not stop a
/// server: it pauses briefly and goes on.
pub(crate) async fn accept_error_pause(e: &io::Error) {
    tracing::warn!(error = %e, "egress: accept failed");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// The next connection of `listener`, pausing over the errors [`accept_error_pause`] names.
pub(crate) async fn accept(listener: &TcpListener) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(got) => return got,
            Err(e) => accept_error_pause(&e).await,
        }
    }
}
