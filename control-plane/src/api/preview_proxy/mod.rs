//! The preview origins (docs/previews.md): every request whose `Host` is `<label>.<preview
//! domain>` is served here, before any route is parsed.
//!
//! In order: the preview is looked up by its label (404 unknown, 410 expired or revoked); the
//! reserved path `/__rakazo/open` exchanges a link's (or the console's) one-time token for the
//! origin's cookie; the visitor's access is checked (a link or session preview needs the
//! cookie); a stopped computer is woken (a browser gets a page that retries, another client
//! waits); the visit enters idle suspension's gate; the preview's connection cap is taken; then
//! the request is forwarded over a fresh tunnel stream to the port on the computer's loopback,
//! as HTTP/1.1, and the answer streamed back. Websocket upgrades become a byte relay.
//!
//! As a reverse proxy should: hop-by-hop headers (and those `Connection` names) are dropped both
//! ways, a client's `Forwarded`/`X-Forwarded-*` are replaced by ours, `Host` becomes
//! `localhost:<port>` (what a dev server expects; the label never reaches the app), `Origin`
//! and `Referer` of the preview's own origin are rewritten the same way, our cookie is taken out
//! of `Cookie`, and the app's `Set-Cookie` loses any `Domain` (cookies stay on their preview's
//! origin) and may not set ours ([`headers`]).

mod headers;

use super::body::{empty, RespBody};
use super::previews::{esc, page, port_suffix, preview_origin, safe_next};
use super::Api;
use crate::clock::now_ms;
use crate::computers::ComputerState;
use crate::core::CoreError;
use crate::guest::ConnectError;
use crate::live::seal::{PreviewScope, PreviewToken};
use crate::preview::{self, Access, PreviewConfig, PreviewRow};
use crate::schema::activity::Cause;
use bytes::Bytes;
use headers::{downstream_headers, is_upgrade, upstream_headers};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri, Version};
use hyper_util::rt::TokioIo;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// The previews' settings and what this process keeps of their visits.
pub struct PreviewHttp {
    pub config: PreviewConfig,
    /// Each preview's connection cap.
    caps: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// Cancelled when a preview is revoked here: its open connections end.
    revoked: Mutex<HashMap<String, CancellationToken>>,
    /// Computers a visit is starting now.
    waking: Mutex<HashSet<String>>,
    /// When a visit last started each computer: its servers may not listen yet.
    woken: Mutex<HashMap<String, tokio::time::Instant>>,
    /// Kept-alive connections to the apps, by computer and port, with when each was last used.
    pool: Mutex<HashMap<(String, u16), Vec<Idle>>>,
}

/// One HTTP/1.1 connection to an app, over a tunnel stream.
type Upstream = hyper::client::conn::http1::SendRequest<http_body_util::Limited<Incoming>>;
/// An idle connection and when it was last used.
type Idle = (Upstream, tokio::time::Instant);
/// Most idle connections kept per app.
const POOL_PER_APP: usize = 16;
/// How long an idle connection to an app is kept.
const POOL_IDLE: Duration = Duration::from_secs(30);

/// How long after a visit started a computer a port that refuses is taken for a server still
/// starting (a service): an API client's request waits for it, a browser's page retries.
const SERVER_START_GRACE: Duration = Duration::from_secs(20);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl PreviewHttp {
    pub fn new(config: PreviewConfig) -> Self {
        Self {
            config,
            caps: Mutex::default(),
            revoked: Mutex::default(),
            waking: Mutex::default(),
            woken: Mutex::default(),
            pool: Mutex::default(),
        }
    }

    /// An idle kept-alive connection to `port` of `computer`, if there is one.
    fn pooled(&self, computer: &str, port: u16) -> Option<Upstream> {
        let mut pool = lock(&self.pool);
        let idle = pool.get_mut(&(computer.to_string(), port))?;
        idle.retain(|(s, at)| !s.is_closed() && at.elapsed() < POOL_IDLE);
        let i = idle.iter().position(|(s, _)| s.is_ready())?;
        Some(idle.swap_remove(i).0)
    }

    /// Keeps a connection whose request was answered for the next request to the same app (it
    /// is taken only once its answer's body is through).
    fn keep(&self, computer: &str, port: u16, s: Upstream) {
        if s.is_closed() {
            return;
        }
        let mut pool = lock(&self.pool);
        let idle = pool.entry((computer.to_string(), port)).or_default();
        idle.retain(|(s, at)| !s.is_closed() && at.elapsed() < POOL_IDLE);
        if idle.len() < POOL_PER_APP {
            idle.push((s, tokio::time::Instant::now()));
        }
    }

    /// Whether a visit started `computer` within [`SERVER_START_GRACE`]: until when.
    fn starting_until(&self, computer: &str) -> Option<tokio::time::Instant> {
        let mut woken = lock(&self.woken);
        woken.retain(|_, at| at.elapsed() < SERVER_START_GRACE);
        woken.get(computer).map(|at| *at + SERVER_START_GRACE)
    }

    /// Preview `id` was revoked: its connections open here end now.
    pub fn revoked(&self, id: &str) {
        if let Some(t) = lock(&self.revoked).remove(id) {
            t.cancel();
        }
    }

    fn revocation(&self, id: &str) -> CancellationToken {
        lock(&self.revoked)
            .entry(id.to_string())
            .or_default()
            .clone()
    }

    fn permit(&self, id: &str) -> Option<OwnedSemaphorePermit> {
        let cap = lock(&self.caps)
            .entry(id.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(self.config.max_connections as usize)))
            .clone();
        cap.try_acquire_owned().ok()
    }
}

/// What ends a preview's connection early: its revocation here or its expiry.
fn stopper(
    token: CancellationToken,
    expires_at_ms: i64,
) -> Pin<Box<dyn Future<Output = ()> + Send + Sync>> {
    let left = Duration::from_millis(u64::try_from(expires_at_ms - now_ms()).unwrap_or(0));
    Box::pin(async move {
        tokio::select! {
            () = token.cancelled() => {}
            () = tokio::time::sleep(left) => {}
        }
    })
}

/// Serves one request to the preview origin of `label`.
pub async fn serve(api: &Arc<Api>, label: &str, req: Request<Incoming>) -> Response<RespBody> {
    let gone = || {
        page(
            StatusCode::NOT_FOUND,
            "No such preview",
            "<p>Nothing is shared at this address.</p>",
        )
    };
    if !preview::well_formed(label) {
        return gone();
    }
    let row = match api.core.previews.by_label(label).await {
        Ok(Some(row)) => row,
        Ok(None) => return gone(),
        Err(e) => {
            warn!(error = %e, "cannot look a preview up");
            return unavailable("The preview cannot be looked up now. Try again shortly.");
        }
    };
    let now = now_ms();
    if row.revoked_at_ms.is_some() || !row.live(now) {
        let why = if row.revoked_at_ms.is_some() {
            "was revoked"
        } else {
            "expired"
        };
        return page(
            StatusCode::GONE,
            "This preview is over",
            &format!("<p>This preview {why}. Ask for a new URL.</p>"),
        );
    }
    let method = req.method().clone();
    let resp = visit(api, &row, label, req).await;
    info!(preview_id = %row.id, computer_id = %row.computer, %method, status = resp.status().as_u16(), "preview request");
    resp
}

async fn visit(
    api: &Arc<Api>,
    row: &PreviewRow,
    label: &str,
    req: Request<Incoming>,
) -> Response<RespBody> {
    let path = req.uri().path();
    if let Some(rest) = path.strip_prefix(preview::RESERVED_PREFIX) {
        return match rest {
            "open" => open(api, row, label, &req),
            _ => page(StatusCode::NOT_FOUND, "Not found", "<p>No such page.</p>"),
        };
    }
    if row.access != Access::Public && !has_cookie(api, row, &req) {
        return refused(api, row, label, &req);
    }
    let browser = is_navigation(&req);
    if let Err(resp) = running(api, row, browser).await {
        return resp;
    }
    let operation = if api.preview.config.visits_are_use {
        match api.core.idle.enter(&row.computer, true) {
            Ok(op) => Some(op),
            Err(_) => {
                return starting(
                    browser,
                    "The computer is being suspended; it starts again on the next visit.",
                )
            }
        }
    } else {
        None
    };
    let Some(permit) = api.preview.permit(&row.id) else {
        let mut resp = page(
            StatusCode::TOO_MANY_REQUESTS,
            "Too many connections",
            &format!(
                "<p>This preview serves {} connections at once. Try again shortly.</p>",
                api.preview.config.max_connections
            ),
        );
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return resp;
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > api.preview.config.max_body_bytes) {
        return page(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Too large",
            &format!(
                "<p>A preview takes request bodies of at most {} bytes.</p>",
                api.preview.config.max_body_bytes
            ),
        );
    }
    let held = Held {
        _permit: permit,
        _operation: operation,
        stop: stopper(api.preview.revocation(&row.id), row.expires_at_ms),
    };
    forward(api, row, label, req, held).await
}

/// What a forwarded request holds until its answer is sent (or its upgrade closes).
struct Held {
    _permit: OwnedSemaphorePermit,
    _operation: Option<crate::idle::Operation>,
    stop: Pin<Box<dyn Future<Output = ()> + Send + Sync>>,
}

/// A browser's page load (which gets pages that retry), not a script's request.
fn is_navigation<B>(req: &Request<B>) -> bool {
    matches!(*req.method(), Method::GET | Method::HEAD)
        && req
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/html"))
        && !req.headers().contains_key(header::UPGRADE)
}

fn unavailable(text: &str) -> Response<RespBody> {
    let mut resp = page(
        StatusCode::SERVICE_UNAVAILABLE,
        "Unavailable",
        &format!("<p>{}</p>", esc(text)),
    );
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
    resp
}

/// 503 with a page that reloads itself every 2 s for a browser.
fn starting(browser: bool, text: &str) -> Response<RespBody> {
    let mut resp = page(
        StatusCode::SERVICE_UNAVAILABLE,
        "Starting…",
        &format!("<p>{}</p><p>This page reloads by itself.</p>", esc(text)),
    );
    let h = resp.headers_mut();
    h.insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
    if browser {
        h.insert(
            HeaderName::from_static("refresh"),
            HeaderValue::from_static("2"),
        );
    }
    resp
}

fn has_cookie<B>(api: &Api, row: &PreviewRow, req: &Request<B>) -> bool {
    let now = now_ms();
    super::console::cookie_values(req, preview::COOKIE).any(|v| {
        api.live
            .sealer
            .open_preview(PreviewToken::Cookie, v, now)
            .is_ok_and(|(_, scope)| scope.preview == row.id)
    })
}

/// A visitor without the cookie: a link preview needs its link; a session preview sends a
/// browser to the console to sign in.
fn refused<B>(api: &Api, row: &PreviewRow, label: &str, req: &Request<B>) -> Response<RespBody> {
    match row.access {
        Access::Session if matches!(*req.method(), Method::GET | Method::HEAD) => {
            let console = console_origin(api, req);
            let next = safe_next(req.uri().path_and_query().map(|p| p.as_str()));
            let target = format!(
                "{console}/console/preview?host={label}&next={}",
                form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()
            );
            let mut resp = Response::new(empty());
            *resp.status_mut() = StatusCode::FOUND;
            if let Ok(v) = HeaderValue::from_str(&target) {
                resp.headers_mut().insert(header::LOCATION, v);
            }
            crate::live::pages::strict_headers(&mut resp, "no-store", "default-src 'none'");
            resp
        }
        Access::Session => page(
            StatusCode::UNAUTHORIZED,
            "Sign in first",
            "<p>This preview is for people signed in to the console: open it in a browser.</p>",
        ),
        Access::Link | Access::Public => page(
            StatusCode::FORBIDDEN,
            "This preview opens with its link",
            "<p>Open the preview's whole URL, as it was shared, once in this browser.</p>",
        ),
    }
}

/// The console's origin a session preview sends its visitors to.
fn console_origin<B>(api: &Api, req: &Request<B>) -> String {
    if let Some(url) = &api.preview.config.console_url {
        return url.clone();
    }
    let parent = api
        .preview
        .config
        .domain
        .split_once('.')
        .map_or("localhost", |(_, rest)| rest);
    format!("{}://{parent}{}", api.scheme(), port_suffix(req))
}

/// `/__rakazo/open?t=<token>&next=<path>`: a link's token, or the console's hand-back, for the
/// origin's cookie; then on to `next`.
fn open<B>(api: &Api, row: &PreviewRow, label: &str, req: &Request<B>) -> Response<RespBody> {
    let query: HashMap<String, String> = req
        .uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let now = now_ms();
    let opened = query
        .get("t")
        .filter(|t| t.len() <= crate::live::seal::MAX_TOKEN_LEN)
        .and_then(|t| {
            api.live
                .sealer
                .open_preview(PreviewToken::Open, t, now)
                .ok()
        })
        .filter(|(_, scope)| scope.preview == row.id);
    if opened.is_none() {
        info!(preview_id = %row.id, "preview link refused: invalid or expired token");
        return page(
            StatusCode::FORBIDDEN,
            "This link does not open the preview",
            "<p>The link is damaged or has expired. Ask for a new one.</p>",
        );
    }
    let expires = row
        .expires_at_ms
        .min(now.saturating_add(preview::COOKIE_TTL.as_millis() as i64));
    let Ok(cookie) = api.live.sealer.seal_preview(
        PreviewToken::Cookie,
        expires,
        &PreviewScope {
            preview: row.id.clone(),
        },
    ) else {
        return unavailable("The preview cannot be opened now.");
    };
    let secure = if api.scheme() == "https" {
        "; Secure"
    } else {
        ""
    };
    let max_age = (expires - now) / 1000;
    let mut resp = Response::new(empty());
    *resp.status_mut() = StatusCode::SEE_OTHER;
    let next = safe_next(query.get("next").map(String::as_str));
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(
        &format!(
            "{}=<v>; Path=/; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}",
            preview::COOKIE
        )
        .replace("<v>", &cookie),
    ) {
        h.insert(header::SET_COOKIE, v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("{}{next}", preview_origin(api, label, req))) {
        h.insert(header::LOCATION, v);
    }
    crate::live::pages::strict_headers(&mut resp, "no-store", "default-src 'none'");
    info!(preview_id = %row.id, "preview opened");
    resp
}

/// Makes sure the preview's computer runs, waking a stopped one; `Err` is the answer instead.
async fn running(
    api: &Arc<Api>,
    row: &PreviewRow,
    browser: bool,
) -> Result<(), Response<RespBody>> {
    let started = tokio::time::Instant::now();
    loop {
        let c = match api.core.get(&row.computer).await {
            Ok(c) => c,
            Err(CoreError::NotFound(_)) => {
                return Err(page(
                    StatusCode::GONE,
                    "This preview is over",
                    "<p>Its computer is gone.</p>",
                ))
            }
            Err(e) => {
                warn!(preview_id = %row.id, error = %e, "cannot read the preview's computer");
                return Err(unavailable("The computer cannot be reached now."));
            }
        };
        match c.state {
            ComputerState::Running => return Ok(()),
            ComputerState::Destroyed => {
                return Err(page(
                    StatusCode::GONE,
                    "This preview is over",
                    "<p>Its computer was destroyed.</p>",
                ))
            }
            ComputerState::Stopped | ComputerState::Provisioning => {
                let Some(limit) = api.preview.config.wake_timeout else {
                    return Err(unavailable("The computer is stopped."));
                };
                if c.state == ComputerState::Stopped {
                    wake(api, row);
                }
                if browser {
                    return Err(starting(browser, "The computer is starting."));
                }
                if started.elapsed() >= limit {
                    return Err(unavailable("The computer did not start in time."));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Starts the preview's computer in the background, once however many visits ask.
fn wake(api: &Arc<Api>, row: &PreviewRow) {
    if !lock(&api.preview.waking).insert(row.computer.clone()) {
        return;
    }
    let api = api.clone();
    let (computer, id, port) = (row.computer.clone(), row.id.clone(), row.port);
    tokio::spawn(async move {
        info!(computer_id = %computer, preview_id = %id, "a preview visit starts the stopped computer");
        let reason = format!("started by a visit to preview {id} (port {port})");
        match api
            .core
            .start_for(&computer, Cause::PreviewVisit, &reason)
            .await
        {
            Ok(_) => {
                lock(&api.preview.woken).insert(computer.clone(), tokio::time::Instant::now());
            }
            Err(e) => {
                warn!(computer_id = %computer, preview_id = %id, error = %e, "a preview visit could not start the computer");
            }
        }
        lock(&api.preview.waking).remove(&computer);
    });
}

/// Forwards the request to the app and streams its answer back.
async fn forward(
    api: &Arc<Api>,
    row: &PreviewRow,
    label: &str,
    mut req: Request<Incoming>,
    held: Held,
) -> Response<RespBody> {
    let headers = upstream_headers(api, row, label, &req);
    let wants_upgrade = is_upgrade(&headers);
    let client_upgrade = wants_upgrade.then(|| hyper::upgrade::on(&mut req));
    let path = req
        .uri()
        .path_and_query()
        .map_or_else(|| "/".to_string(), |p| p.as_str().to_string());
    let Ok(uri) = path.parse::<Uri>() else {
        return page(
            StatusCode::BAD_REQUEST,
            "Bad request",
            "<p>A malformed path.</p>",
        );
    };
    let browser = is_navigation(&req);
    let (parts, body) = req.into_parts();
    let limit = usize::try_from(api.preview.config.max_body_bytes).unwrap_or(usize::MAX);
    let mut upstream = Request::new(http_body_util::Limited::new(body, limit));
    *upstream.method_mut() = parts.method;
    *upstream.uri_mut() = uri;
    *upstream.version_mut() = Version::HTTP_11;
    *upstream.headers_mut() = headers;

    // A kept-alive connection to the app when one is free (an upgrade gets its own); a request
    // a closed one could not take comes back and goes on a new one.
    let mut pooled = if wants_upgrade {
        None
    } else {
        api.preview.pooled(&row.computer, row.port)
    };
    let started = tokio::time::Instant::now();
    let (sender, answered) = loop {
        let mut sender = match pooled.take() {
            Some(s) => s,
            None => match connect(api, row, browser).await {
                Ok(s) => s,
                Err(resp) => return resp,
            },
        };
        let left = api
            .preview
            .config
            .response_timeout
            .saturating_sub(started.elapsed());
        match tokio::time::timeout(left, sender.try_send_request(upstream)).await {
            Ok(Err(mut e)) => match e.take_message() {
                Some(req) if !e.error().is_timeout() => {
                    upstream = req;
                    continue;
                }
                _ => break (sender, Ok(Err(e.into_error()))),
            },
            Ok(Ok(resp)) => break (sender, Ok(Ok(resp))),
            Err(elapsed) => break (sender, Err(elapsed)),
        }
    };
    let mut resp = match answered {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            debug!(preview_id = %row.id, error = %e, "preview: the app failed");
            return page(
                StatusCode::BAD_GATEWAY,
                "The app failed",
                "<p>The server inside the computer closed the connection without an answer.</p>",
            );
        }
        Err(_) => {
            return page(
                StatusCode::GATEWAY_TIMEOUT,
                "The app did not answer",
                "<p>The server inside the computer did not answer in time.</p>",
            )
        }
    };
    // Ours is HTTP/1.1 whatever the app speaks (Python's http.server answers 1.0).
    *resp.version_mut() = Version::HTTP_11;
    let upgraded = resp.status() == StatusCode::SWITCHING_PROTOCOLS;
    if !upgraded {
        api.preview.keep(&row.computer, row.port, sender);
    }
    downstream_headers(resp.headers_mut(), upgraded);
    if upgraded {
        let Some(client) = client_upgrade else {
            return page(
                StatusCode::BAD_GATEWAY,
                "The app failed",
                "<p>An unasked upgrade.</p>",
            );
        };
        let app = hyper::upgrade::on(&mut resp);
        let id = row.id.clone();
        tokio::spawn(async move {
            let Held {
                stop,
                _permit,
                _operation,
            } = held;
            let (client, app) = match tokio::join!(client, app) {
                (Ok(c), Ok(a)) => (c, a),
                _ => return,
            };
            let (mut client, mut app) = (TokioIo::new(client), TokioIo::new(app));
            tokio::select! {
                r = tokio::io::copy_bidirectional(&mut client, &mut app) => {
                    debug!(preview_id = %id, result = ?r, "preview upgrade closed");
                }
                () = stop => debug!(preview_id = %id, "preview revoked or expired: upgrade closed"),
            }
        });
        return resp.map(|_| empty());
    }
    resp.map(|body| Guarded { body, held }.boxed())
}

/// A new connection to the preview's app: a tunnel stream to its port, HTTP/1.1 over it. A
/// computer a visit just woke gets its server some time to listen (a browser a page that
/// retries); `Err` is the answer instead.
async fn connect(
    api: &Arc<Api>,
    row: &PreviewRow,
    browser: bool,
) -> Result<Upstream, Response<RespBody>> {
    let port = row.port;
    let connect = gateway_proto::live::PortConnect { port };
    let stream = loop {
        let stream = match api.core.guest_for(&row.computer, &connect).await {
            Ok(guest) => guest.connect_port(port).await,
            Err(CoreError::Tunnel(e)) => Err(ConnectError::Open(e)),
            Err(e) => {
                debug!(preview_id = %row.id, error = %e, "preview: no guest");
                return Err(unavailable("The computer is not reachable now."));
            }
        };
        // Just woken by a visit, its server (a service) may still be starting.
        match (&stream, api.preview.starting_until(&row.computer)) {
            (Err(ConnectError::Refused(_)), Some(_)) if browser => {
                return Err(starting(
                    true,
                    "The computer started; its server is starting.",
                ))
            }
            (Err(ConnectError::Refused(_)), Some(until)) if tokio::time::Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            _ => break stream,
        }
    };
    let stream = match stream {
        Ok(s) => s,
        Err(ConnectError::Refused(e)) => {
            debug!(preview_id = %row.id, error = %e.message, "preview: port refused");
            let mut resp = page(
                StatusCode::BAD_GATEWAY,
                "Nothing listens there",
                &format!(
                    "<p>Nothing listens on port {port} inside the computer (yet). Start the \
                     server, then reload.</p>"
                ),
            );
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
            return Err(resp);
        }
        Err(ConnectError::Open(e) | ConnectError::Answer(e)) => {
            debug!(preview_id = %row.id, error = %e, "preview: tunnel");
            return Err(unavailable("The computer is not reachable now."));
        }
    };
    let (sender, conn) = match hyper::client::conn::http1::Builder::new()
        .handshake(TokioIo::new(stream))
        .await
    {
        Ok(v) => v,
        Err(e) => {
            debug!(preview_id = %row.id, error = %e, "preview: handshake");
            return Err(unavailable("The computer is not reachable now."));
        }
    };
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            debug!(error = %e, "preview connection to the app ended with an error");
        }
    });
    Ok(sender)
}

/// The app's response body, ended early when the preview is revoked or expires.
struct Guarded {
    body: Incoming,
    held: Held,
}

impl Body for Guarded {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if self.held.stop.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(std::io::Error::other(
                "the preview was revoked or expired",
            ))));
        }
        Pin::new(&mut self.body)
            .poll_frame(cx)
            .map_err(std::io::Error::other)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
