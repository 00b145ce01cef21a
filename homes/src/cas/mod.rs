//! Incremental, deduplicated home checkpoints (docs/homes.md#incremental-checkpoints): the
//! content-addressed layer that makes a checkpoint cost what changed.
//!
//! A home's files are cut into chunks by content (FastCDC, [`chunk`]), so an edit in the middle
//! of a big file changes only the chunks around it. A chunk's id is BLAKE3 keyed with the home's
//! own id key ([`CasKeys`]): equal content is stored once within a home, and ids reveal nothing
//! across homes. Each directory is a [`tree::Tree`] blob listing its entries (mode, mtime, size,
//! symlink target, and a file's chunk ids); a tree is content-addressed too, so an unchanged
//! directory is the same blob and only the trees on the way to a change are written again.
//!
//! Blobs are sealed one by one (AES-256-GCM under the home's seal key, bound to the blob's id and
//! kind) and written in packs of about [`pack::PACK_TARGET`], never an object per chunk
//! ([`pack`]); each pack ends with its own sealed index, and each checkpoint writes an index file
//! of the packs it added, so opening a repository reads the index files, not the packs. A
//! revision ([`repo::RevisionInfo`]) names the root tree, its parent, when and why, and what it
//! added. Everything is stored through a [`blobs::BlobStore`] (a directory, or later a bucket):
//! packs and index files first, the revision last, so a failure midway leaves the previous
//! revision whole and at worst unreferenced packs a collection removes.
//!
//! Trust: a store is untrusted storage. Every blob is opened with its id as associated data and
//! checked against its keyed hash after opening, so a swapped, truncated or tampered blob, pack
//! or index is refused ([`CasError::Tampered`]).

pub mod archive;
pub mod blobs;
pub mod chunk;
pub mod pack;
#[cfg(feature = "object")]
pub mod recordings;
pub mod repo;
pub mod tree;

#[cfg(test)]
mod tests;

pub use archive::{ArchiveSize, Change, Difference, Ingest, Visit};
#[cfg(feature = "object")]
pub use blobs::ObjectBlobs;
pub use blobs::{sweep_temporaries, BlobStore, LocalBlobs, TemporarySweep, STALE_TEMPORARY_AGE};
#[cfg(feature = "object")]
pub use recordings::RecordingBlobs;
pub use repo::{Cause, Keep, PruneStats, Repo, RevisionInfo, Snapshot};

use hkdf::Hkdf;
use sha2::Sha256;
use std::fmt;

/// A blob's id: BLAKE3 of its plaintext, keyed with the home's id key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlobId(pub [u8; 32]);

impl BlobId {
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    pub fn from_hex(s: &str) -> Result<Self, CasError> {
        let mut out = [0; 32];
        hex::decode_to_slice(s, &mut out)
            .map_err(|_| CasError::Corrupt(format!("not a blob id: {:?}", truncate(s))))?;
        Ok(Self(out))
    }
}

impl fmt::Debug for BlobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BlobId({})", &self.to_hex()[..16])
    }
}

/// What a blob holds: file content or a directory's tree. Bound into its seal, so a tree can
/// never be read as data or the reverse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobKind {
    Data,
    Tree,
}

impl BlobKind {
    fn byte(self) -> u8 {
        match self {
            BlobKind::Data => 1,
            BlobKind::Tree => 2,
        }
    }

    fn from_byte(b: u8) -> Result<Self, CasError> {
        match b {
            1 => Ok(BlobKind::Data),
            2 => Ok(BlobKind::Tree),
            other => Err(CasError::Corrupt(format!("unknown blob kind {other}"))),
        }
    }
}

/// A home's keys for this layer, derived from its data key (HKDF-SHA256): one keys BLAKE3 for
/// blob ids, one seals blobs and indexes. `Debug` never prints them.
#[derive(Clone)]
pub struct CasKeys {
    id: [u8; 32],
    seal: [u8; 32],
}

impl fmt::Debug for CasKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CasKeys(***)")
    }
}

impl CasKeys {
    /// The keys of the home whose data key is `data_key`.
    pub fn derive(data_key: &crate::seal::DataKey) -> Self {
        let hk = Hkdf::<Sha256>::new(Some(b"rakazo cas v1"), data_key.as_bytes());
        let mut id = [0; 32];
        let mut seal = [0; 32];
        hk.expand(b"blob id", &mut id)
            .expect("32 bytes is a valid HKDF length");
        hk.expand(b"blob seal", &mut seal)
            .expect("32 bytes is a valid HKDF length");
        Self { id, seal }
    }

    /// The id of a blob holding `plain`.
    pub fn blob_id(&self, plain: &[u8]) -> BlobId {
        BlobId(*blake3::keyed_hash(&self.id, plain).as_bytes())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CasError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{path}: {source}")]
    Path {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// Stored bytes that do not open, or open to something other than their id says.
    #[error("tampered or damaged: {0}")]
    Tampered(String),
    /// Stored bytes that open but make no sense (a bad tree, a missing blob).
    #[error("corrupt: {0}")]
    Corrupt(String),
    #[error("no revision {0}")]
    NoRevision(u64),
    /// A fork's destination that already has checkpoints.
    #[error("home {0} already has checkpoints")]
    Exists(String),
    /// An archive stream the checker refused.
    #[error("archive refused")]
    Archive(#[from] crate::archive::ArchiveError),
    /// A path in a tree that would leave the restore's root.
    #[error("refused path {0:?}")]
    BadPath(String),
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}
