//! HTTP bodies and errors: bounded JSON in, JSON or streams out, one error shape.
//!
//! [`ApiError`] is the only way a handler fails: it carries a stable code (an [`ApiCode`], which
//! has its status) and a public message. Internal details are logged where the error is created,
//! never sent.

use crate::schema::code::ApiCode;
use crate::schema::error::{ErrorBody, ErrorInfo};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Body, Frame, Incoming};
use hyper::{header, Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// Largest JSON request body.
pub const MAX_JSON_BODY: usize = 1 << 20;

/// Every response body.
pub type RespBody = BoxBody<Bytes, std::io::Error>;

/// A failed request: a stable code (which has its status) and a public message.
#[derive(Debug)]
pub struct ApiError {
    pub code: ApiCode,
    pub message: String,
    /// Whether the operation may have had an effect (tunnel lost mid-operation).
    pub uncertain: bool,
}

impl ApiError {
    pub fn new(code: ApiCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            uncertain: false,
        }
    }

    /// The HTTP status of the answer: its code's.
    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ApiCode::BadRequest, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ApiCode::NotFound, message)
    }

    /// An internal failure: logged here with its detail, reported to the client without it.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        tracing::error!(error = %detail, "internal error");
        Self::new(ApiCode::Internal, "internal error")
    }

    /// A database failure: 503 `database_unavailable` when the database cannot be reached
    /// (the request may be tried again as it is), else an internal failure.
    pub fn db(e: &crate::db::DbError) -> Self {
        if e.is_unavailable() {
            tracing::warn!(error = %crate::homes::chain(e), "database unavailable");
            return Self::new(
                ApiCode::DatabaseUnavailable,
                "the database cannot be reached: try again",
            );
        }
        Self::internal(e)
    }

    /// What the error body (or an NDJSON `error` line) says about it.
    pub fn info(&self) -> ErrorInfo {
        ErrorInfo {
            code: self.code.as_str().to_string(),
            message: self.message.clone(),
            uncertain: self.uncertain,
        }
    }

    pub fn into_response(self) -> Response<RespBody> {
        let body = ErrorBody { error: self.info() };
        let mut resp = json_response(self.status(), &body);
        if self.code == ApiCode::Unauthorized {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        resp
    }
}

/// A JSON response.
pub fn json_response<T: Serialize>(status: StatusCode, value: &T) -> Response<RespBody> {
    let bytes = match serde_json::to_vec(value) {
        Ok(mut b) => {
            b.push(b'\n');
            b
        }
        Err(e) => {
            tracing::error!(error = %e, "response serialization failed");
            return Response::builder()
                .status(StatusCode::INTERNAL_SERVER_ERROR)
                .body(full(Bytes::from_static(
                    b"{\"error\":{\"code\":\"internal\"}}\n",
                )))
                .unwrap_or_else(|_| Response::new(empty()));
        }
    };
    let mut resp = Response::new(full(Bytes::from(bytes)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

pub fn full(bytes: Bytes) -> RespBody {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

pub fn empty() -> RespBody {
    full(Bytes::new())
}

/// Reads a JSON body of at most [`MAX_JSON_BODY`] bytes (413 beyond, 400 if malformed).
pub async fn read_json<T: DeserializeOwned>(body: Incoming) -> Result<T, ApiError> {
    let bytes = read_json_bytes(body).await?;
    parse_object(&bytes)
}

/// Parses a request body that must be a JSON object. serde would also read a struct from a JSON
/// array of its fields in order (`[null, null]`), which no route takes: it is refused first.
pub fn parse_object<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    check_object(bytes)?;
    serde_json::from_slice(bytes).map_err(invalid_json)
}

/// 400 unless `bytes` start (after whitespace) as a JSON object does.
pub fn check_object(bytes: &[u8]) -> Result<(), ApiError> {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => Ok(()),
        _ => Err(ApiError::bad_request("request body must be a JSON object")),
    }
}

/// The bytes of a JSON body of at most [`MAX_JSON_BODY`] bytes (413 beyond, 400 if empty), for
/// a handler that parses them itself.
pub async fn read_json_bytes(body: Incoming) -> Result<Bytes, ApiError> {
    let bytes = read_limited(body, MAX_JSON_BODY).await?;
    if bytes.is_empty() {
        return Err(ApiError::bad_request("request body must be a JSON object"));
    }
    Ok(bytes)
}

/// A body that is not the JSON its route takes.
pub fn invalid_json(e: serde_json::Error) -> ApiError {
    ApiError::bad_request(format!("invalid JSON body: {e}"))
}

/// How long a bounded body may take to arrive whole: one trickled in must not hold its
/// connection (and its slot under the connection cap) for ever. 1 MiB in 30 s is 35 KB/s.
pub const JSON_BODY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// Reads a whole body of at most `max` bytes within [`JSON_BODY_DEADLINE`] (408 after it).
pub async fn read_limited(body: Incoming, max: usize) -> Result<Bytes, ApiError> {
    let read = tokio::time::timeout(JSON_BODY_DEADLINE, Limited::new(body, max).collect());
    match read.await {
        Ok(Ok(c)) => Ok(c.to_bytes()),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large(max)),
        Ok(Err(_)) => Err(ApiError::bad_request("request body could not be read")),
        Err(_) => Err(ApiError::new(
            ApiCode::BodyTimeout,
            format!(
                "the request body did not arrive within {} s",
                JSON_BODY_DEADLINE.as_secs()
            ),
        )),
    }
}

pub fn too_large(max: usize) -> ApiError {
    ApiError::new(
        ApiCode::PayloadTooLarge,
        format!("request body exceeds {max} bytes"),
    )
}

/// How much a reader that feeds a [`ChannelBody`] with [`forward`] reads at a time.
pub const PUMP_CHUNK: usize = 64 * 1024;

/// Sends the outcome of one read into `buf` down `tx`: the bytes read, or the error as the last
/// message. Returns whether to read again: not at the end (a read of 0 bytes), not after an
/// error, not once the receiver is gone.
pub async fn forward(
    tx: &mpsc::Sender<Result<Bytes, std::io::Error>>,
    read: std::io::Result<usize>,
    buf: &[u8],
) -> bool {
    match read {
        Ok(0) => false,
        Ok(n) => tx.send(Ok(Bytes::copy_from_slice(&buf[..n]))).await.is_ok(),
        Err(e) => {
            let _ = tx.send(Err(e)).await;
            false
        }
    }
}

/// A response body fed from a channel; the sender learns through `closed()` that the client
/// went away (hyper drops the body when the connection ends).
pub struct ChannelBody {
    rx: mpsc::Receiver<Result<Bytes, std::io::Error>>,
}

impl ChannelBody {
    pub fn new(buffer: usize) -> (mpsc::Sender<Result<Bytes, std::io::Error>>, Self) {
        let (tx, rx) = mpsc::channel(buffer);
        (tx, Self { rx })
    }
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.rx
            .poll_recv(cx)
            .map(|item| item.map(|r| r.map(Frame::data)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_body_is_an_object_never_an_array_of_fields() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Two {
            a: Option<u8>,
            b: Option<u8>,
        }
        // serde alone reads a struct from an array of its fields in order.
        assert!(serde_json::from_slice::<Two>(b"[null, null]").is_ok());
        for bad in [&b"[null, null]"[..], b"[]", b"null", b"\"x\"", b"1"] {
            let e = parse_object::<Two>(bad).unwrap_err();
            assert_eq!(
                (e.status(), e.message.as_str()),
                (
                    StatusCode::BAD_REQUEST,
                    "request body must be a JSON object"
                )
            );
        }
        assert!(parse_object::<Two>(b" \n{\"a\": 1}").is_ok());
    }

    #[tokio::test]
    async fn forward_sends_what_was_read_and_says_when_to_stop() {
        let (tx, mut rx) = mpsc::channel(4);
        let buf = b"abcdef";
        assert!(forward(&tx, Ok(3), buf).await, "more to read");
        assert_eq!(
            rx.recv().await.unwrap().unwrap(),
            Bytes::from_static(b"abc")
        );
        assert!(!forward(&tx, Ok(0), buf).await, "the end");
        assert!(rx.try_recv().is_err(), "the end sends nothing");
        let err = std::io::Error::other("disk gone");
        assert!(!forward(&tx, Err(err), buf).await, "an error ends it");
        let sent = rx.recv().await.unwrap().unwrap_err();
        assert_eq!(sent.to_string(), "disk gone");
        drop(rx);
        assert!(!forward(&tx, Ok(6), buf).await, "the receiver is gone");
    }
}
