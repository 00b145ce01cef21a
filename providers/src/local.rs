//! The `local` provider: the computer is this host, its guest a child process.
//!
//! Each computer gets `<root>/<computer id>/` holding `home/` (the computer's home), `token`
//! (the enrollment token, 0600, read by the guest through `RAKAZO_ENROLL_TOKEN_FILE`) and
//! `guest.log`. The guest runs in its own process group, so it outlives a control-plane restart
//! and simply dials back. A reference is `<computer id>:<pid>:<start time>`; the start time (from
//! `/proc/<pid>/stat`) tells a live guest from a recycled pid.

use crate::process::{self, start_time};
use crate::{MachineState, ProviderError, ProviderRef, SandboxProvider, SandboxSpec};
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
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
        let (pid, start) = process::spawn_guest(&process::GuestLaunch {
            bin: &self.guest_bin,
            spec,
            dir: &dir,
            home: &home,
            extra_env: &self.guest_env,
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
        process::kill_tree(r.pid, r.start, STOP_GRACE).await;
    }
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
        process::remove_dir(&self.dir(&local.computer))
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
}
