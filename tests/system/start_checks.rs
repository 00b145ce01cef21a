//! What `rakazo serve` checks and keeps at start (issue 11): it refuses to start with a secret
//! file others can read, naming the file and its mode; its SQLite files are private; and a
//! control plane restarted with the tunnel on port 0 takes its previous port again, so the
//! guests of running computers reconnect.

use anyhow::{ensure, Context, Result};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tests::{World, WorldOptions};

/// Runs `rakazo serve` on `data_dir` with `envs`; it must exit by itself (a refusal) within
/// our deadline. Returns its exit status and stderr.
async fn serve_must_exit(
    data_dir: &Path,
    envs: &[(&str, &str)],
) -> Result<(std::process::ExitStatus, String)> {
    let mut cmd = tokio::process::Command::new(tests::bin("rakazo"));
    cmd.arg("serve")
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("RAKAZO_DATA_DIR", data_dir)
        .env("RAKAZO_HTTP_ADDR", "127.0.0.1:0")
        .env("RAKAZO_TUNNEL_ADDR", "127.0.0.1:0")
        .env("RAKAZO_GUEST_BIN", tests::bin("rakazo-guest"))
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .context("rakazo serve kept running: it did not refuse to start")??;
    Ok((
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

fn mode_of(path: &Path) -> Result<u32> {
    Ok(std::fs::metadata(path)
        .with_context(|| format!("stat {}", path.display()))?
        .permissions()
        .mode()
        & 0o777)
}

#[tokio::test]
async fn a_secret_file_others_can_read_stops_the_server_naming_it() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    std::fs::create_dir(&data)?;
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700))?;
    // An API token left world-readable (by hand, a backup restore, a copy).
    let token = data.join("api-token");
    std::fs::write(
        &token,
        format!("rk_{}", hex::encode(rand::random::<[u8; 32]>())),
    )?;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644))?;
    let (status, stderr) = serve_must_exit(&data, &[]).await?;
    ensure!(!status.success(), "serve started: {stderr}");
    ensure!(
        stderr.contains(&token.display().to_string()) && stderr.contains("0644"),
        "the refusal names the file and its mode: {stderr}"
    );
    // Made private, the same data dir starts: what was refused was the mode, nothing else.
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600))?;

    // The API's TLS key, outside the data dir, is checked the same way.
    let (cert_pem, key_pem) = control_plane::tls::self_signed(&["127.0.0.1"])?;
    let cert = dir.path().join("api.pem");
    let key = dir.path().join("api-key.pem");
    std::fs::write(&cert, cert_pem)?;
    std::fs::write(&key, key_pem)?;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640))?;
    let (status, stderr) = serve_must_exit(
        &data,
        &[
            ("RAKAZO_TLS_CERT", cert.to_str().context("utf-8 path")?),
            ("RAKAZO_TLS_KEY", key.to_str().context("utf-8 path")?),
        ],
    )
    .await?;
    ensure!(
        !status.success(),
        "serve started with an open TLS key: {stderr}"
    );
    ensure!(
        stderr.contains(&key.display().to_string()) && stderr.contains("0640"),
        "the refusal names the key and its mode: {stderr}"
    );
    Ok(())
}

#[tokio::test]
async fn the_sqlite_files_are_private() -> Result<()> {
    // The server inherits the test runner's umask (022 on these machines): without the
    // control plane's own care SQLite would make these files 0644.
    let mut w = World::start().await?;
    let c = w.create_computer("ws-modes").await?;
    w.sh(&c, "true").await?;
    for name in ["rakazo.db", "rakazo.db-wal", "rakazo.db-shm"] {
        let path = w.data_dir.path().join(name);
        ensure!(
            mode_of(&path)? == 0o600,
            "{} has mode {:o}",
            path.display(),
            mode_of(&path)?
        );
    }
    ensure!(mode_of(w.data_dir.path())? == 0o700, "the data dir is 0700");
    w.check_log()
}

#[tokio::test]
async fn a_restart_on_tunnel_port_0_keeps_the_port_and_running_guests_reconnect() -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        tunnel_port_0_on_restart: true,
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("ws-port0").await?;
    assert_eq!(w.sh(&c, "echo before").await?, "before\n");
    let tunnel = w.tunnel.clone();
    // A crash and a restart asking for port 0 again; the guest keeps running and redialling.
    w.kill_server();
    w.spawn_server().await?;
    assert_eq!(
        w.tunnel, tunnel,
        "the restarted tunnel took its previous port"
    );
    // The exec waits for the guest to dial back in (bounded by the server's own wait).
    assert_eq!(w.sh(&c, "echo after").await?, "after\n");
    w.check_log()
}

#[tokio::test]
async fn a_restart_whose_tunnel_port_is_taken_says_running_guests_cannot_reconnect() -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        tunnel_port_0_on_restart: true,
        allow_warn: vec!["the tunnel's previous port is taken".into()],
        ..Default::default()
    })
    .await?;
    let tunnel = w.tunnel.clone();
    w.kill_server();
    // Someone else takes the port while the control plane is down.
    let squatter = std::net::UdpSocket::bind(&tunnel)?;
    w.spawn_server().await?;
    assert_ne!(w.tunnel, tunnel, "the taken port could not be reused");
    let log = w.log();
    ensure!(
        log.contains("the tunnel's previous port is taken")
            && log.contains("cannot reconnect until their computer is stopped and started"),
        "the log says what a new port means for running guests"
    );
    drop(squatter);
    w.check_log()
}
