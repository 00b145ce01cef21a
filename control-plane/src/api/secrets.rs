//! `/v1/workspaces/{workspace}/secrets…` (docs/api.md#secrets): set, rotate, list and delete a
//! workspace's secrets. A value arrives in a `PUT` body and is never answered, logged or
//! recorded; every answer is [`SecretInfo`]s.

use super::body::{json_response, read_json, ApiError, RespBody};
use super::Api;
use crate::computers::WorkspaceId;
use crate::schema::code::ApiCode;
use crate::schema::secret::{PutSecret, SecretDeleted, SecretInfo, SecretList};
use crate::secrets::{SecretError, SecretRecord};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use std::sync::Arc;

fn secret_error(e: SecretError) -> ApiError {
    let msg = e.to_string();
    match e {
        SecretError::Invalid(_) => ApiError::bad_request(msg),
        SecretError::NotFound { .. } => ApiError::new(ApiCode::NotFound, msg),
        SecretError::TooMany(_) => ApiError::new(ApiCode::TooManySecrets, msg),
        SecretError::Db(d) => ApiError::db(&d),
    }
}

fn workspace(raw: &str) -> Result<WorkspaceId, ApiError> {
    WorkspaceId::new(raw).map_err(|e| ApiError::bad_request(e.to_string()))
}

fn info(r: SecretRecord) -> SecretInfo {
    SecretInfo {
        env_var: providers::local::secret_env_name(&r.name),
        workspace: r.workspace,
        name: r.name,
        domains: r.domains,
        header: r.header,
        placeholder: r.placeholder,
        created_at_ms: r.created_at_ms,
        rotated_at_ms: r.rotated_at_ms,
    }
}

pub async fn list(api: &Arc<Api>, ws: &str) -> Result<Response<RespBody>, ApiError> {
    let ws = workspace(ws)?;
    let secrets = api
        .core
        .secrets
        .list(ws.as_str())
        .await
        .map_err(secret_error)?;
    let secrets = secrets.into_iter().map(info).collect();
    Ok(json_response(StatusCode::OK, &SecretList { secrets }))
}

pub async fn put(
    api: &Arc<Api>,
    ws: &str,
    name: &str,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let ws = workspace(ws)?;
    let body: PutSecret = read_json(req.into_body()).await?;
    let (record, _new) = api
        .core
        .put_secret(
            ws.as_str(),
            name,
            &body.domains,
            body.header.as_deref(),
            &body.value,
        )
        .await
        .map_err(secret_error)?;
    Ok(json_response(StatusCode::OK, &info(record)))
}

pub async fn delete(api: &Arc<Api>, ws: &str, name: &str) -> Result<Response<RespBody>, ApiError> {
    let ws = workspace(ws)?;
    api.core
        .delete_secret(ws.as_str(), name)
        .await
        .map_err(secret_error)?;
    Ok(json_response(
        StatusCode::OK,
        &SecretDeleted {
            deleted: name.to_string(),
        },
    ))
}
