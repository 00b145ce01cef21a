//! `bench_previews`: what a preview URL costs (docs/previews.md), each part against its anchor in
//! the same run.
//!
//! One real `rakazo serve` (the system-test `World`, a contained local computer) running
//! `tests/scripts/preview_app.py` as a service, reached through a public preview.
//!
//! - latency: `GET /headers` (a small answer) through the preview, one at a time on a kept-alive
//!   connection to the control plane, vs the same request from inside the computer (a Python
//!   `http.client` loop on the computer's loopback, timing each request itself), both over a
//!   kept-alive connection and over a fresh one per request (what the preview opens to the app);
//!   the added latency is the difference of the p50s (goal ≤ 1 ms);
//! - throughput: a download through the preview (`/bytes?n=…`, 1 GiB) vs the same number of
//!   bytes over a bare tunnel stream (`GET …/files/content` of a sparse file: the guest's QUIC
//!   stream, no app, no proxy); goal ≥ 0.8×;
//! - waking: from a visit to a stopped computer to the first byte of its app's answer (the
//!   service starts with it), vs `POST …/start` then the same request (what a client does by
//!   hand).
//!
//! Timings are printed, never asserted; only a wrong result fails the run.
//!
//! `cargo build -p control-plane -p guest-agent -p tests --bins &&
//!  target/debug/bench_previews [--requests N] [--mib N] [--wakes N] [--smoke]`

use anyhow::{ensure, Context, Result};
use bytes::Bytes;
use control_plane::client::{full_body, q};
use http_body_util::BodyExt;
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as LegacyClient;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;
use tests::bench::{arg, ms, now, percentile, smoke};
use tests::{World, WorldOptions};

const PORT: u16 = 8000;

/// Requests to a preview: to the control plane's address with the preview's `Host`.
struct Visitor {
    http: LegacyClient<HttpConnector, http_body_util::Full<Bytes>>,
    addr: String,
    host: String,
}

impl Visitor {
    fn new(w: &World, public: &str) -> Self {
        let mut c = HttpConnector::new();
        c.set_nodelay(true);
        let host = public
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        Self {
            http: LegacyClient::builder(TokioExecutor::new()).build(c),
            addr: w.http.clone(),
            host,
        }
    }

    /// GETs `path`; the status, the time to the answer's head, and the body's length once read.
    async fn get(&self, path: &str) -> Result<(StatusCode, Duration, Duration, u64)> {
        let req = Request::builder()
            .uri(format!("{}{path}", self.addr))
            .header(hyper::header::HOST, &self.host)
            .body(http_body_util::Full::new(Bytes::new()))?;
        let t = now();
        let resp = self.http.request(req).await?;
        let head = t.elapsed();
        let status = resp.status();
        let mut body = resp.into_body();
        let mut n = 0u64;
        while let Some(f) = body.frame().await {
            if let Ok(d) = f?.into_data() {
                n += d.len() as u64;
            }
        }
        Ok((status, head, t.elapsed(), n))
    }
}

fn p50(v: &[f64]) -> f64 {
    percentile(v, 0.5)
}

#[tokio::main]
async fn main() -> Result<()> {
    tests::bench::Usage::new("what a preview URL costs, each part against its anchor")
        .flag(
            "--requests",
            "N",
            "measured requests (default 2000; smoke 30)",
        )
        .flag("--mib", "N", "MiB of the download (default 1024; smoke 16)")
        .flag(
            "--wakes",
            "N",
            "wakes of a suspended computer (default 5; smoke 1)",
        )
        .check();
    let requests = arg("--requests", if smoke() { 30 } else { 2000 });
    let mib = arg("--mib", if smoke() { 16 } else { 1024 });
    let wakes = arg("--wakes", if smoke() { 1 } else { 5 });
    let mut w = World::start_with(WorldOptions {
        env: vec![("RAKAZO_LOCAL_CONTAINMENT".into(), "full".into())],
        ..WorldOptions::default()
    })
    .await?;
    let c = w.create_computer("ws-bench-previews").await?;
    let app = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/preview_app.py"
    ))?;
    w.put_file(&c, "app.py", app, false).await?;
    w.client
        .json(
            Method::PUT,
            &format!("/v1/computers/{}/services/web", q(&c)),
            Some(&serde_json::json!({ "argv": ["python3", "app.py", PORT.to_string(), "bench"] })),
        )
        .await?;
    let made = w
        .post(
            &format!("/v1/computers/{}/previews", q(&c)),
            serde_json::json!({ "port": PORT, "access": "public" }),
        )
        .await?;
    let public = made["url"].as_str().context("no url")?.to_string();
    let v = Visitor::new(&w, &public);
    let deadline = now() + Duration::from_secs(30);
    while !matches!(v.get("/headers").await, Ok((StatusCode::OK, ..))) {
        ensure!(
            now() < deadline,
            "the app never answered through its preview"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Latency. Inside: Python times each request itself, printing ms per line.
    let inside = |fresh: bool| {
        format!(
            "import http.client, time\n\
             c = http.client.HTTPConnection('127.0.0.1', {PORT})\n\
             for i in range({n}):\n\
             \x20   if {fresh}: c = http.client.HTTPConnection('127.0.0.1', {PORT})\n\
             \x20   t = time.perf_counter(); c.request('GET', '/headers'); r = c.getresponse(); r.read()\n\
             \x20   print('%.4f' % ((time.perf_counter() - t) * 1000))\n\
             \x20   if {fresh}: c.close()\n",
            n = requests,
            fresh = if fresh { "True" } else { "False" },
        )
    };
    let mut rows = Vec::new();
    for fresh in [false, true] {
        let out = w
            .sh(&c, &format!("python3 -c \"{}\"", inside(fresh)))
            .await?;
        let v: Vec<f64> = out.lines().filter_map(|l| l.trim().parse().ok()).collect();
        ensure!(v.len() == requests, "inside: {} of {requests}", v.len());
        rows.push((fresh, v));
    }
    let mut through = Vec::with_capacity(requests);
    for _ in 0..requests {
        let (status, _, total, n) = v.get("/headers").await?;
        ensure!(
            status == StatusCode::OK && n > 0,
            "preview answered {status}"
        );
        through.push(ms(total));
    }
    println!("latency of `GET /headers` ({requests} requests, one at a time)");
    println!();
    println!("| path | p50 ms | p90 ms | p99 ms | added p50 ms |");
    println!("|---|---|---|---|---|");
    let line = |name: &str, v: &[f64], base: f64| {
        println!(
            "| {name} | {:.3} | {:.3} | {:.3} | {:+.3} |",
            p50(v),
            percentile(v, 0.9),
            percentile(v, 0.99),
            p50(v) - base
        );
    };
    let keep = p50(&rows[0].1);
    line(
        "inside the computer, kept-alive connection (anchor)",
        &rows[0].1,
        keep,
    );
    line(
        "inside the computer, a fresh connection each",
        &rows[1].1,
        keep,
    );
    line(
        "through the preview (kept-alive to the control plane)",
        &through,
        keep,
    );
    println!(
        "\nadded by the preview: {:+.3} ms p50 over a kept-alive request inside, {:+.3} ms over \
         a fresh connection inside (goal ≤ 1 ms)\n",
        p50(&through) - keep,
        p50(&through) - p50(&rows[1].1)
    );

    // Throughput: the same bytes over a bare tunnel stream (anchor) and through the preview.
    let bytes = (mib as u64) << 20;
    w.sh(&c, &format!("truncate -s {bytes} big.bin")).await?;
    let mut bare = Vec::new();
    let mut proxied = Vec::new();
    for _ in 0..if smoke() { 1 } else { 3 } {
        let t = now();
        let resp = w
            .client
            .send(
                Method::GET,
                &format!("/v1/computers/{}/files/content?path=big.bin", q(&c)),
                None,
                None,
                full_body(Bytes::new()),
            )
            .await?;
        let mut body = resp.into_body();
        let mut n = 0u64;
        while let Some(f) = body.frame().await {
            if let Ok(d) = f?.into_data() {
                n += d.len() as u64;
            }
        }
        ensure!(n == bytes, "the file read gave {n} of {bytes} bytes");
        bare.push(bytes as f64 / 1e6 / t.elapsed().as_secs_f64());
        let (status, _, total, n) = v.get(&format!("/bytes?n={bytes}")).await?;
        ensure!(
            status == StatusCode::OK && n == bytes,
            "the preview gave {n} of {bytes}"
        );
        proxied.push(bytes as f64 / 1e6 / total.as_secs_f64());
    }
    let (b, p) = (p50(&bare), p50(&proxied));
    println!("download of {mib} MiB (median of {} rounds)", bare.len());
    println!();
    println!("| path | MB/s | ratio |");
    println!("|---|---|---|");
    println!("| bare tunnel stream (`GET …/files/content`, anchor) | {b:.0} | 1.00 |");
    println!("| through the preview (`/bytes`) | {p:.0} | {:.2} |", p / b);
    println!("\ngoal ≥ 0.8×\n");

    // Waking: a visit to the stopped computer, vs start by hand then the same request.
    let mut visit = Vec::new();
    let mut by_hand = Vec::new();
    for _ in 0..wakes {
        w.post(
            &format!("/v1/computers/{}/stop", q(&c)),
            serde_json::json!({}),
        )
        .await?;
        let (status, head, _, _) = v.get("/headers").await?;
        ensure!(status == StatusCode::OK, "the visit that woke it: {status}");
        visit.push(ms(head));
        w.post(
            &format!("/v1/computers/{}/stop", q(&c)),
            serde_json::json!({}),
        )
        .await?;
        let t = now();
        w.post(
            &format!("/v1/computers/{}/start", q(&c)),
            serde_json::json!({}),
        )
        .await?;
        let (status, ..) = loop {
            // The service starts with the computer: until it listens, the preview says 502.
            let got = v.get("/headers").await?;
            if got.0 != StatusCode::BAD_GATEWAY {
                break got;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        ensure!(status == StatusCode::OK, "after a start by hand: {status}");
        by_hand.push(ms(t.elapsed()));
    }
    println!("from a request to a stopped computer to its app's first byte ({wakes} rounds)");
    println!();
    println!("| path | p50 ms | max ms | ratio |");
    println!("|---|---|---|---|");
    let max = |v: &[f64]| v.iter().copied().fold(f64::NAN, f64::max);
    println!(
        "| `POST …/start`, then the request (anchor) | {:.0} | {:.0} | 1.00 |",
        p50(&by_hand),
        max(&by_hand)
    );
    println!(
        "| the visit wakes it | {:.0} | {:.0} | {:.2} |",
        p50(&visit),
        max(&visit),
        p50(&visit) / p50(&by_hand)
    );
    w.check_log()
}
