//! Secrets that never enter the computer: the computer holds a placeholder, the gateway puts
//! the real value into requests to that secret's domains only.
//!
//! This module owns the per-computer certificate authority ([`ComputerCa`], whose certificate
//! the computer's trust stores hold), the secrets ([`Secret`]: name, domains, placeholder, value)
//! and the interception of one connection ([`intercept`]): a TLS server towards the computer
//! with a leaf certificate for the name (issued on demand, cached), a TLS client towards the
//! real server verifying it against [`SecretSet`]'s roots, and HTTP/1.1 between them, in which
//! every request header value containing the placeholder of a secret whose domains match the
//! name gets the real value instead, and a secret with a header template
//! ([`Secret::with_header`], `Authorization: Bearer {}`) sets that header. Only connections whose name is a secret's domain are
//! intercepted (the proxy asks [`SecretSet::intercepts`]); all others are passed through
//! untouched, so a placeholder sent anywhere else arrives as the placeholder.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::gateway::Config;
use crate::meter::Metered;
use crate::policy::{normalize_name, DomainPattern};
use crate::registry::Computer;
use crate::ComputerId;

/// At most this many leaf certificates are cached per computer.
pub const MAX_LEAVES: usize = 1024;
/// At most this many secrets per computer.
pub const MAX_SECRETS: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("invalid secret name {0:?}: 1 to 64 of a-z, 0-9, `_` and `-`")]
    Name(String),
    #[error("invalid secret domain {0:?}: {1}")]
    Domain(String, String),
    #[error("a secret needs at least one domain")]
    NoDomain,
    #[error("a secret's value must be a valid header value (no control characters)")]
    Value,
    #[error("invalid header template {0:?}: `Name: value` with `{{}}` where the value goes")]
    Header(String),
    #[error("too many secrets (at most {MAX_SECRETS})")]
    TooMany,
    #[error("certificate: {0}")]
    Certificate(String),
    #[error("TLS: {0}")]
    Tls(String),
}

/// One secret. Its `Debug` never shows the value.
#[derive(Clone)]
pub struct Secret {
    name: String,
    domains: Vec<DomainPattern>,
    placeholder: String,
    value: HeaderValue,
    /// `--header "Authorization: Bearer {}"`: this header is set, with the value in place of
    /// `{}`, on every request to the secret's domains (the client need not send the placeholder).
    header: Option<(HeaderName, String)>,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("domains", &self.domains)
            .field("placeholder", &self.placeholder)
            .field("header", &self.header)
            .field("value", &"<redacted>")
            .finish()
    }
}

/// A new placeholder for secret `name`: `rakazo-secret-<name>-<32 random hex digits>`.
pub fn new_placeholder(name: &str) -> String {
    use ring::rand::SecureRandom;
    let mut random = [0u8; 16];
    // SystemRandom reads the OS's generator; a failure leaves zeros, which is only less secret
    // (the placeholder is not a credential).
    let _ = ring::rand::SystemRandom::new().fill(&mut random);
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    format!("rakazo-secret-{name}-{hex}")
}

impl Secret {
    /// A secret for `domains` (names or `*.` wildcards) with a fresh placeholder.
    pub fn new(name: &str, domains: &[&str], value: &str) -> Result<Secret, SecretError> {
        Secret::with_placeholder(name, domains, &new_placeholder(name), value)
    }

    /// A secret with a placeholder chosen before (the control plane keeps it stable).
    pub fn with_placeholder(
        name: &str,
        domains: &[&str],
        placeholder: &str,
        value: &str,
    ) -> Result<Secret, SecretError> {
        let valid_name = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !valid_name {
            return Err(SecretError::Name(name.chars().take(80).collect()));
        }
        if placeholder.len() < 16 || HeaderValue::from_str(placeholder).is_err() {
            return Err(SecretError::Name(placeholder.chars().take(80).collect()));
        }
        if domains.is_empty() {
            return Err(SecretError::NoDomain);
        }
        let domains = domains
            .iter()
            .map(|d| {
                d.parse()
                    .map_err(|e| SecretError::Domain(d.chars().take(260).collect(), e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let value = HeaderValue::from_str(value).map_err(|_| SecretError::Value)?;
        Ok(Secret {
            name: name.into(),
            domains,
            placeholder: placeholder.into(),
            value,
            header: None,
        })
    }

    /// Sets the header template (`Name: text with {} for the value`): requests to the secret's
    /// domains get that header, whatever they sent in it.
    pub fn with_header(mut self, template: &str) -> Result<Secret, SecretError> {
        let (name, value) = parse_header_template(template)?;
        // The filled-in value must still be a valid header value.
        HeaderValue::from_bytes(
            value
                .replace(
                    "{}",
                    std::str::from_utf8(self.value.as_bytes()).unwrap_or(""),
                )
                .as_bytes(),
        )
        .map_err(|_| SecretError::Value)?;
        self.header = Some((name, value));
        Ok(self)
    }

    /// The header template as given (`Name: …{}…`), if any.
    pub fn header_template(&self) -> Option<String> {
        self.header
            .as_ref()
            .map(|(name, value)| format!("{}: {value}", name.as_str()))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the computer is given instead of the value.
    pub fn placeholder(&self) -> &str {
        &self.placeholder
    }

    /// Is `name` (normalized) one of this secret's domains?
    pub fn applies_to(&self, name: &str) -> bool {
        self.domains.iter().any(|d| d.matches(name))
    }
}

/// Checks a header template `Name: value with {}` (exactly one `{}`, at most 1 KiB).
pub fn parse_header_template(template: &str) -> Result<(HeaderName, String), SecretError> {
    let bad = || SecretError::Header(template.chars().take(80).collect());
    if template.len() > 1024 {
        return Err(bad());
    }
    let (name, value) = template.split_once(':').ok_or_else(bad)?;
    let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| bad())?;
    let value = value.trim().to_string();
    if value.matches("{}").count() != 1 || HeaderValue::from_str(&value).is_err() {
        return Err(bad());
    }
    // Hop-by-hop and framing headers are the gateway's, never a secret's.
    let reserved = [
        "host",
        "connection",
        "content-length",
        "transfer-encoding",
        "upgrade",
        "te",
    ];
    if reserved.contains(&name.as_str()) {
        return Err(bad());
    }
    Ok((name, value))
}

/// A computer's certificate authority: the computer trusts it, the gateway issues leaves for
/// the secrets' domains with it. Its key never leaves the gateway.
pub struct ComputerCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    leaves: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl ComputerCa {
    /// A new CA (ECDSA P-256) named after the computer, allowed to sign leaves only.
    pub fn generate(computer: &ComputerId) -> Result<ComputerCa, SecretError> {
        let cert_err = |e: rcgen::Error| SecretError::Certificate(e.to_string());
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(cert_err)?;
        params
            .distinguished_name
            .push(DnType::CommonName, format!("Rakazo egress CA {computer}"));
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().map_err(cert_err)?;
        let issuer = CertifiedIssuer::self_signed(params, key).map_err(cert_err)?;
        Ok(ComputerCa {
            issuer,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA certificate, PEM, for the computer's trust stores.
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// A leaf certificate and key for `name`, issued on first use and cached.
    pub fn leaf(&self, name: &str) -> Result<Arc<CertifiedKey>, SecretError> {
        let mut leaves = self.leaves.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(leaf) = leaves.get(name) {
            return Ok(leaf.clone());
        }
        let cert_err = |e: rcgen::Error| SecretError::Certificate(e.to_string());
        let mut params = CertificateParams::new(vec![name.to_string()]).map_err(cert_err)?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().map_err(cert_err)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(cert_err)?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signing = rustls::crypto::ring::sign::any_supported_type(&der)
            .map_err(|e| SecretError::Tls(e.to_string()))?;
        let leaf = Arc::new(CertifiedKey::new(
            vec![cert.der().clone(), self.cert_der()],
            signing,
        ));
        if leaves.len() >= MAX_LEAVES {
            leaves.clear();
        }
        leaves.insert(name.to_string(), leaf.clone());
        Ok(leaf)
    }
}

/// A computer's secrets with its CA and the roots real servers are verified against.
pub struct SecretSet {
    ca: Arc<ComputerCa>,
    secrets: Vec<Secret>,
    upstream: Arc<ClientConfig>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl SecretSet {
    /// `roots`: what the real servers' certificates must chain to (the public web PKI in
    /// production, a test CA in tests).
    pub fn new(
        ca: Arc<ComputerCa>,
        secrets: Vec<Secret>,
        roots: RootCertStore,
    ) -> Result<SecretSet, SecretError> {
        if secrets.len() > MAX_SECRETS {
            return Err(SecretError::TooMany);
        }
        let mut upstream = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| SecretError::Tls(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        upstream.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(SecretSet {
            ca,
            secrets,
            upstream: Arc::new(upstream),
        })
    }

    pub fn ca(&self) -> &Arc<ComputerCa> {
        &self.ca
    }

    /// Is a TLS connection to `name` intercepted (some secret applies to it)?
    pub fn intercepts(&self, name: &str) -> bool {
        normalize_name(name).is_some_and(|n| self.secrets.iter().any(|s| s.applies_to(&n)))
    }

    /// Replaces, in every header value, the placeholders of the secrets that apply to `name`.
    /// Returns how many values changed.
    pub fn substitute(&self, name: &str, headers: &mut hyper::HeaderMap) -> usize {
        let Some(name) = normalize_name(name) else {
            return 0;
        };
        let secrets: Vec<&Secret> = self
            .secrets
            .iter()
            .filter(|s| s.applies_to(&name))
            .collect();
        let mut changed = 0;
        // Templated headers are set outright.
        for secret in &secrets {
            let Some((name, template)) = &secret.header else {
                continue;
            };
            let mut filled = Vec::with_capacity(template.len() + secret.value.len());
            let (before, after) = template.split_once("{}").unwrap_or((template, ""));
            filled.extend_from_slice(before.as_bytes());
            filled.extend_from_slice(secret.value.as_bytes());
            filled.extend_from_slice(after.as_bytes());
            if let Ok(mut v) = HeaderValue::from_bytes(&filled) {
                v.set_sensitive(true);
                headers.insert(name.clone(), v);
                changed += 1;
            }
        }
        for value in headers.values_mut() {
            let bytes = value.as_bytes();
            let mut out: Option<Vec<u8>> = None;
            for secret in &secrets {
                let current = out.as_deref().unwrap_or(bytes);
                if let Some(replaced) = replace(
                    current,
                    secret.placeholder.as_bytes(),
                    secret.value.as_bytes(),
                ) {
                    out = Some(replaced);
                }
            }
            if let Some(mut new) = out.and_then(|b| HeaderValue::from_bytes(&b).ok()) {
                new.set_sensitive(true);
                *value = new;
                changed += 1;
            }
        }
        changed
    }
}

/// `haystack` with every `needle` replaced, if there was one.
fn replace(haystack: &[u8], needle: &[u8], with: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = haystack;
    let mut found = false;
    while let Some(at) = rest.windows(needle.len()).position(|w| w == needle) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(with);
        rest = &rest[at + needle.len()..];
        found = true;
    }
    out.extend_from_slice(rest);
    found.then_some(out)
}

#[derive(Debug)]
struct Leaf(Arc<CertifiedKey>);

impl ResolvesServerCert for Leaf {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// A stream whose first reads return `head` (bytes already read from it).
pub(crate) struct Rewind<S> {
    head: Vec<u8>,
    pos: usize,
    inner: S,
}

impl<S> Rewind<S> {
    pub fn new(head: Vec<u8>, inner: S) -> Rewind<S> {
        Rewind {
            head,
            pos: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pos < this.head.len() {
            let n = (this.head.len() - this.pos).min(buf.remaining());
            buf.put_slice(&this.head[this.pos..this.pos + n]);
            this.pos += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, data)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

type Body = BoxBody<Bytes, hyper::Error>;

/// Terminates the computer's TLS connection to `name` (its first bytes `head` already read),
/// opens a verified one to the real server over `upstream`, and relays HTTP/1.1 requests between
/// them with the secrets substituted (handshakes within `connect_timeout`, the whole closed
/// after `idle_timeout` without a byte). Returns the bytes (up, down) on the upstream side.
pub(crate) async fn intercept<C>(
    set: Arc<SecretSet>,
    name: String,
    client: C,
    head: Vec<u8>,
    upstream: tokio::net::TcpStream,
    computer: Arc<Computer>,
    config: &Config,
) -> Result<(u64, u64), SecretError>
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let tls = |e: io::Error| SecretError::Tls(e.to_string());
    let timed_out = || SecretError::Tls("handshake timed out".into());
    let (handshake_timeout, idle_timeout) = (config.connect_timeout, config.idle_timeout);
    let leaf = set.ca.leaf(&name)?;
    let mut server = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| SecretError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Leaf(leaf)));
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    let accept =
        tokio_rustls::TlsAcceptor::from(Arc::new(server)).accept(Rewind::new(head, client));
    let client_tls = tokio::time::timeout(handshake_timeout, accept)
        .await
        .map_err(|_| timed_out())?
        .map_err(tls)?;
    let upstream = Metered::new(upstream, computer);
    let transferred = upstream.transferred();
    let server_name =
        ServerName::try_from(name.clone()).map_err(|e| SecretError::Tls(e.to_string()))?;
    let connect =
        tokio_rustls::TlsConnector::from(set.upstream.clone()).connect(server_name, upstream);
    let upstream_tls = tokio::time::timeout(handshake_timeout, connect)
        .await
        .map_err(|_| timed_out())?
        .map_err(tls)?;
    let handshake = hyper::client::conn::http1::handshake::<_, hyper::body::Incoming>(
        TokioIo::new(upstream_tls),
    );
    let (sender, connection) = tokio::time::timeout(handshake_timeout, handshake)
        .await
        .map_err(|_| timed_out())?
        .map_err(|e| SecretError::Tls(e.to_string()))?;
    let sender = Arc::new(tokio::sync::Mutex::new(sender));
    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let (set, name, sender) = (set.clone(), name.clone(), sender.clone());
        async move {
            let (mut parts, body) = req.into_parts();
            set.substitute(&name, &mut parts.headers);
            let mut sender = sender.lock().await;
            let sent = match sender.ready().await {
                Ok(()) => sender.send_request(Request::from_parts(parts, body)).await,
                Err(e) => Err(e),
            };
            Ok::<Response<Body>, std::convert::Infallible>(match sent {
                Ok(response) => response.map(BodyExt::boxed),
                Err(_) => {
                    let body = Full::new(Bytes::from_static(
                        b"rakazo egress: the server did not answer\n",
                    ));
                    let mut response = Response::new(body.map_err(|n| match n {}).boxed());
                    *response.status_mut() = StatusCode::BAD_GATEWAY;
                    response
                }
            })
        }
    });
    let serve = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(client_tls), service);
    // Driven on its own: a response body still streaming when the server side finishes must
    // not be cut. It ends when the service (and with it the sender) is dropped.
    tokio::spawn(connection);
    tokio::select! {
        _ = serve => {}
        () = crate::meter::idle(transferred.clone(), idle_timeout) => {}
    }
    Ok((transferred.up(), transferred.down()))
}
