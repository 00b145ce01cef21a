//! Whether Chrome can run with its own sandbox here, decided once per guest and logged.
//!
//! Chrome's Linux sandbox needs an unprivileged user namespace (Debian's Chromium ships no setuid
//! helper), and Chrome refuses it as root. The probe asks util-linux's `unshare(1)` to do what
//! Chrome's namespace sandbox does: a new user, PID and network namespace with its own uid and
//! gid maps. It must be a freshly executed program, as Chrome is: the guest itself is
//! non-dumpable, which makes its `/proc/self/uid_map` root's, so the guest could not write it in
//! a child of its own even where Chrome can.
//!
//! It leaves the command line built from the answer to [`super::BrowserOptions`].

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// Where util-linux's `unshare` is looked for.
const UNSHARE: [&str; 2] = ["/usr/bin/unshare", "/bin/unshare"];

/// How long the probe may run (it takes milliseconds).
const PROBE_POLLS: u32 = 500;
const PROBE_POLL: Duration = Duration::from_millis(10);

/// Whether Chrome runs with its sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sandbox {
    /// Chrome's sandbox is on: no `--no-sandbox`.
    On,
    /// [`super::NO_SANDBOX_FLAGS`]; `reason` says why the sandbox cannot run here.
    Off { reason: String },
}

impl Sandbox {
    /// What this machine allows, probed once per process and logged once with the reason. Root
    /// always gets [`Sandbox::Off`]: Chrome refuses to sandbox itself as root.
    pub fn detect() -> Sandbox {
        static DETECTED: OnceLock<Sandbox> = OnceLock::new();
        DETECTED
            .get_or_init(|| {
                let mode = if nix::unistd::geteuid().is_root() {
                    Sandbox::Off {
                        reason: "the guest runs as root".to_owned(),
                    }
                } else {
                    match probe_user_namespace() {
                        Ok(()) => Sandbox::On,
                        Err(why) => Sandbox::Off {
                            reason: format!("no unprivileged user namespace: {why}"),
                        },
                    }
                };
                match &mode {
                    Sandbox::On => tracing::info!(
                        "chrome runs with its sandbox (unprivileged user namespaces work)"
                    ),
                    Sandbox::Off { reason } => {
                        tracing::info!(%reason, "chrome runs WITHOUT its sandbox (--no-sandbox)")
                    }
                }
                mode
            })
            .clone()
    }
}

/// Runs `unshare --user --map-root-user --pid --net --fork true`; `Err` says why it failed.
fn probe_user_namespace() -> Result<(), String> {
    let Some(unshare) = UNSHARE.iter().find(|p| std::path::Path::new(p).is_file()) else {
        return Err("util-linux's unshare(1) is not installed, so it cannot be probed".to_owned());
    };
    let mut child = Command::new(unshare)
        .args([
            "--user",
            "--map-root-user",
            "--pid",
            "--net",
            "--fork",
            "true",
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {unshare}: {e}"))?;
    for _ in 0..PROBE_POLLS {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => {
                let mut stderr = String::new();
                if let Some(mut pipe) = child.stderr.take() {
                    let _ = pipe.read_to_string(&mut stderr);
                }
                let said: String = stderr.trim().chars().take(200).collect();
                return Err(format!("{unshare} exited with {status}: {said}"));
            }
            Ok(None) => std::thread::sleep(PROBE_POLL),
            Err(e) => return Err(format!("cannot wait for {unshare}: {e}")),
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(format!("{unshare} did not finish in time"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_never_gets_the_sandbox_and_the_probe_answers() {
        let mode = Sandbox::detect();
        if nix::unistd::geteuid().is_root() {
            assert!(matches!(mode, Sandbox::Off { .. }), "{mode:?}");
        }
        // The probe itself runs either way and says why when it fails.
        match probe_user_namespace() {
            Ok(()) => {}
            Err(why) => assert!(!why.is_empty()),
        }
        assert_eq!(Sandbox::detect(), mode, "decided once");
    }
}
