//! The one server certificate a client trusts: pinned by the SHA-256 of its DER. No CA and no
//! host name is trusted; the handshake's signatures are still verified with the certificate's
//! key, so only the holder of that key passes. Used by the guest's tunnel client, the control
//! plane's peer client (replica to replica) and the CLI's HTTPS client.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// Accepts exactly one server certificate: the one whose DER hashes to the pinned SHA-256.
#[derive(Debug)]
pub struct PinnedCert {
    sha256: [u8; 32],
    provider: Arc<CryptoProvider>,
    mismatch: &'static str,
}

impl PinnedCert {
    /// Pins `sha256`; any other certificate fails the handshake with `mismatch` as the error
    /// (say which certificate was expected: the reader of that error has to find it).
    pub fn new(sha256: [u8; 32], provider: Arc<CryptoProvider>, mismatch: &'static str) -> Self {
        Self {
            sha256,
            provider,
            mismatch,
        }
    }

    /// Pins a fingerprint written as 64 hex digits (either case), as the control plane records
    /// and prints it; `None` when it is not one.
    pub fn from_hex(
        sha256: &str,
        provider: Arc<CryptoProvider>,
        mismatch: &'static str,
    ) -> Option<Self> {
        let sha256 = sha256.as_bytes();
        if sha256.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (byte, pair) in out.iter_mut().zip(sha256.chunks_exact(2)) {
            let digit = |c: u8| char::from(c).to_digit(16);
            *byte = u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).ok()?;
        }
        Some(Self::new(out, provider, mismatch))
    }
}

impl ServerCertVerifier for PinnedCert {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let got: [u8; 32] = Sha256::digest(end_entity.as_ref()).into();
        if got == self.sha256 {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(self.mismatch.into()))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider() -> Arc<CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    #[test]
    fn accepts_only_the_pinned_certificate() {
        let der = CertificateDer::from(vec![1u8, 2, 3]);
        let other = CertificateDer::from(vec![1u8, 2, 4]);
        let sha: [u8; 32] = Sha256::digest(der.as_ref()).into();
        let pin = PinnedCert::new(sha, provider(), "not the pinned one");
        let name = ServerName::try_from("example.invalid").unwrap();
        let verify = |cert: &CertificateDer<'_>| {
            pin.verify_server_cert(cert, &[], &name, &[], UnixTime::now())
        };
        assert!(verify(&der).is_ok());
        match verify(&other) {
            Err(rustls::Error::General(m)) => assert_eq!(m, "not the pinned one"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn hex_fingerprints_parse_in_either_case_and_nothing_else_does() {
        let sha: [u8; 32] = core::array::from_fn(|i| (i * 7 + 0xa0) as u8);
        let lower: String = sha.iter().map(|b| format!("{b:02x}")).collect();
        let parsed = |s: &str| PinnedCert::from_hex(s, provider(), "m").map(|p| p.sha256);
        assert_eq!(parsed(&lower), Some(sha));
        assert_eq!(parsed(&lower.to_ascii_uppercase()), Some(sha));
        assert_eq!(parsed(&lower[..62]), None);
        assert_eq!(parsed(&format!("{lower}00")), None);
        assert_eq!(parsed(&format!("{}zz", &lower[..62])), None);
        assert_eq!(parsed(&format!("{}+1", &lower[..62])), None);
    }
}
