//! The real guest tunnel against a fake control plane: real QUIC on loopback, the real protocol.
//!
//! Each test runs `guest_agent::tunnel::run` in a task, pointed at a quinn server endpoint on
//! 127.0.0.1:0 with a fresh self-signed certificate whose SHA-256 the guest pins. The fake control
//! plane accepts the guest's connection, answers the hello with `ControlHandshake`, and then acts
//! as the control plane does: lease pushes on the control stream, one stream per operation.
//!
//! Nothing sleeps to wait for readiness. Lease pushes race operation streams (they travel on
//! different streams), so every push is followed by a control-stream ping: the guest handles
//! control messages in order, so its pong proves the push was applied. Every network wait is
//! bounded by a timeout.

mod common;

use anyhow::{anyhow, bail, ensure, Context, Result};
use common::{identity, server, tcp_server, ws_server};
use gateway_proto::{
    encode, BotId, BotLease, ControlHandshake, ControlMsg, ErrorCode, ExecEvent, ExecRequest,
    FrameDecoder, HandshakeEvent, LeaseToken, OpError, ReadFile, Reply, Request,
};
use guest_agent::config::Config;
use guest_agent::home::Home;
use guest_agent::ops::Ops;
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

const COMPUTER_ID: &str = "c-tunnel-test";
/// Bound on every single network wait; generous for a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(15);

/// Awaits `fut`, failing with `what` after [`WAIT`].
async fn within<T>(what: &str, fut: impl IntoFuture<Output = T>) -> Result<T> {
    tokio::time::timeout(WAIT, fut)
        .await
        .map_err(|_| anyhow!("timed out after {WAIT:?} waiting for {what}"))
}

fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("guest_agent=debug"))
        .with_test_writer()
        .try_init();
}

/// What the fake control plane listens on.
#[derive(Clone, Copy)]
enum Over {
    Udp,
    /// The TCP carrier only (UDP never answers).
    Tcp,
    /// The websocket carrier only (UDP never answers, TCP refuses).
    Ws,
    /// Nothing at the guest's primary address (UDP never answers, TCP refuses): the endpoint
    /// is the first other replica (`RAKAZO_CONTROL_ADDRS`).
    DeadPrimary,
}

/// A fake control plane and the real guest dialing it.
struct Harness {
    endpoint: quinn::Endpoint,
    /// Over TCP or the websocket: the carrier under `endpoint`.
    carrier: Option<carrier::Carrier>,
    /// The UDP socket the guest is told to dial when that never answers (as where a network
    /// drops UDP, or the control plane is gone).
    black_hole: Option<std::net::UdpSocket>,
    /// More control-plane replicas (QUIC on UDP, same certificate), named in
    /// `RAKAZO_CONTROL_ADDRS` in this order, after `endpoint` when that is a replica too.
    replicas: Vec<quinn::Endpoint>,
    home: PathBuf,
    token: String,
    guest: tokio::task::JoinHandle<Result<()>>,
    _home_dir: tempfile::TempDir,
}

impl Harness {
    /// Starts a fake control plane and a guest that pins its certificate.
    async fn start() -> Result<Self> {
        Self::start_pinning(None).await
    }

    /// Starts a fake control plane and a guest pinning `fingerprint` (default: the server's).
    async fn start_pinning(fingerprint: Option<String>) -> Result<Self> {
        Self::start_with(fingerprint, Over::Udp, 0).await
    }

    /// Starts a fake control plane on the TCP carrier only, and a guest whose UDP address
    /// never answers.
    async fn start_over_tcp() -> Result<Self> {
        Self::start_with(None, Over::Tcp, 0).await
    }

    /// Starts a fake control plane taking websockets only, and a guest whose UDP address never
    /// answers and whose TCP address refuses.
    async fn start_over_ws() -> Result<Self> {
        Self::start_with(None, Over::Ws, 0).await
    }

    /// Starts a fake control plane as `over` says, `replicas` more on UDP, and the guest.
    async fn start_with(fingerprint: Option<String>, over: Over, replicas: usize) -> Result<Self> {
        init_logging();
        let (cert, key, real_fingerprint) = identity()?;
        let black_hole = || -> Result<_> {
            let black_hole = std::net::UdpSocket::bind("127.0.0.1:0")?;
            black_hole.set_nonblocking(true)?;
            Ok((black_hole.local_addr()?, black_hole))
        };
        // A port nothing listens on: the TCP carrier is refused.
        let dead_tcp = || -> Result<SocketAddr> {
            Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
        };
        let mut other_addrs = Vec::new();
        let (endpoint, carrier, black_hole, udp_addr, tcp_addr, ws_addr) = match over {
            Over::Tcp => {
                let (endpoint, carrier) = tcp_server(cert.clone(), key.clone_key()).await?;
                let (udp_addr, black_hole) = black_hole()?;
                let tcp_addr = endpoint.local_addr()?;
                (
                    endpoint,
                    Some(carrier),
                    Some(black_hole),
                    udp_addr,
                    tcp_addr,
                    None,
                )
            }
            Over::Ws => {
                let (endpoint, carrier, ws_addr) = ws_server(cert.clone(), key.clone_key()).await?;
                let (udp_addr, black_hole) = black_hole()?;
                (
                    endpoint,
                    Some(carrier),
                    Some(black_hole),
                    udp_addr,
                    dead_tcp()?,
                    Some(ws_addr),
                )
            }
            Over::Udp => {
                let endpoint = server(cert.clone(), key.clone_key())?;
                let addr: SocketAddr = endpoint.local_addr()?;
                (endpoint, None, None, addr, addr, None)
            }
            Over::DeadPrimary => {
                let endpoint = server(cert.clone(), key.clone_key())?;
                other_addrs.push(endpoint.local_addr()?);
                let (udp_addr, black_hole) = black_hole()?;
                (
                    endpoint,
                    None,
                    Some(black_hole),
                    udp_addr,
                    dead_tcp()?,
                    None,
                )
            }
        };
        let replicas = (0..replicas)
            .map(|_| server(cert.clone(), key.clone_key()))
            .collect::<Result<Vec<_>>>()?;
        for r in &replicas {
            other_addrs.push(r.local_addr()?);
        }
        let home_dir = tempfile::tempdir()?;
        let token = hex::encode(rand::random::<[u8; 16]>());
        let mut env: HashMap<String, String> = HashMap::from([
            ("RAKAZO_CONTROL_ADDR".into(), udp_addr.to_string()),
            ("RAKAZO_CONTROL_TCP_ADDR".into(), tcp_addr.to_string()),
            (
                "RAKAZO_CONTROL_CERT_SHA256".into(),
                fingerprint.unwrap_or(real_fingerprint),
            ),
            ("RAKAZO_COMPUTER_ID".into(), COMPUTER_ID.into()),
            ("RAKAZO_ENROLL_TOKEN".into(), token.clone()),
            ("RAKAZO_HOME".into(), home_dir.path().display().to_string()),
        ]);
        if !other_addrs.is_empty() {
            let list: Vec<String> = other_addrs.iter().map(|a| a.to_string()).collect();
            env.insert("RAKAZO_CONTROL_ADDRS".into(), list.join(","));
        }
        if let Some(ws_addr) = ws_addr {
            env.insert(
                "RAKAZO_CONTROL_WS_URL".into(),
                format!("http://{ws_addr}/v1/tunnel"),
            );
        }
        let config = Config::from_source(&env)?;
        // No desktop is started by these tests; the screens manager only needs its settings.
        let screens = Arc::new(guest_agent::screens::Screens::new(
            guest_agent::screens::ScreensConfig {
                home: home_dir.path().to_path_buf(),
                runtime_dir: config.runtime_dir.clone(),
                limit: None,
                chromium: config.chromium.clone(),
            },
            guest_agent::clock::monotonic(),
        ));
        let ops = Arc::new(Ops::new(Home::new(home_dir.path())?, screens));
        let guest = tokio::spawn(guest_agent::tunnel::run(config, ops));
        Ok(Self {
            endpoint,
            carrier,
            black_hole,
            replicas,
            home: std::fs::canonicalize(home_dir.path())?,
            token,
            guest,
            _home_dir: home_dir,
        })
    }

    /// Accepts the guest's next connection and completes the hello, accepting its credentials.
    async fn accept(&self) -> Result<Session> {
        self.accept_on(&self.endpoint).await
    }

    /// [`Harness::accept`] on `endpoint` (one of the replicas).
    async fn accept_on(&self, endpoint: &quinn::Endpoint) -> Result<Session> {
        let incoming = within("the guest to dial", endpoint.accept())
            .await?
            .ok_or_else(|| anyhow!("server endpoint closed"))?;
        let conn = within("the QUIC handshake", incoming).await??;
        let (mut send, mut recv) = within("the control stream", conn.accept_bi()).await??;
        let mut hs = ControlHandshake::new();
        let event = loop {
            let chunk = within("the hello", recv.read_chunk(4096, true))
                .await??
                .ok_or_else(|| anyhow!("control stream ended before the hello"))?;
            if let Some(event) = hs.handle_bytes(&chunk.bytes) {
                break event;
            }
        };
        match event {
            HandshakeEvent::Authenticate {
                computer_id, token, ..
            } => {
                ensure!(computer_id == COMPUTER_ID, "hello from {computer_id}");
                ensure!(token.expose() == self.token, "hello with the wrong token");
            }
            HandshakeEvent::Failed(reason) => bail!("the guest's hello failed: {reason}"),
        }
        hs.accept();
        while let Some(frame) = hs.poll_transmit() {
            send.write_all(&frame).await?;
        }
        let mut decoder = FrameDecoder::with_max(64 * 1024);
        decoder.push(&hs.into_remainder());
        Ok(Session {
            conn,
            control: Control {
                send,
                recv,
                decoder,
                seq: 0,
            },
        })
    }
}

impl Harness {
    /// Datagrams the guest sent to its (never answering) UDP address since the last call.
    fn udp_datagrams(&self) -> Result<usize> {
        let black_hole = self.black_hole.as_ref().context("no black hole")?;
        let mut buf = [0u8; 2048];
        let mut n = 0;
        loop {
            match black_hole.recv_from(&mut buf) {
                Ok(_) => n += 1,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(n),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.guest.abort();
    }
}

/// The control plane's end of the control stream.
struct Control {
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    decoder: FrameDecoder,
    seq: u64,
}

impl Control {
    async fn send(&mut self, msg: &ControlMsg) -> Result<()> {
        self.send.write_all(&encode(msg)?).await?;
        Ok(())
    }

    /// Pings the guest on the control stream and waits for its pong: everything sent before
    /// has been handled.
    async fn sync(&mut self) -> Result<()> {
        self.seq += 1;
        let seq = self.seq;
        self.send(&ControlMsg::Ping { seq }).await?;
        loop {
            match self.decoder.next_message::<ControlMsg>()? {
                Some(ControlMsg::Pong { seq: got }) if got == seq => return Ok(()),
                Some(_) => continue,
                None => {}
            }
            let chunk = within("the control pong", self.recv.read_chunk(64 * 1024, true))
                .await??
                .ok_or_else(|| anyhow!("control stream ended"))?;
            self.decoder.push(&chunk.bytes);
        }
    }

    /// Pushes a lease grant (`Some`) or release (`None`) and waits until the guest applied it.
    async fn push_lease(&mut self, bot: &str, lease: Option<&str>) -> Result<()> {
        let lease = lease.map(LeaseToken::parse).transpose()?;
        self.send(&ControlMsg::Lease {
            bot: BotId::new(bot)?,
            lease,
        })
        .await?;
        self.sync().await
    }
}

/// One accepted guest connection.
struct Session {
    conn: quinn::Connection,
    control: Control,
}

/// The outcome of reading an operation stream to its end.
struct StreamEnd {
    bytes: Vec<u8>,
    /// The reset code, if the guest reset the stream instead of finishing it.
    reset: Option<u64>,
}

async fn read_to_end(recv: &mut quinn::RecvStream) -> Result<StreamEnd> {
    let mut bytes = Vec::new();
    loop {
        match within("the guest's answer", recv.read_chunk(64 * 1024, true)).await? {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk.bytes),
            Ok(None) => return Ok(StreamEnd { bytes, reset: None }),
            Err(quinn::ReadError::Reset(code)) => {
                return Ok(StreamEnd {
                    bytes,
                    reset: Some(code.into_inner()),
                })
            }
            Err(e) => bail!("reading an operation stream: {e}"),
        }
    }
}

/// Every frame of `bytes`, which must be whole frames of `T`.
fn frames<T: DeserializeOwned>(bytes: &[u8]) -> Result<Vec<T>> {
    let mut decoder = FrameDecoder::new();
    decoder.push(bytes);
    let mut out = Vec::new();
    while let Some(msg) = decoder.next_message::<T>()? {
        out.push(msg);
    }
    decoder.finish()?;
    Ok(out)
}

impl Session {
    /// Opens an operation stream and sends `req` as its first frame, then finishes our side.
    async fn request(&self, req: &Request) -> Result<StreamEnd> {
        let (mut send, mut recv) = within("an operation stream", self.conn.open_bi()).await??;
        send.write_all(&encode(req)?).await?;
        send.finish()?;
        read_to_end(&mut recv).await
    }

    /// Runs `argv` in the home, acting for `bot` under `lease` if given; returns the events.
    async fn exec(&self, argv: &[&str], lease: Option<(&str, &str)>) -> Result<Vec<ExecEvent>> {
        let req = Request::Exec(ExecRequest {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            cwd: None,
            env: Vec::new(),
            timeout_ms: Some(WAIT.as_millis() as u64),
            stdin: false,
            lease: bot_lease(lease)?,
            start: Default::default(),
        });
        let end = self.request(&req).await?;
        ensure!(end.reset.is_none(), "exec stream reset: {:?}", end.reset);
        frames(&end.bytes)
    }

    async fn ping(&self) -> Result<()> {
        let end = self.request(&Request::Ping).await?;
        let replies: Vec<Reply> = frames(&end.bytes)?;
        ensure!(
            replies == vec![Reply::Pong] && end.reset.is_none(),
            "ping answered {replies:?} (reset {:?})",
            end.reset
        );
        Ok(())
    }
}

fn bot_lease(lease: Option<(&str, &str)>) -> Result<Option<BotLease>> {
    lease
        .map(|(bot, token)| {
            Ok(BotLease {
                bot: BotId::new(bot)?,
                token: LeaseToken::parse(token)?,
            })
        })
        .transpose()
}

/// Asserts the command ran: `Started`, then (output), then `Exit { code: 0 }`.
fn assert_ran(events: &[ExecEvent]) {
    assert!(
        matches!(events.first(), Some(ExecEvent::Started { .. })),
        "{events:?}"
    );
    assert!(
        matches!(events.last(), Some(ExecEvent::Exit { code: 0, .. })),
        "{events:?}"
    );
}

/// Asserts the command was refused for a stale lease and nothing started.
fn assert_stale(events: &[ExecEvent]) {
    assert!(
        matches!(
            events,
            [ExecEvent::Failed(OpError {
                code: ErrorCode::StaleLease,
                ..
            })]
        ),
        "expected only Failed(StaleLease), got {events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_fence_is_refused_by_the_guest_and_nothing_runs() -> Result<()> {
    let h = Harness::start().await?;
    let mut s = h.accept().await?;
    s.control.push_lease("b1", Some("run-b:2")).await?;

    let events = s
        .exec(&["touch", "stale-marker"], Some(("b1", "run-a:1")))
        .await?;
    assert_stale(&events);
    assert!(
        !h.home.join("stale-marker").exists(),
        "a command with a stale lease ran"
    );

    let events = s
        .exec(&["touch", "fresh-marker"], Some(("b1", "run-b:2")))
        .await?;
    assert_ran(&events);
    assert!(h.home.join("fresh-marker").exists());

    // Reads are fenced too: a stale lease gets an error, the current one gets the file.
    std::fs::write(h.home.join("note.txt"), b"fenced")?;
    let read = |lease: &str| {
        Ok::<_, anyhow::Error>(Request::ReadFile(ReadFile {
            path: "note.txt".into(),
            max_bytes: 1024,
            lease: bot_lease(Some(("b1", lease)))?,
        }))
    };
    let end = s.request(&read("run-a:1")?).await?;
    let replies: Vec<Reply> = frames(&end.bytes)?;
    assert!(
        matches!(
            replies.as_slice(),
            [Reply::Error(OpError {
                code: ErrorCode::StaleLease,
                ..
            })]
        ),
        "{replies:?}"
    );
    let end = s.request(&read("run-b:2")?).await?;
    let mut decoder = FrameDecoder::new();
    decoder.push(&end.bytes);
    assert_eq!(
        decoder.next_message::<Reply>()?,
        Some(Reply::ReadStart { size: 6 })
    );
    assert_eq!(decoder.into_remainder(), b"fenced");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_fence_presented_with_a_command_is_adopted() -> Result<()> {
    let h = Harness::start().await?;
    let s = h.accept().await?;
    // No push at all: the guest learns fences from the commands themselves.
    assert_ran(&s.exec(&["touch", "a1"], Some(("b1", "run-a:1"))).await?);
    assert_ran(&s.exec(&["touch", "b2"], Some(("b1", "run-b:2"))).await?);
    assert_stale(
        &s.exec(&["touch", "a1-again"], Some(("b1", "run-a:1")))
            .await?,
    );
    assert!(h.home.join("a1").exists() && h.home.join("b2").exists());
    assert!(!h.home.join("a1-again").exists());
    // Other bots are unaffected, and so are commands that act for no bot.
    assert_ran(&s.exec(&["true"], Some(("b2", "run-a:1"))).await?);
    assert_ran(&s.exec(&["true"], None).await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_lease_is_refused() -> Result<()> {
    let h = Harness::start().await?;
    let mut s = h.accept().await?;
    s.control.push_lease("b1", Some("run-a:1")).await?;
    assert_ran(&s.exec(&["true"], Some(("b1", "run-a:1"))).await?);
    s.control.push_lease("b1", None).await?;
    assert_stale(
        &s.exec(&["touch", "after-release"], Some(("b1", "run-a:1")))
            .await?,
    );
    assert!(!h.home.join("after-release").exists());
    // The next grant (a higher fence) works.
    s.control.push_lease("b1", Some("run-b:2")).await?;
    assert_ran(&s.exec(&["true"], Some(("b1", "run-b:2"))).await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_an_operation_stream_resets_only_that_stream() -> Result<()> {
    let h = Harness::start().await?;
    let mut s = h.accept().await?;

    // A whole frame whose payload is garbage: variant index 0x7f does not exist, then noise.
    let mut bad_payload = vec![0x7f];
    bad_payload.extend_from_slice(&rand::random::<[u8; 63]>());
    let mut garbage = (bad_payload.len() as u32).to_be_bytes().to_vec();
    garbage.extend_from_slice(&bad_payload);
    // A length prefix far over the frame limit.
    let oversized = 0xFFFF_FFFFu32.to_be_bytes().to_vec();

    for (what, bytes) in [
        ("garbage payload", garbage),
        ("oversized prefix", oversized),
    ] {
        let (mut send, mut recv) = within("an operation stream", s.conn.open_bi()).await??;
        // The guest may stop our side before we finish writing; that is part of the refusal.
        match send.write_all(&bytes).await {
            Ok(()) => {
                let _ = send.finish();
            }
            Err(quinn::WriteError::Stopped(code)) => assert_eq!(code.into_inner(), 3, "{what}"),
            Err(e) => bail!("{what}: writing failed: {e}"),
        }
        let end = read_to_end(&mut recv).await?;
        // The guest answers BadRequest and resets; the reset may overtake the answer.
        let replies: Vec<Reply> = if end.reset.is_some() {
            let mut d = FrameDecoder::new();
            d.push(&end.bytes);
            d.next_message()?.into_iter().collect()
        } else {
            frames(&end.bytes)?
        };
        assert!(
            end.reset.is_some() || !replies.is_empty(),
            "{what}: the guest neither answered nor reset"
        );
        if let Some(code) = end.reset {
            assert_eq!(code, 3, "{what}: reset code");
        }
        for reply in &replies {
            assert!(
                matches!(
                    reply,
                    Reply::Error(OpError {
                        code: ErrorCode::BadRequest,
                        ..
                    })
                ),
                "{what}: {reply:?}"
            );
        }
    }

    // The connection and the control stream are untouched; new streams are served.
    assert!(s.conn.close_reason().is_none());
    s.ping().await?;
    s.control.sync().await?;
    assert_ran(&s.exec(&["true"], None).await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guest_reconnects_after_the_connection_drops() -> Result<()> {
    let h = Harness::start().await?;
    let mut s = h.accept().await?;
    s.ping().await?;
    s.control.push_lease("b1", Some("run-b:2")).await?;
    s.conn.close(0u32.into(), b"control plane going away");

    // The guest redials (with backoff) and says hello again on a fresh connection.
    let s2 = h.accept().await?;
    assert_ne!(s2.conn.stable_id(), s.conn.stable_id());
    s2.ping().await?;
    // Its fence table outlives the connection.
    assert_stale(
        &s2.exec(&["touch", "stale"], Some(("b1", "run-a:1")))
            .await?,
    );
    assert_ran(&s2.exec(&["true"], Some(("b1", "run-b:2"))).await?);
    assert!(!h.guest.is_finished(), "the guest's tunnel loop ended");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_certificate_is_refused_by_the_guest() -> Result<()> {
    let h = Harness::start_pinning(Some("ab".repeat(32))).await?;
    let mut failed = 0u32;
    let established = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            let Some(incoming) = h.endpoint.accept().await else {
                return Err(anyhow!("server endpoint closed"));
            };
            match incoming.await {
                Ok(conn) => return Ok(conn),
                Err(_) => failed += 1,
            }
        }
    })
    .await;
    match established {
        Err(_elapsed) => {}
        Ok(Ok(conn)) => bail!(
            "a connection to an unpinned certificate was established ({:?})",
            conn.remote_address()
        ),
        Ok(Err(e)) => return Err(e).context("accepting connections"),
    }
    // The guest did try (and keeps trying with backoff); every attempt failed the TLS handshake.
    assert!(failed >= 1, "the guest never dialed");
    assert!(!h.guest.is_finished(), "the guest's tunnel loop ended");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_whose_udp_gets_no_answer_runs_the_tunnel_over_tcp() -> Result<()> {
    let h = Harness::start_over_tcp().await?;
    let carrier = h.carrier.as_ref().context("tcp harness")?;
    // The QUIC handshake waits for the UDP attempt to time out, then goes over TCP.
    let s = h.accept().await?;
    let peer = carrier.tcp_peer(&s.conn.remote_address());
    assert!(
        peer.is_some_and(|p| p.ip().is_loopback()),
        "the connection is not the carrier's: {peer:?}"
    );
    assert!(h.udp_datagrams()? > 0, "the guest never tried UDP first");

    // Everything above the transport is unchanged: exec, streamed file bytes, fences.
    s.ping().await?;
    let events = s.exec(&["sh", "-c", "echo over-tcp"], None).await?;
    assert_ran(&events);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ExecEvent::Stdout(b) if b.as_slice() == b"over-tcp\n")),
        "{events:?}"
    );
    let big: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(h.home.join("big.bin"), &big)?;
    let end = s
        .request(&Request::ReadFile(ReadFile {
            path: "big.bin".into(),
            max_bytes: 8 << 20,
            lease: None,
        }))
        .await?;
    let mut decoder = FrameDecoder::new();
    decoder.push(&end.bytes);
    assert_eq!(
        decoder.next_message::<Reply>()?,
        Some(Reply::ReadStart {
            size: big.len() as u64
        })
    );
    assert!(
        decoder.into_remainder() == big,
        "the file came back different"
    );

    // After a disconnect the guest redials what worked, TCP, without waiting on UDP again.
    let mut s = s;
    s.control.push_lease("b1", Some("run-b:2")).await?;
    s.conn.close(0u32.into(), b"control plane going away");
    let s2 = h.accept().await?;
    assert!(carrier.tcp_peer(&s2.conn.remote_address()).is_some());
    assert_eq!(
        h.udp_datagrams()?,
        0,
        "the guest tried UDP before TCP again"
    );
    assert_stale(
        &s2.exec(&["touch", "stale"], Some(("b1", "run-a:1")))
            .await?,
    );
    assert_ran(&s2.exec(&["true"], Some(("b1", "run-b:2"))).await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_that_reaches_neither_udp_nor_tcp_runs_the_tunnel_over_the_websocket() -> Result<()>
{
    let h = Harness::start_over_ws().await?;
    let carrier = h.carrier.as_ref().context("ws harness")?;
    // UDP times out, TCP is refused, the websocket carries the QUIC connection.
    let s = h.accept().await?;
    assert!(
        carrier.is_websocket(&s.conn.remote_address()),
        "the connection is not the websocket carrier's"
    );
    assert!(h.udp_datagrams()? > 0, "the guest never tried UDP first");
    s.ping().await?;
    let events = s.exec(&["sh", "-c", "echo over-ws"], None).await?;
    assert_ran(&events);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ExecEvent::Stdout(b) if b.as_slice() == b"over-ws\n")),
        "{events:?}"
    );
    // After a disconnect the guest redials the websocket first.
    s.conn.close(0u32.into(), b"control plane going away");
    let s2 = h.accept().await?;
    assert!(carrier.is_websocket(&s2.conn.remote_address()));
    assert_eq!(
        h.udp_datagrams()?,
        0,
        "the guest tried UDP before the websocket again"
    );
    assert_ran(&s2.exec(&["true"], None).await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_whose_control_plane_is_gone_connects_to_another_replica() -> Result<()> {
    let h = Harness::start_with(None, Over::DeadPrimary, 0).await?;
    // UDP to the primary gets no answer, its TCP is refused; the same dial goes on to the replica
    // named in RAKAZO_CONTROL_ADDRS.
    let mut s = h.accept().await?;
    assert!(
        h.udp_datagrams()? > 0,
        "the guest never tried its primary first"
    );
    s.ping().await?;
    s.control.push_lease("b1", Some("run-b:2")).await?;
    assert_ran(&s.exec(&["true"], Some(("b1", "run-b:2"))).await?);

    // Its session ends: the next dial starts with the next target (the dead primary) and comes
    // back to the live replica.
    s.conn.close(0u32.into(), b"control plane going away");
    let s2 = h.accept().await?;
    assert!(
        h.udp_datagrams()? > 0,
        "the guest did not try its primary again"
    );
    assert_stale(
        &s2.exec(&["touch", "stale"], Some(("b1", "run-a:1")))
            .await?,
    );
    assert!(!h.guest.is_finished(), "the guest's tunnel loop ended");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_replica_sends_the_guest_to_the_next_one_at_once() -> Result<()> {
    let h = Harness::start_with(None, Over::Udp, 1).await?;
    let (a, b) = (&h.endpoint, &h.replicas[0]);
    // Every session that ends doubles the backoff: after six it is at its maximum (10 s), so a
    // redial that waited for it would come after 5 s at least. Each ended session sends the
    // guest to its next target: A, B, A, ...
    for i in 0..6 {
        let s = h.accept_on([a, b][i % 2]).await?;
        s.conn.close(0u32.into(), b"control plane going away");
    }
    let mut s = h.accept_on(a).await?;
    s.control.push_lease("b1", Some("run-b:2")).await?;
    s.conn.close(
        guest_agent::tunnel::CLOSE_DRAINING.into(),
        b"this replica is draining",
    );
    let closed = tokio::time::Instant::now();
    let s2 = h.accept_on(b).await?;
    let took = closed.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "the guest redialled {took:?} after the drain, as after a backoff"
    );
    s2.ping().await?;
    // Its fence table outlives the move.
    assert_stale(
        &s2.exec(&["touch", "stale"], Some(("b1", "run-a:1")))
            .await?,
    );
    assert_ran(&s2.exec(&["true"], Some(("b1", "run-b:2"))).await?);
    Ok(())
}
