//! `bench_page`: the page-browser benchmark of issue 4 ("Must show" 3), in one run.
//!
//! On one X server (Xvnc) and one Debian Chromium started through the guest's own APIs, for catalog pages
//! with 500 and 5,000 interactive elements served from a local fixture site, it measures:
//!
//! 1. browser_snapshot on the guest side ([`PageBrowser::snapshot`]: tab choice, the helper in
//!    the isolated world, bounds and rendering), warm: `--warmup` calls, then `--runs` timed
//!    calls back to back, p50 and p90, and the size of the result (the tree, and the whole
//!    snapshot as JSON);
//! 2. the same cold: a new [`PageBrowser`] per call (CDP connect, attach, isolated world and
//!    helper install, snapshot), `--cold-runs` times;
//! 3. through `tests/bench/page/bench.mjs` (playwright-core from npm), Playwright's
//!    `page.locator('body').ariaSnapshot()` and CDP `Accessibility.getFullAXTree` on a headless
//!    Chromium Playwright launches from `/usr/bin/chromium` with the flags (the guest's
//!    own Chromium speaks DevTools over a pipe only the guest holds, so Playwright cannot
//!    connect to it).
//!
//! It prints markdown for BENCHMARKS.md, with the machine's load average before and after (the
//! numbers are wall times on a shared machine). Timings are printed, never asserted: only broken
//! results (a failed call, a snapshot beyond its bounds) fail the run. It stops what it started.
//!
//! Usage: `target/release/bench_page [--runs N] [--warmup N] [--cold-runs N] [--node-dir DIR]
//! [--no-node]`, from the workspace root (the default node dir is `tests/bench/page`, which
//! needs `npm ci` first).
//!
//! `--smoke`: a few runs of every part, for CI (`scripts/bench-smoke.sh`); explicit options win.

use anyhow::{bail, ensure, Context, Result};
use gateway_proto::page::{MAX_ELEMENTS, MAX_TEXT_CHARS};
use gateway_proto::BotId;
use guest_agent::browser::{profile_dir, Browser, BrowserOptions, CdpClient};
use guest_agent::display::{DisplayError, DisplayNum, XServer, XServerOptions};
use guest_agent::pagebrowser::{PageBrowser, MAX_SNAPSHOT_BYTES};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;
use tests::bench::{args as bench_args, now, size};
use tests::fixture::Fixture;

/// The bench's displays start here, away from the guest's slots and the other benches.
const DISPLAY_BASE: u16 = 760;
/// Interactive elements on the benchmark pages.
const SIZES: [usize; 2] = [500, 5000];

struct Options {
    runs: usize,
    warmup: usize,
    cold_runs: usize,
    node_dir: PathBuf,
    node: bool,
}

fn options() -> Result<Options> {
    let mut o = Options {
        runs: size(50, 3),
        warmup: size(5, 1),
        cold_runs: size(10, 1),
        node_dir: PathBuf::from("tests/bench/page"),
        node: true,
    };
    let mut args = bench_args();
    while let Some(a) = args.next() {
        let mut value = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--runs" => o.runs = value()?.parse()?,
            "--warmup" => o.warmup = value()?.parse()?,
            "--cold-runs" => o.cold_runs = value()?.parse()?,
            "--node-dir" => o.node_dir = PathBuf::from(value()?),
            "--no-node" => o.node = false,
            other => bail!("unknown argument {other}"),
        }
    }
    ensure!(o.runs > 0 && o.cold_runs > 0, "runs must be positive");
    Ok(o)
}

/// A catalog with `n` interactive elements: a header, then `n / 2` rows of a link and a button
/// with some text between them.
fn catalog(n: usize) -> String {
    let mut page = String::from(
        "<!doctype html><meta charset=\"utf-8\"><title>Catalog</title><h1>Catalog</h1>\
         <p>Everything we sell, in stock or on order. Prices include tax.</p><ul>",
    );
    for i in 1..=n / 2 {
        page.push_str(&format!(
            "<li><a href=\"/item/{i}\">Item {i} details</a> <span>In stock, ships in {d} days</span> \
             <button>Add {i} to cart</button></li>",
            d = i % 7 + 1
        ));
    }
    page.push_str("</ul>");
    page
}

/// Timing summary of one measured series.
struct Series {
    p50: Duration,
    p90: Duration,
}

fn series(mut times: Vec<Duration>) -> Series {
    times.sort();
    // Nearest rank, as bench.mjs computes it.
    let at = |p: f64| times[((p * times.len() as f64).ceil() as usize).max(1) - 1];
    Series {
        p50: at(0.5),
        p90: at(0.9),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

/// One row of the results table.
struct Row {
    page: usize,
    tool: String,
    p50_ms: f64,
    p90_ms: f64,
    bytes: u64,
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

async fn start_xserver(runtime: &std::path::Path) -> Result<XServer> {
    for n in DISPLAY_BASE..DISPLAY_BASE + 40 {
        let display = DisplayNum::new(n).context("display number")?;
        match XServer::start(display, runtime, &XServerOptions::default()).await {
            Ok(x) => return Ok(x),
            Err(DisplayError::InUse { .. } | DisplayError::ExitedEarly { .. }) => continue,
            Err(e) => return Err(e).context("starting the x server"),
        }
    }
    bail!("no free display from {DISPLAY_BASE}")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    tests::bench::Usage::new("the page browser on catalogs of 500 and 5,000 elements")
        .flag("--runs", "N", "measured runs (default 50; smoke 3)")
        .flag(
            "--warmup",
            "N",
            "runs before measuring (default 5; smoke 1)",
        )
        .flag("--cold-runs", "N", "cold starts (default 10; smoke 1)")
        .flag(
            "--node-dir",
            "PATH",
            "the anchor's node packages (default tests/bench/page)",
        )
        .switch("--no-node", "without the Playwright anchor")
        .check();
    let o = options()?;
    let load_before = load_average();
    let fixture = Fixture::start().await?;
    let urls: Vec<String> = SIZES
        .iter()
        .map(|&n| fixture.page(&format!("catalog-{n}"), &catalog(n)))
        .collect();

    let runtime = tempfile::tempdir()?;
    std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o700))?;
    let home = tempfile::tempdir()?;
    let mut xserver = start_xserver(runtime.path()).await?;
    let bot = BotId::new("bench-page").context("bot id")?;
    let mut opts = BrowserOptions::new(
        profile_dir(home.path(), &bot),
        home.path().to_path_buf(),
        xserver.display_env(),
        xserver.xauthority().to_path_buf(),
        runtime.path().to_path_buf(),
    );
    opts.first_url = Some(urls[0].clone());
    let mut browser = Browser::start(&opts).await.context("starting chromium")?;
    let ws = browser.cdp();
    let measured = measure(&o, &ws, &urls).await;
    // The guest's Chromium speaks DevTools over a pipe only the guest holds (issue 11), so
    // Playwright can no longer connect to this same browser; it launches its own.
    browser.stop().await?;
    xserver.stop().await?;
    let (mut rows, cold) = measured?;
    let mut node_note = String::from("node anchors skipped (--no-node)");
    if o.node {
        rows.extend(node(&o, &["--launch"], &urls).await?);
        node_note = format!(
            "node {}, playwright-core {}",
            command_line("node", &["--version"]).await,
            playwright_version(&o).await
        );
    }
    let load_after = load_average();

    println!("### Results\n");
    println!(
        "Chromium: {}; {}; {} CPUs; load average before {load_before}, after {load_after}.\n",
        command_line("/usr/bin/chromium", &["--version"]).await,
        node_note,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    println!("| page | tool | p50 ms | p90 ms | output bytes |");
    println!("|---|---|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} elements | {} | {:.1} | {:.1} | {} |",
            r.page, r.tool, r.p50_ms, r.p90_ms, r.bytes
        );
    }
    println!();
    for (n, c) in SIZES.iter().zip(&cold) {
        println!(
            "Cold browser_snapshot (new PageBrowser: connect, follow the targets, attach, \
             isolated world, helper, snapshot), {n} elements, {} runs: p50 {} ms, p90 {} ms. \
             A warm one sent {:.2} CDP commands per call.",
            o.cold_runs,
            ms(c.series.p50),
            ms(c.series.p90),
            c.warm_commands
        );
    }
    println!();
    for &n in &SIZES {
        let ours = rows
            .iter()
            .find(|r| r.page == n && r.tool.starts_with("rakazo browser_snapshot"));
        for r in rows
            .iter()
            .filter(|r| r.page == n && !r.tool.starts_with("rakazo"))
        {
            if let Some(ours) = ours {
                println!(
                    "{n} elements: {} is {:.1}x rakazo's p50, its output {:.1}x the tree.",
                    r.tool,
                    r.p50_ms / ours.p50_ms,
                    r.bytes as f64 / ours.bytes.max(1) as f64
                );
            }
        }
    }
    Ok(())
}

/// rakazo's snapshot, warm and cold, on each page.
async fn measure(o: &Options, ws: &CdpClient, urls: &[String]) -> Result<(Vec<Row>, Vec<Cold>)> {
    let mut rows = Vec::new();
    let mut cold = Vec::new();
    let mut pages = PageBrowser::new();
    for (&n, url) in SIZES.iter().zip(urls) {
        let first = pages
            .navigate(ws, url)
            .await
            .map_err(|e| anyhow::anyhow!("navigate {url}: {e:?}"))?;
        let elements = first.elements.len();
        ensure!(elements == MAX_ELEMENTS, "{elements} elements on {url}");
        let text = first.tree.split("\n- ").next().unwrap_or("");
        ensure!(text.chars().count() <= MAX_TEXT_CHARS, "text over bounds");
        for _ in 0..o.warmup {
            pages
                .snapshot(ws)
                .await
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        }
        let mut times = Vec::with_capacity(o.runs);
        let mut last = first;
        let sent = ws.commands_sent();
        for _ in 0..o.runs {
            let started = now();
            last = pages
                .snapshot(ws)
                .await
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
            times.push(started.elapsed());
        }
        let warm = series(times);
        // Nothing else uses this browser meanwhile: every command sent was a snapshot's.
        let per_call = (ws.commands_sent() - sent) as f64 / o.runs as f64;
        let json = serde_json::to_vec(&last)?.len() as u64;
        ensure!(
            json <= MAX_SNAPSHOT_BYTES as u64,
            "the snapshot of {url} is {json} bytes as JSON"
        );
        rows.push(Row {
            page: n,
            tool: "rakazo browser_snapshot (tree)".into(),
            p50_ms: warm.p50.as_secs_f64() * 1000.0,
            p90_ms: warm.p90.as_secs_f64() * 1000.0,
            bytes: last.tree.len() as u64,
        });
        rows.push(Row {
            page: n,
            tool: "rakazo browser_snapshot (whole result as JSON)".into(),
            p50_ms: warm.p50.as_secs_f64() * 1000.0,
            p90_ms: warm.p90.as_secs_f64() * 1000.0,
            bytes: json,
        });
        let mut times = Vec::with_capacity(o.cold_runs);
        for _ in 0..o.cold_runs {
            let mut fresh = PageBrowser::new();
            let started = now();
            fresh
                .snapshot(ws)
                .await
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
            times.push(started.elapsed());
        }
        cold.push(Cold {
            series: series(times),
            warm_commands: per_call,
        });
    }
    Ok((rows, cold))
}

/// Per page: the cold snapshots, and how many CDP commands a warm one sent on average.
struct Cold {
    series: Series,
    warm_commands: f64,
}

/// Runs bench.mjs in `mode` and parses its JSON lines.
async fn node(o: &Options, mode: &[&str], urls: &[String]) -> Result<Vec<Row>> {
    let mut cmd = tokio::process::Command::new("node");
    cmd.current_dir(&o.node_dir)
        .arg("bench.mjs")
        .args(mode)
        .args([
            "--runs",
            &o.runs.to_string(),
            "--warmup",
            &o.warmup.to_string(),
        ])
        .args(urls)
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(1800), cmd.output())
        .await
        .context("bench.mjs took over 30 minutes")??;
    ensure!(
        out.status.success(),
        "bench.mjs {mode:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut rows = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).context("bench.mjs output")?;
        let url = v["url"].as_str().unwrap_or("");
        let page = SIZES
            .iter()
            .zip(urls)
            .find(|(_, u)| *u == url)
            .map(|(n, _)| *n)
            .context("unknown url in bench.mjs output")?;
        rows.push(Row {
            page,
            tool: format!(
                "{} ({})",
                v["tool"].as_str().unwrap_or("?"),
                v["mode"].as_str().unwrap_or("?")
            ),
            p50_ms: v["p50_ms"].as_f64().unwrap_or(f64::NAN),
            p90_ms: v["p90_ms"].as_f64().unwrap_or(f64::NAN),
            bytes: v["bytes"].as_u64().unwrap_or(0),
        });
    }
    Ok(rows)
}

async fn command_line(program: &str, args: &[&str]) -> String {
    match tokio::process::Command::new(program)
        .args(args)
        .output()
        .await
    {
        Ok(out) => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        Err(e) => format!("({program}: {e})"),
    }
}

async fn playwright_version(o: &Options) -> String {
    let path = o.node_dir.join("node_modules/playwright-core/package.json");
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["version"].as_str().map(str::to_owned))
            .unwrap_or_else(|| "?".into()),
        Err(_) => "?".into(),
    }
}
