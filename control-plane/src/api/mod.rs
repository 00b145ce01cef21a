//! The HTTP API under `/v1`: authentication, routing, and the translation between HTTP and the
//! core.
//!
//! Every route but `GET /v1/health`, `GET /v1/openapi.json` (the API's description, [`openapi`])
//! and the guest tunnel needs `Authorization: Bearer <api token>`, compared in
//! constant time. Handlers parse and bound their input, call [`Core`], and convert the result;
//! decisions live in the core. Request bodies are bounded (413 beyond the limit); file uploads
//! stream and must announce their length. Connections, their timeouts and TLS are [`listener`]'s.
//! `GET /metrics` (behind the token too) and the recording of every operation are [`metrics`]'.

mod activity;
mod attachments;
pub use attachments::{DEFAULT_ATTACHMENT_MAX_BYTES, DEFAULT_ATTACHMENT_URL_TTL};
mod body;
mod browser;
mod computers;
mod exec;
mod files;
mod homes;
mod jobs;
mod leases;
pub mod listener;
mod live;
mod mcp;
pub mod metrics;
mod openapi;
pub use openapi::document_json as openapi_json;
mod screens;
pub(crate) mod tunnel_ws;

pub(crate) use body::{forward, PUMP_CHUNK};
pub use body::{ApiError, RespBody};
pub use exec::EXEC_STREAM_CONTENT_TYPE;
pub use listener::{serve, HttpArgs, HttpConfig};

use crate::core::{Core, CoreError};
use crate::tunnel::TunnelError;
use body::{invalid_json, json_response, read_json};
use gateway_proto::{BotId, BotLease, ErrorCode, LeaseToken, Secret};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{header, Method, Request, Response, StatusCode};
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;
use subtle::ConstantTimeEq;
use tracing::info;

/// Limits of the API.
#[derive(Debug, Clone)]
pub struct ApiLimits {
    /// Largest file upload.
    pub max_upload_bytes: u64,
    /// Largest file download (the default read cap).
    pub max_read_bytes: u64,
    /// Largest user upload into a bot's directory, and largest file a bot may attach.
    pub attachment_max_bytes: u64,
    /// How long an attachment's download URL works.
    pub attachment_url_ttl: std::time::Duration,
}

impl Default for ApiLimits {
    fn default() -> Self {
        Self {
            max_upload_bytes: 4 << 30,
            max_read_bytes: 4 << 30,
            attachment_max_bytes: attachments::DEFAULT_ATTACHMENT_MAX_BYTES,
            attachment_url_ttl: attachments::DEFAULT_ATTACHMENT_URL_TTL,
        }
    }
}

/// What handlers share.
pub struct Api {
    pub core: Arc<Core>,
    token_sha256: [u8; 32],
    pub limits: ApiLimits,
    /// Capability sealing and the live pages (docs/security.md#capability-urls).
    pub live: crate::live::LiveHttp,
    /// Whether the listener speaks TLS: capability URLs are then `https://`.
    https: bool,
    /// The tunnel's carrier, which takes `GET /v1/tunnel` websockets ([`tunnel_ws`]).
    tunnel_carrier: Option<carrier::Carrier>,
    /// The MCP endpoint's sessions (`crate::mcp`).
    mcp: mcp::Mcp,
}

impl Api {
    pub fn new(
        core: Arc<Core>,
        token: &Secret,
        limits: ApiLimits,
        live: crate::live::LiveHttp,
    ) -> Self {
        Self {
            core,
            token_sha256: Sha256::digest(token.expose().as_bytes()).into(),
            limits,
            live,
            https: false,
            tunnel_carrier: None,
            mcp: mcp::Mcp::default(),
        }
    }

    /// Serves MCP with `config` (allowed hosts, session idle time).
    pub fn with_mcp(mut self, config: &crate::mcp::McpConfig) -> Self {
        self.mcp = mcp::Mcp::new(config);
        self
    }

    /// Marks the API as served over TLS (`--tls-cert`).
    pub fn with_https(mut self, https: bool) -> Self {
        self.https = https;
        self
    }

    /// Carries guests' tunnel websockets (`GET /v1/tunnel`) on the tunnel's carrier.
    pub fn with_tunnel_carrier(mut self, carrier: carrier::Carrier) -> Self {
        self.tunnel_carrier = Some(carrier);
        self
    }

    /// The scheme of URLs that point back at this API.
    pub fn scheme(&self) -> &'static str {
        if self.https {
            "https"
        } else {
            "http"
        }
    }

    /// Whether the request carries the API token.
    fn authorized(&self, req: &Request<Incoming>) -> bool {
        let Some(value) = req.headers().get(header::AUTHORIZATION) else {
            return false;
        };
        let Some(presented) = value.as_bytes().strip_prefix(b"Bearer ") else {
            return false;
        };
        // Comparing digests keeps the comparison constant-time whatever the lengths.
        let presented: [u8; 32] = Sha256::digest(presented).into();
        presented.ct_eq(&self.token_sha256).into()
    }
}

/// Routes one request.
pub async fn handle(api: Arc<Api>, req: Request<Incoming>) -> Response<RespBody> {
    let started = crate::clock::monotonic();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let op = metrics::op_kind(&method, &path);
    let mut head = None;
    // A capability path holds its credential: it is never logged
    // (docs/security.md#capability-urls).
    let (resp, path) = if path.starts_with("/cap/") || path == "/cap" {
        (live::public(&api, req).await, "/cap/<redacted>".to_string())
    } else if let Some(token) = path.strip_prefix("/att/") {
        // Like a capability, an attachment path is its own credential: never logged.
        let resp = match method {
            Method::GET => attachments::download(&api, token).await,
            _ => Err(ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "attachment links are fetched with GET",
            )),
        };
        (
            resp.unwrap_or_else(ApiError::into_response),
            "/att/<redacted>".to_string(),
        )
    } else if path.starts_with("/assets/") {
        (live::public(&api, req).await, path)
    } else {
        match route(&api, req).await {
            Ok(resp) => (resp, path),
            Err(e) => {
                head = Some(crate::metrics::Outcome::of_status(
                    e.status.as_u16(),
                    e.uncertain,
                ));
                (e.into_response(), path)
            }
        }
    };
    // Other paths carry ids and bot names, never secrets; queries (file paths) are not logged.
    info!(%method, %path, status = resp.status().as_u16(), "http request");
    metrics::record(&api.core.metrics, op, started, head, resp)
}

async fn route(api: &Arc<Api>, req: Request<Incoming>) -> Result<Response<RespBody>, ApiError> {
    let path = req.uri().path().to_string();
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    let method = req.method().clone();
    // The guest tunnel authenticates inside (its QUIC handshake), not with the API token.
    if let (&Method::GET, ["v1", "tunnel"]) = (&method, segments.as_slice()) {
        return tunnel_ws::upgrade(api.tunnel_carrier.as_ref(), req);
    }
    if let (&Method::GET, ["v1", "health"]) = (&method, segments.as_slice()) {
        return Ok(json_response(
            StatusCode::OK,
            &crate::schema::Health { ok: true },
        ));
    }
    // MCP takes the API token or a session token scoped to its computer and bot.
    if let ["v1", "mcp", id, bot] = segments.as_slice() {
        return mcp::serve(api, id, bot, req).await;
    }
    // The API's description is public, as health is: shapes only, no ids or secrets
    // (`openapi` explains why).
    if let (&Method::GET, ["v1", "openapi.json"]) = (&method, segments.as_slice()) {
        return Ok(openapi::response());
    }
    if !api.authorized(&req) {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong API token",
        ));
    }
    if let (&Method::GET, ["metrics"]) = (&method, segments.as_slice()) {
        return Ok(metrics::scrape(&api.core).await);
    }
    // Operations on a computer pass idle suspension's gate: refused while it holds its claim,
    // counted while they run (until their response is sent), and recorded as a use.
    let operation = match idle_use(&method, &segments) {
        Some((id, refuse)) => Some(enter_operation(api, id, refuse)?),
        None => None,
    };
    let resp = dispatch(api, req, &method, &path, &segments).await?;
    Ok(match operation {
        Some(op) => resp.map(|body| BodyExt::boxed(Operating { body, _op: op })),
        None => resp,
    })
}

/// An operation on computer `id` begins: refused (with `refuse`) while idle suspension holds
/// its claim, counted until the returned guard drops. HTTP routes and MCP tool calls pass here
/// alike.
fn enter_operation(api: &Api, id: &str, refuse: bool) -> Result<crate::idle::Operation, ApiError> {
    api.core.idle.enter(id, refuse).map_err(|_| {
        ApiError::new(
            StatusCode::CONFLICT,
            "computer_suspending",
            format!(
                "computer {id} is being suspended after being idle (home checkpoint, then \
                 stop); once it is stopped, start it again"
            ),
        )
    })
}

/// Whether a request is an operation on one computer for idle suspension (`crate::idle`), and
/// whether its claim refuses it: `Some((id, refuse))`. Not operations: showing the computer,
/// reading or renewing a lease (renewals keep a lease, not the computer, alive), browsing the
/// stored home (no guest involved), reading or following the activity feed (a follower must not
/// keep a computer awake). Ending a run and releasing control count as uses but are
/// never refused.
fn idle_use<'a>(method: &Method, segments: &[&'a str]) -> Option<(&'a str, bool)> {
    let ["v1", "computers", id, rest @ ..] = segments else {
        return None;
    };
    match (method, rest) {
        (&Method::GET, [] | ["leases", _] | ["home", ..] | ["activity", ..] | ["jobs"]) => None,
        (_, ["leases", _, "renew"]) => None,
        (_, ["leases", _, "release"] | ["screens", _, "release-control"]) => Some((id, false)),
        _ => Some((id, true)),
    }
}

/// A response body that keeps its operation counted until it is fully sent (or dropped).
struct Operating {
    body: RespBody,
    _op: crate::idle::Operation,
}

impl hyper::body::Body for Operating {
    type Data = bytes::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

async fn dispatch(
    api: &Arc<Api>,
    req: Request<Incoming>,
    method: &Method,
    path: &str,
    segments: &[&str],
) -> Result<Response<RespBody>, ApiError> {
    let query = query_map(&req);
    match (method, segments) {
        (&Method::POST, ["v1", "computers"]) => computers::create(api, req).await,
        (&Method::GET, ["v1", "computers"]) => computers::list(api).await,
        (&Method::GET, ["v1", "computers", id]) => computers::show(api, id).await,
        (&Method::DELETE, ["v1", "computers", id]) => computers::destroy(api, id).await,
        (&Method::POST, ["v1", "computers", id, "stop"]) => computers::stop(api, id).await,
        (&Method::POST, ["v1", "computers", id, "start"]) => computers::start(api, id).await,
        (&Method::POST, ["v1", "computers", id, "update"]) => {
            jobs::start(api, id, crate::jobs::JobKind::Update).await
        }
        (&Method::POST, ["v1", "computers", id, "recover"]) => {
            jobs::start(api, id, crate::jobs::JobKind::Recover).await
        }
        (&Method::GET, ["v1", "computers", id, "jobs"]) => jobs::list(api, id).await,
        (&Method::GET, ["v1", "jobs", id]) => jobs::show(api, id).await,
        (&Method::POST, ["v1", "jobs", id, "release-interrupted"]) => {
            jobs::release_interrupted(api, id, req).await
        }
        (&Method::POST, ["v1", "computers", id, "exec"]) => exec::exec(api, id, req).await,
        (&Method::GET, ["v1", "computers", id, "activity"]) => {
            activity::history(api, id, &query).await
        }
        (&Method::GET, ["v1", "computers", id, "activity", "stream"]) => {
            activity::stream(api, id, &query).await
        }
        (&Method::GET, ["v1", "computers", id, "files"]) => files::list(api, id, &query).await,
        (&Method::GET, ["v1", "computers", id, "files", "content"]) => {
            files::read(api, id, &query).await
        }
        (&Method::PUT, ["v1", "computers", id, "files", "content"]) => {
            files::write(api, id, &query, req).await
        }
        (&Method::POST, ["v1", "computers", id, "files", "attach"]) => {
            attachments::attach(api, id, req).await
        }
        (&Method::PUT, ["v1", "computers", id, "uploads", bot]) => {
            attachments::upload(api, id, bot, &query, req).await
        }
        (&Method::GET, ["v1", "computers", id, "home"]) => homes::show(api, id).await,
        (&Method::POST, ["v1", "computers", id, "home", "checkpoint"]) => {
            homes::checkpoint(api, id, &query).await
        }
        (&Method::POST, ["v1", "computers", id, "home", "restore"]) => {
            homes::restore(api, id).await
        }
        (&Method::GET, ["v1", "computers", id, "home", "entries"]) => {
            homes::entries(api, id, &query).await
        }
        (&Method::GET, ["v1", "computers", id, "home", "content"]) => {
            homes::content(api, id, &query).await
        }
        (&Method::POST, ["v1", "homes", "reconcile"]) => homes::reconcile(api).await,
        (&Method::DELETE, ["v1", "homes", key]) => homes::purge(api, key).await,
        (&Method::GET, ["v1", "computers", id, "screens"]) => screens::list(api, id).await,
        (&Method::POST, ["v1", "computers", id, "screens", bot, action]) => match *action {
            "ensure" => screens::ensure(api, id, bot, req).await,
            "release" => {
                // Revoke first (docs/screens.md#teardown): the bot's URLs die before its desktop
                // does.
                live::screen_released(api, id, bot).await?;
                screens::release(api, id, bot, req).await
            }
            "observe" => screens::observe(api, id, bot, req).await,
            "act" => screens::act(api, id, bot, req).await,
            "url" => live::url(api, id, bot, None, req).await,
            "takeover" => live::takeover(api, id, bot, req).await,
            "release-control" => live::release_control(api, id, bot, req).await,
            other => Err(ApiError::not_found(format!(
                "no screen action {other:?}; use ensure, release, observe, act, url, takeover \
                 or release-control"
            ))),
        },
        (&Method::POST, ["v1", "computers", id, "terminals", bot, "url"]) => {
            live::url(
                api,
                id,
                bot,
                Some(gateway_proto::live::CapabilityKind::Terminal),
                req,
            )
            .await
        }
        (&Method::POST, ["v1", "computers", id, "leases", bot, "waiting_takeover"]) => {
            live::waiting_takeover(api, id, bot, req).await
        }
        (&Method::POST, ["v1", "computers", id, "browser", bot, action]) => {
            browser::handle(api, id, bot, action, req).await
        }
        (&Method::GET, ["v1", "computers", id, "leases", bot]) => leases::get(api, id, bot).await,
        (&Method::POST, ["v1", "computers", id, "mcp-tokens", bot]) => {
            mcp::mint(api, id, bot, req).await
        }
        (&Method::POST, ["v1", "computers", id, "leases", bot, action]) => {
            leases::act(api, id, bot, action, req).await
        }
        (_, ["v1", ..]) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_route",
            format!("no route for {method} {path}"),
        )),
        _ => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_route",
            "the API lives under /v1",
        )),
    }
}

/// One query parameter of a request.
fn query_value(req: &Request<Incoming>, key: &str) -> Option<String> {
    query_map(req).remove(key)
}

fn query_map(req: &Request<Incoming>) -> HashMap<String, String> {
    req.uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default()
}

impl From<CoreError> for ApiError {
    fn from(e: CoreError) -> Self {
        use crate::lease::LeaseError;
        let msg = e.to_string();
        match e {
            CoreError::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, "not_found", msg),
            // A stopped computer (by hand or after being idle) stays stopped until started.
            CoreError::NotRunning {
                id,
                state: crate::computers::ComputerState::Stopped,
            } => ApiError::new(
                StatusCode::CONFLICT,
                "computer_not_running",
                format!(
                    "{msg}: start it first (POST /v1/computers/{id}/start, \
                     `rakazo computer start {id}`)"
                ),
            ),
            CoreError::NotRunning { .. } => {
                ApiError::new(StatusCode::CONFLICT, "computer_not_running", msg)
            }
            CoreError::UnknownProvider(_) => ApiError::bad_request(msg),
            CoreError::StaleLease { .. } => ApiError::new(StatusCode::CONFLICT, "stale_lease", msg),
            CoreError::Lease(LeaseError::Held { .. }) => {
                ApiError::new(StatusCode::CONFLICT, "lease_held", msg)
            }
            CoreError::Lease(LeaseError::Mismatch { .. }) => {
                ApiError::new(StatusCode::CONFLICT, "lease_mismatch", msg)
            }
            CoreError::Lease(LeaseError::BadOwner { .. }) => ApiError::bad_request(msg),
            CoreError::Tunnel(t) => t.into(),
            CoreError::Lease(LeaseError::FenceExhausted { .. }) => {
                ApiError::new(StatusCode::CONFLICT, "fence_exhausted", msg)
            }
            CoreError::Lease(other) => ApiError::internal(other),
            CoreError::Computer(c) => computer_error(c, msg),
            CoreError::Home(h) => homes::home_error(h),
            CoreError::BadLimits(_) => ApiError::bad_request(msg),
            CoreError::Provider(p) => provider_error(&p),
            CoreError::Job(j) => jobs::job_error(j),
        }
    }
}

/// A computer-store refusal: what the user asked for conflicts or is malformed; only a failing
/// database is an internal error.
fn computer_error(e: crate::computers::ComputerError, msg: String) -> ApiError {
    use crate::computers::ComputerError as E;
    match e {
        E::BadId(_)
        | E::BadWorkspace(_)
        | E::BadProvider(_)
        | E::BadPlacement(_)
        | E::ReservedBotId(_) => ApiError::bad_request(msg),
        E::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, "not_found", msg),
        E::AlreadyExists(_) => ApiError::new(StatusCode::CONFLICT, "computer_exists", msg),
        E::HomeInUse { .. } => ApiError::new(StatusCode::CONFLICT, "home_in_use", msg),
        E::Destroyed(_) => ApiError::new(StatusCode::CONFLICT, "computer_destroyed", msg),
        E::Db(_) => ApiError::internal(e),
    }
}

/// A provider's failure, by class: capacity and passing failures are 503 (try later), a
/// refused request 422; the message says what the provider said (never a secret: provider
/// errors carry no tokens).
fn provider_error(p: &providers::ProviderError) -> ApiError {
    use providers::ErrorClass;
    let msg = match std::error::Error::source(p) {
        Some(src) => format!("{p}: {src}"),
        None => p.to_string(),
    };
    match p.class() {
        ErrorClass::Capacity => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "provider_capacity", msg)
        }
        ErrorClass::Transient => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "provider_unavailable", msg)
        }
        ErrorClass::Invalid => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "provider_invalid", msg)
        }
        // A gone machine is replaced by `start`; reaching here means it vanished mid-call.
        ErrorClass::Gone => ApiError::new(StatusCode::CONFLICT, "machine_gone", msg),
    }
}

impl From<TunnelError> for ApiError {
    fn from(e: TunnelError) -> Self {
        let msg = e.to_string();
        let uncertain = e.is_uncertain();
        let mut err = match e {
            TunnelError::NotConnected(_) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "computer_unavailable", msg)
            }
            TunnelError::Lost(_) => ApiError::new(StatusCode::BAD_GATEWAY, "tunnel_lost", msg),
            TunnelError::Suspending(_) => {
                ApiError::new(StatusCode::CONFLICT, "computer_suspending", msg)
            }
            TunnelError::Protocol { .. } => {
                ApiError::new(StatusCode::BAD_GATEWAY, "guest_protocol_error", msg)
            }
            TunnelError::Timeout { .. } => {
                ApiError::new(StatusCode::GATEWAY_TIMEOUT, "guest_timeout", msg)
            }
            TunnelError::Guest(op) => {
                let status = match op.code {
                    ErrorCode::BadRequest | ErrorCode::PathRejected => StatusCode::BAD_REQUEST,
                    ErrorCode::NotFound => StatusCode::NOT_FOUND,
                    ErrorCode::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
                    ErrorCode::StaleLease => StatusCode::CONFLICT,
                    // The computer failed at what it was asked (a process that would not
                    // start, a full disk): the computer's failure, not the control plane's.
                    ErrorCode::Failed => StatusCode::BAD_GATEWAY,
                    ErrorCode::Unsupported => StatusCode::NOT_IMPLEMENTED,
                    ErrorCode::ScreenUnavailable => StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::ScreenReleasing => StatusCode::CONFLICT,
                    ErrorCode::ActionRefused | ErrorCode::Exists => StatusCode::CONFLICT,
                };
                ApiError::new(status, op.code.as_str(), op.message)
            }
        };
        err.uncertain = uncertain;
        err
    }
}

/// Parses the optional `bot` + `lease` pair of a request into a lease to check.
fn bot_lease(bot: Option<&str>, lease: Option<&str>) -> Result<Option<BotLease>, ApiError> {
    match (bot, lease) {
        (None, None) => Ok(None),
        (Some(bot), Some(lease)) => Ok(Some(BotLease {
            bot: parse_bot(bot)?,
            token: parse_lease(lease)?,
        })),
        _ => Err(ApiError::bad_request("bot and lease go together")),
    }
}

fn parse_bot(bot: &str) -> Result<BotId, ApiError> {
    BotId::new(bot).map_err(|e| ApiError::bad_request(format!("bot: {e}")))
}

fn parse_lease(lease: &str) -> Result<LeaseToken, ApiError> {
    LeaseToken::parse(lease).map_err(|e| ApiError::bad_request(format!("lease: {e}")))
}

/// The start of a bot's request: the bot named in the path, then the JSON body (bounded by
/// [`read_json`]).
async fn bot_json<T: DeserializeOwned>(
    bot: &str,
    req: Request<Incoming>,
) -> Result<(BotId, T), ApiError> {
    let bot = parse_bot(bot)?;
    let body = read_json(req.into_body()).await?;
    Ok((bot, body))
}
