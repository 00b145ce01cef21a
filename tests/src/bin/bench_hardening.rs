//! Hardening (issue 11), measured against its anchors in the same run:
//!
//! - **exec round trip under a slowloris attack**: `POST /v1/computers/<id>/exec` of `true` on a
//!   local computer while N connections hold half-sent request heads, against the same with no
//!   attack (blocks alternate quiet / attack / quiet / attack). The attack's connections are
//!   re-opened as the server closes them at its header timeout, so the pressure is constant.
//! - **checkpoint refused on a quota**: a home holding a sparse 60 GB file, checkpointed until
//!   the quota error, against a checkpoint of the same home without it (the anchor): what a
//!   refusal costs, and that it reads nothing large.
//!
//! `cargo run --release -p tests --bin bench_hardening -- [--runs N] [--slow N]`
//!
//! `--smoke`: a few runs of every part, for CI (`scripts/bench-smoke.sh`); explicit options win.

use anyhow::{bail, Context, Result};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tests::bench::{arg, ms, now, size};
use tests::World;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

/// Keeps `n` connections with half-sent heads open against `addr` until `stop`; counts how many
/// the server closed (and were re-opened).
fn slowloris(addr: String, n: usize, stop: Arc<AtomicBool>, closed: Arc<AtomicUsize>) {
    for _ in 0..n {
        let (addr, stop, closed) = (addr.clone(), stop.clone(), closed.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut s) = tokio::net::TcpStream::connect(&addr).await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                if s.write_all(b"GET /v1/computers HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                    .await
                    .is_err()
                {
                    continue;
                }
                let mut buf = [0u8; 512];
                loop {
                    tokio::select! {
                        r = s.read(&mut buf) => match r {
                            Ok(0) | Err(_) => { closed.fetch_add(1, Ordering::Relaxed); break; }
                            Ok(_) => continue,
                        },
                        _ = tokio::time::sleep(Duration::from_millis(200)) => {
                            if stop.load(Ordering::Relaxed) { return; }
                        }
                    }
                }
            }
        });
    }
}

async fn exec_true(w: &World, c: &str) -> Result<Duration> {
    let began = now();
    let out = w.exec(c, serde_json::json!({ "argv": ["true"] })).await?;
    if out.code != Some(0) {
        bail!("exec true: {out:?}");
    }
    Ok(began.elapsed())
}

#[tokio::main]
async fn main() -> Result<()> {
    tests::bench::Usage::new(
        "hardening: exec under a slowloris attack and more, against their anchors",
    )
    .flag("--runs", "N", "measured requests (default 100; smoke 5)")
    .flag(
        "--slow",
        "N",
        "slowloris connections (default 300; smoke 10)",
    )
    .check();
    let runs = arg("--runs", size(100, 5));
    let slow = arg("--slow", size(300, 10));
    let mut w = World::start().await?;
    // Expected here: the quota refusals, and (past the connection cap) the cap's summary.
    w.allow_warn("home checkpoint failed; the previous revision stays current");
    w.allow_warn("http connection cap reached");
    let c = w.create_computer("ws-bench-hardening").await?;
    for _ in 0..20 {
        exec_true(&w, &c).await?;
    }
    let addr = w.http.trim_start_matches("http://").to_string();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("bench_hardening: {runs} runs per block, {slow} slowloris connections");
    println!("load average at start: {}", load.trim());

    let mut quiet = Vec::new();
    let mut attacked = Vec::new();
    let mut closed_total = 0;
    for block in 0..4 {
        let attack = block % 2 == 1;
        let stop = Arc::new(AtomicBool::new(false));
        let closed = Arc::new(AtomicUsize::new(0));
        if attack {
            slowloris(addr.clone(), slow, stop.clone(), closed.clone());
            // Let the connections be established before measuring.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        for _ in 0..runs {
            let d = exec_true(&w, &c).await.context("exec during the bench")?;
            if attack {
                attacked.push(ms(d));
            } else {
                quiet.push(ms(d));
            }
        }
        stop.store(true, Ordering::Relaxed);
        closed_total += closed.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!();
    println!("## exec `true` round trip (ms; {} runs each)", quiet.len());
    println!("| | p50 | p95 | max |");
    println!("|---|---|---|---|");
    for (name, v) in [("quiet (anchor)", &quiet), ("under slowloris", &attacked)] {
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} |",
            percentile(v, 0.5),
            percentile(v, 0.95),
            percentile(v, 1.0)
        );
    }
    println!(
        "| ratio attack / quiet | {:.2} | {:.2} | |",
        percentile(&attacked, 0.5) / percentile(&quiet, 0.5),
        percentile(&attacked, 0.95) / percentile(&quiet, 0.95)
    );
    println!("slowloris connections closed by the server during the attack blocks: {closed_total}");

    // A checkpoint of a small home (the anchor), then of the same home with a sparse 60 GB file.
    w.sh(
        &c,
        "mkdir -p docs && head -c 4194304 /dev/urandom > docs/blob",
    )
    .await?;
    let mut anchor = Vec::new();
    let mut refused = Vec::new();
    for _ in 0..3 {
        w.sh(&c, "rm -f big.bin").await?;
        let began = now();
        w.home_ok(&c, "checkpoint").await?;
        anchor.push(ms(began.elapsed()));
        w.sh(&c, "truncate -s 60G big.bin").await?;
        let began = now();
        let lines = w.home_flow(&c, "checkpoint").await?;
        refused.push(ms(began.elapsed()));
        let last = lines.last().cloned().unwrap_or_default();
        if last["type"] != "error" {
            bail!("the sparse file was checkpointed: {last}");
        }
    }
    println!();
    println!("## checkpoint (ms, median of 3)");
    println!("| 4 MiB home (anchor) | same + sparse 60 GB file, refused on the quota | ratio |");
    println!("|---|---|---|");
    let (a, r) = (percentile(&anchor, 0.5), percentile(&refused, 0.5));
    println!("| {a:.0} | {r:.0} | {:.2} |", r / a);
    w.check_log()?;
    Ok(())
}
