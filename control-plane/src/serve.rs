//! `rakazo serve`: start-up and wiring of the control plane.
//!
//! Creates the data dir on first start (API token, tunnel certificate, SQLite database),
//! connects the database and runs migrations, binds the tunnel (QUIC on UDP, and the same QUIC
//! over the TCP carrier on the same port number) and the HTTP API (TCP),
//! writes the chosen addresses to `addresses.json` (so port 0 works), recovers local computers,
//! and serves until killed. The API token is printed once, when it is created.
//!
//! Before anything else it checks that the data dir and every secret file are private
//! ([`SECRET_FILES`], the TLS key): it refuses to start, naming the file and its mode, rather
//! than run with secrets others may have read. A tunnel asked for on port 0 takes the port of
//! the previous run when it is free (`tunnel-port`), so running guests can dial back in.

use crate::api::{self, Api, ApiLimits};
use crate::clock::now_ms;
use crate::core::{Core, CoreAuth, Enrollment};
use crate::db::Db;
use crate::tls::{check_private_file, write_private, TunnelIdentity};
use crate::tunnel::{self, Registry};
use anyhow::{bail, Context, Result};
use gateway_proto::Secret;
use std::net::SocketAddr;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tracing::{info, warn};

/// File names inside the data dir.
pub const API_TOKEN_FILE: &str = "api-token";
pub use crate::client::ADDRESSES_FILE;
/// The tunnel's last bound port, tried first when the tunnel is asked for on port 0.
pub const TUNNEL_PORT_FILE: &str = "tunnel-port";

/// The secrets the control plane keeps in its data dir, and what each is: checked private at
/// every start. (The S3 secret and content key files are checked where `homes` reads them.)
pub const SECRET_FILES: &[(&str, &str)] = &[
    (API_TOKEN_FILE, "the API token"),
    ("capability-key", "the key that seals capability URLs"),
    ("tunnel-key.pem", "the tunnel's private key"),
    ("tunnel-reset-key", "the tunnel's stateless-reset key"),
];

/// Configuration of `rakazo serve`, already parsed from flags and environment.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub data_dir: PathBuf,
    pub http_addr: SocketAddr,
    /// The tunnel: QUIC on this UDP address, the TCP carrier on the same address over TCP.
    pub tunnel_addr: SocketAddr,
    /// The TCP address guests fall back to when UDP gets no answer (`--advertise-tcp-addr`);
    /// port 0 is the tunnel's bound port. Default: the address guests dial for QUIC, over TCP.
    pub advertise_tcp_addr: Option<SocketAddr>,
    /// `postgres://...` or `sqlite://...`; `None` is SQLite in the data dir.
    pub database_url: Option<String>,
    /// The guest binary the local provider starts.
    pub guest_bin: PathBuf,
    /// Log filter handed to local guests.
    pub guest_log: Option<String>,
    /// `SANDBOX_TEAM_SCREEN_LIMIT` handed to guests (they validate it).
    pub screen_limit: Option<String>,
    /// `RAKAZO_BROWSER_PROVIDER` handed to guests (docs/screens.md#browser-providers).
    pub browser_provider: Option<String>,
    /// The base deadline of every wait on a guest (`tunnel` module doc).
    pub guest_timeout: std::time::Duration,
    /// Which providers run computers, and their settings.
    pub providers: crate::provider_set::ProviderConfig,
    pub limits: ApiLimits,
    /// Where the live pages' noVNC and xterm.js files are.
    pub pages: crate::live::pages::PagesConfig,
    /// Where home checkpoints go (local by default).
    pub homes: crate::homes::HomeStoreConfig,
    /// Idle suspension (timeout, takeover keep-awake).
    pub idle: crate::idle::IdleConfig,
    /// The activity feed (retention per computer; 0: off).
    pub activity: crate::activity::ActivityConfig,
    /// How long screen recordings are kept (docs/recordings.md).
    pub recording_retention: std::time::Duration,
    /// Maintenance jobs (heartbeat timeout, an update's wait for runs).
    pub jobs: crate::jobs::JobConfig,
    /// Live screens (the control lease's TTL).
    pub live: crate::live::LiveConfig,
    /// The MCP endpoint (allowed hosts, session idle time).
    pub mcp: crate::mcp::McpConfig,
    /// Preview URLs: their domain, limits and waking (docs/previews.md).
    pub preview: crate::preview::PreviewConfig,
    /// The HTTP listener: timeouts, connection cap, TLS.
    pub http: crate::api::HttpConfig,
    /// Replicas on PostgreSQL: the peer link, claims, liveness.
    pub cluster: ClusterConfig,
    /// A second listener serving only `GET /metrics`, without the API token (`--metrics-addr`).
    pub metrics_addr: Option<SocketAddr>,
    /// Logs are JSON lines (`--log-format json`): local guests are told to log so too.
    pub log_json: bool,
}

/// How this control plane runs beside others on the same PostgreSQL (`crate::cluster`).
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Where other replicas reach this one (UDP).
    pub peer_addr: SocketAddr,
    /// How long a claim lives unrenewed.
    pub claim_ttl: std::time::Duration,
    /// How long a silent replica counts as alive.
    pub dead_after: std::time::Duration,
}

/// The lock file that keeps a second `rakazo serve` off a data dir.
pub const SERVE_LOCK_FILE: &str = "serve.lock";

/// Holds the data dir for this process: a second `rakazo serve` on it is refused, naming what
/// to do instead (on SQLite there is only one control plane; replicas run on PostgreSQL, each
/// with its own data dir).
fn lock_data_dir(dir: &Path, sqlite: bool) -> Result<nix::fcntl::Flock<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(SERVE_LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("open {}", path.display()))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(|_| {
        if sqlite {
            anyhow::anyhow!(
                "refusing to start: another rakazo serve is running on data dir {} and its SQLite \
                 database; SQLite allows one control plane: to run several replicas, give each \
                 its own data dir and one PostgreSQL (DATABASE_URL=postgres://...)",
                dir.display()
            )
        } else {
            anyhow::anyhow!(
                "refusing to start: another rakazo serve is running on data dir {}; every replica \
                 needs its own data dir (with the shared secrets copied in)",
                dir.display()
            )
        }
    })
}

/// Loads the API token, or creates it (0600) and returns it with `true` the first time.
pub fn load_or_create_token(data_dir: &Path) -> Result<(Secret, bool)> {
    let path = data_dir.join(API_TOKEN_FILE);
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => Ok((Secret::new(t.trim().to_string()), false)),
        Ok(_) => bail!(
            "{} is empty; delete it to create a new token",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let token = format!("rk_{}", hex::encode(rand::random::<[u8; 32]>()));
            write_private(&path, token.as_bytes())?;
            Ok((Secret::new(token), true))
        }
        Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
    }
}

/// Makes the data dir 0700: it holds the API token, the keys and the database, and a computer
/// (another user on this host) must not even look in. A dir made by hand or by a tool with
/// looser permissions is tightened, and the log says so; one that stays open after that (a
/// file system that ignores modes) or that is not ours is refused.
fn make_private(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta =
        std::fs::metadata(dir).with_context(|| format!("read data dir {}", dir.display()))?;
    let euid = nix::unistd::geteuid().as_raw();
    if meta.uid() != euid {
        bail!(
            "refusing to start: data dir {} belongs to uid {}, not to uid {euid} that runs the \
             control plane",
            dir.display(),
            meta.uid()
        );
    }
    let mode = meta.permissions().mode();
    if mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("make data dir {} private (0700)", dir.display()))?;
        info!(data_dir = %dir.display(), was = format!("{:o}", mode & 0o777), "data dir made private (0700)");
        let now = std::fs::metadata(dir)
            .with_context(|| format!("read data dir {}", dir.display()))?
            .permissions()
            .mode();
        if now & 0o077 != 0 {
            bail!(
                "refusing to start: data dir {} still has mode {:04o} after chmod 700; put it \
                 on a file system that keeps modes",
                dir.display(),
                now & 0o7777
            );
        }
    }
    Ok(())
}

/// Checks every secret file the data dir holds (those still missing are created private).
fn check_secrets(dir: &Path) -> Result<()> {
    for (name, what) in SECRET_FILES {
        check_private_file(&dir.join(name), what)?;
    }
    Ok(())
}

/// Binds the tunnel (UDP and TCP on one port). Asked for port 0, it first tries the port of the
/// previous run (guests of computers still running dial that address and reconnect); when that
/// port is taken it binds another and warns that those guests cannot come back until their
/// computers restart.
fn bind_tunnel(
    cfg: &ServeConfig,
    server_config: quinn::ServerConfig,
    reset_key: &[u8; 32],
) -> Result<tunnel::Listening> {
    let port_file = cfg.data_dir.join(TUNNEL_PORT_FILE);
    let previous = std::fs::read_to_string(&port_file)
        .ok()
        .and_then(|t| t.trim().parse::<u16>().ok())
        .filter(|p| *p != 0);
    let listening = match previous {
        Some(port) if cfg.tunnel_addr.port() == 0 => {
            let again = SocketAddr::new(cfg.tunnel_addr.ip(), port);
            match tunnel::bind(again, server_config.clone(), reset_key) {
                Ok(e) => e,
                Err(error) => {
                    let e = tunnel::bind(cfg.tunnel_addr, server_config, reset_key).with_context(
                        || format!("bind tunnel on {} (udp and tcp)", cfg.tunnel_addr),
                    )?;
                    warn!(
                        previous = %again,
                        bound = %e.local_addr()?,
                        %error,
                        "the tunnel's previous port is taken: guests of computers that were \
                         running dial the previous address and cannot reconnect until their \
                         computer is stopped and started; set RAKAZO_TUNNEL_ADDR to a fixed \
                         port to keep it across restarts"
                    );
                    e
                }
            }
        }
        _ => tunnel::bind(cfg.tunnel_addr, server_config, reset_key)
            .with_context(|| format!("bind tunnel on {} (udp and tcp)", cfg.tunnel_addr))?,
    };
    write_atomic(
        &port_file,
        format!("{}\n", listening.local_addr()?.port()).as_bytes(),
    )?;
    Ok(listening)
}

/// Raises this process's soft limit on open files to its hard limit: every HTTP connection,
/// guest tunnel and relay holds descriptors, and the usual soft default (1024) would make accept
/// fail long before the connection caps (`--http-max-connections`) decide anything.
fn raise_open_files_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => tracing::debug!(from = soft, to = hard, "raised the open files limit"),
            Err(e) => warn!(soft, hard, error = %e, "cannot raise the open files limit"),
        },
        Ok(_) => {}
        Err(e) => warn!(error = %e, "cannot read the open files limit"),
    }
}

/// Runs the control plane until the process is killed.
pub async fn serve(cfg: ServeConfig) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&cfg.data_dir)
        .with_context(|| format!("create data dir {}", cfg.data_dir.display()))?;
    make_private(&cfg.data_dir)?;
    let sqlite = core_db_kind(&cfg) == "sqlite";
    let _serving = lock_data_dir(&cfg.data_dir, sqlite)?;
    check_secrets(&cfg.data_dir)?;
    let api_tls = match &cfg.http.tls {
        Some(files) => Some(crate::tls::ApiTls::load(&files.cert, &files.key)?),
        None => None,
    };
    raise_open_files_limit();
    let (token, created) = load_or_create_token(&cfg.data_dir)?;
    if created {
        // Printed once, on the terminal of whoever started the server the first time; the file
        // in the data dir is how the local CLI finds it later.
        println!(
            "API token (shown once; stored in {}): {}",
            cfg.data_dir.join(API_TOKEN_FILE).display(),
            token.expose()
        );
    }
    let identity = TunnelIdentity::load_or_create(
        &cfg.data_dir.join("tunnel-cert.pem"),
        &cfg.data_dir.join("tunnel-key.pem"),
    )?;
    let db = match &cfg.database_url {
        Some(url) => Db::connect(url).await.context("connect to DATABASE_URL")?,
        None => Db::sqlite_in(&cfg.data_dir)
            .await
            .context("open the SQLite database")?,
    };
    db.migrate(now_ms()).await.context("run migrations")?;

    let reset_key = load_or_create_key(&cfg.data_dir.join("tunnel-reset-key"))?;
    let listening = bind_tunnel(&cfg, identity.server_config()?, &reset_key)?;
    let tunnel_addr = listening.local_addr()?;
    let tunnel_tcp_addr = listening.tcp_addr()?;
    // The HTTP API carries the tunnel too (`GET /v1/tunnel`, websockets) on the same carrier.
    let tunnel_carrier = listening.carrier();
    let listener = tokio::net::TcpListener::bind(cfg.http_addr)
        .await
        .with_context(|| format!("bind http on {}", cfg.http_addr))?;
    let http_addr = listener.local_addr()?;
    let metrics_listener = match cfg.metrics_addr {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("bind metrics on {addr}"))?,
        ),
        None => None,
    };
    let metrics_addr = match &metrics_listener {
        Some(l) => Some(l.local_addr()?),
        None => None,
    };

    let mut guest_env = Vec::new();
    if let Some(filter) = &cfg.guest_log {
        guest_env.push(("RAKAZO_LOG".to_string(), filter.clone()));
    }
    if cfg.log_json {
        guest_env.push(("RAKAZO_LOG_FORMAT".to_string(), "json".to_string()));
    }
    if let Some(limit) = &cfg.screen_limit {
        guest_env.push(("SANDBOX_TEAM_SCREEN_LIMIT".to_string(), limit.clone()));
    }
    if let Some(provider) = &cfg.browser_provider {
        guest_env.push(("RAKAZO_BROWSER_PROVIDER".to_string(), provider.clone()));
    }
    let guest = crate::provider_set::GuestSettings {
        bin: cfg.guest_bin.clone(),
        env: guest_env,
    };
    let providers =
        crate::provider_set::ProviderSet::build(&cfg.providers, &cfg.data_dir, &guest).await?;
    info!(providers = ?providers.kinds().collect::<Vec<_>>(), default = providers.default_kind(), "providers ready");
    let registry = Registry::with_guest_timeout(cfg.guest_timeout);
    // Guests dial the advertised address when one is set (a machine elsewhere), else the
    // tunnel's own.
    let control_addr = cfg.providers.advertise_addr.unwrap_or(tunnel_addr);
    let enrollment = Enrollment {
        control_addr,
        control_tcp_addr: advertised_tcp(cfg.advertise_tcp_addr, control_addr, tunnel_tcp_addr),
        control_ws: Some(advertised_ws(
            http_addr,
            control_addr,
            api_tls.as_ref().map(|t| t.fingerprint.clone()),
        )),
        cert_sha256: identity.fingerprint(),
    };
    // Seals capability URLs (docs/security.md#capability-urls); kept so URLs survive a restart.
    let capability_key = load_or_create_key(&cfg.data_dir.join("capability-key"))?;
    let cluster = if sqlite {
        None
    } else {
        Some(
            join_cluster(
                &cfg,
                &db,
                &identity,
                &registry,
                control_addr,
                &capability_key,
                &token,
            )
            .await?,
        )
    };
    let mut homes = crate::homes::HomeService::new(&cfg.homes, &cfg.data_dir, db.clone())?;
    if let Some((cluster, _)) = &cluster {
        homes = homes.with_claims(cluster.claims.clone());
    }
    let activity_db = db.clone();
    let secrets_db = db.clone();
    let mut core = Core::new(
        db,
        registry.clone(),
        providers,
        enrollment,
        Arc::new(homes),
        cfg.idle,
    );
    core = core.with_activity(activity_db, cfg.activity);
    core.recordings.retention = cfg.recording_retention;
    // Secrets are sealed under a key derived from the capability key, which replicas share.
    core = core.with_secrets_key(
        secrets_db,
        crate::secrets::SecretsKey::derive(&capability_key),
    );
    core.jobs.config = cfg.jobs;
    if let Some((cluster, _)) = &cluster {
        core = core.with_cluster(cluster.clone());
        // A replica works jobs under its own id, which its heartbeat row shows alive.
        core.jobs
            .set_worker(cluster.me().id.clone(), cluster.claims.clone());
    }
    let replicated = cluster.is_some();
    let core = Arc::new(core);
    if let Some((cluster, endpoint)) = cluster {
        tokio::spawn(crate::cluster::peer::serve(
            endpoint,
            crate::cluster::peer_key(&capability_key),
            registry.clone(),
            core.idle.gate(),
        ));
        tokio::spawn(drain_on_signal(cluster));
    }

    if let Some(l) = metrics_listener {
        tokio::spawn(api::metrics::serve_plain(l, core.clone()));
    }
    // Running computers adopted by the egress gateway get their secrets back; with replicas,
    // a change made on another one reaches this one's computers within a refresh.
    core.push_all_secrets().await;
    if replicated {
        let core = core.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(SECRETS_REFRESH);
            every.tick().await;
            loop {
                every.tick().await;
                core.push_all_secrets().await;
            }
        });
    }
    // The egress gateway's decisions go to each computer's activity feed (already aggregated
    // per second and destination, so a busy computer cannot flood it). One gateway serves local
    // and Docker computers: whichever provider shares it hands its events over.
    let providers = core.providers();
    let events = providers
        .kinds()
        .filter_map(|k| providers.get(k))
        .find_map(|p| p.take_network_events());
    if let Some(mut events) = events {
        let activity = core.activity.clone();
        tokio::spawn(async move {
            while let Some(e) = events.recv().await {
                activity.network(&e).await;
            }
        });
    }
    // Computers adopted behind the gateway (policy `none` until now) get their stored policy
    // before the API answers, and every replica follows a change made through another.
    let mut synced = None;
    if let Err(e) = core.sync_network_policies_since(&mut synced).await {
        warn!(error = %e, "network policies not applied to adopted computers yet: retried");
    }
    tokio::spawn(crate::core::follow_network_policies(core.clone(), synced));
    tokio::spawn(tunnel::serve(
        listening,
        registry,
        Arc::new(CoreAuth(core.clone())),
    ));
    let scheme = if api_tls.is_some() { "https" } else { "http" };
    let addresses = crate::client::LocalAddresses {
        http: Some(format!("{scheme}://{http_addr}")),
        tunnel: Some(tunnel_addr.to_string()),
        tunnel_tcp: Some(tunnel_tcp_addr.to_string()),
        tunnel_cert_sha256: Some(identity.fingerprint()),
        // The local CLI pins this certificate (`client::Trust::Pinned`).
        http_cert_sha256: api_tls.as_ref().map(|t| t.fingerprint.clone()),
        metrics: metrics_addr.map(|a| format!("http://{a}")),
    };
    write_atomic(
        &cfg.data_dir.join(ADDRESSES_FILE),
        &serde_json::to_vec_pretty(&addresses)?,
    )?;
    info!(%http_addr, %tunnel_addr, %tunnel_tcp_addr, tls = api_tls.is_some(), database = ?core_db_kind(&cfg), "control plane listening");
    info!(console = %format!("{scheme}://{http_addr}/console"), "the console: sign in with an API token (`rakazo token create`)");

    tokio::spawn(crate::heap::trim_every(crate::heap::TRIM_EVERY));
    let recover = core.clone();
    tokio::spawn(async move {
        // Before any commit of this process: orphans of a crashed one are deleted.
        crate::homes::flow::reconcile_logged(&recover.homes).await;
        if let Err(e) = recover.recover().await {
            tracing::error!(error = %e, "recovering computers failed");
        }
        // After recovery, so a computer restarted by it is not judged on its stale state.
        crate::jobs::spawn(recover.clone());
        crate::recordings::job::spawn(recover.clone());
        crate::pool_refill::spawn(recover.clone());
        crate::idle::spawn(recover);
    });
    let live = crate::live::LiveHttp::new(&capability_key, cfg.pages, cfg.live);
    let api = Api::new(core, &token, cfg.limits, live)
        .with_https(api_tls.is_some())
        .with_tunnel_carrier(tunnel_carrier)
        .with_mcp(&cfg.mcp)
        .with_previews(cfg.preview);
    let api = Arc::new(api);
    api::start_services_on_boot(api.clone());
    api::serve(listener, api, &cfg.http, api_tls.map(|t| t.config)).await;
    Ok(())
}

/// Joins the replicas on this PostgreSQL: binds the peer link, checks that this replica shares
/// the others' secrets, refuses a second replica whose homes would be local to its data dir,
/// and registers with a heartbeat.
async fn join_cluster(
    cfg: &ServeConfig,
    db: &Db,
    identity: &TunnelIdentity,
    registry: &Arc<Registry>,
    tunnel_addr: SocketAddr,
    capability_key: &[u8; 32],
    token: &Secret,
) -> Result<(Arc<crate::cluster::Cluster>, quinn::Endpoint)> {
    use crate::cluster::{self, peer, Cluster, Replica};
    let id = cluster::new_replica_id();
    let endpoint = peer::server_endpoint(identity, cfg.cluster.peer_addr)
        .with_context(|| format!("bind the peer link on {} (udp)", cfg.cluster.peer_addr))?;
    let peer_addr = endpoint.local_addr()?;
    let peers = peer::Peers::new(
        cluster::peer_key(capability_key),
        id.clone(),
        &identity.fingerprint(),
        cfg.guest_timeout,
    )?;
    let claims = crate::claims::Claims::new(db.clone(), id.clone(), cfg.cluster.claim_ttl);
    let me = Replica {
        id,
        tunnel_addr,
        peer_addr,
    };
    let cluster = Arc::new(Cluster::new(
        db.clone(),
        me,
        cfg.cluster.dead_after,
        registry.clone(),
        peers,
        claims,
    ));
    cluster
        .check_secrets(&[
            (API_TOKEN_FILE, token.expose().as_bytes()),
            ("capability-key", capability_key),
            ("tunnel-cert.pem", identity.cert.as_ref()),
        ])
        .await?;
    let others = cluster.others().await?;
    if !others.is_empty() && matches!(cfg.homes.store, crate::homes::StoreConfig::Local) {
        bail!(
            "refusing to start: {} other replica(s) run on this database, and homes would be \
             stored in this replica's data dir, where the others cannot read them; use the \
             object store (--home-store object) for every replica",
            others.len()
        );
    }
    cluster.register().await?;
    Ok((cluster, endpoint))
}

/// On SIGTERM or SIGINT a replica drains: it stops being offered to new guests, closes its
/// guests' connections with "draining" (they dial another replica at once; their operations
/// in flight end as lost, `uncertain`), leaves the cluster and exits.
async fn drain_on_signal(cluster: Arc<crate::cluster::Cluster>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        warn!("cannot catch SIGTERM: this replica will not drain on shutdown");
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    info!(replica = %cluster.me().id, "draining: guests are sent to the other replicas");
    if let Err(e) = cluster.drain().await {
        warn!(error = %e, "could not mark this replica as draining");
    }
    cluster
        .registry
        .close_all(CLOSE_DRAINING, b"replica draining");
    // Long enough for the close to reach the guests (it is not retransmitted once we exit).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    if let Err(e) = cluster.leave().await {
        warn!(error = %e, "could not remove this replica from the database; it is dropped once its heartbeat is stale");
    }
    info!("drained; exiting");
    std::process::exit(0);
}

/// The QUIC close code telling a guest that its replica is draining: dial another at once.
pub const CLOSE_DRAINING: u32 = 4;

/// The TCP address guests fall back to: `--advertise-tcp-addr` (its port 0 is the bound port),
/// else the address they dial for QUIC, over TCP (the carrier listens on the same port number).
fn advertised_tcp(
    flag: Option<SocketAddr>,
    control_addr: SocketAddr,
    bound: SocketAddr,
) -> SocketAddr {
    match flag {
        Some(a) if a.port() == 0 => SocketAddr::new(a.ip(), bound.port()),
        Some(a) => a,
        None => control_addr,
    }
}

/// A 32-byte secret kept in the data dir (0600), created on first use.
/// How often a replica re-applies every computer's secrets (changes made on another replica).
const SECRETS_REFRESH: std::time::Duration = std::time::Duration::from_secs(30);

fn load_or_create_key(path: &Path) -> Result<[u8; 32]> {
    match std::fs::read(path) {
        Ok(bytes) => bytes
            .try_into()
            .map_err(|_| anyhow::anyhow!("{} must hold exactly 32 bytes", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key: [u8; 32] = rand::random();
            write_private(path, &key)?;
            Ok(key)
        }
        Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
    }
}

fn core_db_kind(cfg: &ServeConfig) -> &'static str {
    match &cfg.database_url {
        Some(u) if u.starts_with("postgres") => "postgres",
        _ => "sqlite",
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("rename to {}", path.display()))?;
    Ok(())
}

/// The tunnel's websocket guests fall back to last: `GET /v1/tunnel` on the HTTP API, at the
/// address guests dial for QUIC when the API listens on every address, https pinned by the
/// API certificate's fingerprint when the API speaks TLS.
fn advertised_ws(
    http_addr: SocketAddr,
    control_addr: SocketAddr,
    api_cert_sha256: Option<String>,
) -> providers::ControlWs {
    let ip = if http_addr.ip().is_unspecified() {
        control_addr.ip()
    } else {
        http_addr.ip()
    };
    let scheme = if api_cert_sha256.is_some() {
        "https"
    } else {
        "http"
    };
    providers::ControlWs {
        url: format!(
            "{scheme}://{}/v1/tunnel",
            SocketAddr::new(ip, http_addr.port())
        ),
        api_cert_sha256,
    }
}

#[cfg(test)]
mod tests {
    use super::advertised_tcp;
    use std::net::SocketAddr;

    #[test]
    fn the_tcp_address_guests_get() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let bound = a("0.0.0.0:7443");
        // Default: where guests dial QUIC, over TCP.
        assert_eq!(
            advertised_tcp(None, a("10.0.0.7:7443"), bound),
            a("10.0.0.7:7443")
        );
        assert_eq!(
            advertised_tcp(Some(a("10.0.0.9:443")), a("10.0.0.7:7443"), bound),
            a("10.0.0.9:443")
        );
        // Port 0: that host at the bound port.
        assert_eq!(
            advertised_tcp(Some(a("127.0.0.1:0")), a("127.0.0.1:9"), bound),
            a("127.0.0.1:7443")
        );
    }
}
