//! The `docker` provider: one container per computer on a Docker Engine API (podman's
//! Docker-compatible service in tests), spoken through bollard over a unix socket.
//!
//! A computer `<id>` is the container `rakazo-<id>` with its home in the named volume
//! `rakazo-home-<id>` at `/home/rakazo`; both carry the labels `io.rakazo.managed=true`,
//! `io.rakazo.computer=<id>` and `io.rakazo.home-key=<key>`. The volume outlives the container:
//! stop/start keeps it, and provisioning a computer whose container is gone mounts it again;
//! only `destroy` removes it. The reference is the container's full hex id.
//!
//! The container runs `/usr/local/bin/rakazo-guest` as root under an init (the guest drops to
//! the workspace user itself). The enrollment token is never in the environment: before every
//! start it is uploaded as `/etc/rakazo/enroll-token` (0600, root) through the archive endpoint.
//!
//! Every engine call has a deadline (a computer is untrusted and an engine may hang), and every
//! failure is sorted into the crate's classes by `engine::Failure`. Building the image the
//! containers run is `image`'s job; this module only refuses a missing one clearly.

pub mod engine;
pub mod image;
mod tar;

pub use engine::connect_engine;

use crate::{
    MachineLimits, MachineState, ProviderError, ProviderRef, SandboxProvider, SandboxSpec,
};
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerStateStatusEnum, HostConfig,
    ResourcesUlimits, VolumeCreateRequest,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder, RemoveVolumeOptionsBuilder,
    StopContainerOptionsBuilder, UploadToContainerOptionsBuilder,
};
use bollard::Docker;
use engine::{within, Failure};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;
use tracing::info;

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
/// Margin over the stop grace for the engine to answer a stop.
const STOP_MARGIN: Duration = Duration::from_secs(30);

/// How the docker provider reaches its engine and what it runs there.
#[derive(Debug, Clone)]
pub struct DockerConfig {
    /// The engine's unix socket.
    pub socket: PathBuf,
    /// The image every computer runs, e.g. `rakazo-computer:<hash16>` (see [`image`]).
    pub image: String,
    /// `HostConfig.NetworkMode`; `Some("host")` lets a guest dial a control plane on
    /// 127.0.0.1. `None` leaves the engine's default network.
    pub network_mode: Option<String>,
    /// Limits for a computer whose spec leaves one unset.
    pub default_limits: MachineLimits,
    /// Extra environment for guests (log filter and the like); never secrets.
    pub guest_env: Vec<(String, String)>,
    /// How long a stopping guest gets after SIGTERM before SIGKILL: it closes browsers first.
    pub stop_grace: Duration,
    /// Deadline of one engine call (a stop gets `stop_grace` plus 30 s instead).
    pub call_timeout: Duration,
}

impl DockerConfig {
    /// A config with the defaults: engine network, no default limits but `/dev/shm` 256 MiB,
    /// a 20 s stop grace and 60 s call deadline.
    pub fn new(socket: impl Into<PathBuf>, image: impl Into<String>) -> Self {
        Self {
            socket: socket.into(),
            image: image.into(),
            network_mode: None,
            default_limits: MachineLimits::default(),
            guest_env: Vec::new(),
            stop_grace: Duration::from_secs(20),
            call_timeout: Duration::from_secs(60),
        }
    }
}

/// Runs computers as containers on a Docker engine.
pub struct DockerProvider {
    docker: Docker,
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

/// A reference is a container id: 12 to 64 lowercase hex digits.
fn check_ref(r: &ProviderRef) -> Result<&str, ProviderError> {
    let id = r.0.as_str();
    if (12..=64).contains(&id.len()) && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(id)
    } else {
        Err(ProviderError::BadRef(r.0.clone()))
    }
}

fn labels(spec: &SandboxSpec) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_MANAGED.to_string(), "true".to_string()),
        (LABEL_COMPUTER.to_string(), spec.computer_id.clone()),
        (LABEL_HOME_KEY.to_string(), spec.home_key.clone()),
    ])
}

fn is_managed(info: &ContainerInspectResponse) -> bool {
    label(info, LABEL_MANAGED) == Some("true")
}

fn label<'a>(info: &'a ContainerInspectResponse, key: &str) -> Option<&'a str> {
    info.config
        .as_ref()?
        .labels
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn status(info: &ContainerInspectResponse) -> Option<ContainerStateStatusEnum> {
    info.state.as_ref()?.status
}

/// The tar uploaded at `/` before every start: `/etc/rakazo/` (0700) and the token (0600), both
/// root's.
fn token_archive(token: &str) -> Vec<u8> {
    use tar::{Header, Kind};
    tar::archive(&[
        (
            Header {
                path: "etc/rakazo/",
                mode: 0o700,
                size: 0,
                kind: Kind::Dir,
            },
            &[],
        ),
        (
            Header {
                path: &TOKEN_PATH[1..],
                mode: 0o600,
                size: token.len() as u64,
                kind: Kind::File,
            },
            token.as_bytes(),
        ),
    ])
}

impl DockerProvider {
    /// Connects to the engine at `config.socket` (agreeing on an API version). Fails with
    /// `Unavailable` if the engine cannot be reached within `config.call_timeout`.
    pub async fn connect(config: DockerConfig) -> Result<Self, ProviderError> {
        let docker = connect_engine(&config.socket, config.call_timeout).await?;
        Ok(Self { docker, config })
    }

    /// The engine client, for image management and tests.
    pub fn engine(&self) -> &Docker {
        &self.docker
    }

    /// The provider's configuration.
    pub fn config(&self) -> &DockerConfig {
        &self.config
    }

    /// The limits a computer's container gets: the spec's over the provider's defaults.
    fn host_config(&self, spec: &SandboxSpec) -> HostConfig {
        let (l, d) = (&spec.limits, &self.config.default_limits);
        let mib = |v: u64| i64::try_from(v).unwrap_or(i64::MAX / MIB) * MIB;
        let shm = l.shm_mb.or(d.shm_mb).unwrap_or(DEFAULT_SHM_MB);
        let ulimit = |name: &str, n: i64| ResourcesUlimits {
            name: Some(name.to_string()),
            soft: Some(n),
            hard: Some(n),
        };
        HostConfig {
            // An init reaps the zombies of everything the guest starts and forwards SIGTERM, so
            // a stop takes as long as the guest needs and no longer.
            init: Some(true),
            network_mode: self.config.network_mode.clone(),
            memory: l.memory_mb.or(d.memory_mb).map(mib),
            nano_cpus: l
                .cpu_millis
                .or(d.cpu_millis)
                .map(|m| i64::from(m) * 1_000_000),
            pids_limit: l.pids.or(d.pids).map(i64::from),
            shm_size: Some(mib(shm)),
            // Soft equals hard: podman 4.3 swaps unequal limits on API-created containers.
            ulimits: Some(vec![ulimit("nofile", 4096), ulimit("nproc", 8192)]),
            binds: Some(vec![format!(
                "{}:{HOME_DIR}",
                volume_name(&spec.computer_id)
            )]),
            // The engine's default capability set is kept: the guest starts as root and needs
            // SETUID, SETGID, CHOWN, DAC_OVERRIDE and FOWNER to drop to the workspace user.
            privileged: Some(false),
            ..Default::default()
        }
    }

    fn container_body(&self, spec: &SandboxSpec) -> ContainerCreateBody {
        let g = &spec.guest;
        let mut env = vec![
            PATH_ENV.to_string(),
            "LANG=C.UTF-8".to_string(),
            format!("RAKAZO_CONTROL_ADDR={}", g.control_addr),
            format!("RAKAZO_CONTROL_TCP_ADDR={}", g.tcp_addr()),
            format!("RAKAZO_CONTROL_CERT_SHA256={}", g.cert_sha256),
            format!("RAKAZO_COMPUTER_ID={}", spec.computer_id),
            format!("RAKAZO_HOME={HOME_DIR}"),
            format!("RAKAZO_RUN_AS={RUN_AS}"),
            format!("RAKAZO_ENROLL_TOKEN_FILE={TOKEN_PATH}"),
        ];
        env.extend(
            self.config
                .guest_env
                .iter()
                .map(|(k, v)| format!("{k}={v}")),
        );
        ContainerCreateBody {
            image: Some(self.config.image.clone()),
            cmd: Some(vec![GUEST_PATH.to_string()]),
            entrypoint: Some(Vec::new()),
            user: Some("root".to_string()),
            working_dir: Some(HOME_DIR.to_string()),
            env: Some(env),
            labels: Some(labels(spec)),
            stop_timeout: Some(i64::try_from(self.config.stop_grace.as_secs()).unwrap_or(i64::MAX)),
            host_config: Some(self.host_config(spec)),
            ..Default::default()
        }
    }

    /// Inspects the container behind `r`. A container that is missing, or that this provider
    /// did not create, is `NotFound`: the machine the reference meant is gone.
    async fn inspect(&self, r: &ProviderRef) -> Result<ContainerInspectResponse, ProviderError> {
        let id = check_ref(r)?;
        let context = format!("inspect container {id}");
        let info = within(
            self.config.call_timeout,
            &context,
            self.docker.inspect_container(id, None),
        )
        .await?
        .map_err(|e| Failure::of(&e).for_container(&context, r))?;
        if is_managed(&info) {
            Ok(info)
        } else {
            Err(ProviderError::NotFound(r.clone()))
        }
    }

    /// Writes the enrollment token into the (created or stopped) container `id`.
    async fn upload_token(&self, r: &ProviderRef, spec: &SandboxSpec) -> Result<(), ProviderError> {
        let context = format!("upload the enrollment token into container {}", r.0);
        let body = bollard::body_full(token_archive(&spec.guest.token.0).into());
        let options = UploadToContainerOptionsBuilder::default().path("/").build();
        within(
            self.config.call_timeout,
            &context,
            self.docker.upload_to_container(&r.0, Some(options), body),
        )
        .await?
        .map_err(|e| Failure::of(&e).for_container(&context, r))
    }

    async fn start(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        let context = format!("start container {}", r.0);
        within(
            self.config.call_timeout,
            &context,
            self.docker.start_container(&r.0, None),
        )
        .await?
        .map_err(|e| Failure::of(&e).for_container(&context, r))
    }

    /// Makes sure the home volume exists (an existing one is kept: it holds the home).
    async fn ensure_volume(&self, spec: &SandboxSpec) -> Result<(), ProviderError> {
        let name = volume_name(&spec.computer_id);
        let context = format!("create volume {name}");
        let request = VolumeCreateRequest {
            name: Some(name.clone()),
            labels: Some(labels(spec)),
            ..Default::default()
        };
        match within(
            self.config.call_timeout,
            &context,
            self.docker.create_volume(request),
        )
        .await?
        {
            Ok(_) => Ok(()),
            // Docker answers a create of an existing volume with that volume; podman may refuse
            // it as a conflict. Either way the volume is there.
            Err(e) => match Failure::of(&e) {
                Failure::Conflict(_) => Ok(()),
                f => Err(f.into_error(&context)),
            },
        }
    }

    /// Removes a container of ours named `name` left by an earlier provision that did not finish.
    async fn remove_leftover(&self, name: &str) -> Result<(), ProviderError> {
        let context = format!("inspect container {name}");
        let info = match within(
            self.config.call_timeout,
            &context,
            self.docker.inspect_container(name, None),
        )
        .await?
        {
            Ok(info) => info,
            Err(e) => {
                return match Failure::of(&e) {
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
        self.remove_container(name).await
    }

    /// Force-removes container `id_or_name`; one already gone is fine.
    async fn remove_container(&self, id_or_name: &str) -> Result<(), ProviderError> {
        let context = format!("remove container {id_or_name}");
        let options = RemoveContainerOptionsBuilder::default().force(true).build();
        match within(
            self.config.call_timeout,
            &context,
            self.docker.remove_container(id_or_name, Some(options)),
        )
        .await?
        {
            Ok(()) => Ok(()),
            Err(e) => match Failure::of(&e) {
                Failure::Missing(_) => Ok(()),
                f => Err(f.into_error(&context)),
            },
        }
    }

    /// Refuses a spec naming a missing image with a message saying how to build it.
    async fn check_image(&self) -> Result<(), ProviderError> {
        if image::image_exists(&self.docker, &self.config.image, self.config.call_timeout).await? {
            Ok(())
        } else {
            Err(missing_image(&self.config.image))
        }
    }
}

fn missing_image(image: &str) -> ProviderError {
    ProviderError::BadSpec(format!(
        "image {image} is not on the engine: run `rakazo image build`"
    ))
}

impl SandboxProvider for DockerProvider {
    fn kind(&self) -> &'static str {
        "docker"
    }

    /// Containers on our own engine cost nothing extra while they run.
    fn bills_while_running(&self) -> bool {
        false
    }

    async fn provision(&self, spec: &SandboxSpec) -> Result<ProviderRef, ProviderError> {
        let began = tokio::time::Instant::now();
        if !valid_computer_id(&spec.computer_id) {
            return Err(ProviderError::BadSpec(format!(
                "computer id {:?} is not usable in a container name",
                spec.computer_id
            )));
        }
        spec.limits.validate().map_err(ProviderError::BadSpec)?;
        self.check_image().await?;
        self.ensure_volume(spec).await?;
        let name = container_name(&spec.computer_id);
        self.remove_leftover(&name).await?;

        let context = format!("create container {name}");
        let options = CreateContainerOptionsBuilder::default().name(&name).build();
        let created = within(
            self.config.call_timeout,
            &context,
            self.docker
                .create_container(Some(options), self.container_body(spec)),
        )
        .await?
        .map_err(|e| match Failure::of(&e) {
            // Nothing else a create names can be missing (the volume was just made).
            Failure::Missing(_) => missing_image(&self.config.image),
            f => f.into_error(&context),
        })?;
        let r = ProviderRef(created.id);
        if check_ref(&r).is_err() || r.0.len() != 64 {
            return Err(ProviderError::Unavailable {
                context,
                message: format!("the engine answered a malformed container id {:?}", r.0),
            });
        }
        self.upload_token(&r, spec).await?;
        self.start(&r).await?;
        info!(
            computer_id = %spec.computer_id,
            container = %r.0,
            elapsed_ms = began.elapsed().as_millis() as u64,
            "docker computer provisioned"
        );
        Ok(r)
    }

    async fn prepare(
        &self,
        r: &ProviderRef,
        spec: &SandboxSpec,
    ) -> Result<ProviderRef, ProviderError> {
        let info = self.inspect(r).await?;
        if label(&info, LABEL_COMPUTER) != Some(spec.computer_id.as_str()) {
            return Err(ProviderError::BadSpec(format!(
                "container {} belongs to computer {:?}, not {}",
                r.0,
                label(&info, LABEL_COMPUTER).unwrap_or(""),
                spec.computer_id
            )));
        }
        match status(&info) {
            Some(ContainerStateStatusEnum::RUNNING | ContainerStateStatusEnum::RESTARTING) => {
                return Ok(r.clone())
            }
            Some(ContainerStateStatusEnum::REMOVING) => {
                return Err(ProviderError::NotFound(r.clone()))
            }
            // A paused guest is alive and enrolled: let it run on.
            Some(ContainerStateStatusEnum::PAUSED) => {
                let context = format!("unpause container {}", r.0);
                return within(
                    self.config.call_timeout,
                    &context,
                    self.docker.unpause_container(&r.0),
                )
                .await?
                .map(|()| r.clone())
                .map_err(|e| Failure::of(&e).for_container(&context, r));
            }
            _ => {}
        }
        // Every boot gets the token of this boot: the previous one was rotated away.
        self.upload_token(r, spec).await?;
        self.start(r).await?;
        info!(computer_id = %spec.computer_id, container = %r.0, "docker computer started");
        Ok(r.clone())
    }

    async fn state(&self, r: &ProviderRef) -> Result<MachineState, ProviderError> {
        let info = match self.inspect(r).await {
            Ok(info) => info,
            Err(ProviderError::NotFound(_)) => return Ok(MachineState::Gone),
            Err(e) => return Err(e),
        };
        Ok(match status(&info) {
            Some(ContainerStateStatusEnum::RUNNING | ContainerStateStatusEnum::RESTARTING) => {
                MachineState::Running
            }
            Some(ContainerStateStatusEnum::REMOVING) => MachineState::Gone,
            _ => MachineState::Stopped,
        })
    }

    async fn stop(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        match self.inspect(r).await {
            Ok(_) => {}
            Err(ProviderError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        }
        let context = format!("stop container {}", r.0);
        let grace = self.config.stop_grace;
        let options = StopContainerOptionsBuilder::default()
            .t(i32::try_from(grace.as_secs()).unwrap_or(i32::MAX))
            .build();
        // 304 (already stopped) is success in bollard.
        match within(
            grace + STOP_MARGIN,
            &context,
            self.docker.stop_container(&r.0, Some(options)),
        )
        .await?
        {
            Ok(()) => Ok(()),
            Err(e) => match Failure::of(&e) {
                Failure::Missing(_) => Ok(()),
                f => Err(f.into_error(&context)),
            },
        }
    }

    async fn destroy(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        let info = match self.inspect(r).await {
            Ok(info) => info,
            // The container is gone, and with it the only record of which volume was its home.
            Err(ProviderError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        self.remove_container(&r.0).await?;
        let Some(computer) = label(&info, LABEL_COMPUTER) else {
            return Ok(());
        };
        let volume = volume_name(computer);
        let context = format!("remove volume {volume}");
        let options = RemoveVolumeOptionsBuilder::default().force(true).build();
        match within(
            self.config.call_timeout,
            &context,
            self.docker.remove_volume(&volume, Some(options)),
        )
        .await?
        {
            Ok(()) => {}
            Err(e) => match Failure::of(&e) {
                Failure::Missing(_) => {}
                f => return Err(f.into_error(&context)),
            },
        }
        info!(computer_id = %computer, container = %r.0, "docker computer destroyed");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_are_container_ids() {
        assert!(check_ref(&ProviderRef("0123456789ab".into())).is_ok());
        assert!(check_ref(&ProviderRef("a".repeat(64))).is_ok());
        for bad in [
            "",
            "0123456789a",
            "0123456789AB",
            "../etc/passwd",
            &"a".repeat(65),
        ] {
            assert!(
                matches!(
                    check_ref(&ProviderRef(bad.into())),
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

    #[test]
    fn token_archive_holds_the_token_file_only_under_etc_rakazo() {
        let a = token_archive("s3cret");
        assert_eq!(&a[..12], b"etc/rakazo/\0");
        assert_eq!(&a[512..535], b"etc/rakazo/enroll-token");
        assert_eq!(&a[1024..1030], b"s3cret");
    }
}
