//! `bench_foundation`: the foundation's benchmarks (issue 2, "Must show" 5), in one run.
//!
//! It starts the built `rakazo serve` (SQLite, HTTP and tunnel on port 0) from its own target
//! directory, creates a local computer whose `rakazo-guest` dials back over QUIC on loopback, and
//! measures each figure against an anchor taken in the same run:
//!
//! - exec round trip of `true` (HTTP API → tunnel → guest → process) against spawning `true`
//!   directly (the floor) and against `GET /v1/computers/{id}` (HTTP plus the database lookup an
//!   exec also does, no tunnel). Exec goes through three clients (see [`Http`]): the shipped
//!   `control_plane::client::Client` on a keep-alive connection, the same with `TCP_NODELAY`,
//!   and a new connection per request; with the time to the response head, this tells a stall
//!   on the connection apart from the tunnel and the guest. The rows are interleaved, one of
//!   each per round, so load that comes and goes hits them alike;
//! - upload (`PUT .../files/content`) and download (`GET .../files/content`) of 256 MiB through
//!   the tunnel against a plain loopback TCP copy, and against writing the same bytes (fsync'd, as
//!   the guest commits a file) into the filesystem that holds the home. It repeats the transfers
//!   with the home on tmpfs (`/dev/shm`) when there is one, to separate disk from tunnel;
//! - the tunnel's ceiling: one QUIC stream between the shipped QUIC configuration alone (the
//!   control plane's listener and the guest's endpoint, `carrier::quic`; no HTTP, no files),
//!   the anchor of issue 17's "tunnel ≥ 85 % of bare QUIC", and the same with the configuration
//!   before issue 17 (quinn's default endpoint and socket), so the raise of the ceiling shows.
//!
//! It prints markdown (tables with ratios) for BENCHMARKS.md. Timings are printed, never asserted:
//! only broken results (wrong exit code, wrong byte count or content) fail the run.
//! It owns its processes: the server and its guests are killed when it ends.
//!
//! Usage: `target/release/bench_foundation [--exec-runs N] [--warmups N] [--mib N]
//! [--transfer-runs N] [--home-parent DIR]... [--bin-dir DIR] [--quic-only] [--exec-only]`;
//! `--quic-only` measures only the tunnel's ceiling (and its TCP anchor), `--exec-only` only the
//! exec round trips.
//!
//! `--smoke`: a few runs of every part, for CI (`scripts/bench-smoke.sh`); explicit options win.

use anyhow::{anyhow, bail, ensure, Context, Result};
use bytes::Bytes;
use control_plane::client::{full_body, q, Client, ReqBody};
use gateway_proto::Secret;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use hyper::{header, Method};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as LegacyClient;
use hyper_util::rt::TokioExecutor;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};
use tests::bench::{args as bench_args, loadavg, ms, now, size};
use tests::procstat::{cpu_ticks, TICKS_PER_SEC};
use tests::{pids_with_env, wait_for, ExecOutput};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Size of the chunks the bench writes (HTTP body frames, TCP writes, disk writes).
const CHUNK: usize = 256 * 1024;

struct Options {
    exec_runs: usize,
    warmups: usize,
    mib: usize,
    transfer_runs: usize,
    home_parents: Vec<PathBuf>,
    bin_dir: PathBuf,
    /// Only the tunnel's ceiling (QUIC alone, with its TCP anchor).
    quic_only: bool,
    /// Only the exec round trips.
    exec_only: bool,
}

impl Options {
    fn parse() -> Result<Self> {
        let exe = std::env::current_exe().context("path of this executable")?;
        let mut o = Options {
            exec_runs: size(300, 20),
            warmups: size(20, 2),
            mib: size(256, 8),
            transfer_runs: size(3, 1),
            home_parents: Vec::new(),
            // A binary lives in <target>/<profile>, beside `rakazo` and `rakazo-guest`.
            bin_dir: exe
                .parent()
                .ok_or_else(|| anyhow!("executable has no directory"))?
                .to_path_buf(),
            quic_only: false,
            exec_only: false,
        };
        let mut args = bench_args();
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or_else(|| anyhow!("{flag} needs a value"));
            match flag.as_str() {
                "--exec-runs" => o.exec_runs = value()?.parse()?,
                "--warmups" => o.warmups = value()?.parse()?,
                "--mib" => o.mib = value()?.parse()?,
                "--transfer-runs" => o.transfer_runs = value()?.parse()?,
                "--home-parent" => o.home_parents.push(value()?.into()),
                "--bin-dir" => o.bin_dir = value()?.into(),
                "--quic-only" => o.quic_only = true,
                "--exec-only" => o.exec_only = true,
                other => bail!("unknown argument {other:?}"),
            }
        }
        ensure!(
            o.exec_runs > 0 && o.transfer_runs > 0 && o.mib > 0,
            "counts must be positive"
        );
        if o.home_parents.is_empty() {
            o.home_parents.push(std::env::temp_dir());
            let shm = PathBuf::from("/dev/shm");
            if fs_type(&shm).as_deref() == Some("tmpfs") {
                o.home_parents.push(shm);
            }
        }
        Ok(o)
    }
}

/// One running control plane in its own data dir, with one local computer.
struct Server {
    data_dir: tempfile::TempDir,
    child: Child,
    client: Client,
    /// Base URL and API token, for the bench's own hyper clients (see [`Http`]).
    http: String,
    token: String,
    computer: String,
}

impl Server {
    async fn start(bin_dir: &Path, parent: &Path) -> Result<Self> {
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
            .prefix("rakazo-bench-")
            .tempdir_in(parent)
            .with_context(|| format!("data dir under {}", parent.display()))?;
        // The bench's dir: `data/` (the server's, 0700) and `computers/` (local computers' root,
        // which their users pass through).
        std::fs::set_permissions(
            data_dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o711),
        )?;
        let log = std::fs::File::create(data_dir.path().join("server.log"))?;
        // The server logs at its default level (info), as it would in production.
        let child = Command::new(&rakazo)
            .arg("serve")
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
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
            http: String::new(),
            token: String::new(),
            computer: String::new(),
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
        server.http = http.to_string();
        server.token = token.trim().to_string();
        server.client = Client::new(http, Secret::new(server.token.clone()));
        // Creating a computer returns once its guest has dialed in.
        let created = server
            .client
            .json(
                Method::POST,
                "/v1/computers",
                Some(&serde_json::json!({ "workspace": "bench" })),
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

    fn guest_pids(&self) -> Vec<i32> {
        pids_with_env("RAKAZO_HOME", &self.home().display().to_string())
    }

    fn cpu(&self) -> Cpu {
        Cpu {
            server: cpu_ticks(&self.child.id().to_string()),
            guest: self
                .guest_pids()
                .iter()
                .map(|p| cpu_ticks(&p.to_string()))
                .sum(),
            bench: cpu_ticks("self"),
            udp: udp_counters(),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // The server first, so that nothing restarts a guest; then every guest of this data dir.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Ok(entries) = std::fs::read_dir(self.data_dir.path().join("computers")) {
            for e in entries.flatten() {
                let home = e.path().join("home").display().to_string();
                for pid in pids_with_env("RAKAZO_HOME", &home) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
    }
}

/// The host's UDP counters from `/proc/net/snmp`: datagrams received, and datagrams dropped
/// because a socket's receive buffer was full. They count every UDP socket of the host, but
/// the tunnel is by far the busiest while a transfer runs.
#[derive(Clone, Copy, Default)]
struct Udp {
    in_datagrams: u64,
    rcvbuf_errors: u64,
}

fn udp_counters() -> Udp {
    let text = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut lines = text.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return Udp::default();
    };
    let field = |name: &str| {
        names
            .split_whitespace()
            .position(|n| n == name)
            .and_then(|i| values.split_whitespace().nth(i))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Udp {
        in_datagrams: field("InDatagrams"),
        rcvbuf_errors: field("RcvbufErrors"),
    }
}

/// CPU ticks of the three processes involved in a transfer, and the host's UDP counters.
#[derive(Clone, Copy, Default)]
struct Cpu {
    server: u64,
    guest: u64,
    bench: u64,
    udp: Udp,
}

impl Cpu {
    fn since(self, before: Cpu) -> Cpu {
        Cpu {
            server: self.server.saturating_sub(before.server),
            guest: self.guest.saturating_sub(before.guest),
            bench: self.bench.saturating_sub(before.bench),
            udp: Udp {
                in_datagrams: self
                    .udp
                    .in_datagrams
                    .saturating_sub(before.udp.in_datagrams),
                rcvbuf_errors: self
                    .udp
                    .rcvbuf_errors
                    .saturating_sub(before.udp.rcvbuf_errors),
            },
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Exec round trip.

/// The ways the bench reaches the API.
///
/// `Shipped` is `control_plane::client::Client`, what the CLI uses: one pooled keep-alive
/// connection, Nagle's algorithm left on. `NoDelay` is the same with `TCP_NODELAY` on the
/// client's socket. `Fresh` also sets `TCP_NODELAY` and opens a new connection per request, as
/// `curl` does for a single URL; a new connection starts in quick-ACK mode, so a response the
/// server writes in pieces never waits for a delayed ACK.
enum Http {
    Shipped(Client),
    Raw {
        base: String,
        token: String,
        http: LegacyClient<HttpConnector, ReqBody>,
    },
}

impl Http {
    fn raw(base: &str, token: &str, fresh_connections: bool) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let mut builder = LegacyClient::builder(TokioExecutor::new());
        if fresh_connections {
            builder.pool_max_idle_per_host(0);
        }
        Http::Raw {
            base: base.to_string(),
            token: token.to_string(),
            http: builder.build(connector),
        }
    }

    /// Sends a request and reads the whole response (a non-2xx status is an error). Returns the
    /// body and when the response head arrived.
    async fn request(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<(Bytes, Instant)> {
        match self {
            Http::Shipped(client) => {
                let resp = client
                    .send(method, path, content_type, None, full_body(body))
                    .await?;
                let head = now();
                Ok((resp.into_body().collect().await?.to_bytes(), head))
            }
            Http::Raw { base, token, http } => {
                let mut req = hyper::Request::builder()
                    .method(method)
                    .uri(format!("{base}{path}"))
                    .header(header::AUTHORIZATION, format!("Bearer {token}"));
                if let Some(ct) = content_type {
                    req = req.header(header::CONTENT_TYPE, ct);
                }
                let resp = http.request(req.body(full_body(body))?).await?;
                let head = now();
                let status = resp.status();
                let bytes = resp.into_body().collect().await?.to_bytes();
                ensure!(
                    status.is_success(),
                    "HTTP {status}: {}",
                    String::from_utf8_lossy(&bytes)
                );
                Ok((bytes, head))
            }
        }
    }
}

/// One timed request: to the response head, and to the end of the body.
#[derive(Clone, Copy)]
struct Timed {
    head: Duration,
    total: Duration,
}

async fn exec_true(http: &Http, computer: &str) -> Result<Timed> {
    let t = now();
    let (body, head) = http
        .request(
            Method::POST,
            &format!("/v1/computers/{}/exec", q(computer)),
            Some("application/json"),
            Bytes::from_static(br#"{"argv":["true"]}"#),
        )
        .await?;
    let total = now() - t;
    let out = ExecOutput::parse(&body);
    ensure!(
        out.code == Some(0),
        "exec of true ended with {:?}: {}",
        out.code,
        String::from_utf8_lossy(&body)
    );
    Ok(Timed {
        head: head - t,
        total,
    })
}

async fn get_computer(http: &Http, computer: &str) -> Result<Timed> {
    let t = now();
    let (body, head) = http
        .request(
            Method::GET,
            &format!("/v1/computers/{}", q(computer)),
            None,
            Bytes::new(),
        )
        .await?;
    let total = now() - t;
    let v: serde_json::Value = serde_json::from_slice(&body)?;
    ensure!(v["id"] == computer, "unexpected computer {v}");
    Ok(Timed {
        head: head - t,
        total,
    })
}

/// Spawns `true` the way the guest does (stdin null, stdout and stderr piped and read to EOF).
fn spawn_true() -> Result<()> {
    let out = Command::new("true")
        .stdin(Stdio::null())
        .output()
        .context("spawn true")?;
    ensure!(out.status.success(), "true failed: {}", out.status);
    Ok(())
}

/// The latency rows after the spawn floor: what is sent, through which client.
const ROWS: [(&str, &str); 4] = [
    (
        "`GET /v1/computers/{id}` (HTTP + DB, no tunnel)",
        "shipped `Client` (keep-alive)",
    ),
    (
        "exec `true`: API → tunnel → guest",
        "shipped `Client` (keep-alive)",
    ),
    (
        "exec `true`: API → tunnel → guest",
        "keep-alive, client `TCP_NODELAY`",
    ),
    (
        "exec `true`: API → tunnel → guest",
        "new connection per request, `TCP_NODELAY`",
    ),
];

/// Samples of the spawn floor and of each of [`ROWS`], in round order.
struct Latencies {
    spawn: Vec<Duration>,
    rows: Vec<Vec<Timed>>,
}

async fn measure_exec(server: &Server, opts: &Options) -> Result<Latencies> {
    let id = server.computer.as_str();
    let shipped = Http::Shipped(server.client.clone());
    let nodelay = Http::raw(&server.http, &server.token, false);
    let fresh = Http::raw(&server.http, &server.token, true);
    let mut l = Latencies {
        spawn: Vec::new(),
        rows: vec![Vec::new(); ROWS.len()],
    };
    for round in 0..opts.warmups + opts.exec_runs {
        let keep = round >= opts.warmups;
        let t = now();
        // A blocking spawn is what the anchor measures; the runtime has threads to spare.
        tokio::task::block_in_place(spawn_true)?;
        let spawn = now() - t;
        let timed = [
            get_computer(&shipped, id).await?,
            exec_true(&shipped, id).await?,
            exec_true(&nodelay, id).await?,
            exec_true(&fresh, id).await?,
        ];
        if keep {
            l.spawn.push(spawn);
            for (row, t) in l.rows.iter_mut().zip(timed) {
                row.push(t);
            }
        }
    }
    Ok(l)
}

struct Summary {
    p50: Duration,
    p99: Duration,
    mean: Duration,
}

/// Nearest-rank percentiles and the mean.
fn summarize(samples: &[Duration]) -> Summary {
    let mut s = samples.to_vec();
    s.sort();
    let rank = |p: usize| s[(s.len() * p).div_ceil(100).clamp(1, s.len()) - 1];
    let total: Duration = s.iter().sum();
    Summary {
        p50: rank(50),
        p99: rank(99),
        mean: total / u32::try_from(s.len()).unwrap_or(u32::MAX),
    }
}

// ---------------------------------------------------------------------------------------------
// Bulk transfers.

/// A request body that hands out an in-memory buffer in fixed-size frames, without copying.
struct ChunkBody {
    rest: Bytes,
}

impl Body for ChunkBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if self.rest.is_empty() {
            return Poll::Ready(None);
        }
        let n = CHUNK.min(self.rest.len());
        let head = self.rest.split_to(n);
        Poll::Ready(Some(Ok(Frame::data(head))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.rest.len() as u64)
    }
}

/// Deterministic pseudo-random bytes (splitmix64): incompressible, and cheap to make.
fn pseudo_random(len: usize) -> Bytes {
    let mut state = 0x5eed_u64;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    Bytes::from(out)
}

async fn upload(server: &Server, path: &str, data: &Bytes) -> Result<Duration> {
    let len = data.len() as u64;
    let t = now();
    let resp = server
        .client
        .send(
            Method::PUT,
            &format!(
                "/v1/computers/{}/files/content?path={}",
                q(&server.computer),
                q(path)
            ),
            Some("application/octet-stream"),
            Some(len),
            ChunkBody { rest: data.clone() }.boxed(),
        )
        .await?;
    let body = resp.into_body().collect().await?.to_bytes();
    let elapsed = now() - t;
    let v: serde_json::Value = serde_json::from_slice(&body)?;
    ensure!(
        v["written"] == len,
        "upload wrote {v}, expected {len} bytes"
    );
    Ok(elapsed)
}

async fn download(server: &Server, path: &str, len: usize) -> Result<Duration> {
    let t = now();
    let resp = server
        .client
        .send(
            Method::GET,
            &format!(
                "/v1/computers/{}/files/content?path={}",
                q(&server.computer),
                q(path)
            ),
            None,
            None,
            full_body(Bytes::new()),
        )
        .await?;
    let mut body = resp.into_body();
    let mut got = 0usize;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            got += data.len();
        }
    }
    let elapsed = now() - t;
    ensure!(got == len, "download got {got} bytes, expected {len}");
    Ok(elapsed)
}

/// The anchor: one loopback TCP connection, the bytes written in [`CHUNK`]s, read and dropped.
async fn tcp_copy(data: &Bytes) -> Result<Duration> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let reader = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await?;
        let mut buf = vec![0u8; CHUNK];
        let mut got = 0usize;
        loop {
            let n = s.read(&mut buf).await?;
            if n == 0 {
                return Ok::<usize, std::io::Error>(got);
            }
            got += n;
        }
    });
    let t = now();
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    for chunk in data.chunks(CHUNK) {
        s.write_all(chunk).await?;
    }
    s.shutdown().await?;
    let got = reader.await??;
    let elapsed = now() - t;
    ensure!(got == data.len(), "tcp copy got {got} bytes");
    Ok(elapsed)
}

/// The disk bound of an upload: the same bytes written and fsync'd where the homes live.
fn disk_write(dir: &Path, data: &[u8]) -> Result<Duration> {
    let path = dir.join("disk-anchor.bin");
    let t = now();
    let mut f = std::fs::File::create(&path)?;
    for chunk in data.chunks(CHUNK) {
        f.write_all(chunk)?;
    }
    f.sync_all()?;
    let elapsed = now() - t;
    drop(f);
    std::fs::remove_file(&path)?;
    Ok(elapsed)
}

struct Transfers {
    location: String,
    fs: String,
    tcp: Vec<Duration>,
    disk: Vec<Duration>,
    up: Vec<Duration>,
    down: Vec<Duration>,
    /// CPU ticks spent during each row, summed over the runs: this process's for the TCP copy
    /// and the disk write, every process's for the tunnel transfers.
    tcp_ticks: u64,
    disk_ticks: u64,
    up_cpu: Cpu,
    down_cpu: Cpu,
}

async fn measure_transfers(server: &Server, data: &Bytes, runs: usize) -> Result<Transfers> {
    let parent = server
        .data_dir
        .path()
        .parent()
        .unwrap_or(Path::new("/"))
        .to_path_buf();
    let mut t = Transfers {
        location: parent.display().to_string(),
        fs: fs_type(&server.home()).unwrap_or_else(|| "unknown".into()),
        tcp: Vec::new(),
        disk: Vec::new(),
        up: Vec::new(),
        down: Vec::new(),
        tcp_ticks: 0,
        disk_ticks: 0,
        up_cpu: Cpu::default(),
        down_cpu: Cpu::default(),
    };
    // One of each per round, so that load from elsewhere spreads over all of them.
    for _ in 0..runs {
        let ticks = cpu_ticks("self");
        t.tcp.push(tcp_copy(data).await?);
        let mid = cpu_ticks("self");
        let dir = server.data_dir.path().to_path_buf();
        let bytes = data.clone();
        t.disk
            .push(tokio::task::spawn_blocking(move || disk_write(&dir, &bytes)).await??);
        t.tcp_ticks += mid - ticks;
        t.disk_ticks += cpu_ticks("self") - mid;
        let before = server.cpu();
        t.up.push(upload(server, "big.bin", data).await?);
        let mid = server.cpu();
        t.down.push(download(server, "big.bin", data.len()).await?);
        let after = server.cpu();
        t.up_cpu = add(t.up_cpu, mid.since(before));
        t.down_cpu = add(t.down_cpu, after.since(mid));
    }
    // Content check, outside the timings: the guest stored exactly the bytes sent.
    let stored = std::fs::read(server.home().join("big.bin"))?;
    ensure!(
        stored.as_slice() == data.as_ref(),
        "the stored file differs from the upload"
    );
    Ok(t)
}

fn add(a: Cpu, b: Cpu) -> Cpu {
    Cpu {
        server: a.server + b.server,
        guest: a.guest + b.guest,
        bench: a.bench + b.bench,
        udp: Udp {
            in_datagrams: a.udp.in_datagrams + b.udp.in_datagrams,
            rcvbuf_errors: a.udp.rcvbuf_errors + b.udp.rcvbuf_errors,
        },
    }
}

fn mbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e6
}

/// Best and median throughput in MB/s.
fn rates(bytes: usize, samples: &[Duration]) -> (f64, f64) {
    let mut r: Vec<f64> = samples.iter().map(|d| mbps(bytes, *d)).collect();
    r.sort_by(f64::total_cmp);
    let best = r.last().copied().unwrap_or(0.0);
    // The lower median for an even count, so that it is always a measured run.
    let median = r
        .get((r.len().saturating_sub(1)) / 2)
        .copied()
        .unwrap_or(0.0);
    (best, median)
}

// ---------------------------------------------------------------------------------------------
// The tunnel's ceiling: QUIC alone.

/// Which way a QUIC-only copy goes. The control plane is the QUIC server, the guest the client.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// As an upload: the control plane opens the stream and writes.
    ToGuest,
    /// As a download: the guest writes on a stream the control plane opened.
    ToControlPlane,
}

/// Which QUIC configuration a bare-QUIC row runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// The tunnel's configuration before issue 17: quinn's default endpoint and UDP socket
    /// (1472-byte datagrams, path MTU searched up to 1452, the kernel's default socket buffers),
    /// with the tunnel's windows and timers. Kept here only as the anchor of the raise.
    Before,
    /// The tunnel as shipped: the control plane's real listener (`control_plane::tunnel::bind`
    /// with `TunnelIdentity::server_config`) and the guest's real endpoint
    /// (`guest_agent::tunnel::udp_endpoint`), both on `carrier::quic`'s settings.
    Shipped,
}

struct QuicCase {
    name: &'static str,
    direction: Direction,
    setup: Setup,
}

const QUIC_CASES: [QuicCase; 4] = [
    QuicCase {
        name: "control plane → guest (as an upload), configuration before issue 17",
        direction: Direction::ToGuest,
        setup: Setup::Before,
    },
    QuicCase {
        name: "guest → control plane (as a download), configuration before issue 17",
        direction: Direction::ToControlPlane,
        setup: Setup::Before,
    },
    QuicCase {
        name: "control plane → guest (as an upload), shipped configuration",
        direction: Direction::ToGuest,
        setup: Setup::Shipped,
    },
    QuicCase {
        name: "guest → control plane (as a download), shipped configuration",
        direction: Direction::ToControlPlane,
        setup: Setup::Shipped,
    },
];

/// The tunnel's transport before issue 17, on one end: quinn's defaults but for the idle
/// timeout, keepalives, stream limits and flow-control windows.
fn transport_before(incoming_bidi: u32) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.max_idle_timeout(Some(quinn::IdleTimeout::from(quinn::VarInt::from_u32(
        6_000,
    ))));
    t.keep_alive_interval(Some(Duration::from_secs(2)));
    t.max_concurrent_bidi_streams(incoming_bidi.into());
    t.max_concurrent_uni_streams(0u32.into());
    t.stream_receive_window((16u32 << 20).into());
    t.receive_window((64u32 << 20).into());
    t.send_window(64 << 20);
    t
}

/// A connected pair of endpoints in `setup`: the control plane's (server) and the guest's
/// (client), with the connection from each side.
struct QuicPair {
    server: quinn::Endpoint,
    client: quinn::Endpoint,
    to_guest: quinn::Connection,
    to_cp: quinn::Connection,
    /// Keeps the shipped listener (and its TCP carrier) open; its identity serves both setups.
    _tunnel: tests::tunnel::Tunnel,
}

async fn quic_pair(setup: Setup) -> Result<QuicPair> {
    let tunnel = tests::tunnel::Tunnel::bind()?;
    let pin = tunnel.pin;
    let (server, client) = match setup {
        Setup::Shipped => {
            let client = guest_agent::tunnel::udp_endpoint("127.0.0.1:0".parse()?, pin)?;
            (tunnel.quic().clone(), client)
        }
        Setup::Before => {
            let mut server_config = tunnel.identity.server_config()?;
            server_config.transport_config(std::sync::Arc::new(transport_before(1)));
            let server = quinn::Endpoint::server(server_config, "127.0.0.1:0".parse()?)?;
            let mut client_config = guest_agent::tunnel::client_config(pin)?;
            client_config.transport_config(std::sync::Arc::new(transport_before(1024)));
            let mut client = quinn::Endpoint::client("127.0.0.1:0".parse()?)?;
            client.set_default_client_config(client_config);
            (server, client)
        }
    };
    let server_addr = server.local_addr()?;
    let accepting = server.clone();
    let accept = tokio::spawn(async move {
        let incoming = accepting
            .accept()
            .await
            .ok_or_else(|| anyhow!("endpoint closed"))?;
        Ok::<_, anyhow::Error>(incoming.await?)
    });
    let to_cp = client.connect(server_addr, "rakazo-control-plane")?.await?;
    let to_guest = accept.await??;
    Ok(QuicPair {
        server,
        client,
        to_guest,
        to_cp,
        _tunnel: tunnel,
    })
}

/// What one bare-QUIC copy measured.
struct QuicCopy {
    elapsed: Duration,
    /// This process's CPU ticks (both ends).
    ticks: u64,
    /// Chunks `read_chunk` handed out.
    chunks: usize,
    udp: Udp,
    /// The writer's path MTU (largest UDP payload) when the copy ended.
    mtu: u16,
}

/// One stream over a fresh loopback QUIC connection in `case`'s setup, both ends in this
/// process: [`CHUNK`]-sized `write_chunk`s as the tunnel's bulk paths do, `read_chunk` reads
/// dropped. Times the copy only, not the handshake.
async fn quic_copy(case: &QuicCase, data: &Bytes) -> Result<QuicCopy> {
    let pair = quic_pair(case.setup).await?;
    let (writer, reader) = match case.direction {
        Direction::ToGuest => (pair.to_guest.clone(), pair.to_cp.clone()),
        Direction::ToControlPlane => (pair.to_cp.clone(), pair.to_guest.clone()),
    };
    let (mut send, _recv) = writer.open_bi().await?;
    // The peer learns of a stream with its first bytes, so it accepts while we write.
    let read = tokio::spawn(async move {
        let (_send, mut recv) = reader.accept_bi().await?;
        // Read as the tunnel's code does (`read_chunk`), counting the chunks it hands out.
        let (mut got, mut chunks) = (0usize, 0usize);
        while let Some(chunk) = recv.read_chunk(usize::MAX, true).await? {
            got += chunk.bytes.len();
            chunks += 1;
        }
        Ok::<_, anyhow::Error>((got, chunks))
    });
    let before = udp_counters();
    let ticks = cpu_ticks("self");
    let t = now();
    let mut rest = data.clone();
    while !rest.is_empty() {
        let chunk = rest.split_to(CHUNK.min(rest.len()));
        send.write_chunk(chunk).await?;
    }
    send.finish()?;
    let (got, chunks) = read.await??;
    let elapsed = now() - t;
    let ticks = cpu_ticks("self") - ticks;
    let after = udp_counters();
    ensure!(got == data.len(), "quic copy got {got} bytes");
    let mtu = writer.stats().path.current_mtu;
    pair.to_cp.close(0u32.into(), b"done");
    pair.client.wait_idle().await;
    pair.server.close(0u32.into(), b"done");
    Ok(QuicCopy {
        elapsed,
        ticks,
        chunks,
        udp: Udp {
            in_datagrams: after.in_datagrams.saturating_sub(before.in_datagrams),
            rcvbuf_errors: after.rcvbuf_errors.saturating_sub(before.rcvbuf_errors),
        },
        mtu,
    })
}

/// Samples of each of [`QUIC_CASES`], and their CPU ticks and UDP counters summed over the runs.
struct QuicRuns {
    samples: Vec<Vec<Duration>>,
    ticks: Vec<u64>,
    chunks: Vec<usize>,
    udp: Vec<Udp>,
    /// The writer's path MTU at the end of the last run.
    mtu: Vec<u16>,
}

impl QuicRuns {
    /// The median rate of the shipped configuration in `direction`.
    fn shipped_median(&self, bytes: usize, direction: Direction) -> f64 {
        QUIC_CASES
            .iter()
            .position(|c| c.setup == Setup::Shipped && c.direction == direction)
            .map_or(0.0, |i| rates(bytes, &self.samples[i]).1)
    }
}

async fn measure_quic(data: &Bytes, runs: usize) -> Result<QuicRuns> {
    let mut out = QuicRuns {
        samples: vec![Vec::new(); QUIC_CASES.len()],
        ticks: vec![0; QUIC_CASES.len()],
        chunks: vec![0; QUIC_CASES.len()],
        udp: vec![Udp::default(); QUIC_CASES.len()],
        mtu: vec![0; QUIC_CASES.len()],
    };
    // One of each per round, so that load from elsewhere spreads over all of them.
    for _ in 0..runs {
        for (i, case) in QUIC_CASES.iter().enumerate() {
            let c = quic_copy(case, data).await?;
            out.samples[i].push(c.elapsed);
            out.ticks[i] += c.ticks;
            out.chunks[i] += c.chunks;
            out.udp[i].in_datagrams += c.udp.in_datagrams;
            out.udp[i].rcvbuf_errors += c.udp.rcvbuf_errors;
            out.mtu[i] = c.mtu;
        }
    }
    Ok(out)
}

fn print_quic(q: &QuicRuns, tcp: &[Duration], bytes: usize) {
    let (tcp_best, tcp_med) = rates(bytes, tcp);
    println!(
        "### The tunnel's ceiling: one QUIC stream alone, {} MiB ({} runs per row, interleaved)\n",
        bytes >> 20,
        q.samples.first().map_or(0, Vec::len)
    );
    println!(
        "Both ends in this process; no HTTP, no files. \"Shipped\" is the tunnel's own listener \
         and guest endpoint (`carrier::quic`: path MTU searched up to 65,527 bytes, GSO batches \
         cut to what a UDP send takes, 4 MiB socket buffers as far as `net.core.rmem_max` \
         allows); \"before issue 17\" is quinn's default endpoint and socket with the tunnel's \
         windows. TCP is the loopback copy of the first home location.\n"
    );
    println!(
        "| measure | best MB/s | median MB/s | best / TCP best | median / TCP median | CPU s \
         | MB per CPU s | path MTU (bytes) | bytes per `read_chunk` | UDP datagrams in | UDP drops \
         (rcvbuf) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (i, case) in QUIC_CASES.iter().enumerate() {
        let samples = &q.samples[i];
        let (best, med) = rates(bytes, samples);
        let runs = samples.len() as f64;
        let cpu = q.ticks[i] as f64 / TICKS_PER_SEC / runs;
        println!(
            "| QUIC {} | {best:.0} | {med:.0} | {:.0} % | {:.0} % | {cpu:.2} | {:.0} | {} | {:.0} | \
             {:.0} | {:.0} |",
            case.name,
            100.0 * best / tcp_best,
            100.0 * med / tcp_med,
            bytes as f64 / 1e6 / cpu,
            q.mtu[i],
            (bytes * samples.len()) as f64 / q.chunks[i].max(1) as f64,
            q.udp[i].in_datagrams as f64 / runs,
            q.udp[i].rcvbuf_errors as f64 / runs
        );
    }
    println!();
    for direction in [Direction::ToGuest, Direction::ToControlPlane] {
        let of = |setup: Setup| {
            QUIC_CASES
                .iter()
                .position(|c| c.setup == setup && c.direction == direction)
                .map(|i| {
                    let cpu = q.ticks[i] as f64 / TICKS_PER_SEC / q.samples[i].len() as f64;
                    (rates(bytes, &q.samples[i]).1, cpu)
                })
                .unwrap_or((0.0, 0.0))
        };
        let ((before, before_cpu), (shipped, shipped_cpu)) =
            (of(Setup::Before), of(Setup::Shipped));
        println!(
            "- {}: shipped / before = **{:.2}×** the median rate, {:.2}× the CPU per byte",
            match direction {
                Direction::ToGuest => "control plane → guest",
                Direction::ToControlPlane => "guest → control plane",
            },
            shipped / before,
            shipped_cpu / before_cpu
        );
    }
    println!();
}

// ---------------------------------------------------------------------------------------------
// Machine facts.

/// The type of the filesystem holding `path` (from `df`), e.g. `ext4` or `tmpfs`.
fn fs_type(path: &Path) -> Option<String> {
    let out = Command::new("df")
        .args(["--output=fstype"])
        .arg(path)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines().nth(1).map(|l| l.trim().to_string())
}

fn command_line(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unavailable".into())
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

// ---------------------------------------------------------------------------------------------
// Report.

fn print_exec(l: &Latencies, opts: &Options) {
    let spawn = summarize(&l.spawn);
    println!(
        "### Exec round trip of `true` ({} runs per row after {} warm-ups, interleaved)\n",
        opts.exec_runs, opts.warmups
    );
    println!(
        "| measure | client | p50 ms | p99 ms | mean ms | p50 / spawn p50 | response head p50 ms |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    println!(
        "| spawn `true` directly (floor) | — | {:.3} | {:.3} | {:.3} | 1.00× | — |",
        ms(spawn.p50),
        ms(spawn.p99),
        ms(spawn.mean)
    );
    let summaries: Vec<(Summary, Summary)> = l
        .rows
        .iter()
        .map(|r| {
            let total: Vec<Duration> = r.iter().map(|t| t.total).collect();
            let head: Vec<Duration> = r.iter().map(|t| t.head).collect();
            (summarize(&total), summarize(&head))
        })
        .collect();
    for ((name, client), (total, head)) in ROWS.iter().zip(&summaries) {
        println!(
            "| {name} | {client} | {:.3} | {:.3} | {:.3} | {:.2}× | {:.3} |",
            ms(total.p50),
            ms(total.p99),
            ms(total.mean),
            ms(total.p50) / ms(spawn.p50),
            ms(head.p50)
        );
    }
    println!();
    let get = &summaries[0].0;
    for ((_, client), (exec, head)) in ROWS.iter().zip(&summaries).skip(1) {
        let added = ms(exec.p50) - ms(spawn.p50);
        println!(
            "- {client}: added at p50 = exec p50 − spawn p50 = **{added:.3} ms** (goal ≤ 3 ms: \
             {}); added at p99 = {:.3} ms; from the response head (sent once the guest reports \
             `started`) to the end of the body: {:.3} ms at p50",
            if added <= 3.0 { "met" } else { "missed" },
            ms(exec.p99) - ms(spawn.p99),
            ms(exec.p50) - ms(head.p50)
        );
    }
    println!(
        "- HTTP + database alone (the GET, keep-alive): {:.3} ms at p50\n",
        ms(get.p50)
    );
}

fn print_transfers(all: &[Transfers], quic: &QuicRuns, bytes: usize, runs: usize) {
    println!(
        "### Bulk transfer of {} MiB ({runs} runs per row, MB/s = 10^6 bytes/s)\n",
        bytes >> 20
    );
    println!(
        "CPU s is the CPU time of every process involved, per run; MB per CPU s is the cost in \
         work, which other load on the machine disturbs far less than the wall-clock rate.\n"
    );
    println!(
        "| home on | measure | best MB/s | median MB/s | best / TCP best | median / TCP median \
         | CPU s | MB per CPU s |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for t in all {
        let (tcp_best, tcp_med) = rates(bytes, &t.tcp);
        let place = format!("`{}` ({})", t.location, t.fs);
        let row = |name: &str, samples: &[Duration], ticks: u64| {
            let (best, med) = rates(bytes, samples);
            let cpu = ticks as f64 / TICKS_PER_SEC / samples.len() as f64;
            println!(
                "| {place} | {name} | {best:.0} | {med:.0} | {:.0} % | {:.0} % | {cpu:.2} | {:.0} |",
                100.0 * best / tcp_best,
                100.0 * med / tcp_med,
                bytes as f64 / 1e6 / cpu
            );
        };
        let all_ticks = |c: Cpu| c.server + c.guest + c.bench;
        row("loopback TCP copy (anchor)", &t.tcp, t.tcp_ticks);
        row(
            "write + fsync to the home's filesystem",
            &t.disk,
            t.disk_ticks,
        );
        row(
            "upload `PUT …/files/content` via tunnel",
            &t.up,
            all_ticks(t.up_cpu),
        );
        row(
            "download `GET …/files/content` via tunnel",
            &t.down,
            all_ticks(t.down_cpu),
        );
    }
    println!();
    println!(
        "Where a tunnel transfer spends: CPU seconds of each process and the host's UDP \
         datagrams received and dropped for a full receive buffer, per transfer (mean over the \
         runs; the machine has {} cores). With GSO/GRO a datagram carries many QUIC packets:\n",
        nproc()
    );
    println!(
        "| home on | transfer | wall s | rakazo serve CPU s | rakazo-guest CPU s | bench CPU s | \
         UDP datagrams in | UDP drops (rcvbuf) |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for t in all {
        for (name, samples, cpu) in [
            ("upload", &t.up, t.up_cpu),
            ("download", &t.down, t.down_cpu),
        ] {
            let runs = samples.len() as f64;
            let wall: Duration = samples.iter().sum();
            let per = |ticks: u64| ticks as f64 / TICKS_PER_SEC / runs;
            println!(
                "| `{}` ({}) | {name} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} |",
                t.location,
                t.fs,
                wall.as_secs_f64() / runs,
                per(cpu.server),
                per(cpu.guest),
                per(cpu.bench),
                cpu.udp.in_datagrams as f64 / runs,
                cpu.udp.rcvbuf_errors as f64 / runs
            );
        }
    }
    println!();
    for t in all {
        let (tcp_best, tcp_med) = rates(bytes, &t.tcp);
        let (up_best, up_med) = rates(bytes, &t.up);
        let (down_best, down_med) = rates(bytes, &t.down);
        let verdict = |best: f64, med: f64| {
            if med / tcp_med >= 0.5 {
                "met"
            } else if best / tcp_best >= 0.5 {
                "met by the best run only"
            } else {
                "missed"
            }
        };
        println!(
            "- home on `{}` ({}): upload {:.0} % / download {:.0} % of loopback TCP (median); \
             goal ≥ 50 %: upload {}, download {}",
            t.location,
            t.fs,
            100.0 * up_med / tcp_med,
            100.0 * down_med / tcp_med,
            verdict(up_best, up_med),
            verdict(down_best, down_med)
        );
    }
    let (quic_up, quic_down) = (
        quic.shipped_median(bytes, Direction::ToGuest),
        quic.shipped_median(bytes, Direction::ToControlPlane),
    );
    for t in all {
        let (_, up_med) = rates(bytes, &t.up);
        let (_, down_med) = rates(bytes, &t.down);
        let met = |r: f64| if r >= 0.85 { "met" } else { "missed" };
        println!(
            "- home on `{}` ({}): upload {:.0} % / download {:.0} % of one bare QUIC stream in \
             the same direction (shipped configuration, medians, same run: {quic_up:.0} / \
             {quic_down:.0} MB/s); goal ≥ 85 % (issue 17): upload {}, download {}",
            t.location,
            t.fs,
            100.0 * up_med / quic_up,
            100.0 * down_med / quic_down,
            met(up_med / quic_up),
            met(down_med / quic_down)
        );
    }
    println!();
}

fn nproc() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0)
}

#[tokio::main]
async fn main() -> Result<()> {
    let opts = Options::parse()?;
    println!("## Foundation (issue 2): run of `bench_foundation`\n");
    println!(
        "- date: {}",
        command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
    );
    println!("- machine: {} cores, {}", nproc(), cpu_model());
    println!("- kernel: {}", command_line("uname", &["-sr"]));
    println!("- rustc: {}", command_line("rustc", &["-V"]));
    println!("- binaries: `{}`", opts.bin_dir.display());
    println!("- load average at start: {}", loadavg());

    if opts.quic_only {
        let data = pseudo_random(opts.mib << 20);
        let mut tcp = Vec::new();
        for _ in 0..opts.transfer_runs {
            tcp.push(tcp_copy(&data).await?);
        }
        let quic = measure_quic(&data, opts.transfer_runs).await?;
        print_quic(&quic, &tcp, data.len());
        println!("- load average at end: {}", loadavg());
        return Ok(());
    }
    let first = opts
        .home_parents
        .first()
        .ok_or_else(|| anyhow!("no home location"))?;
    let server = Server::start(&opts.bin_dir, first).await?;
    let homes: Vec<String> = opts
        .home_parents
        .iter()
        .map(|p| format!("`{}` ({})", p.display(), fs_type(p).unwrap_or_default()))
        .collect();
    println!(
        "- data dirs and homes under: {}; the guest fsyncs each uploaded file before it answers\n",
        homes.join(", ")
    );
    let latencies = measure_exec(&server, &opts).await?;
    if opts.exec_only {
        print_exec(&latencies, &opts);
        println!("- load average at end: {}", loadavg());
        return Ok(());
    }

    let data = pseudo_random(opts.mib << 20);
    let mut transfers = vec![measure_transfers(&server, &data, opts.transfer_runs).await?];
    drop(server);
    for parent in opts.home_parents.iter().skip(1) {
        let server = Server::start(&opts.bin_dir, parent).await?;
        transfers.push(measure_transfers(&server, &data, opts.transfer_runs).await?);
    }
    let quic = measure_quic(&data, opts.transfer_runs).await?;

    print_exec(&latencies, &opts);
    print_transfers(&transfers, &quic, data.len(), opts.transfer_runs);
    print_quic(&quic, &transfers[0].tcp, data.len());
    println!("- load average at end: {}", loadavg());
    Ok(())
}
