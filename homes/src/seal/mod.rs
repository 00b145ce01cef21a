//! The sealed form of a checkpoint (`FORMAT.md`, "Sealed archive"): a header, then 64 KiB
//! plaintext segments each sealed with AES-256-GCM under a key derived for this one archive, with
//! AAD binding the header (storage id, revision, segment size, salt), the segment index and
//! whether the segment is the last. Also each home's data key and its wrapping under the content
//! key.
//!
//! This module owns the byte layout and the cryptography, as a synchronous segment API
//! ([`SegmentSealer`], [`SegmentOpener`]) and streaming adapters ([`SealReader`], [`OpenReader`])
//! that hold one segment at a time. Where keys come from and where objects go is left to
//! [`crate::store`] and its caller.
//!
//! Nonce reuse is impossible by construction: each archive draws a fresh random 256-bit salt, the
//! segment key is HKDF-SHA256(data key, salt, revision and storage id), and the nonce is the
//! segment index under that key. Two archives share a segment key only if their salts collide.

mod stream;

pub use stream::{OpenReader, SealReader};

use crate::{HomeKey, Revision};
use hkdf::Hkdf;
use rand::RngCore;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use sha2::Sha256;
use std::fmt;
use std::io;

/// First bytes of every sealed archive.
pub const MAGIC: [u8; 8] = *b"RKZHSEAL";
/// The sealed format version this crate writes and reads.
pub const VERSION: u16 = 1;
/// Plaintext bytes per segment (every segment but the last is exactly this long).
pub const SEGMENT_SIZE: usize = 64 << 10;
/// Bytes AES-GCM adds to each segment.
pub const TAG_LEN: usize = 16;
/// Bytes of the header before the storage id: magic, version, segment size, revision, salt and
/// the id's length.
pub const HEADER_FIXED_LEN: usize = 8 + 2 + 4 + 8 + 32 + 1;
/// The archive length a sealed object of `sealed_len` bytes for storage id `home` decrypts to,
/// from the format alone (`FORMAT.md`): the header, then segments of [`SEGMENT_SIZE`] plaintext
/// bytes each followed by a [`TAG_LEN`]-byte tag, the last one possibly shorter. `None` if no
/// well-formed object has that length.
pub fn plaintext_len(sealed_len: u64, home: &HomeKey) -> Option<u64> {
    let header = (HEADER_FIXED_LEN + home.as_str().len()) as u64;
    let body = sealed_len.checked_sub(header)?;
    let sealed_segment = (SEGMENT_SIZE + TAG_LEN) as u64;
    let segments = body.div_ceil(sealed_segment).max(1);
    body.checked_sub(segments * TAG_LEN as u64)
}

/// Version byte of a wrapped data key.
pub const WRAP_VERSION: u8 = 1;
/// Length of a wrapped data key: version, nonce, encrypted key, tag.
pub const WRAPPED_LEN: usize = 1 + 12 + 32 + TAG_LEN;

const SEGMENT_KEY_INFO: &[u8] = b"rakazo home segment key v1\0";
const WRAP_AAD: &[u8] = b"rakazo home data key v1\0";

/// Errors of sealing and opening.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("not a sealed home archive (bad magic)")]
    BadMagic,
    #[error(
        "sealed home archive version {0} is not supported (this build reads version {VERSION})"
    )]
    UnsupportedVersion(u16),
    #[error("sealed home archive has segment size {0}, expected {SEGMENT_SIZE}")]
    BadSegmentSize(u32),
    #[error("sealed home archive belongs to home {found:?}, expected home {expected}")]
    WrongHome { expected: HomeKey, found: String },
    #[error("sealed archive of home {home} is revision {found}, expected revision {expected}")]
    WrongRevision {
        home: HomeKey,
        expected: Revision,
        found: u64,
    },
    #[error(
        "segment {segment} of home {home} revision {revision} failed authentication \
         (tampered, reordered, or sealed with another key)"
    )]
    Authentication {
        home: HomeKey,
        revision: Revision,
        segment: u64,
    },
    #[error(
        "sealed archive of home {home} revision {revision} is truncated after {segments} segments"
    )]
    Truncated {
        home: HomeKey,
        revision: Revision,
        segments: u64,
    },
    #[error("sealed archive of home {home} revision {revision} has data after its final segment {segment}")]
    TrailingData {
        home: HomeKey,
        revision: Revision,
        segment: u64,
    },
    #[error(
        "data key of home {home} does not unwrap (wrong content key, or wrapped for another home)"
    )]
    Unwrap { home: HomeKey },
    #[error("wrapped data key of home {home} is malformed")]
    BadWrappedKey { home: HomeKey },
    #[error("sealing segment {segment} of home {home} failed")]
    Encrypt { home: HomeKey, segment: u64 },
    #[error("reading the sealed stream failed")]
    Read(#[source] io::Error),
}

impl From<SealError> for io::Error {
    fn from(e: SealError) -> Self {
        match e {
            SealError::Read(e) => e,
            e => io::Error::new(io::ErrorKind::InvalidData, e),
        }
    }
}

/// A 256-bit AES key. `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct Key256([u8; 32]);

impl Key256 {
    /// A fresh random key from the OS-seeded CSPRNG.
    pub fn generate() -> Self {
        let mut k = [0; 32];
        rand::rng().fill_bytes(&mut k);
        Self(k)
    }

    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for Key256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key256(***)")
    }
}

/// A home's data key: seals its checkpoints. Stored only wrapped ([`wrap_data_key`]).
pub type DataKey = Key256;
/// The space's content key: wraps data keys. Supplied by the control plane's configuration.
pub type ContentKey = Key256;

/// A data key sealed under a content key, bound to one storage id (`FORMAT.md`, "Wrapped data
/// key"). This is what the computer row stores.
#[derive(Clone, PartialEq, Eq)]
pub struct WrappedKey(Vec<u8>);

impl WrappedKey {
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for WrappedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WrappedKey({} bytes)", self.0.len())
    }
}

fn wrap_aad(home: &HomeKey) -> Vec<u8> {
    let mut aad = WRAP_AAD.to_vec();
    aad.extend_from_slice(home.as_str().as_bytes());
    aad
}

/// Wraps `data_key` for the home `home` under `content_key` (AES-256-GCM, random nonce, AAD
/// binding the storage id so a wrapped key moved to another home's row does not unwrap).
pub fn wrap_data_key(content_key: &ContentKey, home: &HomeKey, data_key: &DataKey) -> WrappedKey {
    let cipher = aes_key(content_key.as_bytes());
    let mut nonce = [0; 12];
    rand::rng().fill_bytes(&mut nonce);
    let mut body = data_key.as_bytes().to_vec();
    let tag = match cipher.seal_in_place_separate_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(wrap_aad(home)),
        &mut body,
    ) {
        Ok(tag) => tag,
        // AES-GCM fails only for inputs of gigabytes; 32 bytes always seal.
        Err(_) => unreachable!("sealing 32 bytes with AES-256-GCM cannot fail"),
    };
    let mut out = Vec::with_capacity(WRAPPED_LEN);
    out.push(WRAP_VERSION);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&body);
    out.extend_from_slice(tag.as_ref());
    WrappedKey(out)
}

/// An AES-256-GCM key (ring's: it interleaves AES-NI and carry-less multiplication, about three
/// times the throughput of the portable crates on the machines we measured).
fn aes_key(key: &[u8; 32]) -> LessSafeKey {
    match UnboundKey::new(&AES_256_GCM, key) {
        Ok(k) => LessSafeKey::new(k),
        Err(_) => unreachable!("AES-256-GCM takes any 32-byte key"),
    }
}

/// Unwraps the data key of `home`; fails for another content key or another home's key.
pub fn unwrap_data_key(
    content_key: &ContentKey,
    home: &HomeKey,
    wrapped: &WrappedKey,
) -> Result<DataKey, SealError> {
    let bytes = wrapped.as_bytes();
    if bytes.len() != WRAPPED_LEN || bytes[0] != WRAP_VERSION {
        return Err(SealError::BadWrappedKey { home: home.clone() });
    }
    let (nonce, body_and_tag) = bytes[1..].split_at(12);
    let unwrap = || SealError::Unwrap { home: home.clone() };
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| unwrap())?;
    let mut buf = body_and_tag.to_vec();
    let plain = aes_key(content_key.as_bytes())
        .open_in_place(nonce, Aad::from(wrap_aad(home)), &mut buf)
        .map_err(|_| unwrap())?;
    let mut key = [0; 32];
    key.copy_from_slice(plain);
    Ok(Key256(key))
}

/// The header of a sealed archive.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Header {
    home: HomeKey,
    revision: Revision,
    salt: [u8; 32],
}

impl Header {
    fn encode(&self) -> Vec<u8> {
        let id = self.home.as_str().as_bytes();
        let mut out = Vec::with_capacity(HEADER_FIXED_LEN + id.len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_be_bytes());
        out.extend_from_slice(&(SEGMENT_SIZE as u32).to_be_bytes());
        out.extend_from_slice(&self.revision.get().to_be_bytes());
        out.extend_from_slice(&self.salt);
        // HomeKey is at most MAX_KEY_LEN (128) bytes.
        out.push(id.len() as u8);
        out.extend_from_slice(id);
        out
    }

    /// The AES key of this archive's segments.
    fn segment_cipher(&self, data_key: &DataKey) -> LessSafeKey {
        let mut info = SEGMENT_KEY_INFO.to_vec();
        info.extend_from_slice(&self.revision.get().to_be_bytes());
        info.extend_from_slice(self.home.as_str().as_bytes());
        let mut key = [0; 32];
        if Hkdf::<Sha256>::new(Some(&self.salt), data_key.as_bytes())
            .expand(&info, &mut key)
            .is_err()
        {
            unreachable!("HKDF-SHA256 always yields 32 bytes");
        }
        aes_key(&key)
    }

    /// The header's fixed part: (id length, salt, revision) after checking magic, version and
    /// segment size.
    fn parse_fixed(b: &[u8; HEADER_FIXED_LEN]) -> Result<(usize, [u8; 32], u64), SealError> {
        if b[..8] != MAGIC {
            return Err(SealError::BadMagic);
        }
        let version = u16::from_be_bytes([b[8], b[9]]);
        if version != VERSION {
            return Err(SealError::UnsupportedVersion(version));
        }
        let seg = u32::from_be_bytes([b[10], b[11], b[12], b[13]]);
        if seg as usize != SEGMENT_SIZE {
            return Err(SealError::BadSegmentSize(seg));
        }
        let mut rev = [0; 8];
        rev.copy_from_slice(&b[14..22]);
        let mut salt = [0; 32];
        salt.copy_from_slice(&b[22..54]);
        Ok((usize::from(b[54]), salt, u64::from_be_bytes(rev)))
    }
}

/// Per-segment nonce and AAD under one archive's key.
struct SegmentCrypto {
    cipher: LessSafeKey,
    /// The encoded header followed by 9 bytes overwritten per segment: index and final flag.
    aad: Vec<u8>,
    home: HomeKey,
    revision: Revision,
    next: u64,
}

impl SegmentCrypto {
    fn new(header: &Header, data_key: &DataKey) -> Self {
        let mut aad = header.encode();
        aad.extend_from_slice(&[0; 9]);
        Self {
            cipher: header.segment_cipher(data_key),
            aad,
            home: header.home.clone(),
            revision: header.revision,
            next: 0,
        }
    }

    fn nonce_and_aad(&mut self, index: u64, last: bool) -> [u8; 12] {
        let n = self.aad.len();
        self.aad[n - 9..n - 1].copy_from_slice(&index.to_be_bytes());
        self.aad[n - 1] = u8::from(last);
        let mut nonce = [0; 12];
        nonce[4..].copy_from_slice(&index.to_be_bytes());
        nonce
    }
}

/// Seals one archive segment by segment. [`SealReader`] drives it over a stream.
pub struct SegmentSealer {
    crypto: SegmentCrypto,
    header: Vec<u8>,
}

impl SegmentSealer {
    /// A sealer for revision `revision` of home `home` with a fresh random salt.
    pub fn new(data_key: &DataKey, home: &HomeKey, revision: Revision) -> Self {
        let mut salt = [0; 32];
        rand::rng().fill_bytes(&mut salt);
        let header = Header {
            home: home.clone(),
            revision,
            salt,
        };
        Self {
            crypto: SegmentCrypto::new(&header, data_key),
            header: header.encode(),
        }
    }

    /// The bytes that start the sealed archive.
    pub fn header(&self) -> &[u8] {
        &self.header
    }

    /// Seals the next segment in place: `buf` holds its plaintext (exactly [`SEGMENT_SIZE`]
    /// bytes unless `last`) and is extended by the tag.
    pub fn seal(&mut self, buf: &mut Vec<u8>, last: bool) -> Result<(), SealError> {
        let index = self.crypto.next;
        let nonce = self.crypto.nonce_and_aad(index, last);
        let fail = || SealError::Encrypt {
            home: self.crypto.home.clone(),
            segment: index,
        };
        if !last && buf.len() != SEGMENT_SIZE {
            return Err(fail());
        }
        let tag = self
            .crypto
            .cipher
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(self.crypto.aad.as_slice()),
                buf,
            )
            .map_err(|_| fail())?;
        buf.extend_from_slice(tag.as_ref());
        self.crypto.next += 1;
        Ok(())
    }
}

/// Opens one sealed archive segment by segment, for a home and revision the caller expects.
pub struct SegmentOpener {
    crypto: SegmentCrypto,
}

/// What the header says before any cryptography: lets an opener name the wrong home or
/// revision plainly instead of reporting a failed tag.
fn check_identity(
    home: &HomeKey,
    revision: Revision,
    found_id: &[u8],
    found_rev: u64,
) -> Result<(), SealError> {
    if found_id != home.as_str().as_bytes() {
        return Err(SealError::WrongHome {
            expected: home.clone(),
            found: String::from_utf8_lossy(found_id).into_owned(),
        });
    }
    if found_rev != revision.get() {
        return Err(SealError::WrongRevision {
            home: home.clone(),
            expected: revision,
            found: found_rev,
        });
    }
    Ok(())
}

impl SegmentOpener {
    /// Checks `header` (the complete header bytes) against the expected home and revision and
    /// derives the segment key. The key and AAD come from what the caller expects, not from the
    /// header, so a rewritten header still fails authentication.
    pub fn new(
        data_key: &DataKey,
        home: &HomeKey,
        revision: Revision,
        header: &[u8],
    ) -> Result<Self, SealError> {
        let truncated = || SealError::Truncated {
            home: home.clone(),
            revision,
            segments: 0,
        };
        let fixed: &[u8; HEADER_FIXED_LEN] = header
            .get(..HEADER_FIXED_LEN)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(truncated)?;
        let (id_len, salt, found_rev) = Header::parse_fixed(fixed)?;
        let id = header
            .get(HEADER_FIXED_LEN..HEADER_FIXED_LEN + id_len)
            .ok_or_else(truncated)?;
        check_identity(home, revision, id, found_rev)?;
        let expected = Header {
            home: home.clone(),
            revision,
            salt,
        };
        Ok(Self {
            crypto: SegmentCrypto::new(&expected, data_key),
        })
    }

    /// Segments opened so far.
    pub fn opened(&self) -> u64 {
        self.crypto.next
    }

    /// Opens the next segment: `sealed` is its ciphertext and tag; on success `out` holds the
    /// plaintext. On failure `out` is cleared, so no unauthenticated byte is ever released.
    pub fn open(&mut self, sealed: &[u8], last: bool, out: &mut Vec<u8>) -> Result<(), SealError> {
        let index = self.crypto.next;
        let auth = |c: &SegmentCrypto| SealError::Authentication {
            home: c.home.clone(),
            revision: c.revision,
            segment: index,
        };
        out.clear();
        let Some(split) = sealed.len().checked_sub(TAG_LEN) else {
            return Err(auth(&self.crypto));
        };
        if split > SEGMENT_SIZE || (!last && split != SEGMENT_SIZE) {
            return Err(auth(&self.crypto));
        }
        // ring opens the body and its tag in place, leaving the plaintext in front.
        out.extend_from_slice(sealed);
        let nonce = self.crypto.nonce_and_aad(index, last);
        let ok = self
            .crypto
            .cipher
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(self.crypto.aad.as_slice()),
                out,
            )
            .is_ok();
        if ok {
            out.truncate(split);
            self.crypto.next += 1;
            return Ok(());
        }
        out.clear();
        Err(auth(&self.crypto))
    }

    /// After [`open`](Self::open) failed: whether the segment authenticates with the opposite
    /// final flag, which tells truncation (a middle segment presented as the last) and trailing
    /// data (the last segment followed by more) apart from tampering.
    fn diagnose(&mut self, sealed: &[u8], was_last: bool) -> SealError {
        let index = self.crypto.next;
        let mut scratch = Vec::new();
        if self.open(sealed, !was_last, &mut scratch).is_ok() {
            let (home, revision) = (self.crypto.home.clone(), self.crypto.revision);
            return if was_last {
                SealError::Truncated {
                    home,
                    revision,
                    segments: index + 1,
                }
            } else {
                SealError::TrailingData {
                    home,
                    revision,
                    segment: index,
                }
            };
        }
        SealError::Authentication {
            home: self.crypto.home.clone(),
            revision: self.crypto.revision,
            segment: index,
        }
    }
}

#[cfg(test)]
mod tests;
