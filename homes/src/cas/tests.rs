//! Unit checks of the layer's parts; the repository's behaviour on both stores is the
//! conformance suite's (homes/tests/cas_conformance.rs).

use super::*;

#[test]
fn trees_that_would_leave_the_root_are_refused() {
    for name in ["..", ".", "a/b", "", "x\0y"] {
        let t = tree::Tree {
            entries: vec![tree::Entry {
                name: name.into(),
                raw: None,
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

#[test]
fn raw_names_are_checked_as_bytes() {
    let entry = |raw: &[u8]| {
        let (name, raw) = tree::Entry::names(raw);
        tree::Entry {
            name,
            raw,
            mode: 0o600,
            mtime_ns: 0,
            node: tree::Node::Dir { tree: "00".into() },
        }
    };
    // Not UTF-8, and one that is fine: kept exactly, sorted by bytes.
    let t = tree::Tree {
        entries: vec![entry(b"a"), entry(b"b\xff")],
    };
    let back = tree::Tree::decode(&t.encode()).unwrap();
    assert_eq!(&*back.entries[1].name_bytes().unwrap(), b"b\xff");
    // A raw name that hides a separator or a NUL is refused like a plain one.
    for bad in [&b"a/\xff"[..], b"\xff\0", b".."] {
        let t = tree::Tree {
            entries: vec![entry(bad)],
        };
        assert!(tree::Tree::decode(&t.encode()).is_err(), "{bad:?}");
    }
    // Two lossy-equal names stay two entries, and out-of-order bytes are refused.
    let t = tree::Tree {
        entries: vec![entry(b"\xfe"), entry(b"\xff")],
    };
    assert!(tree::Tree::decode(&t.encode()).is_ok());
    let t = tree::Tree {
        entries: vec![entry(b"\xff"), entry(b"\xfe")],
    };
    assert!(tree::Tree::decode(&t.encode()).is_err());
}

#[test]
fn a_local_write_that_fails_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = LocalBlobs::new(dir.path());
    // A directory where the object goes: the rename into place fails, after the bytes were
    // written to the temporary file (as a full disk fails a write or sync).
    std::fs::create_dir_all(dir.path().join("packs/p1/x")).unwrap();
    assert!(blobs.put("packs/p1", b"bytes").is_err());
    let names: Vec<_> = std::fs::read_dir(dir.path().join("packs"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["p1"], "only the directory in the way is left");
}

#[test]
#[allow(clippy::disallowed_methods)] // reason: file times are set against the wall clock
fn the_sweep_removes_stale_temporaries_and_leaves_young_ones_and_objects() {
    use std::time::{Duration, SystemTime};
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("team-a");
    let blobs = LocalBlobs::new(&home);
    blobs.put("packs/p1", b"pack").unwrap();
    blobs.put("key", b"key").unwrap();
    let aged = |path: &std::path::Path, ago: Duration| {
        let f = std::fs::File::create(path).unwrap();
        f.set_modified(SystemTime::now() - ago).unwrap();
    };
    let hours = |n: u64| Duration::from_secs(3600 * n);
    // What a control plane killed mid-write leaves: in a store's subdirectory and at its top.
    aged(&home.join("packs/.tmp-0123456789abcdef"), hours(2));
    aged(&home.join(".tmp-fedcba9876543210"), hours(5));
    // A write in progress, and old files that are not temporaries.
    aged(&home.join("packs/.tmp-00000000000000ff"), Duration::ZERO);
    aged(&home.join("packs/.ballast"), hours(2));
    aged(&home.join("index-old"), hours(2));
    let swept = sweep_temporaries(dir.path(), SystemTime::now() - STALE_TEMPORARY_AGE);
    assert_eq!(
        swept,
        TemporarySweep {
            removed: 2,
            young: 1,
            failed: 0
        }
    );
    let mut left: Vec<String> = std::fs::read_dir(home.join("packs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, [".ballast", ".tmp-00000000000000ff", "p1"]);
    assert!(!home.join(".tmp-fedcba9876543210").exists());
    assert_eq!(blobs.get("packs/p1").unwrap(), b"pack");
    assert_eq!(blobs.get("key").unwrap(), b"key");
    assert!(home.join("index-old").exists());
    // A root that does not exist yet is an empty one.
    let none = sweep_temporaries(&dir.path().join("missing"), SystemTime::now());
    assert_eq!(none, TemporarySweep::default());
}
