//! One X server process per display number: TigerVNC's `Xvnc` for desktops (an X server that
//! serves the RFB protocol itself), or `Xvfb` (benchmark anchors); stale-lock handling, the
//! cookie file, readiness through `-displayfd`, liveness, and a stop that leaves no process, lock
//! file or socket behind.
//!
//! Access control is by cookie. The server is started with `-auth` on a fresh 128-bit
//! MIT-MAGIC-COOKIE-1 (a 0600 file in the caller's private 0700 runtime directory), without
//! `-ac`, with TCP off and with the abstract-namespace socket off (`-nolisten local`: abstract
//! sockets ignore file permissions and are reachable from any mount namespace). The filesystem
//! socket stays at `/tmp/.X11-unix/X<n>`: xorg-server 21.1 (both servers' base) hard-codes that
//! directory and has no `-listenfd`, and Debian 12's libxcb 1.15 (which Chrome uses) cannot parse
//! a `DISPLAY` naming a socket path (that arrived in libxcb 1.16), so a socket moved into a
//! private directory would be unreachable for Chrome. A client without the cookie is refused at
//! connection setup.
//!
//! Xvnc serves RFB on one unix socket only, `rfb-<n>.sock` in the same private runtime directory
//! (`-rfbunixpath`, mode 0600), never on TCP (`-rfbport -1`), with security type None: the
//! directory, the socket's mode and the screen gateway's capability table in front of it are
//! the access control (see [`XServerKind::Xvnc`] for every RFB parameter and why).
//!
//! `-displayfd` makes the server skip the X lock protocol (it sets `nolock`), and without a lock
//! a second server on the same number would silently replace the first one's socket. So this
//! module takes `/tmp/.X<n>-lock` itself, atomically and in the X server's format, before
//! spawning, and points it at the server's pid; other X servers and tools honour it as usual.
//!
//! It leaves to others: choosing slots (the caller maps a slot to [`DisplayNum::for_slot`]), the
//! runtime directory's lifetime, who may reach the RFB socket (the screen gateway), and passing
//! `DISPLAY`/`XAUTHORITY` to Chrome ([`XServer::display_env`], [`XServer::xauthority`]).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use super::{sys, Cookie, DisplayAccess, DisplayError, DisplayNum};

mod files;
use files::{
    acquire_lock, as_pid, check_private_dir, create_private, remove_if_present,
    remove_server_files, update_lock, write_private, xauth_entry,
};

/// How long [`XServer::stop`] waits after SIGTERM before it sends SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// Which X server runs a display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XServerKind {
    /// TigerVNC's `Xvnc` (Debian `tigervnc-standalone-server`), the desktops' server: X plus
    /// RFB on a unix socket ([`XServer::rfb_socket`]). Its RFB parameters:
    ///
    /// - `-rfbport -1 -rfbunixpath <runtime>/rfb-<n>.sock -rfbunixmode 0600 -SecurityTypes
    ///   None`: no TCP listener at all, one socket only its user can open, in a 0700 directory.
    /// - `-SendCutText=0 -SendPrimary=0`: nothing the bot copies ever leaves the desktop as
    ///   ServerCutText. The setting is global to the server (all clients, view and control
    ///   alike), and a viewer must never receive the bot's clipboard, so nobody does: bot→user
    ///   clipboard is not offered. `AcceptCutText` stays on, so a controller can paste into the
    ///   desktop; the gateway's filter drops a viewer's ClientCutText.
    /// - `-AllowOverride=` (empty): no X client of the desktop can change a parameter through the
    ///   VNC extension (by default it may turn `SendCutText` back on).
    /// - `-AlwaysShared -NeverShared=0 -DisconnectClients=0`: every client shares the desktop; a
    ///   client asking for exclusive access never disconnects the others.
    /// - `-AcceptSetDesktopSize=0`: a controller's viewer cannot resize the bot's screen (the
    ///   geometry is the contract's, and the agent's coordinates depend on it).
    /// - `-UseBlacklist=0`: every client comes through the gateway over one unix socket, so a
    ///   host blacklist would lock every viewer out at once.
    /// - `-FrameRate=120`: Xvnc sends a change half a frame after its first damage, then once a
    ///   frame while changes continue; at the default 60 that adds 8 ms to every first update,
    ///   120 halves it (BENCHMARKS.md, "Live screens on Xvnc"). Chromium draws at most 60
    ///   frames a second, so a scrolling page gains few updates.
    Xvnc,
    /// `Xvfb` (Debian `xvfb`): X only. Desktops no longer use it; benchmarks start it as the
    /// anchor ("x11vnc on Xvfb").
    Xvfb,
}

impl XServerKind {
    /// The program started.
    pub fn program(self) -> &'static str {
        match self {
            Self::Xvnc => "Xvnc",
            Self::Xvfb => "Xvfb",
        }
    }
}

/// Geometry, server and readiness limit of a new X server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XServerOptions {
    pub kind: XServerKind,
    pub width: u16,
    pub height: u16,
    pub depth: u8,
    /// How long to wait for the server to announce readiness on `-displayfd`.
    pub ready_timeout: Duration,
}

impl Default for XServerOptions {
    /// docs/screens.md#desktops: 1280x800x24, on Xvnc.
    fn default() -> Self {
        Self {
            kind: XServerKind::Xvnc,
            width: 1280,
            height: 800,
            depth: 24,
            ready_timeout: Duration::from_secs(10),
        }
    }
}

impl XServerOptions {
    /// The defaults on `kind`.
    pub fn of(kind: XServerKind) -> Self {
        Self {
            kind,
            ..Self::default()
        }
    }
}

/// A running X server. Stop it with [`XServer::stop`]; dropping a running one kills it
/// (SIGKILL) and removes its lock file and sockets as a last resort.
#[derive(Debug)]
pub struct XServer {
    kind: XServerKind,
    display: DisplayNum,
    pid: u32,
    child: Child,
    access: DisplayAccess,
    xauthority: PathBuf,
    /// Xvnc's RFB socket.
    rfb_socket: Option<PathBuf>,
    log: PathBuf,
    stopped: bool,
}

impl XServer {
    /// Starts an X server on `display` and returns once it accepts connections (and, for Xvnc,
    /// RFB connections on its socket).
    ///
    /// `runtime_dir` must be an existing directory owned by this process's user with no group or
    /// other permissions (0700); the cookie file `xauth-<n>`, the log `xserver-<n>.log` and
    /// Xvnc's `rfb-<n>.sock` are made there. Refuses a display whose lock file names a live pid
    /// (see [`acquire_lock`] for why this module, not the server, keeps the lock); removes a lock
    /// file and socket left by a dead one.
    pub async fn start(
        display: DisplayNum,
        runtime_dir: &Path,
        options: &XServerOptions,
    ) -> Result<Self, DisplayError> {
        check_private_dir(display, runtime_dir)?;
        acquire_lock(display)?;
        let (mut server, ready_rx) = match Self::spawn(display, runtime_dir, options) {
            Ok(spawned) => spawned,
            Err(error) => {
                // Nothing runs: give the lock (still naming us) back.
                if let Err((path, cleanup)) = remove_server_files(display, &[std::process::id()]) {
                    // (`display` itself cannot appear inside tracing's macros: they import a
                    // function of that name.)
                    let num = display;
                    tracing::warn!(display = %num, path = %path.display(), error = %cleanup, "cannot release the x lock");
                }
                return Err(error);
            }
        };
        let ready = match update_lock(display, server.pid) {
            Ok(()) => server.await_ready(ready_rx, options.ready_timeout).await,
            Err(error) => Err(error),
        };
        let ready = ready.and_then(|()| server.check_rfb_socket());
        match ready {
            Ok(()) => {
                tracing::debug!(display = %server.display, pid = server.pid, server = server.kind.program(), "x server ready");
                Ok(server)
            }
            Err(error) => {
                if let Err(stop_error) = server.stop().await {
                    tracing::warn!(display = %server.display, pid = server.pid, server = server.kind.program(), error = %stop_error, "x server cleanup after a failed start failed");
                }
                Err(error)
            }
        }
    }

    /// Writes the cookie file and spawns the server; returns the read end of its readiness pipe.
    fn spawn(
        display: DisplayNum,
        runtime_dir: &Path,
        options: &XServerOptions,
    ) -> Result<(Self, std::os::fd::OwnedFd), DisplayError> {
        let cookie = Cookie::random();
        let n = display.get();
        let xauthority = runtime_dir.join(format!("xauth-{n}"));
        let log = runtime_dir.join(format!("xserver-{n}.log"));
        let rfb_socket =
            (options.kind == XServerKind::Xvnc).then(|| runtime_dir.join(format!("rfb-{n}.sock")));
        let runtime_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| DisplayError::RuntimeDir {
                display,
                path,
                source,
            }
        };
        if let Some(socket) = &rfb_socket {
            // Left by a server that was killed: Xvnc would refuse to listen on it.
            remove_if_present(socket).map_err(runtime_err(socket))?;
        }
        write_private(&xauthority, &xauth_entry(display, &cookie))
            .map_err(runtime_err(&xauthority))?;
        let log_file = create_private(&log).map_err(runtime_err(&log))?;
        let log_err = log_file.try_clone().map_err(runtime_err(&log))?;

        // Readiness: the server writes "<n>\n" to this pipe and closes it once it accepts
        // clients; if it dies first, the pipe reaches EOF. Both ends are close-on-exec, so only
        // the server (through `inherit_fd_across_exec`) ever holds the write end.
        let (ready_rx, ready_tx) =
            nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| DisplayError::Spawn {
                display,
                server: options.kind.program(),
                source: e.into(),
            })?;
        let mut command = Command::new(options.kind.program());
        command
            // The agent's environment (its RAKAZO_* settings) is none of the X server's business.
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .arg(display.to_string())
            .args(server_args(options, &xauthority, rfb_socket.as_deref()))
            .arg("-displayfd")
            .arg(ready_tx.as_raw_fd().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log_file))
            .stderr(Stdio::from(log_err))
            // Its own process group: a terminal's ^C to the agent must not take desktops down.
            .process_group(0);
        sys::inherit_fd_across_exec(&mut command, ready_tx.as_raw_fd());
        let child = match command.spawn() {
            Ok(child) => child,
            Err(source) => {
                let _ = remove_if_present(&xauthority);
                return Err(DisplayError::Spawn {
                    display,
                    server: options.kind.program(),
                    source,
                });
            }
        };
        drop(ready_tx);
        let pid = child.id().unwrap_or_default();
        let server = Self {
            kind: options.kind,
            display,
            pid,
            child,
            access: DisplayAccess::new(display, cookie),
            xauthority,
            rfb_socket,
            log,
            stopped: false,
        };
        Ok((server, ready_rx))
    }

    /// Xvnc creates its RFB socket while it initialises, before it announces readiness: one
    /// missing then means it could not listen (its log says why).
    fn check_rfb_socket(&self) -> Result<(), DisplayError> {
        match &self.rfb_socket {
            Some(socket) if !socket.exists() => Err(DisplayError::NoRfbSocket {
                display: self.display,
                pid: self.pid,
                log_tail: log_tail(&self.log),
            }),
            _ => Ok(()),
        }
    }

    async fn await_ready(
        &mut self,
        ready_rx: std::os::fd::OwnedFd,
        timeout: Duration,
    ) -> Result<(), DisplayError> {
        let (display, pid, server) = (self.display, self.pid, self.kind.program());
        let spawn_err = |source| DisplayError::Spawn {
            display,
            server,
            source,
        };
        let mut rx =
            tokio::net::unix::pipe::Receiver::from_owned_fd(ready_rx).map_err(spawn_err)?;
        let mut announced = Vec::new();
        let read = async {
            // The server writes one short line; the cap bounds a misbehaving writer.
            let mut limited = (&mut rx).take(64);
            limited.read_to_end(&mut announced).await
        };
        match tokio::time::timeout(timeout, read).await {
            Err(_elapsed) => {
                return Err(DisplayError::StartTimeout {
                    display,
                    server,
                    pid,
                    timeout,
                })
            }
            Ok(Err(source)) => return Err(spawn_err(source)),
            Ok(Ok(_)) => {}
        }
        let announced = String::from_utf8_lossy(&announced).trim().to_owned();
        if announced.is_empty() {
            // EOF without a number: the server exited (e.g. "server is already active").
            let _status = self.child.wait().await;
            return Err(DisplayError::ExitedEarly {
                display,
                server,
                pid,
                log_tail: log_tail(&self.log),
            });
        }
        if announced != display.get().to_string() {
            return Err(DisplayError::WrongDisplay {
                display,
                server,
                pid,
                announced,
            });
        }
        Ok(())
    }

    /// The display this server runs.
    pub fn display(&self) -> DisplayNum {
        self.display
    }

    /// The server's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Which server this is.
    pub fn kind(&self) -> XServerKind {
        self.kind
    }

    /// Xvnc's RFB socket (mode 0600, in the private runtime directory); `None` for Xvfb.
    pub fn rfb_socket(&self) -> Option<&Path> {
        self.rfb_socket.as_deref()
    }

    /// Number and cookie, to open X connections with.
    pub fn access(&self) -> &DisplayAccess {
        &self.access
    }

    /// The value for `DISPLAY` in Chrome's environment (`:101`).
    pub fn display_env(&self) -> String {
        self.display.to_string()
    }

    /// The Xauthority file holding the cookie (a FamilyWild entry for this display number), for
    /// `XAUTHORITY` in Chrome's environment. It is 0600: a child running as another user cannot
    /// read it.
    pub fn xauthority(&self) -> &Path {
        &self.xauthority
    }

    /// The server's stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Whether the process is still running (it is reaped here if it has exited).
    pub fn is_alive(&mut self) -> bool {
        if self.stopped {
            return false;
        }
        match self.child.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                tracing::debug!(display = %self.display, pid = self.pid, %status, "x server has exited");
                false
            }
            Err(error) => {
                tracing::warn!(display = %self.display, pid = self.pid, %error, "cannot poll the x server");
                false
            }
        }
    }

    /// Completes when the process exits (reaping it), e.g. to notice a crash without polling.
    /// Cancel-safe; after it returns, [`XServer::is_alive`] is `false` and [`XServer::stop`] only
    /// cleans up.
    pub async fn wait_exit(&mut self) -> io::Result<std::process::ExitStatus> {
        self.child.wait().await
    }

    /// Stops the server: SIGTERM, up to [`STOP_GRACE`] for it to exit, then SIGKILL; then
    /// removes its lock file and sockets if it left them, and the cookie file. Idempotent: a
    /// failed stop can be retried, and stopping a stopped server returns `Ok(())`.
    pub async fn stop(&mut self) -> Result<(), DisplayError> {
        if self.stopped {
            return Ok(());
        }
        let (display, pid, server) = (self.display, self.pid, self.kind.program());
        let stop_err = |source| DisplayError::Stop {
            display,
            server,
            pid,
            source,
        };
        if self.child.try_wait().map_err(stop_err)?.is_none() {
            match kill(as_pid(pid), Signal::SIGTERM) {
                Ok(()) | Err(Errno::ESRCH) => {}
                Err(errno) => return Err(stop_err(errno.into())),
            }
            match tokio::time::timeout(STOP_GRACE, self.child.wait()).await {
                Ok(status) => {
                    status.map_err(stop_err)?;
                }
                Err(_elapsed) => {
                    tracing::warn!(display = %self.display, pid, server, "x server ignored SIGTERM; sending SIGKILL");
                    self.child.start_kill().map_err(stop_err)?;
                    self.child.wait().await.map_err(stop_err)?;
                }
            }
        }
        remove_server_files(display, &[pid, std::process::id()]).map_err(|(path, source)| {
            DisplayError::Cleanup {
                display,
                path,
                source,
            }
        })?;
        for path in std::iter::once(&self.xauthority).chain(&self.rfb_socket) {
            remove_if_present(path).map_err(|source| DisplayError::Cleanup {
                display,
                path: path.clone(),
                source,
            })?;
        }
        self.stopped = true;
        Ok(())
    }
}

impl Drop for XServer {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        tracing::warn!(display = %self.display, pid = self.pid, server = self.kind.program(), "x server dropped without stop; killing it");
        if let Ok(None) = self.child.try_wait() {
            // SIGKILL cannot be caught, so the server runs no more code and cannot recreate the
            // files removed below; tokio reaps the process in the background.
            let _ = self.child.start_kill();
        }
        let _ = remove_server_files(self.display, &[self.pid, std::process::id()]);
        let _ = remove_if_present(&self.xauthority);
        if let Some(socket) = &self.rfb_socket {
            let _ = remove_if_present(socket);
        }
    }
}

/// The server's arguments after the display number, up to (not including) `-displayfd`.
fn server_args(
    options: &XServerOptions,
    xauthority: &Path,
    rfb_socket: Option<&Path>,
) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = Vec::new();
    let mut push = |list: &[&str]| args.extend(list.iter().map(|a| (*a).into()));
    let (w, h, d) = (options.width, options.height, options.depth);
    match options.kind {
        XServerKind::Xvfb => push(&["-screen", "0", &format!("{w}x{h}x{d}")]),
        XServerKind::Xvnc => push(&["-geometry", &format!("{w}x{h}"), "-depth", &d.to_string()]),
    }
    push(&["-nolisten", "tcp", "-nolisten", "local", "-noreset"]);
    match options.kind {
        // Xvfb builds MIT-SHM, XTEST and DAMAGE in but the names make the dependency explicit.
        XServerKind::Xvfb => push(&[
            "+extension",
            "MIT-SHM",
            "+extension",
            "XTEST",
            "+extension",
            "DAMAGE",
            "-extension",
            "GLX",
        ]),
        // Xvnc has MIT-SHM, XTEST, DAMAGE, RANDR and XFIXES on by default; GLX is off as on
        // Xvfb (Chrome runs with --disable-gpu).
        XServerKind::Xvnc => push(&[
            "-extension",
            "GLX",
            "-rfbport",
            "-1",
            "-rfbunixmode",
            "0600",
            "-SecurityTypes",
            "None",
            "-SendCutText=0",
            "-SendPrimary=0",
            "-AcceptCutText=1",
            "-AllowOverride=",
            "-AlwaysShared",
            "-NeverShared=0",
            "-DisconnectClients=0",
            "-AcceptSetDesktopSize=0",
            "-UseBlacklist=0",
            "-FrameRate=120",
            "-desktop",
            "rakazo",
        ]),
    }
    args.push("-auth".into());
    args.push(xauthority.into());
    if let Some(socket) = rfb_socket {
        args.push("-rfbunixpath".into());
        args.push(socket.into());
    }
    args
}

/// The last kilobyte of a child's log (the X server's, Chrome's), on one line, for an error
/// message.
pub(crate) fn log_tail(path: &Path) -> String {
    const TAIL: u64 = 1024;
    let read = || -> io::Result<String> {
        let mut file = File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(TAIL)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let lines: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            if lines.is_empty() {
                "(empty log)".to_owned()
            } else {
                lines.join(" | ")
            }
        }
        Err(error) => format!("(log unreadable: {error})"),
    }
}

#[cfg(test)]
mod tests {
    use super::files::{pid_alive, read_lock_pid};
    use super::*;

    #[test]
    fn xvnc_serves_rfb_on_its_unix_socket_only_and_sends_no_clipboard() {
        let options = XServerOptions::default();
        assert_eq!(options.kind, XServerKind::Xvnc);
        let args: Vec<String> = server_args(
            &options,
            Path::new("/run/g/xauth-100"),
            Some(Path::new("/run/g/rfb-100.sock")),
        )
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
        let has = |pair: &[&str]| args.windows(pair.len()).any(|w| w == pair);
        for pair in [
            &["-rfbport", "-1"][..],
            &["-rfbunixpath", "/run/g/rfb-100.sock"],
            &["-rfbunixmode", "0600"],
            &["-SecurityTypes", "None"],
            &["-nolisten", "tcp"],
            &["-nolisten", "local"],
            &["-auth", "/run/g/xauth-100"],
            &["-geometry", "1280x800"],
            &["-depth", "24"],
            &["-SendCutText=0"],
            &["-SendPrimary=0"],
            &["-AllowOverride="],
            &["-AlwaysShared"],
            &["-DisconnectClients=0"],
            &["-AcceptSetDesktopSize=0"],
            &["-FrameRate=120"],
        ] {
            assert!(has(pair), "{pair:?} missing from {args:?}");
        }
        let xvfb = server_args(
            &XServerOptions::of(XServerKind::Xvfb),
            Path::new("/run/g/xauth-100"),
            None,
        );
        assert!(!xvfb.iter().any(|a| a.to_string_lossy().starts_with("-rfb")));
    }

    #[test]
    fn xauth_entry_is_a_wildcard_cookie_record() {
        let display = DisplayNum::new(177).unwrap();
        let cookie = Cookie::from_bytes([0xab; 16]);
        let entry = xauth_entry(display, &cookie);
        let mut expected = vec![0xff, 0xff, 0, 0, 0, 3];
        expected.extend_from_slice(b"177");
        expected.extend_from_slice(&[0, 18]);
        expected.extend_from_slice(b"MIT-MAGIC-COOKIE-1");
        expected.extend_from_slice(&[0, 16]);
        expected.extend_from_slice(&[0xab; 16]);
        assert_eq!(entry, expected);
    }

    #[test]
    fn lock_pids_parse_like_the_x_server_writes_them() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("lock");
        assert_eq!(read_lock_pid(&lock).unwrap(), None);
        fs::write(&lock, "      4242\n").unwrap();
        assert_eq!(read_lock_pid(&lock).unwrap(), Some(4242));
        fs::write(&lock, "garbage").unwrap();
        assert_eq!(read_lock_pid(&lock).unwrap(), Some(0));
        assert!(!pid_alive(0));
        assert!(pid_alive(i32::try_from(std::process::id()).unwrap()));
    }

    #[test]
    fn runtime_dir_must_be_private() {
        use std::os::unix::fs::PermissionsExt;
        let display = DisplayNum::new(199).unwrap();
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let err = check_private_dir(display, dir.path()).unwrap_err();
        assert!(
            err.to_string().contains("is not private (mode 755"),
            "{err}"
        );
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
        check_private_dir(display, dir.path()).unwrap();
        let missing = dir.path().join("missing");
        assert!(matches!(
            check_private_dir(display, &missing),
            Err(DisplayError::RuntimeDir { .. })
        ));
    }

    #[test]
    fn log_tail_joins_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        fs::write(&log, "one\n\n two \n").unwrap();
        assert_eq!(log_tail(&log), "one | two");
        assert!(log_tail(&dir.path().join("none")).starts_with("(log unreadable"));
    }
}
