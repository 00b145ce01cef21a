//! `/v1/computers/{id}/files`: list a directory, read and write files, streamed end to end.
//!
//! Reads stream the guest's raw bytes into the response with their exact length; the guest is
//! untrusted, so a reply that announces more than was asked for, or sends more or fewer bytes
//! than announced, ends the response with an error. Writes need `Content-Length` and stream the
//! body to the guest, which commits the file only when every byte arrived. A write (attempted
//! or done) is one line in the computer's activity feed; listings and reads are not recorded.

use super::body::{json_response, too_large, ApiError, ChannelBody, RespBody};
use super::{bot_lease, Api};
use crate::activity::CommandStart;
use crate::guest::{ByteError, ByteStream, SendError};
use crate::schema::activity::CommandAction;
use crate::schema::code::ApiCode;
use crate::schema::files::{Entry, EntryKind, FileList, Written};
use gateway_proto::{FileKind, ListFiles, ReadFile, WriteFile};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{header, Response, StatusCode};
use std::collections::HashMap;
use std::sync::Arc;
use tracing::warn;

const RAW_CHUNK: usize = 256 * 1024;
/// Response body chunks of a download.
const BODY_CHUNK: usize = 64 * 1024;

fn lease_of(q: &HashMap<String, String>) -> Result<Option<gateway_proto::BotLease>, ApiError> {
    bot_lease(
        q.get("bot").map(String::as_str),
        q.get("lease").map(String::as_str),
    )
}

fn path_of(q: &HashMap<String, String>) -> String {
    q.get("path").cloned().unwrap_or_default()
}

pub async fn list(
    api: &Arc<Api>,
    id: &str,
    q: &HashMap<String, String>,
) -> Result<Response<RespBody>, ApiError> {
    let listing = list_entries(api, id, path_of(q), lease_of(q)?).await?;
    Ok(json_response(StatusCode::OK, &listing))
}

/// A directory's entries: the operation behind `GET …/files` and MCP's `list_files`.
pub(super) async fn list_entries(
    api: &Arc<Api>,
    id: &str,
    path: String,
    lease: Option<gateway_proto::BotLease>,
) -> Result<FileList, ApiError> {
    let req = ListFiles { path, lease };
    let entries = api
        .core
        .call(id, req)
        .await?
        .into_iter()
        .map(|e| Entry {
            path: e.path,
            kind: match e.kind {
                FileKind::File => EntryKind::File,
                FileKind::Dir => EntryKind::Dir,
            },
            size: e.size,
            executable: e.executable,
        })
        .collect();
    Ok(FileList { entries })
}

pub async fn read(
    api: &Arc<Api>,
    id: &str,
    q: &HashMap<String, String>,
) -> Result<Response<RespBody>, ApiError> {
    let lease = lease_of(q)?;
    let max_bytes = match q.get("max_bytes") {
        Some(v) => Some(
            v.parse::<u64>()
                .map_err(|_| ApiError::bad_request("max_bytes must be a non-negative integer"))?,
        ),
        None => None,
    };
    let (size, bytes) = open_read(api, id, path_of(q), max_bytes, lease).await?;
    Ok(download_response(id.to_string(), size, bytes, None))
}

/// Opens a file for reading, at most `max_bytes` (default and ceiling: the API's read limit;
/// a larger file is the guest's refusal, `computer file exceeds N bytes`): the operation behind
/// `GET …/files/content` and MCP's `read_file`.
pub(super) async fn open_read(
    api: &Arc<Api>,
    id: &str,
    path: String,
    max_bytes: Option<u64>,
    lease: Option<gateway_proto::BotLease>,
) -> Result<(u64, ByteStream), ApiError> {
    let max_bytes = max_bytes
        .unwrap_or(api.limits.max_read_bytes)
        .min(api.limits.max_read_bytes);
    let req = ReadFile {
        path,
        max_bytes,
        lease,
    };
    Ok(api.core.guest_for(id, &req).await?.read_file(req).await?)
}

/// Streams a file's `size` bytes from the guest as the response body; with `name`, as a
/// download of that name (`Content-Disposition: attachment`).
pub(super) fn download_response(
    computer: String,
    size: u64,
    mut bytes: ByteStream,
    name: Option<&str>,
) -> Response<RespBody> {
    let (tx, body) = ChannelBody::new(8);
    tokio::spawn(async move {
        let mut pending = bytes::BytesMut::with_capacity(BODY_CHUNK);
        loop {
            let chunk = tokio::select! {
                chunk = bytes.next(RAW_CHUNK) => chunk,
                () = tx.closed() => { bytes.abort(); return; }
            };
            let chunk = match chunk {
                Ok(Some(c)) => c,
                Ok(None) => return,
                Err(ByteError::Overrun) => {
                    warn!(computer_id = %computer, "guest sent more bytes than it announced");
                    let _ = tx
                        .send(Err(std::io::Error::other(
                            "guest sent more bytes than announced",
                        )))
                        .await;
                    return;
                }
                Err(ByteError::Tunnel(_)) => {
                    let _ = tx
                        .send(Err(std::io::Error::other("file read ended early")))
                        .await;
                    return;
                }
            };
            // QUIC hands over one packet per read, which may be small (1.4 KB on an ordinary
            // path): gather small ones so the response body moves 64 KiB at a time. A large
            // packet (loopback's 64 KiB) goes on as it is, without a copy.
            let out = if pending.is_empty() && chunk.len() >= BODY_CHUNK {
                Some(chunk)
            } else {
                pending.extend_from_slice(&chunk);
                (pending.len() >= BODY_CHUNK || bytes.remaining() == 0)
                    .then(|| pending.split().freeze())
            };
            if let Some(out) = out {
                if tx.send(Ok(out)).await.is_err() {
                    bytes.abort();
                    return;
                }
            }
        }
    });
    let mut resp = Response::new(body.boxed());
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/octet-stream"),
    );
    resp.headers_mut()
        .insert(header::CONTENT_LENGTH, size.into());
    if let Some(value) = name.and_then(content_disposition) {
        resp.headers_mut()
            .insert(header::CONTENT_DISPOSITION, value);
    }
    resp
}

/// `attachment; filename="<ascii>"; filename*=UTF-8''<percent-encoded>` (RFC 6266): the ASCII
/// fallback keeps printable characters but quotes and backslashes.
fn content_disposition(name: &str) -> Option<header::HeaderValue> {
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let encoded: String = name
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    header::HeaderValue::from_str(&format!(
        "attachment; filename=\"{ascii}\"; filename*=UTF-8''{encoded}"
    ))
    .ok()
}

/// An upload's announced length: uploads stream, so it must be known up front.
pub(super) fn content_length<B>(req: &hyper::Request<B>) -> Result<u64, ApiError> {
    req.headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| ApiError::new(ApiCode::LengthRequired, "uploads need a Content-Length"))
}

pub async fn write(
    api: &Arc<Api>,
    id: &str,
    q: &HashMap<String, String>,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let lease = lease_of(q)?;
    let executable = match q.get("executable").map(String::as_str) {
        None | Some("false") | Some("0") => false,
        Some("true") | Some("1") => true,
        Some(_) => return Err(ApiError::bad_request("executable must be true or false")),
    };
    let size = content_length(&req)?;
    let written = write_file(
        api,
        id,
        path_of(q),
        executable,
        lease,
        size,
        req.into_body().into_data_stream(),
    )
    .await?;
    Ok(json_response(StatusCode::OK, &Written { written }))
}

/// Writes `size` bytes from `body` to `path` (bounded by the API's upload limit) and records
/// the write in the feed: the operation behind `PUT …/files/content` and MCP's `write_file`.
pub(super) async fn write_file<E>(
    api: &Arc<Api>,
    id: &str,
    path: String,
    executable: bool,
    lease: Option<gateway_proto::BotLease>,
    size: u64,
    body: impl futures_util::Stream<Item = Result<bytes::Bytes, E>>,
) -> Result<u64, ApiError> {
    if size > api.limits.max_upload_bytes {
        return Err(too_large(
            usize::try_from(api.limits.max_upload_bytes).unwrap_or(usize::MAX),
        ));
    }
    let bot = lease.as_ref().map(|l| l.bot.as_str().to_string());
    let record = CommandStart::action(id, bot.as_deref(), CommandAction::WriteFile, path.clone());
    let wreq = WriteFile {
        path,
        executable,
        size,
        lease,
        no_replace: false,
    };
    let result = match api.core.guest_for(id, &wreq).await {
        Ok(guest) => write_to(guest, wreq, size, body).await,
        // No such computer: no feed to record in.
        Err(e @ crate::core::CoreError::NotFound(_)) => return Err(e.into()),
        Err(e) => Err(e.into()),
    };
    // One line in the feed, written after the answer (never holding it up).
    let activity = api.core.activity.clone();
    let recorded = match &result {
        Ok(written) => Ok(Some(*written)),
        Err(e) => Err((e.message.clone(), e.uncertain)),
    };
    tokio::spawn(async move { activity.action(&record, recorded).await });
    result
}

/// Streams the upload to the guest; the bytes it committed.
pub(super) async fn write_to<E>(
    guest: crate::guest::Guest,
    wreq: WriteFile,
    size: u64,
    body: impl futures_util::Stream<Item = Result<bytes::Bytes, E>>,
) -> Result<u64, ApiError> {
    match guest.write_file(wreq, body).await {
        Ok(written) => Ok(written),
        Err(SendError::Source { sent, .. } | SendError::TooShort { sent }) => Err(
            ApiError::bad_request(format!("upload ended after {sent} of {size} bytes")),
        ),
        Err(SendError::TooLong) => Err(ApiError::bad_request(format!(
            "upload is longer than its {size} bytes"
        ))),
        Err(SendError::Tunnel(e)) => Err(e.into()),
    }
}
