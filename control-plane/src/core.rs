//! The control plane's one core: computers, leases and operations, whatever the front door.
//!
//! The HTTP API parses requests into calls on [`Core`]; the tunnel authenticates guests through
//! it. It owns the decisions: which state allows which operation, when a lease is checked,
//! what a provider is asked to do and in which order. It does no HTTP and no QUIC framing.
//!
//! - Operations: [`Core::guest_for`] hands out a running computer's [`Guest`] after checking the
//!   lease the operation's `authority()` names against the lease store; [`Core::call`] runs a
//!   unary operation through it. Graphical calls go through `Core::with_screen` /
//!   `Core::call_screen` (`core::evict`), which evict an idle screen and retry once when the guest
//!   refuses `COMPUTER_SCREEN_UNAVAILABLE`.
//! - Lifecycle: every boot rotates the computer's enrollment token and drops the old connection
//!   before the machine starts (`boot`); a stopped or destroyed computer's connection is closed
//!   and recorded disconnected at once (`drop_guest`). Stop, start, destroy and a new takeover
//!   run under the computer's lifecycle claim and check a maintenance job's reservation under it
//!   (`Core::unreserved_act`, `core::jobs`).
//! - Homes: `core::home` runs the checkpoint and restore triggers (`Core::checkpoint_home`,
//!   `Core::restore_home`) under the home's lock; `core::lost` records why a running computer's
//!   guest went away.
//!
//! What drives the core (`api`, `idle::job`, `live::authority`, `live::relay`, `jobs::worker`)
//! imports it; the core imports none of them (`scripts/module-cycles.py` checks it).

use crate::clock::now_ms;
use crate::cluster::Cluster;
use crate::computers::{
    new_computer_id, new_token, Computer, ComputerError, ComputerId, ComputerKind, ComputerState,
    ComputerStore, NewComputer, TokenHash,
};
use crate::db::Db;
use crate::guest::Guest;
use crate::homes::flow::{FlowError, RunCheckpoint};
use crate::lease::{Lease, LeaseError, LeaseStore, SqlLeaseStore};
use crate::live::store::LiveStoreError;
use crate::provider_set::ProviderSet;
use crate::schema::activity::{Cause, LifecycleKind as Lifecycle};
use crate::tunnel::{GuestAuth, Registry, TunnelError};
use gateway_proto::desktop::ScreenRelease;
use gateway_proto::{BotId, BotLease, LeaseToken, Op, Secret, UnaryOp};
use providers::{
    AnyProvider, ErrorClass, GuestEnrollment, MachineLimits, MachineState, ProviderError,
    ProviderRef, SandboxProvider, SandboxSpec,
};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn};

mod auth;
mod evict;
mod home;
mod jobs;
mod lost;
mod network;
mod ops;
mod pool;
mod secrets;

pub use auth::CoreAuth;
pub use lost::GUEST_LOSS_GRACE;
pub use network::{follow_network_policies, NetworkView};

/// How long `create` and `start` wait for a new guest to dial in.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an operation waits for a running computer's guest to (re)connect.
pub const OPERATION_CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Why a core operation failed; the API maps each case to a status.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    #[error("computer {0} not found")]
    NotFound(String),
    #[error("computer {id} is {state}")]
    NotRunning { id: String, state: ComputerState },
    #[error("provider {0:?} is not configured")]
    UnknownProvider(String),
    #[error("invalid limits: {0}")]
    BadLimits(String),
    #[error(
        "computer {id} is an unassigned member of pool {pool}: create a computer from the pool \
         (`rakazo computer create --pool {pool}`) to use one"
    )]
    PoolMember { id: String, pool: String },
    #[error(transparent)]
    Pool(#[from] crate::pools::PoolError),
    #[error("lease {lease} is not the live lease of bot {bot}")]
    StaleLease { bot: BotId, lease: LeaseToken },
    #[error(transparent)]
    Lease(#[from] LeaseError),
    #[error(transparent)]
    Computer(#[from] ComputerError),
    #[error(transparent)]
    Tunnel(#[from] TunnelError),
    #[error("provider failed")]
    Provider(#[from] ProviderError),
    #[error(transparent)]
    Home(#[from] crate::homes::HomeError),
    /// A maintenance job reserves the computer, or a job could not be read or changed.
    #[error(transparent)]
    Job(#[from] crate::jobs::JobError),
}

impl From<FlowError> for CoreError {
    fn from(e: FlowError) -> Self {
        match e {
            FlowError::Tunnel(e) => Self::Tunnel(e),
            FlowError::Home(e) => Self::Home(e),
        }
    }
}

/// How a run ended, given when its lease is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    Success,
    Failed,
    Cancelled,
}

/// How guests reach this control plane.
#[derive(Debug, Clone)]
pub struct Enrollment {
    pub control_addr: SocketAddr,
    /// The tunnel's TCP carrier, for guests whose UDP gets no answer.
    pub control_tcp_addr: SocketAddr,
    /// The tunnel's websocket on the HTTP API (`GET /v1/tunnel`).
    pub control_ws: Option<providers::ControlWs>,
    pub cert_sha256: String,
}

/// The control plane's state and decisions.
pub struct Core {
    pub computers: ComputerStore,
    pub leases: SqlLeaseStore,
    pub registry: Arc<Registry>,
    /// Live screens: per-bot generations, control leases, open streams.
    pub live: crate::live::LiveState,
    /// Home checkpoints and restores (docs/homes.md; flows in `homes::flow`).
    pub homes: Arc<crate::homes::HomeService>,
    /// Idle suspension: the claim, operations in flight, last use
    /// (docs/lifecycle.md#idle-suspension).
    pub idle: crate::idle::Idle,
    /// Maintenance jobs: the reservation they hold (docs/lifecycle.md#maintenance-jobs).
    pub jobs: crate::jobs::Jobs,
    providers: ProviderSet,
    enrollment: Enrollment,
    /// The other replicas on the same PostgreSQL, when there may be some (`crate::cluster`);
    /// `None` on SQLite, where one control plane is the only one.
    pub cluster: Option<Arc<Cluster>>,
    /// This process's metrics (`crate::metrics`): recorded by the router, the checkpoints and
    /// the idle job, encoded when scraped.
    pub metrics: Arc<crate::metrics::Metrics>,

    /// Each computer's activity feed: bots' commands and lifecycle changes with their reasons.
    pub activity: Arc<crate::activity::Activity>,
    /// Network policies: each computer's, each workspace's default (`core::network`).
    pub network: crate::network::NetworkStore,
    /// Workspaces' secrets, sealed (docs/security.md#secrets; `core::secrets`).
    pub secrets: crate::secrets::SecretStore,
    /// Scoped API tokens and console sessions (docs/security.md#api-tokens).
    pub tokens: crate::tokens::TokenStore,
    /// Preview URLs (docs/previews.md).
    pub previews: crate::preview::PreviewStore,
    /// Services: detached processes started again with their computer (`crate::services`).
    pub services: crate::services::ServiceStore,
    /// Screen recordings: which computers, and what was recorded (`crate::recordings`).
    pub recordings: crate::recordings::Recordings,
    /// Warm pools (docs/pools.md; `core::pool`).
    pub pools: crate::pools::PoolStore,
    /// Told whenever a pool may need refilling (a hand-out, a new or resized pool).
    pub pool_wake: Arc<tokio::sync::Notify>,
    /// Every computer whose machine this process booted (or restarted), once its guest is up:
    /// the API layer starts its services.
    pub booted: tokio::sync::broadcast::Sender<String>,
}

impl Core {
    pub fn new(
        db: Db,
        registry: Arc<Registry>,
        providers: ProviderSet,
        enrollment: Enrollment,
        homes: Arc<crate::homes::HomeService>,
        idle: crate::idle::IdleConfig,
    ) -> Self {
        let recording_blobs = homes.recording_blobs();
        Self {
            homes,
            idle: crate::idle::Idle::new(idle, db.clone()),
            activity: Arc::new(crate::activity::Activity::new(
                db.clone(),
                crate::activity::ActivityConfig::default(),
            )),
            jobs: crate::jobs::Jobs::new(db.clone()),
            network: crate::network::NetworkStore::new(db.clone()),
            tokens: crate::tokens::TokenStore::new(db.clone()),
            previews: crate::preview::PreviewStore::new(db.clone()),
            services: crate::services::ServiceStore::new(db.clone()),
            recordings: crate::recordings::Recordings::new(db.clone(), recording_blobs),
            pools: crate::pools::PoolStore::new(db.clone()),
            pool_wake: Arc::new(tokio::sync::Notify::new()),
            booted: tokio::sync::broadcast::channel(256).0,
            // A key of its own until `with_secrets_key` gives the configured one.
            secrets: crate::secrets::SecretStore::new(
                db.clone(),
                crate::secrets::SecretsKey::new(rand::random()),
            ),
            computers: ComputerStore::new(db.clone()),
            live: crate::live::LiveState::new(db.clone()),
            leases: SqlLeaseStore::new(db),
            registry,
            providers,
            enrollment,
            cluster: None,
            metrics: Arc::new(crate::metrics::Metrics::new()),
        }
    }

    /// Runs as one replica of `cluster`.
    pub fn with_cluster(mut self, cluster: Arc<Cluster>) -> Self {
        self.cluster = Some(cluster);
        self
    }

    /// Seals secrets with `key` (derived from the capability key, so replicas share it).
    pub fn with_secrets_key(mut self, db: Db, key: crate::secrets::SecretsKey) -> Self {
        self.secrets = crate::secrets::SecretStore::new(db, key);
        self
    }

    /// Records activity with `config` (`--activity-retention`).
    pub fn with_activity(mut self, db: Db, config: crate::activity::ActivityConfig) -> Self {
        self.activity = Arc::new(crate::activity::Activity::new(db, config));
        self
    }

    /// Waits until `id`'s guest is connected (here, or to another live replica).
    async fn wait_connected(&self, id: &str, timeout: Duration) -> Result<(), TunnelError> {
        match &self.cluster {
            None => self.registry.wait_connected(id, timeout).await.map(|_| ()),
            Some(cluster) => {
                if cluster.wait_connected(id, timeout).await {
                    Ok(())
                } else {
                    Err(TunnelError::NotConnected(id.to_owned()))
                }
            }
        }
    }

    /// Whether `id`'s guest is connected now (here, or to another live replica).
    pub async fn guest_connected(&self, id: &str) -> bool {
        match &self.cluster {
            None => self.registry.get(id).is_some(),
            Some(cluster) => cluster.is_connected(id).await,
        }
    }

    async fn spec(&self, c: &Computer, token: Secret) -> SandboxSpec {
        let other_replicas = match &self.cluster {
            Some(cluster) => cluster.other_tunnel_addrs().await,
            None => Vec::new(),
        };
        SandboxSpec {
            computer_id: c.id.as_str().to_string(),
            home_key: c.home_key.clone(),
            guest: GuestEnrollment {
                control_addr: self.enrollment.control_addr,
                control_tcp_addr: Some(self.enrollment.control_tcp_addr),
                control_ws: self.enrollment.control_ws.clone(),
                other_replicas,
                cert_sha256: self.enrollment.cert_sha256.clone(),
                token: providers::Secret(token.expose().to_string()),
            },
            limits: c.limits,
            placement: c.placement.clone(),
            network: match self.network.effective(c).await {
                Ok((policy, _)) => policy,
                Err(e) => {
                    warn!(computer_id = %c.id.as_str(), error = %e, "network policy unreadable: the computer starts with none");
                    Some(egress::Policy::none())
                }
            },
        }
    }

    /// The configured providers.
    pub fn providers(&self) -> &ProviderSet {
        &self.providers
    }

    /// Whether `c`'s provider is configured here (a computer of a removed kind is left to a
    /// `start`, which replaces it on the default provider).
    pub fn has_provider(&self, c: &Computer) -> bool {
        self.providers.get(&c.provider).is_some()
    }

    /// The provider `c` runs on.
    fn provider_of(&self, c: &Computer) -> Result<&AnyProvider, CoreError> {
        self.providers
            .get(&c.provider)
            .ok_or_else(|| CoreError::UnknownProvider(c.provider.clone()))
    }

    fn parse_id(id: &str) -> Result<ComputerId, CoreError> {
        ComputerId::new(id).map_err(|_| CoreError::NotFound(id.to_string()))
    }

    /// A computer that exists and is not destroyed.
    pub async fn get(&self, id: &str) -> Result<Computer, CoreError> {
        let cid = Self::parse_id(id)?;
        match self.computers.get(&cid).await? {
            Some(c) if c.state != ComputerState::Destroyed => Ok(c),
            _ => Err(CoreError::NotFound(id.to_string())),
        }
    }

    pub async fn list(&self) -> Result<Vec<Computer>, CoreError> {
        Ok(self.computers.list().await?)
    }

    /// Creates a computer, provisions its machine (at `placement`, if named) and waits for its
    /// guest to dial in. A placement the provider cannot honour is refused before the computer
    /// is made.
    pub async fn create(
        &self,
        kind: ComputerKind,
        provider: Option<&str>,
        limits: MachineLimits,
        placement: Option<String>,
    ) -> Result<Computer, CoreError> {
        self.create_from(kind, provider, limits, placement, None)
            .await
    }

    /// [`Core::create`]; with `fork`, the new computer's home first starts from revision `.1`
    /// (default: the latest) of computer `.0`'s, before its machine boots and restores it. A
    /// fork that fails leaves no computer behind.
    pub(crate) async fn create_from(
        &self,
        kind: ComputerKind,
        provider: Option<&str>,
        limits: MachineLimits,
        placement: Option<String>,
        fork: Option<(&Computer, Option<u64>)>,
    ) -> Result<Computer, CoreError> {
        let provider_kind = provider.unwrap_or(self.providers.default_kind());
        let Some(chosen) = self.providers.get(provider_kind) else {
            return Err(CoreError::UnknownProvider(provider_kind.to_string()));
        };
        limits.validate().map_err(CoreError::BadLimits)?;
        if let Some(p) = &placement {
            crate::computers::check_placement(p)?;
            chosen.check_placement(p)?;
        }
        let token = new_token();
        // A pool member's id is in its kind already (its home key names it).
        let id = match &kind {
            ComputerKind::Pool { member, .. } => member.clone(),
            _ => new_computer_id(),
        };
        let new = NewComputer {
            id,
            kind,
            provider: provider_kind.to_string(),
            token_hash: TokenHash::of(token.expose()),
            limits,
            placement,
        };
        let computer = self.computers.create(new, now_ms()).await?;
        info!(computer_id = %computer.id.as_str(), home_key = %computer.home_key, "computer created");
        let id = computer.id.as_str();
        let mut made = match computer.kind.pool() {
            Some(pool) => format!("booted on provider {provider_kind} for warm pool {pool}"),
            None => format!("created by a user on provider {provider_kind}"),
        };
        if let Some((src, n)) = fork {
            match self.seed_fork(&computer, src, n).await {
                Ok(from) => made = format!("{made}, forked from {} revision {from}", src.id),
                Err(e) => {
                    // Nothing ran on it: it goes, and its name and home are free again.
                    if let Err(gone) = self
                        .computers
                        .set_state(&computer.id, ComputerState::Destroyed, now_ms())
                        .await
                    {
                        warn!(computer_id = %id, error = %gone, "could not drop the computer of a failed fork");
                    }
                    return Err(e);
                }
            }
        }
        self.activity
            .lifecycle(id, Lifecycle::Created, Cause::User, made)
            .await;
        let booted = self.boot(&computer, None, token).await;
        self.record_boot(id, &booted, Cause::User, "first boot after create")
            .await;
        booted
    }

    /// Provisions (or restarts through `previous`) the machine with a fresh enrollment token,
    /// records it as running and waits for its guest.
    async fn boot(
        &self,
        c: &Computer,
        previous: Option<ProviderRef>,
        token: Secret,
    ) -> Result<Computer, CoreError> {
        // A computer whose provider kind is no longer configured moves to the default one: its
        // old reference means nothing there, so it gets a replacement
        // (docs/lifecycle.md#computers).
        let mut previous = previous;
        let c = if self.has_provider(c) {
            c.clone()
        } else {
            let to = self.providers.default_kind();
            warn!(computer_id = %c.id.as_str(), from = %c.provider, to, "provider not configured: replacing the machine on the default provider");
            self.computers.set_provider(&c.id, to, now_ms()).await?;
            previous = None;
            self.get(c.id.as_str()).await?
        };
        let provider = self.provider_of(&c)?;
        // Its gateway carries its workspace's secrets before its guest starts.
        self.push_secrets(&c).await;
        // A machine that runs after all (stopped on our side only) keeps its guest and token.
        let running = match &previous {
            Some(r) => matches!(provider.state(r).await, Ok(MachineState::Running)),
            None => false,
        };
        if !running {
            // Whatever connection the registry still holds is the old machine's: operations
            // must wait for the new guest, not use it.
            self.drop_guest(&c.id).await;
            // The token rotates with every boot: only its hash is stored, and only the new
            // guest learns the new one.
            self.computers
                .set_token_hash(&c.id, &TokenHash::of(token.expose()), now_ms())
                .await?;
            let spec = self.spec(&c, token).await;
            // A fresh machine (new, or a replacement for a gone one) has an empty home: it
            // imports the stored one before first use, and may not checkpoint until it has
            // (docs/homes.md).
            let (r, fresh) = match previous {
                Some(r) => match provider.prepare(&r, &spec).await {
                    Err(e) if e.class() == ErrorClass::Gone => {
                        info!(computer_id = %c.id.as_str(), provider_ref = %r, "machine gone: provisioning a replacement");
                        self.activity
                            .lifecycle(
                                c.id.as_str(),
                                Lifecycle::Gone,
                                Cause::MachineGone,
                                format!(
                                    "the provider no longer has the machine: {}",
                                    provider_error_text(&e)
                                ),
                            )
                            .await;
                        let replaced = Self::replace(provider, &c, &spec).await?;
                        let why = "a new machine replaces the gone one; the stored home is \
                                   restored into it";
                        self.activity
                            .lifecycle(c.id.as_str(), Lifecycle::Replaced, Cause::MachineGone, why)
                            .await;
                        (replaced, true)
                    }
                    other => (other?, false),
                },
                None => (provider.provision(&spec).await?, true),
            };
            // A pool member has no home until it is handed out (`core::pool`).
            if fresh && c.kind.pool().is_none() {
                self.homes
                    .ledger()
                    .set_pending_restore(&c.id, true)
                    .await
                    .map_err(crate::homes::HomeError::from)?;
            }
            self.computers
                .set_provider_ref(&c.id, Some(&r.0), now_ms())
                .await?;
        }
        // A home waiting for its restore (a fresh machine, or a create that failed half-way on
        // a machine that still runs) is restored before the computer is reported running.
        let pending = self
            .homes
            .ledger()
            .pending_restore(&c.id)
            .await
            .map_err(crate::homes::HomeError::from)?;
        let state = if pending {
            ComputerState::Provisioning
        } else {
            ComputerState::Running
        };
        self.computers.set_state(&c.id, state, now_ms()).await?;
        self.wait_connected(c.id.as_str(), CONNECT_TIMEOUT).await?;
        if pending {
            let booting = self.get(c.id.as_str()).await?;
            self.restore_and_record(
                &booting,
                Cause::FreshMachine,
                "the stored home was restored into a fresh machine",
            )
            .await?;
        }
        // A booted computer starts its idle timer afresh.
        self.idle
            .booted(&c.id)
            .await
            .map_err(crate::computers::ComputerError::from)?;
        self.get(c.id.as_str()).await
    }

    /// Provisions a replacement for `c`'s gone machine at its placement; if that place cannot
    /// take it (gone with the old machine, silent, no longer configured), wherever the provider
    /// chooses, with a WARN naming both: a computer is never left without a machine for want of
    /// its place. Its first machine (`create`) gets no such second chance: that caller is told.
    async fn replace(
        provider: &AnyProvider,
        c: &Computer,
        spec: &SandboxSpec,
    ) -> Result<ProviderRef, ProviderError> {
        let Some(asked) = &spec.placement else {
            return provider.provision(spec).await;
        };
        let err = match provider.provision(spec).await {
            Ok(r) => return Ok(r),
            Err(e) => e,
        };
        let anywhere = SandboxSpec {
            placement: None,
            ..spec.clone()
        };
        let r = provider.provision(&anywhere).await?;
        warn!(computer_id = %c.id.as_str(), placement = %asked, provider_ref = %r, error = %err, class = err.class().as_str(), "the computer's placement could not take its replacement machine: placed where the provider chose");
        Ok(r)
    }

    /// Makes sure a computer's machine and guest run: nothing if they do, a restart if the
    /// machine stopped, a replacement if it is gone.
    pub async fn start(&self, id: &str) -> Result<Computer, CoreError> {
        self.start_for(id, Cause::User, "started by a user").await
    }

    /// [`Core::start`] for `cause`, recorded with `reason` when it boots the machine.
    pub async fn start_for(
        &self,
        id: &str,
        cause: Cause,
        reason: &str,
    ) -> Result<Computer, CoreError> {
        let c = self.get(id).await?;
        self.unreserved_act(&c.id, || self.start_held(id, cause, reason))
            .await
    }

    /// [`Core::start`] once it holds the lifecycle claim and found no reservation.
    async fn start_held(
        &self,
        id: &str,
        cause: Cause,
        reason: &str,
    ) -> Result<Computer, CoreError> {
        let c = self.get(id).await?;
        let previous = c.provider_ref.clone().map(ProviderRef);
        if let (Some(r), Some(provider)) = (&previous, self.providers.get(&c.provider)) {
            if c.state == ComputerState::Running
                && provider.state(r).await? == MachineState::Running
            {
                self.wait_connected(c.id.as_str(), CONNECT_TIMEOUT).await?;
                return self.get(id).await;
            }
        }
        if c.state == ComputerState::Running {
            self.activity
                .lifecycle(
                    id,
                    Lifecycle::Crashed,
                    Cause::MachineStopped,
                    "the computer was running but its machine was not (crashed, killed or \
                     stopped outside Rakazo): started again by a user",
                )
                .await;
        }
        let booted = self.boot(&c, previous, new_token()).await;
        self.record_boot(id, &booted, cause, reason).await;
        booted
    }

    /// Records how a boot ended: started, or failed with its error.
    async fn record_boot(
        &self,
        id: &str,
        booted: &Result<Computer, CoreError>,
        cause: Cause,
        reason: &str,
    ) {
        match booted {
            Ok(_) => {
                self.activity
                    .lifecycle(id, Lifecycle::Started, cause, reason)
                    .await;
                // Nobody listening (no API in this process) is no error.
                let _ = self.booted.send(id.to_string());
            }
            Err(e) => {
                let cause = match e {
                    CoreError::Provider(_) => Cause::ProviderError,
                    _ => cause,
                };
                let error = match e {
                    CoreError::Provider(p) => provider_error_text(p),
                    other => other.to_string(),
                };
                self.activity
                    .lifecycle(
                        id,
                        Lifecycle::StartFailed,
                        cause,
                        format!("{reason} failed: {error}"),
                    )
                    .await
            }
        }
    }

    /// Stops a computer's machine, keeping its home. Checkpoints first (docs/homes.md#checkpoints);
    /// a failed checkpoint refuses the stop, so nothing newer than the stored revision is put at
    /// risk.
    pub async fn stop(&self, id: &str) -> Result<Computer, CoreError> {
        let c = self.get(id).await?;
        self.unreserved_act(&c.id, || self.stop_held(id)).await
    }

    /// [`Core::stop`] once it holds the lifecycle claim and found no reservation.
    async fn stop_held(&self, id: &str) -> Result<Computer, CoreError> {
        let c = self.get(id).await?;
        self.checkpoint_before_stop(&c).await?;
        let stopped = self.stop_machine(&c).await?;
        self.activity
            .lifecycle(
                id,
                Lifecycle::Stopped,
                Cause::User,
                "stopped by a user (home checkpointed first)",
            )
            .await;
        Ok(stopped)
    }

    /// Stops `c`'s machine without a checkpoint: the second half of [`Core::stop`], and what
    /// idle suspension does once it has checkpointed under its claim.
    pub(crate) async fn stop_machine(&self, c: &Computer) -> Result<Computer, CoreError> {
        let id = c.id.as_str();
        // The connection is closed while the machine's network still exists: a contained local
        // computer's link goes with its machine, and a close sent after it has nowhere to go.
        self.drop_guest(&c.id).await;
        if let Some(r) = &c.provider_ref {
            self.provider_of(c)?.stop(&ProviderRef(r.clone())).await?;
        }
        self.computers
            .set_state(&c.id, ComputerState::Stopped, now_ms())
            .await?;
        info!(computer_id = %c.id.as_str(), "computer stopped");
        self.get(id).await
    }

    /// Closes the computer's guest connection and records it as disconnected. The registry
    /// forgets the connection at once, so its own end-of-connection bookkeeping no longer
    /// speaks for the computer: without this, `computer show` said `connected: true` for a
    /// stopped computer until the control plane restarted.
    async fn drop_guest(&self, id: &ComputerId) {
        self.registry.disconnect(id.as_str());
        if let Some(cluster) = &self.cluster {
            // Connected to another replica: that one closes it (a dead one's guest is gone).
            if let Ok(Some(r)) = cluster.where_is(id.as_str()).await {
                if r.id != cluster.me().id {
                    if let Err(e) = cluster.peers.disconnect(&r, id.as_str()).await {
                        warn!(computer_id = %id.as_str(), replica = %r.id, error = %e, "could not ask the guest's replica to close its connection");
                    }
                }
            }
        }
        if let Err(e) = self.computers.set_connected(id, false, now_ms()).await {
            warn!(computer_id = %id.as_str(), error = %e, "could not record the guest as disconnected");
        }
    }

    /// Destroys a computer. Idempotent: an already destroyed computer is fine.
    pub async fn destroy(&self, id: &str) -> Result<(), CoreError> {
        let cid = Self::parse_id(id)?;
        let Some(c) = self.computers.get(&cid).await? else {
            return Err(CoreError::NotFound(id.to_string()));
        };
        if c.state == ComputerState::Destroyed {
            return Ok(());
        }
        self.unreserved_act(&cid, || self.destroy_held(&cid)).await
    }

    /// [`Core::destroy`] once it holds the lifecycle claim and found no reservation.
    async fn destroy_held(&self, cid: &ComputerId) -> Result<(), CoreError> {
        let id = cid.as_str();
        let Some(c) = self.computers.get(cid).await? else {
            return Err(CoreError::NotFound(id.to_string()));
        };
        // Destroyed while this waited for another action's claim.
        if c.state == ComputerState::Destroyed {
            return Ok(());
        }
        // Closed first, while the machine's network still exists (see `stop_machine`).
        self.drop_guest(&c.id).await;
        match (&c.provider_ref, self.providers.get(&c.provider)) {
            (Some(r), Some(provider)) => provider.destroy(&ProviderRef(r.clone())).await?,
            (Some(r), None) => {
                warn!(computer_id = %c.id.as_str(), provider = %c.provider, provider_ref = %r, "provider not configured: its machine, if any, is left to the operator")
            }
            (None, _) => {}
        }
        self.computers
            .set_state(&c.id, ComputerState::Destroyed, now_ms())
            .await?;
        info!(computer_id = %c.id.as_str(), "computer destroyed");
        if let Err(e) = self.previews.revoke_all(id, now_ms()).await {
            warn!(computer_id = %id, error = %e, "could not revoke the destroyed computer's previews (they answer 410 anyway)");
        }
        if let Err(e) = self.recordings.forget(id).await {
            warn!(computer_id = %id, error = %e, "could not delete the destroyed computer's recordings (they expire with the retention)");
        }
        self.activity
            .lifecycle(id, Lifecycle::Destroyed, Cause::User, "destroyed by a user")
            .await;
        Ok(())
    }

    /// On start-up: every computer is disconnected until its guest dials in; local machines
    /// that died with the host are started again.
    ///
    /// One replica of several marks disconnected only the computers whose guests were connected
    /// to replicas no longer alive, leaves alone those connected to a live one, and restarts a
    /// machine under a claim, so two replicas starting together do not both boot it.
    pub async fn recover(&self) -> Result<(), CoreError> {
        match &self.cluster {
            None => {
                self.computers.mark_all_disconnected(now_ms()).await?;
            }
            Some(cluster) => {
                for id in cluster
                    .orphaned_links()
                    .await
                    .map_err(ComputerError::from)?
                {
                    if let Ok(cid) = ComputerId::new(&id) {
                        self.computers.set_connected(&cid, false, now_ms()).await?;
                    }
                }
            }
        }
        for c in self.computers.list().await? {
            if c.state != ComputerState::Running {
                continue;
            }
            // A maintenance job's computer is the job's to replace (or, interrupted, the
            // operator's to release): never restarted behind its back.
            match self.jobs.store.reservation(&c.id).await {
                Ok(None) => {}
                Ok(Some(job)) => {
                    info!(computer_id = %c.id.as_str(), job_id = %job.id, state = %job.state, "computer reserved by a maintenance job: not restarted");
                    continue;
                }
                Err(e) => {
                    warn!(computer_id = %c.id.as_str(), error = %e, "could not read the computer's reservation: not restarted");
                    continue;
                }
            }
            let _claim = match &self.cluster {
                None => None,
                Some(cluster) => {
                    if cluster.is_connected(c.id.as_str()).await {
                        continue;
                    }
                    match cluster.claims.hold("boot", c.id.as_str()).await {
                        Ok(Some(held)) => Some(held),
                        Ok(None) => continue,
                        Err(e) => {
                            warn!(computer_id = %c.id.as_str(), error = %e, "could not claim the computer's recovery; another replica may do it");
                            continue;
                        }
                    }
                }
            };
            let running = match (&c.provider_ref, self.providers.get(&c.provider)) {
                (Some(r), Some(provider)) => match provider.state(&ProviderRef(r.clone())).await {
                    Ok(s) => s == MachineState::Running,
                    Err(e) => {
                        warn!(computer_id = %c.id.as_str(), error = %e, class = e.class().as_str(), "provider state unknown: trying to start it");
                        false
                    }
                },
                _ => false,
            };
            if !running {
                let previous = c.provider_ref.clone().map(ProviderRef);
                self.activity
                    .lifecycle(
                        c.id.as_str(),
                        Lifecycle::Crashed,
                        Cause::MachineStopped,
                        "the control plane restarted and found the machine not running: \
                         starting it again",
                    )
                    .await;
                let booted = self.boot(&c, previous, new_token()).await;
                self.record_boot(
                    c.id.as_str(),
                    &booted,
                    Cause::Recovery,
                    "restart after the control plane restarted",
                )
                .await;
                match booted {
                    Ok(_) => {
                        info!(computer_id = %c.id.as_str(), "computer restarted after control-plane restart")
                    }
                    Err(e) => {
                        warn!(computer_id = %c.id.as_str(), error = %e, "computer could not be restarted")
                    }
                }
            }
        }
        Ok(())
    }
}

/// A provider's error with its source, as the activity feed tells it.
fn provider_error_text(e: &ProviderError) -> String {
    match std::error::Error::source(e) {
        Some(src) => format!("{e}: {src}"),
        None => e.to_string(),
    }
}
