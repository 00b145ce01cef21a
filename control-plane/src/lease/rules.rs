//! The lease rules: pure, `now` in, next state out.

use super::LeaseState;
use gateway_proto::LeaseToken;
use std::time::Duration;

/// Why an acquire was refused; the store names the computer and bot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Another owner holds a live lease.
    Held { owner: String, expires_at_ms: i64 },
    /// The next fence would not fit a BIGINT.
    FenceExhausted,
}

/// A renew or release presented a token that is not allowed to act on the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The live holder, if any.
    pub holder: Option<LeaseToken>,
}

/// The live holder at `now`: an owner whose claim has not lapsed (`now < expires_at`).
pub fn holder(state: &LeaseState, now_ms: i64) -> Option<LeaseToken> {
    match &state.owner {
        Some(owner) if now_ms < state.expires_at_ms => {
            LeaseToken::new(owner.as_str(), state.fence).ok()
        }
        _ => None,
    }
}

fn expiry(now_ms: i64, ttl: Duration) -> i64 {
    now_ms.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
}

/// Grants the lease to `owner` when nobody holds it, the holder's claim lapsed, or `owner`
/// is the holder already; the fence goes up by one either way.
pub fn acquire(
    state: &LeaseState,
    owner: &str,
    ttl: Duration,
    now_ms: i64,
) -> Result<LeaseState, Refusal> {
    if let Some(holder) = holder(state, now_ms) {
        if holder.owner() != owner {
            return Err(Refusal::Held {
                owner: holder.owner().to_owned(),
                expires_at_ms: state.expires_at_ms,
            });
        }
    }
    // Fences are stored as BIGINT.
    let fence = state
        .fence
        .checked_add(1)
        .filter(|f| i64::try_from(*f).is_ok())
        .ok_or(Refusal::FenceExhausted)?;
    Ok(LeaseState {
        owner: Some(owner.to_owned()),
        fence,
        expires_at_ms: expiry(now_ms, ttl),
    })
}

/// Extends the live holder's claim to `now + ttl`. Any other token (another owner, an older
/// fence, or a claim that already lapsed) mismatches.
pub fn renew(
    state: &LeaseState,
    token: &LeaseToken,
    ttl: Duration,
    now_ms: i64,
) -> Result<LeaseState, Mismatch> {
    let holder = holder(state, now_ms);
    if holder.as_ref() != Some(token) {
        return Err(Mismatch { holder });
    }
    Ok(LeaseState {
        expires_at_ms: expiry(now_ms, ttl),
        ..state.clone()
    })
}

/// Releases the claim of `token`'s owner if its fence is at least the holder's, lapsed or
/// not, keeping the fence. Releasing again with the token of the latest grant changes
/// nothing and succeeds. A fence-0 token (a viewer's, `screen-view-<bot>:0`) can never
/// release anything, since every grant has a fence of at least 1.
pub fn release(
    state: &LeaseState,
    token: &LeaseToken,
    now_ms: i64,
) -> Result<LeaseState, Mismatch> {
    let allowed = match &state.owner {
        Some(owner) => owner == token.owner() && token.fence() >= state.fence,
        None => state.fence > 0 && token.fence() == state.fence,
    };
    if !allowed {
        return Err(Mismatch {
            holder: holder(state, now_ms),
        });
    }
    Ok(LeaseState {
        owner: None,
        fence: state.fence,
        expires_at_ms: 0,
    })
}
