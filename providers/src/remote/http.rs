//! HTTP for the adapters of sandbox services (`e2b`, `daytona`): one hyper client on rustls
//! with ring, a deadline on every call, bounded answers, and the sorting of a service's answers
//! into [`ProviderError`] classes. What the calls mean is the adapters' business.
//!
//! A base URL must be `https://`; plain `http://` is accepted for a loopback host only (the
//! in-memory fakes of the tests), so an API key never crosses a network in the clear. Nothing
//! here retries: a failed call is reported once, with its class.

use crate::{ProviderError, ProviderRef};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;

/// The largest answer read whole: a service's JSON answers are small, and one that sends more
/// is broken or hostile.
const MAX_ANSWER: usize = 1 << 20;
/// How much of a service's error message is kept for ours.
const MAX_MESSAGE: usize = 300;
/// Idle pooled connections are closed after this long.
const POOL_IDLE: Duration = Duration::from_secs(30);

/// A checked service URL without a trailing slash: `https://host[:port][/path]`, or `http://`
/// to a loopback host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaseUrl(String);

impl BaseUrl {
    /// Parses `s`; the message says what is wrong with it.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim().trim_end_matches('/');
        let uri: Uri = s.parse().map_err(|_| format!("{s:?} is not a URL"))?;
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err(format!("{s:?} is not an absolute http(s) URL"));
        };
        if authority.as_str().contains('@') || uri.query().is_some() || s.contains('#') {
            return Err(format!(
                "{s:?} must not carry credentials, a query or a fragment"
            ));
        }
        match scheme {
            "https" => {}
            "http" if is_loopback(authority.host()) => {}
            "http" => {
                return Err(format!(
                    "{s:?} is plain http to a host that is not loopback: use https"
                ))
            }
            _ => return Err(format!("{s:?} is not an http(s) URL")),
        }
        Ok(Self(s.to_string()))
    }

    /// `self` followed by `path` (which starts with `/`).
    pub fn join(&self, path: &str) -> String {
        format!("{}{path}", self.0)
    }

    /// The URL, without a trailing slash.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the URL is `https://` (so the system's CA certificates are needed).
    pub fn is_https(&self) -> bool {
        self.0.starts_with("https:")
    }
}

fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// One request to a service.
pub(crate) struct Call {
    pub method: Method,
    pub url: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
    /// How long the whole call may take, answer included.
    pub deadline: Duration,
    /// What the call does, for error messages (`create an E2B sandbox`).
    pub context: String,
}

impl Call {
    pub fn new(method: Method, url: String, deadline: Duration, context: String) -> Self {
        Self {
            method,
            url,
            headers: Vec::new(),
            body: Bytes::new(),
            deadline,
            context,
        }
    }

    /// Adds a header; a value that cannot be a header is refused as a bad spec.
    pub fn header(mut self, name: HeaderName, value: &str) -> Result<Self, ProviderError> {
        let value = HeaderValue::from_str(value).map_err(|_| {
            ProviderError::BadSpec(format!("{}: a {name} value is not a header", self.context))
        })?;
        self.headers.push((name, value));
        Ok(self)
    }

    /// Adds a secret header (an API key): marked sensitive, so it is never logged.
    pub fn secret_header(mut self, name: HeaderName, value: &str) -> Result<Self, ProviderError> {
        let mut value = HeaderValue::from_str(value).map_err(|_| {
            ProviderError::BadSpec(format!(
                "{}: the credential is not usable in a header",
                self.context
            ))
        })?;
        value.set_sensitive(true);
        self.headers.push((name, value));
        Ok(self)
    }

    /// Sets a JSON body.
    pub fn json(mut self, body: &serde_json::Value) -> Self {
        self.body = Bytes::from(body.to_string());
        self.headers
            .push((CONTENT_TYPE, HeaderValue::from_static("application/json")));
        self
    }

    /// Sets a body of the given content type.
    pub fn body(mut self, content_type: &str, body: Bytes) -> Result<Self, ProviderError> {
        self.body = body;
        self.header(CONTENT_TYPE, content_type)
    }
}

/// A whole answer: any status, the body read in full (up to 1 MiB).
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: StatusCode,
    pub body: Bytes,
}

impl Answer {
    /// The body as `T`; nonsense from the service is `Unavailable`.
    pub fn json<T: serde::de::DeserializeOwned>(&self, context: &str) -> Result<T, ProviderError> {
        serde_json::from_slice(&self.body).map_err(|e| ProviderError::Unavailable {
            context: context.to_string(),
            message: format!("the service answered malformed JSON ({e})"),
        })
    }

    /// `Ok(self)` for a 2xx answer, else the failure it means (`target`: the sandbox the call
    /// was about, which a 404 says is gone).
    pub fn success(
        self,
        context: &str,
        target: Option<&ProviderRef>,
    ) -> Result<Self, ProviderError> {
        if self.status.is_success() {
            Ok(self)
        } else {
            Err(failure(context, self.status, &self.body, target))
        }
    }
}

/// The client every call of one adapter goes through.
#[derive(Clone)]
pub(crate) struct Http {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Http {
    /// A client trusting the system's certificate authorities. With `need_roots` (some URL is
    /// https) a system without any is refused at once instead of at the first call.
    pub fn new(need_roots: bool) -> Result<Self, ProviderError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        let (added, _) =
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        if need_roots && added == 0 {
            return Err(ProviderError::BadSpec(
                "no system CA certificates found to check the service's https certificate".into(),
            ));
        }
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ProviderError::BadSpec(format!("tls configuration: {e}")))?
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
        let client = Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE)
            .build(https);
        Ok(Self { client })
    }

    /// Sends `call` and reads its whole answer, all within the call's deadline. Every status is
    /// an answer; a transport failure or a passed deadline is `Unavailable`.
    pub async fn send(&self, call: Call) -> Result<Answer, ProviderError> {
        let (deadline, context) = (call.deadline, call.context.clone());
        let exchange = async {
            let (status, body) = self.exchange(call).await?;
            let body = Limited::new(body, MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| unavailable(&context, format!("reading the answer failed: {e}")))?
                .to_bytes();
            Ok(Answer { status, body })
        };
        tokio::time::timeout(deadline, exchange)
            .await
            .map_err(|_| late(&context, deadline))?
    }

    /// Sends `call`; a non-success answer is the failure it means (`target`: the sandbox the
    /// call is about, which a 404 says is gone).
    pub async fn ok(
        &self,
        call: Call,
        target: Option<&ProviderRef>,
    ) -> Result<Answer, ProviderError> {
        let context = call.context.clone();
        self.send(call).await?.success(&context, target)
    }

    /// [`Http::ok`], the answer read as `T`.
    pub async fn ok_json<T: serde::de::DeserializeOwned>(
        &self,
        call: Call,
        target: Option<&ProviderRef>,
    ) -> Result<T, ProviderError> {
        let context = call.context.clone();
        self.ok(call, target).await?.json(&context)
    }

    /// Sends `call` and returns the answer's status and its body to stream; the call's deadline
    /// covers the answer's head only, so the caller bounds its reading itself.
    pub async fn open(&self, call: Call) -> Result<(StatusCode, Incoming), ProviderError> {
        let (deadline, context) = (call.deadline, call.context.clone());
        tokio::time::timeout(deadline, self.exchange(call))
            .await
            .map_err(|_| late(&context, deadline))?
    }

    async fn exchange(&self, call: Call) -> Result<(StatusCode, Incoming), ProviderError> {
        let mut req = Request::builder().method(call.method).uri(&call.url);
        for (name, value) in call.headers {
            req = req.header(name, value);
        }
        let req = req.body(Full::new(call.body)).map_err(|e| {
            ProviderError::BadSpec(format!("{}: cannot build the request: {e}", call.context))
        })?;
        let resp = self.client.request(req).await.map_err(|e| {
            // The chain names the cause (refused, reset, certificate); the URL holds no secret.
            let mut message = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                message.push_str(&format!(": {s}"));
                source = s.source();
            }
            unavailable(&call.context, message)
        })?;
        Ok((resp.status(), resp.into_body()))
    }
}

fn late(context: &str, deadline: Duration) -> ProviderError {
    unavailable(
        context,
        format!("the service did not answer within {deadline:?}"),
    )
}

pub(crate) fn unavailable(context: &str, message: String) -> ProviderError {
    ProviderError::Unavailable {
        context: context.to_string(),
        message,
    }
}

/// The message of a service's error answer: its JSON `message` (E2B's `Error`, Daytona's
/// NestJS error, Connect's error) or the start of its text, printable and short.
pub(crate) fn message_of(body: &[u8]) -> String {
    let json: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let text = match json.as_ref().and_then(|v| v.get("message")?.as_str()) {
        Some(m) => m.to_string(),
        None => String::from_utf8_lossy(&body[..body.len().min(MAX_MESSAGE)]).into_owned(),
    };
    let mut clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if clean.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !clean.is_char_boundary(end) {
            end -= 1;
        }
        clean.truncate(end);
        clean.push('…');
    }
    clean.trim().to_string()
}

/// What a non-success answer means. `target` is the sandbox the call was about: a 404 or 410
/// about it means it is gone (class `Gone`); without one, a 404 is a request for something that
/// does not exist (`Invalid`). Refused credentials and bad requests are `Invalid`, rate and
/// quota limits `Capacity`, conflicts (a state change in progress) and server failures
/// `Transient`.
pub(crate) fn failure(
    context: &str,
    status: StatusCode,
    body: &[u8],
    target: Option<&ProviderRef>,
) -> ProviderError {
    let message = message_of(body);
    let code = status.as_u16();
    let said = format!("{context}: {code} {message}");
    if mentions_capacity(&message) || mentions_capacity(&String::from_utf8_lossy(body)) {
        return ProviderError::Capacity(said);
    }
    match code {
        404 | 410 => match target {
            Some(r) => ProviderError::NotFound(r.clone()),
            None => ProviderError::BadSpec(said),
        },
        401 | 403 => ProviderError::BadSpec(format!(
            "{context}: the service refused the API key ({code}): {message}"
        )),
        429 | 507 => ProviderError::Capacity(said),
        408 | 409 | 425 => unavailable(context, format!("{code} {message}")),
        400..=499 => ProviderError::BadSpec(said),
        _ => unavailable(context, format!("{code} {message}")),
    }
}

fn mentions_capacity(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    [
        "capacity",
        "quota exceeded",
        "limit reached",
        "limit exceeded",
        "no space left",
        "not enough disk",
        "insufficient resources",
    ]
    .iter()
    .any(|n| lower.contains(n))
}

/// `?k=v&…` with every value percent-encoded.
pub(crate) fn query(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        out.push_str(&percent(k));
        out.push('=');
        out.push_str(&percent(v));
    }
    out
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub(crate) fn percent(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A `multipart/form-data` body holding one file in the part `field`; returns its content type
/// and bytes. The boundary is derived from the content and checked not to occur in it.
pub(crate) fn multipart_file(field: &str, filename: &str, content: &[u8]) -> (String, Bytes) {
    let mut n = 0u32;
    let boundary = loop {
        let digest = Sha256::new()
            .chain_update(content)
            .chain_update(n.to_be_bytes())
            .finalize();
        let b = format!("rakazo-{}", hex::encode(&digest[..16]));
        if !content.windows(b.len()).any(|w| w == b.as_bytes()) {
            break b;
        }
        n += 1;
    };
    let mut body = Vec::with_capacity(content.len() + 256);
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"; \
             filename=\"{filename}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(content);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (
        format!("multipart/form-data; boundary={boundary}"),
        Bytes::from(body),
    )
}

/// A secret-free shell word: `'…'` with every `'` escaped.
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorClass;

    #[test]
    fn base_urls_are_https_or_loopback_http() {
        assert_eq!(
            BaseUrl::parse("https://api.e2b.app/").unwrap().as_str(),
            "https://api.e2b.app"
        );
        assert!(BaseUrl::parse("http://127.0.0.1:8080/api").is_ok());
        assert!(BaseUrl::parse("http://[::1]:8080").is_ok());
        assert!(BaseUrl::parse("http://localhost:1").is_ok());
        for bad in [
            "http://api.e2b.app",
            "http://10.0.0.1",
            "ftp://x",
            "api.e2b.app",
            "https://user:pw@host",
            "https://host/?a=b",
            "",
        ] {
            assert!(BaseUrl::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            BaseUrl::parse("https://h/p").unwrap().join("/x"),
            "https://h/p/x"
        );
    }

    #[test]
    fn answers_map_to_classes() {
        let r = ProviderRef("sb1".into());
        let class = |code: u16, body: &str, target: Option<&ProviderRef>| {
            failure(
                "op",
                StatusCode::from_u16(code).unwrap(),
                body.as_bytes(),
                target,
            )
            .class()
        };
        assert_eq!(
            class(404, r#"{"code":404,"message":"not found"}"#, Some(&r)),
            ErrorClass::Gone
        );
        assert_eq!(class(410, "", Some(&r)), ErrorClass::Gone);
        assert_eq!(
            class(404, "template x not found", None),
            ErrorClass::Invalid
        );
        assert_eq!(
            class(401, r#"{"message":"Invalid API key"}"#, Some(&r)),
            ErrorClass::Invalid
        );
        assert_eq!(class(400, "bad timeout", None), ErrorClass::Invalid);
        assert_eq!(class(429, "slow down", None), ErrorClass::Capacity);
        assert_eq!(class(507, "", None), ErrorClass::Capacity);
        assert_eq!(
            class(
                503,
                r#"{"code":503,"error_code":"sandbox_capacity_unavailable","message":"x"}"#,
                None
            ),
            ErrorClass::Capacity
        );
        assert_eq!(class(409, "pausing", Some(&r)), ErrorClass::Transient);
        assert_eq!(class(500, "boom", Some(&r)), ErrorClass::Transient);
        assert_eq!(class(502, "<html>", Some(&r)), ErrorClass::Transient);
    }

    #[test]
    fn messages_are_short_and_printable() {
        assert_eq!(message_of(br#"{"message":"a\nb"}"#), "a b");
        let long = "x".repeat(1000);
        assert!(message_of(long.as_bytes()).chars().count() <= MAX_MESSAGE + 1);
        assert_eq!(message_of(b"\xff\xfe"), "\u{fffd}\u{fffd}");
    }

    #[test]
    fn queries_and_words_are_escaped() {
        assert_eq!(
            query(&[("path", "/home/user/a b"), ("mode", "0600")]),
            "?path=%2Fhome%2Fuser%2Fa%20b&mode=0600"
        );
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn multipart_holds_the_file_between_boundaries() {
        let (ct, body) = multipart_file("file", "token", b"s3cret");
        let boundary = ct.strip_prefix("multipart/form-data; boundary=").unwrap();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert!(text.starts_with(&format!("--{boundary}\r\n")));
        assert!(text.contains("name=\"file\"; filename=\"token\""));
        assert!(text.contains("\r\n\r\ns3cret\r\n"));
        assert!(text.ends_with(&format!("--{boundary}--\r\n")));
    }
}
