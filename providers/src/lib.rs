//! Where computers run: the [`SandboxProvider`] trait and its backends.
//!
//! A provider owns a machine's lifecycle only: provision (or reconnect through an opaque
//! [`ProviderRef`]), prepare, stop, destroy. Everything that happens *inside* a computer (exec,
//! files, screens) is served by the guest agent over its tunnel, the same for every provider, so
//! adapters stay thin: they translate, with no retries, polling or policy of their own.
//!
//! This crate knows nothing of the control plane's internals: it receives a [`SandboxSpec`]
//! (what to start and how the guest reaches home) and returns references and states.

#![forbid(unsafe_code)]

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;

pub mod daytona;
pub mod docker;
pub mod e2b;
pub mod fake;
pub mod kubernetes;
pub mod local;
mod process;
mod remote;

pub use daytona::DaytonaProvider;
pub use docker::DockerProvider;
pub use e2b::E2bProvider;
pub use fake::FakeProvider;
pub use kubernetes::KubernetesProvider;
pub use local::LocalProvider;
pub use remote::http::BaseUrl;

/// Opaque provider-specific reference to a machine. An acceleration path, not durable data: a
/// reference that no longer resolves means a replacement machine.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ProviderRef(pub String);

impl fmt::Debug for ProviderRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProviderRef({})", self.0)
    }
}

impl fmt::Display for ProviderRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A secret whose `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// What a provider needs to start a computer's guest.
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    /// The control plane's id for the computer.
    pub computer_id: String,
    /// The computer's home key (`team-<workspace>` or a bot id).
    pub home_key: String,
    /// How the guest dials home.
    pub guest: GuestEnrollment,
    /// Resource limits for the machine; providers that cannot enforce one ignore it.
    pub limits: MachineLimits,
    /// Where the caller asked the machine to go, in the provider's own terms: a docker engine's
    /// name, a Daytona region. `None`: wherever the provider chooses. A provider with no such
    /// notion refuses one with `BadSpec` naming it ([`SandboxProvider::check_placement`]), so a
    /// caller is never silently ignored.
    pub placement: Option<String>,
    /// The computer's egress policy; `None`: the provider's default. A provider that contains
    /// computers behind the egress gateway applies it from the first packet; the others map what
    /// they can (see [`AnyProvider::network_enforcement`]).
    pub network: Option<egress::Policy>,
}

/// Per-computer resource limits. `None` leaves the provider's default.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(deny_unknown_fields)]
pub struct MachineLimits {
    /// Memory limit in MiB (16..=1048576).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 16, maximum = 1048576)]
    pub memory_mb: Option<u64>,
    /// CPU limit in thousandths of a CPU (100..=256000, i.e. 0.1 to 256 CPUs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 100, maximum = 256000)]
    pub cpu_millis: Option<u32>,
    /// Maximum number of processes (16..=1000000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 16, maximum = 1000000)]
    pub pids: Option<u32>,
    /// Size of `/dev/shm` in MiB (1..=65536). Chrome needs it; 256 is a sensible value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 65536)]
    pub shm_mb: Option<u64>,
}

impl MachineLimits {
    /// Checks every set limit against its bounds; the message names the limit and its range.
    pub fn validate(&self) -> Result<(), String> {
        fn check<T: PartialOrd + fmt::Display + Copy>(
            name: &str,
            v: Option<T>,
            lo: T,
            hi: T,
        ) -> Result<(), String> {
            match v {
                Some(v) if v < lo || v > hi => {
                    Err(format!("{name} must be between {lo} and {hi}, got {v}"))
                }
                _ => Ok(()),
            }
        }
        check("memory_mb", self.memory_mb, 16, 1 << 20)?;
        check("cpu_millis", self.cpu_millis, 100, 256_000)?;
        check("pids", self.pids, 16, 1_000_000)?;
        check("shm_mb", self.shm_mb, 1, 65_536)
    }
}

/// The guest's enrollment: where to dial, which certificate to pin, which token to present.
///
/// Every provider hands all of it to the guest: `RAKAZO_CONTROL_ADDR` = `control_addr`,
/// `RAKAZO_CONTROL_TCP_ADDR` = [`GuestEnrollment::tcp_addr`], `RAKAZO_CONTROL_CERT_SHA256` =
/// `cert_sha256`, [`GuestEnrollment::ws_env`] when the tunnel's websocket is offered,
/// [`GuestEnrollment::replicas_env`] (`RAKAZO_CONTROL_ADDRS`) when other control-plane replicas
/// are, and the token through a file or the environment, never argv.
#[derive(Debug, Clone)]
pub struct GuestEnrollment {
    /// The tunnel's QUIC (UDP) address.
    pub control_addr: SocketAddr,
    /// The tunnel's TCP address, dialled when UDP gets no answer (the same QUIC connection over
    /// the TCP carrier). `None`: the same address as `control_addr`, over TCP.
    pub control_tcp_addr: Option<SocketAddr>,
    /// The tunnel's websocket on the control plane's HTTP API, dialled when UDP and TCP both
    /// fail.
    pub control_ws: Option<ControlWs>,
    /// The other control-plane replicas' tunnel addresses (QUIC on UDP, and the TCP carrier on
    /// the same port), which the guest tries in turn when this one is unreachable or draining.
    /// They share the database and present the same certificate (`cert_sha256`).
    pub other_replicas: Vec<SocketAddr>,
    pub cert_sha256: String,
    pub token: Secret,
}

/// Where the tunnel's websocket carrier is (`GET /v1/tunnel` on the HTTP API).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlWs {
    /// `http://host:port/v1/tunnel` or `https://...` (`RAKAZO_CONTROL_WS_URL`).
    pub url: String,
    /// For https: the API certificate's SHA-256 (`RAKAZO_CONTROL_API_CERT_SHA256`); the guest
    /// has no CA roots.
    pub api_cert_sha256: Option<String>,
}

impl GuestEnrollment {
    /// The websocket's variables for the guest (none when it is not offered).
    pub fn ws_env(&self) -> Vec<(&'static str, String)> {
        let Some(ws) = &self.control_ws else {
            return Vec::new();
        };
        let mut env = vec![("RAKAZO_CONTROL_WS_URL", ws.url.clone())];
        if let Some(pin) = &ws.api_cert_sha256 {
            env.push(("RAKAZO_CONTROL_API_CERT_SHA256", pin.clone()));
        }
        env
    }

    /// The other replicas' variable for the guest: `RAKAZO_CONTROL_ADDRS`, comma-separated
    /// `ip:port` (none when there are no other replicas).
    pub fn replicas_env(&self) -> Vec<(&'static str, String)> {
        if self.other_replicas.is_empty() {
            return Vec::new();
        }
        let list: Vec<String> = self.other_replicas.iter().map(|a| a.to_string()).collect();
        vec![("RAKAZO_CONTROL_ADDRS", list.join(","))]
    }

    /// The TCP address the guest falls back to (`RAKAZO_CONTROL_TCP_ADDR`).
    pub fn tcp_addr(&self) -> SocketAddr {
        self.control_tcp_addr.unwrap_or(self.control_addr)
    }
}

/// A provider's view of a machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MachineState {
    Running,
    Stopped,
    /// The machine no longer exists: provision a replacement.
    Gone,
}

/// What became of a machine whose guest went away, as far as its provider can tell
/// ([`SandboxProvider::exit`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MachineExit {
    /// The machine still runs: only its guest went away (it died, or its network is cut).
    Running,
    /// The machine stopped without being asked to by us.
    Stopped {
        /// Its main process's exit code, where the provider reports one (137: killed by
        /// SIGKILL).
        exit_code: Option<i64>,
        /// Whether the provider says it was killed for running out of memory.
        oom_killed: bool,
        /// The provider's own words about the exit, if any (bounded, never a secret).
        detail: Option<String>,
    },
    /// The machine no longer exists (removed, or its engine is lost).
    Gone,
}

impl MachineExit {
    /// The exit a provider without more to say reports: its [`MachineState`].
    pub fn from_state(state: MachineState) -> Self {
        match state {
            MachineState::Running => Self::Running,
            MachineState::Stopped => Self::Stopped {
                exit_code: None,
                oom_killed: false,
                detail: None,
            },
            MachineState::Gone => Self::Gone,
        }
    }
}

/// Why a provider operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The machine no longer exists: a replacement is provisioned (class `Gone`).
    #[error("machine {0} not found")]
    NotFound(ProviderRef),
    /// The reference does not parse (class `Invalid`).
    #[error("provider reference {0:?} is malformed")]
    BadRef(String),
    /// The request cannot succeed as asked: bad spec, missing image, refused options (class
    /// `Invalid`).
    #[error("invalid sandbox spec: {0}")]
    BadSpec(String),
    /// Out of quota or capacity: retrying later or elsewhere may work (class `Capacity`).
    #[error("provider has no capacity: {0}")]
    Capacity(String),
    /// The provider or its engine could not be reached or failed on its side (class
    /// `Transient`): the same call may succeed later.
    #[error("provider unavailable: {context}: {message}")]
    Unavailable { context: String, message: String },
    /// A local i/o failure (class `Transient`).
    #[error("provider i/o failed: {context}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// What the control plane does about a [`ProviderError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The machine is gone: provision a replacement and restore its home.
    Gone,
    /// Quota or capacity: report it; a later try may work.
    Capacity,
    /// A passing failure: the same call may work later.
    Transient,
    /// The request is wrong: report it; retrying cannot help.
    Invalid,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gone => "gone",
            Self::Capacity => "capacity",
            Self::Transient => "transient",
            Self::Invalid => "invalid",
        }
    }
}

impl ProviderError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }

    /// The class `core` decides on: retry, replace or report.
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::NotFound(_) => ErrorClass::Gone,
            Self::BadRef(_) | Self::BadSpec(_) => ErrorClass::Invalid,
            Self::Capacity(_) => ErrorClass::Capacity,
            Self::Unavailable { .. } | Self::Io { .. } => ErrorClass::Transient,
        }
    }
}

/// The refusal of a provider (`kind`) that has no places to choose from.
/// `spec`'s placement, if any, checked by `p` ([`SandboxProvider::check_placement`]).
pub(crate) fn check_spec_placement(
    p: &impl SandboxProvider,
    spec: &SandboxSpec,
) -> Result<(), ProviderError> {
    spec.placement
        .as_deref()
        .map_or(Ok(()), |placement| p.check_placement(placement))
}

/// A place computers run. Small, async, idempotent.
pub trait SandboxProvider: Send + Sync {
    /// The provider kind stored beside references (`local`, `docker`, ...).
    fn kind(&self) -> &'static str;

    /// Whether a running machine costs money while it runs (a metered cloud sandbox). The
    /// control plane's idle policy reads it: a takeover request keeps a non-billing machine
    /// awake for a fixed window, while on a billed one it only restarts the idle timer
    /// (docs/lifecycle.md#takeover).
    fn bills_while_running(&self) -> bool;

    /// Whether a spec's [`SandboxSpec::placement`] can be honoured, checked before anything is
    /// created: `BadSpec` naming it if the place is unknown or the provider has no places to
    /// choose from (the default: a provider with places overrides it). `provision` refuses the
    /// same placements.
    fn check_placement(&self, placement: &str) -> Result<(), ProviderError> {
        Err(ProviderError::BadSpec(format!(
            "placement {placement:?} cannot be honoured: the {} provider has no places to choose \
             from",
            self.kind()
        )))
    }

    /// Creates a machine for `spec` and starts its guest, which dials home on its own.
    fn provision(
        &self,
        spec: &SandboxSpec,
    ) -> impl Future<Output = Result<ProviderRef, ProviderError>> + Send;

    /// Makes sure the machine behind `r` runs its guest (starting it again if stopped).
    /// Idempotent. Returns the (possibly new) reference; `NotFound` means provision anew.
    fn prepare(
        &self,
        r: &ProviderRef,
        spec: &SandboxSpec,
    ) -> impl Future<Output = Result<ProviderRef, ProviderError>> + Send;

    /// The machine's state as the provider sees it.
    fn state(
        &self,
        r: &ProviderRef,
    ) -> impl Future<Output = Result<MachineState, ProviderError>> + Send;

    /// What became of the machine behind `r`, asked when its guest went away unexpectedly: still
    /// running, stopped (with its exit code and whether it ran out of memory, where the provider
    /// says), or gone. By default what [`SandboxProvider::state`] says; a provider that knows
    /// more (docker's inspect) says more.
    fn exit(
        &self,
        r: &ProviderRef,
    ) -> impl Future<Output = Result<MachineExit, ProviderError>> + Send {
        async move { self.state(r).await.map(MachineExit::from_state) }
    }
    /// Stops the machine, keeping its home. Stopping a stopped machine succeeds.
    fn stop(&self, r: &ProviderRef) -> impl Future<Output = Result<(), ProviderError>> + Send;

    /// Destroys the machine. Idempotent: destroying a machine that is already gone succeeds.
    fn destroy(&self, r: &ProviderRef) -> impl Future<Output = Result<(), ProviderError>> + Send;
}

/// The backends, picked at run time.
pub enum AnyProvider {
    Local(LocalProvider),
    Docker(DockerProvider),
    E2b(E2bProvider),
    Daytona(DaytonaProvider),
    Kubernetes(KubernetesProvider),
    Fake(FakeProvider),
}

macro_rules! dispatch {
    ($self:ident, $p:ident => $e:expr) => {
        match $self {
            AnyProvider::Local($p) => $e,
            AnyProvider::Docker($p) => $e,
            AnyProvider::E2b($p) => $e,
            AnyProvider::Daytona($p) => $e,
            AnyProvider::Kubernetes($p) => $e,
            AnyProvider::Fake($p) => $e,
        }
    };
}

/// How a provider holds a computer to its network policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkEnforcement {
    /// Behind the egress gateway: every name, address and port is checked, and a change applies
    /// to the next connection and query.
    Gateway,
    /// Not enforced: the computers of this provider, as configured, are not behind the gateway.
    /// The policy is stored and applies once they are.
    NotEnforced(&'static str),
}

impl AnyProvider {
    /// How this provider, as configured, enforces network policies.
    pub fn network_enforcement(&self) -> NetworkEnforcement {
        match self {
            AnyProvider::Local(p) if p.containment() == local::Containment::Full => {
                NetworkEnforcement::Gateway
            }
            AnyProvider::Local(_) => NetworkEnforcement::NotEnforced(
                "local computers are not network-contained here (--local-containment, or the \
                 control plane is not root)",
            ),
            AnyProvider::Docker(p) if p.contained_by().is_some() => NetworkEnforcement::Gateway,
            AnyProvider::Docker(_) => NetworkEnforcement::NotEnforced(
                "docker computers are not network-contained here (--docker-containment)",
            ),
            AnyProvider::E2b(_) | AnyProvider::Daytona(_) => NetworkEnforcement::NotEnforced(
                "sandbox services' own network controls are not mapped yet",
            ),
            AnyProvider::Kubernetes(_) => NetworkEnforcement::NotEnforced(
                "kubernetes computers are held by a NetworkPolicy each (the tunnel and the address \
                 ranges of their policy; names are not reachable), which the cluster's network \
                 plugin must enforce; the egress gateway does not run in the cluster",
            ),
            AnyProvider::Fake(_) => {
                NetworkEnforcement::NotEnforced("fake computers have no network of their own")
            }
        }
    }

    /// Whether this provider's computers, as configured, have a loopback of their own: only
    /// then may a preview URL reach a port on it (docs/previews.md). `Err` says why not.
    pub fn own_loopback(&self) -> Result<(), &'static str> {
        match self {
            AnyProvider::Local(p) if p.containment() == local::Containment::Full => Ok(()),
            AnyProvider::Local(_) => Err(
                "local computers here share this host's network (--local-containment, or the \
                 control plane is not root): a port on their loopback is this host's",
            ),
            AnyProvider::Docker(p) => match p.config().containment {
                docker::DockerContainment::Full => Ok(()),
                docker::DockerContainment::Off
                    if p.config().network_mode.as_deref() != Some("host") =>
                {
                    Ok(())
                }
                _ => Err(
                    "docker computers here share this host's network (--docker-containment \
                     host-network, or network mode host): a port on their loopback is this \
                     host's",
                ),
            },
            AnyProvider::E2b(_) | AnyProvider::Daytona(_) | AnyProvider::Kubernetes(_) => Ok(()),
            AnyProvider::Fake(_) => Err("fake computers have no network of their own"),
        }
    }

    /// The egress gateway this provider's computers leave through, when they are contained
    /// (local and Docker computers share one).
    pub fn contained_by(&self) -> Option<&local::SharedGate> {
        match self {
            AnyProvider::Local(p) => p.contained_by(),
            AnyProvider::Docker(p) => p.contained_by(),
            _ => None,
        }
    }

    /// The policy of a computer nobody set one for, where this provider enforces policies.
    pub fn default_network_policy(&self) -> Option<&egress::Policy> {
        self.contained_by().map(|g| &g.config().default_policy)
    }

    /// The computers behind this provider's egress gateway now (every contained computer of
    /// the control plane: the gateway is shared).
    pub fn contained_computers(&self) -> Vec<String> {
        self.contained_by()
            .and_then(|g| g.started())
            .map_or_else(Vec::new, |g| g.computers())
    }

    /// The egress gateway's aggregated decisions (`network.allowed` / `network.denied`), once:
    /// providers that share the gateway share its events, and the first to ask takes them.
    pub fn take_network_events(&self) -> Option<tokio::sync::mpsc::Receiver<egress::Event>> {
        self.contained_by()?.started()?.take_events()
    }

    /// [`AnyProvider::contained_computers`] with their counters.
    pub fn network_counters(&self) -> Vec<(String, egress::CounterSnapshot)> {
        self.contained_by()
            .and_then(|g| g.started())
            .map_or_else(Vec::new, |g| g.counters())
    }

    /// Applies `policy` to running computer `computer` now. `false` when it is not running
    /// here behind the gateway (a stopped one gets it at its next start).
    pub fn set_network_policy(&self, computer: &str, policy: egress::Policy) -> bool {
        match self {
            AnyProvider::Local(p) => p.set_network_policy(computer, policy),
            AnyProvider::Docker(p) => p.set_network_policy(computer, policy),
            _ => false,
        }
    }
}

impl SandboxProvider for AnyProvider {
    fn kind(&self) -> &'static str {
        dispatch!(self, p => p.kind())
    }

    fn bills_while_running(&self) -> bool {
        dispatch!(self, p => p.bills_while_running())
    }

    fn check_placement(&self, placement: &str) -> Result<(), ProviderError> {
        dispatch!(self, p => p.check_placement(placement))
    }

    async fn provision(&self, spec: &SandboxSpec) -> Result<ProviderRef, ProviderError> {
        dispatch!(self, p => p.provision(spec).await)
    }

    async fn prepare(
        &self,
        r: &ProviderRef,
        spec: &SandboxSpec,
    ) -> Result<ProviderRef, ProviderError> {
        dispatch!(self, p => p.prepare(r, spec).await)
    }

    async fn state(&self, r: &ProviderRef) -> Result<MachineState, ProviderError> {
        dispatch!(self, p => p.state(r).await)
    }

    async fn exit(&self, r: &ProviderRef) -> Result<MachineExit, ProviderError> {
        dispatch!(self, p => p.exit(r).await)
    }

    async fn stop(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        dispatch!(self, p => p.stop(r).await)
    }

    async fn destroy(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        dispatch!(self, p => p.destroy(r).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(placement: &str) -> SandboxSpec {
        SandboxSpec {
            computer_id: "c-1".into(),
            home_key: "team-w".into(),
            guest: GuestEnrollment {
                control_addr: "127.0.0.1:9".parse().unwrap(),
                control_ws: None,
                control_tcp_addr: None,
                other_replicas: Vec::new(),
                cert_sha256: "ab".into(),
                token: Secret("t".into()),
            },
            limits: MachineLimits::default(),
            placement: Some(placement.into()),
            network: None,
        }
    }

    #[tokio::test]
    async fn providers_without_places_refuse_a_placement_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let e2b = e2b::E2bConfig::new(Secret("k".into()), "tpl", "/g");
        for p in [
            AnyProvider::Local(LocalProvider::new(dir.path().join("l"), "/no/guest")),
            AnyProvider::Fake(FakeProvider::new(dir.path().join("f"), None)),
            AnyProvider::E2b(E2bProvider::new(e2b).unwrap()),
        ] {
            let kind = p.kind();
            for err in [
                p.check_placement("b").unwrap_err(),
                p.provision(&spec("b")).await.unwrap_err(),
            ] {
                assert!(matches!(err, ProviderError::BadSpec(_)), "{kind}: {err:?}");
                let msg = err.to_string();
                assert!(
                    msg.contains("placement \"b\"") && msg.contains(kind),
                    "{kind}: {msg}"
                );
            }
        }
        // Nothing was made on the way.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
