//! The home archive readers (homes/src/archive): the streaming format check
//! ([`ArchiveParser`], which the object store runs over every checkpoint it keeps) and the
//! restoring reader ([`unpack_new`], which writes a home from an untrusted archive).
//!
//! Input: one control byte (bit 0: a delta archive; the rest seeds how the stream is split),
//! then the archive. Asserts, for any input:
//! - neither reader panics; memory stays bounded (libFuzzer's -rss_limit_mb);
//! - the check gives the same verdict on the stream whole and split anywhere;
//! - the restoring reader never accepts what the check refuses, and refuses what the check
//!   accepts only for what needs the tree (a missing parent, a duplicate);
//! - a refused archive leaves nothing behind; an accepted one restores exactly the directories,
//!   files and bytes it declared, nothing else (no symlink, no entry outside the target), and
//!   packing the restored tree again gives an archive the check accepts.
#![no_main]

use homes::archive::{pack, unpack_new, ArchiveError, ArchiveParser, Limits, UnpackOptions};
use libfuzzer_sys::fuzz_target;
use rakazo_fuzz::pieces;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

const LIMITS: Limits = Limits {
    max_entries: 256,
    max_bytes: 1 << 20,
};

fn check(delta: bool, parts: &[&[u8]]) -> Result<(), ArchiveError> {
    let mut p = if delta {
        ArchiveParser::delta(LIMITS)
    } else {
        ArchiveParser::new(LIMITS)
    };
    for part in parts {
        p.feed(part)?;
    }
    p.finish()
}

/// A fresh path under this process's scratch directory ($TMPDIR).
fn scratch() -> PathBuf {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    static N: AtomicU64 = AtomicU64::new(0);
    let base = BASE.get_or_init(|| {
        let b = std::env::temp_dir().join(format!("rakazo-fuzz-archive-{}", std::process::id()));
        std::fs::create_dir_all(&b).expect("create the scratch directory");
        b
    });
    base.join(N.fetch_add(1, Ordering::Relaxed).to_string())
}

/// Directories, files and bytes under `dir`; panics on anything else.
fn walk(dir: &Path, counts: &mut (u64, u64, u64)) {
    for e in std::fs::read_dir(dir).expect("read a restored directory") {
        let e = e.expect("a directory entry");
        let t = e.file_type().expect("its type");
        if t.is_dir() {
            counts.0 += 1;
            walk(&e.path(), counts);
        } else if t.is_file() {
            counts.1 += 1;
            counts.2 += e.metadata().expect("its metadata").len();
        } else {
            panic!(
                "the reader restored {:?}, neither a directory nor a file",
                e.path()
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctrl, archive)) = data.split_first() else {
        return;
    };
    let delta = ctrl & 1 == 1;
    let whole = check(delta, &[archive]);
    let split = check(delta, &pieces(ctrl >> 1, archive));
    assert_eq!(
        whole.as_ref().map_err(ToString::to_string),
        split.as_ref().map_err(ToString::to_string),
        "the check's verdict depends on how the stream is split"
    );
    if delta {
        return;
    }

    let dir = scratch();
    let opts = UnpackOptions {
        limits: LIMITS,
        sync: false,
    };
    match unpack_new(archive, &dir, &opts) {
        Ok(stats) => {
            assert!(
                whole.is_ok(),
                "the reader restored an archive the check refuses: {:?}",
                whole
            );
            let mut counts = (0, 0, 0);
            walk(&dir, &mut counts);
            assert_eq!(counts, (stats.dirs, stats.files, stats.bytes));
            let mut again = Vec::new();
            pack(&dir, &mut again).expect("pack a restored tree");
            if let Err(e) = check(false, &[&again]) {
                panic!("the check refuses the packed restored tree: {e}");
            }
            std::fs::remove_dir_all(&dir).expect("remove the restored tree");
        }
        Err(e) => {
            assert!(!dir.exists(), "a refused archive left {dir:?} behind ({e})");
            if whole.is_ok() {
                assert!(
                    matches!(
                        e,
                        ArchiveError::MissingParent { .. } | ArchiveError::Duplicate { .. }
                    ),
                    "the reader refuses an archive the check accepts: {e}"
                );
            }
        }
    }
});
