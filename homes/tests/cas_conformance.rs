//! The incremental repository (`homes::cas`) on both stores, each case written once and run
//! against a local directory and against a real s3s-fs bucket: dedup across revisions, an edit
//! in the middle of a big file stores only the chunks around it, unchanged files are not read,
//! every revision restores byte-exact (modes, mtimes, symlinks, empty directories, a sparse
//! file), equal content is stored once, and a flipped byte in any stored object is refused.
//!
//! The object store's client is synchronous to the repository (it runs its own runtime), so
//! these are plain tests; s3s-fs is started on a runtime of the fixture's.

#[path = "support/mod.rs"]
mod support;

use homes::cas::{
    chunk, BlobStore, CasError, CasKeys, Cause, Keep, LocalBlobs, ObjectBlobs, Repo, RevisionInfo,
    Snapshot,
};
use homes::testing::noise;
use homes::ObjectStoreConfig;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

const BUCKET: &str = "rakazo-homes";

/// A backend: makes stores over one place, as many as a case opens.
trait Backend {
    type Store: BlobStore;
    fn start() -> Self;
    fn store(&self) -> Self::Store;
}

struct Local(tempfile::TempDir);

impl Backend for Local {
    type Store = LocalBlobs;
    fn start() -> Self {
        Local(tempfile::tempdir().unwrap())
    }
    fn store(&self) -> LocalBlobs {
        LocalBlobs::new(self.0.path().join("store"))
    }
}

struct Object {
    s3: support::S3sFs,
}

fn config(endpoint: &str) -> ObjectStoreConfig {
    let mut c = ObjectStoreConfig::new(BUCKET, "us-east-1", "test", "test");
    c.endpoint = Some(endpoint.to_owned());
    c.force_path_style = true;
    c
}

impl Backend for Object {
    type Store = ObjectBlobs;
    fn start() -> Self {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let s3 = rt.block_on(support::S3sFs::start()).unwrap();
        let store = homes::ObjectHomeStore::new(
            &config(&s3.endpoint),
            homes::seal::ContentKey::generate(),
            homes::MemRevisionLedger::default(),
        );
        rt.block_on(store.client().create_bucket().bucket(BUCKET).send())
            .unwrap();
        Object { s3 }
    }
    fn store(&self) -> ObjectBlobs {
        ObjectBlobs::new(&config(&self.s3.endpoint), "home-1").unwrap()
    }
}

macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod local { $( #[test] fn $case() { super::$case::<super::Local>() } )* }
        mod object { $( #[test] fn $case() { super::$case::<super::Object>() } )* }
    };
}

conformance!(
    a_failure_midway_leaves_the_previous_revision_whole,
    forget_and_prune_keep_what_they_promise_through_a_crash_at_every_step,
    incremental_snapshots_store_what_changed_and_restore_byte_exact,
    equal_content_is_stored_once_and_ids_differ_across_homes,
    tampering_with_any_stored_object_is_refused,
);

fn keys() -> CasKeys {
    CasKeys::derive(&homes::seal::DataKey::from_bytes([7; 32]))
}

fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    noise(n, seed)
}

fn snap<S: BlobStore>(repo: &mut Repo<S>, dir: &Path, at: i64) -> RevisionInfo {
    repo.snapshot(Snapshot {
        dir,
        cause: Cause::Manual,
        at_ms: at,
    })
    .unwrap()
}

/// Every path under `root` with what a restore must reproduce.
fn listing(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let mut names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for p in names {
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let mode = m.permissions().mode() & 0o7777;
            if m.file_type().is_symlink() {
                out.push(format!(
                    "{rel} -> {}",
                    std::fs::read_link(&p).unwrap().display()
                ));
            } else if m.is_dir() {
                out.push(format!("{rel}/ {mode:o} {}", m.mtime()));
                stack.push(p);
            } else {
                let data = std::fs::read(&p).unwrap();
                out.push(format!(
                    "{rel} {mode:o} {} {} {}",
                    m.mtime_nsec(),
                    data.len(),
                    hex::encode(&blake3::hash(&data).as_bytes()[..8])
                ));
            }
        }
    }
    out.sort();
    out
}

fn home(dir: &Path) {
    std::fs::create_dir_all(dir.join("src/empty")).unwrap();
    std::fs::create_dir_all(dir.join("node_modules/a")).unwrap();
    for i in 0..200 {
        std::fs::write(
            dir.join(format!("node_modules/a/f{i}.js")),
            format!("module {i}\n"),
        )
        .unwrap();
    }
    std::fs::write(dir.join("big.bin"), random_bytes(3 << 20, 1)).unwrap();
    std::fs::write(dir.join("src/tool.sh"), "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(
        dir.join("src/tool.sh"),
        std::fs::Permissions::from_mode(0o750),
    )
    .unwrap();
    std::os::unix::fs::symlink("src/tool.sh", dir.join("tool")).unwrap();
    // A sparse file: a hole, then some bytes.
    let f = std::fs::File::create(dir.join("sparse")).unwrap();
    f.set_len(2 << 20).unwrap();
}

fn incremental_snapshots_store_what_changed_and_restore_byte_exact<B: Backend>() {
    let backend = B::start();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("home");
    home(&src);
    let mut repo = Repo::open(backend.store(), keys()).unwrap();
    let first = snap(&mut repo, &src, 1);
    assert_eq!(first.revision, 1);
    assert!(first.stored_bytes > 3 << 20, "{first:?}");
    assert_eq!(first.files_read, first.files);

    // Nothing changed: nothing read, nothing but the revision stored.
    let same = snap(&mut repo, &src, 2);
    assert_eq!(
        (same.files_read, same.new_blobs, same.stored_bytes),
        (0, 0, 0)
    );
    assert_eq!(same.root, first.root);

    // 4 KiB changed in the middle of the big file: one or two chunks and the root tree.
    let mut big = std::fs::read(src.join("big.bin")).unwrap();
    big[1_500_000..1_504_096].copy_from_slice(&random_bytes(4096, 9));
    std::fs::write(src.join("big.bin"), &big).unwrap();
    let edit = snap(&mut repo, &src, 3);
    assert_eq!(edit.files_read, 1);
    assert!(edit.new_blobs <= 4, "{edit:?}");
    assert!(
        edit.stored_bytes < 2 * u64::from(chunk::MAX) + (64 << 10),
        "an edit stored {} bytes",
        edit.stored_bytes
    );

    // Every revision restores byte-exact; the old one still has the old bytes.
    let want = listing(&src);
    let out = tmp.path().join("restored");
    let reopened = Repo::open(backend.store(), keys()).unwrap();
    reopened.restore(3, &out).unwrap();
    assert_eq!(listing(&out), want);
    let sparse = std::fs::metadata(out.join("sparse")).unwrap();
    assert!(sparse.blocks() * 512 < sparse.len(), "the hole was written");
    let old = tmp.path().join("old");
    reopened.restore(1, &old).unwrap();
    assert_ne!(std::fs::read(old.join("big.bin")).unwrap(), big);
    let revs: Vec<u64> = reopened
        .revisions()
        .unwrap()
        .iter()
        .map(|r| r.revision)
        .collect();
    assert_eq!(revs, [1, 2, 3]);
    assert!(matches!(
        reopened.restore(9, &tmp.path().join("x")),
        Err(CasError::NoRevision(9))
    ));
}

fn equal_content_is_stored_once_and_ids_differ_across_homes<B: Backend>() {
    let backend = B::start();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("home");
    std::fs::create_dir_all(&src).unwrap();
    let data = random_bytes(1 << 20, 3);
    std::fs::write(src.join("a"), &data).unwrap();
    std::fs::write(src.join("b"), &data).unwrap();
    let mut repo = Repo::open(backend.store(), keys()).unwrap();
    let r = snap(&mut repo, &src, 1);
    assert!(r.new_bytes < (1 << 20) + (4 << 10), "{r:?}");
    let other = CasKeys::derive(&homes::seal::DataKey::from_bytes([8; 32]));
    assert_ne!(keys().blob_id(&data), other.blob_id(&data));
}

fn tampering_with_any_stored_object_is_refused<B: Backend>() {
    let backend = B::start();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("home");
    home(&src);
    let mut repo = Repo::open(backend.store(), keys()).unwrap();
    snap(&mut repo, &src, 1);
    let blobs = backend.store();
    for prefix in ["packs/", "index/", "revisions/"] {
        for name in blobs.list(prefix).unwrap() {
            let good = blobs.get(&name).unwrap();
            for at in [0, good.len() / 2, good.len() - 9] {
                let mut bad = good.clone();
                bad[at] ^= 0x40;
                blobs.put(&name, &bad).unwrap();
                let out = tmp.path().join(format!("out-{}", rand::random::<u32>()));
                let result = Repo::open(backend.store(), keys()).and_then(|r| r.restore(1, &out));
                assert!(
                    matches!(result, Err(CasError::Tampered(_) | CasError::Corrupt(_))),
                    "{name} with byte {at} flipped: {result:?}"
                );
            }
            blobs.put(&name, &good).unwrap();
        }
    }
    // A wrong key opens nothing.
    let wrong = CasKeys::derive(&homes::seal::DataKey::from_bytes([9; 32]));
    assert!(Repo::open(backend.store(), wrong).is_err());
}

/// A store whose `put`s fail after the first `ok` of them, as a bucket that goes away midway;
/// with `deletes`, its deletes count too (a prune crashing at any of its steps).
struct FailingAfter<S> {
    inner: S,
    ok: std::sync::atomic::AtomicUsize,
    deletes: bool,
}

impl<S: BlobStore> BlobStore for FailingAfter<S> {
    fn put(&self, name: &str, bytes: &[u8]) -> Result<(), CasError> {
        let left = self.ok.load(std::sync::atomic::Ordering::SeqCst);
        if left == 0 {
            return Err(CasError::Io(std::io::Error::other("the store went away")));
        }
        self.ok.store(left - 1, std::sync::atomic::Ordering::SeqCst);
        self.inner.put(name, bytes)
    }
    fn get(&self, name: &str) -> Result<Vec<u8>, CasError> {
        self.inner.get(name)
    }
    fn list(&self, prefix: &str) -> Result<Vec<String>, CasError> {
        self.inner.list(prefix)
    }
    fn delete(&self, name: &str) -> Result<(), CasError> {
        if self.deletes {
            let left = self.ok.load(std::sync::atomic::Ordering::SeqCst);
            if left == 0 {
                return Err(CasError::Io(std::io::Error::other("the store went away")));
            }
            self.ok.store(left - 1, std::sync::atomic::Ordering::SeqCst);
        }
        self.inner.delete(name)
    }
    fn written(&self) -> u64 {
        self.inner.written()
    }
}

fn a_failure_midway_leaves_the_previous_revision_whole<B: Backend>() {
    let backend = B::start();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("home");
    home(&src);
    let mut repo = Repo::open(backend.store(), keys()).unwrap();
    snap(&mut repo, &src, 1);
    let want = listing(&src);
    // A new big file: its packs are written, then the store fails before the index or the
    // revision (every cut point: after 0, 1 and 2 puts).
    std::fs::write(src.join("new.bin"), random_bytes(20 << 20, 5)).unwrap();
    for ok in 0..3 {
        let failing = FailingAfter {
            inner: backend.store(),
            ok: ok.into(),
            deletes: false,
        };
        let mut broken = Repo::open(failing, keys()).unwrap();
        let e = broken
            .snapshot(Snapshot {
                dir: &src,
                cause: Cause::Stop,
                at_ms: 2,
            })
            .unwrap_err();
        assert!(e.to_string().contains("went away"), "{e}");
        // The previous revision is the latest and whole.
        let repo = Repo::open(backend.store(), keys()).unwrap();
        let revs: Vec<u64> = repo
            .revisions()
            .unwrap()
            .iter()
            .map(|r| r.revision)
            .collect();
        assert_eq!(revs, [1], "after {ok} puts");
        let out = tmp.path().join(format!("out-{ok}"));
        repo.restore(1, &out).unwrap();
        assert_eq!(listing(&out), want);
    }
    // And the next checkpoint on a working store succeeds.
    let mut repo = Repo::open(backend.store(), keys()).unwrap();
    assert_eq!(snap(&mut repo, &src, 3).revision, 2);
}

/// A bucket that does not answer: each request is retried, then fails with what happened, in a
/// bounded time.
#[test]
fn an_unreachable_bucket_fails_after_its_retries() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let blobs = ObjectBlobs::new(&config(&format!("http://127.0.0.1:{port}")), "home-1").unwrap();
    let e = blobs.put("packs/x", b"bytes").unwrap_err().to_string();
    assert!(e.contains("failed 4 times"), "{e}");
    assert_eq!(blobs.written(), 0);
}

/// Everything stored, by name, with its size.
fn stored<S: BlobStore>(s: &S) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for prefix in ["packs/", "index/", "revisions/"] {
        for n in s.list(prefix).unwrap() {
            let len = s.get(&n).unwrap().len();
            out.push((n, len));
        }
    }
    out.sort();
    out
}

fn forget_and_prune_keep_what_they_promise_through_a_crash_at_every_step<B: Backend>() {
    let backend = B::start();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("home");
    home(&src);
    let mut repo = Repo::open(backend.store(), keys()).unwrap();
    // Four revisions an hour apart: a file that comes and goes, one that is rewritten.
    let hour = 3_600_000;
    let mut wanted = Vec::new();
    for i in 0..4i64 {
        std::fs::write(src.join("big.bin"), random_bytes(3 << 20, 100 + i as u64)).unwrap();
        if i == 1 {
            std::fs::write(src.join("gone.bin"), random_bytes(2 << 20, 7)).unwrap();
        } else {
            let _ = std::fs::remove_file(src.join("gone.bin"));
        }
        snap(&mut repo, &src, i * hour);
        wanted.push(listing(&src));
    }
    // Keep the last one and the newest of the two newest hours: revisions 3 and 4.
    let keep = Keep {
        last: 1,
        hourly: 2,
        daily: 0,
    };
    let gone = repo.forget(&keep).unwrap();
    assert_eq!(gone, [1, 2]);
    let before = stored(repo.store());
    // A prune that crashes after k writes and deletes, for every k until one finishes: after
    // each, the kept revisions restore whole.
    let mut k = 0;
    let stats = loop {
        let failing = FailingAfter {
            inner: backend.store(),
            ok: k.into(),
            deletes: true,
        };
        let mut crashing = Repo::open(failing, keys()).unwrap();
        let done = crashing.prune();
        let repo = Repo::open(backend.store(), keys()).unwrap();
        for (n, want) in [(3u64, &wanted[2]), (4, &wanted[3])] {
            let out = tmp.path().join(format!("prune-{k}-{n}"));
            repo.restore(n, &out)
                .unwrap_or_else(|e| panic!("revision {n} after a crash at step {k}: {e}"));
            assert_eq!(
                &listing(&out),
                want,
                "revision {n} after a crash at step {k}"
            );
        }
        match done {
            Ok(stats) => break stats,
            Err(e) => assert!(e.to_string().contains("went away"), "{e}"),
        }
        k += 1;
        assert!(k < 100, "prune never finished");
    };
    assert!(
        k >= 3,
        "prune finished after {k} steps: the crash points were not exercised"
    );
    // It was the first prune to finish that did the work; a second finds nothing to do.
    let mut repo = Repo::open(backend.store(), keys()).unwrap();
    let again = repo.prune().unwrap();
    assert_eq!(
        (again.packs_deleted, again.packs_written),
        (0, 0),
        "{again:?}"
    );
    let after = stored(repo.store());
    let size = |v: &[(String, usize)]| v.iter().map(|(_, n)| n).sum::<usize>();
    // The forgotten revisions' data (about 8 MiB) is gone.
    assert!(
        size(&after) + (7 << 20) < size(&before),
        "{} bytes before, {} after ({stats:?})",
        size(&before),
        size(&after)
    );
    let revs: Vec<u64> = repo
        .revisions()
        .unwrap()
        .iter()
        .map(|r| r.revision)
        .collect();
    assert_eq!(revs, [3, 4]);
}

/// Screen recordings (docs/recordings.md) live in the homes' bucket under `recordings/`, sealed.
#[test]
fn recordings_are_kept_sealed_in_the_homes_bucket() {
    let o = Object::start();
    let cfg = config(&o.s3.endpoint);
    let rec = homes::cas::RecordingBlobs::new(
        homes::CasPlace::Object(cfg.clone()),
        homes::seal::ContentKey::generate(),
    );
    rec.put("c-1", "bot-1/0001", b"frames of bot-1").unwrap();
    assert_eq!(rec.get("c-1", "bot-1/0001").unwrap(), b"frames of bot-1");
    let raw = ObjectBlobs::under(&cfg, "recordings", "c-1").unwrap();
    let stored = raw.get("bot-1/0001").unwrap();
    assert!(!stored.windows(6).any(|w| w == b"frames"), "sealed at rest");
    assert!(
        ObjectBlobs::new(&cfg, "c-1")
            .unwrap()
            .get("bot-1/0001")
            .is_err(),
        "not under cas/"
    );
    rec.delete("c-1", "bot-1/0001").unwrap();
    assert!(rec.get("c-1", "bot-1/0001").is_err());
}
