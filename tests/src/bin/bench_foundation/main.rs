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

mod exec;
mod quic;
mod server;
mod transfer;
use exec::{measure_exec, print_exec};
use quic::{measure_quic, print_quic, Direction, QuicRuns};
use server::{udp_counters, Cpu, Server, Udp};
use transfer::{measure_transfers, print_transfers, pseudo_random, rates, tcp_copy};

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

fn nproc() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0)
}

#[tokio::main]
async fn main() -> Result<()> {
    tests::bench::Usage::new("the foundation: exec round trip, QUIC and file transfers")
        .flag("--exec-runs", "N", "measured execs (default 300; smoke 20)")
        .flag(
            "--warmups",
            "N",
            "execs before measuring (default 20; smoke 2)",
        )
        .flag("--mib", "N", "MiB of each transfer (default 256; smoke 8)")
        .flag("--transfer-runs", "N", "transfers (default 3; smoke 1)")
        .flag(
            "--home-parent",
            "PATH",
            "where a home goes; repeatable (default: the temp dir, and /dev/shm on tmpfs)",
        )
        .flag(
            "--bin-dir",
            "PATH",
            "where rakazo and rakazo-guest are (default: beside this binary)",
        )
        .switch("--quic-only", "only the QUIC part")
        .switch("--exec-only", "only the exec part")
        .check();
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
