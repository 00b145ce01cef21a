//! The guest's configuration, read from the environment once, in `main`.
//!
//! The enrollment token comes from `RAKAZO_ENROLL_TOKEN` or from a file named by
//! `RAKAZO_ENROLL_TOKEN_FILE` that only its owner may read; it never comes from argv. Library code
//! receives the parsed [`Config`] and never reads the environment itself.
//!
//! `RAKAZO_RUN_AS` (a passwd name, or `uid:gid`) is the user a root guest becomes once this
//! configuration is read (`privilege`); it is never root. After reading, `main` calls
//! [`Env::settle`], which removes every `RAKAZO_*` variable from the guest's own environment.

use crate::gateway::terminal::user::WorkspaceUser;
use crate::privilege::RunAs;
pub use crate::screens::BrowserProvider;
use gateway_proto::Secret;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

/// Where the configuration comes from: the process environment in `main`, a map in tests.
pub trait ConfigSource {
    fn get(&self, key: &str) -> Option<String>;
}

impl ConfigSource for HashMap<String, String> {
    fn get(&self, key: &str) -> Option<String> {
        HashMap::get(self, key).cloned()
    }
}

/// The process environment.
pub struct Env;

impl Env {
    /// The log filter (`RAKAZO_LOG`), read before the rest of the configuration.
    pub fn log_filter() -> Option<String> {
        Env.get("RAKAZO_LOG")
    }

    /// Whether logs are JSON lines (`RAKAZO_LOG_FORMAT=json`, handed over by the control plane
    /// when it logs JSON itself); anything else is text.
    pub fn log_json() -> bool {
        Env.get("RAKAZO_LOG_FORMAT").is_some_and(|f| f == "json")
    }
}

impl Env {
    /// Removes every `RAKAZO_*` variable from the guest's own environment, and, for a guest
    /// that became `run_as`, sets `HOME` (the computer's home), `USER` and `LOGNAME` for what it
    /// starts. Called once by `main` right after the configuration is read, while the guest still
    /// has a single thread (the environment is not safe to change once others may read it).
    ///
    /// The kernel's copy of the initial environment (`/proc/<pid>/environ`) is not rewritten by
    /// this; it is readable only by root once the guest is non-dumpable (`privilege`).
    pub fn settle(run_as: Option<&RunAs>, home: &std::path::Path) {
        // The secrets file's path outlives the variable (`secret_env`).
        crate::secret_env::remember(std::env::var_os(crate::secret_env::SECRETS_FILE_VAR));
        let guest_vars: Vec<std::ffi::OsString> = std::env::vars_os()
            .map(|(k, _)| k)
            .filter(|k| k.as_encoded_bytes().starts_with(b"RAKAZO_"))
            .collect();
        for key in guest_vars {
            std::env::remove_var(key);
        }
        if let Some(user) = run_as {
            // The one mutation of the environment: single-threaded start-up, so no reader races
            // it, and commands inherit these as a login would set them.
            #[allow(clippy::disallowed_methods)]
            {
                std::env::set_var("HOME", home);
                std::env::set_var("USER", user.user_name());
                std::env::set_var("LOGNAME", user.user_name());
            }
        }
    }
}

impl ConfigSource for Env {
    fn get(&self, key: &str) -> Option<String> {
        #[allow(clippy::disallowed_methods)]
        // config.rs is the one place that reads the environment
        std::env::var(key).ok()
    }
}

/// Why the configuration is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0} is not set")]
    Missing(&'static str),
    #[error("{key} is invalid: {reason}")]
    Invalid { key: &'static str, reason: String },
}

/// Parsed guest configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The control plane's tunnel address (UDP).
    pub control_addr: SocketAddr,
    /// The tunnel's TCP carrier (`RAKAZO_CONTROL_TCP_ADDR`, default `control_addr` over TCP),
    /// dialled when UDP gets no answer.
    pub control_tcp_addr: SocketAddr,
    /// The tunnel's websocket carrier on the control plane's HTTP API (`RAKAZO_CONTROL_WS_URL`,
    /// with `RAKAZO_CONTROL_API_CERT_SHA256` for https), dialled when UDP and TCP get no answer.
    pub control_ws: Option<WsTarget>,
    /// The other control-plane replicas' tunnel addresses (`RAKAZO_CONTROL_ADDRS`,
    /// comma-separated `ip:port`; QUIC on UDP and the TCP carrier on the same port), tried in
    /// turn after the primary. Never the primary itself, never twice; at most
    /// [`MAX_OTHER_REPLICAS`]. They present the same certificate (`cert_sha256`).
    pub other_replicas: Vec<SocketAddr>,
    /// SHA-256 of the control plane's certificate DER; the only certificate accepted.
    pub cert_sha256: [u8; 32],
    pub computer_id: String,
    pub token: Secret,
    /// `RAKAZO_ENROLL_TOKEN_FILE`, when the token came from it: `main` removes it once read, so
    /// nothing inside the computer finds the token on disk afterwards.
    pub token_file: Option<PathBuf>,
    /// The computer's home directory.
    pub home: PathBuf,
    /// A private (0700) directory for X cookies and desktop logs; never inside the home.
    pub runtime_dir: PathBuf,
    /// `SANDBOX_TEAM_SCREEN_LIMIT`: `None` is no cap.
    pub screen_limit: Option<u32>,
    /// The Chromium executable (`RAKAZO_CHROMIUM`, default `/usr/bin/chromium`).
    pub chromium: PathBuf,
    /// Who terminals run as when the guest is root (`RAKAZO_WORKSPACE_UID`, and
    /// `RAKAZO_WORKSPACE_GID`, default the uid's passwd group, else the uid). `None`: the
    /// home's owner, else 1000:1000 (see `gateway::terminal::user`).
    pub workspace_user: Option<WorkspaceUser>,
    /// `RAKAZO_RUN_AS`: the user a root guest drops to for good at start (`privilege`); a
    /// non-root guest must already be it. Never root.
    pub run_as: Option<RunAs>,
    /// `RAKAZO_TERMINAL_GRACE_SECS` (0 to 3600, default 60): how long a terminal whose
    /// connection dropped keeps its shell for the page to reattach (docs/screens.md#reconnecting);
    /// 0 ends it with its connection.
    pub terminal_grace: Duration,
    /// `RAKAZO_PROCESS_LOG_BYTES` (4 KiB to 64 MiB, default 1 MiB): output kept per detached
    /// process (`procs`).
    pub process_log_bytes: usize,
    /// `RAKAZO_BROWSER_SCALE` (0.5 to 4): the bots' Chrome's device scale factor
    /// (`--force-device-scale-factor`); unset: the display's own (1 on Xvnc).
    pub browser_scale: Option<f64>,
    /// `RAKAZO_BROWSER_PROVIDER`, else `BROWSER_PROVIDER`: what serves the page tools
    /// (docs/screens.md#browser-providers); default `chrome`.
    pub browser_provider: BrowserProvider,
}

/// Where the tunnel's websocket carrier is: `http(s)://host[:port]/path` (or `ws(s)://`).
///
/// https needs the API certificate's pin (`RAKAZO_CONTROL_API_CERT_SHA256`, the API's
/// self-signed certificate): the guest carries no CA roots, so nothing else could verify it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WsTarget {
    /// The websocket request's URL (`ws://` or `wss://`).
    pub url: String,
    /// `host` or `host:port` as dialled (brackets kept for IPv6).
    pub host: String,
    pub port: u16,
    /// TLS with this pinned certificate (https); `None`: plain http.
    pub tls_sha256: Option<[u8; 32]>,
}

const WS_URL: &str = "RAKAZO_CONTROL_WS_URL";
const REPLICAS: &str = "RAKAZO_CONTROL_ADDRS";
/// The most other replicas `RAKAZO_CONTROL_ADDRS` may name.
pub const MAX_OTHER_REPLICAS: usize = 16;

/// `RAKAZO_CONTROL_ADDRS`: comma-separated `ip:port`, whitespace around entries allowed, no
/// empty entry, at most [`MAX_OTHER_REPLICAS`]; the primary and repeats are dropped.
fn other_replicas(
    src: &dyn ConfigSource,
    primary: SocketAddr,
) -> Result<Vec<SocketAddr>, ConfigError> {
    let Some(list) = src.get(REPLICAS) else {
        return Ok(Vec::new());
    };
    let entries: Vec<&str> = list.split(',').map(str::trim).collect();
    if entries.len() > MAX_OTHER_REPLICAS {
        return Err(invalid(
            REPLICAS,
            format!("{} entries, at most {MAX_OTHER_REPLICAS}", entries.len()),
        ));
    }
    let mut replicas = Vec::new();
    for (i, entry) in entries.into_iter().enumerate() {
        if entry.is_empty() {
            return Err(invalid(
                REPLICAS,
                format!("entry {} is empty (expected ip:port,ip:port,...)", i + 1),
            ));
        }
        let addr: SocketAddr = entry
            .parse()
            .map_err(|_| invalid(REPLICAS, format!("{entry:?} is not ip:port")))?;
        if addr != primary && !replicas.contains(&addr) {
            replicas.push(addr);
        }
    }
    Ok(replicas)
}
const API_PIN: &str = "RAKAZO_CONTROL_API_CERT_SHA256";

fn parse_sha256(key: &'static str, v: &str) -> Result<[u8; 32], ConfigError> {
    hex::decode(v.trim())
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or_else(|| invalid(key, "expected 64 hex characters"))
}

fn ws_target(src: &dyn ConfigSource) -> Result<Option<WsTarget>, ConfigError> {
    let Some(url) = src.get(WS_URL) else {
        return Ok(None);
    };
    let url = url.trim();
    let (tls, rest) = if let Some(r) = url.strip_prefix("https://").or(url.strip_prefix("wss://")) {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://").or(url.strip_prefix("ws://")) {
        (false, r)
    } else {
        return Err(invalid(
            WS_URL,
            "expected an http://, https://, ws:// or wss:// URL",
        ));
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let (host, port) = match authority.rfind(':') {
        Some(i) if !authority[i..].contains(']') => (
            &authority[..i],
            authority[i + 1..]
                .parse::<u16>()
                .map_err(|_| invalid(WS_URL, "bad port"))?,
        ),
        _ => (authority, if tls { 443 } else { 80 }),
    };
    if host.is_empty() {
        return Err(invalid(WS_URL, "no host"));
    }
    let tls_sha256 = match (tls, src.get(API_PIN)) {
        (true, Some(pin)) => Some(parse_sha256(API_PIN, &pin)?),
        (true, None) => {
            return Err(invalid(
                WS_URL,
                format!("an https URL needs {API_PIN} (the guest has no CA roots)"),
            ))
        }
        (false, _) => None,
    };
    let scheme = if tls { "wss" } else { "ws" };
    Ok(Some(WsTarget {
        url: format!("{scheme}://{authority}{path}"),
        host: host.to_string(),
        port,
        tls_sha256,
    }))
}

fn invalid(key: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        reason: reason.into(),
    }
}

impl Config {
    pub fn from_source(src: &dyn ConfigSource) -> Result<Self, ConfigError> {
        let need = |key: &'static str| src.get(key).ok_or(ConfigError::Missing(key));
        let control_addr: SocketAddr = need("RAKAZO_CONTROL_ADDR")?
            .parse()
            .map_err(|_| invalid("RAKAZO_CONTROL_ADDR", "expected ip:port"))?;
        let control_tcp_addr = match src.get("RAKAZO_CONTROL_TCP_ADDR") {
            Some(a) => a
                .parse()
                .map_err(|_| invalid("RAKAZO_CONTROL_TCP_ADDR", "expected ip:port"))?,
            None => control_addr,
        };
        let control_ws = ws_target(src)?;
        let other_replicas = other_replicas(src, control_addr)?;
        let fp = need("RAKAZO_CONTROL_CERT_SHA256")?;
        let cert_sha256 = parse_sha256("RAKAZO_CONTROL_CERT_SHA256", &fp)?;
        let computer_id = need("RAKAZO_COMPUTER_ID")?;
        if computer_id.is_empty() || computer_id.len() > 128 {
            return Err(invalid("RAKAZO_COMPUTER_ID", "expected 1..=128 characters"));
        }
        let (token, token_file) = match (
            src.get("RAKAZO_ENROLL_TOKEN"),
            src.get("RAKAZO_ENROLL_TOKEN_FILE"),
        ) {
            (Some(t), _) => (t, None),
            (None, Some(path)) => (read_token_file(&path)?, Some(PathBuf::from(path))),
            (None, None) => return Err(ConfigError::Missing("RAKAZO_ENROLL_TOKEN_FILE")),
        };
        let token = token.trim().to_string();
        if token.is_empty() || token.len() > 512 {
            return Err(invalid(
                "RAKAZO_ENROLL_TOKEN",
                "expected 1..=512 characters",
            ));
        }
        let home = PathBuf::from(need("RAKAZO_HOME")?);
        if !home.is_dir() {
            return Err(invalid(
                "RAKAZO_HOME",
                format!("{} is not a directory", home.display()),
            ));
        }
        let screen_limit =
            crate::screens::slots::parse_limit(src.get("SANDBOX_TEAM_SCREEN_LIMIT").as_deref())
                .map_err(|reason| invalid("SANDBOX_TEAM_SCREEN_LIMIT", reason))?;
        let runtime_dir = match src.get("RAKAZO_RUNTIME_DIR") {
            Some(d) => PathBuf::from(d),
            None => std::env::temp_dir().join(format!("rakazo-guest-{computer_id}")),
        };
        let chromium = PathBuf::from(
            src.get("RAKAZO_CHROMIUM")
                .unwrap_or_else(|| "/usr/bin/chromium".into()),
        );
        let workspace_user = workspace_user(src)?;
        let terminal_grace = terminal_grace(src)?;
        let process_log_bytes = process_log_bytes(src)?;
        let browser_scale = browser_scale(src)?;
        let browser_provider = browser_provider(src)?;
        let run_as = src
            .get(RUN_AS)
            .map(|v| parse_run_as(&v).map_err(|reason| invalid(RUN_AS, reason)))
            .transpose()?;
        if let (Some(r), Some(w)) = (&run_as, &workspace_user) {
            if r.uid != w.uid {
                return Err(invalid(
                    "RAKAZO_WORKSPACE_UID",
                    format!(
                        "{} differs from {RUN_AS} (uid {}): a dropped guest runs everything as itself",
                        w.uid, r.uid
                    ),
                ));
            }
        }
        Ok(Self {
            control_addr,
            control_tcp_addr,
            control_ws,
            other_replicas,
            cert_sha256,
            computer_id,
            token: Secret::new(token),
            token_file,
            home,
            runtime_dir,
            screen_limit,
            terminal_grace,
            process_log_bytes,
            browser_scale,
            browser_provider,
            chromium,
            workspace_user,
            run_as,
        })
    }
}

const RUN_AS: &str = "RAKAZO_RUN_AS";

/// `RAKAZO_RUN_AS`: a user name from the passwd database (its uid, primary gid and groups), or
/// `uid:gid` (groups: just the gid). Root (uid or gid 0) is refused.
pub fn parse_run_as(value: &str) -> Result<RunAs, String> {
    let value = value.trim();
    let run_as = if let Some((uid, gid)) = value.split_once(':') {
        let id = |what: &str, v: &str| -> Result<u32, String> {
            v.parse::<u32>()
                .ok()
                .filter(|n| *n != u32::MAX)
                .ok_or_else(|| {
                    format!("{what} {v:?} is not a numeric id (expected a user name or uid:gid)")
                })
        };
        let (uid, gid) = (id("uid", uid)?, id("gid", gid)?);
        let name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            .ok()
            .flatten()
            .map(|u| u.name);
        RunAs {
            uid,
            gid,
            name,
            groups: vec![gid],
        }
    } else {
        let valid_name = !value.is_empty()
            && value.len() <= 32
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid_name {
            return Err(format!("{value:?} is neither a user name nor uid:gid"));
        }
        let user = nix::unistd::User::from_name(value)
            .map_err(|e| format!("cannot look up user {value:?}: {e}"))?
            .ok_or_else(|| format!("no user {value:?} in the passwd database"))?;
        let gid = user.gid;
        let mut groups: Vec<u32> = std::ffi::CString::new(value)
            .ok()
            .and_then(|c| nix::unistd::getgrouplist(&c, gid).ok())
            .map(|g| g.into_iter().map(nix::unistd::Gid::as_raw).collect())
            .unwrap_or_default();
        if !groups.contains(&gid.as_raw()) {
            groups.insert(0, gid.as_raw());
        }
        RunAs {
            uid: user.uid.as_raw(),
            gid: gid.as_raw(),
            name: Some(user.name),
            groups,
        }
    };
    if run_as.uid == 0 {
        return Err(format!(
            "{value:?} is root (uid 0); the guest only ever drops to an unprivileged user"
        ));
    }
    if run_as.gid == 0 || run_as.groups.contains(&0) {
        return Err(format!(
            "{value:?} has the root group (gid 0); the guest only ever drops to an unprivileged user"
        ));
    }
    Ok(run_as)
}

/// `RAKAZO_WORKSPACE_UID` / `RAKAZO_WORKSPACE_GID`: never root.
fn workspace_user(src: &dyn ConfigSource) -> Result<Option<WorkspaceUser>, ConfigError> {
    const UID: &str = "RAKAZO_WORKSPACE_UID";
    const GID: &str = "RAKAZO_WORKSPACE_GID";
    let parse = |key: &'static str, v: String| -> Result<u32, ConfigError> {
        match v.trim().parse::<u32>() {
            Ok(0) => Err(invalid(key, "terminals never run as root (0)")),
            Ok(n) if n != u32::MAX => Ok(n),
            _ => Err(invalid(key, "expected a numeric id")),
        }
    };
    let uid = src.get(UID).map(|v| parse(UID, v)).transpose()?;
    let gid = src.get(GID).map(|v| parse(GID, v)).transpose()?;
    match (uid, gid) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(invalid(GID, format!("needs {UID}"))),
        (Some(uid), gid) => Ok(Some(WorkspaceUser {
            uid,
            gid: gid
                .or_else(|| crate::gateway::terminal::user::primary_gid(uid))
                .unwrap_or(uid),
        })),
    }
}

/// Creates the runtime dir 0700 if missing; refuses one that others can enter.
pub fn ensure_private_dir(dir: &std::path::Path) -> Result<(), ConfigError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    const KEY: &str = "RAKAZO_RUNTIME_DIR";
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| invalid(KEY, format!("{}: {e}", dir.display())))?;
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| invalid(KEY, format!("{}: {e}", dir.display())))?;
    if !meta.is_dir()
        || meta.permissions().mode() & 0o077 != 0
        || meta.uid() != nix::unistd::geteuid().as_raw()
    {
        return Err(invalid(
            KEY,
            format!(
                "{} must be a directory of ours with mode 0700",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// `RAKAZO_TERMINAL_GRACE_SECS`: whole seconds, at most an hour.
fn terminal_grace(src: &dyn ConfigSource) -> Result<Duration, ConfigError> {
    const KEY: &str = "RAKAZO_TERMINAL_GRACE_SECS";
    let Some(v) = src.get(KEY) else {
        return Ok(crate::gateway::TERMINAL_GRACE);
    };
    match v.trim().parse::<u64>() {
        Ok(secs) if secs <= 3600 => Ok(Duration::from_secs(secs)),
        _ => Err(invalid(
            KEY,
            format!("expected whole seconds from 0 to 3600, got {v:?}"),
        )),
    }
}

/// `RAKAZO_BROWSER_SCALE`: a device scale factor from 0.5 to 4.
fn browser_scale(src: &dyn ConfigSource) -> Result<Option<f64>, ConfigError> {
    const KEY: &str = "RAKAZO_BROWSER_SCALE";
    let Some(v) = src.get(KEY) else {
        return Ok(None);
    };
    match v.trim().parse::<f64>() {
        Ok(f) if (0.5..=4.0).contains(&f) => Ok(Some(f)),
        _ => Err(invalid(
            KEY,
            format!("expected a scale factor from 0.5 to 4, got {v:?}"),
        )),
    }
}

/// `RAKAZO_BROWSER_PROVIDER` (else `BROWSER_PROVIDER`): `chrome`, `emulator` or `fake`.
fn browser_provider(src: &dyn ConfigSource) -> Result<BrowserProvider, ConfigError> {
    for key in ["RAKAZO_BROWSER_PROVIDER", "BROWSER_PROVIDER"] {
        if let Some(v) = src.get(key) {
            return BrowserProvider::parse(&v).map_err(|reason| invalid(key, reason));
        }
    }
    Ok(BrowserProvider::Chrome)
}

fn process_log_bytes(src: &dyn ConfigSource) -> Result<usize, ConfigError> {
    const KEY: &str = "RAKAZO_PROCESS_LOG_BYTES";
    let Some(v) = src.get(KEY) else {
        return Ok(crate::procs::DEFAULT_LOG_BYTES);
    };
    match v.trim().parse::<usize>() {
        Ok(n) if (4096..=64 << 20).contains(&n) => Ok(n),
        _ => Err(invalid(
            KEY,
            format!("expected bytes from 4096 to 67108864, got {v:?}"),
        )),
    }
}

fn read_token_file(path: &str) -> Result<String, ConfigError> {
    const KEY: &str = "RAKAZO_ENROLL_TOKEN_FILE";
    let meta = std::fs::metadata(path).map_err(|e| invalid(KEY, format!("{path}: {e}")))?;
    if meta.mode() & 0o077 != 0 {
        return Err(invalid(
            KEY,
            format!("{path} is readable by others; it must be mode 0600"),
        ));
    }
    std::fs::read_to_string(path).map_err(|e| invalid(KEY, format!("{path}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn base(home: &std::path::Path) -> HashMap<String, String> {
        HashMap::from([
            ("RAKAZO_CONTROL_ADDR".into(), "127.0.0.1:7443".into()),
            ("RAKAZO_CONTROL_CERT_SHA256".into(), "ab".repeat(32)),
            ("RAKAZO_COMPUTER_ID".into(), "c-1".into()),
            ("RAKAZO_HOME".into(), home.display().to_string()),
        ])
    }

    #[test]
    fn token_file_must_be_private() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "secret\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut env = base(dir.path());
        env.insert(
            "RAKAZO_ENROLL_TOKEN_FILE".into(),
            file.display().to_string(),
        );
        let err = Config::from_source(&env).unwrap_err().to_string();
        assert!(err.contains("mode 0600"), "{err}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let cfg = Config::from_source(&env).unwrap();
        assert_eq!(cfg.token.expose(), "secret");
        assert!(!format!("{cfg:?}").contains("secret"));
    }

    #[test]
    fn the_workspace_user_is_never_root() {
        let dir = tempfile::tempdir().unwrap();
        let mut env = base(dir.path());
        env.insert("RAKAZO_ENROLL_TOKEN".into(), "t".into());
        assert_eq!(Config::from_source(&env).unwrap().workspace_user, None);
        env.insert("RAKAZO_WORKSPACE_UID".into(), "4242".into());
        let user = Config::from_source(&env).unwrap().workspace_user.unwrap();
        assert_eq!((user.uid, user.gid), (4242, 4242));
        env.insert("RAKAZO_WORKSPACE_GID".into(), "100".into());
        let user = Config::from_source(&env).unwrap().workspace_user.unwrap();
        assert_eq!((user.uid, user.gid), (4242, 100));
        for bad in ["0", "-1", "x", ""] {
            env.insert("RAKAZO_WORKSPACE_UID".into(), bad.into());
            let err = Config::from_source(&env).unwrap_err().to_string();
            assert!(err.contains("RAKAZO_WORKSPACE_UID"), "{err}");
        }
        env.remove("RAKAZO_WORKSPACE_UID");
        let err = Config::from_source(&env).unwrap_err().to_string();
        assert!(err.contains("needs RAKAZO_WORKSPACE_UID"), "{err}");
    }

    #[test]
    fn the_browser_provider_is_named_or_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut env = base(dir.path());
        env.insert("RAKAZO_ENROLL_TOKEN".into(), "t".into());
        let provider =
            |env: &HashMap<String, String>| Config::from_source(env).map(|c| c.browser_provider);
        assert_eq!(provider(&env).unwrap(), BrowserProvider::Chrome);
        env.insert("BROWSER_PROVIDER".into(), "fake".into());
        assert_eq!(provider(&env).unwrap(), BrowserProvider::Fake);
        env.insert("RAKAZO_BROWSER_PROVIDER".into(), "emulator".into());
        assert_eq!(provider(&env).unwrap(), BrowserProvider::Emulator);
        env.insert("RAKAZO_BROWSER_PROVIDER".into(), "firefox".into());
        let err = provider(&env).unwrap_err().to_string();
        assert!(
            err.contains("RAKAZO_BROWSER_PROVIDER") && err.contains("chrome, emulator or fake"),
            "{err}"
        );
    }

    #[test]
    fn the_terminal_grace_is_whole_seconds_up_to_an_hour() {
        let dir = tempfile::tempdir().unwrap();
        let mut env = base(dir.path());
        env.insert("RAKAZO_ENROLL_TOKEN".into(), "t".into());
        let grace =
            |env: &HashMap<String, String>| Config::from_source(env).map(|c| c.terminal_grace);
        assert_eq!(grace(&env).unwrap(), Duration::from_secs(60));
        for (v, secs) in [("0", 0), ("5", 5), ("3600", 3600)] {
            env.insert("RAKAZO_TERMINAL_GRACE_SECS".into(), v.into());
            assert_eq!(grace(&env).unwrap(), Duration::from_secs(secs));
        }
        for bad in ["3601", "-1", "1.5", "x", ""] {
            env.insert("RAKAZO_TERMINAL_GRACE_SECS".into(), bad.into());
            let err = grace(&env).unwrap_err().to_string();
            assert!(err.contains("RAKAZO_TERMINAL_GRACE_SECS"), "{err}");
        }
    }

    #[test]
    fn run_as_parses_names_and_ids_and_never_root() {
        let ok = parse_run_as("4242:4343").unwrap();
        assert_eq!(
            (ok.uid, ok.gid, ok.groups.clone()),
            (4242, 4343, vec![4343])
        );
        // `nobody` is in every Debian passwd database.
        let nobody = parse_run_as("nobody").unwrap();
        assert_eq!(nobody.name.as_deref(), Some("nobody"));
        assert_eq!(nobody.uid, 65534);
        assert!(nobody.groups.contains(&nobody.gid));
        for root in ["root", "0:0", "0:100", "4242:0", " 0:1 "] {
            let err = parse_run_as(root).unwrap_err();
            assert!(err.contains("root"), "{root}: {err}");
        }
        for bad in ["", "x:1", "1:", ":1", "no-such-user-rkz", "a b", "1:2:3"] {
            assert!(parse_run_as(bad).is_err(), "{bad:?}");
        }

        let dir = tempfile::tempdir().unwrap();
        let mut env = base(dir.path());
        env.insert("RAKAZO_ENROLL_TOKEN".into(), "t".into());
        assert_eq!(Config::from_source(&env).unwrap().run_as, None);
        env.insert("RAKAZO_RUN_AS".into(), "root".into());
        let err = Config::from_source(&env).unwrap_err().to_string();
        assert!(
            err.starts_with("RAKAZO_RUN_AS is invalid") && err.contains("uid 0"),
            "{err}"
        );
        env.insert("RAKAZO_RUN_AS".into(), "4242:4242".into());
        assert_eq!(Config::from_source(&env).unwrap().run_as.unwrap().uid, 4242);
        env.insert("RAKAZO_WORKSPACE_UID".into(), "5000".into());
        let err = Config::from_source(&env).unwrap_err().to_string();
        assert!(err.contains("differs from RAKAZO_RUN_AS"), "{err}");
    }

    #[test]
    fn missing_and_bad_values_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut env = base(dir.path());
        assert!(matches!(
            Config::from_source(&env),
            Err(ConfigError::Missing(_))
        ));
        env.insert("RAKAZO_ENROLL_TOKEN".into(), "t".into());
        env.insert("RAKAZO_CONTROL_CERT_SHA256".into(), "xyz".into());
        let err = Config::from_source(&env).unwrap_err().to_string();
        assert!(err.contains("RAKAZO_CONTROL_CERT_SHA256"), "{err}");
    }

    #[test]
    fn the_tcp_address_defaults_to_the_quic_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut env = base(dir.path());
        env.insert("RAKAZO_ENROLL_TOKEN".into(), "t".into());
        let cfg = Config::from_source(&env).unwrap();
        assert_eq!(cfg.control_tcp_addr, cfg.control_addr);
        env.insert("RAKAZO_CONTROL_TCP_ADDR".into(), "10.0.0.1:443".into());
        let cfg = Config::from_source(&env).unwrap();
        assert_eq!(cfg.control_tcp_addr, "10.0.0.1:443".parse().unwrap());
        env.insert("RAKAZO_CONTROL_TCP_ADDR".into(), "nope".into());
        let err = Config::from_source(&env).unwrap_err().to_string();
        assert!(err.contains("RAKAZO_CONTROL_TCP_ADDR"), "{err}");
    }

    #[test]
    fn other_replicas_are_parsed_without_the_primary_or_repeats() {
        let dir = tempfile::tempdir().unwrap();
        let mut env = base(dir.path());
        env.insert("RAKAZO_ENROLL_TOKEN".into(), "t".into());
        assert!(Config::from_source(&env).unwrap().other_replicas.is_empty());
        let addrs = |v: &str| {
            let mut env = env.clone();
            env.insert(REPLICAS.into(), v.into());
            Config::from_source(&env).map(|c| c.other_replicas)
        };
        let want: Vec<SocketAddr> = vec![
            "10.0.0.2:7443".parse().unwrap(),
            "[2001:db8::3]:443".parse().unwrap(),
        ];
        assert_eq!(addrs(" 10.0.0.2:7443 ,[2001:db8::3]:443\t").unwrap(), want);
        // The primary (127.0.0.1:7443) and a repeat are dropped; the order is kept.
        assert_eq!(
            addrs("127.0.0.1:7443,10.0.0.2:7443,[2001:db8::3]:443,10.0.0.2:7443").unwrap(),
            want
        );
        assert_eq!(addrs("127.0.0.1:7443").unwrap(), Vec::<SocketAddr>::new());
        let max = (1..=16)
            .map(|i| format!("10.0.1.{i}:7443"))
            .collect::<Vec<_>>();
        assert_eq!(addrs(&max.join(",")).unwrap().len(), 16);
        for (bad, named) in [
            ("", "entry 1 is empty"),
            ("10.0.0.2:7443,", "entry 2 is empty"),
            ("10.0.0.2:7443, ,10.0.0.3:7443", "entry 2 is empty"),
            ("10.0.0.2", "\"10.0.0.2\" is not ip:port"),
            (
                "10.0.0.2:7443,cp.example:7443",
                "\"cp.example:7443\" is not ip:port",
            ),
            ("10.0.0.2:99999", "\"10.0.0.2:99999\""),
            (
                &format!("{},10.0.2.1:1", max.join(",")),
                "17 entries, at most 16",
            ),
        ] {
            let err = addrs(bad).unwrap_err();
            assert!(
                matches!(err, ConfigError::Invalid { key: REPLICAS, .. }),
                "{bad:?}: {err}"
            );
            let err = err.to_string();
            assert!(
                err.starts_with("RAKAZO_CONTROL_ADDRS is invalid") && err.contains(named),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn the_websocket_url_is_parsed_and_https_needs_a_pin() {
        let dir = tempfile::tempdir().unwrap();
        let mut env = base(dir.path());
        env.insert("RAKAZO_ENROLL_TOKEN".into(), "t".into());
        assert_eq!(Config::from_source(&env).unwrap().control_ws, None);
        env.insert(WS_URL.into(), "http://127.0.0.1:8080/v1/tunnel".into());
        let ws = Config::from_source(&env).unwrap().control_ws.unwrap();
        assert_eq!(ws.url, "ws://127.0.0.1:8080/v1/tunnel");
        assert_eq!(
            (ws.host.as_str(), ws.port, ws.tls_sha256),
            ("127.0.0.1", 8080, None)
        );
        env.insert(WS_URL.into(), "https://cp.example/v1/tunnel".into());
        let err = Config::from_source(&env).unwrap_err().to_string();
        assert!(err.contains(API_PIN), "{err}");
        env.insert(API_PIN.into(), "cd".repeat(32));
        let ws = Config::from_source(&env).unwrap().control_ws.unwrap();
        assert_eq!(ws.url, "wss://cp.example/v1/tunnel");
        assert_eq!((ws.host.as_str(), ws.port), ("cp.example", 443));
        assert_eq!(ws.tls_sha256, Some([0xcd; 32]));
        env.insert(WS_URL.into(), "ftp://x/".into());
        assert!(Config::from_source(&env).is_err());
    }
}
