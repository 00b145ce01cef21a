//! The Engine API over TCP with TLS, rustls on ring: the engine's certificate is checked against
//! the CA configured for that engine only (never the system's roots: an engine is ours, not a
//! public site), and we present a client certificate, which is how Docker authenticates remote
//! clients. bollard speaks through our own hyper client, so no second TLS stack is compiled.

use crate::ProviderError;
use bollard::{BollardRequest, Docker, API_DEFAULT_VERSION};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The PEM files of a TLS engine: the CA its certificate chains to, and our client certificate
/// and key (the key file must be private to its owner).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A client for the engine at `addr` (`host:port`); nothing is dialled yet. `timeout_secs` is
/// bollard's own per-request timeout.
pub(crate) fn client(
    addr: &str,
    files: &TlsFiles,
    connect_timeout: Duration,
    timeout_secs: u64,
) -> Result<Docker, ProviderError> {
    let config = client_config(files)?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(connect_timeout));
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .wrap_connector(http);
    let client = Client::builder(TokioExecutor::new()).build(https);
    Docker::connect_with_custom_transport(
        move |request: BollardRequest| {
            let client = client.clone();
            async move {
                client
                    .request(request)
                    .await
                    .map_err(bollard::errors::Error::from)
            }
        },
        Some(format!("https://{addr}")),
        timeout_secs,
        API_DEFAULT_VERSION,
    )
    .map_err(|e| ProviderError::BadSpec(format!("docker engine tcp://{addr}: {e}")))
}

fn bad(path: &Path, what: &str) -> ProviderError {
    ProviderError::BadSpec(format!("{}: {what}", path.display()))
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, ProviderError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(path, &format!("cannot read PEM certificates: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(path, &format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(bad(path, "holds no certificate"));
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, ProviderError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| bad(path, &format!("cannot read: {e}")))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(bad(
            path,
            "the client key is readable by others: chmod 600 it",
        ));
    }
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| bad(path, &format!("not a PEM private key: {e}")))
}

/// TLS 1.2 or 1.3 on ring, the engine's CA as the only root, our certificate and key.
fn client_config(files: &TlsFiles) -> Result<rustls::ClientConfig, ProviderError> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in certificates(&files.ca)? {
        roots
            .add(ca)
            .map_err(|e| bad(&files.ca, &format!("not a usable CA certificate: {e}")))?;
    }
    let chain = certificates(&files.cert)?;
    let key = private_key(&files.key)?;
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| ProviderError::BadSpec(format!("tls: {e}")))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| {
            bad(
                &files.key,
                &format!("does not match {}: {e}", files.cert.display()),
            )
        })
}
