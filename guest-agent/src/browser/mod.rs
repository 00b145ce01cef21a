//! One Chrome per bot, on the bot's display, with the bot's persistent profile (contracts.md §3).
//!
//! This module owns the Chrome process: its profile directory ([`profile_dir`]), the stale
//! `SingletonLock` check before start, the exact command line and environment, readiness (Chrome
//! announces its DevTools port in `<profile>/DevToolsActivePort`, then CDP must answer
//! `/json/version`), crash detection ([`Browser::is_alive`]) and the stop sequence: CDP
//! `Browser.close` (which flushes cookies and the session), then SIGTERM, then SIGKILL to the
//! process group, then removal of the `Singleton*` files. CDP listens on 127.0.0.1 only and is
//! never published.
//!
//! Process discipline: Chrome leads its own process group. Its exit is observed without reaping
//! it (`waitid` with `WNOWAIT`, in the `process` submodule), so the group id stays reserved until
//! every member is gone and a signal to the group can never reach a stranger. Only Chrome's crash
//! handlers (`chrome_crashpad_handler`) daemonize out of the group; they exit by themselves once
//! the browser is gone (the real-Chrome tests check that).
//!
//! It leaves to others: the X server and its cookie (the display module passes `DISPLAY` and
//! `XAUTHORITY`), slots, fences and teardown order (the desktop layer), restarting a crashed
//! Chrome (callers poll [`Browser::is_alive`] and start a new one) and page snapshots. All
//! `chromiumoxide` use sits in [`cdp`].

pub mod cdp;
mod process;
mod profile;

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::time::Instant;

pub use cdp::{CdpError, CdpSession};
pub use profile::{
    ensure_profile_dir, profile_dir, DEVTOOLS_ACTIVE_PORT, PROFILES_DIR, SINGLETON_COOKIE,
    SINGLETON_LOCK, SINGLETON_SOCKET,
};

/// Debian's Chromium launcher.
pub const DEFAULT_CHROMIUM: &str = "/usr/bin/chromium";

/// The flags of contracts.md §3, in its order; `--user-data-dir=<profile>` follows them.
pub const CONTRACT_FLAGS: [&str; 10] = [
    "--no-sandbox",
    "--disable-dev-shm-usage",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-session-crashed-bubble",
    "--hide-crash-restore-bubble",
    "--password-store=basic",
    "--restore-last-session",
    "--remote-debugging-address=127.0.0.1",
];

/// Chrome picks a free port and writes it to `DevToolsActivePort`: no port to allocate, no race.
pub const DEBUGGING_PORT_FLAG: &str = "--remote-debugging-port=0";

/// Flags that keep Chrome quiet on an offline machine and place its window; the window size
/// (`--window-size=<w>,<h>`) and `--start-maximized` follow them.
pub const QUIET_FLAGS: [&str; 6] = [
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-features=Translate,MediaRouter",
    "--no-pings",
    "--window-position=0,0",
];

/// How long [`Browser::stop`] waits for Chrome to exit after `Browser.close`, and again after
/// SIGTERM (contracts.md §3).
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// How long [`Browser::stop`] tries to connect to CDP before it falls back to SIGTERM; the wait
/// for the exit after `Browser.close` ([`STOP_GRACE`]) comes after.
const CLOSE_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long [`Browser::stop`] waits for the group to vanish after SIGKILL (which cannot be
/// ignored; only a process stuck in the kernel takes longer).
const KILL_GRACE: Duration = Duration::from_secs(5);

/// Readiness poll interval: `DevToolsActivePort` appears a few hundred ms after spawn.
const READY_POLL: Duration = Duration::from_millis(5);

/// Exit poll interval while stopping (each poll may scan `/proc`).
const EXIT_POLL: Duration = Duration::from_millis(20);

/// Largest `/json/version` response read during the readiness probe.
const MAX_PROBE_RESPONSE: u64 = 64 * 1024;

/// How to start one Chrome. [`BrowserOptions::new`] fills in the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowserOptions {
    /// The Chromium executable ([`DEFAULT_CHROMIUM`]).
    pub chromium: PathBuf,
    /// The bot's profile ([`profile_dir`]); created 0700 when missing.
    pub profile: PathBuf,
    /// `HOME` for Chrome: the home root.
    pub home: PathBuf,
    /// `DISPLAY` for Chrome (`:101`, from [`crate::display::Xvfb::display_env`]).
    pub display: String,
    /// `XAUTHORITY` for Chrome (from [`crate::display::Xvfb::xauthority`]).
    pub xauthority: PathBuf,
    /// Where Chrome's log (`chromium-<profile key>.log`, stdout and stderr) is written; the
    /// previous run's log is kept as `chromium-<profile key>.log.1`.
    pub runtime_dir: PathBuf,
    pub width: u16,
    pub height: u16,
    /// Opened besides the restored session when given.
    pub first_url: Option<String>,
    /// `PATH` for Chrome.
    pub path: OsString,
    /// `LANG` for Chrome.
    pub lang: OsString,
    /// How long Chrome may take until CDP answers.
    pub ready_timeout: Duration,
    /// How long [`Browser::stop`] waits after `Browser.close` and again after SIGTERM
    /// ([`STOP_GRACE`]; shorter only in tests).
    pub stop_grace: Duration,
}

impl BrowserOptions {
    /// Options for `profile` on `display`, with the defaults: [`DEFAULT_CHROMIUM`], 1280x800 (the
    /// geometry of contracts.md §3), no first URL, `PATH=/usr/local/bin:/usr/bin:/bin`,
    /// `LANG=C.UTF-8`, 30 s to become ready, [`STOP_GRACE`] to stop.
    pub fn new(
        profile: PathBuf,
        home: PathBuf,
        display: impl Into<String>,
        xauthority: PathBuf,
        runtime_dir: PathBuf,
    ) -> Self {
        Self {
            chromium: PathBuf::from(DEFAULT_CHROMIUM),
            profile,
            home,
            display: display.into(),
            xauthority,
            runtime_dir,
            width: 1280,
            height: 800,
            first_url: None,
            path: OsString::from("/usr/local/bin:/usr/bin:/bin"),
            lang: OsString::from("C.UTF-8"),
            ready_timeout: Duration::from_secs(30),
            stop_grace: STOP_GRACE,
        }
    }

    /// Chrome's arguments: [`CONTRACT_FLAGS`], `--user-data-dir`, [`DEBUGGING_PORT_FLAG`],
    /// [`QUIET_FLAGS`], the window size, `--start-maximized`, then the first URL.
    pub fn args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = CONTRACT_FLAGS.iter().map(OsString::from).collect();
        let mut user_data_dir = OsString::from("--user-data-dir=");
        user_data_dir.push(&self.profile);
        args.push(user_data_dir);
        args.push(DEBUGGING_PORT_FLAG.into());
        args.extend(QUIET_FLAGS.iter().map(OsString::from));
        args.push(format!("--window-size={},{}", self.width, self.height).into());
        args.push("--start-maximized".into());
        if let Some(url) = &self.first_url {
            args.push(url.into());
        }
        args
    }

    /// The whole environment Chrome gets. Nothing is inherited from the agent (no `RAKAZO_*`).
    pub fn env(&self) -> Vec<(&'static str, OsString)> {
        vec![
            ("PATH", self.path.clone()),
            ("LANG", self.lang.clone()),
            ("HOME", self.home.clone().into_os_string()),
            ("DISPLAY", self.display.clone().into()),
            ("XAUTHORITY", self.xauthority.clone().into_os_string()),
        ]
    }

    /// Chrome's log file.
    pub fn log_path(&self) -> PathBuf {
        let key = self
            .profile
            .file_name()
            .map_or_else(|| "profile".into(), |n| n.to_string_lossy().into_owned());
        self.runtime_dir.join(format!("chromium-{key}.log"))
    }
}

/// Which step of [`Browser::stop`] ended Chrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOutcome {
    /// It had already exited (crashed or killed) before the stop began.
    AlreadyExited,
    /// CDP `Browser.close`: a clean exit, cookies and session saved.
    BrowserClose,
    /// SIGTERM to the process group.
    Terminated,
    /// SIGKILL to the process group.
    Killed,
}

/// Everything that can go wrong starting or stopping Chrome. Messages name the profile or pid.
#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    #[error("profile {} is in use by pid {pid}", profile.display())]
    ProfileInUse { profile: PathBuf, pid: i32 },
    #[error("profile directory {} is unusable", profile.display())]
    ProfileDir {
        profile: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot check or clear the lock files of profile {}", profile.display())]
    ProfileLock {
        profile: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot read this host's name")]
    Hostname(#[source] io::Error),
    #[error("first url {0:?} is not a single url")]
    InvalidUrl(String),
    #[error("cannot create the chrome log {}", path.display())]
    Log {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot start chrome {}", chromium.display())]
    Spawn {
        chromium: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("chrome pid {pid} exited before cdp answered: {log_tail}")]
    ExitedEarly { pid: i32, log_tail: String },
    #[error("chrome pid {pid} did not answer on cdp within {timeout:?}: {log_tail}")]
    StartTimeout {
        pid: i32,
        timeout: Duration,
        log_tail: String,
    },
    #[error("cdp of chrome pid {pid} failed")]
    Cdp {
        pid: i32,
        #[source]
        source: CdpError,
    },
    #[error("cannot signal chrome process group {pid}")]
    Signal {
        pid: i32,
        #[source]
        source: Errno,
    },
    #[error("chrome process group {pid} survived SIGKILL for {timeout:?}")]
    Unkillable { pid: i32, timeout: Duration },
    #[error("cannot reap chrome pid {pid}")]
    Reap {
        pid: i32,
        #[source]
        source: io::Error,
    },
}

/// A running Chrome. Stop it with [`Browser::stop`]; dropping a running one SIGKILLs its process
/// group (no cookie flush; the next start clears the stale lock).
#[derive(Debug)]
pub struct Browser {
    child: Child,
    pid: i32,
    profile: PathBuf,
    port: u16,
    browser_path: String,
    log: PathBuf,
    startup: Duration,
    stop_grace: Duration,
    stopped: Option<StopOutcome>,
}

impl Browser {
    /// Starts Chrome and returns once CDP answers `/json/version` on 127.0.0.1.
    ///
    /// Creates the profile (0700) when missing. Refuses a profile whose `SingletonLock` names a
    /// live process on this host ([`BrowserError::ProfileInUse`]); removes a stale lock (a dead
    /// pid, a pid reused since the lock was written, another host) with `SingletonCookie`,
    /// `SingletonSocket` and `DevToolsActivePort`.
    pub async fn start(opts: &BrowserOptions) -> Result<Self, BrowserError> {
        if let Some(url) = &opts.first_url {
            // A leading '-' would make it a flag; whitespace or controls are never one URL.
            if url.is_empty()
                || url.starts_with('-')
                || url.chars().any(|c| c.is_whitespace() || c.is_control())
            {
                return Err(BrowserError::InvalidUrl(url.clone()));
            }
        }
        profile::create_profile(&opts.profile)?;
        let hostname = hostname().map_err(BrowserError::Hostname)?;
        profile::clear_stale_locks(&opts.profile, &hostname)?;

        let log_path = opts.log_path();
        // Keep the previous run's log: after a crash it is the only account of what happened.
        let mut previous = log_path.clone().into_os_string();
        previous.push(".1");
        if let Err(error) = std::fs::rename(&log_path, &previous) {
            if error.kind() != io::ErrorKind::NotFound {
                tracing::warn!(log = %log_path.display(), %error, "cannot keep the previous chrome log");
            }
        }
        let log = create_log(&log_path).map_err(|source| BrowserError::Log {
            path: log_path.clone(),
            source,
        })?;
        let log_err = log.try_clone().map_err(|source| BrowserError::Log {
            path: log_path.clone(),
            source,
        })?;

        let mut command = Command::new(&opts.chromium);
        command
            .args(opts.args())
            .env_clear()
            .envs(opts.env())
            .current_dir(&opts.home)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            // Its own group: stop signals reach every Chrome process and nothing else, and a
            // terminal's ^C to the agent does not reach Chrome.
            .process_group(0)
            // Backstop only: Drop kills the whole group first.
            .kill_on_drop(true);
        let spawned_at = Instant::now();
        let child = command.spawn().map_err(|source| BrowserError::Spawn {
            chromium: opts.chromium.clone(),
            source,
        })?;
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .unwrap_or_default();
        let mut browser = Self {
            child,
            pid,
            profile: opts.profile.clone(),
            port: 0,
            browser_path: String::new(),
            log: log_path,
            startup: Duration::ZERO,
            stop_grace: opts.stop_grace,
            stopped: None,
        };
        let deadline = spawned_at + opts.ready_timeout;
        if let Err(error) = browser.await_ready(deadline, opts.ready_timeout).await {
            if let Err(kill_error) = browser.kill_now().await {
                tracing::warn!(pid, error = %kill_error, "chrome cleanup after a failed start failed");
            }
            return Err(error);
        }
        browser.startup = spawned_at.elapsed();
        tracing::info!(
            pid,
            port = browser.port,
            profile = %browser.profile.display(),
            startup_ms = browser.startup.as_millis(),
            "chrome ready"
        );
        Ok(browser)
    }

    /// Waits for `DevToolsActivePort`, then for CDP to answer.
    async fn await_ready(
        &mut self,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<(), BrowserError> {
        let pid = self.pid;
        let timed_out = |log: &Path| BrowserError::StartTimeout {
            pid,
            timeout,
            log_tail: log_tail(log),
        };
        let announced = loop {
            match profile::read_devtools_port(&self.profile) {
                Ok(Some(announced)) => break announced,
                Ok(None) => {}
                Err(error) => {
                    tracing::debug!(pid, %error, "DevToolsActivePort unreadable yet");
                }
            }
            if process::child_exited(pid) {
                return Err(BrowserError::ExitedEarly {
                    pid,
                    log_tail: log_tail(&self.log),
                });
            }
            if Instant::now() >= deadline {
                return Err(timed_out(&self.log));
            }
            tokio::time::sleep(READY_POLL).await;
        };
        self.port = announced.port;
        self.browser_path = announced.browser_path;
        // The port file is written once the socket listens, but the DevTools handler answers
        // only once the browser's UI thread is free: wait for a real answer.
        loop {
            match tokio::time::timeout_at(deadline, probe_version(self.port)).await {
                Err(_elapsed) => return Err(timed_out(&self.log)),
                Ok(Ok(())) => return Ok(()),
                Ok(Err(error)) => {
                    tracing::debug!(pid, port = self.port, %error, "cdp not answering yet");
                }
            }
            if process::child_exited(pid) {
                return Err(BrowserError::ExitedEarly {
                    pid,
                    log_tail: log_tail(&self.log),
                });
            }
            if Instant::now() >= deadline {
                return Err(timed_out(&self.log));
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }

    /// The browser process's pid, which is also its process group id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The DevTools port on 127.0.0.1.
    pub fn cdp_port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>`: the DevTools HTTP endpoint (`/json/version`, `/json/list`).
    pub fn cdp_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `ws://127.0.0.1:<port>/devtools/browser/<id>`: the browser-level CDP websocket.
    pub fn cdp_ws_url(&self) -> String {
        format!("ws://127.0.0.1:{}{}", self.port, self.browser_path)
    }

    /// The profile directory.
    pub fn profile(&self) -> &Path {
        &self.profile
    }

    /// Chrome's stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// How long Chrome took from spawn until CDP answered.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// Opens a CDP session on the browser endpoint.
    pub async fn cdp(&self) -> Result<CdpSession, BrowserError> {
        CdpSession::connect(&self.cdp_ws_url())
            .await
            .map_err(|source| BrowserError::Cdp {
                pid: self.pid,
                source,
            })
    }

    /// Whether the browser process still runs: `false` once it has exited for any reason
    /// (crash, kill, a close from inside) or after [`Browser::stop`]. The exited process is left
    /// for [`Browser::stop`] to reap and clean up after.
    pub fn is_alive(&mut self) -> bool {
        self.stopped.is_none() && !process::child_exited(self.pid)
    }

    /// Stops Chrome (contracts.md §3): CDP `Browser.close` and up to the stop grace
    /// ([`STOP_GRACE`]) for the process group to exit; then SIGTERM to the group and up to the
    /// grace again; then SIGKILL. Reaps the browser process and removes the profile's `Singleton*` files and
    /// `DevToolsActivePort`. Returns the step that ended it. Idempotent: a failed stop can be
    /// retried, and a stopped browser returns its outcome again.
    pub async fn stop(&mut self) -> Result<StopOutcome, BrowserError> {
        if let Some(outcome) = self.stopped {
            return Ok(outcome);
        }
        let pid = self.pid;
        let outcome = if process::child_exited(pid) {
            // Crashed or killed: children it left (renderers, utilities) may still run.
            self.signal_group(Signal::SIGKILL)?;
            self.wait_group_exit(KILL_GRACE).await;
            StopOutcome::AlreadyExited
        } else if self.close_and_wait().await {
            StopOutcome::BrowserClose
        } else {
            tracing::warn!(pid, "chrome did not close through cdp; sending SIGTERM");
            self.signal_group(Signal::SIGTERM)?;
            if self.wait_group_exit(self.stop_grace).await {
                StopOutcome::Terminated
            } else {
                tracing::warn!(pid, "chrome ignored SIGTERM; sending SIGKILL");
                self.signal_group(Signal::SIGKILL)?;
                StopOutcome::Killed
            }
        };
        if !self.wait_group_exit(KILL_GRACE).await {
            return Err(BrowserError::Unkillable {
                pid,
                timeout: KILL_GRACE,
            });
        }
        self.child
            .wait()
            .await
            .map_err(|source| BrowserError::Reap { pid, source })?;
        self.stopped = Some(outcome);
        self.remove_run_files();
        tracing::info!(pid, ?outcome, profile = %self.profile.display(), "chrome stopped");
        Ok(outcome)
    }

    /// Sends `Browser.close` and waits up to the stop grace for the group to exit; `false` when
    /// CDP could not be reached within [`CLOSE_REQUEST_TIMEOUT`] (or the grace, if shorter) or
    /// Chrome did not exit in time.
    async fn close_and_wait(&self) -> bool {
        let pid = self.pid;
        let ws_url = self.cdp_ws_url();
        let connect = CdpSession::connect(&ws_url);
        let connect_timeout = CLOSE_REQUEST_TIMEOUT.min(self.stop_grace);
        let session = match tokio::time::timeout(connect_timeout, connect).await {
            Ok(Ok(session)) => session,
            Ok(Err(error)) => {
                tracing::warn!(pid, %error, "cannot reach chrome over cdp to close it");
                return false;
            }
            Err(_elapsed) => {
                tracing::warn!(pid, timeout = ?connect_timeout, "cdp did not accept a connection in time");
                return false;
            }
        };
        // The answer may never come (Chrome can drop the connection first) and a slow answer
        // must not cut the grace period short: the exit decides, so wait for both together.
        let close = async {
            if let Err(error) = session.close_browser().await {
                tracing::debug!(pid, %error, "Browser.close got no answer");
            }
        };
        let ((), exited) = tokio::join!(close, self.wait_group_exit(self.stop_grace));
        exited
    }

    /// Waits up to `grace` for the browser process to exit and every other member of its group
    /// to be gone; `true` when they are.
    async fn wait_group_exit(&self, grace: Duration) -> bool {
        let deadline = Instant::now() + grace;
        loop {
            if process::child_exited(self.pid) && process::live_group_members(self.pid).is_empty() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(EXIT_POLL).await;
        }
    }

    /// Signals the whole group. Sound because the leader is reaped only after the group is gone.
    fn signal_group(&self, signal: Signal) -> Result<(), BrowserError> {
        match killpg(Pid::from_raw(self.pid), signal) {
            Ok(()) | Err(Errno::ESRCH) => Ok(()),
            Err(source) => Err(BrowserError::Signal {
                pid: self.pid,
                source,
            }),
        }
    }

    /// After a failed start: SIGKILL, reap, clean up.
    async fn kill_now(&mut self) -> Result<(), BrowserError> {
        self.signal_group(Signal::SIGKILL)?;
        if !self.wait_group_exit(KILL_GRACE).await {
            return Err(BrowserError::Unkillable {
                pid: self.pid,
                timeout: KILL_GRACE,
            });
        }
        let pid = self.pid;
        self.child
            .wait()
            .await
            .map_err(|source| BrowserError::Reap { pid, source })?;
        self.stopped = Some(StopOutcome::Killed);
        self.remove_run_files();
        Ok(())
    }

    /// Removes what describes the exited process, not the profile: `Singleton*` (Chrome removes
    /// them itself on a clean exit) and `DevToolsActivePort` (which would name a dead port).
    fn remove_run_files(&self) {
        if let Err(error) = profile::remove_singletons(&self.profile) {
            tracing::warn!(pid = self.pid, profile = %self.profile.display(), %error, "cannot remove chrome's singleton files");
        }
        if let Err(error) = profile::remove_if_present(&self.profile.join(DEVTOOLS_ACTIVE_PORT)) {
            tracing::warn!(pid = self.pid, profile = %self.profile.display(), %error, "cannot remove DevToolsActivePort");
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if self.stopped.is_some() {
            return;
        }
        tracing::warn!(pid = self.pid, profile = %self.profile.display(), "chrome dropped without stop; killing its process group");
        // The leader is unreaped, so the group id is still ours. tokio reaps the leader in the
        // background (kill_on_drop); the next start removes the lock files it leaves.
        let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
    }
}

/// This host's name as Chrome writes it into `SingletonLock`: the UTS nodename, which is what
/// `gethostname(2)` returns.
fn hostname() -> io::Result<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")?;
    Ok(name.trim_end_matches('\n').to_owned())
}

/// `GET /json/version` over plain HTTP/1.1; `Ok` on a complete 200 answer.
async fn probe_version(port: u16) -> io::Result<()> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
    let request = format!(
        "GET /json/version HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let (status, _body) = read_http_response(&mut stream).await?;
    if status == 200 {
        Ok(())
    } else {
        Err(io::Error::other(format!("/json/version answered {status}")))
    }
}

/// Reads one HTTP/1.1 response with a `Content-Length` body (Chrome's DevTools server keeps the
/// connection open whatever the request says, so reading to EOF would hang).
async fn read_http_response(stream: &mut TcpStream) -> io::Result<(u16, Vec<u8>)> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() as u64 > MAX_PROBE_RESPONSE {
            return Err(bad("response head too long"));
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(bad("connection closed before the response head ended"));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| bad("no status line"))?;
    let length = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    if length > MAX_PROBE_RESPONSE {
        return Err(bad("response body too long"));
    }
    let mut body = buf.split_off(head_end);
    let missing = length.saturating_sub(body.len() as u64);
    (&mut *stream).take(missing).read_to_end(&mut body).await?;
    if (body.len() as u64) < length {
        return Err(bad("connection closed inside the response body"));
    }
    Ok((status, body))
}

/// Creates (or truncates) the log with mode 0600, never following a symlink.
fn create_log(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

use crate::display::xvfb::log_tail;

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> BrowserOptions {
        BrowserOptions::new(
            "/home/u/.browser-profiles/abc".into(),
            "/home/u".into(),
            ":101",
            "/run/r/xauth-101".into(),
            "/run/r".into(),
        )
    }

    #[test]
    fn command_line_has_the_contract_flags_in_order() {
        let mut o = opts();
        o.first_url = Some("http://127.0.0.1:8000/".into());
        let args: Vec<String> = o
            .args()
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(
            args.join(" "),
            "--no-sandbox --disable-dev-shm-usage --disable-gpu --no-first-run \
             --no-default-browser-check --disable-session-crashed-bubble \
             --hide-crash-restore-bubble --password-store=basic --restore-last-session \
             --remote-debugging-address=127.0.0.1 --user-data-dir=/home/u/.browser-profiles/abc \
             --remote-debugging-port=0 --disable-background-networking \
             --disable-component-update --disable-sync --disable-features=Translate,MediaRouter \
             --no-pings --window-position=0,0 --window-size=1280,800 --start-maximized \
             http://127.0.0.1:8000/"
        );
    }

    #[test]
    fn environment_is_exactly_five_variables() {
        let env = opts().env();
        let keys: Vec<&str> = env.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, ["PATH", "LANG", "HOME", "DISPLAY", "XAUTHORITY"]);
        assert_eq!(env[2].1, "/home/u");
        assert_eq!(env[3].1, ":101");
        assert_eq!(env[4].1, "/run/r/xauth-101");
    }

    #[test]
    fn log_is_named_after_the_profile_key() {
        assert_eq!(opts().log_path(), Path::new("/run/r/chromium-abc.log"));
    }

    #[tokio::test]
    async fn urls_that_could_be_flags_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for bad in [
            "--remote-debugging-address=0.0.0.0",
            "",
            "http://a b",
            "x\ny",
        ] {
            let mut o = opts();
            o.profile = dir.path().join("p");
            o.first_url = Some(bad.into());
            let err = Browser::start(&o).await.unwrap_err();
            assert!(matches!(err, BrowserError::InvalidUrl(_)), "{bad:?}: {err}");
        }
    }

    #[tokio::test]
    async fn a_missing_binary_is_a_spawn_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = opts();
        o.chromium = dir.path().join("no-such-chromium");
        o.profile = dir.path().join("p");
        o.home = dir.path().to_path_buf();
        o.runtime_dir = dir.path().to_path_buf();
        let err = Browser::start(&o).await.unwrap_err();
        assert!(matches!(err, BrowserError::Spawn { .. }), "{err}");
    }
}
