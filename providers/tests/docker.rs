//! The docker provider against a real engine: podman's Docker-compatible service
//! (`bash scripts/podman.sh start`), found through `RAKAZO_TEST_PODMAN_SOCK` (default
//! `/var/tmp/rakazo-podman/podman.sock`), with the computer image layered on the root
//! filesystem tar from `RAKAZO_TEST_ROOTFS` (default: `bash image/rootfs.sh path`).
//!
//! These tests check the provider's lifecycle, not the guest: the "guest" of the image they run
//! is a shell script that sleeps, so containers stay up without a control plane. A missing engine
//! or root filesystem fails the tests; nothing is skipped.
//!
//! Several engines: two more podman services with storage of their own (`scripts/podman.sh start
//! b` and `c`, started by the test), one of them behind a relay the test closes to silence it;
//! and an engine over TCP through a TLS front that requires a client certificate (certificates
//! from rcgen). Those run a tiny image (a 129-byte static guest that waits) so no 1 GB image is
//! copied between engines.

use bollard::query_parameters::{
    DownloadFromContainerOptionsBuilder, RemoveContainerOptionsBuilder, RemoveImageOptionsBuilder,
    UploadToContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::TryStreamExt;
use providers::docker::image::{ensure_image, image_exists, ImageSpec};
use providers::docker::{
    container_name, volume_name, DockerConfig, DockerContainment, DockerProvider, Endpoint,
    EngineConfig, TlsFiles,
};
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
    // The sleeping guest dials nothing (the contained network is `a_contained_computer_…`'s).
    c.network_mode = Some("none".into());
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
            control_ws: None,
            control_tcp_addr: None,
            other_replicas: Vec::new(),
            cert_sha256: "ab".repeat(32),
            token: Secret(token.into()),
        },
        limits,
        placement: None,
        network: None,
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

/// One tar entry: a regular file `name` with `mode`, owned by `uid`.
fn tar_entry(name: &str, mode: u32, uid: u32, data: &[u8]) -> Vec<u8> {
    let mut header = [0u8; 512];
    header[..name.len()].copy_from_slice(name.as_bytes());
    header[100..108].copy_from_slice(format!("{mode:07o}\0").as_bytes());
    header[108..116].copy_from_slice(format!("{uid:07o}\0").as_bytes());
    header[116..124].copy_from_slice(format!("{uid:07o}\0").as_bytes());
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
    tar.resize(tar.len().div_ceil(512) * 512, 0);
    tar
}

/// Writes `name` with `data` into `dir` of a container (0644, owned by the workspace user).
async fn write_file(docker: &Docker, container: &str, dir: &str, name: &str, data: &[u8]) {
    let mut tar = tar_entry(name, 0o644, 1000, data);
    tar.resize(tar.len() + 1024, 0);
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

/// Removes a computer's container and home volume, whatever is left of them.
async fn remove_computer(docker: &Docker, computer: &str) {
    let force = RemoveContainerOptionsBuilder::default().force(true).build();
    let _ = docker
        .remove_container(&container_name(computer), Some(force))
        .await;
    let _ = docker
        .remove_volume(
            &volume_name(computer),
            None::<bollard::query_parameters::RemoveVolumeOptions>,
        )
        .await;
    // A contained one's named namespace (its link goes with it) and table.
    let (netns, table) = providers::local::network_names(computer);
    let _ = std::process::Command::new("ip")
        .args(["netns", "del", &netns])
        .output();
    let _ = std::process::Command::new("nft")
        .args(["delete", "table", "inet", &table])
        .output();
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
            rt.block_on(async { remove_computer(&engine().await, &computer).await });
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
    assert_eq!(host.network_mode.as_deref(), Some("none"));
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

/// `ip` run with `args`; its stdout.
fn ip(args: &[&str]) -> String {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Full containment: the container gets no network of the engine's; once it runs, its
/// namespace is named and given one link to this host (and the gateway's resolv.conf); stop and
/// destroy remove what was made, and a start makes it anew in the new container's namespace.
#[tokio::test]
async fn a_contained_computer_has_one_link_made_at_every_start() {
    let docker = engine().await;
    let image = sleeper_image(&docker).await;
    let mut c = config(&image);
    c.network_mode = None;
    c.containment = DockerContainment::Full;
    let p = DockerProvider::connect(c).await.expect("connect");
    let id = format!("t-net-{}", nonce());
    let _cleanup = Cleanup(id.clone());
    let (netns, table) = providers::local::network_names(&id);
    let veth = format!("rkz{}", &netns["rkz-".len()..]);
    let ns_path = Path::new("/run/netns").join(&netns);

    let r = p
        .provision(&spec(&id, "net-token", MachineLimits::default()))
        .await
        .expect("provision");
    let info = docker.inspect_container(cid(&r), None).await.unwrap();
    let host = info.host_config.unwrap();
    assert_eq!(host.network_mode.as_deref(), Some("none"));
    let env = info.config.unwrap().env.unwrap();
    assert!(
        env.contains(&"RAKAZO_CONTROL_ADDR=10.233.0.1:9".to_string()),
        "the guest dials the tunnel at its gateway: {env:?}"
    );
    let pid = info.state.unwrap().pid.unwrap();
    let links = ip(&["-n", &netns, "-o", "link"]);
    assert_eq!(links.lines().count(), 2, "loopback and eth0 only: {links}");
    assert!(links.contains("eth0"), "{links}");
    let ns = |p: &str| std::fs::metadata(p).map(|m| std::os::unix::fs::MetadataExt::ino(&m));
    assert_eq!(
        ns(&format!("/proc/{pid}/ns/net")).unwrap(),
        ns(ns_path.to_str().unwrap()).unwrap(),
        "{netns} is the container's namespace"
    );
    assert!(ip(&["-o", "link", "show", "dev", &veth]).contains(&format!("alias {id}")));
    let resolv = read_file(&docker, cid(&r), "/etc/resolv.conf")
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&resolv.data).lines().last(),
        Some("nameserver 10.233.0.1")
    );
    let tables = || {
        let out = std::process::Command::new("nft")
            .args(["list", "tables"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(tables().contains(&table));
    // Its place in the egress gateway: the default policy, which can be changed.
    assert_eq!(p.network_policy(&id), Some(egress::Policy::open()));
    let none = egress::Policy::none();
    assert!(p.set_network_policy(&id, none.clone()));
    assert_eq!(p.network_policy(&id), Some(none));
    // From inside, the tunnel (127.0.0.1:9 here, where nothing listens) is at the fixed gateway
    // address: refused at once from the container's own address; another source address (one
    // a root with NET_RAW could forge) gets no answer at all.
    let dial = |source: &str| {
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &netns, "python3", "-c"])
            .arg(
                "import socket, sys\n\
                 s = socket.socket(); s.settimeout(2)\n\
                 if sys.argv[1]: s.bind((sys.argv[1], 0))\n\
                 try:\n    s.connect(('10.233.0.1', 9)); print('open')\n\
                 except ConnectionRefusedError: print('refused')\n\
                 except socket.timeout: print('timeout')\n",
            )
            .arg(source)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(dial(""), "refused");
    ip(&[
        "-n",
        &netns,
        "addr",
        "add",
        "10.233.255.250/32",
        "dev",
        "eth0",
    ]);
    // This host would route the answer back through the link: only the table stops it.
    ip(&["route", "add", "10.233.255.250/32", "dev", &veth]);
    let forged = dial("10.233.255.250");
    ip(&["route", "del", "10.233.255.250/32", "dev", &veth]);
    assert_eq!(forged, "timeout");

    p.stop(&r).await.expect("stop");
    assert!(!ns_path.exists(), "{netns} outlived the stop");
    assert!(!tables().contains(&table));
    assert!(ip(&["-o", "link", "show", "dev", &veth]).is_empty());

    let again = p
        .prepare(&r, &spec(&id, "net-token-2", MachineLimits::default()))
        .await
        .expect("start again");
    let pid2 = docker
        .inspect_container(cid(&again), None)
        .await
        .unwrap()
        .state
        .unwrap()
        .pid
        .unwrap();
    assert_ne!(pid, pid2);
    assert_eq!(
        ns(&format!("/proc/{pid2}/ns/net")).unwrap(),
        ns(ns_path.to_str().unwrap()).unwrap(),
        "{netns} is the new container's namespace"
    );

    p.destroy(&again).await.expect("destroy");
    assert!(!ns_path.exists(), "{netns} outlived the destroy");
    assert!(!tables().contains(&table));
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

// ---- Several engines ----------------------------------------------------------------------

/// A second engine: the podman instance `name` of `scripts/podman.sh` (its own storage), started
/// if it is not running; its socket and a client.
async fn instance(name: &str) -> (PathBuf, Docker) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new("bash")
        .args(["scripts/podman.sh", "start", name])
        .current_dir(&root)
        .output()
        .expect("run bash scripts/podman.sh start");
    assert!(
        out.status.success(),
        "podman instance {name} did not start: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let sock = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    let docker = providers::docker::connect_engine(&sock, Duration::from_secs(20))
        .await
        .unwrap_or_else(|e| panic!("podman instance {name} at {}: {e}", sock.display()));
    (sock, docker)
}

/// A static x86-64 executable of 129 bytes that waits for a signal forever (`pause` in a loop):
/// a guest that keeps its container running, with no libc and no shell to ship.
fn pause_forever() -> Vec<u8> {
    const BASE: u64 = 0x40_0000;
    let code: [u8; 9] = [
        0xb8, 0x22, 0, 0, 0, // mov eax, 34 (pause)
        0x0f, 0x05, // syscall
        0xeb, 0xf7, // jmp back to the mov
    ];
    let size = (64 + 56 + code.len()) as u64;
    let mut elf = Vec::new();
    elf.extend_from_slice(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0");
    elf.extend_from_slice(&2u16.to_le_bytes()); // executable
    elf.extend_from_slice(&0x3eu16.to_le_bytes()); // x86-64
    elf.extend_from_slice(&1u32.to_le_bytes());
    elf.extend_from_slice(&(BASE + 64 + 56).to_le_bytes()); // entry: the code
    elf.extend_from_slice(&64u64.to_le_bytes()); // program headers right after this one
    elf.extend_from_slice(&0u64.to_le_bytes()); // no section headers
    elf.extend_from_slice(&0u32.to_le_bytes());
    for half in [64u16, 56, 1, 0, 0, 0] {
        elf.extend_from_slice(&half.to_le_bytes());
    }
    // One loadable, readable and executable segment: the whole file at BASE.
    elf.extend_from_slice(&1u32.to_le_bytes());
    elf.extend_from_slice(&5u32.to_le_bytes());
    for word in [0, BASE, BASE, size, size, 0x1000] {
        elf.extend_from_slice(&word.to_le_bytes());
    }
    elf.extend_from_slice(&code);
    elf
}

/// A root filesystem of one tiny static guest that waits forever ([`pause_forever`]) and a
/// passwd for root: enough to create, start, stop and move containers between engines without
/// a 1 GB image. Imported on `docker` under a tag named by its content; returns the tag.
async fn tiny_image(docker: &Docker) -> String {
    let guest = pause_forever();
    let mut tar = tar_entry("usr/local/bin/rakazo-guest", 0o755, 0, &guest);
    tar.extend(tar_entry(
        "etc/passwd",
        0o644,
        0,
        b"root:x:0:0:root:/root:/bin/sh\n",
    ));
    tar.extend(tar_entry("etc/group", 0o644, 0, b"root:x:0:\n"));
    tar.resize(tar.len() + 1024, 0);
    let tag = format!(
        "rakazo-test-tiny:{}",
        &hex::encode(Sha256::digest(&tar))[..16]
    );
    if image_exists(docker, &tag, Duration::from_secs(10))
        .await
        .unwrap()
    {
        return tag;
    }
    let options = bollard::query_parameters::CreateImageOptionsBuilder::default()
        .from_src("-")
        .repo(&tag)
        .build();
    docker
        .create_image(Some(options), Some(bollard::body_full(tar.into())), None)
        .try_collect::<Vec<_>>()
        .await
        .expect("import the tiny image");
    tag
}

async fn remove_image(docker: &Docker, tag: &str) {
    let options = RemoveImageOptionsBuilder::default().force(true).build();
    let _ = docker.remove_image(tag, Some(options), None).await;
}

/// The computers of Rakazo home volumes on an engine (podman's container list has states
/// bollard cannot read, so the volumes are what is listed).
async fn computers_on(docker: &Docker) -> Vec<String> {
    let filters =
        std::collections::HashMap::from([("label", vec!["io.rakazo.managed=true".to_string()])]);
    let options = bollard::query_parameters::ListVolumesOptionsBuilder::default()
        .filters(&filters)
        .build();
    docker
        .list_volumes(Some(options))
        .await
        .unwrap()
        .volumes
        .unwrap_or_default()
        .into_iter()
        .filter_map(|v| v.labels.get("io.rakazo.computer").cloned())
        .collect()
}

/// Removes every Rakazo computer (container and home) from a test-only engine.
async fn wipe(docker: &Docker) {
    for computer in computers_on(docker).await {
        remove_computer(docker, &computer).await;
    }
}

/// Whether the engine has the container of `computer`.
async fn has_container(docker: &Docker, computer: &str) -> bool {
    docker
        .inspect_container(&container_name(computer), None)
        .await
        .is_ok()
}

/// Forwards connections on a unix socket to `target`, each until either side closes. Closing
/// it cuts every connection and removes the socket: the engine behind it goes silent.
struct Relay {
    path: PathBuf,
    accept: tokio::task::JoinHandle<()>,
}

impl Relay {
    fn open(path: &Path, target: &Path) -> Self {
        let listener = tokio::net::UnixListener::bind(path).unwrap();
        let target = target.to_path_buf();
        let accept = tokio::spawn(async move {
            // Aborting this task drops the set, which aborts every connection.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                let target = target.clone();
                connections.spawn(async move {
                    if let Ok(mut engine) = tokio::net::UnixStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut engine).await;
                    }
                });
            }
        });
        Self {
            path: path.to_path_buf(),
            accept,
        }
    }

    fn close(self) {
        self.accept.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

fn tag_of(r: &ProviderRef) -> &str {
    r.0.split_once('/').map_or("", |(engine, _)| engine)
}

/// Two engines, `b` (behind a relay that the test closes) and `c`: new computers go to the one
/// with fewer Rakazo computers, or to the one named; an engine without the image gets it from
/// the other; a silent engine is skipped, its computers `Unavailable` until it has been silent
/// for the grace, then gone; when it answers again they are there; destroy removes what a
/// computer left on the other engine.
#[tokio::test]
async fn computers_spread_over_engines_and_survive_one_going_silent() {
    let (b_sock, b) = instance("b").await;
    let (_c_sock, c) = instance("c").await;
    wipe(&b).await;
    wipe(&c).await;
    let image = tiny_image(&b).await;
    remove_image(&c, &image).await;
    let dir = tempfile::tempdir().unwrap();
    let relay_path = dir.path().join("b.sock");
    let relay = Relay::open(&relay_path, &b_sock);

    let mut config = DockerConfig::with_engines(
        vec![
            EngineConfig::unix("b", &relay_path),
            EngineConfig::unix("c", _c_sock.clone()),
        ],
        image.clone(),
    );
    config.network_mode = Some("none".into());
    config.stop_grace = Duration::from_secs(2);
    config.call_timeout = Duration::from_secs(10);
    config.engine_gone_after = Duration::from_secs(1);
    let p = DockerProvider::connect(config).await.expect("connect");
    let n = nonce();
    let s = |name: &str| spec(&format!("t-{name}-{n}"), "t", MachineLimits::default());
    // Computer `name`'s spec, placed on `engine`.
    let on = |name: &str, engine: &str| SandboxSpec {
        placement: Some(engine.into()),
        network: None,
        ..s(name)
    };

    // Fewest computers first (a tie goes to the first configured); c gets the image from b.
    let x = p.provision(&s("x")).await.expect("provision x");
    assert_eq!(tag_of(&x), "b");
    let y = p.provision(&s("y")).await.expect("provision y");
    assert_eq!(tag_of(&y), "c");
    assert!(image_exists(&c, &image, Duration::from_secs(10))
        .await
        .unwrap());
    assert_eq!(p.state(&y).await.unwrap(), MachineState::Running);
    // A named engine, even with more computers.
    let z = p.provision(&on("z", "c")).await.expect("provision z");
    assert_eq!(tag_of(&z), "c");
    let err = p.provision(&on("q", "nowhere")).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Invalid, "{err}");
    assert!(err.to_string().contains("(configured: b, c)"), "{err}");
    assert!(p.check_placement("c").is_ok());
    let err = p.check_placement("nowhere").unwrap_err();
    assert!(
        err.to_string()
            .contains("no docker engine named nowhere (configured: b, c)"),
        "{err}"
    );

    // b goes silent: its computers are unavailable, not gone, and new ones go to c.
    relay.close();
    let err = p.state(&x).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Transient, "{err}");
    let err = p.prepare(&x, &s("x")).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Transient, "{err}");
    let w = p
        .provision(&s("w"))
        .await
        .expect("provision w while b is silent");
    assert_eq!(tag_of(&w), "c", "placed on the engine that answers");
    let err = p.provision(&on("q", "b")).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Transient, "{err}");

    // Silent past the grace: b's computers are gone.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(p.state(&x).await.unwrap(), MachineState::Gone);
    assert!(matches!(
        p.prepare(&x, &s("x")).await,
        Err(ProviderError::NotFound(_))
    ));
    p.stop(&x).await.expect("stop a computer of a lost engine");

    // b answers again: the computer was there all along.
    let relay = Relay::open(&relay_path, &b_sock);
    assert_eq!(p.state(&x).await.unwrap(), MachineState::Running);

    // x replaced on c (what a start does once b was lost); destroying it there also removes
    // what it left on b.
    let x2 = p.provision(&on("x", "c")).await.expect("replace x on c");
    // Another computer's home on b, with no container: only x's things may go.
    let other = format!("t-u-{n}");
    b.create_volume(bollard::models::VolumeCreateRequest {
        name: Some(volume_name(&other)),
        labels: Some(
            [
                ("io.rakazo.managed".to_string(), "true".to_string()),
                ("io.rakazo.computer".to_string(), other.clone()),
            ]
            .into(),
        ),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(has_container(&b, &format!("t-x-{n}")).await);
    p.destroy(&x2).await.expect("destroy x");
    assert!(!has_container(&b, &format!("t-x-{n}")).await, "left on b");
    assert!(!has_container(&c, &format!("t-x-{n}")).await);
    assert!(
        volume_exists(&b, &volume_name(&other)).await,
        "another computer's home swept away"
    );
    assert!(!volume_exists(&b, &volume_name(&format!("t-x-{n}"))).await);
    for r in [&y, &z, &w] {
        p.destroy(r).await.expect("destroy");
    }
    assert!(!has_container(&c, &format!("t-y-{n}")).await);
    assert!(computers_on(&c).await.is_empty(), "homes left on c");
    relay.close();
    wipe(&b).await;
    wipe(&c).await;
}

/// A certificate authority for the TLS engine test, and certificates it signs.
struct Ca {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Self {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        Self {
            issuer: rcgen::CertifiedIssuer::self_signed(params, key).unwrap(),
        }
    }

    /// A leaf for `names` (a server's addresses; empty for a client): its PEM and key PEM.
    fn leaf(&self, names: &[&str]) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "rakazo test");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// A TLS front on 127.0.0.1 for the engine on `target`: the Docker daemon's `--tlsverify`, which
/// podman's service lacks. Only clients with a certificate from `client_ca` get through.
async fn tls_front(
    server_cert: &str,
    server_key: &str,
    client_ca: &Ca,
    target: PathBuf,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(client_ca.issuer.der().clone()).unwrap();
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider.clone())
            .build()
            .unwrap();
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(server_cert.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
    let key = PrivateKeyDer::from_pem_slice(server_key.as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, target) = (acceptor.clone(), target.clone());
            connections.spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                if let Ok(mut engine) = tokio::net::UnixStream::connect(&target).await {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut engine).await;
                }
            });
        }
    });
    (addr, task)
}

/// Writes `pem` to `dir/name` with `mode`; returns the path.
fn pem_file(dir: &Path, name: &str, pem: &str, mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, pem).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// An engine over TCP: TLS with our client certificate, the engine's certificate checked
/// against its CA only. A computer runs there like on a socket; a client certificate the engine
/// does not trust, an engine certificate we do not trust and a key others can read all fail.
#[tokio::test]
async fn a_tls_engine_runs_computers_for_clients_it_trusts() {
    let docker = engine().await;
    let image = tiny_image(&docker).await;
    let (engine_ca, client_ca, stranger_ca) =
        (Ca::new("engine"), Ca::new("clients"), Ca::new("stranger"));
    let (server_cert, server_key) = engine_ca.leaf(&["127.0.0.1"]);
    let (addr, front) = tls_front(&server_cert, &server_key, &client_ca, socket()).await;
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = client_ca.leaf(&[]);
    let (stranger_cert, stranger_key) = stranger_ca.leaf(&[]);
    let files = TlsFiles {
        ca: pem_file(dir.path(), "ca.pem", &engine_ca.issuer.pem(), 0o644),
        cert: pem_file(dir.path(), "cert.pem", &cert, 0o644),
        key: pem_file(dir.path(), "key.pem", &key, 0o600),
    };
    let config_with = |tls: TlsFiles| {
        let endpoint = Endpoint::parse(&format!("tcp://{addr}"), Some(tls)).unwrap();
        let mut c = DockerConfig::with_engines(
            vec![EngineConfig {
                name: "far".into(),
                endpoint,
            }],
            image.clone(),
        );
        c.network_mode = Some("none".into());
        c.stop_grace = Duration::from_secs(2);
        c.call_timeout = Duration::from_secs(10);
        c
    };
    // Full containment plumbs namespaces on this host: a remote engine's are out of reach.
    let mut contained = config_with(files.clone());
    contained.containment = DockerContainment::Full;
    let err = DockerProvider::connect(contained)
        .await
        .err()
        .expect("full containment on a tcp engine");
    assert!(
        matches!(err, ProviderError::BadSpec(ref m) if m.contains("engine far is tcp://")),
        "{err}"
    );

    let p = DockerProvider::connect(config_with(files.clone()))
        .await
        .expect("connect over TLS");
    let id = format!("t-tls-{}", nonce());
    let _cleanup = Cleanup(id.clone());
    let s = spec(&id, "tls-token", MachineLimits::default());
    let r = p.provision(&s).await.expect("provision over TLS");
    assert_eq!(tag_of(&r), "far");
    assert_eq!(p.state(&r).await.unwrap(), MachineState::Running);
    let token = read_file(&docker, cid(&r), "/etc/rakazo/enroll-token")
        .await
        .expect("the token went through the TLS engine");
    assert_eq!(token.data, b"tls-token");
    p.stop(&r).await.expect("stop over TLS");
    assert_eq!(p.state(&r).await.unwrap(), MachineState::Stopped);
    p.destroy(&r).await.expect("destroy over TLS");
    assert!(!has_container(&docker, &id).await);

    // A client certificate from a CA the engine does not trust: refused in the handshake.
    let stranger = TlsFiles {
        cert: pem_file(dir.path(), "stranger.pem", &stranger_cert, 0o644),
        key: pem_file(dir.path(), "stranger-key.pem", &stranger_key, 0o600),
        ..files.clone()
    };
    let err = DockerProvider::connect(config_with(stranger))
        .await
        .err()
        .expect("a stranger");
    assert_eq!(err.class(), ErrorClass::Transient, "{err}");
    assert!(err.to_string().contains("UnknownCA"), "{err}");
    // An engine whose certificate does not chain to the CA we hold for it.
    let wrong_ca = TlsFiles {
        ca: pem_file(dir.path(), "wrong-ca.pem", &stranger_ca.issuer.pem(), 0o644),
        ..files.clone()
    };
    let err = DockerProvider::connect(config_with(wrong_ca))
        .await
        .err()
        .expect("an untrusted engine");
    assert_eq!(err.class(), ErrorClass::Transient, "{err}");
    assert!(
        err.to_string().contains("invalid peer certificate"),
        "{err}"
    );
    // A key others can read is refused before anything is dialled.
    let open_key = TlsFiles {
        key: pem_file(dir.path(), "open-key.pem", &key, 0o644),
        ..files
    };
    let err = DockerProvider::connect(config_with(open_key))
        .await
        .err()
        .expect("an open key");
    assert!(
        matches!(err, ProviderError::BadSpec(ref m) if m.contains("chmod 600")),
        "{err}"
    );
    front.abort();
}
