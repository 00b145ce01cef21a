//! Stopping what the gateway started: whole process groups, TERM (or HUP) first, then KILL.

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::time::Duration;

/// Signals the process group led by `pid`; `false` when the group is gone.
pub fn signal_group(pid: u32, signal: Signal) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 1 {
        // Never signal "every process" or init by mistake.
        return false;
    }
    !matches!(killpg(Pid::from_raw(raw), signal), Err(Errno::ESRCH))
}

/// Stops a child that leads its own process group: `first` to the group, up to `grace` for
/// the leader to exit, then SIGKILL to the group; the leader is reaped.
pub async fn stop_group(child: &mut tokio::process::Child, first: Signal, grace: Duration) {
    let Some(pid) = child.id() else {
        // Already reaped; its group may still hold stragglers, but their pgid is unknown now.
        return;
    };
    signal_group(pid, first);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        tracing::warn!(pid, "process group ignored {first}; sending SIGKILL");
    }
    signal_group(pid, Signal::SIGKILL);
    let _ = child.wait().await;
}
