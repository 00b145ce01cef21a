//! The preview proxy's header rules (docs/previews.md#the-proxy): what is dropped, replaced and
//! rewritten on the way to the app and back.

use super::super::previews::preview_origin;
use super::Api;
use crate::preview::{self, PreviewRow};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::Request;

/// Hop-by-hop headers (RFC 9110 7.6.1), never forwarded either way.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Drops hop-by-hop headers and those `Connection` names.
pub(super) fn strip_hop_by_hop(h: &mut HeaderMap) {
    let named: Vec<String> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    for name in HOP_BY_HOP.iter().copied().map(String::from).chain(named) {
        h.remove(name.as_str());
    }
}

pub(super) fn is_upgrade(h: &HeaderMap) -> bool {
    h.get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|s| s.trim().eq_ignore_ascii_case("upgrade"))
        && h.contains_key(header::UPGRADE)
}

/// The request's headers as the app gets them.
pub(super) fn upstream_headers<B>(
    api: &Api,
    row: &PreviewRow,
    label: &str,
    req: &Request<B>,
) -> HeaderMap {
    let mut h = req.headers().clone();
    let upgrade = is_upgrade(&h)
        .then(|| h.get(header::UPGRADE).cloned())
        .flatten();
    strip_hop_by_hop(&mut h);
    for name in [
        "forwarded",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-forwarded-port",
        "x-real-ip",
    ] {
        h.remove(name);
    }
    let local = format!("localhost:{}", row.port);
    let ours = preview_origin(api, label, req);
    if let Ok(v) = HeaderValue::from_str(&local) {
        h.insert(header::HOST, v);
    }
    // The preview's own origin is the app's `http://localhost:<port>`; another stays as sent.
    let rewrite = |v: &HeaderValue| -> Option<HeaderValue> {
        let s = v.to_str().ok()?;
        let lower = s.to_ascii_lowercase();
        let rest = lower.strip_prefix(&ours)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        HeaderValue::from_str(&format!("http://{local}{}", &s[ours.len()..])).ok()
    };
    for name in [header::ORIGIN, header::REFERER] {
        if let Some(v) = h.get(&name).and_then(rewrite) {
            h.insert(name, v);
        } else if h
            .get(&name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|s| s.to_ascii_lowercase().contains(&label.to_ascii_lowercase()))
        {
            // Never the label, however it was spelled.
            h.remove(name);
        }
    }
    // Our cookie stays with us.
    let kept: Vec<String> = h
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|pair| {
            !pair.is_empty()
                && pair
                    .split_once('=')
                    .is_none_or(|(name, _)| name != preview::COOKIE)
        })
        .map(String::from)
        .collect();
    h.remove(header::COOKIE);
    if !kept.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&kept.join("; ")) {
            h.insert(header::COOKIE, v);
        }
    }
    let proto = api.scheme();
    let client = req
        .extensions()
        .get::<crate::api::tunnel_ws::Remote>()
        .map(|r| r.0.ip());
    if let Some(ip) = client {
        if let Ok(v) = HeaderValue::from_str(&ip.to_string()) {
            h.insert(HeaderName::from_static("x-forwarded-for"), v);
        }
        let node = match ip {
            std::net::IpAddr::V4(a) => a.to_string(),
            std::net::IpAddr::V6(a) => format!("\"[{a}]\""),
        };
        if let Ok(v) = HeaderValue::from_str(&format!("for={node};proto={proto}")) {
            h.insert(HeaderName::from_static("forwarded"), v);
        }
    }
    h.insert(
        HeaderName::from_static("x-forwarded-proto"),
        HeaderValue::from_static(if proto == "https" { "https" } else { "http" }),
    );
    if let Some(up) = upgrade {
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        h.insert(header::UPGRADE, up);
    }
    h
}

/// The app's response headers as the visitor gets them.
pub(super) fn downstream_headers(h: &mut HeaderMap, upgrade: bool) {
    let up = h.get(header::UPGRADE).cloned();
    strip_hop_by_hop(h);
    let cookies: Vec<HeaderValue> = h.get_all(header::SET_COOKIE).iter().cloned().collect();
    h.remove(header::SET_COOKIE);
    for c in cookies {
        let Ok(s) = c.to_str() else { continue };
        let mut parts = s.split(';').map(str::trim);
        let Some(pair) = parts.next() else { continue };
        if pair
            .split_once('=')
            .is_some_and(|(n, _)| n.trim() == preview::COOKIE)
        {
            continue;
        }
        let kept: Vec<&str> = std::iter::once(pair)
            .chain(parts.filter(|a| !a.get(..6).is_some_and(|p| p.eq_ignore_ascii_case("domain"))))
            .collect();
        if let Ok(v) = HeaderValue::from_str(&kept.join("; ")) {
            h.append(header::SET_COOKIE, v);
        }
    }
    if upgrade {
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        if let Some(up) = up {
            h.insert(header::UPGRADE, up);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_go() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
    }

    #[test]
    fn the_apps_cookies_stay_on_their_origin_and_never_replace_ours() {
        let mut h = HeaderMap::new();
        h.append(
            header::SET_COOKIE,
            HeaderValue::from_static("a=1; Domain=preview.localhost; Path=/; HttpOnly"),
        );
        h.append(
            header::SET_COOKIE,
            HeaderValue::from_static("rakazo_preview=x; Path=/"),
        );
        h.append(header::SET_COOKIE, HeaderValue::from_static("b=2"));
        downstream_headers(&mut h, false);
        let got: Vec<&str> = h
            .get_all(header::SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(got, ["a=1; Path=/; HttpOnly", "b=2"]);
    }
}
