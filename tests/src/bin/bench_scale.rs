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
//! `--replicas 2`: two replicas on one PostgreSQL schema (`tests::replicas`), the N computers
//! created alternately through each, so each holds the guests of about N/2 (a guest dials the
//! replica that created it). The same figures per replica, and exec latency split by path:
//! *direct* (the request reaches the replica holding the computer's guest) and *relayed* (it
//! reaches the other one and crosses the peer link, `control-plane/src/cluster/peer.rs`). The
//! anchor drives one computer one exec at a time both ways, alternately; the open loop sends
//! its execs to the replicas in turn (in pairs, so that half of them are relayed).
//!
//! Only a wrong result fails the run (an exec that does not answer what it ran); timings are
//! printed, never asserted.
//!
//! `cargo build --release -p control-plane -p guest-agent -p tests --bins &&
//!  target/release/bench_scale [--replicas 1|2] [--guests 1000] [--rate 100] [--load-secs 30]
//!  [--idle-secs 60] [--smoke]` (`--smoke`: 8 guests, 4 with two replicas, a few seconds each)

use anyhow::{ensure, Context, Result};
use hyper::Method;
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tests::bench::{arg, loadavg, ms, now, percentile, size, smoke};
use tests::procstat::{cpu_ticks, proc_kb, TICKS_PER_SEC};
use tests::replicas::Replicas;
use tests::{World, WorldOptions};

/// How many computers are created at once.
const CREATING: usize = 8;

fn rss_kb(pid: u32) -> u64 {
    proc_kb(pid as i32, "status", "VmRSS:")
}

/// Share of one core each process used over the same `secs`.
async fn cpu_shares(pids: &[u32], secs: u64) -> Vec<f64> {
    let before: Vec<u64> = pids.iter().map(|p| cpu_ticks(&p.to_string())).collect();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    pids.iter()
        .zip(before)
        .map(|(p, b)| {
            cpu_ticks(&p.to_string()).saturating_sub(b) as f64 / TICKS_PER_SEC / secs as f64
        })
        .collect()
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

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

/// The servers under test: one `World`, or replicas on one PostgreSQL schema.
enum Servers {
    One(Box<World>),
    Many(Box<Replicas>),
}

impl Servers {
    fn worlds(&self) -> &[World] {
        match self {
            Servers::One(w) => std::slice::from_ref(w.as_ref()),
            Servers::Many(r) => &r.worlds,
        }
    }

    /// Which replica holds each computer's guest (all the one server's with one).
    fn holders(&self, ids: &[String]) -> HashMap<String, usize> {
        match self {
            Servers::One(_) => ids.iter().map(|c| (c.clone(), 0)).collect(),
            Servers::Many(r) => r.holders(),
        }
    }
}

/// One exec of the open loop: which replica it was sent to, and which held the computer.
struct Sent {
    via: usize,
    holder: Option<usize>,
    result: Result<f64>,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    tests::bench::Usage::new("one control plane (or two replicas) with many connected guests")
        .flag(
            "--replicas",
            "N",
            "1 (SQLite) or 2 (PostgreSQL) replicas (default 1)",
        )
        .flag(
            "--guests",
            "N",
            "guests started (default 1000; smoke 8, or 4 with 2 replicas)",
        )
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
    let replicas = arg("--replicas", 1);
    ensure!(
        (1..=2).contains(&replicas),
        "--replicas is 1 or 2, not {replicas}"
    );
    let guests = arg("--guests", size(1000, if replicas == 1 { 8 } else { 4 }));
    let rate = arg("--rate", size(100, 20));
    let load_secs = arg("--load-secs", size(30, 2)) as u64;
    let idle_secs = arg("--idle-secs", size(60, 3)) as u64;
    let load_start = loadavg();
    let fake = |opts: &mut WorldOptions| {
        opts.providers = Some("fake".into());
        opts.default_provider = Some("fake".into());
    };
    let servers = Arc::new(if replicas == 1 {
        let mut opts = WorldOptions::default();
        fake(&mut opts);
        Servers::One(Box::new(World::start_with(opts).await?))
    } else {
        Servers::Many(Box::new(
            Replicas::start(replicas, |_, opts| fake(opts)).await?,
        ))
    });
    let pids: Vec<u32> = servers
        .worlds()
        .iter()
        .map(|w| w.server_pid().context("no server"))
        .collect::<Result<_>>()?;
    tokio::time::sleep(Duration::from_secs(size(5, 1))).await;
    let rss_empty: Vec<u64> = pids.iter().map(|p| rss_kb(*p)).collect();
    let cpu_empty = cpu_shares(&pids, idle_secs).await;

    // N computers, CREATING at a time, computer i through replica i % replicas.
    let t = now();
    let mut ids = Vec::with_capacity(guests);
    let mut next = 0;
    while next < guests {
        let batch = (next..(next + CREATING).min(guests)).map(|i| {
            let s = servers.clone();
            async move { create(&s.worlds()[i % replicas], i).await }
        });
        for r in futures_util::future::join_all(batch).await {
            ids.push(r?);
        }
        next += CREATING;
        if next % 100 == 0 {
            let rss: Vec<String> = pids
                .iter()
                .map(|p| format!("{} MB", rss_kb(*p) / 1024))
                .collect();
            eprintln!(
                "{next} computers connected, {:.0} s, server rss {}",
                t.elapsed().as_secs_f64(),
                rss.join(", ")
            );
        }
    }
    let created_s = t.elapsed().as_secs_f64();
    // Let the creations' transient allocations settle before reading memory.
    tokio::time::sleep(Duration::from_secs(size(10, 1))).await;
    let rss_full: Vec<u64> = pids.iter().map(|p| rss_kb(*p)).collect();
    let cpu_full = cpu_shares(&pids, idle_secs).await;
    let guest_procs: Vec<(usize, u64)> = servers.worlds().iter().map(guests_rss).collect();
    let holders = servers.holders(&ids);
    let held: Vec<usize> = (0..replicas)
        .map(|i| ids.iter().filter(|c| holders.get(*c) == Some(&i)).count())
        .collect();
    let idle = Idle {
        guests,
        idle_secs,
        created_s,
        rss_empty,
        rss_full,
        cpu_empty,
        cpu_full,
        held,
        guest_procs,
    };

    // The anchor: one computer, one exec at a time; with replicas, alternately through the
    // replica holding its guest (direct) and through the other (relayed).
    let c0 = &ids[0];
    let h0 = holders
        .get(c0)
        .copied()
        .context("the first computer has no holder")?;
    let mut alone = Vec::new();
    let mut alone_relayed = Vec::new();
    if replicas > 1 {
        // Untimed: the first request through the other replica opens its peer link.
        exec_once(&servers.worlds()[(h0 + 1) % replicas], c0, 0).await?;
    }
    for n in 1..=size(200, 20) {
        alone.push(exec_once(&servers.worlds()[h0], c0, n).await?);
        if replicas > 1 {
            let other = &servers.worlds()[(h0 + 1) % replicas];
            alone_relayed.push(exec_once(other, c0, n).await?);
        }
    }

    // The load: `rate` execs a second over every computer, open loop. With replicas, the execs
    // go to each in turn in pairs: exec n's computer has n's parity (N even), and so has its
    // creator, which holds its guest; pairs send half the execs each way.
    let total = rate * load_secs as usize;
    let period = Duration::from_secs_f64(1.0 / rate as f64);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = Vec::with_capacity(total);
    let cpu_before: Vec<u64> = pids.iter().map(|p| cpu_ticks(&p.to_string())).collect();
    let t = now();
    for n in 0..total {
        tick.tick().await;
        let s = servers.clone();
        let c = ids[(n * 7919) % ids.len()].clone();
        let via = (n / 2) % replicas;
        let holder = holders.get(&c).copied();
        tasks.push(tokio::spawn(async move {
            let result = exec_once(&s.worlds()[via], &c, n as u64 + 1).await;
            Sent {
                via,
                holder,
                result,
            }
        }));
    }
    let mut sent = Vec::with_capacity(total);
    for task in tasks {
        sent.push(task.await?);
    }
    let load_wall = t.elapsed().as_secs_f64();
    let cpu_load: Vec<f64> = pids
        .iter()
        .zip(cpu_before)
        .map(|(p, b)| {
            cpu_ticks(&p.to_string()).saturating_sub(b) as f64 / TICKS_PER_SEC / load_wall
        })
        .collect();
    let moved = servers
        .holders(&ids)
        .iter()
        .filter(|(c, h)| holders.get(*c) != Some(h))
        .count();

    let errors: Vec<String> = sent
        .iter()
        .filter_map(|s| s.result.as_ref().err().map(|e| format!("{e:#}")))
        .collect();
    if replicas == 1 {
        let loaded: Vec<f64> = sent
            .iter()
            .filter_map(|s| s.result.as_ref().ok())
            .copied()
            .collect();
        report_one(&idle, rate, &alone, &loaded, cpu_load[0], errors.len());
    } else {
        let split = |direct: bool| -> Vec<f64> {
            sent.iter()
                .filter(|s| s.holder.is_some() && (s.holder == Some(s.via)) == direct)
                .filter_map(|s| s.result.as_ref().ok())
                .copied()
                .collect()
        };
        let load = Load {
            rate,
            direct: split(true),
            relayed: split(false),
            unheld: sent.iter().filter(|s| s.holder.is_none()).count(),
            relayed_errors: sent
                .iter()
                .filter(|s| s.result.is_err() && s.holder.is_some_and(|h| h != s.via))
                .count(),
            cpu: cpu_load,
            errors: errors.len(),
            moved,
        };
        report_many(&idle, &alone, &alone_relayed, &load);
    }
    println!();
    println!(
        "load average (1, 5, 15 min): {load_start} at the start, {} at the end",
        loadavg()
    );
    // The errors by kind (their last parenthesis: the API's code and status).
    let mut kinds: std::collections::BTreeMap<&str, usize> = Default::default();
    for e in &errors {
        *kinds
            .entry(e.rsplit_once('(').map_or(e.as_str(), |(_, k)| k))
            .or_default() += 1;
    }
    for (kind, count) in kinds {
        println!("errors ({kind}: {count}");
    }
    for e in errors.iter().take(5) {
        println!("error: {e}");
    }
    ensure!(errors.is_empty(), "{} execs failed", errors.len());
    if smoke() {
        println!("(smoke run: figures are not meaningful)");
    }
    Ok(())
}

/// What was measured with the guests idle, per replica.
struct Idle {
    guests: usize,
    idle_secs: u64,
    created_s: f64,
    rss_empty: Vec<u64>,
    rss_full: Vec<u64>,
    cpu_empty: Vec<f64>,
    cpu_full: Vec<f64>,
    /// How many guests each replica holds.
    held: Vec<usize>,
    /// Each replica's guest processes: (count, mean resident kB).
    guest_procs: Vec<(usize, u64)>,
}

/// The open loop with replicas, split by path.
struct Load {
    rate: usize,
    direct: Vec<f64>,
    relayed: Vec<f64>,
    /// Execs on a computer no replica's log named as held (counted in neither path).
    unheld: usize,
    cpu: Vec<f64>,
    errors: usize,
    /// Of `errors`, those sent to the replica not holding the guest.
    relayed_errors: usize,
    /// Computers whose guest was held by another replica after the load than before it.
    moved: usize,
}

fn report_one(i: &Idle, rate: usize, alone: &[f64], loaded: &[f64], cpu_load: f64, errors: usize) {
    let guests = i.guests;
    let (rss_empty, rss_full) = (i.rss_empty[0], i.rss_full[0]);
    let (cpu_empty, cpu_full) = (i.cpu_empty[0], i.cpu_full[0]);
    let (guest_n, guest_rss) = i.guest_procs[0];
    let idle_secs = i.idle_secs;
    let per_guest_kb = rss_full.saturating_sub(rss_empty) as f64 / guests as f64;
    println!("## bench_scale: {guests} guests on one replica (fake provider, real guests)");
    println!();
    println!(
        "created and connected in {:.1} s ({CREATING} at a time)",
        i.created_s
    );
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
    row(
        "one computer, one at a time (anchor)",
        percentile(alone, 0.5),
        percentile(alone, 0.99),
        max(alone),
        alone.len(),
    );
    row(
        &format!("{rate}/s over {guests} computers, open loop"),
        percentile(loaded, 0.5),
        percentile(loaded, 0.99),
        max(loaded),
        loaded.len(),
    );
    println!();
    println!(
        "p99 ratio loaded/anchor: {:.2}x; server CPU under load {:.1}% of a core; errors: {}",
        percentile(loaded, 0.99) / percentile(alone, 0.99),
        cpu_load * 100.0,
        errors
    );
}

fn report_many(i: &Idle, direct: &[f64], relayed: &[f64], l: &Load) {
    let (guests, idle_secs, n) = (i.guests, i.idle_secs, i.held.len());
    println!(
        "## bench_scale: {guests} guests on {n} replicas, one PostgreSQL schema (fake provider, real guests)"
    );
    println!();
    println!(
        "created and connected in {:.1} s ({CREATING} at a time, through each replica in turn)",
        i.created_s
    );
    println!();
    println!(
        "| replica | guests held | memory, no computer (anchor) | with its guests | per guest \
         | CPU at idle ({idle_secs} s), no computer | with its guests | per guest | CPU under load |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in 0..n {
        let held = i.held[r].max(1) as f64;
        println!(
            "| {r} | {} | {:.1} MB | {:.1} MB | {:.0} KB | {:.2}% | {:.2}% | {:.4}% | {:.1}% |",
            i.held[r],
            i.rss_empty[r] as f64 / 1024.0,
            i.rss_full[r] as f64 / 1024.0,
            i.rss_full[r].saturating_sub(i.rss_empty[r]) as f64 / held,
            i.cpu_empty[r] * 100.0,
            i.cpu_full[r] * 100.0,
            (i.cpu_full[r] - i.cpu_empty[r]).max(0.0) * 100.0 / held,
            l.cpu[r] * 100.0,
        );
    }
    println!();
    for (r, (count, rss)) in i.guest_procs.iter().enumerate() {
        println!(
            "replica {r}'s guest processes: {count}, {:.1} MB resident each on average",
            *rss as f64 / 1024.0
        );
    }
    println!();
    println!("| exec `echo` | execs | p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|");
    let rows: [(&str, &[f64]); 4] = [
        ("one computer, one at a time, direct (anchor)", direct),
        ("the same computer, relayed by the other replica", relayed),
        ("open loop, direct", &l.direct),
        ("open loop, relayed", &l.relayed),
    ];
    for (what, v) in rows {
        let what = what.replace(
            "open loop",
            &format!("{}/s over {guests} computers", l.rate),
        );
        row(
            &what,
            percentile(v, 0.5),
            percentile(v, 0.99),
            max(v),
            v.len(),
        );
    }
    println!();
    let ratio = |a: &[f64], b: &[f64], p: f64| percentile(a, p) / percentile(b, p);
    println!(
        "relayed/direct: anchor p50 {:.2}x, p99 {:.2}x; under load p50 {:.2}x, p99 {:.2}x",
        ratio(relayed, direct, 0.5),
        ratio(relayed, direct, 0.99),
        ratio(&l.relayed, &l.direct, 0.5),
        ratio(&l.relayed, &l.direct, 0.99),
    );
    println!(
        "loaded/anchor p99: direct {:.2}x, relayed {:.2}x",
        ratio(&l.direct, direct, 0.99),
        ratio(&l.relayed, relayed, 0.99),
    );
    println!(
        "errors: {} ({} relayed); execs on a computer with no holder found: {}; guests that \
         moved replica during the run: {}",
        l.errors, l.relayed_errors, l.unheld, l.moved
    );
}
