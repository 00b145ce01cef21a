//! The incremental checkpoints' archive reader (homes/src/cas/archive.rs, `Repo::ingest`): a
//! guest's archive stream turned into a repository revision, every byte passed through the
//! archive check, entries required in the writer's order.
//!
//! Input: the archive. The repository lives in memory (a `BlobStore` of this target's own).
//! Asserts, for any input:
//! - it never panics; memory stays bounded (libFuzzer's -rss_limit_mb);
//! - it never stores an archive the check refuses, and a refused archive writes no revision;
//! - an archive it stores comes back out of the revision byte for byte, and the size it
//!   announces before writing is the size it writes.
#![no_main]

use homes::archive::{ArchiveParser, Limits};
use homes::cas::{BlobStore, CasError, CasKeys, Cause, Repo};
use homes::seal::DataKey;
use libfuzzer_sys::fuzz_target;
use std::collections::HashMap;
use std::sync::Mutex;

const LIMITS: Limits = Limits {
    max_entries: 256,
    max_bytes: 1 << 20,
};

#[derive(Default)]
struct MemBlobs(Mutex<HashMap<String, Vec<u8>>>);

impl BlobStore for MemBlobs {
    fn put(&self, name: &str, bytes: &[u8]) -> Result<(), CasError> {
        self.0.lock().unwrap().insert(name.into(), bytes.to_vec());
        Ok(())
    }

    fn get(&self, name: &str) -> Result<Vec<u8>, CasError> {
        self.0.lock().unwrap().get(name).cloned().ok_or_else(|| {
            CasError::Io(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                name.to_string(),
            ))
        })
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, CasError> {
        let m = self.0.lock().unwrap();
        Ok(m.keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect())
    }

    fn delete(&self, name: &str) -> Result<(), CasError> {
        self.0.lock().unwrap().remove(name);
        Ok(())
    }

    fn written(&self) -> u64 {
        0
    }
}

fn checked(archive: &[u8]) -> bool {
    let mut p = ArchiveParser::new(LIMITS);
    p.feed(archive).and_then(|()| p.finish()).is_ok()
}

fuzz_target!(|archive: &[u8]| {
    let keys = CasKeys::derive(&DataKey::from_bytes([7; 32]));
    let mut repo = Repo::open(MemBlobs::default(), keys).expect("open an empty repository");
    match repo.ingest(archive, LIMITS, Cause::Manual, 1, 1) {
        Ok(info) => {
            assert!(checked(archive), "stored an archive the check refuses");
            let size = repo
                .archive_size(info.revision)
                .expect("the revision's size");
            let mut out = Vec::new();
            let written = repo
                .write_archive(info.revision, &mut out)
                .expect("write it out");
            assert_eq!(size, written, "announced one size, wrote another");
            assert_eq!(out, archive, "the revision does not give the archive back");
        }
        Err(_) => {
            assert!(
                repo.latest().expect("list revisions").is_none(),
                "a refused archive wrote a revision"
            );
        }
    }
});
