//! Home checkpoints: the archive format a home travels in, the sealed (encrypted) form it is
//! stored in, and the stores that keep the latest revision of each home (docs/homes.md).
//!
//! - [`archive`]: a streaming archive of directories and regular files (`FORMAT.md`). The writer
//!   walks a home without following symlinks and applies the browser-profile skip list; the
//!   reader treats every archive as hostile and writes nothing unless the whole archive is good.
//! - [`seal`]: 64 KiB AES-256-GCM segments bound to a home's storage id and revision, and the
//!   wrapping of each home's data key under the content key.
//! - [`store`]: the [`HomeStore`] trait and its backends, [`LocalHomeStore`] (a directory tree
//!   per home under the data dir) and, with the `object` feature, `ObjectHomeStore` (an
//!   S3-compatible bucket).
//!
//! This crate does not decide *when* to checkpoint, talk to guests, or read configuration or the
//! environment: the control plane and the guest do, and hand it paths, streams and keys.

#![forbid(unsafe_code)]

pub mod archive;
pub mod cas;
pub mod seal;
pub mod store;
pub mod testing;

#[cfg(feature = "object")]
pub use store::{CasHomeStore, CasPlace, HomeRepo};
pub use store::{Checkpoint, HomeStore, HomeStoreError, LocalHomeStore};
#[cfg(feature = "object")]
pub use store::{
    LedgerEntry, LedgerError, MemRevisionLedger, ObjectHomeStore, ObjectStoreConfig, RevisionLedger,
};

use std::fmt;

/// An error and its sources on one line (`a: b: c`), as logs and API messages show it.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

/// Whether `e` or one of its sources is a file system out of space: `ENOSPC` (no space left
/// on device) or `EDQUOT` (a disk quota). Such a failure is the disk's, not the data's: callers
/// say so instead of calling the input bad.
pub fn out_of_space(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
            ) {
                return true;
            }
            // An error wrapped in an I/O error (a stream's) shows its own sources only.
            if io.get_ref().is_some_and(|inner| out_of_space(inner)) {
                return true;
            }
        }
        next = err.source();
    }
    false
}

/// Longest home key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 128;

/// Errors of the key and revision types.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("home key {0:?} must be 1..={MAX_KEY_LEN} characters of [A-Za-z0-9._-], not . or ..")]
    BadKey(String),
    #[error("revision {0:?} is not a positive integer")]
    BadRevision(String),
}

/// The name a store keeps one home under: the home key (`team-<workspace>` or a bot id) for the
/// local store, the home's storage id for the object store. It ends up in file names and object
/// keys, so it is restricted like the control plane's ids.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HomeKey(String);

impl HomeKey {
    pub fn new(s: impl Into<String>) -> Result<Self, KeyError> {
        let s = s.into();
        let ok = !s.is_empty()
            && s.len() <= MAX_KEY_LEN
            && s != "."
            && s != ".."
            && s.bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
        if ok {
            Ok(Self(s))
        } else {
            Err(KeyError::BadKey(s))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HomeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for HomeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HomeKey({})", self.0)
    }
}

/// A checkpoint's revision. The first checkpoint of a home is revision 1 and each commit adds
/// one, so "no checkpoint yet" is `Option::<Revision>::None`, never revision 0.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Revision(u64);

impl Revision {
    /// The first revision of a home.
    pub const FIRST: Revision = Revision(1);

    /// `None` for 0, which is not a revision.
    pub fn new(n: u64) -> Option<Self> {
        (n > 0).then_some(Self(n))
    }

    pub fn get(self) -> u64 {
        self.0
    }

    /// The revision after `current`, or the first one.
    pub fn after(current: Option<Revision>) -> Revision {
        match current {
            Some(r) => Revision(r.0.saturating_add(1)),
            None => Self::FIRST,
        }
    }

    /// Parses the decimal form written by `Display` (object names, revision markers).
    pub fn parse(s: &str) -> Result<Self, KeyError> {
        let bad = || KeyError::BadRevision(s.chars().take(40).collect());
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse::<u64>().ok().and_then(Self::new).ok_or_else(bad)
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_restricted() {
        for ok in ["team-w1", "bot_1.a", "A"] {
            assert!(HomeKey::new(ok).is_ok(), "{ok}");
        }
        let long = "a".repeat(MAX_KEY_LEN + 1);
        for bad in ["", ".", "..", "a/b", "a b", "é", long.as_str()] {
            assert!(HomeKey::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn revisions_parse_strictly() {
        assert_eq!(Revision::parse("12").unwrap().get(), 12);
        for bad in ["", "0", "-1", "+1", "1 ", "99999999999999999999999"] {
            assert!(Revision::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Revision::after(None), Revision::FIRST);
        assert_eq!(Revision::after(Some(Revision::FIRST)).get(), 2);
    }

    #[test]
    fn out_of_space_is_found_anywhere_in_the_chain() {
        let enospc = || std::io::Error::from_raw_os_error(28);
        let wrapped = cas::CasError::Path {
            path: "p".into(),
            source: enospc(),
        };
        assert!(out_of_space(&wrapped));
        assert!(out_of_space(&std::io::Error::other(wrapped)));
        assert!(out_of_space(&std::io::Error::from_raw_os_error(122))); // EDQUOT
        let other = cas::CasError::Path {
            path: "p".into(),
            source: std::io::Error::from_raw_os_error(5), // EIO
        };
        assert!(!out_of_space(&other));
    }
}
