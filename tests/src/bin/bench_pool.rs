//! `bench_pool`: what a warm pool saves (docs/pools.md): create → first exec and create → first
//! screenshot of the bot's Chrome, cold (the anchor) against from a pool, in the same run, on
//! the local provider and, where an engine runs (`scripts/podman.sh`), on Docker.
//!
//! One real `rakazo serve` (the system-test `World`, SQLite). Each round creates a team computer
//! of a new workspace through the API and times until the first `exec` of `true` has answered
//! (or the bot's first `observe` has a frame), then destroys it; cold rounds and pool rounds
//! alternate. Before a pool round the pool has refilled (not timed). A pool of desktops
//! (`--desktop`) serves the screenshot rows. Only a wrong result fails the run; timings are
//! printed, never asserted.
//!
//! `cargo build -p control-plane -p guest-agent -p tests --bins &&
//!  target/debug/bench_pool [--rounds N] [--smoke]` (`--smoke`: 1 round, local only)

use anyhow::{bail, ensure, Context, Result};
use hyper::Method;
use serde_json::json;
use std::time::Duration;
use tests::bench::{arg, loadavg, ms, now, percentile, smoke};
use tests::{engine, World, WorldOptions};

const REFILL: Duration = Duration::from_secs(120);

async fn destroy(w: &World, c: &str) -> Result<()> {
    w.client
        .json(Method::DELETE, &format!("/v1/computers/{c}"), None)
        .await?;
    Ok(())
}

/// Waits until pool `name` has `n` ready members.
async fn refilled(w: &World, name: &str, n: u64) -> Result<()> {
    let deadline = tokio::time::Instant::now() + REFILL;
    loop {
        let p = w
            .client
            .json(Method::GET, &format!("/v1/pools/{name}"), None)
            .await?;
        if p["ready"] == n {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("pool {name} did not refill: {p}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates a computer (`body`), then its first exec or screenshot: the milliseconds until it
/// answered.
async fn one(w: &World, body: serde_json::Value, screen: bool, expect_pool: bool) -> Result<f64> {
    let t = now();
    let v = w
        .client
        .json(Method::POST, "/v1/computers", Some(&body))
        .await?;
    let c = v["id"].as_str().context("no id")?.to_string();
    if screen {
        let b = tests::bot::Bot::new(w, &c, "bot-bench").await?;
        let frame = b.observe().await?;
        ensure!(
            frame["width"].as_u64().unwrap_or(0) > 0,
            "no frame: {frame}"
        );
    } else {
        let out = w.exec(&c, json!({ "argv": ["true"] })).await?;
        ensure!(out.code == Some(0), "exec failed: {out:?}");
    }
    let took = ms(t.elapsed());
    if expect_pool {
        ensure!(
            v["from_pool"]["handed_out"] == true,
            "not from the pool: {v}"
        );
    }
    destroy(w, &c).await?;
    Ok(took)
}

#[tokio::main]
async fn main() -> Result<()> {
    tests::bench::Usage::new(
        "what a warm pool saves: create to first exec and screenshot, cold and pooled",
    )
    .flag("--rounds", "N", "rounds of each (default 7; smoke 1)")
    .check();
    let smoke = smoke();
    let rounds = arg("--rounds", if smoke { 1 } else { 7 });
    let docker = !smoke && engine::require_engine().is_ok();
    let mut w = World::start_with(WorldOptions {
        providers: Some(if docker { "local,docker" } else { "local" }.into()),
        ..Default::default()
    })
    .await?;
    let providers: &[&str] = if docker {
        &["local", "docker"]
    } else {
        &["local"]
    };
    println!(
        "{rounds} rounds per row, cold and pool alternating; load before: {}\n",
        loadavg()
    );
    println!(
        "| Provider | Path | cold p50 ms (anchor) | pool p50 ms | pool max ms | pool ÷ cold |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    let mut n = 0;
    for p in providers {
        for (screen, desktop) in [(false, false), (true, true)] {
            let name = format!("bench-{p}-{}", if screen { "desk" } else { "exec" });
            w.client
                .json(
                    Method::POST,
                    "/v1/pools",
                    Some(&json!({ "name": name, "provider": p, "size": 1, "desktop": desktop })),
                )
                .await?;
            let (mut cold, mut pooled) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                n += 1;
                let ws = format!("ws-bench-{n}");
                cold.push(one(&w, json!({ "workspace": ws, "provider": p }), screen, false).await?);
                refilled(&w, &name, 1).await?;
                n += 1;
                let ws = format!("ws-bench-{n}");
                pooled.push(one(&w, json!({ "workspace": ws, "pool": name }), screen, true).await?);
            }
            w.client
                .json(Method::DELETE, &format!("/v1/pools/{name}"), None)
                .await?;
            let (c50, p50) = (percentile(&cold, 0.5), percentile(&pooled, 0.5));
            let max = pooled.iter().copied().fold(0.0, f64::max);
            println!(
                "| {p} | create → first {} | {c50:.0} | {p50:.1} | {max:.1} | {:.3} |",
                if screen {
                    "screenshot of the bot's Chrome"
                } else {
                    "exec"
                },
                p50 / c50.max(1e-9)
            );
        }
    }
    w.check_log()?;
    Ok(())
}
