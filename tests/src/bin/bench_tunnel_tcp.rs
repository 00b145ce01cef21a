//! `bench_tunnel_tcp`: the tunnel over TCP (issue 13) against QUIC on UDP and a plain loopback
//! TCP socket, in one run.
//!
//! - **The transport alone**, in this process, between the production configurations (the
//!   control plane's `tunnel::bind`, both its endpoints; the guest's `tunnel::client_config` and
//!   `carrier_client_config`): the round trip of one operation (a new stream, 64 bytes each way,
//!   as every tunnel operation opens a stream) and one stream's bulk copy each way, over QUIC on
//!   UDP, over the TCP carrier, and over a plain TCP connection (ping-pong and copy) as anchor.
//! - **End to end**, two `rakazo serve` with one local computer each: one whose guest runs QUIC on
//!   UDP, one whose guest is told a UDP address that never answers and so runs over TCP (checked
//!   in each server's log): exec round trip of `true` through the API, and upload and download of
//!   a file, against the same anchors.
//!
//! Rows are interleaved (one of each per round) so load that comes and goes hits them alike.
//! Timings are printed, never asserted; only wrong results fail the run.
//!
//! `cargo build --release -p control-plane -p guest-agent -p tests --bins &&
//!  target/release/bench_tunnel_tcp [--rtt-runs N] [--mib N] [--bulk-runs N] [--exec-runs N]
//!  [--file-mib N]`
//!
//! `--smoke`: a few runs of every part, for CI (`scripts/bench-smoke.sh`); explicit options win.

use anyhow::{bail, ensure, Context, Result};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use tests::bench::{arg, ms, now, size};
use tests::{udp_black_hole, World, WorldOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Bytes of a round trip's request and answer.
const SMALL: usize = 64;
/// Write size of the bulk copies (as the tunnel's file streams write).
const CHUNK: usize = 256 * 1024;

/// p50, p99 (nearest rank) and mean of samples, in ms.
struct Summary {
    p50: f64,
    p99: f64,
    mean: f64,
}

impl Summary {
    fn of(samples: &[Duration]) -> Self {
        let mut v: Vec<f64> = samples.iter().map(|d| ms(*d)).collect();
        v.sort_by(f64::total_cmp);
        let rank = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Self {
            p50: rank(0.5),
            p99: rank(0.99),
            mean: v.iter().sum::<f64>() / v.len() as f64,
        }
    }
}

/// Best and median rate of copies of `bytes` each, MB/s (10^6).
fn rates(bytes: usize, samples: &[Duration]) -> (f64, f64) {
    let mut r: Vec<f64> = samples
        .iter()
        .map(|d| bytes as f64 / 1e6 / d.as_secs_f64())
        .collect();
    r.sort_by(f64::total_cmp);
    (r[r.len() - 1], r[r.len() / 2])
}

// ---------------------------------------------------------------------------------------------
// The transport alone.

/// Both ends of one QUIC connection.
struct Pair {
    /// The guest's end (the client) and the control plane's.
    guest: quinn::Connection,
    control: quinn::Connection,
    /// Kept alive for the pair's lifetime.
    _guest_endpoint: quinn::Endpoint,
    _carrier: Option<Arc<carrier::ClientSocket>>,
}

/// The control plane's tunnel as `rakazo serve` binds it, and the guest's pin.
struct Tunnel(tests::tunnel::Tunnel);

impl Tunnel {
    fn bind() -> Result<Self> {
        Ok(Self(tests::tunnel::Tunnel::bind()?))
    }

    /// A new connection from a guest over UDP (`tcp == false`) or the TCP carrier.
    async fn pair(&self, tcp: bool) -> Result<Pair> {
        let (udp_endpoint, tcp_endpoint) = self.0.listening.endpoints();
        let server = if tcp { tcp_endpoint } else { udp_endpoint }.clone();
        let accept = tokio::spawn(async move {
            let incoming = server.accept().await.context("endpoint closed")?;
            Ok::<_, anyhow::Error>(incoming.await?)
        });
        let (guest, endpoint, socket) = if tcp {
            let socket = carrier::ClientSocket::connect(
                self.0.listening.tcp_addr()?,
                &carrier::Limits::default(),
            )
            .await?;
            let endpoint = carrier::client_endpoint(socket.clone())?;
            let config = guest_agent::tunnel::carrier_client_config(self.0.pin)?;
            let conn = endpoint
                .connect_with(config, socket.server(), "rakazo-control-plane")?
                .await?;
            (conn, endpoint, Some(socket))
        } else {
            let endpoint = guest_agent::tunnel::udp_endpoint("127.0.0.1:0".parse()?, self.0.pin)?;
            let conn = endpoint
                .connect(self.0.listening.local_addr()?, "rakazo-control-plane")?
                .await?;
            (conn, endpoint, None)
        };
        Ok(Pair {
            guest,
            control: accept.await??,
            _guest_endpoint: endpoint,
            _carrier: socket,
        })
    }
}

/// The guest's side of the round trips: every stream is read to its end and answered with the
/// same number of bytes, then finished (an operation and its reply).
fn answer_streams(conn: quinn::Connection) {
    tokio::spawn(async move {
        while let Ok((mut send, mut recv)) = conn.accept_bi().await {
            tokio::spawn(async move {
                if let Ok(req) = recv.read_to_end(1 << 20).await {
                    let _ = send.write_all(&req).await;
                    let _ = send.finish();
                }
            });
        }
    });
}

/// One operation's round trip: the control plane opens a stream, sends, finishes, reads the
/// answer to its end.
async fn op_round_trip(conn: &quinn::Connection) -> Result<Duration> {
    let t = now();
    let (mut send, mut recv) = conn.open_bi().await?;
    send.write_all(&[7u8; SMALL]).await?;
    send.finish()?;
    let back = recv.read_to_end(1 << 20).await?;
    let d = t.elapsed();
    ensure!(back.len() == SMALL, "answer of {} bytes", back.len());
    Ok(d)
}

/// A loopback TCP echo of [`SMALL`]-byte messages, and a connection to it.
async fn tcp_ping_pong() -> Result<TcpStream> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        if let Ok((mut s, _)) = listener.accept().await {
            let _ = s.set_nodelay(true);
            let mut buf = [0u8; SMALL];
            while s.read_exact(&mut buf).await.is_ok() {
                if s.write_all(&buf).await.is_err() {
                    return;
                }
            }
        }
    });
    let s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    Ok(s)
}

async fn tcp_round_trip(s: &mut TcpStream) -> Result<Duration> {
    let t = now();
    s.write_all(&[7u8; SMALL]).await?;
    let mut buf = [0u8; SMALL];
    s.read_exact(&mut buf).await?;
    Ok(t.elapsed())
}

/// One stream from `from` to `to` carrying `data` in [`CHUNK`] writes; timed until the reader
/// has every byte.
async fn stream_copy(
    from: &quinn::Connection,
    to: &quinn::Connection,
    data: &Bytes,
) -> Result<Duration> {
    let (mut send, _recv) = from.open_bi().await?;
    let to = to.clone();
    let t = now();
    let read = tokio::spawn(async move {
        let (_send, mut recv) = to.accept_bi().await?;
        let mut got = 0usize;
        while let Some(chunk) = recv.read_chunk(usize::MAX, true).await? {
            got += chunk.bytes.len();
        }
        Ok::<_, anyhow::Error>(got)
    });
    for chunk in data.chunks(CHUNK) {
        send.write_all(chunk).await?;
    }
    send.finish()?;
    let got = read.await??;
    let d = t.elapsed();
    ensure!(got == data.len(), "copy got {got} of {} bytes", data.len());
    Ok(d)
}

/// A plain loopback TCP copy of `data` in [`CHUNK`] writes.
async fn tcp_copy(data: &Bytes) -> Result<Duration> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let read = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await?;
        let mut buf = vec![0u8; CHUNK];
        let mut got = 0usize;
        loop {
            match s.read(&mut buf).await? {
                0 => return Ok::<_, anyhow::Error>(got),
                n => got += n,
            }
        }
    });
    let t = now();
    let mut s = TcpStream::connect(addr).await?;
    for chunk in data.chunks(CHUNK) {
        s.write_all(chunk).await?;
    }
    s.shutdown().await?;
    let got = read.await??;
    let d = t.elapsed();
    ensure!(got == data.len(), "tcp copy got {got} bytes");
    Ok(d)
}

async fn transport_alone(rtt_runs: usize, mib: usize, bulk_runs: usize) -> Result<()> {
    let tunnel = Tunnel::bind()?;
    let quic = tunnel.pair(false).await?;
    let tcp = tunnel.pair(true).await?;
    answer_streams(quic.guest.clone());
    answer_streams(tcp.guest.clone());
    let mut plain = tcp_ping_pong().await?;
    let samples = rounds(rtt_runs, rtt_runs / 10, async || {
        Ok([
            op_round_trip(&quic.control).await?,
            op_round_trip(&tcp.control).await?,
            tcp_round_trip(&mut plain).await?,
        ])
    })
    .await?;
    println!("### The transport alone: one operation's round trip ({rtt_runs} runs per row, interleaved)\n");
    println!("A new stream from the control plane, {SMALL} bytes each way, read to its end (what every tunnel operation costs beyond its work); the anchor is a {SMALL}-byte ping-pong on one loopback TCP connection (`TCP_NODELAY`).\n");
    print_round_trips(
        [
            "QUIC on UDP",
            "QUIC over the TCP carrier",
            "plain TCP socket (anchor)",
        ],
        samples,
    );

    // Fresh connections: the guest ends above answer every stream they accept.
    let (quic, tcp) = (tunnel.pair(false).await?, tunnel.pair(true).await?);
    let data = Bytes::from(pattern(mib << 20));
    let copies = rounds(bulk_runs, 0, async || {
        Ok([
            stream_copy(&quic.guest, &quic.control, &data).await?,
            stream_copy(&tcp.guest, &tcp.control, &data).await?,
            stream_copy(&quic.control, &quic.guest, &data).await?,
            stream_copy(&tcp.control, &tcp.guest, &data).await?,
            tcp_copy(&data).await?,
        ])
    })
    .await?;
    println!("### The transport alone: one stream's bulk copy, {mib} MiB ({bulk_runs} runs per row, interleaved; MB/s = 10^6 bytes/s)\n");
    print_rates(
        data.len(),
        [
            ("QUIC on UDP", "guest → control plane"),
            ("QUIC over the TCP carrier", "guest → control plane"),
            ("QUIC on UDP", "control plane → guest"),
            ("QUIC over the TCP carrier", "control plane → guest"),
            ("plain TCP socket (anchor)", "one way"),
        ],
        &copies,
    );
    Ok(())
}

/// Runs `round` `warmups + runs` times; keeps the samples of the last `runs`, per row.
async fn rounds<const N: usize>(
    runs: usize,
    warmups: usize,
    mut round: impl AsyncFnMut() -> Result<[Duration; N]>,
) -> Result<[Vec<Duration>; N]> {
    let mut samples: [Vec<Duration>; N] = std::array::from_fn(|_| Vec::new());
    for i in 0..warmups + runs {
        let got = round().await?;
        if i >= warmups {
            for (row, d) in samples.iter_mut().zip(got) {
                row.push(d);
            }
        }
    }
    Ok(samples)
}

/// A round-trip table: the rows are QUIC, TCP carrier, plain TCP socket.
fn print_round_trips(names: [&str; 3], samples: [Vec<Duration>; 3]) {
    let rows = samples.map(|s| Summary::of(&s));
    let (quic, plain) = (rows[0].p50, rows[2].p50);
    println!("| carrier | p50 ms | p99 ms | mean ms | p50 / QUIC p50 | p50 / TCP socket p50 |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, s) in names.iter().zip(&rows) {
        println!(
            "| {name} | {:.3} | {:.3} | {:.3} | {:.2}× | {:.1}× |",
            s.p50,
            s.p99,
            s.mean,
            s.p50 / quic,
            s.p50 / plain
        );
    }
    println!();
}

/// A rate table: rows QUIC and TCP carrier one way, the same the other way, then the plain TCP
/// copy; each compared with the QUIC row of its direction and with the TCP copy.
fn print_rates(bytes: usize, rows: [(&str, &str); 5], copies: &[Vec<Duration>; 5]) {
    let median = |i: usize| rates(bytes, &copies[i]).1;
    let plain = median(4);
    println!("| carrier | direction | best MB/s | median MB/s | median / QUIC median | median / TCP socket median |");
    println!("|---|---|---:|---:|---:|---:|");
    for (i, (name, dir)) in rows.iter().enumerate() {
        let base = median(if i < 2 {
            0
        } else if i < 4 {
            2
        } else {
            4
        });
        let (best, med) = rates(bytes, &copies[i]);
        println!(
            "| {name} | {dir} | {best:.0} | {med:.0} | {:.2}× | {:.2}× |",
            med / base,
            med / plain
        );
    }
    println!();
}

// ---------------------------------------------------------------------------------------------
// End to end.

async fn world(tcp: bool) -> Result<(World, String)> {
    let mut opts = WorldOptions::default();
    if tcp {
        let black_hole = udp_black_hole().context("no udp socket")?;
        opts.env = vec![
            ("RAKAZO_ADVERTISE_ADDR".into(), black_hole.to_string()),
            ("RAKAZO_ADVERTISE_TCP_ADDR".into(), "127.0.0.1:0".into()),
        ];
    }
    let mut w = World::start_with(opts).await?;
    let c = w.create_computer("bench-tcp").await?;
    let want = if tcp { "tcp" } else { "quic" };
    // The log line follows the registration the create waited for by a moment.
    let got = tests::wait_for(Duration::from_secs(30), "the guest connected line", || {
        w.transports(&c).pop()
    })
    .await
    .ok();
    ensure!(
        got.as_deref() == Some(want),
        "the guest connected over {got:?}, not {want}"
    );
    Ok((w, c))
}

async fn exec_true(w: &World, c: &str) -> Result<Duration> {
    let t = now();
    let out = w.exec(c, serde_json::json!({ "argv": ["true"] })).await?;
    let d = t.elapsed();
    if out.code != Some(0) {
        bail!("exec true: {out:?}");
    }
    Ok(d)
}

async fn upload(w: &World, c: &str, data: &[u8]) -> Result<Duration> {
    let t = now();
    w.put_file(c, "big.bin", data.to_vec(), false).await?;
    Ok(t.elapsed())
}

async fn download(w: &World, c: &str, len: usize) -> Result<Duration> {
    let t = now();
    let got = w.get_file(c, "big.bin").await?;
    let d = t.elapsed();
    ensure!(got.len() == len, "downloaded {} of {len} bytes", got.len());
    Ok(d)
}

async fn end_to_end(exec_runs: usize, file_mib: usize, bulk_runs: usize) -> Result<()> {
    let (mut wq, cq) = world(false).await?;
    let (mut wt, ct) = world(true).await?;
    let mut plain = tcp_ping_pong().await?;
    let samples = rounds(exec_runs, exec_runs / 10, async || {
        Ok([
            exec_true(&wq, &cq).await?,
            exec_true(&wt, &ct).await?,
            tcp_round_trip(&mut plain).await?,
        ])
    })
    .await?;
    println!("### End to end: exec round trip of `true` ({exec_runs} runs per row, interleaved)\n");
    println!("`POST /v1/computers/{{id}}/exec` through the shipped client (keep-alive, `TCP_NODELAY`) to a local computer, read to the exit code; each server's log shows its guest connected over the transport named.\n");
    print_round_trips(
        [
            "QUIC on UDP",
            "QUIC over the TCP carrier (UDP dropped)",
            "plain TCP socket ping-pong (anchor)",
        ],
        samples,
    );

    let data = pattern(file_mib << 20);
    let bytes = Bytes::from(data.clone());
    let copies = rounds(bulk_runs, 0, async || {
        Ok([
            upload(&wq, &cq, &data).await?,
            upload(&wt, &ct, &data).await?,
            download(&wq, &cq, data.len()).await?,
            download(&wt, &ct, data.len()).await?,
            tcp_copy(&bytes).await?,
        ])
    })
    .await?;
    ensure!(
        wt.get_file(&ct, "big.bin").await? == data,
        "the file came back different over tcp"
    );
    println!("### End to end: a {file_mib} MiB file through the API ({bulk_runs} runs per row, interleaved; MB/s = 10^6 bytes/s)\n");
    println!("Upload is `PUT …/files/content` until the reply (the guest fsyncs before it answers); download is `GET` of the same file.\n");
    print_rates(
        data.len(),
        [
            ("QUIC on UDP", "upload"),
            ("QUIC over the TCP carrier", "upload"),
            ("QUIC on UDP", "download"),
            ("QUIC over the TCP carrier", "download"),
            ("plain TCP socket copy (anchor)", "one way"),
        ],
        &copies,
    );
    wq.check_log()?;
    wt.check_log()
}

/// Bytes that do not compress (a TLS stream does not care, a disk might).
fn pattern(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[tokio::main]
async fn main() -> Result<()> {
    tests::bench::Usage::new("the tunnel over TCP against QUIC on UDP and plain loopback TCP")
        .flag(
            "--rtt-runs",
            "N",
            "measured round trips (default 2000; smoke 50)",
        )
        .flag(
            "--mib",
            "N",
            "MiB of the bulk transfer (default 256; smoke 8)",
        )
        .flag("--bulk-runs", "N", "bulk transfers (default 3; smoke 1)")
        .flag("--exec-runs", "N", "measured execs (default 300; smoke 20)")
        .flag(
            "--file-mib",
            "N",
            "MiB of the file transfer (default 64; smoke 4)",
        )
        .switch("--transport-only", "the transport alone, no control plane")
        .check();
    if tests::tcp_only_tunnel().is_some() {
        bail!("unset RAKAZO_TEST_TUNNEL: this bench compares both transports itself");
    }
    let rtt_runs = arg("--rtt-runs", size(2000, 50));
    let mib = arg("--mib", size(256, 8));
    let bulk_runs = arg("--bulk-runs", size(3, 1));
    let exec_runs = arg("--exec-runs", size(300, 20));
    let file_mib = arg("--file-mib", size(64, 4));
    ensure!(
        rtt_runs > 0 && mib > 0 && bulk_runs > 0 && exec_runs > 0 && file_mib > 0,
        "counts must be positive"
    );
    let transport_only = std::env::args().any(|a| a == "--transport-only");
    println!(
        "## Tunnel over TCP (issue 13): run of `bench_tunnel_tcp`\n\n- carrier packet size: {} bytes\n",
        carrier::PACKET_SIZE
    );
    transport_alone(rtt_runs, mib, bulk_runs).await?;
    if !transport_only {
        end_to_end(exec_runs, file_mib, bulk_runs).await?;
    }
    Ok(())
}
