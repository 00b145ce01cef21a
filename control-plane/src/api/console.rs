//! The console (docs/console.md): its page and files, and its sessions.
//!
//! The page and its scripts and styles are compiled in (`control-plane/web/console`); the one
//! third-party module, htm's Preact bundle, is read from the npm install of `control-plane/web`
//! made at setup time, as xterm.js is. Every console response carries [`console_headers`]: a
//! content security policy without inline script, no framing, no caching.
//!
//! A person signs in once with an API token (`POST /console/session`): the answer sets an
//! HttpOnly, SameSite=Strict cookie (Secure over TLS) and gives the session's CSRF token, which
//! every state-changing request signed in by the cookie carries in [`CSRF_HEADER`]. The token
//! itself never reaches the page again; the session ends at sign-out, at its expiry, or when
//! its token is revoked.

use super::body::{empty, full, json_response, read_json, ApiError, RespBody};
use super::Api;
use crate::clock::now_ms;
use crate::schema::code::ApiCode;
use crate::schema::token::{OpenSession, SessionInfo};
use crate::tokens::{Principal, Session, SESSION_COOKIE};
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use std::sync::Arc;

/// The header a cookie-signed state-changing request carries its session's CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// The console's own files.
#[derive(rust_embed::Embed)]
#[folder = "web/console/"]
struct Files;

/// The policy of every console response: this origin only, no inline script or style
/// attribute, frames only of this origin's capability pages, never framed itself.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
                   img-src 'self' data: blob:; connect-src 'self'; frame-src 'self'; \
                   frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'";

/// Whether `path` is the console's page or one of its files (not a route).
pub fn is_page(path: &str) -> bool {
    path == "/console" || path == "/console/" || path.starts_with("/console/assets/")
}

fn console_headers<B>(resp: &mut Response<B>) {
    crate::live::pages::strict_headers(resp, "no-store", CSP);
    resp.headers_mut()
        .insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

fn content_type(name: &str) -> Option<&'static str> {
    Some(match name.rsplit_once('.')?.1 {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "json" => "application/json",
        _ => return None,
    })
}

fn plain(status: StatusCode, text: &'static str) -> Response<RespBody> {
    let mut resp = Response::new(full(Bytes::from_static(text.as_bytes())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// Serves the console's page or a file of it.
pub async fn page(api: &Api, method: &Method, path: &str) -> Response<RespBody> {
    let mut resp = if *method != Method::GET && *method != Method::HEAD {
        let mut r = plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "the console's files take GET\n",
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        r
    } else {
        let rel = path
            .strip_prefix("/console/assets/")
            .unwrap_or("index.html");
        file(api, rel).await
    };
    console_headers(&mut resp);
    resp
}

async fn file(api: &Api, rel: &str) -> Response<RespBody> {
    let plain_name = !rel.is_empty()
        && rel.len() <= 128
        && rel.split('/').all(|p| {
            !p.is_empty()
                && !p.starts_with('.')
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        });
    let Some(ct) = content_type(rel).filter(|_| plain_name) else {
        return plain(StatusCode::NOT_FOUND, "no such console file\n");
    };
    let body = if rel == "lib/preact.js" {
        // htm's standalone build: Preact, its hooks and htm in one module.
        let path = api
            .live
            .pages
            .web_dir
            .join("node_modules/htm/preact/standalone.module.js");
        match tokio::fs::read(&path).await {
            Ok(b) => Bytes::from(b),
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "the console's Preact bundle is missing: run scripts/setup-debian.sh (npm ci in control-plane/web)");
                return plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the console's libraries are not installed on this server\n",
                );
            }
        }
    } else {
        match Files::get(rel) {
            Some(f) => match f.data {
                std::borrow::Cow::Borrowed(b) => Bytes::from_static(b),
                std::borrow::Cow::Owned(b) => Bytes::from(b),
            },
            None => return plain(StatusCode::NOT_FOUND, "no such console file\n"),
        }
    };
    let mut resp = Response::new(full(body));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    resp
}

/// The value of the request's session cookie, if it has one.
pub fn session_cookie<B>(req: &Request<B>) -> Option<String> {
    cookie_values(req, SESSION_COOKIE).next().map(String::from)
}

/// The values of the request's cookies named `name`, in the order sent.
pub fn cookie_values<'a, B>(req: &'a Request<B>, name: &'a str) -> impl Iterator<Item = &'a str> {
    req.headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(move |(n, _)| *n == name)
        .map(|(_, value)| value)
}

fn info(s: &Session) -> SessionInfo {
    SessionInfo {
        csrf: s.csrf.clone(),
        role: s.principal.role.as_str().to_string(),
        workspaces: s.principal.workspaces.clone(),
        name: s.principal.name.clone(),
        expires_at: s.expires_at_ms,
    }
}

fn cookie(api: &Api, value: &str, max_age_secs: i64) -> HeaderValue {
    let secure = if api.scheme() == "https" {
        "; Secure"
    } else {
        ""
    };
    let text = format!(
        "{SESSION_COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age_secs}{secure}"
    );
    HeaderValue::from_str(&text).expect("a cookie of base64url and fixed text")
}

/// A request from a page of another origin (its `Origin` names a host other than the one it
/// was sent to) is refused: signing in is this site's pages' only.
fn same_origin(req: &Request<Incoming>) -> Result<(), ApiError> {
    let Some(origin) = req.headers().get(header::ORIGIN) else {
        return Ok(());
    };
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, rest)| rest.to_string());
    let host = super::live::request_host(req);
    if origin_host.is_some() && origin_host == host {
        return Ok(());
    }
    Err(ApiError::new(
        ApiCode::Csrf,
        "the console signs in from its own pages only",
    ))
}

/// `POST /console/session` with `{"token": …}`.
pub async fn open(api: &Arc<Api>, req: Request<Incoming>) -> Result<Response<RespBody>, ApiError> {
    let json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().unwrap_or("").trim() == "application/json");
    if !json {
        return Err(ApiError::new(
            ApiCode::UnsupportedMediaType,
            "sign in with a JSON body: {\"token\": \"…\"}",
        ));
    }
    same_origin(&req)?;
    let body: OpenSession = read_json(req.into_body()).await?;
    let now = now_ms();
    let principal: Principal = if api.is_server_token(body.token.as_bytes()) {
        Principal::server()
    } else {
        match api.core.tokens.verify(&body.token, now).await {
            Ok(Some(p)) => p,
            Ok(None) => return Err(super::unauthorized()),
            Err(e) => return Err(ApiError::internal(e)),
        }
    };
    let (value, session) = api
        .core
        .tokens
        .open_session(principal, now)
        .await
        .map_err(ApiError::internal)?;
    tracing::info!(
        token.id = session.principal.token_id.as_deref().unwrap_or("server"),
        "console session opened"
    );
    let mut resp = json_response(StatusCode::OK, &info(&session));
    let max_age = (session.expires_at_ms - now).max(0) / 1000;
    resp.headers_mut()
        .insert(header::SET_COOKIE, cookie(api, &value, max_age));
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(resp)
}

async fn current(api: &Api, req: &Request<Incoming>) -> Result<(String, Session), ApiError> {
    let value = session_cookie(req).ok_or_else(super::unauthorized)?;
    match api.core.tokens.session(&value, now_ms()).await {
        Ok(Some(s)) => Ok((value, s)),
        Ok(None) => Err(super::unauthorized()),
        Err(e) => Err(ApiError::internal(e)),
    }
}

/// `GET /console/session`.
pub async fn show(api: &Arc<Api>, req: &Request<Incoming>) -> Result<Response<RespBody>, ApiError> {
    let (_, session) = current(api, req).await?;
    let mut resp = json_response(StatusCode::OK, &info(&session));
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(resp)
}

/// `DELETE /console/session` (with the session's CSRF token).
pub async fn close(
    api: &Arc<Api>,
    req: &Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let (value, session) = current(api, req).await?;
    let presented = req
        .headers()
        .get(CSRF_HEADER)
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    if !super::same_secret(presented, session.csrf.as_bytes()) {
        return Err(ApiError::new(
            ApiCode::Csrf,
            "signing out needs the session's X-CSRF-Token",
        ));
    }
    api.core
        .tokens
        .close_session(&value)
        .await
        .map_err(ApiError::internal)?;
    let mut resp = Response::new(empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    resp.headers_mut()
        .insert(header::SET_COOKIE, cookie(api, "", 0));
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_and_its_files_are_compiled_in() {
        let index = Files::get("index.html").expect("index.html");
        let html = std::str::from_utf8(&index.data).unwrap();
        // No inline script: the policy would refuse it.
        assert!(!html.contains("<script>"), "inline script in index.html");
        for name in Files::iter() {
            assert!(content_type(&name).is_some(), "{name}: unknown type");
        }
    }

    #[test]
    fn cookies_are_found_among_others() {
        let req = Request::builder()
            .header(header::COOKIE, "a=1; rakazo_session=abc; b=2")
            .body(())
            .unwrap();
        assert_eq!(session_cookie(&req).as_deref(), Some("abc"));
        let none = Request::builder().body(()).unwrap();
        assert_eq!(session_cookie(&none), None);
    }
}
