//! The fake provider's HTTP(S) client: hyper on rustls with ring (the system's certificate
//! authorities), one request at a time, redirects followed by hand (at most [`MAX_REDIRECTS`],
//! each target checked like a navigate URL), bodies capped at [`MAX_PAGE_BYTES`], everything
//! under the caller's deadline. Cookies are kept in a small per-session jar (host and name; no
//! paths, no expiry beyond `Max-Age=0`), enough for a login form. It trusts the system's
//! authorities and, in a contained computer with secrets, the computer's egress CA.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use gateway_proto::page::validate_url;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use tokio::time::Instant;
use url::Url;

/// Largest page body read.
pub const MAX_PAGE_BYTES: usize = 5 << 20;
/// Most redirects followed for one navigation.
pub const MAX_REDIRECTS: usize = 10;
/// Most cookies kept per session.
const MAX_COOKIES: usize = 256;
/// Longest cookie header value kept.
const MAX_COOKIE_BYTES: usize = 4096;

/// Why a fetch failed.
#[derive(Debug)]
pub(super) enum FetchError {
    /// The deadline passed.
    Timeout,
    /// Anything else, as a message (never holding a form's body).
    Failed(String),
}

/// A fetched document.
#[derive(Debug)]
pub(super) struct Fetched {
    /// Where it ended up, after redirects.
    pub(super) url: Url,
    pub(super) content_type: String,
    pub(super) body: Bytes,
}

/// One session's client and cookie jar.
pub(super) struct Fetcher {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    /// (host, name) → value.
    cookies: BTreeMap<(String, String), String>,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher")
            .field("cookies", &self.cookies.len())
            .finish_non_exhaustive()
    }
}

impl Fetcher {
    pub(super) fn new() -> Result<Self, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        // A contained computer's egress CA, as Chrome trusts it (secrets' domains).
        if let Some(ca) = crate::secret_env::egress_ca() {
            use rustls::pki_types::pem::PemObject;
            match rustls::pki_types::CertificateDer::pem_file_iter(&ca) {
                Ok(certs) => {
                    roots.add_parsable_certificates(certs.flatten());
                }
                Err(e) => {
                    tracing::warn!(ca = %ca.display(), error = %e, "cannot read the egress CA")
                }
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("tls configuration: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let client = Client::builder(hyper_util::rt::TokioExecutor::new()).build(https);
        Ok(Self {
            client,
            cookies: BTreeMap::new(),
        })
    }

    /// Fetches `url` (with a urlencoded `form` body: a POST), following redirects, until
    /// `deadline`.
    pub(super) async fn fetch(
        &mut self,
        url: Url,
        form: Option<String>,
        deadline: Instant,
    ) -> Result<Fetched, FetchError> {
        let mut url = url;
        let mut form = form;
        for _ in 0..=MAX_REDIRECTS {
            validate_url(url.as_str()).map_err(|e| {
                FetchError::Failed(format!("the page led to a refused URL: {}", e.message))
            })?;
            let method = if form.is_some() {
                Method::POST
            } else {
                Method::GET
            };
            let mut req = Request::builder()
                .method(method.clone())
                .uri(url.as_str())
                .header(header::USER_AGENT, "rakazo-fake-browser")
                .header(header::ACCEPT, "text/html,text/plain;q=0.9,*/*;q=0.1");
            if let Some(cookie) = self.cookie_header(&url) {
                req = req.header(header::COOKIE, cookie);
            }
            let body = match &form {
                Some(f) => {
                    req = req.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
                    Full::new(Bytes::from(f.clone()))
                }
                None => Full::new(Bytes::new()),
            };
            let req = req
                .body(body)
                .map_err(|e| FetchError::Failed(e.to_string()))?;
            let resp = tokio::time::timeout_at(deadline, self.client.request(req))
                .await
                .map_err(|_| FetchError::Timeout)?
                .map_err(|e| FetchError::Failed(super::super::chain(&e)))?;
            self.keep_cookies(&url, resp.headers().get_all(header::SET_COOKIE).iter());
            let status = resp.status().as_u16();
            if matches!(status, 301 | 302 | 303 | 307 | 308) {
                if let Some(next) = resp
                    .headers()
                    .get(header::LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .and_then(|l| url.join(l).ok())
                {
                    // 307 and 308 repeat the request; the others become a GET.
                    if !matches!(status, 307 | 308) {
                        form = None;
                    }
                    url = next;
                    continue;
                }
            }
            let content_type = resp
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("text/html")
                .to_ascii_lowercase();
            let read = Limited::new(resp.into_body(), MAX_PAGE_BYTES).collect();
            let body = tokio::time::timeout_at(deadline, read)
                .await
                .map_err(|_| FetchError::Timeout)?
                .map_err(|e| {
                    FetchError::Failed(format!(
                        "reading the page failed (at most {MAX_PAGE_BYTES} bytes): {e}"
                    ))
                })?
                .to_bytes();
            return Ok(Fetched {
                url,
                content_type,
                body,
            });
        }
        Err(FetchError::Failed(format!(
            "more than {MAX_REDIRECTS} redirects"
        )))
    }

    fn cookie_header(&self, url: &Url) -> Option<String> {
        let host = url.host_str()?;
        let pairs: Vec<String> = self
            .cookies
            .iter()
            .filter(|((h, _), _)| h == host)
            .map(|((_, name), value)| format!("{name}={value}"))
            .collect();
        (!pairs.is_empty()).then(|| pairs.join("; "))
    }

    fn keep_cookies<'a>(&mut self, url: &Url, headers: impl Iterator<Item = &'a HeaderValue>) {
        let Some(host) = url.host_str() else { return };
        for h in headers {
            let Ok(line) = h.to_str() else { continue };
            if line.len() > MAX_COOKIE_BYTES {
                continue;
            }
            let mut parts = line.split(';');
            let Some((name, value)) = parts.next().and_then(|p| p.split_once('=')) else {
                continue;
            };
            let (name, value) = (name.trim(), value.trim());
            if name.is_empty() {
                continue;
            }
            let expired = parts.any(|a| {
                a.split_once('=').is_some_and(|(k, v)| {
                    k.trim().eq_ignore_ascii_case("max-age") && v.trim().starts_with(['0', '-'])
                })
            });
            let key = (host.to_owned(), name.to_owned());
            if expired {
                self.cookies.remove(&key);
            } else if self.cookies.len() < MAX_COOKIES || self.cookies.contains_key(&key) {
                self.cookies.insert(key, value.to_owned());
            }
        }
    }
}
