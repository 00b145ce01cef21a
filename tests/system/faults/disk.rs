//! A disk that fills up (issue 36): a computer's home filled by a command, the control plane's
//! home store filled by a checkpoint, and a restore bigger than the home's free space, each on a
//! small tmpfs the test mounts before the computer or the store uses it (docs/faults-storage.md,
//! "A full disk"), through the real binaries.
//!
//! Each ends in a clear error, never a hang or an `internal`; what was stored stays whole and
//! restorable; the computer keeps answering while its disk is full; and once space is freed the
//! same operation succeeds.

use super::store::{done, failed};
use anyhow::{bail, Context, Result};
use control_plane::client::ClientError;
use homes::testing::noise;
use http_body_util::BodyExt;
use hyper::Method;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tests::World;

const MIB: u64 = 1 << 20;
/// An upload is waited for this long at most (a full disk must not hold it).
const ANSWER_WITHIN: Duration = Duration::from_secs(120);

/// Small file systems (tmpfs) mounted for one test. Dropped after the [`World`] (declare it
/// first): each is unmounted (lazily if still busy) and the directory it was in removed, so
/// nothing is left mounted even when the test fails.
#[derive(Default)]
struct Mounts(Vec<(PathBuf, PathBuf)>);

impl Mounts {
    /// Mounts a tmpfs of `bytes` at `at` (made if missing), root's with `mode`; `cleanup` (the
    /// temporary directory holding `at`) is removed once it is unmounted.
    fn tmpfs(&mut self, at: &Path, bytes: u64, mode: u32, cleanup: &Path) -> Result<()> {
        std::fs::create_dir_all(at)?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={bytes},mode={mode:o},uid=0,gid=0"))
            .arg("rakazo-disk-test")
            .arg(at)
            .output()
            .context("run mount")?;
        if !out.status.success() {
            bail!(
                "mount a tmpfs at {}: {}",
                at.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        self.0.push((at.to_path_buf(), cleanup.to_path_buf()));
        Ok(())
    }
}

impl Drop for Mounts {
    fn drop(&mut self) {
        for (at, cleanup) in self.0.drain(..).rev() {
            let unmounted = Command::new("umount")
                .arg(&at)
                .status()
                .is_ok_and(|s| s.success());
            if !unmounted {
                let _ = Command::new("umount").arg("-l").arg(&at).status();
            }
            let _ = std::fs::remove_dir_all(&cleanup);
        }
    }
}

/// Bytes free for files on the file system holding `path`.
fn free_bytes(path: &Path) -> Result<u64> {
    let st = nix::sys::statvfs::statvfs(path)?;
    Ok(st.blocks_available() * st.fragment_size())
}

/// Fills the file system holding `dir` with a root-owned file there (`name`), leaving `leave`
/// bytes free (to a page); returns its path.
fn ballast(dir: &Path, name: &str, leave: u64) -> Result<PathBuf> {
    use std::io::Write;
    let free = free_bytes(dir)?;
    if free <= leave {
        bail!(
            "only {free} bytes free at {}, {leave} to leave",
            dir.display()
        );
    }
    let path = dir.join(name);
    let mut f = std::fs::File::create(&path)?;
    let chunk = vec![0xa5u8; MIB as usize];
    let mut left = free - leave;
    while left > 0 {
        let n = left.min(MIB) as usize;
        f.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    f.sync_all()?;
    Ok(path)
}

/// Names directly in `dir` that start with `prefix`.
fn names_with(dir: &Path, prefix: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("list {}", dir.display()))? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if name.starts_with(prefix) {
            out.push(name);
        }
    }
    Ok(out)
}

/// Every file under `dir` whose name starts with `prefix`, at any depth.
fn files_with(dir: &Path, prefix: &str) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            if e.file_type()?.is_dir() {
                stack.push(e.path());
            } else if e.file_name().to_string_lossy().starts_with(prefix) {
                out.push(e.path());
            }
        }
    }
    Ok(out)
}

/// An upload, bounded: a full disk must answer, not hold the request.
async fn upload(
    w: &World,
    c: &str,
    path: &str,
    bytes: Vec<u8>,
) -> Result<Result<u64, ClientError>> {
    match tokio::time::timeout(ANSWER_WITHIN, w.put_file(c, path, bytes, false)).await {
        Ok(r) => Ok(r.map(|v| v["written"].as_u64().unwrap_or_default())),
        Err(_) => bail!("upload of {path} gave no answer within {ANSWER_WITHIN:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_home_fails_commands_and_uploads_clearly_and_recovers() -> Result<()> {
    let mut mounts = Mounts::default();
    let mut w = World::start().await?;
    // Every local computer's directory (its home, and the staging a restore unpacks into) on
    // 16 MiB, mounted before the computer's jail binds it.
    let root = w.machines_dir.path().join("local");
    mounts.tmpfs(&root, 16 * MIB, 0o711, w.machines_dir.path())?;
    let c = w.create_computer("ws-full-home").await?;
    let home = w.home_of(&c);
    w.sh(&c, "echo kept > notes.txt").await?;

    // A command writes until the disk is full: it fails as the command it is, with its own
    // exit code and error, and the operation itself succeeds.
    let out = w
        .exec(
            &c,
            serde_json::json!({ "argv": ["dd", "if=/dev/zero", "of=fill", "bs=1M", "count=64"] }),
        )
        .await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("dd into a full home: exit {:?}: {stderr}", out.code);
    assert!(
        out.error.is_none(),
        "the exec itself answered: {:?}",
        out.events
    );
    assert!(matches!(out.code, Some(c) if c != 0), "{:?}", out.events);
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(free_bytes(&home)? < MIB, "the home's disk is full");

    // With 1 MiB free, an upload of 4 MiB fails clearly (the guest's `failed`, naming the
    // disk), leaves no part of itself, and gives back the space it took.
    let out = w
        .exec(
            &c,
            serde_json::json!({ "argv": ["truncate", "-s", "-1M", "fill"] }),
        )
        .await?;
    assert_eq!(out.code, Some(0), "{:?}", out.events);
    let err = upload(&w, &c, "upload.bin", noise(4 * MIB as usize, 1))
        .await?
        .expect_err("an upload into a full home fails");
    eprintln!("upload into a full home: {err}");
    match &err {
        ClientError::Api {
            status,
            code,
            message,
            ..
        } => {
            assert_eq!((status.as_u16(), code.as_str()), (502, "failed"), "{err}");
            assert!(message.contains("No space left on device"), "{message}");
        }
        other => bail!("the upload failed with {other}, not an API error"),
    }
    assert!(
        !home.join("upload.bin").exists(),
        "nothing at the upload's name"
    );
    let parts = names_with(&home, guest_agent::home::TEMP_PREFIX)?;
    assert!(parts.is_empty(), "the failed upload left {parts:?}");
    w.sh(&c, "head -c 512K /dev/zero > after.bin")
        .await
        .context("the failed upload gave its space back")?;

    // The computer still answers: commands, reads, and a checkpoint (an export writes nothing
    // into the home).
    assert_eq!(w.sh(&c, "cat notes.txt").await?, "kept\n");
    assert_eq!(&w.get_file(&c, "notes.txt").await?[..], b"kept\n");
    assert_eq!(done(&w, &c, "checkpoint").await?["revision"], 1);

    // Space freed: uploads and writes succeed again.
    w.sh(&c, "rm fill after.bin").await?;
    let bytes = noise(4 * MIB as usize, 2);
    let written = upload(&w, &c, "upload.bin", bytes.clone()).await??;
    assert_eq!(written, 4 * MIB);
    assert!(
        w.get_file(&c, "upload.bin").await? == bytes,
        "upload read back"
    );
    assert_eq!(
        w.sh(&c, "echo more > more.txt && cat more.txt").await?,
        "more\n"
    );
    w.check_log()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_home_store_fails_the_checkpoint_clearly_and_keeps_the_previous_revision(
) -> Result<()> {
    let mut mounts = Mounts::default();
    let mut w = World::start().await?;
    w.allow_warn("home checkpoint failed");
    // The local incremental store on 64 MiB (the server's data dir stays on the host's disk).
    let store = w.data_dir.path().join("home-cas");
    mounts.tmpfs(&store, 64 * MIB, 0o700, w.data_dir.path())?;
    let c = w.create_computer("ws-full-store").await?;
    let home = w.home_of(&c);
    std::fs::write(home.join("notes.txt"), b"one")?;
    let small = noise(MIB as usize, 3);
    std::fs::write(home.join("small.bin"), &small)?;
    w.give_home(&c)?;
    assert_eq!(done(&w, &c, "checkpoint").await?["revision"], 1);
    let repo = store.join("team-ws-full-store");
    let packs_of = |repo: &Path| names_with(&repo.join("packs"), "");
    let before = packs_of(&repo)?;

    // 20 MiB free, 24 MiB of new content: the first pack (about 16 MiB) is written, the
    // second finds the disk full.
    let ballast = ballast(&store, ".ballast", 20 * MIB)?;
    std::fs::write(home.join("notes.txt"), b"two")?;
    let big = noise(24 * MIB as usize, 4);
    std::fs::write(home.join("big.bin"), &big)?;
    w.give_home(&c)?;
    let err = failed(&w, &c, "checkpoint").await?;
    eprintln!("checkpoint into a full store: {err}");
    assert_eq!(err["code"], "home_store_failed", "{err}");
    let msg = err["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("out of space") && msg.contains("No space left on device"),
        "{msg}"
    );
    // No revision 2, the previous one current, and no half-written object.
    assert_eq!(
        w.home_revision(&c).await?,
        Some(1),
        "the previous revision stays"
    );
    let revs = w.revisions(&c).await?;
    assert_eq!(revs.len(), 1, "{revs:?}");
    let parts = files_with(&store, ".tmp-")?;
    assert!(parts.is_empty(), "the failed checkpoint left {parts:?}");
    let left: Vec<String> = packs_of(&repo)?
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    eprintln!("packs the failed checkpoint left: {left:?}");
    assert!(
        !left.is_empty(),
        "the failed checkpoint wrote a whole pack first"
    );

    // While the disk is still full, revision 1 reads back and restores whole.
    let notes = w
        .client
        .send(
            Method::GET,
            &format!("/v1/computers/{c}/home/content?path=notes.txt"),
            None,
            None,
            control_plane::client::full_body(bytes::Bytes::new()),
        )
        .await?;
    assert_eq!(&notes.into_body().collect().await?.to_bytes()[..], b"one");
    assert_eq!(done(&w, &c, "restore").await?["revision"], 1);
    assert_eq!(std::fs::read(home.join("notes.txt"))?, b"one");
    assert!(
        std::fs::read(home.join("small.bin"))? == small,
        "small.bin whole"
    );
    assert!(!home.join("big.bin").exists());

    // Space freed: the next checkpoint succeeds and collects what the failed one left.
    std::fs::remove_file(&ballast)?;
    std::fs::write(home.join("notes.txt"), b"three")?;
    std::fs::write(home.join("big.bin"), &big)?;
    w.give_home(&c)?;
    assert_eq!(done(&w, &c, "checkpoint").await?["revision"], 2);
    let now = packs_of(&repo)?;
    let still: Vec<&String> = left.iter().filter(|p| now.contains(p)).collect();
    assert!(
        still.is_empty(),
        "packs of the failed checkpoint remain: {still:?}"
    );
    std::fs::remove_file(home.join("big.bin"))?;
    assert_eq!(done(&w, &c, "restore").await?["revision"], 2);
    assert!(
        std::fs::read(home.join("big.bin"))? == big,
        "big.bin restored whole"
    );
    w.check_log()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restore_bigger_than_the_free_space_fails_clearly_and_leaves_the_home() -> Result<()> {
    let mut mounts = Mounts::default();
    let mut w = World::start().await?;
    w.allow_warn("home restore failed");
    let root = w.machines_dir.path().join("local");
    mounts.tmpfs(&root, 40 * MIB, 0o711, w.machines_dir.path())?;
    let c = w.create_computer("ws-full-restore").await?;
    let home = w.home_of(&c);
    std::fs::write(home.join("notes.txt"), b"one")?;
    let big = noise(12 * MIB as usize, 5);
    std::fs::write(home.join("big.bin"), &big)?;
    w.give_home(&c)?;
    assert_eq!(done(&w, &c, "checkpoint").await?["revision"], 1);

    // The home changes and its disk fills up (a root file beside the home, out of the
    // computer's reach) to 4 MiB free: revision 1 needs 12 MiB of staging.
    std::fs::remove_file(home.join("big.bin"))?;
    std::fs::write(home.join("notes.txt"), b"two")?;
    std::fs::write(home.join("kept.txt"), b"kept")?;
    w.give_home(&c)?;
    let dir = w.local_dir_of(&c);
    let ballast = ballast(&dir, "ballast", 4 * MIB)?;
    let err = failed(&w, &c, "restore").await?;
    eprintln!("restore into a full disk: {err}");
    assert_eq!(
        err["code"], "failed",
        "the computer's disk, not the request: {err}"
    );
    let msg = err["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("disk is full") && msg.contains("nothing written"),
        "{msg}"
    );
    // The home as it was, and no staging left beside it.
    assert_eq!(std::fs::read(home.join("notes.txt"))?, b"two");
    assert_eq!(std::fs::read(home.join("kept.txt"))?, b"kept");
    assert!(!home.join("big.bin").exists());
    let staging = names_with(&dir, ".home.rakazo-restore-")?;
    assert!(staging.is_empty(), "the failed restore left {staging:?}");
    assert!(
        free_bytes(&dir)? >= 3 * MIB,
        "the failed restore gave its space back"
    );
    // The computer still answers.
    assert_eq!(w.sh(&c, "cat notes.txt").await?, "two");

    // Space freed: revision 1 restores whole.
    std::fs::remove_file(&ballast)?;
    assert_eq!(done(&w, &c, "restore").await?["revision"], 1);
    assert_eq!(std::fs::read(home.join("notes.txt"))?, b"one");
    assert!(
        std::fs::read(home.join("big.bin"))? == big,
        "big.bin restored whole"
    );
    assert!(!home.join("kept.txt").exists());
    assert_eq!(w.sh(&c, "cat notes.txt").await?, "one");
    w.check_log()
}
