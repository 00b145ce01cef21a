//! The tunnel's TLS identity: a certificate and key the guests pin by fingerprint.
//!
//! On first start the control plane creates a self-signed certificate in its data dir
//! (`tunnel-cert.pem`, `tunnel-key.pem`, the key 0600) unless one is configured. Guests are
//! handed the SHA-256 fingerprint of the certificate's DER at provisioning and accept no other;
//! no CA is involved. This module also builds the QUIC server configuration around it.

use anyhow::{Context, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// ALPN protocol id of the tunnel.
pub const ALPN: &[u8] = b"rakazo-tunnel";

/// The certificate and key the tunnel serves.
pub struct TunnelIdentity {
    pub cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
}

impl TunnelIdentity {
    /// Loads `cert`/`key` PEM files, or creates a self-signed pair there if neither exists.
    pub fn load_or_create(cert_path: &Path, key_path: &Path) -> Result<Self> {
        if !cert_path.exists() && !key_path.exists() {
            let ck = rcgen::generate_simple_self_signed(vec!["rakazo-control-plane".to_string()])
                .context("generate tunnel certificate")?;
            write_private(key_path, ck.signing_key.serialize_pem().as_bytes())?;
            std::fs::write(cert_path, ck.cert.pem())
                .with_context(|| format!("write {}", cert_path.display()))?;
        }
        let cert = CertificateDer::from_pem_file(cert_path)
            .with_context(|| format!("read tunnel certificate {}", cert_path.display()))?;
        let key = PrivateKeyDer::from_pem_file(key_path)
            .with_context(|| format!("read tunnel key {}", key_path.display()))?;
        Ok(Self { cert, key })
    }

    /// SHA-256 of the certificate DER, lowercase hex: what guests pin.
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.cert)
    }

    /// QUIC server configuration: TLS 1.3 on ring, our ALPN, keepalive-friendly idle timeout
    /// and flow-control windows large enough for bulk transfers on fast links.
    pub fn server_config(&self) -> Result<quinn::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .context("tls 1.3 with ring")?
            .with_no_client_auth()
            .with_single_cert(vec![self.cert.clone()], self.key.clone_key())
            .context("tunnel certificate and key do not match")?;
        tls.alpn_protocols = vec![ALPN.to_vec()];
        let quic = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
            .context("quic server tls config")?;
        let mut config = quinn::ServerConfig::with_crypto(Arc::new(quic));
        // Guests open exactly one stream (the control stream); operations are ours to open.
        config.transport_config(Arc::new(transport_config(1)));
        Ok(config)
    }
}

/// Transport settings; the guest mirrors them with its own incoming-stream limit.
pub fn transport_config(incoming_bidi: u32) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    // Both ends notice a vanished peer within 6 s; keepalives every 2 s keep quiet tunnels open.
    t.max_idle_timeout(Some(quinn::IdleTimeout::from(quinn::VarInt::from_u32(
        6_000,
    ))));
    t.keep_alive_interval(Some(Duration::from_secs(2)));
    t.max_concurrent_bidi_streams(incoming_bidi.into());
    t.max_concurrent_uni_streams(0u32.into());
    t.stream_receive_window((16u32 << 20).into());
    t.receive_window((64u32 << 20).into());
    t.send_window(64 << 20);
    t
}

/// SHA-256 fingerprint of a DER certificate, lowercase hex.
pub fn fingerprint(cert: &CertificateDer<'_>) -> String {
    hex::encode(Sha256::digest(cert.as_ref()))
}

/// Writes a file readable by its owner only, creating it with mode 0600 from the start.
pub fn write_private(path: &Path, contents: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("create {}", path.display()))?;
    f.write_all(contents)
        .with_context(|| format!("write {}", path.display()))?;
    f.sync_all()
        .with_context(|| format!("sync {}", path.display()))?;
    Ok(())
}
