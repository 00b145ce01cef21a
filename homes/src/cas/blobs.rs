//! Where a repository's objects live: a flat namespace of names (`packs/<hex>`,
//! `index/<hex>`, `revisions/<n>`) holding immutable bytes. [`LocalBlobs`] keeps them in a
//! directory; a bucket backend implements the same trait.

use super::CasError;
use std::io::Write;
use std::path::{Path, PathBuf};

/// An object store for one repository. Objects are written once and never changed; `put` of an
/// existing name replaces it atomically (a retried write of the same bytes).
pub trait BlobStore: Send + Sync {
    fn put(&self, name: &str, bytes: &[u8]) -> Result<(), CasError>;
    fn get(&self, name: &str) -> Result<Vec<u8>, CasError>;
    /// The names under `prefix` (`packs/`), in no order.
    fn list(&self, prefix: &str) -> Result<Vec<String>, CasError>;
    fn delete(&self, name: &str) -> Result<(), CasError>;
    /// Bytes written by `put` so far (what a checkpoint uploaded).
    fn written(&self) -> u64;
    /// Where `name` is on this machine's disk, for a store of the same kind to share it.
    fn local_path(&self, _name: &str) -> Option<PathBuf> {
        None
    }
    /// `name`'s bucket and key, for a store in the same bucket to copy it server-side.
    fn object_key(&self, _name: &str) -> Option<(String, String)> {
        None
    }
    /// Makes `src`'s object `name` this store's too (a fork shares its parent's packs): a
    /// hard link where both are on one disk, a server-side copy in one bucket, else a read and a
    /// write.
    fn share_from(&self, src: &dyn BlobStore, name: &str) -> Result<(), CasError> {
        self.put(name, &src.get(name)?)
    }
}

/// Objects as files under one directory: written to a temporary file, synced, then renamed
/// into place, so a reader never sees half an object.
#[derive(Debug)]
pub struct LocalBlobs {
    root: PathBuf,
    written: std::sync::atomic::AtomicU64,
}

fn check_name(name: &str) -> Result<(), CasError> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name.split('/').all(|p| {
            !p.is_empty()
                && !p.starts_with('.')
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        });
    if ok {
        Ok(())
    } else {
        Err(CasError::BadPath(name.to_string()))
    }
}

impl LocalBlobs {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            written: Default::default(),
        }
    }

    fn path(&self, name: &str) -> Result<PathBuf, CasError> {
        check_name(name)?;
        Ok(self.root.join(name))
    }
}

fn at(path: &Path) -> impl FnOnce(std::io::Error) -> CasError + '_ {
    move |source| CasError::Path {
        path: path.display().to_string(),
        source,
    }
}

impl BlobStore for LocalBlobs {
    fn put(&self, name: &str, bytes: &[u8]) -> Result<(), CasError> {
        let path = self.path(name)?;
        let dir = path.parent().unwrap_or(&self.root);
        std::fs::create_dir_all(dir).map_err(at(dir))?;
        let tmp = dir.join(format!(
            "{TEMP_PREFIX}{}",
            hex::encode(rand::random::<[u8; 8]>())
        ));
        let mut f = std::fs::File::create(&tmp).map_err(at(&tmp))?;
        let written = f
            .write_all(bytes)
            .and_then(|()| f.sync_all())
            .map_err(at(&tmp))
            .and_then(|()| std::fs::rename(&tmp, &path).map_err(at(&path)));
        if written.is_err() {
            // A write cut short (a full disk) must not keep its part: nothing lists it, and on
            // a full disk it would hold the space the next checkpoint needs.
            let _ = std::fs::remove_file(&tmp);
        }
        written?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(at(dir))?;
        self.written
            .fetch_add(bytes.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    fn get(&self, name: &str) -> Result<Vec<u8>, CasError> {
        let path = self.path(name)?;
        std::fs::read(&path).map_err(at(&path))
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, CasError> {
        let dir = self.root.join(prefix.trim_end_matches('/'));
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(at(&dir)(e)),
        };
        let mut out = Vec::new();
        for entry in rd {
            let name = entry.map_err(at(&dir))?.file_name();
            let name = name.to_string_lossy();
            if !name.starts_with('.') {
                out.push(format!("{}/{name}", prefix.trim_end_matches('/')));
            }
        }
        Ok(out)
    }

    fn delete(&self, name: &str) -> Result<(), CasError> {
        let path = self.path(name)?;
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(at(&path)(e)),
        }
    }

    fn written(&self) -> u64 {
        self.written.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn local_path(&self, name: &str) -> Option<PathBuf> {
        self.path(name).ok()
    }

    fn share_from(&self, src: &dyn BlobStore, name: &str) -> Result<(), CasError> {
        let Some(from) = src.local_path(name) else {
            return self.put(name, &src.get(name)?);
        };
        let to = self.path(name)?;
        let dir = to.parent().unwrap_or(&self.root);
        std::fs::create_dir_all(dir).map_err(at(dir))?;
        match std::fs::hard_link(&from, &to) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            // Another file system, or links refused: a copy.
            Err(_) => self.put(name, &src.get(name)?),
        }
    }
}

/// How the name of a [`LocalBlobs`] temporary file begins (`.tmp-<16 hex>`): no object's name
/// does, since a name's components never start with `.`.
pub const TEMP_PREFIX: &str = ".tmp-";

/// How long a temporary file must have gone unwritten before it is taken for the leftover of a
/// killed process ([`sweep_temporaries`]). A live `put` writes one object (a pack is about
/// [`super::pack::PACK_TARGET`]) from memory, syncs and renames it within seconds; an hour is far
/// past that even on a disk that stalls, and past every deadline of a checkpoint.
pub const STALE_TEMPORARY_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// What [`sweep_temporaries`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TemporarySweep {
    /// Stale temporary files removed.
    pub removed: u64,
    /// Temporary files written since the time asked for: maybe a live write, left.
    pub young: u64,
    /// Temporary files or directories that could not be inspected or removed (each logged).
    pub failed: u64,
}

/// Removes the temporary files that [`LocalBlobs::put`] left anywhere under `root` (a directory
/// of stores: `<data dir>/home-cas`, `<data dir>/recordings`) and that were last written before
/// `written_before`. A process killed between creating one and renaming it leaves it forever: no
/// listing shows names starting with `.`, so no collection finds it. Later ones are left, as they
/// may belong to a write in progress: the caller picks a time no live write can predate. A
/// missing `root` is an empty one. Symbolic links are not followed. An entry that cannot be read
/// or removed is logged and counted, and the sweep goes on.
pub fn sweep_temporaries(root: &Path, written_before: std::time::SystemTime) -> TemporarySweep {
    let mut stats = TemporarySweep::default();
    let mut dirs = vec![root.to_path_buf()];
    let failed = |stats: &mut TemporarySweep, path: &Path, e: std::io::Error| {
        tracing::warn!(path = %path.display(), error = %e, "sweeping stale temporary files");
        stats.failed += 1;
    };
    while let Some(dir) = dirs.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                failed(&mut stats, &dir, e);
                continue;
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    failed(&mut stats, &dir, e);
                    continue;
                }
            };
            let path = entry.path();
            // Not followed: a link's type is the link's own.
            let kind = match entry.file_type() {
                Ok(kind) => kind,
                Err(e) => {
                    failed(&mut stats, &path, e);
                    continue;
                }
            };
            if kind.is_dir() {
                dirs.push(path);
                continue;
            }
            if !kind.is_file() || !entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
                continue;
            }
            let modified = match entry.metadata().and_then(|m| m.modified()) {
                Ok(t) => t,
                // Renamed into place (or removed) since the listing: not a leftover.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    failed(&mut stats, &path, e);
                    continue;
                }
            };
            if modified >= written_before {
                stats.young += 1;
                continue;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => stats.removed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => failed(&mut stats, &path, e),
            }
        }
    }
    stats
}

/// Objects in an S3-compatible bucket under `<prefix>/` (the home's storage id). The trait is
/// synchronous, so this store drives the S3 client on a runtime of its own: call it from a
/// blocking thread (`spawn_blocking`), never from inside an async task. Every request is retried
/// ([`ATTEMPTS`] in all, backing off from [`BACKOFF`]), each attempt within the configuration's
/// `attempt_timeout` ([`ATTEMPT_DEADLINE`] by default): a store that fails or stalls costs a
/// bounded time, then a clear error.
#[cfg(feature = "object")]
pub struct ObjectBlobs {
    client: aws_sdk_s3::Client,
    bucket: String,
    prefix: String,
    rt: tokio::runtime::Runtime,
    written: std::sync::atomic::AtomicU64,
    attempt_deadline: std::time::Duration,
}

/// Attempts of each request.
#[cfg(feature = "object")]
pub const ATTEMPTS: u32 = 4;
/// The first retry's wait; each next one doubles it.
#[cfg(feature = "object")]
pub const BACKOFF: std::time::Duration = std::time::Duration::from_millis(200);
/// How long one attempt may take, unless configured otherwise.
#[cfg(feature = "object")]
pub const ATTEMPT_DEADLINE: std::time::Duration = crate::store::object::DEFAULT_ATTEMPT_TIMEOUT;

#[cfg(feature = "object")]
impl ObjectBlobs {
    /// The objects of `prefix` (a home's storage id: `[A-Za-z0-9._-]`) in `config`'s bucket.
    pub fn new(config: &crate::ObjectStoreConfig, prefix: &str) -> Result<Self, CasError> {
        Self::under(config, "cas", prefix)
    }

    /// The objects of `prefix` under `root/` rather than `cas/` (screen recordings).
    pub fn under(
        config: &crate::ObjectStoreConfig,
        root: &str,
        prefix: &str,
    ) -> Result<Self, CasError> {
        check_name(root)?;
        check_name(prefix)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Self {
            client: crate::store::object::s3_client(config),
            bucket: config.bucket.clone(),
            prefix: format!("{root}/{prefix}"),
            rt,
            written: Default::default(),
            attempt_deadline: config.attempt_timeout,
        })
    }

    fn key(&self, name: &str) -> Result<String, CasError> {
        check_name(name)?;
        Ok(format!("{}/{name}", self.prefix))
    }

    /// Runs `op` with retries and deadlines; `what` names it in the error.
    fn retry<T, F, Fut>(&self, what: &str, op: F) -> Result<T, CasError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, Retry>>,
    {
        let deadline = self.attempt_deadline;
        self.rt.block_on(async {
            let mut wait = BACKOFF;
            let mut last = String::new();
            for attempt in 1..=ATTEMPTS {
                match tokio::time::timeout(deadline, op()).await {
                    Ok(Ok(v)) => return Ok(v),
                    Ok(Err(Retry::Final(e))) => return Err(e),
                    Ok(Err(Retry::Again(e))) => last = e,
                    Err(_) => last = format!("no answer within {deadline:?}"),
                }
                if attempt < ATTEMPTS {
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
            }
            Err(CasError::Io(std::io::Error::other(format!(
                "{what}: failed {ATTEMPTS} times, last: {last}"
            ))))
        })
    }
}

/// A failed attempt: worth another, or final.
#[cfg(feature = "object")]
enum Retry {
    Again(String),
    Final(CasError),
}

#[cfg(feature = "object")]
fn again(e: impl std::error::Error + 'static) -> Retry {
    Retry::Again(crate::error_chain(&e))
}

#[cfg(feature = "object")]
impl BlobStore for ObjectBlobs {
    fn put(&self, name: &str, bytes: &[u8]) -> Result<(), CasError> {
        let key = self.key(name)?;
        let body = bytes::Bytes::copy_from_slice(bytes);
        self.retry(&format!("put {name}"), || async {
            self.client
                .put_object()
                .bucket(&self.bucket)
                .key(&key)
                .body(aws_sdk_s3::primitives::ByteStream::from(body.clone()))
                .send()
                .await
                .map(|_| ())
                .map_err(again)
        })?;
        self.written
            .fetch_add(bytes.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    fn get(&self, name: &str) -> Result<Vec<u8>, CasError> {
        let key = self.key(name)?;
        self.retry(&format!("get {name}"), || async {
            let out = self
                .client
                .get_object()
                .bucket(&self.bucket)
                .key(&key)
                .send()
                .await;
            let out = match out {
                Ok(o) => o,
                Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => {
                    return Err(Retry::Final(CasError::Path {
                        path: name.to_string(),
                        source: std::io::Error::from(std::io::ErrorKind::NotFound),
                    }))
                }
                Err(e) => return Err(again(e)),
            };
            let body = out.body.collect().await.map_err(again)?;
            Ok(body.into_bytes().to_vec())
        })
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, CasError> {
        let full = format!("{}/{}", self.prefix, prefix);
        let strip = format!("{}/", self.prefix);
        self.retry(&format!("list {prefix}"), || async {
            let mut out = Vec::new();
            let mut token = None;
            loop {
                let page = self
                    .client
                    .list_objects_v2()
                    .bucket(&self.bucket)
                    .prefix(&full)
                    .set_continuation_token(token.clone())
                    .send()
                    .await
                    .map_err(again)?;
                for o in page.contents() {
                    if let Some(k) = o.key().and_then(|k| k.strip_prefix(&strip)) {
                        out.push(k.to_string());
                    }
                }
                match page.next_continuation_token() {
                    Some(t) if page.is_truncated() == Some(true) => token = Some(t.to_string()),
                    _ => return Ok(out),
                }
            }
        })
    }

    fn delete(&self, name: &str) -> Result<(), CasError> {
        let key = self.key(name)?;
        self.retry(&format!("delete {name}"), || async {
            self.client
                .delete_object()
                .bucket(&self.bucket)
                .key(&key)
                .send()
                .await
                .map(|_| ())
                .map_err(again)
        })
    }

    fn written(&self) -> u64 {
        self.written.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn object_key(&self, name: &str) -> Option<(String, String)> {
        Some((self.bucket.clone(), self.key(name).ok()?))
    }

    fn share_from(&self, src: &dyn BlobStore, name: &str) -> Result<(), CasError> {
        let Some((bucket, from)) = src.object_key(name).filter(|(b, _)| *b == self.bucket) else {
            return self.put(name, &src.get(name)?);
        };
        let key = self.key(name)?;
        let source = format!("{bucket}/{from}");
        self.retry(&format!("copy {name}"), || async {
            self.client
                .copy_object()
                .bucket(&self.bucket)
                .key(&key)
                .copy_source(&source)
                .send()
                .await
                .map(|_| ())
                .map_err(again)
        })
    }
}
