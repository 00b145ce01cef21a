//! A small HTTP client for the API, used by the CLI (and usable by tests and scripts).
//!
//! It knows the base URL and the bearer token, turns error responses into [`ClientError`] with
//! the server's code and message, and can stream request and response bodies. It speaks
//! `http://` and `https://`; which server certificates it accepts is a [`Trust`].

use crate::schema::error::ErrorBody;
use bytes::Bytes;
use carrier::pin::PinnedCert;
use gateway_proto::Secret;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{header, Method, Request, Response, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Request bodies the client sends.
pub type ReqBody = BoxBody<Bytes, std::io::Error>;

/// A failed API call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{message} ({code}, HTTP {status})")]
    Api {
        status: StatusCode,
        code: String,
        message: String,
        uncertain: bool,
    },
    #[error("cannot reach the control plane at {url}")]
    Connect {
        url: String,
        #[source]
        source: hyper_util::client::legacy::Error,
    },
    #[error("bad response from the control plane: {0}")]
    BadResponse(String),
    #[error("invalid request: {0}")]
    Request(String),
    #[error("TLS setup: {0}")]
    Tls(String),
}

impl From<crate::route::RouteError> for ClientError {
    /// A request the CLI refuses before sending it, as the server would refuse it.
    fn from(e: crate::route::RouteError) -> Self {
        ClientError::Api {
            status: StatusCode::from_u16(e.code.status()).unwrap_or(StatusCode::BAD_REQUEST),
            code: e.code.as_str().to_string(),
            message: e.message,
            uncertain: false,
        }
    }
}

/// Which certificates an `https://` server may present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// The system's CA certificates (`/etc/ssl/certs`, or `SSL_CERT_FILE`), names checked.
    System,
    /// The CA (or self-signed) certificates in this PEM file, names checked.
    CaFile(PathBuf),
    /// Exactly the certificate with this SHA-256 (hex, of its DER), whatever its names: the
    /// local server's, as its data dir records it.
    Pinned(String),
}

/// How long a pooled connection may sit idle before the client drops it: below the server's
/// shortest header timeout that makes sense, so the client lets go of an idle connection
/// before the server closes it under a request.
const POOL_IDLE: Duration = Duration::from_secs(5);

/// An API client.
#[derive(Clone)]
pub struct Client {
    base: String,
    token: Secret,
    http: HyperClient<HttpsConnector<HttpConnector>, ReqBody>,
}

pub fn full_body(bytes: impl Into<Bytes>) -> ReqBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

impl Client {
    /// `base` is like `http://127.0.0.1:7090`; an `https://` base is checked against the
    /// system's CA certificates.
    pub fn new(base: impl Into<String>, token: Secret) -> Self {
        let base = base.into();
        // Only an https base needs the system's certificates (reading them costs a few ms);
        // without any, every https request fails with the TLS error that says so.
        let tls = if base.starts_with("https:") {
            tls_config(&Trust::System).unwrap_or_else(|_| empty_roots_config())
        } else {
            empty_roots_config()
        };
        Self::build(base, token, tls)
    }

    /// A client that accepts the server certificates `trust` allows.
    pub fn with_trust(
        base: impl Into<String>,
        token: Secret,
        trust: &Trust,
    ) -> Result<Self, ClientError> {
        Ok(Self::build(base.into(), token, tls_config(trust)?))
    }

    /// The CLI's client for `base`: trusts `ca_file` when given; else, when `base` is the
    /// address the local server in `data_dir` recorded, exactly that server's certificate
    /// (as the CLI finds its address and token there); else the system's CA certificates.
    pub fn for_cli(
        base: impl Into<String>,
        token: Secret,
        ca_file: Option<&Path>,
        data_dir: &Path,
    ) -> Result<Self, ClientError> {
        let base = base.into();
        let trust = match ca_file {
            Some(f) => Trust::CaFile(f.to_path_buf()),
            None => local_pin(&base, data_dir).unwrap_or(Trust::System),
        };
        if !base.starts_with("https:") {
            return Ok(Self::new(base, token));
        }
        Self::with_trust(base, token, &trust)
    }

    fn build(base: String, token: Secret, tls: rustls::ClientConfig) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let http = HyperClient::builder(hyper_util::rt::TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE)
            .build(https);
        Self {
            base: base.trim_end_matches('/').to_string(),
            token,
            http,
        }
    }

    /// Sends a request; non-2xx responses become [`ClientError::Api`].
    pub async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        content_type: Option<&str>,
        content_length: Option<u64>,
        body: ReqBody,
    ) -> Result<Response<Incoming>, ClientError> {
        let url = format!("{}{}", self.base, path_and_query);
        let mut req = Request::builder().method(method).uri(&url).header(
            header::AUTHORIZATION,
            format!("Bearer {}", self.token.expose()),
        );
        if let Some(ct) = content_type {
            req = req.header(header::CONTENT_TYPE, ct);
        }
        if let Some(len) = content_length {
            req = req.header(header::CONTENT_LENGTH, len);
        }
        let req = req
            .body(body)
            .map_err(|e| ClientError::Request(e.to_string()))?;
        let resp = self
            .http
            .request(req)
            .await
            .map_err(|source| ClientError::Connect {
                url: self.base.clone(),
                source,
            })?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status();
        let bytes = whole_body(resp).await?;
        let Ok(ErrorBody { error }) = serde_json::from_slice(&bytes) else {
            // Not our error shape: something else answered (a proxy, or --url pointing at
            // another server).
            return Err(ClientError::Api {
                status,
                code: "not_rakazo".into(),
                message: format!(
                    "{} answered without a Rakazo error body: is it the control plane's URL?",
                    self.base
                ),
                uncertain: false,
            });
        };
        Err(ClientError::Api {
            status,
            code: error.code,
            message: error.message,
            uncertain: error.uncertain,
        })
    }

    /// A request with the JSON body `body`, answered with JSON (`R = ()` for no answer body).
    pub async fn call<B: Serialize + ?Sized, R: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &B,
    ) -> Result<R, ClientError> {
        let bytes = serde_json::to_vec(body).map_err(|e| ClientError::Request(e.to_string()))?;
        let resp = self
            .send(
                method,
                path,
                Some("application/json"),
                None,
                full_body(bytes),
            )
            .await?;
        json_answer(resp).await
    }

    /// A request without a body, answered with JSON (`R = ()` for no answer body).
    pub async fn fetch<R: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
    ) -> Result<R, ClientError> {
        let resp = self
            .send(method, path, None, None, full_body(Bytes::new()))
            .await?;
        json_answer(resp).await
    }

    /// A request with an optional untyped JSON body and an untyped JSON answer (`null` when the
    /// answer has no body), for tests and scripts; the CLI uses [`Client::call`] and
    /// [`Client::fetch`] with the `schema` types.
    pub async fn json(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<serde_json::Value, ClientError> {
        match body {
            Some(v) => self.call(method, path, v).await,
            None => self.fetch(method, path).await,
        }
    }
}

/// Reads a successful answer's JSON body as `R`; an empty body reads as `null`.
pub async fn json_answer<R: DeserializeOwned>(resp: Response<Incoming>) -> Result<R, ClientError> {
    let bytes = whole_body(resp).await?;
    let bytes: &[u8] = if bytes.is_empty() { b"null" } else { &bytes };
    serde_json::from_slice(bytes).map_err(|e| ClientError::BadResponse(e.to_string()))
}

/// An answer's whole body.
async fn whole_body(resp: Response<Incoming>) -> Result<Bytes, ClientError> {
    let body = resp.into_body().collect().await;
    Ok(body
        .map_err(|e| ClientError::BadResponse(e.to_string()))?
        .to_bytes())
}

/// Percent-encodes a query value.
pub fn q(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// The pin of the local server's certificate, when `base` is the https address its data dir
/// records (`addresses.json`: `http`, `http_cert_sha256`).
fn local_pin(base: &str, data_dir: &Path) -> Option<Trust> {
    let text = std::fs::read_to_string(data_dir.join(ADDRESSES_FILE)).ok()?;
    let recorded: LocalAddresses = serde_json::from_str(&text).ok()?;
    if recorded.http?.trim_end_matches('/') != base.trim_end_matches('/') {
        return None;
    }
    recorded.http_cert_sha256.map(Trust::Pinned)
}

/// The name of [`LocalAddresses`]' file in a local server's data dir.
pub const ADDRESSES_FILE: &str = "addresses.json";

/// A local server's `addresses.json`: what `crate::serve` listens on, written once it is
/// bound (so port 0 works); the CLI reads it to find the API and the certificate to pin.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct LocalAddresses {
    /// The API's base URL.
    #[serde(default)]
    pub http: Option<String>,
    /// The tunnel's UDP address and the TCP carrier's.
    #[serde(default)]
    pub tunnel: Option<String>,
    #[serde(default)]
    pub tunnel_tcp: Option<String>,
    /// The SHA-256 of the tunnel's certificate, which guests pin.
    #[serde(default)]
    pub tunnel_cert_sha256: Option<String>,
    /// The SHA-256 of the API's TLS certificate, when it speaks TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_cert_sha256: Option<String>,
    /// The plain metrics listener (`--metrics-addr`), when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_config(trust: &Trust) -> Result<rustls::ClientConfig, ClientError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Tls(e.to_string()))?;
    let roots = match trust {
        Trust::Pinned(sha256) => {
            let pin = PinnedCert::from_hex(sha256, provider(), crate::tls::PIN_MISMATCH)
                .ok_or_else(|| {
                    ClientError::Tls(format!(
                        "the pinned certificate fingerprint {sha256:?} is not 64 hex digits"
                    ))
                })?;
            return Ok(builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(pin))
                .with_no_client_auth());
        }
        Trust::CaFile(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| ClientError::Tls(format!("read CA file {}: {e}", path.display())))?;
            let mut roots = rustls::RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(ClientError::Tls(format!(
                    "CA file {} holds no usable PEM certificate",
                    path.display()
                )));
            }
            roots
        }
        Trust::System => {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = rustls::RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(ClientError::Tls(
                    "no system CA certificates found; pass --ca-file (RAKAZO_CA_FILE)".into(),
                ));
            }
            roots
        }
    };
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

/// A client configuration that trusts nothing: every https request fails with a clear TLS
/// error instead of the client failing to exist.
fn empty_roots_config() -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map(|b| {
            b.with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth()
        })
        .unwrap_or_else(|_| {
            rustls::ClientConfig::builder()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth()
        })
}
