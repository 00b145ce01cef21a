//! One Chrome per bot, on the bot's display, with the bot's persistent profile
//! (docs/screens.md#chrome).
//!
//! This module owns the Chrome process: its profile directory ([`profile_dir`]), the stale
//! `SingletonLock` check before start, the exact command line and environment (with the sandbox
//! where [`Sandbox::detect`] finds it can run), readiness (CDP answers `Browser.getVersion`), crash detection
//! ([`Browser::is_alive`]) and the stop sequence: CDP `Browser.close` (which flushes cookies and
//! the session), then SIGTERM, then SIGKILL to the process group, then removal of the
//! `Singleton*` files.
//!
//! DevTools: Chrome runs with `--remote-debugging-pipe` and gets two pipes as fds 3 and 4 (the
//! `sys` submodule); the guest holds their other ends and nothing listens anywhere, so no other
//! process in the computer (a terminal, a command, another bot's browser) can drive a bot's
//! Chrome. [`Browser::cdp`] is the one connection ([`CdpClient`]), shared by the lifecycle and the
//! page tools. A stale `DevToolsActivePort` in a profile from before is removed harmlessly.
//!
//! Process discipline: Chrome leads its own process group. Its exit is observed without reaping
//! it (`waitid` with `WNOWAIT`, in the `process` submodule), so the group id stays reserved until
//! every member is gone and a signal to the group can never reach a stranger. Only Chrome's crash
//! handlers (`chrome_crashpad_handler`) daemonize out of the group; they exit by themselves once
//! the browser is gone (the real-Chrome tests check that).
//!
//! It leaves to others: the X server and its cookie (the display module passes `DISPLAY` and
//! `XAUTHORITY`), slots, fences and teardown order (the desktop layer), restarting a crashed
//! Chrome (callers poll [`Browser::is_alive`] and start a new one) and page snapshots. All CDP
//! transport sits in [`cdp`].

pub mod cdp;
mod process;
mod profile;
mod sandbox;
mod sys;

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
use tokio::process::{Child, Command};
use tokio::time::Instant;

pub use cdp::{CdpClient, CdpError};
pub(crate) use profile::create_profile;
pub use profile::{
    ensure_profile_dir, profile_dir, DEVTOOLS_ACTIVE_PORT, PROFILES_DIR, SINGLETON_COOKIE,
    SINGLETON_LOCK, SINGLETON_SOCKET,
};
pub use sandbox::Sandbox;

/// Debian's Chromium launcher.
pub const DEFAULT_CHROMIUM: &str = "/usr/bin/chromium";

/// The flags of docs/screens.md#chrome, in its order; `--user-data-dir=<profile>` follows
/// them. **Ours:** `--no-sandbox` only where the sandbox cannot run ([`NO_SANDBOX_FLAGS`]) and no
/// `--remote-debugging-address` (DevTools is a pipe, [`DEVTOOLS_PIPE_FLAG`]).
pub const CONTRACT_FLAGS: [&str; 8] = [
    "--disable-dev-shm-usage",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-session-crashed-bubble",
    "--hide-crash-restore-bubble",
    "--password-store=basic",
    "--restore-last-session",
];

/// DevTools on fds 3 (commands in) and 4 (answers and events out), NUL-separated JSON: no port,
/// no socket, nothing another process could connect to.
pub const DEVTOOLS_PIPE_FLAG: &str = "--remote-debugging-pipe";

/// Where Chrome cannot use its sandbox ([`Sandbox::Off`]). `--test-type` keeps Chrome from
/// laying its "unsupported command-line flag: --no-sandbox" bar over the top of every page
/// (which would cost every observation rows of pixels and alarm a person watching); it changes
/// nothing else we rely on.
pub const NO_SANDBOX_FLAGS: [&str; 2] = ["--no-sandbox", "--test-type"];

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
/// SIGTERM (docs/screens.md#chrome).
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// How long [`Browser::stop`] waits for Chrome to acknowledge `Browser.close` before it falls
/// back to SIGTERM; the wait for the exit after `Browser.close` ([`STOP_GRACE`]) runs alongside.
const CLOSE_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long [`Browser::stop`] waits for the group to vanish after SIGKILL (which cannot be
/// ignored; only a process stuck in the kernel takes longer).
const KILL_GRACE: Duration = Duration::from_secs(5);

/// Exit poll interval while starting and stopping (each poll may scan `/proc`).
const EXIT_POLL: Duration = Duration::from_millis(20);

/// How to start one Chrome. [`BrowserOptions::new`] fills in the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowserOptions {
    /// The Chromium executable ([`DEFAULT_CHROMIUM`]).
    pub chromium: PathBuf,
    /// The bot's profile ([`profile_dir`]); created 0700 when missing.
    pub profile: PathBuf,
    /// `HOME` for Chrome: the home root.
    pub home: PathBuf,
    /// `DISPLAY` for Chrome (`:101`, from [`crate::display::XServer::display_env`]).
    pub display: String,
    /// `XAUTHORITY` for Chrome (from [`crate::display::XServer::xauthority`]).
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
    /// Whether Chrome's sandbox is on ([`Sandbox::detect`]).
    pub sandbox: Sandbox,
    /// `--force-device-scale-factor`, in hundredths (200 is 2), when set (`None`: the
    /// display's).
    pub device_scale_percent: Option<u16>,
    /// Headless (`--headless`): no window, no X server; `DISPLAY` and `XAUTHORITY` are not
    /// set. The emulator browser provider's sessions (docs/screens.md#browser-providers).
    pub headless: bool,
}

impl BrowserOptions {
    /// Options for `profile` on `display`, with the defaults: [`DEFAULT_CHROMIUM`], 1280x800 (the
    /// geometry of docs/screens.md#desktops), no first URL, `PATH=/usr/local/bin:/usr/bin:/bin`,
    /// `LANG=C.UTF-8`, 30 s to become ready, [`STOP_GRACE`] to stop, the sandbox where this
    /// machine allows it ([`Sandbox::detect`]).
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
            sandbox: Sandbox::detect(),
            device_scale_percent: None,
            headless: false,
        }
    }

    /// Chrome's arguments: [`NO_SANDBOX_FLAGS`] when the sandbox is off, [`CONTRACT_FLAGS`],
    /// `--user-data-dir`, [`DEVTOOLS_PIPE_FLAG`], [`QUIET_FLAGS`], the window size,
    /// `--start-maximized`, the device scale factor when set, then the first URL.
    pub fn args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        if let Sandbox::Off { .. } = self.sandbox {
            args.extend(NO_SANDBOX_FLAGS.iter().map(OsString::from));
        }
        args.extend(CONTRACT_FLAGS.iter().map(OsString::from));
        let mut user_data_dir = OsString::from("--user-data-dir=");
        user_data_dir.push(&self.profile);
        args.push(user_data_dir);
        args.push(DEVTOOLS_PIPE_FLAG.into());
        args.extend(QUIET_FLAGS.iter().map(OsString::from));
        args.push(format!("--window-size={},{}", self.width, self.height).into());
        if self.headless {
            args.push("--headless".into());
        } else {
            args.push("--start-maximized".into());
        }
        if let Some(percent) = self.device_scale_percent {
            let scale = f64::from(percent) / 100.0;
            args.push(format!("--force-device-scale-factor={scale}").into());
        }
        if let Some(url) = &self.first_url {
            args.push(url.into());
        }
        args
    }

    /// The whole environment Chrome gets. Nothing is inherited from the agent (no `RAKAZO_*`).
    pub fn env(&self) -> Vec<(&'static str, OsString)> {
        let mut env = vec![
            ("PATH", self.path.clone()),
            ("LANG", self.lang.clone()),
            ("HOME", self.home.clone().into_os_string()),
        ];
        if !self.headless {
            env.push(("DISPLAY", self.display.clone().into()));
            env.push(("XAUTHORITY", self.xauthority.clone().into_os_string()));
        }
        env
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
    #[error("cannot create the devtools pipes of chrome")]
    Pipes(#[source] io::Error),
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
    cdp: CdpClient,
    sandbox: Sandbox,
    log: PathBuf,
    startup: Duration,
    stop_grace: Duration,
    stopped: Option<StopOutcome>,
}

impl Browser {
    /// Starts Chrome and returns once CDP answers `Browser.getVersion` over its pipe.
    ///
    /// Creates the profile (0700) when missing. Refuses a profile whose `SingletonLock` names a
    /// live process on this host ([`BrowserError::ProfileInUse`]); removes a stale lock (a dead
    /// pid, a pid reused since the lock was written, another host) with `SingletonCookie`,
    /// `SingletonSocket` and a `DevToolsActivePort` left by older guests.
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
        let pipes = sys::DevToolsPipes::new().map_err(BrowserError::Pipes)?;
        // A contained computer's secrets: Chrome trusts the computer's egress CA too.
        crate::secret_env::trust_in_chrome(&opts.home).await;

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
        let (to_chrome, from_chrome) = pipes.hand_to(&mut command);
        let spawned_at = Instant::now();
        let spawned = command.spawn();
        // Closes our copies of Chrome's pipe ends: Chrome's exit must read as end of file.
        drop(command);
        let child = spawned.map_err(|source| BrowserError::Spawn {
            chromium: opts.chromium.clone(),
            source,
        })?;
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .unwrap_or_default();
        let cdp = match CdpClient::from_pipes(to_chrome, from_chrome) {
            Ok(cdp) => cdp,
            Err(source) => {
                // Not yet a `Browser`: kill the group by hand (the child reaps on drop).
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                return Err(BrowserError::Pipes(source));
            }
        };
        let mut browser = Self {
            child,
            pid,
            profile: opts.profile.clone(),
            cdp,
            sandbox: opts.sandbox.clone(),
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
            sandbox = matches!(browser.sandbox, Sandbox::On),
            profile = %browser.profile.display(),
            startup_ms = browser.startup.as_millis(),
            "chrome ready"
        );
        Ok(browser)
    }

    /// Waits until CDP answers over the pipe (Chrome reads it once its DevTools handler runs),
    /// or Chrome exits, or `deadline`.
    async fn await_ready(
        &mut self,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<(), BrowserError> {
        let pid = self.pid;
        let exited = |log: &Path| BrowserError::ExitedEarly {
            pid,
            log_tail: log_tail(log),
        };
        let answered = async {
            let left = deadline.saturating_duration_since(Instant::now());
            self.cdp.version(left).await
        };
        let exit = async {
            while !process::child_exited(pid) {
                tokio::time::sleep(EXIT_POLL).await;
            }
        };
        tokio::select! {
            answer = answered => match answer {
                Ok(product) => {
                    tracing::debug!(pid, %product, "cdp answered");
                    Ok(())
                }
                Err(CdpError::Timeout { .. }) => Err(BrowserError::StartTimeout {
                    pid,
                    timeout,
                    log_tail: log_tail(&self.log),
                }),
                // The pipe closed: Chrome is exiting.
                Err(CdpError::Closed) => Err(exited(&self.log)),
                Err(source) => Err(BrowserError::Cdp { pid, source }),
            },
            () = exit => Err(exited(&self.log)),
        }
    }

    /// The browser process's pid, which is also its process group id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The one CDP connection to this Chrome (a handle; clones share it). It closes when
    /// Chrome exits.
    pub fn cdp(&self) -> CdpClient {
        self.cdp.clone()
    }

    /// Whether Chrome runs with its sandbox.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
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

    /// Whether the browser process still runs: `false` once it has exited for any reason
    /// (crash, kill, a close from inside) or after [`Browser::stop`]. The exited process is left
    /// for [`Browser::stop`] to reap and clean up after.
    pub fn is_alive(&mut self) -> bool {
        self.stopped.is_none() && !process::child_exited(self.pid)
    }

    /// Stops Chrome (docs/screens.md#chrome): CDP `Browser.close` and up to the stop grace
    /// ([`STOP_GRACE`]) for the process group to exit; then SIGTERM to the group and up to the
    /// grace again; then SIGKILL. Reaps the browser process and removes the profile's
    /// `Singleton*` files (and a stale `DevToolsActivePort`). Returns the step that ended it.
    /// Idempotent: a failed stop can be retried, and a stopped browser returns its outcome
    /// again.
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
    /// Chrome did not exit in time (a frozen Chrome never reads the command).
    async fn close_and_wait(&self) -> bool {
        let pid = self.pid;
        // The answer may never come (Chrome can exit before answering) and a slow answer must
        // not cut the grace period short: the exit decides, so wait for both together.
        let close = async {
            let timeout = CLOSE_REQUEST_TIMEOUT.min(self.stop_grace);
            if let Err(error) = self.cdp.close_browser(timeout).await {
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
    /// them itself on a clean exit) and a `DevToolsActivePort` an older guest's Chrome left.
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

use crate::display::xserver::log_tail;

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
        let line = |o: &BrowserOptions| {
            o.args()
                .into_iter()
                .map(|a| a.into_string().unwrap())
                .collect::<Vec<_>>()
                .join(" ")
        };
        let rest = "--disable-dev-shm-usage --disable-gpu --no-first-run \
             --no-default-browser-check --disable-session-crashed-bubble \
             --hide-crash-restore-bubble --password-store=basic --restore-last-session \
             --user-data-dir=/home/u/.browser-profiles/abc --remote-debugging-pipe \
             --disable-background-networking --disable-component-update --disable-sync \
             --disable-features=Translate,MediaRouter --no-pings --window-position=0,0 \
             --window-size=1280,800 --start-maximized http://127.0.0.1:8000/";
        o.sandbox = Sandbox::On;
        assert_eq!(line(&o), rest);
        o.sandbox = Sandbox::Off {
            reason: "test".into(),
        };
        assert_eq!(line(&o), format!("--no-sandbox --test-type {rest}"));
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
