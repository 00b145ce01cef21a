//! `bench_desktop`: the desktop benchmarks of issue 3 ("Must show" 4), in one run.
//!
//! It measures, each against an anchor taken in the same run:
//!
//! 1. computer_observe on the guest side (`Capturer::observe`: MIT-SHM capture, PNG, SHA-256)
//!    against `import -window root png:-` (ImageMagick) and `scrot` (into tmpfs), all on the
//!    same display (Xvnc), which shows a Chromium on a local page so the frame has realistic content. The
//!    runs are interleaved, one anchor of each per round, so passing load hits them alike;
//! 2. one click through XTEST (`Input::click` and `Input::finish`, its round trip to the
//!    server) against spawning `xdotool click 1` on that display, interleaved the same way, with
//!    spawning `true` as the floor under any process anchor; a batch of clicks with one sync per
//!    click (as before issue 17) against one sync per batch; and the act's settle after a click
//!    on the page's counter (arm, click, sync, first damage, quiet period): how long Chromium
//!    takes to draw, and how many draws came after the quiet period (the old settle, whose quiet
//!    period began right after the input, returned before those);
//! 3. desktop cold start: `XServer::start` then `Browser::start` until CDP answers, on a fresh
//!    profile and on a warm one, stopping both between runs, on Xvnc (the desktops' server) and
//!    on Xvfb (the server desktops had before, the anchor) in alternation, with the X server's
//!    RSS and PSS once Chrome is up;
//! 4. computer_observe through the API of the built `rakazo serve` and `rakazo-guest`
//!    (QUIC tunnel on loopback), on the path where the frame changed since the previous
//!    observation (an act clicks a counter on the page first; the act is not timed) and on the
//!    path where it did not (the image is omitted), with the shipped client and with a
//!    `TCP_NODELAY` client; the acts themselves (one click, a batch of ten actions, a click on a
//!    blank spot that draws nothing), and how many acts returned before Chromium drew (the
//!    observe after them came back unchanged);
//! 5. memory with live desktops: the guest's VmRSS, and RSS and PSS of the computer's X server
//!    (Xvnc) and Chromium processes, with 0, 1 and all desktops live.
//!
//! It prints markdown for BENCHMARKS.md. Timings are printed, never asserted: only
//! broken results (a failed command, a frame of the wrong size, a missing image) fail the run.
//! It owns its processes: desktops are stopped, the computer is stopped through the API (so
//! Chrome closes cleanly), and whatever is left of the server, guest, X server and Chromium
//! processes it started is killed at the end.
//!
//! Usage: `target/release/bench_desktop [--observe-runs N] [--anchor-runs N] [--click-runs N]
//! [--xdotool-runs N] [--batch-runs N] [--settle-runs N] [--start-runs N] [--api-runs N]
//! [--desktops N] [--bin-dir DIR]`.
//!
//! `--smoke`: a few runs of every part, for CI (`scripts/bench-smoke.sh`); explicit options win.

use anyhow::{anyhow, bail, ensure, Context, Result};
use base64::Engine as _;
use control_plane::client::Client;
use gateway_proto::Secret;
use guest_agent::browser::{Browser, BrowserOptions};
use guest_agent::display::{
    capture, settle, Button, Capturer, Clock, DisplayError, DisplayNum, Input, Settler,
};
use guest_agent::display::{XServer, XServerKind, XServerOptions};
use hyper::Method;
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tests::bench::{args as bench_args, ms, now, size, NoDelayClient};
use tests::fixture::Fixture;
use tests::procstat::proc_kb;
use tests::{pids_with_env, wait_for};

mod api;
mod local;
mod memory;
mod report;
mod starts;
use api::{measure_api, via_index, ApiRuns, Server, Via};
use local::{measure_local, ObserveRuns};
use memory::{memory, proc_table, read_cmdline, Memory, Proc};
use report::{
    command_line, cpu_model, fs_type, loadavg, nproc, package_versions, print_api, print_goals,
    print_local, print_memory, print_starts,
};
use starts::{measure_starts, KindStarts};

const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";
/// The bench's own displays start here, far from the guest's slots (100 and up) and from the
/// numbers people pick by hand.
const DISPLAY_BASE: u16 = 700;
/// Where the counter bar of [`PAGE`] sits on a 1280x800 screen (it fills the bottom 110 px of
/// the viewport, which ends at the bottom of the screen).
const BUMP_POINT: (i64, i64) = (640, 750);
/// A blank spot of [`PAGE`] (right of the 860 px column, above the counter bar): clicks there
/// change nothing on screen.
const BLANK_POINT: (i64, i64) = (1150, 300);
/// Actions per batch in the batch rows.
const BATCH: usize = 10;
/// The pause before an isolated click: Chromium has handled the previous one and gone idle, as
/// between the actions of real acts (which settle for at least 100 ms).
const ISOLATION: Duration = Duration::from_millis(20);
/// The lease of the API part outlives the whole run.
const LEASE_TTL_MS: u64 = 60 * 60 * 1000;
const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A dashboard-like page: header gradient, text, cards, a chart, a table, and a fixed counter
/// bar whose text and colour change on every click. Nothing on it moves by itself (no
/// animation, no focused input with a blinking caret), so an untouched screen stays identical.
const PAGE: &str = r##"<!doctype html><html><head><meta charset="utf-8">
<title>Release dashboard {TAG}</title><style>
body{margin:0;font:15px/1.45 sans-serif;color:#1d232b;background:#f6f7f9}
header{background:linear-gradient(90deg,#1f4e79,#2e86ab);color:#fff;padding:12px 24px;font-size:22px}
nav{background:#e4e8ee;padding:6px 24px}nav a{margin-right:18px;color:#1f4e79}
main{max-width:860px;padding:4px 24px 130px}h1{font-size:24px;margin:10px 0}
.cards{display:flex;gap:12px;margin:10px 0}.card{flex:1;border-radius:8px;padding:8px 12px;color:#fff}
.card b{font-size:22px}table{border-collapse:collapse;width:100%;font-size:13px}
td,th{border:1px solid #c8ced6;padding:2px 8px;text-align:left}tr:nth-child(even){background:#eef1f5}
#bump{position:fixed;left:0;right:0;bottom:0;height:110px;border:0;font-size:34px;color:#fff;
background:hsl(200,60%,40%)}
</style></head><body>
<header>Release dashboard &middot; build 4127 &middot; {TAG}</header>
<nav><a href="#">Overview</a><a href="#">Deployments</a><a href="#">Incidents</a><a href="#">Costs</a><a href="#">Settings</a></nav>
<main><h1>Quarterly deployment report</h1>
<p>Deployments ran on 14 regions this quarter. The median rollout took 11 minutes from merge to
the last healthy instance; two rollouts were paused by the canary gate and resumed after a fix.
Error budgets held everywhere except <em>eu-west-3</em>, where a certificate rotation briefly
raised the 5xx rate. The table below lists the slowest services by p99 latency.</p>
<div class="cards"><div class="card" style="background:#2a9d8f">Uptime<br><b>99.97%</b></div>
<div class="card" style="background:#e9c46a;color:#333">Rollouts<br><b>1,284</b></div>
<div class="card" style="background:#f4a261">Rollbacks<br><b>17</b></div>
<div class="card" style="background:#e76f51">Incidents<br><b>3</b></div></div>
<svg width="860" height="90" viewBox="0 0 860 90">{BARS}</svg>
<table><tr><th>service</th><th>region</th><th>p50 ms</th><th>p99 ms</th><th>owner</th><th>status</th></tr>
{ROWS}</table></main>
<button id="bump">clicked 0 times</button>
<script>
let n = 0; const b = document.getElementById('bump');
b.addEventListener('click', () => { n++; b.textContent = 'clicked ' + n + ' times';
  b.style.background = 'hsl(' + (n * 47 % 360) + ',60%,40%)'; });
fetch('/event?loaded={TAG}');
</script></body></html>"##;

/// [`PAGE`] for `tag`, with its chart and table filled in.
fn page_html(tag: &str) -> String {
    let bars: String = (0..43)
        .map(|i| {
            let h = 15 + (i * 37 % 70);
            format!(
                "<rect x='{}' y='{}' width='14' height='{h}' fill='hsl({},55%,50%)'/>",
                i * 20,
                90 - h,
                180 + i * 3
            )
        })
        .collect();
    let services = ["billing", "search", "checkout", "auth", "media", "notify"];
    let regions = ["us-east-1", "eu-west-3", "ap-south-2", "sa-east-1"];
    let rows: String = (0..12)
        .map(|i| {
            format!(
                "<tr><td>{}-{}</td><td>{}</td><td>{}</td><td>{}</td><td>team-{}</td><td>{}</td></tr>",
                services[i % services.len()],
                i + 1,
                regions[i % regions.len()],
                12 + i * 7 % 40,
                180 + i * 53 % 400,
                ["atlas", "borealis", "cirrus"][i % 3],
                if i % 5 == 3 { "degraded" } else { "healthy" }
            )
        })
        .collect();
    PAGE.replace("{TAG}", tag)
        .replace("{BARS}", &bars)
        .replace("{ROWS}", &rows)
}

struct Options {
    observe_runs: usize,
    anchor_runs: usize,
    click_runs: usize,
    xdotool_runs: usize,
    start_runs: usize,
    api_runs: usize,
    batch_runs: usize,
    settle_runs: usize,
    desktops: usize,
    bin_dir: PathBuf,
}

impl Options {
    fn parse() -> Result<Self> {
        let exe = std::env::current_exe().context("path of this executable")?;
        let mut o = Options {
            observe_runs: size(100, 4),
            anchor_runs: size(20, 2),
            click_runs: size(200, 4),
            xdotool_runs: size(50, 2),
            start_runs: size(10, 1),
            api_runs: size(50, 3),
            batch_runs: size(50, 3),
            settle_runs: size(100, 3),
            desktops: size(10, 2),
            // A binary lives in <target>/<profile>, beside `rakazo` and `rakazo-guest`.
            bin_dir: exe
                .parent()
                .ok_or_else(|| anyhow!("executable has no directory"))?
                .to_path_buf(),
        };
        let mut args = bench_args();
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or_else(|| anyhow!("{flag} needs a value"));
            match flag.as_str() {
                "--observe-runs" => o.observe_runs = value()?.parse()?,
                "--anchor-runs" => o.anchor_runs = value()?.parse()?,
                "--click-runs" => o.click_runs = value()?.parse()?,
                "--xdotool-runs" => o.xdotool_runs = value()?.parse()?,
                "--start-runs" => o.start_runs = value()?.parse()?,
                "--api-runs" => o.api_runs = value()?.parse()?,
                "--batch-runs" => o.batch_runs = value()?.parse()?,
                "--settle-runs" => o.settle_runs = value()?.parse()?,
                "--desktops" => o.desktops = value()?.parse()?,
                "--bin-dir" => o.bin_dir = value()?.into(),
                other => bail!("unknown argument {other:?}"),
            }
        }
        ensure!(
            o.anchor_runs > 0
                && o.observe_runs >= o.anchor_runs
                && o.xdotool_runs > 0
                && o.click_runs >= o.xdotool_runs
                && o.start_runs > 0
                && o.api_runs > 0
                && o.desktops > 0,
            "counts must be positive, with --observe-runs >= --anchor-runs and \
             --click-runs >= --xdotool-runs (they are interleaved)"
        );
        Ok(o)
    }
}

// ---------------------------------------------------------------------------------------------
// Statistics.

#[derive(Clone, Copy)]
struct Summary {
    n: usize,
    p50: Duration,
    p90: Duration,
    min: Duration,
    max: Duration,
}

/// Nearest-rank percentiles.
fn summarize(samples: &[Duration]) -> Summary {
    let mut s = samples.to_vec();
    s.sort_unstable();
    let pick = |q: f64| -> Duration {
        if s.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
        s[rank - 1]
    };
    Summary {
        n: s.len(),
        p50: pick(0.5),
        p90: pick(0.9),
        min: s.first().copied().unwrap_or_default(),
        max: s.last().copied().unwrap_or_default(),
    }
}

fn median_usize(v: &[usize]) -> usize {
    let mut s = v.to_vec();
    s.sort_unstable();
    s.get(s.len().saturating_sub(1) / 2).copied().unwrap_or(0)
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn ratio(a: Duration, b: Duration) -> f64 {
    if b.is_zero() {
        f64::NAN
    } else {
        a.as_secs_f64() / b.as_secs_f64()
    }
}

fn kib(bytes: usize) -> f64 {
    bytes as f64 / 1024.0
}

// ---------------------------------------------------------------------------------------------
// A desktop of the bench's own: an X server and Chromium started through the guest's library.

fn private_dir(prefix: &str) -> Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .context("create a temporary directory")?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

/// Starts an X server of `kind` on the first free display from [`DISPLAY_BASE`].
async fn start_xserver(runtime: &Path, kind: XServerKind) -> Result<XServer> {
    for n in DISPLAY_BASE..DISPLAY_BASE + 64 {
        let display = DisplayNum::new(n).ok_or_else(|| anyhow!("display {n} out of range"))?;
        match XServer::start(display, runtime, &XServerOptions::of(kind)).await {
            Ok(x) => return Ok(x),
            Err(DisplayError::InUse { .. } | DisplayError::SocketInUse { .. }) => {}
            Err(e) => return Err(e).context(format!("start {} on {display}", kind.program())),
        }
    }
    bail!("no free display from :{DISPLAY_BASE}")
}

fn browser_options(x: &XServer, profile: PathBuf, home: &Path, runtime: &Path) -> BrowserOptions {
    BrowserOptions::new(
        profile,
        home.to_path_buf(),
        x.display_env(),
        x.xauthority().to_path_buf(),
        runtime.to_path_buf(),
    )
}

/// An X client command on `x`'s display: only `PATH`, `HOME`, `DISPLAY` and `XAUTHORITY`.
fn x_command(program: &str, x: &XServer, home: &Path) -> Command {
    let mut c = Command::new(program);
    c.env_clear()
        .env("PATH", PATH)
        .env("HOME", home)
        .env("DISPLAY", x.display_env())
        .env("XAUTHORITY", x.xauthority())
        .stdin(Stdio::null());
    c
}

/// Captures until `still` consecutive frames are identical; false when that did not happen
/// within `timeout`.
async fn wait_still(cap: &mut Capturer, still: usize, timeout: Duration) -> Result<bool> {
    let deadline = now() + timeout;
    let (mut prev, mut same) = (String::new(), 0);
    while now() < deadline {
        let id = capture::frame_id(&capture::encode_png(&cap.capture()?)?);
        if id == prev {
            same += 1;
            if same + 1 >= still {
                return Ok(true);
            }
        } else {
            (prev, same) = (id, 0);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(false)
}

async fn wait_loaded(fx: &Fixture, tag: &str) -> Result<()> {
    wait_for(
        Duration::from_secs(30),
        &format!("page {tag} to load"),
        || {
            fx.events()
                .iter()
                .any(|e| e.get("loaded").map(String::as_str) == Some(tag))
                .then_some(())
        },
    )
    .await
}

#[tokio::main]
async fn main() -> Result<()> {
    tests::bench::Usage::new("the desktop benchmarks, each against its anchor")
        .flag(
            "--observe-runs",
            "N",
            "measured observations (default 100; smoke 4)",
        )
        .flag(
            "--anchor-runs",
            "N",
            "anchor screenshots, at most --observe-runs (default 20; smoke 2)",
        )
        .flag(
            "--click-runs",
            "N",
            "measured clicks (default 200; smoke 4)",
        )
        .flag(
            "--xdotool-runs",
            "N",
            "anchor clicks, at most --click-runs (default 50; smoke 2)",
        )
        .flag("--start-runs", "N", "desktop starts (default 10; smoke 1)")
        .flag(
            "--api-runs",
            "N",
            "measured API calls (default 50; smoke 3)",
        )
        .flag(
            "--batch-runs",
            "N",
            "measured batches (default 50; smoke 3)",
        )
        .flag(
            "--settle-runs",
            "N",
            "settle measurements (default 100; smoke 3)",
        )
        .flag("--desktops", "N", "desktops at once (default 10; smoke 2)")
        .flag(
            "--bin-dir",
            "PATH",
            "where rakazo and rakazo-guest are (default: beside this binary)",
        )
        .check();
    let opts = Options::parse()?;
    println!("### Run of `bench_desktop`\n");
    println!(
        "- date: {}",
        command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
    );
    println!("- machine: nproc {}, {}", nproc(), cpu_model());
    println!("- kernel: {}", command_line("uname", &["-sr"]));
    println!("- chromium: {}", command_line("chromium", &["--version"]));
    println!(
        "- packages: {}",
        package_versions(&[
            "tigervnc-standalone-server",
            "xvfb",
            "chromium",
            "imagemagick",
            "scrot",
            "xdotool"
        ])
    );
    println!("- binaries: `{}`", opts.bin_dir.display());
    println!("- load average at start: {}\n", loadavg());

    let fx = Fixture::start().await.context("start the page server")?;
    eprintln!("part 1-2: observe and click on one display");
    let local = measure_local(&fx, &opts).await?;
    eprintln!("part 3: cold starts");
    let load_starts = loadavg();
    let starts = measure_starts(opts.start_runs).await?;
    eprintln!("part 4-5: API");
    let load_api = loadavg();
    let api = measure_api(&fx, &opts).await?;

    print_goals(&local, &starts);
    print_local(&local);
    print_api(&api, summarize(&local.observe).p50);
    print_starts(&starts, &api);
    print_memory(&api);
    println!(
        "- load average when each part began: observe {}; click {}; batch {}; settle {}; cold start {}; API and memory {}; at the end {}",
        local.load_observe,
        local.load_click,
        local.load_batch,
        local.load_settle,
        load_starts,
        load_api,
        loadavg()
    );
    Ok(())
}
