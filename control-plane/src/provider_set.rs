//! Every configured provider at once: `rakazo serve`'s provider flags, their checks, and the
//! [`ProviderSet`] the core picks from by kind (`local`, `docker`, `fake`).
//!
//! A computer records the kind it was created on; restart recovery and every lifecycle call use
//! that kind's provider. A computer whose kind is no longer configured gets a replacement on the
//! default provider, restored from its last checkpoint (contracts.md §2: a changed provider kind
//! means a replacement machine).

use anyhow::{bail, Context};
use clap::Args;
use providers::{
    AnyProvider, DockerProvider, FakeProvider, LocalProvider, MachineLimits, SandboxProvider,
};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The kinds `rakazo serve` knows.
pub const KINDS: [&str; 3] = ["local", "docker", "fake"];

/// `rakazo serve` flags of the providers.
#[derive(Debug, Clone, Args)]
pub struct ProviderArgs {
    /// Providers to run computers on, comma-separated: local, docker, fake (fake is for tests:
    /// its computers run as this process's user, without isolation).
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
    /// The Docker Engine API socket (podman's Docker-compatible service works).
    #[arg(
        long,
        env = "RAKAZO_DOCKER_SOCKET",
        default_value = "/var/run/docker.sock"
    )]
    pub docker_socket: PathBuf,
    /// The computer image on that engine (`rakazo image build` prints it).
    #[arg(long, env = "RAKAZO_DOCKER_IMAGE")]
    pub docker_image: Option<String>,
    /// The containers' network mode (`host` puts guests on this host's loopback; default: the
    /// engine's default bridge).
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
}

/// Checked provider settings.
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    pub kinds: Vec<&'static str>,
    pub default: &'static str,
    pub advertise_addr: Option<SocketAddr>,
    pub local_root: Option<PathBuf>,
    pub docker: Option<DockerSettings>,
    pub fake_root: Option<PathBuf>,
}

/// The Docker provider's settings.
#[derive(Debug, Clone)]
pub struct DockerSettings {
    pub socket: PathBuf,
    pub image: String,
    pub network: Option<String>,
    pub limits: MachineLimits,
}

impl Default for ProviderConfig {
    /// Local computers only, as before providers were configurable.
    fn default() -> Self {
        Self {
            kinds: vec!["local"],
            default: "local",
            advertise_addr: None,
            local_root: None,
            docker: None,
            fake_root: None,
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

impl ProviderArgs {
    /// Checks the flags: known kinds, a default among them, what docker needs.
    pub fn resolve(&self) -> anyhow::Result<ProviderConfig> {
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
            Some(DockerSettings {
                socket: self.docker_socket.clone(),
                image,
                network: self.docker_network.clone().filter(|n| !n.is_empty()),
                limits,
            })
        } else {
            None
        };
        Ok(ProviderConfig {
            kinds,
            default,
            advertise_addr: self.advertise_addr,
            local_root: self.local_root.clone(),
            docker,
            fake_root: self.fake_root.clone(),
        })
    }
}

/// What every host-process guest is handed (local and fake): the binary and non-secret env.
#[derive(Debug, Clone)]
pub struct GuestSettings {
    pub bin: PathBuf,
    pub env: Vec<(String, String)>,
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
        for &kind in &cfg.kinds {
            let p = match kind {
                "local" => {
                    let root = cfg
                        .local_root
                        .clone()
                        .unwrap_or_else(|| LocalProvider::default_root(data_dir));
                    let mut local = LocalProvider::new(root, &guest.bin);
                    for (k, v) in &guest.env {
                        local = local.with_guest_env(k, v);
                    }
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
                    let mut config =
                        providers::docker::DockerConfig::new(d.socket.clone(), d.image.clone());
                    config.network_mode = d.network.clone();
                    config.default_limits = d.limits;
                    config.guest_env = guest.env.clone();
                    let docker = DockerProvider::connect(config).await.with_context(|| {
                        format!("connect to the Docker engine at {}", d.socket.display())
                    })?;
                    AnyProvider::Docker(docker)
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
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        p: ProviderArgs,
    }

    fn resolve(args: &[&str]) -> anyhow::Result<ProviderConfig> {
        let mut argv = vec!["t"];
        argv.extend_from_slice(args);
        T::try_parse_from(argv)?.p.resolve()
    }

    #[test]
    fn defaults_to_local_only() {
        let c = resolve(&[]).unwrap();
        assert_eq!(c.kinds, vec!["local"]);
        assert_eq!(c.default, "local");
        assert!(c.docker.is_none());
    }

    #[test]
    fn several_providers_and_a_default_among_them() {
        let c = resolve(&["--providers", "local,docker", "--docker-image", "img:1"]).unwrap();
        assert_eq!(c.kinds, vec!["local", "docker"]);
        assert_eq!(c.default, "local");
        let c = resolve(&[
            "--providers",
            "local,docker",
            "--default-provider",
            "docker",
            "--docker-image",
            "img:1",
        ])
        .unwrap();
        assert_eq!(c.default, "docker");
        assert_eq!(c.docker.unwrap().image, "img:1");
        assert_eq!(
            c.advertise_addr, None,
            "guests dial the bound address by default"
        );
        let c = resolve(&["--advertise-addr", "10.0.0.7:7443"]).unwrap();
        assert_eq!(c.advertise_addr, Some("10.0.0.7:7443".parse().unwrap()));
        assert!(resolve(&["--advertise-addr", "not-an-address"]).is_err());
    }

    #[test]
    fn refuses_what_cannot_work() {
        let e = resolve(&["--providers", "local,kvm"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown provider \"kvm\""), "{e}");
        let e = resolve(&["--providers", "local", "--default-provider", "fake"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("not among --providers"), "{e}");
        let e = resolve(&["--providers", "docker"]).unwrap_err().to_string();
        assert!(e.contains("--docker-image"), "{e}");
        let e = resolve(&[
            "--providers",
            "docker",
            "--docker-image",
            "i",
            "--docker-memory-mb",
            "1",
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("memory_mb must be between 16"), "{e}");
    }
}
