//! `/v1/computers/{id}/files`: list a directory, read and write files, streamed end to end.
//!
//! Reads stream the guest's raw bytes into the response with their exact length; the guest is
//! untrusted, so a reply that announces more than was asked for, or sends more or fewer bytes
//! than announced, ends the response with an error. Writes need `Content-Length` and stream the
//! body to the guest, which commits the file only when every byte arrived.

use super::body::{json_response, too_large, ApiError, ChannelBody, RespBody};
use super::{bot_lease, reply_error, Api};
use gateway_proto::{FileKind, ListFiles, ReadFile, Reply, Request, WriteFile};
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
    let lease = lease_of(q)?;
    let req = Request::ListFiles(ListFiles {
        path: path_of(q),
        lease: lease.clone(),
    });
    let mut op = api.core.open(id, lease.as_ref(), &req).await?;
    match op.expect::<Reply>().await? {
        Reply::Files(entries) => {
            let entries: Vec<serde_json::Value> = entries
                .iter()
                .map(|e| {
                    serde_json::json!({
                        "path": e.path,
                        "kind": match e.kind { FileKind::File => "file", FileKind::Dir => "dir" },
                        "size": e.size,
                        "executable": e.executable,
                    })
                })
                .collect();
            Ok(json_response(
                StatusCode::OK,
                &serde_json::json!({ "entries": entries }),
            ))
        }
        other => Err(reply_error(id, other)),
    }
}

pub async fn read(
    api: &Arc<Api>,
    id: &str,
    q: &HashMap<String, String>,
) -> Result<Response<RespBody>, ApiError> {
    let lease = lease_of(q)?;
    let max_bytes = match q.get("max_bytes") {
        Some(v) => v
            .parse::<u64>()
            .map_err(|_| ApiError::bad_request("max_bytes must be a non-negative integer"))?,
        None => api.limits.max_read_bytes,
    }
    .min(api.limits.max_read_bytes);
    let req = Request::ReadFile(ReadFile {
        path: path_of(q),
        max_bytes,
        lease: lease.clone(),
    });
    let mut op = api.core.open(id, lease.as_ref(), &req).await?;
    let size = match op.expect::<Reply>().await? {
        Reply::ReadStart { size } if size <= max_bytes => size,
        other => return Err(reply_error(id, other)),
    };
    let (tx, body) = ChannelBody::new(8);
    let computer = id.to_string();
    let mut rx = op.rx;
    let mut op_tx = op.tx;
    rx.start_raw();
    tokio::spawn(async move {
        let mut left = size;
        let mut pending = bytes::BytesMut::with_capacity(BODY_CHUNK);
        while left > 0 {
            let chunk = tokio::select! {
                chunk = rx.read_raw(RAW_CHUNK) => chunk,
                () = tx.closed() => { rx.abort(); op_tx.abort(); return; }
            };
            let chunk = match chunk {
                Ok(Some(c)) if c.len() as u64 <= left => c,
                Ok(Some(_)) => {
                    warn!(computer_id = %computer, "guest sent more bytes than it announced");
                    rx.abort();
                    let _ = tx
                        .send(Err(std::io::Error::other(
                            "guest sent more bytes than announced",
                        )))
                        .await;
                    return;
                }
                Ok(None) | Err(_) => {
                    let _ = tx
                        .send(Err(std::io::Error::other("file read ended early")))
                        .await;
                    return;
                }
            };
            left -= chunk.len() as u64;
            // QUIC hands over about one packet per read: gather them so the response body
            // moves 64 KiB at a time instead of 1.4 KB.
            pending.extend_from_slice(&chunk);
            if (pending.len() >= BODY_CHUNK || left == 0)
                && tx.send(Ok(pending.split().freeze())).await.is_err()
            {
                rx.abort();
                return;
            }
        }
        let _ = op_tx.finish();
    });
    let mut resp = Response::new(body.boxed());
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/octet-stream"),
    );
    resp.headers_mut()
        .insert(header::CONTENT_LENGTH, size.into());
    Ok(resp)
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
    let size = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::LENGTH_REQUIRED,
                "length_required",
                "uploads need a Content-Length",
            )
        })?;
    if size > api.limits.max_upload_bytes {
        return Err(too_large(
            usize::try_from(api.limits.max_upload_bytes).unwrap_or(usize::MAX),
        ));
    }
    let path = path_of(q);
    let wreq = Request::WriteFile(WriteFile {
        path,
        executable,
        size,
        lease: lease.clone(),
    });
    let mut op = api.core.open(id, lease.as_ref(), &wreq).await?;
    let mut body = req.into_body();
    let mut sent = 0u64;
    let mut send_failed = false;
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(f) => f,
            Err(_) => {
                op.abort();
                return Err(ApiError::bad_request(format!(
                    "upload ended after {sent} of {size} bytes"
                )));
            }
        };
        if let Ok(data) = frame.into_data() {
            sent += data.len() as u64;
            if op.tx.write_raw(data).await.is_err() {
                // The guest stopped reading: its reply says why.
                send_failed = true;
                break;
            }
        }
    }
    if !send_failed {
        op.tx.finish()?;
    }
    match op.rx.expect::<Reply>().await? {
        Reply::Written { size } => Ok(json_response(
            StatusCode::OK,
            &serde_json::json!({ "written": size }),
        )),
        other => Err(reply_error(id, other)),
    }
}
