//! `bench_console`: the console's benchmark of issue 31 ("Must show" 4), in one run.
//!
//! A real `rakazo serve` (the binaries beside this one) with one local computer whose bot has a
//! desktop showing a page, and a fleet of computers on the fake provider (each a real guest on
//! this host), so that the list holds `--fleet` running computers. `tests/console/bench.mjs`
//! (playwright-core from npm, driving `/usr/bin/chromium`) then measures, each against its anchor
//! in the same run:
//!
//! 1. the console's first page, JS and CSS as gzip would send them, against the bare viewer
//!    page's (noVNC, what a person opened before the console);
//! 2. navigation to every row of the fleet's list drawn, against the list's data alone (the same
//!    request from the page, parsed);
//! 3. a click on the computer to the first desktop frame on the bot's screen, against opening the
//!    bot's view URL directly;
//! 4. a command to its row in the console's Activity, against the activity stream read directly.
//!
//! It prints markdown for BENCHMARKS.md, with the machine's load before and after. Timings are
//! printed, never asserted. Usage (from the workspace root, after `npm ci` in tests/console):
//! `target/release/bench_console [--fleet N] [--runs N]`; `--smoke`: a small fleet, one run.

use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};
use std::path::PathBuf;
use tests::bench::{args as bench_args, now, percentile, size};
use tests::fixture::Fixture;
use tests::{World, WorldOptions};

/// What the bot's browser shows: colour and text, so a first frame is easy to tell from none.
const PAGE: &str =
    "<!doctype html><title>bench</title><body style=\"background:#1d4ed8;color:#fff;\
    font:32px sans-serif\"><h1>Rakazo console bench</h1><p>a page with colour and text</p></body>";

struct Options {
    fleet: usize,
    runs: usize,
    node_dir: PathBuf,
}

fn options() -> Result<Options> {
    let mut o = Options {
        fleet: size(200, 8),
        runs: size(10, 1),
        node_dir: PathBuf::from("tests/console"),
    };
    let mut args = bench_args();
    while let Some(a) = args.next() {
        let mut value = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--fleet" => o.fleet = value()?.parse()?,
            "--runs" => o.runs = value()?.parse()?,
            "--node-dir" => o.node_dir = PathBuf::from(value()?),
            other => bail!("unknown argument {other}"),
        }
    }
    ensure!(
        o.fleet >= 1 && o.runs >= 1,
        "fleet and runs must be positive"
    );
    Ok(o)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// p50 / p90 of a JSON array of milliseconds.
fn quantiles(runs: &Value) -> (f64, f64) {
    let v: Vec<f64> = runs
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    (percentile(&v, 0.5), percentile(&v, 0.9))
}

#[tokio::main]
async fn main() -> Result<()> {
    tests::bench::Usage::new("the console's benchmark: a fleet listed and a desktop shown")
        .flag(
            "--fleet",
            "N",
            "computers of the fleet (default 200; smoke 8)",
        )
        .flag("--runs", "N", "measured runs (default 10; smoke 1)")
        .flag(
            "--node-dir",
            "PATH",
            "the console test's node packages (default tests/console)",
        )
        .check();
    let o = options()?;
    let before = load();
    let mut w = World::start_with(WorldOptions {
        providers: Some("local,fake".into()),
        default_provider: Some("local".into()),
        ..WorldOptions::default()
    })
    .await?;
    let site = Fixture::start().await?;
    let c = w.create_computer("bench").await?;
    let bot = "bot-1";
    let b = tests::bot::Bot::new(&w, &c, bot).await?;
    b.ensure().await?;
    b.open(&site.page("bench", PAGE)).await?;
    b.end_run().await?;
    // The rest of the fleet, on the fake provider, 8 creations at a time.
    let made = now();
    let mut pending = Vec::new();
    for i in 1..o.fleet {
        let client = w.client.clone();
        pending.push(async move {
            client
                .json(
                    hyper::Method::POST,
                    "/v1/computers",
                    Some(&json!({ "workspace": format!("fleet-{i}"), "provider": "fake" })),
                )
                .await
        });
        if pending.len() == 8 || i + 1 == o.fleet {
            for r in futures_util::future::join_all(pending.drain(..)).await {
                r.context("create a fleet computer")?;
            }
        }
    }
    eprintln!(
        "{} computers running ({} fake, made in {:.1} s)",
        o.fleet,
        o.fleet - 1,
        made.elapsed().as_secs_f64()
    );

    let out = tokio::process::Command::new("node")
        .arg("bench.mjs")
        .current_dir(&o.node_dir)
        .env("RAKAZO_BENCH_URL", &w.http)
        .env("RAKAZO_BENCH_TOKEN", w.api_token())
        .env("RAKAZO_BENCH_COMPUTER", &c)
        .env("RAKAZO_BENCH_BOT", bot)
        .env("RAKAZO_BENCH_FLEET", o.fleet.to_string())
        .env("RAKAZO_BENCH_RUNS", o.runs.to_string())
        .output()
        .await
        .context("run node tests/console/bench.mjs (npm ci in tests/console first)")?;
    ensure!(
        out.status.success(),
        "bench.mjs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut m = std::collections::HashMap::new();
    for line in String::from_utf8(out.stdout)?.lines() {
        let v: Value = serde_json::from_str(line).with_context(|| format!("{line:?}"))?;
        m.insert(v["name"].as_str().unwrap_or_default().to_string(), v);
    }
    let get = |n: &str| {
        m.get(n)
            .with_context(|| format!("bench.mjs printed no {n}"))
    };
    let after = load();

    println!(
        "### Run of `bench_console` ({} computers in the list, {} runs per timed row; load {before} before, {after} after)\n",
        o.fleet, o.runs
    );
    println!("| measure | console | anchor | anchor is | ratio |");
    println!("|---|---:|---:|---|---:|");
    let first = get("console_first_page_js_css_gzip_bytes")?["value"]
        .as_f64()
        .unwrap_or(f64::NAN);
    let bare = get("bare_viewer_js_css_gzip_bytes")?["value"]
        .as_f64()
        .unwrap_or(f64::NAN);
    println!(
        "| first page JS+CSS, gzip | {:.1} KB | {:.1} KB | the bare viewer page (noVNC) | {:.2}× |",
        first / 1000.0,
        bare / 1000.0,
        first / bare
    );
    for (what, ours, anchor, anchor_is) in [
        (
            "list: its answer to every row drawn, p50 / p90",
            "list_rows_drawn_ms",
            "list_data_fetched_ms",
            "the answer's own fetch",
        ),
        (
            "list: navigation to every row drawn, p50 / p90",
            "list_navigation_ms",
            "list_data_fetched_ms",
            "the answer's own fetch",
        ),
        (
            "click to first frame, p50 / p90",
            "console_click_to_first_frame_ms",
            "bare_viewer_to_first_frame_ms",
            "the view URL opened directly",
        ),
        (
            "command to activity row, p50 / p90",
            "command_to_activity_row_ms",
            "command_to_stream_event_ms",
            "the activity stream read directly",
        ),
    ] {
        let (a50, a90) = quantiles(&get(ours)?["runs"]);
        let (b50, b90) = quantiles(&get(anchor)?["runs"]);
        println!(
            "| {what} | {a50:.0} / {a90:.0} ms | {b50:.0} / {b90:.0} ms | {anchor_is} | {:.2}× |",
            a50 / b50
        );
    }
    w.check_log()
}
