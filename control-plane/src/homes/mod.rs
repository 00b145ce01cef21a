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

pub use config::{HomeArgs, HomeFormat, HomeStoreConfig, StoreConfig};
pub use ledger::HomeLedger;
pub use progress::{Progress, ProgressReport};

use crate::computers::{Computer, ComputerId};
use crate::db::{Db, DbError};
use homes::cas::{Cause, Keep, RevisionInfo};
use homes::store::ReconcileStats;
use homes::{CasHomeStore, CasPlace, HomeRepo};
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
    #[error("the stored home has no revision {0}; `rakazo home revisions` lists them")]
    NoRevision(u64),
    #[error(
        "this control plane keeps homes as whole archives (--home-format archive), which have \
         no history; revisions need --home-format incremental"
    )]
    NotIncremental,
    #[error(
        "the home {0} already has checkpoints; fork into a workspace or private bot with no \
         stored home (or purge it first)"
    )]
    Exists(String),
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
    /// Incremental revisions, in front of the archive store of the same place.
    CasLocal(CasHomeStore<LocalHomeStore>),
    CasObject(CasHomeStore<ObjectHomeStore<HomeLedger>>),
}

/// `$e` with `$s` bound to whichever store is configured.
macro_rules! each {
    ($self:expr, $s:ident => $e:expr) => {
        match &$self.backend {
            Backend::Local($s) => $e,
            Backend::Object($s) => $e,
            Backend::CasLocal($s) => $e,
            Backend::CasObject($s) => $e,
        }
    };
}

/// `$e` with `$s` bound to the incremental store, or [`HomeError::NotIncremental`].
macro_rules! cas {
    ($self:expr, $s:ident => $e:expr) => {
        match &$self.backend {
            Backend::CasLocal($s) => $e,
            Backend::CasObject($s) => $e,
            Backend::Local(_) | Backend::Object(_) => return Err(HomeError::NotIncremental),
        }
    };
}

/// The local incremental store's content key: `<data dir>/home-content.key`, 32 random bytes
/// made on first start, readable by its owner only.
fn local_content_key(data_dir: &Path) -> anyhow::Result<homes::seal::ContentKey> {
    use anyhow::Context;
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let path = data_dir.join("home-content.key");
    match std::fs::read(&path) {
        Ok(bytes) => {
            let mode = std::fs::metadata(&path)?.permissions().mode();
            anyhow::ensure!(
                mode & 0o077 == 0,
                "{} must be readable by its owner only (chmod 600)",
                path.display()
            );
            let key: [u8; 32] = bytes
                .try_into()
                .map_err(|_| anyhow::anyhow!("{} is not a 32-byte key", path.display()))?;
            Ok(homes::seal::ContentKey::from_bytes(key))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(data_dir)
                .with_context(|| format!("creating {}", data_dir.display()))?;
            let key = homes::seal::ContentKey::generate();
            let tmp = data_dir.join(".home-content.key.tmp");
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .with_context(|| format!("creating {}", tmp.display()))?;
            f.write_all(key.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            Ok(key)
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
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
    /// Which revisions of a home are kept (incremental format).
    keep: Keep,
    /// Homes whose last commit in this process failed (incremental format): it may have left
    /// packs no index names, which the next commit that succeeds collects.
    unclean: Mutex<std::collections::HashSet<HomeKey>>,
    /// Screen recordings, kept beside the homes (docs/recordings.md).
    recordings: Arc<homes::cas::RecordingBlobs>,
    /// The local directories of stores whose stale temporary files the reconciler removes
    /// (`home-cas` and `recordings` under the data dir; none for the object store).
    local_roots: Vec<std::path::PathBuf>,
    /// When this service was made, after the data dir was locked for this process: a temporary
    /// file last written before then is no write of this process, nor of any other.
    started: std::time::SystemTime,
}

/// What [`HomeService::reconcile`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reconciled {
    /// The object store's orphans and uploads.
    Object(ReconcileStats),
    /// The local store's temporary files left by a killed process.
    Local(homes::cas::TemporarySweep),
}

/// A computer's checkpoint-or-restore lock: this process's, and the cluster's claim.
pub(crate) struct HomeLock {
    _claim: Option<crate::claims::Held>,
    _local: tokio::sync::OwnedMutexGuard<()>,
}

impl HomeService {
    /// The store `cfg` names: local homes live under `data_dir/home-cas` (incremental), with
    /// the archive format's `data_dir/homes` and `data_dir/home-revisions` read for homes
    /// checkpointed before.
    pub fn new(cfg: &HomeStoreConfig, data_dir: &Path, db: Db) -> anyhow::Result<Self> {
        let ledger = HomeLedger::new(db);
        let now: homes::store::Clock = Arc::new(crate::clock::now_ms);
        let recordings = Arc::new(match &cfg.store {
            StoreConfig::Local => homes::cas::RecordingBlobs::new(
                CasPlace::Local(data_dir.join("recordings")),
                local_content_key(data_dir)?,
            ),
            StoreConfig::Object { s3, content_key } => {
                homes::cas::RecordingBlobs::new(CasPlace::Object(s3.clone()), content_key.clone())
            }
        });
        let backend = match (&cfg.store, cfg.format) {
            (StoreConfig::Local, HomeFormat::Archive) => {
                Backend::Local(LocalHomeStore::new(data_dir).with_limits(cfg.quota))
            }
            (StoreConfig::Local, HomeFormat::Incremental) => Backend::CasLocal(
                CasHomeStore::new(
                    LocalHomeStore::new(data_dir).with_limits(cfg.quota),
                    CasPlace::Local(data_dir.join("home-cas")),
                    local_content_key(data_dir)?,
                    now,
                )
                .with_limits(cfg.quota),
            ),
            (StoreConfig::Object { s3, content_key }, HomeFormat::Archive) => Backend::Object(
                ObjectHomeStore::new(s3, content_key.clone(), ledger.clone()),
            ),
            (StoreConfig::Object { s3, content_key }, HomeFormat::Incremental) => {
                Backend::CasObject(
                    CasHomeStore::new(
                        ObjectHomeStore::new(s3, content_key.clone(), ledger.clone()),
                        CasPlace::Object(s3.clone()),
                        content_key.clone(),
                        now,
                    )
                    .with_limits(cfg.quota),
                )
            }
        };
        Ok(Self {
            backend,
            ledger,
            busy: Mutex::new(HashMap::new()),
            quota: cfg.quota,
            claims: None,
            keep: cfg.keep,
            unclean: Mutex::default(),
            recordings,
            local_roots: match &cfg.store {
                StoreConfig::Local => vec![data_dir.join("home-cas"), data_dir.join("recordings")],
                StoreConfig::Object { .. } => Vec::new(),
            },
            started: wall_clock(),
        })
    }

    /// Where screen recordings are kept: the same place as the homes, sealed the same way.
    pub fn recording_blobs(&self) -> Arc<homes::cas::RecordingBlobs> {
        self.recordings.clone()
    }

    /// `incremental` or `archive`.
    pub fn format(&self) -> &'static str {
        match self.backend {
            Backend::CasLocal(_) | Backend::CasObject(_) => "incremental",
            Backend::Local(_) | Backend::Object(_) => "archive",
        }
    }

    /// The per-home quota.
    pub fn quota(&self) -> homes::archive::Limits {
        self.quota
    }

    /// `local` or `object`.
    pub fn kind(&self) -> &'static str {
        match self.backend {
            Backend::Local(_) | Backend::CasLocal(_) => "local",
            Backend::Object(_) | Backend::CasObject(_) => "object",
        }
    }

    pub fn ledger(&self) -> &HomeLedger {
        &self.ledger
    }

    /// The object store, if that is the configured one (tests and tools inspect its bucket).
    pub fn object_store(&self) -> Option<&ObjectHomeStore<HomeLedger>> {
        match &self.backend {
            Backend::Object(s) => Some(s),
            Backend::CasObject(s) => Some(s.legacy()),
            Backend::Local(_) | Backend::CasLocal(_) => None,
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
            Backend::Local(_) | Backend::CasLocal(_) => HomeKey::new(c.home_key.clone())
                .map_err(|e| HomeError::BadKey(c.home_key.clone(), e)),
            Backend::Object(_) | Backend::CasObject(_) => Ok(self.ledger.storage_id(c).await?),
        }
    }

    /// The store key of a computer's home without assigning anything: `None` when the object
    /// store has no storage id for it.
    pub async fn existing_key(&self, c: &Computer) -> Result<Option<HomeKey>, HomeError> {
        match self.backend {
            Backend::Local(_) | Backend::CasLocal(_) => self.key_for(c).await.map(Some),
            Backend::Object(_) | Backend::CasObject(_) => {
                Ok(self.ledger.current_storage_id(&c.id).await?)
            }
        }
    }

    /// Stores the archive as the home's next revision, made for `cause`; then, in the
    /// incremental format, deletes the revisions retention no longer keeps and frees their
    /// space, and what an earlier failed commit left (a failure there is logged: the
    /// checkpoint itself has succeeded). The caller holds
    /// the home's lock ([`Self::lock`]), so no other checkpoint, restore or collection of it
    /// runs meanwhile, in this process or another replica.
    pub async fn commit<R>(
        &self,
        key: &HomeKey,
        archive: R,
        cause: Cause,
        export: Option<homes::store::Export>,
    ) -> Result<Revision, HomeError>
    where
        R: AsyncRead + Send + Unpin + 'static,
    {
        Ok(match &self.backend {
            Backend::Local(s) => s.commit(key, archive).await?,
            Backend::Object(s) => s.commit(key, archive).await?,
            Backend::CasLocal(s) => self.commit_cas(s, key, archive, cause, export).await?,
            Backend::CasObject(s) => self.commit_cas(s, key, archive, cause, export).await?,
        })
    }

    /// What the next export of the home may be a delta of: the latest revision and its export's
    /// token (`None` in the archive format, which stores whole archives only).
    pub async fn delta_base(&self, key: &HomeKey) -> Result<Option<(u64, [u8; 16])>, HomeError> {
        let latest = match &self.backend {
            Backend::Local(_) | Backend::Object(_) => return Ok(None),
            Backend::CasLocal(s) => s.latest_export(key).await?,
            Backend::CasObject(s) => s.latest_export(key).await?,
        };
        Ok(latest.and_then(|(rev, token)| {
            let mut t = [0u8; 16];
            hex::decode_to_slice(&token, &mut t).ok().map(|()| (rev, t))
        }))
    }

    fn unclean_set(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<HomeKey>> {
        self.unclean.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn commit_cas<L: HomeStore, R>(
        &self,
        s: &CasHomeStore<L>,
        key: &HomeKey,
        archive: R,
        cause: Cause,
        export: Option<homes::store::Export>,
    ) -> Result<Revision, HomeError>
    where
        R: AsyncRead + Send + Unpin + 'static,
    {
        let committed = s
            .commit_export(key, archive, cause, crate::clock::now_ms(), export)
            .await;
        if committed.is_err() {
            self.unclean_set().insert(key.clone());
        }
        let info = committed?;
        let unclean = self.unclean_set().remove(key);
        let revs = s.revisions(key).await?;
        if unclean || homes::cas::repo::kept(&revs, &self.keep).len() < revs.len() {
            match s.collect(key, self.keep).await {
                Ok(Some((gone, stats))) => tracing::info!(home = %key, forgotten = ?gone,
                    bytes_freed = stats.bytes_deleted, "old home revisions collected"),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(home = %key, error = %chain(&e),
                    "collecting old home revisions failed; they stay until the next checkpoint");
                    self.unclean_set().insert(key.clone());
                }
            }
        }
        Revision::new(info.revision).ok_or(HomeError::NoRevision(0))
    }

    pub async fn open_latest(&self, key: &HomeKey) -> Result<Option<Checkpoint>, HomeError> {
        Ok(each!(self, s => s.open_latest(key).await?))
    }

    pub async fn current_revision(&self, key: &HomeKey) -> Result<Option<Revision>, HomeError> {
        Ok(each!(self, s => s.current_revision(key).await?))
    }

    /// Forgets and deletes every checkpoint of the home.
    pub async fn purge(&self, key: &HomeKey) -> Result<(), HomeError> {
        each!(self, s => s.delete(key).await?);
        Ok(())
    }

    /// The home's revisions, oldest first.
    pub async fn revisions(&self, key: &HomeKey) -> Result<Vec<RevisionInfo>, HomeError> {
        Ok(cas!(self, s => s.revisions(key).await?))
    }

    /// Revision `n` as an archive.
    pub async fn open_revision(&self, key: &HomeKey, n: u64) -> Result<Checkpoint, HomeError> {
        cas!(self, s => s.open_revision(key, n).await?.ok_or(HomeError::NoRevision(n)))
    }

    /// Runs `f` on the home's repository (on the blocking pool); `None` if it has none.
    pub async fn read<T, F>(&self, key: &HomeKey, f: F) -> Result<Option<T>, HomeError>
    where
        T: Send + 'static,
        F: FnOnce(&HomeRepo) -> Result<T, homes::cas::CasError> + Send + 'static,
    {
        revision_known(cas!(self, s => s.read(key, f).await))
    }

    /// Makes revision `n` the home's next revision (a restore of an older revision).
    pub async fn recommit(
        &self,
        key: &HomeKey,
        n: u64,
        cause: Cause,
    ) -> Result<RevisionInfo, HomeError> {
        revision_known(cas!(self, s => s.recommit(key, n, cause, crate::clock::now_ms()).await))
    }

    /// Starts the home `to` (which has no checkpoint) from revision `n` (default: the latest
    /// checkpoint) of `from`, sharing its stored data; `None` when `from` has no checkpoint.
    pub async fn fork(
        &self,
        from: &HomeKey,
        n: Option<u64>,
        to: &HomeKey,
    ) -> Result<Option<RevisionInfo>, HomeError> {
        revision_known(
            cas!(self, s => s.fork(from, n, to, Cause::Fork, crate::clock::now_ms()).await),
        )
    }

    /// Object store: deletes checkpoint objects no computer row owns. Local store: removes the
    /// temporary files of writes a killed process never finished: those last written before
    /// this process started (the data dir's lock keeps every other process out, so this one
    /// alone writes there), or more than [`homes::cas::STALE_TEMPORARY_AGE`] ago; a younger one
    /// may be a write of this process in progress. Run it where the commits run: this process,
    /// at start-up and on request.
    pub async fn reconcile(&self) -> Result<Reconciled, HomeError> {
        let s = match &self.backend {
            Backend::Local(_) | Backend::CasLocal(_) => {
                let roots = self.local_roots.clone();
                let before = wall_clock()
                    .checked_sub(homes::cas::STALE_TEMPORARY_AGE)
                    .map_or(self.started, |t| t.max(self.started));
                let swept = tokio::task::spawn_blocking(move || {
                    let mut all = homes::cas::TemporarySweep::default();
                    for root in roots {
                        let s = homes::cas::sweep_temporaries(&root, before);
                        all.removed += s.removed;
                        all.young += s.young;
                        all.failed += s.failed;
                    }
                    all
                })
                .await
                .unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "sweeping stale temporary files ended abnormally");
                    homes::cas::TemporarySweep {
                        failed: 1,
                        ..Default::default()
                    }
                });
                return Ok(Reconciled::Local(swept));
            }
            Backend::Object(s) => s,
            Backend::CasObject(s) => s.legacy(),
        };
        let owned = self.ledger.owned().await?;
        Ok(Reconciled::Object(s.reconcile(&owned).await?))
    }
}

/// Now, from the clock module, as the file system's timestamps are compared with it.
fn wall_clock() -> std::time::SystemTime {
    let ms = u64::try_from(crate::clock::now_ms()).unwrap_or(0);
    std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)
}

/// A store's answer, with a revision it does not have as [`HomeError::NoRevision`].
fn revision_known<T>(r: Result<T, HomeStoreError>) -> Result<T, HomeError> {
    match r {
        Err(HomeStoreError::Cas {
            source: homes::cas::CasError::NoRevision(n),
            ..
        }) => Err(HomeError::NoRevision(n)),
        Err(HomeStoreError::Cas {
            source: homes::cas::CasError::Exists(home),
            ..
        }) => Err(HomeError::Exists(home)),
        r => Ok(r?),
    }
}

/// An error and its sources on one line, for logs and API messages.
pub use homes::error_chain as chain;
