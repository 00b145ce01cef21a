//! The real container engine for system tests: podman's Docker-compatible service, started by
//! `scripts/podman.sh` (the test command starts it; a test fails, never skips, without it), and
//! the computer image, built once per test process through the real `rakazo image build`.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
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

/// The computer image's tag, built (or found: it is content-addressed) once per process by the
/// real CLI: `rakazo image build --guest <static guest> --docker-socket <engine>`.
pub fn image() -> Result<String> {
    static TAG: Mutex<Option<String>> = Mutex::new(None);
    let mut tag = TAG.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = tag.as_ref() {
        return Ok(t.clone());
    }
    require_engine()?;
    let out = Command::new(crate::bin("rakazo"))
        .args(["image", "build", "--json", "--recipe"])
        .arg(repo_root().join("image"))
        .arg("--guest")
        .arg(crate::static_guest())
        .arg("--docker-socket")
        .arg(socket())
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
    *tag = Some(t.clone());
    Ok(t)
}

/// Runs `podman --remote` against the test engine (what an operator would do behind the
/// control plane's back); returns stdout.
pub fn podman(args: &[&str]) -> Result<String> {
    let out = Command::new("podman")
        .arg("--remote")
        .arg("--url")
        .arg(format!("unix://{}", socket().display()))
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
    let names = podman(&[
        "ps",
        "-a",
        "--filter",
        &format!("name={}", container_of(computer)),
        "--format",
        "{{.Names}}",
    ])?;
    Ok(!names.trim().is_empty())
}
