//! Preview URLs (docs/previews.md): an unguessable, expiring, revocable origin for a TCP port
//! inside a computer, served by the control plane and relayed through the tunnel.
//!
//! A preview is a row (`previews`, migration 0014) and a random host label, shown once and
//! stored only as its SHA-256: `http://<label>.<preview domain>:<port>/` reaches it. Who may
//! visit is its [`Access`]; the HTTP side (host dispatch, sign-in, waking, the reverse proxy) is
//! `api::preview`. This module holds the configuration and the store.

mod host;
mod store;

pub use host::{label_of, well_formed, LABEL_LEN};
pub use store::{PreviewError, PreviewRow, PreviewStore};

use clap::Args;
use std::time::Duration;

/// Default of `--preview-domain`: Chromium (and curl) resolve every `*.localhost` name to the
/// loopback with no DNS set-up.
pub const DEFAULT_DOMAIN: &str = "preview.localhost";
/// Default lifetime of a preview URL.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60 * 60);
/// Longest lifetime of a preview URL.
pub const MAX_TTL: Duration = Duration::from_secs(30 * 86_400);
/// Most previews a computer has live (unexpired, unrevoked) at once.
pub const MAX_LIVE_PER_COMPUTER: i64 = 32;
/// The cookie a link or session preview's visitor holds on the preview's origin.
pub const COOKIE: &str = "rakazo_preview";
/// How long a visitor's cookie lasts at most (never past the preview's expiry).
pub const COOKIE_TTL: Duration = Duration::from_secs(12 * 3600);
/// How long the console's hand-back to a session preview may take to be followed.
pub const HANDOFF_TTL: Duration = Duration::from_secs(60);
/// Path prefix the proxy keeps for itself on every preview origin: never forwarded.
pub const RESERVED_PREFIX: &str = "/__rakazo/";

/// Who may visit a preview.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Whoever followed its URL: the URL carries a sealed token that the first visit exchanges
    /// for a cookie on the preview's origin; the origin alone lets nobody in.
    Link,
    /// As `Link`, and the visitor must also be signed in to the console with a token that sees
    /// the computer's workspace.
    Session,
    /// Anyone who knows its origin, until it expires or is revoked.
    Public,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Link => "link",
            Access::Session => "session",
            Access::Public => "public",
        }
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "link" => Ok(Access::Link),
            "session" => Ok(Access::Session),
            "public" => Ok(Access::Public),
            other => Err(format!(
                "access must be link, session or public, got {:?}",
                other.chars().take(32).collect::<String>()
            )),
        }
    }
}

/// `rakazo serve` flags of preview URLs.
#[derive(Debug, Clone, Args)]
pub struct PreviewArgs {
    /// The domain preview origins are subdomains of: a preview is served at
    /// `<label>.<domain>`, on the API's port. Point a wildcard DNS name (and certificate) at the
    /// control plane for real use; `preview.localhost` needs neither on the same machine.
    #[arg(long, env = "RAKAZO_PREVIEW_DOMAIN", default_value = DEFAULT_DOMAIN)]
    pub preview_domain: String,
    /// Where a session preview sends a visitor to sign in: the console's origin
    /// (`https://rakazo.example.com`). Default: the preview domain without its first label, on
    /// the port of the visit (`http://localhost:8080` for `preview.localhost`).
    #[arg(long, env = "RAKAZO_PREVIEW_CONSOLE_URL")]
    pub preview_console_url: Option<String>,
    /// Most connections one preview serves at once (websockets included); more get 429.
    #[arg(long, env = "RAKAZO_PREVIEW_MAX_CONNECTIONS", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub preview_max_connections: u32,
    /// Largest request body a preview forwards, in bytes; a larger one gets 413.
    #[arg(long, env = "RAKAZO_PREVIEW_MAX_BODY_BYTES", default_value_t = 4 << 30)]
    pub preview_max_body_bytes: u64,
    /// Seconds the app inside has to answer a request's head (its body may then stream for as
    /// long as it likes); then 504.
    #[arg(long, env = "RAKAZO_PREVIEW_RESPONSE_TIMEOUT_SECS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub preview_response_timeout_secs: u64,
    /// Seconds a visit to a stopped computer waits for it to start (0: a visit never starts
    /// one; it gets 503). A browser gets a page that retries meanwhile.
    #[arg(long, env = "RAKAZO_PREVIEW_WAKE_TIMEOUT_SECS", default_value_t = 120,
          value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub preview_wake_timeout_secs: u64,
    /// Whether visits count as use of the computer for idle suspension.
    #[arg(long, env = "RAKAZO_PREVIEW_VISITS_ARE_USE", default_value_t = true,
          action = clap::ArgAction::Set)]
    pub preview_visits_are_use: bool,
}

/// The previews' settings, checked.
#[derive(Debug, Clone)]
pub struct PreviewConfig {
    /// Lowercase, without a leading dot.
    pub domain: String,
    pub console_url: Option<String>,
    pub max_connections: u32,
    pub max_body_bytes: u64,
    pub response_timeout: Duration,
    /// `None`: visits never start a computer.
    pub wake_timeout: Option<Duration>,
    pub visits_are_use: bool,
}

impl Default for PreviewConfig {
    fn default() -> Self {
        Self {
            domain: DEFAULT_DOMAIN.into(),
            console_url: None,
            max_connections: 64,
            max_body_bytes: 4 << 30,
            response_timeout: Duration::from_secs(300),
            wake_timeout: Some(Duration::from_secs(120)),
            visits_are_use: true,
        }
    }
}

impl PreviewArgs {
    pub fn resolve(&self) -> anyhow::Result<PreviewConfig> {
        let domain = self.preview_domain.trim_matches('.').to_ascii_lowercase();
        let valid_label = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if domain.len() > 200
            || domain.split('.').count() < 2
            || !domain.split('.').all(valid_label)
        {
            anyhow::bail!(
                "--preview-domain must be a DNS name of at least two labels (preview.localhost, \
                 preview.example.com), got {:?}",
                self.preview_domain
            );
        }
        if let Some(url) = &self.preview_console_url {
            let ok = (url.starts_with("http://") || url.starts_with("https://"))
                && url.len() <= 512
                && url.parse::<hyper::Uri>().is_ok_and(|u| {
                    u.host().is_some() && u.path_and_query().is_none_or(|p| p.as_str() == "/")
                });
            if !ok {
                anyhow::bail!(
                    "--preview-console-url must be an origin (http[s]://host[:port]), got {url:?}"
                );
            }
        }
        Ok(PreviewConfig {
            domain,
            console_url: self
                .preview_console_url
                .as_ref()
                .map(|u| u.trim_end_matches('/').to_string()),
            max_connections: self.preview_max_connections,
            max_body_bytes: self.preview_max_body_bytes,
            response_timeout: Duration::from_secs(self.preview_response_timeout_secs),
            wake_timeout: (self.preview_wake_timeout_secs > 0)
                .then(|| Duration::from_secs(self.preview_wake_timeout_secs)),
            visits_are_use: self.preview_visits_are_use,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hosts_one_label_under_the_domain_are_previews() {
        let d = "preview.localhost";
        assert_eq!(label_of("abc.preview.localhost:8080", d), Some("abc"));
        assert_eq!(label_of("ABC.Preview.Localhost", d), Some("ABC"));
        assert_eq!(label_of("abc.preview.localhost.", d), Some("abc"));
        assert_eq!(label_of("localhost:8080", d), None);
        assert_eq!(label_of("preview.localhost", d), None);
        assert_eq!(label_of("a.b.preview.localhost", d), None);
        assert_eq!(label_of("abc.preview.localhost.evil.com", d), None);
        assert_eq!(label_of("127.0.0.1:8080", d), None);
        assert!(
            well_formed(&"a".repeat(32)) && !well_formed("abc") && !well_formed(&"g".repeat(32))
        );
    }

    #[test]
    fn the_domain_and_console_url_are_checked() {
        let args = |domain: &str, console: Option<&str>| PreviewArgs {
            preview_domain: domain.into(),
            preview_console_url: console.map(String::from),
            preview_max_connections: 64,
            preview_max_body_bytes: 1,
            preview_response_timeout_secs: 1,
            preview_wake_timeout_secs: 0,
            preview_visits_are_use: true,
        };
        assert_eq!(
            args(".Preview.Localhost.", None).resolve().unwrap().domain,
            "preview.localhost"
        );
        assert!(args("localhost", None).resolve().is_err());
        assert!(args("pre view.x", None).resolve().is_err());
        assert!(
            args("preview.localhost", Some("https://rakazo.example.com"))
                .resolve()
                .is_ok()
        );
        assert!(
            args("preview.localhost", Some("https://x.example.com/console"))
                .resolve()
                .is_err()
        );
        assert!(args("preview.localhost", Some("ftp://x"))
            .resolve()
            .is_err());
        assert!(args("preview.localhost", None)
            .resolve()
            .unwrap()
            .wake_timeout
            .is_none());
    }
}
