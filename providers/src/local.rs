//! The `local` provider: the computer is this host, its guest a child process.
//!
//! Each computer gets `<root>/<computer id>/` holding `home/` (the computer's home), `token`
//! (the enrollment token, 0600, read by the guest through `RAKAZO_ENROLL_TOKEN_FILE`) and
//! `guest.log`. The guest runs in its own process group, so it outlives a control-plane restart
//! and simply dials back. A reference is `<computer id>:<pid>:<start time>`; the start time (from
//! `/proc/<pid>/stat`) tells a live guest from a recycled pid.

use crate::{MachineState, ProviderError, ProviderRef, SandboxProvider, SandboxSpec};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tracing::info;

/// How long a stopping guest gets after SIGTERM before SIGKILL: it closes every browser first.
const STOP_GRACE: Duration = Duration::from_secs(20);

/// Runs computers as child processes of this host.
pub struct LocalProvider {
    root: PathBuf,
    guest_bin: PathBuf,
    /// Extra environment for guests (log filter and the like); never secrets.
    guest_env: Vec<(String, String)>,
}

struct LocalRef {
    computer: String,
    pid: i32,
    start: u64,
}

impl LocalRef {
    fn parse(r: &ProviderRef) -> Result<Self, ProviderError> {
        let bad = || ProviderError::BadRef(r.0.clone());
        let mut parts = r.0.rsplitn(3, ':');
        let start = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        let pid = parts
            .next()
            .and_then(|s| s.parse().ok())
            .filter(|p| *p > 0)
            .ok_or_else(bad)?;
        let computer = parts
            .next()
            .filter(|c| valid_id(c))
            .ok_or_else(bad)?
            .to_string();
        Ok(Self {
            computer,
            pid,
            start,
        })
    }

    fn to_ref(&self) -> ProviderRef {
        ProviderRef(format!("{}:{}:{}", self.computer, self.pid, self.start))
    }
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && id != "."
        && id != ".."
}

impl LocalProvider {
    /// Computers live under `root`; guests are started from `guest_bin`.
    pub fn new(root: impl Into<PathBuf>, guest_bin: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            guest_bin: guest_bin.into(),
            guest_env: Vec::new(),
        }
    }

    /// Adds a variable to every guest's environment.
    pub fn with_guest_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.guest_env.push((key.into(), value.into()));
        self
    }

    fn dir(&self, computer: &str) -> PathBuf {
        self.root.join(computer)
    }

    /// The home directory of a local computer.
    pub fn home_dir(&self, computer: &str) -> PathBuf {
        self.dir(computer).join("home")
    }

    fn spawn(&self, spec: &SandboxSpec) -> Result<LocalRef, ProviderError> {
        let dir = self.dir(&spec.computer_id);
        let home = self.home_dir(&spec.computer_id);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&home)
            .map_err(|e| ProviderError::io(format!("create {}", home.display()), e))?;
        let token_path = dir.join("token");
        write_token(&token_path, &spec.guest.token.0)?;
        let log_path = dir.join("guest.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log_path)
            .map_err(|e| ProviderError::io(format!("open {}", log_path.display()), e))?;
        let log_err = log
            .try_clone()
            .map_err(|e| ProviderError::io("duplicate guest log handle", e))?;
        let mut cmd = std::process::Command::new(&self.guest_bin);
        cmd.env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("LANG", "C.UTF-8")
            .env("RAKAZO_CONTROL_ADDR", spec.guest.control_addr.to_string())
            .env("RAKAZO_CONTROL_CERT_SHA256", &spec.guest.cert_sha256)
            .env("RAKAZO_COMPUTER_ID", &spec.computer_id)
            .env("RAKAZO_ENROLL_TOKEN_FILE", &token_path)
            .env("RAKAZO_HOME", &home)
            .envs(self.guest_env.iter().map(|(k, v)| (k, v)))
            .current_dir(&home)
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(log_err)
            // Its own process group: a signal to the control plane's group does not reach it,
            // so it survives a control-plane restart and dials back.
            .process_group(0);
        let child = cmd.spawn().map_err(|e| {
            ProviderError::io(format!("start guest {}", self.guest_bin.display()), e)
        })?;
        let pid = i32::try_from(child.id())
            .map_err(|_| ProviderError::BadSpec("pid out of range".into()))?;
        // The child is reaped by a thread so it never lingers as a zombie while we run.
        std::thread::spawn(move || {
            let mut child = child;
            let _ = child.wait();
        });
        let start = start_time(pid).ok_or_else(|| {
            ProviderError::io(
                "read guest start time",
                std::io::Error::other("guest exited at once"),
            )
        })?;
        info!(computer_id = %spec.computer_id, pid, "local guest started");
        Ok(LocalRef {
            computer: spec.computer_id.clone(),
            pid,
            start,
        })
    }

    fn is_running(r: &LocalRef) -> bool {
        start_time(r.pid) == Some(r.start)
    }

    async fn kill_tree(r: &LocalRef) {
        if !Self::is_running(r) {
            return;
        }
        let pid = r.pid;
        let start = r.start;
        // SIGTERM lets the guest end its commands itself; SIGKILL whatever is left.
        let mut tree = descendants(pid);
        signal(pid, libc::SIGTERM);
        let deadline = tokio::time::Instant::now() + STOP_GRACE;
        while start_time(pid) == Some(start) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tree.extend(descendants(pid));
        if start_time(pid) == Some(start) {
            signal(pid, libc::SIGKILL);
        }
        for p in tree {
            signal(p, libc::SIGKILL);
        }
    }
}

fn write_token(path: &Path, token: &str) -> Result<(), ProviderError> {
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| ProviderError::io(format!("create {}", path.display()), e))?;
    f.write_all(token.as_bytes())
        .map_err(|e| ProviderError::io(format!("write {}", path.display()), e))
}

fn signal(pid: i32, sig: i32) {
    let Ok(sig) = nix::sys::signal::Signal::try_from(sig) else {
        return;
    };
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
}

/// The start time of a process in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // After the comm field: state is field 3, so start time (22) is index 19 here.
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// All descendants of `root`, found through the parent links in `/proc`.
fn descendants(root: i32) -> Vec<i32> {
    let mut parents = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let ppid = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(1)?
                        .parse::<i32>()
                        .ok()
                });
            if let Some(ppid) = ppid {
                parents.push((pid, ppid));
            }
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(child, parent) in &parents {
            if parent == p && !out.contains(&child) {
                out.push(child);
                frontier.push(child);
            }
        }
    }
    out
}

impl SandboxProvider for LocalProvider {
    fn kind(&self) -> &'static str {
        "local"
    }

    /// A child process of the control plane's host costs nothing extra while it runs.
    fn bills_while_running(&self) -> bool {
        false
    }

    async fn provision(&self, spec: &SandboxSpec) -> Result<ProviderRef, ProviderError> {
        if !valid_id(&spec.computer_id) {
            return Err(ProviderError::BadSpec(format!(
                "computer id {:?}",
                spec.computer_id
            )));
        }
        Ok(self.spawn(spec)?.to_ref())
    }

    async fn prepare(
        &self,
        r: &ProviderRef,
        spec: &SandboxSpec,
    ) -> Result<ProviderRef, ProviderError> {
        let local = LocalRef::parse(r)?;
        if !self.dir(&local.computer).is_dir() {
            return Err(ProviderError::NotFound(r.clone()));
        }
        if Self::is_running(&local) {
            return Ok(r.clone());
        }
        Ok(self.spawn(spec)?.to_ref())
    }

    async fn state(&self, r: &ProviderRef) -> Result<MachineState, ProviderError> {
        let local = LocalRef::parse(r)?;
        Ok(if !self.dir(&local.computer).is_dir() {
            MachineState::Gone
        } else if Self::is_running(&local) {
            MachineState::Running
        } else {
            MachineState::Stopped
        })
    }

    async fn stop(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        let local = LocalRef::parse(r)?;
        Self::kill_tree(&local).await;
        Ok(())
    }

    async fn destroy(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        let local = LocalRef::parse(r)?;
        Self::kill_tree(&local).await;
        let dir = self.dir(&local.computer);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ProviderError::io(format!("remove {}", dir.display()), e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_round_trip_and_reject_garbage() {
        let r = LocalRef::parse(&ProviderRef("c-1:42:7".into())).unwrap();
        assert_eq!((r.computer.as_str(), r.pid, r.start), ("c-1", 42, 7));
        assert_eq!(r.to_ref().0, "c-1:42:7");
        for bad in ["", "c:1", "c:x:1", "../x:1:2", "c:0:1", ":1:2"] {
            assert!(
                LocalRef::parse(&ProviderRef(bad.into())).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn start_time_identifies_this_process() {
        let me = std::process::id() as i32;
        assert!(start_time(me).is_some());
        assert_eq!(start_time(me), start_time(me));
        assert!(start_time(i32::MAX).is_none());
    }
}
