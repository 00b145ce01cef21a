//! The revision ledger: where the object store records each home's current revision and wrapped
//! data key. The control plane implements it on the computer row; [`MemRevisionLedger`] keeps it
//! in memory for tests.
//!
//! The ledger, not the bucket, says which object is a home's checkpoint: an object is live only
//! once the ledger has advanced to it, which is what makes an upload that crashed half-way (or
//! finished but was never recorded) an orphan for the reconciler rather than a new revision.

use crate::seal::WrappedKey;
use crate::{HomeKey, Revision};
use std::collections::HashMap;
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
    /// Idempotent.
    fn forget(&self, home: &HomeKey) -> impl Future<Output = Result<(), LedgerError>> + Send;
}

/// A ledger in memory, for tests and single-process tools.
#[derive(Debug, Default)]
pub struct MemRevisionLedger {
    entries: Mutex<HashMap<HomeKey, LedgerEntry>>,
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
}
