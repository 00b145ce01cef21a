//! Containment's cost (issue 29), measured against its anchor in the same run: a fully contained
//! local computer (its own network namespace, everything through the egress gateway) against an
//! uncontained one (`--local-containment off`: the same host, no gateway), both inside the
//! namespaces of `tests::netlab` (no route off this machine), downloading from the lab's test
//! host (203.0.113.10, "the internet"):
//!
//! - **download**: `curl` of N MiB (1 GiB by default) from the test host, MB/s;
//! - **connection setup**: connect, one-byte HTTP answer, close, from Python in the computer,
//!   p50 and p99 over `--conns` connections;
//! - **gateway memory per idle connection**: the control plane's RSS before and while the
//!   computer holds `--idle` open connections to the test host (500 by default: a computer may
//!   hold 512 through the gateway), shown per 1,000;
//! - **exec round trip**: `POST …/exec` of `true`, p50, contained against uncontained.
//!
//! `cargo run --release -p tests --bin bench_egress -- [--mib N] [--conns N] [--idle N] [--runs N]`
//!
//! `--smoke`: a few runs of every part, for CI (`scripts/bench-smoke.sh`); explicit options win.

use anyhow::{bail, Context, Result};
use tests::bench::{arg, ms, now, percentile, size};
use tests::netlab::Lab;
use tests::{World, WorldOptions};

/// The test host's server: `GET /bytes/N` answers N zero bytes, anything else one byte; any
/// connection is held open until the client closes it.
const SERVER: &str = r#"
import socket, threading
buf = bytes(1 << 20)
def serve(c):
    try:
        req = c.recv(4096).decode(errors="replace")
        n = 1
        if req.startswith("GET /bytes/"):
            n = int(req.split()[1].rsplit("/", 1)[1])
        c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % n)
        while n > 0:
            k = min(n, len(buf))
            c.sendall(buf[:k])
            n -= k
        c.recv(1)
    except OSError:
        pass
    finally:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080))
s.listen(4096)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// Connection setup from inside the computer: prints one line of milliseconds per connection.
const CONNECTS: &str = r#"
import socket, sys, time
for _ in range(int(sys.argv[1])):
    t = time.perf_counter()
    s = socket.create_connection(("203.0.113.10", 8080), timeout=10)
    s.sendall(b"GET / HTTP/1.0\r\nHost: 203.0.113.10\r\n\r\n")
    data = b""
    while not data.endswith(b"\r\n\r\n\0"):
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    s.close()
    print((time.perf_counter() - t) * 1000)
"#;

/// Holds N connections open (each has sent its request and read the answer) for `hold` seconds.
const IDLE: &str = r#"
import socket, sys, time
conns = []
for _ in range(int(sys.argv[1])):
    s = socket.create_connection(("203.0.113.10", 8080), timeout=10)
    s.sendall(b"GET / HTTP/1.0\r\nHost: 203.0.113.10\r\n\r\n")
    s.recv(4096)
    conns.append(s)
print("held", len(conns), flush=True)
time.sleep(float(sys.argv[2]))
"#;

/// The RSS of the world's `rakazo serve`, in KiB.
fn server_rss_kib(w: &World) -> Result<u64> {
    let data_dir = w.data_dir.path().display().to_string();
    let pid = tests::pids_with_env("RAKAZO_DATA_DIR", &data_dir)
        .into_iter()
        .find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "rakazo")
        })
        .context("no rakazo serve process")?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS")
}

struct Figures {
    mb_per_s: f64,
    connect_p50: f64,
    connect_p99: f64,
    rss_per_conn_kib: f64,
    exec_p50: f64,
}

async fn measure(
    containment: &str,
    mib: usize,
    conns: usize,
    idle: usize,
    runs: usize,
) -> Result<Figures> {
    let mut w = World::start_with(WorldOptions {
        env: vec![("RAKAZO_LOCAL_CONTAINMENT".into(), containment.into())],
        allow_warn: vec!["are not contained".into()],
        ..Default::default()
    })
    .await?;
    let c = w
        .create_computer(&format!("ws-egress-{containment}"))
        .await?;

    let bytes = mib << 20;
    let out = w
        .sh(
            &c,
            &format!(
                "curl -s -o /dev/null -w '%{{size_download}} %{{time_total}}' \
                 http://203.0.113.10:8080/bytes/{bytes}"
            ),
        )
        .await?;
    let mut parts = out.split_whitespace();
    let got: usize = parts.next().context("size")?.parse()?;
    let secs: f64 = parts.next().context("time")?.parse()?;
    if got != bytes {
        bail!("{containment}: downloaded {got} bytes of {bytes}");
    }
    let mb_per_s = bytes as f64 / 1e6 / secs;

    let out = w
        .exec(
            &c,
            serde_json::json!({ "argv": ["python3", "-c", CONNECTS, conns.to_string()] }),
        )
        .await?;
    let times: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    if times.len() != conns {
        bail!(
            "{containment}: {} of {conns} connections: {}",
            times.len(),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let before = server_rss_kib(&w)?;
    let hold = w.exec(
        &c,
        serde_json::json!({ "argv": ["python3", "-c", IDLE, idle.to_string(), "4"] }),
    );
    let sample = async {
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        server_rss_kib(&w)
    };
    let (held, during) = tokio::join!(hold, sample);
    let held = held?;
    if !String::from_utf8_lossy(&held.stdout).contains(&format!("held {idle}")) {
        bail!(
            "{containment}: the idle connections were not all held: {}",
            String::from_utf8_lossy(&held.stderr)
        );
    }
    let rss_per_conn_kib = (during? as f64 - before as f64) / idle as f64;

    let mut execs = Vec::new();
    for _ in 0..runs {
        let t = now();
        w.exec(&c, serde_json::json!({ "argv": ["true"] })).await?;
        execs.push(ms(t.elapsed()));
    }
    w.check_log()?;
    Ok(Figures {
        mb_per_s,
        connect_p50: percentile(&times, 0.5),
        connect_p99: percentile(&times, 0.99),
        rss_per_conn_kib,
        exec_p50: percentile(&execs, 0.5),
    })
}

fn main() -> Result<()> {
    tests::bench::Usage::new("containment's cost: a contained computer against an uncontained one")
        .flag("--mib", "N", "MiB downloaded (default 1024; smoke 16)")
        .flag("--conns", "N", "connections opened (default 500; smoke 20)")
        .flag(
            "--idle",
            "N",
            "idle connections held (default 500; smoke 50)",
        )
        .flag("--runs", "N", "measured requests (default 200; smoke 10)")
        .check();
    let mib = arg("--mib", size(1024, 16));
    let conns = arg("--conns", size(500, 20));
    let idle = arg("--idle", size(500, 50));
    let runs = arg("--runs", size(200, 10));
    let mut lab = Lab::new()?;
    lab.serve_on_host(&["python3", "-c", SERVER])?;
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (gw, direct) = lab.inside(|_| {
        Box::pin(async move {
            let gw = measure("full", mib, conns, idle, runs).await?;
            let direct = measure("off", mib, conns, idle, runs).await?;
            Ok((gw, direct))
        })
    })?;
    println!(
        "bench_egress: {mib} MiB download, {conns} connections, {idle} idle connections, {runs} execs; load {}",
        tests::bench::loadavg()
    );
    println!("| figure | through the gateway | without (anchor) | ratio |");
    println!("|---|---|---|---|");
    println!(
        "| download MB/s | {:.0} | {:.0} | {:.2}× |",
        gw.mb_per_s,
        direct.mb_per_s,
        gw.mb_per_s / direct.mb_per_s
    );
    println!(
        "| connection setup p50 ms | {:.3} | {:.3} | +{:.3} ms |",
        gw.connect_p50,
        direct.connect_p50,
        gw.connect_p50 - direct.connect_p50
    );
    println!(
        "| connection setup p99 ms | {:.3} | {:.3} | +{:.3} ms |",
        gw.connect_p99,
        direct.connect_p99,
        gw.connect_p99 - direct.connect_p99
    );
    println!(
        "| control plane RSS per 1,000 idle connections MiB | {:.1} | {:.1} | +{:.1} MiB |",
        gw.rss_per_conn_kib * 1000.0 / 1024.0,
        direct.rss_per_conn_kib * 1000.0 / 1024.0,
        (gw.rss_per_conn_kib - direct.rss_per_conn_kib) * 1000.0 / 1024.0
    );
    println!(
        "| exec round trip p50 ms | {:.3} | {:.3} | {:.2}× |",
        gw.exec_p50,
        direct.exec_p50,
        gw.exec_p50 / direct.exec_p50
    );
    Ok(())
}
