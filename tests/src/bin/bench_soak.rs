//! `bench_soak`: the soak (issue 36, "Scale"), bounded and out of CI but for `--smoke`.
//!
//! The driver is `tests::soak` (shared with the system test `faults::soak`, CI's 3-minute
//! version): replicas on a private PostgreSQL cluster, exec bots on `--computers` computers and a
//! desktop bot on `--desktops` more, for `--secs`; a replica other than replica 0 killed with
//! SIGKILL every `--kill-every` seconds (the first at `--kill-first-at`, default the same) and
//! started again `--kill-down` seconds later; PostgreSQL stopped at `--pg-restart-at` for
//! `--pg-down` seconds. Replica 0's RSS is sampled every `--sample-every` seconds; its growth
//! after `--warm-up` seconds (default a tenth of the run, at least 60 s) is printed against the
//! 5 % goal (the anchor is replica 0's own RSS at the end of the warm-up, in the same run). With
//! `--svg PATH` the RSS curve, the disruptions and the failures per minute are drawn there (the
//! committed plot is `docs/soak-memory.svg`).
//!
//! The run fails (exit 1) on any violation: a checkpoint answered OK and lost, a stuck lease, a
//! failure outside the disruption windows or of an unexpected class, an ERROR or unexpected
//! WARN in a replica's log. Timings and memory are printed, never asserted.
//!
//! `cargo build -p control-plane -p guest-agent -p tests --bins &&
//!  target/debug/bench_soak [--secs 1800] [--kill-every 300] [--pg-restart-at S]
//!  [--computers N] [--desktops 0|1] [--svg docs/soak-memory.svg] [--smoke]`

use anyhow::{bail, Context, Result};
use std::fmt::Write as _;
use std::time::Duration;
use tests::bench::{arg, loadavg, now};
use tests::soak::{run, Plan, Report};

/// The memory goal: RSS growth after warm-up at most this (percent).
const GOAL_PCT: f64 = 5.0;

fn opt(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn plan() -> Result<Plan> {
    let smoke = tests::bench::smoke();
    let pick = |name: &str, full: usize, tiny: usize| arg(name, if smoke { tiny } else { full });
    let secs = pick("--secs", 1800, 40) as u64;
    let kill_every = pick("--kill-every", 300, 0) as u64;
    let kill_first_at = pick(
        "--kill-first-at",
        if kill_every > 0 {
            kill_every as usize
        } else {
            12
        },
        12,
    ) as u64;
    let pg_at = pick("--pg-restart-at", (secs * 2 / 3) as usize, 24) as u64;
    let mut p = Plan {
        secs,
        computers: pick("--computers", 3, 2),
        desktops: pick("--desktops", 1, 0),
        kill_first_at,
        kill_every,
        kill_down_secs: pick("--kill-down", 5, 3) as u64,
        pg_restart_at: (pg_at > 0).then_some(pg_at),
        pg_down_secs: pick("--pg-down", 10, 4) as u64,
        sample_every: Duration::from_secs(pick("--sample-every", 10, 2) as u64),
        pause: Duration::from_millis(pick("--pause-ms", 1000, 300) as u64),
        ..Plan::ci()
    };
    p.grace = Duration::from_secs(pick("--grace", 30, 20) as u64);
    p.read_back = pick("--read-back", 10, 2);
    if p.secs == 0 || p.computers == 0 || p.desktops > 2 {
        bail!("--secs and --computers must be positive, --desktops at most 2");
    }
    if p.pg_restart_at
        .is_some_and(|at| at + p.pg_down_secs >= p.secs)
    {
        bail!("--pg-restart-at plus --pg-down must end before --secs");
    }
    Ok(p)
}

fn main() -> Result<()> {
    tests::bench::Usage::new("the soak: replicas, exec bots and desktops under kills, bounded")
        .flag("--secs", "N", "seconds of the run (default 1800; smoke 40)")
        .flag("--computers", "N", "computers (default 3; smoke 2)")
        .flag(
            "--desktops",
            "N",
            "desktops, at most 2 (default 1; smoke 0)",
        )
        .flag(
            "--kill-every",
            "N",
            "seconds between replica kills (default 300; smoke 0: none)",
        )
        .flag(
            "--kill-first-at",
            "N",
            "second of the first kill (default --kill-every, else 12)",
        )
        .flag(
            "--kill-down",
            "N",
            "seconds a killed replica stays down (default 5; smoke 3)",
        )
        .flag(
            "--pg-restart-at",
            "N",
            "second PostgreSQL restarts at (default 2/3 of --secs; smoke 24)",
        )
        .flag(
            "--pg-down",
            "N",
            "seconds PostgreSQL stays down (default 10; smoke 4)",
        )
        .flag(
            "--sample-every",
            "N",
            "seconds between memory samples (default 10; smoke 2)",
        )
        .flag(
            "--pause-ms",
            "N",
            "ms between a bot's operations (default 1000; smoke 300)",
        )
        .flag(
            "--grace",
            "N",
            "seconds an operation may fail around a kill (default 30; smoke 20)",
        )
        .flag(
            "--read-back",
            "N",
            "files read back at the end (default 10; smoke 2)",
        )
        .flag(
            "--warm-up",
            "N",
            "seconds before the memory baseline (default secs/10, at least 60)",
        )
        .flag("--svg", "PATH", "write the memory plot there")
        .check();
    let plan = plan()?;
    let warm_up = arg("--warm-up", ((plan.secs / 10).max(60)) as usize) as f64;
    let warm_up = if tests::bench::smoke() {
        plan.secs as f64 / 4.0
    } else {
        warm_up
    };
    println!("## Soak (issue 36): run of `bench_soak`\n");
    println!(
        "- binaries: `{}`; {} replicas on a private PostgreSQL cluster, one S3 server (s3s-fs), local computers; load average at the start {}{}",
        tests::bin_dir().display(),
        plan.replicas,
        loadavg(),
        if tests::bench::smoke() { "; **smoke run**" } else { "" }
    );
    println!(
        "- plan: {} s, {} exec computers + {} desktop computers, kills at {:?} (down {} s each), PostgreSQL stopped at {:?} s for {} s, windows last {} s after each recovery\n",
        plan.secs,
        plan.computers,
        plan.desktops,
        plan.kills(),
        plan.kill_down_secs,
        plan.pg_restart_at,
        plan.pg_down_secs,
        plan.grace.as_secs()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let began = now();
    let report = rt.block_on(run(&plan, &|line: &str| println!("- {line}")))?;
    println!();
    report.print(warm_up);
    if let (Some(warm), Some((_, last))) = (report.rss_at(warm_up), report.rss.last()) {
        let growth = (*last as f64 / warm as f64 - 1.0) * 100.0;
        println!(
            "- memory goal: growth after warm-up {growth:+.1} % vs ≤ {GOAL_PCT} %: {}",
            if growth <= GOAL_PCT { "met" } else { "not met" }
        );
    }
    println!(
        "- wall clock {:.0} s; load average at the end {}",
        began.elapsed().as_secs_f64(),
        loadavg()
    );
    if let Some(path) = opt("--svg") {
        std::fs::write(&path, svg(&report, warm_up)).with_context(|| format!("write {path}"))?;
        println!("- plot written to `{path}`");
    }
    if !report.violations.is_empty() {
        bail!("{} violations", report.violations.len());
    }
    Ok(())
}

/// A plot of replica 0's RSS over time (top), the disruptions as vertical lines, and the failures
/// the clients saw per minute (bottom), as a hand-written SVG.
fn svg(r: &Report, warm_up: f64) -> String {
    let (w, h) = (900.0, 460.0);
    let (left, right) = (70.0, 20.0);
    let (top1, bot1) = (40.0, 290.0);
    let (top2, bot2) = (330.0, 420.0);
    let span = (r.plan_secs as f64).max(1.0);
    let x = |t: f64| left + (w - left - right) * t / span;
    let max_kb = r.rss.iter().map(|(_, kb)| *kb).max().unwrap_or(1).max(1) as f64 * 1.1;
    let y1 = |kb: f64| bot1 - (bot1 - top1) * kb / max_kb;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="20" font-size="14">Soak: RSS of replica 0 (never killed), MiB, over {} s; red: replica killed / started, blue: PostgreSQL stopped / started</text>"#,
        r.plan_secs
    );
    // Axes and grid.
    for i in 0..=4 {
        let kb = max_kb * i as f64 / 4.0;
        let y = y1(kb);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{:.0}</text>"##,
            w - right,
            left - 6.0,
            y + 4.0,
            kb / 1024.0
        );
    }
    let minutes = (span / 60.0).ceil() as usize;
    let step = (minutes / 10).max(1);
    for m in (0..=minutes).step_by(step) {
        let t = (m * 60) as f64;
        if t > span {
            break;
        }
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{m} min</text>"#,
            x(t),
            bot2 + 18.0
        );
    }
    let wx = x(warm_up);
    let _ = writeln!(
        s,
        r##"<line x1="{wx:.1}" y1="{top1}" x2="{wx:.1}" y2="{bot1}" stroke="#999" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}" fill="#666">warm-up ends</text>"##,
        wx + 4.0,
        top1 + 12.0
    );
    for m in &r.marks {
        let color = if m.what.starts_with("PG") {
            "#2563eb"
        } else {
            "#dc2626"
        };
        let mx = x(m.at);
        let _ = writeln!(
            s,
            r#"<line x1="{mx:.1}" y1="{top1}" x2="{mx:.1}" y2="{bot2}" stroke="{color}" stroke-width="1" opacity="0.6"><title>{:.1} s: {}</title></line>"#,
            m.at, m.what
        );
    }
    let points: Vec<String> = r
        .rss
        .iter()
        .map(|(t, kb)| format!("{:.1},{:.1}", x(*t), y1(*kb as f64)))
        .collect();
    let _ = writeln!(
        s,
        r##"<polyline fill="none" stroke="#111" stroke-width="1.5" points="{}"/>"##,
        points.join(" ")
    );
    // Failures per minute.
    let mut per_min = vec![0usize; minutes.max(1)];
    for t in &r.error_times {
        let i = ((*t / 60.0) as usize).min(per_min.len() - 1);
        per_min[i] += 1;
    }
    let max_n = per_min.iter().copied().max().unwrap_or(0).max(1) as f64;
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="{:.1}">failures the clients saw per minute (max {max_n:.0})</text>"#,
        top2 - 6.0
    );
    for (i, n) in per_min.iter().enumerate() {
        let bh = (bot2 - top2) * *n as f64 / max_n;
        let bx = x(i as f64 * 60.0);
        let bw = (x(60.0) - x(0.0) - 2.0).max(1.0);
        let _ = writeln!(
            s,
            r##"<rect x="{bx:.1}" y="{:.1}" width="{bw:.1}" height="{bh:.1}" fill="#f59e0b"><title>minute {i}: {n}</title></rect>"##,
            bot2 - bh
        );
    }
    let _ = writeln!(
        s,
        r##"<line x1="{left}" y1="{bot2}" x2="{:.1}" y2="{bot2}" stroke="#333"/>"##,
        w - right
    );
    s.push_str("</svg>\n");
    s
}
