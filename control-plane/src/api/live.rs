//! Live screens over HTTP: issuing capability URLs, takeover and its release,
//! `waiting_takeover` (all under `/v1`, behind the API token), and the capability routes
//! themselves (`/cap/{sealed}`, `/cap/{sealed}/ws`, `/assets/...`), which sit outside the API
//! token check because the sealed token is the credential.
//!
//! Capability routes never log their path, token or host; they emit the `screen.proxy.*`
//! events of docs/security.md#capability-urls with a random `screen.connection_id` and the policy.

use super::body::{empty, full, json_response, read_limited, ApiError, RespBody, MAX_JSON_BODY};
use super::Api;
use crate::clock::now_ms;
use crate::core::CoreError;
use crate::guest::ConnectError;
use crate::live::authority::{self, LiveError, Rejection};
use crate::live::pages::{self, cap_headers, Served};
use crate::live::relay::{relay, ws_config, RelayCtx};
use crate::live::seal::{Capability, CAPABILITY_TTL};
use crate::live::store::LiveStoreError;
use crate::live::streams::UrlKey;
use crate::schema::code::ApiCode;
use crate::schema::screen::{
    ControlReleased, ControlTaken, LiveUrl, UrlRequest, WaitingTakeover, WaitingTakeoverRequest,
};
use crate::tunnel::TunnelError;
use gateway_proto::live::{CapabilityKind, ConnectRequest, TerminalResume};
use gateway_proto::BotId;
use gateway_proto::{LeaseToken, StartDir};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Response, StatusCode};
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::time::Duration;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::WebSocketStream;
use tracing::info;

impl From<LiveError> for ApiError {
    fn from(e: LiveError) -> Self {
        let msg = e.to_string();
        match e {
            LiveError::Core(c) => c.into(),
            LiveError::Store(LiveStoreError::BotRunning { .. }) => {
                ApiError::new(ApiCode::BotRunning, "Stop the bot first")
            }
            LiveError::Store(LiveStoreError::Db(d)) => ApiError::db(&d),
            LiveError::NoControl { .. } => ApiError::new(ApiCode::NoControl, msg),
            LiveError::Seal(other) => ApiError::internal(other),
        }
    }
}

/// A JSON body that may be empty (then the defaults).
async fn optional_json<T: DeserializeOwned + Default>(body: Incoming) -> Result<T, ApiError> {
    let bytes = read_limited(body, MAX_JSON_BODY).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    super::body::parse_object(&bytes)
}

fn parse_policy(s: &str) -> Result<CapabilityKind, ApiError> {
    match s {
        "view" => Ok(CapabilityKind::View),
        "control" => Ok(CapabilityKind::Control),
        "terminal" => Ok(CapabilityKind::Terminal),
        other => Err(ApiError::bad_request(format!(
            "policy must be view, control or terminal, got {:?}",
            other.chars().take(32).collect::<String>()
        ))),
    }
}

/// `POST .../screens/{bot}/url` (`terminal` fixed for `.../terminals/{bot}/url`).
/// The request's `Host`, if it is a plain host[:port] an absolute URL can be built on.
pub(super) fn request_host<B>(req: &hyper::Request<B>) -> Option<String> {
    // HTTP/2 names it in `:authority`, which hyper puts in the URI.
    req.headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()))
        .filter(|h| {
            h.len() <= 255
                && h.bytes().all(|b| {
                    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']')
                })
        })
        .map(String::from)
}

pub async fn url(
    api: &Arc<Api>,
    id: &str,
    bot: BotId,
    fixed: Option<CapabilityKind>,
    view_only: bool,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let host = request_host(&req);
    let body: UrlRequest = optional_json(req.into_body()).await?;
    let policy = match (fixed, body.policy.as_deref()) {
        (Some(p), None) => p,
        (Some(p), Some(s)) if parse_policy(s)? == p => p,
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "this route issues terminal URLs only",
            ))
        }
        (None, Some(s)) => parse_policy(s)?,
        (None, None) => CapabilityKind::View,
    };
    if view_only && policy != CapabilityKind::View {
        return Err(ApiError::new(
            ApiCode::Forbidden,
            "a viewer's token gets view URLs only: taking control needs an operator token",
        ));
    }
    let ttl = match body.ttl_secs {
        None => CAPABILITY_TTL,
        Some(s) if (1..=CAPABILITY_TTL.as_secs()).contains(&s) => Duration::from_secs(s),
        Some(_) => {
            return Err(ApiError::bad_request(format!(
                "ttl_secs must be 1..={}",
                CAPABILITY_TTL.as_secs()
            )))
        }
    };
    let issued =
        authority::issue(&api.core, &api.live.sealer, id, &bot, policy, ttl, now_ms()).await?;
    let path = format!("/cap/{}", issued.token);
    let url = host.map(|h| format!("{}://{h}{path}", api.scheme()));
    Ok(json_response(
        StatusCode::OK,
        &LiveUrl {
            url: url.unwrap_or_else(|| path.clone()),
            path,
            policy: issued.policy.as_str().to_string(),
            expires_at_ms: issued.expires_at_ms,
        },
    ))
}

/// Before `POST .../screens/{bot}/release`: the bot's capabilities are revoked.
pub async fn screen_released(api: &Arc<Api>, id: &str, bot: &BotId) -> Result<(), ApiError> {
    let c = api.core.get(id).await?;
    api.core
        .screen_gone(&c.id, bot)
        .await
        .map_err(LiveError::from)?;
    Ok(())
}

/// `POST .../screens/{bot}/takeover`.
pub async fn takeover(
    api: &Arc<Api>,
    id: &str,
    bot: BotId,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    // No fields, but a body that is not `{}` (or empty) is refused, not ignored.
    let _: crate::schema::Empty = optional_json(req.into_body()).await?;
    let ttl = api.live.config.control_lease_ttl;
    let lease = authority::take_control(&api.core, id, &bot, ttl, now_ms()).await?;
    Ok(json_response(
        StatusCode::OK,
        &ControlTaken {
            computer: id.to_string(),
            bot: bot.as_str().to_string(),
            control_lease: lease.id,
            expires_at_ms: lease.expires_at_ms,
        },
    ))
}

/// `POST .../screens/{bot}/release-control`.
pub async fn release_control(
    api: &Arc<Api>,
    id: &str,
    bot: BotId,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let _: crate::schema::Empty = optional_json(req.into_body()).await?;
    let had = authority::release_control(&api.core, id, &bot).await?;
    Ok(json_response(
        StatusCode::OK,
        &ControlReleased {
            released: true,
            had_control: had,
        },
    ))
}

/// `POST .../leases/{bot}/waiting_takeover`: the run holding `lease` asks for (or no longer
/// needs) a person to take over.
pub async fn waiting_takeover(
    api: &Arc<Api>,
    id: &str,
    bot: BotId,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let body: WaitingTakeoverRequest = super::body::read_json(req.into_body()).await?;
    let lease =
        LeaseToken::parse(&body.lease).map_err(|e| ApiError::bad_request(format!("lease: {e}")))?;
    authority::set_waiting_takeover(&api.core, id, &bot, &lease, body.waiting, now_ms()).await?;
    Ok(json_response(
        StatusCode::OK,
        &WaitingTakeover {
            waiting_takeover: body.waiting,
        },
    ))
}

/// A plain-text refusal with the capability headers (never echoing the request).
fn refusal(status: StatusCode) -> Response<RespBody> {
    refusal_with(status, status.canonical_reason().unwrap_or("refused"))
}

/// [`refusal`] saying `text`.
fn refusal_with(status: StatusCode, text: &str) -> Response<RespBody> {
    let mut resp = Response::new(full(bytes::Bytes::from(format!("{text}\n"))));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    cap_headers(&mut resp);
    resp
}

fn connection_id() -> String {
    hex::encode(rand::random::<[u8; 8]>())
}

fn rejected(cid: &str, policy: Option<CapabilityKind>, reason: &'static str) {
    info!(
        screen.connection_id = %cid,
        policy = policy.map_or("unknown", CapabilityKind::as_str),
        reason,
        "screen.proxy.target_rejected"
    );
}

/// The capability routes: `/cap/{sealed}`, `/cap/{sealed}/ws` and `/assets/...`.
pub async fn public(api: &Arc<Api>, req: hyper::Request<Incoming>) -> Response<RespBody> {
    let path = req.uri().path().to_string();
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    if req.method() != Method::GET {
        return refusal(StatusCode::METHOD_NOT_ALLOWED);
    }
    match segments.as_slice() {
        ["assets", rest @ ..] => serve(pages::asset(&api.live.pages, rest).await, None),
        ["cap", token] => {
            let cid = connection_id();
            match open(api, token, &cid).await {
                Ok(cap) => serve(pages::page(cap.policy), Some((&cid, cap.policy))),
                Err(status) => refusal(status),
            }
        }
        ["cap", token, "ws"] => websocket(api, token, req).await,
        _ => refusal(StatusCode::NOT_FOUND),
    }
}

fn serve(served: Served, event: Option<(&str, CapabilityKind)>) -> Response<RespBody> {
    match served {
        Served::Ok { content_type, body } => {
            let mut resp = Response::new(full(body));
            resp.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            cap_headers(&mut resp);
            resp
        }
        Served::NotFound => refusal(StatusCode::NOT_FOUND),
        Served::Failed(e) => {
            let cid = event.map_or_else(connection_id, |(c, _)| c.to_string());
            info!(
                screen.connection_id = %cid,
                policy = event.map_or("none", |(_, p)| p.as_str()),
                error = %e,
                "screen.proxy.http_failed"
            );
            refusal(StatusCode::INTERNAL_SERVER_ERROR)
        }
    }
}

/// Opens a token and checks it against the database; the status to answer otherwise.
async fn open(api: &Arc<Api>, token: &str, cid: &str) -> Result<Capability, StatusCode> {
    let now = now_ms();
    let Ok(cap) = api.live.sealer.open(token, now) else {
        rejected(cid, None, "invalid_path");
        return Err(StatusCode::NOT_FOUND);
    };
    match authority::check(&api.core, &cap, now).await {
        Ok(()) => Ok(cap),
        Err(r) => {
            rejected(cid, Some(cap.policy), r.reason());
            Err(match r {
                Rejection::Rejected => StatusCode::FORBIDDEN,
                Rejection::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                // Expired between opening the token and checking it: as if a moment later.
                Rejection::Expired => StatusCode::NOT_FOUND,
            })
        }
    }
}

/// Whether a header holds `token` in its comma-separated list (case-insensitive).
fn header_has(req: &hyper::Request<Incoming>, name: header::HeaderName, token: &str) -> bool {
    req.headers().get_all(name).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',')
                .any(|part| part.trim().eq_ignore_ascii_case(token))
        })
    })
}

fn handshake_failed(cid: &str, policy: Option<CapabilityKind>, why: &'static str) {
    info!(
        screen.connection_id = %cid,
        policy = policy.map_or("unknown", CapabilityKind::as_str),
        reason = why,
        "screen.proxy.websocket_handshake_failed"
    );
}

/// The `Sec-WebSocket-Key` of a well-formed websocket upgrade request (version 13), else `None`.
pub(super) fn websocket_key(req: &hyper::Request<Incoming>) -> Option<Vec<u8>> {
    let is_upgrade = header_has(req, header::CONNECTION, "upgrade")
        && header_has(req, header::UPGRADE, "websocket")
        && req
            .headers()
            .get(header::SEC_WEBSOCKET_VERSION)
            .is_some_and(|v| v.as_bytes() == b"13");
    req.headers()
        .get(header::SEC_WEBSOCKET_KEY)
        .map(|k| k.as_bytes().to_vec())
        .filter(|k| is_upgrade && !k.is_empty() && k.len() <= 64)
}

/// The `101 Switching Protocols` answering the upgrade whose key is `key`.
pub(super) fn switching_protocols(key: &[u8]) -> Response<RespBody> {
    let mut resp = Response::new(empty());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(accept) = HeaderValue::from_str(&derive_accept_key(key)) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    resp
}

/// Shortest and longest page session id (`?session=`) of a terminal websocket.
const TERMINAL_SESSION_ID_LEN: std::ops::RangeInclusive<usize> = 16..=64;

/// The session key of a terminal websocket (docs/screens.md#reconnecting): `?session=<id>` is
/// the page's own random id (16 to 64 characters of `[A-Za-z0-9_-]`), `&resume=1` asks for the
/// shell that id had. The key the guest gets is a SHA-256 of the URL's token and the id: only
/// the same page through the same URL finds its shell again, and the guest never sees either.
/// Without `session` the shell ends with its connection.
fn terminal_resume(
    token: &str,
    req: &hyper::Request<Incoming>,
) -> Result<Option<TerminalResume>, &'static str> {
    use sha2::Digest;
    let query = |key: &str| {
        let q = req.uri().query()?;
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
    };
    let Some(session) = query("session") else {
        return Ok(None);
    };
    let valid = TERMINAL_SESSION_ID_LEN.contains(&session.len())
        && session
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !valid {
        return Err("the terminal session id must be 16 to 64 characters of [A-Za-z0-9_-]");
    }
    let mut h = sha2::Sha256::new();
    h.update(b"rakazo terminal session\0");
    h.update(token.as_bytes());
    h.update(b"\0");
    h.update(session.as_bytes());
    Ok(Some(TerminalResume {
        key: hex::encode(h.finalize()),
        resume: query("resume").as_deref() == Some("1"),
    }))
}

async fn websocket(
    api: &Arc<Api>,
    token: &str,
    req: hyper::Request<Incoming>,
) -> Response<RespBody> {
    let cid = connection_id();
    let Some(key) = websocket_key(&req) else {
        handshake_failed(&cid, None, "not_a_websocket_upgrade");
        return refusal(StatusCode::BAD_REQUEST);
    };
    let cap = match open(api, token, &cid).await {
        Ok(cap) => cap,
        Err(status) => return refusal(status),
    };
    let policy = cap.policy;
    let terminal = match policy {
        CapabilityKind::Terminal => match terminal_resume(token, &req) {
            Ok(t) => t,
            Err(why) => {
                handshake_failed(&cid, Some(policy), "bad_terminal_session");
                return refusal_with(StatusCode::BAD_REQUEST, why);
            }
        },
        CapabilityKind::View | CapabilityKind::Control => None,
    };
    // A place among the URL's streams is taken before the guest is asked, so a refused upgrade
    // costs the guest nothing; the guard gives it back however the stream ends.
    let guard = match api.core.live.streams.register(
        UrlKey::of_token(token),
        api.live.config.caps(),
        &cap.scope.computer,
        &cap.scope.bot,
        policy,
    ) {
        Ok(g) => g,
        Err(full) => {
            handshake_failed(&cid, Some(policy), "too_many_streams");
            return refusal_with(StatusCode::TOO_MANY_REQUESTS, &full.to_string());
        }
    };
    // A Team computer's bot gets its terminals in its own directory, like its commands.
    let start = match policy {
        CapabilityKind::Terminal => match api.core.get(&cap.scope.computer).await {
            Ok(c) => super::exec::start_dir(&c.kind),
            Err(_) => {
                rejected(&cid, Some(policy), "authority_unavailable");
                return refusal(StatusCode::SERVICE_UNAVAILABLE);
            }
        },
        CapabilityKind::View | CapabilityKind::Control => StartDir::Home,
    };
    let connect = ConnectRequest {
        bot: cap.scope.bot.clone(),
        kind: policy,
        control_lease: cap.scope.control_lease.clone(),
        start,
        terminal,
    };
    let opened = match api.core.guest_for(&cap.scope.computer, &connect).await {
        Ok(guest) => guest.connect(connect).await,
        Err(CoreError::Tunnel(e)) => Err(ConnectError::Open(e)),
        Err(_) => {
            rejected(&cid, Some(policy), "authority_rejected");
            return refusal(StatusCode::SERVICE_UNAVAILABLE);
        }
    };
    let mut op = match opened {
        Ok(op) => op,
        Err(ConnectError::Open(e)) => {
            let reason = match e {
                TunnelError::NotConnected(_) => "authority_unavailable",
                _ => "authority_rejected",
            };
            rejected(&cid, Some(policy), reason);
            return refusal(StatusCode::SERVICE_UNAVAILABLE);
        }
        Err(ConnectError::Refused(e)) => {
            info!(screen.connection_id = %cid, policy = policy.as_str(), code = e.code.as_str(), "guest refused the capability");
            rejected(&cid, Some(policy), "authority_rejected");
            return refusal(StatusCode::CONFLICT);
        }
        Err(ConnectError::Answer(_)) => {
            rejected(&cid, Some(policy), "invalid_authority_response");
            return refusal(StatusCode::BAD_GATEWAY);
        }
    };
    let wants_binary = header_has(&req, header::SEC_WEBSOCKET_PROTOCOL, "binary");
    let core = api.core.clone();
    let task_cid = cid.clone();
    tokio::spawn(async move {
        let upgraded = match hyper::upgrade::on(req).await {
            Ok(u) => u,
            Err(e) => {
                op.abort();
                info!(screen.connection_id = %task_cid, policy = policy.as_str(), error = %e, "screen.proxy.websocket_handshake_failed");
                return;
            }
        };
        let ws = WebSocketStream::from_raw_socket(
            hyper_util::rt::TokioIo::new(upgraded),
            Role::Server,
            Some(ws_config()),
        )
        .await;
        info!(screen.connection_id = %task_cid, policy = policy.as_str(), "screen.proxy.websocket_upgraded");
        let ctx = RelayCtx {
            core,
            cap,
            connection_id: task_cid,
            guard,
        };
        relay(ws, op, ctx).await;
    });
    let mut resp = switching_protocols(&key);
    let h = resp.headers_mut();
    if wants_binary {
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("binary"),
        );
    }
    cap_headers(&mut resp);
    resp
}
