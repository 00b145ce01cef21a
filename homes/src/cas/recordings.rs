//! Where screen recordings are kept (docs/recordings.md): beside the homes, in the same kind of
//! place (`<data dir>/recordings/<computer>/` or `recordings/<computer>/` in the bucket), each
//! piece sealed like a home's blobs (AES-256-GCM) under a data key of the computer's own,
//! wrapped under the content key and bound to the piece's name, so a piece swapped for another
//! (or another computer's) does not open.
//!
//! The store keeps named pieces; which pieces a recording has, and when they expire, is the
//! control plane's index. The calls are synchronous (the bucket backend runs its own runtime):
//! call them from a blocking thread.

use super::blobs::{BlobStore, LocalBlobs};
use super::pack::{open, seal};
use super::CasError;
use crate::seal::{unwrap_data_key, wrap_data_key, ContentKey, DataKey, WrappedKey};
use crate::store::CasPlace;
use crate::HomeKey;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;

/// The kind byte recording pieces are sealed under.
const KIND_RECORDING: u8 = 0x52;
const KEY_OBJECT: &str = "key";

/// The recordings of every computer.
pub struct RecordingBlobs {
    place: CasPlace,
    content_key: ContentKey,
    keys: Mutex<HashMap<String, DataKey>>,
}

fn key_label(computer: &str) -> Result<HomeKey, CasError> {
    HomeKey::new(format!("rec-{computer}"))
        .map_err(|e| CasError::BadPath(format!("{computer}: {e}")))
}

fn piece_id(name: &str) -> [u8; 32] {
    Sha256::digest(name.as_bytes()).into()
}

fn not_found(e: &CasError) -> bool {
    matches!(e, CasError::Path { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
        || matches!(e, CasError::Io(source) if source.kind() == std::io::ErrorKind::NotFound)
}

impl RecordingBlobs {
    /// Recordings in `place`: for a local place, its directory is the recordings' root.
    pub fn new(place: CasPlace, content_key: ContentKey) -> Self {
        Self {
            place,
            content_key,
            keys: Mutex::new(HashMap::new()),
        }
    }

    fn store(&self, computer: &str) -> Result<Box<dyn BlobStore>, CasError> {
        key_label(computer)?;
        Ok(match &self.place {
            CasPlace::Local(dir) => Box::new(LocalBlobs::new(dir.join(computer))),
            CasPlace::Object(cfg) => {
                Box::new(super::ObjectBlobs::under(cfg, "recordings", computer)?)
            }
        })
    }

    /// The computer's data key, made and stored on first use when `create`.
    fn data_key(
        &self,
        store: &dyn BlobStore,
        computer: &str,
        create: bool,
    ) -> Result<Option<DataKey>, CasError> {
        if let Some(k) = self
            .keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(computer)
        {
            return Ok(Some(k.clone()));
        }
        let label = key_label(computer)?;
        let key = match store.get(KEY_OBJECT) {
            Ok(wrapped) => {
                unwrap_data_key(&self.content_key, &label, &WrappedKey::from_bytes(wrapped))
                    .map_err(|e| CasError::Tampered(crate::error_chain(&e)))?
            }
            Err(e) if not_found(&e) && create => {
                let key = DataKey::generate();
                store.put(
                    KEY_OBJECT,
                    wrap_data_key(&self.content_key, &label, &key).as_bytes(),
                )?;
                key
            }
            Err(e) if not_found(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        self.keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(computer.to_string(), key.clone());
        Ok(Some(key))
    }

    /// Stores piece `name` (`[A-Za-z0-9._-]` segments joined by `/`) of the computer's
    /// recordings; returns its sealed size.
    pub fn put(&self, computer: &str, name: &str, plain: &[u8]) -> Result<u64, CasError> {
        let store = self.store(computer)?;
        let key = self
            .data_key(store.as_ref(), computer, true)?
            .ok_or_else(|| CasError::Corrupt("no data key".into()))?;
        let sealed = seal(key.as_bytes(), KIND_RECORDING, &piece_id(name), plain);
        store.put(name, &sealed)?;
        Ok(sealed.len() as u64)
    }

    /// Piece `name`, opened.
    pub fn get(&self, computer: &str, name: &str) -> Result<Vec<u8>, CasError> {
        let store = self.store(computer)?;
        let key = self
            .data_key(store.as_ref(), computer, false)?
            .ok_or_else(|| CasError::Corrupt(format!("computer {computer} has no recordings")))?;
        open(
            key.as_bytes(),
            KIND_RECORDING,
            &piece_id(name),
            &store.get(name)?,
        )
    }

    /// Deletes piece `name` (a piece already gone is fine).
    pub fn delete(&self, computer: &str, name: &str) -> Result<(), CasError> {
        self.store(computer)?.delete(name)
    }

    /// Deletes the computer's key: its pieces no longer open (the control plane deletes them
    /// one by one from its index as well).
    pub fn forget(&self, computer: &str) -> Result<(), CasError> {
        self.keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(computer);
        self.store(computer)?.delete(KEY_OBJECT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_open_only_under_their_own_name_and_computer() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = RecordingBlobs::new(
            CasPlace::Local(dir.path().to_path_buf()),
            ContentKey::generate(),
        );
        blobs.put("c-1", "bot-1/0001", b"frames").unwrap();
        assert_eq!(blobs.get("c-1", "bot-1/0001").unwrap(), b"frames");
        let stored = std::fs::read(dir.path().join("c-1/bot-1/0001")).unwrap();
        assert!(!stored.windows(6).any(|w| w == b"frames"), "sealed at rest");
        // Swapped for another piece, or carried to another computer: refused.
        blobs.put("c-1", "bot-1/0002", b"other").unwrap();
        std::fs::copy(
            dir.path().join("c-1/bot-1/0002"),
            dir.path().join("c-1/bot-1/0001"),
        )
        .unwrap();
        assert!(matches!(
            blobs.get("c-1", "bot-1/0001"),
            Err(CasError::Tampered(_))
        ));
        blobs.put("c-2", "bot-1/0002", b"x").unwrap();
        std::fs::copy(
            dir.path().join("c-1/bot-1/0002"),
            dir.path().join("c-2/bot-1/0002"),
        )
        .unwrap();
        assert!(matches!(
            blobs.get("c-2", "bot-1/0002"),
            Err(CasError::Tampered(_))
        ));
        assert!(blobs.put("c-1", "../x", b"").is_err());
        blobs.delete("c-1", "bot-1/0002").unwrap();
        blobs.forget("c-1").unwrap();
        assert!(blobs.get("c-1", "bot-1/0001").is_err());
    }
}
