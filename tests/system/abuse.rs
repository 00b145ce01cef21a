//! The abuse suite (issue 11): a computer attacks its boundaries from inside, a client attacks
//! the control plane from outside, and through all of it a bystander computer keeps working (an
//! exec loop on it never fails).

use anyhow::{anyhow, bail, Result};
use hyper::Method;
use std::time::Duration;
use tests::bot::Bot;
use tests::bystander::Bystander;
use tests::{probes, rogue, World, WorldOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Runs a python3 probe inside `computer`; its stdout lines.
async fn probe(w: &World, computer: &str, script: &str, args: &[&str]) -> Result<Vec<String>> {
    let mut argv = vec!["python3", "-c", script];
    argv.extend_from_slice(args);
    let out = w
        .exec(computer, serde_json::json!({ "argv": argv }))
        .await?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.code != Some(0) {
        bail!(
            "probe exited {:?}: {stdout} {}",
            out.code,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(stdout.lines().map(str::to_string).collect())
}

/// The attacks from inside one computer (`c`, with two bots' desktops up), given what lies
/// outside it: the control plane's data dir and another computer's home.
async fn attack_from_inside(w: &World, c: &str, other_home: &str) -> Result<()> {
    let a = Bot::new(w, c, "bot-a").await?;
    let b = Bot::new(w, c, "bot-b").await?;
    a.ensure().await?;
    b.ensure().await?;

    // Secrets and other computers' files.
    let data = w.data_dir.path();
    let targets = [
        data.display().to_string(),
        data.join("api-token").display().to_string(),
        data.join("capability-key").display().to_string(),
        data.join("tunnel-key.pem").display().to_string(),
        other_home.to_string(),
        "/etc/rakazo/enroll-token".to_string(),
        "/etc/shadow".to_string(),
    ];
    let args: Vec<&str> = targets.iter().map(String::as_str).collect();
    for line in probe(w, c, probes::READ_PATHS, &args).await? {
        assert!(!line.ends_with(": READ"), "{c} could read it: {line}");
    }

    // The API without its token.
    let (host, port) = w
        .http
        .trim_start_matches("http://")
        .rsplit_once(':')
        .ok_or_else(|| anyhow!("http address {}", w.http))?;
    let api = probe(w, c, probes::API_WITHOUT_TOKEN, &[host, port]).await?;
    assert!(
        api.iter()
            .any(|l| l.contains(" 401 ") || l.contains("unreachable")),
        "the API answered a tokenless request from {c}: {api:?}"
    );

    // No DevTools endpoint answers, from any bot's Chrome (or any other computer's).
    let devtools = probe(w, c, probes::DEVTOOLS_SCAN, &[]).await?;
    assert!(
        devtools.iter().any(|l| l.starts_with("devtools: none")),
        "a DevTools endpoint answered inside {c}: {devtools:?}"
    );

    // No X display lets a client in without its cookie: not the other bot's, not any.
    let x11 = probe(w, c, probes::X11_WITHOUT_COOKIE, &[]).await?;
    assert!(
        x11.iter().any(|l| l.contains(": refused")),
        "no display was tried from {c}: {x11:?}"
    );
    for line in &x11 {
        assert!(
            !line.ends_with(": open"),
            "a display accepted a cookieless client from {c}: {line}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_local_computer_reaches_nothing_outside_it() -> Result<()> {
    let mut w = World::start().await?;
    let bystander = w.create_computer("ws-bystander").await?;
    let c = w.create_computer("ws-attacker").await?;
    let other_home = w.home_of(&bystander).display().to_string();
    let loop_ = Bystander::start(w.client.clone(), bystander.clone());
    attack_from_inside(&w, &c, &other_home).await?;
    loop_.finish().await?;
    w.check_log()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_docker_computer_reaches_nothing_outside_it() -> Result<()> {
    tests::engine::require_engine()?;
    let mut w = World::start_with(WorldOptions {
        providers: Some("local,docker".into()),
        ..Default::default()
    })
    .await?;
    let bystander = w.create_computer("ws-bystander").await?;
    let c = w.create_computer_on("ws-attacker", Some("docker")).await?;
    let other_home = w.home_of(&bystander).display().to_string();
    let loop_ = Bystander::start(w.client.clone(), bystander.clone());
    attack_from_inside(&w, &c, &other_home).await?;
    loop_.finish().await?;
    // The uploaded token file is gone, not merely unreadable (asked as root, from outside).
    let ls = tests::engine::podman(&[
        "exec",
        &tests::engine::container_of(&c),
        "ls",
        "-A",
        "/etc/rakazo",
    ])?;
    assert_eq!(ls.trim(), "", "/etc/rakazo still holds {ls}");
    w.check_log()
}

/// Opens `n` connections that each send the start of a request and then nothing.
async fn slowloris(addr: &str, n: usize) -> Result<Vec<tokio::net::TcpStream>> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(b"GET /v1/computers HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await?;
        conns.push(s);
    }
    Ok(conns)
}

/// Whether the server closed `s` (EOF or reset) within `within`.
async fn closed_by_server(s: &mut tokio::net::TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            // A 408 or similar before the close is fine: keep reading to the close.
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_control_plane_keeps_serving_through_attacks_from_outside() -> Result<()> {
    // Every computer runs the real guest but one, which stalls (a 5 s guest deadline).
    let mut w = World::start_with(rogue::options(5, None)).await?;
    // The slowloris connections below all come from one address, over its share.
    w.allow_warn("http connections of one client address reached its cap");
    let bystander = w.create_computer("ws-bystander").await?;
    let c = w.create_computer("ws-sparse").await?;
    rogue::stall_next(&w)?;
    let stalled = w.create_computer("ws-stalled").await?;
    let loop_ = Bystander::start(w.client.clone(), bystander.clone());
    let addr = w.http.trim_start_matches("http://").to_string();

    // Slowloris: hundreds of connections that never finish their headers.
    let mut slow = slowloris(&addr, 300).await?;
    let list = w.client.json(Method::GET, "/v1/computers", None).await?;
    assert!(list["computers"].as_array().is_some_and(|a| a.len() == 3));

    // Oversized headers: refused clearly, nothing else affected.
    let mut big = tokio::net::TcpStream::connect(&addr).await?;
    let filler = "a".repeat(256 * 1024);
    let req = format!("GET /v1/computers HTTP/1.1\r\nHost: x\r\nX-Big: {filler}\r\n\r\n");
    let _ = big.write_all(req.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), big.read_to_end(&mut answer)).await;
    let status = String::from_utf8_lossy(&answer);
    assert!(
        status.is_empty() || status.starts_with("HTTP/1.1 431"),
        "an oversized header got {:?}",
        status.lines().next()
    );

    // A sparse 60 GB file: the checkpoint fails on the quota and keeps the previous revision.
    let before = w.home_revision(&c).await?;
    w.sh(&c, "truncate -s 60G big.bin").await?;
    let lines = w.home_flow(&c, "checkpoint").await?;
    let last = lines.last().cloned().unwrap_or_default();
    assert_eq!(last["type"], "error", "{lines:?}");
    let message = last["message"].as_str().unwrap_or_default().to_lowercase();
    assert!(
        message.contains("quota") || message.contains("limit"),
        "the error does not say which limit: {last}"
    );
    let after = w.home_revision(&c).await?;
    assert_eq!(before, after, "the refused checkpoint changed the revision");

    // A guest that answers its hello and then nothing: its operations fail at the deadline,
    // clearly, and its home lock is free again (a second checkpoint meets the same deadline,
    // not a lock).
    for _ in 0..2 {
        let lines =
            tokio::time::timeout(Duration::from_secs(60), w.home_flow(&stalled, "checkpoint"))
                .await
                .map_err(|_| anyhow!("a checkpoint of the stalled computer hung"))??;
        let last = lines.last().cloned().unwrap_or_default();
        assert_eq!(last["code"], "guest_timeout", "{lines:?}");
    }
    let err = w
        .client
        .json(
            Method::GET,
            &format!("/v1/computers/{stalled}/files?path="),
            None,
        )
        .await
        .expect_err("a listing from a silent guest");
    assert!(
        err.to_string().contains("did not answer within 5 s"),
        "{err}"
    );

    // The slow connections are closed by the server, not kept forever.
    for s in slow.iter_mut().take(20) {
        assert!(
            closed_by_server(s, Duration::from_secs(60)).await,
            "a connection that never finished its headers is still open"
        );
    }
    drop(slow);
    loop_.finish().await?;
    w.check_log()
}
