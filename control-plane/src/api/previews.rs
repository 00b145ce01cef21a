//! `/v1/computers/{id}/previews` (make, list, revoke preview URLs) and `/console/preview` (a
//! session preview's sign-in on the console's origin). The preview origins themselves are
//! served by [`super::preview_proxy`].

use super::body::{full, json_response, read_json, read_limited};
use super::{Api, ApiError, RespBody};
use crate::clock::now_ms;
use crate::live::seal::{PreviewScope, PreviewToken};
use crate::preview::{self, Access, PreviewError, PreviewRow};
use crate::schema::code::ApiCode;
use crate::schema::preview::{CreatePreview, CreatedPreview, Preview, PreviewList};
use crate::tokens::Principal;
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use std::collections::HashMap;
use std::sync::Arc;
use tracing::info;

/// As listed.
pub(super) fn shown(r: &PreviewRow, now_ms: i64) -> Preview {
    Preview {
        id: r.id.clone(),
        computer: r.computer.clone(),
        port: r.port,
        access: r.access.as_str().into(),
        created_by: r.created_by.clone(),
        created_at_ms: r.created_at_ms,
        expires_at_ms: r.expires_at_ms,
        revoked_at_ms: r.revoked_at_ms,
        state: if r.revoked_at_ms.is_some() {
            "revoked"
        } else if r.live(now_ms) {
            "live"
        } else {
            "expired"
        }
        .into(),
    }
}

impl From<PreviewError> for ApiError {
    fn from(e: PreviewError) -> Self {
        match e {
            PreviewError::Bad(m) => ApiError::bad_request(m),
            PreviewError::NotFound(_) => ApiError::new(ApiCode::NotFound, e.to_string()),
            PreviewError::TooMany => ApiError::new(ApiCode::TooManyPreviews, e.to_string()),
            PreviewError::Db(e) => ApiError::db(&e),
        }
    }
}

/// The `:port` of the request's `Host`, if it names one: preview origins are on the port the
/// API was reached on.
pub(super) fn port_suffix<B>(req: &Request<B>) -> String {
    super::live::request_host(req)
        .and_then(|h| {
            h.rsplit_once(':')
                .filter(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                .map(|(_, p)| format!(":{p}"))
        })
        .unwrap_or_default()
}

/// The origin of the preview served under `label`, on the port `suffix` names (see
/// [`port_suffix`]).
fn origin_at(api: &Api, label: &str, suffix: &str) -> String {
    format!(
        "{}://{label}.{}{suffix}",
        api.scheme(),
        api.preview.config.domain
    )
}

pub async fn create(
    api: &Arc<Api>,
    who: &Principal,
    id: &str,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let suffix = port_suffix(&req);
    let body: CreatePreview = read_json(req.into_body()).await?;
    let access = match body.access.as_deref() {
        None => Access::Link,
        Some(a) => Access::parse(a).map_err(ApiError::bad_request)?,
    };
    let ttl = body
        .expires_in_secs
        .unwrap_or(preview::DEFAULT_TTL.as_secs());
    if !(1..=preview::MAX_TTL.as_secs()).contains(&ttl) {
        return Err(ApiError::bad_request(format!(
            "expires_in_secs must be 1..={}",
            preview::MAX_TTL.as_secs()
        )));
    }
    if body.port == 0 {
        return Err(ApiError::bad_request("port must be 1 to 65535"));
    }
    // A destroyed computer is a 404 from `get`.
    let c = api.core.get(id).await?;
    if let Some(provider) = api.core.providers().get(&c.provider) {
        provider
            .own_loopback()
            .map_err(|why| ApiError::new(ApiCode::PreviewUnavailable, why))?;
    }
    let now = now_ms();
    let expires = now.saturating_add(i64::try_from(ttl * 1000).unwrap_or(i64::MAX));
    let (row, label) = api
        .core
        .previews
        .create(id, body.port, access, &who.name, expires, now)
        .await?;
    let origin = origin_at(api, &label, &suffix);
    let url = match access {
        Access::Public | Access::Session => format!("{origin}/"),
        Access::Link => {
            let token = api
                .live
                .sealer
                .seal_preview(
                    PreviewToken::Open,
                    expires,
                    &PreviewScope {
                        preview: row.id.clone(),
                    },
                )
                .map_err(ApiError::internal)?;
            format!("{origin}{}open?t={token}", preview::RESERVED_PREFIX)
        }
    };
    info!(computer_id = %id, preview_id = %row.id, port = row.port, access = access.as_str(), "preview url made");
    Ok(json_response(
        StatusCode::CREATED,
        &CreatedPreview {
            preview: shown(&row, now),
            url,
            origin,
        },
    ))
}

pub async fn list(
    api: &Arc<Api>,
    id: &str,
    query: &HashMap<String, String>,
) -> Result<Response<RespBody>, ApiError> {
    api.core.get(id).await?;
    let all = match query.get("all").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::bad_request("all must be true or false")),
    };
    let now = now_ms();
    let rows = api
        .core
        .previews
        .list(id, all, now)
        .await
        .map_err(ApiError::internal)?;
    Ok(json_response(
        StatusCode::OK,
        &PreviewList {
            previews: rows.iter().map(|r| shown(r, now)).collect(),
        },
    ))
}

pub async fn revoke(
    api: &Arc<Api>,
    id: &str,
    preview_id: &str,
) -> Result<Response<RespBody>, ApiError> {
    api.core.get(id).await?;
    let now = now_ms();
    let row = api.core.previews.revoke(id, preview_id, now).await?;
    // Its open connections here end now; another replica's end when they notice.
    api.preview.revoked(&row.id);
    info!(computer_id = %id, preview_id = %row.id, "preview url revoked");
    Ok(json_response(StatusCode::OK, &shown(&row, now)))
}

/// A small page of ours: no script, nothing from elsewhere, never cached or framed.
pub(super) fn page(status: StatusCode, title: &str, body_html: &str) -> Response<RespBody> {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\"><title>{title}</title>\
         <style>body{{font:16px system-ui,sans-serif;margin:4em auto;max-width:36em;\
         padding:0 1em;color:#222}}h1{{font-size:1.3em}}button{{font-size:1em;padding:.4em 1em}}\
         </style></head><body><h1>{title}</h1>{body_html}</body></html>"
    );
    let mut resp = Response::new(full(Bytes::from(html)));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    crate::live::pages::strict_headers(
        &mut resp,
        "no-store",
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self' http: https:; \
         frame-ancestors 'none'; base-uri 'none'",
    );
    resp
}

/// Escapes text for HTML.
pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// A path a preview may send its visitor back to: this origin's, `/` first, no scheme or host.
pub(super) fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && n.len() <= 2048
                && !n.bytes().any(|b| b == b'\\' || b.is_ascii_control()) =>
        {
            n.to_string()
        }
        _ => "/".to_string(),
    }
}

/// `GET /console/preview?host=<label>&next=<path>`: a session preview sent its visitor here.
/// The console's cookie is `SameSite=Strict`, so it does not come with a redirect from another
/// site: this page asks to continue, and the form's POST (from this origin) carries it.
pub async fn sign_in_page(
    api: &Arc<Api>,
    query: &HashMap<String, String>,
) -> Result<Response<RespBody>, ApiError> {
    let row = session_preview(api, query.get("host").map(String::as_str)).await?;
    let Some((row, label)) = row else {
        return Ok(page(
            StatusCode::NOT_FOUND,
            "No such preview",
            "<p>This preview does not exist, expired or was revoked.</p>",
        ));
    };
    let next = safe_next(query.get("next").map(String::as_str));
    Ok(page(
        StatusCode::OK,
        "Open a preview",
        &format!(
            "<p>Port {port} of computer <code>{computer}</code> ({id}) is shared with the people \
             signed in to this console who may see it.</p>\
             <form method=\"post\" action=\"/console/preview\">\
             <input type=\"hidden\" name=\"host\" value=\"{label}\">\
             <input type=\"hidden\" name=\"next\" value=\"{next}\">\
             <button type=\"submit\">Continue to the preview</button></form>",
            port = row.port,
            computer = esc(&row.computer),
            id = esc(&row.id),
            label = esc(&label),
            next = esc(&next),
        ),
    ))
}

/// `POST /console/preview` (a form: `host`, `next`): checks the console session and sends the
/// visitor back to the preview's origin with a one-time token for its cookie.
pub async fn sign_in(
    api: &Arc<Api>,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let suffix = port_suffix(&req);
    let cookie = super::console::session_cookie(&req);
    let form = read_limited(req.into_body(), 8 << 10).await?;
    let form: HashMap<String, String> = form_urlencoded::parse(&form).into_owned().collect();
    let Some((row, label)) = session_preview(api, form.get("host").map(String::as_str)).await?
    else {
        return Ok(page(
            StatusCode::NOT_FOUND,
            "No such preview",
            "<p>This preview does not exist, expired or was revoked.</p>",
        ));
    };
    let now = now_ms();
    let session = match cookie {
        Some(c) => api
            .core
            .tokens
            .session(&c, now)
            .await
            .map_err(ApiError::internal)?,
        None => None,
    };
    let Some(session) = session else {
        return Ok(page(
            StatusCode::UNAUTHORIZED,
            "Sign in first",
            "<p>This preview is for people signed in to the console. \
             <a href=\"/console\">Sign in</a>, then open the preview again.</p>",
        ));
    };
    let c = api.core.get(&row.computer).await?;
    if !session.principal.sees(&c) {
        info!(preview_id = %row.id, who = %session.principal.name, "preview sign-in refused: the session does not see the computer");
        return Ok(page(
            StatusCode::FORBIDDEN,
            "Not yours to see",
            "<p>Your console session does not see this computer's workspace.</p>",
        ));
    }
    let expires = now.saturating_add(preview::HANDOFF_TTL.as_millis() as i64);
    let token = api
        .live
        .sealer
        .seal_preview(
            PreviewToken::Open,
            expires.min(row.expires_at_ms),
            &PreviewScope {
                preview: row.id.clone(),
            },
        )
        .map_err(ApiError::internal)?;
    let next = safe_next(form.get("next").map(String::as_str));
    let target = format!(
        "{}{}open?t={token}&next={}",
        origin_at(api, &label, &suffix),
        preview::RESERVED_PREFIX,
        form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()
    );
    info!(preview_id = %row.id, who = %session.principal.name, "preview sign-in");
    let mut resp = Response::new(super::body::empty());
    *resp.status_mut() = StatusCode::SEE_OTHER;
    resp.headers_mut().insert(
        header::LOCATION,
        HeaderValue::from_str(&target).map_err(ApiError::internal)?,
    );
    crate::live::pages::strict_headers(&mut resp, "no-store", "default-src 'none'");
    Ok(resp)
}

/// The live session preview under `label`, with the label lowercased.
async fn session_preview(
    api: &Api,
    label: Option<&str>,
) -> Result<Option<(PreviewRow, String)>, ApiError> {
    let Some(label) = label.filter(|l| preview::well_formed(l)) else {
        return Ok(None);
    };
    let row = api
        .core
        .previews
        .by_label(label)
        .await
        .map_err(ApiError::internal)?;
    Ok(row
        .filter(|r| r.access == Access::Session && r.live(now_ms()))
        .map(|r| (r, label.to_ascii_lowercase())))
}

/// The origin of the preview served under `label`, on the port `req` came to.
pub(super) fn preview_origin<B>(api: &Api, label: &str, req: &Request<B>) -> String {
    origin_at(api, label, &port_suffix(req))
}
