//! Homes in the control plane (docs/homes.md): the [`HomeService`] that picks the store from
//! configuration (local under the data dir, or an S3 bucket sealed with the space's content key)
//! and the flows that move a home between a guest and the store ([`flow`]: checkpoint, restore,
//! the triggers' rules), plus browsing a stored home without a guest ([`browse`]).
//!
//! The archive format, sealing and the stores themselves are the `homes` crate's; deciding
//! *when* to checkpoint is [`crate::core`]'s, which calls into [`flow`]. The object store's
//! revision ledger lives on the computer row ([`ledger`], migration 0003).

pub mod browse;
pub mod config;
pub mod flow;
pub mod ledger;
pub mod progress;

pub use config::{HomeArgs, HomeStoreConfig, StoreConfig};
pub use ledger::HomeLedger;
pub use progress::{Progress, ProgressReport};

use crate::computers::{Computer, ComputerId};
use crate::db::{Db, DbError};
use homes::store::ReconcileStats;
use homes::{Checkpoint, HomeKey, HomeStore, HomeStoreError, LocalHomeStore, ObjectHomeStore};
use homes::{KeyError, Revision};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio::io::AsyncRead;

/// Errors of the home flows; the API maps each to a status.
#[derive(Debug, thiserror::Error)]
pub enum HomeError {
    #[error("home key {0:?} of a computer is not a valid store key")]
    BadKey(String, #[source] KeyError),
    #[error("home store failed")]
    Store(#[from] HomeStoreError),
    #[error("home bookkeeping failed")]
    Db(#[from] DbError),
    #[error(
        "computer {0} has not imported its stored home yet; run `rakazo home restore {0}` \
         before checkpointing (a checkpoint now would replace the stored home with an empty one)"
    )]
    PendingRestore(ComputerId),
    #[error("checkpoint of computer {id} waited for the leases of bots {bots:?}; try again later")]
    LeasesHeld { id: ComputerId, bots: Vec<String> },
    #[error("computer {0} has no stored home")]
    NoHome(String),
    #[error("stored home of {key} changed from revision {before} to {after} during the restore")]
    Changed {
        key: String,
        before: Revision,
        after: Revision,
    },
    #[error("path {0:?} is not in the stored home")]
    NoSuchPath(String),
    #[error("stored home archive is invalid")]
    Archive(#[source] homes::archive::ArchiveError),
    #[error("reading the stored home failed")]
    Read(#[source] std::io::Error),
    #[error("home {0} still belongs to live computer {1}; destroy it first")]
    InUse(String, ComputerId),
    #[error(
        "home of computer {id} is over its quota: {what}; the checkpoint was refused and the \
         previous one stays current (delete files, or raise --home-quota-bytes / \
         --home-quota-entries)"
    )]
    Quota { id: ComputerId, what: String },
    #[error(
        "computer {id} has leases of {count} bots, more than a home checkpoint or restore can name \
         to its guest ({max})"
    )]
    TooManyLeases {
        id: ComputerId,
        count: usize,
        max: usize,
    },
}

/// Which store, behind one type.
enum Backend {
    Local(LocalHomeStore),
    Object(ObjectHomeStore<HomeLedger>),
}

/// The configured home store and the bookkeeping around it.
pub struct HomeService {
    backend: Backend,
    ledger: HomeLedger,
    /// One checkpoint or restore at a time per computer.
    busy: Mutex<HashMap<ComputerId, Arc<tokio::sync::Mutex<()>>>>,
    /// Per-home quota, checked on every checkpoint.
    quota: homes::archive::Limits,
    /// Claims across replicas (`None`: one process, whose locks are enough).
    claims: Option<crate::claims::Claims>,
}

/// A computer's checkpoint-or-restore lock: this process's, and the cluster's claim.
pub(crate) struct HomeLock {
    _claim: Option<crate::claims::Held>,
    _local: tokio::sync::OwnedMutexGuard<()>,
}

impl HomeService {
    /// The store `cfg` names: local homes live under `data_dir/homes` and
    /// `data_dir/home-revisions`.
    pub fn new(cfg: &HomeStoreConfig, data_dir: &Path, db: Db) -> Self {
        let ledger = HomeLedger::new(db);
        let backend = match &cfg.store {
            StoreConfig::Local => {
                Backend::Local(LocalHomeStore::new(data_dir).with_limits(cfg.quota))
            }
            StoreConfig::Object { s3, content_key } => Backend::Object(ObjectHomeStore::new(
                s3,
                content_key.clone(),
                ledger.clone(),
            )),
        };
        Self {
            backend,
            ledger,
            busy: Mutex::new(HashMap::new()),
            quota: cfg.quota,
            claims: None,
        }
    }

    /// The per-home quota.
    pub fn quota(&self) -> homes::archive::Limits {
        self.quota
    }

    /// `local` or `object`.
    pub fn kind(&self) -> &'static str {
        match self.backend {
            Backend::Local(_) => "local",
            Backend::Object(_) => "object",
        }
    }

    pub fn ledger(&self) -> &HomeLedger {
        &self.ledger
    }

    /// The object store, if that is the configured one (tests and tools inspect its bucket).
    pub fn object_store(&self) -> Option<&ObjectHomeStore<HomeLedger>> {
        match &self.backend {
            Backend::Object(s) => Some(s),
            Backend::Local(_) => None,
        }
    }

    /// Serializes checkpoints and restores of one computer: in this process, and, with a
    /// claim store (several replicas), across replicas through the `home` claim, waited for
    /// while another replica holds it (a dead holder's expires).
    pub(crate) async fn lock(&self, id: &ComputerId) -> Result<HomeLock, HomeError> {
        let m = {
            let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
            busy.entry(id.clone()).or_default().clone()
        };
        let local = m.lock_owned().await;
        let claim = match &self.claims {
            Some(claims) => Some(
                claims
                    .wait("home", id.as_str())
                    .await
                    .map_err(HomeError::Db)?,
            ),
            None => None,
        };
        Ok(HomeLock {
            _claim: claim,
            _local: local,
        })
    }

    /// Checkpoints and restores also claim their home in the database (several replicas).
    pub fn with_claims(mut self, claims: crate::claims::Claims) -> Self {
        self.claims = Some(claims);
        self
    }

    /// The store key of `c`'s home, assigning (or adopting) a storage id for the object store.
    pub async fn key_for(&self, c: &Computer) -> Result<HomeKey, HomeError> {
        match self.backend {
            Backend::Local(_) => HomeKey::new(c.home_key.clone())
                .map_err(|e| HomeError::BadKey(c.home_key.clone(), e)),
            Backend::Object(_) => Ok(self.ledger.storage_id(c).await?),
        }
    }

    /// The store key of a computer's home without assigning anything: `None` when the object
    /// store has no storage id for it.
    pub async fn existing_key(&self, c: &Computer) -> Result<Option<HomeKey>, HomeError> {
        match self.backend {
            Backend::Local(_) => self.key_for(c).await.map(Some),
            Backend::Object(_) => Ok(self.ledger.current_storage_id(&c.id).await?),
        }
    }

    pub async fn commit<R>(&self, key: &HomeKey, archive: R) -> Result<Revision, HomeError>
    where
        R: AsyncRead + Send + Unpin + 'static,
    {
        Ok(match &self.backend {
            Backend::Local(s) => s.commit(key, archive).await?,
            Backend::Object(s) => s.commit(key, archive).await?,
        })
    }

    pub async fn open_latest(&self, key: &HomeKey) -> Result<Option<Checkpoint>, HomeError> {
        Ok(match &self.backend {
            Backend::Local(s) => s.open_latest(key).await?,
            Backend::Object(s) => s.open_latest(key).await?,
        })
    }

    pub async fn current_revision(&self, key: &HomeKey) -> Result<Option<Revision>, HomeError> {
        Ok(match &self.backend {
            Backend::Local(s) => s.current_revision(key).await?,
            Backend::Object(s) => s.current_revision(key).await?,
        })
    }

    /// Forgets and deletes every checkpoint of the home.
    pub async fn purge(&self, key: &HomeKey) -> Result<(), HomeError> {
        match &self.backend {
            Backend::Local(s) => s.delete(key).await?,
            Backend::Object(s) => s.delete(key).await?,
        }
        Ok(())
    }

    /// Deletes checkpoint objects no computer row owns (object store only; `None` for local).
    /// Run it where the commits run: this process, at start-up and on request.
    pub async fn reconcile(&self) -> Result<Option<ReconcileStats>, HomeError> {
        match &self.backend {
            Backend::Local(_) => Ok(None),
            Backend::Object(s) => {
                let owned = self.ledger.owned().await?;
                Ok(Some(s.reconcile(&owned).await?))
            }
        }
    }
}

/// An error and its sources on one line, for logs and API messages.
pub use homes::error_chain as chain;
