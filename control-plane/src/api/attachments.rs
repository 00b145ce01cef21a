//! Files crossing between a person and a bot's computer (docs/api.md#attachments).
//!
//! - `PUT /v1/computers/{id}/uploads/{bot}?name=…&control=…`: a user's upload into the bot's
//!   directory. It needs the user's control lease of that bot (`screen takeover`), is capped by
//!   `--attachment-max-bytes` (413 before a byte is sent to the computer), and never replaces a
//!   file: a taken name gets the first free ` (n)` suffix, and the guest's `no_replace` write
//!   refuses a name that appeared meanwhile (409 `exists`), so nothing of the bot's is lost.
//! - `POST /v1/computers/{id}/files/attach`: `attach_file`, a bot handing a file out under its
//!   execution lease: a download URL, `/att/<sealed>`, valid `--attachment-url-ttl-secs`.
//! - `GET /att/<sealed>` (no API token: the URL is the credential, never logged): the file,
//!   streamed from the running computer, if its size is still the attached one.

use super::body::{json_response, read_json, ApiError, RespBody};
use super::files::{content_length, download_response, write_to};
use super::{parse_bot, parse_lease, Api};
use crate::activity::CommandStart;
use crate::clock::now_ms;
use crate::computers::ComputerKind;
use crate::live::seal::{AttachmentScope, MAX_ATTACHMENT_PATH};
use crate::schema::activity::CommandAction;
use crate::schema::code::ApiCode;
use crate::schema::files::{AttachRequest, Attached, Uploaded};
use gateway_proto::{BotId, BotLease, ErrorCode, ListFiles, ReadFile, WriteFile};
use hyper::body::Incoming;
use hyper::{Response, StatusCode};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tracing::info;

/// Default cap of one upload or attachment.
pub const DEFAULT_ATTACHMENT_MAX_BYTES: u64 = 100 << 20;
/// Default lifetime of an attachment URL.
pub const DEFAULT_ATTACHMENT_URL_TTL: Duration = Duration::from_secs(10 * 60);
/// Longest upload file name, in bytes (one path component).
const MAX_NAME: usize = 255;
/// Suffixes ` (2)` … tried for a taken name before giving up.
const MAX_SUFFIX: u32 = 1000;

/// Where a bot's uploads land: a Team bot's own directory, a Private computer's home (the bot's).
fn upload_dir(kind: &ComputerKind, bot: &BotId) -> String {
    match kind {
        ComputerKind::Team { .. } => format!("bots/{}/uploads", bot.as_str()),
        ComputerKind::Private { .. } | ComputerKind::Pool { .. } => "uploads".to_string(),
    }
}

/// An upload's file name: one plain path component.
fn check_name(name: &str) -> Result<(), ApiError> {
    let bad = |why: &str| Err(ApiError::bad_request(format!("name {name:?} {why}")));
    if name.is_empty() {
        return Err(ApiError::bad_request("name is required"));
    }
    if name.len() > MAX_NAME {
        return bad(&format!("is longer than {MAX_NAME} bytes"));
    }
    if name == "." || name == ".." || name.contains('/') {
        return bad("must be a file name, not a path");
    }
    if name.chars().any(char::is_control) {
        return bad("has control characters");
    }
    if name.starts_with(".rakazo-") {
        return bad("uses the reserved prefix .rakazo-");
    }
    Ok(())
}

/// `name`, or `stem (n).ext` for the first `n` not in `taken`.
fn free_name(name: &str, taken: &HashSet<String>) -> Option<String> {
    if !taken.contains(name) {
        return Some(name.to_string());
    }
    let (stem, ext) = match name.rfind('.') {
        Some(i) if i > 0 => name.split_at(i),
        _ => (name, ""),
    };
    (2..=MAX_SUFFIX)
        .map(|n| format!("{stem} ({n}){ext}"))
        .find(|c| c.len() <= MAX_NAME && !taken.contains(c))
}

/// `PUT /v1/computers/{id}/uploads/{bot}?name=…&control=…`.
pub async fn upload(
    api: &Arc<Api>,
    id: &str,
    bot: BotId,
    q: &HashMap<String, String>,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let name = q.get("name").map(String::as_str).unwrap_or_default();
    check_name(name)?;
    let control = q.get("control").map(String::as_str).unwrap_or_default();
    let size = content_length(&req)?;
    let max = api.limits.attachment_max_bytes;
    if size > max {
        return Err(ApiError::new(
            ApiCode::AttachmentTooLarge,
            format!("the upload is {size} bytes; the attachment limit is {max} bytes"),
        ));
    }
    let c = api.core.get(id).await?;
    // The user's control of this bot, live now: the same lease the control screen is under.
    let live = api
        .core
        .live
        .store
        .get(&c.id, &bot)
        .await
        .map_err(crate::live::authority::LiveError::from)?;
    match live.control_at(now_ms()) {
        Some(lease) if !control.is_empty() && lease.id == control => {}
        Some(_) => {
            return Err(ApiError::new(
                ApiCode::ControlRequired,
                format!(
                    "control lease {control:?} is not the live control of bot {bot} on \
                     computer {id}"
                ),
            ))
        }
        None => {
            return Err(ApiError::new(
                ApiCode::ControlRequired,
                format!(
                    "uploading to bot {bot} on computer {id} needs the user's control of the bot \
                     (take it with `screen takeover`)"
                ),
            ))
        }
    }
    let dir = upload_dir(&c.kind, &bot);
    let list = ListFiles {
        path: dir.clone(),
        lease: None,
    };
    let taken: HashSet<String> = match api.core.call(id, list).await {
        Ok(entries) => entries
            .into_iter()
            .filter_map(|e| e.path.rsplit('/').next().map(str::to_string))
            .collect(),
        Err(crate::core::CoreError::Tunnel(crate::tunnel::TunnelError::Guest(e)))
            if e.code == ErrorCode::NotFound =>
        {
            HashSet::new()
        }
        Err(e) => return Err(e.into()),
    };
    let Some(landed) = free_name(name, &taken) else {
        return Err(ApiError::new(
            ApiCode::Exists,
            format!("{dir}/{name} and its {MAX_SUFFIX} numbered variants are all taken"),
        ));
    };
    let path = format!("{dir}/{landed}");
    let record = CommandStart::action(id, Some(bot.as_str()), CommandAction::Upload, path.clone());
    let result = write_upload(api, id, &path, size, req).await;
    feed(api, record, result.as_ref().copied());
    let written = result?;
    info!(computer_id = %id, bot = %bot, bytes = written, "user uploaded a file");
    Ok(json_response(
        StatusCode::OK,
        &Uploaded {
            path,
            size: written,
        },
    ))
}

/// One line in the feed for `record`, written after the answer (never holding it up).
fn feed(api: &Arc<Api>, record: CommandStart, result: Result<u64, &ApiError>) {
    let activity = api.core.activity.clone();
    let recorded = match result {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) => Err((e.message.clone(), e.uncertain)),
    };
    tokio::spawn(async move { activity.action(&record, recorded).await });
}

/// Streams a user's upload to `path`, never replacing a file; the bytes committed.
async fn write_upload(
    api: &Arc<Api>,
    id: &str,
    path: &str,
    size: u64,
    req: hyper::Request<Incoming>,
) -> Result<u64, ApiError> {
    let wreq = WriteFile {
        path: path.to_string(),
        executable: false,
        size,
        lease: None,
        no_replace: true,
    };
    let guest = api.core.guest_for(id, &wreq).await?;
    write_to(
        guest,
        wreq,
        size,
        http_body_util::BodyExt::into_data_stream(req.into_body()),
    )
    .await
}

/// `POST /v1/computers/{id}/files/attach` `{path, bot, lease}`: the bot's file as a download URL.
pub async fn attach(
    api: &Arc<Api>,
    id: &str,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let host = super::live::request_host(&req);
    let body: AttachRequest = read_json(req.into_body()).await?;
    let bot = parse_bot(&body.bot)?;
    let lease = parse_lease(&body.lease)?;
    if body.path.is_empty() || body.path.len() > MAX_ATTACHMENT_PATH {
        return Err(ApiError::bad_request(format!(
            "path must be 1..={MAX_ATTACHMENT_PATH} bytes"
        )));
    }
    // Reading the start of the file checks it all at once: the bot's lease (its fence, on the
    // guest too), a regular file reached without symlinks, and the size limit (413).
    let read = ReadFile {
        path: body.path.clone(),
        max_bytes: api.limits.attachment_max_bytes,
        lease: Some(BotLease {
            bot: bot.clone(),
            token: lease,
        }),
    };
    let record = CommandStart::action(
        id,
        Some(bot.as_str()),
        CommandAction::AttachFile,
        body.path.clone(),
    );
    let size = match api.core.guest_for(id, &read).await {
        Ok(guest) => match guest.read_file(read).await {
            Ok((size, mut bytes)) => {
                bytes.abort();
                Ok(size)
            }
            Err(e) => Err(ApiError::from(e)),
        },
        // No such computer: no feed to record in.
        Err(e @ crate::core::CoreError::NotFound(_)) => return Err(e.into()),
        Err(e) => Err(ApiError::from(e)),
    };
    feed(api, record, size.as_ref().copied());
    let size = size?;
    let expires_at_ms = now_ms().saturating_add(
        i64::try_from(api.limits.attachment_url_ttl.as_millis()).unwrap_or(i64::MAX),
    );
    let scope = AttachmentScope {
        computer: id.to_string(),
        bot: bot.clone(),
        path: body.path.clone(),
        size,
    };
    let token = api
        .live
        .sealer
        .seal_attachment(expires_at_ms, &scope)
        .map_err(|_| ApiError::bad_request("this file cannot be attached"))?;
    let path = format!("/att/{token}");
    let url = host.map_or_else(|| path.clone(), |h| format!("{}://{h}{path}", api.scheme()));
    info!(computer_id = %id, bot = %bot, bytes = size, "bot attached a file");
    Ok(json_response(
        StatusCode::OK,
        &Attached {
            url,
            path,
            name: file_name(&body.path).to_string(),
            size,
            expires_at_ms,
        },
    ))
}

fn file_name(path: &str) -> &str {
    path.trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(path)
}

/// `GET /att/<sealed>`: outside the API token. Every refusal of the token itself is the same
/// 404, so a prober learns nothing; the path is logged redacted by the caller.
pub async fn download(api: &Arc<Api>, token: &str) -> Result<Response<RespBody>, ApiError> {
    let gone = || ApiError::not_found("this download link is invalid or has expired");
    let (_, scope) = api
        .live
        .sealer
        .open_attachment(token, now_ms())
        .map_err(|_| gone())?;
    let read = ReadFile {
        path: scope.path.clone(),
        max_bytes: api.limits.attachment_max_bytes,
        lease: None,
    };
    let (size, mut bytes) = api
        .core
        .guest_for(&scope.computer, &read)
        .await?
        .read_file(read)
        .await?;
    let record = CommandStart::action(
        &scope.computer,
        Some(scope.bot.as_str()),
        CommandAction::Download,
        scope.path.clone(),
    );
    if size != scope.size {
        bytes.abort();
        let err = ApiError::new(
            ApiCode::AttachmentChanged,
            format!(
                "the file was {} bytes when attached and is {size} now; attach it again",
                scope.size
            ),
        );
        feed(api, record, Err(&err));
        return Err(err);
    }
    feed(api, record, Ok(size));
    Ok(download_response(
        scope.computer.clone(),
        size,
        bytes,
        Some(file_name(&scope.path)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_name_gets_the_first_free_suffix() {
        let taken: HashSet<String> = ["a.txt", "a (2).txt", "notes", ".env"]
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(free_name("b.txt", &taken).as_deref(), Some("b.txt"));
        assert_eq!(free_name("a.txt", &taken).as_deref(), Some("a (3).txt"));
        assert_eq!(free_name("notes", &taken).as_deref(), Some("notes (2)"));
        assert_eq!(free_name(".env", &taken).as_deref(), Some(".env (2)"));
        let all: HashSet<String> = std::iter::once("x".to_string())
            .chain((2..=MAX_SUFFIX).map(|n| format!("x ({n})")))
            .collect();
        assert_eq!(free_name("x", &all), None);
    }

    #[test]
    fn an_upload_name_is_one_plain_component() {
        for ok in ["report.pdf", "a b.txt", ".env", "ünïcode"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "/etc/passwd",
            "a\nb",
            ".rakazo-write-1",
            &"n".repeat(256),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
