//! `rakazo serve`: its flags and the hand-over to [`crate::serve::serve`].

use super::Global;
use crate::api::ApiLimits;
use crate::serve::ServeConfig;
use anyhow::{anyhow, Result};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Args)]
pub struct ServeArgs {
    /// HTTP API address; port 0 picks a free port (written to <data dir>/addresses.json).
    #[arg(long, env = "RAKAZO_HTTP_ADDR", default_value = "127.0.0.1:7090")]
    pub http_addr: SocketAddr,
    /// QUIC tunnel address (UDP); port 0 picks a free port. The tunnel's TCP carrier, for
    /// guests whose network drops UDP, listens on the same address and port over TCP.
    #[arg(long, env = "RAKAZO_TUNNEL_ADDR", default_value = "127.0.0.1:7443")]
    pub tunnel_addr: SocketAddr,
    /// The TCP address guests fall back to when UDP gets no answer, when it is not the address
    /// they dial for QUIC (`--advertise-addr`, else the bound one) over TCP; port 0 stands for
    /// the tunnel's bound port.
    #[arg(long, env = "RAKAZO_ADVERTISE_TCP_ADDR")]
    pub advertise_tcp_addr: Option<SocketAddr>,
    /// PostgreSQL URL; SQLite in the data dir when unset.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// The rakazo-guest binary for local computers (default: beside this binary).
    #[arg(long, env = "RAKAZO_GUEST_BIN")]
    pub guest_bin: Option<PathBuf>,
    /// Log filter handed to local guests (RUST_LOG syntax).
    #[arg(long, env = "RAKAZO_GUEST_LOG")]
    pub guest_log: Option<String>,
    /// Cap on live desktops per computer, handed to local guests (unset or 0: no cap).
    #[arg(long, env = "SANDBOX_TEAM_SCREEN_LIMIT")]
    pub screen_limit: Option<String>,
    /// The page tools' browser in every computer, handed to guests (docs/screens.md#browser-providers):
    /// `chrome` (the bot's desktop Chrome), `emulator` (headless Chromium, no desktop) or `fake`
    /// (no browser: pages fetched and parsed in the guest, no JavaScript). Unset: `chrome`.
    #[arg(long, env = "BROWSER_PROVIDER",
          value_parser = clap::builder::PossibleValuesParser::new(["chrome", "emulator", "fake"]))]
    pub browser_provider: Option<String>,
    /// Debian's noVNC files, served to live screen viewers.
    #[arg(long, env = "RAKAZO_NOVNC_DIR", default_value = "/usr/share/novnc")]
    pub novnc_dir: PathBuf,
    /// The npm install of the live pages (holds node_modules/@xterm); default: the checkout's.
    #[arg(long, env = "RAKAZO_WEB_DIR")]
    pub web_dir: Option<PathBuf>,
    /// Seconds the control plane waits on a guest: for an answer, for the next bytes of a
    /// stream (an export's progress), for a write to be taken. A guest silent for longer fails
    /// that operation with 504 guest_timeout. Exec is bounded by its command's timeout instead.
    #[arg(long, env = "RAKAZO_GUEST_TIMEOUT_SECS", default_value_t = crate::tunnel::DEFAULT_GUEST_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub guest_timeout_secs: u64,
    /// Largest file a user may upload into a bot's directory, and a bot may attach (bytes).
    #[arg(long, env = "RAKAZO_ATTACHMENT_MAX_BYTES",
          default_value_t = crate::api::DEFAULT_ATTACHMENT_MAX_BYTES,
          value_parser = clap::value_parser!(u64).range(1..=(64u64 << 30)))]
    pub attachment_max_bytes: u64,
    /// Seconds an attached file's download URL works.
    #[arg(long, env = "RAKAZO_ATTACHMENT_URL_TTL_SECS",
          default_value_t = crate::api::DEFAULT_ATTACHMENT_URL_TTL.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub attachment_url_ttl_secs: u64,
    /// With PostgreSQL, where other replicas reach this one (UDP; port 0: any free port). The
    /// peer link relays operations to the guests connected here.
    #[arg(long, env = "RAKAZO_PEER_ADDR", default_value = "127.0.0.1:0")]
    pub peer_addr: SocketAddr,
    /// Seconds a claim (idle suspension, a home checkpoint, a recovery) lives unrenewed: a
    /// replica that dies holding one keeps the others waiting this long at most.
    #[arg(long, env = "RAKAZO_CLAIM_TTL_SECS", default_value_t = crate::claims::DEFAULT_CLAIM_TTL.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub claim_ttl_secs: u64,
    /// Seconds without a heartbeat after which a replica counts as dead (its guests' links are
    /// ignored until they dial another replica).
    #[arg(long, env = "RAKAZO_REPLICA_DEAD_AFTER_SECS", default_value_t = crate::cluster::DEFAULT_DEAD_AFTER.as_secs(),
          value_parser = clap::value_parser!(u64).range(2..=600))]
    pub replica_dead_after_secs: u64,
    /// Also serve `GET /metrics` here, plain HTTP and without the API token, for a scraper on
    /// a private network (the API listener serves it behind the token in any case). Anyone who
    /// reaches this address reads the metrics: bind it to a private interface.
    #[arg(long, env = "RAKAZO_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    #[command(flatten)]
    pub homes: crate::homes::HomeArgs,
    #[command(flatten)]
    pub idle: crate::idle::IdleArgs,
    #[command(flatten)]
    pub activity: crate::activity::ActivityArgs,
    #[command(flatten)]
    pub recordings: crate::recordings::RecordingArgs,
    #[command(flatten)]
    pub jobs: crate::jobs::JobArgs,
    #[command(flatten)]
    pub live: crate::live::LiveArgs,
    #[command(flatten)]
    pub mcp: crate::mcp::McpArgs,
    #[command(flatten)]
    pub preview: crate::preview::PreviewArgs,
    #[command(flatten)]
    pub providers: crate::provider_set::ProviderArgs,
    #[command(flatten)]
    pub http: crate::api::HttpArgs,
}

/// Runs the control plane until it stops.
pub(super) async fn run(g: &Global, args: ServeArgs) -> Result<i32> {
    let guest_bin = match args.guest_bin {
        Some(p) => p,
        None => std::env::current_exe()?
            .parent()
            .map(|d| d.join("rakazo-guest"))
            .ok_or_else(|| anyhow!("cannot locate rakazo-guest; set RAKAZO_GUEST_BIN"))?,
    };
    crate::serve::serve(ServeConfig {
        data_dir: g.data_dir(),
        http_addr: args.http_addr,
        tunnel_addr: args.tunnel_addr,
        advertise_tcp_addr: args.advertise_tcp_addr,
        database_url: args.database_url,
        guest_bin,
        guest_log: args.guest_log,
        screen_limit: args.screen_limit,
        browser_provider: args.browser_provider,
        guest_timeout: std::time::Duration::from_secs(args.guest_timeout_secs),
        cluster: crate::serve::ClusterConfig {
            peer_addr: args.peer_addr,
            claim_ttl: std::time::Duration::from_secs(args.claim_ttl_secs),
            dead_after: std::time::Duration::from_secs(args.replica_dead_after_secs),
        },
        providers: args.providers.resolve()?,
        limits: ApiLimits {
            attachment_max_bytes: args.attachment_max_bytes,
            attachment_url_ttl: std::time::Duration::from_secs(args.attachment_url_ttl_secs),
            ..ApiLimits::default()
        },
        pages: crate::live::pages::PagesConfig {
            novnc_dir: args.novnc_dir,
            web_dir: args
                .web_dir
                .unwrap_or_else(|| crate::live::pages::PagesConfig::defaults().web_dir),
        },
        homes: args.homes.resolve(&crate::homes::config::process_env)?,
        idle: args.idle.resolve()?,
        activity: args.activity.resolve()?,
        recording_retention: args.recordings.retention(),
        jobs: args.jobs.resolve(),
        live: args.live.resolve()?,
        mcp: args.mcp.resolve(args.http_addr)?,
        preview: args.preview.resolve()?,
        http: args.http.resolve()?,
        metrics_addr: args.metrics_addr,
        log_json: g.log_format == super::LogFormat::Json,
    })
    .await?;
    Ok(0)
}
