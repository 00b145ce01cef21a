//! The local store: the latest copy of each home as a directory tree under
//! `DATA_DIR/homes/<key>`, its revision in `DATA_DIR/home-revisions/<key>`
//! (docs/homes.md#local-store).
//!
//! A commit unpacks the archive (which checks it) into `DATA_DIR/home-staging/<key>/new`, writes
//! the new revision to `home-staging/<key>/rev` (the commit point), then swaps with two renames
//! (`homes/<key>` → `home-staging/<key>/old`, `new` → `homes/<key>`), moves `rev` over the marker,
//! and removes `old`. Every operation on a home first recovers an interrupted commit of it: with a
//! `rev` file the commit is rolled forward, without one its staging is discarded, so a crash at
//! any point leaves either the previous or the new revision, whole. See `FORMAT.md`, "Local store".

use super::locks::KeyLocks;
use super::{Checkpoint, Guarded, HomeStore, HomeStoreError};
use crate::archive::{pack_reader, unpack_new_async, Limits, UnpackOptions};
use crate::{HomeKey, Revision};
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::AsyncRead;

/// Keeps each home's latest copy under a data dir.
pub struct LocalHomeStore {
    layout: Arc<Layout>,
    limits: Limits,
    durable: bool,
    locks: KeyLocks,
}

#[derive(Debug, Clone)]
struct Layout {
    homes: PathBuf,
    revisions: PathBuf,
    staging: PathBuf,
}

impl Layout {
    fn tree(&self, home: &HomeKey) -> PathBuf {
        self.homes.join(home.as_str())
    }
    fn marker(&self, home: &HomeKey) -> PathBuf {
        self.revisions.join(home.as_str())
    }
    fn staging(&self, home: &HomeKey) -> PathBuf {
        self.staging.join(home.as_str())
    }
}

/// Where a test stops a commit to simulate a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Never,
    #[cfg(test)]
    BeforeCommitPoint,
    #[cfg(test)]
    BetweenRenames,
}

impl LocalHomeStore {
    /// A store under `data_dir` (created on first commit), with the default archive limits.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        let data_dir = data_dir.into();
        Self {
            layout: Arc::new(Layout {
                homes: data_dir.join("homes"),
                revisions: data_dir.join("home-revisions"),
                staging: data_dir.join("home-staging"),
            }),
            limits: Limits::default(),
            durable: true,
            locks: KeyLocks::default(),
        }
    }

    /// Limits a committed archive must stay within.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The directory holding the latest copy of `home` (for reading files of a stopped computer).
    /// It is replaced as a whole by each commit; read it through [`HomeStore::open_latest`] when a
    /// consistent snapshot matters.
    pub fn tree_path(&self, home: &HomeKey) -> PathBuf {
        self.layout.tree(home)
    }

    async fn blocking<T, F>(&self, home: &HomeKey, f: F) -> Result<T, HomeStoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Layout) -> Result<T, HomeStoreError> + Send + 'static,
    {
        let layout = self.layout.clone();
        tokio::task::spawn_blocking(move || f(&layout))
            .await
            .map_err(|source| HomeStoreError::Task {
                home: home.clone(),
                source,
            })?
    }

    async fn commit_until<R>(
        &self,
        home: &HomeKey,
        archive: R,
        stop: Stop,
    ) -> Result<Revision, HomeStoreError>
    where
        R: AsyncRead + Send + Unpin + 'static,
    {
        let _guard = self.locks.write(home).await;
        let h = home.clone();
        let current = self
            .blocking(home, move |l| {
                recover(l, &h)?;
                read_marker(l, &h)
            })
            .await?;
        let next = Revision::after(current);
        let staging = self.layout.staging(home);
        let h = home.clone();
        let dir = staging.clone();
        self.blocking(home, move |_| {
            fs::create_dir_all(&dir).map_err(|e| io_err(&h, "create", &dir, e))
        })
        .await?;
        let opts = UnpackOptions {
            limits: self.limits,
            sync: self.durable,
        };
        unpack_new_async(archive, staging.join("new"), opts)
            .await
            .map_err(|source| HomeStoreError::Archive {
                home: home.clone(),
                source,
            })?;
        let h = home.clone();
        self.blocking(home, move |l| swap(l, &h, next, stop))
            .await?;
        Ok(next)
    }
}

impl HomeStore for LocalHomeStore {
    async fn commit<R>(&self, home: &HomeKey, archive: R) -> Result<Revision, HomeStoreError>
    where
        R: AsyncRead + Send + Unpin + 'static,
    {
        self.commit_until(home, archive, Stop::Never).await
    }

    async fn open_latest(&self, home: &HomeKey) -> Result<Option<Checkpoint>, HomeStoreError> {
        let guard = self.locks.write(home).await;
        let h = home.clone();
        let current = self
            .blocking(home, move |l| {
                recover(l, &h)?;
                read_marker(l, &h)
            })
            .await?;
        let Some(revision) = current else {
            return Ok(None);
        };
        let tree = self.layout.tree(home);
        if !tree.is_dir() {
            return Err(HomeStoreError::MissingTree {
                home: home.clone(),
                revision,
                path: tree.display().to_string(),
            });
        }
        // Recovery needed the write lock; reading needs only to keep commits out.
        let guard = guard.downgrade();
        Ok(Some(Checkpoint {
            revision,
            archive: Box::pin(Guarded {
                inner: pack_reader(tree),
                _guard: guard,
            }),
            archive_len: None,
        }))
    }

    async fn current_revision(&self, home: &HomeKey) -> Result<Option<Revision>, HomeStoreError> {
        let _guard = self.locks.write(home).await;
        let h = home.clone();
        self.blocking(home, move |l| {
            recover(l, &h)?;
            read_marker(l, &h)
        })
        .await
    }

    async fn delete(&self, home: &HomeKey) -> Result<(), HomeStoreError> {
        let _guard = self.locks.write(home).await;
        let h = home.clone();
        self.blocking(home, move |l| {
            recover(l, &h)?;
            // The marker goes first: a tree without a marker is an interrupted delete, which
            // recovery finishes.
            remove_file_if_exists(&h, &l.marker(&h))?;
            sync_dir(&h, &l.revisions)?;
            remove_tree_if_exists(&h, &l.tree(&h))?;
            remove_tree_if_exists(&h, &l.staging(&h))
        })
        .await
    }
}

fn io_err(home: &HomeKey, op: &'static str, path: &Path, source: io::Error) -> HomeStoreError {
    HomeStoreError::Io {
        home: home.clone(),
        op,
        path: path.display().to_string(),
        source,
    }
}

fn read_marker(l: &Layout, home: &HomeKey) -> Result<Option<Revision>, HomeStoreError> {
    read_revision_file(home, &l.marker(home))
}

fn read_revision_file(home: &HomeKey, path: &Path) -> Result<Option<Revision>, HomeStoreError> {
    match fs::read_to_string(path) {
        Ok(s) => Revision::parse(s.trim_end_matches('\n'))
            .map(Some)
            .map_err(|_| HomeStoreError::CorruptMarker {
                home: home.clone(),
                path: path.display().to_string(),
            }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(home, "read", path, e)),
    }
}

fn exists(home: &HomeKey, path: &Path) -> Result<bool, HomeStoreError> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(home, "inspect", path, e)),
    }
}

fn remove_tree_if_exists(home: &HomeKey, path: &Path) -> Result<(), HomeStoreError> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(home, "remove", path, e)),
    }
}

fn remove_file_if_exists(home: &HomeKey, path: &Path) -> Result<(), HomeStoreError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(home, "remove", path, e)),
    }
}

fn rename(home: &HomeKey, from: &Path, to: &Path) -> Result<(), HomeStoreError> {
    fs::rename(from, to).map_err(|e| io_err(home, "rename", from, e))
}

fn sync_dir(home: &HomeKey, dir: &Path) -> Result<(), HomeStoreError> {
    match File::open(dir).and_then(|d| d.sync_all()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(home, "sync", dir, e)),
    }
}

fn create_dirs(home: &HomeKey, l: &Layout) -> Result<(), HomeStoreError> {
    for dir in [&l.homes, &l.revisions, &l.staging] {
        fs::create_dir_all(dir).map_err(|e| io_err(home, "create", dir, e))?;
    }
    Ok(())
}

/// After the staged tree is complete: records the commit point, then swaps it in.
fn swap(l: &Layout, home: &HomeKey, next: Revision, stop: Stop) -> Result<(), HomeStoreError> {
    create_dirs(home, l)?;
    let staging = l.staging(home);
    #[cfg(not(test))]
    let Stop::Never = stop;
    #[cfg(test)]
    if stop == Stop::BeforeCommitPoint {
        return Ok(());
    }
    let tmp = staging.join("rev.tmp");
    let pending = staging.join("rev");
    let mut f = File::create(&tmp).map_err(|e| io_err(home, "create", &tmp, e))?;
    f.write_all(format!("{next}\n").as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| io_err(home, "write", &tmp, e))?;
    rename(home, &tmp, &pending)?;
    sync_dir(home, &staging)?;
    // Committed: from here on, recovery rolls forward.
    let tree = l.tree(home);
    let old = staging.join("old");
    if exists(home, &tree)? {
        rename(home, &tree, &old)?;
    }
    #[cfg(test)]
    if stop == Stop::BetweenRenames {
        return Ok(());
    }
    finish(l, home)
}

/// Rolls a committed swap forward from wherever it stopped.
fn finish(l: &Layout, home: &HomeKey) -> Result<(), HomeStoreError> {
    let staging = l.staging(home);
    let new = staging.join("new");
    let old = staging.join("old");
    let tree = l.tree(home);
    if exists(home, &new)? {
        if exists(home, &tree)? {
            // Stopped before the first rename.
            remove_tree_if_exists(home, &old)?;
            rename(home, &tree, &old)?;
        }
        rename(home, &new, &tree)?;
        sync_dir(home, &l.homes)?;
    }
    rename(home, &staging.join("rev"), &l.marker(home))?;
    sync_dir(home, &l.revisions)?;
    remove_tree_if_exists(home, &old)?;
    remove_tree_if_exists(home, &staging)
}

/// Brings a home back to a consistent state after a crash: finishes a committed swap, discards
/// an uncommitted one, finishes an interrupted delete.
fn recover(l: &Layout, home: &HomeKey) -> Result<(), HomeStoreError> {
    let staging = l.staging(home);
    if exists(home, &staging)? {
        remove_file_if_exists(home, &staging.join("rev.tmp"))?;
        let pending = staging.join("rev");
        if read_revision_file(home, &pending)?.is_some() {
            tracing::warn!(home = %home, "finishing an interrupted home commit");
            finish(l, home)?;
        } else {
            tracing::warn!(home = %home, "discarding an unfinished home commit");
            let old = staging.join("old");
            // Without a commit point the first rename never happened, so `old` can only be
            // a leftover; restore it only if the current tree is somehow gone.
            if exists(home, &old)? && !exists(home, &l.tree(home))? {
                rename(home, &old, &l.tree(home))?;
            }
            remove_tree_if_exists(home, &staging)?;
        }
    }
    if read_marker(l, home)?.is_none() && exists(home, &l.tree(home))? {
        tracing::warn!(home = %home, "finishing an interrupted home delete");
        remove_tree_if_exists(home, &l.tree(home))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
