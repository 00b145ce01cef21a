//! `bench_processes`: the `logs --follow` delay of a detached process, in one run.
//!
//! One real `rakazo serve` (the system-test `World`, the local provider) with one computer. A
//! Python loop prints its wall clock (`time.time_ns()`, unbuffered) every `--period-ms`; the
//! bench reads those lines as they arrive and subtracts each one's timestamp from the arrival
//! time (same host, same clock): the delay from a byte written by the process to the client.
//!
//! - measured: the loop as a detached process (`POST …/processes`), read by
//!   `GET …/processes/{id}/logs?follow=true` (two followers at once; each line counted once per
//!   follower);
//! - anchor: the same loop through plain `POST …/exec`, whose NDJSON streams its stdout.
//!
//! Both run at the same time, so load that comes and goes hits both alike. p50, p90 and p99
//! (nearest rank) and their ratios are printed; the goal is ≤ 50 ms for the follow. Timings are
//! printed, never asserted; only a wrong result (a missing line) fails the run.
//!
//! `cargo build -p control-plane -p guest-agent -p tests --bins &&
//!  target/debug/bench_processes [--lines N] [--period-ms N] [--smoke]`

use anyhow::{ensure, Context, Result};
use bytes::Bytes;
use control_plane::client::{full_body, q};
use http_body_util::BodyExt;
use hyper::Method;
use std::time::Duration;
use tests::bench::{arg, percentile, smoke};
use tests::World;

/// The wall clock in ns since the epoch, as Python's `time.time_ns()` reads it.
#[allow(clippy::disallowed_methods)] // reason: the delay is against the process's wall clock
fn wall_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

/// Reads NDJSON lines whose `data` carries `T<ns>` timestamps; returns each one's delay in ms,
/// until `want` timestamps were seen or the body ends.
async fn delays(resp: hyper::Response<hyper::body::Incoming>, want: usize) -> Result<Vec<f64>> {
    let mut body = resp.into_body();
    let mut buf: Vec<u8> = Vec::new();
    let mut text = String::new();
    let mut out = Vec::new();
    while out.len() < want {
        let Some(frame) = body.frame().await else {
            break;
        };
        let arrived = wall_ns();
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        buf.extend_from_slice(&data);
        while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            let v: serde_json::Value = serde_json::from_slice(&line)?;
            if let Some(d) = v["data"].as_str() {
                text.push_str(d);
            }
        }
        while let Some(nl) = text.find('\n') {
            let l: String = text.drain(..=nl).collect();
            if let Some(ns) = l
                .trim()
                .strip_prefix('T')
                .and_then(|n| n.parse::<i128>().ok())
            {
                out.push((arrived - ns) as f64 / 1e6);
            }
        }
    }
    Ok(out)
}

fn row(name: &str, v: &[f64], anchor: Option<(f64, f64, f64)>) -> (f64, f64, f64) {
    let p = (percentile(v, 0.5), percentile(v, 0.9), percentile(v, 0.99));
    let (r50, r90, r99) = match anchor {
        Some(a) => (p.0 / a.0, p.1 / a.1, p.2 / a.2),
        None => (1.0, 1.0, 1.0),
    };
    println!(
        "| {name} | {} | {:.2} | {:.2} | {:.2} | {r50:.2} | {r90:.2} | {r99:.2} |",
        v.len(),
        p.0,
        p.1,
        p.2
    );
    p
}

#[tokio::main]
async fn main() -> Result<()> {
    tests::bench::Usage::new("the logs --follow delay of a detached process")
        .flag("--lines", "N", "lines printed (default 1000; smoke 20)")
        .flag("--period-ms", "N", "ms between lines (default 10)")
        .check();
    let lines = arg("--lines", if smoke() { 20 } else { 1000 });
    let period = arg("--period-ms", 10);
    let mut w = World::start().await?;
    let c = w.create_computer("ws-bench-procs").await?;
    // Warm-up lines first (the followers connect meanwhile), then the measured ones.
    let warm = 20;
    let script = format!(
        "import time\nfor i in range({}):\n    print('T%d' % time.time_ns(), flush=True)\n    \
         time.sleep({})\n",
        warm + lines,
        period as f64 / 1000.0
    );
    let argv = serde_json::json!(["python3", "-u", "-c", script]);

    let started = w
        .post(
            &format!("/v1/computers/{}/processes", q(&c)),
            serde_json::json!({ "argv": argv }),
        )
        .await?;
    let id = started["id"].as_u64().context("no process id")?;
    let follow = || async {
        w.client
            .send(
                Method::GET,
                &format!("/v1/computers/{}/processes/{id}/logs?follow=true", q(&c)),
                None,
                None,
                full_body(Bytes::new()),
            )
            .await
    };
    let (f1, f2) = (follow().await?, follow().await?);
    let exec = w
        .client
        .send(
            Method::POST,
            &format!("/v1/computers/{}/exec", q(&c)),
            Some("application/json"),
            None,
            full_body(serde_json::to_vec(&serde_json::json!({ "argv": argv }))?),
        )
        .await?;
    let all = warm + lines;
    let (a, b, e) = tokio::time::timeout(
        Duration::from_secs(60 + (all * period) as u64 / 100),
        async { tokio::join!(delays(f1, all), delays(f2, all), delays(exec, all)) },
    )
    .await
    .context("the lines did not all arrive")?;
    let (a, b, e) = (a?, b?, e?);
    // Each follower started at the oldest output kept: lines written before it connected
    // arrive at once, late; the warm-up lines cover that.
    for (name, v) in [("follower 1", &a), ("follower 2", &b), ("exec", &e)] {
        ensure!(v.len() == all, "{name} saw {} of {all} lines", v.len());
    }
    let skip = |v: &[f64]| v[warm..].to_vec();
    let follow: Vec<f64> = [skip(&a), skip(&b)].concat();
    let anchor = skip(&e);
    println!(
        "delay from a line printed by the process to the client, {lines} lines every {period} ms \
         after {warm} warm-up lines; exec and two followers at once"
    );
    println!();
    println!("| path | lines | p50 ms | p90 ms | p99 ms | p50 ratio | p90 ratio | p99 ratio |");
    println!("|---|---|---|---|---|---|---|---|");
    let base = row("`POST …/exec` NDJSON (anchor)", &anchor, None);
    row(
        "`GET …/processes/{id}/logs?follow=true` (2 followers)",
        &follow,
        Some(base),
    );
    w.check_log()
}
