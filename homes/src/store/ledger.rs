//! The revision ledger: where the object store records each home's current revision and wrapped
//! data key. The control plane implements it on the computer row; [`MemRevisionLedger`] keeps it
//! in memory for tests.
//!
//! The ledger, not the bucket, says which object is a home's checkpoint: an object is live only
//! once the ledger has advanced to it, which is what makes an upload that crashed half-way (or
//! finished but was never recorded) an orphan for the reconciler rather than a new revision.
//!
//! The ledger also records every multipart upload a commit has started and not yet completed or
//! aborted ([`PendingUpload`]). A commit killed mid-upload leaves its parts in the bucket, where
//! no object listing shows them and not every S3-compatible server can list uploads; the record
//! is how the reconciler finds and aborts them.

use super::keys::parse_object_key;
use crate::seal::WrappedKey;
use crate::{HomeKey, Revision};
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::future::Future;
use std::sync::Mutex;

/// What the ledger holds for one home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    /// The current revision; `None` before the first checkpoint.
    pub revision: Option<Revision>,
    /// The home's data key, wrapped under the content key for this home's storage id.
    pub wrapped_key: WrappedKey,
}

/// Longest multipart upload id accepted from S3, in bytes. AWS documents no limit; its ids are a
/// few hundred characters and s3s-fs's are UUIDs.
pub const MAX_UPLOAD_ID_LEN: usize = 1024;

/// A multipart upload id as S3 returned it: not a secret, but untrusted, so bounded to
/// 1..=[`MAX_UPLOAD_ID_LEN`] printable ASCII characters (no spaces or controls) before it is
/// stored or logged.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UploadId(String);

impl UploadId {
    pub fn new(s: impl Into<String>) -> Result<Self, BadUpload> {
        let s = s.into();
        let ok = !s.is_empty()
            && s.len() <= MAX_UPLOAD_ID_LEN
            && s.bytes().all(|b| b.is_ascii_graphic());
        if ok {
            Ok(Self(s))
        } else {
            // Only the length: the value may be huge or full of control characters.
            Err(BadUpload::UploadId { len: s.len() })
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for UploadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for UploadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// A multipart upload a commit started: the home, the object it would create (always
/// `homes/<home>/<revision>` of that home) and S3's upload id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PendingUpload {
    home: HomeKey,
    object: String,
    upload_id: UploadId,
}

impl PendingUpload {
    /// Fails unless `object` is a checkpoint name of `home` (what a store could have written).
    pub fn new(
        home: HomeKey,
        object: impl Into<String>,
        upload_id: UploadId,
    ) -> Result<Self, BadUpload> {
        let object = object.into();
        match parse_object_key(&object) {
            Some((h, _)) if h == home => Ok(Self {
                home,
                object,
                upload_id,
            }),
            _ => Err(BadUpload::Object {
                home,
                object: object.chars().take(200).collect(),
            }),
        }
    }

    pub fn home(&self) -> &HomeKey {
        &self.home
    }

    pub fn object(&self) -> &str {
        &self.object
    }

    pub fn upload_id(&self) -> &UploadId {
        &self.upload_id
    }
}

/// A [`PendingUpload`] or [`UploadId`] that fails validation.
#[derive(Debug, thiserror::Error)]
pub enum BadUpload {
    #[error("multipart upload id of {len} bytes is not 1..={MAX_UPLOAD_ID_LEN} printable ascii characters")]
    UploadId { len: usize },
    #[error("object {object:?} is not a checkpoint of home {home}")]
    Object { home: HomeKey, object: String },
}

/// Errors of a ledger.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("home {home} is at revision {found:?}, not {expected:?}: another commit won")]
    Conflict {
        home: HomeKey,
        expected: Option<Revision>,
        found: Option<Revision>,
    },
    /// The outcome is unknown (the database may or may not have applied the change).
    #[error("revision ledger backend failed")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Records each home's current revision and wrapped data key. Implementations must make
/// [`advance`](Self::advance) a compare-and-set.
pub trait RevisionLedger: Send + Sync {
    /// The home's entry, or `None` if the ledger has none.
    fn load(
        &self,
        home: &HomeKey,
    ) -> impl Future<Output = Result<Option<LedgerEntry>, LedgerError>> + Send;

    /// Stores `next` if the home's current revision is still `expected` (`None`: no entry or no
    /// revision yet), else fails with [`LedgerError::Conflict`].
    fn advance(
        &self,
        home: &HomeKey,
        expected: Option<Revision>,
        next: &LedgerEntry,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send;

    /// Forgets the home's revision and key, which makes its objects unreadable and unowned.
    /// Idempotent. Recorded uploads of the home stay recorded: they still need aborting.
    fn forget(&self, home: &HomeKey) -> impl Future<Output = Result<(), LedgerError>> + Send;

    /// Records a multipart upload before its first part is sent, so that an upload whose commit
    /// never finishes (the process was killed) can still be found and aborted. Idempotent.
    fn record_upload(
        &self,
        upload: &PendingUpload,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send;

    /// Forgets a recorded upload once it is completed or aborted. Idempotent.
    fn clear_upload(
        &self,
        upload: &PendingUpload,
    ) -> impl Future<Output = Result<(), LedgerError>> + Send;

    /// Every recorded upload, in a stable order.
    fn pending_uploads(
        &self,
    ) -> impl Future<Output = Result<Vec<PendingUpload>, LedgerError>> + Send;

    /// Whether a commit or restore of `home` may be running in another process (a replica
    /// holds the home's claim): the reconciler leaves such a home's uploads and objects alone,
    /// since this process's locks do not cover them. A ledger used by one process only: never.
    fn busy_elsewhere(
        &self,
        home: &HomeKey,
    ) -> impl Future<Output = Result<bool, LedgerError>> + Send {
        let _ = home;
        async { Ok(false) }
    }
}

/// A ledger in memory, for tests and single-process tools.
#[derive(Debug, Default)]
pub struct MemRevisionLedger {
    entries: Mutex<HashMap<HomeKey, LedgerEntry>>,
    uploads: Mutex<BTreeSet<PendingUpload>>,
}

impl MemRevisionLedger {
    /// Every (home, revision) the ledger owns: what a reconciler keeps.
    pub fn owned(&self) -> std::collections::HashSet<(HomeKey, Revision)> {
        self.lock()
            .iter()
            .filter_map(|(h, e)| e.revision.map(|r| (h.clone(), r)))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<HomeKey, LedgerEntry>> {
        // The map stays consistent even if a holder panicked.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn uploads(&self) -> std::sync::MutexGuard<'_, BTreeSet<PendingUpload>> {
        // As for `lock`: every change is a single insert or remove.
        self.uploads.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl RevisionLedger for MemRevisionLedger {
    async fn load(&self, home: &HomeKey) -> Result<Option<LedgerEntry>, LedgerError> {
        Ok(self.lock().get(home).cloned())
    }

    async fn advance(
        &self,
        home: &HomeKey,
        expected: Option<Revision>,
        next: &LedgerEntry,
    ) -> Result<(), LedgerError> {
        let mut entries = self.lock();
        let found = entries.get(home).and_then(|e| e.revision);
        if found != expected {
            return Err(LedgerError::Conflict {
                home: home.clone(),
                expected,
                found,
            });
        }
        entries.insert(home.clone(), next.clone());
        Ok(())
    }

    async fn forget(&self, home: &HomeKey) -> Result<(), LedgerError> {
        self.lock().remove(home);
        Ok(())
    }

    async fn record_upload(&self, upload: &PendingUpload) -> Result<(), LedgerError> {
        self.uploads().insert(upload.clone());
        Ok(())
    }

    async fn clear_upload(&self, upload: &PendingUpload) -> Result<(), LedgerError> {
        self.uploads().remove(upload);
        Ok(())
    }

    async fn pending_uploads(&self) -> Result<Vec<PendingUpload>, LedgerError> {
        Ok(self.uploads().iter().cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_ids_are_bounded_printable_ascii() {
        assert!(UploadId::new("2~abc.DEF_-123").is_ok());
        assert!(UploadId::new("x".repeat(MAX_UPLOAD_ID_LEN)).is_ok());
        for bad in [
            String::new(),
            "x".repeat(MAX_UPLOAD_ID_LEN + 1),
            "a b".into(),
            "a\nb".into(),
            "caf\u{e9}".into(),
        ] {
            let err = UploadId::new(bad.clone()).unwrap_err();
            assert!(!err.to_string().contains(&bad) || bad.is_empty(), "{err}");
        }
    }

    #[test]
    fn a_pending_upload_names_a_checkpoint_of_its_home() {
        let home = HomeKey::new("h-1").unwrap();
        let id = UploadId::new("u1").unwrap();
        let up = PendingUpload::new(home.clone(), "homes/h-1/3", id.clone()).unwrap();
        assert_eq!((up.home(), up.object()), (&home, "homes/h-1/3"));
        for bad in ["homes/h-2/3", "homes/h-1/0", "homes/h-1", "other/h-1/3", ""] {
            assert!(
                PendingUpload::new(home.clone(), bad, id.clone()).is_err(),
                "{bad}"
            );
        }
    }
}
