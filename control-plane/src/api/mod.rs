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
mod console;
mod exec;
mod files;
mod homes;
mod jobs;
mod leases;
pub mod listener;
mod live;
mod mcp;
pub mod metrics;
mod network;
mod openapi;
mod pools;
mod preview_proxy;
mod previews;
mod processes;
mod recordings;
pub use openapi::document_json as openapi_json;
mod screens;
mod secrets;
mod services;
pub use services::spawn_on_boot as start_services_on_boot;
mod tokens;
pub(crate) mod tunnel_ws;

pub(crate) use body::{forward, PUMP_CHUNK};
pub use body::{ApiError, RespBody};
pub use exec::EXEC_STREAM_CONTENT_TYPE;
pub use listener::{serve, HttpArgs, HttpConfig};

use crate::clock::now_ms;
use crate::core::{Core, CoreError};
use crate::route::{Auth, Endpoint, IdleUse, Route, RouteError};
use crate::schema::code::ApiCode;
use crate::tokens::Principal;
use crate::tunnel::TunnelError;
use body::{invalid_json, json_response, read_json};
use gateway_proto::{BotId, BotLease, LeaseToken, Secret};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{header, Request, Response, StatusCode};
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
    /// Preview URLs' origins (docs/previews.md).
    preview: preview_proxy::PreviewHttp,
    /// The machine reports the computer list reuses (`computers::list`), by computer.
    machines:
        std::sync::Mutex<HashMap<String, (std::time::Instant, crate::schema::computer::Machine)>>,
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
            preview: preview_proxy::PreviewHttp::new(crate::preview::PreviewConfig::default()),
            machines: Default::default(),
        }
    }

    /// Serves preview URLs with `config` (their domain, limits, waking).
    pub fn with_previews(mut self, config: crate::preview::PreviewConfig) -> Self {
        self.preview = preview_proxy::PreviewHttp::new(config);
        self
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

    /// Whether `presented` is the server's own token.
    fn is_server_token(&self, presented: &[u8]) -> bool {
        let presented: [u8; 32] = Sha256::digest(presented).into();
        presented.ct_eq(&self.token_sha256).into()
    }

    /// Whether the request carries the server's own API token.
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

/// Serves one request: parses it into its [`Route`] once, then authenticates, gates and
/// dispatches that route.
pub async fn handle(api: Arc<Api>, req: Request<Incoming>) -> Response<RespBody> {
    let started = crate::clock::monotonic();
    // A preview's origin (docs/previews.md): its host label is its credential, never logged.
    if let Some(label) = live::request_host(&req)
        .as_deref()
        .and_then(|h| crate::preview::label_of(h, &api.preview.config.domain))
        .map(str::to_owned)
    {
        let resp = preview_proxy::serve(&api, &label, req).await;
        return metrics::record(&api.core.metrics, None, started, None, resp);
    }
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    // Capability pages and their assets are not routes: a capability path holds its credential
    // and is never logged (docs/security.md#capability-urls); neither is an operation.
    if path.starts_with("/cap/") || path == "/cap" || path.starts_with("/assets/") {
        let resp = live::public(&api, req).await;
        let logged = if path.starts_with("/assets/") {
            path.as_str()
        } else {
            "/cap/<redacted>"
        };
        info!(%method, path = logged, status = resp.status().as_u16(), "http request");
        return metrics::record(&api.core.metrics, None, started, None, resp);
    }
    // The console's page and files (docs/console.md): files, not operations.
    if console::is_page(&path) {
        let resp = console::page(&api, &method, &path).await;
        info!(%method, path = %path, status = resp.status().as_u16(), "http request");
        return metrics::record(&api.core.metrics, None, started, None, resp);
    }
    let route = Route::parse(&method, &path);
    let op = match &route {
        Ok(r) => Some(r.endpoint())
            .filter(|e| e.is_operation())
            .map(Endpoint::name),
        // Unknown routes under /v1 are counted as `other`; paths outside it are no operation.
        Err(e) if !e.public && (path == "/v1" || path.starts_with("/v1/")) => Some("other"),
        Err(_) => None,
    };
    // An error may be answered before the request's body was read (an upload into a full
    // disk): over HTTP/1 the connection then cannot carry another request, and hyper closes
    // it after the answer. Say so in the answer, or a client that pools connections may send
    // its next request into the closing one ("connection closed before message completed").
    let unread_body =
        req.version() <= hyper::Version::HTTP_11 && !hyper::body::Body::is_end_stream(req.body());
    let mut head = None;
    let mut resp = match serve_route(&api, route, req).await {
        Ok(resp) => resp,
        Err(e) => {
            head = Some(crate::metrics::Outcome::of_status(
                e.status().as_u16(),
                e.uncertain,
            ));
            e.into_response()
        }
    };
    // Like a capability, an attachment path is its own credential: never logged. Other paths
    // carry ids and bot names, never secrets; queries (file paths) are not logged.
    let logged = if path.starts_with("/att/") {
        "/att/<redacted>"
    } else {
        path.as_str()
    };
    if unread_body && (resp.status().is_client_error() || resp.status().is_server_error()) {
        resp.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    info!(%method, path = logged, status = resp.status().as_u16(), "http request");
    metrics::record(&api.core.metrics, op, started, head, resp)
}

/// The concerns around every route, in order: authentication and authorization, then idle
/// suspension's gate, then the route's handler.
async fn serve_route(
    api: &Arc<Api>,
    route: Result<Route, RouteError>,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let route = match route {
        Ok(route) => route,
        // A path that is no route is refused as any path under the token is: 401 first.
        Err(e) if !e.public && authenticate(api, &req).await?.is_none() => {
            return Err(unauthorized())
        }
        Err(e) => return Err(ApiError::new(e.code, e.message)),
    };
    let endpoint = route.endpoint();
    let who = match endpoint.auth() {
        auth if auth.token() => {
            let who = authenticate(api, &req).await?.ok_or_else(unauthorized)?;
            who.check_csrf(&req)?;
            let who = who.into_principal();
            authorize(api, &who, &route).await?;
            Some(who)
        }
        // The MCP endpoint also takes its own session tokens, which it checks itself.
        Auth::McpToken => match authenticate(api, &req).await? {
            Some(who) => {
                who.check_csrf(&req)?;
                let who = who.into_principal();
                authorize(api, &who, &route).await?;
                Some(who)
            }
            None => None,
        },
        _ => None,
    };
    // Operations on a computer pass idle suspension's gate: refused while it holds its claim,
    // counted while they run (until their response is sent), and recorded as a use.
    let computer = route.computer().map(str::to_owned);
    let (resp, operation) = operate(
        api,
        endpoint,
        computer.as_deref(),
        dispatch(api, who.as_ref(), route, req),
    )
    .await?;
    Ok(match operation {
        Some(op) => resp.map(|body| BodyExt::boxed(Operating { body, _op: op })),
        None => resp,
    })
}

fn unauthorized() -> ApiError {
    ApiError::new(ApiCode::Unauthorized, "missing or wrong API token")
}

/// How a request proved who it is.
enum Credential {
    /// `Authorization: Bearer`: the server's token or a scoped one.
    Bearer(Principal),
    /// The console's session cookie.
    Session(crate::tokens::Session),
}

impl Credential {
    /// A state-changing request under a session cookie must carry the session's CSRF token
    /// (`X-CSRF-Token`): a page of another site can make a browser send the cookie (a form
    /// post), never the header.
    fn check_csrf(&self, req: &Request<Incoming>) -> Result<(), ApiError> {
        let Credential::Session(s) = self else {
            return Ok(());
        };
        if matches!(*req.method(), hyper::Method::GET | hyper::Method::HEAD) {
            return Ok(());
        }
        let presented = req
            .headers()
            .get(console::CSRF_HEADER)
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        if !same_secret(presented, s.csrf.as_bytes()) {
            return Err(ApiError::new(
                ApiCode::Csrf,
                format!(
                    "a request signed in by the console's cookie must carry its {} header",
                    console::CSRF_HEADER
                ),
            ));
        }
        Ok(())
    }

    fn into_principal(self) -> Principal {
        match self {
            Credential::Bearer(p) => p,
            Credential::Session(s) => s.principal,
        }
    }
}

/// Whether a presented secret is `expected` (non-empty), compared in constant time.
fn same_secret(presented: &[u8], expected: &[u8]) -> bool {
    let a: [u8; 32] = Sha256::digest(presented).into();
    let b: [u8; 32] = Sha256::digest(expected).into();
    !presented.is_empty() && bool::from(a.ct_eq(&b))
}

/// Who the request is: a bearer token (the server's, or a live scoped one; any other bearer is
/// a 401 even beside a cookie), else a live console session's cookie, else nobody.
async fn authenticate(api: &Api, req: &Request<Incoming>) -> Result<Option<Credential>, ApiError> {
    if let Some(value) = req.headers().get(header::AUTHORIZATION) {
        if api.authorized(req) {
            return Ok(Some(Credential::Bearer(Principal::server())));
        }
        let presented = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        return match api.core.tokens.verify(presented, now_ms()).await {
            Ok(Some(p)) => Ok(Some(Credential::Bearer(p))),
            Ok(None) => Ok(None),
            Err(e) => Err(ApiError::db(&e)),
        };
    }
    let Some(cookie) = console::session_cookie(req) else {
        return Ok(None);
    };
    match api.core.tokens.session(&cookie, now_ms()).await {
        Ok(s) => Ok(s.map(Credential::Session)),
        Err(e) => Err(ApiError::db(&e)),
    }
}

/// Whether `who` may take `route`: a computer, job or workspace it does not see answers as a
/// missing one does (404), whatever its role; then a role below the route's is a 403.
async fn authorize(api: &Api, who: &Principal, route: &Route) -> Result<(), ApiError> {
    if !who.unlimited() {
        if let Some(id) = route.computer() {
            let c = api.core.get(id).await?;
            if !who.sees(&c) {
                return Err(CoreError::NotFound(id.to_owned()).into());
            }
        }
        match route {
            Route::GetJob { job } | Route::ReleaseInterrupted { job } => {
                jobs::check_scope(api, who, job).await?
            }
            Route::GetWorkspaceNetwork { workspace }
            | Route::SetWorkspaceNetwork { workspace }
            | Route::SetWorkspaceRecording { workspace }
            | Route::ListSecrets { workspace }
            | Route::PutSecret { workspace, .. }
            | Route::DeleteSecret { workspace, .. }
                if !who.sees_workspace(workspace) =>
            {
                return Err(ApiError::new(
                    ApiCode::NotFound,
                    format!("no workspace {workspace}"),
                ));
            }
            _ => {}
        }
    }
    let Some(need) = route.endpoint().auth().role() else {
        return Ok(());
    };
    if who.role < need {
        return Err(ApiError::new(
            ApiCode::Forbidden,
            format!(
                "{} needs an {} token; this one is a {}'s",
                route.endpoint().name(),
                need.as_str(),
                who.role.as_str()
            ),
        ));
    }
    // What is on no computer or workspace (tokens, homes' maintenance, metrics) is for a token
    // that sees everything.
    let scoped = route.computer().is_some()
        || matches!(
            route,
            Route::GetJob { .. }
                | Route::ReleaseInterrupted { .. }
                | Route::GetWorkspaceNetwork { .. }
                | Route::SetWorkspaceNetwork { .. }
                | Route::SetWorkspaceRecording { .. }
                | Route::ListSecrets { .. }
                | Route::PutSecret { .. }
                | Route::DeleteSecret { .. }
                | Route::ListComputers {}
                | Route::CreateComputer {}
        );
    if !scoped && !who.unlimited() {
        return Err(ApiError::new(
            ApiCode::Forbidden,
            format!(
                "{} needs a token that is not limited to workspaces",
                route.endpoint().name()
            ),
        ));
    }
    Ok(())
}

/// Runs `op`, the operation `e` on computer `id`, inside idle suspension's gate: the one call
/// site of the gate, for every door (HTTP routes and MCP tool calls). The gate's guard comes
/// back with the answer, for a door whose answer outlives the call (an HTTP body still
/// streaming); dropping it ends the operation.
async fn operate<T>(
    api: &Api,
    e: Endpoint,
    id: Option<&str>,
    op: impl std::future::Future<Output = Result<T, ApiError>>,
) -> Result<(T, Option<crate::idle::Operation>), ApiError> {
    let operation = gate(api, e, id)?;
    Ok((op.await?, operation))
}

/// Idle suspension's gate (called by [`operate`] alone): `e` on computer `id` is counted as a
/// use until the returned guard drops, and refused while suspension holds the computer when it
/// is [`IdleUse::Refusable`]; what is no use (or on no computer) passes without a guard.
fn gate(
    api: &Api,
    e: Endpoint,
    id: Option<&str>,
) -> Result<Option<crate::idle::Operation>, ApiError> {
    let (refuse, Some(id)) = (e.idle(), id) else {
        return Ok(None);
    };
    let refuse = match refuse {
        IdleUse::None => return Ok(None),
        IdleUse::Use => false,
        IdleUse::Refusable => true,
    };
    let operation = api.core.idle.enter(id, refuse).map_err(|_| {
        ApiError::new(
            ApiCode::ComputerSuspending,
            format!(
                "computer {id} is being suspended after being idle (home checkpoint, then \
                 stop); once it is stopped, start it again"
            ),
        )
    })?;
    Ok(Some(operation))
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

/// Each route to its handler: the one match over [`Route`].
async fn dispatch(
    api: &Arc<Api>,
    who: Option<&Principal>,
    route: Route,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    use crate::jobs::JobKind;
    use gateway_proto::live::CapabilityKind;
    let query = query_map(&req);
    match route {
        Route::Health {} => Ok(json_response(
            StatusCode::OK,
            &crate::schema::Health { ok: true },
        )),
        // The API's description is public, as health is: shapes only, no ids or secrets
        // (`openapi` explains why).
        Route::OpenApi {} => Ok(openapi::response()),
        Route::Tunnel {} => tunnel_ws::upgrade(api.tunnel_carrier.as_ref(), req),
        Route::Metrics {} => Ok(metrics::scrape(&api.core).await),
        Route::Mcp { computer, bot } => mcp::serve(api, who, &computer, &bot, req).await,
        Route::Download { token } => attachments::download(api, &token).await,
        Route::CreateComputer {} => computers::create(api, principal(who)?, req).await,
        Route::CreatePool {} => pools::create(api, principal(who)?, req).await,
        Route::ListPools {} => pools::list(api).await,
        Route::GetPool { pool } => pools::show(api, &pool).await,
        Route::ResizePool { pool } => pools::resize(api, &pool, req).await,
        Route::DeletePool { pool } => pools::delete(api, &pool).await,
        Route::ForkComputer { computer } => {
            computers::fork(api, principal(who)?, &computer, req).await
        }
        Route::ListComputers {} => computers::list(api, principal(who)?, &query).await,
        Route::GetComputer { computer } => computers::show(api, &computer).await,
        Route::DestroyComputer { computer } => computers::destroy(api, &computer).await,
        Route::StopComputer { computer } => computers::stop(api, &computer).await,
        Route::StartComputer { computer } => computers::start(api, &computer).await,
        Route::UpdateComputer { computer } => jobs::start(api, &computer, JobKind::Update).await,
        Route::RecoverComputer { computer } => jobs::start(api, &computer, JobKind::Recover).await,
        Route::ListJobs { computer } => jobs::list(api, &computer).await,
        Route::GetJob { job } => jobs::show(api, &job).await,
        Route::ReleaseInterrupted { job } => jobs::release_interrupted(api, &job, req).await,
        Route::Exec { computer } => exec::exec(api, &computer, req).await,
        Route::StartProcess { computer } => processes::start(api, &computer, req).await,
        Route::ListProcesses { computer } => processes::list(api, &computer).await,
        Route::GetProcess { computer, process } => {
            processes::show(api, &computer, process.get()).await
        }
        Route::ProcessLogs { computer, process } => {
            processes::logs(api, &computer, process.get(), &query).await
        }
        Route::AttachProcess { computer, process } => {
            processes::attach(api, &computer, process.get(), &query, req).await
        }
        Route::KillProcess { computer, process } => {
            processes::kill(api, &computer, process.get(), req).await
        }
        Route::SetService { computer, service } => {
            services::set(api, &computer, &service, req).await
        }
        Route::ListServices { computer } => services::list(api, &computer).await,
        Route::DeleteService { computer, service } => {
            services::delete(api, &computer, &service).await
        }
        Route::CreatePreview { computer } => {
            previews::create(api, principal(who)?, &computer, req).await
        }
        Route::ListPreviews { computer } => previews::list(api, &computer, &query).await,
        Route::RevokePreview { computer, preview } => {
            previews::revoke(api, &computer, &preview).await
        }
        Route::PreviewSignIn {} => previews::sign_in_page(api, &query).await,
        Route::PreviewHandOff {} => previews::sign_in(api, req).await,
        Route::SetRecording { computer } => {
            recordings::set(api, principal(who)?, &computer, req).await
        }
        Route::ListRecordings { computer } => recordings::list(api, &computer).await,
        Route::SetWorkspaceRecording { workspace } => {
            recordings::set_workspace(api, principal(who)?, &workspace, req).await
        }
        Route::ReadRecording { computer, bot } => {
            recordings::read(api, &computer, &bot, &query).await
        }
        Route::Activity { computer } => activity::history(api, &computer, &query).await,
        Route::ActivityStream { computer } => activity::stream(api, &computer, &query).await,
        Route::ListFiles { computer } => files::list(api, &computer, &query).await,
        Route::ReadFile { computer } => files::read(api, &computer, &query).await,
        Route::WriteFile { computer } => files::write(api, &computer, &query, req).await,
        Route::AttachFile { computer } => attachments::attach(api, &computer, req).await,
        Route::UploadToBot { computer, bot } => {
            attachments::upload(api, &computer, bot, &query, req).await
        }
        Route::GetHome { computer } => homes::show(api, &computer).await,
        Route::CheckpointHome { computer } => homes::checkpoint(api, &computer, &query).await,
        Route::RestoreHome { computer } => homes::restore(api, &computer, &query).await,
        Route::HomeEntries { computer } => homes::entries(api, &computer, &query).await,
        Route::HomeContent { computer } => homes::content(api, &computer, &query).await,
        Route::HomeRevisions { computer } => homes::revisions(api, &computer).await,
        Route::HomeDiff { computer } => homes::diff(api, &computer, &query).await,
        Route::ReconcileHomes {} => homes::reconcile(api).await,
        Route::PurgeHome { home_key } => homes::purge(api, &home_key).await,
        Route::ListScreens { computer } => screens::list(api, &computer).await,
        Route::EnsureScreen { computer, bot } => screens::ensure(api, &computer, bot, req).await,
        Route::ReleaseScreen { computer, bot } => {
            // Revoke first (docs/screens.md#desktops): the bot's URLs die before its desktop.
            live::screen_released(api, &computer, &bot).await?;
            screens::release(api, &computer, bot, req).await
        }
        Route::Observe { computer, bot } => screens::observe(api, &computer, bot, req).await,
        Route::Act { computer, bot } => screens::act(api, &computer, bot, req).await,
        Route::LiveUrl { computer, bot } => {
            // A viewer watches: it gets view capabilities only.
            let viewer = principal(who)?.role < crate::tokens::Role::Operator;
            live::url(api, &computer, bot, None, viewer, req).await
        }
        Route::TerminalUrl { computer, bot } => {
            let kind = Some(CapabilityKind::Terminal);
            live::url(api, &computer, bot, kind, false, req).await
        }
        Route::Takeover { computer, bot } => live::takeover(api, &computer, bot, req).await,
        Route::ReleaseControl { computer, bot } => {
            live::release_control(api, &computer, bot, req).await
        }
        Route::WaitingTakeover { computer, bot } => {
            live::waiting_takeover(api, &computer, bot, req).await
        }
        Route::BrowserNavigate { computer, bot } => {
            browser::handle(api, &computer, bot, browser::Tool::Navigate, req).await
        }
        Route::BrowserSnapshot { computer, bot } => {
            browser::handle(api, &computer, bot, browser::Tool::Snapshot, req).await
        }
        Route::BrowserAct { computer, bot } => {
            browser::handle(api, &computer, bot, browser::Tool::Act, req).await
        }
        Route::GetLease { computer, bot } => leases::get(api, &computer, bot).await,
        Route::AcquireLease { computer, bot } => {
            leases::act(api, &computer, bot, leases::Action::Acquire, req).await
        }
        Route::RenewLease { computer, bot } => {
            leases::act(api, &computer, bot, leases::Action::Renew, req).await
        }
        Route::ReleaseLease { computer, bot } => {
            leases::act(api, &computer, bot, leases::Action::Release, req).await
        }
        Route::MintMcpToken { computer, bot } => mcp::mint(api, &computer, bot, req).await,
        Route::GetNetwork { computer } => network::show(api, &computer).await,
        Route::SetNetwork { computer } => network::set(api, &computer, req).await,
        Route::GetWorkspaceNetwork { workspace } => network::show_workspace(api, &workspace).await,
        Route::SetWorkspaceNetwork { workspace } => {
            network::set_workspace(api, &workspace, req).await
        }
        Route::ListSecrets { workspace } => secrets::list(api, &workspace).await,
        Route::PutSecret { workspace, name } => secrets::put(api, &workspace, &name, req).await,
        Route::DeleteSecret { workspace, name } => secrets::delete(api, &workspace, &name).await,
        Route::CreateToken {} => tokens::create(api, req).await,
        Route::ListTokens {} => tokens::list(api).await,
        Route::RevokeToken { token } => tokens::revoke(api, &token).await,
        Route::OpenSession {} => console::open(api, req).await,
        Route::ShowSession {} => console::show(api, &req).await,
        Route::CloseSession {} => console::close(api, &req).await,
    }
}

/// The principal of a route that takes a token (always set for one: `serve_route` checked it).
fn principal(who: Option<&Principal>) -> Result<&Principal, ApiError> {
    who.ok_or_else(unauthorized)
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
            CoreError::NotFound(_) => ApiError::new(ApiCode::NotFound, msg),
            // A stopped computer (by hand or after being idle) stays stopped until started.
            CoreError::NotRunning {
                id,
                state: crate::computers::ComputerState::Stopped,
            } => ApiError::new(
                ApiCode::ComputerNotRunning,
                format!(
                    "{msg}: start it first (POST /v1/computers/{id}/start, \
                     `rakazo computer start {id}`)"
                ),
            ),
            CoreError::NotRunning { .. } => ApiError::new(ApiCode::ComputerNotRunning, msg),
            CoreError::UnknownProvider(_) => ApiError::bad_request(msg),
            CoreError::StaleLease { .. } => ApiError::new(ApiCode::StaleLease, msg),
            CoreError::Lease(LeaseError::Held { .. }) => ApiError::new(ApiCode::LeaseHeld, msg),
            CoreError::Lease(LeaseError::Mismatch { .. }) => {
                ApiError::new(ApiCode::LeaseMismatch, msg)
            }
            CoreError::Lease(LeaseError::BadOwner { .. }) => ApiError::bad_request(msg),
            CoreError::Tunnel(t) => t.into(),
            CoreError::Lease(LeaseError::FenceExhausted { .. }) => {
                ApiError::new(ApiCode::FenceExhausted, msg)
            }
            CoreError::Lease(LeaseError::Db(d)) => ApiError::db(&d),
            CoreError::Computer(c) => computer_error(c, msg),
            CoreError::Home(h) => homes::home_error(h),
            CoreError::BadLimits(_) => ApiError::bad_request(msg),
            CoreError::PoolMember { .. } => ApiError::new(ApiCode::ComputerNotRunning, msg),
            CoreError::Pool(p) => pools::pool_error(p),
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
        | E::BadPool(_)
        | E::BadProvider(_)
        | E::BadPlacement(_)
        | E::ReservedBotId(_) => ApiError::bad_request(msg),
        E::NotFound(_) => ApiError::new(ApiCode::NotFound, msg),
        E::AlreadyExists(_) => ApiError::new(ApiCode::ComputerExists, msg),
        E::HomeInUse { .. } => ApiError::new(ApiCode::HomeInUse, msg),
        E::Destroyed(_) => ApiError::new(ApiCode::ComputerDestroyed, msg),
        E::Db(d) => ApiError::db(&d),
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
        ErrorClass::Capacity => ApiError::new(ApiCode::ProviderCapacity, msg),
        ErrorClass::Transient => ApiError::new(ApiCode::ProviderUnavailable, msg),
        ErrorClass::Invalid => ApiError::new(ApiCode::ProviderInvalid, msg),
        // A gone machine is replaced by `start`; reaching here means it vanished mid-call.
        ErrorClass::Gone => ApiError::new(ApiCode::MachineGone, msg),
    }
}

impl From<TunnelError> for ApiError {
    fn from(e: TunnelError) -> Self {
        let msg = e.to_string();
        let uncertain = e.is_uncertain();
        let mut err = match e {
            TunnelError::NotConnected(_) => ApiError::new(ApiCode::ComputerUnavailable, msg),
            TunnelError::Lost(_) => ApiError::new(ApiCode::TunnelLost, msg),
            TunnelError::Suspending(_) => ApiError::new(ApiCode::ComputerSuspending, msg),
            TunnelError::Protocol { .. } => ApiError::new(ApiCode::GuestProtocolError, msg),
            TunnelError::Timeout { .. } => ApiError::new(ApiCode::GuestTimeout, msg),
            // The guest's refusal under its own code; `failed` (a process that would not
            // start, a full disk) is the computer's failure, not the control plane's: 502.
            TunnelError::Guest(op) => ApiError::new(op.code.into(), op.message),
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
    bot: BotId,
    req: Request<Incoming>,
) -> Result<(BotId, T), ApiError> {
    let body = read_json(req.into_body()).await?;
    Ok((bot, body))
}
