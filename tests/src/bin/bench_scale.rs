//! `bench_scale`: one control plane with many connected guests (docs/faults.md#scale). Real
//! guest binaries, desktops off, on this machine, through the `fake` provider (each machine is
//! the real guest as a child process of the server: no isolation, which costs the control plane
//! nothing more or less per guest than a contained one).
//!
//! One real `rakazo serve` (the system-test `World`, SQLite). Measured, with the same server
//! empty as the anchor:
//! - control-plane memory: resident set (VmRSS) with no computer, then with `--guests N`
//!   connected and idle, per guest;
//! - control-plane CPU at idle (heartbeats, lease sync, the idle job): share of one core over
//!   `--idle-secs`, empty and with N guests;
//! - exec latency: one computer driven one exec at a time (the anchor), then an open loop of
//!   `--rate` execs a second spread over all N computers for `--load-secs`: p50/p99/max and
//!   errors.
//!
//! Only a wrong result fails the run (an exec that does not answer what it ran); timings are
//! printed, never asserted.
//!
//! `cargo build --release -p control-plane -p guest-agent -p tests --bins &&
//!  target/release/bench_scale [--guests 1000] [--rate 100] [--load-secs 30] [--idle-secs 60]
//!  [--smoke]` (`--smoke`: 8 guests, a few seconds each)

use anyhow::{ensure, Context, Result};
use hyper::Method;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tests::bench::{arg, ms, now, percentile, size, smoke};
use tests::procstat::{cpu_ticks, proc_kb, TICKS_PER_SEC};
use tests::{World, WorldOptions};

/// How many computers are created at once.
const CREATING: usize = 8;

fn rss_kb(pid: u32) -> u64 {
    proc_kb(pid as i32, "status", "VmRSS:")
}

/// Share of one core the process used over `secs`.
async fn cpu_share(pid: u32, secs: u64) -> f64 {
    let before = cpu_ticks(&pid.to_string());
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let after = cpu_ticks(&pid.to_string());
    (after.saturating_sub(before)) as f64 / TICKS_PER_SEC / secs as f64
}

/// Resident set of this world's guest processes (those working in its machines' directory):
/// (count, mean kB).
fn guests_rss(w: &World) -> (usize, u64) {
    let root = w.machines_dir.path().to_path_buf();
    let pids: Vec<i32> = tests::pids_with_cmdline("rakazo-guest")
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/environ"))
                .map(|env| {
                    let root = root.to_string_lossy();
                    env.windows(root.len()).any(|win| win == root.as_bytes())
                })
                .unwrap_or(false)
        })
        .collect();
    let total: u64 = pids.iter().map(|p| proc_kb(*p, "status", "VmRSS:")).sum();
    (pids.len(), total / pids.len().max(1) as u64)
}

/// Runs `echo <n>` on `c`; the milliseconds until it answered.
async fn exec_once(w: &World, c: &str, n: u64) -> Result<f64> {
    let t = now();
    let out = w
        .exec(c, json!({ "argv": ["echo", n.to_string()] }))
        .await
        .with_context(|| format!("exec on {c}"))?;
    let took = ms(t.elapsed());
    ensure!(
        out.code == Some(0) && out.stdout == format!("{n}\n").as_bytes(),
        "exec {n} on {c} answered {out:?}"
    );
    Ok(took)
}

/// Creates one computer on the fake provider and waits until its guest runs a command.
async fn create(w: &World, i: usize) -> Result<String> {
    let v = w
        .client
        .json(
            Method::POST,
            "/v1/computers",
            Some(&json!({ "workspace": format!("scale-{i}") })),
        )
        .await?;
    let c = v["id"].as_str().context("no id")?.to_string();
    let deadline = now() + Duration::from_secs(120);
    loop {
        match exec_once(w, &c, 0).await {
            Ok(_) => return Ok(c),
            Err(_) if now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

fn row(what: &str, p50: f64, p99: f64, max: f64, n: usize) {
    println!("| {what} | {n} | {p50:.1} | {p99:.1} | {max:.1} |");
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    tests::bench::Usage::new("one control plane with many connected guests")
        .flag("--guests", "N", "guests started (default 1000; smoke 8)")
        .flag(
            "--rate",
            "N",
            "execs per second in the load phase (default 100; smoke 20)",
        )
        .flag(
            "--load-secs",
            "N",
            "seconds of the load phase (default 30; smoke 2)",
        )
        .flag(
            "--idle-secs",
            "N",
            "seconds of the idle phase (default 60; smoke 3)",
        )
        .check();
    let guests = arg("--guests", size(1000, 8));
    let rate = arg("--rate", size(100, 20));
    let load_secs = arg("--load-secs", size(30, 2)) as u64;
    let idle_secs = arg("--idle-secs", size(60, 3)) as u64;
    let w = Arc::new(
        World::start_with(WorldOptions {
            providers: Some("fake".into()),
            default_provider: Some("fake".into()),
            ..Default::default()
        })
        .await?,
    );
    let pid = w.server_pid().context("no server")?;
    tokio::time::sleep(Duration::from_secs(size(5, 1))).await;
    let rss_empty = rss_kb(pid);
    let cpu_empty = cpu_share(pid, idle_secs).await;

    // N computers, CREATING at a time.
    let t = now();
    let mut ids = Vec::with_capacity(guests);
    let mut next = 0;
    while next < guests {
        let batch = (next..(next + CREATING).min(guests)).map(|i| {
            let w = w.clone();
            async move { create(&w, i).await }
        });
        for r in futures_util::future::join_all(batch).await {
            ids.push(r?);
        }
        next += CREATING;
        if next % 100 == 0 {
            eprintln!(
                "{next} computers connected, {:.0} s, server rss {} MB",
                t.elapsed().as_secs_f64(),
                rss_kb(pid) / 1024
            );
        }
    }
    let created_s = t.elapsed().as_secs_f64();
    // Let the creations' transient allocations settle before reading memory.
    tokio::time::sleep(Duration::from_secs(size(10, 1))).await;
    let rss_full = rss_kb(pid);
    let cpu_full = cpu_share(pid, idle_secs).await;
    let (guest_n, guest_rss) = guests_rss(&w);

    // The anchor: one computer, one exec at a time.
    let mut alone = Vec::new();
    for n in 1..=size(200, 20) {
        alone.push(exec_once(&w, &ids[0], n).await?);
    }

    // The load: `rate` execs a second over every computer, open loop.
    let total = rate * load_secs as usize;
    let period = Duration::from_secs_f64(1.0 / rate as f64);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = Vec::with_capacity(total);
    let cpu_before = cpu_ticks(&pid.to_string());
    let t = now();
    for n in 0..total {
        tick.tick().await;
        let w = w.clone();
        let c = ids[(n * 7919) % ids.len()].clone();
        tasks.push(tokio::spawn(async move {
            exec_once(&w, &c, n as u64 + 1).await
        }));
    }
    let mut loaded = Vec::with_capacity(total);
    let mut errors = Vec::new();
    for task in tasks {
        match task.await? {
            Ok(v) => loaded.push(v),
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    let load_wall = t.elapsed().as_secs_f64();
    let cpu_load =
        cpu_ticks(&pid.to_string()).saturating_sub(cpu_before) as f64 / TICKS_PER_SEC / load_wall;

    let per_guest_kb = rss_full.saturating_sub(rss_empty) as f64 / guests as f64;
    println!("## bench_scale: {guests} guests on one replica (fake provider, real guests)");
    println!();
    println!("created and connected in {created_s:.1} s ({CREATING} at a time)");
    println!();
    println!("| server | no computer (anchor) | {guests} idle guests | per guest |");
    println!("|---|---|---|---|");
    println!(
        "| resident memory | {:.1} MB | {:.1} MB | {per_guest_kb:.0} KB |",
        rss_empty as f64 / 1024.0,
        rss_full as f64 / 1024.0
    );
    println!(
        "| CPU at idle ({idle_secs} s) | {:.2}% of a core | {:.2}% of a core | {:.4}% |",
        cpu_empty * 100.0,
        cpu_full * 100.0,
        (cpu_full - cpu_empty).max(0.0) * 100.0 / guests as f64
    );
    println!();
    println!(
        "guest processes: {guest_n}, {:.1} MB resident each on average",
        guest_rss as f64 / 1024.0
    );
    println!();
    println!("| exec `echo` | execs | p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|");
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    row(
        "one computer, one at a time (anchor)",
        percentile(&alone, 0.5),
        percentile(&alone, 0.99),
        max(&alone),
        alone.len(),
    );
    row(
        &format!("{rate}/s over {guests} computers, open loop"),
        percentile(&loaded, 0.5),
        percentile(&loaded, 0.99),
        max(&loaded),
        loaded.len(),
    );
    println!();
    println!(
        "p99 ratio loaded/anchor: {:.2}x; server CPU under load {:.1}% of a core; errors: {}",
        percentile(&loaded, 0.99) / percentile(&alone, 0.99),
        cpu_load * 100.0,
        errors.len()
    );
    for e in errors.iter().take(5) {
        println!("error: {e}");
    }
    ensure!(errors.is_empty(), "{} execs failed", errors.len());
    if smoke() {
        println!("(smoke run: figures are not meaningful)");
    }
    Ok(())
}
