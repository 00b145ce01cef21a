//! Per-home locks: commits (and recovery, and deletion) of one home take its write lock, open
//! checkpoint streams hold its read lock. Homes never wait for each other.

use crate::HomeKey;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedRwLockWriteGuard, RwLock};

/// One lock per home key, created on first use. Entries are never removed: one small lock per
/// home the process has touched.
#[derive(Default)]
pub(crate) struct KeyLocks {
    locks: Mutex<HashMap<HomeKey, Arc<RwLock<()>>>>,
}

impl KeyLocks {
    fn get(&self, home: &HomeKey) -> Arc<RwLock<()>> {
        // A poisoned map only means another thread panicked while inserting; the map itself is
        // still consistent.
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.entry(home.clone()).or_default().clone()
    }

    pub(crate) async fn write(&self, home: &HomeKey) -> OwnedRwLockWriteGuard<()> {
        self.get(home).write_owned().await
    }

    #[cfg(feature = "object")]
    pub(crate) async fn read(&self, home: &HomeKey) -> tokio::sync::OwnedRwLockReadGuard<()> {
        self.get(home).read_owned().await
    }
}
