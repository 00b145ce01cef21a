//! Archive writer and reader: round trips, the skip list, and hostile archives (each rejected by
//! both the restoring reader and the streaming checker, with nothing written anywhere).

use super::*;
use crate::testing::{expected_after_restore, manifest, noise, write_sample_home, RawArchive};
use std::fs;
use std::path::PathBuf;

fn opts() -> UnpackOptions {
    UnpackOptions::default()
}

fn pack_to_vec(root: &Path) -> (Vec<u8>, PackStats) {
    let mut out = Vec::new();
    let stats = pack(root, &mut out).unwrap();
    (out, stats)
}

/// Runs the streaming checker over `bytes` in small chunks.
fn check(bytes: &[u8], limits: Limits) -> Result<(), ArchiveError> {
    let mut parser = ArchiveParser::new(limits);
    for chunk in bytes.chunks(7) {
        parser.feed(chunk)?;
    }
    parser.finish()
}

/// Everything under `dir`, for "nothing was written" checks.
fn listing(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if fs::symlink_metadata(&p).unwrap().is_dir() {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn round_trip_keeps_tree_and_applies_the_skip_list() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("home");
    write_sample_home(&src).unwrap();
    let (bytes, stats) = pack_to_vec(&src);
    assert_eq!(stats.skipped_symlinks, 2);
    assert_eq!(stats.skipped_special, 1);
    // Each excluded dir twice (profile root and Default), each excluded file twice.
    assert_eq!(
        stats.excluded,
        2 * (EXCLUDED_PROFILE_DIRS.len() + EXCLUDED_PROFILE_FILES.len()) as u64
    );
    check(&bytes, Limits::default()).unwrap();

    let dst = tmp.path().join("restored");
    let restored = restore(&bytes[..], &dst, &opts()).unwrap();
    assert_eq!(restored.files, stats.files);
    assert_eq!(restored.dirs, stats.dirs);
    let want = expected_after_restore(&manifest(&src).unwrap());
    assert_eq!(manifest(&dst).unwrap(), want);
    assert!(want.contains_key("Cache/kept.txt") && want.contains_key("lock"));
    assert!(want.contains_key("empty") && want.contains_key("bots/b2/empty/nested"));
    // Modes are normalised like the guest's: 0700 for executables and dirs, 0600 otherwise.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &str| fs::metadata(dst.join(p)).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode("bin/run.sh"), 0o700);
    assert_eq!(mode("notes.txt"), 0o600);
    assert_eq!(mode("empty"), 0o700);
    // Nothing left beside the target.
    assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 2);
}

#[test]
fn archives_are_deterministic() {
    let tmp = tempfile::tempdir().unwrap();
    write_sample_home(tmp.path()).unwrap();
    assert_eq!(pack_to_vec(tmp.path()).0, pack_to_vec(tmp.path()).0);
}

#[test]
fn restore_replaces_an_existing_target_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let dst = tmp.path().join("home");
    fs::create_dir(&dst).unwrap();
    fs::write(dst.join("stale"), b"old").unwrap();
    let bytes = RawArchive::new().file(b"fresh", false, b"new").end();
    restore(&bytes[..], &dst, &opts()).unwrap();
    assert_eq!(fs::read(dst.join("fresh")).unwrap(), b"new");
    assert!(!dst.join("stale").exists());
    assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 1);
}

#[test]
fn restore_in_place_replaces_the_contents_and_keeps_the_directory() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let dst = tmp.path().join("home");
    fs::create_dir_all(dst.join("old-dir/sub")).unwrap();
    fs::write(dst.join("stale"), b"old").unwrap();
    // Leftovers of an interrupted in-place restore go too.
    fs::create_dir(dst.join(".rakazo-restore-0011223344556677")).unwrap();
    let inode = fs::metadata(&dst).unwrap().ino();
    let src = tempfile::tempdir().unwrap();
    write_sample_home(src.path()).unwrap();
    let (bytes, _) = pack_to_vec(src.path());
    restore_in_place(&bytes[..], &dst, &opts()).unwrap();
    assert_eq!(
        fs::metadata(&dst).unwrap().ino(),
        inode,
        "the directory itself (a mount point) stays"
    );
    assert_eq!(
        manifest(&dst).unwrap(),
        expected_after_restore(&manifest(src.path()).unwrap())
    );
    assert_eq!(
        fs::read_dir(tmp.path()).unwrap().count(),
        1,
        "nothing beside it"
    );
}

#[test]
fn packing_refuses_a_symlinked_root() {
    let tmp = tempfile::tempdir().unwrap();
    fs::create_dir(tmp.path().join("real")).unwrap();
    std::os::unix::fs::symlink("real", tmp.path().join("link")).unwrap();
    assert!(pack(&tmp.path().join("link"), Vec::new()).is_err());
}

#[test]
fn a_file_that_shrinks_while_packed_is_padded() {
    // Simulated through the copy path directly: announce 10 bytes, deliver 4.
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("f"), b"abcd").unwrap();
    let mut out = Vec::new();
    let mut packer = pack::tests_support::packer(tmp.path(), &mut out);
    let file = fs::File::open(tmp.path().join("f")).unwrap();
    assert_eq!(packer.copy_for_test(file, 10), 4);
    drop(packer);
    assert_eq!(out, b"abcd\0\0\0\0\0\0");
}

/// A hostile archive and the error it must produce.
fn hostile() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let big = noise(100, 9);
    vec![
        (
            "dotdot",
            RawArchive::new().file(b"../escape", false, b"x").end(),
            "'..' component",
        ),
        (
            "inner dotdot",
            RawArchive::new()
                .dir(b"a")
                .file(b"a/../../x", false, b"x")
                .end(),
            "'..'",
        ),
        (
            "dot",
            RawArchive::new().file(b"./x", false, b"x").end(),
            "'.' component",
        ),
        (
            "absolute",
            RawArchive::new().file(b"/etc/passwd", false, b"x").end(),
            "absolute",
        ),
        (
            "empty component",
            RawArchive::new().dir(b"a").file(b"a//x", false, b"x").end(),
            "empty component",
        ),
        ("empty path", RawArchive::new().dir(b"").end(), "empty path"),
        (
            "nul",
            RawArchive::new().file(b"a\0b", false, b"x").end(),
            "NUL",
        ),
        // Symlinks (3), devices (4), FIFOs (5) and sockets have no place in the format.
        (
            "symlink",
            RawArchive::new()
                .raw(&[3, 0, 1, b'l', 0, 11])
                .raw(b"/etc/passwd")
                .end(),
            "type 3",
        ),
        (
            "device",
            RawArchive::new().raw(&[4, 0, 3]).raw(b"dev").end(),
            "type 4",
        ),
        (
            "fifo",
            RawArchive::new().raw(&[5, 0, 4]).raw(b"fifo").end(),
            "type 5",
        ),
        (
            "bad flags",
            RawArchive::new()
                .raw(&[TAG_FILE, 0x80, 0, 1, b'x'])
                .raw(&0u64.to_be_bytes())
                .end(),
            "flags",
        ),
        (
            "truncated content",
            RawArchive::new().file(b"f", false, &big).unfinished()[..50].to_vec(),
            "truncated",
        ),
        (
            "no end record",
            RawArchive::new().file(b"f", false, b"x").unfinished(),
            "truncated",
        ),
        (
            "trailing data",
            {
                let mut b = RawArchive::new().end();
                b.push(0);
                b
            },
            "after its end",
        ),
        (
            "end lies",
            RawArchive::new()
                .file(b"f", false, b"x")
                .raw(&[TAG_END])
                .raw(&[0; 16])
                .unfinished(),
            "end record says",
        ),
        ("bad magic", b"GARBAGE!GARBAGE!".to_vec(), "bad magic"),
        ("empty stream", Vec::new(), "truncated"),
    ]
}

#[test]
fn hostile_archives_are_rejected_and_write_nothing() {
    for (name, bytes, want) in hostile() {
        let tmp = tempfile::tempdir().unwrap();
        let dst = tmp.path().join("home");
        fs::create_dir(&dst).unwrap();
        fs::write(dst.join("keep"), b"previous").unwrap();
        let before = listing(tmp.path());
        let err = restore(&bytes[..], &dst, &opts()).expect_err(name);
        assert!(err.to_string().contains(want), "{name}: {err}");
        assert_eq!(listing(tmp.path()), before, "{name}: something was written");
        assert_eq!(fs::read(dst.join("keep")).unwrap(), b"previous", "{name}");
        // In place (a home that is a mount point), the same.
        let err = restore_in_place(&bytes[..], &dst, &opts()).expect_err(name);
        assert!(err.to_string().contains(want), "{name} (in place): {err}");
        assert_eq!(
            listing(tmp.path()),
            before,
            "{name}: something was written in place"
        );
        let err = check(&bytes, Limits::default()).expect_err(name);
        assert!(err.to_string().contains(want), "{name} (checker): {err}");
    }
}

#[test]
fn tree_order_violations_are_rejected_by_the_reader() {
    let cases = [
        (
            "parent missing",
            RawArchive::new().file(b"a/x", false, b"x").end(),
            "before its parent",
        ),
        (
            "duplicate file",
            RawArchive::new()
                .file(b"x", false, b"1")
                .file(b"x", false, b"2")
                .end(),
            "twice",
        ),
        (
            "duplicate dir",
            RawArchive::new().dir(b"d").dir(b"d").end(),
            "twice",
        ),
        (
            "child of a file",
            RawArchive::new()
                .file(b"f", false, b"1")
                .file(b"f/x", false, b"2")
                .end(),
            "not a directory",
        ),
    ];
    for (name, bytes, want) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dst = tmp.path().join("home");
        let err = restore(&bytes[..], &dst, &opts()).expect_err(name);
        assert!(err.to_string().contains(want), "{name}: {err}");
        assert!(
            listing(tmp.path()).is_empty(),
            "{name}: something was written"
        );
    }
}

#[test]
fn limits_are_enforced_before_writing() {
    let limits = Limits {
        max_entries: 3,
        max_bytes: 1000,
    };
    let o = UnpackOptions {
        limits,
        sync: false,
    };
    let many = RawArchive::new()
        .dir(b"a")
        .dir(b"b")
        .dir(b"c")
        .dir(b"d")
        .end();
    let huge = RawArchive::new()
        .file(b"a", false, &noise(600, 1))
        .file(b"b", false, &noise(600, 2))
        .end();
    // A size field claiming far more than is sent is refused before any byte is read.
    let claim = RawArchive::new()
        .raw(&[TAG_FILE, 0, 0, 1, b'x'])
        .raw(&u64::MAX.to_be_bytes())
        .unfinished();
    for (name, bytes, want) in [
        ("entries", many, "more than 3 entries"),
        ("bytes", huge, "more than 1000 bytes"),
        ("claimed bytes", claim, "more than 1000 bytes"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dst = tmp.path().join("home");
        let err = restore(&bytes[..], &dst, &o).expect_err(name);
        assert!(err.to_string().contains(want), "{name}: {err}");
        assert!(listing(tmp.path()).is_empty(), "{name}");
        let err = check(&bytes, limits).expect_err(name);
        assert!(err.to_string().contains(want), "{name} (checker): {err}");
    }
}

#[test]
fn a_target_behind_a_symlink_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("outside");
    fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, tmp.path().join("link")).unwrap();
    let bytes = RawArchive::new().file(b"x", false, b"x").end();
    for target in [tmp.path().join("link"), tmp.path().join("link/home")] {
        let err = restore(&bytes[..], &target, &opts()).unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
    }
    assert!(listing(&outside).is_empty());
}

#[test]
fn validate_path_accepts_ordinary_names() {
    for ok in [
        &b"a"[..],
        b"a/b/c",
        b".hidden/x",
        b"..a/b..",
        "ünï/çødé".as_bytes(),
    ] {
        validate_path(ok).unwrap();
    }
    let long = vec![b'a'; MAX_COMPONENT_LEN + 1];
    assert!(validate_path(&long).is_err());
}

#[tokio::test]
async fn async_pack_and_restore_stream() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("home");
    write_sample_home(&src).unwrap();
    let mut reader = pack_reader(src.clone());
    let dst = tmp.path().join("copy");
    // Pass through the checker too, as the object store does.
    let checked = ArchiveChecker::new(&mut reader, Limits::default());
    let stats = restore_async(Box::pin(checked_owned(checked).await), dst.clone(), opts())
        .await
        .unwrap();
    assert!(stats.files > 10);
    assert!(reader.stats().is_some());
    assert_eq!(
        manifest(&dst).unwrap(),
        expected_after_restore(&manifest(&src).unwrap())
    );
}

/// Reads a checker to the end into memory (small test trees only), so the borrowed reader can
/// be handed to a `'static` restore.
async fn checked_owned<R: tokio::io::AsyncRead + Unpin>(mut r: R) -> std::io::Cursor<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut v = Vec::new();
    r.read_to_end(&mut v).await.unwrap();
    std::io::Cursor::new(v)
}

#[tokio::test]
async fn pieces_taken_whole_are_the_same_archive() {
    use tokio::io::AsyncReadExt;
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("home");
    write_sample_home(&src).unwrap();
    let mut read = Vec::new();
    pack_reader(src.clone())
        .read_to_end(&mut read)
        .await
        .unwrap();
    let mut reader = pack_reader(src);
    let mut pieces = Vec::new();
    while let Some(piece) = reader.next_chunk().await.unwrap() {
        pieces.extend_from_slice(&piece);
    }
    assert_eq!(pieces, read);
    assert!(reader.stats().is_some());
    let mut missing = pack_reader(tmp.path().join("missing"));
    let err = loop {
        match missing.next_chunk().await {
            Ok(Some(_)) => {}
            Ok(None) => panic!("a missing home packed as a complete archive"),
            Err(e) => break e,
        }
    };
    assert!(
        format!("{err:?}").contains("open home directory"),
        "{err:?}"
    );
}

#[tokio::test]
async fn pack_errors_surface_through_the_stream() {
    let tmp = tempfile::tempdir().unwrap();
    let mut reader = pack_reader(tmp.path().join("missing"));
    let mut out = Vec::new();
    use tokio::io::AsyncReadExt;
    let err = reader.read_to_end(&mut out).await.unwrap_err();
    assert!(
        format!("{:?}", err).contains("open home directory"),
        "{err:?}"
    );
}

/// A home quota (docs/homes.md#quota, issue 11): a sparse 60 GB file is refused from its header, as
/// the archive streams, with nothing of its content handed on: the checker stops the stream
/// after the first chunk instead of reading 60 GB of zeros.
#[tokio::test]
async fn a_sparse_file_past_the_quota_fails_at_its_header() {
    use tokio::io::AsyncReadExt;
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("home");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("notes.txt"), b"kept small").unwrap();
    let big = fs::File::create(src.join("big")).unwrap();
    big.set_len(60 << 30).unwrap();
    drop(big);
    let quota = Limits {
        max_entries: 1_000_000,
        max_bytes: 20 << 30,
    };
    let mut checked = ArchiveChecker::new(pack_reader(src), quota);
    let mut passed: u64 = 0;
    let mut buf = vec![0u8; 64 * 1024];
    let err = loop {
        match checked.read(&mut buf).await {
            Ok(0) => panic!("a 60 GB home passed a 20 GiB quota"),
            Ok(n) => passed += n as u64,
            Err(e) => break e,
        }
    };
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    let inner = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<ArchiveError>())
        .expect("the archive error");
    assert!(
        matches!(inner, ArchiveError::TooManyBytes { limit } if *limit == 20 << 30),
        "{inner:?}"
    );
    assert!(inner.to_string().contains("21474836480"), "{inner}");
    // The headers and the small file at most: none of the big file's content went on.
    assert!(passed < 64 * 1024, "{passed} bytes passed the checker");
}
