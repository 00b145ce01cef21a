//! The uploads and downloads of `bench_foundation` through the tunnel, against a loopback TCP
//! copy and a disk write, and their table.

use super::*;

/// A request body that hands out an in-memory buffer in fixed-size frames, without copying.
struct ChunkBody {
    pub(super) rest: Bytes,
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
pub(super) fn pseudo_random(len: usize) -> Bytes {
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

pub(super) async fn upload(server: &Server, path: &str, data: &Bytes) -> Result<Duration> {
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

pub(super) async fn download(server: &Server, path: &str, len: usize) -> Result<Duration> {
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
pub(super) async fn tcp_copy(data: &Bytes) -> Result<Duration> {
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

pub(super) struct Transfers {
    pub(super) location: String,
    pub(super) fs: String,
    pub(super) tcp: Vec<Duration>,
    pub(super) disk: Vec<Duration>,
    pub(super) up: Vec<Duration>,
    down: Vec<Duration>,
    /// CPU ticks spent during each row, summed over the runs: this process's for the TCP copy
    /// and the disk write, every process's for the tunnel transfers.
    tcp_ticks: u64,
    disk_ticks: u64,
    up_cpu: Cpu,
    down_cpu: Cpu,
}

pub(super) async fn measure_transfers(
    server: &Server,
    data: &Bytes,
    runs: usize,
) -> Result<Transfers> {
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
pub(super) fn rates(bytes: usize, samples: &[Duration]) -> (f64, f64) {
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

pub(super) fn print_transfers(all: &[Transfers], quic: &QuicRuns, bytes: usize, runs: usize) {
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
