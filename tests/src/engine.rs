//! The real container engine for system tests: podman's Docker-compatible service, started by
//! `scripts/podman.sh` (the test command starts it; a test fails, never skips, without it), and
//! the computer image, built once per test process and engine through the real `rakazo image
//! build`.
//!
//! Tests of several engines use two more podman services with storage of their own
//! ([`TwoEngines`]: instances `b` and `c` of `scripts/podman.sh`, started on demand, only for
//! those tests, one test at a time since one of them kills an engine).

use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The engine's API socket: `RAKAZO_TEST_PODMAN_SOCK`, else what `scripts/podman.sh` uses.
pub fn socket() -> PathBuf {
    std::env::var_os("RAKAZO_TEST_PODMAN_SOCK")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/rakazo-podman/podman.sock"))
}

/// The repository root (the tests crate's parent).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

/// Fails with what to do when the engine does not answer.
pub fn require_engine() -> Result<()> {
    let sock = socket();
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "5", "--unix-socket"])
        .arg(&sock)
        .arg("http://d/_ping")
        .output()
        .context("run curl")?;
    if !out.status.success() || out.stdout != b"OK" {
        bail!(
            "no container engine answers on {}: start it with `bash scripts/podman.sh start` \
             (the test command does)",
            sock.display()
        );
    }
    Ok(())
}

/// The computer image's tag on the test engine, built (or found: it is content-addressed) once
/// per process by the real CLI: `rakazo image build --guest <static guest> --docker-socket
/// <engine>`.
pub fn image() -> Result<String> {
    require_engine()?;
    image_on(&socket())
}

/// The computer image's tag on the engine at `socket`, built once per process and engine; the
/// older `rakazo-computer` tags there are removed but the three newest (as the test command
/// does on the test engine).
pub fn image_on(socket: &Path) -> Result<String> {
    static TAGS: Mutex<Option<HashMap<PathBuf, String>>> = Mutex::new(None);
    let mut tags = TAGS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = tags.as_ref().and_then(|m| m.get(socket)) {
        return Ok(t.clone());
    }
    let out = Command::new(crate::bin("rakazo"))
        .args(["image", "build", "--json", "--recipe"])
        .arg(repo_root().join("image"))
        .arg("--guest")
        .arg(crate::static_guest())
        .arg("--docker-socket")
        .arg(socket)
        .output()
        .context("run rakazo image build")?;
    if !out.status.success() {
        bail!(
            "rakazo image build failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "image build printed {:?}",
            String::from_utf8_lossy(&out.stdout)
        )
    })?;
    let t = v["image"]
        .as_str()
        .context("no image in the build's output")?
        .to_string();
    if socket != self::socket() {
        let old = podman_on(
            socket,
            &[
                "images",
                "--sort",
                "created",
                "--filter",
                "reference=rakazo-computer",
                "--format",
                "{{.Repository}}:{{.Tag}}",
            ],
        )?;
        let old: Vec<&str> = old.lines().skip(3).filter(|l| !l.contains(&t)).collect();
        if !old.is_empty() {
            let mut args = vec!["rmi"];
            args.extend(old);
            let _ = podman_on(socket, &args);
        }
    }
    tags.get_or_insert_with(HashMap::new)
        .insert(socket.to_path_buf(), t.clone());
    Ok(t)
}

/// Runs `podman --remote` against the test engine (what an operator would do behind the
/// control plane's back); returns stdout.
pub fn podman(args: &[&str]) -> Result<String> {
    podman_on(&socket(), args)
}

/// Runs `podman --remote` against the engine at `socket`; returns stdout.
pub fn podman_on(socket: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("podman")
        .arg("--remote")
        .arg("--url")
        .arg(format!("unix://{}", socket.display()))
        .args(args)
        .output()
        .context("run podman --remote")?;
    if !out.status.success() {
        bail!(
            "podman {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The container name of a Docker computer (the provider's naming).
pub fn container_of(computer: &str) -> String {
    format!("rakazo-{computer}")
}

/// Whether the engine still has the container of `computer` (in any state).
pub fn container_exists(computer: &str) -> Result<bool> {
    container_exists_on(&socket(), computer)
}

/// Whether the engine at `socket` has the container of `computer` (in any state).
pub fn container_exists_on(socket: &Path, computer: &str) -> Result<bool> {
    let names = podman_on(
        socket,
        &[
            "ps",
            "-a",
            "--filter",
            &format!("name={}", container_of(computer)),
            "--format",
            "{{.Names}}",
        ],
    )?;
    Ok(!names.trim().is_empty())
}

/// Runs `bash scripts/podman.sh <command> <instance>`; returns stdout.
fn podman_sh(command: &str, instance: &str) -> Result<String> {
    let out = Command::new("bash")
        .args(["scripts/podman.sh", command, instance])
        .current_dir(repo_root())
        .output()
        .context("run bash scripts/podman.sh")?;
    if !out.status.success() {
        bail!(
            "scripts/podman.sh {command} {instance}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Starts the podman instance `name` (its own storage) unless it runs; returns its socket.
pub fn start_instance(name: &str) -> Result<PathBuf> {
    podman_sh("start", name).map(PathBuf::from)
}

/// Kills the podman service of instance `name` at once, as with a lost host (its containers
/// run on until their processes are killed).
pub fn kill_instance(name: &str) -> Result<()> {
    podman_sh("kill", name).map(drop)
}

/// Two engines of their own for a test: the instances `b` (the engine named `default`, first in
/// the configuration) and `c`, started if needed, the computer image on both, no Rakazo
/// computer left on either. Held by one test at a time; what the test left is removed when it
/// is dropped.
pub struct TwoEngines {
    pub b: PathBuf,
    pub c: PathBuf,
    pub image: String,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl TwoEngines {
    pub async fn take() -> Result<Self> {
        static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let turn = TURN.lock().await;
        let (b, c) = (start_instance("b")?, start_instance("c")?);
        let image = image_on(&b)?;
        if image_on(&c)? != image {
            bail!("the image tag differs between engines b and c");
        }
        for engine in [&b, &c] {
            wipe(engine)?;
        }
        Ok(Self {
            b,
            c,
            image,
            _turn: turn,
        })
    }

    /// The `rakazo serve` environment of a docker provider on both (b is `default`).
    pub fn world_env(&self) -> Vec<(String, String)> {
        vec![
            ("RAKAZO_DOCKER_SOCKET".into(), self.b.display().to_string()),
            (
                "RAKAZO_DOCKER_ENGINES".into(),
                format!("c=unix://{}", self.c.display()),
            ),
            ("RAKAZO_DOCKER_IMAGE".into(), self.image.clone()),
        ]
    }

    /// Makes the engine at `socket` count one computer more (a labelled home with no container),
    /// so that new computers go to the other one first.
    pub fn weigh_down(&self, socket: &Path) -> Result<()> {
        podman_on(
            socket,
            &[
                "volume",
                "create",
                "--label",
                "io.rakazo.managed=true",
                "--label",
                "io.rakazo.computer=ballast",
                "rakazo-home-ballast",
            ],
        )
        .map(drop)
    }

    /// The engine holding the container of `computer` (a computer has one at a time).
    pub fn holder(&self, computer: &str) -> Result<&Path> {
        match (
            container_exists_on(&self.b, computer)?,
            container_exists_on(&self.c, computer)?,
        ) {
            (true, false) => Ok(&self.b),
            (false, true) => Ok(&self.c),
            other => bail!("computer {computer} has containers on (b, c) = {other:?}"),
        }
    }
}

impl Drop for TwoEngines {
    fn drop(&mut self) {
        for engine in [&self.b, &self.c] {
            let _ = wipe(engine);
        }
    }
}

/// Removes every Rakazo container and home volume from a test-only engine.
fn wipe(socket: &Path) -> Result<()> {
    let label = "label=io.rakazo.managed=true";
    let containers = podman_on(socket, &["ps", "-a", "-q", "--filter", label])?;
    let containers: Vec<&str> = containers.split_whitespace().collect();
    if !containers.is_empty() {
        let mut args = vec!["rm", "-f", "-t", "0"];
        args.extend(containers);
        podman_on(socket, &args)?;
    }
    let volumes = podman_on(socket, &["volume", "ls", "-q", "--filter", label])?;
    let volumes: Vec<&str> = volumes.split_whitespace().collect();
    if !volumes.is_empty() {
        let mut args = vec!["volume", "rm", "-f"];
        args.extend(volumes);
        podman_on(socket, &args)?;
    }
    Ok(())
}
