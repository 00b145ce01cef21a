//! `/v1/computers/{id}/leases/{bot}`: acquire, renew, release and inspect execution leases.

use super::body::{json_response, ApiError, RespBody};
use super::{bot_json, parse_lease, Api};
use crate::core::RunOutcome;
use crate::homes::flow;
use crate::lease::EXEC_LEASE_TTL;
use crate::schema::lease::{Lease, LeaseReleased, LeaseRequest, RunCheckpoint};
use gateway_proto::{BotId, LeaseToken};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use std::sync::Arc;
use std::time::Duration;

/// Longest TTL a caller may ask for.
const MAX_TTL_MS: u64 = 60 * 60 * 1000;

/// The API's view of a lease.
fn view(l: &crate::lease::Lease) -> Lease {
    Lease {
        computer: l.computer.as_str().to_string(),
        bot: l.bot.as_str().to_string(),
        lease: l.token.to_string(),
        owner: l.token.owner().to_string(),
        fence: l.token.fence(),
        expires_at_ms: l.expires_at_ms,
    }
}

/// What the run-end checkpoint did, as the release answers it: a failed checkpoint is reported
/// to the run, not only logged.
fn checkpoint_view(c: &flow::RunCheckpoint) -> RunCheckpoint {
    use flow::RunCheckpoint as Done;
    match c {
        Done::Saved(done) => RunCheckpoint::Saved {
            revision: done.revision.get(),
            bytes: done.bytes,
        },
        Done::Deferred(bots) => RunCheckpoint::Deferred {
            waiting_for: bots.clone(),
        },
        Done::Skipped(why) => RunCheckpoint::Skipped {
            reason: why.to_string(),
        },
        Done::Failed(error) => RunCheckpoint::Failed {
            error: error.clone(),
        },
    }
}

fn ttl(body: &LeaseRequest) -> Result<Duration, ApiError> {
    match body.ttl_ms {
        None => Ok(EXEC_LEASE_TTL),
        Some(ms) if (1..=MAX_TTL_MS).contains(&ms) => Ok(Duration::from_millis(ms)),
        Some(_) => Err(ApiError::bad_request(format!(
            "ttl_ms must be 1..={MAX_TTL_MS}"
        ))),
    }
}

fn token(body: &LeaseRequest) -> Result<LeaseToken, ApiError> {
    let raw = body
        .lease
        .as_deref()
        .ok_or_else(|| ApiError::bad_request("lease is required"))?;
    parse_lease(raw)
}

/// What `POST …/leases/{bot}/{action}` does.
#[derive(Debug, Clone, Copy)]
pub enum Action {
    Acquire,
    Renew,
    Release,
}

pub async fn act(
    api: &Arc<Api>,
    id: &str,
    bot: BotId,
    action: Action,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let (bot, body): (_, LeaseRequest) = bot_json(bot, req).await?;
    match action {
        Action::Acquire => {
            let owner = body
                .owner
                .as_deref()
                .ok_or_else(|| ApiError::bad_request("owner is required"))?;
            let lease = api.core.acquire_lease(id, &bot, owner, ttl(&body)?).await?;
            Ok(json_response(StatusCode::OK, &view(&lease)))
        }
        Action::Renew => {
            let lease = api
                .core
                .renew_lease(id, &bot, &token(&body)?, ttl(&body)?)
                .await?;
            Ok(json_response(StatusCode::OK, &view(&lease)))
        }
        Action::Release => {
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
            let released = LeaseReleased {
                released: true,
                checkpoint: checkpoint_view(&checkpoint),
            };
            Ok(json_response(StatusCode::OK, &released))
        }
    }
}

pub async fn get(api: &Arc<Api>, id: &str, bot: BotId) -> Result<Response<RespBody>, ApiError> {
    match api.core.get_lease(id, &bot).await? {
        Some(l) => Ok(json_response(StatusCode::OK, &view(&l))),
        None => Err(ApiError::not_found(format!(
            "bot {bot} holds no live lease on computer {id}"
        ))),
    }
}
