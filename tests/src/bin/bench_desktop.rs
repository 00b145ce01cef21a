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

struct ObserveRuns {
    display: String,
    shm: bool,
    still: bool,
    observe: Vec<Duration>,
    observe_png: Vec<usize>,
    capture: Vec<Duration>,
    encode: Vec<Duration>,
    hash: Vec<Duration>,
    cursor: Vec<Duration>,
    window: Vec<Duration>,
    import: Vec<Duration>,
    import_png: Vec<usize>,
    scrot: Vec<Duration>,
    scrot_png: Vec<usize>,
    scrot_dir: String,
    click: Vec<Duration>,
    xdotool: Vec<Duration>,
    /// Spawning `true` with the same environment: the floor under every process anchor.
    spawn: Vec<Duration>,
    /// One bare X round trip (QueryPointer) right after each back-to-back click: the floor
    /// under a click.
    round_trip: Vec<Duration>,
    /// A click, and a bare round trip, each after [`ISOLATION`] without input.
    click_isolated: Vec<Duration>,
    /// Isolated clicks on the same display before Chromium started (no client reacts).
    click_empty: Vec<Duration>,
    round_trip_isolated: Vec<Duration>,
    /// [`BATCH`] clicks, each ended by `Input::finish` (a sync per action).
    batch_per_action: Vec<Duration>,
    /// [`BATCH`] clicks, then one `Input::finish`.
    batch_once: Vec<Duration>,
    /// Syncs the last one-sync batch made.
    batch_syncs: u64,
    /// Arm, click on the counter, finish, settle: the act's X side.
    settle_total: Vec<Duration>,
    /// From the start of the settle wait to the first damage, where there was one.
    first_damage: Vec<Duration>,
    /// Settles that saw no damage within the bound.
    no_damage: usize,
    /// The settler's round trips in the last settle.
    settle_arms: u64,
    /// Load average when the observe, click, batch and settle rounds began.
    load_observe: String,
    load_click: String,
    load_batch: String,
    load_settle: String,
}

/// Parts 1 and 2: observe and click on one display, against their process anchors.
async fn measure_local(fx: &Fixture, opts: &Options) -> Result<ObserveRuns> {
    let runtime = private_dir("rakazo-bench-desk-rt-")?;
    let home = private_dir("rakazo-bench-desk-home-")?;
    // scrot writes a file: keep it in tmpfs, so its figure is encode time, not disk time.
    let shm = Path::new("/dev/shm");
    let scrot_dir = if shm.is_dir() {
        tempfile::Builder::new()
            .prefix("rakazo-bench-scrot-")
            .tempdir_in(shm)?
    } else {
        private_dir("rakazo-bench-scrot-")?
    };
    let shot = scrot_dir.path().join("shot.png");

    let mut xserver = start_xserver(runtime.path(), XServerKind::Xvnc).await?;
    // Isolated clicks on the display before Chromium runs: what a click costs when no client
    // reacts to it.
    let click_empty = async {
        let mut input = Input::new(xserver.access(), Clock::new(now))?;
        let (bx, by) = BLANK_POINT;
        let mut v = Vec::new();
        for i in 0..opts.click_runs + 20 {
            tokio::time::sleep(ISOLATION).await;
            let t = now();
            input.click(bx, by, Button::Left, false)?;
            input.finish()?;
            if i >= 20 {
                v.push(now() - t);
            }
        }
        Ok::<_, anyhow::Error>(v)
    }
    .await;
    let click_empty = match click_empty {
        Ok(v) => v,
        Err(e) => {
            let _ = xserver.stop().await;
            return Err(e).context("clicks on the empty display");
        }
    };
    let mut opts_b = browser_options(
        &xserver,
        home.path().join("profile"),
        home.path(),
        runtime.path(),
    );
    opts_b.first_url = Some(fx.page("local", &page_html("local")));
    let mut browser = match Browser::start(&opts_b).await {
        Ok(b) => b,
        Err(e) => {
            let _ = xserver.stop().await;
            return Err(e).context("start chromium");
        }
    };
    let result = async {
        wait_loaded(fx, "local").await?;
        let mut cap = Capturer::new(xserver.access())?;
        let still = wait_still(&mut cap, 5, Duration::from_secs(20)).await?;
        let display = xserver.display_env();
        eprintln!(
            "observe and click on {display} (MIT-SHM: {})",
            cap.uses_shm()
        );

        let observe_once = |cap: &mut Capturer| -> Result<(Duration, usize)> {
            let t = now();
            let obs = cap.observe()?;
            let d = now() - t;
            ensure!(
                (obs.width, obs.height) == (1280, 800) && obs.png.starts_with(PNG_MAGIC),
                "observe gave a {}x{} frame",
                obs.width,
                obs.height
            );
            Ok((d, obs.png.len()))
        };
        let import_once = || -> Result<(Duration, usize)> {
            let t = now();
            let out = x_command("import", &xserver, home.path())
                .args(["-window", "root", "png:-"])
                .output()
                .context("run import")?;
            let d = now() - t;
            ensure!(
                out.status.success() && out.stdout.starts_with(PNG_MAGIC),
                "import failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            Ok((d, out.stdout.len()))
        };
        let scrot_once = || -> Result<(Duration, usize)> {
            let t = now();
            let out = x_command("scrot", &xserver, home.path())
                .args(["-o", "-z"])
                .arg(&shot)
                .output()
                .context("run scrot")?;
            let d = now() - t;
            ensure!(
                out.status.success(),
                "scrot failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            let len = std::fs::metadata(&shot)?.len();
            Ok((d, usize::try_from(len)?))
        };

        // Warm-up: the first capture maps the segment, the first spawns fault the tools in.
        for _ in 0..10 {
            observe_once(&mut cap)?;
        }
        import_once()?;
        scrot_once()?;
        let mut r = ObserveRuns {
            display: display.clone(),
            shm: cap.uses_shm(),
            still,
            observe: Vec::new(),
            observe_png: Vec::new(),
            capture: Vec::new(),
            encode: Vec::new(),
            hash: Vec::new(),
            cursor: Vec::new(),
            window: Vec::new(),
            import: Vec::new(),
            import_png: Vec::new(),
            scrot: Vec::new(),
            scrot_png: Vec::new(),
            scrot_dir: format!(
                "{} ({})",
                scrot_dir.path().display(),
                fs_type(scrot_dir.path()).unwrap_or_default()
            ),
            click: Vec::new(),
            xdotool: Vec::new(),
            spawn: Vec::new(),
            round_trip: Vec::new(),
            click_isolated: Vec::new(),
            click_empty: click_empty.clone(),
            round_trip_isolated: Vec::new(),
            batch_per_action: Vec::new(),
            batch_once: Vec::new(),
            batch_syncs: 0,
            settle_total: Vec::new(),
            first_damage: Vec::new(),
            no_damage: 0,
            settle_arms: 0,
            load_observe: loadavg(),
            load_click: String::new(),
            load_batch: String::new(),
            load_settle: String::new(),
        };
        // Interleaved rounds: a share of the observes, as many observes split into their steps
        // (timed one by one), one import, one scrot.
        let per_round = opts.observe_runs / opts.anchor_runs;
        for round in 0..opts.anchor_runs {
            let extra = usize::from(round < opts.observe_runs % opts.anchor_runs);
            for _ in 0..per_round + extra {
                let (d, len) = observe_once(&mut cap)?;
                r.observe.push(d);
                r.observe_png.push(len);
            }
            for _ in 0..per_round + extra {
                let t0 = now();
                let frame = cap.capture()?;
                let t1 = now();
                let png = capture::encode_png(&frame)?;
                let t2 = now();
                let id = capture::frame_id(&png);
                let t3 = now();
                cap.cursor()?;
                let t4 = now();
                cap.active_window()?;
                let t5 = now();
                ensure!(id.len() == 64, "frame id {id:?}");
                r.capture.push(t1 - t0);
                r.encode.push(t2 - t1);
                r.hash.push(t3 - t2);
                r.cursor.push(t4 - t3);
                r.window.push(t5 - t4);
            }
            let (d, len) = import_once()?;
            r.import.push(d);
            r.import_png.push(len);
            let (d, len) = scrot_once()?;
            r.scrot.push(d);
            r.scrot_png.push(len);
        }

        // Clicks on a blank spot of the page, interleaved with `xdotool click 1` there.
        let mut input = Input::new(xserver.access(), Clock::new(now))?;
        let (bx, by) = BLANK_POINT;
        for _ in 0..20 {
            input.click(bx, by, Button::Left, false)?;
            input.finish()?;
        }
        let xdotool_once = || -> Result<Duration> {
            let t = now();
            let out = x_command("xdotool", &xserver, home.path())
                .args(["click", "1"])
                .output()
                .context("run xdotool")?;
            let d = now() - t;
            ensure!(
                out.status.success(),
                "xdotool failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            Ok(d)
        };
        for _ in 0..3 {
            xdotool_once()?;
        }
        r.load_click = loadavg();
        let per_round = opts.click_runs / opts.xdotool_runs;
        for round in 0..opts.xdotool_runs {
            let extra = usize::from(round < opts.click_runs % opts.xdotool_runs);
            for _ in 0..per_round + extra {
                let t = now();
                input.click(bx, by, Button::Left, false)?;
                input.finish()?;
                r.click.push(now() - t);
                let t = now();
                cap.cursor()?;
                r.round_trip.push(now() - t);
            }
            for _ in 0..per_round + extra {
                tokio::time::sleep(ISOLATION).await;
                let t = now();
                input.click(bx, by, Button::Left, false)?;
                input.finish()?;
                r.click_isolated.push(now() - t);
                tokio::time::sleep(ISOLATION).await;
                let t = now();
                cap.cursor()?;
                r.round_trip_isolated.push(now() - t);
            }
            r.xdotool.push(xdotool_once()?);
            let t = now();
            let status = x_command("true", &xserver, home.path())
                .status()
                .context("run true")?;
            r.spawn.push(now() - t);
            ensure!(status.success(), "true failed: {status}");
        }
        // Batches of clicks on the blank spot: one sync per action (as every action ended
        // before issue 17) against one sync per batch (`Input::finish` once), interleaved.
        r.load_batch = loadavg();
        for _ in 0..opts.batch_runs {
            tokio::time::sleep(ISOLATION).await;
            let t = now();
            for _ in 0..BATCH {
                input.click(bx, by, Button::Left, false)?;
                input.finish()?;
            }
            r.batch_per_action.push(now() - t);
            tokio::time::sleep(ISOLATION).await;
            let syncs = input.syncs();
            let t = now();
            for _ in 0..BATCH {
                input.click(bx, by, Button::Left, false)?;
            }
            input.finish()?;
            r.batch_once.push(now() - t);
            r.batch_syncs = input.syncs() - syncs;
        }

        // Settling after a click on the counter bar, as `act` does: arm, click, one sync, then
        // the first damage (within the bound), then the quiet period.
        let mut settler = Settler::new(xserver.access(), Clock::new(now))?;
        let (ux, uy) = BUMP_POINT;
        r.load_settle = loadavg();
        for _ in 0..opts.settle_runs {
            tokio::time::sleep(ISOLATION).await;
            let arms = settler.round_trips();
            let t = now();
            settler.arm()?;
            input.click(ux, uy, Button::Left, false)?;
            input.finish()?;
            let outcome = settler.wait_after_input(
                settle::DEFAULT_FIRST_DAMAGE,
                settle::DEFAULT_QUIET,
                settle::DEFAULT_CAP,
            )?;
            r.settle_total.push(now() - t);
            r.settle_arms = settler.round_trips() - arms;
            match outcome.first_damage {
                Some(first) => r.first_damage.push(first),
                None => r.no_damage += 1,
            }
        }
        drop(settler);
        drop(input);
        drop(cap);
        Ok::<_, anyhow::Error>(r)
    }
    .await;
    let stopped_b = browser.stop().await;
    let stopped_x = xserver.stop().await;
    let r = result?;
    stopped_b.context("stop chromium")?;
    stopped_x.context("stop the x server")?;
    Ok(r)
}

// ---------------------------------------------------------------------------------------------
// Cold start.

#[derive(Default)]
struct Starts {
    total: Vec<Duration>,
    xserver: Vec<Duration>,
    browser: Vec<Duration>,
    /// Chrome's own spawn-to-CDP figure (`Browser::startup_time`).
    chrome: Vec<Duration>,
    stop: Vec<Duration>,
    /// The X server's VmRSS and PSS once Chrome answers CDP (KiB).
    rss_kb: Vec<usize>,
    pss_kb: Vec<usize>,
}

/// The cold starts of one X server kind.
struct KindStarts {
    kind: XServerKind,
    fresh: Starts,
    warm: Starts,
}

/// One start and stop of an X server of `kind` plus Chromium on `profile`.
async fn start_once(
    kind: XServerKind,
    runtime: &Path,
    home: &Path,
    profile: &Path,
    s: &mut Starts,
) -> Result<()> {
    let t0 = now();
    let mut xserver = start_xserver(runtime, kind).await?;
    let t1 = now();
    let started = Browser::start(&browser_options(
        &xserver,
        profile.to_path_buf(),
        home,
        runtime,
    ))
    .await;
    let t2 = now();
    let mut browser = match started {
        Ok(b) => b,
        Err(e) => {
            let _ = xserver.stop().await;
            return Err(e).context("start chromium");
        }
    };
    let pid = i32::try_from(xserver.pid()).unwrap_or(0);
    s.rss_kb
        .push(usize::try_from(proc_kb(pid, "status", "VmRSS:")).unwrap_or(0));
    s.pss_kb
        .push(usize::try_from(proc_kb(pid, "smaps_rollup", "Pss:")).unwrap_or(0));
    let t3 = now();
    let stopped_b = browser.stop().await;
    let stopped_x = xserver.stop().await;
    s.stop.push(now() - t3);
    stopped_b.context("stop chromium")?;
    stopped_x.context("stop the x server")?;
    s.total.push(t2 - t0);
    s.xserver.push(t1 - t0);
    s.browser.push(t2 - t1);
    s.chrome.push(browser.startup_time());
    Ok(())
}

/// Part 3: `runs` starts on fresh profiles, then `runs` on one warm profile, each on Xvnc and
/// on Xvfb in alternation (so passing load hits both alike).
async fn measure_starts(runs: usize) -> Result<[KindStarts; 2]> {
    let runtime = private_dir("rakazo-bench-start-rt-")?;
    let home = private_dir("rakazo-bench-start-home-")?;
    let mut kinds = [XServerKind::Xvnc, XServerKind::Xvfb].map(|kind| KindStarts {
        kind,
        fresh: Starts::default(),
        warm: Starts::default(),
    });
    for i in 0..runs {
        for k in &mut kinds {
            let profile = home.path().join(format!("fresh-{}-{i}", k.kind.program()));
            start_once(k.kind, runtime.path(), home.path(), &profile, &mut k.fresh).await?;
        }
    }
    let warm_profile = home.path().join("warm");
    // The priming run creates the profile; it is not counted.
    start_once(
        XServerKind::Xvnc,
        runtime.path(),
        home.path(),
        &warm_profile,
        &mut Starts::default(),
    )
    .await?;
    for _ in 0..runs {
        for k in &mut kinds {
            start_once(
                k.kind,
                runtime.path(),
                home.path(),
                &warm_profile,
                &mut k.warm,
            )
            .await?;
        }
    }
    Ok(kinds)
}

// ---------------------------------------------------------------------------------------------
// The API: a control plane from the built binaries, with one local computer.

/// One running `rakazo serve` in its own data dir, with one local computer.
struct Server {
    data_dir: tempfile::TempDir,
    child: Child,
    client: Client,
    nodelay: NoDelayClient,
    computer: String,
    /// Desktop processes seen (pid, command line), killed at the end if they outlive the stop.
    seen: Vec<(i32, String)>,
    /// Every execution lease taken, `(bot, lease)`: released before the stop, which refuses to
    /// checkpoint a home under held leases.
    leases: std::sync::Mutex<Vec<(String, String)>>,
}

impl Server {
    async fn start(bin_dir: &Path) -> Result<Self> {
        let rakazo = bin_dir.join("rakazo");
        let guest = bin_dir.join("rakazo-guest");
        for b in [&rakazo, &guest] {
            ensure!(
                b.exists(),
                "{} is missing: cargo build --release -p control-plane -p guest-agent -p tests --bins",
                b.display()
            );
        }
        let data_dir = tempfile::Builder::new()
            .prefix("rakazo-bench-desk-")
            .tempdir()?;
        // The bench's dir: `data/` (the server's, 0700) and `computers/` (local computers' root,
        // which their users pass through).
        std::fs::set_permissions(
            data_dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o711),
        )?;
        let log = std::fs::File::create(data_dir.path().join("server.log"))?;
        let child = Command::new(&rakazo)
            .arg("serve")
            .env_clear()
            .env("PATH", PATH)
            .env("RAKAZO_DATA_DIR", data_dir.path().join("data"))
            // Local computers run as users of their own, outside the (0700) data dir.
            .env("RAKAZO_LOCAL_ROOT", data_dir.path().join("computers"))
            .env("RAKAZO_HTTP_ADDR", "127.0.0.1:0")
            .env("RAKAZO_TUNNEL_ADDR", "127.0.0.1:0")
            .env("RAKAZO_GUEST_BIN", &guest)
            // Jailed, on this host's network (as the system tests): the bench's pages and
            // anchors are on its loopback.
            .env("RAKAZO_LOCAL_CONTAINMENT", "host-network")
            .env("RAKAZO_LOG", "info")
            .env("RAKAZO_GUEST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("start rakazo serve")?;
        // From here on, Drop cleans up whatever happens next.
        let mut server = Server {
            data_dir,
            child,
            client: Client::new("http://127.0.0.1:1", Secret::new("")),
            nodelay: NoDelayClient::new("http://127.0.0.1:1", ""),
            computer: String::new(),
            seen: Vec::new(),
            leases: std::sync::Mutex::new(Vec::new()),
        };
        let addresses = server.data_dir.path().join("data/addresses.json");
        let text = wait_for(Duration::from_secs(30), "addresses.json", || {
            std::fs::read_to_string(&addresses).ok()
        })
        .await?;
        let v: serde_json::Value = serde_json::from_str(&text)?;
        let http = v["http"]
            .as_str()
            .ok_or_else(|| anyhow!("no http address in {text}"))?;
        let token = std::fs::read_to_string(server.data_dir.path().join("data/api-token"))?;
        let token = token.trim();
        server.client = Client::new(http, Secret::new(token.to_string()));
        server.nodelay = NoDelayClient::new(http, token);
        // Creating a computer returns once its guest has dialed in.
        let created = server
            .client
            .json(
                Method::POST,
                "/v1/computers",
                Some(&serde_json::json!({ "workspace": "bench-desktops" })),
            )
            .await?;
        server.computer = created["id"]
            .as_str()
            .ok_or_else(|| anyhow!("no id in {created}"))?
            .to_string();
        Ok(server)
    }

    fn home(&self) -> PathBuf {
        self.data_dir
            .path()
            .join("computers")
            .join(&self.computer)
            .join("home")
    }

    fn guest_pid(&self) -> Result<i32> {
        // The X server inherits the guest's environment, so RAKAZO_HOME alone is not enough.
        let pids: Vec<i32> = pids_with_env("RAKAZO_HOME", &self.home().display().to_string())
            .into_iter()
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == "rakazo-guest")
            })
            .collect();
        match pids.as_slice() {
            [pid] => Ok(*pid),
            other => bail!("expected one guest process, found {other:?}"),
        }
    }

    async fn post(&self, path: &str, body: serde_json::Value) -> Result<serde_json::Value> {
        Ok(self.client.json(Method::POST, path, Some(&body)).await?)
    }

    async fn lease(&self, bot: &str) -> Result<String> {
        let v = self
            .post(
                &format!("/v1/computers/{}/leases/{bot}/acquire", self.computer),
                serde_json::json!({ "owner": format!("bench-{bot}"), "ttl_ms": LEASE_TTL_MS }),
            )
            .await?;
        let lease = v["lease"]
            .as_str()
            .ok_or_else(|| anyhow!("no lease in {v}"))?
            .to_string();
        self.leases
            .lock()
            .map_err(|_| anyhow!("lease list poisoned"))?
            .push((bot.to_string(), lease.clone()));
        Ok(lease)
    }

    /// Releases every lease [`Server::lease`] took (the runs are over).
    async fn release_leases(&self) -> Result<()> {
        let leases = std::mem::take(
            &mut *self
                .leases
                .lock()
                .map_err(|_| anyhow!("lease list poisoned"))?,
        );
        for (bot, lease) in leases {
            self.post(
                &format!("/v1/computers/{}/leases/{bot}/release", self.computer),
                serde_json::json!({ "lease": lease, "outcome": "success" }),
            )
            .await
            .with_context(|| format!("release the lease of {bot}"))?;
        }
        Ok(())
    }

    fn screen_path(&self, bot: &str, action: &str) -> String {
        format!("/v1/computers/{}/screens/{bot}/{action}", self.computer)
    }

    /// The computer's desktop processes: the guest's descendants, and processes whose command
    /// line names the data dir (Chrome helpers that re-parented themselves).
    fn desktop_processes(&mut self) -> Result<Vec<Proc>> {
        let guest = self.guest_pid()?;
        let data = self.data_dir.path().display().to_string();
        let table = proc_table();
        let mut ids = BTreeSet::new();
        let mut frontier = vec![guest];
        while let Some(p) = frontier.pop() {
            for c in table.iter().filter(|c| c.ppid == p) {
                if ids.insert(c.pid) {
                    frontier.push(c.pid);
                }
            }
        }
        let procs: Vec<Proc> = table
            .into_iter()
            .filter(|p| {
                p.pid != guest
                    && p.pid != self.child.id() as i32
                    && (ids.contains(&p.pid) || p.cmdline.contains(&data))
            })
            .collect();
        for p in &procs {
            if !self.seen.iter().any(|(pid, _)| *pid == p.pid) {
                self.seen.push((p.pid, p.cmdline.clone()));
            }
        }
        Ok(procs)
    }

    /// Kills desktop processes that are still the ones seen; returns how many there were.
    fn kill_leftovers(&self) -> usize {
        let mut n = 0;
        for (pid, cmdline) in &self.seen {
            if read_cmdline(*pid).as_deref() == Some(cmdline.as_str()) {
                n += 1;
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(*pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        n
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // The server first, so that nothing restarts a guest; then the guest and its desktops.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let home = self.home().display().to_string();
        for pid in pids_with_env("RAKAZO_HOME", &home) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        self.kill_leftovers();
        // The guest's default runtime directory (X cookies, logs) lives outside the data dir.
        if !self.computer.is_empty() {
            let _ = std::fs::remove_dir_all(
                std::env::temp_dir().join(format!("rakazo-guest-{}", self.computer)),
            );
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    Shipped,
    NoDelay,
}

impl Via {
    fn name(self) -> &'static str {
        match self {
            Via::Shipped => "shipped `Client` (keep-alive)",
            Via::NoDelay => "keep-alive + `TCP_NODELAY`",
        }
    }
}

/// One bot with a lease on the bench computer.
struct Bot {
    name: String,
    lease: String,
}

impl Bot {
    async fn new(server: &Server, name: &str) -> Result<Self> {
        Ok(Self {
            name: name.to_string(),
            lease: server.lease(name).await?,
        })
    }

    async fn call(
        &self,
        server: &Server,
        action: &str,
        mut body: serde_json::Value,
        via: Via,
    ) -> Result<serde_json::Value> {
        body["lease"] = self.lease.clone().into();
        let path = server.screen_path(&self.name, action);
        match via {
            Via::Shipped => server.post(&path, body).await,
            Via::NoDelay => server.nodelay.post_json(&path, &body).await,
        }
        .with_context(|| format!("{action} of bot {}", self.name))
    }

    async fn act(&self, server: &Server, actions: serde_json::Value) -> Result<serde_json::Value> {
        self.call(
            server,
            "act",
            serde_json::json!({ "actions": actions }),
            Via::Shipped,
        )
        .await
    }

    /// A timed observe; returns the time, the response and the decoded PNG's size (0 when the
    /// image was omitted).
    async fn observe(
        &self,
        server: &Server,
        via: Via,
    ) -> Result<(Duration, serde_json::Value, usize)> {
        let t = now();
        let v = self
            .call(server, "observe", serde_json::json!({}), via)
            .await?;
        let d = now() - t;
        let png = match v["image"].as_str() {
            Some(b64) => {
                let png = base64::engine::general_purpose::STANDARD.decode(b64)?;
                ensure!(png.starts_with(PNG_MAGIC), "observe image is not a PNG");
                png.len()
            }
            None => 0,
        };
        Ok((d, v, png))
    }

    /// Opens the bench page for this bot and waits until it loaded and the screen is still.
    async fn open_page(&self, server: &Server, fx: &Fixture) -> Result<()> {
        let url = fx.page(&self.name, &page_html(&self.name));
        self.act(server, serde_json::json!([{ "type": "open", "url": url }]))
            .await?;
        wait_loaded(fx, &self.name).await
    }
}

#[derive(Default)]
struct ApiRuns {
    changed: [Vec<Duration>; 2],
    changed_png: Vec<usize>,
    changed_but_unchanged: usize,
    unchanged: [Vec<Duration>; 2],
    unchanged_but_changed: usize,
    act: Vec<Duration>,
    /// Acts of [`BATCH`] actions: moves over a blank spot, then a click on the counter.
    act_batch: Vec<Duration>,
    /// The observe after a batch act showed no change.
    batch_before_draw: usize,
    /// Acts of one click on a blank spot (nothing draws: the settle waits out its bound).
    act_blank: Vec<Duration>,
    /// `settledMs` of those.
    act_blank_settled: Vec<u64>,
    ensure_first: Duration,
    ensure_new: Vec<Duration>,
    /// Chrome's spawn-to-CDP time of each desktop, from the guest log's `chrome ready` lines.
    guest_chrome: Vec<Duration>,
    mem: Vec<Memory>,
    stop: Duration,
    leftovers: usize,
    locks_left: Vec<String>,
}

fn via_index(via: Via) -> usize {
    match via {
        Via::Shipped => 0,
        Via::NoDelay => 1,
    }
}

/// Parts 4 and 5: observe through the API, then memory with live desktops.
async fn measure_api(fx: &Fixture, opts: &Options) -> Result<ApiRuns> {
    let mut server = Server::start(&opts.bin_dir).await?;
    let result = measure_api_on(&mut server, fx, opts).await;
    // The runs are over: their leases go first (a stop checkpoints the home, which it refuses
    // under held leases). Then stop the computer through the API, so the guest closes every
    // Chrome through CDP.
    let released = server.release_leases().await;
    let t = now();
    let stopped = server
        .post(
            &format!("/v1/computers/{}/stop", server.computer),
            serde_json::json!({}),
        )
        .await;
    let stop = now() - t;
    // Give the processes a moment to be reaped before looking for leftovers.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let leftovers = server.kill_leftovers();
    let mut r = result?;
    released?;
    stopped.context("stop the computer")?;
    r.stop = stop;
    r.leftovers = leftovers;
    drop(server);
    for display in r.mem.iter().flat_map(|m| m.displays.iter()) {
        for p in [
            format!("/tmp/.X{display}-lock"),
            format!("/tmp/.X11-unix/X{display}"),
        ] {
            if Path::new(&p).exists() {
                r.locks_left.push(p);
            }
        }
    }
    r.locks_left.sort();
    r.locks_left.dedup();
    Ok(r)
}

async fn measure_api_on(server: &mut Server, fx: &Fixture, opts: &Options) -> Result<ApiRuns> {
    let mut r = ApiRuns::default();
    r.mem.push(memory(server, 0, Vec::new())?);

    let first = Bot::new(server, "bot-00").await?;
    let t = now();
    let info = first
        .call(server, "ensure", serde_json::json!({}), Via::Shipped)
        .await?;
    r.ensure_first = now() - t;
    ensure!(info["started"] == true, "ensure did not start: {info}");
    let mut displays = vec![info["display"].as_u64().unwrap_or_default()];
    first.open_page(server, fx).await?;
    eprintln!("observe through the API (bot-00 on :{})", displays[0]);

    // Until the screen is still: an observation that omits its image.
    let mut still = false;
    for _ in 0..60 {
        let (_, v, _) = first.observe(server, Via::Shipped).await?;
        if v["unchanged"] == true {
            still = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ensure!(still, "the screen of bot-00 never became still");
    // Warm-up of both clients and of both paths.
    for via in [Via::Shipped, Via::NoDelay] {
        for _ in 0..3 {
            first.observe(server, via).await?;
        }
    }

    // Rounds of: an act that clicks the counter bar (timed apart; it settles on damage), an
    // observe of the changed frame, then an observe of the same frame (the image is omitted).
    // The two clients take turns by round.
    let (x, y) = BUMP_POINT;
    for _ in 0..opts.api_runs {
        for via in [Via::Shipped, Via::NoDelay] {
            let t = now();
            let act = first
                .act(
                    server,
                    serde_json::json!([{ "type": "click", "x": x, "y": y }]),
                )
                .await?;
            r.act.push(now() - t);
            ensure!(act["completed"] == 1, "act: {act}");
            let (d, v, png) = first.observe(server, via).await?;
            if v["unchanged"] == false && png > 0 {
                r.changed[via_index(via)].push(d);
                r.changed_png.push(png);
            } else {
                r.changed_but_unchanged += 1;
            }
            let (d, v, png) = first.observe(server, via).await?;
            if v["unchanged"] == true && png == 0 {
                r.unchanged[via_index(via)].push(d);
            } else {
                r.unchanged_but_changed += 1;
            }
        }
    }
    // Acts of a batch: moves over the blank spot, then a click on the counter; the observe
    // after each must show the change. And, fewer, acts that change nothing.
    let (bx, by) = BLANK_POINT;
    let mut batch: Vec<serde_json::Value> = (0..BATCH - 1)
        .map(|i| serde_json::json!({ "type": "move", "x": bx, "y": by + i as i64 }))
        .collect();
    batch.push(serde_json::json!({ "type": "click", "x": x, "y": y }));
    let batch = serde_json::Value::Array(batch);
    for round in 0..opts.api_runs {
        let t = now();
        let act = first.act(server, batch.clone()).await?;
        r.act_batch.push(now() - t);
        ensure!(act["completed"] == BATCH, "act: {act}");
        let (_, v, png) = first.observe(server, Via::Shipped).await?;
        if v["unchanged"] == true || png == 0 {
            r.batch_before_draw += 1;
        }
        if round % 5 == 0 {
            let t = now();
            let act = first
                .act(
                    server,
                    serde_json::json!([{ "type": "click", "x": bx, "y": by }]),
                )
                .await?;
            r.act_blank.push(now() - t);
            r.act_blank_settled
                .push(act["settledMs"].as_u64().unwrap_or_default());
        }
    }
    r.mem.push(memory(server, 1, displays.clone())?);

    // More desktops, one at a time (each a cold start through the API on a fresh profile),
    // each with the page open and observed once, as a working bot would have it.
    eprintln!("starting {} more desktops", opts.desktops.saturating_sub(1));
    for i in 1..opts.desktops {
        let bot = Bot::new(server, &format!("bot-{i:02}")).await?;
        let t = now();
        let info = bot
            .call(server, "ensure", serde_json::json!({}), Via::Shipped)
            .await?;
        r.ensure_new.push(now() - t);
        ensure!(info["started"] == true, "ensure did not start: {info}");
        displays.push(info["display"].as_u64().unwrap_or_default());
        bot.open_page(server, fx).await?;
        bot.observe(server, Via::Shipped).await?;
    }
    // Let the last pages finish painting before reading memory.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = std::fs::read_to_string(
        server
            .data_dir
            .path()
            .join("computers")
            .join(&server.computer)
            .join("guest.log"),
    )
    .unwrap_or_default();
    // Skip bot-00's: the rows it goes with are the new bots' ensures.
    r.guest_chrome = chrome_startups(&log).into_iter().skip(1).collect();
    r.mem.push(memory(server, opts.desktops, displays)?);
    Ok(r)
}

/// The `startup_ms` of every `chrome ready` line of a guest log, in order.
fn chrome_startups(log: &str) -> Vec<Duration> {
    log.lines()
        .filter(|l| l.contains("chrome ready"))
        .filter_map(|l| {
            let rest = &l[l.find("startup_ms")? + "startup_ms".len()..];
            let digits: String = rest
                .trim_start_matches(['=', '"', ':', ' '])
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok().map(Duration::from_millis)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Processes and memory.

struct Proc {
    pid: i32,
    ppid: i32,
    comm: String,
    cmdline: String,
}

fn read_cmdline(pid: i32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    // Zombies have an empty command line: they hold no memory and need no kill.
    (!raw.is_empty()).then(|| String::from_utf8_lossy(&raw).replace('\0', " "))
}

fn proc_table() -> Vec<Proc> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        let ppid = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let Some(cmdline) = read_cmdline(pid) else {
            continue;
        };
        out.push(Proc {
            pid,
            ppid,
            comm,
            cmdline,
        });
    }
    out
}

/// A `kB` field of `/proc/<pid>/status` or `/proc/<pid>/smaps_rollup`.
#[derive(Default, Clone, Copy)]
struct Group {
    count: usize,
    rss_kb: u64,
    pss_kb: u64,
}

impl Group {
    fn add(&mut self, pid: i32) {
        self.count += 1;
        self.rss_kb += proc_kb(pid, "status", "VmRSS:");
        self.pss_kb += proc_kb(pid, "smaps_rollup", "Pss:");
    }
}

struct Memory {
    desktops: usize,
    displays: Vec<u64>,
    guest_rss_kb: u64,
    guest_anon_kb: u64,
    guest_file_kb: u64,
    guest_shmem_kb: u64,
    guest_pss_kb: u64,
    xserver: Group,
    chromium: Group,
    other: Group,
}

fn memory(server: &mut Server, desktops: usize, displays: Vec<u64>) -> Result<Memory> {
    let guest = server.guest_pid()?;
    let mut m = Memory {
        desktops,
        displays,
        guest_rss_kb: proc_kb(guest, "status", "VmRSS:"),
        guest_anon_kb: proc_kb(guest, "status", "RssAnon:"),
        guest_file_kb: proc_kb(guest, "status", "RssFile:"),
        guest_shmem_kb: proc_kb(guest, "status", "RssShmem:"),
        guest_pss_kb: proc_kb(guest, "smaps_rollup", "Pss:"),
        xserver: Group::default(),
        chromium: Group::default(),
        other: Group::default(),
    };
    for p in server.desktop_processes()? {
        if p.comm == "Xvnc" || p.comm == "Xvfb" {
            m.xserver.add(p.pid);
        } else if p.comm.starts_with("chrom") || p.cmdline.contains("chromium") {
            m.chromium.add(p.pid);
        } else {
            m.other.add(p.pid);
        }
    }
    Ok(m)
}

// ---------------------------------------------------------------------------------------------
// Machine facts.

/// The first line of a command's stdout, or of its stderr when stdout is empty.
fn command_line(program: &str, args: &[&str]) -> String {
    let Ok(out) = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
    else {
        return "unavailable".into();
    };
    let text = if out.stdout.is_empty() {
        out.stderr
    } else {
        out.stdout
    };
    String::from_utf8_lossy(&text)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.contains("unexpected operator"))
        .unwrap_or("unavailable")
        .to_string()
}

/// `package version` lines from dpkg, for the tools this bench runs.
fn package_versions(packages: &[&str]) -> String {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Package} ${Version}\\n"])
        .args(packages)
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) if !o.stdout.is_empty() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .collect::<Vec<_>>()
            .join(", "),
        _ => "unavailable".into(),
    }
}

fn fs_type(path: &Path) -> Option<String> {
    let out = Command::new("df")
        .args(["--output=fstype"])
        .arg(path)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines().nth(1).map(|l| l.trim().to_string())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn nproc() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Report.

fn row_ms(name: &str, s: &Summary, extra: &str) {
    println!(
        "| {name} | {} | {:.2} | {:.2} | {extra} |",
        s.n,
        ms(s.p50),
        ms(s.p90)
    );
}

fn print_local(r: &ObserveRuns) {
    let obs = summarize(&r.observe);
    let import = summarize(&r.import);
    let scrot = summarize(&r.scrot);
    println!(
        "#### Observe, guest side (display {}, 1280x800x24, Chromium on the local page; MIT-SHM: {}; screen still before the runs: {})\n",
        r.display, r.shm, r.still
    );
    println!("Interleaved: {} rounds of (observes, one `import`, one `scrot`). `scrot` writes to `{}`. Load average when these rounds began: {}.\n", r.import.len(), r.scrot_dir, r.load_observe);
    println!("| measure | runs | p50 ms | p90 ms | PNG KiB (median) | p50 / observe p50 |");
    println!("|---|---|---|---|---|---|");
    let png = |v: &[usize]| kib(median_usize(v));
    row_ms(
        "`Capturer::observe` of the still screen (capture, compared with the last frame: its PNG and id are reused; cursor; active window). A changed screen adds `encode_png` and `frame_id` (steps below)",
        &obs,
        &format!("{:.0} | 1.00", png(&r.observe_png)),
    );
    row_ms(
        "`import -window root png:-` (process, stdout piped)",
        &import,
        &format!(
            "{:.0} | **{:.1}×**",
            png(&r.import_png),
            ratio(import.p50, obs.p50)
        ),
    );
    row_ms(
        "`scrot -o -z <tmpfs>/shot.png` (process)",
        &scrot,
        &format!(
            "{:.0} | **{:.1}×**",
            png(&r.scrot_png),
            ratio(scrot.p50, obs.p50)
        ),
    );
    println!();
    println!(
        "Where observe's time goes (its steps timed one by one, in the same rounds, {} runs):\n",
        r.capture.len()
    );
    println!("| step | runs | p50 ms | p90 ms | share of observe p50 |");
    println!("|---|---|---|---|---|");
    for (name, v) in [
        ("`Capturer::capture` (SHM GetImage + BGRX→RGB)", &r.capture),
        ("`encode_png` (fdeflate fast, Sub filter)", &r.encode),
        ("`frame_id` (SHA-256 of the PNG)", &r.hash),
        ("`Capturer::cursor` (QueryPointer round trip)", &r.cursor),
        (
            "`Capturer::active_window` (property and title round trips)",
            &r.window,
        ),
    ] {
        let s = summarize(v);
        row_ms(name, &s, &format!("{:.0}%", 100.0 * ratio(s.p50, obs.p50)));
    }
    println!();

    let click = summarize(&r.click);
    let xdo = summarize(&r.xdotool);
    println!("#### One click through XTEST (interleaved rounds of clicks, one `xdotool`, one `true`; a blank spot of the page)\n");
    println!(
        "Each round: back-to-back clicks, each followed at once by one bare X round trip on the capturer's connection (the floor under any request that waits for the server); then as many isolated clicks and isolated round trips, each after a pause without input; then one `xdotool click 1` and one `true`. Load average when these rounds began: {}.\n",
        r.load_click
    );
    let iso = summarize(&r.click_isolated);
    let row = |name: &str, v: &[Duration]| {
        let x = summarize(v);
        println!(
            "| {name} | {} | {:.0} | {:.0} | {:.2}× |",
            x.n,
            us(x.p50),
            us(x.p90),
            ratio(x.p50, click.p50)
        );
    };
    println!("| measure | runs | p50 µs | p90 µs | p50 / back-to-back click p50 |");
    println!("|---|---|---|---|---|");
    row(
        "`Input::click` + `Input::finish` back to back (move + press + release + GetInputFocus round trip)",
        &r.click,
    );
    row(
        "(floor) one X round trip right after each back-to-back click: `Capturer::cursor` (QueryPointer)",
        &r.round_trip,
    );
    row(
        &format!(
            "`Input::click` + `Input::finish` isolated ({} ms without input before it)",
            ISOLATION.as_millis()
        ),
        &r.click_isolated,
    );
    row(
        "(floor) one X round trip, isolated the same way",
        &r.round_trip_isolated,
    );
    row(
        "`Input::click` + `Input::finish` isolated, on the same display before Chromium started (no client to react)",
        &r.click_empty,
    );
    println!(
        "| `xdotool click 1` (process) | {} | {:.0} | {:.0} | **{:.0}×** (isolated click: **{:.0}×**) |",
        xdo.n,
        us(xdo.p50),
        us(xdo.p90),
        ratio(xdo.p50, click.p50),
        ratio(xdo.p50, iso.p50)
    );
    let spawn = summarize(&r.spawn);
    println!(
        "| (floor) spawning `true` with the same environment | {} | {:.0} | {:.0} | {:.0}× |",
        spawn.n,
        us(spawn.p50),
        us(spawn.p90),
        ratio(spawn.p50, click.p50)
    );
    println!();

    let per_action = summarize(&r.batch_per_action);
    let once = summarize(&r.batch_once);
    println!("#### A batch of {BATCH} clicks (blank spot of the page; interleaved, each batch after {} ms without input)\n", ISOLATION.as_millis());
    println!("Load average when these rounds began: {}.\n", r.load_batch);
    println!("| batch | runs | p50 µs | p90 µs | p50 / one sync per action |");
    println!("|---|---|---|---|---|");
    println!(
        "| one sync per action (`Input::finish` after each click: every action before issue 17) | {} | {:.0} | {:.0} | 1.00× |",
        per_action.n,
        us(per_action.p50),
        us(per_action.p90)
    );
    println!(
        "| one sync per batch (`Input::finish` once; it made {} sync) | {} | {:.0} | {:.0} | **{:.2}×** |",
        r.batch_syncs,
        once.n,
        us(once.p50),
        us(once.p90),
        ratio(once.p50, per_action.p50)
    );
    println!();

    let total = summarize(&r.settle_total);
    let first = summarize(&r.first_damage);
    let quiet = settle::DEFAULT_QUIET;
    let late = r.first_damage.iter().filter(|d| **d > quiet).count();
    println!("#### Settling after a click on the counter bar (as `act`: `Settler::arm`, click, `Input::finish`, `Settler::wait_after_input`)\n");
    println!(
        "Each run after {} ms without input; the settler's round trips per run: {}. Load average when these rounds began: {}.\n",
        ISOLATION.as_millis(),
        r.settle_arms,
        r.load_settle
    );
    println!("| measure | runs | p50 ms | p90 ms | max ms |");
    println!("|---|---|---|---|---|");
    println!(
        "| arm + click + sync + settle | {} | {:.1} | {:.1} | {:.1} |",
        total.n,
        ms(total.p50),
        ms(total.p90),
        ms(total.max)
    );
    println!(
        "| from the start of the wait to Chromium's first damage | {} | {:.1} | {:.1} | {:.1} |",
        first.n,
        ms(first.p50),
        ms(first.p90),
        ms(first.max)
    );
    println!();
    println!(
        "First damage later than the {} ms quiet period (the old settle, whose quiet period began at once, returned before these draws): **{late} of {}**. No damage within the {} ms bound: {} of {}.\n",
        quiet.as_millis(),
        total.n,
        settle::DEFAULT_FIRST_DAMAGE.as_millis(),
        r.no_damage,
        total.n
    );
}

fn print_starts(kinds: &[KindStarts; 2], api: &ApiRuns) {
    println!("#### Desktop cold start: `XServer::start` then `Browser::start` until CDP answers `/json/version`\n");
    println!("Each run starts both and stops both (CDP `Browser.close`, then the X server's SIGTERM) before the next; runs alternate between Xvnc (the desktops' server) and Xvfb (the server desktops had before: the anchor). Page cache warm (Chromium's files were read by earlier runs).\n");
    println!("| measure | runs | p50 ms | p90 ms | min ms | max ms |");
    println!("|---|---|---|---|---|---|");
    let row = |name: &str, v: &[Duration]| {
        let s = summarize(v);
        println!(
            "| {name} | {} | {:.0} | {:.0} | {:.0} | {:.0} |",
            s.n,
            ms(s.p50),
            ms(s.p90),
            ms(s.min),
            ms(s.max)
        );
    };
    for k in kinds {
        let x = k.kind.program();
        row(
            &format!("**fresh profile: {x} + Chrome until CDP answers**"),
            &k.fresh.total,
        );
        row(
            &format!("… of which `XServer::start` of {x} (until `-displayfd` answers)"),
            &k.fresh.xserver,
        );
        row("… of which `Browser::start`", &k.fresh.browser);
        row(
            "… … of which Chrome spawn → CDP answers (`Browser::startup_time`)",
            &k.fresh.chrome,
        );
        row(
            &format!("**warm profile: {x} + Chrome until CDP answers**"),
            &k.warm.total,
        );
        row(
            &format!("… of which `XServer::start` of {x}"),
            &k.warm.xserver,
        );
        row("… of which `Browser::start`", &k.warm.browser);
        row(
            &format!("stop (Browser.close + {x} stop), fresh runs"),
            &k.fresh.stop,
        );
    }
    row(
        "through the API: `screens/<bot>/ensure` of a new bot (Xvnc; fresh profile; + 4 X clients, lease check, tunnel), one at a time with earlier desktops live",
        &api.ensure_new,
    );
    row(
        "… of which Chrome spawn → CDP answers (guest log `startup_ms`)",
        &api.guest_chrome,
    );
    println!(
        "| through the API: first `ensure` on the computer | 1 | {:.0} | | | |",
        ms(api.ensure_first)
    );
    println!();
    println!("X server memory once Chrome answers CDP (fresh profile, Chrome on its new tab page; median over the fresh runs):\n");
    println!("| server | runs | VmRSS MiB | PSS MiB |");
    println!("|---|---|---|---|");
    for k in kinds {
        println!(
            "| {} | {} | {:.1} | {:.1} |",
            k.kind.program(),
            k.fresh.rss_kb.len(),
            median_usize(&k.fresh.rss_kb) as f64 / 1024.0,
            median_usize(&k.fresh.pss_kb) as f64 / 1024.0,
        );
    }
    println!();
}

fn print_api(api: &ApiRuns, guest_observe_p50: Duration) {
    println!("#### Observe through the API (`POST /v1/computers/<id>/screens/<bot>/observe`, release binaries, QUIC tunnel on loopback)\n");
    println!("Time from sending the request to the parsed JSON response (base64 decoding of the image not included). Interleaved rounds: an act clicks the page's counter bar (timed apart, below), one observe of the changed frame, one observe of the same frame again; the two clients take turns by round.\n");
    println!("| path | client | runs | p50 ms | p90 ms | p50 / guest-side observe p50 |");
    println!("|---|---|---|---|---|---|");
    for (path, runs) in [
        (
            format!(
                "changed frame (PNG median {:.0} KiB, sent base64)",
                kib(median_usize(&api.changed_png))
            ),
            &api.changed,
        ),
        (
            "unchanged frame, right after the changed one (image omitted; the guest captures and compares, reusing the last PNG)"
                .to_string(),
            &api.unchanged,
        ),
    ] {
        for via in [Via::Shipped, Via::NoDelay] {
            let s = summarize(&runs[via_index(via)]);
            println!(
                "| {path} | {} | {} | {:.2} | {:.2} | {:.1}× |",
                via.name(),
                s.n,
                ms(s.p50),
                ms(s.p90),
                ratio(s.p50, guest_observe_p50)
            );
        }
    }
    println!();
    if api.changed_but_unchanged + api.unchanged_but_changed > 0 {
        println!(
            "Excluded: {} \"changed\" observations that came back unchanged, {} \"unchanged\" ones that came back with an image.\n",
            api.changed_but_unchanged, api.unchanged_but_changed
        );
    }

    println!("#### Acts through the API (`POST .../act`, shipped client, default settle: the first damage after the input within {} ms, then {} ms without damage, at most {} ms)\n",
        settle::DEFAULT_FIRST_DAMAGE.as_millis(), settle::DEFAULT_QUIET.as_millis(), settle::DEFAULT_CAP.as_millis());
    println!("| act | runs | p50 ms | p90 ms | returned before Chromium drew (the observe after it came back unchanged) |");
    println!("|---|---|---|---|---|");
    let act = summarize(&api.act);
    println!(
        "| one click on the counter bar (before each changed observe above) | {} | {:.1} | {:.1} | {} of {} |",
        act.n,
        ms(act.p50),
        ms(act.p90),
        api.changed_but_unchanged,
        act.n
    );
    let batch = summarize(&api.act_batch);
    println!(
        "| a batch of {BATCH}: {} moves over a blank spot, then a click on the counter bar | {} | {:.1} | {:.1} | {} of {} |",
        BATCH - 1,
        batch.n,
        ms(batch.p50),
        ms(batch.p90),
        api.batch_before_draw,
        batch.n
    );
    let blank = summarize(&api.act_blank);
    let mut settled = api.act_blank_settled.clone();
    settled.sort_unstable();
    println!(
        "| one click on a blank spot (nothing draws: the settle waits out its bound; `settledMs` median {}) | {} | {:.1} | {:.1} | (nothing to draw) |",
        settled.get(settled.len().saturating_sub(1) / 2).copied().unwrap_or_default(),
        blank.n,
        ms(blank.p50),
        ms(blank.p90),
    );
    println!();
}

fn mib(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

fn print_memory(api: &ApiRuns) {
    println!("#### Memory with live desktops (through the API; each desktop's bot opened the page and observed it)\n");
    println!("| live desktops | guest VmRSS MiB | guest anon / file / shmem MiB | guest PSS MiB | Xvnc: n, RSS sum, PSS sum MiB | Chromium: n, RSS sum, PSS sum MiB | other children | Xvnc + Chromium PSS per desktop MiB |");
    println!("|---|---|---|---|---|---|---|---|");
    for m in &api.mem {
        let per = if m.desktops == 0 {
            "".to_string()
        } else {
            format!(
                "{:.0}",
                mib(m.xserver.pss_kb + m.chromium.pss_kb) / m.desktops as f64
            )
        };
        println!(
            "| {} | {:.1} | {:.1} / {:.1} / {:.1} | {:.1} | {}, {:.0}, {:.0} | {}, {:.0}, {:.0} | {} | {per} |",
            m.desktops,
            mib(m.guest_rss_kb),
            mib(m.guest_anon_kb),
            mib(m.guest_file_kb),
            mib(m.guest_shmem_kb),
            mib(m.guest_pss_kb),
            m.xserver.count,
            mib(m.xserver.rss_kb),
            mib(m.xserver.pss_kb),
            m.chromium.count,
            mib(m.chromium.rss_kb),
            mib(m.chromium.pss_kb),
            m.other.count,
        );
    }
    println!();
    println!(
        "RSS sums count pages shared between Chromium processes once per process; PSS splits them. Computer stop through the API (guest SIGTERM, every Chrome closed through CDP) took {:.0} ms; desktop processes still alive afterwards (killed): {}; X locks or sockets left: {}.\n",
        ms(api.stop),
        api.leftovers,
        if api.locks_left.is_empty() {
            "none".to_string()
        } else {
            api.locks_left.join(", ")
        }
    );
}

fn print_goals(local: &ObserveRuns, kinds: &[KindStarts; 2]) {
    let obs = summarize(&local.observe);
    let import = summarize(&local.import);
    let click = summarize(&local.click);
    let iso = summarize(&local.click_isolated);
    let [xvnc, xvfb] = kinds;
    let start = summarize(&xvnc.fresh.total);
    let anchor_start = summarize(&xvfb.fresh.total);
    let (rss, anchor_rss) = (
        median_usize(&xvnc.fresh.rss_kb),
        median_usize(&xvfb.fresh.rss_kb),
    );
    let yes = |b: bool| if b { "met" } else { "**missed**" };
    println!("#### Goals (issue 3)\n");
    println!("| goal | measured | verdict |");
    println!("|---|---|---|");
    println!(
        "| observe p50 ≤ 10 ms, guest side | {:.2} ms | {} |",
        ms(obs.p50),
        yes(obs.p50 <= Duration::from_millis(10))
    );
    let x = ratio(import.p50, obs.p50);
    println!(
        "| observe ≥ 20× faster than `import` (p50) | {x:.1}× | {} |",
        yes(x >= 20.0)
    );
    println!(
        "| click ≤ 1 ms (p50), isolated | {:.0} µs | {} |",
        us(iso.p50),
        yes(iso.p50 <= Duration::from_millis(1))
    );
    println!(
        "| click ≤ 1 ms (p50), back to back | {:.0} µs | {} |",
        us(click.p50),
        yes(click.p50 <= Duration::from_millis(1))
    );
    println!(
        "| cold start ≤ 1.5 s (p50, fresh profile, Xvnc) | {:.0} ms | {} |",
        ms(start.p50),
        yes(start.p50 <= Duration::from_millis(1500))
    );
    println!(
        "| cold start on Xvnc no worse than on Xvfb (p50, fresh profile; issue 17) | {:.0} ms vs {:.0} ms ({:.2}×) | {} |",
        ms(start.p50),
        ms(anchor_start.p50),
        ratio(start.p50, anchor_start.p50),
        yes(start.p50 <= anchor_start.p50)
    );
    println!(
        "| X server RSS per desktop no worse than Xvfb's (median, Chrome up; issue 17) | {:.1} MiB vs {:.1} MiB | {} |",
        rss as f64 / 1024.0,
        anchor_rss as f64 / 1024.0,
        yes(rss <= anchor_rss)
    );
    println!();
}

#[tokio::main]
async fn main() -> Result<()> {
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
