//! `/v1/pools`: warm pools (docs/pools.md). Creating, resizing and deleting one is an admin's;
//! `POST /v1/computers` with `pool` takes a computer from one (`api::computers`).

use super::body::{json_response, read_json};
use super::{Api, ApiError, RespBody};
use crate::pools::PoolError;
use crate::schema::code::ApiCode;
use crate::schema::pool::{CreatePool, Pool, PoolDeleted, PoolList, PoolMember, ResizePool};
use crate::tokens::Principal;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use std::sync::Arc;

/// A pool store's refusal.
pub fn pool_error(e: PoolError) -> ApiError {
    let msg = e.to_string();
    match e {
        PoolError::NotFound(_) => ApiError::new(ApiCode::PoolNotFound, msg),
        PoolError::Exists(_) => ApiError::new(ApiCode::Exists, msg),
        PoolError::Invalid(_) => ApiError::bad_request(msg),
        PoolError::Db(d) => ApiError::db(&d),
    }
}

/// The API's view of pool `p` with its members now.
async fn shown(api: &Api, p: crate::pools::Pool) -> Result<Pool, ApiError> {
    let members = api.core.pool_members(&p.name).await?;
    let ready = members.iter().filter(|(_, ready)| *ready).count();
    Ok(Pool {
        name: p.name.to_string(),
        provider: p.provider,
        size: p.size,
        desktop: p.desktop,
        limits: p.limits,
        ready: u32::try_from(ready).unwrap_or(u32::MAX),
        members: members
            .into_iter()
            .map(|(c, ready)| PoolMember {
                id: c.id.to_string(),
                state: c.state.as_str().to_string(),
                ready,
            })
            .collect(),
        created_by: p.created_by,
        created_at_ms: p.created_at_ms,
    })
}

/// `POST /v1/pools`.
pub async fn create(
    api: &Arc<Api>,
    who: &Principal,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let body: CreatePool = read_json(req.into_body()).await?;
    let p = api
        .core
        .create_pool(
            &body.name,
            body.provider.as_deref(),
            body.size,
            body.desktop,
            body.limits,
            &who.name,
        )
        .await?;
    Ok(json_response(StatusCode::CREATED, &shown(api, p).await?))
}

/// `GET /v1/pools`.
pub async fn list(api: &Arc<Api>) -> Result<Response<RespBody>, ApiError> {
    let mut pools = Vec::new();
    for p in api.core.pools.list().await.map_err(pool_error)? {
        pools.push(shown(api, p).await?);
    }
    Ok(json_response(StatusCode::OK, &PoolList { pools }))
}

/// `GET /v1/pools/{pool}`.
pub async fn show(api: &Arc<Api>, pool: &str) -> Result<Response<RespBody>, ApiError> {
    let p = api.core.pool(pool).await?;
    Ok(json_response(StatusCode::OK, &shown(api, p).await?))
}

/// `PUT /v1/pools/{pool}`.
pub async fn resize(
    api: &Arc<Api>,
    pool: &str,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let body: ResizePool = read_json(req.into_body()).await?;
    let p = api.core.resize_pool(pool, body.size).await?;
    Ok(json_response(StatusCode::OK, &shown(api, p).await?))
}

/// `DELETE /v1/pools/{pool}`.
pub async fn delete(api: &Arc<Api>, pool: &str) -> Result<Response<RespBody>, ApiError> {
    let destroyed = api.core.delete_pool(pool).await?;
    Ok(json_response(
        StatusCode::OK,
        &PoolDeleted {
            name: pool.to_string(),
            destroyed,
        },
    ))
}
