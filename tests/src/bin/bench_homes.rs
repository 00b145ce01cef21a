//! Homes benchmark (issue 6): checkpoint and restore of a home of mixed file sizes (1 GiB by
//! default; a number argument sets MiB) through the real control plane and guest to a local
//! s3s-fs (or, with `--garage PATH`, a single-node Garage; `--parts-in-flight N` sets the
//! control plane's multipart concurrency), against `tar -c | zstd -1 > file` of the same tree as the floor, plus raw AES-256-GCM
//! sealing speed from `homes`' `bench_seal`. Reports MB/s of home content, the control plane's
//! peak RSS growth over its idle RSS (sampled from /proc every 20 ms) and CPU seconds per process.
//! A checkpoint is also split at its `committing` progress line: the pipeline's own rate, then
//! the store's completion of the multipart upload (s3s-fs reads, concatenates and MD5s every part
//! again there; Garage and AWS S3 complete in metadata).
//!
//! Run in release, after building the binaries it starts:
//! `cargo build --release -p control-plane -p guest-agent -p homes -p tests --bin rakazo
//! --bin rakazo-guest --bin bench_seal --bin bench_homes && ./target/release/bench_homes`.
//!
//! `--smoke`: a few runs of every part, for CI (`scripts/bench-smoke.sh`); explicit options win.

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use control_plane::client::full_body;
use http_body_util::BodyExt;
use hyper::Method;
use rand::RngCore;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tests::bench::{args as bench_args, now, size};
use tests::garage::Garage;
use tests::procstat::cpu_s;
use tests::s3::S3Server;
use tests::{ObjectStoreOptions, World, WorldOptions};

fn mb_per_s(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / 1e6 / elapsed.as_secs_f64()
}

/// Writes `count` files of `size` bytes under `dir`; every other file is text-like (compressible),
/// the rest random. Returns the bytes written.
fn write_files(dir: &Path, count: usize, size: usize, rng: &mut impl RngCore) -> Result<u64> {
    std::fs::create_dir_all(dir)?;
    let text: Vec<u8> = b"the quick brown fox jumps over the lazy dog 0123456789\n"
        .iter()
        .copied()
        .cycle()
        .take(size)
        .collect();
    let mut random = vec![0u8; size];
    for i in 0..count {
        let content = if i % 2 == 0 {
            rng.fill_bytes(&mut random);
            &random
        } else {
            &text
        };
        // Spread small files over subdirectories, as a real home is.
        let sub = dir.join(format!("d{:03}", i / 256));
        std::fs::create_dir_all(&sub)?;
        std::fs::write(sub.join(format!("f{i:05}.bin")), content)?;
    }
    Ok((count * size) as u64)
}

/// A home of `mib` MiB: half in 16 MiB files, a quarter in 256 KiB ones, the rest in 16 KiB ones.
fn write_home(root: &Path, mib: usize) -> Result<u64> {
    let mut rng = rand::rng();
    let mut total = 0;
    total += write_files(&root.join("large"), (mib / 32).max(1), 16 << 20, &mut rng)?;
    total += write_files(&root.join("medium"), (mib / 4) * 4, 256 << 10, &mut rng)?;
    total += write_files(&root.join("small"), (mib / 4) * 64, 16 << 10, &mut rng)?;
    Ok(total)
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Samples a process's RSS until stopped; keeps the peak.
struct RssPeak {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl RssPeak {
    fn start(pid: u32) -> Self {
        let peak = Arc::new(AtomicU64::new(rss_kib(pid).unwrap_or(0)));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        let task = tokio::spawn(async move {
            while !s.load(Ordering::Relaxed) {
                if let Some(kib) = rss_kib(pid) {
                    p.fetch_max(kib, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        Self { peak, stop, task }
    }

    async fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        self.peak.load(Ordering::Relaxed)
    }
}

/// The guest serving `home` (its working directory).
fn guest_pid(home: &Path) -> Option<u32> {
    let home = std::fs::canonicalize(home).ok()?;
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
        (exe.file_name()? == "rakazo-guest" && cwd == home).then_some(pid)
    })
}

struct Flow {
    elapsed: Duration,
    /// From the request to the first `committing` progress line (a checkpoint only): the export,
    /// checking, sealing and every part but the last few in flight; the rest is completing the
    /// upload in the store and advancing the revision.
    until_committing: Option<Duration>,
    bytes: u64,
    rss_growth_kib: u64,
    /// CPU seconds of the control plane, the guest and the store.
    cpu: [f64; 3],
}

/// Runs one flow through the API, reading its NDJSON progress as it arrives.
async fn timed_flow(w: &World, c: &str, flow: &str, pids: [u32; 3]) -> Result<Flow> {
    let idle = rss_kib(pids[0]).context("server rss")?;
    let cpu0 = pids.map(cpu_s);
    let sampler = RssPeak::start(pids[0]);
    let start = now();
    let resp = w
        .client
        .send(
            Method::POST,
            &format!("/v1/computers/{c}/home/{flow}"),
            None,
            None,
            full_body(Bytes::new()),
        )
        .await?;
    let mut body = resp.into_body();
    let (mut pending, mut until_committing, mut done) = (Vec::new(), None, None);
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        pending.extend_from_slice(&data);
        while let Some(i) = pending.iter().position(|b| *b == b'\n') {
            let line: serde_json::Value = serde_json::from_slice(&pending[..i])?;
            pending.drain(..=i);
            match line["type"].as_str() {
                Some("progress") if line["phase"] == "committing" => {
                    until_committing.get_or_insert_with(|| start.elapsed());
                }
                Some("done") => done = Some(line),
                Some("error") => bail!("{flow} failed: {line}"),
                _ => {}
            }
        }
    }
    let elapsed = start.elapsed();
    let done = done.with_context(|| format!("{flow} answered no done line"))?;
    let peak = sampler.finish().await;
    let cpu1 = pids.map(cpu_s);
    Ok(Flow {
        elapsed,
        until_committing,
        bytes: done["bytes"].as_u64().unwrap_or(0),
        rss_growth_kib: peak.saturating_sub(idle),
        cpu: [cpu1[0] - cpu0[0], cpu1[1] - cpu0[1], cpu1[2] - cpu0[2]],
    })
}

/// Raw sealing speed, from `homes`' own `bench_seal` (built beside this binary).
fn sealing_speed() -> String {
    let bin = tests::bin_dir().join("bench_seal");
    match std::process::Command::new(&bin).arg("512").output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        _ => format!(
            "{} did not run: cargo build --release -p homes --bin bench_seal",
            bin.display()
        ),
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let (mut mib, mut garage_bin, mut parts) =
        (size(1024usize, 16), None::<std::path::PathBuf>, None);
    let mut args = bench_args();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--garage" => garage_bin = Some(args.next().context("--garage needs a path")?.into()),
            "--parts-in-flight" => {
                parts = Some(args.next().context("--parts-in-flight needs N")?.parse()?);
            }
            other => mib = other.parse().context("size in MiB")?,
        }
    }
    // The store: s3s-fs (the test suite's server), or Garage when its binary is given.
    let (s3, garage, store, store_name) = match &garage_bin {
        None => {
            let s3 = S3Server::start().await?;
            let o = ObjectStoreOptions::for_server(&s3);
            (Some(s3), None, o, "s3s-fs")
        }
        Some(bin) => {
            let g = Garage::start(bin, &std::env::temp_dir(), tests::s3::BUCKET).await?;
            let o = ObjectStoreOptions {
                endpoint: g.endpoint.clone(),
                bucket: g.bucket.clone(),
                access_key_id: g.access_key_id.clone(),
                secret_access_key: g.secret_access_key.clone(),
                parts_in_flight: None,
                content_key_hex: hex::encode(rand::random::<[u8; 32]>()),
            };
            (None, Some(g), o, "Garage")
        }
    };
    let store_pid = match (&s3, &garage) {
        (Some(s3), _) => s3.pid().context("s3s-fs pid")?,
        (_, Some(g)) => g.pid(),
        _ => bail!("no store"),
    };
    let store = ObjectStoreOptions {
        parts_in_flight: parts,
        ..store
    };
    println!(
        "store: {store_name}, parts in flight: {}",
        parts.map_or("default (2)".to_string(), |n| n.to_string())
    );
    let mut w = World::start_with(WorldOptions {
        object_store: Some(store),
        ..Default::default()
    })
    .await?;
    let pid = w.server_pid().context("server pid")?;
    let c = w.create_computer("ws-bench").await?;
    let home = w.home_of(&c);
    let content = write_home(&home, mib)?;
    println!(
        "home: {:.0} MiB of content in {} files",
        content as f64 / f64::from(1u32 << 20),
        walkdir_count(&home)?
    );

    // Floor: tar | zstd -1 of the same tree, to a file on the same disk.
    let out = tempfile::tempdir()?;
    let target = out.path().join("home.tar.zst");
    let start = now();
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"tar -c -C "$1" . | zstd -1 -q -o "$2""#)
        .arg("sh")
        .arg(&home)
        .arg(&target)
        .status()
        .context("run tar | zstd (install zstd: scripts/setup-debian.sh)")?;
    if !status.success() {
        bail!("tar | zstd failed");
    }
    let tar_time = start.elapsed();
    let tar_mbs = mb_per_s(content, tar_time);
    std::fs::remove_file(&target)?;

    let pids = [pid, guest_pid(&home).context("guest pid")?, store_pid];
    let cp = timed_flow(&w, &c, "checkpoint", pids).await?;
    let cp_mbs = mb_per_s(content, cp.elapsed);
    let rs = timed_flow(&w, &c, "restore", pids).await?;
    let rs_mbs = mb_per_s(content, rs.elapsed);
    let seal = sealing_speed();

    println!(
        "floor  tar -c | zstd -1 > file: {tar_mbs:>7.0} MB/s ({:.2} s)",
        tar_time.as_secs_f64()
    );
    for (name, f, mbs) in [
        (
            "checkpoint (guest export -> check -> seal -> store)",
            &cp,
            cp_mbs,
        ),
        (
            "restore (store -> open -> check -> guest import)",
            &rs,
            rs_mbs,
        ),
    ] {
        println!(
            "{name}: {mbs:>7.0} MB/s ({:.2} s, {:.0} MiB archive), {:.2}x the floor, \
             control-plane RSS +{:.1} MiB; CPU s: control plane {:.1}, guest {:.1}, {store_name} {:.1}",
            f.elapsed.as_secs_f64(),
            f.bytes as f64 / f64::from(1u32 << 20),
            mbs / tar_mbs,
            f.rss_growth_kib as f64 / 1024.0,
            f.cpu[0],
            f.cpu[1],
            f.cpu[2]
        );
    }
    if let Some(t) = cp.until_committing {
        let rest = cp.elapsed.saturating_sub(t);
        println!(
            "checkpoint split: {:>7.0} MB/s until the archive was all read and sealed ({:.2} s), \
             then {:.2} s completing the multipart upload and advancing the revision",
            mb_per_s(content, t),
            t.as_secs_f64(),
            rest.as_secs_f64()
        );
    }
    println!("raw AES-256-GCM sealing and opening (bench_seal, 512 MiB, one core):\n{seal}");
    println!(
        "goals: checkpoint >= 200 MB/s: {}; RSS growth <= 64 MiB: {}",
        if cp_mbs >= 200.0 { "met" } else { "missed" },
        if cp.rss_growth_kib.max(rs.rss_growth_kib) <= 64 * 1024 {
            "met"
        } else {
            "missed"
        }
    );
    drop((s3, garage));
    Ok(())
}

fn walkdir_count(root: &Path) -> Result<u64> {
    let mut n = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            if e.file_type()?.is_dir() {
                stack.push(e.path());
            } else {
                n += 1;
            }
        }
    }
    Ok(n)
}
