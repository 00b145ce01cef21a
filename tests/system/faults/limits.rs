//! Clients that open more than their share: one address holding thousands of HTTP connections,
//! one address dialling the tunnel without a token. Each is held to its per-address cap while
//! everyone else keeps working.

use anyhow::{anyhow, ensure, Result};
use hyper::Method;
use std::net::SocketAddr;
use std::time::Duration;
use tests::bystander::Bystander;
use tests::{World, WorldOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// The address floods come from: loopback, but not the 127.0.0.1 the test's client uses.
const FLOODER: &str = "127.0.0.2";

/// A TCP connection to `to` from the flooder's address.
async fn connect_from_flooder(to: SocketAddr) -> Result<TcpStream> {
    let s = TcpSocket::new_v4()?;
    s.bind(format!("{FLOODER}:0").parse()?)?;
    Ok(tokio::time::timeout(Duration::from_secs(10), s.connect(to)).await??)
}

/// One flood connection: refused at the door (what the server answered), or admitted, given an
/// authenticated exec head whose body never comes, and so held mid-request.
async fn flood_one(to: SocketAddr, head: &str) -> Result<(TcpStream, Option<String>)> {
    let mut s = connect_from_flooder(to).await?;
    let mut buf = vec![0u8; 4096];
    // A refused connection is answered at once, before it says anything.
    match tokio::time::timeout(Duration::from_millis(50), s.read(&mut buf)).await {
        Ok(Ok(n)) => return Ok((s, Some(String::from_utf8_lossy(&buf[..n]).into_owned()))),
        Ok(Err(e)) => return Ok((s, Some(format!("error: {e}")))),
        Err(_) => {}
    }
    s.write_all(head.as_bytes()).await?;
    // Let the server read the head (and so count the connection mid-request) before the next.
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok((s, None))
}

/// Whether the server still holds a connection open without having answered it.
fn still_held(s: &TcpStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(s.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// One address opens two thousand connections, each an authenticated exec whose JSON body
/// never comes (so each is mid-request until the body deadline, 30 s, and can never be
/// displaced). It holds exactly its per-address share; every other one is answered 429
/// `too_many_connections` at once; and through all of it a bystander's commands from another
/// address keep working. Without the per-address cap the flood takes every connection of the
/// server and the bystander gets 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holding_its_connections_busy_leaves_room_for_everyone_else() -> Result<()> {
    const CAP: usize = 48;
    const PER_ADDRESS: usize = 12;
    const FLOOD: usize = 2000;
    let mut w = World::start_with(WorldOptions {
        env: vec![
            ("RAKAZO_HTTP_MAX_CONNECTIONS".into(), CAP.to_string()),
            (
                "RAKAZO_HTTP_MAX_CONNECTIONS_PER_ADDRESS".into(),
                PER_ADDRESS.to_string(),
            ),
        ],
        allow_warn: vec!["http connections of one client address reached its cap".into()],
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("ws-flood").await?;
    let bystander = Bystander::start(w.client.clone(), c.clone());
    let to: SocketAddr = tests::live::authority(&w.http).parse()?;
    let head = format!(
        "POST /v1/computers/{c}/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 64\r\n\r\n",
        w.api_token()
    );
    let mut held = Vec::new();
    let mut refused = 0usize;
    for _ in 0..FLOOD {
        match flood_one(to, &head).await? {
            (s, None) => held.push(s),
            (_, Some(text)) => {
                ensure!(
                    text.starts_with("HTTP/1.1 429") && text.contains("too_many_connections"),
                    "a flood connection was answered otherwise: {text:?}"
                );
                refused += 1;
            }
        }
    }
    assert_eq!(
        held.len(),
        PER_ADDRESS,
        "the flooder holds its share, no more"
    );
    assert_eq!(refused, FLOOD - PER_ADDRESS);
    // The flooder's share stays held meanwhile; the bystander keeps working beside it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for s in &held {
        ensure!(still_held(s), "a busy connection of the flooder was closed");
    }
    let ran = bystander.finish().await?;
    println!("bystander ran {ran} commands through the flood");
    let listed = w.client.json(Method::GET, "/v1/computers", None).await?;
    ensure!(listed["computers"].is_array(), "{listed}");
    drop(held);
    w.check_log()
}

/// One address dials the tunnel forty times and never says hello: it gets at most 16
/// connections in setup at once, the rest are refused at the door; a guest restarting meanwhile
/// (its own address) connects and works; once the held ones time out (no hello within 10 s) the
/// address may set up again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_dialling_the_tunnel_without_a_token_holds_only_its_places() -> Result<()> {
    const PLACES: usize = 16;
    const DIALS: usize = 40;
    let mut w = World::start_with(WorldOptions {
        allow_warn: vec![
            "tunnel connection refused: its address has the most connections setting up".into(),
            "guest connection refused".into(),
        ],
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("ws-tunnel-flood").await?;
    let tunnel: SocketAddr = w.tunnel.parse()?;
    // A QUIC client from the flooder's address, pinning the certificate as a guest does, that
    // never says hello.
    let ep = tests::tunnel::pinned_client(&w.cert_sha256, &format!("{FLOODER}:0"))?;
    let dials = (0..DIALS).map(|_| {
        let ep = ep.clone();
        async move {
            ep.connect(tunnel, "rakazo-control-plane")?
                .await
                .map_err(anyhow::Error::from)
        }
    });
    let results = futures_util::future::join_all(dials).await;
    let (held, refused): (Vec<_>, Vec<_>) = results.into_iter().partition(Result::is_ok);
    for r in &refused {
        let e = r.as_ref().err().map(|e| e.to_string()).unwrap_or_default();
        ensure!(
            e.to_lowercase().contains("refused"),
            "a dial over the address's places failed otherwise: {e}"
        );
    }
    assert_eq!(held.len(), PLACES, "the address holds its places, no more");

    // A guest dialling meanwhile, from its own address, is not held back.
    w.post(&format!("/v1/computers/{c}/stop"), serde_json::json!({}))
        .await?;
    w.post(&format!("/v1/computers/{c}/start"), serde_json::json!({}))
        .await?;
    let out = w
        .exec(&c, serde_json::json!({ "argv": ["echo", "through"] }))
        .await?;
    assert_eq!(out.stdout, b"through\n");

    // The silent ones are closed at the hello deadline, and their places are free again.
    let held: Vec<quinn::Connection> = held.into_iter().filter_map(Result::ok).collect();
    for conn in &held {
        tokio::time::timeout(Duration::from_secs(30), conn.closed())
            .await
            .map_err(|_| anyhow!("a silent tunnel connection outlived the hello deadline"))?;
    }
    let again = ep.connect(tunnel, "rakazo-control-plane")?;
    tokio::time::timeout(Duration::from_secs(10), again)
        .await
        .map_err(|_| anyhow!("a new dial did not set up"))?
        .map_err(|e| anyhow!("the address never got its places back: {e}"))?;
    w.check_log()
}
