//! A running computer whose guest connection ended on its own: the activity feed's "crashed or
//! gone" event, with what the provider says became of the machine
//! (docs/lifecycle.md#lost-machines: "why did my computer stop?").
//!
//! The tunnel forgets a connection it closed itself (stop, destroy, a job's replacement, a
//! boot, a replica draining: `Registry::disconnect`/`close_all`, and a superseded connection),
//! so only a connection that ended by itself reaches [`Core::guest_lost`]. That is not yet a
//! loss: a stop or idle suspension ends the connection by stopping the machine before it
//! records the computer stopped, and a guest whose network blinked dials again. So the check
//! waits [`GUEST_LOSS_GRACE`], lets any lifecycle action or suspension under way finish, and
//! records only when the computer is still `running`, its guest connected nowhere, and then
//! asks the provider (`SandboxProvider::exit`) why. A guest back within the grace records
//! nothing: nothing stopped, and the feed answers "why did my computer stop?".

use super::Core;
use crate::clock::now_ms;
use crate::computers::ComputerState;
use crate::jobs::{LIFECYCLE_CLAIM, LIFECYCLE_WAIT};
use crate::schema::activity::{Cause, LifecycleKind as Lifecycle};
use providers::{MachineExit, ProviderRef, SandboxProvider};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// How long a guest whose connection ended may take to dial in again before its loss is
/// recorded. The guest notices a dead connection within its 6 s idle timeout and redials
/// within its first backoff steps (0.2 s, doubling).
pub const GUEST_LOSS_GRACE: Duration = Duration::from_secs(10);
/// How often the check looks again while a stop, start, destroy or suspension holds the
/// computer.
const BUSY_POLL: Duration = Duration::from_millis(500);

/// Why the loss check records nothing.
#[derive(Debug, PartialEq, Eq)]
enum Quiet {
    /// The guest is connected again (here or to another replica).
    Reconnected,
    /// The computer is no longer `running`: stopped, destroyed, or being replaced by a job,
    /// each of which records its own event.
    NotRunning(ComputerState),
    /// A lifecycle action or suspension held it for longer than [`LIFECYCLE_WAIT`].
    StillBusy,
    /// The computer is gone from the store, or could not be read.
    Unknown,
}

impl Core {
    /// Checks, in the background, whether computer `id`'s guest connection, which ended by
    /// itself, means its machine crashed or went away, and records it (see the module doc).
    pub fn guest_lost(self: &Arc<Self>, id: &str) {
        let core = self.clone();
        let id = id.to_owned();
        tokio::spawn(async move {
            tokio::time::sleep(GUEST_LOSS_GRACE).await;
            match core.loss_settled(&id).await {
                Ok(()) => core.record_loss(&id).await,
                Err(quiet) => {
                    info!(computer_id = %id, ?quiet, "guest connection ended by itself: nothing to record")
                }
            }
        });
    }

    /// `Ok` once the computer is running with no guest and nothing else acting on it.
    async fn loss_settled(&self, id: &str) -> Result<(), Quiet> {
        let deadline = tokio::time::Instant::now() + LIFECYCLE_WAIT;
        loop {
            if self.guest_connected(id).await {
                return Err(Quiet::Reconnected);
            }
            let c = self.get(id).await.map_err(|_| Quiet::Unknown)?;
            if c.state != ComputerState::Running {
                return Err(Quiet::NotRunning(c.state));
            }
            if !self.acted_on(id).await {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Quiet::StillBusy);
            }
            tokio::time::sleep(BUSY_POLL).await;
        }
    }

    /// Whether a stop, start, destroy or takeover (the lifecycle claim) or idle suspension (its
    /// gate here, its claim across replicas) holds computer `id` now.
    async fn acted_on(&self, id: &str) -> bool {
        if self.idle.gate().is_claimed(id) {
            return true;
        }
        let now = now_ms();
        let claims = self.jobs.claims();
        let held = |kind| async move {
            match claims.holder_of(kind, id, now).await {
                Ok(h) => h.is_some(),
                Err(e) => {
                    // Unknown: assume busy and look again (bounded by the caller's deadline).
                    warn!(computer_id = %id, error = %e, "could not read the computer's claims while checking a lost guest");
                    true
                }
            }
        };
        if held(LIFECYCLE_CLAIM).await {
            return true;
        }
        self.cluster.is_some() && held("idle").await
    }

    /// Asks the provider what became of the machine and records it as crashed or gone.
    async fn record_loss(&self, id: &str) {
        let Ok(c) = self.get(id).await else {
            return;
        };
        let grace = GUEST_LOSS_GRACE.as_secs();
        let lost = format!("its guest's connection ended and did not come back within {grace} s");
        let exit = match (&c.provider_ref, self.providers.get(&c.provider)) {
            (Some(r), Some(provider)) => provider.exit(&ProviderRef(r.clone())).await,
            _ => Ok(MachineExit::Gone),
        };
        let (event, cause, reason) = loss_event(&c.provider, &lost, exit, c.limits.memory_mb);
        info!(computer_id = %id, event = ?event, cause = ?cause, reason, "computer's guest lost");
        self.activity.lifecycle(id, event, cause, reason).await;
    }
}

/// The feed's event for a lost guest, from what provider `kind` said became of its machine.
fn loss_event(
    kind: &str,
    lost: &str,
    exit: Result<MachineExit, providers::ProviderError>,
    memory_mb: Option<u64>,
) -> (Lifecycle, Cause, String) {
    match exit {
        Ok(MachineExit::Running) => (
            Lifecycle::Crashed,
            Cause::GuestLost,
            format!(
                "guest lost: {lost}, while the {kind} machine still runs (the guest died or its \
                 network is cut): a guest whose network comes back dials in again by itself; if \
                 it does not, start the computer to replace the guest"
            ),
        ),
        Ok(MachineExit::Stopped {
            exit_code,
            oom_killed,
            detail,
        }) => {
            let code = exit_code.map(exit_code_text).unwrap_or_default();
            let detail = detail.map(|d| format!(" ({d})")).unwrap_or_default();
            if oom_killed {
                let limit = memory_mb
                    .map(|m| format!(" of its {m} MiB limit"))
                    .unwrap_or_default();
                (
                    Lifecycle::Crashed,
                    Cause::OutOfMemory,
                    format!(
                        "out of memory: the {kind} provider killed the machine for running out \
                         of memory{limit}{code}{detail}; start the computer to run it again"
                    ),
                )
            } else {
                (
                    Lifecycle::Crashed,
                    Cause::MachineStopped,
                    format!(
                        "crashed: the {kind} machine stopped outside Rakazo{code}{detail}, and {lost}; \
                         start the computer to run it again"
                    ),
                )
            }
        }
        Ok(MachineExit::Gone) => (
            Lifecycle::Gone,
            Cause::MachineGone,
            format!(
                "gone: the {kind} provider no longer has the machine (removed outside Rakazo, or \
                 its engine is lost); start the computer to replace it from the stored home"
            ),
        ),
        Err(e) => (
            Lifecycle::Crashed,
            Cause::ProviderError,
            format!(
                "guest lost: {lost}, and the {kind} provider could not say why: {}",
                super::provider_error_text(&e)
            ),
        ),
    }
}

/// `, exit code N` and, for a signal's code (128 + n), the signal.
fn exit_code_text(code: i64) -> String {
    let signal = match code {
        137 => " (SIGKILL)",
        143 => " (SIGTERM)",
        139 => " (SIGSEGV)",
        134 => " (SIGABRT)",
        _ => "",
    };
    format!(", exit code {code}{signal}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_exit_is_told_with_its_cause() {
        let lost = "x";
        let (e, c, r) = loss_event("docker", lost, Ok(MachineExit::Running), None);
        assert_eq!((e, c), (Lifecycle::Crashed, Cause::GuestLost));
        assert!(r.starts_with("guest lost"), "{r}");
        assert!(r.contains("dials in again by itself"), "{r}");
        let oom = MachineExit::Stopped {
            exit_code: Some(137),
            oom_killed: true,
            detail: None,
        };
        let (e, c, r) = loss_event("docker", lost, Ok(oom), Some(64));
        assert_eq!((e, c), (Lifecycle::Crashed, Cause::OutOfMemory));
        assert!(
            r.contains("64 MiB limit") && r.contains("exit code 137 (SIGKILL)"),
            "{r}"
        );
        let killed = MachineExit::Stopped {
            exit_code: Some(137),
            oom_killed: false,
            detail: Some("boom".into()),
        };
        let (e, c, r) = loss_event("docker", lost, Ok(killed), None);
        assert_eq!((e, c), (Lifecycle::Crashed, Cause::MachineStopped));
        assert!(r.contains("exit code 137 (SIGKILL) (boom)"), "{r}");
        let (e, c, _) = loss_event("docker", lost, Ok(MachineExit::Gone), None);
        assert_eq!((e, c), (Lifecycle::Gone, Cause::MachineGone));
        let err = providers::ProviderError::Capacity("full".into());
        let (e, c, r) = loss_event("docker", lost, Err(err), None);
        assert_eq!((e, c), (Lifecycle::Crashed, Cause::ProviderError));
        assert!(r.contains("full"), "{r}");
    }
}
