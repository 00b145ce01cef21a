//! Packs: many sealed blobs in one object, and the indexes that find them.
//!
//! A sealed blob is `nonce (12) || AES-256-GCM(plain) || tag (16)`, the associated data being
//! `"rakazo-blob" || kind || id`: a blob moved to another id or kind does not open. A pack is
//! sealed blobs back to back, then its own index sealed the same way (kind 0, id all zeros), then
//! that index's length (8 bytes, big-endian): a pack can be re-indexed from itself alone. A pack's
//! name is the SHA-256 of its bytes. An index (in a pack's tail and in `index/` files) is JSON:
//! `[[pack, [[id, kind, offset, len], ...]], ...]`, hex ids.

use super::{BlobId, BlobKind, CasError};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use sha2::{Digest, Sha256};

/// A pack is cut once it holds this many bytes.
pub const PACK_TARGET: usize = 16 << 20;
const NONCE: usize = 12;
const TAG: usize = 16;

/// Where a blob is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    pub pack: [u8; 32],
    pub kind: BlobKind,
    pub offset: u64,
    pub len: u64,
}

fn key(seal: &[u8; 32]) -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, seal).expect("a 32-byte AES-256 key"))
}

fn aad(kind: u8, id: &[u8; 32]) -> Vec<u8> {
    let mut a = b"rakazo-blob".to_vec();
    a.push(kind);
    a.extend_from_slice(id);
    a
}

/// Seals `plain` as blob `id` of kind byte `kind`.
pub(super) fn seal(seal_key: &[u8; 32], kind: u8, id: &[u8; 32], plain: &[u8]) -> Vec<u8> {
    let nonce: [u8; NONCE] = rand::random();
    let mut out = Vec::with_capacity(NONCE + plain.len() + TAG);
    out.extend_from_slice(&nonce);
    let mut body = plain.to_vec();
    key(seal_key)
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad(kind, id)),
            &mut body,
        )
        .expect("sealing in memory does not fail");
    out.extend_from_slice(&body);
    out
}

/// Opens what [`seal`] made; any change to the bytes, the id or the kind is refused.
pub(super) fn open(
    seal_key: &[u8; 32],
    kind: u8,
    id: &[u8; 32],
    sealed: &[u8],
) -> Result<Vec<u8>, CasError> {
    if sealed.len() < NONCE + TAG {
        return Err(CasError::Tampered(
            "a sealed blob shorter than its seal".into(),
        ));
    }
    let (nonce, body) = sealed.split_at(NONCE);
    let mut body = body.to_vec();
    let nonce = Nonce::try_assume_unique_for_key(nonce).expect("12 bytes");
    let plain = key(seal_key)
        .open_in_place(nonce, Aad::from(aad(kind, id)), &mut body)
        .map_err(|_| CasError::Tampered("a blob does not open under its id".into()))?;
    Ok(plain.to_vec())
}

/// One index's entries: pack → its blobs.
pub type IndexEntries = Vec<(String, Vec<(String, u8, u64, u64)>)>;

/// Blobs sealed into packs; a full pack is handed back by [`PackWriter::add`] to be stored.
pub struct PackWriter {
    seal: [u8; 32],
    buf: Vec<u8>,
    blobs: Vec<(BlobId, BlobKind, u64, u64)>,
}

/// A finished pack: its name, bytes, and where each of its blobs is.
pub struct Pack {
    pub name: [u8; 32],
    pub bytes: Vec<u8>,
    pub blobs: Vec<(BlobId, Loc)>,
}

impl PackWriter {
    pub fn new(seal: [u8; 32]) -> Self {
        Self {
            seal,
            buf: Vec::new(),
            blobs: Vec::new(),
        }
    }

    /// Adds a blob; answers the pack when this one filled it.
    pub fn add(&mut self, id: BlobId, kind: BlobKind, plain: &[u8]) -> Option<Pack> {
        let sealed = seal(&self.seal, kind.byte(), &id.0, plain);
        let offset = self.buf.len() as u64;
        self.buf.extend_from_slice(&sealed);
        self.blobs.push((id, kind, offset, sealed.len() as u64));
        (self.buf.len() >= PACK_TARGET)
            .then(|| self.finish())
            .flatten()
    }

    /// The pack of what was added since the last one; `None` when nothing was.
    pub fn finish(&mut self) -> Option<Pack> {
        if self.blobs.is_empty() {
            return None;
        }
        let blobs = std::mem::take(&mut self.blobs);
        let mut bytes = std::mem::take(&mut self.buf);
        // The pack's own index, its name not known yet: entries name the pack "" here.
        let own: IndexEntries = vec![(
            String::new(),
            blobs
                .iter()
                .map(|(id, kind, off, len)| (id.to_hex(), kind.byte(), *off, *len))
                .collect(),
        )];
        let own = serde_json::to_vec(&own).expect("an index serializes");
        let tail = seal(&self.seal, 0, &[0; 32], &own);
        bytes.extend_from_slice(&tail);
        bytes.extend_from_slice(&(tail.len() as u64).to_be_bytes());
        let name: [u8; 32] = Sha256::digest(&bytes).into();
        let blobs = blobs
            .into_iter()
            .map(|(id, kind, offset, len)| {
                (
                    id,
                    Loc {
                        pack: name,
                        kind,
                        offset,
                        len,
                    },
                )
            })
            .collect();
        Some(Pack { name, bytes, blobs })
    }
}

/// The sealed index file of `packs`' blobs.
pub fn seal_index(seal_key: &[u8; 32], packs: &[Pack]) -> (Vec<u8>, [u8; 32]) {
    let entries: IndexEntries = packs
        .iter()
        .map(|p| {
            (
                hex::encode(p.name),
                p.blobs
                    .iter()
                    .map(|(id, l)| (id.to_hex(), l.kind.byte(), l.offset, l.len))
                    .collect(),
            )
        })
        .collect();
    let plain = serde_json::to_vec(&entries).expect("an index serializes");
    let name: [u8; 32] = Sha256::digest(&plain).into();
    (seal(seal_key, 0, &name, &plain), name)
}

/// Reads a sealed index file named `name`.
pub fn open_index(
    seal_key: &[u8; 32],
    name: &[u8; 32],
    sealed: &[u8],
) -> Result<Vec<(BlobId, Loc)>, CasError> {
    let plain = open(seal_key, 0, name, sealed)?;
    let entries: IndexEntries =
        serde_json::from_slice(&plain).map_err(|e| CasError::Corrupt(format!("an index: {e}")))?;
    let mut out = Vec::new();
    for (pack, blobs) in entries {
        let pack = super::BlobId::from_hex(&pack)?.0;
        for (id, kind, offset, len) in blobs {
            out.push((
                BlobId::from_hex(&id)?,
                Loc {
                    pack,
                    kind: BlobKind::from_byte(kind)?,
                    offset,
                    len,
                },
            ));
        }
    }
    Ok(out)
}

/// The blob at `loc` in `pack` (the pack's bytes), opened and checked against its id.
pub fn read_blob(
    keys: &super::CasKeys,
    id: BlobId,
    loc: &Loc,
    pack: &[u8],
) -> Result<Vec<u8>, CasError> {
    let end = loc
        .offset
        .checked_add(loc.len)
        .filter(|&e| e <= pack.len() as u64)
        .ok_or_else(|| CasError::Tampered("a blob beyond its pack's end".into()))?;
    let sealed = &pack[loc.offset as usize..end as usize];
    let plain = open(&keys.seal, loc.kind.byte(), &id.0, sealed)?;
    if keys.blob_id(&plain) != id {
        return Err(CasError::Tampered(
            "a blob's content is not its id's".into(),
        ));
    }
    Ok(plain)
}
