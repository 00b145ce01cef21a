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
        let tmp = dir.join(format!(".tmp-{}", hex::encode(rand::random::<[u8; 8]>())));
        let mut f = std::fs::File::create(&tmp).map_err(at(&tmp))?;
        f.write_all(bytes).map_err(at(&tmp))?;
        f.sync_all().map_err(at(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(at(&path))?;
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
}
