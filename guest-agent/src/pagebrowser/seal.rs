//! Sealing fill text for the isolated world, so secrets never cross CDP in the clear.
//!
//! Every CDP message passes through the client library, which traces whole messages at trace
//! level; a saved login's password (or any text filled into a password field) must not appear
//! in any log line. The helper in the isolated world makes an ECDH P-256 key pair with WebCrypto
//! and sends its public key; [`seal`] answers with an ephemeral public key of its own and the text
//! XORed with a SHA-256 keystream of the shared secret (`SHA-256(secret || LABEL || block_be32)`
//! per 32-byte block). Both key pairs are single-use, so the keystream is never reused. A
//! passive reader of the CDP traffic (a trace log) sees only public keys and ciphertext. This is
//! confidentiality against logs, not authentication: the endpoint is our own isolated world over
//! our own loopback connection.
//!
//! It leaves the JavaScript half (`sealBegin` and `sealFill` in `page.js`) to the helper.

use rustls::crypto::ring::kx_group::SECP256R1;
use sha2::{Digest, Sha256};

/// Domain separation for the keystream; the helper uses the same label.
pub const LABEL: &str = "rakazo page fill v1";

/// A sealed text for the helper: our public key and the ciphertext, both hex.
pub struct Sealed {
    pub public_key: String,
    pub ciphertext: String,
}

/// Seals `text` for the holder of the private key behind `peer_public_hex` (an uncompressed
/// P-256 point, hex). Fails on a malformed peer key.
pub fn seal(peer_public_hex: &str, text: &str) -> Result<Sealed, String> {
    if peer_public_hex.len() != 130 {
        return Err("the page's key has the wrong length".to_owned());
    }
    let peer = hex::decode(peer_public_hex).map_err(|_| "the page's key is not hex".to_owned())?;
    let done = SECP256R1
        .start_and_complete(&peer)
        .map_err(|_| "the page's key is not a P-256 point".to_owned())?;
    let secret = done.secret.secret_bytes();
    let mut sealed = text.as_bytes().to_vec();
    xor_keystream(secret, &mut sealed);
    Ok(Sealed {
        public_key: hex::encode(&done.pub_key),
        ciphertext: hex::encode(sealed),
    })
}

/// XORs `data` with the keystream of `secret` (the same function seals and unseals).
fn xor_keystream(secret: &[u8], data: &mut [u8]) {
    for (block, chunk) in data.chunks_mut(32).enumerate() {
        let mut h = Sha256::new();
        h.update(secret);
        h.update(LABEL.as_bytes());
        // At most MAX_STEP_TEXT bytes, so the block index fits in 32 bits.
        h.update(u32::try_from(block).unwrap_or(u32::MAX).to_be_bytes());
        let stream = h.finalize();
        for (byte, key) in chunk.iter_mut().zip(stream.iter()) {
            *byte ^= key;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_with_the_private_key_can_unseal() {
        // The peer (the isolated world in production) is another rustls key exchange here.
        let peer = SECP256R1.start().unwrap();
        let text = "hunter2 — a long enough secret to need two keystream blocks, surely";
        let sealed = seal(&hex::encode(peer.pub_key()), text).unwrap();
        assert!(!sealed.ciphertext.contains(&hex::encode("hunter2")));
        let ours = hex::decode(&sealed.public_key).unwrap();
        let secret = peer.complete(&ours).unwrap();
        let mut data = hex::decode(&sealed.ciphertext).unwrap();
        xor_keystream(secret.secret_bytes(), &mut data);
        assert_eq!(String::from_utf8(data).unwrap(), text);
    }

    #[test]
    fn malformed_keys_are_refused() {
        assert!(seal("04", "x").is_err());
        assert!(seal(&"zz".repeat(65), "x").is_err());
        assert!(seal(&format!("04{}", "00".repeat(64)), "x").is_err());
    }
}
