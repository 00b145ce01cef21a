//! Where checkpoints live: the [`HomeStore`] trait (what the control plane needs from a store)
//! and its backends, [`LocalHomeStore`] and, with the `object` feature, [`ObjectHomeStore`].
//!
//! A store keeps the latest revision of each home. Commits of one home are serialized; an open
//! checkpoint stream holds off commits of that home until it is dropped, so it never reads a tree
//! or an object that a commit is replacing. The archive bytes a store receives come from an
//! untrusted guest; stores validate them (the local store by unpacking, the object store by
//! parsing them as they stream through) and the archive reader checks them again on restore.
//!
//! Deciding when to checkpoint, talking to the guest and progress reporting are left to the
//! control plane.

#[cfg(feature = "object")]
mod cas;
#[cfg(feature = "object")]
mod keys;
#[cfg(feature = "object")]
mod ledger;
mod local;
mod locks;
#[cfg(feature = "object")]
pub(crate) mod object;

#[cfg(feature = "object")]
pub use cas::{CasHomeStore, CasPlace, Clock, Export, HomeRepo};
#[cfg(feature = "object")]
pub use keys::object_key;
#[cfg(feature = "object")]
pub use ledger::{
    BadUpload, LedgerEntry, LedgerError, MemRevisionLedger, PendingUpload, RevisionLedger,
    UploadId, MAX_UPLOAD_ID_LEN,
};
pub use local::LocalHomeStore;
#[cfg(feature = "object")]
pub use object::{ObjectHomeStore, ObjectStoreConfig, ReconcileStats};

use crate::archive::ArchiveError;
use crate::seal::SealError;
use crate::{HomeKey, Revision};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};

/// A stream of archive bytes (`FORMAT.md`, "Archive").
pub type ArchiveStream = Pin<Box<dyn AsyncRead + Send>>;

/// The latest checkpoint of a home, opened for reading. Holding it holds off commits of that
/// home; drop it when done.
pub struct Checkpoint {
    pub revision: Revision,
    pub archive: ArchiveStream,
    /// The archive stream's length if the store knows it without reading it (the object store,
    /// from the sealed object's length). Untrusted until the stream has been read to its end:
    /// a tampered object fails authentication whatever length it claims.
    pub archive_len: Option<u64>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("revision", &self.revision)
            .finish_non_exhaustive()
    }
}

/// Keeps the latest checkpoint of each home. Backends translate only: no retries, no policy.
pub trait HomeStore: Send + Sync {
    /// Stores the archive read from `archive` as the home's next revision and returns it. On any
    /// error the previous revision stays current and readable.
    fn commit<R>(
        &self,
        home: &HomeKey,
        archive: R,
    ) -> impl Future<Output = Result<Revision, HomeStoreError>> + Send
    where
        R: AsyncRead + Send + Unpin + 'static;

    /// The latest checkpoint, or `None` if the home has none.
    fn open_latest(
        &self,
        home: &HomeKey,
    ) -> impl Future<Output = Result<Option<Checkpoint>, HomeStoreError>> + Send;

    /// The latest revision, or `None` if the home has none.
    fn current_revision(
        &self,
        home: &HomeKey,
    ) -> impl Future<Output = Result<Option<Revision>, HomeStoreError>> + Send;

    /// Deletes every checkpoint of the home. Idempotent: deleting a home the store does not
    /// know returns `Ok(())`.
    fn delete(&self, home: &HomeKey) -> impl Future<Output = Result<(), HomeStoreError>> + Send;
}

/// Errors of the stores.
#[derive(Debug, thiserror::Error)]
pub enum HomeStoreError {
    #[error("checkpoint of home {home} was rejected")]
    Archive {
        home: HomeKey,
        #[source]
        source: ArchiveError,
    },
    #[error("cannot {op} {path} for home {home}")]
    Io {
        home: HomeKey,
        op: &'static str,
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("revision marker {path} of home {home} is corrupt")]
    CorruptMarker { home: HomeKey, path: String },
    #[error("home {home} has revision {revision} but its tree {path} is missing")]
    MissingTree {
        home: HomeKey,
        revision: Revision,
        path: String,
    },
    #[error("key or sealed checkpoint of home {home} rejected")]
    Seal {
        home: HomeKey,
        #[source]
        source: SealError,
    },
    #[error("reading the checkpoint stream of home {home} failed")]
    Read {
        home: HomeKey,
        #[source]
        source: io::Error,
    },
    #[error("object store {op} of {object} failed")]
    S3 {
        op: &'static str,
        object: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("checkpoint object {object} of home {home} revision {revision} is missing")]
    MissingObject {
        home: HomeKey,
        revision: Revision,
        object: String,
    },
    #[cfg(feature = "object")]
    #[error("revision ledger of home {home} failed")]
    Ledger {
        home: HomeKey,
        #[source]
        source: LedgerError,
    },
    #[cfg(feature = "object")]
    #[error("listing the recorded multipart uploads failed")]
    PendingUploads(#[source] LedgerError),
    #[error("incremental store of home {home} failed")]
    Cas {
        home: HomeKey,
        #[source]
        source: crate::cas::CasError,
    },
    #[error("store task for home {home} ended abnormally")]
    Task {
        home: HomeKey,
        #[source]
        source: tokio::task::JoinError,
    },
}

/// An archive stream that keeps a lock guard alive until it is dropped.
struct Guarded<R, G> {
    inner: R,
    _guard: G,
}

impl<R: AsyncRead + Unpin, G: Unpin> AsyncRead for Guarded<R, G> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}
