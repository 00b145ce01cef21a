//! The guest's configuration, read from the environment once, in `main`.
//!
//! The enrollment token comes from `RAKAZO_ENROLL_TOKEN` or from a file named by
//! `RAKAZO_ENROLL_TOKEN_FILE` that only its owner may read; it never comes from argv. Library code
//! receives the parsed [`Config`] and never reads the environment itself.

use crate::gateway::terminal::user::WorkspaceUser;
use gateway_proto::Secret;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

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
    /// SHA-256 of the control plane's certificate DER; the only certificate accepted.
    pub cert_sha256: [u8; 32],
    pub computer_id: String,
    pub token: Secret,
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
        let control_addr = need("RAKAZO_CONTROL_ADDR")?
            .parse()
            .map_err(|_| invalid("RAKAZO_CONTROL_ADDR", "expected ip:port"))?;
        let fp = need("RAKAZO_CONTROL_CERT_SHA256")?;
        let cert_sha256 = hex::decode(fp.trim())
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| invalid("RAKAZO_CONTROL_CERT_SHA256", "expected 64 hex characters"))?;
        let computer_id = need("RAKAZO_COMPUTER_ID")?;
        if computer_id.is_empty() || computer_id.len() > 128 {
            return Err(invalid("RAKAZO_COMPUTER_ID", "expected 1..=128 characters"));
        }
        let token = match (
            src.get("RAKAZO_ENROLL_TOKEN"),
            src.get("RAKAZO_ENROLL_TOKEN_FILE"),
        ) {
            (Some(t), _) => t,
            (None, Some(path)) => read_token_file(&path)?,
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
        Ok(Self {
            control_addr,
            cert_sha256,
            computer_id,
            token: Secret::new(token),
            home,
            runtime_dir,
            screen_limit,
            chromium,
            workspace_user,
        })
    }
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
}
