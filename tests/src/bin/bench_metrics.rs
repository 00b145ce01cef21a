//! The cost of `/metrics` (issue 15), measured against an anchor in the same run:
//!
//! - **scrape**: `GET /metrics` (with the API token, on the API listener) after a workload on
//!   `--computers` computers (each: a few execs ok and refused, a file write, one checkpoint),
//!   against `GET /v1/computers` of the same computers (the anchor: a database read and a JSON
//!   list, the cheapest call that grows with the fleet), alternating one of each, `--runs`
//!   times. The number of series is printed with one computer's workload done and with all of
//!   them: labels are bounded, so it does not grow with the fleet.
//! - **recording**: `Metrics::operation` called in a loop in this process (what the router adds
//!   to every operation), against an empty loop body's anchor (an atomic add).
//!
//! `cargo run --release -p tests --bin bench_metrics -- [--computers N] [--runs N] [--smoke]`
//! (`--smoke`: 3 computers, 20 runs, for a quick check; explicit options still win).

use anyhow::{bail, Result};
use bytes::Bytes;
use control_plane::client::full_body;
use control_plane::metrics::{Metrics, Outcome};
use http_body_util::BodyExt;
use hyper::Method;
use std::time::Duration;
use tests::bench::{arg, ms, now};
use tests::World;

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

/// A GET with the API token; the body's length.
async fn get(w: &World, path: &str) -> Result<usize> {
    let resp = w
        .client
        .send(Method::GET, path, None, None, full_body(Bytes::new()))
        .await?;
    Ok(resp.into_body().collect().await?.to_bytes().len())
}

async fn text(w: &World, path: &str) -> Result<String> {
    let resp = w
        .client
        .send(Method::GET, path, None, None, full_body(Bytes::new()))
        .await?;
    Ok(String::from_utf8(
        resp.into_body().collect().await?.to_bytes().to_vec(),
    )?)
}

fn series(text: &str) -> usize {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count()
}

/// One computer's share of the workload.
async fn workload(w: &World, c: &str) -> Result<()> {
    for _ in 0..3 {
        w.sh(c, "true").await?;
    }
    if w.exec(c, serde_json::json!({ "argv": [] })).await.is_ok() {
        bail!("an empty argv was accepted");
    }
    w.put_file(c, "notes/bench.txt", vec![1u8; 10_000], false)
        .await?;
    w.home_ok(c, "checkpoint").await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    tests::bench::Usage::new("the cost of /metrics against an anchor")
        .flag(
            "--computers",
            "N",
            "computers of the workload (default 100; smoke 3)",
        )
        .flag("--runs", "N", "measured scrapes (default 1000; smoke 20)")
        .check();
    let smoke = flag("--smoke");
    let computers = arg("--computers", if smoke { 3 } else { 100 });
    let runs = arg("--runs", if smoke { 20 } else { 1000 });
    let mut w = World::start().await?;
    let mut ids = Vec::new();
    for i in 0..computers {
        let c = w.create_computer(&format!("ws-bench-metrics-{i}")).await?;
        workload(&w, &c).await?;
        if i == 0 {
            let one = text(&w, "/metrics").await?;
            println!("series after one computer's workload: {}", series(&one));
        }
        ids.push(c);
    }
    let all = text(&w, "/metrics").await?;
    println!(
        "series after {computers} computers' workload: {} ({} bytes)",
        series(&all),
        all.len()
    );
    for c in &ids {
        if all.contains(c.as_str()) {
            bail!("computer id {c} appears in /metrics");
        }
    }

    let (mut scrape, mut list) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = now();
        get(&w, "/metrics").await?;
        scrape.push(ms(t.elapsed()));
        let t = now();
        get(&w, "/v1/computers").await?;
        list.push(ms(t.elapsed()));
    }
    println!(
        "bench_metrics: {computers} computers, {runs} runs each{}",
        if smoke { "; **smoke run**" } else { "" }
    );
    println!("## GET round trip (ms)");
    println!("| | p50 | p95 | max |");
    println!("|---|---|---|---|");
    for (name, v) in [
        ("GET /v1/computers (anchor)", &list),
        ("GET /metrics", &scrape),
    ] {
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} |",
            percentile(v, 0.5),
            percentile(v, 0.95),
            percentile(v, 1.0)
        );
    }
    println!(
        "| ratio /metrics / list | {:.2} | {:.2} | |",
        percentile(&scrape, 0.5) / percentile(&list, 0.5),
        percentile(&scrape, 0.95) / percentile(&list, 0.95)
    );

    // Recording, in process: what the router adds to each operation.
    let m = Metrics::new();
    let n = if smoke { 100_000 } else { 5_000_000 };
    let ops = ["exec", "files.read", "files.write", "computer.show"];
    let counter = std::sync::atomic::AtomicU64::new(0);
    let t = now();
    for i in 0..n {
        counter.fetch_add(i as u64 & 1, std::sync::atomic::Ordering::Relaxed);
        std::hint::black_box(&counter);
    }
    let anchor = t.elapsed();
    let t = now();
    for i in 0..n {
        m.operation(
            ops[i % ops.len()],
            Outcome::Ok,
            Duration::from_micros(i as u64 % 5000),
        );
    }
    let recording = t.elapsed();
    let per = |d: Duration| d.as_nanos() as f64 / n as f64;
    println!("## recording one operation, in process ({n} calls)");
    println!("| atomic add (anchor) | Metrics::operation | ratio |");
    println!("|---|---|---|");
    println!(
        "| {:.1} ns | {:.1} ns | {:.0} |",
        per(anchor),
        per(recording),
        per(recording) / per(anchor)
    );
    w.check_log()
}
