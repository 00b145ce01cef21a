//! The incremental store: each home a content-addressed repository ([`crate::cas`]) in a
//! directory or under `cas/<storage id>/` in a bucket, with its revision history, in front of the
//! whole-archive store it replaces (docs/homes.md#incremental-checkpoints).
//!
//! A commit reads the guest's archive as it arrives and stores only the chunks the home's
//! repository lacks; a restore streams a revision back out as an archive whose exact length is
//! known from its trees, so the guest's import starts at once. A home that has only whole-archive
//! checkpoints (made before this store) is read from the older store, and its first commit here
//! is a full one, numbered after the older store's revision; the older checkpoint stays where it
//! is until the home is deleted.
//!
//! Keys: each home's data key is random, stored wrapped under the space's content key and bound
//! to the home's storage id (`key` in its repository), and the repository's id and seal keys are
//! derived from it, so chunk ids of one home say nothing about another's.
//!
//! Locks: commits, and collections, of one home take its write lock; open streams hold its read
//! lock, so a collection never deletes a pack a restore is reading. Across replicas the control
//! plane's home claim serializes them.

use super::locks::KeyLocks;
use super::{Checkpoint, Guarded, HomeStore, HomeStoreError};
use crate::archive::{task_reader, Limits};
use crate::cas::{
    BlobStore, CasError, CasKeys, Cause, Ingest, Keep, LocalBlobs, PruneStats, Repo, RevisionInfo,
};
use crate::seal::{unwrap_data_key, wrap_data_key, ContentKey, DataKey, WrappedKey};
use crate::{HomeKey, Revision};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::AsyncRead;
use tokio_util::io::SyncIoBridge;

/// Where repositories live.
#[derive(Debug, Clone)]
pub enum CasPlace {
    /// `<dir>/<home key>/`.
    Local(PathBuf),
    /// `cas/<home key>/` in a bucket.
    Object(super::ObjectStoreConfig),
}

/// A guest export being committed (`CasHomeStore::commit_export`).
#[derive(Debug, Clone)]
pub struct Export {
    /// Its token (hex), recorded in the revision.
    pub token: String,
    /// The revision it is a delta of, if it named one.
    pub base: Option<u64>,
}

/// The name of a repository's wrapped data key.
const KEY_OBJECT: &str = "key";

/// A repository as the store opens it.
pub type HomeRepo = Repo<Box<dyn BlobStore>>;

struct Inner {
    place: CasPlace,
    content_key: ContentKey,
    limits: Limits,
}

/// Incremental checkpoints in front of an older whole-archive store `L`.
pub struct CasHomeStore<L> {
    legacy: L,
    inner: Arc<Inner>,
    locks: KeyLocks,
    now: Clock,
}

impl<S: BlobStore + ?Sized> BlobStore for Box<S> {
    fn put(&self, name: &str, bytes: &[u8]) -> Result<(), CasError> {
        (**self).put(name, bytes)
    }
    fn get(&self, name: &str) -> Result<Vec<u8>, CasError> {
        (**self).get(name)
    }
    fn list(&self, prefix: &str) -> Result<Vec<String>, CasError> {
        (**self).list(prefix)
    }
    fn delete(&self, name: &str) -> Result<(), CasError> {
        (**self).delete(name)
    }
    fn written(&self) -> u64 {
        (**self).written()
    }
    fn local_path(&self, name: &str) -> Option<PathBuf> {
        (**self).local_path(name)
    }
    fn object_key(&self, name: &str) -> Option<(String, String)> {
        (**self).object_key(name)
    }
    fn share_from(&self, src: &dyn BlobStore, name: &str) -> Result<(), CasError> {
        (**self).share_from(src, name)
    }
}

fn not_found(e: &CasError) -> bool {
    matches!(e, CasError::Path { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}

impl Inner {
    fn blobs(&self, home: &HomeKey) -> Result<Box<dyn BlobStore>, CasError> {
        Ok(match &self.place {
            CasPlace::Local(dir) => Box::new(LocalBlobs::new(dir.join(home.as_str()))),
            CasPlace::Object(cfg) => Box::new(crate::cas::ObjectBlobs::new(cfg, home.as_str())?),
        })
    }

    /// The data key of `home`'s repository in `store`: made and stored when it has none and
    /// `create` is set, else `None` then.
    fn data_key(
        &self,
        store: &dyn BlobStore,
        home: &HomeKey,
        create: bool,
    ) -> Result<Option<DataKey>, CasError> {
        match store.get(KEY_OBJECT) {
            Ok(wrapped) => {
                unwrap_data_key(&self.content_key, home, &WrappedKey::from_bytes(wrapped))
                    .map(Some)
                    .map_err(|e| CasError::Tampered(crate::error_chain(&e)))
            }
            Err(e) if not_found(&e) && create => {
                let key = DataKey::generate();
                let wrapped = wrap_data_key(&self.content_key, home, &key);
                store.put(KEY_OBJECT, wrapped.as_bytes())?;
                Ok(Some(key))
            }
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The repository of `home`: `None` when it has none and `create` is false. Blocking.
    fn repo(&self, home: &HomeKey, create: bool) -> Result<Option<HomeRepo>, CasError> {
        let store = self.blobs(home)?;
        match self.data_key(&*store, home, create)? {
            Some(key) => Repo::open(store, CasKeys::derive(&key)).map(Some),
            None => Ok(None),
        }
    }

    /// [`CasHomeStore::fork`] of a home that has a repository; `None` when it has not.
    fn fork(
        &self,
        from: &HomeKey,
        n: Option<u64>,
        to: &HomeKey,
        cause: Cause,
        at_ms: i64,
    ) -> Result<Option<RevisionInfo>, CasError> {
        let src = self.blobs(from)?;
        let Some(key) = self.data_key(&*src, from, false)? else {
            return Ok(None);
        };
        let src = Repo::open(src, CasKeys::derive(&key))?;
        let info = match n {
            Some(n) => src.revision(n)?,
            None => src.latest()?.ok_or(CasError::NoRevision(1))?,
        };
        let dst = self.blobs(to)?;
        if self.data_key(&*dst, to, false)?.is_some() {
            return Err(CasError::Exists(to.to_string()));
        }
        // Packs, then the key, then the index files, then the revision: a fork cut short
        // leaves either no repository (unindexed packs a collection removes) or one whose
        // indexes name only packs it has.
        for name in src.store().list("packs/")? {
            dst.share_from(&**src.store(), &name)?;
        }
        dst.put(
            KEY_OBJECT,
            wrap_data_key(&self.content_key, to, &key).as_bytes(),
        )?;
        for name in src.store().list("index/")? {
            dst.share_from(&**src.store(), &name)?;
        }
        let mut repo = Repo::open(dst, CasKeys::derive(&key))?;
        repo.commit_root(&info, cause, at_ms, 1).map(Some)
    }
}

fn cas_err(home: &HomeKey, e: CasError) -> HomeStoreError {
    match e {
        CasError::Archive(source) => HomeStoreError::Archive {
            home: home.clone(),
            source,
        },
        source => HomeStoreError::Cas {
            home: home.clone(),
            source,
        },
    }
}

fn task_err(home: &HomeKey) -> impl FnOnce(tokio::task::JoinError) -> HomeStoreError + '_ {
    move |source| HomeStoreError::Task {
        home: home.clone(),
        source,
    }
}

/// Runs `f` with the store's places and keys and `home` on the blocking pool (repositories are
/// synchronous), its errors as `home`'s.
async fn blocking<T, F>(inner: &Arc<Inner>, home: &HomeKey, f: F) -> Result<T, HomeStoreError>
where
    T: Send + 'static,
    F: FnOnce(&Inner, &HomeKey) -> Result<T, CasError> + Send + 'static,
{
    let (inner2, h) = (inner.clone(), home.clone());
    tokio::task::spawn_blocking(move || f(&inner2, &h))
        .await
        .map_err(task_err(home))?
        .map_err(|e| cas_err(home, e))
}

/// The wall clock in milliseconds since the epoch, as the store's owner reads it.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

impl<L: HomeStore> CasHomeStore<L> {
    /// Repositories at `place`, sealed under keys wrapped with `content_key`, in front of
    /// `legacy`. Archives are held to the default [`Limits`] until [`Self::with_limits`];
    /// `now` dates the revisions [`HomeStore::commit`] makes.
    pub fn new(legacy: L, place: CasPlace, content_key: ContentKey, now: Clock) -> Self {
        Self {
            legacy,
            inner: Arc::new(Inner {
                place,
                content_key,
                limits: Limits::default(),
            }),
            locks: KeyLocks::default(),
            now,
        }
    }

    pub fn with_limits(mut self, limits: Limits) -> Self {
        Arc::get_mut(&mut self.inner)
            .expect("limits are set before the store is shared")
            .limits = limits;
        self
    }

    /// The older whole-archive store.
    pub fn legacy(&self) -> &L {
        &self.legacy
    }

    /// Runs `f` on `home`'s repository on the blocking pool (`None`: the home has none).
    /// Holds the home's read lock meanwhile, so no collection deletes what `f` reads.
    pub async fn read<T, F>(&self, home: &HomeKey, f: F) -> Result<Option<T>, HomeStoreError>
    where
        T: Send + 'static,
        F: FnOnce(&HomeRepo) -> Result<T, CasError> + Send + 'static,
    {
        let _guard = self.locks.read(home).await;
        blocking(&self.inner, home, move |inner, h| {
            match inner.repo(h, false)? {
                Some(repo) => f(&repo).map(Some),
                None => Ok(None),
            }
        })
        .await
    }

    /// Every revision of `home`, oldest first (empty for a home with none here).
    pub async fn revisions(&self, home: &HomeKey) -> Result<Vec<RevisionInfo>, HomeStoreError> {
        Ok(self
            .read(home, |r| r.revisions())
            .await?
            .unwrap_or_default())
    }

    /// Stores the archive as `home`'s next revision, made for `cause` at `at_ms`.
    pub async fn commit_as<R>(
        &self,
        home: &HomeKey,
        archive: R,
        cause: Cause,
        at_ms: i64,
    ) -> Result<RevisionInfo, HomeStoreError>
    where
        R: AsyncRead + Send + Unpin + 'static,
    {
        self.commit_export(home, archive, cause, at_ms, None).await
    }

    /// The latest revision of `home` and the token of the guest export it was made from: what
    /// the next export may be a delta of (`None` when the latest came from elsewhere: a
    /// restore, a fork, or no export at all).
    pub async fn latest_export(
        &self,
        home: &HomeKey,
    ) -> Result<Option<(u64, String)>, HomeStoreError> {
        let latest = self.read(home, |r| r.latest()).await?.flatten();
        Ok(latest.and_then(|r| r.export.map(|t| (r.revision, t))))
    }

    /// [`Self::commit_as`] of the archive of a guest export (`export`): recorded with its token,
    /// and, for a delta, with its unchanged files taken from its base revision.
    pub async fn commit_export<R>(
        &self,
        home: &HomeKey,
        archive: R,
        cause: Cause,
        at_ms: i64,
        export: Option<Export>,
    ) -> Result<RevisionInfo, HomeStoreError>
    where
        R: AsyncRead + Send + Unpin + 'static,
    {
        let _guard = self.locks.write(home).await;
        // Numbered after the older store's last checkpoint, so numbers never go back.
        let first = match self.legacy.current_revision(home).await? {
            Some(r) => r.get() + 1,
            None => 1,
        };
        let reader = SyncIoBridge::new(archive);
        let (base, token) = match export {
            Some(e) => (e.base, Some(e.token)),
            None => (None, None),
        };
        blocking(&self.inner, home, move |inner, h| {
            let mut repo = inner.repo(h, true)?.expect("created");
            let how = Ingest {
                limits: inner.limits,
                cause,
                at_ms,
                first,
                base,
                token,
            };
            repo.ingest_with(reader, how)
        })
        .await
    }

    /// Revision `n` of `home` as an archive (`None` if there is no such revision here).
    pub async fn open_revision(
        &self,
        home: &HomeKey,
        n: u64,
    ) -> Result<Option<Checkpoint>, HomeStoreError> {
        self.open_at(home, Some(n)).await
    }

    /// Revision `n` (default: the latest) of `home` as an archive whose length is known from
    /// its trees; `None` if there is no such revision here. The repository is opened once: the
    /// stream writes from the one that measured it, under the home's read lock.
    async fn open_at(
        &self,
        home: &HomeKey,
        n: Option<u64>,
    ) -> Result<Option<Checkpoint>, HomeStoreError> {
        let guard = self.locks.read(home).await;
        let found = blocking(&self.inner, home, move |inner, h| {
            let Some(repo) = inner.repo(h, false)? else {
                return Ok(None);
            };
            let n = match n {
                Some(n) => n,
                None => match repo.latest()? {
                    Some(info) => info.revision,
                    None => return Ok(None),
                },
            };
            match repo.archive_size(n) {
                Ok(size) => Ok(Some((repo, n, size))),
                Err(CasError::NoRevision(_)) => Ok(None),
                Err(e) => Err(e),
            }
        })
        .await?;
        let Some((repo, n, size)) = found else {
            return Ok(None);
        };
        let revision = Revision::new(n).ok_or(HomeStoreError::Cas {
            home: home.clone(),
            source: CasError::NoRevision(0),
        })?;
        let reader = task_reader(move |w| repo.write_archive(n, w));
        Ok(Some(Checkpoint {
            revision,
            archive: Box::pin(Guarded {
                inner: reader,
                _guard: guard,
            }),
            archive_len: Some(size.len),
        }))
    }

    /// Makes revision `n` of `home` its next revision (see [`Repo::recommit`]).
    pub async fn recommit(
        &self,
        home: &HomeKey,
        n: u64,
        cause: Cause,
        at_ms: i64,
    ) -> Result<RevisionInfo, HomeStoreError> {
        let _guard = self.locks.write(home).await;
        blocking(&self.inner, home, move |inner, h| {
            let mut repo = inner.repo(h, false)?.ok_or(CasError::NoRevision(n))?;
            repo.recommit(n, cause, at_ms)
        })
        .await
    }

    /// Starts `to` (a home with no checkpoint) from revision `n` of `from` (default: its
    /// latest checkpoint), as `to`'s first revision, made for `cause`. The fork shares `from`'s
    /// data key and its packs (hard links on a disk, server-side copies in a bucket: nothing
    /// is read, chunked or sealed again), so later checkpoints of either dedupe against the
    /// common past; each goes on alone. A home with only whole-archive checkpoints is copied
    /// through its archive instead. `None` when `from` has no checkpoint.
    pub async fn fork(
        &self,
        from: &HomeKey,
        n: Option<u64>,
        to: &HomeKey,
        cause: Cause,
        at_ms: i64,
    ) -> Result<Option<RevisionInfo>, HomeStoreError> {
        if from == to || self.legacy.current_revision(to).await?.is_some() {
            return Err(cas_err(to, CasError::Exists(to.to_string())));
        }
        let shared = {
            // Both locks, in key order, so two forks between the same homes never wait on
            // each other.
            let _locks = if from < to {
                let a = self.locks.read(from).await;
                (a, self.locks.write(to).await)
            } else {
                let b = self.locks.write(to).await;
                (self.locks.read(from).await, b)
            };
            let f = from.clone();
            blocking(&self.inner, to, move |inner, t| {
                inner.fork(&f, n, t, cause, at_ms)
            })
            .await?
        };
        if shared.is_some() {
            return Ok(shared);
        }
        // Only whole-archive checkpoints: through the archive, sealed anew under `to`'s keys.
        let cp = match n {
            Some(_) => None,
            None => self.legacy.open_latest(from).await?,
        };
        let Some(cp) = cp else { return Ok(None) };
        self.commit_as(to, cp.archive, cause, at_ms).await.map(Some)
    }

    /// Deletes the revisions `keep` does not keep, then frees what no revision references.
    /// Under the home's write lock: no commit or open stream of this process runs meanwhile
    /// (other replicas are held off by the caller's claim).
    pub async fn collect(
        &self,
        home: &HomeKey,
        keep: Keep,
    ) -> Result<Option<(Vec<u64>, PruneStats)>, HomeStoreError> {
        let _guard = self.locks.write(home).await;
        blocking(&self.inner, home, move |inner, h| {
            let Some(mut repo) = inner.repo(h, false)? else {
                return Ok(None);
            };
            let gone = repo.forget(&keep)?;
            let stats = repo.prune()?;
            Ok(Some((gone, stats)))
        })
        .await
    }
}

impl<L: HomeStore> HomeStore for CasHomeStore<L> {
    async fn commit<R>(&self, home: &HomeKey, archive: R) -> Result<Revision, HomeStoreError>
    where
        R: AsyncRead + Send + Unpin + 'static,
    {
        let info = self
            .commit_as(home, archive, Cause::Manual, (self.now)())
            .await?;
        Revision::new(info.revision).ok_or(HomeStoreError::Cas {
            home: home.clone(),
            source: CasError::NoRevision(0),
        })
    }

    async fn open_latest(&self, home: &HomeKey) -> Result<Option<Checkpoint>, HomeStoreError> {
        match self.open_at(home, None).await? {
            Some(cp) => Ok(Some(cp)),
            None => self.legacy.open_latest(home).await,
        }
    }

    async fn current_revision(&self, home: &HomeKey) -> Result<Option<Revision>, HomeStoreError> {
        let latest = self.read(home, |r| r.latest()).await?.flatten();
        match latest {
            Some(info) => Ok(Revision::new(info.revision)),
            None => self.legacy.current_revision(home).await,
        }
    }

    async fn delete(&self, home: &HomeKey) -> Result<(), HomeStoreError> {
        {
            let _guard = self.locks.write(home).await;
            blocking(&self.inner, home, |inner, h| {
                let store = inner.blobs(h)?;
                // The key last: until then a retry can still open what is left.
                for prefix in ["revisions/", "index/", "packs/"] {
                    for name in store.list(prefix)? {
                        store.delete(&name)?;
                    }
                }
                store.delete(KEY_OBJECT)?;
                if let CasPlace::Local(dir) = &inner.place {
                    let dir = dir.join(h.as_str());
                    match std::fs::remove_dir_all(&dir) {
                        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                            return Err(CasError::Path {
                                path: dir.display().to_string(),
                                source: e,
                            })
                        }
                        _ => {}
                    }
                }
                Ok(())
            })
            .await?;
        }
        self.legacy.delete(home).await
    }
}
