//! Accepting guests: the listeners (QUIC on UDP, the same QUIC over the TCP carrier on the same
//! port), the accept loops, the handshake, the lease sync and the control loop of each connection.
//!
//! The HTTP API's `GET /v1/tunnel` websockets (`api::tunnel_ws`) join the TCP carrier: the same
//! QUIC over a websocket, accepted here as if it had come over TCP (logged `websocket`).
//!
//! Both listeners feed the same code: a connection over TCP is a QUIC connection like any other
//! (same server certificate, hello, streams); only [`Via`] knows the difference, to log the real
//! TCP peer and to tell the carrier when its connection is the application's (confirmed after the
//! hello) and when it is over (released).

use super::{GuestAuth, GuestConn, Registry};
use gateway_proto::{
    encode, ControlHandshake, ControlMsg, FrameDecoder, HandshakeEvent, RefuseReason,
};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tracing::{debug, info, warn};

/// How long a new connection has to open its control stream and say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// QUIC application close codes.
const CLOSE_REFUSED: u32 = 1;
const CLOSE_PROTOCOL: u32 = 3;
/// Most connections one address may have between its first packet and its hello: a guest
/// needs one (two while its old connection times out), so past this it is somebody dialling
/// without a token, who must not fill the endpoint for everyone else.
const SETTING_UP_PER_ADDRESS: usize = 16;
/// Tries at finding a port free for both UDP and TCP when the tunnel is asked for port 0.
const PORT_0_TRIES: u32 = 16;

/// The tunnel's listeners: QUIC on UDP, and QUIC over the TCP carrier on the same address and
/// port number, for guests whose network drops UDP.
pub struct Listening {
    quic: quinn::Endpoint,
    tcp: quinn::Endpoint,
    carrier: carrier::Carrier,
}

impl Listening {
    /// The UDP (QUIC) address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.quic.local_addr()
    }

    /// The TCP carrier's address (the same port).
    pub fn tcp_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// The carrier under the TCP endpoint, which also takes the HTTP API's websockets
    /// (`GET /v1/tunnel`).
    pub fn carrier(&self) -> carrier::Carrier {
        self.carrier.clone()
    }

    /// The QUIC endpoints, UDP then TCP, for a benchmark that drives them without [`serve`].
    pub fn endpoints(&self) -> (&quinn::Endpoint, &quinn::Endpoint) {
        (&self.quic, &self.tcp)
    }
}

/// Binds the tunnel: UDP on `addr`, TCP on the same ip and port. On port 0 the UDP port is
/// picked first, and another is tried while TCP is taken on it.
///
/// `reset_key` must survive restarts (it lives in the data dir): with it, a restarted control
/// plane answers packets of its predecessor's connections with valid stateless resets, so guests
/// notice the crash at once and dial again instead of waiting for their idle timeout.
pub fn bind(
    addr: SocketAddr,
    config: quinn::ServerConfig,
    reset_key: &[u8; 32],
) -> std::io::Result<Listening> {
    let tries = if addr.port() == 0 { PORT_0_TRIES } else { 1 };
    let mut attempt = 0;
    let (udp, tcp) = loop {
        attempt += 1;
        let udp = std::net::UdpSocket::bind(addr)?;
        let bound = SocketAddr::new(addr.ip(), udp.local_addr()?.port());
        match std::net::TcpListener::bind(bound) {
            Ok(tcp) => break (udp, tcp),
            Err(e) if attempt < tries && e.kind() == std::io::ErrorKind::AddrInUse => {}
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("tcp {bound} (the carrier beside udp {bound}): {e}"),
                ))
            }
        }
    };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, reset_key);
    let runtime = quinn::default_runtime()
        .ok_or_else(|| std::io::Error::other("no async runtime for the tunnel"))?;
    // The tunnel's endpoint and UDP socket are `carrier::quic`'s, as the guest's are.
    let endpoint_config = carrier::quic::endpoint_config(Some(Arc::new(key)));
    // The carrier's endpoint and transport differ only in packet size (`carrier::tune_*`); the
    // rest is `TunnelIdentity::server_config`'s, so the same settings as over UDP.
    let mut tcp_endpoint_config = endpoint_config.clone();
    carrier::tune_endpoint(&mut tcp_endpoint_config);
    let mut tcp_config = config.clone();
    let mut transport = crate::tls::transport_config(1);
    carrier::tune_transport(&mut transport);
    tcp_config.transport_config(Arc::new(transport));

    let quic = carrier::quic::udp_endpoint(udp, endpoint_config, Some(config))?;
    tcp.set_nonblocking(true)?;
    let (socket, carrier) = carrier::listen(
        tokio::net::TcpListener::from_std(tcp)?,
        carrier::Limits::default(),
    )?;
    let tcp = quinn::Endpoint::new_with_abstract_socket(
        tcp_endpoint_config,
        Some(tcp_config),
        socket,
        runtime,
    )?;
    Ok(Listening { quic, tcp, carrier })
}

/// Which listener a connection came through.
#[derive(Clone)]
enum Via {
    Quic,
    Tcp(carrier::Carrier),
}

impl Via {
    /// The peer to log: a TCP connection's real address, not the carrier's synthetic one.
    fn peer(&self, remote: SocketAddr) -> SocketAddr {
        match self {
            Self::Quic => remote,
            Self::Tcp(c) => c.tcp_peer(&remote).unwrap_or(remote),
        }
    }

    /// The connection authenticated: its carrier connection is no longer on a deadline.
    fn confirm(&self, remote: &SocketAddr) {
        if let Self::Tcp(c) = self {
            c.confirm(remote);
        }
    }

    /// The connection is over: its carrier connection closes.
    fn release(&self, remote: &SocketAddr) {
        if let Self::Tcp(c) = self {
            c.release(remote);
        }
    }
}

impl Via {
    /// The transport to log: `quic`, `tcp`, or `websocket` for a carrier connection that came
    /// through the HTTP API (`GET /v1/tunnel`).
    fn transport(&self, remote: &SocketAddr) -> &'static str {
        match self {
            Self::Quic => "quic",
            Self::Tcp(c) if c.is_websocket(remote) => "websocket",
            Self::Tcp(_) => "tcp",
        }
    }
}

/// Accepts guests on both listeners until they close.
pub async fn serve<A: GuestAuth>(tunnel: Listening, registry: Arc<Registry>, auth: Arc<A>) {
    let Listening { quic, tcp, carrier } = tunnel;
    let over_tcp = tokio::spawn(accept_loop(
        tcp,
        Via::Tcp(carrier),
        registry.clone(),
        auth.clone(),
    ));
    accept_loop(quic, Via::Quic, registry, auth).await;
    over_tcp.abort();
}

/// The connections of each address still setting up (handshake and hello), for
/// [`SETTING_UP_PER_ADDRESS`].
#[derive(Default)]
struct SettingUp(Mutex<HashMap<IpAddr, usize>>);

/// One connection setting up; counted until dropped.
struct SetupGuard {
    table: Arc<SettingUp>,
    ip: IpAddr,
}

impl SettingUp {
    /// A place for a new connection from `ip`, unless the address has every place already.
    fn enter(self: &Arc<Self>, ip: IpAddr) -> Option<SetupGuard> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = map.entry(ip).or_insert(0);
        if *n >= SETTING_UP_PER_ADDRESS {
            return None;
        }
        *n += 1;
        Some(SetupGuard {
            table: self.clone(),
            ip,
        })
    }
}

impl Drop for SetupGuard {
    fn drop(&mut self) {
        let mut map = self.table.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

async fn accept_loop<A: GuestAuth>(
    endpoint: quinn::Endpoint,
    via: Via,
    registry: Arc<Registry>,
    auth: Arc<A>,
) {
    let setting_up = Arc::new(SettingUp::default());
    let mut refused = 0u64;
    while let Some(incoming) = endpoint.accept().await {
        let peer = via.peer(incoming.remote_address());
        let Some(setup) = setting_up.enter(peer.ip()) else {
            // One WARN per 100 refusals at most: a flood must not flood the log too.
            if refused.is_multiple_of(100) {
                warn!(remote = %peer, per_address = SETTING_UP_PER_ADDRESS, refused = refused + 1,
                      "tunnel connection refused: its address has the most connections setting up");
            }
            refused += 1;
            incoming.refuse();
            continue;
        };
        let registry = registry.clone();
        let auth = auth.clone();
        let via = via.clone();
        tokio::spawn(async move {
            let remote = incoming.remote_address();
            match incoming.await {
                Ok(conn) => handle_connection(conn, via, registry, auth, setup).await,
                Err(e) => {
                    let transport = via.transport(&remote);
                    let remote = via.peer(remote);
                    info!(%remote, %transport, error = %e, "tunnel connection failed during setup");
                }
            }
        });
    }
}

async fn handle_connection<A: GuestAuth>(
    conn: quinn::Connection,
    via: Via,
    registry: Arc<Registry>,
    auth: Arc<A>,
    setup: SetupGuard,
) {
    let remote = conn.remote_address();
    serve_connection(&conn, &via, registry, auth, setup).await;
    // However it ended, the connection is over, and so is its carrier connection over TCP.
    conn.closed().await;
    via.release(&remote);
}

async fn serve_connection<A: GuestAuth>(
    conn: &quinn::Connection,
    via: &Via,
    registry: Arc<Registry>,
    auth: Arc<A>,
    setup: SetupGuard,
) {
    let transport = via.transport(&conn.remote_address());
    let remote = via.peer(conn.remote_address());
    let accepted = tokio::time::timeout(HELLO_TIMEOUT, handshake(conn, auth.as_ref())).await;
    drop(setup);
    let (computer, mut send, mut recv, remainder) = match accepted {
        Ok(Ok(v)) => v,
        Ok(Err(HelloError::Refused(reason))) => {
            warn!(%remote, %transport, %reason, "guest connection refused");
            conn.close(CLOSE_REFUSED.into(), reason.to_string().as_bytes());
            return;
        }
        Ok(Err(HelloError::Gone(detail))) => {
            // The connection ended before its hello did (a guest stopped or killed while it
            // dialled): nothing to refuse, and nothing said about the guest.
            info!(%remote, %transport, %detail, "guest connection ended during its hello");
            return;
        }
        Err(_) => {
            warn!(%remote, %transport, reason = "no hello within 10 s", "guest connection refused");
            conn.close(CLOSE_REFUSED.into(), b"hello timeout");
            return;
        }
    };
    via.confirm(&conn.remote_address());
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
        Ok(Err(SyncError::Gone(detail))) => {
            // The guest went away (stopped, killed, or replaced by its own newer connection)
            // before its sync ended: nothing to refuse, and nothing wrong with the guest.
            info!(computer_id = %computer, %remote, %detail, "guest connection ended during its lease sync");
            return;
        }
        Ok(Err(SyncError::Protocol(detail))) => {
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
    info!(computer_id = %computer, %remote, %transport, live_leases = pushed, "guest connected");

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

/// Why a connection did not get through its hello.
enum HelloError {
    /// The guest broke the handshake or failed to authenticate: refused, and worth a warning.
    Refused(RefuseReason),
    /// The connection ended under it (lost, reset, closed by the guest's side).
    Gone(String),
}

impl From<RefuseReason> for HelloError {
    fn from(reason: RefuseReason) -> Self {
        Self::Refused(reason)
    }
}

async fn handshake<A: GuestAuth>(
    conn: &quinn::Connection,
    auth: &A,
) -> Result<Accepted, HelloError> {
    let (mut send, mut recv) = conn
        .accept_bi()
        .await
        .map_err(|e| HelloError::Gone(e.to_string()))?;
    let mut hs = ControlHandshake::new();
    let event = loop {
        match recv.read_chunk(4096, true).await {
            Ok(Some(chunk)) => {
                if let Some(ev) = hs.handle_bytes(&chunk.bytes) {
                    break ev;
                }
            }
            Err(quinn::ReadError::ConnectionLost(e)) => {
                return Err(HelloError::Gone(e.to_string()))
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
/// Why a lease sync did not end.
enum SyncError {
    /// The connection ended under it: the guest is gone, not misbehaving.
    Gone(String),
    /// The guest broke the protocol.
    Protocol(String),
}

fn write_error(e: quinn::WriteError) -> SyncError {
    match e {
        quinn::WriteError::ConnectionLost(e) => SyncError::Gone(e.to_string()),
        e => SyncError::Protocol(e.to_string()),
    }
}

async fn sync_leases(
    send: &mut quinn::SendStream,
    recv: &mut quinn::RecvStream,
    decoder: &mut FrameDecoder,
    guest: &GuestConn,
) -> Result<(), SyncError> {
    let protocol = |e: &dyn std::fmt::Display| SyncError::Protocol(e.to_string());
    let mut msgs = guest.unsent_leases();
    msgs.push(ControlMsg::Ping { seq: SYNC_PING });
    for msg in msgs {
        let frame = encode(&msg).map_err(|e| protocol(&e))?;
        send.write_all(&frame).await.map_err(write_error)?;
    }
    loop {
        while let Some(msg) = decoder
            .next_message::<ControlMsg>()
            .map_err(|e| protocol(&e))?
        {
            match msg {
                ControlMsg::Pong { seq: SYNC_PING } => return Ok(()),
                ControlMsg::Pong { .. } => {}
                ControlMsg::Ping { seq } => {
                    let frame = encode(&ControlMsg::Pong { seq }).map_err(|e| protocol(&e))?;
                    send.write_all(&frame).await.map_err(write_error)?;
                }
                ControlMsg::Lease { .. } => return Err(protocol(&"guest sent a lease message")),
            }
        }
        match recv.read_chunk(64 * 1024, true).await {
            Ok(Some(chunk)) => decoder.push(&chunk.bytes),
            Ok(None) => return Err(protocol(&"control stream ended during the lease sync")),
            Err(quinn::ReadError::ConnectionLost(e)) => return Err(SyncError::Gone(e.to_string())),
            Err(e) => return Err(protocol(&e)),
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
mod setting_up_tests {
    use super::*;

    #[test]
    fn an_address_sets_up_at_most_its_places_and_a_finished_one_frees_its_place() {
        let t = Arc::new(SettingUp::default());
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let held: Vec<_> = (0..SETTING_UP_PER_ADDRESS)
            .map(|_| t.enter(a).expect("a place"))
            .collect();
        assert!(t.enter(a).is_none(), "the address has every place");
        let other = t.enter(b).expect("another address has its own places");
        drop(held);
        assert!(t.enter(a).is_some());
        drop(other);
        assert!(t.0.lock().unwrap().is_empty(), "no count is kept at zero");
    }
}
