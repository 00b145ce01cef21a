//! The `docker` provider: one container per computer on one of several Docker engines (podman's
//! Docker-compatible service in tests), spoken through bollard over a unix socket or TCP with
//! TLS client certificates.
//!
//! A computer `<id>` is the container `rakazo-<id>` with its home in the named volume
//! `rakazo-home-<id>` at `/home/rakazo`; both carry the labels `io.rakazo.managed=true`,
//! `io.rakazo.computer=<id>` and `io.rakazo.home-key=<key>`. The volume outlives the container:
//! stop/start keeps it, and provisioning a computer whose container is gone mounts it again;
//! only `destroy` removes it. The reference is `<engine>/<container's full hex id>` (a bare id,
//! from before engines had names, is on the engine named `default`).
//!
//! A new computer goes to the engine its spec's placement names, else to the one with the fewest
//! Rakazo computers; an engine that lacks the image gets it from another ([`image::copy_image`]).
//! `fleet` decides when a silent engine's computers count as gone.
//!
//! The container runs `/usr/local/bin/rakazo-guest` as root under an init (the guest drops to
//! the workspace user itself). The enrollment token is never in the environment: before every
//! start it is uploaded as `/etc/rakazo/enroll-token` (0600, root) through the archive endpoint.
//!
//! Containment ([`DockerContainment`], `--docker-containment`): with `full`, a container has no
//! network of its engine's (network mode `none`); once it runs, the control plane (root, with the
//! engine on this host: a unix socket) names its network namespace and plumbs it exactly like a
//! local computer's (`local::net`: a veth to this host, nftables letting through the tunnel and
//! sending everything else to the egress gateway shared with local computers, `local::gate`).
//! The guest dials the tunnel at `local::net::FIXED_GATEWAY` and retries until the link is up.
//! Stop and destroy remove the link, the table and the namespace's name; a restarted control
//! plane adopts the running ones (the link's alias names the computer). `host-network` runs
//! containers on this host's network (`host`; for trusted setups and tests whose pages are on
//! this host's loopback); `off` uses `DockerConfig::network_mode` as it is.
//!
//! Every engine call has a deadline (a computer is untrusted and an engine may hang), and every
//! failure is sorted into the crate's classes by `engine::Failure`. Building the image the
//! containers run is `image`'s job; this module only refuses a missing one clearly.

mod container;
pub mod engine;
mod fleet;
pub mod image;
mod tar;
mod tls;

pub use engine::{connect_engine, Endpoint, TlsFiles};
pub use fleet::{engine_ref, valid_engine_name, EngineConfig, DEFAULT_ENGINE};

use crate::local::gate::SharedGate;
use crate::local::net;
use crate::{
    MachineExit, MachineLimits, MachineState, ProviderError, ProviderRef, SandboxProvider,
    SandboxSpec,
};
use bollard::models::{ContainerInspectResponse, ContainerStateStatusEnum, VolumeCreateRequest};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder, RemoveVolumeOptionsBuilder,
    StopContainerOptionsBuilder, UploadToContainerOptionsBuilder,
};
use bollard::Docker;
use container::{is_managed, label, labels, status, token_archive};
use engine::Failure;
use fleet::{split_ref, Engine, Fleet};
use std::path::PathBuf;
use std::time::Duration;
use tracing::{info, warn};

/// Label on every container and volume this provider creates; nothing else is ever touched.
pub const LABEL_MANAGED: &str = "io.rakazo.managed";
/// Label naming the computer a container or volume belongs to.
pub const LABEL_COMPUTER: &str = "io.rakazo.computer";
/// Label naming the home key of the computer.
pub const LABEL_HOME_KEY: &str = "io.rakazo.home-key";

/// Where the home volume is mounted, and the guest's `RAKAZO_HOME`.
pub const HOME_DIR: &str = "/home/rakazo";
/// Where the guest binary lives in the image.
pub const GUEST_PATH: &str = "/usr/local/bin/rakazo-guest";
/// Where the enrollment token is uploaded before every start (0600, root).
pub const TOKEN_PATH: &str = "/etc/rakazo/enroll-token";
/// The user the guest drops to after reading its token.
const RUN_AS: &str = "rakazo";
const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// `/dev/shm` when neither the computer nor the provider sets one: Chrome needs more than the
/// engines' 64 MiB default.
const DEFAULT_SHM_MB: u64 = 256;
const MIB: i64 = 1024 * 1024;
/// Deadline of the first call a destroy makes on another engine that was silent.
const SILENT_SWEEP_DEADLINE: Duration = Duration::from_secs(5);
/// Margin over the stop grace for the engine to answer a stop.
const STOP_MARGIN: Duration = Duration::from_secs(30);

/// How the docker provider reaches its engines and what it runs there.
#[derive(Debug, Clone)]
pub struct DockerConfig {
    /// The engines, in order of preference when they hold as many computers.
    pub engines: Vec<EngineConfig>,
    /// The image every computer runs, e.g. `rakazo-computer:<hash16>` (see [`image`]).
    pub image: String,
    /// How containers are contained (default here: `off`; `rakazo serve` defaults to `full`
    /// when it can).
    pub containment: DockerContainment,
    /// The egress gateway of fully contained computers (shared with the local provider).
    pub gate: SharedGate,
    /// `HostConfig.NetworkMode` with containment `off`. `None` leaves the engine's default
    /// network.
    pub network_mode: Option<String>,
    /// Limits for a computer whose spec leaves one unset.
    pub default_limits: MachineLimits,
    /// Extra environment for guests (log filter and the like); never secrets.
    pub guest_env: Vec<(String, String)>,
    /// How long a stopping guest gets after SIGTERM before SIGKILL: it closes browsers first.
    pub stop_grace: Duration,
    /// Deadline of one engine call (a stop gets `stop_grace` plus 30 s instead).
    pub call_timeout: Duration,
    /// How long an engine may answer nothing before its computers count as gone (and are
    /// replaced elsewhere, restored from their checkpoints); until then, a call on one of them
    /// is `Unavailable`.
    pub engine_gone_after: Duration,
}

impl DockerConfig {
    /// One engine named `default` on the unix socket `socket`, with the defaults: engine network,
    /// no default limits but `/dev/shm` 256 MiB, a 20 s stop grace, a 60 s call deadline, and an
    /// engine's computers gone after it has not answered for 2 minutes.
    pub fn new(socket: impl Into<PathBuf>, image: impl Into<String>) -> Self {
        Self::with_engines(vec![EngineConfig::unix(DEFAULT_ENGINE, socket)], image)
    }

    /// The same defaults on `engines`.
    pub fn with_engines(engines: Vec<EngineConfig>, image: impl Into<String>) -> Self {
        Self {
            engines,
            image: image.into(),
            containment: DockerContainment::Off,
            gate: SharedGate::default(),
            network_mode: None,
            default_limits: MachineLimits::default(),
            guest_env: Vec::new(),
            stop_grace: Duration::from_secs(20),
            call_timeout: Duration::from_secs(60),
            engine_gone_after: Duration::from_secs(120),
        }
    }
}

/// How a Docker computer is contained (`--docker-containment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DockerContainment {
    /// No network but a link to this host whose only way out is the egress gateway (a root
    /// control plane, engines on this host only).
    Full,
    /// This host's network (network mode `host`).
    HostNetwork,
    /// The configured network mode (`DockerConfig::network_mode`).
    Off,
}

impl DockerContainment {
    /// Parses `full`, `host-network` or `off`.
    pub fn parse(mode: &str) -> Result<Self, String> {
        match mode {
            "full" => Ok(Self::Full),
            "host-network" => Ok(Self::HostNetwork),
            "off" => Ok(Self::Off),
            other => Err(format!(
                "docker containment {other:?}: expected full, host-network or off"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::HostNetwork => "host-network",
            Self::Off => "off",
        }
    }

    /// Why `full` cannot work for these engines from this process, if it cannot: the network
    /// namespaces are plumbed from this host, as root.
    pub fn full_refused(engines: &[EngineConfig]) -> Option<String> {
        if !nix::unistd::geteuid().is_root() {
            return Some(
                "full docker containment needs a control plane running as root (it plumbs the \
                 containers' network namespaces)"
                    .into(),
            );
        }
        engines
            .iter()
            .find(|e| !matches!(e.endpoint, Endpoint::Unix(_)))
            .map(|e| {
                format!(
                    "full docker containment needs every engine on this host (a unix socket): \
                     engine {} is {}, whose containers' network namespaces are out of reach; \
                     use --docker-containment off there (its network is --docker-network)",
                    e.name, e.endpoint
                )
            })
    }
}

/// Runs computers as containers on Docker engines.
pub struct DockerProvider {
    fleet: Fleet,
    config: DockerConfig,
}

/// The container name of a computer.
pub fn container_name(computer_id: &str) -> String {
    format!("rakazo-{computer_id}")
}

/// The name of the volume holding a computer's home.
pub fn volume_name(computer_id: &str) -> String {
    format!("rakazo-home-{computer_id}")
}

/// A computer id usable in container and volume names (`[A-Za-z0-9][A-Za-z0-9_.-]*`, ≤ 128).
fn valid_computer_id(id: &str) -> bool {
    id.len() <= 128
        && id.starts_with(|c: char| c.is_ascii_alphanumeric())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl DockerProvider {
    /// Makes clients for every engine and agrees on an API version with each, within
    /// `config.call_timeout`. Fails with `Unavailable` only if no engine answers (the silent
    /// ones are tried again on use), and with `BadSpec` for a configuration that cannot work
    /// (no engine, two of one name, unreadable TLS files).
    pub async fn connect(config: DockerConfig) -> Result<Self, ProviderError> {
        let fleet = Fleet::new(
            &config.engines,
            config.call_timeout,
            config.engine_gone_after,
        )?;
        if config.containment == DockerContainment::Full {
            if let Some(why) = DockerContainment::full_refused(&config.engines) {
                return Err(ProviderError::BadSpec(why));
            }
        }
        fleet.connect(config.call_timeout).await?;
        let p = Self { fleet, config };
        match p.config.containment {
            DockerContainment::Full => {
                info!("docker computers are contained: no network but the egress gateway");
                p.adopt().await?;
            }
            DockerContainment::HostNetwork => warn!(
                "docker computers share this host's network (--docker-containment host-network): \
                 their commands reach its loopback services"
            ),
            DockerContainment::Off => warn!(
                network = p
                    .config
                    .network_mode
                    .as_deref()
                    .unwrap_or("the engine's default"),
                "docker computers are not contained (--docker-containment off): their network \
                 is the engine's"
            ),
        }
        Ok(p)
    }

    /// Starts the egress gateway and points the contained computers whose network outlived a
    /// control-plane restart at it: those with a home on an engine that answers.
    async fn adopt(&self) -> Result<(), ProviderError> {
        let gate = self.config.gate.get().await?;
        let mut ours = std::collections::HashSet::new();
        for e in self.fleet.engines().filter(|e| !e.silent()) {
            match e.homes(self.config.call_timeout, None).await {
                Ok(homes) => ours.extend(homes),
                Err(err) => {
                    warn!(engine = %e.name, error = %err, "docker engine not asked which computers are its own: their network is adopted on their next start")
                }
            }
        }
        // Their policy is `none` until the control plane sets each (it does at start); Docker
        // computers hold no secrets, so their trust files need nothing.
        gate.adopt(|id| ours.contains(&volume_name(id))).await;
        Ok(())
    }

    /// Plumbs the network namespace of the running container `id` (full containment only):
    /// its link, its table (the tunnel's endpoints open) and its place in the egress gateway.
    async fn contain(
        &self,
        e: &Engine,
        id: &str,
        r: &ProviderRef,
        spec: &SandboxSpec,
    ) -> Result<(), ProviderError> {
        if self.config.containment != DockerContainment::Full {
            return Ok(());
        }
        let info = self.inspect(e, id, r).await?;
        let pid = info
            .state
            .as_ref()
            .and_then(|s| s.pid)
            .and_then(|p| u32::try_from(p).ok())
            .filter(|p| *p > 0)
            .ok_or_else(|| ProviderError::Unavailable {
                context: format!("contain container {id}"),
                message: "the container is not running (its guest exited at once?)".into(),
            })?;
        let gate = self.config.gate.get().await?;
        let g = &spec.guest;
        let mut endpoints = vec![g.control_addr, g.tcp_addr()];
        endpoints.extend(g.other_replicas.iter().copied());
        let n = match net::ensure(
            &spec.computer_id,
            net::Place::Process(pid),
            &endpoints,
            Some(&gate.ports()),
        )
        .await
        {
            Ok(n) => n,
            Err(err) => {
                // Nothing half-made stays; the container keeps no network but its loopback.
                self.uncontain(&spec.computer_id).await;
                return Err(err);
            }
        };
        gate.attach(&spec.computer_id, n.addr, spec.network.clone());
        Ok(())
    }

    /// Removes what [`Self::contain`] made for `computer`; what is gone already is fine.
    async fn uncontain(&self, computer: &str) {
        if self.config.containment != DockerContainment::Full {
            return;
        }
        net::teardown(computer).await;
        if let Some(g) = self.config.gate.started() {
            g.detach(computer);
        }
    }

    /// A computer's network policy (`None`: computers are not fully contained here).
    pub fn network_policy(&self, computer: &str) -> Option<egress::Policy> {
        if self.config.containment != DockerContainment::Full {
            return None;
        }
        Some(self.config.gate.started()?.policy(computer))
    }

    /// Sets a running computer's network policy; new connections and queries see it at once.
    /// `false` when it is not running here or not fully contained.
    pub fn set_network_policy(&self, computer: &str, policy: egress::Policy) -> bool {
        self.config.containment == DockerContainment::Full
            && self
                .config
                .gate
                .started()
                .is_some_and(|g| g.set_policy(computer, policy))
    }

    /// The egress gateway its computers leave through, when they are fully contained.
    pub fn contained_by(&self) -> Option<&SharedGate> {
        (self.config.containment == DockerContainment::Full).then_some(&self.config.gate)
    }

    /// The first engine's client, for image management and tests.
    pub fn engine(&self) -> &Docker {
        self.fleet.first().client_now()
    }

    /// The client of the engine named `name`, for tests.
    pub fn engine_named(&self, name: &str) -> Option<&Docker> {
        self.fleet.get(name).map(Engine::client_now)
    }

    /// The provider's configuration.
    pub fn config(&self) -> &DockerConfig {
        &self.config
    }
    /// The engine and container id behind `r`; `None` if that engine is no longer configured
    /// (its computers are gone for us). A malformed reference is `BadRef`.
    fn locate<'a>(
        &'a self,
        r: &'a ProviderRef,
    ) -> Result<Option<(&'a Engine, &'a str)>, ProviderError> {
        let (name, id) = split_ref(r)?;
        Ok(self.fleet.get(name).map(|e| (e, id)))
    }

    /// `err`, a failure of a call on `e` about `r`; or `NotFound` if `e` has been silent long
    /// enough to be lost, so the computer is replaced elsewhere.
    fn unless_lost(&self, e: &Engine, r: &ProviderRef, err: ProviderError) -> ProviderError {
        match err {
            ProviderError::Unavailable { .. } if self.fleet.lost(e) => {
                ProviderError::NotFound(r.clone())
            }
            other => other,
        }
    }

    /// Inspects container `id` on `e`. A container that is missing, or that this provider did
    /// not create, is `NotFound`: the machine the reference meant is gone.
    async fn inspect(
        &self,
        e: &Engine,
        id: &str,
        r: &ProviderRef,
    ) -> Result<ContainerInspectResponse, ProviderError> {
        let context = format!("inspect container {id} on engine {}", e.name);
        let info = e
            .call(self.config.call_timeout, &context, |d| {
                d.inspect_container(id, None)
            })
            .await?
            .map_err(|err| Failure::of(&err).for_container(&context, r))?;
        if is_managed(&info) {
            Ok(info)
        } else {
            Err(ProviderError::NotFound(r.clone()))
        }
    }

    /// Writes the enrollment token into the (created or stopped) container `id`.
    async fn upload_token(
        &self,
        e: &Engine,
        id: &str,
        r: &ProviderRef,
        spec: &SandboxSpec,
    ) -> Result<(), ProviderError> {
        let context = format!("upload the enrollment token into container {id}");
        // A contained computer's DNS is its gateway's (the engine writes none for `none`).
        let resolv = (self.config.containment == DockerContainment::Full).then(|| {
            format!(
                "# the egress gateway of this computer\nnameserver {}\n",
                net::FIXED_GATEWAY
            )
        });
        let body = bollard::body_full(token_archive(&spec.guest.token.0, resolv.as_deref()).into());
        let options = UploadToContainerOptionsBuilder::default().path("/").build();
        e.call(self.config.call_timeout, &context, |d| {
            d.upload_to_container(id, Some(options), body)
        })
        .await?
        .map_err(|err| Failure::of(&err).for_container(&context, r))
    }

    async fn start(&self, e: &Engine, id: &str, r: &ProviderRef) -> Result<(), ProviderError> {
        let context = format!("start container {id}");
        e.call(self.config.call_timeout, &context, |d| {
            d.start_container(id, None)
        })
        .await?
        .map_err(|err| Failure::of(&err).for_container(&context, r))
    }

    /// Makes sure the home volume exists (an existing one is kept: it holds the home).
    async fn ensure_volume(&self, e: &Engine, spec: &SandboxSpec) -> Result<(), ProviderError> {
        let name = volume_name(&spec.computer_id);
        let context = format!("create volume {name}");
        let request = VolumeCreateRequest {
            name: Some(name.clone()),
            labels: Some(labels(spec)),
            ..Default::default()
        };
        match e
            .call(self.config.call_timeout, &context, |d| {
                d.create_volume(request)
            })
            .await?
        {
            Ok(_) => Ok(()),
            // Docker answers a create of an existing volume with that volume; podman may refuse
            // it as a conflict. Either way the volume is there.
            Err(err) => match Failure::of(&err) {
                Failure::Conflict(_) => Ok(()),
                f => Err(f.into_error(&context)),
            },
        }
    }

    /// Removes a container of ours named `name` left by an earlier provision that did not finish.
    async fn remove_leftover(&self, e: &Engine, name: &str) -> Result<(), ProviderError> {
        let context = format!("inspect container {name}");
        let info = match e
            .call(self.config.call_timeout, &context, |d| {
                d.inspect_container(name, None)
            })
            .await?
        {
            Ok(info) => info,
            Err(err) => {
                return match Failure::of(&err) {
                    Failure::Missing(_) => Ok(()),
                    f => Err(f.into_error(&context)),
                }
            }
        };
        if !is_managed(&info) {
            return Err(ProviderError::BadSpec(format!(
                "a container named {name} exists and is not managed by rakazo"
            )));
        }
        self.remove_container(e, name).await
    }

    /// Force-removes container `id_or_name`; one already gone is fine.
    async fn remove_container(&self, e: &Engine, id_or_name: &str) -> Result<(), ProviderError> {
        let context = format!("remove container {id_or_name}");
        let options = RemoveContainerOptionsBuilder::default().force(true).build();
        self.gone_is_fine(
            &context,
            e.call(self.config.call_timeout, &context, |d| {
                d.remove_container(id_or_name, Some(options))
            })
            .await?,
        )
    }

    /// Removes volume `name`; one already gone is fine.
    async fn remove_volume(&self, e: &Engine, name: &str) -> Result<(), ProviderError> {
        let context = format!("remove volume {name}");
        let options = RemoveVolumeOptionsBuilder::default().force(true).build();
        self.gone_is_fine(
            &context,
            e.call(self.config.call_timeout, &context, |d| {
                d.remove_volume(name, Some(options))
            })
            .await?,
        )
    }

    /// An engine's answer to a removal: success, or the object was not there.
    fn gone_is_fine(
        &self,
        context: &str,
        answer: Result<(), bollard::errors::Error>,
    ) -> Result<(), ProviderError> {
        match answer {
            Ok(()) => Ok(()),
            Err(err) => match Failure::of(&err) {
                Failure::Missing(_) => Ok(()),
                f => Err(f.into_error(context)),
            },
        }
    }

    /// Whether `e` has the computer image.
    async fn has_image(&self, e: &Engine) -> Result<bool, ProviderError> {
        let image = &self.config.image;
        let context = format!("inspect image {image} on engine {}", e.name);
        match e
            .call(self.config.call_timeout, &context, |d| {
                d.inspect_image(image)
            })
            .await?
        {
            Ok(_) => Ok(true),
            Err(err) => match Failure::of(&err) {
                Failure::Missing(_) => Ok(false),
                f => Err(f.into_error(&context)),
            },
        }
    }

    /// Makes sure `e` has the computer image, copying it from another engine that has it;
    /// refuses with a message saying how to build it when none has.
    async fn ensure_image(&self, e: &Engine) -> Result<(), ProviderError> {
        if self.has_image(e).await? {
            return Ok(());
        }
        let _loading = e.image_load.lock().await;
        // Another provision may have loaded it while this one waited.
        if self.has_image(e).await? {
            return Ok(());
        }
        let t = self.config.call_timeout;
        for source in self
            .fleet
            .engines()
            .filter(|s| s.name != e.name && !s.silent())
        {
            if !matches!(self.has_image(source).await, Ok(true)) {
                continue;
            }
            info!(image = %self.config.image, from = %source.name, to = %e.name,
                  "copying the computer image to a docker engine that lacks it");
            return image::copy_image(
                source.docker(t).await?,
                e.docker(t).await?,
                &self.config.image,
            )
            .await;
        }
        Err(self.missing_image())
    }

    /// `spec` with the enrollment's addresses as the guest dials them from its container: with
    /// full containment, those on this host's loopback at the fixed gateway address (the HTTP
    /// API is not reachable from inside; the tunnel's UDP and TCP are).
    fn as_seen_inside(&self, spec: &SandboxSpec) -> SandboxSpec {
        let mut spec = spec.clone();
        if self.config.containment == DockerContainment::Full {
            let g = &mut spec.guest;
            let inside = |a| net::inside_addr(net::FIXED_GATEWAY, a);
            g.control_tcp_addr = Some(inside(g.tcp_addr()));
            g.control_addr = inside(g.control_addr);
            g.other_replicas = g.other_replicas.iter().map(|a| inside(*a)).collect();
            g.control_ws = None;
        }
        spec
    }

    fn missing_image(&self) -> ProviderError {
        let image = &self.config.image;
        ProviderError::BadSpec(if self.fleet.len() == 1 {
            format!("image {image} is not on the engine: run `rakazo image build`")
        } else {
            format!("image {image} is on none of the docker engines: run `rakazo image build`")
        })
    }

    /// Removes what `computer` left on the engines other than `except` (its container and home
    /// from before it was replaced elsewhere, on an engine that has come back). An engine that
    /// fails keeps its leftovers; one that was silent gets a short deadline, so a destroy does not
    /// wait long on a dead engine.
    async fn sweep(&self, computer: &str, except: &Engine) {
        for e in self.fleet.engines().filter(|e| e.name != except.name) {
            let was_silent = e.silent();
            let deadline = if was_silent {
                self.config.call_timeout.min(SILENT_SWEEP_DEADLINE)
            } else {
                self.config.call_timeout
            };
            match self.sweep_engine(e, computer, deadline).await {
                Ok(()) => {}
                Err(err) if was_silent => {
                    info!(engine = %e.name, computer_id = computer, error = %err,
                          "docker engine still silent: what the destroyed computer left there stays");
                }
                Err(err) => {
                    warn!(engine = %e.name, computer_id = computer, error = %err,
                          "what a destroyed docker computer left on another engine was not removed");
                }
            }
        }
    }

    async fn sweep_engine(
        &self,
        e: &Engine,
        computer: &str,
        deadline: Duration,
    ) -> Result<(), ProviderError> {
        let homes = e.homes(deadline, Some(computer)).await?;
        if homes.is_empty() {
            return Ok(());
        }
        // The container has the computer's name on every engine.
        let name = container_name(computer);
        let context = format!("inspect container {name} on engine {}", e.name);
        match e
            .call(self.config.call_timeout, &context, |d| {
                d.inspect_container(&name, None)
            })
            .await?
        {
            Ok(info) if is_managed(&info) && label(&info, LABEL_COMPUTER) == Some(computer) => {
                self.remove_container(e, &name).await?;
            }
            Ok(_) => {}
            Err(err) => match Failure::of(&err) {
                Failure::Missing(_) => {}
                f => return Err(f.into_error(&context)),
            },
        }
        for home in homes {
            self.remove_volume(e, &home).await?;
        }
        info!(computer_id = computer, engine = %e.name, "what a destroyed docker computer left on another engine is removed");
        Ok(())
    }

    /// Provisions a computer on the engine `spec.placement` names, or, with `None`, on the one
    /// with the fewest Rakazo computers among those that answer. A named engine that does not
    /// answer is `Unavailable`; an unknown name, `BadSpec` listing the configured ones.
    async fn provision_placed(&self, spec: &SandboxSpec) -> Result<ProviderRef, ProviderError> {
        let began = tokio::time::Instant::now();
        if !valid_computer_id(&spec.computer_id) {
            return Err(ProviderError::BadSpec(format!(
                "computer id {:?} is not usable in a container name",
                spec.computer_id
            )));
        }
        spec.limits.validate().map_err(ProviderError::BadSpec)?;
        let placed = self
            .fleet
            .place(spec.placement.as_deref(), self.config.call_timeout)
            .await?;
        let e = placed.0;
        self.ensure_image(e).await?;
        self.ensure_volume(e, spec).await?;
        let name = container_name(&spec.computer_id);
        self.remove_leftover(e, &name).await?;

        let context = format!("create container {name} on engine {}", e.name);
        let options = CreateContainerOptionsBuilder::default().name(&name).build();
        let body = container::container_body(&self.config, &self.as_seen_inside(spec));
        let created = e
            .call(self.config.call_timeout, &context, |d| {
                d.create_container(Some(options), body)
            })
            .await?
            .map_err(|err| match Failure::of(&err) {
                // Nothing else a create names can be missing (the volume was just made).
                Failure::Missing(_) => self.missing_image(),
                f => f.into_error(&context),
            })?;
        let id = created.id;
        if id.len() != 64 || !fleet::is_container_id(&id) {
            return Err(ProviderError::Unavailable {
                context,
                message: format!("the engine answered a malformed container id {id:?}"),
            });
        }
        let r = engine_ref(&e.name, &id);
        self.upload_token(e, &id, &r, spec).await?;
        self.start(e, &id, &r).await?;
        self.contain(e, &id, &r, spec).await?;
        info!(
            computer_id = %spec.computer_id,
            engine = %e.name,
            container = %id,
            elapsed_ms = began.elapsed().as_millis() as u64,
            "docker computer provisioned"
        );
        Ok(r)
    }

    async fn prepare_on(
        &self,
        e: &Engine,
        id: &str,
        r: &ProviderRef,
        spec: &SandboxSpec,
    ) -> Result<ProviderRef, ProviderError> {
        let info = self.inspect(e, id, r).await?;
        if label(&info, LABEL_COMPUTER) != Some(spec.computer_id.as_str()) {
            return Err(ProviderError::BadSpec(format!(
                "container {id} belongs to computer {:?}, not {}",
                label(&info, LABEL_COMPUTER).unwrap_or(""),
                spec.computer_id
            )));
        }
        match status(&info) {
            Some(ContainerStateStatusEnum::RUNNING | ContainerStateStatusEnum::RESTARTING) => {
                // Its network may predate this control plane (or be gone): made sure of again.
                self.contain(e, id, r, spec).await?;
                return Ok(r.clone());
            }
            Some(ContainerStateStatusEnum::REMOVING) => {
                return Err(ProviderError::NotFound(r.clone()))
            }
            // A paused guest is alive and enrolled: let it run on.
            Some(ContainerStateStatusEnum::PAUSED) => {
                let context = format!("unpause container {id}");
                return e
                    .call(self.config.call_timeout, &context, |d| {
                        d.unpause_container(id)
                    })
                    .await?
                    .map(|()| r.clone())
                    .map_err(|err| Failure::of(&err).for_container(&context, r));
            }
            _ => {}
        }
        // Every boot gets the token of this boot: the previous one was rotated away.
        self.upload_token(e, id, r, spec).await?;
        self.start(e, id, r).await?;
        self.contain(e, id, r, spec).await?;
        info!(computer_id = %spec.computer_id, engine = %e.name, container = %id, "docker computer started");
        Ok(r.clone())
    }

    async fn stop_on(&self, e: &Engine, id: &str, r: &ProviderRef) -> Result<(), ProviderError> {
        let info = self.inspect(e, id, r).await?;
        let context = format!("stop container {id}");
        let grace = self.config.stop_grace;
        let options = StopContainerOptionsBuilder::default()
            .t(i32::try_from(grace.as_secs()).unwrap_or(i32::MAX))
            .build();
        // 304 (already stopped) is success in bollard.
        self.gone_is_fine(
            &context,
            e.call(grace + STOP_MARGIN, &context, |d| {
                d.stop_container(id, Some(options))
            })
            .await?,
        )?;
        if let Some(computer) = label(&info, LABEL_COMPUTER) {
            self.uncontain(computer).await;
        }
        Ok(())
    }

    async fn destroy_on(&self, e: &Engine, id: &str, r: &ProviderRef) -> Result<(), ProviderError> {
        // Without the container, nothing records which volume was its home.
        let info = self.inspect(e, id, r).await?;
        self.remove_container(e, id).await?;
        let Some(computer) = label(&info, LABEL_COMPUTER) else {
            return Ok(());
        };
        self.uncontain(computer).await;
        self.remove_volume(e, &volume_name(computer)).await?;
        info!(computer_id = %computer, engine = %e.name, container = %id, "docker computer destroyed");
        self.sweep(computer, e).await;
        Ok(())
    }
}

impl SandboxProvider for DockerProvider {
    fn kind(&self) -> &'static str {
        "docker"
    }

    /// Containers on our own engines cost nothing extra while they run.
    fn bills_while_running(&self) -> bool {
        false
    }

    /// A placement is the name of a configured engine.
    fn check_placement(&self, placement: &str) -> Result<(), ProviderError> {
        self.fleet
            .get(placement)
            .map(|_| ())
            .ok_or_else(|| self.fleet.unknown(placement))
    }

    async fn provision(&self, spec: &SandboxSpec) -> Result<ProviderRef, ProviderError> {
        self.provision_placed(spec).await
    }

    async fn prepare(
        &self,
        r: &ProviderRef,
        spec: &SandboxSpec,
    ) -> Result<ProviderRef, ProviderError> {
        let Some((e, id)) = self.locate(r)? else {
            return Err(ProviderError::NotFound(r.clone()));
        };
        self.prepare_on(e, id, r, spec)
            .await
            .map_err(|err| self.unless_lost(e, r, err))
    }

    async fn state(&self, r: &ProviderRef) -> Result<MachineState, ProviderError> {
        let Some((e, id)) = self.locate(r)? else {
            return Ok(MachineState::Gone);
        };
        let info = match self.inspect(e, id, r).await {
            Ok(info) => info,
            Err(err) => {
                return match self.unless_lost(e, r, err) {
                    ProviderError::NotFound(_) => Ok(MachineState::Gone),
                    other => Err(other),
                }
            }
        };
        Ok(match status(&info) {
            Some(ContainerStateStatusEnum::RUNNING | ContainerStateStatusEnum::RESTARTING) => {
                MachineState::Running
            }
            Some(ContainerStateStatusEnum::REMOVING) => MachineState::Gone,
            _ => MachineState::Stopped,
        })
    }

    async fn exit(&self, r: &ProviderRef) -> Result<MachineExit, ProviderError> {
        let Some((e, id)) = self.locate(r)? else {
            return Ok(MachineExit::Gone);
        };
        match self.inspect(e, id, r).await {
            Ok(info) => Ok(container::exit_of(&info)),
            Err(err) => match self.unless_lost(e, r, err) {
                ProviderError::NotFound(_) => Ok(MachineExit::Gone),
                other => Err(other),
            },
        }
    }

    async fn stop(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        let Some((e, id)) = self.locate(r)? else {
            return Ok(());
        };
        match self.stop_on(e, id, r).await {
            Ok(()) => Ok(()),
            Err(err) => match self.unless_lost(e, r, err) {
                ProviderError::NotFound(_) => Ok(()),
                other => Err(other),
            },
        }
    }

    async fn destroy(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        let Some((e, id)) = self.locate(r)? else {
            warn!(provider_ref = %r, "docker computer destroyed on an engine no longer configured: what it left there stays");
            return Ok(());
        };
        match self.destroy_on(e, id, r).await {
            Ok(()) => Ok(()),
            Err(err) => match self.unless_lost(e, r, err) {
                ProviderError::NotFound(_) if self.fleet.lost(e) => {
                    warn!(engine = %e.name, provider_ref = %r, "docker computer destroyed on a lost engine: its container and home stay there");
                    Ok(())
                }
                ProviderError::NotFound(_) => Ok(()),
                other => Err(other),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_are_container_ids() {
        assert!(split_ref(&ProviderRef("0123456789ab".into())).is_ok());
        assert!(split_ref(&ProviderRef("a".repeat(64))).is_ok());
        for bad in [
            "",
            "0123456789a",
            "0123456789AB",
            "../etc/passwd",
            &"a".repeat(65),
        ] {
            assert!(
                matches!(
                    split_ref(&ProviderRef(bad.into())),
                    Err(ProviderError::BadRef(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn computer_ids_fit_container_names() {
        assert!(valid_computer_id("c-1_x.y"));
        for bad in ["", "-x", ".x", "a/b", "a b", &"a".repeat(129)] {
            assert!(!valid_computer_id(bad), "{bad:?}");
        }
        assert_eq!(container_name("c1"), "rakazo-c1");
        assert_eq!(volume_name("c1"), "rakazo-home-c1");
    }
}
