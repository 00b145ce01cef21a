//! The docker provider against a real engine: podman's Docker-compatible service
//! (`bash scripts/podman.sh start`), found through `RAKAZO_TEST_PODMAN_SOCK` (default
//! `/var/tmp/rakazo-podman/podman.sock`), with the computer image layered on the root
//! filesystem tar from `RAKAZO_TEST_ROOTFS` (default: `bash image/rootfs.sh path`).
//!
//! These tests check the provider's lifecycle, not the guest: the "guest" of the image they run
//! is a shell script that sleeps, so containers stay up without a control plane. A missing engine
//! or root filesystem fails the tests; nothing is skipped.

use bollard::query_parameters::{
    DownloadFromContainerOptionsBuilder, RemoveContainerOptionsBuilder, RemoveImageOptionsBuilder,
    UploadToContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::TryStreamExt;
use providers::docker::image::{ensure_image, image_exists, ImageSpec};
use providers::docker::{container_name, volume_name, DockerConfig, DockerProvider, EngineConfig};
use providers::{
    ErrorClass, GuestEnrollment, MachineLimits, MachineState, ProviderError, ProviderRef,
    SandboxProvider, SandboxSpec, Secret,
};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::OnceCell;
use tokio::time::Instant;

const MIB: i64 = 1024 * 1024;

fn env_or(name: &str) -> Option<String> {
    std::env::var_os(name).and_then(|v| v.into_string().ok())
}

fn socket() -> PathBuf {
    env_or("RAKAZO_TEST_PODMAN_SOCK")
        .unwrap_or_else(|| "/var/tmp/rakazo-podman/podman.sock".into())
        .into()
}

async fn engine() -> Docker {
    let sock = socket();
    providers::docker::connect_engine(&sock, Duration::from_secs(20))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "no container engine at {} ({e}): start one with `bash scripts/podman.sh start` \
                 or point RAKAZO_TEST_PODMAN_SOCK at a Docker-compatible socket",
                sock.display()
            )
        })
}

/// The root filesystem tar and its hash (the `rootfs-<hash>.tar` name, else its sha256).
fn rootfs() -> (PathBuf, String) {
    let path: PathBuf = match env_or("RAKAZO_TEST_ROOTFS") {
        Some(p) => p.into(),
        None => {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            let out = std::process::Command::new("bash")
                .args(["image/rootfs.sh", "path"])
                .current_dir(&root)
                .output()
                .expect("run bash image/rootfs.sh path");
            assert!(
                out.status.success(),
                "no computer root filesystem: run `bash image/rootfs.sh build` or set \
                 RAKAZO_TEST_ROOTFS to a rootfs tar ({})",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            String::from_utf8(out.stdout).unwrap().trim().into()
        }
    };
    assert!(
        path.is_file(),
        "root filesystem tar {} is missing",
        path.display()
    );
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let hash = match name
        .strip_prefix("rootfs-")
        .and_then(|n| n.strip_suffix(".tar"))
    {
        Some(h) if h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()) => h.to_string(),
        _ => {
            let out = std::process::Command::new("sha256sum")
                .arg(&path)
                .output()
                .expect("run sha256sum");
            String::from_utf8(out.stdout).unwrap()[..16].to_string()
        }
    };
    (path, hash)
}

/// Eight random hex digits, so runs and parallel tests never share a name.
fn nonce() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/uuid").unwrap()[..8].to_string()
}

/// A stand-in guest that keeps the container running until it is stopped.
fn sleeper_guest(dir: &Path, comment: &str) -> PathBuf {
    let path = dir.join("rakazo-guest");
    std::fs::write(
        &path,
        format!("#!/bin/sh\n# {comment}\nexec sleep infinity\n"),
    )
    .unwrap();
    path
}

/// The sleeping image, built once per test process (and cached on the engine across runs).
async fn sleeper_image(docker: &Docker) -> String {
    static TAG: OnceCell<String> = OnceCell::const_new();
    TAG.get_or_init(|| async {
        let (tar, hash) = rootfs();
        let dir = tempfile::tempdir().unwrap();
        let guest = sleeper_guest(dir.path(), "provider lifecycle tests");
        let began = Instant::now();
        let tag = ensure_image(
            docker,
            &ImageSpec {
                rootfs_tar: &tar,
                base_hash: &hash,
                guest_bin: &guest,
            },
        )
        .await
        .expect("build the test image");
        eprintln!("timing: ensure_image (sleeper) {:?}", began.elapsed());
        tag
    })
    .await
    .clone()
}

fn config(image: &str) -> DockerConfig {
    let mut c = DockerConfig::new(socket(), image);
    c.network_mode = Some("host".into());
    c.guest_env = vec![("RAKAZO_LOG".into(), "info".into())];
    c.stop_grace = Duration::from_secs(5);
    c
}

async fn provider() -> DockerProvider {
    let docker = engine().await;
    let image = sleeper_image(&docker).await;
    DockerProvider::connect(config(&image))
        .await
        .expect("connect the provider")
}

fn spec(computer_id: &str, token: &str, limits: MachineLimits) -> SandboxSpec {
    SandboxSpec {
        computer_id: computer_id.into(),
        home_key: format!("team-{computer_id}"),
        guest: GuestEnrollment {
            control_addr: "127.0.0.1:9".parse().unwrap(),
            control_tcp_addr: None,
            cert_sha256: "ab".repeat(32),
            token: Secret(token.into()),
        },
        limits,
    }
}

/// The container id in a reference (`<engine>/<id>`).
fn cid(r: &ProviderRef) -> &str {
    r.0.rsplit('/').next().unwrap_or(&r.0)
}

/// One file read out of a container: its bytes, mode and owner.
struct Entry {
    data: Vec<u8>,
    mode: u32,
    uid: u32,
}

fn octal(field: &[u8]) -> u64 {
    let s = std::str::from_utf8(field).unwrap();
    u64::from_str_radix(s.trim_matches(|c: char| c == '\0' || c == ' '), 8).unwrap()
}

async fn read_file(docker: &Docker, container: &str, path: &str) -> Option<Entry> {
    let options = DownloadFromContainerOptionsBuilder::default()
        .path(path)
        .build();
    let chunks: Vec<bytes::Bytes> = docker
        .download_from_container(container, Some(options))
        .try_collect()
        .await
        .ok()?;
    let tar: Vec<u8> = chunks.concat();
    assert!(tar.len() >= 512, "short archive of {path}");
    let size = octal(&tar[124..136]) as usize;
    Some(Entry {
        data: tar[512..512 + size].to_vec(),
        mode: octal(&tar[100..108]) as u32 & 0o7777,
        uid: octal(&tar[108..116]) as u32,
    })
}

/// Writes `name` with `data` into `dir` of a container (0644, owned by the workspace user).
async fn write_file(docker: &Docker, container: &str, dir: &str, name: &str, data: &[u8]) {
    let mut header = [0u8; 512];
    header[..name.len()].copy_from_slice(name.as_bytes());
    header[100..108].copy_from_slice(b"0000644\0");
    header[108..116].copy_from_slice(b"0001750\0");
    header[116..124].copy_from_slice(b"0001750\0");
    header[124..136].copy_from_slice(format!("{:011o}\0", data.len()).as_bytes());
    header[136..148].copy_from_slice(b"00000000000\0");
    header[156] = b'0';
    header[257..263].copy_from_slice(b"ustar\0");
    header[263..265].copy_from_slice(b"00");
    header[148..156].copy_from_slice(b"        ");
    let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
    header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    let mut tar = header.to_vec();
    tar.extend_from_slice(data);
    tar.resize(tar.len().div_ceil(512) * 512 + 1024, 0);
    let options = UploadToContainerOptionsBuilder::default().path(dir).build();
    docker
        .upload_to_container(container, Some(options), bollard::body_full(tar.into()))
        .await
        .expect("upload a file into the container");
}

async fn started_at(docker: &Docker, id: &str) -> String {
    let info = docker.inspect_container(id, None).await.unwrap();
    info.state.unwrap().started_at.unwrap()
}

async fn volume_exists(docker: &Docker, name: &str) -> bool {
    match docker.inspect_volume(name).await {
        Ok(_) => true,
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => false,
        Err(e) => panic!("inspect volume {name}: {e}"),
    }
}

/// Removes a test computer's container and volume when dropped, so a failing test leaves
/// nothing on the engine (a passing one has destroyed them already; removing twice is fine).
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let computer = self.0.clone();
        // Drop cannot await, and the test's runtime may be unwinding: use a runtime of our own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let docker = engine().await;
                let force = RemoveContainerOptionsBuilder::default().force(true).build();
                let _ = docker
                    .remove_container(&container_name(&computer), Some(force))
                    .await;
                let _ = docker
                    .remove_volume(
                        &volume_name(&computer),
                        None::<bollard::query_parameters::RemoveVolumeOptions>,
                    )
                    .await;
            });
        })
        .join();
    }
}

#[tokio::test]
async fn ensure_image_is_content_addressed_and_carries_the_guest() {
    let docker = engine().await;
    let (tar, hash) = rootfs();
    let dir = tempfile::tempdir().unwrap();
    // A guest no earlier run has seen, so the layering step really runs.
    let guest = sleeper_guest(dir.path(), &format!("image test {}", nonce()));
    let spec = ImageSpec {
        rootfs_tar: &tar,
        base_hash: &hash,
        guest_bin: &guest,
    };

    let began = Instant::now();
    let tag = ensure_image(&docker, &spec)
        .await
        .expect("first ensure_image");
    eprintln!(
        "timing: ensure_image, guest layered (and base imported if new) {:?}",
        began.elapsed()
    );
    assert!(tag.starts_with("rakazo-computer:"), "{tag}");
    assert!(image_exists(&docker, &tag, Duration::from_secs(10))
        .await
        .unwrap());
    let first = docker.inspect_image(&tag).await.unwrap();

    let began = Instant::now();
    let again = ensure_image(&docker, &spec)
        .await
        .expect("second ensure_image");
    eprintln!("timing: ensure_image, already there {:?}", began.elapsed());
    assert_eq!(again, tag);
    let second = docker.inspect_image(&tag).await.unwrap();
    assert_eq!(
        first.id, second.id,
        "the second ensure_image rebuilt the image"
    );

    let config = first.config.expect("image config");
    assert_eq!(
        config.cmd,
        Some(vec!["/usr/local/bin/rakazo-guest".to_string()])
    );
    assert_eq!(config.user.as_deref(), Some("root"));
    assert_eq!(config.working_dir.as_deref(), Some("/home/rakazo"));
    // The build container's name or labels must not leak into every computer.
    let labels = config.labels.unwrap_or_default();
    assert!(
        !labels.keys().any(|k| k.starts_with("io.rakazo.")),
        "{labels:?}"
    );

    // The binary in the image is the one given, executable and root's.
    let created = docker
        .create_container(
            None::<bollard::query_parameters::CreateContainerOptions>,
            bollard::models::ContainerCreateBody {
                image: Some(tag.clone()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let entry = read_file(&docker, &created.id, "/usr/local/bin/rakazo-guest")
        .await
        .expect("the guest is in the image");
    assert_eq!(
        hex::encode(Sha256::digest(&entry.data)),
        hex::encode(Sha256::digest(std::fs::read(&guest).unwrap()))
    );
    assert_eq!((entry.mode, entry.uid), (0o755, 0));

    let force = RemoveContainerOptionsBuilder::default().force(true).build();
    docker
        .remove_container(&created.id, Some(force))
        .await
        .unwrap();
    let options = RemoveImageOptionsBuilder::default().force(true).build();
    docker
        .remove_image(&tag, Some(options), None)
        .await
        .unwrap();
}

#[tokio::test]
async fn lifecycle_provision_prepare_stop_destroy() {
    let p = provider().await;
    let docker = p.engine().clone();
    let id = format!("t-life-{}", nonce());
    let _cleanup = Cleanup(id.clone());
    let limits = MachineLimits {
        memory_mb: Some(512),
        cpu_millis: Some(500),
        pids: Some(256),
        shm_mb: Some(128),
    };
    let first = spec(&id, "first-token-d1b9", limits);

    let began = Instant::now();
    let r = p.provision(&first).await.expect("provision");
    eprintln!("timing: provision -> running {:?}", began.elapsed());
    let (engine, container) = r.0.split_once('/').expect("an engine-qualified reference");
    assert_eq!((engine, container.len()), ("default", 64));
    assert_eq!(p.state(&r).await.unwrap(), MachineState::Running);

    let info = docker.inspect_container(cid(&r), None).await.unwrap();
    assert_eq!(
        info.name.as_deref().map(|n| n.trim_start_matches('/')),
        Some(container_name(&id).as_str())
    );
    let config = info.config.clone().unwrap();
    let labels = config.labels.clone().unwrap();
    assert_eq!(
        labels.get("io.rakazo.managed").map(String::as_str),
        Some("true")
    );
    assert_eq!(labels.get("io.rakazo.computer"), Some(&id));
    assert_eq!(
        labels.get("io.rakazo.home-key"),
        Some(&format!("team-{id}"))
    );
    let env = config.env.clone().unwrap();
    for want in [
        "RAKAZO_CONTROL_ADDR=127.0.0.1:9".to_string(),
        format!("RAKAZO_CONTROL_CERT_SHA256={}", "ab".repeat(32)),
        format!("RAKAZO_COMPUTER_ID={id}"),
        "RAKAZO_HOME=/home/rakazo".into(),
        "RAKAZO_RUN_AS=rakazo".into(),
        "RAKAZO_ENROLL_TOKEN_FILE=/etc/rakazo/enroll-token".into(),
        "LANG=C.UTF-8".into(),
        "RAKAZO_LOG=info".into(),
    ] {
        assert!(env.contains(&want), "{want} missing from {env:?}");
    }
    assert!(
        !env.iter().any(|e| e.contains("first-token-d1b9")),
        "the token is in the container's environment"
    );
    assert_eq!(
        config.cmd,
        Some(vec!["/usr/local/bin/rakazo-guest".to_string()])
    );
    assert_eq!(config.user.as_deref(), Some("root"));

    let host = info.host_config.unwrap();
    assert_eq!(host.network_mode.as_deref(), Some("host"));
    assert_eq!(host.init, Some(true));
    assert_eq!(host.memory, Some(512 * MIB));
    assert_eq!(host.nano_cpus, Some(500_000_000));
    assert_eq!(host.pids_limit, Some(256));
    assert_eq!(host.shm_size, Some(128 * MIB));
    assert_ne!(host.privileged, Some(true));
    let ulimits: Vec<_> = host
        .ulimits
        .unwrap_or_default()
        .into_iter()
        .map(|u| (u.name.unwrap_or_default(), u.soft, u.hard))
        .collect();
    for want in [("nofile", 4096), ("nproc", 8192)] {
        assert!(
            ulimits
                .iter()
                .any(|(n, s, h)| n.to_ascii_lowercase().ends_with(want.0)
                    && *s == Some(want.1)
                    && *h == Some(want.1)),
            "{want:?} not in {ulimits:?}"
        );
    }
    let mounts = info.mounts.unwrap_or_default();
    assert!(
        mounts
            .iter()
            .any(|m| m.name.as_deref() == Some(volume_name(&id).as_str())
                && m.destination.as_deref() == Some("/home/rakazo")),
        "home volume not mounted: {mounts:?}"
    );

    let token = read_file(&docker, cid(&r), "/etc/rakazo/enroll-token")
        .await
        .expect("the token file is in the container");
    assert_eq!(token.data, b"first-token-d1b9");
    assert_eq!((token.mode, token.uid), (0o600, 0));

    // Preparing a running computer changes nothing.
    let started = started_at(&docker, cid(&r)).await;
    let second = spec(&id, "second-token-77c0", limits);
    assert_eq!(p.prepare(&r, &second).await.unwrap(), r);
    assert_eq!(
        started_at(&docker, cid(&r)).await,
        started,
        "prepare restarted a running container"
    );

    // A reference used for another computer is refused, not started as that computer.
    let err = p
        .prepare(&r, &spec("t-someone-else", "x", limits))
        .await
        .unwrap_err();
    assert_eq!(err.class(), ErrorClass::Invalid, "{err}");

    let began = Instant::now();
    p.stop(&r).await.expect("stop");
    eprintln!("timing: stop {:?}", began.elapsed());
    assert_eq!(p.state(&r).await.unwrap(), MachineState::Stopped);
    p.stop(&r).await.expect("stop a stopped computer");

    // A start brings the token of this boot.
    let began = Instant::now();
    assert_eq!(p.prepare(&r, &second).await.unwrap(), r);
    eprintln!("timing: prepare (start) -> running {:?}", began.elapsed());
    assert_eq!(p.state(&r).await.unwrap(), MachineState::Running);
    let token = read_file(&docker, cid(&r), "/etc/rakazo/enroll-token")
        .await
        .unwrap();
    assert_eq!(token.data, b"second-token-77c0");
    assert_eq!((token.mode, token.uid), (0o600, 0));

    let began = Instant::now();
    p.destroy(&r).await.expect("destroy");
    eprintln!("timing: destroy (running) {:?}", began.elapsed());
    assert_eq!(p.state(&r).await.unwrap(), MachineState::Gone);
    p.destroy(&r).await.expect("destroy a destroyed computer");
    p.stop(&r).await.expect("stop a destroyed computer");
    assert!(
        !volume_exists(&docker, &volume_name(&id)).await,
        "the home volume survived destroy"
    );
    let err = p.prepare(&r, &second).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Gone, "{err}");
}

#[tokio::test]
async fn home_volume_survives_stop_start_and_a_replaced_container() {
    let p = provider().await;
    let docker = p.engine().clone();
    let id = format!("t-home-{}", nonce());
    let _cleanup = Cleanup(id.clone());
    let s = spec(&id, "home-token-5e21", MachineLimits::default());

    // A container left by an earlier provision that did not finish is replaced.
    let leftover = docker
        .create_container(
            Some(
                bollard::query_parameters::CreateContainerOptionsBuilder::default()
                    .name(&container_name(&id))
                    .build(),
            ),
            bollard::models::ContainerCreateBody {
                image: Some(p.config().image.clone()),
                labels: Some([("io.rakazo.managed".to_string(), "true".to_string())].into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();

    let r = p.provision(&s).await.expect("provision over a leftover");
    assert_ne!(cid(&r), leftover.id);
    let host = docker
        .inspect_container(cid(&r), None)
        .await
        .unwrap()
        .host_config
        .unwrap();
    assert_eq!(host.shm_size, Some(256 * MIB), "default /dev/shm");

    write_file(&docker, cid(&r), "/home/rakazo", "marker.txt", b"kept").await;
    p.stop(&r).await.unwrap();
    p.prepare(&r, &s).await.unwrap();
    let kept = read_file(&docker, cid(&r), "/home/rakazo/marker.txt").await;
    assert_eq!(
        kept.map(|e| e.data),
        Some(b"kept".to_vec()),
        "lost across stop/start"
    );

    // The container disappears behind the provider's back: the machine is gone, its home is not.
    let force = RemoveContainerOptionsBuilder::default().force(true).build();
    docker.remove_container(cid(&r), Some(force)).await.unwrap();
    assert_eq!(p.state(&r).await.unwrap(), MachineState::Gone);
    match p.prepare(&r, &s).await {
        Err(ProviderError::NotFound(gone)) => assert_eq!(gone, r),
        other => panic!("prepare of a removed container: {other:?}"),
    }
    let replacement = p.provision(&s).await.expect("provision a replacement");
    assert_ne!(replacement, r);
    let kept = read_file(&docker, cid(&replacement), "/home/rakazo/marker.txt").await;
    assert_eq!(
        kept.map(|e| e.data),
        Some(b"kept".to_vec()),
        "lost with the container"
    );

    p.destroy(&replacement).await.unwrap();
    assert!(!volume_exists(&docker, &volume_name(&id)).await);
}

#[tokio::test]
async fn malformed_refs_are_refused() {
    let p = provider().await;
    let s = spec("t-badref", "unused", MachineLimits::default());
    for bad in [
        "",
        "xyz",
        "0123456789a",
        "../../etc",
        &"A".repeat(64),
        &"a".repeat(65),
    ] {
        let r = ProviderRef(bad.into());
        assert!(
            matches!(p.state(&r).await, Err(ProviderError::BadRef(_))),
            "{bad:?}"
        );
        assert!(
            matches!(p.prepare(&r, &s).await, Err(ProviderError::BadRef(_))),
            "{bad:?}"
        );
        assert!(
            matches!(p.stop(&r).await, Err(ProviderError::BadRef(_))),
            "{bad:?}"
        );
        assert!(
            matches!(p.destroy(&r).await, Err(ProviderError::BadRef(_))),
            "{bad:?}"
        );
    }
    // Well-formed but unknown: gone, and destroying it is fine.
    let unknown = ProviderRef("0".repeat(64));
    assert_eq!(p.state(&unknown).await.unwrap(), MachineState::Gone);
    p.destroy(&unknown).await.unwrap();
}

#[tokio::test]
async fn an_unknown_image_is_a_bad_spec_naming_it() {
    let image = format!("rakazo-computer:missing{}", nonce());
    let p = DockerProvider::connect(config(&image)).await.unwrap();
    let err = p
        .provision(&spec(
            &format!("t-noimg-{}", nonce()),
            "t",
            MachineLimits::default(),
        ))
        .await
        .unwrap_err();
    assert_eq!(err.class(), ErrorClass::Invalid, "{err}");
    let message = err.to_string();
    assert!(
        message.contains(&image) && message.contains("rakazo image build"),
        "{message}"
    );
    // Refused before anything was made.
    let bad_limits = MachineLimits {
        memory_mb: Some(1),
        ..Default::default()
    };
    let err = p
        .provision(&spec("t-limits", "t", bad_limits))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::BadSpec(ref m) if m.contains("memory_mb")),
        "{err}"
    );
}

#[tokio::test]
async fn an_unreachable_engine_is_unavailable_within_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config("rakazo-computer:unused");
    c.call_timeout = Duration::from_secs(2);

    let on = |socket: PathBuf| vec![EngineConfig::unix("default", socket)];
    // No socket at all.
    c.engines = on(dir.path().join("absent.sock"));
    let err = DockerProvider::connect(c.clone())
        .await
        .err()
        .expect("connect to nothing");
    assert_eq!(err.class(), ErrorClass::Transient, "{err}");

    // A socket nobody accepts on: connection refused.
    let refused = dir.path().join("refused.sock");
    drop(std::os::unix::net::UnixListener::bind(&refused).unwrap());
    c.engines = on(refused);
    let err = DockerProvider::connect(c.clone())
        .await
        .err()
        .expect("connect to a dead socket");
    assert!(matches!(err, ProviderError::Unavailable { .. }), "{err}");

    // An engine that accepts and never answers: the deadline ends the wait.
    let hung = dir.path().join("hung.sock");
    let _hung = std::os::unix::net::UnixListener::bind(&hung).unwrap();
    c.engines = on(hung);
    let began = Instant::now();
    let err = DockerProvider::connect(c.clone())
        .await
        .err()
        .expect("connect to a hung engine");
    assert!(matches!(err, ProviderError::Unavailable { .. }), "{err}");
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "took {:?}",
        began.elapsed()
    );
}

#[tokio::test]
async fn containers_rakazo_did_not_create_are_never_touched() {
    let p = provider().await;
    let docker = p.engine().clone();
    let foreign = docker
        .create_container(
            None::<bollard::query_parameters::CreateContainerOptions>,
            bollard::models::ContainerCreateBody {
                image: Some(p.config().image.clone()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let r = ProviderRef(foreign.id.clone());
    assert_eq!(p.state(&r).await.unwrap(), MachineState::Gone);
    let s = spec("t-foreign", "t", MachineLimits::default());
    assert!(matches!(
        p.prepare(&r, &s).await,
        Err(ProviderError::NotFound(_))
    ));
    p.stop(&r).await.unwrap();
    p.destroy(&r).await.unwrap();
    let still = docker.inspect_container(&foreign.id, None).await;
    let force = RemoveContainerOptionsBuilder::default().force(true).build();
    docker
        .remove_container(&foreign.id, Some(force))
        .await
        .unwrap();
    assert!(
        still.is_ok(),
        "destroy removed a container rakazo does not manage"
    );
}
