//! The guest's end of the tunnel: dial out, pin, say hello, serve operation streams.
//!
//! [`run`] keeps one connection to the control plane alive forever, reconnecting with jittered
//! exponential backoff. The control plane's certificate is pinned by its SHA-256 fingerprint
//! ([`carrier::pin::PinnedCert`]); no CA or hostname is trusted. Each operation arrives as its own stream and
//! is handed to [`crate::ops`]; this module only moves bytes and tracks the connection.
//!
//! The connection is QUIC, over UDP when UDP gets through, else over the TCP carrier (the
//! `carrier` crate: the same QUIC connection, its datagrams framed on a TCP connection). A
//! session dials QUIC over UDP first and falls back to TCP when no handshake completes within
//! [`QUIC_HANDSHAKE_TIMEOUT`]; a refusal or a wrong certificate is an answer, not a reason to
//! fall back. The next sessions dial what worked last first; a guest on TCP tries UDP first
//! again every [`QUIC_RETRY_EVERY`] sessions, so a network that lets UDP through again is
//! noticed. The transport is logged when it changes.
//!
//! Third, when configured (`RAKAZO_CONTROL_WS_URL`), the same QUIC over a websocket to the
//! control plane's HTTP API (`GET /v1/tunnel`, one datagram per binary message), for networks
//! that reach only the API (443, HTTPS-only proxies). https is verified against the API
//! certificate's pin (`RAKAZO_CONTROL_API_CERT_SHA256`): the guest carries no CA roots.
//!
//! The control plane may run as several replicas sharing one database (`RAKAZO_CONTROL_ADDRS`:
//! the others' tunnel addresses). The guest's targets are the primary (`RAKAZO_CONTROL_ADDR`,
//! its TCP address and websocket), then each other replica (QUIC on UDP and the TCP carrier on
//! the same address, no websocket). A dial tries one target's transports in the order above and,
//! when none of them connects, the next target in the same dial, so a dead replica costs one
//! handshake timeout, not a backoff; only when every target failed does the backoff apply.
//! Each target remembers what it last ran over (a target not dialled yet starts with UDP). A
//! session that ends sends the next dial to the next target first (a replica whose connection
//! died is likely dead); one that a draining replica closed ([`CLOSE_DRAINING`]) redials at once.
//! With one target all of this is the single control plane's behaviour above.

use crate::config::Config;
use crate::ops::Ops;
use carrier::pin::PinnedCert;
use gateway_proto::{encode, AgentHandshake, AgentOutcome, ControlMsg, FrameDecoder, RefuseReason};
use rustls::pki_types::ServerName;
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// ALPN protocol id of the tunnel (the control plane's `tls::ALPN`).
pub const ALPN: &[u8] = b"rakazo-tunnel";
const BACKOFF_START: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// A connection that lasted this long resets the backoff.
const STABLE_AFTER: Duration = Duration::from_secs(10);
/// The QUIC application close code of a control-plane replica that is draining: go to another
/// replica. The guest redials at once (no backoff), starting with its next target. (The control
/// plane closes with `2` when a newer connection of the same computer superseded this one.)
pub const CLOSE_DRAINING: u32 = 4;
/// How long, once a carrier's TCP connection ended, the session waits for the QUIC connection
/// to see the close the control plane sent just before (its code decides whether to wait).
const CARRIER_CLOSE_GRACE: Duration = Duration::from_millis(100);

/// The tunnel's certificate failed the pin (the control plane's, `RAKAZO_CONTROL_CERT_SHA256`).
const TUNNEL_PIN_MISMATCH: &str =
    "the control plane's certificate is not the one pinned (RAKAZO_CONTROL_CERT_SHA256)";
/// The API's certificate failed the pin (the websocket carrier, `RAKAZO_CONTROL_API_CERT_SHA256`).
const API_PIN_MISMATCH: &str =
    "the control plane's API certificate is not the one pinned (RAKAZO_CONTROL_API_CERT_SHA256)";

/// The QUIC client configuration: TLS 1.3 on ring, the pinned certificate, our ALPN.
pub fn client_config(cert_sha256: [u8; 32]) -> anyhow::Result<quinn::ClientConfig> {
    build_client_config(cert_sha256, transport_config())
}

/// The same configuration for QUIC over the TCP carrier: only the packet size differs.
pub fn carrier_client_config(cert_sha256: [u8; 32]) -> anyhow::Result<quinn::ClientConfig> {
    let mut transport = transport_config();
    carrier::tune_transport(&mut transport);
    build_client_config(cert_sha256, transport)
}

fn build_client_config(
    cert_sha256: [u8; 32],
    transport: quinn::TransportConfig,
) -> anyhow::Result<quinn::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinnedCert::new(
            cert_sha256,
            provider,
            TUNNEL_PIN_MISMATCH,
        )))
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)?;
    let mut config = quinn::ClientConfig::new(Arc::new(quic));
    config.transport_config(Arc::new(transport));
    Ok(config)
}

/// The tunnel's transport on the guest's end: `carrier::quic`'s, which the control plane's end
/// shares, taking the control plane's operation streams (one per operation).
fn transport_config() -> quinn::TransportConfig {
    carrier::quic::transport_config(MAX_INCOMING_OPS)
}

/// Operation streams the control plane may have open on this guest at once.
const MAX_INCOMING_OPS: u32 = 1024;

/// The guest's UDP endpoint for dialling, bound to `addr` (`0.0.0.0:0` or `[::]:0`): the
/// tunnel's endpoint and socket (`carrier::quic`), with [`client_config`] as its default.
pub fn udp_endpoint(
    addr: std::net::SocketAddr,
    cert_sha256: [u8; 32],
) -> anyhow::Result<quinn::Endpoint> {
    let socket = carrier::quic::bind(addr)?;
    let mut endpoint =
        carrier::quic::udp_endpoint(socket, carrier::quic::endpoint_config(None), None)?;
    endpoint.set_default_client_config(client_config(cert_sha256)?);
    Ok(endpoint)
}

/// How a session ended.
#[derive(Debug)]
enum SessionEnd {
    Refused(RefuseReason),
    Closed(String),
    /// The replica closed the connection with [`CLOSE_DRAINING`].
    Draining,
}

/// Stays connected to the control plane forever.
pub async fn run(config: Config, ops: Arc<Ops>) -> anyhow::Result<()> {
    let mut dialer = Dialer::new(&config)?;
    let mut backoff = BACKOFF_START;
    // Draining closes in a row: each redials at once, up to one per target; past that the
    // backoff applies, so replicas that all drain (or keep closing with the code) are not
    // redialled in a tight loop.
    let mut drains = 0usize;
    loop {
        let started = tokio::time::Instant::now();
        let end = match dialer.dial().await {
            Ok(dialed) => {
                let end = session(dialed, &config, &ops).await;
                dialer.session_ended();
                end
            }
            Err(e) => SessionEnd::Closed(format!("connect: {e}")),
        };
        match &end {
            SessionEnd::Refused(reason) => warn!(%reason, "control plane refused this guest"),
            SessionEnd::Closed(why) => info!(reason = %why, "tunnel closed"),
            SessionEnd::Draining => {
                info!("tunnel closed: the control-plane replica is draining; dialling the next")
            }
        }
        if started.elapsed() >= STABLE_AFTER {
            backoff = BACKOFF_START;
            drains = 0;
        }
        if matches!(end, SessionEnd::Draining) {
            drains += 1;
            if drains <= dialer.targets.len() {
                continue;
            }
        } else {
            drains = 0;
        }
        // Full jitter in [backoff/2, backoff): guests restarted together do not reconnect together.
        let jittered = backoff.mul_f64(0.5 + rand::random::<f64>() / 2.0);
        tokio::time::sleep(jittered).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// How long a QUIC handshake over UDP may take before the guest tries the TCP carrier: a few
/// Initial retransmissions on a lossy path, yet a guest whose network drops UDP is connected
/// within seconds.
pub const QUIC_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);
/// Bounds the TCP connect, and then the QUIC handshake over it.
const TCP_DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// A guest on TCP tries UDP first again every this many sessions.
pub const QUIC_RETRY_EVERY: u32 = 4;
/// The name the control plane's certificate is issued for (the pin decides, not the name).
const SERVER_NAME: &str = "rakazo-control-plane";

/// What a session's QUIC connection runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// QUIC on UDP.
    Quic,
    /// QUIC over the TCP carrier.
    Tcp,
    /// QUIC over the websocket carrier on the control plane's HTTP API.
    Websocket,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Quic => "quic",
            Self::Tcp => "tcp",
            Self::Websocket => "websocket",
        })
    }
}

/// An established connection, with the TCP carrier under it if any.
struct Dialed {
    conn: quinn::Connection,
    transport: Transport,
    carrier: Option<(Arc<carrier::ClientSocket>, quinn::Endpoint)>,
}

/// Why a dial failed.
enum DialError {
    /// Nothing answered: the other transport may get through.
    Unreachable(String),
    /// The control plane answered (a refused handshake, a wrong certificate): falling back
    /// would reach the same control plane.
    Failed(String),
}

/// One control-plane replica the guest can dial, and what worked there.
struct Target {
    quic: std::net::SocketAddr,
    tcp: std::net::SocketAddr,
    ws: Option<crate::config::WsTarget>,
    /// What the last session with this target ran over.
    last: Option<Transport>,
    /// Sessions in a row with this target over a carrier (TCP or websocket).
    tcp_streak: u32,
}

impl Target {
    fn new(
        quic: std::net::SocketAddr,
        tcp: std::net::SocketAddr,
        ws: Option<crate::config::WsTarget>,
    ) -> Self {
        Self {
            quic,
            tcp,
            ws,
            last: None,
            tcp_streak: 0,
        }
    }

    /// The order to try: UDP, TCP, then the websocket when configured; what the last session
    /// ran over first, unless it was a carrier and this is one of the sessions that try UDP
    /// first again.
    fn order(&self) -> Vec<Transport> {
        let mut order = vec![Transport::Quic, Transport::Tcp];
        if self.ws.is_some() {
            order.push(Transport::Websocket);
        }
        if let Some(last) = self.last.filter(|&t| t != Transport::Quic) {
            if !self.tcp_streak.is_multiple_of(QUIC_RETRY_EVERY) {
                order.retain(|&t| t != last);
                order.insert(0, last);
            }
        }
        order
    }
}

/// Dials the control plane: its targets in turn (the primary, then the other replicas), each
/// over UDP, TCP or the websocket, remembering what worked per target.
struct Dialer {
    udp: quinn::Endpoint,
    carrier_config: quinn::ClientConfig,
    /// The primary first, then the other replicas; never empty.
    targets: Vec<Target>,
    /// The target the next dial starts with.
    current: usize,
    /// The target of the last connection, for logging the change.
    connected: Option<usize>,
}

impl Dialer {
    fn new(config: &Config) -> anyhow::Result<Self> {
        let mut targets = vec![Target::new(
            config.control_addr,
            config.control_tcp_addr,
            config.control_ws.clone(),
        )];
        targets.extend(
            config
                .other_replicas
                .iter()
                .map(|&addr| Target::new(addr, addr, None)),
        );
        // One UDP socket for every target: IPv4 when all are, else dual-stack IPv6.
        let udp = udp_endpoint(
            if targets.iter().all(|t| t.quic.is_ipv4()) {
                "0.0.0.0:0".parse()?
            } else {
                "[::]:0".parse()?
            },
            config.cert_sha256,
        )?;
        Ok(Self {
            udp,
            carrier_config: carrier_client_config(config.cert_sha256)?,
            targets,
            current: 0,
            connected: None,
        })
    }

    /// Tries every target from the current one, each with its transports in order; the next
    /// target when none of a target's transports connected (silence) or one was answered with
    /// a failure (another replica may answer differently, e.g. one draining refuses).
    async fn dial(&mut self) -> Result<Dialed, String> {
        let n = self.targets.len();
        let mut failed = Vec::new();
        for i in 0..n {
            let t = (self.current + i) % n;
            match self.dial_target(&self.targets[t]).await {
                Ok(dialed) => {
                    self.current = t;
                    self.worked(t, dialed.transport);
                    return Ok(dialed);
                }
                Err(e) if n == 1 => failed.push(e),
                Err(e) => failed.push(format!("{}: {e}", self.targets[t].quic)),
            }
        }
        Err(failed.join("; "))
    }

    /// A session ended: the next dial starts with the next target.
    fn session_ended(&mut self) {
        self.current = (self.current + 1) % self.targets.len();
    }

    async fn dial_target(&self, target: &Target) -> Result<Dialed, String> {
        let mut unreachable = Vec::new();
        for transport in target.order() {
            let dialed = match transport {
                Transport::Quic => self.dial_quic(target).await,
                Transport::Tcp => self.dial_tcp(target).await,
                Transport::Websocket => self.dial_ws(target).await,
            };
            match dialed {
                Ok(dialed) => return Ok(dialed),
                Err(DialError::Unreachable(e)) => unreachable.push(format!("{transport}: {e}")),
                Err(DialError::Failed(e)) => return Err(format!("{transport}: {e}")),
            }
        }
        Err(unreachable.join("; "))
    }

    fn worked(&mut self, t: usize, transport: Transport) {
        let target = &mut self.targets[t];
        if self.connected != Some(t) || target.last != Some(transport) {
            match transport {
                Transport::Quic => info!(addr = %target.quic, "tunnel over quic (udp)"),
                Transport::Tcp => info!(
                    addr = %target.tcp,
                    udp = %target.quic,
                    "tunnel over tcp: udp got no quic answer within {} s",
                    QUIC_HANDSHAKE_TIMEOUT.as_secs()
                ),
                Transport::Websocket => info!(
                    url = %target.ws.as_ref().map_or("", |w| w.url.as_str()),
                    udp = %target.quic,
                    tcp = %target.tcp,
                    "tunnel over websocket: neither udp nor tcp reached the tunnel"
                ),
            }
        }
        self.connected = Some(t);
        target.last = Some(transport);
        target.tcp_streak = match transport {
            Transport::Quic => 0,
            Transport::Tcp | Transport::Websocket => target.tcp_streak + 1,
        };
    }

    async fn dial_quic(&self, target: &Target) -> Result<Dialed, DialError> {
        let connecting = self
            .udp
            .connect(target.quic, SERVER_NAME)
            .map_err(|e| DialError::Failed(e.to_string()))?;
        let conn = handshake(connecting, QUIC_HANDSHAKE_TIMEOUT).await?;
        Ok(Dialed {
            conn,
            transport: Transport::Quic,
            carrier: None,
        })
    }

    async fn dial_tcp(&self, target: &Target) -> Result<Dialed, DialError> {
        let limits = carrier::Limits::default();
        let socket = tokio::time::timeout(
            TCP_DIAL_TIMEOUT,
            carrier::ClientSocket::connect(target.tcp, &limits),
        )
        .await
        .map_err(|_| DialError::Unreachable("tcp connect timed out".into()))?
        .map_err(|e| DialError::Unreachable(format!("tcp connect: {e}")))?;
        self.over_carrier(socket, Transport::Tcp).await
    }

    async fn dial_ws(&self, target: &Target) -> Result<Dialed, DialError> {
        let Some(ws) = &target.ws else {
            return Err(DialError::Unreachable("no websocket url".into()));
        };
        let socket = tokio::time::timeout(TCP_DIAL_TIMEOUT, ws_connect(ws))
            .await
            .map_err(|_| DialError::Unreachable("websocket connect timed out".into()))??;
        self.over_carrier(socket, Transport::Websocket).await
    }

    /// The QUIC handshake over a carrier connection.
    async fn over_carrier(
        &self,
        socket: Arc<carrier::ClientSocket>,
        transport: Transport,
    ) -> Result<Dialed, DialError> {
        let endpoint = carrier::client_endpoint(socket.clone())
            .map_err(|e| DialError::Failed(format!("carrier endpoint: {e}")))?;
        let connecting = endpoint
            .connect_with(self.carrier_config.clone(), socket.server(), SERVER_NAME)
            .map_err(|e| DialError::Failed(e.to_string()))?;
        let conn = handshake(connecting, TCP_DIAL_TIMEOUT).await?;
        Ok(Dialed {
            conn,
            transport,
            carrier: Some((socket, endpoint)),
        })
    }
}

/// Dials the websocket carrier: TCP, TLS with the pinned API certificate for https, the
/// websocket upgrade. Anything failing before the upgrade's answer is `Unreachable`.
async fn ws_connect(ws: &crate::config::WsTarget) -> Result<Arc<carrier::ClientSocket>, DialError> {
    let unreachable = |what: &str, e: &dyn std::fmt::Display| {
        DialError::Unreachable(format!("{what} {}:{}: {e}", ws.host, ws.port))
    };
    let host = ws.host.trim_start_matches('[').trim_end_matches(']');
    let tcp = tokio::net::TcpStream::connect((host, ws.port))
        .await
        .map_err(|e| unreachable("tcp connect", &e))?;
    let _ = tcp.set_nodelay(true);
    let server = tcp.peer_addr().map_err(|e| unreachable("peer of", &e))?;
    let local = tcp.local_addr().map_err(|e| unreachable("local of", &e))?;
    let limits = carrier::Limits::default();
    let socket = match ws.tls_sha256 {
        None => {
            carrier::ClientSocket::connect_websocket(tcp, &ws.url, server, local, &limits).await
        }
        Some(pin) => {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| DialError::Failed(e.to_string()))?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(PinnedCert::new(
                    pin,
                    provider,
                    API_PIN_MISMATCH,
                )))
                .with_no_client_auth();
            tls.alpn_protocols = vec![b"http/1.1".to_vec()];
            let name = ServerName::try_from(host.to_string())
                .map_err(|e| DialError::Failed(format!("server name {host}: {e}")))?;
            let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
                .connect(name, tcp)
                .await
                .map_err(|e| DialError::Failed(format!("tls with the api: {e}")))?;
            carrier::ClientSocket::connect_websocket(stream, &ws.url, server, local, &limits).await
        }
    };
    socket.map_err(|e| unreachable("websocket to", &e))
}

/// Completes a QUIC handshake within `limit`. Silence (our timer or quinn's idle timeout) is
/// `Unreachable`; any answer that ends it is `Failed`.
async fn handshake(
    connecting: quinn::Connecting,
    limit: Duration,
) -> Result<quinn::Connection, DialError> {
    match tokio::time::timeout(limit, connecting).await {
        Err(_) => Err(DialError::Unreachable(format!(
            "no quic handshake within {} s",
            limit.as_secs()
        ))),
        Ok(Err(quinn::ConnectionError::TimedOut)) => {
            Err(DialError::Unreachable("quic handshake timed out".into()))
        }
        Ok(Err(e)) => Err(DialError::Failed(e.to_string())),
        Ok(Ok(conn)) => Ok(conn),
    }
}

async fn session(dialed: Dialed, config: &Config, ops: &Arc<Ops>) -> SessionEnd {
    let mut end = serve_session(&dialed, config, ops).await;
    if matches!(end, SessionEnd::Closed(_)) && draining(&dialed.conn) {
        end = SessionEnd::Draining;
    }
    if let Some((socket, endpoint)) = &dialed.carrier {
        // The endpoint lives for this session only: close it and its TCP connection.
        endpoint.close(0u32.into(), b"session over");
        socket.close();
    }
    end
}

/// Whether the control plane closed `conn` with [`CLOSE_DRAINING`].
fn draining(conn: &quinn::Connection) -> bool {
    matches!(
        conn.close_reason(),
        Some(quinn::ConnectionError::ApplicationClosed(close))
            if close.error_code == quinn::VarInt::from_u32(CLOSE_DRAINING)
    )
}

async fn serve_session(dialed: &Dialed, config: &Config, ops: &Arc<Ops>) -> SessionEnd {
    let conn = &dialed.conn;
    let (mut send, mut recv) = match conn.open_bi().await {
        Ok(s) => s,
        Err(e) => return SessionEnd::Closed(format!("open control stream: {e}")),
    };
    let agent = format!("rakazo-guest {}", env!("CARGO_PKG_VERSION"));
    let (mut hs, hello) =
        match AgentHandshake::start(config.computer_id.clone(), config.token.clone(), agent) {
            Ok(v) => v,
            Err(e) => return SessionEnd::Closed(format!("encode hello: {e}")),
        };
    if let Err(e) = send.write_all(&hello).await {
        return SessionEnd::Closed(format!("send hello: {e}"));
    }
    let outcome = loop {
        match recv.read_chunk(4096, true).await {
            Ok(Some(chunk)) => match hs.handle_bytes(&chunk.bytes) {
                Ok(Some(outcome)) => break outcome,
                Ok(None) => {}
                Err(e) => return SessionEnd::Closed(format!("bad hello reply: {e}")),
            },
            Ok(None) => return SessionEnd::Closed("control stream ended during hello".into()),
            Err(e) => return SessionEnd::Closed(format!("hello: {e}")),
        }
    };
    match outcome {
        AgentOutcome::Refused(reason) => return SessionEnd::Refused(reason),
        AgentOutcome::Welcome { version } => {
            info!(computer_id = %config.computer_id, version, transport = %dialed.transport, "tunnel connected")
        }
    }
    let remainder = hs.into_remainder();
    let control = tokio::spawn(control_loop(send, recv, remainder, ops.clone()));
    // Over TCP, the end of the TCP connection ends the session at once (QUIC would notice only
    // at its idle timeout).
    let carrier_closed = async {
        match &dialed.carrier {
            Some((socket, _)) => {
                socket.closed().await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::pin!(carrier_closed);
    let end = loop {
        tokio::select! {
            accepted = conn.accept_bi() => match accepted {
                Ok((send, recv)) => {
                    let ops = ops.clone();
                    tokio::spawn(async move { ops.serve_stream(send, recv).await });
                }
                Err(e) => break SessionEnd::Closed(e.to_string()),
            },
            () = &mut carrier_closed => {
                // The close the control plane sent just before its TCP connection ended may not
                // have reached the connection yet; its code decides what the guest does next.
                let _ = tokio::time::timeout(CARRIER_CLOSE_GRACE, conn.closed()).await;
                break SessionEnd::Closed(format!("{} carrier connection ended", dialed.transport));
            }
        }
    };
    control.abort();
    // Operations still running lose their streams and end themselves (exec kills its tree).
    end
}

async fn control_loop(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    remainder: Vec<u8>,
    ops: Arc<Ops>,
) {
    let mut decoder = FrameDecoder::with_max(64 * 1024);
    decoder.push(&remainder);
    loop {
        loop {
            match decoder.next_message::<ControlMsg>() {
                Ok(Some(ControlMsg::Lease { bot, lease })) => ops.update_fence(bot, lease),
                Ok(Some(ControlMsg::Ping { seq })) => {
                    if let Ok(frame) = encode(&ControlMsg::Pong { seq }) {
                        if send.write_all(&frame).await.is_err() {
                            return;
                        }
                    }
                }
                Ok(Some(ControlMsg::Pong { .. })) => {}
                Ok(None) => break,
                Err(e) => {
                    warn!(error = %e, "malformed control message; dropping the control stream");
                    let _ = recv.stop(3u32.into());
                    return;
                }
            }
        }
        match recv.read_chunk(64 * 1024, true).await {
            Ok(Some(chunk)) => decoder.push(&chunk.bytes),
            Ok(None) | Err(_) => return,
        }
    }
}
