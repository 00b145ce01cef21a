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
