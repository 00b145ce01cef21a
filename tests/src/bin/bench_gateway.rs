//! `bench_gateway`: the guest half of the live-screen benchmarks of issues 5 and 17.
//!
//! A real desktop (Xvnc + Chromium) is served by the real `Ops` dispatch and screen gateway;
//! the bench plays the control plane over real QUIC on loopback (the production tunnel TLS and
//! transport settings: `TunnelIdentity::server_config` and `guest_agent::tunnel::client_config`),
//! opening `Connect` streams as the control plane does. Each measure is taken against an anchor
//! in the same run, interleaved round by round:
//!
//! 1. live-view latency: an X drawing (a filled rectangle in a window covering the screen) to the
//!    first FramebufferUpdate at an RFB client that had an incremental request outstanding,
//!    through the gateway (QUIC + relay + view filter) to the desktop's Xvnc, vs Xvnc's own unix
//!    socket reached directly (those two clients wait for the same drawing), vs the anchor "x11vnc on Xvfb" (how desktops were served before
//!    issue 17: an Xvfb of the bench's own with the same window and drawing, and an x11vnc with
//!    the flags the guest gave a view server, over its unix socket);
//! 2. bytes/s and updates/s of a scripted scrolling workload (the window scrolls 8 px and draws
//!    a new strip every 16 ms) with a client that keeps one incremental request outstanding,
//!    the same three paths;
//! 3. terminal throughput of `head -c <N>M /dev/zero | base64` to the end marker, through the
//!    gateway vs a shell on a PTY of the bench's own (portable-pty, read in-process);
//! 4. keystroke echo latency (a key to its tty echo under `cat`), gateway vs direct PTY.
//!
//! The RFB client is Raw-encoding only (`guest_agent::gateway::rfb::client`), so byte counts
//! are uncompressed pixels. It prints markdown for BENCHMARKS.md; nothing is asserted beyond
//! "it worked". The websocket leg of the control plane is not included here.
//!
//! Usage: `target/release/bench_gateway [--latency-runs N] [--scroll-secs S] [--rounds N]
//! [--term-mb N] [--keys N]`.
//!
//! `--smoke`: a few runs of every part, for CI (`scripts/bench-smoke.sh`); explicit options win.

use anyhow::{anyhow, bail, Context, Result};
use gateway_proto::desktop::ScreenRequest;
use gateway_proto::live::{CapabilityKind, ConnectRequest};
use gateway_proto::termframe::encode_input;
use gateway_proto::{BotId, LeaseToken, Reply, Request};
use guest_agent::gateway::capstream;
use guest_agent::gateway::rfb::client::RfbClient;
use guest_agent::gateway::GatewayConfig;
use guest_agent::home::Home;
use guest_agent::ops::Ops;
use guest_agent::screens::{Screens, ScreensConfig};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;
use tests::anchor::{X11vnc, XvfbDesktop};
use tests::bench::size;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use x11rb::connection::Connection as _;
use x11rb::protocol::xproto::{self, ConnectionExt as _};
use x11rb::rust_connection::RustConnection;
use x11rb::wrapper::ConnectionExt as _;

const BOT: &str = "bench-bot";
const WAIT: Duration = Duration::from_secs(60);

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> Result<T> {
    tokio::time::timeout(WAIT, fut)
        .await
        .map_err(|_| anyhow!("timed out after {WAIT:?} waiting for {what}"))
}

struct Args {
    latency_runs: usize,
    scroll_secs: u64,
    rounds: usize,
    term_mb: u64,
    keys: usize,
}

fn args() -> Result<Args> {
    let mut a = Args {
        latency_runs: size(60, 5),
        scroll_secs: size(3, 1),
        rounds: size(2, 1),
        term_mb: size(200, 4),
        keys: size(200, 10),
    };
    let mut it = tests::bench::args();
    while let Some(flag) = it.next() {
        let mut value = || -> Result<u64> {
            it.next()
                .ok_or_else(|| anyhow!("{flag} needs a value"))?
                .parse()
                .with_context(|| format!("{flag} takes a number"))
        };
        match flag.as_str() {
            "--latency-runs" => a.latency_runs = usize::try_from(value()?)?,
            "--scroll-secs" => a.scroll_secs = value()?,
            "--rounds" => a.rounds = usize::try_from(value()?)?,
            "--term-mb" => a.term_mb = value()?,
            "--keys" => a.keys = usize::try_from(value()?)?,
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(a)
}

/// Any duplex byte stream an RFB client or a terminal can run on.
trait Duplex: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Duplex for T {}
type BoxStream = Box<dyn Duplex>;

/// The guest (real `Ops`) and the control plane's QUIC connection to it.
struct Bench {
    ops: Arc<Ops>,
    conn: quinn::Connection,
    _runtime: tempfile::TempDir,
    _home: tempfile::TempDir,
    _data: tempfile::TempDir,
    _endpoints: (quinn::Endpoint, quinn::Endpoint),
    serving: tokio::task::JoinHandle<()>,
}

impl Bench {
    async fn start() -> Result<Self> {
        let home = tempfile::tempdir()?;
        let runtime = tempfile::tempdir()?;
        std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o700))?;
        let data = tempfile::tempdir()?;
        let screens = Arc::new(Screens::new(
            ScreensConfig {
                home: home.path().to_path_buf(),
                runtime_dir: runtime.path().to_path_buf(),
                limit: None,
                chromium: "/usr/bin/chromium".into(),
                device_scale: None,
            },
            guest_agent::clock::monotonic(),
        ));
        let cfg = GatewayConfig::new(runtime.path().to_path_buf(), home.path().to_path_buf());
        let ops = Arc::new(Ops::with_gateway(Home::new(home.path())?, screens, cfg));
        // The control plane's side, with its production TLS and transport settings.
        let identity = control_plane::tls::TunnelIdentity::load_or_create(
            &data.path().join("cert.pem"),
            &data.path().join("key.pem"),
        )?;
        let server = quinn::Endpoint::server(identity.server_config()?, "127.0.0.1:0".parse()?)?;
        let fingerprint: [u8; 32] = hex::decode(identity.fingerprint())?
            .try_into()
            .map_err(|_| anyhow!("fingerprint is not 32 bytes"))?;
        let mut guest = quinn::Endpoint::client("127.0.0.1:0".parse()?)?;
        guest.set_default_client_config(guest_agent::tunnel::client_config(fingerprint)?);
        // Both ends of the handshake at once: the server drives its side only once accepted.
        let dial = guest.connect(server.local_addr()?, "rakazo-control-plane")?;
        let accept = async {
            let incoming = server
                .accept()
                .await
                .ok_or_else(|| anyhow!("no incoming connection"))?;
            Ok::<_, anyhow::Error>(incoming.await?)
        };
        let (guest_conn, conn) = tokio::join!(dial, accept);
        let (guest_conn, conn) = (guest_conn?, conn?);
        let serving_ops = ops.clone();
        // The guest serves every stream the control plane opens, as `tunnel::run` does.
        let serving = tokio::spawn(async move {
            while let Ok((send, recv)) = guest_conn.accept_bi().await {
                let ops = serving_ops.clone();
                tokio::spawn(async move { ops.serve_stream(send, recv).await });
            }
        });
        Ok(Self {
            ops,
            conn,
            _runtime: runtime,
            _home: home,
            _data: data,
            _endpoints: (server, guest),
            serving,
        })
    }

    async fn request(&self, req: &Request) -> Result<(Reply, BoxStream)> {
        let (reply, stream) = capstream::request(&self.conn, req, WAIT).await?;
        Ok((reply, Box::new(stream)))
    }

    async fn open(&self, kind: CapabilityKind) -> Result<BoxStream> {
        let req = Request::Connect(ConnectRequest {
            bot: BotId::new(BOT)?,
            kind,
            control_lease: Some("bench-lease".into()),
            start: Default::default(),
            terminal: None,
        });
        match self.request(&req).await? {
            (Reply::Opened, s) => Ok(s),
            (other, _) => bail!("connect {} answered {other:?}", kind.as_str()),
        }
    }

    /// The bot's live desktop (locked while held).
    async fn live(&self) -> Result<guest_agent::screens::LiveScreen> {
        self.ops
            .screens()
            .live(&BotId::new(BOT)?)
            .await
            .ok_or_else(|| anyhow!("no live desktop"))
    }

    /// The desktop's Xvnc socket, reached without the gateway.
    async fn direct_view(&self) -> Result<BoxStream> {
        let live = self.live().await?;
        let socket = live
            .rfb_socket()
            .ok_or_else(|| anyhow!("the desktop serves no rfb socket"))?
            .to_path_buf();
        drop(live);
        Ok(Box::new(tokio::net::UnixStream::connect(socket).await?))
    }

    async fn x(&self) -> Result<RustConnection> {
        let live = self.live().await?;
        let access = live.access();
        drop(live);
        Ok(access.connect()?)
    }
}

/// A window covering the screen, above Chrome, to draw on.
struct Canvas {
    x: RustConnection,
    win: u32,
    gc: u32,
    width: u16,
    height: u16,
}

impl Canvas {
    fn new(x: RustConnection) -> Result<Self> {
        let screen = &x.setup().roots[0];
        let (root, width, height) = (screen.root, screen.width_in_pixels, screen.height_in_pixels);
        let win = x.generate_id()?;
        x.create_window(
            x11rb::COPY_DEPTH_FROM_PARENT,
            win,
            root,
            0,
            0,
            width,
            height,
            0,
            xproto::WindowClass::INPUT_OUTPUT,
            x11rb::COPY_FROM_PARENT,
            &xproto::CreateWindowAux::new()
                .override_redirect(1)
                .background_pixel(0x00ff_ffff),
        )?;
        x.map_window(win)?;
        let gc = x.generate_id()?;
        x.create_gc(gc, win, &xproto::CreateGCAux::new().foreground(0))?;
        x.sync()?;
        Ok(Self {
            x,
            win,
            gc,
            width,
            height,
        })
    }

    /// Puts the canvas above every other window (Chrome raises its own window when it maps it)
    /// and waits until the server has done so.
    fn raise(&self) -> Result<()> {
        self.x.configure_window(
            self.win,
            &xproto::ConfigureWindowAux::new().stack_mode(xproto::StackMode::ABOVE),
        )?;
        self.x.sync()?;
        Ok(())
    }

    fn fill(&self, colour: u32, rect: xproto::Rectangle) -> Result<()> {
        self.x
            .change_gc(self.gc, &xproto::ChangeGCAux::new().foreground(colour))?;
        self.x.poly_fill_rectangle(self.win, self.gc, &[rect])?;
        Ok(())
    }

    /// Scrolls the content up by `step` px and draws a new strip of "text" at the bottom.
    fn scroll(&self, step: u16, line: u32) -> Result<()> {
        let h = self.height - step;
        self.x.copy_area(
            self.win,
            self.win,
            self.gc,
            0,
            step as i16,
            0,
            0,
            self.width,
            h,
        )?;
        self.fill(
            0x00ff_ffff,
            xproto::Rectangle {
                x: 0,
                y: h as i16,
                width: self.width,
                height: step,
            },
        )?;
        // Word-like dark runs of varying length, as a page of text has.
        let mut x = 8i16;
        let mut seed = line.wrapping_mul(2_654_435_761);
        while x < self.width as i16 - 80 {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            let w = 12 + (seed % 60) as u16;
            self.fill(
                0x0020_2020 + (seed & 0x3f),
                xproto::Rectangle {
                    x,
                    y: h as i16 + 1,
                    width: w,
                    height: step.saturating_sub(2).max(1),
                },
            )?;
            x += w as i16 + 6;
        }
        self.x.flush()?;
        Ok(())
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn summary(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (pct(&v, 0.5), pct(&v, 0.95), pct(&v, 1.0))
}

/// The change every latency sample waits for: a filled rectangle, sent to the server.
fn draw(canvas: &Canvas, colour: u32) -> Result<()> {
    canvas.fill(
        colour,
        xproto::Rectangle {
            x: 100,
            y: 100,
            width: 200,
            height: 120,
        },
    )?;
    canvas.x.flush()?;
    Ok(())
}

/// One latency sample: drawing to the first update, with an incremental request outstanding.
async fn view_latency(
    client: &mut RfbClient<BoxStream>,
    canvas: &Canvas,
    colour: u32,
) -> Result<f64> {
    client.request_update(true).await?;
    let t0 = Instant::now();
    draw(canvas, colour)?;
    within("the update after a drawing", client.next_update()).await??;
    Ok(t0.elapsed().as_secs_f64() * 1000.0)
}

/// One latency sample for two clients of the same Xvnc: both keep an incremental request
/// outstanding and wait for the same drawing. Sampled one at a time, the client that sat out the
/// other's drawing would find that change pending and be answered at once, timing nothing.
async fn pair_latency(
    direct: &mut RfbClient<BoxStream>,
    through: &mut RfbClient<BoxStream>,
    canvas: &Canvas,
    colour: u32,
) -> Result<(f64, f64)> {
    direct.request_update(true).await?;
    through.request_update(true).await?;
    let t0 = Instant::now();
    draw(canvas, colour)?;
    let (d, g) = tokio::join!(
        arrival("the direct client's update after a drawing", direct, t0),
        arrival("the gateway client's update after a drawing", through, t0)
    );
    Ok((d?, g?))
}

/// Milliseconds from `t0` to the client's next update.
async fn arrival(what: &str, client: &mut RfbClient<BoxStream>, t0: Instant) -> Result<f64> {
    within(what, client.next_update()).await??;
    Ok(t0.elapsed().as_secs_f64() * 1000.0)
}

async fn rfb(stream: BoxStream) -> Result<RfbClient<BoxStream>> {
    let mut c = within("the rfb handshake", RfbClient::connect(stream)).await??;
    // The first full frame, so later updates are incremental.
    c.request_update(false).await?;
    within("the first full frame", c.next_update()).await??;
    Ok(c)
}

/// Scrolls for `secs` while the client keeps one incremental request outstanding.
async fn scroll_run(
    client: &mut RfbClient<BoxStream>,
    canvas: Arc<std::sync::Mutex<Canvas>>,
    secs: u64,
) -> Result<(f64, f64)> {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let drawer = {
        let stop = stop.clone();
        let canvas = canvas.clone();
        tokio::task::spawn_blocking(move || -> Result<()> {
            canvas.lock().map_err(|_| anyhow!("canvas lock"))?.raise()?;
            let mut line = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                canvas
                    .lock()
                    .map_err(|_| anyhow!("canvas lock"))?
                    .scroll(8, line)?;
                line += 1;
                std::thread::sleep(Duration::from_millis(16));
            }
            Ok(())
        })
    };
    let start = Instant::now();
    let (mut bytes, mut updates) = (0u64, 0u64);
    while start.elapsed() < Duration::from_secs(secs) {
        client.request_update(true).await?;
        let (_, b) = within("a scrolling update", client.next_update()).await??;
        bytes += b;
        updates += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    drawer.await??;
    Ok((bytes as f64 / elapsed, updates as f64 / elapsed))
}

/// The command whose output is measured, and the marker after it.
fn throughput_command(mb: u64) -> (String, &'static str) {
    (
        format!("head -c {mb}M /dev/zero | base64; echo THROUGHPUT-$((40+2))\r"),
        "THROUGHPUT-42",
    )
}

/// Reads `stream` until `marker` appears; returns the bytes read.
async fn read_until_marker<R: AsyncRead + Unpin>(stream: &mut R, marker: &str) -> Result<u64> {
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let n = within(marker, stream.read(&mut buf)).await??;
        if n == 0 {
            bail!("the terminal ended before {marker}");
        }
        total += n as u64;
        tail.extend_from_slice(&buf[..n]);
        if tail.windows(marker.len()).any(|w| w == marker.as_bytes()) {
            return Ok(total);
        }
        let keep = tail.len().saturating_sub(marker.len());
        tail.drain(..keep);
    }
}

/// A terminal: the gateway's (frames in) or a local PTY's (raw bytes in).
enum Term {
    Gateway(BoxStream),
    Local {
        input: Box<dyn Write + Send>,
        output: tokio::sync::mpsc::Receiver<Vec<u8>>,
        pending: Vec<u8>,
        _child: Box<dyn portable_pty::Child + Send + Sync>,
        _master: Box<dyn portable_pty::MasterPty + Send>,
    },
}

impl Term {
    fn local() -> Result<Self> {
        let pair = portable_pty::native_pty_system().openpty(portable_pty::PtySize {
            rows: 24,
            cols: 80,
            pixel_width: 0,
            pixel_height: 0,
        })?;
        let mut cmd = portable_pty::CommandBuilder::new("/bin/bash");
        cmd.env_clear();
        cmd.env("PATH", "/usr/local/bin:/usr/bin:/bin");
        cmd.env("TERM", "xterm-256color");
        cmd.env("HOME", "/tmp");
        cmd.cwd("/tmp");
        let child = pair.slave.spawn_command(cmd)?;
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader()?;
        let input = pair.master.take_writer()?;
        let (tx, output) = tokio::sync::mpsc::channel(8);
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 || tx.blocking_send(buf[..n].to_vec()).is_err() {
                    return;
                }
            }
        });
        Ok(Self::Local {
            input,
            output,
            pending: Vec::new(),
            _child: child,
            _master: pair.master,
        })
    }

    async fn send(&mut self, bytes: &[u8]) -> Result<()> {
        match self {
            Self::Gateway(s) => s.write_all(&encode_input(bytes)).await?,
            Self::Local { input, .. } => {
                input.write_all(bytes)?;
                input.flush()?;
            }
        }
        Ok(())
    }

    async fn read_until(&mut self, marker: &str) -> Result<u64> {
        match self {
            Self::Gateway(s) => read_until_marker(s, marker).await,
            Self::Local {
                output, pending, ..
            } => {
                let mut total = 0u64;
                let mut tail = std::mem::take(pending);
                loop {
                    if let Some(at) = tail
                        .windows(marker.len())
                        .position(|w| w == marker.as_bytes())
                    {
                        *pending = tail.split_off(at + marker.len());
                        return Ok(total);
                    }
                    let keep = tail.len().saturating_sub(marker.len());
                    tail.drain(..keep);
                    let chunk = within(marker, output.recv())
                        .await?
                        .ok_or_else(|| anyhow!("local pty ended"))?;
                    total += chunk.len() as u64;
                    tail.extend_from_slice(&chunk);
                }
            }
        }
    }
}

async fn term_throughput(term: &mut Term, mb: u64) -> Result<f64> {
    let (cmd, marker) = throughput_command(mb);
    let t0 = Instant::now();
    term.send(cmd.as_bytes()).await?;
    let bytes = term.read_until(marker).await?;
    Ok(bytes as f64 / t0.elapsed().as_secs_f64())
}

async fn key_echo(term: &mut Term, keys: usize) -> Result<Vec<f64>> {
    term.send(b"echo READY-$((1+1)); cat > /dev/null\r").await?;
    term.read_until("READY-2").await?;
    let mut out = Vec::with_capacity(keys);
    for i in 0..keys {
        let key = [b'a' + (i % 26) as u8];
        let t0 = Instant::now();
        term.send(&key).await?;
        term.read_until(std::str::from_utf8(&key)?).await?;
        out.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    term.send(b"\x04").await?; // ^D ends cat
    Ok(out)
}

fn mb(v: f64) -> f64 {
    v / 1_000_000.0
}

#[tokio::main]
async fn main() -> Result<()> {
    tests::bench::Usage::new("the guest half of the live screen, over real QUIC on loopback")
        .flag(
            "--latency-runs",
            "N",
            "measured input-to-pixel runs (default 60; smoke 5)",
        )
        .flag(
            "--scroll-secs",
            "N",
            "seconds of scrolling (default 3; smoke 1)",
        )
        .flag("--rounds", "N", "rounds (default 2; smoke 1)")
        .flag(
            "--term-mb",
            "N",
            "MB through the terminal (default 200; smoke 4)",
        )
        .flag("--keys", "N", "keystrokes echoed (default 200; smoke 10)")
        .check();
    let a = args()?;
    let bench = Bench::start().await?;
    let req = Request::ScreenEnsure(ScreenRequest {
        bot: BotId::new(BOT)?,
        lease: LeaseToken::parse("bench-run:1")?,
    });
    match bench.request(&req).await?.0 {
        Reply::Screen(_) => {}
        other => bail!("screen ensure answered {other:?}"),
    }
    let canvas = Canvas::new(bench.x().await?)?;
    canvas.raise()?;
    let mut through = rfb(bench.open(CapabilityKind::View).await?).await?;
    let mut direct = rfb(bench.direct_view().await?).await?;
    let anchor_desktop = XvfbDesktop::start(None).await?;
    let anchor_canvas = Canvas::new(anchor_desktop.access().connect()?)?;
    let x11vnc = X11vnc::start(&anchor_desktop.display_env(), anchor_desktop.xauthority()).await?;
    let mut anchor = rfb(Box::new(x11vnc.connect().await?)).await?;

    // 1. Latency, interleaved, after two uncounted samples each (x11vnc settles its polling
    // after a new client).
    // The gateway's and the direct client wait for the same drawing (see `pair_latency`).
    for colour in [0x0080_8080, 0x0040_4040] {
        canvas.raise()?;
        pair_latency(&mut direct, &mut through, &canvas, colour).await?;
        view_latency(&mut anchor, &anchor_canvas, colour).await?;
    }
    let (mut lat_g, mut lat_d, mut lat_a) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..a.latency_runs {
        canvas.raise()?;
        let colour = if i % 2 == 0 { 0x00c0_3030 } else { 0x0030_30c0 };
        let (d, g) = pair_latency(&mut direct, &mut through, &canvas, colour).await?;
        lat_d.push(d);
        lat_g.push(g);
        lat_a.push(view_latency(&mut anchor, &anchor_canvas, colour).await?);
    }

    // 2. Scrolling, rounds alternating.
    let canvas = Arc::new(std::sync::Mutex::new(canvas));
    let anchor_canvas = Arc::new(std::sync::Mutex::new(anchor_canvas));
    let (mut scroll_g, mut scroll_d, mut scroll_a) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..a.rounds {
        scroll_d.push(scroll_run(&mut direct, canvas.clone(), a.scroll_secs).await?);
        scroll_a.push(scroll_run(&mut anchor, anchor_canvas.clone(), a.scroll_secs).await?);
        scroll_g.push(scroll_run(&mut through, canvas.clone(), a.scroll_secs).await?);
    }
    drop((through, direct, anchor));
    x11vnc.stop().await;
    drop(anchor_canvas);
    anchor_desktop.stop().await;

    // 3 and 4. Terminals.
    let mut gateway_term = Term::Gateway(bench.open(CapabilityKind::Terminal).await?);
    let mut local_term = Term::local()?;
    let (mut tp_g, mut tp_d) = (Vec::new(), Vec::new());
    for _ in 0..a.rounds {
        tp_d.push(term_throughput(&mut local_term, a.term_mb).await?);
        tp_g.push(term_throughput(&mut gateway_term, a.term_mb).await?);
    }
    let echo_d = key_echo(&mut local_term, a.keys).await?;
    let echo_g = key_echo(&mut gateway_term, a.keys).await?;
    drop(gateway_term);

    let (g50, g95, gmax) = summary(lat_g);
    let (d50, d95, dmax) = summary(lat_d);
    let (a50, a95, amax) = summary(lat_a);
    println!("### Live view and terminal through the guest gateway (bench_gateway)\n");
    println!("| measure | gateway (QUIC + relay + filter) to Xvnc | Xvnc direct | anchor: x11vnc on Xvfb, direct | ratio gateway / anchor; Xvnc direct / anchor |");
    println!("|---|---|---|---|---|");
    println!(
        "| view latency p50 / p95 / max, ms ({} runs) | {g50:.1} / {g95:.1} / {gmax:.1} | {d50:.1} / {d95:.1} / {dmax:.1} | {a50:.1} / {a95:.1} / {amax:.1} | {:.2}; {:.2} (p50) |",
        a.latency_runs,
        g50 / a50,
        d50 / a50
    );
    let best = |v: &[(f64, f64)]| {
        v.iter()
            .cloned()
            .fold((0.0f64, 0.0f64), |m, x| (m.0.max(x.0), m.1.max(x.1)))
    };
    let (sg, ug) = best(&scroll_g);
    let (sd, ud) = best(&scroll_d);
    let (sa, ua) = best(&scroll_a);
    println!(
        "| scrolling, Raw pixels, best of {} x {} s: MB/s (updates/s) | {:.1} ({ug:.1}) | {:.1} ({ud:.1}) | {:.1} ({ua:.1}) | {:.2}; {:.2} |",
        a.rounds,
        a.scroll_secs,
        mb(sg),
        mb(sd),
        mb(sa),
        sg / sa,
        sd / sa
    );
    println!("\n| measure | gateway | anchor | ratio |\n|---|---|---|---|");
    let tg = tp_g.iter().cloned().fold(0.0, f64::max);
    let td = tp_d.iter().cloned().fold(0.0, f64::max);
    println!(
        "| terminal `head -c {}M /dev/zero \\| base64`, best of {}: MB/s (anchor: local PTY) | {:.1} | {:.1} | {:.2} |",
        a.term_mb,
        a.rounds,
        mb(tg),
        mb(td),
        tg / td
    );
    let (eg50, eg95, egmax) = summary(echo_g);
    let (ed50, ed95, edmax) = summary(echo_d);
    println!(
        "| keystroke echo p50 / p95 / max, ms ({} keys; anchor: local PTY) | {eg50:.2} / {eg95:.2} / {egmax:.2} | {ed50:.2} / {ed95:.2} / {edmax:.2} | {:.2} (p50) |",
        a.keys,
        eg50 / ed50
    );
    bench.ops.screens().shutdown().await;
    bench.serving.abort();
    Ok(())
}
