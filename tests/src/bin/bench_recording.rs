//! `bench_recording`: what recording a screen costs (docs/recordings.md), against the same
//! session unrecorded in the same run.
//!
//! One real `rakazo serve` (the system-test `World`, a contained local computer, SQLite), one
//! bot with a desktop on a page with a text area. An active session: every second the bot types
//! a line into the page and presses Return (the page scrolls as it fills), through `POST …/act`,
//! for `--secs` seconds; once without recording (the anchor), once recorded, alternating over
//! `--rounds`. Measured per phase: CPU seconds of the guest (which records) and of the control
//! plane (which pulls and seals), the act's p50 (does recording disturb the bot?), and, recorded,
//! the bytes stored per minute.
//!
//! Timings are printed, never asserted; only a wrong result fails the run.
//!
//! `cargo build -p control-plane -p guest-agent -p tests --bins &&
//!  target/debug/bench_recording [--secs N] [--rounds N] [--smoke]`

use anyhow::{ensure, Context, Result};
use std::time::Duration;
use tests::bench::{arg, loadavg, ms, now, percentile, smoke};
use tests::fixture::Fixture;
use tests::procstat::cpu_s;
use tests::World;

const BOT: &str = "bot-bench";

const PAGE: &str = "<html><body style='margin:0;font:18px sans-serif'>\
    <textarea id='t' style='width:100vw;height:100vh;font:18px monospace' autofocus></textarea>\
    </body></html>";

struct Phase {
    guest_cpu: f64,
    server_cpu: f64,
    act_p50: f64,
    bytes: u64,
    secs: f64,
}

async fn recorded_bytes(w: &World, c: &str) -> Result<u64> {
    let v = w
        .client
        .json(
            hyper::Method::GET,
            &format!("/v1/computers/{c}/recordings"),
            None,
        )
        .await?;
    Ok(v["bots"]
        .as_array()
        .map_or(0, |b| b.iter().filter_map(|b| b["bytes"].as_u64()).sum()))
}

async fn phase(
    w: &World,
    b: &tests::bot::Bot<'_>,
    c: &str,
    record: bool,
    secs: u64,
) -> Result<Phase> {
    let on = if record { "true" } else { "false" };
    w.client
        .json(
            hyper::Method::PUT,
            &format!("/v1/computers/{c}/recording"),
            Some(&serde_json::json!({ "enabled": record })),
        )
        .await
        .with_context(|| format!("recording {on}"))?;
    if record {
        // The recorder starts at the first pull (every 2 s): let it.
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let guest = tests::guest_pid_of(c).context("the guest's pid")? as u32;
    let server = w.server_pid().context("the server's pid")?;
    let bytes0 = recorded_bytes(w, c).await?;
    let (g0, s0) = (cpu_s(guest), cpu_s(server));
    let t0 = now();
    let mut acts = Vec::new();
    let mut line = 0;
    while t0.elapsed() < Duration::from_secs(secs) {
        line += 1;
        let a = now();
        b.act(serde_json::json!([
            { "type": "type", "text": format!("line {line}: the quick brown fox jumps over the lazy dog") },
            { "type": "key", "key": "Return" }
        ]))
        .await?;
        acts.push(ms(a.elapsed()));
        let next = Duration::from_secs(line);
        if let Some(wait) = next.checked_sub(t0.elapsed()) {
            tokio::time::sleep(wait).await;
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let (g1, s1) = (cpu_s(guest), cpu_s(server));
    if record {
        // What was recorded reaches the store at the next pulls.
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let bytes = recorded_bytes(w, c).await? - bytes0;
    Ok(Phase {
        guest_cpu: g1 - g0,
        server_cpu: s1 - s0,
        act_p50: percentile(&acts, 0.5),
        bytes,
        secs: elapsed,
    })
}

#[tokio::main]
async fn main() -> Result<()> {
    tests::bench::Usage::new("what recording a screen costs, against the same session unrecorded")
        .flag(
            "--secs",
            "N",
            "seconds of each session (default 60; smoke 6)",
        )
        .flag("--rounds", "N", "rounds of each (default 2; smoke 1)")
        .check();
    let secs = arg("--secs", if smoke() { 6 } else { 60 }) as u64;
    let rounds = arg("--rounds", if smoke() { 1 } else { 2 });
    let mut w = World::start().await?;
    let site = Fixture::start().await?;
    let c = w.create_computer("ws-bench-recording").await?;
    let b = tests::bot::Bot::new(&w, &c, BOT).await?;
    b.ensure().await?;
    b.navigate(&site.page("notes", PAGE)).await?;
    b.act(serde_json::json!([{ "type": "click", "x": 640, "y": 400 }]))
        .await?;
    println!(
        "bench_recording: {secs} s of an active session per phase, {rounds} round(s); load {}",
        loadavg()
    );
    println!(
        "| round | phase | guest CPU s/min | server CPU s/min | act p50 ms | stored KiB/min |"
    );
    println!("|---|---|---|---|---|---|");
    let mut sums = [(0.0, 0.0, 0.0); 2];
    for round in 1..=rounds {
        for (i, record) in [false, true].into_iter().enumerate() {
            let p = phase(&w, &b, &c, record, secs).await?;
            let per_min = 60.0 / p.secs;
            let name = if record {
                "recorded"
            } else {
                "not recorded (anchor)"
            };
            println!(
                "| {round} | {name} | {:.2} | {:.2} | {:.1} | {:.0} |",
                p.guest_cpu * per_min,
                p.server_cpu * per_min,
                p.act_p50,
                p.bytes as f64 / 1024.0 * per_min
            );
            ensure!(!record || p.bytes > 0, "a recorded phase stored nothing");
            sums[i].0 += p.guest_cpu * per_min;
            sums[i].1 += p.server_cpu * per_min;
            sums[i].2 += p.act_p50;
        }
    }
    let r = rounds as f64;
    println!(
        "recording adds {:+.2} guest CPU s/min and {:+.2} server CPU s/min; act p50 ratio {:.2}x",
        (sums[1].0 - sums[0].0) / r,
        (sums[1].1 - sums[0].1) / r,
        sums[1].2 / sums[0].2.max(0.001)
    );
    w.check_log()
}
