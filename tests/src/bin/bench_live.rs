//! `bench_live`: the live screen and terminal benchmarks of issues 5 and 17, in one run.
//!
//! Each measurement has an anchor taken in the same run, and the ratio is printed:
//!
//! 1. live-view latency: a key injected into a display (`xdotool key`, its exit taken as the
//!    moment of the change) toggles the colour of the whole page; the time to the first byte of
//!    the framebuffer update that carries it, at an RFB client
//!    - through the control plane's websocket and the guest's gateway (view capability) to the
//!      bot's Xvnc (the desktops' server since issue 17);
//!    - on the same Xvnc's own unix socket, on the same change (what the server alone costs);
//!    - the anchor, "x11vnc on Xvfb" (how desktops were served before): an Xvfb and a Chromium
//!      of the bench's own on the same page, with an x11vnc started with the flags the guest gave
//!      a view server, over its unix socket (no relay: the anchor is favoured); runs alternate
//!      between the bot's display and the anchor's;
//! 2. bytes per second received while the page scrolls itself for a few seconds, the three
//!    paths in turn: with Raw encoding (the bytes count frames times area, not a codec), then
//!    with ZRLE and CopyRect (what a real viewer asks for);
//! 3. bytes received while the screen is still (a client keeping an incremental request
//!    outstanding for a few seconds after the screen settled), the three paths;
//! 4. memory per desktop: RSS and PSS of the bot's Xvnc against the anchor's Xvfb plus its
//!    x11vnc, each with a viewer connected and the same page shown;
//! 5. terminal throughput: `head -c 200M /dev/zero | base64` through the terminal websocket,
//!    against the same pipeline through the exec API (NDJSON stream of the same computer) and on
//!    a local PTY read by a tight loop (the PTY's own ceiling on this machine), with the number
//!    of websocket messages and the CPU seconds of the control plane, the guest and the bench;
//! 6. keystroke echo latency: one key through the terminal websocket until its echo comes back,
//!    against the same key into a local PTY running the same shell.
//!
//! Timings are printed, never asserted. Usage: `target/release/bench_live [--latency-runs N]
//! [--scroll-secs S] [--still-secs S] [--terminal-mib M] [--echo-runs N] [--terminal-only 1]`
//! (the last skips 1 to 4).
//!
//! `--smoke`: a few runs of every part, for CI (`scripts/bench-smoke.sh`); explicit options win.

use anyhow::{anyhow, bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use gateway_proto::termframe::encode_input;
use http_body_util::BodyExt;
use hyper::Method;
use std::process::Stdio;
use std::time::Duration;
use tests::anchor::{X11vnc, XvfbDesktop};
use tests::bench::{ms, size};
use tests::fixture::Fixture;
use tests::live::{connect, read_until, RawIo, Rfb, RfbIo, WsBytes};
use tests::procstat::{cpu_s, proc_kb};
use tests::World;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

const PAGE: &str = r#"<html><head><style>
body { margin: 0; }
.row { height: 40px; font: 24px sans-serif; }
</style></head><body>
<div id="rows"></div>
<script>
const rows = document.getElementById('rows');
for (let i = 0; i < 3000; i++) {
  const d = document.createElement('div');
  d.className = 'row';
  d.style.background = `hsl(${(i * 37) % 360}, 70%, 60%)`;
  d.textContent = 'row ' + i + ' '.repeat(4) + 'scrolling workload';
  rows.appendChild(d);
}
let dark = false;
document.addEventListener('keydown', (e) => {
  if (e.key === 't') {
    dark = !dark;
    document.body.style.filter = dark ? 'invert(1)' : 'none';
  }
  if (e.key === 's') {
    const until = performance.now() + Number(location.hash.slice(1) || 5000);
    const step = () => { window.scrollBy(0, 23); if (performance.now() < until) requestAnimationFrame(step); };
    requestAnimationFrame(step);
  }
});
</script></body></html>"#;

struct Args {
    latency_runs: usize,
    scroll_secs: u64,
    still_secs: u64,
    terminal_mib: u64,
    echo_runs: usize,
    terminal_only: bool,
}

fn args() -> Result<Args> {
    let mut a = Args {
        latency_runs: size(30, 3),
        scroll_secs: size(5, 1),
        still_secs: size(5, 1),
        terminal_mib: size(200, 4),
        echo_runs: size(50, 5),
        terminal_only: false,
    };
    let mut it = tests::bench::args();
    while let Some(flag) = it.next() {
        let v = it.next().ok_or_else(|| anyhow!("{flag} needs a value"))?;
        match flag.as_str() {
            "--latency-runs" => a.latency_runs = v.parse()?,
            "--scroll-secs" => a.scroll_secs = v.parse()?,
            "--still-secs" => a.still_secs = v.parse()?,
            "--terminal-mib" => a.terminal_mib = v.parse()?,
            "--echo-runs" => a.echo_runs = v.parse()?,
            "--terminal-only" => a.terminal_only = v != "0",
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(a)
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.9), v.iter().sum::<f64>() / v.len() as f64)
}

/// A `| name | p50 | p90 | mean |` row of a [`stats`] triple.
fn stats_row(name: &str, s: (f64, f64, f64), decimals: usize) {
    println!(
        "| {name} | {:.*} | {:.*} | {:.*} |",
        decimals, s.0, decimals, s.1, decimals, s.2
    );
}

/// `a / b`, statistic by statistic.
fn ratio(a: (f64, f64, f64), b: (f64, f64, f64)) -> (f64, f64, f64) {
    (a.0 / b.0, a.1 / b.1, a.2 / b.2)
}

/// A display, reached like the guest reaches it: the bot's, or the anchor's.
struct Display {
    /// `DISPLAY` (`:101`).
    display: String,
    xauthority: String,
}

impl Display {
    async fn xdotool(&self, args: &[&str]) -> Result<()> {
        let status = tokio::process::Command::new("xdotool")
            .args(args)
            .env("DISPLAY", &self.display)
            .env("XAUTHORITY", &self.xauthority)
            .status()
            .await?;
        if !status.success() {
            bail!("xdotool {args:?} on {} failed", self.display);
        }
        Ok(())
    }

    async fn key(&self, key: &str) -> Result<()> {
        self.xdotool(&["key", key]).await
    }
}

type Direct = Rfb<RawIo<tokio::net::UnixStream>>;

async fn direct(socket: tokio::net::UnixStream) -> Result<Direct> {
    let mut rfb = Rfb::handshake(RawIo(socket)).await?;
    rfb.sync().await?;
    Ok(rfb)
}

/// The time of the first update after an injected change: the first update message counts, and
/// updates are read on until `min_bytes` of pixels came (a change can arrive in several
/// messages) or 10 s pass.
async fn first_update<I: RfbIo>(rfb: &mut Rfb<I>, min_bytes: u64) -> Result<Instant> {
    let before = rfb.pixel_bytes;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut first = None;
    while rfb.pixel_bytes - before < min_bytes {
        if rfb.read_update_until(deadline).await?.is_none() {
            break;
        }
        first = first.or(rfb.last_update_at);
        rfb.request_update(true).await?;
    }
    first.ok_or_else(|| anyhow!("no update within 10 s of the change"))
}

/// Reads updates until `quiet` passes without one, for at most 3 s (a screen that never
/// settles, say a blinking caret, must not stall the run).
async fn drain<I: RfbIo>(rfb: &mut Rfb<I>, quiet: Duration) -> Result<()> {
    let limit = Instant::now() + Duration::from_secs(3);
    while Instant::now() < limit
        && rfb
            .read_update_until((Instant::now() + quiet).min(limit))
            .await?
            .is_some()
    {
        rfb.request_update(true).await?;
    }
    Ok(())
}

/// Latency samples in ms: (gateway, Xvnc direct) on the bot's display, anchor on its own.
async fn latency(
    bot: &Display,
    anchor: &Display,
    gw: &mut Rfb<WsBytes>,
    xvnc: &mut Direct,
    x11vnc: &mut Direct,
    runs: usize,
) -> Result<[Vec<f64>; 3]> {
    let mut out = [Vec::new(), Vec::new(), Vec::new()];
    gw.request_update(true).await?;
    xvnc.request_update(true).await?;
    x11vnc.request_update(true).await?;
    // A toggled page repaints at least a quarter of the screen.
    let min = 1280 * 200 * 4;
    for run in 0..runs + 2 {
        drain(gw, Duration::from_millis(300)).await?;
        drain(xvnc, Duration::from_millis(50)).await?;
        bot.key("t").await?;
        let t0 = Instant::now();
        let (a, b) = tokio::join!(first_update(gw, min), first_update(xvnc, min));
        let (a, b) = (a?, b?);
        drain(x11vnc, Duration::from_millis(300)).await?;
        anchor.key("t").await?;
        let t1 = Instant::now();
        let c = first_update(x11vnc, min).await?;
        // The first two changes warm every path up and are not counted.
        if run >= 2 {
            out[0].push(ms(a.saturating_duration_since(t0)));
            out[1].push(ms(b.saturating_duration_since(t0)));
            out[2].push(ms(c.saturating_duration_since(t1)));
        }
    }
    Ok(out)
}

/// Bytes received in `secs` of a still screen, with an incremental request outstanding the
/// whole time (after the screen has settled: 500 ms without an update).
async fn still_bytes<I: RfbIo>(rfb: &mut Rfb<I>, secs: u64) -> Result<u64> {
    rfb.request_update(true).await?;
    drain(rfb, Duration::from_millis(500)).await?;
    let before = rfb.received;
    let end = Instant::now() + Duration::from_secs(secs);
    while rfb.read_update_until(end).await?.is_some() {
        rfb.request_update(true).await?;
    }
    Ok(rfb.received - before)
}

async fn scroll_rate<I: RfbIo>(d: &Display, rfb: &mut Rfb<I>, secs: u64) -> Result<(f64, f64)> {
    rfb.request_update(true).await?;
    drain(rfb, Duration::from_millis(300)).await?;
    // Every byte on the wire (headers included), as a viewer's link carries them.
    let start_bytes = rfb.received;
    let mut updates = 0u64;
    d.key("s").await?;
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs(secs);
    while rfb.read_update_until(end).await?.is_some() {
        updates += 1;
        rfb.request_update(true).await?;
    }
    let secs = t0.elapsed().as_secs_f64();
    // Let the page stop scrolling before the next run.
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok((
        (rfb.received - start_bytes) as f64 / secs,
        updates as f64 / secs,
    ))
}

/// The processes whose CPU time a throughput run reports: control plane, guest, this bench.
#[derive(Clone, Copy)]
struct Pids([u32; 3]);

impl Pids {
    fn cpu(&self) -> [f64; 3] {
        self.0.map(cpu_s)
    }
}

/// One throughput run.
struct Throughput {
    bytes: u64,
    secs: f64,
    /// Websocket messages or PTY reads that carried the bytes (None: not counted).
    pieces: Option<u64>,
    /// CPU seconds of the control plane, the guest and the bench during the run.
    cpu: [f64; 3],
}

impl Throughput {
    fn mb_s(&self) -> f64 {
        self.bytes as f64 / self.secs / 1e6
    }

    fn row(&self, path: &str) -> String {
        let pieces = self.pieces.map_or("".to_string(), |n| {
            format!("{n} ({:.0} B)", self.bytes as f64 / n.max(1) as f64)
        });
        format!(
            "| {path} | {} | {pieces} | {:.1} | {:.1} / {:.1} / {:.1} |",
            self.bytes,
            self.mb_s(),
            self.cpu[0],
            self.cpu[1],
            self.cpu[2]
        )
    }
}

fn cpu_since(pids: Pids, before: [f64; 3]) -> [f64; 3] {
    let after = pids.cpu();
    [0, 1, 2].map(|i| after[i] - before[i])
}

async fn terminal_throughput(w: &World, term: &str, mib: u64, pids: Pids) -> Result<Throughput> {
    let mut ws = connect(&w.http, term).await?;
    let mut out = Vec::new();
    ws.send(Message::Binary(
        encode_input(b"stty -echo; echo READY-$((1+1))\r").into(),
    ))
    .await?;
    read_until(&mut ws, &mut out, "READY-2", Duration::from_secs(30)).await?;
    let cmd = format!("head -c {mib}M /dev/zero | base64; echo DONE-$((40+2))\r");
    let cpu0 = pids.cpu();
    ws.send(Message::Binary(encode_input(cmd.as_bytes()).into()))
        .await?;
    let t0 = Instant::now();
    let mut bytes = 0u64;
    let mut messages = 0u64;
    let mut tail: Vec<u8> = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(600), ws.next()).await? {
            Some(Ok(Message::Binary(b))) => {
                bytes += b.len() as u64;
                messages += 1;
                tail.extend_from_slice(&b);
                if tail.len() > 64 {
                    tail.drain(..tail.len() - 64);
                }
                if String::from_utf8_lossy(&tail).contains("DONE-42") {
                    break;
                }
            }
            Some(Ok(_)) => {}
            other => bail!("terminal ended: {other:?}"),
        }
    }
    Ok(Throughput {
        bytes,
        secs: t0.elapsed().as_secs_f64(),
        pieces: Some(messages),
        cpu: cpu_since(pids, cpu0),
    })
}

async fn exec_throughput(w: &World, c: &str, mib: u64, pids: Pids) -> Result<Throughput> {
    let spec = serde_json::json!({
        "argv": ["sh", "-c", format!("head -c {mib}M /dev/zero | base64")],
    });
    let cpu0 = pids.cpu();
    let t0 = Instant::now();
    let resp = w
        .client
        .send(
            Method::POST,
            &format!("/v1/computers/{c}/exec"),
            Some("application/json"),
            None,
            control_plane::client::full_body(serde_json::to_vec(&spec)?),
        )
        .await?;
    let mut body = resp.into_body();
    let mut bytes = 0u64;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            bytes += data.len() as u64;
        }
    }
    Ok(Throughput {
        bytes,
        secs: t0.elapsed().as_secs_f64(),
        pieces: None,
        cpu: cpu_since(pids, cpu0),
    })
}

/// The PTY's own ceiling: the same pipeline on a local PTY (openpty, default line discipline,
/// so newlines become CRLF as in the guest's terminal), its master read by a thread in a tight
/// loop with a 64 KiB buffer, as the guest's terminal reads its PTY.
async fn local_pty_throughput(mib: u64, pids: Pids) -> Result<Throughput> {
    use std::io::Read;
    let pty = nix::pty::openpty(None, None).context("openpty")?;
    let slave = pty.slave;
    let cpu0 = pids.cpu();
    let t0 = Instant::now();
    let mut child = tokio::process::Command::new("sh")
        .args(["-c", &format!("head -c {mib}M /dev/zero | base64")])
        .stdin(Stdio::from(slave.try_clone()?))
        .stdout(Stdio::from(slave.try_clone()?))
        .stderr(Stdio::from(slave))
        .kill_on_drop(true)
        .spawn()
        .context("start the local pipeline")?;
    let mut master = std::fs::File::from(pty.master);
    let (bytes, reads) = tokio::task::spawn_blocking(move || {
        let mut buf = vec![0u8; 64 * 1024];
        let (mut bytes, mut reads) = (0u64, 0u64);
        // EIO once the pipeline (the slave's last holder) is gone.
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            bytes += n as u64;
            reads += 1;
        }
        (bytes, reads)
    })
    .await?;
    let secs = t0.elapsed().as_secs_f64();
    child.wait().await?;
    Ok(Throughput {
        bytes,
        secs,
        pieces: Some(reads),
        cpu: cpu_since(pids, cpu0),
    })
}

async fn terminal_echo(w: &World, term: &str, runs: usize) -> Result<Vec<f64>> {
    let mut ws = connect(&w.http, term).await?;
    let mut out = Vec::new();
    ws.send(Message::Binary(
        encode_input(b"echo READY-$((1+1))\r").into(),
    ))
    .await?;
    read_until(&mut ws, &mut out, "READY-2", Duration::from_secs(30)).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut v = Vec::new();
    for i in 0..runs {
        let ch = b'a' + (i % 26) as u8;
        let t0 = Instant::now();
        ws.send(Message::Binary(encode_input(&[ch]).into())).await?;
        loop {
            match tokio::time::timeout(Duration::from_secs(10), ws.next()).await? {
                Some(Ok(Message::Binary(b))) if b.contains(&ch) => break,
                Some(Ok(_)) => {}
                other => bail!("terminal ended: {other:?}"),
            }
        }
        v.push(ms(t0.elapsed()));
        // Erase it again so the line does not grow.
        ws.send(Message::Binary(encode_input(b"\x7f").into()))
            .await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
        drain_ws(&mut ws).await;
    }
    Ok(v)
}

async fn drain_ws(ws: &mut tests::live::Ws) {
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(30), ws.next()).await {}
}

/// The anchor of the echo: the same key into a local PTY (openpty) running the same shell.
async fn local_echo(runs: usize) -> Result<Vec<f64>> {
    let pty = nix::pty::openpty(None, None).context("openpty")?;
    let slave = pty.slave;
    let _child = tokio::process::Command::new("bash")
        .args(["--norc", "--noprofile", "-i"])
        .env("PS1", "$ ")
        .stdin(Stdio::from(slave.try_clone()?))
        .stdout(Stdio::from(slave.try_clone()?))
        .stderr(Stdio::from(slave))
        .kill_on_drop(true)
        .spawn()
        .context("start a local bash")?;
    let master = std::fs::File::from(pty.master);
    let mut stdin = tokio::fs::File::from_std(master.try_clone()?);
    let mut stdout = tokio::fs::File::from_std(master);
    let mut buf = vec![0u8; 65536];
    stdin.write_all(b"echo READY-$((1+1))\n").await?;
    stdin.flush().await?;
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("READY-2") {
        let n = tokio::time::timeout(Duration::from_secs(10), stdout.read(&mut buf)).await??;
        if n == 0 {
            bail!("local shell ended");
        }
        seen.extend_from_slice(&buf[..n]);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut v = Vec::new();
    for i in 0..runs {
        let ch = b'a' + (i % 26) as u8;
        let t0 = Instant::now();
        stdin.write_all(&[ch]).await?;
        stdin.flush().await?;
        loop {
            let n = tokio::time::timeout(Duration::from_secs(10), stdout.read(&mut buf)).await??;
            if n == 0 {
                bail!("local shell ended");
            }
            if buf[..n].contains(&ch) {
                break;
            }
        }
        v.push(ms(t0.elapsed()));
        stdin.write_all(b"\x7f").await?;
        stdin.flush().await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
        while let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(30), stdout.read(&mut buf)).await
        {
            if n == 0 {
                break;
            }
        }
    }
    Ok(v)
}

/// RSS and PSS (KiB) of processes.
fn memory(pids: &[u32]) -> (u64, u64) {
    pids.iter()
        .filter_map(|p| i32::try_from(*p).ok())
        .fold((0, 0), |(rss, pss), p| {
            (
                rss + proc_kb(p, "status", "VmRSS:"),
                pss + proc_kb(p, "smaps_rollup", "Pss:"),
            )
        })
}

/// The pid an X lock file names.
fn lock_pid(display: u64) -> Result<u32> {
    let text = std::fs::read_to_string(format!("/tmp/.X{display}-lock"))?;
    Ok(text.trim().parse()?)
}

/// Parts 1 to 4: the bot's Xvnc through the gateway and directly, against x11vnc on the
/// anchor's Xvfb.
async fn live_screens(
    a: &Args,
    w: &World,
    view: &str,
    bot: &Display,
    xvnc_socket: &std::path::Path,
    anchor_desktop: &XvfbDesktop,
    num: u64,
) -> Result<()> {
    let anchor = Display {
        display: anchor_desktop.display_env(),
        xauthority: anchor_desktop.xauthority().display().to_string(),
    };
    // The anchor's page takes the keyboard focus, as the bot's did.
    tokio::time::sleep(Duration::from_secs(2)).await;
    anchor
        .xdotool(&["mousemove", "640", "400", "click", "1"])
        .await?;
    let x11vnc = X11vnc::start(&anchor.display, anchor_desktop.xauthority()).await?;
    let mut gw = Rfb::handshake(WsBytes::new(connect(&w.http, view).await?)).await?;
    gw.sync().await?;
    let mut xvnc = direct(tokio::net::UnixStream::connect(xvnc_socket).await?).await?;
    let mut old = direct(x11vnc.connect().await?).await?;

    let [g, x, o] = latency(bot, &anchor, &mut gw, &mut xvnc, &mut old, a.latency_runs).await?;
    let (gs, xs, os) = (stats(g), stats(x), stats(o));
    println!(
        "### Live-view latency: injected change to the first update byte ({} runs; the gateway and Xvnc-direct clients on the same change, the anchor on its own display in alternation)\n",
        a.latency_runs
    );
    println!("| path | p50 ms | p90 ms | mean ms |\n|---|---|---|---|");
    stats_row(
        "gateway: websocket → control plane → QUIC → guest filter → Xvnc",
        gs,
        1,
    );
    stats_row(
        "Xvnc over its own unix socket (same display, same change)",
        xs,
        1,
    );
    stats_row(
        "anchor: x11vnc on Xvfb over its unix socket (the guest's former view flags, same page)",
        os,
        1,
    );
    stats_row("ratio gateway / anchor", ratio(gs, os), 2);
    stats_row("ratio Xvnc direct / anchor", ratio(xs, os), 2);
    println!();

    // Raw first (bytes count frames times area, whatever the codec), then what a real viewer
    // asks for (ZRLE with CopyRect: a scroll can be a copy plus a new strip).
    let mut rates = Vec::new();
    for (name, encodings) in [("Raw", &[0][..]), ("ZRLE + CopyRect", &[16, 1, 0][..])] {
        for rfb_io in [&mut xvnc, &mut old] {
            rfb_io.set_encodings(encodings).await?;
        }
        gw.set_encodings(encodings).await?;
        let gr = scroll_rate(bot, &mut gw, a.scroll_secs).await?;
        let xr = scroll_rate(bot, &mut xvnc, a.scroll_secs).await?;
        let or = scroll_rate(&anchor, &mut old, a.scroll_secs).await?;
        rates.push((name, gr, xr, or));
    }
    println!(
        "### Scrolling workload: framebuffer bytes per second ({} s per run, the paths in turn; the page scrolls itself 23 px per frame)\n",
        a.scroll_secs
    );
    println!("| encodings | gateway MB/s (updates/s, kB/update) | Xvnc direct | anchor x11vnc on Xvfb | ratio gateway / anchor (bytes/s) |\n|---|---|---|---|---|");
    let cell = |r: &(f64, f64)| {
        format!(
            "{:.2} ({:.1}, {:.0})",
            r.0 / 1e6,
            r.1,
            r.0 / r.1.max(f64::MIN_POSITIVE) / 1e3
        )
    };
    for (name, gr, xr, or) in &rates {
        println!(
            "| {name} | {} | {} | {} | {:.2} |",
            cell(gr),
            cell(xr),
            cell(or),
            gr.0 / or.0
        );
    }
    println!();

    let still = [
        still_bytes(&mut gw, a.still_secs).await?,
        still_bytes(&mut xvnc, a.still_secs).await?,
        still_bytes(&mut old, a.still_secs).await?,
    ];
    println!(
        "### Still screen: bytes received in {} s with an incremental update request outstanding (after 500 ms without an update)\n",
        a.still_secs
    );
    println!("| gateway (websocket) | Xvnc direct | anchor x11vnc on Xvfb |\n|---|---|---|");
    println!("| {} | {} | {} |\n", still[0], still[1], still[2]);

    let xvnc_mem = memory(&[lock_pid(num)?]);
    let anchor_mem = memory(&[anchor_desktop.pid(), x11vnc.pid()]);
    println!("### Memory per desktop: the X and RFB servers, each with one viewer connected and the page shown\n");
    println!("| servers | RSS MiB | PSS MiB |\n|---|---|---|");
    println!(
        "| Xvnc (the bot's) | {:.1} | {:.1} |",
        xvnc_mem.0 as f64 / 1024.0,
        xvnc_mem.1 as f64 / 1024.0
    );
    println!(
        "| anchor: Xvfb + x11vnc | {:.1} | {:.1} |\n",
        anchor_mem.0 as f64 / 1024.0,
        anchor_mem.1 as f64 / 1024.0
    );
    drop((gw, xvnc, old));
    x11vnc.stop().await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    tests::bench::Usage::new("the live screen and terminal, each against its anchor")
        .flag(
            "--latency-runs",
            "N",
            "measured input-to-pixel runs (default 30; smoke 3)",
        )
        .flag(
            "--scroll-secs",
            "N",
            "seconds of scrolling (default 5; smoke 1)",
        )
        .flag(
            "--still-secs",
            "N",
            "seconds of a still screen (default 5; smoke 1)",
        )
        .flag(
            "--terminal-mib",
            "N",
            "MiB through the terminal (default 200; smoke 4)",
        )
        .flag(
            "--echo-runs",
            "N",
            "keystrokes echoed (default 50; smoke 5)",
        )
        .flag(
            "--terminal-only",
            "0|1",
            "only the terminal parts (default 0)",
        )
        .check();
    let a = args()?;
    // The bench reads the bot's display and Xvnc socket from this host, so its computer is
    // not jailed (a jail's /tmp is its own).
    let mut w = World::start_with(tests::WorldOptions {
        env: vec![("RAKAZO_LOCAL_CONTAINMENT".into(), "off".into())],
        allow_warn: vec!["are not contained".into()],
        ..Default::default()
    })
    .await?;
    let site = Fixture::start().await?;
    let c = w.create_computer("ws-bench-live").await?;
    let lease = w.lease(&c, "bot-a", "run-bench").await?;
    let screen = w
        .post(
            &format!("/v1/computers/{c}/screens/bot-a/ensure"),
            serde_json::json!({ "lease": lease }),
        )
        .await?;
    let page = site.page("bench", PAGE);
    w.post(
        &format!("/v1/computers/{c}/screens/bot-a/act"),
        serde_json::json!({ "lease": lease, "actions": [
            { "type": "open", "url": format!("{page}#{}", a.scroll_secs * 1000 + 500) },
            { "type": "wait", "ms": 2000 },
            { "type": "click", "x": 640, "y": 400 }
        ]}),
    )
    .await?;
    let num = screen["display"]
        .as_u64()
        .ok_or_else(|| anyhow!("no display in {screen}"))?;
    let runtime = std::env::temp_dir().join(format!("rakazo-guest-{c}"));
    let bot = Display {
        display: format!(":{num}"),
        xauthority: runtime.join(format!("xauth-{num}")).display().to_string(),
    };
    let xvnc_socket = runtime.join(format!("rfb-{num}.sock"));
    // The run asks for a takeover so that the user may drive the terminal while it stays on.
    w.take_over_waiting_run(&c, "bot-a", &lease).await?;
    let url = |policy: &'static str| {
        let w = &w;
        let c = c.clone();
        async move {
            let v = w
                .post(
                    &format!("/v1/computers/{c}/screens/bot-a/url"),
                    serde_json::json!({ "policy": policy }),
                )
                .await?;
            Ok::<_, anyhow::Error>(v["path"].as_str().unwrap_or_default().to_string())
        }
    };
    let view = url("view").await?;
    let term = url("terminal").await?;

    println!("## Live screen and terminal (issues 5 and 17): run of `bench_live`\n");
    if !a.terminal_only {
        let anchor =
            XvfbDesktop::start(Some(format!("{page}#{}", a.scroll_secs * 1000 + 500))).await?;
        let measured = live_screens(&a, &w, &view, &bot, &xvnc_socket, &anchor, num).await;
        anchor.stop().await;
        measured?;
    }

    let guest = tests::pids_with_env("RAKAZO_COMPUTER_ID", &c)
        .first()
        .and_then(|p| u32::try_from(*p).ok())
        .unwrap_or(0);
    let pids = Pids([w.server_pid().unwrap_or(0), guest, std::process::id()]);
    let term_run = match terminal_throughput(&w, &term, a.terminal_mib, pids).await {
        Ok(v) => v,
        Err(e) => {
            // The server's reason (a rejected capability names it) helps more than a status.
            for line in w
                .log()
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .iter()
                .rev()
            {
                eprintln!("{line}");
            }
            return Err(e);
        }
    };
    let exec_run = exec_throughput(&w, &c, a.terminal_mib, pids).await?;
    let pty_run = local_pty_throughput(a.terminal_mib, pids).await?;
    println!(
        "### Terminal throughput: `head -c {}M /dev/zero | base64`\n",
        a.terminal_mib
    );
    println!(
        "| path | bytes | messages or reads (mean size) | MB/s | CPU s: control plane / guest / bench |\n|---|---|---|---|---|"
    );
    println!("{}", term_run.row("terminal websocket (PTY bytes)"));
    println!(
        "{}",
        exec_run.row("anchor: exec API of the same computer (NDJSON events over HTTP)")
    );
    println!(
        "{}",
        pty_run.row("anchor: local PTY read in a tight loop (the PTY's ceiling)")
    );
    println!(
        "| ratio terminal / exec; terminal / local PTY | | | {:.2}; {:.2} | |\n",
        term_run.mb_s() / exec_run.mb_s(),
        term_run.mb_s() / pty_run.mb_s()
    );

    let echo = stats(terminal_echo(&w, &term, a.echo_runs).await?);
    let local = stats(local_echo(a.echo_runs).await?);
    println!("### Keystroke echo ({} keys)\n", a.echo_runs);
    println!("| path | p50 ms | p90 ms | mean ms |\n|---|---|---|---|");
    stats_row("terminal websocket → guest PTY (bash)", echo, 2);
    stats_row("anchor: local PTY (openpty + bash)", local, 2);
    stats_row("ratio", ratio(echo, local), 1);
    w.end_takeover(&c, "bot-a", &lease, "failed").await?;
    let _ = w
        .client
        .json(Method::POST, &format!("/v1/computers/{c}/stop"), None)
        .await;
    Ok(())
}
