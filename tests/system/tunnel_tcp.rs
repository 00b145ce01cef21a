//! The tunnel over TCP: a computer whose UDP gets no answer runs its tunnel over the TCP
//! carrier, and the control plane records which transport each guest connected over.
//!
//! `RAKAZO_TEST_TUNNEL=tcp` makes every [`World`] advertise a UDP address that never answers
//! (`tests::tcp_only_tunnel`), so the capability suites run over TCP; the first test here checks
//! that the switch really took (the fallback cannot silently be QUIC) and, without it, that
//! guests use QUIC. `RAKAZO_TEST_TUNNEL=ws` does the same for the websocket on the HTTP API
//! (UDP never answers, TCP refuses).

use anyhow::{Context, Result};
use tests::{udp_black_hole, World, WorldOptions};

/// Waits until the log has `n` `guest connected` lines for `c`.
async fn connected_lines(w: &World, c: &str, n: usize) -> Result<()> {
    let what = format!("{n} guest connected lines of {c}");
    tests::wait_for(std::time::Duration::from_secs(30), &what, || {
        (w.transports(c).len() >= n).then_some(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guests_connect_over_the_transport_the_run_asks_for() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-transport").await?;
    let out = w
        .exec(&c, serde_json::json!({ "argv": ["echo", "fine"] }))
        .await?;
    assert_eq!(out.stdout, b"fine\n");
    let expected = if tests::tcp_only_tunnel().is_some() {
        "tcp"
    } else if tests::ws_only_tunnel().is_some() {
        "websocket"
    } else {
        "quic"
    };
    // The line follows the registration the create waited for by a moment.
    connected_lines(&w, &c, 1).await?;
    assert_eq!(w.transports(&c), vec![expected.to_string()]);
    w.check_log()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_computer_whose_udp_is_dropped_works_over_tcp_and_comes_back_after_a_restart(
) -> Result<()> {
    let black_hole = udp_black_hole().context("no udp socket for the black hole")?;
    let mut w = World::start_with(WorldOptions {
        env: vec![
            ("RAKAZO_ADVERTISE_ADDR".into(), black_hole.to_string()),
            ("RAKAZO_ADVERTISE_TCP_ADDR".into(), "127.0.0.1:0".into()),
        ],
        ..WorldOptions::default()
    })
    .await?;
    let c = w.create_computer("ws-tcp").await?;
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i % 253) as u8).collect();
    w.put_file(&c, "big.bin", data.clone(), false).await?;
    assert!(
        w.get_file(&c, "big.bin").await? == data,
        "the file came back different"
    );
    connected_lines(&w, &c, 1).await?;
    assert_eq!(w.transports(&c), vec!["tcp".to_string()]);

    // A crash of the control plane drops the TCP connection; its successor (same addresses)
    // gets the guest back over TCP, with nothing lost.
    w.kill_server();
    w.spawn_server().await?;
    connected_lines(&w, &c, 2).await?;
    assert_eq!(w.transports(&c), vec!["tcp".to_string(), "tcp".to_string()]);
    let out = w
        .exec(&c, serde_json::json!({ "argv": ["sha256sum", "big.bin"] }))
        .await?;
    let want = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&data));
    assert!(
        out.code == Some(0) && out.stdout.starts_with(want.as_bytes()),
        "{out:?}"
    );
    w.check_log()
}

/// A world whose guests reach only its HTTP API: UDP never answers, TCP refuses.
fn api_only(mut env: Vec<(String, String)>) -> Result<WorldOptions> {
    let black_hole = udp_black_hole().context("no udp socket for the black hole")?;
    let refusing = tests::tcp_refusing().context("no refusing tcp address")?;
    env.push(("RAKAZO_ADVERTISE_ADDR".into(), black_hole.to_string()));
    env.push(("RAKAZO_ADVERTISE_TCP_ADDR".into(), refusing.to_string()));
    Ok(WorldOptions {
        env,
        ..WorldOptions::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_computer_that_reaches_only_the_api_runs_its_tunnel_over_the_websocket() -> Result<()> {
    let mut w = World::start_with(api_only(Vec::new())?).await?;
    let c = w.create_computer("ws-websocket").await?;
    let out = w
        .exec(&c, serde_json::json!({ "argv": ["echo", "over-the-api"] }))
        .await?;
    assert_eq!(out.stdout, b"over-the-api\n");
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    w.put_file(&c, "big.bin", data.clone(), false).await?;
    assert!(
        w.get_file(&c, "big.bin").await? == data,
        "the file came back different"
    );
    connected_lines(&w, &c, 1).await?;
    assert_eq!(w.transports(&c), vec!["websocket".to_string()]);
    w.check_log()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_https_the_websocket_pins_the_api_certificate() -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let certs = tempfile::tempdir()?;
    let (cert_pem, key_pem) = control_plane::tls::self_signed(&["127.0.0.1", "localhost"])?;
    let cert = certs.path().join("api.pem");
    let key = certs.path().join("api-key.pem");
    std::fs::write(&cert, cert_pem)?;
    std::fs::write(&key, key_pem)?;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))?;
    let mut w = World::start_with(api_only(vec![
        ("RAKAZO_TLS_CERT".into(), cert.display().to_string()),
        ("RAKAZO_TLS_KEY".into(), key.display().to_string()),
    ])?)
    .await?;
    assert!(w.http.starts_with("https://"), "{}", w.http);
    let c = w.create_computer("ws-websocket-tls").await?;
    let out = w
        .exec(&c, serde_json::json!({ "argv": ["echo", "over-https"] }))
        .await?;
    assert_eq!(out.stdout, b"over-https\n");
    connected_lines(&w, &c, 1).await?;
    assert_eq!(w.transports(&c), vec!["websocket".to_string()]);
    w.check_log()
}
