//! Archives in and out of a repository: byte-exact round trips, dedup across revisions, and
//! refusals of what the checker or the entry order forbids.

use super::*;
use crate::archive::pack;
use crate::cas::{CasKeys, LocalBlobs};
use crate::seal::DataKey;

fn repo(dir: &std::path::Path) -> Repo<LocalBlobs> {
    Repo::open(
        LocalBlobs::new(dir.join("store")),
        CasKeys::derive(&DataKey::from_bytes([7; 32])),
    )
    .unwrap()
}

fn archive_of(dir: &std::path::Path) -> Vec<u8> {
    let mut out = Vec::new();
    pack(dir, &mut out).unwrap();
    out
}

fn home(dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let h = dir.join("home");
    std::fs::create_dir_all(h.join("a/b")).unwrap();
    std::fs::create_dir_all(h.join("empty")).unwrap();
    std::fs::write(h.join("a.txt"), b"top").unwrap();
    std::fs::write(h.join("a/b/big"), vec![5u8; 700 << 10]).unwrap();
    std::fs::write(h.join("a/run.sh"), b"#!/bin/sh\n").unwrap();
    std::fs::set_permissions(h.join("a/run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(h.join("z"), b"").unwrap();
    let odd = std::ffi::OsStr::from_bytes(b"n\xffm");
    std::fs::write(h.join(odd), b"not utf-8").unwrap();
    h
}

use std::os::unix::ffi::OsStrExt;

#[test]
fn an_archive_comes_back_byte_exact_and_sized() {
    let tmp = tempfile::tempdir().unwrap();
    let h = home(tmp.path());
    let bytes = archive_of(&h);
    let mut r = repo(tmp.path());
    let info = r
        .ingest(&bytes[..], Limits::default(), Cause::Manual, 1, 4)
        .unwrap();
    assert_eq!(info.revision, 4, "numbered after the archive store's last");
    let size = r.archive_size(4).unwrap();
    let mut out = Vec::new();
    let written = r.write_archive(4, &mut out).unwrap();
    assert_eq!(out, bytes);
    assert_eq!(size, written);
    assert_eq!(size.len, bytes.len() as u64);

    // The same home again stores nothing new but a revision.
    let again = r
        .ingest(&bytes[..], Limits::default(), Cause::RunEnd, 2, 1)
        .unwrap();
    assert_eq!((again.revision, again.new_blobs), (5, 0));
    assert_eq!(again.root, info.root);

    let e = r.find(5, b"a/b/big").unwrap().unwrap();
    let mut content = Vec::new();
    r.read_file(&e, &mut content).unwrap();
    assert_eq!(content, vec![5u8; 700 << 10]);
    assert!(r.find(5, b"a/nope").unwrap().is_none());
    assert!(r.find(5, b"a.txt/x").unwrap().is_none());
}

#[test]
fn diff_names_what_changed() {
    let tmp = tempfile::tempdir().unwrap();
    let h = home(tmp.path());
    let mut r = repo(tmp.path());
    r.ingest(&archive_of(&h)[..], Limits::default(), Cause::Manual, 1, 1)
        .unwrap();
    std::fs::write(h.join("a.txt"), b"changed").unwrap();
    std::fs::remove_dir_all(h.join("a/b")).unwrap();
    std::fs::create_dir_all(h.join("new/deep")).unwrap();
    std::fs::write(h.join("new/deep/f"), b"x").unwrap();
    let second = r
        .ingest(&archive_of(&h)[..], Limits::default(), Cause::Manual, 2, 1)
        .unwrap();
    // The changed file and the trees on the way to the changes; not the big file again.
    assert!(
        second.new_bytes < 4096,
        "only the small changes: {second:?}"
    );
    let (d, more) = r.diff(1, 2, 100).unwrap();
    let got: Vec<(String, Change)> = d.into_iter().map(|d| (d.path, d.change)).collect();
    assert_eq!(
        got,
        vec![
            ("a/b".into(), Change::Removed),
            ("a/b/big".into(), Change::Removed),
            ("a.txt".into(), Change::Changed),
            ("new".into(), Change::Added),
            ("new/deep".into(), Change::Added),
            ("new/deep/f".into(), Change::Added),
        ]
    );
    assert!(!more);
    let (d, more) = r.diff(1, 2, 2).unwrap();
    assert_eq!((d.len(), more), (2, true));
}

#[test]
fn refused_archives_write_no_revision() {
    let tmp = tempfile::tempdir().unwrap();
    let h = home(tmp.path());
    let good = archive_of(&h);
    let mut r = repo(tmp.path());
    // Truncated, trailing bytes, over the limits.
    let cases: Vec<(Vec<u8>, Limits)> = vec![
        (good[..good.len() - 5].to_vec(), Limits::default()),
        ([&good[..], b"x"].concat(), Limits::default()),
        (
            good.clone(),
            Limits {
                max_entries: 3,
                max_bytes: u64::MAX,
            },
        ),
    ];
    for (bytes, limits) in cases {
        let e = r
            .ingest(&bytes[..], limits, Cause::Manual, 1, 1)
            .unwrap_err();
        assert!(matches!(e, CasError::Archive(_)), "{e:?}");
    }
    // Out of order: a file before its directory.
    let mut bad = Vec::new();
    bad.extend_from_slice(&MAGIC);
    bad.extend_from_slice(&VERSION.to_be_bytes());
    bad.extend_from_slice(&[TAG_FILE, 0, 0, 3]);
    bad.extend_from_slice(b"d/f");
    bad.extend_from_slice(&0u64.to_be_bytes());
    bad.extend_from_slice(&[TAG_END]);
    bad.extend_from_slice(&1u64.to_be_bytes());
    bad.extend_from_slice(&0u64.to_be_bytes());
    let e = r
        .ingest(&bad[..], Limits::default(), Cause::Manual, 1, 1)
        .unwrap_err();
    assert!(e.to_string().contains("not listed before it"), "{e}");
    assert!(r.revisions().unwrap().is_empty());
}

#[test]
fn a_delta_archive_sends_only_what_changed_and_comes_back_whole() {
    use crate::archive::pack_delta;
    let tmp = tempfile::tempdir().unwrap();
    let h = home(tmp.path());
    let mut first = Vec::new();
    let (stats, stamps) = pack_delta(&h, &mut first, None).unwrap();
    assert_eq!(stats.unchanged, 0);
    let mut r = repo(tmp.path());
    let how = |base, token: &str| Ingest {
        limits: Limits::default(),
        cause: Cause::Manual,
        at_ms: 1,
        first: 1,
        base,
        token: Some(token.into()),
    };
    let one = r.ingest_with(&first[..], how(None, "t1")).unwrap();
    assert_eq!(one.export.as_deref(), Some("t1"));

    std::fs::write(h.join("a.txt"), b"changed!").unwrap();
    let mut delta = Vec::new();
    let (stats, _) = pack_delta(&h, &mut delta, Some(&stamps)).unwrap();
    assert_eq!((stats.files, stats.unchanged), (5, 4), "{stats:?}");
    // The big file is not in the delta.
    assert!(delta.len() < 4096, "{} bytes", delta.len());
    let two = r.ingest_with(&delta[..], how(Some(1), "t2")).unwrap();
    let mut out = Vec::new();
    r.write_archive(two.revision, &mut out).unwrap();
    assert_eq!(
        out,
        archive_of(&h),
        "the delta's revision is the whole home"
    );

    // Only a delta ingest takes unchanged entries, and only for files the base has at that size.
    let e = r
        .ingest(&delta[..], Limits::default(), Cause::Manual, 1, 1)
        .unwrap_err();
    assert!(matches!(e, CasError::Archive(_)), "{e:?}");
    std::fs::write(h.join("z"), b"grew").unwrap();
    let lie = delta_with_same(b"z", 4);
    let e = r.ingest_with(&lie[..], how(Some(1), "t3")).unwrap_err();
    assert!(e.to_string().contains("said unchanged"), "{e}");
    let lie = delta_with_same(b"nowhere", 0);
    let e = r.ingest_with(&lie[..], how(Some(1), "t3")).unwrap_err();
    assert!(e.to_string().contains("said unchanged"), "{e}");
    assert_eq!(r.revisions().unwrap().len(), 2);
}

/// A delta archive of one unchanged file `path` of `size` bytes.
fn delta_with_same(path: &[u8], size: u64) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&MAGIC);
    v.extend_from_slice(&VERSION.to_be_bytes());
    v.extend_from_slice(&[TAG_SAME, 0]);
    v.extend_from_slice(&(path.len() as u16).to_be_bytes());
    v.extend_from_slice(path);
    v.extend_from_slice(&size.to_be_bytes());
    v.push(TAG_END);
    v.extend_from_slice(&1u64.to_be_bytes());
    v.extend_from_slice(&size.to_be_bytes());
    v
}

#[test]
fn a_file_rewritten_under_its_old_mtime_is_sent_again() {
    use crate::archive::pack_delta;
    let tmp = tempfile::tempdir().unwrap();
    let h = home(tmp.path());
    let (_, stamps) = pack_delta(&h, std::io::sink(), None).unwrap();
    let f = h.join("a.txt");
    let before = std::fs::metadata(&f).unwrap().modified().unwrap();
    std::fs::write(&f, b"new").unwrap();
    // Same size as before, and the old mtime put back: only ctime tells.
    std::fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(before)
        .unwrap();
    let mut delta = Vec::new();
    let (stats, _) = pack_delta(&h, &mut delta, Some(&stamps)).unwrap();
    assert_eq!((stats.files, stats.unchanged), (5, 4), "{stats:?}");
    assert!(
        delta.windows(3).any(|w| w == b"new"),
        "a.txt's content is in the delta"
    );
}
