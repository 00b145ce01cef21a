//! `bench_activity`: what recording the activity feed costs an exec, in one run.
//!
//! Two real `rakazo serve` processes (the system-test `World`, SQLite, the local provider), each
//! with one computer: one records the feed (`--activity-retention` at its default, 1000 events
//! per computer, with one live follower on `…/activity/stream`, which reads every event as it is
//! recorded), the other has it off (`RAKAZO_ACTIVITY_RETENTION=0`: the anchor). The exec round
//! trip of `sh -c 'echo …'` (a command line and an output tail to redact and store) is measured
//! through each, interleaved one of each per round after warm-ups, so load that comes and goes
//! hits both alike; p50 and p99 (nearest rank) and their ratios are printed. An exec is recorded
//! after its answer has gone out, so the round trip shows what the recording costs the next
//! request (the database write it shares the server with), not a wait.
//!
//! Timings are printed, never asserted; only a wrong result (an exit code, a missing event)
//! fails the run.
//!
//! `cargo build -p control-plane -p guest-agent -p tests --bins &&
//!  target/debug/bench_activity [--runs N] [--warmups N] [--smoke]`

use anyhow::{ensure, Context, Result};
use control_plane::client::{full_body, q};
use http_body_util::BodyExt;
use hyper::Method;
use std::time::Duration;
use tests::bench::{arg, ms, now};
use tests::{World, WorldOptions};

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

/// p50 and p99 (nearest rank), in ms.
fn percentiles(samples: &[Duration]) -> (f64, f64) {
    let mut v: Vec<f64> = samples.iter().map(|d| ms(*d)).collect();
    v.sort_by(f64::total_cmp);
    let rank = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    (rank(0.5), rank(0.99))
}

async fn exec_once(w: &World, c: &str, n: usize) -> Result<Duration> {
    let spec = serde_json::json!({
        "argv": ["sh", "-c", format!("echo round {n} API_TOKEN=not-a-real-secret-{n}")],
    });
    let start = now();
    let out = w.exec(c, spec).await.with_context(|| format!("exec {n}"))?;
    let took = start.elapsed();
    ensure!(out.code == Some(0), "exec {n} answered {:?}", out.events);
    Ok(took)
}

#[tokio::main]
async fn main() -> Result<()> {
    tests::bench::Usage::new("what recording the activity feed costs an exec")
        .flag(
            "--runs",
            "N",
            "measured execs on each server (default 500; smoke 10)",
        )
        .flag(
            "--warmups",
            "N",
            "execs before measuring (default 30; smoke 2)",
        )
        .check();
    let smoke = flag("--smoke");
    let runs = arg("--runs", if smoke { 10 } else { 500 });
    let warmups = arg("--warmups", if smoke { 2 } else { 30 });

    let on = World::start().await?;
    let off = World::start_with(WorldOptions {
        env: vec![("RAKAZO_ACTIVITY_RETENTION".into(), "0".into())],
        ..Default::default()
    })
    .await?;
    let mut on = on;
    let mut off = off;
    let c_on = on.create_computer("ws-bench-on").await?;
    let c_off = off.create_computer("ws-bench-off").await?;

    // A follower on the recording server, reading every event as it comes.
    let follower = on
        .client
        .send(
            Method::GET,
            &format!("/v1/computers/{}/activity/stream", q(&c_on)),
            None,
            None,
            full_body(bytes::Bytes::new()),
        )
        .await?;
    let followed = tokio::spawn(async move {
        let mut body = follower.into_body();
        let mut events = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                events += data.windows(6).filter(|w| w == b"data: ").count();
            }
        }
        events
    });

    let mut with = Vec::with_capacity(runs);
    let mut without = Vec::with_capacity(runs);
    for n in 0..warmups + runs {
        // Alternate which goes first, so neither always follows the other's write.
        let (a, b) = if n % 2 == 0 {
            let a = exec_once(&on, &c_on, n).await?;
            (a, exec_once(&off, &c_off, n).await?)
        } else {
            let b = exec_once(&off, &c_off, n).await?;
            (exec_once(&on, &c_on, n).await?, b)
        };
        if n >= warmups {
            with.push(a);
            without.push(b);
        }
    }

    // The recording server recorded every exec (the feed keeps its newest 1000).
    let page = on
        .client
        .json(
            Method::GET,
            &format!("/v1/computers/{}/activity?order=desc&limit=1", q(&c_on)),
            None,
        )
        .await?;
    let last = page["last_seq"].as_u64().unwrap_or(0);
    ensure!(
        last >= (warmups + runs) as u64,
        "the feed has {last} events for {} execs",
        warmups + runs
    );
    let off_page = off
        .client
        .json(
            Method::GET,
            &format!("/v1/computers/{}/activity", q(&c_off)),
            None,
        )
        .await?;
    ensure!(off_page["last_seq"] == 0, "retention 0 records nothing");

    let (p50_on, p99_on) = percentiles(&with);
    let (p50_off, p99_off) = percentiles(&without);
    println!(
        "exec round trip (`sh -c 'echo …'`), {runs} runs after {warmups} warm-ups, interleaved"
    );
    println!();
    println!("| server | p50 ms | p99 ms | p50 ratio | p99 ratio |");
    println!("|---|---|---|---|---|");
    println!("| feed off (`--activity-retention 0`, anchor) | {p50_off:.2} | {p99_off:.2} | 1.00 | 1.00 |");
    println!(
        "| feed on (retention 1000, one follower) | {p50_on:.2} | {p99_on:.2} | {:.2} | {:.2} |",
        p50_on / p50_off,
        p99_on / p99_off
    );
    on.check_log()?;
    off.check_log()?;
    drop(on);
    let seen = tokio::time::timeout(Duration::from_secs(10), followed)
        .await
        .unwrap_or(Ok(0))
        .unwrap_or(0);
    println!();
    println!("the follower read {seen} events");
    Ok(())
}
