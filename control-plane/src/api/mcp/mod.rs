//! The MCP endpoint (`crate::mcp`) on the API's HTTP server: authentication, the session's binding, and the
//! hand-over to rmcp's streamable HTTP service; and minting session tokens.
//!
//! `POST|GET|DELETE /v1/mcp/{computer}/{bot}` takes `Authorization: Bearer` with the API token,
//! or a session token whose sealed scope is exactly that computer and bot (any other is 403,
//! a token that does not open 401; the token is never logged or echoed). A request naming a
//! session (`Mcp-Session-Id`) that was made at another endpoint is answered as an unknown
//! session (404). rmcp checks the `Host` header against the allowed hosts (`--mcp-allowed-hosts`).

mod shell;
mod tools;

use crate::api::{json_response, parse_bot, read_json, Api, ApiError, RespBody};
use crate::clock::now_ms;
use crate::core::RunOutcome;
use crate::live::seal::McpScope;
use crate::mcp::session::{Binding, Registry};
use crate::mcp::{McpConfig, DEFAULT_TOKEN_TTL, MAX_TOKEN_TTL};
use crate::schema::code::ApiCode;
use crate::schema::mcp::{McpToken, McpTokenRequest};
use gateway_proto::BotId;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{header, Method, Request, Response, StatusCode};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;
use tools::Tools;

/// The MCP endpoint's state: rmcp's sessions and ours.
pub struct Mcp {
    sessions: Arc<LocalSessionManager>,
    registry: Arc<Registry>,
    rmcp: StreamableHttpServerConfig,
}

impl Mcp {
    pub fn new(config: &McpConfig) -> Self {
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = Some(config.session_idle);
        let rmcp = StreamableHttpServerConfig::default();
        let rmcp = match &config.allowed_hosts {
            Some(hosts) => rmcp.with_allowed_hosts(hosts.clone()),
            None => rmcp.disable_allowed_hosts(),
        };
        Self {
            sessions: Arc::new(sessions),
            registry: Arc::new(Registry::default()),
            rmcp,
        }
    }
}

impl Default for Mcp {
    fn default() -> Self {
        Self::new(&McpConfig::default())
    }
}

fn unauthorized() -> ApiError {
    ApiError::new(
        ApiCode::Unauthorized,
        "missing or wrong API token or MCP session token",
    )
}

/// Whether the request may use the endpoint of `binding`: the API token, or a session token
/// for exactly this computer and bot.
fn authorize(
    api: &Api,
    who: Option<&crate::tokens::Principal>,
    binding: &Binding,
    req: &Request<Incoming>,
) -> Result<(), ApiError> {
    // An API token the router already authorized for this computer.
    if who.is_some() {
        return Ok(());
    }
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(unauthorized)?;
    let (_, scope) = api
        .live
        .sealer
        .open_mcp(presented, now_ms())
        .map_err(|_| unauthorized())?;
    if scope.computer != binding.computer || scope.bot != binding.bot {
        return Err(ApiError::new(
            ApiCode::Forbidden,
            "this MCP session token is for another computer or bot",
        ));
    }
    Ok(())
}

/// `… /v1/mcp/{computer}/{bot}`.
pub async fn serve(
    api: &Arc<Api>,
    who: Option<&crate::tokens::Principal>,
    id: &str,
    bot: &str,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let binding = Binding {
        computer: id.to_string(),
        bot: parse_bot(bot)?,
    };
    authorize(api, who, &binding, &req)?;
    // The computer must exist (the session's tools would all fail otherwise).
    api.core.get(id).await?;
    let session = req
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|sid| Some((sid.to_string(), api.mcp.registry.get(sid)?)));
    if let Some((_, held)) = &session {
        if held.binding != binding {
            return Err(ApiError::not_found("Session not found"));
        }
    }
    if req.method() == Method::DELETE {
        let outcome = match crate::api::query_value(&req, "outcome").as_deref() {
            None | Some("success") => RunOutcome::Success,
            Some("failed") => RunOutcome::Failed,
            Some("cancelled") => RunOutcome::Cancelled,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "outcome must be success, failed or cancelled, got {:?}",
                    other.chars().take(32).collect::<String>()
                )))
            }
        };
        if let Some((_, held)) = &session {
            held.set_outcome(outcome);
        }
    }
    let factory = {
        let (api, binding, registry) = (api.clone(), binding.clone(), api.mcp.registry.clone());
        move || Ok(Tools::new(api.clone(), binding.clone(), registry.clone()))
    };
    let service =
        StreamableHttpService::new(factory, api.mcp.sessions.clone(), api.mcp.rmcp.clone());
    let service = hyper_util::service::TowerToHyperService::new(service);
    let delete = req.method() == Method::DELETE;
    let mut resp = match hyper::service::Service::call(&service, req).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    };
    // rmcp accepts a session's DELETE with 202; clients (PyPI's `mcp`) take only 200 or 204 as
    // "terminated" and warn otherwise. The session is closed by then: say so plainly.
    if delete && resp.status() == StatusCode::ACCEPTED {
        *resp.status_mut() = StatusCode::NO_CONTENT;
    }
    Ok(resp.map(|body| body.map_err(|never| match never {}).boxed()))
}

/// `POST /v1/computers/{id}/mcp-tokens/{bot}` `{ttl_secs?}`: a session token for that
/// computer and bot's MCP endpoint.
pub async fn mint(
    api: &Arc<Api>,
    id: &str,
    bot: BotId,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let host = crate::api::live::request_host(&req);
    let body: McpTokenRequest = read_json(req.into_body()).await?;
    let ttl = match body.ttl_secs {
        None => DEFAULT_TOKEN_TTL,
        Some(s) if (1..=MAX_TOKEN_TTL.as_secs()).contains(&s) => std::time::Duration::from_secs(s),
        Some(_) => {
            return Err(ApiError::bad_request(format!(
                "ttl_secs must be 1..={}",
                MAX_TOKEN_TTL.as_secs()
            )))
        }
    };
    let c = api.core.get(id).await?;
    let expires_at_ms = now_ms().saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
    let scope = McpScope {
        computer: c.id.as_str().to_string(),
        bot: bot.clone(),
    };
    let token = api
        .live
        .sealer
        .seal_mcp(expires_at_ms, &scope)
        .map_err(ApiError::internal)?;
    let path = Binding {
        computer: scope.computer.clone(),
        bot,
    }
    .endpoint();
    let url = host.map_or_else(|| path.clone(), |h| format!("{}://{h}{path}", api.scheme()));
    Ok(json_response(
        StatusCode::OK,
        &McpToken {
            token,
            path,
            url,
            computer: scope.computer,
            bot: scope.bot.as_str().to_string(),
            expires_at_ms,
        },
    ))
}
