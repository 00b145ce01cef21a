//! Configuration of the home store: `rakazo serve` flags and environment, and the two secrets
//! (the S3 secret access key and the space's content key), which come only from the environment
//! or from a 0600 file, never from argv.
//!
//! This is the one place of the homes service that reads the environment (clippy.toml).

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use homes::archive::Limits;
use homes::seal::ContentKey;
use homes::ObjectStoreConfig;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Environment variable holding the S3 secret access key (or use `--s3-secret-key-file`).
pub const S3_SECRET_ENV: &str = "RAKAZO_S3_SECRET_ACCESS_KEY";
/// Environment variable holding the content key, 64 hex characters (or `--home-content-key-file`).
pub const CONTENT_KEY_ENV: &str = "RAKAZO_HOME_CONTENT_KEY";
/// Default quota of a home's file content: 20 GiB. A working home (code, documents, browser
/// profiles) is far below it; a runaway download or a sparse file is caught long before the
/// store's disk or bill notices.
pub const DEFAULT_QUOTA_BYTES: u64 = 20 << 30;
/// Default quota of a home's entries (files plus directories).
pub const DEFAULT_QUOTA_ENTRIES: u64 = 1_000_000;

/// Where checkpoints go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StoreKind {
    /// The latest copy of each home under `<data dir>/homes`.
    Local,
    /// An S3-compatible bucket, sealed (AES-256-GCM); the data dir is not used for homes.
    Object,
}

/// How checkpoints are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HomeFormat {
    /// Deduplicated, incremental revisions with history (docs/homes.md#incremental-checkpoints).
    Incremental,
    /// One whole archive per checkpoint, the latest only (the format before revisions).
    Archive,
}

/// Default retention of a home's revisions: the 30 newest, the newest of each of the last 24
/// hours and of the last 14 days (the latest is always kept).
pub const DEFAULT_KEEP_LAST: u64 = 30;
pub const DEFAULT_KEEP_HOURLY: usize = 24;
pub const DEFAULT_KEEP_DAILY: usize = 14;

/// `rakazo serve` flags of the home store.
#[derive(Debug, Clone, Args)]
pub struct HomeArgs {
    /// Where checkpoints are kept.
    #[arg(long, env = "RAKAZO_HOME_STORE", value_enum, default_value = "local")]
    pub home_store: StoreKind,
    /// S3 endpoint URL (unset: AWS), e.g. http://127.0.0.1:8014.
    #[arg(long, env = "RAKAZO_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    #[arg(long, env = "RAKAZO_S3_REGION", default_value = "us-east-1")]
    pub s3_region: String,
    #[arg(long, env = "RAKAZO_S3_BUCKET")]
    pub s3_bucket: Option<String>,
    /// Access key id (not a secret; the secret key comes from RAKAZO_S3_SECRET_ACCESS_KEY or
    /// --s3-secret-key-file).
    #[arg(long, env = "RAKAZO_S3_ACCESS_KEY_ID")]
    pub s3_access_key_id: Option<String>,
    /// File (mode 0600) holding the S3 secret access key.
    #[arg(long, env = "RAKAZO_S3_SECRET_KEY_FILE")]
    pub s3_secret_key_file: Option<PathBuf>,
    /// Path-style addressing (endpoint/bucket/key), which most S3-compatible servers need.
    #[arg(long, env = "RAKAZO_S3_PATH_STYLE")]
    pub s3_path_style: bool,
    /// Multipart part size in MiB (at least 5). Memory per checkpoint is about
    /// (parts in flight + 1) × this, on top of the tunnel's 16 MiB stream window.
    #[arg(long, env = "RAKAZO_S3_PART_MIB", default_value_t = 5)]
    pub s3_part_mib: usize,
    /// Parts uploading at once.
    #[arg(long, env = "RAKAZO_S3_PARTS_IN_FLIGHT", default_value_t = 2)]
    pub s3_parts_in_flight: usize,
    /// Seconds one attempt of an incremental home's bucket request may take before it is
    /// abandoned and retried (each request is tried 4 times, backing off from 200 ms).
    #[arg(long, env = "RAKAZO_S3_ATTEMPT_TIMEOUT_SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub s3_attempt_timeout_secs: u64,
    /// File (mode 0600) holding the space's content key: 64 hex characters.
    #[arg(long, env = "RAKAZO_HOME_CONTENT_KEY_FILE")]
    pub home_content_key_file: Option<PathBuf>,
    /// Most bytes of file content a home may hold (apparent sizes: a sparse file counts whole).
    /// A checkpoint of a larger home fails and the previous one stays current.
    #[arg(long, env = "RAKAZO_HOME_QUOTA_BYTES", default_value_t = DEFAULT_QUOTA_BYTES,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub home_quota_bytes: u64,
    /// Most entries (files plus directories) a home may hold.
    #[arg(long, env = "RAKAZO_HOME_QUOTA_ENTRIES", default_value_t = DEFAULT_QUOTA_ENTRIES,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub home_quota_entries: u64,
    /// How checkpoints are kept: incremental revisions, or one whole archive per checkpoint.
    /// Homes checkpointed in the archive format stay readable in either.
    #[arg(
        long,
        env = "RAKAZO_HOME_FORMAT",
        value_enum,
        default_value = "incremental"
    )]
    pub home_format: HomeFormat,
    /// Revisions kept of each home: the newest N ...
    #[arg(long, env = "RAKAZO_HOME_KEEP_LAST", default_value_t = DEFAULT_KEEP_LAST,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub home_keep_last: u64,
    /// ... the newest of each of the last N hours that have one ...
    #[arg(long, env = "RAKAZO_HOME_KEEP_HOURLY", default_value_t = DEFAULT_KEEP_HOURLY as u64,
          value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub home_keep_hourly: u64,
    /// ... and the newest of each of the last N days that have one. Older revisions are
    /// deleted, and their space freed, after each checkpoint.
    #[arg(long, env = "RAKAZO_HOME_KEEP_DAILY", default_value_t = DEFAULT_KEEP_DAILY as u64,
          value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub home_keep_daily: u64,
}

/// The resolved home configuration: where checkpoints go and how large a home may be.
#[derive(Debug, Clone)]
pub struct HomeStoreConfig {
    pub store: StoreConfig,
    /// Per-home quota, enforced on every checkpoint from the archive's headers.
    pub quota: Limits,
    pub format: HomeFormat,
    /// Which revisions of a home are kept.
    pub keep: homes::cas::Keep,
}

impl HomeStoreConfig {
    /// The local store with the default quota.
    pub fn local() -> Self {
        Self {
            store: StoreConfig::Local,
            quota: default_quota(),
            format: HomeFormat::Incremental,
            keep: default_keep(),
        }
    }
}

/// The default retention.
pub fn default_keep() -> homes::cas::Keep {
    homes::cas::Keep {
        last: DEFAULT_KEEP_LAST as usize,
        hourly: DEFAULT_KEEP_HOURLY,
        daily: DEFAULT_KEEP_DAILY,
    }
}

/// The default per-home quota.
pub fn default_quota() -> Limits {
    Limits {
        max_entries: DEFAULT_QUOTA_ENTRIES,
        max_bytes: DEFAULT_QUOTA_BYTES,
    }
}

/// The resolved home store.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // reason: resolved once per process; boxing buys nothing
pub enum StoreConfig {
    Local,
    Object {
        s3: ObjectStoreConfig,
        content_key: ContentKey,
    },
}

impl HomeArgs {
    /// Resolves flags, environment and secret files. `env` reads one variable (the process
    /// environment in `rakazo serve`, a map in tests).
    pub fn resolve(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<HomeStoreConfig> {
        let quota = Limits {
            max_entries: self.home_quota_entries,
            max_bytes: self.home_quota_bytes,
        };
        Ok(HomeStoreConfig {
            store: self.resolve_store(env, quota)?,
            quota,
            format: self.home_format,
            keep: homes::cas::Keep {
                last: self.home_keep_last as usize,
                hourly: self.home_keep_hourly as usize,
                daily: self.home_keep_daily as usize,
            },
        })
    }

    fn resolve_store(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
        quota: Limits,
    ) -> Result<StoreConfig> {
        match self.home_store {
            StoreKind::Local => Ok(StoreConfig::Local),
            StoreKind::Object => {
                let bucket = self
                    .s3_bucket
                    .clone()
                    .context("--home-store object needs --s3-bucket (RAKAZO_S3_BUCKET)")?;
                let access = self.s3_access_key_id.clone().context(
                    "--home-store object needs --s3-access-key-id (RAKAZO_S3_ACCESS_KEY_ID)",
                )?;
                let secret_key = secret(
                    env,
                    S3_SECRET_ENV,
                    self.s3_secret_key_file.as_deref(),
                    "the S3 secret access key",
                )?;
                let key_hex = secret(
                    env,
                    CONTENT_KEY_ENV,
                    self.home_content_key_file.as_deref(),
                    "the home content key",
                )?;
                let content_key = parse_content_key(&key_hex)?;
                if self.s3_part_mib < 5 || self.s3_part_mib > 1024 {
                    bail!("--s3-part-mib must be 5..=1024");
                }
                if self.s3_parts_in_flight == 0 || self.s3_parts_in_flight > 16 {
                    bail!("--s3-parts-in-flight must be 1..=16");
                }
                let mut s3 =
                    ObjectStoreConfig::new(bucket, self.s3_region.clone(), access, secret_key);
                s3.endpoint = self.s3_endpoint.clone();
                s3.force_path_style = self.s3_path_style;
                s3.part_size = self.s3_part_mib << 20;
                s3.parts_in_flight = self.s3_parts_in_flight;
                s3.attempt_timeout = std::time::Duration::from_secs(self.s3_attempt_timeout_secs);
                s3.limits = quota;
                Ok(StoreConfig::Object { s3, content_key })
            }
        }
    }
}

/// The process environment, for [`HomeArgs::resolve`].
#[allow(clippy::disallowed_methods)] // reason: the homes service's one environment read
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A secret from the environment or from a file that only its owner can read; exactly one.
pub(crate) fn secret(
    env: &dyn Fn(&str) -> Option<String>,
    var: &str,
    file: Option<&Path>,
    what: &str,
) -> Result<String> {
    match (env(var), file) {
        (Some(_), Some(_)) => bail!("{what}: set {var} or the file flag, not both"),
        (Some(v), None) => Ok(v.trim().to_owned()),
        (None, Some(path)) => {
            let meta = std::fs::metadata(path)
                .with_context(|| format!("{what}: cannot read {}", path.display()))?;
            if meta.permissions().mode() & 0o077 != 0 {
                bail!(
                    "{what}: {} must be readable by its owner only (chmod 600)",
                    path.display()
                );
            }
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("{what}: cannot read {}", path.display()))?;
            let text = text.trim().to_owned();
            if text.is_empty() {
                bail!("{what}: {} is empty", path.display());
            }
            Ok(text)
        }
        (None, None) => bail!("{what} is required: set {var} or pass its file flag"),
    }
}

fn parse_content_key(hex_key: &str) -> Result<ContentKey> {
    let bytes = hex::decode(hex_key).ok().filter(|b| b.len() == 32);
    match bytes.and_then(|b| <[u8; 32]>::try_from(b).ok()) {
        Some(k) => Ok(ContentKey::from_bytes(k)),
        // The value itself is never echoed.
        None => bail!("the home content key must be 64 hex characters (32 bytes)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::collections::HashMap;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        home: HomeArgs,
    }

    fn args(extra: &[&str]) -> HomeArgs {
        let mut argv = vec!["t"];
        argv.extend_from_slice(extra);
        T::try_parse_from(argv).unwrap().home
    }

    #[test]
    fn local_is_the_default() {
        let cfg = args(&[]).resolve(&|_| None).unwrap();
        assert!(matches!(cfg.store, StoreConfig::Local));
        assert_eq!(cfg.quota, default_quota());
        let cfg = args(&["--home-quota-bytes", "1000", "--home-quota-entries", "7"])
            .resolve(&|_| None)
            .unwrap();
        assert_eq!((cfg.quota.max_bytes, cfg.quota.max_entries), (1000, 7));
    }

    #[test]
    fn object_needs_its_secrets_from_env_or_private_files() {
        let base = [
            "--home-store",
            "object",
            "--s3-bucket",
            "b",
            "--s3-access-key-id",
            "AK",
            "--s3-path-style",
        ];
        let a = args(&base);
        let err = a.resolve(&|_| None).unwrap_err().to_string();
        assert!(err.contains("S3 secret access key"), "{err}");
        let key = "ab".repeat(32);
        let env: HashMap<&str, String> = [
            (S3_SECRET_ENV, "s3cret".to_owned()),
            (CONTENT_KEY_ENV, key.clone()),
        ]
        .into();
        let cfg = a.resolve(&|k| env.get(k).cloned()).unwrap();
        let StoreConfig::Object { s3, .. } = cfg.store else {
            panic!("object config expected")
        };
        assert!(s3.force_path_style);
        assert!(!format!("{s3:?}").contains("s3cret"));

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, &key).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut with_file: Vec<&str> = base.to_vec();
        let f = file.display().to_string();
        with_file.extend(["--home-content-key-file", &f]);
        let env: HashMap<&str, String> = [(S3_SECRET_ENV, "s3cret".to_owned())].into();
        let err = args(&with_file)
            .resolve(&|k| env.get(k).cloned())
            .unwrap_err()
            .to_string();
        assert!(err.contains("chmod 600"), "{err}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(args(&with_file).resolve(&|k| env.get(k).cloned()).is_ok());

        let bad: HashMap<&str, String> = [
            (S3_SECRET_ENV, "s".to_owned()),
            (CONTENT_KEY_ENV, "zz-not-hex-secret".to_owned()),
        ]
        .into();
        let err = a.resolve(&|k| bad.get(k).cloned()).unwrap_err().to_string();
        assert!(!err.contains("zz-not-hex-secret"), "{err}");
    }
}
