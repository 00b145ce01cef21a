//! `/metrics` and structured logs through the real `rakazo serve`: a scripted workload, then the
//! scrape read by the reference Prometheus text parser (the `prometheus_client` Python package,
//! `tests/scripts/parse_metrics.py`) with every counter matching the workload exactly; the
//! token rule on the API listener and the plain `--metrics-addr` listener; no computer id, bot
//! id or secret in the text; idle suspensions counted; JSON logs that parse and are still
//! scanned for WARN lines.
//!
//! Nothing here depends on timings: gauges that follow a stream's end are polled (bounded).

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use control_plane::client::full_body;
use http_body_util::BodyExt;
use hyper::Method;
use std::collections::HashMap;
use std::time::Duration;
use tests::live::{connect, get};
use tests::{World, WorldOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The exposition as the reference parser read it.
struct Parsed {
    families: HashMap<String, String>,
    samples: Vec<(String, HashMap<String, String>, f64)>,
}

impl Parsed {
    /// The value of the sample `name` whose labels are exactly `labels`; `None` if absent.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: HashMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.samples
            .iter()
            .find(|(n, l, _)| n == name && *l == want)
            .map(|(_, _, v)| *v)
    }

    /// Like [`Parsed::get`], absent reading 0 (a counter not yet incremented has no series).
    fn count(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).unwrap_or(0.0)
    }

    fn op(&self, op: &str, outcome: &str) -> f64 {
        self.count(
            "rakazo_operations_total",
            &[("op", op), ("outcome", outcome)],
        )
    }
}

/// Parses `text` with the `prometheus_client` package's text parser.
fn parse(text: &str) -> Result<Parsed> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/parse_metrics.py");
    let mut child = std::process::Command::new("python3")
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("run python3 (scripts/setup-debian.sh installs it and prometheus_client)")?;
    use std::io::Write;
    child
        .stdin
        .take()
        .ok_or_else(|| anyhow!("no stdin"))?
        .write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "the Prometheus parser refused the exposition: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let families = v["families"]
        .as_object()
        .ok_or_else(|| anyhow!("no families"))?
        .iter()
        .map(|(k, t)| (k.clone(), t.as_str().unwrap_or_default().to_string()))
        .collect();
    let samples = v["samples"]
        .as_array()
        .ok_or_else(|| anyhow!("no samples"))?
        .iter()
        .map(|s| {
            let labels = s["labels"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default();
            let value = s["value"].as_f64().unwrap_or(f64::INFINITY);
            (
                s["name"].as_str().unwrap_or_default().to_string(),
                labels,
                value,
            )
        })
        .collect();
    Ok(Parsed { families, samples })
}

/// `GET /metrics` on the API listener with the API token: the raw text.
async fn scrape_text(w: &World) -> Result<String> {
    let resp = w
        .client
        .send(Method::GET, "/metrics", None, None, full_body(Bytes::new()))
        .await?;
    let content_type = resp
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let body = resp.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8(body.to_vec())?)
}

async fn scrape(w: &World) -> Result<Parsed> {
    parse(&scrape_text(w).await?)
}

/// Scrapes until `pred` holds (a gauge that follows a stream closing), up to 30 s.
async fn scrape_until(w: &World, what: &str, pred: impl Fn(&Parsed) -> bool) -> Result<Parsed> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let p = scrape(w).await?;
        if pred(&p) {
            return Ok(p);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A GET with the given `Authorization` header value: the status.
async fn get_with_auth(http: &str, path: &str, auth: &str) -> Result<u16> {
    let host = tests::live::authority(http);
    let mut s = tokio::net::TcpStream::connect(host).await?;
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {auth}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut raw)).await??;
    String::from_utf8_lossy(&raw)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow!("no status line"))
}

/// A scripted workload on two computers, then the scrape, parsed by the reference parser, with
/// every counter equal to what the workload did: execs ok and refused, one explicit checkpoint
/// plus the ones the stop and the run's release make, connected guests = running computers, a
/// viewer counted while open and not after; and the token rule, the plain listener, and no id
/// or secret anywhere in the text.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_match_a_scripted_workload() -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        env: vec![("RAKAZO_METRICS_ADDR".into(), "127.0.0.1:0".into())],
        ..Default::default()
    })
    .await?;
    let c1 = w.create_computer("ws-metrics").await?;
    let c2 = w.create_computer("ws-metrics-2").await?;

    // 4 execs that ran (one exits 3: the command failed, the operation did not).
    for argv in [
        vec!["true"],
        vec!["true"],
        vec!["echo", "hi"],
        vec!["sh", "-c", "exit 3"],
    ] {
        let out = w.exec(&c1, serde_json::json!({ "argv": argv })).await?;
        assert!(out.code.is_some(), "{:?}", out.events);
    }
    // 2 refused: a malformed request and a computer that does not exist.
    assert!(w
        .exec(&c1, serde_json::json!({ "argv": [] }))
        .await
        .is_err());
    assert!(w
        .exec("no-such-computer", serde_json::json!({ "argv": ["true"] }))
        .await
        .is_err());
    // One explicit checkpoint of a home with a file in it.
    w.put_file(&c1, "notes/m.txt", vec![7u8; 50_000], false)
        .await?;
    let done = w.home_ok(&c1, "checkpoint").await?;
    assert!(done["bytes"].as_u64().unwrap_or(0) > 0, "{done}");

    let p = scrape(&w).await?;
    // Every sample belongs to a declared family (a name that does not match its TYPE line
    // would be parsed as an untyped one of its own).
    assert!(
        p.families
            .values()
            .all(|t| t != "untyped" && t != "unknown"),
        "{:?}",
        p.families
    );
    assert_eq!(
        p.families.get("rakazo_operations").map(String::as_str),
        Some("counter")
    );
    assert_eq!(
        p.families
            .get("rakazo_operation_duration_seconds")
            .map(String::as_str),
        Some("histogram")
    );
    assert_eq!(p.op("computer.create", "ok"), 2.0);
    assert_eq!(p.op("exec", "ok"), 4.0);
    assert_eq!(p.op("exec", "refused"), 2.0);
    assert_eq!(p.op("exec", "failed"), 0.0);
    assert_eq!(p.op("files.write", "ok"), 1.0);
    assert_eq!(p.op("home.checkpoint", "ok"), 1.0);
    assert_eq!(
        p.count(
            "rakazo_operation_duration_seconds_count",
            &[("op", "exec"), ("outcome", "ok")]
        ),
        4.0
    );
    assert_eq!(
        p.count(
            "rakazo_operation_duration_seconds_bucket",
            &[("op", "exec"), ("outcome", "ok"), ("le", "+Inf")]
        ),
        4.0
    );
    assert_eq!(p.count("rakazo_home_checkpoint_bytes_count", &[]), 1.0);
    assert!(p.count("rakazo_home_checkpoint_bytes_sum", &[]) > 0.0);
    assert_eq!(
        p.count(
            "rakazo_home_checkpoint_duration_seconds_count",
            &[("outcome", "ok")]
        ),
        1.0
    );
    assert_eq!(p.get("rakazo_connected_guests", &[]), Some(2.0));

    // A stop checkpoints first and disconnects the guest: one running computer, one guest.
    w.client
        .json(Method::POST, &format!("/v1/computers/{c2}/stop"), None)
        .await?;
    let p = scrape(&w).await?;
    assert_eq!(p.op("computer.stop", "ok"), 1.0);
    assert_eq!(p.get("rakazo_connected_guests", &[]), Some(1.0));
    assert_eq!(p.count("rakazo_home_checkpoint_bytes_count", &[]), 2.0);

    // A viewer: counted while its websocket is open, not after.
    let bot = "bot-metrics";
    let lease = w.lease(&c1, bot, "run-metrics").await?;
    w.post(
        &format!("/v1/computers/{c1}/screens/{bot}/ensure"),
        serde_json::json!({ "lease": lease }),
    )
    .await?;
    // Ending the run saves the home (the last one out): the third checkpoint.
    w.post(
        &format!("/v1/computers/{c1}/leases/{bot}/release"),
        serde_json::json!({ "lease": lease, "outcome": "success" }),
    )
    .await?;
    let v = w
        .post(
            &format!("/v1/computers/{c1}/screens/{bot}/url"),
            serde_json::json!({ "policy": "view" }),
        )
        .await?;
    let view = v["path"]
        .as_str()
        .ok_or_else(|| anyhow!("no path in {v}"))?
        .to_string();
    let sealed = view.trim_start_matches("/cap/").to_string();
    w.add_secret(&sealed);
    let viewing =
        |n: f64| move |p: &Parsed| p.get("rakazo_live_streams", &[("kind", "view")]) == Some(n);
    assert_eq!(
        scrape(&w)
            .await?
            .get("rakazo_live_streams", &[("kind", "view")]),
        Some(0.0)
    );
    let ws = connect(&w.http, &view).await?;
    let open = scrape_until(&w, "the viewer to be counted", viewing(1.0)).await?;
    assert_eq!(
        open.get("rakazo_live_streams", &[("kind", "control")]),
        Some(0.0)
    );
    assert_eq!(
        open.get("rakazo_live_streams", &[("kind", "terminal")]),
        Some(0.0)
    );
    drop(ws);
    scrape_until(&w, "the closed viewer to leave the gauge", viewing(0.0)).await?;

    // The token rule on the API listener: none or a wrong one is 401.
    assert_eq!(get(&w.http, "/metrics").await?.status, 401);
    assert_eq!(
        get_with_auth(&w.http, "/metrics", "Bearer rk_not-the-token").await?,
        401
    );

    let text = scrape_text(&w).await?;
    let p = parse(&text)?;
    assert_eq!(p.op("lease.acquire", "ok"), 1.0);
    assert_eq!(p.op("lease.release", "ok"), 1.0);
    assert_eq!(p.op("screen.ensure", "ok"), 1.0);
    assert_eq!(p.op("screen.url", "ok"), 1.0);
    assert_eq!(p.count("rakazo_home_checkpoint_bytes_count", &[]), 3.0);
    assert_eq!(
        p.count(
            "rakazo_home_checkpoint_duration_seconds_count",
            &[("outcome", "ok")]
        ),
        3.0
    );
    // The 4xx answers: the two refused execs and the two scrapes without the right token.
    assert_eq!(
        p.count("rakazo_http_requests_total", &[("class", "4xx")]),
        4.0
    );
    assert_eq!(
        p.count("rakazo_http_requests_total", &[("class", "5xx")]),
        0.0
    );
    // Unauthorized scrapes are no operation; no series names an id, a bot or a secret.
    for secret in [
        c1.as_str(),
        c2.as_str(),
        bot,
        "no-such-computer",
        "ws-metrics",
        w.api_token(),
        sealed.as_str(),
    ] {
        assert!(!text.contains(secret), "{secret:?} appears in /metrics");
    }

    // The plain listener: the same metrics without a token, and nothing else.
    let addresses: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        w.data_dir.path().join("addresses.json"),
    )?)?;
    let plain = addresses["metrics"]
        .as_str()
        .ok_or_else(|| anyhow!("no metrics address in {addresses}"))?
        .to_string();
    let got = get(&plain, "/metrics").await?;
    assert_eq!(got.status, 200);
    let p = parse(std::str::from_utf8(&got.body)?)?;
    assert_eq!(p.op("exec", "ok"), 4.0);
    assert_eq!(get(&plain, "/v1/computers").await?.status, 404);
    w.check_log()
}

/// An idle suspension is counted, with the checkpoint it made; the suspended computer's guest
/// leaves the connected gauge.
#[tokio::test(flavor = "multi_thread")]
async fn idle_suspensions_are_counted() -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        idle_timeout_secs: Some(2),
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("ws-metrics-idle").await?;
    let p = scrape_until(&w, "the idle suspension to be counted", |p| {
        p.count("rakazo_idle_suspensions_total", &[("result", "suspended")]) >= 1.0
    })
    .await?;
    assert_eq!(
        p.count("rakazo_idle_suspensions_total", &[("result", "suspended")]),
        1.0
    );
    assert_eq!(
        p.count(
            "rakazo_idle_suspensions_total",
            &[("result", "checkpoint_failed")]
        ),
        0.0
    );
    assert_eq!(
        p.count(
            "rakazo_home_checkpoint_duration_seconds_count",
            &[("outcome", "ok")]
        ),
        1.0
    );
    assert_eq!(p.get("rakazo_connected_guests", &[]), Some(0.0));
    assert_eq!(w.show(&c).await?["state"], "stopped");
    w.check_log()
}

/// With `RAKAZO_LOG_FORMAT=json` every line of the server's log, and of a local guest's, is a
/// JSON object with `level` and `message`; the world's scan still finds a WARN line in it (a
/// checkpoint refused while another bot holds a lease logs one) and fails on it until allowed.
#[tokio::test(flavor = "multi_thread")]
async fn json_logs_parse_and_are_still_scanned() -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        env: vec![("RAKAZO_LOG_FORMAT".into(), "json".into())],
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("ws-metrics-json").await?;
    w.sh(&c, "true").await?;
    let lease = w.lease(&c, "bot-holding", "run-json").await?;
    let lines = w
        .client
        .send(
            Method::POST,
            &format!("/v1/computers/{c}/home/checkpoint?wait_ms=0"),
            None,
            None,
            full_body(Bytes::new()),
        )
        .await?
        .into_body()
        .collect()
        .await?
        .to_bytes();
    assert!(
        String::from_utf8_lossy(&lines).contains("home_leases_held"),
        "{}",
        String::from_utf8_lossy(&lines)
    );
    w.post(
        &format!("/v1/computers/{c}/leases/bot-holding/release"),
        serde_json::json!({ "lease": lease, "outcome": "success" }),
    )
    .await?;

    let log = w.log();
    let mut messages = Vec::new();
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("a server log line is not JSON: {line}"))?;
        let (Some(level), Some(message)) = (v["level"].as_str(), v["message"].as_str()) else {
            bail!("no level or message in {line}");
        };
        messages.push((level.to_string(), message.to_string()));
    }
    assert!(messages
        .iter()
        .any(|(l, m)| l == "INFO" && m == "http request"));
    assert!(messages
        .iter()
        .any(|(l, m)| l == "WARN" && m.starts_with("home checkpoint failed")));
    let guest_log = std::fs::read_to_string(w.local_dir_of(&c).join("guest.log"))?;
    let mut guest_lines = 0;
    for line in guest_log.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("a guest log line is not JSON: {line}"))?;
        assert!(v["level"].is_string() && v["message"].is_string(), "{line}");
        guest_lines += 1;
    }
    assert!(guest_lines > 0, "the guest logged nothing");

    // The scan reads the JSON level: the WARN fails the test until it is expected.
    let err = w
        .check_log()
        .expect_err("the scan must see the JSON WARN line");
    assert!(err.to_string().contains("unexpected warning"), "{err}");
    w.allow_warn("home checkpoint failed");
    w.check_log()
}
