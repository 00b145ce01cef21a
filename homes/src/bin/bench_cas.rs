//! `bench_cas`: incremental checkpoints (`homes::cas`) against today's whole sealed archive, and
//! against `restic backup` (Debian's restic) when it is installed, on the same home in one run.
//!
//! The home: `--small` files of 2 to 16 KiB in directories of 500 (a `node_modules`-like tree)
//! plus `--large` files of `--large-mib` MiB. Then 1 MiB is changed across 10 files (100 KiB
//! in the middle of each: the large files first, then small ones rewritten). Measured: each
//! tool's first checkpoint and its checkpoint after the change (wall time and bytes written to
//! its store), and a full restore of the latest revision (MB/s). Everything writes to local
//! disk (no network): bytes written is what an upload would send. Timings are printed, never
//! asserted. `--smoke`: a tiny home, for CI.
//!
//! Run it in release: `cargo run --release -p homes --bin bench_cas [-- --small 50000 --large 4
//! --large-mib 128 --dir /var/tmp/bench-cas]`.

use homes::cas::{CasKeys, Cause, LocalBlobs, Repo, Snapshot};
use homes::seal::{DataKey, SegmentSealer, SEGMENT_SIZE};
use homes::{HomeKey, Revision};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[allow(clippy::disallowed_methods)] // reason: a benchmark measures wall-clock time
fn now() -> Instant {
    Instant::now()
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

struct Options {
    small: usize,
    large: usize,
    large_mib: usize,
    dir: PathBuf,
}

fn options() -> Res<Options> {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let mut o = Options {
        small: if smoke { 300 } else { 50_000 },
        large: if smoke { 2 } else { 4 },
        large_mib: if smoke { 4 } else { 128 },
        dir: std::env::temp_dir().join(format!("bench-cas-{}", std::process::id())),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = || {
            args.get(i + 1)
                .cloned()
                .ok_or(format!("{} needs a value", args[i]))
        };
        match args[i].as_str() {
            "--smoke" => {
                i += 1;
                continue;
            }
            "--small" => o.small = value()?.parse()?,
            "--large" => o.large = value()?.parse()?,
            "--large-mib" => o.large_mib = value()?.parse()?,
            "--dir" => o.dir = PathBuf::from(value()?),
            other => return Err(format!("unknown argument {other}").into()),
        }
        i += 2;
    }
    Ok(o)
}

/// Reproducible bytes (xorshift), incompressible like real content.
fn fill(buf: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

fn make_home(o: &Options, home: &Path) -> Res<u64> {
    let mut total = 0u64;
    let mut buf = vec![0u8; 16 << 10];
    for i in 0..o.small {
        let dir = home.join(format!("node_modules/pkg{}", i / 500));
        if i % 500 == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        let len = 2048 + (i * 7919) % (14 << 10);
        fill(&mut buf[..len], i as u64);
        std::fs::write(dir.join(format!("f{i}.js")), &buf[..len])?;
        total += len as u64;
    }
    std::fs::create_dir_all(home.join("data"))?;
    let mut big = vec![0u8; 1 << 20];
    for j in 0..o.large {
        let mut f = std::fs::File::create(home.join(format!("data/large{j}.bin")))?;
        for k in 0..o.large_mib {
            fill(&mut big, 1_000_000 + (j * 10_000 + k) as u64);
            f.write_all(&big)?;
        }
        total += (o.large_mib << 20) as u64;
    }
    Ok(total)
}

/// 1 MiB changed across 10 files: 100 KiB in the middle of each large file, then small files
/// rewritten whole with new bytes, until 10 files changed.
fn change(o: &Options, home: &Path) -> Res<()> {
    use std::os::unix::fs::FileExt;
    let mut patch = vec![0u8; 100 << 10];
    let mut changed = 0;
    for j in 0..o.large.min(10) {
        fill(&mut patch, 77 + j as u64);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(home.join(format!("data/large{j}.bin")))?;
        f.write_at(&patch, ((o.large_mib << 20) / 2) as u64)?;
        changed += 1;
    }
    let mut i = 0;
    while changed < 10 && i < o.small {
        let p = home.join(format!("node_modules/pkg{}/f{i}.js", i / 500));
        let len = std::fs::metadata(&p)?.len() as usize;
        fill(&mut patch[..len.min(100 << 10)], 99 + i as u64);
        std::fs::write(&p, &patch[..len.min(100 << 10)])?;
        changed += 1;
        i += 97;
    }
    Ok(())
}

fn dir_bytes(p: &Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let m = match e.metadata() {
                Ok(m) => m,
                Err(_) => continue,
            };
            total += if m.is_dir() {
                dir_bytes(&e.path())
            } else {
                m.len()
            };
        }
    }
    total
}

/// Today's checkpoint: the whole home archived and sealed, written to `out`.
fn full_archive(home: &Path, out: &Path) -> Res<(Duration, u64)> {
    let start = now();
    let key = DataKey::generate();
    let mut sealer = SegmentSealer::new(&key, &HomeKey::new("bench")?, Revision::FIRST);
    let mut file = std::io::BufWriter::new(std::fs::File::create(out)?);
    file.write_all(sealer.header())?;
    struct Sealing<'a, W: Write> {
        sealer: &'a mut SegmentSealer,
        buf: Vec<u8>,
        out: W,
    }
    impl<W: Write> Write for Sealing<'_, W> {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            let room = SEGMENT_SIZE - self.buf.len();
            let n = data.len().min(room);
            self.buf.extend_from_slice(&data[..n]);
            if self.buf.len() == SEGMENT_SIZE {
                self.sealer
                    .seal(&mut self.buf, false)
                    .map_err(std::io::Error::other)?;
                self.out.write_all(&self.buf)?;
                self.buf.clear();
            }
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut s = Sealing {
        sealer: &mut sealer,
        buf: Vec::with_capacity(SEGMENT_SIZE + 16),
        out: &mut file,
    };
    homes::archive::pack(home, &mut s)?;
    let mut last = std::mem::take(&mut s.buf);
    s.sealer.seal(&mut last, true)?;
    s.out.write_all(&last)?;
    file.flush()?;
    file.get_ref().sync_all()?;
    Ok((start.elapsed(), std::fs::metadata(out)?.len()))
}

fn restic(args: &[&str], repo: &Path) -> Res<Duration> {
    let start = now();
    let out = std::process::Command::new("restic")
        .args(args)
        .env("RESTIC_REPOSITORY", repo)
        .env("RESTIC_PASSWORD", "bench")
        .output()?;
    if !out.status.success() {
        return Err(format!("restic {args:?}: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(start.elapsed())
}

fn mb_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

fn main() -> Res<()> {
    let o = options()?;
    let _ = std::fs::remove_dir_all(&o.dir);
    let home = o.dir.join("home");
    std::fs::create_dir_all(&home)?;
    let t = now();
    let size = make_home(&o, &home)?;
    eprintln!(
        "home: {} small files, {} large of {} MiB, {:.0} MB, made in {:.1} s",
        o.small,
        o.large,
        o.large_mib,
        size as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    let store = LocalBlobs::new(o.dir.join("cas"));
    let mut repo = Repo::open(store, CasKeys::derive(&DataKey::generate()))?;
    let has_restic = std::process::Command::new("restic")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    let restic_repo = o.dir.join("restic");
    let mut rows = Vec::new();

    // First checkpoints.
    let (full1, full1_bytes) = full_archive(&home, &o.dir.join("full1.sealed"))?;
    let t = now();
    let first = repo.snapshot(Snapshot {
        dir: &home,
        cause: Cause::Manual,
        at_ms: 1,
    })?;
    let cas1 = t.elapsed();
    let mut restic1 = None;
    if has_restic {
        restic(&["init", "--quiet"], &restic_repo)?;
        restic1 = Some((
            restic(&["backup", "--quiet", home.to_str().unwrap()], &restic_repo)?,
            dir_bytes(&restic_repo),
        ));
    }
    rows.push((
        "first checkpoint",
        full1,
        full1_bytes,
        cas1,
        first.stored_bytes,
        restic1,
    ));

    change(&o, &home)?;
    let (full2, full2_bytes) = full_archive(&home, &o.dir.join("full2.sealed"))?;
    let t = now();
    let second = repo.snapshot(Snapshot {
        dir: &home,
        cause: Cause::Manual,
        at_ms: 2,
    })?;
    let cas2 = t.elapsed();
    let mut restic2 = None;
    if let Some((_, before)) = restic1 {
        let d = restic(&["backup", "--quiet", home.to_str().unwrap()], &restic_repo)?;
        restic2 = Some((d, dir_bytes(&restic_repo) - before));
    }
    rows.push((
        "after 1 MiB changed in 10 files",
        full2,
        full2_bytes,
        cas2,
        second.stored_bytes,
        restic2,
    ));

    let out = o.dir.join("restored");
    let t = now();
    repo.restore(second.revision, &out)?;
    let restore = t.elapsed();

    println!(
        "### Run of `bench_cas` ({} small files, {} × {} MiB large, {:.0} MB in all; restic {})\n",
        o.small,
        o.large,
        o.large_mib,
        size as f64 / 1e6,
        if has_restic {
            "installed"
        } else {
            "not installed: its column is empty"
        }
    );
    println!("| checkpoint | whole archive (today) | cas | restic backup | cas vs whole | cas vs restic |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (what, fd, fb, cd, cb, r) in rows {
        let restic_cell = r.map_or("–".to_string(), |(d, b)| {
            format!("{:.2} s, {:.2} MiB", d.as_secs_f64(), b as f64 / 1048576.0)
        });
        let vs_restic = r.map_or("–".to_string(), |(d, _)| {
            format!("{:.2}× time", cd.as_secs_f64() / d.as_secs_f64())
        });
        println!(
            "| {what} | {:.2} s, {:.2} MiB | {:.2} s, {:.2} MiB | {restic_cell} | {:.3}× time, {:.4}× bytes | {vs_restic} |",
            fd.as_secs_f64(),
            fb as f64 / 1048576.0,
            cd.as_secs_f64(),
            cb as f64 / 1048576.0,
            cd.as_secs_f64() / fd.as_secs_f64(),
            cb as f64 / fb as f64,
        );
    }
    println!(
        "\nFull restore of the latest revision: {:.2} s, {:.0} MB/s. Second checkpoint read {} of {} files.",
        restore.as_secs_f64(),
        mb_s(size, restore),
        second.files_read,
        second.files
    );
    std::fs::remove_dir_all(&o.dir)?;
    Ok(())
}
