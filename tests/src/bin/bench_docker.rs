//! Computers in containers (issue 10), measured against their anchors in the same run:
//!
//! - create → guest connected (`POST /v1/computers` returns once the guest dialled in and the
//!   home is restored) for a Docker computer, against `podman run --rm <image> true` (the
//!   engine's own floor) and against a local computer (the guest's dial-in without a
//!   container). Goal: docker ≤ 1.5 × (floor + local).
//! - the first desktop ensure (Xvnc + Chrome until CDP answers) in a container vs on the host;
//! - memory of an idle Docker computer (RSS of every process in its container) vs an idle local
//!   computer's guest;
//! - 10 Docker computers with a desktop each: time and RSS.
//!
//! `cargo run --release -p tests --bin bench_docker -- [--runs N] [--fleet N]`; needs the engine
//! (`bash scripts/podman.sh start`) and the static guest built in the same profile.
//!
//! `--smoke`: a few runs of every part, for CI (`scripts/bench-smoke.sh`); explicit options win.

use anyhow::{bail, Context, Result};
use hyper::Method;
use std::time::Duration;
use tests::bench::{arg, ms, now, size};
use tests::{engine, World, WorldOptions};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

/// RSS (KiB) of the processes of this host whose cgroup names `needle` (a container id).
fn rss_in_cgroup(needle: &str) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let in_it = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .is_ok_and(|c| c.contains(needle));
        if in_it {
            total += rss_kib(pid);
        }
    }
    total
}

fn rss_kib(pid: u32) -> u64 {
    kib_field(&format!("/proc/{pid}/status"), "VmRSS:")
}

/// A `Key:   123 kB` line's number from a /proc file (0 if absent).
fn kib_field(path: &str, key: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn container_id(computer: &str) -> Result<String> {
    Ok(engine::podman(&[
        "inspect",
        "--format",
        "{{.Id}}",
        &engine::container_of(computer),
    ])?
    .trim()
    .to_string())
}

async fn create(w: &mut World, ws: &str, provider: &str) -> Result<(String, Duration)> {
    let t = now();
    let id = w.create_computer_on(ws, Some(provider)).await?;
    Ok((id, t.elapsed()))
}

async fn destroy(w: &World, id: &str) -> Result<()> {
    w.client
        .json(Method::DELETE, &format!("/v1/computers/{id}"), None)
        .await?;
    Ok(())
}

async fn ensure(w: &World, c: &str, bot: &str) -> Result<Duration> {
    let lease = w.lease(c, bot, &format!("run-{bot}")).await?;
    let t = now();
    w.post(
        &format!("/v1/computers/{c}/screens/{bot}/ensure"),
        serde_json::json!({ "lease": lease }),
    )
    .await?;
    Ok(t.elapsed())
}

#[tokio::main]
async fn main() -> Result<()> {
    tests::bench::Usage::new("Docker computers: create and first exec, against podman run")
        .flag("--runs", "N", "measured creates (default 5; smoke 1)")
        .flag(
            "--fleet",
            "N",
            "computers of the fleet part (default 10; smoke 2)",
        )
        .check();
    let runs = arg("--runs", size(5, 1));
    let fleet = arg("--fleet", size(10, 2));
    engine::require_engine()?;
    let image = engine::image()?;
    println!("image {image}, {runs} runs, fleet of {fleet}");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at start: {}", load.trim());

    // The engine's floor: a container of the same image, host network, init, doing nothing.
    let mut floor = Vec::new();
    for _ in 0..runs {
        let t = now();
        engine::podman(&["run", "--rm", "--init", "--network", "host", &image, "true"])?;
        floor.push(ms(t.elapsed()));
    }

    let mut w = World::start_with(WorldOptions {
        providers: Some("docker,local".into()),
        ..Default::default()
    })
    .await?;
    let (mut docker, mut local) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let (d, dt) = create(&mut w, &format!("bench-d{i}"), "docker").await?;
        docker.push(ms(dt));
        destroy(&w, &d).await?;
        let (l, lt) = create(&mut w, &format!("bench-l{i}"), "local").await?;
        local.push(ms(lt));
        destroy(&w, &l).await?;
    }
    let (f, d, l) = (median(floor), median(docker), median(local));
    println!("\n## create -> guest connected (median of {runs}, ms)");
    println!("| podman run --rm true (floor) | local computer | docker computer | docker / (floor + local) |");
    println!("|---|---|---|---|");
    println!(
        "| {f:.0} | {l:.0} | {d:.0} | {:.2} (goal <= 1.5) |",
        d / (f + l)
    );

    // First desktop ensure, and idle memory.
    let (dc, _) = create(&mut w, "bench-desk-d", "docker").await?;
    let (lc, _) = create(&mut w, "bench-desk-l", "local").await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle_docker = rss_in_cgroup(&container_id(&dc)?);
    let idle_local: u64 = tests::pids_with_env("RAKAZO_COMPUTER_ID", &lc)
        .iter()
        .map(|p| rss_kib(*p as u32))
        .sum();
    let mut ed = Vec::new();
    let mut el = Vec::new();
    for i in 0..runs.min(3) {
        ed.push(ms(ensure(&w, &dc, &format!("bot-{i}")).await?));
        el.push(ms(ensure(&w, &lc, &format!("bot-{i}")).await?));
    }
    println!(
        "\n## first desktop ensure (Xvnc + Chrome until CDP answers; median of {}, ms)",
        ed.len()
    );
    println!("| on the host (local) | in a container (docker) | ratio |");
    println!("|---|---|---|");
    let (med_d, med_l) = (median(ed), median(el));
    println!("| {med_l:.0} | {med_d:.0} | {:.2} |", med_d / med_l);
    println!("\n## idle computer memory (RSS, MiB)");
    println!("| local guest | docker container (init + guest) |");
    println!("|---|---|");
    println!(
        "| {:.1} | {:.1} |",
        idle_local as f64 / 1024.0,
        idle_docker as f64 / 1024.0
    );
    destroy(&w, &dc).await?;
    destroy(&w, &lc).await?;

    // A fleet: N Docker computers with one desktop each.
    let mem_before = mem_available_kib();
    let t = now();
    let mut ids = Vec::new();
    for i in 0..fleet {
        let (id, _) = create(&mut w, &format!("bench-fleet-{i}"), "docker").await?;
        ensure(&w, &id, "bot-a").await?;
        ids.push(id);
    }
    let total = t.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut rss = 0;
    for id in &ids {
        rss += rss_in_cgroup(&container_id(id)?);
    }
    let mem_after = mem_available_kib();
    println!("\n## {fleet} Docker computers with a desktop each");
    println!("| time (create + ensure, sequential) | per computer | RSS of all containers | per computer | host MemAvailable drop |");
    println!("|---|---|---|---|---|");
    println!(
        "| {:.1} s | {:.2} s | {:.0} MiB | {:.0} MiB | {:.0} MiB |",
        total.as_secs_f64(),
        total.as_secs_f64() / fleet as f64,
        rss as f64 / 1024.0,
        rss as f64 / 1024.0 / fleet as f64,
        mem_before.saturating_sub(mem_after) as f64 / 1024.0
    );
    let t = now();
    for id in &ids {
        destroy(&w, id).await?;
    }
    println!("(destroying them took {:.1} s)", t.elapsed().as_secs_f64());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at end: {}", load.trim());
    if rss == 0 {
        bail!("no container process found: RSS not measured");
    }
    w.check_log().context("server log")
}

fn mem_available_kib() -> u64 {
    kib_field("/proc/meminfo", "MemAvailable:")
}
