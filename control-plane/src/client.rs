//! A small HTTP client for the API, used by the CLI (and usable by tests and scripts).
//!
//! It knows the base URL and the bearer token, turns error responses into [`ClientError`] with
//! the server's code and message, and can stream request and response bodies.

use bytes::Bytes;
use gateway_proto::Secret;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{header, Method, Request, Response, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;

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
}

/// An API client.
#[derive(Clone)]
pub struct Client {
    base: String,
    token: Secret,
    http: HyperClient<HttpConnector, ReqBody>,
}

pub fn full_body(bytes: impl Into<Bytes>) -> ReqBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

impl Client {
    /// `base` is like `http://127.0.0.1:7090`.
    pub fn new(base: impl Into<String>, token: Secret) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let http = HyperClient::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
        Self {
            base: base.into().trim_end_matches('/').to_string(),
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
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| ClientError::BadResponse(e.to_string()))?
            .to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        let e = &v["error"];
        Err(ClientError::Api {
            status,
            code: e["code"].as_str().unwrap_or("unknown").to_string(),
            message: e["message"].as_str().unwrap_or("no message").to_string(),
            uncertain: e["uncertain"].as_bool().unwrap_or(false),
        })
    }

    /// A JSON request with a JSON response.
    pub async fn json(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<serde_json::Value, ClientError> {
        let (ct, body) = match body {
            Some(v) => (
                Some("application/json"),
                full_body(serde_json::to_vec(v).unwrap_or_default()),
            ),
            None => (None, full_body(Bytes::new())),
        };
        let resp = self.send(method, path, ct, None, body).await?;
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| ClientError::BadResponse(e.to_string()))?
            .to_bytes();
        if bytes.is_empty() {
            return Ok(serde_json::Value::Null);
        }
        serde_json::from_slice(&bytes).map_err(|e| ClientError::BadResponse(e.to_string()))
    }
}

/// Percent-encodes a query value.
pub fn q(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}
