//! X server lifecycle and access: start and stop leave nothing behind, Xvnc's RFB on its private
//! socket and no TCP listener, only the cookie opens the display, locks, and a killed server.

use super::*;

fn pid_alive(pid: u32) -> bool {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap());
    nix::sys::signal::kill(pid, None).is_ok()
}

#[tokio::test]
async fn start_and_stop_leave_no_lock_socket_or_process() -> Result<()> {
    for kind in [XServerKind::Xvnc, XServerKind::Xvfb] {
        let started = now();
        let mut desktop = Desktop::start_kind(kind).await?;
        eprintln!("{} cold start: {:?}", kind.program(), started.elapsed());
        let display = desktop.display();
        let pid = desktop.server.pid();
        let xauthority = desktop.server.xauthority().to_path_buf();
        let rfb = desktop.server.rfb_socket().map(|p| p.to_path_buf());
        assert_eq!(rfb.is_some(), kind == XServerKind::Xvnc, "{kind:?}");
        ensure!(display.lock_path().exists(), "no lock file");
        ensure!(display.socket_path().exists(), "no socket");
        ensure!(pid_alive(pid));
        ensure!(desktop.server.is_alive());
        assert_eq!(desktop.server.display_env(), format!(":{}", display.get()));
        assert_eq!(
            fs::metadata(&xauthority)?.permissions().mode() & 0o777,
            0o600
        );
        let lock = fs::read_to_string(display.lock_path())?;
        assert_eq!(lock.trim(), pid.to_string());
        desktop.access().connect()?.sync()?;

        desktop.server.stop().await?;
        ensure!(!desktop.server.is_alive());
        ensure!(!pid_alive(pid), "{kind:?} pid {pid} still exists");
        ensure!(!display.lock_path().exists(), "lock file left behind");
        ensure!(!display.socket_path().exists(), "socket left behind");
        ensure!(!xauthority.exists(), "cookie file left behind");
        if let Some(rfb) = rfb {
            ensure!(!rfb.exists(), "rfb socket left behind");
        }
        // Stop is idempotent.
        desktop.server.stop().await?;
    }
    Ok(())
}

/// The socket inodes a process holds open (`socket:[N]` links in `/proc/<pid>/fd`).
fn socket_inodes(pid: u32) -> Result<Vec<String>> {
    let mut inodes = Vec::new();
    for fd in fs::read_dir(format!("/proc/{pid}/fd"))? {
        let target = fs::read_link(fd?.path()).unwrap_or_default();
        let target = target.to_string_lossy();
        if let Some(inode) = target
            .strip_prefix("socket:[")
            .and_then(|t| t.strip_suffix(']'))
        {
            inodes.push(inode.to_string());
        }
    }
    Ok(inodes)
}

/// The lines of `/proc/net/<table>` (tcp, udp, unix...) whose inode is one of `inodes`.
fn sockets_in(table: &str, inodes: &[String]) -> Result<Vec<String>> {
    let text = fs::read_to_string(format!("/proc/net/{table}"))?;
    // The inode is column 10 of tcp/udp lines and column 7 of unix lines.
    let column = if table == "unix" { 6 } else { 9 };
    Ok(text
        .lines()
        .skip(1)
        .filter(|l| {
            l.split_whitespace()
                .nth(column)
                .is_some_and(|i| inodes.iter().any(|n| n == i))
        })
        .map(str::to_string)
        .collect())
}

/// Xvnc serves RFB on its private unix socket only (mode 0600, security type None), holds no
/// TCP or UDP socket at all, and offers the extensions the guest's capture and input use (GLX
/// is off).
#[tokio::test]
async fn xvnc_serves_rfb_on_its_private_socket_only() -> Result<()> {
    use std::io::{Read, Write};
    let desktop = Desktop::start().await?;
    let pid = desktop.server.pid();
    let rfb = desktop
        .server
        .rfb_socket()
        .context("xvnc has an rfb socket")?
        .to_path_buf();
    assert_eq!(rfb.parent(), Some(desktop.dir.path()));
    assert_eq!(fs::metadata(&rfb)?.permissions().mode() & 0o777, 0o600);

    let inodes = socket_inodes(pid)?;
    for table in ["tcp", "tcp6", "udp", "udp6", "raw", "raw6"] {
        let held = sockets_in(table, &inodes)?;
        ensure!(held.is_empty(), "Xvnc holds {table} sockets: {held:?}");
    }
    let unix = sockets_in("unix", &inodes)?;
    let listening: Vec<&str> = unix
        .iter()
        // Flags 00010000 = __SO_ACCEPTCON: a listening socket; the path is the last column.
        .filter(|l| l.split_whitespace().nth(3) == Some("00010000"))
        .filter_map(|l| l.split_whitespace().nth(7))
        .collect();
    let mut want = vec![
        desktop.display().socket_path().display().to_string(),
        rfb.display().to_string(),
    ];
    let mut got: Vec<String> = listening.iter().map(|s| s.to_string()).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want, "Xvnc's listening sockets");

    // It speaks RFB there and offers security type None only.
    let mut s = std::os::unix::net::UnixStream::connect(&rfb)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut version = [0u8; 12];
    s.read_exact(&mut version)?;
    assert_eq!(&version, b"RFB 003.008\n");
    s.write_all(b"RFB 003.008\n")?;
    let mut n = [0u8; 1];
    s.read_exact(&mut n)?;
    let mut types = vec![0u8; usize::from(n[0])];
    s.read_exact(&mut types)?;
    assert_eq!(types, [1], "security types");
    drop(s);

    let conn = desktop.access().connect()?;
    use x11rb::connection::RequestConnection as _;
    for (name, want) in [
        ("GLX", false),
        ("MIT-SHM", true),
        ("XTEST", true),
        ("DAMAGE", true),
        ("RANDR", true),
        ("XFIXES", true),
    ] {
        assert_eq!(conn.extension_information(name)?.is_some(), want, "{name}");
    }
    drop(conn);
    desktop.stop().await
}

#[tokio::test]
async fn only_the_cookie_opens_the_display() -> Result<()> {
    let desktop = Desktop::start().await?;
    let display = desktop.display();
    let n = display.get();

    let wrong = DisplayAccess::new(display, Cookie::random()).connect();
    assert!(
        matches!(wrong, Err(DisplayError::Connect { .. })),
        "wrong cookie: {wrong:?}"
    );
    let socket = std::os::unix::net::UnixStream::connect(display.socket_path())?;
    let (stream, _) = x11rb::rust_connection::DefaultStream::from_unix_stream(socket)?;
    ensure!(
        RustConnection::connect_to_stream(stream, 0).is_err(),
        "a client without a cookie got in"
    );

    // No abstract socket (file permissions would not apply) and no TCP listener.
    let unix = fs::read_to_string("/proc/net/unix")?;
    let path = format!("/tmp/.X11-unix/X{n}");
    ensure!(unix.lines().any(|l| l.ends_with(&format!(" {path}"))));
    ensure!(
        !unix.lines().any(|l| l.ends_with(&format!(" @{path}"))),
        "abstract socket present"
    );
    ensure!(std::net::TcpStream::connect(("127.0.0.1", 6000 + n)).is_err());

    // An Xlib client (what Chrome is) gets in with DISPLAY and XAUTHORITY, and not without.
    let xdpyinfo = |xauthority: &std::path::Path| {
        std::process::Command::new("xdpyinfo")
            .env_clear()
            .env("DISPLAY", desktop.server.display_env())
            .env("XAUTHORITY", xauthority)
            .env("HOME", desktop.dir.path())
            .output()
    };
    let ok = xdpyinfo(desktop.server.xauthority())?;
    ensure!(
        ok.status.success(),
        "xdpyinfo failed: {}",
        String::from_utf8_lossy(&ok.stderr)
    );
    ensure!(String::from_utf8_lossy(&ok.stdout).contains("dimensions:    1280x800 pixels"));
    let denied = xdpyinfo(&desktop.dir.path().join("missing"))?;
    ensure!(
        !denied.status.success(),
        "xdpyinfo got in without the cookie"
    );
    // (Its extensions: `xvnc_serves_rfb_on_its_private_socket_only`.)
    desktop.stop().await
}

#[tokio::test]
async fn a_live_lock_refuses_the_display_and_a_dead_ones_files_are_cleared() -> Result<()> {
    let dir = private_dir()?;
    let display = next_display();
    // A lock naming a live process (this test) makes the display unavailable.
    fs::write(display.lock_path(), format!("{:>10}\n", std::process::id()))?;
    let refused = XServer::start(display, dir.path(), &XServerOptions::default()).await;
    let message = match refused {
        Err(error @ DisplayError::InUse { .. }) => error.to_string(),
        other => bail!("expected InUse, got {other:?}"),
    };
    assert_eq!(
        message,
        format!(
            "display :{} is in use by live pid {}",
            display.get(),
            std::process::id()
        )
    );
    ensure!(
        display.lock_path().exists(),
        "a live lock must be left alone"
    );

    // A lock naming a dead process, and its socket, are removed and the server starts.
    let mut dead = std::process::Command::new("true").spawn()?;
    let dead_pid = dead.id();
    dead.wait()?;
    fs::write(display.lock_path(), format!("{dead_pid:>10}\n"))?;
    fs::write(display.socket_path(), b"stale")?;
    let mut server = XServer::start(display, dir.path(), &XServerOptions::default()).await?;
    server.access().connect()?.sync()?;
    // While it runs, the display is refused to a second server, which leaves it working.
    let second_dir = private_dir()?;
    let second = XServer::start(display, second_dir.path(), &XServerOptions::default()).await;
    match second {
        Err(DisplayError::InUse { pid, .. }) => assert_eq!(u32::try_from(pid)?, server.pid()),
        other => bail!("expected InUse, got {other:?}"),
    }
    server.access().connect()?.sync()?;
    server.stop().await?;
    ensure!(!display.lock_path().exists() && !display.socket_path().exists());

    // A runtime directory others can read is refused before anything starts.
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))?;
    let open = XServer::start(display, dir.path(), &XServerOptions::default()).await;
    ensure!(matches!(
        open,
        Err(DisplayError::RuntimeDirNotPrivate { .. })
    ));
    Ok(())
}

#[tokio::test]
async fn a_killed_server_is_noticed_and_its_files_cleaned_on_stop() -> Result<()> {
    let mut desktop = Desktop::start().await?;
    let display = desktop.display();
    let rfb = desktop
        .server
        .rfb_socket()
        .context("xvnc has an rfb socket")?
        .to_path_buf();
    let pid = nix::unistd::Pid::from_raw(i32::try_from(desktop.server.pid())?);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL)?;
    let status = tokio::time::timeout(Duration::from_secs(5), desktop.server.wait_exit()).await??;
    ensure!(!status.success());
    ensure!(!desktop.server.is_alive());
    ensure!(display.lock_path().exists(), "SIGKILL leaves the lock");
    ensure!(rfb.exists(), "SIGKILL leaves the rfb socket");
    desktop.server.stop().await?;
    ensure!(!display.lock_path().exists() && !display.socket_path().exists());
    ensure!(!rfb.exists(), "the rfb socket is removed");

    // The same display starts again.
    let mut again = XServer::start(display, desktop.dir.path(), &XServerOptions::default()).await?;
    again.stop().await?;
    Ok(())
}
