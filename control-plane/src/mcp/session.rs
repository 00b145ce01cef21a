//! What an MCP session holds: its computer and bot, and that bot's execution lease.
//!
//! [`Held::start`] takes the lease (or checks a lease the client gave: it must be the live
//! holder's, which a renewal proves) and starts renewing it every
//! [`EXEC_LEASE_RENEW_EVERY`](crate::lease::EXEC_LEASE_RENEW_EVERY). The session's handler owns
//! the only strong reference; when rmcp drops the handler (the session was deleted or expired),
//! [`Held`]'s `Drop` stops the renewals and releases the lease with the session's outcome, so
//! no path out of a session leaves its lease behind. A renewal refused as a mismatch means the
//! lease is gone (released or taken over by a newer fence): the session's tools then refuse.

use crate::core::{Core, CoreError, RunOutcome};
use crate::lease::{LeaseError, EXEC_LEASE_RENEW_EVERY, EXEC_LEASE_TTL};
use gateway_proto::{BotId, LeaseToken};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use tracing::{info, warn};

/// The computer and bot a session (and a session token) is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub computer: String,
    pub bot: BotId,
}

impl Binding {
    /// The path of its MCP endpoint.
    pub fn endpoint(&self) -> String {
        format!("/v1/mcp/{}/{}", self.computer, self.bot)
    }
}

/// Live sessions by their MCP session id, so a `DELETE` can set the outcome its release
/// reports and requests can be checked against the session's binding.
#[derive(Default)]
pub struct Registry {
    sessions: Mutex<HashMap<String, Weak<Held>>>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Weak<Held>>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live session `id`, if any.
    pub fn get(&self, id: &str) -> Option<Arc<Held>> {
        self.lock().get(id).and_then(Weak::upgrade)
    }

    fn insert(&self, id: &str, held: &Arc<Held>) {
        let mut all = self.lock();
        all.retain(|_, w| w.strong_count() > 0);
        all.insert(id.to_string(), Arc::downgrade(held));
    }

    fn remove(&self, id: &str) {
        self.lock().remove(id);
    }
}

/// A session's lease, released when the last reference drops.
pub struct Held {
    core: Arc<Core>,
    pub binding: Binding,
    pub token: LeaseToken,
    /// What the release reports: `cancelled` unless a `DELETE` said otherwise.
    outcome: Mutex<RunOutcome>,
    /// Why the lease is no longer held, once a renewal was refused.
    lost: Arc<Mutex<Option<String>>>,
    renewer: tokio::task::AbortHandle,
    registry: Weak<Registry>,
    session_id: Mutex<Option<String>>,
}

impl Held {
    /// Takes the bot's lease for a new session (owner `mcp-<random>`), or checks `given` is the
    /// live one; then renews it until dropped.
    pub async fn start(
        core: Arc<Core>,
        binding: Binding,
        given: Option<LeaseToken>,
        registry: &Arc<Registry>,
    ) -> Result<Arc<Self>, CoreError> {
        let id = binding.computer.as_str();
        let lease = match &given {
            Some(token) => {
                core.renew_lease(id, &binding.bot, token, EXEC_LEASE_TTL)
                    .await?
            }
            None => {
                let owner = format!("mcp-{}", hex::encode(rand::random::<[u8; 8]>()));
                core.acquire_lease(id, &binding.bot, &owner, EXEC_LEASE_TTL)
                    .await?
            }
        };
        let lost = Arc::new(Mutex::new(None));
        let renewer = tokio::spawn(renew(
            core.clone(),
            binding.clone(),
            lease.token.clone(),
            lost.clone(),
        ))
        .abort_handle();
        info!(computer_id = %id, bot = %binding.bot, given = given.is_some(), "mcp session holds the bot's lease");
        Ok(Arc::new(Self {
            core,
            binding,
            token: lease.token,
            outcome: Mutex::new(RunOutcome::Cancelled),
            lost,
            renewer,
            registry: Arc::downgrade(registry),
            session_id: Mutex::new(None),
        }))
    }

    /// Records the session's id once known (its first request after `initialize`).
    pub fn register(self: &Arc<Self>, session_id: &str) {
        let mut id = self
            .session_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if id.is_none() {
            if let Some(registry) = self.registry.upgrade() {
                registry.insert(session_id, self);
            }
            *id = Some(session_id.to_string());
        }
    }

    /// The outcome the release reports (a `DELETE` sets it).
    pub fn set_outcome(&self, outcome: RunOutcome) {
        *self.outcome.lock().unwrap_or_else(PoisonError::into_inner) = outcome;
    }

    /// Why the session no longer holds its lease, if it does not.
    pub fn lost(&self) -> Option<String> {
        self.lost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Renews the lease every minute until aborted, or until a renewal says it is gone.
async fn renew(
    core: Arc<Core>,
    binding: Binding,
    token: LeaseToken,
    lost: Arc<Mutex<Option<String>>>,
) {
    let id = binding.computer.as_str();
    loop {
        tokio::time::sleep(EXEC_LEASE_RENEW_EVERY).await;
        match core
            .renew_lease(id, &binding.bot, &token, EXEC_LEASE_TTL)
            .await
        {
            Ok(_) => {}
            Err(e @ CoreError::Lease(LeaseError::Mismatch { .. }) | e @ CoreError::NotFound(_)) => {
                warn!(computer_id = %id, bot = %binding.bot, error = %e, "mcp session lost its lease; its tools refuse from now on");
                *lost.lock().unwrap_or_else(PoisonError::into_inner) = Some(e.to_string());
                return;
            }
            // A passing failure (the database): the next renewal may succeed before expiry.
            Err(e) => {
                warn!(computer_id = %id, bot = %binding.bot, error = %e, "renewing an mcp session's lease failed; retrying in a minute")
            }
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.renewer.abort();
        if let (Some(id), Some(registry)) = (
            self.session_id
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
            self.registry.upgrade(),
        ) {
            registry.remove(&id);
        }
        let outcome = *self
            .outcome
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        let (core, binding, token) = (self.core.clone(), self.binding.clone(), self.token.clone());
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            let id = binding.computer.as_str();
            match core.release_lease(id, &binding.bot, &token, outcome).await {
                Ok(_) => {
                    info!(computer_id = %id, bot = %binding.bot, outcome = ?outcome, "mcp session ended; its lease was released")
                }
                // Taken over by a newer run, or the computer is gone: nothing left to release.
                Err(e @ (CoreError::Lease(LeaseError::Mismatch { .. }) | CoreError::NotFound(_))) => {
                    info!(computer_id = %id, bot = %binding.bot, error = %e, "mcp session ended without a lease to release")
                }
                Err(e) => {
                    warn!(computer_id = %id, bot = %binding.bot, error = %e, "releasing an ended mcp session's lease failed; it expires by itself")
                }
            }
        });
    }
}
