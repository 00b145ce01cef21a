//! What the guest-agent integration tests share: a fake control plane's QUIC endpoint with a
//! self-signed certificate the guest pins.

use anyhow::Result;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// A self-signed certificate for `rakazo-control-plane` and its SHA-256 fingerprint (hex).
pub fn identity() -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>, String)> {
    let ck = rcgen::generate_simple_self_signed(vec!["rakazo-control-plane".into()])?;
    let cert = ck.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
    let fingerprint = hex::encode(Sha256::digest(cert.as_ref()));
    Ok((cert, key, fingerprint))
}

/// A quinn server on 127.0.0.1:0 speaking TLS 1.3 (ring) with the tunnel's ALPN.
pub fn server(
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
) -> Result<quinn::Endpoint> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)?;
    tls.alpn_protocols = vec![guest_agent::tunnel::ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicServerConfig::try_from(tls)?;
    let config = quinn::ServerConfig::with_crypto(Arc::new(quic));
    Ok(quinn::Endpoint::server(config, "127.0.0.1:0".parse()?)?)
}
