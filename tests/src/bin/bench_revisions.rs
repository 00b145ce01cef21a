//! Incremental homes end to end (issue 32): what a checkpoint costs after a small change, through
//! the real control plane and guest, against the same checkpoint in the archive format and
//! against `restic backup` (Debian's restic, when installed) of the same tree at the same points,
//! in one run. Then a full restore of the latest revision and a fork to its first exec.
//!
//! The home (1 GiB by default; a number argument sets MiB): half in ~8 KiB files spread over
//! nested directories like a `node_modules` tree, a quarter in 1 MiB files, a quarter in four
//! large files. Steps, each followed by a checkpoint (and a restic backup of the same tree):
//! 1. the whole home (the first checkpoint: full);
//! 2. 1 MiB changed across 10 files: 100 KiB overwritten in each of ten 1 MiB files, from inside
//!    the computer (`dd conv=notrunc`), as an agent would;
//! 3. 100 KiB changed in the middle of one large file (a changed file still crosses the tunnel
//!    whole; only its changed chunks are stored).
//!
//! Reported per step: wall time of `POST …/home/checkpoint`, archive bytes through the tunnel,
//! bytes written to the store (the revision's `stored_bytes`); for the archive format (a second
//! control plane, `--home-format archive`, on a home of the same shape) the checkpoint of the
//! whole home, which is what every checkpoint cost before; for restic its wall time and the bytes
//! its repository grew. Then the restore (MB/s of home content) and `computer fork` until an
//! `exec true` in the fork succeeds.
//!
//! Run in release: `cargo build --release -p control-plane -p guest-agent -p tests --bin rakazo
//! --bin rakazo-guest --bin bench_revisions && ./target/release/bench_revisions`.
//! `--smoke`: a 16 MiB home, for CI (`scripts/bench-smoke.sh`).

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use control_plane::client::full_body;
use http_body_util::BodyExt;
use hyper::Method;
use rand::RngCore;
use std::path::Path;
use std::time::Duration;
use tests::bench::{args as bench_args, loadavg, now, size};
use tests::{World, WorldOptions};

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

/// Writes the home; answers its content bytes and file count.
fn write_home(root: &Path, total_mib: usize) -> Result<(u64, u64)> {
    let mut rng = rand::rng();
    let (mut bytes, mut files) = (0u64, 0u64);
    // Half: ~8 KiB files, 64 per directory, two levels deep, text-like (as source trees are).
    let small = (total_mib << 20) / 2 / (8 << 10);
    let mut text = b"module.exports = function () { return 42; };\n"
        .iter()
        .copied()
        .cycle()
        .take(8 << 10)
        .collect::<Vec<u8>>();
    for i in 0..small {
        let dir = root.join(format!(
            "node_modules/p{:03}/lib{:02}",
            i / 1024,
            (i / 64) % 16
        ));
        std::fs::create_dir_all(&dir)?;
        // Each file differs a little, as real ones do.
        text[..8].copy_from_slice(&(i as u64).to_be_bytes());
        std::fs::write(dir.join(format!("f{i:06}.js")), &text)?;
        bytes += text.len() as u64;
        files += 1;
    }
    // A quarter: 1 MiB random files.
    let medium = ((total_mib / 4).max(10)) as u64;
    std::fs::create_dir_all(root.join("data"))?;
    let mut buf = vec![0u8; 1 << 20];
    for i in 0..medium {
        rng.fill_bytes(&mut buf);
        std::fs::write(root.join(format!("data/m{i:05}.bin")), &buf)?;
        bytes += buf.len() as u64;
        files += 1;
    }
    // A quarter: four large random files.
    let large = ((total_mib / 16).max(1)) << 20;
    let mut big = vec![0u8; large];
    for i in 0..4 {
        rng.fill_bytes(&mut big);
        std::fs::write(root.join(format!("large{i}.bin")), &big)?;
        bytes += big.len() as u64;
        files += 1;
    }
    Ok((bytes, files))
}

/// A checkpoint through the API: wall time and the archive bytes it moved.
async fn checkpoint(w: &World, c: &str) -> Result<(Duration, u64)> {
    let (elapsed, done) = flow(w, c, "checkpoint").await?;
    Ok((elapsed, done["bytes"].as_u64().unwrap_or(0)))
}

async fn flow(w: &World, c: &str, what: &str) -> Result<(Duration, serde_json::Value)> {
    let start = now();
    let resp = w
        .client
        .send(
            Method::POST,
            &format!("/v1/computers/{c}/home/{what}"),
            None,
            None,
            full_body(Bytes::new()),
        )
        .await?;
    let body = resp.into_body().collect().await?.to_bytes();
    let elapsed = start.elapsed();
    let last = body
        .split(|b| *b == b'\n')
        .rfind(|l| !l.is_empty())
        .context("no answer")?;
    let line: serde_json::Value = serde_json::from_slice(last)?;
    if line["type"] != "done" {
        bail!("{what} failed: {line}");
    }
    Ok((elapsed, line))
}

/// The bytes the latest revision wrote to the store.
async fn stored(w: &World, c: &str) -> Result<u64> {
    let revs = w.revisions(c).await?;
    Ok(revs.last().context("no revision")?.stored_bytes)
}

/// restic's repository and its growth.
struct Restic {
    repo: tempfile::TempDir,
    size: u64,
}

fn dir_bytes(p: &Path) -> u64 {
    let mut n = 0;
    let mut stack = vec![p.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => n += m.len(),
                Err(_) => {}
            }
        }
    }
    n
}

impl Restic {
    fn run(&self, args: &[&str]) -> Result<Duration> {
        let start = now();
        let out = std::process::Command::new("restic")
            .args(args)
            .env("RESTIC_REPOSITORY", self.repo.path())
            .env("RESTIC_PASSWORD", "bench")
            .output()?;
        if !out.status.success() {
            bail!("restic {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(start.elapsed())
    }

    fn start() -> Option<Restic> {
        let present = std::process::Command::new("restic")
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success());
        let r = Restic {
            repo: tempfile::tempdir().ok()?,
            size: 0,
        };
        (present && r.run(&["init", "--quiet"]).is_ok()).then_some(r)
    }

    /// A backup of `home`: its time and the bytes the repository grew.
    fn backup(&mut self, home: &Path) -> Result<(Duration, u64)> {
        let d = self.run(&["backup", "--quiet", &home.display().to_string()])?;
        let now = dir_bytes(self.repo.path());
        let added = now.saturating_sub(self.size);
        self.size = now;
        Ok((d, added))
    }
}

struct Step {
    what: &'static str,
    wall: Duration,
    tunnel: u64,
    stored: u64,
    restic: Option<(Duration, u64)>,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    tests::bench::Usage::new(
        "incremental checkpoints after a small change, against the archive format and restic",
    )
    .operand("MIB", "the home's size in MiB (default 1024; smoke 16)")
    .check();
    let mut total = size(1024usize, 16);
    for a in bench_args() {
        total = a.parse().context("size in MiB")?;
    }
    println!(
        "bench_revisions: {total} MiB home; load average {}",
        loadavg()
    );

    let mut w = World::start_with(WorldOptions::default()).await?;
    let c = w.create_computer("ws-rev").await?;
    let home = w.home_of(&c);
    let (content, files) = write_home(&home, total)?;
    // The home's files become the computer's (as an agent's own writes are) before anything
    // is measured.
    w.give_home(&c)?;
    let mut restic = Restic::start();
    let mut steps = Vec::new();

    let (wall, tunnel) = checkpoint(&w, &c).await?;
    let restic1 = restic.as_mut().map(|r| r.backup(&home)).transpose()?;
    steps.push(Step {
        what: "1. first checkpoint (whole home)",
        wall,
        tunnel,
        stored: stored(&w, &c).await?,
        restic: restic1,
    });

    // 1 MiB across ten 1 MiB files, from inside the computer.
    w.sh(
        &c,
        "for i in 0 1 2 3 4 5 6 7 8 9; do dd if=/dev/urandom of=data/m0000$i.bin bs=100K count=1 \
         seek=3 conv=notrunc status=none; done",
    )
    .await?;
    let (wall, tunnel) = checkpoint(&w, &c).await?;
    let restic2 = restic.as_mut().map(|r| r.backup(&home)).transpose()?;
    steps.push(Step {
        what: "2. 1 MiB changed across 10 files",
        wall,
        tunnel,
        stored: stored(&w, &c).await?,
        restic: restic2,
    });

    let large_mib = ((total / 16).max(1)) as u64;
    w.sh(
        &c,
        &format!(
            "dd if=/dev/urandom of=large0.bin bs=100K count=1 seek={} conv=notrunc status=none",
            large_mib * 5
        ),
    )
    .await?;
    let (wall, tunnel) = checkpoint(&w, &c).await?;
    let restic3 = restic.as_mut().map(|r| r.backup(&home)).transpose()?;
    steps.push(Step {
        what: "3. 100 KiB changed in one large file",
        wall,
        tunnel,
        stored: stored(&w, &c).await?,
        restic: restic3,
    });

    // A full restore of the latest revision into the running computer.
    let (restore, _) = flow(&w, &c, "restore").await?;

    // Fork to first exec.
    let start = now();
    let forked: serde_json::Value = w
        .client
        .json(
            Method::POST,
            &format!("/v1/computers/{c}/fork"),
            Some(&serde_json::json!({ "workspace": "ws-rev-fork" })),
        )
        .await?;
    let fork_id = forked["id"].as_str().context("fork id")?.to_owned();
    w.sh(&fork_id, "true").await?;
    let fork = start.elapsed();
    drop(w);

    // The anchor: the same shape of home checkpointed in the archive format.
    let mut a = World::start_with(WorldOptions {
        home_format: Some("archive"),
        ..Default::default()
    })
    .await?;
    let ac = a.create_computer("ws-archive").await?;
    let ahome = a.home_of(&ac);
    write_home(&ahome, total)?;
    a.give_home(&ac)?;
    let (archive_wall, archive_bytes) = checkpoint(&a, &ac).await?;
    let (archive_again, _) = checkpoint(&a, &ac).await?;
    drop(a);

    println!(
        "\nhome: {:.0} MiB in {files} files; archive format (same shape): first checkpoint \
         {:.2} s, a second one (nothing changed) {:.2} s, {:.0} MiB through the tunnel each",
        mib(content),
        archive_wall.as_secs_f64(),
        archive_again.as_secs_f64(),
        mib(archive_bytes)
    );
    println!(
        "\n| step | checkpoint | through the tunnel | stored | vs archive format (time) | restic \
         backup | restic added | vs restic (time) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for s in &steps {
        let (rt, ra, ratio) = match s.restic {
            Some((d, added)) => (
                format!("{:.2} s", d.as_secs_f64()),
                format!("{:.2} MiB", mib(added)),
                format!("{:.2}×", s.wall.as_secs_f64() / d.as_secs_f64()),
            ),
            None => ("not installed".into(), "—".into(), "—".into()),
        };
        println!(
            "| {} | {:.2} s | {:.2} MiB | {:.2} MiB | {:.2}× | {rt} | {ra} | {ratio} |",
            s.what,
            s.wall.as_secs_f64(),
            mib(s.tunnel),
            mib(s.stored),
            s.wall.as_secs_f64() / archive_again.as_secs_f64(),
        );
    }
    println!(
        "\nrestore of the latest revision: {:.0} MB/s ({:.2} s); fork to its first exec: {:.2} s",
        content as f64 / 1e6 / restore.as_secs_f64(),
        restore.as_secs_f64(),
        fork.as_secs_f64()
    );
    let change = &steps[1];
    println!(
        "goals: 1 MiB change checkpointed in <= 1 s: {} ({:.2} s); <= 2 MiB stored: {} ({:.2} \
         MiB); ahead of restic: {}; restore >= 200 MB/s: {}; fork to first exec <= 3 s: {}",
        met(change.wall <= Duration::from_secs(1)),
        change.wall.as_secs_f64(),
        met(change.stored <= 2 << 20),
        mib(change.stored),
        change
            .restic
            .map_or("no restic".into(), |(d, _)| met(change.wall < d)
                .to_string()),
        met(content as f64 / 1e6 / restore.as_secs_f64() >= 200.0),
        met(fork <= Duration::from_secs(3)),
    );
    println!("load average at end: {}", loadavg());
    Ok(())
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "missed"
    }
}
