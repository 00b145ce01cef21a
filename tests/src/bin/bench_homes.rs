//! Homes benchmark (issues 6 and 17): checkpoint and restore of a home of mixed file sizes (1 GiB
//! by default; a number argument sets MiB) through the real control plane and guest, once per
//! store: a local s3s-fs (or, with `--garage PATH`, a single-node Garage) and the control plane's
//! local store (`--stores s3s-fs,local` picks; `--parts-in-flight N` and `--part-mib N` set the
//! control plane's multipart concurrency and part size). The floor is `tar -c | zstd -1 > file`
//! of the same tree; raw AES-256-GCM sealing speed comes from `homes`' `bench_seal`. Reports MB/s
//! of home content end to end, the control plane's peak RSS growth over its idle RSS (sampled
//! from /proc every 20 ms) and the CPU seconds of the control plane, the guest and the store
//! process apart (utime + stime from /proc before and after), so what the store costs on this
//! host's cores is never mistaken for ours. A checkpoint is also split at its `committing`
//! progress line: the pipeline's own rate, then the store's completion of the multipart upload
//! (s3s-fs reads, concatenates and MD5s every part again there; Garage and AWS S3 complete in
//! metadata).
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
use tests::bench::{args as bench_args, loadavg, now, size};
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
    /// CPU seconds of the control plane, the guest and the store (none: the local store, which
    /// runs in the control plane).
    cpu: [f64; 2],
    store_cpu: Option<f64>,
}

/// Runs one flow through the API, reading its NDJSON progress as it arrives.
async fn timed_flow(
    w: &World,
    c: &str,
    flow: &str,
    pids: [u32; 2],
    store: Option<u32>,
) -> Result<Flow> {
    let idle = rss_kib(pids[0]).context("server rss")?;
    let cpu0 = pids.map(cpu_s);
    let store0 = store.map(cpu_s);
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
        cpu: [cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]],
        store_cpu: store.zip(store0).map(|(pid, before)| cpu_s(pid) - before),
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

/// Where checkpoints go in one pass of the bench.
#[derive(Clone, Copy, PartialEq, Eq)]
enum StoreKind {
    /// s3s-fs on this host (the test suite's S3 server).
    S3sFs,
    /// Garage on this host, from the binary given with `--garage`.
    Garage,
    /// The control plane's local store (its data dir): no separate store process.
    Local,
}

impl StoreKind {
    fn name(self) -> &'static str {
        match self {
            Self::S3sFs => "s3s-fs",
            Self::Garage => "Garage",
            Self::Local => "local store",
        }
    }
}

struct Options {
    mib: usize,
    garage: Option<std::path::PathBuf>,
    parts_in_flight: Option<usize>,
    part_mib: Option<usize>,
    stores: Vec<StoreKind>,
}

impl Options {
    fn parse() -> Result<Self> {
        let mut o = Options {
            mib: size(1024usize, 16),
            garage: None,
            parts_in_flight: None,
            part_mib: None,
            stores: Vec::new(),
        };
        let mut args = bench_args();
        while let Some(a) = args.next() {
            match a.as_str() {
                "--garage" => o.garage = Some(args.next().context("--garage needs a path")?.into()),
                "--parts-in-flight" => {
                    o.parts_in_flight =
                        Some(args.next().context("--parts-in-flight needs N")?.parse()?);
                }
                "--part-mib" => {
                    o.part_mib = Some(args.next().context("--part-mib needs N")?.parse()?);
                }
                "--stores" => {
                    for name in args.next().context("--stores needs a list")?.split(',') {
                        o.stores.push(match name {
                            "s3s-fs" => StoreKind::S3sFs,
                            "garage" => StoreKind::Garage,
                            "local" => StoreKind::Local,
                            other => bail!("unknown store {other:?} (s3s-fs, garage, local)"),
                        });
                    }
                }
                other => o.mib = other.parse().context("size in MiB")?,
            }
        }
        if o.stores.is_empty() {
            let object = if o.garage.is_some() {
                StoreKind::Garage
            } else {
                StoreKind::S3sFs
            };
            o.stores = vec![object, StoreKind::Local];
        }
        if o.stores.contains(&StoreKind::Garage) && o.garage.is_none() {
            bail!("the garage store needs --garage PATH");
        }
        Ok(o)
    }
}

/// What one store's pass measured.
struct Pass {
    store: StoreKind,
    load_start: String,
    content: u64,
    files: u64,
    floor_mbs: f64,
    checkpoint: Flow,
    restore: Flow,
}

/// One pass: a world on `store`, a home of `opts.mib` MiB, the floor, a checkpoint, a restore.
async fn pass(opts: &Options, store: StoreKind) -> Result<Pass> {
    let load_start = loadavg();
    // The store: s3s-fs (the test suite's server), Garage, or none (the local store).
    let (s3, garage, object_store) = match store {
        StoreKind::S3sFs => {
            let s3 = S3Server::start().await?;
            let o = ObjectStoreOptions::for_server(&s3);
            (Some(s3), None, Some(o))
        }
        StoreKind::Garage => {
            let bin = opts.garage.as_ref().context("--garage")?;
            let g = Garage::start(bin, &std::env::temp_dir(), tests::s3::BUCKET).await?;
            let o = ObjectStoreOptions {
                endpoint: g.endpoint.clone(),
                bucket: g.bucket.clone(),
                access_key_id: g.access_key_id.clone(),
                secret_access_key: g.secret_access_key.clone(),
                parts_in_flight: None,
                content_key_hex: hex::encode(rand::random::<[u8; 32]>()),
            };
            (None, Some(g), Some(o))
        }
        StoreKind::Local => (None, None, None),
    };
    let store_pid = match (&s3, &garage) {
        (Some(s3), _) => Some(s3.pid().context("s3s-fs pid")?),
        (_, Some(g)) => Some(g.pid()),
        _ => None,
    };
    let object_store = object_store.map(|o| ObjectStoreOptions {
        parts_in_flight: opts.parts_in_flight,
        ..o
    });
    let mut env = Vec::new();
    if let Some(mib) = opts.part_mib {
        env.push(("RAKAZO_S3_PART_MIB".to_string(), mib.to_string()));
    }
    let mut w = World::start_with(WorldOptions {
        object_store,
        env,
        ..Default::default()
    })
    .await?;
    let pid = w.server_pid().context("server pid")?;
    let c = w.create_computer("ws-bench").await?;
    let home = w.home_of(&c);
    let content = write_home(&home, opts.mib)?;
    let files = walkdir_count(&home)?;

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
    let floor_mbs = mb_per_s(content, start.elapsed());
    std::fs::remove_file(&target)?;

    let pids = [pid, guest_pid(&home).context("guest pid")?];
    let checkpoint = timed_flow(&w, &c, "checkpoint", pids, store_pid).await?;
    let restore = timed_flow(&w, &c, "restore", pids, store_pid).await?;
    drop(w);
    drop((s3, garage));
    Ok(Pass {
        store,
        load_start,
        content,
        files,
        floor_mbs,
        checkpoint,
        restore,
    })
}

fn print_pass(p: &Pass) {
    let name = p.store.name();
    let store_cpu = |f: &Flow| match f.store_cpu {
        Some(s) => format!("{s:.1}"),
        None => "(in the control plane)".to_string(),
    };
    println!(
        "{name}: home {:.0} MiB in {} files; load average at start {}",
        p.content as f64 / f64::from(1u32 << 20),
        p.files,
        p.load_start
    );
    println!(
        "  floor  tar -c | zstd -1 > file: {:>7.0} MB/s",
        p.floor_mbs
    );
    for (what, f) in [("checkpoint", &p.checkpoint), ("restore", &p.restore)] {
        println!(
            "  {what}: {:>7.0} MB/s ({:.2} s, {:.0} MiB archive), control-plane RSS +{:.1} MiB; \
             CPU s: control plane {:.1}, guest {:.1}, store {}",
            mb_per_s(p.content, f.elapsed),
            f.elapsed.as_secs_f64(),
            f.bytes as f64 / f64::from(1u32 << 20),
            f.rss_growth_kib as f64 / 1024.0,
            f.cpu[0],
            f.cpu[1],
            store_cpu(f)
        );
    }
    if let Some(t) = p.checkpoint.until_committing {
        println!(
            "  checkpoint split: {:>7.0} MB/s until the archive was all read and sealed ({:.2} \
             s), then {:.2} s completing the upload and advancing the revision",
            mb_per_s(p.content, t),
            t.as_secs_f64(),
            p.checkpoint.elapsed.saturating_sub(t).as_secs_f64()
        );
    }
}

fn print_table(passes: &[Pass]) {
    println!();
    println!(
        "| store | load at start | floor tar \\| zstd -1 | checkpoint, end to end | of which \
         pipeline / completion | CPU s (control plane / guest / store) | control plane + guest \
         CPU s per GiB | CP RSS growth | restore | restore CPU s (CP / guest / store) |"
    );
    println!("|---|---|---:|---:|---|---|---:|---:|---:|---|");
    for p in passes {
        let gib = p.content as f64 / f64::from(1u32 << 30);
        let cpu = |f: &Flow| {
            format!(
                "{:.1} / {:.1} / {}",
                f.cpu[0],
                f.cpu[1],
                f.store_cpu.map_or("—".to_string(), |s| format!("{s:.1}"))
            )
        };
        let cp = &p.checkpoint;
        let split = match cp.until_committing {
            Some(t) => format!(
                "{:.0} MB/s / {:.2} s",
                mb_per_s(p.content, t),
                cp.elapsed.saturating_sub(t).as_secs_f64()
            ),
            None => "—".to_string(),
        };
        println!(
            "| {} | {} | {:.0} MB/s | **{:.0} MB/s** ({:.2} s) | {split} | {} | {:.2} | +{:.1} MiB \
             | {:.0} MB/s ({:.2} s) | {} |",
            p.store.name(),
            p.load_start,
            p.floor_mbs,
            mb_per_s(p.content, cp.elapsed),
            cp.elapsed.as_secs_f64(),
            cpu(cp),
            (cp.cpu[0] + cp.cpu[1]) / gib,
            cp.rss_growth_kib as f64 / 1024.0,
            mb_per_s(p.content, p.restore.elapsed),
            p.restore.elapsed.as_secs_f64(),
            cpu(&p.restore)
        );
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    tests::bench::Usage::new("checkpoint and restore of a home of mixed file sizes, per store")
        .operand("MIB", "the home's size in MiB (default 1024; smoke 16)")
        .flag(
            "--stores",
            "LIST",
            "stores, comma-separated: s3s-fs, garage, local (default: s3s-fs or garage, and local)",
        )
        .flag("--garage", "PATH", "a Garage binary, for the garage store")
        .flag(
            "--parts-in-flight",
            "N",
            "multipart parts in flight (the control plane's default)",
        )
        .flag(
            "--part-mib",
            "N",
            "multipart part size in MiB (the control plane's default)",
        )
        .check();
    let opts = Options::parse()?;
    println!(
        "bench_homes: {} MiB home; parts in flight: {}; part size: {}",
        opts.mib,
        opts.parts_in_flight
            .map_or("default (2)".to_string(), |n| n.to_string()),
        opts.part_mib
            .map_or("default (5 MiB)".to_string(), |n| format!("{n} MiB"))
    );
    let mut passes = Vec::new();
    for &store in &opts.stores {
        let p = pass(&opts, store).await?;
        print_pass(&p);
        passes.push(p);
    }
    print_table(&passes);
    println!(
        "\nraw AES-256-GCM sealing and opening (bench_seal, 512 MiB, one core):\n{}",
        sealing_speed()
    );
    for p in &passes {
        let (cp, rs) = (&p.checkpoint, &p.restore);
        println!(
            "goals ({}): checkpoint >= 200 MB/s end to end: {}; RSS growth <= 64 MiB: {}",
            p.store.name(),
            if mb_per_s(p.content, cp.elapsed) >= 200.0 {
                "met"
            } else {
                "missed"
            },
            if cp.rss_growth_kib.max(rs.rss_growth_kib) <= 64 * 1024 {
                "met"
            } else {
                "missed"
            }
        );
    }
    println!("load average at end: {}", loadavg());
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
