//! The live-screen benchmarks' anchor (issue 17): "x11vnc on Xvfb", the way desktops were
//! served before Xvnc, started by the benchmarks themselves since the guest no longer does.
//!
//! [`XvfbDesktop`] is an Xvfb (through the guest's own `XServer`, so the same lock, cookie and
//! readiness handling) with, optionally, a Chromium (the guest's `Browser`, the flags a bot's
//! Chrome gets) showing a page. [`X11vnc`] is Debian's x11vnc 0.9.16 on a display, with the flags
//! the guest gave a view server, listening on a unix socket in a private directory. x11vnc keeps
//! its frames in SysV shared memory and removes the segments only when it exits cleanly, so it is
//! stopped with SIGTERM and waited for, never SIGKILLed first.

use anyhow::{anyhow, bail, Context, Result};
use guest_agent::browser::{Browser, BrowserOptions};
use guest_agent::display::{
    DisplayAccess, DisplayError, DisplayNum, XServer, XServerKind, XServerOptions,
};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// The anchors' displays start here, far from the guest's slots (100 and up) and from
/// bench_desktop's (700 and up).
const DISPLAY_BASE: u16 = 800;

/// How long x11vnc may take to listen, and to exit after SIGTERM.
const X11VNC_WAIT: Duration = Duration::from_secs(20);

fn private_dir(prefix: &str) -> Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

/// An Xvfb of the bench's own, with an optional Chromium on it. Stop it with
/// [`XvfbDesktop::stop`].
pub struct XvfbDesktop {
    server: XServer,
    browser: Option<Browser>,
    runtime: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl XvfbDesktop {
    /// Starts Xvfb (1280x800x24, the desktops' geometry) on the first free display from
    /// [`DISPLAY_BASE`], then a Chromium on `first_url` if given.
    pub async fn start(first_url: Option<String>) -> Result<Self> {
        let runtime = private_dir("rakazo-anchor-rt-")?;
        let home = private_dir("rakazo-anchor-home-")?;
        let server = start_xvfb(runtime.path()).await?;
        let mut desktop = Self {
            server,
            browser: None,
            runtime,
            home,
        };
        if let Some(url) = first_url {
            let mut options = BrowserOptions::new(
                desktop.home.path().join("profile"),
                desktop.home.path().to_path_buf(),
                desktop.server.display_env(),
                desktop.server.xauthority().to_path_buf(),
                desktop.runtime.path().to_path_buf(),
            );
            options.first_url = Some(url);
            match Browser::start(&options).await {
                Ok(b) => desktop.browser = Some(b),
                Err(e) => {
                    desktop.stop().await;
                    return Err(e).context("start Chromium on the anchor's Xvfb");
                }
            }
        }
        Ok(desktop)
    }

    /// `DISPLAY` of the anchor (`:800`).
    pub fn display_env(&self) -> String {
        self.server.display_env()
    }

    /// Its cookie file.
    pub fn xauthority(&self) -> &Path {
        self.server.xauthority()
    }

    /// Number and cookie, for X connections of the bench's own.
    pub fn access(&self) -> &DisplayAccess {
        self.server.access()
    }

    /// Xvfb's pid.
    pub fn pid(&self) -> u32 {
        self.server.pid()
    }

    /// Closes Chromium (CDP `Browser.close`), then stops Xvfb.
    pub async fn stop(mut self) {
        if let Some(mut b) = self.browser.take() {
            let _ = b.stop().await;
        }
        let _ = self.server.stop().await;
    }
}

async fn start_xvfb(runtime: &Path) -> Result<XServer> {
    for n in DISPLAY_BASE..DISPLAY_BASE + 64 {
        let display = DisplayNum::new(n).ok_or_else(|| anyhow!("display {n} out of range"))?;
        let options = XServerOptions::of(XServerKind::Xvfb);
        match XServer::start(display, runtime, &options).await {
            Ok(x) => return Ok(x),
            Err(DisplayError::InUse { .. } | DisplayError::SocketInUse { .. }) => {}
            Err(e) => return Err(e).context(format!("start Xvfb on {display}")),
        }
    }
    bail!("no free display from :{DISPLAY_BASE}")
}

/// x11vnc on a display, listening on a unix socket. Stop it with [`X11vnc::stop`]; dropping it
/// sends SIGTERM (x11vnc then removes its SysV segments itself).
pub struct X11vnc {
    child: tokio::process::Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl X11vnc {
    /// Starts x11vnc on `display` (`:N`) with the cookie file `xauthority`, with the flags the
    /// guest gave a view server, and returns once its socket accepts. It runs as the owner of
    /// the cookie file (the computer's user, when the bench is root), as the guest's x11vnc did:
    /// the X server attaches only shared memory its user may read.
    pub async fn start(display: &str, xauthority: &Path) -> Result<Self> {
        let dir = private_dir("rakazo-anchor-vnc-")?;
        let socket = dir.path().join("x11vnc.sock");
        let owner = std::fs::metadata(xauthority).context("the display's Xauthority")?;
        let (uid, gid) = (owner.uid(), owner.gid());
        let mut cmd = if uid == nix::unistd::geteuid().as_raw() {
            tokio::process::Command::new("x11vnc")
        } else {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
            let mut c = tokio::process::Command::new("setpriv");
            c.args([
                &format!("--reuid={uid}"),
                &format!("--regid={gid}"),
                "--clear-groups",
                "x11vnc",
            ]);
            c
        };
        let mut child = cmd
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .args(["-display", display, "-auth"])
            .arg(xauthority)
            .arg("-unixsock")
            .arg(&socket)
            .args([
                "-rfbport",
                "0",
                "-shared",
                "-forever",
                "-nopw",
                "-noxdamage",
            ])
            .args(["-norc", "-nolookup", "-nobell", "-noremote", "-viewonly"])
            .args([
                "-nosel",
                "-noprimary",
                "-noclipboard",
                "-nosetprimary",
                "-nosetclipboard",
                "-repeat",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start x11vnc (Debian package x11vnc)")?;
        let deadline = tokio::time::Instant::now() + X11VNC_WAIT;
        while tokio::net::UnixStream::connect(&socket).await.is_err() {
            if tokio::time::Instant::now() > deadline || child.try_wait()?.is_some() {
                terminate(&mut child).await;
                bail!("x11vnc did not listen on {}", socket.display());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Self {
            child,
            socket,
            _dir: dir,
        })
    }

    /// A new connection to it.
    pub async fn connect(&self) -> Result<tokio::net::UnixStream> {
        Ok(tokio::net::UnixStream::connect(&self.socket).await?)
    }

    /// x11vnc's pid (0 once reaped).
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// SIGTERM, then waits for it to exit (SIGKILL only after [`X11VNC_WAIT`]).
    pub async fn stop(mut self) {
        terminate(&mut self.child).await;
    }
}

impl Drop for X11vnc {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
}

async fn terminate(child: &mut tokio::process::Child) {
    let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) else {
        return;
    };
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    );
    if tokio::time::timeout(X11VNC_WAIT, child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}
