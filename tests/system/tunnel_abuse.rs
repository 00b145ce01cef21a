//! Bad input on the tunnel: wrong tokens, wrong versions, garbage, oversized frames. Each is
//! refused with a logged reason and nothing else is affected.

use anyhow::{anyhow, Result};
use gateway_proto::{
    encode, AgentHandshake, AgentOutcome, FileEntry, FileKind, Hello, RefuseReason, Reply, Request,
    Secret,
};
use hyper::Method;
use std::net::SocketAddr;
use std::time::Duration;
use tests::{bin, wait_for, World};

/// A QUIC client that pins the world's certificate, like a guest.
async fn connect(w: &World) -> Result<quinn::Connection> {
    let ep = tests::tunnel::pinned_client(&w.cert_sha256, "127.0.0.1:0")?;
    let addr: SocketAddr = w.tunnel.parse()?;
    Ok(ep.connect(addr, "rakazo-control-plane")?.await?)
}

async fn exec_works(w: &World, c: &str) -> Result<()> {
    let out = w
        .exec(c, serde_json::json!({ "argv": ["echo", "fine"] }))
        .await?;
    assert_eq!(out.stdout, b"fine\n");
    Ok(())
}

/// Sends raw bytes as the hello and returns how the server closed the connection.
async fn send_hello_bytes(w: &World, bytes: &[u8]) -> Result<quinn::ConnectionError> {
    let conn = connect(w).await?;
    let (mut send, _recv) = conn.open_bi().await?;
    send.write_all(bytes).await?;
    let _ = send.finish();
    Ok(tokio::time::timeout(Duration::from_secs(15), conn.closed()).await?)
}

fn refused_code(e: &quinn::ConnectionError) -> Option<u64> {
    match e {
        quinn::ConnectionError::ApplicationClosed(c) => Some(c.error_code.into_inner()),
        _ => None,
    }
}

#[tokio::test]
async fn a_guest_with_a_wrong_token_is_refused() -> Result<()> {
    let mut w = World::start().await?;
    w.allow_warn("guest connection refused");
    let c = w.create_computer("ws-badtoken").await?;
    let home = tempfile::tempdir()?;
    // Its own runtime dir: the real guest's (`/tmp/rakazo-guest-<id>`) belongs to the
    // computer's user, which this impostor (root) is not.
    let runtime = tempfile::tempdir()?;
    let mut guest = std::process::Command::new(bin("rakazo-guest"))
        .env_clear()
        .env("RAKAZO_CONTROL_ADDR", &w.tunnel)
        .env("RAKAZO_CONTROL_CERT_SHA256", &w.cert_sha256)
        .env("RAKAZO_COMPUTER_ID", &c)
        .env("RAKAZO_ENROLL_TOKEN", "not-the-token")
        .env("RAKAZO_HOME", home.path())
        .env("RAKAZO_RUNTIME_DIR", runtime.path().join("rt"))
        .stderr(std::process::Stdio::null())
        .spawn()?;
    wait_for(Duration::from_secs(10), "the refusal in the log", || {
        w.log()
            .lines()
            .any(|l| l.contains("guest connection refused") && l.contains("bad credentials"))
            .then_some(())
    })
    .await?;
    guest.kill()?;
    guest.wait()?;
    // The real guest was not displaced.
    exec_works(&w, &c).await?;
    w.check_log()
}

#[tokio::test]
async fn garbage_and_oversized_hellos_close_only_that_connection() -> Result<()> {
    let mut w = World::start().await?;
    w.allow_warn("guest connection refused");
    let c = w.create_computer("ws-garbage").await?;
    // Random datagrams at the UDP port: QUIC drops them.
    let sock = std::net::UdpSocket::bind("127.0.0.1:0")?;
    for _ in 0..500 {
        let len = 1 + rand::random::<u8>() as usize * 4;
        let junk: Vec<u8> = (0..len).map(|_| rand::random()).collect();
        sock.send_to(&junk, &w.tunnel)?;
    }
    // Random bytes as a hello, an oversized frame prefix, a truncated hello.
    let junk: Vec<u8> = (0..300).map(|_| rand::random()).collect();
    assert_eq!(refused_code(&send_hello_bytes(&w, &junk).await?), Some(1));
    assert_eq!(
        refused_code(&send_hello_bytes(&w, &[0xff, 0xff, 0xff, 0xff, 1, 2, 3]).await?),
        Some(1)
    );
    let (_, hello) = AgentHandshake::start(c.clone(), Secret::new("x"), "t".into())?;
    assert_eq!(
        refused_code(&send_hello_bytes(&w, &hello[..hello.len() / 2]).await?),
        Some(1)
    );
    // A guest from the future.
    let future = encode(&Hello {
        version: 99,
        min_version: 99,
        computer_id: c.clone(),
        token: Secret::new("x"),
        agent: "t".into(),
    })?;
    let conn = connect(&w).await?;
    let (mut send, mut recv) = conn.open_bi().await?;
    send.write_all(&future).await?;
    let reply = recv.read_to_end(4096).await.unwrap_or_default();
    let mut hs = AgentHandshake::start(c.clone(), Secret::new("x"), "t".into())?.0;
    assert!(matches!(
        hs.handle_bytes(&reply)?,
        Some(AgentOutcome::Refused(
            RefuseReason::UnsupportedVersion { .. }
        ))
    ));
    wait_for(Duration::from_secs(5), "both reasons in the log", || {
        let log = w.log();
        (log.contains("malformed hello") && log.contains("unsupported protocol version"))
            .then_some(())
    })
    .await?;
    exec_works(&w, &c).await?;
    w.check_log()
}

#[tokio::test]
async fn an_oversized_frame_from_a_guest_closes_only_that_stream() -> Result<()> {
    let mut w = World::start().await?;
    w.allow_warn("guest connection refused");
    let c = w.create_computer("ws-evil").await?;
    // Impersonate the computer's guest with its real token: the control plane trusts the
    // credentials, but still bounds everything the guest says.
    let token = w.enrollment_token(&c)?;
    for pid in tests::pids_with_env("RAKAZO_COMPUTER_ID", &c) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGSTOP,
        );
    }
    let conn = connect(&w).await?;
    let (mut send, mut recv) = conn.open_bi().await?;
    let (mut hs, hello) =
        AgentHandshake::start(c.clone(), Secret::new(token.trim()), "evil".into())?;
    send.write_all(&hello).await?;
    let mut buf = vec![0u8; 4096];
    let n = recv
        .read(&mut buf)
        .await?
        .ok_or_else(|| anyhow!("no reply"))?;
    assert!(matches!(
        hs.handle_bytes(&buf[..n])?,
        Some(AgentOutcome::Welcome { .. })
    ));
    // Like a guest, answer the control stream's pings: the control plane registers a
    // connection only once its lease sync ping is answered.
    let mut control = gateway_proto::FrameDecoder::with_max(64 * 1024);
    control.push(&hs.into_remainder());
    let (synced_tx, synced) = tokio::sync::oneshot::channel();
    let mut synced_tx = Some(synced_tx);
    tokio::spawn(async move {
        loop {
            while let Ok(Some(msg)) = control.next_message::<gateway_proto::ControlMsg>() {
                if let gateway_proto::ControlMsg::Ping { seq } = msg {
                    let pong = encode(&gateway_proto::ControlMsg::Pong { seq })?;
                    send.write_all(&pong).await?;
                    if let Some(tx) = synced_tx.take() {
                        let _ = tx.send(());
                    }
                }
            }
            match recv.read(&mut buf).await? {
                Some(n) => control.push(&buf[..n]),
                None => return anyhow::Ok(()),
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(15), synced).await??;
    // The control plane registers the connection right after reading the pong; until then a
    // request would still go to the (stopped) real guest's connection.
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Serve two list requests: the first answered with an oversized frame, the second properly.
    let evil = conn.clone();
    let server = tokio::spawn(async move {
        for round in 0..2 {
            let (mut s, mut r) = evil.accept_bi().await?;
            let mut tmp = vec![0u8; 4096];
            let _ = r.read(&mut tmp).await?;
            if round == 0 {
                s.write_all(&(64u32 << 20).to_be_bytes()).await?;
                s.write_all(&[0u8; 1024]).await?;
            } else {
                let reply = Reply::Files(vec![FileEntry {
                    path: "ok".into(),
                    kind: FileKind::File,
                    size: 1,
                    executable: false,
                }]);
                s.write_all(&encode(&reply)?).await?;
                s.finish()?;
            }
        }
        anyhow::Ok(())
    });
    let first = w
        .client
        .json(Method::GET, &format!("/v1/computers/{c}/files?path="), None)
        .await;
    let err = first.expect_err("oversized reply");
    assert!(err.to_string().contains("guest_protocol_error"), "{err}");
    let second = w
        .client
        .json(Method::GET, &format!("/v1/computers/{c}/files?path="), None)
        .await?;
    assert_eq!(second["entries"][0]["path"], "ok");
    server.await??;
    assert!(
        conn.close_reason().is_none(),
        "the connection survived the bad stream"
    );
    let _ = Request::Ping;
    for pid in tests::pids_with_env("RAKAZO_COMPUTER_ID", &c) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGCONT,
        );
    }
    w.check_log()
}
