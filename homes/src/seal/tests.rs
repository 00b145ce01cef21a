//! Sealing: round trips at segment boundaries, every tampering case of issue 6 "Must show" 2 at
//! the byte level, and data-key wrapping.

use super::*;
use crate::testing::noise;
use tokio::io::AsyncReadExt;

fn home(s: &str) -> HomeKey {
    HomeKey::new(s).unwrap()
}

fn rev(n: u64) -> Revision {
    Revision::new(n).unwrap()
}

async fn seal_bytes(plain: &[u8], key: &DataKey, h: &HomeKey, r: Revision) -> Vec<u8> {
    let mut out = Vec::new();
    SealReader::new(plain, key, h, r)
        .read_to_end(&mut out)
        .await
        .unwrap();
    out
}

async fn open_bytes(
    sealed: &[u8],
    key: &DataKey,
    h: &HomeKey,
    r: Revision,
) -> Result<Vec<u8>, SealError> {
    let mut out = Vec::new();
    match OpenReader::new(sealed, key, h, r)
        .read_to_end(&mut out)
        .await
    {
        Ok(_) => Ok(out),
        Err(e) => {
            let inner = e.into_inner().expect("open errors carry a SealError");
            Err(*inner.downcast::<SealError>().expect("a SealError"))
        }
    }
}

const SEG: usize = SEGMENT_SIZE + TAG_LEN;

fn header_len(h: &HomeKey) -> usize {
    HEADER_FIXED_LEN + h.as_str().len()
}

#[tokio::test]
async fn round_trips_at_segment_boundaries() {
    let key = DataKey::generate();
    let h = home("team-w1");
    for len in [
        0,
        1,
        SEGMENT_SIZE - 1,
        SEGMENT_SIZE,
        SEGMENT_SIZE + 1,
        3 * SEGMENT_SIZE + 5,
    ] {
        let plain = noise(len, len as u64);
        let sealed = seal_bytes(&plain, &key, &h, rev(4)).await;
        let segments = len.div_ceil(SEGMENT_SIZE).max(1);
        assert_eq!(
            sealed.len(),
            header_len(&h) + len + segments * TAG_LEN,
            "{len}"
        );
        assert_eq!(
            open_bytes(&sealed, &key, &h, rev(4)).await.unwrap(),
            plain,
            "{len}"
        );
    }
}

#[tokio::test]
async fn two_seals_of_one_revision_never_share_keystream() {
    // Same key, home, revision and plaintext (a retried commit): the random salt makes the
    // ciphertexts unrelated.
    let key = DataKey::generate();
    let h = home("a");
    let plain = vec![0; 1000];
    let a = seal_bytes(&plain, &key, &h, rev(1)).await;
    let b = seal_bytes(&plain, &key, &h, rev(1)).await;
    let body = header_len(&h);
    assert_ne!(a[body..], b[body..]);
}

async fn sample() -> (DataKey, HomeKey, Vec<u8>, Vec<u8>) {
    let key = DataKey::generate();
    let h = home("bot-1");
    let plain = noise(3 * SEGMENT_SIZE + 100, 7);
    let sealed = seal_bytes(&plain, &key, &h, rev(2)).await;
    (key, h, plain, sealed)
}

#[tokio::test]
async fn a_flipped_bit_fails_its_segment() {
    let (key, h, _, sealed) = sample().await;
    for (offset, segment) in [(0, 0), (SEG + 17, 1), (3 * SEG + 5, 3)] {
        let mut bad = sealed.clone();
        bad[header_len(&h) + offset] ^= 0x01;
        let err = open_bytes(&bad, &key, &h, rev(2)).await.unwrap_err();
        assert!(
            matches!(err, SealError::Authentication { segment: s, .. } if s == segment),
            "{err}"
        );
    }
    // A flipped bit in the salt changes the derived key: the first segment fails.
    let mut bad = sealed.clone();
    bad[30] ^= 0x80;
    let err = open_bytes(&bad, &key, &h, rev(2)).await.unwrap_err();
    assert!(
        matches!(err, SealError::Authentication { segment: 0, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn truncation_is_detected() {
    let (key, h, _, sealed) = sample().await;
    let body = header_len(&h);
    // At a segment boundary: the last remaining segment was not sealed as the final one.
    let err = open_bytes(&sealed[..body + 2 * SEG], &key, &h, rev(2))
        .await
        .unwrap_err();
    assert!(
        matches!(err, SealError::Truncated { segments: 2, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("truncated after 2 segments"),
        "{err}"
    );
    // Inside a segment, inside the header, and right after it.
    for cut in [body + SEG + 100, 20, body, body + 5] {
        let err = open_bytes(&sealed[..cut], &key, &h, rev(2))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                SealError::Truncated { .. } | SealError::Authentication { .. }
            ),
            "cut {cut}: {err}"
        );
    }
}

#[tokio::test]
async fn swapped_segments_fail() {
    let (key, h, _, sealed) = sample().await;
    let body = header_len(&h);
    let mut bad = sealed.clone();
    let (first, second) = bad[body..body + 2 * SEG].split_at_mut(SEG);
    first.swap_with_slice(second);
    let err = open_bytes(&bad, &key, &h, rev(2)).await.unwrap_err();
    assert!(
        matches!(err, SealError::Authentication { segment: 0, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn data_after_the_final_segment_fails() {
    // A full last segment followed by more data is recognised as such...
    let key = DataKey::generate();
    let h = home("bot-1");
    let mut sealed = seal_bytes(&noise(3 * SEGMENT_SIZE, 1), &key, &h, rev(2)).await;
    sealed.extend_from_slice(b"more");
    let err = open_bytes(&sealed, &key, &h, rev(2)).await.unwrap_err();
    assert!(
        matches!(err, SealError::TrailingData { segment: 2, .. }),
        "{err}"
    );
    // ... a short one reads as a longer segment that fails authentication.
    let (key, h, _, mut sealed) = sample().await;
    sealed.extend_from_slice(&noise(SEG + 1, 1));
    let err = open_bytes(&sealed, &key, &h, rev(2)).await.unwrap_err();
    assert!(
        matches!(err, SealError::Authentication { segment: 3, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn an_older_revision_presented_as_newer_fails() {
    let (key, h, _, sealed) = sample().await;
    let err = open_bytes(&sealed, &key, &h, rev(3)).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("is revision 2, expected revision 3"),
        "{err}"
    );
    // Rewriting the header's revision does not help: the key and AAD come from the expected
    // revision.
    let mut forged = sealed.clone();
    forged[14..22].copy_from_slice(&3u64.to_be_bytes());
    let err = open_bytes(&forged, &key, &h, rev(3)).await.unwrap_err();
    assert!(
        matches!(err, SealError::Authentication { segment: 0, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn another_homes_object_or_key_fails() {
    let (key, h, _, sealed) = sample().await;
    // Opened with another home's data key.
    let err = open_bytes(&sealed, &DataKey::generate(), &h, rev(2))
        .await
        .unwrap_err();
    assert!(
        matches!(err, SealError::Authentication { segment: 0, .. }),
        "{err}"
    );
    // Presented as another home's checkpoint (same length id, header rewritten too).
    let other = home("bot-2");
    let err = open_bytes(&sealed, &key, &other, rev(2)).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("belongs to home \"bot-1\", expected home bot-2"),
        "{err}"
    );
    let mut forged = sealed.clone();
    let id_at = HEADER_FIXED_LEN;
    forged[id_at..id_at + 5].copy_from_slice(b"bot-2");
    let err = open_bytes(&forged, &key, &other, rev(2)).await.unwrap_err();
    assert!(
        matches!(err, SealError::Authentication { segment: 0, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn not_a_sealed_archive() {
    let key = DataKey::generate();
    let h = home("x");
    let err = open_bytes(&noise(500, 3), &key, &h, rev(1))
        .await
        .unwrap_err();
    assert!(matches!(err, SealError::BadMagic), "{err}");
}

#[test]
fn data_keys_wrap_and_unwrap_for_their_home_only() {
    let content = ContentKey::generate();
    let h = home("team-w1");
    let data = DataKey::generate();
    let wrapped = wrap_data_key(&content, &h, &data);
    assert_eq!(wrapped.as_bytes().len(), WRAPPED_LEN);
    assert_eq!(unwrap_data_key(&content, &h, &wrapped).unwrap(), data);
    let err = unwrap_data_key(&ContentKey::generate(), &h, &wrapped).unwrap_err();
    assert!(err.to_string().contains("does not unwrap"), "{err}");
    let err = unwrap_data_key(&content, &home("team-w2"), &wrapped).unwrap_err();
    assert!(matches!(err, SealError::Unwrap { .. }), "{err}");
    let mut bad = wrapped.as_bytes().to_vec();
    bad[20] ^= 1;
    assert!(unwrap_data_key(&content, &h, &WrappedKey::from_bytes(bad)).is_err());
    let err = unwrap_data_key(&content, &h, &WrappedKey::from_bytes(vec![1, 2])).unwrap_err();
    assert!(matches!(err, SealError::BadWrappedKey { .. }), "{err}");
    assert_eq!(format!("{data:?}"), "Key256(***)");
}

#[tokio::test]
async fn plaintext_len_follows_from_the_sealed_length() {
    let key = DataKey::generate();
    let h = home("h-0123456789abcdef");
    for len in [
        0,
        1,
        SEGMENT_SIZE - 1,
        SEGMENT_SIZE,
        SEGMENT_SIZE + 1,
        2 * SEGMENT_SIZE,
        3 * SEGMENT_SIZE + 5,
    ] {
        let sealed = seal_bytes(&noise(len, 7), &key, &h, rev(3)).await;
        assert_eq!(
            plaintext_len(sealed.len() as u64, &h),
            Some(len as u64),
            "{len}"
        );
    }
    assert_eq!(plaintext_len(header_len(&h) as u64 - 1, &h), None);
}

/// The sealed format is plain AES-256-GCM as FORMAT.md describes it: an independent
/// implementation (the RustCrypto `aes-gcm` crate), given only the documented key derivation,
/// nonce and AAD, opens what the sealer wrote, and the wrapped data key too.
#[tokio::test]
async fn an_independent_aes_gcm_opens_the_documented_format() {
    use aes_gcm::aead::{Aead, KeyInit, Payload};
    use aes_gcm::{Aes256Gcm, Nonce as GcmNonce};
    use hkdf::Hkdf;
    use sha2::Sha256;

    let key = DataKey::generate();
    let h = home("team-format");
    let r = rev(7);
    let plain = noise(SEGMENT_SIZE + 1000, 3);
    let sealed = seal_bytes(&plain, &key, &h, r).await;
    let hl = header_len(&h);
    let header = &sealed[..hl];
    assert_eq!(&header[..8], b"RKZHSEAL");
    assert_eq!(&header[14..22], &7u64.to_be_bytes());
    let salt = &header[22..54];
    assert_eq!(usize::from(header[54]), h.as_str().len());

    let mut info = b"rakazo home segment key v1\0".to_vec();
    info.extend_from_slice(&7u64.to_be_bytes());
    info.extend_from_slice(h.as_str().as_bytes());
    let mut seg_key = [0u8; 32];
    Hkdf::<Sha256>::new(Some(salt), key.as_bytes())
        .expand(&info, &mut seg_key)
        .unwrap();
    let cipher = Aes256Gcm::new((&seg_key).into());
    let segments = [
        (0u64, &sealed[hl..hl + SEG], false),
        (1u64, &sealed[hl + SEG..], true),
    ];
    let mut opened = Vec::new();
    for (i, body, last) in segments {
        let mut nonce = [0u8; 12];
        nonce[4..].copy_from_slice(&i.to_be_bytes());
        let mut aad = header.to_vec();
        aad.extend_from_slice(&i.to_be_bytes());
        aad.push(u8::from(last));
        let msg = Payload {
            msg: body,
            aad: &aad,
        };
        opened.extend(cipher.decrypt(GcmNonce::from_slice(&nonce), msg).unwrap());
    }
    assert_eq!(opened, plain);

    let content = ContentKey::generate();
    let wrapped = wrap_data_key(&content, &h, &key);
    let w = wrapped.as_bytes();
    assert_eq!((w.len(), w[0]), (WRAPPED_LEN, 1));
    let mut aad = b"rakazo home data key v1\0".to_vec();
    aad.extend_from_slice(h.as_str().as_bytes());
    let unwrapped = Aes256Gcm::new(content.as_bytes().into())
        .decrypt(
            GcmNonce::from_slice(&w[1..13]),
            Payload {
                msg: &w[13..],
                aad: &aad,
            },
        )
        .unwrap();
    assert_eq!(unwrapped, key.as_bytes());
}
