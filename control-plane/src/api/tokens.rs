//! `/v1/tokens…` (docs/security.md#api-tokens): make, list and revoke scoped API tokens. A
//! token's value is answered once, by `create`; only its digest is kept.

use super::body::{json_response, read_json, ApiError, RespBody};
use super::Api;
use crate::clock::now_ms;
use crate::schema::code::ApiCode;
use crate::schema::token::{CreateToken, CreatedToken, TokenInfo, TokenList};
use crate::tokens::{NewToken, Role, TokenError};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use std::sync::Arc;

fn token_error(e: TokenError) -> ApiError {
    let msg = e.to_string();
    match e {
        TokenError::Bad(_) => ApiError::bad_request(msg),
        TokenError::NotFound(_) => ApiError::new(ApiCode::NotFound, msg),
        TokenError::TooMany => ApiError::new(ApiCode::Exists, msg),
        TokenError::Db(e) => ApiError::db(&e),
    }
}

pub(super) fn view(t: crate::tokens::TokenInfo) -> TokenInfo {
    TokenInfo {
        id: t.id,
        name: t.principal.name,
        role: t.principal.role.as_str().to_string(),
        workspaces: t.principal.workspaces,
        created_at_ms: t.created_at_ms,
        expires_at_ms: t.principal.expires_at_ms,
        revoked_at_ms: t.revoked_at_ms,
    }
}

pub async fn create(
    api: &Arc<Api>,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let body: CreateToken = read_json(req.into_body()).await?;
    let role = Role::parse(&body.role).map_err(token_error)?;
    let now = now_ms();
    let expires_at_ms = match body.expires_in_secs {
        None => None,
        Some(s) if (1..=10 * 366 * 86_400).contains(&s) => {
            Some(now.saturating_add(i64::try_from(s).unwrap_or(i64::MAX).saturating_mul(1000)))
        }
        Some(_) => {
            return Err(ApiError::bad_request(
                "expires_in_secs must be 1 second to 10 years",
            ))
        }
    };
    let new = NewToken {
        name: body.name,
        role,
        workspaces: body.workspaces,
        expires_at_ms,
    };
    let (info, token) = api
        .core
        .tokens
        .create(new, now)
        .await
        .map_err(token_error)?;
    tracing::info!(token.id = %info.id, role = role.as_str(), "api token created");
    Ok(json_response(
        StatusCode::CREATED,
        &CreatedToken {
            info: view(info),
            token,
        },
    ))
}

pub async fn list(api: &Arc<Api>) -> Result<Response<RespBody>, ApiError> {
    let tokens = api.core.tokens.list().await.map_err(ApiError::internal)?;
    let tokens = tokens.into_iter().map(view).collect();
    Ok(json_response(StatusCode::OK, &TokenList { tokens }))
}

pub async fn revoke(api: &Arc<Api>, id: &str) -> Result<Response<RespBody>, ApiError> {
    let info = api
        .core
        .tokens
        .revoke(id, now_ms())
        .await
        .map_err(token_error)?;
    tracing::info!(token.id = %info.id, "api token revoked; its console sessions ended");
    Ok(json_response(StatusCode::OK, &view(info)))
}
