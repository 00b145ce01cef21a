//! The decisions about live screens: issuing capability URLs, checking an opened capability
//! against the database, takeover and its release (what a torn-down desktop revokes is
//! `super::revoke`'s, called by the core).
//!
//! Everything here is checked against the database, never against memory alone: a capability
//! opens only while the computer runs with the generation sealed into it, the bot's generation
//! is unchanged, and (control, terminal) the control lease it was issued under is still the
//! live one, and the URL's sealed expiry has not passed. The same [`check`] runs when a websocket
//! opens and once a second while it is open.

use super::revoke::revoke_on_guest;
use super::seal::{Capability, Scope, SealError, Sealer};
use super::store::{ControlLease, LiveStoreError};
use super::streams::CloseScope;
use crate::computers::{ComputerId, ComputerState};
use crate::core::{Core, CoreError};
use crate::lease::LeaseStore;
use gateway_proto::live::{CapabilityKind, RevokeScope};
use gateway_proto::{BotId, LeaseToken};
use std::time::Duration;
use tracing::{debug, info};

/// Why a live operation failed; the API maps each case to a status.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error(transparent)]
    Core(#[from] CoreError),
    #[error(transparent)]
    Store(#[from] LiveStoreError),
    /// Control and terminal URLs need the user's live control lease.
    #[error("take control of bot {bot} on computer {computer} first")]
    NoControl { computer: String, bot: BotId },
    #[error("cannot seal a capability")]
    Seal(#[from] SealError),
}

/// Why an opened capability was not (or is no longer) honoured; the reason names follow the
/// `screen.proxy.target_rejected` events of docs/security.md#capability-urls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// The database says no: generation moved, control lease gone, computer not running.
    Rejected,
    /// The database could not be asked.
    Unavailable,
    /// The URL's sealed expiry has passed: its streams close like revoked ones.
    Expired,
}

impl Rejection {
    pub fn reason(self) -> &'static str {
        match self {
            Self::Rejected => "authority_rejected",
            Self::Unavailable => "authority_unavailable",
            Self::Expired => "expired",
        }
    }
}

/// A capability URL as issued.
#[derive(Debug, Clone)]
pub struct Issued {
    pub token: String,
    pub policy: CapabilityKind,
    pub expires_at_ms: i64,
}

/// Issues a capability URL for `bot` on a running computer; control and terminal need the
/// user's live control lease.
pub async fn issue(
    core: &Core,
    sealer: &Sealer,
    id: &str,
    bot: &BotId,
    policy: CapabilityKind,
    ttl: Duration,
    now_ms: i64,
) -> Result<Issued, LiveError> {
    let c = core.get(id).await?;
    if c.state != ComputerState::Running {
        return Err(CoreError::NotRunning {
            id: id.to_string(),
            state: c.state,
        }
        .into());
    }
    let live = core.live.store.get(&c.id, bot).await?;
    let control_lease = match policy {
        CapabilityKind::View => None,
        CapabilityKind::Control | CapabilityKind::Terminal => match live.control_at(now_ms) {
            Some(l) => Some(l.id.clone()),
            None => {
                return Err(LiveError::NoControl {
                    computer: id.to_string(),
                    bot: bot.clone(),
                })
            }
        },
    };
    let scope = Scope {
        computer: c.id.as_str().to_string(),
        bot: bot.clone(),
        computer_generation: c.screen_generation,
        bot_generation: live.screen_generation,
        control_lease,
    };
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    let expires_at_ms = now_ms.saturating_add(ttl_ms);
    let token = sealer.seal(policy, expires_at_ms, &scope)?;
    info!(computer_id = %id, bot = %bot, policy = policy.as_str(), "capability url issued");
    Ok(Issued {
        token,
        policy,
        expires_at_ms,
    })
}

/// Checks an opened capability at `now_ms`: its sealed expiry, then the database.
pub async fn check(core: &Core, cap: &Capability, now_ms: i64) -> Result<(), Rejection> {
    // Opening the token checks the expiry too, but a stream outlives its opening: the
    // once-a-second re-check is what ends it when its URL expires.
    if now_ms >= cap.expires_at_ms {
        return Err(Rejection::Expired);
    }
    let scope = &cap.scope;
    let Ok(cid) = ComputerId::new(&scope.computer) else {
        return Err(Rejection::Rejected);
    };
    let computer = match core.computers.get(&cid).await {
        Ok(Some(c)) => c,
        Ok(None) => return Err(Rejection::Rejected),
        Err(e) => {
            debug!(error = %e, "capability check: computer lookup failed");
            return Err(Rejection::Unavailable);
        }
    };
    if computer.state != ComputerState::Running
        || computer.screen_generation != scope.computer_generation
    {
        return Err(Rejection::Rejected);
    }
    let live = match core.live.store.get(&cid, &scope.bot).await {
        Ok(l) => l,
        Err(e) => {
            debug!(error = %e, "capability check: live state lookup failed");
            return Err(Rejection::Unavailable);
        }
    };
    if live.screen_generation != scope.bot_generation {
        return Err(Rejection::Rejected);
    }
    match cap.policy {
        CapabilityKind::View => Ok(()),
        CapabilityKind::Control | CapabilityKind::Terminal => {
            let live_id = live.control_at(now_ms).map(|l| l.id.as_str());
            match (live_id, scope.control_lease.as_deref()) {
                (Some(a), Some(b)) if a == b => Ok(()),
                _ => Err(Rejection::Rejected),
            }
        }
    }
}

/// Takes (or extends to `ttl` from `now_ms`) the user's control of `bot`: refused while a run
/// holds the bot's lease unless it is `waiting_takeover` (docs/lifecycle.md#takeover). Taking it
/// again while it is live renews it under the same id, so URLs and streams issued under it stay
/// valid.
pub async fn take_control(
    core: &Core,
    id: &str,
    bot: &BotId,
    ttl: Duration,
    now_ms: i64,
) -> Result<ControlLease, LiveError> {
    let c = core.get(id).await?;
    // The user who holds control keeps it, even while a maintenance job reserves the computer:
    // like a run's lease held before the job, it lasts until the machine goes.
    if let Some(lease) = core
        .live
        .store
        .renew_control(&c.id, bot, ttl, now_ms)
        .await?
    {
        debug!(computer_id = %id, bot = %bot, "user renewed control");
        return Ok(lease);
    }
    // A new takeover is a lifecycle action: refused while a job reserves the computer (it is
    // about to replace the machine, or left it half-replaced), and no job is created between
    // that check and the grant.
    let lease = core
        .unreserved_act(&c.id, || async {
            Ok(core.live.store.take_control(&c.id, bot, ttl, now_ms).await)
        })
        .await??;
    info!(computer_id = %id, bot = %bot, "user took control");
    Ok(lease)
}

/// Releases the user's control: its control and terminal streams close at once, and the guest
/// revokes them (disconnecting clients and stopping every shell). Idempotent.
pub async fn release_control(core: &Core, id: &str, bot: &BotId) -> Result<bool, LiveError> {
    let c = core.get(id).await?;
    let had = core.live.store.release_control(&c.id, bot).await?;
    let closed = core
        .live
        .streams
        .close_bot(c.id.as_str(), bot, CloseScope::Control);
    let guest = core.connected_guest(c.id.as_str()).await;
    revoke_on_guest(guest.as_ref(), bot, RevokeScope::Control).await;
    info!(computer_id = %id, bot = %bot, closed, "user released control");
    Ok(had.is_some())
}

/// Marks (or unmarks) the run holding `lease` as waiting for a takeover; `lease` must be the
/// bot's live execution lease.
pub async fn set_waiting_takeover(
    core: &Core,
    id: &str,
    bot: &BotId,
    lease: &LeaseToken,
    waiting: bool,
    now_ms: i64,
) -> Result<(), LiveError> {
    let c = core.get(id).await?;
    let live = core
        .leases
        .get(&c.id, bot, now_ms)
        .await
        .map_err(CoreError::from)?;
    match live {
        Some(l) if &l.token == lease => {}
        _ => {
            return Err(CoreError::StaleLease {
                bot: bot.clone(),
                lease: lease.clone(),
            }
            .into())
        }
    }
    core.live
        .store
        .set_waiting_takeover(&c.id, bot, waiting.then_some(lease))
        .await?;
    if waiting {
        // Keeps the computer awake for the takeover, or restarts its idle timer
        // (docs/lifecycle.md#takeover).
        core.idle
            .takeover_requested(
                &c.id,
                core.providers().bills_while_running(&c.provider),
                now_ms,
            )
            .await
            .map_err(LiveStoreError::from)?;
    }
    info!(computer_id = %id, bot = %bot, waiting, "run waiting_takeover changed");
    Ok(())
}
