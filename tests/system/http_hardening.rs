//! The API's HTTP listener against slow and hostile clients, and over TLS (issue 11): a
//! slowloris flood does not starve real calls, an unfinished head is closed at the header
//! timeout, an oversized head gets 431, a trickled JSON body gets 408, and `--tls-cert` serves
//! https to the real CLI with https capability URLs while plain HTTP is told to use https.
//!
//! Raw sockets are `std::net::TcpStream`s on blocking threads: what an attacker (or a curious
//! person with `nc`) sends, byte for byte.

use anyhow::{bail, ensure, Context, Result};
use control_plane::client::Client;
use gateway_proto::Secret;
use hyper::Method;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::time::Duration;
use tests::{wait_for, World, WorldOptions};

/// Our own bound on waiting for the server to act; far above its timeouts under test.
const DEADLINE: Duration = Duration::from_secs(30);

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `127.0.0.1:port` of a base URL.
fn host_port(base: &str) -> String {
    base.split_once("://").map_or(base, |(_, a)| a).to_string()
}

/// Reads until the server closes the connection (true) or `DEADLINE` passes (false); what it
/// sent on the way is returned too.
fn wait_closed(mut s: TcpStream) -> (bool, Vec<u8>) {
    let _ = s.set_read_timeout(Some(DEADLINE));
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (true, got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (true, got),
            Err(_) => return (false, got),
        }
    }
}

/// Sends `bytes` on a new connection (all of them, or as many as the server reads before it
/// closes), then reads as [`wait_closed`] does.
async fn exchange(addr: String, bytes: Vec<u8>) -> Result<(bool, Vec<u8>)> {
    tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(&addr)?;
        let _ = s.write_all(&bytes);
        Ok(wait_closed(s))
    })
    .await?
}

/// Whether the server has closed `s` (non-blocking look).
fn is_closed(s: &TcpStream) -> bool {
    let mut buf = [0u8; 64];
    if s.set_nonblocking(true).is_err() {
        return true;
    }
    let mut r = s;
    let closed = loop {
        match r.read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break false,
            Err(_) => break true,
        }
    };
    let _ = s.set_nonblocking(false);
    closed
}

/// One round of real work: the computer list from a fresh client (a new connection, as each
/// CLI run makes) and an exec on the computer through the world's client.
async fn real_calls(w: &World, computer: &str, round: usize) -> Result<()> {
    let fresh = Client::for_cli(
        w.http.clone(),
        Secret::new(w.api_token().to_string()),
        None,
        w.data_dir.path(),
    )?;
    let list = fresh
        .json(Method::GET, "/v1/computers", None)
        .await
        .with_context(|| format!("round {round}: GET /v1/computers"))?;
    ensure!(
        list.to_string().contains(computer),
        "round {round}: the list lacks {computer}: {list}"
    );
    let out = w
        .exec(
            computer,
            serde_json::json!({ "argv": ["echo", "still here"] }),
        )
        .await
        .with_context(|| format!("round {round}: exec"))?;
    ensure!(
        out.code == Some(0) && out.stdout == b"still here\n",
        "round {round}: exec answered {:?} {:?}",
        out.code,
        String::from_utf8_lossy(&out.stdout)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_connections_do_not_starve_real_calls() -> Result<()> {
    const CAP: usize = 32;
    const SLOW: usize = 200;
    let mut w = World::start_with(WorldOptions {
        // A long header timeout: only the cap's displacement can make room here.
        env: env(&[
            ("RAKAZO_HTTP_MAX_CONNECTIONS", &CAP.to_string()),
            ("RAKAZO_HTTP_HEADER_TIMEOUT_SECS", "600"),
        ]),
        allow_warn: vec![
            "http connection cap reached".into(),
            "http connections of one client address reached its cap".into(),
        ],
        ..Default::default()
    })
    .await?;
    let computer = w.create_computer("ws-slowloris").await?;
    let addr = host_port(&w.http);
    // Each attacker connection sends a partial head and goes silent for good. They arrive a
    // few milliseconds apart, while the real calls run.
    let attack = tokio::task::spawn_blocking(move || -> Result<Vec<TcpStream>> {
        let mut held = Vec::new();
        for i in 0..SLOW {
            let mut s = TcpStream::connect(&addr)?;
            s.write_all(
                format!("GET /v1/computers HTTP/1.1\r\nHost: x\r\nX-Slow-{i}: ").as_bytes(),
            )?;
            held.push(s);
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(held)
    });
    let during = async {
        for round in 0..10 {
            real_calls(&w, &computer, round).await?;
        }
        Ok::<_, anyhow::Error>(())
    };
    let (held, ()) = tokio::try_join!(async { attack.await? }, during)?;
    // Now every slot the real calls do not use is held by a silent connection.
    for round in 10..20 {
        real_calls(&w, &computer, round).await?;
    }
    // The cap holds: the silent connections beyond it were closed.
    wait_for(
        DEADLINE,
        "the silent connections beyond the cap to close",
        || {
            let open = held.iter().filter(|s| !is_closed(s)).count();
            (open <= CAP).then_some(())
        },
    )
    .await?;
    let open = held.iter().filter(|s| !is_closed(s)).count();
    assert!(open > 0, "the newest silent connections keep their slots");
    w.check_log()
}

#[tokio::test]
async fn unfinished_heads_and_idle_connections_are_closed_at_the_header_timeout() -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        env: env(&[("RAKAZO_HTTP_HEADER_TIMEOUT_SECS", "2")]),
        ..Default::default()
    })
    .await?;
    let addr = host_port(&w.http);
    let results = tokio::task::spawn_blocking(move || -> Result<Vec<(&str, bool, Vec<u8>)>> {
        let mut partial = TcpStream::connect(&addr)?;
        partial.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: ")?;
        let silent = TcpStream::connect(&addr)?;
        let mut idle = TcpStream::connect(&addr)?;
        idle.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")?;
        // All three wait at once; each is read until the server closes it (or our deadline).
        Ok([
            ("partial head", partial),
            ("nothing sent", silent),
            ("idle keep-alive", idle),
        ]
        .into_iter()
        .map(|(what, s)| {
            let (closed, got) = wait_closed(s);
            (what, closed, got)
        })
        .collect())
    })
    .await??;
    for (what, closed, got) in &results {
        assert!(
            closed,
            "{what}: the server kept the connection open past the 2 s header timeout"
        );
        if *what == "idle keep-alive" {
            let text = String::from_utf8_lossy(got);
            assert!(
                text.starts_with("HTTP/1.1 200"),
                "its request was answered: {text}"
            );
        }
    }
    // The server still serves.
    w.client.json(Method::GET, "/v1/health", None).await?;
    w.check_log()
}

#[tokio::test]
async fn an_oversized_head_gets_431_and_the_server_keeps_serving() -> Result<()> {
    let mut w = World::start().await?;
    let addr = host_port(&w.http);
    // 256 KiB of header: well over the 64 KiB default (hyper checks the bound between reads,
    // so a head may overshoot it by one read), well under hyper's own ~400 KiB.
    let head = format!(
        "GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(256 << 10)
    );
    let (closed, got) = exchange(addr, head.into_bytes()).await?;
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 431"),
        "an oversized head is answered 431, got {:?}",
        text.chars().take(80).collect::<String>()
    );
    assert!(closed, "and its connection closed");
    w.client.json(Method::GET, "/v1/health", None).await?;
    w.client.json(Method::GET, "/v1/computers", None).await?;
    w.check_log()
}

#[tokio::test]
async fn a_json_body_trickled_in_gets_408_at_its_deadline() -> Result<()> {
    let mut w = World::start().await?;
    let addr = host_port(&w.http);
    let token = w.api_token().to_string();
    let got = tokio::task::spawn_blocking(move || -> Result<Vec<u8>> {
        let mut s = TcpStream::connect(&addr)?;
        let body = br#"{"workspace": "ws-trickle"}"#.repeat(40);
        s.write_all(
            format!(
                "POST /v1/computers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        )?;
        // One byte a second until the server answers; the server's deadline (30 s) comes long
        // before the body (1,080 bytes) would be complete.
        s.set_read_timeout(Some(Duration::from_secs(1)))?;
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        for b in body.iter().take(90) {
            if s.write_all(&[*b]).is_err() {
                break;
            }
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    got.extend_from_slice(&buf[..n]);
                    break;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
        let (_, rest) = wait_closed(s);
        got.extend_from_slice(&rest);
        Ok(got)
    })
    .await??;
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 408"),
        "a body trickled at 1 byte/s is cut off with 408, got {text:?}"
    );
    assert!(text.contains("body_timeout"), "{text}");
    w.client.json(Method::GET, "/v1/computers", None).await?;
    w.check_log()
}

/// Runs the real `rakazo` with a cleared environment plus `envs`.
async fn rakazo(args: &[&str], envs: &[(&str, &str)]) -> Result<Output> {
    let mut cmd = tokio::process::Command::new(tests::bin("rakazo"));
    cmd.args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .envs(envs.iter().copied())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .with_context(|| format!("rakazo {args:?} did not finish"))?
        .context("run rakazo")
}

fn write_pem(dir: &Path, name: &str, pem: &str, mode: u32) -> Result<String> {
    let path = dir.join(name);
    std::fs::write(&path, pem)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
    Ok(path.display().to_string())
}

#[tokio::test]
async fn tls_serves_the_cli_and_https_capability_urls_and_refuses_plain_http() -> Result<()> {
    let certs = tempfile::tempdir()?;
    let (cert_pem, key_pem) = control_plane::tls::self_signed(&["127.0.0.1", "localhost"])?;
    let cert = write_pem(certs.path(), "api.pem", &cert_pem, 0o644)?;
    let key = write_pem(certs.path(), "api-key.pem", &key_pem, 0o600)?;
    let (other_pem, _) = control_plane::tls::self_signed(&["127.0.0.1", "localhost"])?;
    let other = write_pem(certs.path(), "other.pem", &other_pem, 0o644)?;
    let mut w = World::start_with(WorldOptions {
        env: env(&[("RAKAZO_TLS_CERT", &cert), ("RAKAZO_TLS_KEY", &key)]),
        ..Default::default()
    })
    .await?;
    assert!(w.http.starts_with("https://"), "addresses.json: {}", w.http);
    let computer = w.create_computer("ws-tls").await?;
    let data_dir = w.data_dir.path().display().to_string();
    let token = w.api_token().to_string();

    // The local CLI finds the address, token and certificate in the data dir.
    let out = rakazo(&["computer", "list"], &[("RAKAZO_DATA_DIR", &data_dir)]).await?;
    ensure!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains(&computer),
        "computer list over https from the data dir: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // A remote CLI names the server and trusts the CA file it is given, names checked.
    let remote = [
        ("RAKAZO_URL", w.http.as_str()),
        ("RAKAZO_TOKEN", token.as_str()),
    ];
    let out = rakazo(&["--ca-file", &cert, "computer", "list"], &remote).await?;
    ensure!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains(&computer),
        "computer list over https with --ca-file: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // Another certificate is not trusted, nor, without a CA file, is a self-signed one.
    for args in [
        vec!["--ca-file", other.as_str(), "computer", "list"],
        vec!["computer", "list"],
    ] {
        let out = rakazo(&args, &remote).await?;
        ensure!(
            !out.status.success(),
            "rakazo {args:?} trusted a certificate it should not"
        );
    }
    // A capability URL points back over https.
    let out = rakazo(
        &["screen", "url", &computer, "bot-tls"],
        &[("RAKAZO_DATA_DIR", &data_dir)],
    )
    .await?;
    let url = String::from_utf8_lossy(&out.stdout).trim().to_string();
    ensure!(
        out.status.success() && url.starts_with("https://"),
        "capability URL {url:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Plain HTTP on the port is refused with a clear answer, through the CLI and raw.
    let plain = w.http.replacen("https://", "http://", 1);
    let out = rakazo(
        &["computer", "list"],
        &[("RAKAZO_URL", &plain), ("RAKAZO_TOKEN", &token)],
    )
    .await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && stderr.contains("https"),
        "plain http must be refused, saying to use https: {stderr}"
    );
    let request = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
    let (closed, got) = exchange(host_port(&w.http), request).await?;
    let text = String::from_utf8_lossy(&got);
    if !(closed && text.starts_with("HTTP/1.1 400") && text.contains("https_required")) {
        bail!("plain http got {text:?} (closed: {closed})");
    }
    w.client.json(Method::GET, "/v1/computers", None).await?;
    w.check_log()
}

/// An error answered before the request's body was read leaves an HTTP/1 connection that
/// cannot carry another request: the answer says `connection: close`, so a client that pools
/// connections does not send its next request into one the server is closing (seen as
/// "connection closed before message completed" after an upload into a full home).
#[tokio::test(flavor = "multi_thread")]
async fn an_error_before_the_body_is_read_closes_the_connection_and_says_so() -> Result<()> {
    let mut w = World::start().await?;
    let addr = host_port(&w.http);
    let head = format!(
        "PUT /v1/computers/c-0000000000000000/files/content?path=a.bin HTTP/1.1\r\n\
         Host: {addr}\r\nAuthorization: Bearer {}\r\nContent-Length: 65536\r\n\r\n",
        w.api_token()
    );
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(&[7u8; 100]);
    let (closed, got) = exchange(addr, bytes).await?;
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    ensure!(text.starts_with("http/1.1 404"), "{text}");
    ensure!(
        text.contains("\r\nconnection: close\r\n"),
        "the answer does not say the connection closes: {text}"
    );
    ensure!(closed, "the server kept the connection open");
    w.check_log()
}
