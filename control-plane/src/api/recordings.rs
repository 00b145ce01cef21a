//! `/v1/computers/{id}/recording(s)` (docs/recordings.md): turn screen recording on or off,
//! list what was recorded, read a bot's recording.

use super::body::{full, json_response, read_json};
use super::{Api, ApiError, RespBody};
use crate::clock::now_ms;
use crate::recordings::{Piece, RecordingError, Setting};
use crate::schema::recording::{BotRecording, RecordingList, RecordingSetting, SetRecording};
use crate::tokens::Principal;
use bytes::Bytes;
use gateway_proto::BotId;
use hyper::body::Incoming;
use hyper::{header, Response, StatusCode};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tracing::info;

impl From<RecordingError> for ApiError {
    fn from(e: RecordingError) -> Self {
        match e {
            RecordingError::TooLarge(m) => ApiError::bad_request(m),
            RecordingError::Db(e) => ApiError::db(&e),
            RecordingError::Store(m) => ApiError::internal(m),
        }
    }
}

fn shown(api: &Api, s: Option<Setting>) -> RecordingSetting {
    let retention_hours = api.core.recordings.retention.as_secs() / 3600;
    match s {
        Some(s) => RecordingSetting {
            enabled: s.enabled,
            source: if s.own { "computer" } else { "workspace" }.into(),
            set_by: Some(s.set_by),
            set_at_ms: Some(s.set_at_ms),
            retention_hours,
        },
        None => RecordingSetting {
            enabled: false,
            source: "default".into(),
            set_by: None,
            set_at_ms: None,
            retention_hours,
        },
    }
}

/// The computer's workspace, if it is a team computer.
fn workspace_of(c: &crate::computers::Computer) -> Option<&str> {
    match &c.kind {
        crate::computers::ComputerKind::Team { workspace } => Some(workspace.as_str()),
        crate::computers::ComputerKind::Private { .. }
        | crate::computers::ComputerKind::Pool { .. } => None,
    }
}

/// `PUT /v1/workspaces/{workspace}/recording`: the default of the workspace's computers that
/// have no setting of their own.
pub async fn set_workspace(
    api: &Arc<Api>,
    who: &Principal,
    raw: &str,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let ws = crate::computers::WorkspaceId::new(raw)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let body: SetRecording = read_json(req.into_body()).await?;
    let s = api
        .core
        .recordings
        .set_workspace(ws.as_str(), body.enabled, &who.name, now_ms())
        .await
        .map_err(ApiError::internal)?;
    info!(workspace = %ws, enabled = body.enabled, by = %who.name, "screen recording default set");
    Ok(json_response(StatusCode::OK, &shown(api, Some(s))))
}

/// `PUT …/recording`.
pub async fn set(
    api: &Arc<Api>,
    who: &Principal,
    id: &str,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let body: SetRecording = read_json(req.into_body()).await?;
    // A destroyed computer is a 404 from `get`.
    api.core.get(id).await?;
    let s = api
        .core
        .recordings
        .set(id, body.enabled, &who.name, now_ms())
        .await
        .map_err(ApiError::internal)?;
    info!(computer_id = %id, enabled = body.enabled, by = %who.name, "screen recording set");
    Ok(json_response(StatusCode::OK, &shown(api, Some(s))))
}

/// What was recorded of each bot, from the pieces in time order.
fn by_bot(pieces: &[Piece]) -> Vec<BotRecording> {
    let mut bots: BTreeMap<&str, BotRecording> = BTreeMap::new();
    for p in pieces {
        let b = bots.entry(&p.bot).or_insert_with(|| BotRecording {
            bot: p.bot.clone(),
            started_at_ms: p.start_ms,
            ended_at_ms: p.end_ms,
            bytes: 0,
            pieces: 0,
            lost: 0,
        });
        b.started_at_ms = b.started_at_ms.min(p.start_ms);
        b.ended_at_ms = b.ended_at_ms.max(p.end_ms);
        b.bytes += p.bytes;
        b.pieces += 1;
        b.lost += p.lost;
    }
    bots.into_values().collect()
}

/// `GET …/recordings`.
pub async fn list(api: &Arc<Api>, id: &str) -> Result<Response<RespBody>, ApiError> {
    let c = api.core.get(id).await?;
    let setting = api
        .core
        .recordings
        .setting(id, workspace_of(&c))
        .await
        .map_err(ApiError::internal)?;
    let pieces = api
        .core
        .recordings
        .pieces(id, None, None, None)
        .await
        .map_err(ApiError::internal)?;
    let list = RecordingList {
        setting: shown(api, setting),
        bots: by_bot(&pieces),
    };
    Ok(json_response(StatusCode::OK, &list))
}

fn ms(query: &HashMap<String, String>, key: &str) -> Result<Option<i64>, ApiError> {
    query
        .get(key)
        .map(|v| {
            v.parse::<i64>().map_err(|_| {
                ApiError::bad_request(format!("{key} must be a time in ms since 1970, got {v:?}"))
            })
        })
        .transpose()
}

/// `GET …/recordings/{bot}`: the records, raw.
pub async fn read(
    api: &Arc<Api>,
    id: &str,
    bot: &BotId,
    query: &HashMap<String, String>,
) -> Result<Response<RespBody>, ApiError> {
    let (since, until) = (ms(query, "since")?, ms(query, "until")?);
    if let (Some(s), Some(u)) = (since, until) {
        if s > u {
            return Err(ApiError::bad_request("since is after until"));
        }
    }
    api.core.get(id).await?;
    let bytes = api
        .core
        .recordings
        .read(id, bot.as_str(), since, until)
        .await?;
    if bytes.is_empty() {
        return Err(ApiError::new(
            crate::schema::code::ApiCode::NotFound,
            format!("nothing was recorded of bot {bot} on this computer in that time"),
        ));
    }
    let len = bytes.len();
    let mut resp = Response::new(full(Bytes::from(bytes)));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::CONTENT_LENGTH, header::HeaderValue::from(len));
    Ok(resp)
}
