//! The RFB server behind a view or control socket, for now Debian's x11vnc 0.9.16 listening on a
//! unix socket only (`-unixsock PATH -rfbport 0`). The gateway uses only [`RfbServer::start`],
//! [`RfbServer::is_alive`] and [`RfbServer::stop`], so a native server can take its place.
//!
//! x11vnc reaches the display through the X cookie the display module wrote (`-auth`), runs with
//! a cleared environment in its own process group, and logs to a file beside its socket (read
//! back for error messages). It offers security type None: the socket's directory (0700) and the
//! socket's mode (0600, set as soon as it appears) are the access control, with the capability
//! table in front. A view server also gets `-viewonly` as defence in depth; the gateway's own
//! filter ([`super::filter`]) is what enforces view-only.
//!
//! A view server never exchanges selections (`-nosel`, and each direction named too): what a bot
//! copies (CLIPBOARD, PRIMARY, cut buffer) is not sent to viewers as ServerCutText, and a viewer
//! cannot set them (the filter drops ClientCutText as well). Control servers share the
//! clipboard both ways.

use crate::display::DisplayNum;
use nix::sys::signal::Signal;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

/// How long x11vnc may take to create its socket.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How often the socket is looked for while x11vnc starts.
const START_POLL: Duration = Duration::from_millis(20);
/// How long x11vnc has to exit after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// Why an RFB server could not start.
#[derive(Debug, thiserror::Error)]
pub enum RfbServerError {
    #[error("cannot start x11vnc for display {display}")]
    Spawn {
        display: DisplayNum,
        #[source]
        source: std::io::Error,
    },
    #[error("x11vnc for display {display} exited before listening: {log_tail}")]
    ExitedEarly {
        display: DisplayNum,
        log_tail: String,
    },
    #[error("x11vnc for display {display} did not create its socket within {START_TIMEOUT:?}: {log_tail}")]
    StartTimeout {
        display: DisplayNum,
        log_tail: String,
    },
    #[error("cannot make the socket {} private", path.display())]
    Chmod {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What to serve and where.
#[derive(Debug, Clone)]
pub struct RfbServerSpec<'a> {
    pub program: &'a Path,
    pub display: DisplayNum,
    /// The display's cookie file.
    pub xauthority: &'a Path,
    /// The unix socket to listen on (its directory must be private).
    pub socket: &'a Path,
    /// Where the server logs.
    pub log: &'a Path,
    /// Pass `-viewonly` (defence in depth behind the gateway's filter).
    pub view_only: bool,
    /// Whether its clients' input can reach it (after the gateway's filter).
    pub input: RfbInput,
    /// Whether the desktop's selections are exchanged with clients (control); `false` (view):
    /// nothing the bot copies leaves the desktop, whatever `view_only` says.
    pub selections: bool,
}

/// Whether a server's clients can send input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RfbInput {
    /// View: the gateway drops every input message.
    None,
    /// Control.
    Full,
}

/// A running x11vnc. Stop it with [`RfbServer::stop`]; dropping a running one kills its group.
#[derive(Debug)]
pub struct RfbServer {
    child: Child,
    pid: u32,
    socket: PathBuf,
    log: PathBuf,
    stopped: bool,
}

impl RfbServer {
    /// Starts the server and returns once its socket exists (mode 0600). The socket may refuse
    /// connections for a moment longer, until the server listens: callers retry.
    pub async fn start(spec: &RfbServerSpec<'_>) -> Result<Self, RfbServerError> {
        let display = spec.display;
        let spawn_err = |source| RfbServerError::Spawn { display, source };
        let _ = std::fs::remove_file(spec.socket);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(spec.log)
            .map_err(spawn_err)?;
        let log_err = log.try_clone().map_err(spawn_err)?;
        let mut cmd = Command::new(spec.program);
        cmd.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .arg("-display")
            .arg(display.to_string())
            .arg("-auth")
            .arg(spec.xauthority)
            .arg("-unixsock")
            .arg(spec.socket)
            .args([
                "-rfbport",
                "0",
                "-shared",
                "-forever",
                "-nopw",
                "-noxdamage",
            ])
            // No rc file, no reverse DNS, no bell, no remote-control channel through X
            // properties.
            .args(["-norc", "-nolookup", "-nobell", "-noremote"])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .process_group(0)
            .kill_on_drop(true);
        if spec.view_only {
            cmd.arg("-viewonly");
        }
        if !spec.selections {
            // -nosel alone turns the exchange off; the four directions are named as well so
            // that no single option's meaning stands between a viewer and the bot's clipboard.
            cmd.args([
                "-nosel",
                "-noprimary",
                "-noclipboard",
                "-nosetprimary",
                "-nosetclipboard",
            ]);
        }
        if spec.input == RfbInput::None {
            // x11vnc turns the X server's key autorepeat off while clients type (its workaround
            // for laggy key-ups); a server nobody types into leaves the desktop as it is.
            cmd.arg("-repeat");
        }
        let child = cmd.spawn().map_err(spawn_err)?;
        let pid = child.id().unwrap_or_default();
        let mut server = Self {
            child,
            pid,
            socket: spec.socket.to_path_buf(),
            log: spec.log.to_path_buf(),
            stopped: false,
        };
        if let Err(e) = server.await_socket(display).await {
            server.stop().await;
            return Err(e);
        }
        let num = display.get();
        tracing::debug!(display = num, pid, "x11vnc listening");
        Ok(server)
    }

    async fn await_socket(&mut self, display: DisplayNum) -> Result<(), RfbServerError> {
        let wait = async {
            loop {
                if self.socket.exists() {
                    return Ok(());
                }
                if !self.is_alive() {
                    return Err(RfbServerError::ExitedEarly {
                        display,
                        log_tail: crate::display::xvfb::log_tail(&self.log),
                    });
                }
                tokio::time::sleep(START_POLL).await;
            }
        };
        match tokio::time::timeout(START_TIMEOUT, wait).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(RfbServerError::StartTimeout {
                    display,
                    log_tail: crate::display::xvfb::log_tail(&self.log),
                })
            }
        }
        std::fs::set_permissions(&self.socket, std::fs::Permissions::from_mode(0o600)).map_err(
            |source| RfbServerError::Chmod {
                path: self.socket.clone(),
                source,
            },
        )
    }

    /// The socket it listens on.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Whether it still runs (reaping it if it exited).
    pub fn is_alive(&mut self) -> bool {
        !self.stopped && matches!(self.child.try_wait(), Ok(None))
    }

    /// Stops its process group and removes its socket and log. Idempotent.
    pub async fn stop(&mut self) {
        if self.stopped {
            return;
        }
        super::super::procs::stop_group(&mut self.child, Signal::SIGTERM, STOP_GRACE).await;
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(&self.log);
        self.stopped = true;
    }
}

impl Drop for RfbServer {
    fn drop(&mut self) {
        if !self.stopped {
            tracing::warn!(pid = self.pid, "x11vnc dropped without stop; killing it");
            super::super::procs::signal_group(self.pid, Signal::SIGKILL);
            let _ = std::fs::remove_file(&self.socket);
            let _ = std::fs::remove_file(&self.log);
        }
    }
}
