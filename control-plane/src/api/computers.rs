//! `/v1/computers`: create, list, show, start, stop, destroy.

use super::body::{empty, json_response, read_json, ApiError, RespBody};
use super::{parse_bot, Api};
use crate::computers::{Computer, ComputerKind, WorkspaceId};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    /// A Team computer for this workspace.
    workspace: Option<String>,
    /// A Private computer for this bot.
    private_bot: Option<String>,
    provider: Option<String>,
    /// Resource limits of its machines (memory_mb, cpu_millis, pids, shm_mb).
    #[serde(default)]
    limits: providers::MachineLimits,
}

/// The wire shape of a computer.
#[derive(Serialize)]
pub struct ComputerView {
    id: String,
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    workspace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bot: Option<String>,
    home_key: String,
    provider: String,
    #[serde(skip_serializing_if = "is_default_limits")]
    limits: providers::MachineLimits,
    state: &'static str,
    connected: bool,
    created_at_ms: i64,
    updated_at_ms: i64,
    /// What idle suspension last decided about it (running computers; see `crate::idle`).
    #[serde(skip_serializing_if = "Option::is_none")]
    idle: Option<serde_json::Value>,
}

fn is_default_limits(l: &providers::MachineLimits) -> bool {
    *l == providers::MachineLimits::default()
}

impl ComputerView {
    fn with_idle(mut self, api: &Api) -> Self {
        self.idle = api.core.idle.report(&self.id).map(|r| r.to_json());
        self
    }
}

impl From<&Computer> for ComputerView {
    fn from(c: &Computer) -> Self {
        let (kind, workspace, bot) = match &c.kind {
            ComputerKind::Team { workspace } => {
                ("team", Some(workspace.as_str().to_string()), None)
            }
            ComputerKind::Private { bot } => ("private", None, Some(bot.as_str().to_string())),
        };
        Self {
            id: c.id.as_str().to_string(),
            kind,
            workspace,
            bot,
            home_key: c.home_key.clone(),
            provider: c.provider.clone(),
            limits: c.limits,
            state: c.state.as_str(),
            connected: c.connected,
            created_at_ms: c.created_at_ms,
            updated_at_ms: c.updated_at_ms,
            idle: None,
        }
    }
}

pub async fn create(
    api: &Arc<Api>,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let body: CreateBody = read_json(req.into_body()).await?;
    let kind = match (body.workspace, body.private_bot) {
        (Some(ws), None) => ComputerKind::Team {
            workspace: WorkspaceId::new(ws).map_err(|e| ApiError::bad_request(e.to_string()))?,
        },
        (None, Some(bot)) => ComputerKind::Private {
            bot: parse_bot(&bot)?,
        },
        _ => {
            return Err(ApiError::bad_request(
                "give exactly one of workspace or private_bot",
            ))
        }
    };
    let c = api
        .core
        .create(kind, body.provider.as_deref(), body.limits)
        .await?;
    Ok(json_response(StatusCode::CREATED, &ComputerView::from(&c)))
}

pub async fn list(api: &Arc<Api>) -> Result<Response<RespBody>, ApiError> {
    let all = api.core.list().await?;
    let views: Vec<ComputerView> = all
        .iter()
        .map(|c| ComputerView::from(c).with_idle(api))
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({ "computers": views }),
    ))
}

pub async fn show(api: &Arc<Api>, id: &str) -> Result<Response<RespBody>, ApiError> {
    let c = api.core.get(id).await?;
    Ok(json_response(
        StatusCode::OK,
        &ComputerView::from(&c).with_idle(api),
    ))
}

pub async fn start(api: &Arc<Api>, id: &str) -> Result<Response<RespBody>, ApiError> {
    let c = api.core.start(id).await?;
    Ok(json_response(StatusCode::OK, &ComputerView::from(&c)))
}

pub async fn stop(api: &Arc<Api>, id: &str) -> Result<Response<RespBody>, ApiError> {
    let c = api.core.stop(id).await?;
    Ok(json_response(StatusCode::OK, &ComputerView::from(&c)))
}

pub async fn destroy(api: &Arc<Api>, id: &str) -> Result<Response<RespBody>, ApiError> {
    api.core.destroy(id).await?;
    let mut resp = Response::new(empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    Ok(resp)
}
