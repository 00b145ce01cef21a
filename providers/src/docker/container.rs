//! The container a computer runs as: its create body (image, command, environment, labels,
//! limits, home mount), what we read back from an inspect (our labels, its state), and the
//! token archive uploaded before every start. No engine calls: those are the provider's.

use super::{
    volume_name, DockerConfig, DockerContainment, DEFAULT_SHM_MB, GUEST_PATH, HOME_DIR,
    LABEL_COMPUTER, LABEL_HOME_KEY, LABEL_MANAGED, MIB, PATH_ENV, RUN_AS, TOKEN_PATH,
};
use crate::{MachineExit, SandboxSpec};
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerStateStatusEnum, HostConfig,
    ResourcesUlimits,
};
use std::collections::HashMap;

pub(super) fn labels(spec: &SandboxSpec) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_MANAGED.to_string(), "true".to_string()),
        (LABEL_COMPUTER.to_string(), spec.computer_id.clone()),
        (LABEL_HOME_KEY.to_string(), spec.home_key.clone()),
    ])
}

pub(super) fn is_managed(info: &ContainerInspectResponse) -> bool {
    label(info, LABEL_MANAGED) == Some("true")
}

pub(super) fn label<'a>(info: &'a ContainerInspectResponse, key: &str) -> Option<&'a str> {
    info.config
        .as_ref()?
        .labels
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

pub(super) fn status(info: &ContainerInspectResponse) -> Option<ContainerStateStatusEnum> {
    info.state.as_ref()?.status
}

/// The most of the engine's error text an exit carries.
const EXIT_DETAIL_MAX: usize = 200;

/// What an inspect says became of the container: running (or restarting, or paused: the
/// machine is there), being removed (gone), or stopped with its exit code, the engine's OOM
/// flag and its error text.
///
/// Podman 4.3.1 on cgroup v1 (the test engine) reports a container whose main process the
/// kernel OOM-killed as exit 137 with `OOMKilled` false (measured), so there it reads as a
/// SIGKILL; the `out_of_memory` translation is unit-tested on the inspect body.
pub(super) fn exit_of(info: &ContainerInspectResponse) -> MachineExit {
    let Some(state) = info.state.as_ref() else {
        return MachineExit::Stopped {
            exit_code: None,
            oom_killed: false,
            detail: None,
        };
    };
    match state.status {
        Some(
            ContainerStateStatusEnum::RUNNING
            | ContainerStateStatusEnum::RESTARTING
            | ContainerStateStatusEnum::PAUSED,
        ) => MachineExit::Running,
        Some(ContainerStateStatusEnum::REMOVING) => MachineExit::Gone,
        _ => MachineExit::Stopped {
            exit_code: state.exit_code,
            oom_killed: state.oom_killed == Some(true),
            detail: state
                .error
                .as_deref()
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(|e| e.chars().take(EXIT_DETAIL_MAX).collect()),
        },
    }
}

/// The tar uploaded at `/` before every start: `/etc/rakazo/` (0700) and the token (0600), both
/// root's; and, given one, `/etc/resolv.conf` (0644).
pub(super) fn token_archive(token: &str, resolv_conf: Option<&str>) -> Vec<u8> {
    use super::tar::{archive, Header, Kind};
    let resolv = resolv_conf.unwrap_or_default();
    let mut entries: Vec<(Header<'_>, &[u8])> = vec![
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
    ];
    if resolv_conf.is_some() {
        entries.push((
            Header {
                path: "etc/resolv.conf",
                mode: 0o644,
                size: resolv.len() as u64,
                kind: Kind::File,
            },
            resolv.as_bytes(),
        ));
    }
    archive(&entries)
}

/// The limits a computer's container gets: the spec's over the provider's defaults.
pub(super) fn host_config(config: &DockerConfig, spec: &SandboxSpec) -> HostConfig {
    let (l, d) = (&spec.limits, &config.default_limits);
    let mib = |v: u64| i64::try_from(v).unwrap_or(i64::MAX / MIB) * MIB;
    let shm = l.shm_mb.or(d.shm_mb).unwrap_or(DEFAULT_SHM_MB);
    let ulimit = |name: &str, n: i64| ResourcesUlimits {
        name: Some(name.to_string()),
        soft: Some(n),
        hard: Some(n),
    };
    let network_mode = match config.containment {
        // The control plane plumbs its namespace once it runs. (An engine writes no
        // resolv.conf for `none`, and podman refuses `Dns` with it: `token_archive` brings one.)
        DockerContainment::Full => Some("none".to_string()),
        DockerContainment::HostNetwork => Some("host".to_string()),
        DockerContainment::Off => config.network_mode.clone(),
    };
    HostConfig {
        // An init reaps the zombies of everything the guest starts and forwards SIGTERM, so
        // a stop takes as long as the guest needs and no longer.
        init: Some(true),
        network_mode,
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

pub(super) fn container_body(config: &DockerConfig, spec: &SandboxSpec) -> ContainerCreateBody {
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
        g.ws_env()
            .into_iter()
            .chain(g.replicas_env())
            .map(|(k, v)| format!("{k}={v}")),
    );
    env.extend(config.guest_env.iter().map(|(k, v)| format!("{k}={v}")));
    ContainerCreateBody {
        image: Some(config.image.clone()),
        cmd: Some(vec![GUEST_PATH.to_string()]),
        entrypoint: Some(Vec::new()),
        user: Some("root".to_string()),
        working_dir: Some(HOME_DIR.to_string()),
        env: Some(env),
        labels: Some(labels(spec)),
        stop_timeout: Some(i64::try_from(config.stop_grace.as_secs()).unwrap_or(i64::MAX)),
        host_config: Some(host_config(config, spec)),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inspected(
        status: ContainerStateStatusEnum,
        code: i64,
        oom: bool,
        error: &str,
    ) -> ContainerInspectResponse {
        ContainerInspectResponse {
            state: Some(bollard::models::ContainerState {
                status: Some(status),
                exit_code: Some(code),
                oom_killed: Some(oom),
                error: Some(error.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn an_inspect_tells_how_a_container_ended() {
        use ContainerStateStatusEnum as S;
        assert_eq!(
            exit_of(&inspected(S::RUNNING, 0, false, "")),
            MachineExit::Running
        );
        assert_eq!(
            exit_of(&inspected(S::PAUSED, 0, false, "")),
            MachineExit::Running
        );
        assert_eq!(
            exit_of(&inspected(S::REMOVING, 0, false, "")),
            MachineExit::Gone
        );
        assert_eq!(
            exit_of(&inspected(S::EXITED, 137, true, "")),
            MachineExit::Stopped {
                exit_code: Some(137),
                oom_killed: true,
                detail: None
            }
        );
        assert_eq!(
            exit_of(&inspected(S::EXITED, 137, false, "")),
            MachineExit::Stopped {
                exit_code: Some(137),
                oom_killed: false,
                detail: None
            }
        );
        let long = "x".repeat(1000);
        match exit_of(&inspected(S::DEAD, 1, false, &long)) {
            MachineExit::Stopped {
                exit_code: Some(1),
                oom_killed: false,
                detail: Some(d),
            } => {
                assert_eq!(d.len(), EXIT_DETAIL_MAX)
            }
            other => panic!("{other:?}"),
        }
        let no_state = ContainerInspectResponse::default();
        assert!(matches!(
            exit_of(&no_state),
            MachineExit::Stopped {
                exit_code: None,
                ..
            }
        ));
    }

    #[test]
    fn token_archive_holds_the_token_file_only_under_etc_rakazo() {
        let a = token_archive("s3cret", None);
        assert_eq!(&a[..12], b"etc/rakazo/\0");
        assert_eq!(&a[512..535], b"etc/rakazo/enroll-token");
        assert_eq!(&a[1024..1030], b"s3cret");
    }

    #[test]
    fn the_guest_learns_the_other_replicas_only_when_there_are_some() {
        let config = DockerConfig::new("/run/docker.sock", "rakazo-computer:x");
        let mut spec = SandboxSpec {
            computer_id: "c-1".into(),
            home_key: "team-w".into(),
            guest: crate::GuestEnrollment {
                control_addr: "10.0.0.1:7443".parse().unwrap(),
                control_tcp_addr: None,
                control_ws: None,
                other_replicas: Vec::new(),
                cert_sha256: "ab".into(),
                token: crate::Secret("t0ken".into()),
            },
            limits: crate::MachineLimits::default(),
            placement: None,
            network: None,
        };
        let env = |spec: &SandboxSpec| container_body(&config, spec).env.unwrap();
        assert!(!env(&spec)
            .iter()
            .any(|e| e.starts_with("RAKAZO_CONTROL_ADDRS=")));
        spec.guest.other_replicas = vec![
            "10.0.0.2:7443".parse().unwrap(),
            "10.0.0.3:7443".parse().unwrap(),
        ];
        assert!(env(&spec).contains(&"RAKAZO_CONTROL_ADDRS=10.0.0.2:7443,10.0.0.3:7443".into()));
        assert!(!env(&spec).iter().any(|e| e.contains("t0ken")));
    }
}
