//! `bench_idle`: the cost of the idle job's look inside a computer (issue 15): the guest's
//! `Activity` operation, `guest_agent::activity::Activity::look`, which reads `/proc/<pid>/stat`
//! and `/proc/<pid>/environ` of every process it can see.
//!
//! Rows, each against the anchor of listing `/proc` alone (the floor of any look at the process
//! table), measured in the same run, interleaved round by round:
//!
//! - a look on this machine as it is (a local computer sees the host's processes);
//! - a look with `--background N` extra processes carrying this home's exec marker (work a
//!   computer left running), which must all be counted (a wrong count fails the run);
//! - the show path's bounded walk of a home of `--files N` files (not on the idle path; cached
//!   10 s by the guest), for comparison.
//!
//! It prints markdown for BENCHMARKS.md, with each row's share of one CPU at the idle job's
//! default period (30 s: a quarter of the 15 min timeout, capped). Timings are printed, never
//! asserted.
//!
//! Usage: `bench_idle [--runs N] [--background N] [--files N] [--smoke]` (`--smoke`: 20 runs,
//! 10 processes, 1,000 files; explicit options win).

use anyhow::{ensure, Context, Result};
use guest_agent::activity::{Activity, LastOutput};
use guest_agent::exec::{home_tag, EXEC_ID_VAR};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tests::bench::{arg, ms, now};

/// The idle job's period with the default 15 min timeout.
const DEFAULT_PERIOD: Duration = Duration::from_secs(30);

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (mean, at(0.5), at(0.99))
}

fn list_proc() -> usize {
    std::fs::read_dir("/proc")
        .map(|d| d.flatten().count())
        .unwrap_or(0)
}

struct Killer(Vec<Child>);

impl Drop for Killer {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn main() -> Result<()> {
    tests::bench::Usage::new("the cost of the idle job's look inside a computer")
        .flag("--runs", "N", "measured looks (default 300; smoke 20)")
        .flag(
            "--background",
            "N",
            "background processes (default 200; smoke 10)",
        )
        .flag(
            "--files",
            "N",
            "files in the home (default 100000; smoke 1000)",
        )
        .check();
    let smoke = std::env::args().any(|a| a == "--smoke");
    let runs = arg("--runs", if smoke { 20 } else { 300 });
    let background = arg("--background", if smoke { 10 } else { 200 });
    let files = arg("--files", if smoke { 1_000 } else { 100_000 });

    let home = tempfile::tempdir()?;
    let activity = Activity::new(home.path(), LastOutput::default());
    let procs_before = list_proc();
    // The first look measures its CPU over a 1 s window: not part of the rows.
    activity.look();

    // Rows: the anchor and a look as the machine is.
    let (mut anchor, mut plain) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = now();
        std::hint::black_box(list_proc());
        anchor.push(ms(t.elapsed()));
        let t = now();
        let seen = activity.look();
        plain.push(ms(t.elapsed()));
        ensure!(seen.background == 0, "no work was left: {seen:?}");
    }

    // With work left running: processes carrying this home's marker.
    let tag = home_tag(home.path());
    let mut kids = Killer(Vec::new());
    for i in 0..background {
        let child = Command::new("sleep")
            .arg("600")
            .env(EXEC_ID_VAR, format!("{tag}bench{i}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("spawn sleep")?;
        kids.0.push(child);
    }
    let mut loaded = Vec::new();
    for _ in 0..runs {
        let t = now();
        let seen = activity.look();
        loaded.push(ms(t.elapsed()));
        ensure!(
            seen.background as usize == background,
            "{background} background processes expected: {seen:?}"
        );
    }
    drop(kids);

    // The show path's walk of a home of `files` files (100 per directory).
    for i in 0..files {
        let dir = home.path().join(format!("d{}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        std::fs::write(dir.join(format!("f{i}")), b"x")?;
    }
    let walk_runs = runs.min(20);
    let mut walk = Vec::new();
    for _ in 0..walk_runs {
        let t = now();
        let used = guest_agent::machine::walk(home.path(), guest_agent::machine::MAX_WALK_ENTRIES);
        walk.push(ms(t.elapsed()));
        ensure!(used.bytes > 0, "the walk found nothing");
    }

    let period_ms = ms(DEFAULT_PERIOD);
    let (a_mean, a_p50, a_p99) = stats(anchor);
    println!(
        "Processes visible: {procs_before} (+{background} for the second row); {runs} runs per row, interleaved with the anchor for the first.\n"
    );
    println!(
        "| Row | mean ms | p50 ms | p99 ms | × anchor (mean) | share of one CPU at a 30 s period |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let row = |name: &str, v: Vec<f64>| {
        let (mean, p50, p99) = stats(v);
        println!(
            "| {name} | {mean:.3} | {p50:.3} | {p99:.3} | {:.1} | {:.4}% |",
            mean / a_mean.max(1e-9),
            100.0 * mean / period_ms
        );
    };
    println!(
        "| anchor: list `/proc` | {a_mean:.3} | {a_p50:.3} | {a_p99:.3} | 1.0 | {:.4}% |",
        100.0 * a_mean / period_ms
    );
    row("`Activity::look`, the machine as it is", plain);
    row(
        &format!("`Activity::look`, {background} background processes"),
        loaded,
    );
    row(
        &format!("show path: home walk of {files} files ({walk_runs} runs)"),
        walk,
    );
    Ok(())
}
