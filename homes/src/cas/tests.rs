//! The repository on a local directory: dedup across revisions, an edit in the middle of a big
//! file stores only the chunks around it, unchanged files are not read, restores are byte-exact,
//! and tampering with any stored object is refused.

use super::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

fn keys() -> CasKeys {
    CasKeys::derive(&crate::seal::DataKey::from_bytes([7; 32]))
}

fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    crate::testing::noise(n, seed)
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

#[test]
fn incremental_snapshots_store_what_changed_and_restore_byte_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, store) = (tmp.path().join("home"), tmp.path().join("store"));
    home(&src);
    let mut repo = Repo::open(LocalBlobs::new(&store), keys()).unwrap();
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
    let reopened = Repo::open(LocalBlobs::new(&store), keys()).unwrap();
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

#[test]
fn equal_content_is_stored_once_and_ids_differ_across_homes() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("home");
    std::fs::create_dir_all(&src).unwrap();
    let data = random_bytes(1 << 20, 3);
    std::fs::write(src.join("a"), &data).unwrap();
    std::fs::write(src.join("b"), &data).unwrap();
    let mut repo = Repo::open(LocalBlobs::new(tmp.path().join("s")), keys()).unwrap();
    let r = snap(&mut repo, &src, 1);
    assert!(r.new_bytes < (1 << 20) + (4 << 10), "{r:?}");
    let other = CasKeys::derive(&crate::seal::DataKey::from_bytes([8; 32]));
    assert_ne!(keys().blob_id(&data), other.blob_id(&data));
}

#[test]
fn tampering_with_any_stored_object_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, store) = (tmp.path().join("home"), tmp.path().join("store"));
    home(&src);
    let mut repo = Repo::open(LocalBlobs::new(&store), keys()).unwrap();
    snap(&mut repo, &src, 1);
    let blobs = LocalBlobs::new(&store);
    for prefix in ["packs/", "index/", "revisions/"] {
        for name in blobs.list(prefix).unwrap() {
            let good = blobs.get(&name).unwrap();
            for at in [0, good.len() / 2, good.len() - 9] {
                let mut bad = good.clone();
                bad[at] ^= 0x40;
                blobs.put(&name, &bad).unwrap();
                let out = tmp.path().join(format!("out-{}", rand::random::<u32>()));
                let result =
                    Repo::open(LocalBlobs::new(&store), keys()).and_then(|r| r.restore(1, &out));
                assert!(
                    matches!(result, Err(CasError::Tampered(_) | CasError::Corrupt(_))),
                    "{name} with byte {at} flipped: {result:?}"
                );
            }
            blobs.put(&name, &good).unwrap();
        }
    }
    // A wrong key opens nothing.
    let wrong = CasKeys::derive(&crate::seal::DataKey::from_bytes([9; 32]));
    assert!(Repo::open(LocalBlobs::new(&store), wrong).is_err());
}

#[test]
fn trees_that_would_leave_the_root_are_refused() {
    for name in ["..", ".", "a/b", "", "x\0y"] {
        let t = tree::Tree {
            entries: vec![tree::Entry {
                name: name.into(),
                mode: 0o644,
                mtime_ns: 0,
                node: tree::Node::Symlink {
                    target: "/etc".into(),
                },
            }],
        };
        assert!(tree::Tree::decode(&t.encode()).is_err(), "{name:?}");
    }
}
