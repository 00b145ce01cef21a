//! The browser side of live screens: the viewer and terminal pages and their static assets.
//!
//! Our own pages and scripts are compiled in (`control-plane/web/*.html|js|css`). noVNC comes
//! from Debian's `novnc` files and xterm.js from the npm install made at setup time: both are
//! read from disk, nothing is fetched from a network at run time. Asset paths are checked
//! component by component (no `..`, no hidden files, known extensions) and the files are
//! bounded in size. Every response here carries the capability headers of [`cap_headers`].

use bytes::Bytes;
use gateway_proto::live::CapabilityKind;
use hyper::header::{self, HeaderValue};
use hyper::Response;
use std::path::{Path, PathBuf};

/// Largest static asset served (noVNC's biggest module is about 100 KiB; xterm.js 300 KiB).
const MAX_ASSET: u64 = 8 << 20;

const VIEWER_HTML: &str = include_str!("../../web/viewer.html");
const TERMINAL_HTML: &str = include_str!("../../web/terminal.html");
const REPORTER_JS: &str = include_str!("../../web/reporter.js");
const VIEWER_JS: &str = include_str!("../../web/viewer.js");
const TERMINAL_JS: &str = include_str!("../../web/terminal.js");
const LIVE_CSS: &str = include_str!("../../web/live.css");

/// Where the pages' third-party files are.
#[derive(Debug, Clone)]
pub struct PagesConfig {
    /// Debian's noVNC (`/usr/share/novnc`, noVNC 1.3.0).
    pub novnc_dir: PathBuf,
    /// The npm install of `control-plane/web` (its `node_modules` holds `@xterm/*`).
    pub web_dir: PathBuf,
}

impl PagesConfig {
    /// The defaults of a checkout: Debian's noVNC and this crate's `web` directory.
    pub fn defaults() -> Self {
        Self {
            novnc_dir: PathBuf::from("/usr/share/novnc"),
            web_dir: PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/web")),
        }
    }
}

/// A page or asset to send, or why not.
pub enum Served {
    Ok {
        content_type: &'static str,
        body: Bytes,
    },
    NotFound,
    /// A file that should be there could not be read (a broken install).
    Failed(std::io::Error),
}

/// The page of a capability.
pub fn page(policy: CapabilityKind) -> Served {
    let html = match policy {
        CapabilityKind::View => VIEWER_HTML.replace("{{POLICY}}", "view"),
        CapabilityKind::Control => VIEWER_HTML.replace("{{POLICY}}", "control"),
        CapabilityKind::Terminal => TERMINAL_HTML.to_string(),
    };
    Served::Ok {
        content_type: "text/html; charset=utf-8",
        body: Bytes::from(html),
    }
}

fn content_type(name: &str) -> Option<&'static str> {
    let ext = name.rsplit_once('.')?.1;
    Some(match ext {
        "js" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "ogg" => "audio/ogg",
        "mp3" => "audio/mpeg",
        _ => return None,
    })
}

/// A relative path of safe components (`[A-Za-z0-9._-]`, not starting with a dot).
fn safe_relative(parts: &[&str]) -> Option<PathBuf> {
    if parts.is_empty() || parts.len() > 8 {
        return None;
    }
    let mut p = PathBuf::new();
    for part in parts {
        let ok = !part.is_empty()
            && part.len() <= 64
            && !part.starts_with('.')
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !ok {
            return None;
        }
        p.push(part);
    }
    Some(p)
}

/// The asset at `/assets/<parts>`.
pub async fn asset(cfg: &PagesConfig, parts: &[&str]) -> Served {
    let embedded = |content_type, body: &'static str| Served::Ok {
        content_type,
        body: Bytes::from_static(body.as_bytes()),
    };
    match parts {
        ["live", "reporter.js"] => embedded("text/javascript; charset=utf-8", REPORTER_JS),
        ["live", "viewer.js"] => embedded("text/javascript; charset=utf-8", VIEWER_JS),
        ["live", "terminal.js"] => embedded("text/javascript; charset=utf-8", TERMINAL_JS),
        ["live", "live.css"] => embedded("text/css; charset=utf-8", LIVE_CSS),
        ["xterm", name] => {
            let rel = match *name {
                "xterm.js" => "node_modules/@xterm/xterm/lib/xterm.js",
                "xterm.css" => "node_modules/@xterm/xterm/css/xterm.css",
                "addon-fit.js" => "node_modules/@xterm/addon-fit/lib/addon-fit.js",
                _ => return Served::NotFound,
            };
            read_file(&cfg.web_dir.join(rel), name).await
        }
        ["novnc", rest @ ..] => match safe_relative(rest) {
            Some(rel) => {
                let name = rest.last().copied().unwrap_or_default();
                read_file(&cfg.novnc_dir.join(rel), name).await
            }
            None => Served::NotFound,
        },
        _ => Served::NotFound,
    }
}

async fn read_file(path: &Path, name: &str) -> Served {
    let Some(content_type) = content_type(name) else {
        return Served::NotFound;
    };
    let meta = match tokio::fs::metadata(path).await {
        Ok(m) if m.is_file() && m.len() <= MAX_ASSET => m,
        Ok(_) => return Served::NotFound,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Served::NotFound,
        Err(e) => return Served::Failed(e),
    };
    match tokio::fs::read(path).await {
        Ok(bytes) if bytes.len() as u64 == meta.len() => Served::Ok {
            content_type,
            body: Bytes::from(bytes),
        },
        Ok(_) => Served::Failed(std::io::Error::other("file changed while read")),
        Err(e) => Served::Failed(e),
    }
}

/// The headers every capability response carries: no caching or transformation by proxies
/// (docs/screens.md#live-views), no Referer (the URL is the credential), no sniffing, and a content
/// security policy that allows this origin only.
pub fn cap_headers<B>(resp: &mut Response<B>) {
    strict_headers(
        resp,
        "no-store, no-transform",
        "default-src 'self'; script-src 'self'; connect-src 'self'; \
         img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; base-uri 'none'; \
         form-action 'none'; frame-ancestors 'self'",
    );
}

/// The headers of a page of ours: `cache` and `csp` as given, no Referer, no sniffing.
pub fn strict_headers<B>(resp: &mut Response<B>, cache: &'static str, csp: &'static str) {
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(csp),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asset_paths_must_be_plain() {
        assert!(safe_relative(&["core", "rfb.js"]).is_some());
        for bad in [
            &["..", "etc", "passwd"][..],
            &[".hidden"],
            &["core", ""],
            &["a/b"],
            &["a\\b"],
            &[],
        ] {
            assert!(safe_relative(bad).is_none(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn pages_and_embedded_assets_are_served() {
        let cfg = PagesConfig::defaults();
        match page(CapabilityKind::Control) {
            Served::Ok { body, .. } => {
                let html = String::from_utf8(body.to_vec()).unwrap();
                assert!(html.contains("data-policy=\"control\""));
                // The reporter loads before noVNC so it can remove VideoDecoder first.
                let reporter = html.find("reporter.js").unwrap();
                assert!(reporter < html.find("viewer.js").unwrap());
            }
            _ => panic!("no viewer page"),
        }
        assert!(matches!(
            asset(&cfg, &["live", "reporter.js"]).await,
            Served::Ok { .. }
        ));
        assert!(matches!(
            asset(&cfg, &["novnc", "..", "x.js"]).await,
            Served::NotFound
        ));
        assert!(matches!(
            asset(&cfg, &["xterm", "other.js"]).await,
            Served::NotFound
        ));
        assert!(matches!(
            asset(&cfg, &["novnc", "vnc.html"]).await,
            Served::NotFound
        ));
    }
}
