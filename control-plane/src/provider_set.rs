//! Every configured provider at once: `rakazo serve`'s provider flags, their checks, and the
//! [`ProviderSet`] the core picks from by kind (`local`, `docker`, `e2b`, `daytona`,
//! `kubernetes`, `fake`).
//!
//! The API keys of E2B and Daytona come from the environment (`E2B_API_KEY`,
//! `DAYTONA_API_KEY`) or from a file only its owner can read, never from argv.
//!
//! A computer records the kind it was created on; restart recovery and every lifecycle call use
//! that kind's provider. A computer whose kind is no longer configured gets a replacement on the
//! default provider, restored from its last checkpoint (docs/lifecycle.md#computers: a changed
//! provider kind means a replacement machine).

mod kube;

use anyhow::{bail, Context};
use clap::Args;
use providers::daytona::DaytonaConfig;
use providers::docker::{DockerContainment, Endpoint, EngineConfig, TlsFiles, DEFAULT_ENGINE};
use providers::e2b::E2bConfig;
use providers::local::{Containment, GateConfig, SharedGate};
use providers::{
    AnyProvider, BaseUrl, DaytonaProvider, DockerProvider, E2bProvider, FakeProvider,
    KubernetesProvider, LocalProvider, MachineLimits, SandboxProvider, Secret,
};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The kinds `rakazo serve` knows.
pub const KINDS: [&str; 6] = ["local", "docker", "e2b", "daytona", "kubernetes", "fake"];
/// Environment variable holding the E2B API key (or use `--e2b-api-key-file`).
pub const E2B_KEY_ENV: &str = "E2B_API_KEY";
/// Environment variable holding the Daytona API key (or use `--daytona-api-key-file`).
pub const DAYTONA_KEY_ENV: &str = "DAYTONA_API_KEY";

/// `rakazo serve` flags of the providers.
#[derive(Debug, Clone, Args)]
pub struct ProviderArgs {
    /// Providers to run computers on, comma-separated: local, docker, e2b, daytona, kubernetes,
    /// fake (fake is for tests: its computers run as this process's user, without isolation).
    #[arg(
        long,
        env = "RAKAZO_PROVIDERS",
        value_delimiter = ',',
        default_value = "local"
    )]
    pub providers: Vec<String>,
    /// The provider of `computer create` without `--provider` (default: the first configured).
    #[arg(long, env = "RAKAZO_DEFAULT_PROVIDER")]
    pub default_provider: Option<String>,
    /// The tunnel address guests dial, when it differs from the listening address (a machine
    /// elsewhere, a container on a bridge network, NAT). Default: the tunnel's bound address.
    #[arg(long, env = "RAKAZO_ADVERTISE_ADDR")]
    pub advertise_addr: Option<SocketAddr>,
    /// Where local computers' directories live, outside the data dir (default:
    /// /var/lib/rakazo-computers for a root control plane, whose computers then run as users
    /// of their own; `computers/` in the data dir otherwise).
    #[arg(long, env = "RAKAZO_LOCAL_ROOT")]
    pub local_root: Option<PathBuf>,
    /// How a root control plane contains local computers: `full` (each in its own root,
    /// process list and network, whose only way out is --local-egress), `host-network` (own
    /// root and processes, this host's network: its loopback services are reachable) or `off`
    /// (a user per computer only). A non-root control plane cannot contain them.
    #[arg(long, env = "RAKAZO_LOCAL_CONTAINMENT", default_value = "full")]
    pub local_containment: String,
    /// The network policy of a fully contained computer, local or Docker: `open` (the internet,
    /// never private, shared, link-local or loopback ranges), `none`, or an allow-list such as
    /// `allow github.com *.pythonhosted.org:443 203.0.113.0/24:22 deny gist.github.com`.
    #[arg(long, env = "RAKAZO_LOCAL_EGRESS", default_value = "open")]
    pub local_egress: String,
    /// Names the egress gateway's resolver answers itself, NAME=IP, comma-separated (an
    /// internal mirror, test hosts); other names are asked of this host's resolvers.
    #[arg(long, env = "RAKAZO_EGRESS_HOSTS", value_delimiter = ',')]
    pub egress_hosts: Vec<String>,
    /// More CAs (PEM files, comma-separated) the real servers of secrets' domains may chain
    /// to, besides this host's trust store (an internal PKI, test hosts).
    #[arg(long, env = "RAKAZO_EGRESS_CA_FILE", value_delimiter = ',')]
    pub egress_ca_file: Vec<PathBuf>,
    /// More host paths contained local computers see, read-only (absolute, comma-separated;
    /// e.g. tools under /opt). The system directories (/usr, /etc) are always there.
    #[arg(long, env = "RAKAZO_LOCAL_JAIL_RO_BIND", value_delimiter = ',')]
    pub local_jail_ro_bind: Vec<PathBuf>,
    /// The Docker Engine API socket (podman's Docker-compatible service works): the engine
    /// named `default`. Default: /var/run/docker.sock, unless --docker-engine names the engines.
    #[arg(long, env = "RAKAZO_DOCKER_SOCKET")]
    pub docker_socket: Option<PathBuf>,
    /// More Docker engines, NAME=unix:///path or NAME=tcp://host:port (TLS with a client
    /// certificate, see --docker-tls-*), repeated or comma-separated. A new computer goes to the
    /// engine with the fewest Rakazo computers among those that answer.
    #[arg(
        long = "docker-engine",
        env = "RAKAZO_DOCKER_ENGINES",
        value_delimiter = ','
    )]
    pub docker_engines: Vec<String>,
    /// The CA a tcp engine's certificate must chain to, NAME=PATH (PEM), one per tcp engine.
    #[arg(long, env = "RAKAZO_DOCKER_TLS_CA", value_delimiter = ',')]
    pub docker_tls_ca: Vec<String>,
    /// The client certificate presented to a tcp engine, NAME=PATH (PEM).
    #[arg(long, env = "RAKAZO_DOCKER_TLS_CERT", value_delimiter = ',')]
    pub docker_tls_cert: Vec<String>,
    /// That certificate's private key, NAME=PATH (PEM, mode 0600).
    #[arg(long, env = "RAKAZO_DOCKER_TLS_KEY", value_delimiter = ',')]
    pub docker_tls_key: Vec<String>,
    /// Seconds a Docker engine may answer nothing before its computers count as gone: a start
    /// then replaces one on another engine, restored from its checkpoint (before that, 503).
    #[arg(
        long,
        env = "RAKAZO_DOCKER_ENGINE_GONE_AFTER_SECS",
        default_value_t = 120
    )]
    pub docker_engine_gone_after_secs: u64,
    /// The computer image (`rakazo image build` prints it); an engine that lacks it gets it
    /// from one that has it.
    #[arg(long, env = "RAKAZO_DOCKER_IMAGE")]
    pub docker_image: Option<String>,
    /// How Docker computers are contained: `full` (no network but a link to this host whose
    /// only way out is the egress gateway, as local computers; a root control plane with engines
    /// on unix sockets only), `host-network` (this host's network: its loopback services are
    /// reachable) or `off` (--docker-network). Default: `full` when it can work, else `off`
    /// with a warning.
    #[arg(long, env = "RAKAZO_DOCKER_CONTAINMENT")]
    pub docker_containment: Option<String>,
    /// The containers' network mode with --docker-containment off (default: the engine's
    /// default bridge).
    #[arg(long, env = "RAKAZO_DOCKER_NETWORK")]
    pub docker_network: Option<String>,
    /// Default memory limit of a Docker computer, MiB.
    #[arg(long, env = "RAKAZO_DOCKER_MEMORY_MB")]
    pub docker_memory_mb: Option<u64>,
    /// Default CPU limit of a Docker computer, in thousandths of a CPU.
    #[arg(long, env = "RAKAZO_DOCKER_CPU_MILLIS")]
    pub docker_cpu_millis: Option<u32>,
    /// Default process limit of a Docker computer.
    #[arg(long, env = "RAKAZO_DOCKER_PIDS")]
    pub docker_pids: Option<u32>,
    /// Default `/dev/shm` size of a Docker computer, MiB (256 when unset).
    #[arg(long, env = "RAKAZO_DOCKER_SHM_MB")]
    pub docker_shm_mb: Option<u64>,
    /// Where the fake provider keeps its machines (default: `fake/` in the data dir).
    #[arg(long, env = "RAKAZO_FAKE_ROOT")]
    pub fake_root: Option<PathBuf>,
    /// The static rakazo-guest uploaded into E2B and Daytona sandboxes (default: the guest
    /// binary of local computers).
    #[arg(long, env = "RAKAZO_REMOTE_GUEST_BIN")]
    pub remote_guest_bin: Option<PathBuf>,
    /// E2B's API.
    #[arg(
        long,
        env = "RAKAZO_E2B_API_URL",
        default_value = "https://api.e2b.app"
    )]
    pub e2b_api_url: String,
    /// File (mode 0600) holding the E2B API key (or set E2B_API_KEY).
    #[arg(long, env = "RAKAZO_E2B_API_KEY_FILE")]
    pub e2b_api_key_file: Option<PathBuf>,
    /// The E2B template computers start from (it must carry Xvnc, from
    /// tigervnc-standalone-server, and Chromium).
    #[arg(long, env = "RAKAZO_E2B_TEMPLATE")]
    pub e2b_template: Option<String>,
    /// E2B's sandbox domain: the daemon of sandbox <id> is https://49983-<id>.<domain>.
    #[arg(long, env = "RAKAZO_E2B_DOMAIN", default_value = "e2b.app")]
    pub e2b_domain: String,
    /// One URL for every E2B sandbox's daemon, requests routed by header (E2B's
    /// E2B_SANDBOX_URL).
    #[arg(long, env = "RAKAZO_E2B_SANDBOX_URL")]
    pub e2b_sandbox_url: Option<String>,
    /// The sandbox user an E2B guest drops to after reading its token (`none`: it stays root).
    #[arg(long, env = "RAKAZO_E2B_RUN_AS", default_value = "user")]
    pub e2b_run_as: String,
    /// The computer's home in an E2B sandbox.
    #[arg(
        long,
        env = "RAKAZO_E2B_HOME",
        default_value = "/home/user/rakazo-home"
    )]
    pub e2b_home: String,
    /// Seconds an E2B sandbox lives without a refresh; refreshed every third of it while its
    /// computer is in use (an expired one pauses).
    #[arg(long, env = "RAKAZO_E2B_TIMEOUT_SECS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(3..=86_400))]
    pub e2b_timeout_secs: u64,
    /// Daytona's API.
    #[arg(
        long,
        env = "RAKAZO_DAYTONA_API_URL",
        default_value = "https://app.daytona.io/api"
    )]
    pub daytona_api_url: String,
    /// File (mode 0600) holding the Daytona API key (or set DAYTONA_API_KEY).
    #[arg(long, env = "RAKAZO_DAYTONA_API_KEY_FILE")]
    pub daytona_api_key_file: Option<PathBuf>,
    /// The Daytona snapshot computers start from (it must carry Xvnc, from
    /// tigervnc-standalone-server, and Chromium).
    #[arg(long, env = "RAKAZO_DAYTONA_SNAPSHOT")]
    pub daytona_snapshot: Option<String>,
    /// The Daytona region (`target`; default: Daytona's).
    #[arg(long, env = "RAKAZO_DAYTONA_TARGET")]
    pub daytona_target: Option<String>,
    /// CIDRs Daytona sandboxes may reach, comma-separated; the control plane's address is
    /// added (unset: Daytona's default network).
    #[arg(long, env = "RAKAZO_DAYTONA_NETWORK_ALLOW", value_delimiter = ',')]
    pub daytona_network_allow: Vec<String>,
    /// Disk of a Daytona sandbox, GB (default: the snapshot's).
    #[arg(long, env = "RAKAZO_DAYTONA_DISK_GB")]
    pub daytona_disk_gb: Option<u32>,
    /// The kubernetes provider's flags (`--kube-*`).
    #[command(flatten)]
    pub kube: kube::KubeArgs,
}

/// Checked provider settings.
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    pub kinds: Vec<&'static str>,
    pub default: &'static str,
    pub advertise_addr: Option<SocketAddr>,
    pub local_root: Option<PathBuf>,
    pub local_containment: Containment,
    pub local_gate: GateConfig,
    pub local_jail_ro_bind: Vec<PathBuf>,
    pub docker: Option<DockerSettings>,
    pub fake_root: Option<PathBuf>,
    /// The E2B adapter's settings; its guest and guest env are filled in by
    /// [`ProviderSet::build`].
    pub e2b: Option<E2bConfig>,
    /// The Daytona adapter's settings, completed the same way.
    pub daytona: Option<DaytonaConfig>,
    /// The guest uploaded into remote sandboxes (`None`: the local guest).
    pub remote_guest_bin: Option<PathBuf>,
    /// The kubernetes provider's settings; its guest env is filled in by
    /// [`ProviderSet::build`].
    pub kubernetes: Option<providers::kubernetes::KubeConfig>,
}

/// The Docker provider's settings.
#[derive(Debug, Clone)]
pub struct DockerSettings {
    pub engines: Vec<EngineConfig>,
    pub image: String,
    /// `None`: full when it can work, else off (decided when the provider is built).
    pub containment: Option<DockerContainment>,
    pub network: Option<String>,
    pub limits: MachineLimits,
    pub engine_gone_after: std::time::Duration,
}

impl Default for ProviderConfig {
    /// Local computers only, as before providers were configurable.
    fn default() -> Self {
        Self {
            kinds: vec!["local"],
            default: "local",
            advertise_addr: None,
            local_root: None,
            local_containment: Containment::Full,
            local_gate: GateConfig::default(),
            local_jail_ro_bind: Vec::new(),
            docker: None,
            fake_root: None,
            e2b: None,
            daytona: None,
            remote_guest_bin: None,
            kubernetes: None,
        }
    }
}

fn known_kind(k: &str) -> anyhow::Result<&'static str> {
    KINDS
        .iter()
        .copied()
        .find(|x| *x == k.trim())
        .with_context(|| {
            format!(
                "unknown provider {:?}: expected one of {}",
                k.trim(),
                KINDS.join(", ")
            )
        })
}

fn base_url(flag: &str, url: &str) -> anyhow::Result<BaseUrl> {
    BaseUrl::parse(url).map_err(|e| anyhow::anyhow!("--{flag}: {e}"))
}

impl ProviderArgs {
    /// Checks the flags and reads the API keys from the process environment or their files.
    pub fn resolve(&self) -> anyhow::Result<ProviderConfig> {
        self.resolve_with(&crate::homes::config::process_env)
    }

    /// Checks the flags: known kinds, a default among them, what docker, e2b and daytona need.
    /// `env` reads one variable (the process environment, a map in tests).
    pub fn resolve_with(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<ProviderConfig> {
        let mut kinds = Vec::new();
        for k in self.providers.iter().filter(|k| !k.trim().is_empty()) {
            let k = known_kind(k)?;
            if !kinds.contains(&k) {
                kinds.push(k);
            }
        }
        let Some(first) = kinds.first().copied() else {
            bail!(
                "--providers names no provider: expected some of {}",
                KINDS.join(", ")
            );
        };
        let default = match &self.default_provider {
            Some(d) => {
                let d = known_kind(d)?;
                if !kinds.contains(&d) {
                    bail!(
                        "the default provider {d:?} is not among --providers ({})",
                        kinds.join(",")
                    );
                }
                d
            }
            None => first,
        };
        let docker = if kinds.contains(&"docker") {
            let Some(image) = self.docker_image.clone().filter(|i| !i.trim().is_empty()) else {
                bail!("the docker provider needs --docker-image (RAKAZO_DOCKER_IMAGE): run `rakazo image build`");
            };
            let limits = MachineLimits {
                memory_mb: self.docker_memory_mb,
                cpu_millis: self.docker_cpu_millis,
                pids: self.docker_pids,
                shm_mb: self.docker_shm_mb,
            };
            limits
                .validate()
                .map_err(|e| anyhow::anyhow!("docker default limits: {e}"))?;
            let containment = match self.docker_containment.as_deref().map(str::trim) {
                None | Some("") => None,
                Some(c) => Some(
                    DockerContainment::parse(c)
                        .map_err(|e| anyhow::anyhow!("--docker-containment: {e}"))?,
                ),
            };
            let network = self.docker_network.clone().filter(|n| !n.trim().is_empty());
            if network.is_some() && containment != Some(DockerContainment::Off) {
                bail!(
                    "--docker-network (RAKAZO_DOCKER_NETWORK) is the network of \
                     --docker-containment off only: set that too, or unset it to contain \
                     Docker computers"
                );
            }
            Some(DockerSettings {
                engines: self.docker_engines()?,
                image,
                containment,
                network,
                limits,
                engine_gone_after: std::time::Duration::from_secs(
                    self.docker_engine_gone_after_secs,
                ),
            })
        } else {
            None
        };
        Ok(ProviderConfig {
            e2b: if kinds.contains(&"e2b") {
                Some(self.e2b(env)?)
            } else {
                None
            },
            daytona: if kinds.contains(&"daytona") {
                Some(self.daytona(env)?)
            } else {
                None
            },
            kubernetes: if kinds.contains(&"kubernetes") {
                Some(self.kube.resolve()?)
            } else {
                None
            },
            kinds,
            default,
            advertise_addr: self.advertise_addr,
            local_root: self.local_root.clone(),
            local_containment: Containment::parse(&self.local_containment)
                .map_err(|e| anyhow::anyhow!("--local-containment: {e}"))?,
            local_gate: self.local_gate()?,
            local_jail_ro_bind: self.local_jail_ro_bind.clone(),
            docker,
            fake_root: self.fake_root.clone(),
            remote_guest_bin: self.remote_guest_bin.clone(),
        })
    }

    /// `--local-egress` and `--egress-hosts`.
    fn local_gate(&self) -> anyhow::Result<GateConfig> {
        let default_policy = self
            .local_egress
            .parse()
            .map_err(|e| anyhow::anyhow!("--local-egress {:?}: {e}", self.local_egress))?;
        let mut hosts = Vec::new();
        for h in self.egress_hosts.iter().filter(|h| !h.trim().is_empty()) {
            let (name, ip) = h
                .trim()
                .split_once('=')
                .ok_or_else(|| anyhow::anyhow!("--egress-hosts {h:?}: expected NAME=IP"))?;
            let ip = ip.parse().map_err(|_| {
                anyhow::anyhow!("--egress-hosts {h:?}: {ip:?} is not an IP address")
            })?;
            hosts.push((name.to_ascii_lowercase(), ip));
        }
        Ok(GateConfig {
            default_policy,
            hosts,
            upstream_ca_files: self.egress_ca_file.clone(),
            ..GateConfig::default()
        })
    }

    /// The Docker engines: `default` on --docker-socket, then every --docker-engine (with its
    /// TLS files); /var/run/docker.sock alone when neither is given.
    fn docker_engines(&self) -> anyhow::Result<Vec<EngineConfig>> {
        let per_engine =
            |flag: &str, values: &[String]| -> anyhow::Result<BTreeMap<String, PathBuf>> {
                let mut map = BTreeMap::new();
                for v in values.iter().filter(|v| !v.trim().is_empty()) {
                    let Some((name, path)) = v.trim().split_once('=') else {
                        bail!("--{flag} {v:?}: expected NAME=PATH");
                    };
                    if map.insert(name.to_string(), PathBuf::from(path)).is_some() {
                        bail!("--{flag} names engine {name} twice");
                    }
                }
                Ok(map)
            };
        let ca = per_engine("docker-tls-ca", &self.docker_tls_ca)?;
        let cert = per_engine("docker-tls-cert", &self.docker_tls_cert)?;
        let key = per_engine("docker-tls-key", &self.docker_tls_key)?;
        let tls = |name: &str| -> Option<TlsFiles> {
            Some(TlsFiles {
                ca: ca.get(name)?.clone(),
                cert: cert.get(name)?.clone(),
                key: key.get(name)?.clone(),
            })
        };
        let mut engines = Vec::new();
        if let Some(socket) = &self.docker_socket {
            engines.push(EngineConfig::unix(DEFAULT_ENGINE, socket.clone()));
        }
        for spec in self.docker_engines.iter().filter(|s| !s.trim().is_empty()) {
            let e = EngineConfig::parse(spec, tls)
                .map_err(|e| anyhow::anyhow!("--docker-engine {e}"))?;
            if engines.iter().any(|o: &EngineConfig| o.name == e.name) {
                bail!("two docker engines are named {} (--docker-socket is the engine named {DEFAULT_ENGINE})", e.name);
            }
            engines.push(e);
        }
        for name in ca.keys().chain(cert.keys()).chain(key.keys()) {
            let is_tls = engines
                .iter()
                .any(|e| &e.name == name && matches!(e.endpoint, Endpoint::Tls { .. }));
            if !is_tls {
                bail!("TLS files are given for {name}, which is not a tcp:// docker engine");
            }
        }
        if engines.is_empty() {
            engines.push(EngineConfig::unix(DEFAULT_ENGINE, "/var/run/docker.sock"));
        }
        Ok(engines)
    }

    fn e2b(&self, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<E2bConfig> {
        let Some(template) = self.e2b_template.clone().filter(|t| !t.trim().is_empty()) else {
            bail!("the e2b provider needs --e2b-template (RAKAZO_E2B_TEMPLATE)");
        };
        let key = crate::homes::config::secret(
            env,
            E2B_KEY_ENV,
            self.e2b_api_key_file.as_deref(),
            "the E2B API key",
        )?;
        let mut c = E2bConfig::new(Secret(key), template, PathBuf::new());
        c.api_url = base_url("e2b-api-url", &self.e2b_api_url)?;
        c.sandbox_url = self
            .e2b_sandbox_url
            .as_deref()
            .filter(|u| !u.trim().is_empty())
            .map(|u| base_url("e2b-sandbox-url", u))
            .transpose()?;
        c.domain = self.e2b_domain.trim().to_string();
        c.run_as = match self.e2b_run_as.trim() {
            "none" => None,
            "" | "root" => bail!("--e2b-run-as must name the sandbox's user (or be `none`)"),
            user => Some(user.to_string()),
        };
        if !self.e2b_home.starts_with('/') {
            bail!("--e2b-home must be an absolute path");
        }
        c.home = self.e2b_home.clone();
        c.timeout = std::time::Duration::from_secs(self.e2b_timeout_secs);
        Ok(c)
    }

    fn daytona(&self, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<DaytonaConfig> {
        let Some(snapshot) = self
            .daytona_snapshot
            .clone()
            .filter(|s| !s.trim().is_empty())
        else {
            bail!("the daytona provider needs --daytona-snapshot (RAKAZO_DAYTONA_SNAPSHOT)");
        };
        let key = crate::homes::config::secret(
            env,
            DAYTONA_KEY_ENV,
            self.daytona_api_key_file.as_deref(),
            "the Daytona API key",
        )?;
        let mut c = DaytonaConfig::new(Secret(key), snapshot, PathBuf::new());
        c.api_url = base_url("daytona-api-url", &self.daytona_api_url)?;
        c.target = self.daytona_target.clone().filter(|t| !t.trim().is_empty());
        c.network_allow = self
            .daytona_network_allow
            .iter()
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
        if let Some(bad) = c.network_allow.iter().find(|n| !is_cidr(n)) {
            bail!("--daytona-network-allow: {bad:?} is not a CIDR (like 10.0.0.0/8)");
        }
        c.disk_gb = self.daytona_disk_gb;
        Ok(c)
    }
}

/// `addr/prefix` with a prefix the address family allows.
fn is_cidr(s: &str) -> bool {
    let Some((ip, prefix)) = s.split_once('/') else {
        return false;
    };
    match (ip.parse::<std::net::IpAddr>(), prefix.parse::<u8>()) {
        (Ok(std::net::IpAddr::V4(_)), Ok(p)) => p <= 32,
        (Ok(std::net::IpAddr::V6(_)), Ok(p)) => p <= 128,
        _ => false,
    }
}

/// What every guest is handed: the binary (local and fake start it; e2b and daytona upload it
/// unless a remote guest is configured) and non-secret env.
#[derive(Debug, Clone)]
pub struct GuestSettings {
    pub bin: PathBuf,
    pub env: Vec<(String, String)>,
}

/// The guest remote sandboxes get.
fn remote_guest(cfg: &ProviderConfig, guest: &GuestSettings) -> PathBuf {
    cfg.remote_guest_bin
        .clone()
        .unwrap_or_else(|| guest.bin.clone())
}

/// The configured providers, by kind.
pub struct ProviderSet {
    providers: BTreeMap<&'static str, AnyProvider>,
    default: &'static str,
}

impl ProviderSet {
    /// Builds every configured provider; connecting to an engine has a deadline.
    pub async fn build(
        cfg: &ProviderConfig,
        data_dir: &Path,
        guest: &GuestSettings,
    ) -> anyhow::Result<Self> {
        let mut providers = BTreeMap::new();
        // One egress gateway for every contained computer, local or Docker.
        let gate = SharedGate::new(cfg.local_gate.clone());
        for &kind in &cfg.kinds {
            let p = match kind {
                "local" => {
                    let root = cfg
                        .local_root
                        .clone()
                        .unwrap_or_else(|| LocalProvider::default_root(data_dir));
                    let mut local = LocalProvider::new(root, &guest.bin)
                        .with_containment(cfg.local_containment)
                        .with_gate(gate.clone())
                        .with_jail_ro_binds(cfg.local_jail_ro_bind.clone())?;
                    for (k, v) in &guest.env {
                        local = local.with_guest_env(k, v);
                    }
                    // Computers that outlived a restart get their way out back at once.
                    local.start_gate().await?;
                    AnyProvider::Local(local)
                }
                "fake" => {
                    let root = cfg
                        .fake_root
                        .clone()
                        .unwrap_or_else(|| data_dir.join("fake"));
                    let mut fake = FakeProvider::new(root, Some(guest.bin.clone()));
                    for (k, v) in &guest.env {
                        fake = fake.with_guest_env(k, v);
                    }
                    AnyProvider::Fake(fake)
                }
                "docker" => {
                    let d = cfg
                        .docker
                        .as_ref()
                        .context("the docker provider is not configured")?;
                    let mut config = providers::docker::DockerConfig::with_engines(
                        d.engines.clone(),
                        d.image.clone(),
                    );
                    config.network_mode = d.network.clone();
                    config.containment = match d.containment {
                        Some(c) => c,
                        None => match DockerContainment::full_refused(&d.engines) {
                            None => DockerContainment::Full,
                            Some(why) => {
                                tracing::warn!("docker computers are not contained: {why}");
                                DockerContainment::Off
                            }
                        },
                    };
                    config.gate = gate.clone();
                    config.default_limits = d.limits;
                    config.guest_env = guest.env.clone();
                    config.engine_gone_after = d.engine_gone_after;
                    let docker = DockerProvider::connect(config).await.with_context(|| {
                        // One engine on a socket is named as before: by its path.
                        let engines: Vec<String> = d
                            .engines
                            .iter()
                            .map(|e| match &e.endpoint {
                                Endpoint::Unix(path) => path.display().to_string(),
                                other => other.to_string(),
                            })
                            .collect();
                        format!("connect to the Docker engine at {}", engines.join(", "))
                    })?;
                    AnyProvider::Docker(docker)
                }
                "e2b" => {
                    let mut c = cfg
                        .e2b
                        .clone()
                        .context("the e2b provider is not configured")?;
                    c.guest_bin = remote_guest(cfg, guest);
                    c.guest_env = guest.env.clone();
                    AnyProvider::E2b(E2bProvider::new(c).context("set up the e2b provider")?)
                }
                "daytona" => {
                    let mut c = cfg
                        .daytona
                        .clone()
                        .context("the daytona provider is not configured")?;
                    c.guest_bin = remote_guest(cfg, guest);
                    c.guest_env = guest.env.clone();
                    AnyProvider::Daytona(
                        DaytonaProvider::new(c).context("set up the daytona provider")?,
                    )
                }
                "kubernetes" => {
                    let mut c = cfg
                        .kubernetes
                        .clone()
                        .context("the kubernetes provider is not configured")?;
                    c.guest_env = guest.env.clone();
                    let ns = c.namespace.clone();
                    AnyProvider::Kubernetes(KubernetesProvider::connect(c).await.with_context(
                        || format!("set up the kubernetes provider (namespace {ns})"),
                    )?)
                }
                other => bail!("unknown provider {other:?}"),
            };
            providers.insert(kind, p);
        }
        Ok(Self {
            providers,
            default: cfg.default,
        })
    }

    /// A set of already built providers (tests); the first is the default.
    pub fn of(list: Vec<AnyProvider>) -> Self {
        let default = list.first().map_or("local", |p| p.kind());
        Self {
            providers: list.into_iter().map(|p| (p.kind(), p)).collect(),
            default,
        }
    }

    /// The provider of `kind`, if configured.
    pub fn get(&self, kind: &str) -> Option<&AnyProvider> {
        self.providers.get(kind)
    }

    /// The kind `computer create` uses without `--provider`.
    pub fn default_kind(&self) -> &'static str {
        self.default
    }

    /// The default provider.
    pub fn default_provider(&self) -> &AnyProvider {
        self.providers
            .get(self.default)
            .expect("the default provider is configured")
    }

    /// The configured kinds.
    pub fn kinds(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.providers.keys().copied()
    }

    /// Whether computers of `kind` cost money while they run (unknown kinds: no).
    pub fn bills_while_running(&self, kind: &str) -> bool {
        self.get(kind).is_some_and(|p| p.bills_while_running())
    }
}

#[cfg(test)]
mod tests;
