//! TLS identities of the control plane, and the privacy of its secret files.
//!
//! The tunnel: on first start the control plane creates a self-signed certificate in its data
//! dir (`tunnel-cert.pem`, `tunnel-key.pem`, the key 0600) unless one is configured. Guests are
//! handed the SHA-256 fingerprint of the certificate's DER at provisioning and accept no other;
//! no CA is involved. This module also builds the QUIC server configuration around it.
//!
//! The API listener (optional, `--tls-cert`/`--tls-key`): [`ApiTls`] loads a PEM chain and key
//! the operator provides; the key must be private. [`check_private_file`] is the one check of
//! every secret file at start.

use anyhow::{Context, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

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
            let (cert_pem, key_pem) =
                self_signed(&["rakazo-control-plane"]).context("generate tunnel certificate")?;
            write_private(key_path, key_pem.as_bytes())?;
            std::fs::write(cert_path, cert_pem)
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

    /// QUIC server configuration: TLS 1.3 on ring, our ALPN, and the tunnel's transport
    /// (`carrier::quic`: idle timeout and keepalives, flow-control windows, path MTU discovery).
    pub fn server_config(&self) -> Result<quinn::ServerConfig> {
        let mut config = self.server_config_with(ALPN)?;
        // Guests open exactly one stream (the control stream); operations are ours to open.
        config.transport_config(Arc::new(transport_config(1)));
        Ok(config)
    }

    /// A QUIC server configuration with this identity and `alpn` (the tunnel's, or the peer
    /// link's between replicas); the caller sets its transport.
    pub fn server_config_with(&self, alpn: &[u8]) -> Result<quinn::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .context("tls 1.3 with ring")?
            .with_no_client_auth()
            .with_single_cert(vec![self.cert.clone()], self.key.clone_key())
            .context("tunnel certificate and key do not match")?;
        tls.alpn_protocols = vec![alpn.to_vec()];
        let quic = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
            .context("quic server tls config")?;
        Ok(quinn::ServerConfig::with_crypto(Arc::new(quic)))
    }
}

/// The tunnel's transport on the control plane's end: `carrier::quic`'s, which the guest's end
/// shares, with `incoming_bidi` streams the peer may open, and no keep-alives of its own. The
/// guest sends them (it must: they hold a NAT's binding open), and each one with its
/// acknowledgement keeps both ends' idle timers fresh, so pings from this end too would double
/// the packets of every quiet tunnel for nothing: with a thousand guests, a thousand packets a
/// second to decrypt and answer (docs/faults.md#scale).
pub fn transport_config(incoming_bidi: u32) -> quinn::TransportConfig {
    let mut t = carrier::quic::transport_config(incoming_bidi);
    t.keep_alive_interval(None);
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

/// A new self-signed certificate for `names` (DNS names or IP addresses): `(cert PEM, key PEM)`.
pub fn self_signed(names: &[&str]) -> Result<(String, String)> {
    let names = names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    let ck = rcgen::generate_simple_self_signed(names).context("generate a certificate")?;
    Ok((ck.cert.pem(), ck.signing_key.serialize_pem()))
}

/// Refuses a secret file that anyone but this process's user could read or change: its mode
/// must have no group or other bits and its owner must be our effective user. Named in the
/// error with its mode, since the fix is a `chmod`/`chown` by hand (and, if others could read
/// it, a new secret). A missing file is fine: it is created private.
pub fn check_private_file(path: &Path, what: &str) -> Result<()> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("read {} ({what})", path.display())),
    };
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        anyhow::bail!(
            "refusing to start: {} ({what}) has mode {mode:04o}, so other users can read it; \
             make it private (chmod 600 {}) and, since it may have been read, replace the secret",
            path.display(),
            path.display()
        );
    }
    let euid = nix::unistd::geteuid().as_raw();
    if meta.uid() != euid {
        anyhow::bail!(
            "refusing to start: {} ({what}) belongs to uid {}, not to uid {euid} that runs \
             the control plane",
            path.display(),
            meta.uid()
        );
    }
    Ok(())
}

/// The API listener's TLS: the operator's certificate chain and key (PEM), TLS 1.2 and 1.3 on
/// ring, HTTP/2 for clients that offer it in ALPN (browsers), HTTP/1.1 otherwise.
#[derive(Clone)]
pub struct ApiTls {
    pub config: Arc<rustls::ServerConfig>,
    /// SHA-256 of the leaf certificate's DER: the local CLI pins it (see `client::Trust`).
    pub fingerprint: String,
}

impl ApiTls {
    /// Loads `cert` and `key`; refuses a key file others can read.
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Self> {
        if !key_path.exists() {
            anyhow::bail!("TLS key {} does not exist", key_path.display());
        }
        check_private_file(key_path, "the API's TLS key")?;
        let chain = CertificateDer::pem_file_iter(cert_path)
            .with_context(|| format!("read TLS certificate {}", cert_path.display()))?
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("parse TLS certificate {}", cert_path.display()))?;
        let Some(leaf) = chain.first() else {
            anyhow::bail!("{} holds no PEM certificate", cert_path.display());
        };
        let fingerprint = fingerprint(leaf);
        let key = PrivateKeyDer::from_pem_file(key_path)
            .with_context(|| format!("read TLS key {}", key_path.display()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("tls with ring")?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .with_context(|| {
                format!(
                    "TLS certificate {} and key {} do not match",
                    cert_path.display(),
                    key_path.display()
                )
            })?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self {
            config: Arc::new(config),
            fingerprint,
        })
    }
}

/// What a client of ours says when the server's certificate is not the pinned one.
pub const PIN_MISMATCH: &str =
    "the server's certificate is not the one pinned (the data dir's, or the cluster's)";
