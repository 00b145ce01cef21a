//! `/v1/computers/{id}/network` and `/v1/workspaces/{workspace}/network`: show and set network
//! policies (`core::network`).

use super::body::{json_response, read_json, ApiError, RespBody};
use super::Api;
use crate::computers::WorkspaceId;
use crate::core::NetworkView;
use crate::schema::network::{
    NetworkCounters, NetworkPolicy, SetNetworkPolicy, WorkspaceNetworkPolicy,
};
use egress::Policy;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use std::sync::Arc;

fn view(v: NetworkView) -> NetworkPolicy {
    NetworkPolicy {
        policy: v.policy.as_ref().map(Policy::to_string),
        source: v.source.as_str().to_string(),
        enforced: v.not_enforced.is_none(),
        note: v.not_enforced.map(str::to_string),
        applied: None,
        counters: v.counters.map(|c| NetworkCounters {
            connections_allowed: c.connections_allowed,
            connections_denied: c.connections_denied,
            connections_active: c.connections_active,
            connections_limited: c.connections_limited,
            bytes_up: c.bytes_up,
            bytes_down: c.bytes_down,
            dns_answered: c.dns_answered,
            dns_refused: c.dns_refused,
            dns_rate_limited: c.dns_rate_limited,
        }),
    }
}

/// The body's policy, parsed: a bad one is a 400 naming what is wrong.
async fn read_policy(req: Request<Incoming>) -> Result<Option<Policy>, ApiError> {
    let body: SetNetworkPolicy = read_json(req.into_body()).await?;
    body.policy
        .map(|text| {
            crate::network::parse(&text)
                .map_err(|e| ApiError::bad_request(format!("network policy: {e}")))
        })
        .transpose()
}

fn workspace(raw: &str) -> Result<WorkspaceId, ApiError> {
    WorkspaceId::new(raw).map_err(|e| ApiError::bad_request(e.to_string()))
}

pub async fn show(api: &Arc<Api>, id: &str) -> Result<Response<RespBody>, ApiError> {
    let v = api.core.network_policy(id).await?;
    Ok(json_response(StatusCode::OK, &view(v)))
}

pub async fn set(
    api: &Arc<Api>,
    id: &str,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let policy = read_policy(req).await?;
    let v = api.core.set_network_policy(id, policy).await?;
    let applied = v.applied;
    let shown = NetworkPolicy {
        applied: Some(applied),
        ..view(v)
    };
    Ok(json_response(StatusCode::OK, &shown))
}

pub async fn show_workspace(api: &Arc<Api>, raw: &str) -> Result<Response<RespBody>, ApiError> {
    let ws = workspace(raw)?;
    let policy = api.core.workspace_network_policy(&ws).await?;
    Ok(json_response(
        StatusCode::OK,
        &WorkspaceNetworkPolicy {
            workspace: ws.to_string(),
            policy: policy.as_ref().map(Policy::to_string),
        },
    ))
}

pub async fn set_workspace(
    api: &Arc<Api>,
    raw: &str,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let ws = workspace(raw)?;
    let policy = read_policy(req).await?;
    let policy = api.core.set_workspace_network_policy(&ws, policy).await?;
    Ok(json_response(
        StatusCode::OK,
        &WorkspaceNetworkPolicy {
            workspace: ws.to_string(),
            policy: policy.as_ref().map(Policy::to_string),
        },
    ))
}
