//! The tunnel's ceiling in `bench_foundation`: one QUIC stream between the shipped QUIC
//! configuration alone, and with the configuration before issue 17, and their table.

use super::*;

/// Which way a QUIC-only copy goes. The control plane is the QUIC server, the guest the client.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Direction {
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
    pub(super) name: &'static str,
    pub(super) direction: Direction,
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
    pub(super) server: quinn::Endpoint,
    pub(super) client: quinn::Endpoint,
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
    pub(super) elapsed: Duration,
    /// This process's CPU ticks (both ends).
    pub(super) ticks: u64,
    /// Chunks `read_chunk` handed out.
    pub(super) chunks: usize,
    pub(super) udp: Udp,
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
pub(super) struct QuicRuns {
    pub(super) samples: Vec<Vec<Duration>>,
    pub(super) ticks: Vec<u64>,
    pub(super) chunks: Vec<usize>,
    pub(super) udp: Vec<Udp>,
    /// The writer's path MTU at the end of the last run.
    mtu: Vec<u16>,
}

impl QuicRuns {
    /// The median rate of the shipped configuration in `direction`.
    pub(super) fn shipped_median(&self, bytes: usize, direction: Direction) -> f64 {
        QUIC_CASES
            .iter()
            .position(|c| c.setup == Setup::Shipped && c.direction == direction)
            .map_or(0.0, |i| rates(bytes, &self.samples[i]).1)
    }
}

pub(super) async fn measure_quic(data: &Bytes, runs: usize) -> Result<QuicRuns> {
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

pub(super) fn print_quic(q: &QuicRuns, tcp: &[Duration], bytes: usize) {
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
