//! `/v1/computers/{id}/leases/{bot}`: acquire, renew, release and inspect execution leases.

use super::body::{json_response, ApiError, RespBody};
use super::{bot_json, parse_bot, parse_lease, Api};
use crate::core::RunOutcome;
use crate::lease::{Lease, EXEC_LEASE_TTL};
use gateway_proto::LeaseToken;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// Longest TTL a caller may ask for.
const MAX_TTL_MS: u64 = 60 * 60 * 1000;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LeaseBody {
    /// acquire: the run id that will own the lease.
    owner: Option<String>,
    /// renew, release: the lease as `<owner>:<fence>`.
    lease: Option<String>,
    ttl_ms: Option<u64>,
    /// release: how the run ended (`success`, `failed`, `cancelled`); a failed or cancelled run
    /// tears the bot's desktop down (contracts.md §3).
    outcome: Option<String>,
}

fn view(l: &Lease) -> serde_json::Value {
    serde_json::json!({
        "computer": l.computer.as_str(),
        "bot": l.bot.as_str(),
        "lease": l.token.to_string(),
        "owner": l.token.owner(),
        "fence": l.token.fence(),
        "expires_at_ms": l.expires_at_ms,
    })
}

fn ttl(body: &LeaseBody) -> Result<Duration, ApiError> {
    match body.ttl_ms {
        None => Ok(EXEC_LEASE_TTL),
        Some(ms) if (1..=MAX_TTL_MS).contains(&ms) => Ok(Duration::from_millis(ms)),
        Some(_) => Err(ApiError::bad_request(format!(
            "ttl_ms must be 1..={MAX_TTL_MS}"
        ))),
    }
}

fn token(body: &LeaseBody) -> Result<LeaseToken, ApiError> {
    let raw = body
        .lease
        .as_deref()
        .ok_or_else(|| ApiError::bad_request("lease is required"))?;
    parse_lease(raw)
}

pub async fn act(
    api: &Arc<Api>,
    id: &str,
    bot: &str,
    action: &str,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let (bot, body): (_, LeaseBody) = bot_json(bot, req).await?;
    match action {
        "acquire" => {
            let owner = body
                .owner
                .as_deref()
                .ok_or_else(|| ApiError::bad_request("owner is required"))?;
            let lease = api.core.acquire_lease(id, &bot, owner, ttl(&body)?).await?;
            Ok(json_response(StatusCode::OK, &view(&lease)))
        }
        "renew" => {
            let lease = api
                .core
                .renew_lease(id, &bot, &token(&body)?, ttl(&body)?)
                .await?;
            Ok(json_response(StatusCode::OK, &view(&lease)))
        }
        "release" => {
            let outcome = match body.outcome.as_deref() {
                None | Some("success") => RunOutcome::Success,
                Some("failed") => RunOutcome::Failed,
                Some("cancelled") => RunOutcome::Cancelled,
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "outcome must be success, failed or cancelled, got {other:?}"
                    )))
                }
            };
            let checkpoint = api
                .core
                .release_lease(id, &bot, &token(&body)?, outcome)
                .await?;
            Ok(json_response(
                StatusCode::OK,
                &serde_json::json!({ "released": true, "checkpoint": checkpoint.to_json() }),
            ))
        }
        other => Err(ApiError::not_found(format!(
            "no lease action {other:?}; use acquire, renew or release"
        ))),
    }
}

pub async fn get(api: &Arc<Api>, id: &str, bot: &str) -> Result<Response<RespBody>, ApiError> {
    let bot = parse_bot(bot)?;
    match api.core.get_lease(id, &bot).await? {
        Some(l) => Ok(json_response(StatusCode::OK, &view(&l))),
        None => Err(ApiError::not_found(format!(
            "bot {bot} holds no live lease on computer {id}"
        ))),
    }
}
