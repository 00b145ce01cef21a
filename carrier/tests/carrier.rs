//! The carrier between real sockets on loopback: QUIC connections over it, many at once, and
//! peers that break the rules, each cut off alone.
//!
//! Every wait is bounded by [`WAIT`]; nothing sleeps to wait for readiness (the deadline tests
//! wait for the server to close a connection, which is what they check).

use anyhow::{anyhow, ensure, Context, Result};
use carrier::{frame, ClientSocket, Limits, ServerSocket};
use quinn::AsyncUdpSocket;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(15);
const ALPN: &[u8] = b"carrier-test";

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> Result<T> {
    tokio::time::timeout(WAIT, fut)
        .await
        .map_err(|_| anyhow!("timed out after {WAIT:?} waiting for {what}"))
}

fn transport() -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    carrier::tune_transport(&mut t);
    Arc::new(t)
}

/// A QUIC echo server on a carrier listener: every bidirectional stream is read to its end and
/// written back, then finished.
struct EchoServer {
    addr: SocketAddr,
    /// Where websockets are upgraded (by hand, as an HTTP server would) and handed to the
    /// carrier.
    ws_addr: SocketAddr,
    carrier: carrier::Carrier,
    endpoint: quinn::Endpoint,
    cert: CertificateDer<'static>,
    /// The synthetic address of each accepted QUIC connection, in accept order.
    accepted: tokio::sync::mpsc::UnboundedReceiver<SocketAddr>,
}

impl EchoServer {
    async fn start(limits: Limits) -> Result<Self> {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()])?;
        let cert = ck.cert.der().clone();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], key)?;
        tls.alpn_protocols = vec![ALPN.to_vec()];
        let mut server = quinn::ServerConfig::with_crypto(Arc::new(
            quinn::crypto::rustls::QuicServerConfig::try_from(tls)?,
        ));
        server.transport_config(transport());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (socket, carrier) = carrier::listen(listener, limits)?;
        let ws_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let ws_addr = ws_listener.local_addr()?;
        tokio::spawn(carrier::ws::serve_upgrades(ws_listener, carrier.clone()));
        let mut config = quinn::EndpointConfig::default();
        carrier::tune_endpoint(&mut config);
        let endpoint = quinn::Endpoint::new_with_abstract_socket(
            config,
            Some(server),
            socket as Arc<ServerSocket>,
            quinn::default_runtime().context("runtime")?,
        )?;
        let (tx, accepted) = tokio::sync::mpsc::unbounded_channel();
        let ep = endpoint.clone();
        tokio::spawn(async move {
            while let Some(incoming) = ep.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let Ok(conn) = incoming.await else { return };
                    let _ = tx.send(conn.remote_address());
                    while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                        tokio::spawn(async move {
                            if let Ok(data) = recv.read_to_end(64 << 20).await {
                                let _ = send.write_all(&data).await;
                                let _ = send.finish();
                            }
                        });
                    }
                });
            }
        });
        Ok(Self {
            addr,
            ws_addr,
            carrier,
            endpoint,
            cert,
            accepted,
        })
    }

    /// A QUIC connection to this server over a new carrier connection.
    async fn dial(&self) -> Result<(quinn::Connection, Arc<ClientSocket>)> {
        let socket = within(
            "tcp connect",
            ClientSocket::connect(self.addr, &Limits::default()),
        )
        .await??;
        self.quic(socket).await
    }

    /// A QUIC connection to this server over a new websocket.
    async fn dial_ws(&self) -> Result<(quinn::Connection, Arc<ClientSocket>)> {
        let tcp = TcpStream::connect(self.ws_addr).await?;
        let local = tcp.local_addr()?;
        let url = format!("ws://{}/v1/tunnel", self.ws_addr);
        let socket = within(
            "the websocket",
            ClientSocket::connect_websocket(tcp, &url, self.ws_addr, local, &Limits::default()),
        )
        .await??;
        self.quic(socket).await
    }

    async fn quic(
        &self,
        socket: Arc<ClientSocket>,
    ) -> Result<(quinn::Connection, Arc<ClientSocket>)> {
        let endpoint = carrier::client_endpoint(socket.clone())?;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.cert.clone())?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![ALPN.to_vec()];
        let mut client = quinn::ClientConfig::new(Arc::new(
            quinn::crypto::rustls::QuicClientConfig::try_from(tls)?,
        ));
        client.transport_config(transport());
        let conn = within(
            "the QUIC handshake",
            endpoint.connect_with(client, socket.server(), "localhost")?,
        )
        .await??;
        Ok((conn, socket))
    }
}

impl EchoServer {
    /// Waits until exactly `n` carrier connections are open (accepts and closes are
    /// asynchronous to the peer's view).
    async fn wait_connections(&self, n: usize) -> Result<()> {
        within(&format!("{n} open carrier connections"), async {
            while self.carrier.connections() != n {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.endpoint.close(0u32.into(), b"");
    }
}

/// Sends `data` on a new stream and checks it comes back whole.
async fn echo(conn: &quinn::Connection, data: &[u8]) -> Result<()> {
    let (mut send, mut recv) = within("a stream", conn.open_bi()).await??;
    send.write_all(data).await?;
    send.finish()?;
    let back = within("the echo", recv.read_to_end(64 << 20)).await??;
    ensure!(
        back == data,
        "echo of {} bytes came back different",
        data.len()
    );
    Ok(())
}

/// Waits until the server closes `stream` (EOF or reset), draining whatever it sends.
async fn closed_by_server(stream: &mut TcpStream) -> Result<()> {
    let mut buf = [0u8; 4096];
    within("the server to close the connection", async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections_are_routed_each_to_its_own_peer() -> Result<()> {
    let mut server = EchoServer::start(Limits::default()).await?;
    let mut clients = Vec::new();
    for _ in 0..12 {
        clients.push(server.dial().await?);
    }
    // All at once, each with its own bytes: a datagram routed to the wrong connection would
    // fail its QUIC decryption and the echo would stall or differ.
    let mut tasks = tokio::task::JoinSet::new();
    for (i, (conn, _socket)) in clients.iter().enumerate() {
        let conn = conn.clone();
        tasks.spawn(async move {
            echo(&conn, &pattern(i as u8, 3 << 20)).await?;
            echo(&conn, b"small").await
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    // Each connection had a synthetic address of its own, mapped to its real TCP peer.
    let mut seen = std::collections::HashSet::new();
    for _ in 0..clients.len() {
        let addr = within("an accepted connection", server.accepted.recv())
            .await?
            .context("accept loop ended")?;
        assert!(seen.insert(addr), "address {addr} given twice");
        let peer = server.carrier.tcp_peer(&addr).context("no tcp peer")?;
        assert!(peer.ip().is_loopback(), "{peer}");
        server.carrier.confirm(&addr);
    }
    assert_eq!(server.carrier.connections(), clients.len());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_peer_is_cut_off_alone() -> Result<()> {
    let server = EchoServer::start(Limits::default()).await?;
    let (conn, _socket) = server.dial().await?;
    echo(&conn, b"before").await?;

    let mut empty_frame = frame::PREAMBLE.to_vec();
    empty_frame.extend_from_slice(&[0, 0]);
    let mut oversized = frame::PREAMBLE.to_vec();
    oversized.extend_from_slice(&[0xff, 0xf8]);
    for (what, bytes) in [
        (
            "an HTTP request",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        ),
        ("an empty frame", empty_frame),
        ("an oversized length", oversized),
    ] {
        let mut raw = TcpStream::connect(server.addr).await?;
        raw.write_all(&bytes).await?;
        closed_by_server(&mut raw).await.context(what)?;
    }
    // Well-framed junk is quinn's to drop (as from UDP); the connection stays.
    let mut junk = TcpStream::connect(server.addr).await?;
    let mut bytes = frame::PREAMBLE.to_vec();
    frame::encode(&[0x55; 1200], &mut bytes);
    junk.write_all(&bytes).await?;

    // The real connection never noticed.
    echo(&conn, &pattern(7, 1 << 20)).await?;
    assert!(conn.close_reason().is_none());
    // The garbage peers' connections are gone, the junk one and the real one stay.
    server.wait_connections(2).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_unconfirmed_connections_are_closed_and_confirmed_ones_stay() -> Result<()> {
    let limits = Limits {
        preamble_within: Duration::from_millis(300),
        confirm_within: Duration::from_millis(1500),
        idle: Duration::from_millis(800),
        ..Limits::default()
    };
    let mut server = EchoServer::start(limits).await?;
    // Nothing at all: closed at the preamble deadline.
    let mut silent = TcpStream::connect(server.addr).await?;
    // The preamble, then nothing: closed at the idle deadline.
    let mut quiet = TcpStream::connect(server.addr).await?;
    quiet.write_all(frame::PREAMBLE).await?;
    closed_by_server(&mut silent).await.context("silent")?;
    closed_by_server(&mut quiet).await.context("quiet")?;

    // Two QUIC connections with traffic every 200 ms (inside the idle deadline); only one is
    // confirmed.
    let (kept, kept_socket) = server.dial().await?;
    let (dropped, dropped_socket) = server.dial().await?;
    let first = within("accept", server.accepted.recv())
        .await?
        .context("accept")?;
    let second = within("accept", server.accepted.recv())
        .await?
        .context("accept")?;
    // Accept order need not be dial order: confirm whichever is `kept`'s.
    let kept_local = kept_socket.local_addr()?;
    let kept_addr = if server.carrier.tcp_peer(&first) == Some(kept_local) {
        first
    } else {
        second
    };
    ensure!(server.carrier.tcp_peer(&kept_addr) == Some(kept_local));
    server.carrier.confirm(&kept_addr);
    let pings = |conn: quinn::Connection, rounds: usize| async move {
        for _ in 0..rounds {
            echo(&conn, b"ping").await?;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok::<_, anyhow::Error>(())
    };
    let kept_pings = tokio::spawn(pings(kept.clone(), 15));
    let dropped_pings = tokio::spawn(pings(dropped.clone(), 100));
    within(
        "the unconfirmed connection to close",
        dropped_socket.closed(),
    )
    .await?;
    dropped_pings.abort();
    // Three seconds of traffic, past the confirmation deadline: the confirmed one stays.
    kept_pings.await??;
    assert!(kept.close_reason().is_none());
    server.wait_connections(1).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_refused_until_one_closes() -> Result<()> {
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let server = EchoServer::start(limits).await?;
    let (conn, socket) = server.dial().await?;
    let mut second = TcpStream::connect(server.addr).await?;
    second.write_all(frame::PREAMBLE).await?;
    // The third is closed at once; the first keeps working.
    let mut third = TcpStream::connect(server.addr).await?;
    closed_by_server(&mut third).await?;
    echo(&conn, b"still here").await?;
    // Closing one makes room.
    drop(second);
    server.wait_connections(1).await?;
    let (conn2, _socket2) = server.dial().await?;
    echo(&conn2, b"admitted").await?;
    drop(socket);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_runs_over_a_websocket_beside_tcp_and_a_bad_websocket_is_cut_off_alone() -> Result<()>
{
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let mut server = EchoServer::start(Limits::default()).await?;
    let (ws_conn, _ws_socket) = server.dial_ws().await?;
    let (tcp_conn, _tcp_socket) = server.dial().await?;
    echo(&ws_conn, b"small").await?;
    echo(&ws_conn, &pattern(3, 3 << 20)).await?;
    echo(&tcp_conn, &pattern(4, 1 << 20)).await?;
    for _ in 0..2 {
        let addr = within("an accepted connection", server.accepted.recv())
            .await?
            .context("accept loop ended")?;
        let peer = server.carrier.tcp_peer(&addr).context("no peer")?;
        assert!(peer.ip().is_loopback(), "{peer}");
    }

    // A text message, an empty message, and one over the datagram size each close that
    // websocket alone.
    for (what, msg) in [
        ("a text message", Message::Text("hello".into())),
        ("an empty message", Message::Binary(Vec::new().into())),
        (
            "an oversized message",
            Message::Binary(vec![0u8; frame::MAX_DATAGRAM + 1].into()),
        ),
    ] {
        let url = format!("ws://{}/v1/tunnel", server.ws_addr);
        let tcp = TcpStream::connect(server.ws_addr).await?;
        let (mut ws, _) =
            within("a raw websocket", tokio_tungstenite::client_async(url, tcp)).await??;
        // The send itself may fail once the server has closed: either way it must close.
        let _ = ws.send(msg).await;
        within(what, async {
            use futures_util::StreamExt;
            while let Some(Ok(_)) = ws.next().await {}
        })
        .await
        .context(what)?;
    }
    echo(&ws_conn, &pattern(5, 1 << 20)).await?;
    assert!(ws_conn.close_reason().is_none());
    server.wait_connections(2).await?;
    Ok(())
}

/// Whether a raw websocket upgrade at the server is answered (the upgrader refuses one without
/// a reservation by closing the connection).
async fn raw_websocket(
    server: &EchoServer,
) -> Result<Option<tokio_tungstenite::WebSocketStream<TcpStream>>> {
    let url = format!("ws://{}/v1/tunnel", server.ws_addr);
    let tcp = TcpStream::connect(server.ws_addr).await?;
    match within("a raw websocket", tokio_tungstenite::client_async(url, tcp)).await? {
        Ok((ws, _)) => Ok(Some(ws)),
        Err(_) => Ok(None),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websockets_that_never_log_in_are_capped_and_a_confirmed_one_frees_its_place() -> Result<()>
{
    let limits = Limits {
        max_pending_websockets: 2,
        ..Limits::default()
    };
    let mut server = EchoServer::start(limits).await?;
    // Two strangers take both places; a third is refused before its upgrade is answered.
    let first = raw_websocket(&server).await?.context("first upgrade")?;
    let _second = raw_websocket(&server).await?.context("second upgrade")?;
    assert!(
        raw_websocket(&server).await?.is_none(),
        "a third stranger got in"
    );
    // One stranger leaves: its place comes back once its connection is gone, and a guest gets it.
    drop(first);
    let (conn, _socket) = within("a guest's websocket once a place is free", async {
        loop {
            if let Ok(dialed) = server.dial_ws().await {
                return dialed;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await?;
    echo(&conn, b"in").await?;
    // Logged in (confirmed): its place is free for the next one, which then fills the cap.
    let addr = within("the accepted connection", server.accepted.recv())
        .await?
        .context("accept loop ended")?;
    server.carrier.confirm(&addr);
    let _third = raw_websocket(&server)
        .await?
        .context("upgrade after a confirm")?;
    assert!(
        raw_websocket(&server).await?.is_none(),
        "the cap was not kept"
    );
    echo(&conn, b"still in").await?;
    Ok(())
}
