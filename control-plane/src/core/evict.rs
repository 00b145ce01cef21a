//! Screen eviction (docs/screens.md#slots): at a computer's `SANDBOX_TEAM_SCREEN_LIMIT`, a new
//! bot's desktop may take the slot of the oldest idle screen that no user controls and no run
//! holds.
//!
//! The decision is the control plane's, which holds the lease facts (execution leases and user
//! control leases, in the database); the guest knows the screens and when each was last used
//! (`ScreenInfo::idle_ms`). When the guest refuses a graphical call with
//! `COMPUTER_SCREEN_UNAVAILABLE`, [`Core::with_screen`] lists the screens, reads the leases,
//! [`pick`]s the screen idle longest whose bot holds neither lease (never the asking bot's),
//! looks at the leases once more, releases it through the release path every teardown takes
//! (`Core::screen_gone`: its URLs die, its streams and viewers are disconnected, the guest
//! revokes its capabilities; then the guest's `ScreenRelease` tears the desktop down in the
//! contract's order), and runs the call once more. Only when no screen qualifies is the call
//! refused, with the guest's own refusal (the contract's text). The evicted bot's profile stays
//! in the home (profiles are never deleted); its next graphical call starts a desktop again,
//! evicting in turn if it must.
//!
//! Evictions on one computer take turns, across replicas: a refused call takes the computer's
//! `evict` claim (`crate::claims`, in the database; waiting up to [`EVICT_WAIT`]), runs once more
//! under it (a turn before it may have freed a slot, or taken the one it freed), and only when
//! still refused evicts one screen and runs its call again before giving the claim back. So two
//! bots refused at once evict two different screens, one each, and each freed slot goes to the
//! call it was freed for (unless a call that was never refused takes it first: that call then
//! has its screen, and the refused one is refused, having evicted one). A lease taken between the
//! second look and the release is not seen (the window is one database read long).

use super::{Core, CoreError};
use crate::claims::Held;
use crate::clock::now_ms;
use crate::computers::{ComputerError, ComputerId};
use crate::tunnel::TunnelError;
use gateway_proto::desktop::{ScreenInfo, ScreenRelease};
use gateway_proto::op::ScreenListRequest;
use gateway_proto::{BotId, ErrorCode, UnaryOp};
use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;
use tracing::{info, warn};

/// The claim kind (`evict/<computer>`) one eviction at a time holds.
const EVICT_CLAIM: &str = "evict";
/// How long a refused call waits for other evictions on its computer before it is refused.
pub const EVICT_WAIT: Duration = Duration::from_secs(60);

/// The screen to evict for `for_bot`: of the screens whose bot is not in `held` (and is not
/// `for_bot`), the one idle longest (the lowest slot among equals); `None` when none qualifies.
pub fn pick<'a>(
    screens: &'a [ScreenInfo],
    held: &HashSet<String>,
    for_bot: &BotId,
) -> Option<&'a ScreenInfo> {
    screens
        .iter()
        .filter(|s| &s.bot != for_bot && !held.contains(s.bot.as_str()))
        .max_by(|a, b| a.idle_ms.cmp(&b.idle_ms).then(b.slot.cmp(&a.slot)))
}

/// Whether the guest refused for the screen limit.
fn screen_unavailable(e: &CoreError) -> bool {
    matches!(e, CoreError::Tunnel(TunnelError::Guest(op)) if op.code == ErrorCode::ScreenUnavailable)
}

impl Core {
    /// Runs `call`, a graphical call of `bot` on computer `id`; when the guest refuses it for
    /// the screen limit, evicts a screen ([`Core::evict_screen`]) and runs it once more.
    pub async fn with_screen<T, F, Fut>(
        &self,
        id: &str,
        bot: &BotId,
        call: F,
    ) -> Result<T, CoreError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, CoreError>>,
    {
        let refused = match call().await {
            Err(e) if screen_unavailable(&e) => e,
            done => return done,
        };
        let Some(turn) = self.eviction_turn(id, bot).await else {
            return Err(refused);
        };
        // Once more under the turn: a turn before this one may have freed a slot, or taken the
        // one it freed; only a call still refused evicts.
        let done = match call().await {
            Err(refused) if screen_unavailable(&refused) => {
                match self.evict_screen(id, bot).await {
                    Ok(Some(_)) => call().await,
                    Ok(None) => Err(refused),
                    Err(e) => {
                        warn!(computer_id = %id, bot = %bot, error = %e, "screen eviction failed; the call is refused");
                        Err(refused)
                    }
                }
            }
            done => done,
        };
        turn.release().await;
        done
    }

    /// The computer's eviction turn (its `evict` claim), waiting up to [`EVICT_WAIT`] for the
    /// turns before it; `None` (logged) when it could not be had.
    async fn eviction_turn(&self, id: &str, bot: &BotId) -> Option<Held> {
        match self
            .jobs
            .claims()
            .wait_for(EVICT_CLAIM, id, EVICT_WAIT)
            .await
        {
            Ok(Some(turn)) => Some(turn),
            Ok(None) => {
                warn!(computer_id = %id, bot = %bot, wait_secs = EVICT_WAIT.as_secs(), "other screen evictions on this computer took too long; the call is refused");
                None
            }
            Err(e) => {
                warn!(computer_id = %id, bot = %bot, error = %e, "could not take the computer's eviction turn; the call is refused");
                None
            }
        }
    }

    /// [`Core::call`] of a unary graphical operation, evicting a screen if the limit refuses
    /// it ([`Core::with_screen`]).
    pub async fn call_screen<O: UnaryOp + Clone>(
        &self,
        id: &str,
        op: O,
    ) -> Result<O::Reply, CoreError> {
        let Some(lease) = op.authority().lease() else {
            return self.call(id, op).await;
        };
        self.with_screen(id, &lease.bot, || self.call(id, op.clone()))
            .await
    }

    /// Bots whose screen may not be evicted: those holding a live execution lease or a user's
    /// live control lease.
    async fn screen_holders(&self, id: &ComputerId) -> Result<HashSet<String>, CoreError> {
        let held = self
            .idle
            .holders(id, now_ms())
            .await
            .map_err(ComputerError::from)?;
        Ok(held
            .map(|h| {
                h.runs
                    .into_iter()
                    .map(|r| r.bot.as_str().to_owned())
                    .chain(h.control)
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Evicts the oldest idle screen nobody holds for `for_bot` (see the module doc); the bot
    /// evicted, or `None` when no screen qualifies.
    pub async fn evict_screen(
        &self,
        id: &str,
        for_bot: &BotId,
    ) -> Result<Option<BotId>, CoreError> {
        let c = self.get(id).await?;
        let guest = self.guest_for(id, &ScreenListRequest).await?;
        let screens = guest.call(ScreenListRequest).await?;
        let held = self.screen_holders(&c.id).await?;
        // Every screen as `bot:idle_ms`, and `+held` for those that may not go: why this one.
        let candidates = screens
            .iter()
            .map(|s| {
                let mark = if held.contains(s.bot.as_str()) {
                    "+held"
                } else {
                    ""
                };
                format!("{}:{}{mark}", s.bot, s.idle_ms)
            })
            .collect::<Vec<_>>()
            .join(" ");
        let Some(victim) = pick(&screens, &held, for_bot) else {
            info!(computer_id = %id, bot = %for_bot, %candidates, "screen limit reached and no screen is idle and unheld: refused");
            return Ok(None);
        };
        let (bot, idle_ms) = (victim.bot.clone(), victim.idle_ms);
        // A run or a user may have taken the bot since: look once more, just before.
        if self.screen_holders(&c.id).await?.contains(bot.as_str()) {
            info!(computer_id = %id, bot = %for_bot, holder = %bot, "the screen to evict was taken meanwhile: refused");
            return Ok(None);
        }
        // The release path (docs/screens.md#teardown): URLs, streams and the guest's capabilities
        // first, then the desktop.
        if let Err(e) = self.screen_gone(&c.id, &bot).await {
            warn!(computer_id = %id, bot = %bot, error = %e, "revoking the capabilities of the screen to evict failed; nothing evicted");
            return Ok(None);
        }
        guest
            .call(ScreenRelease {
                bot: bot.clone(),
                lease: None,
            })
            .await?;
        info!(computer_id = %id, evicted = %bot, idle_ms, for_bot = %for_bot, %candidates, "screen limit reached: evicted the oldest idle screen nobody holds");
        Ok(Some(bot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn screen(bot: &str, slot: u32, idle_ms: u64) -> ScreenInfo {
        ScreenInfo {
            bot: BotId::new(bot).unwrap(),
            slot,
            display: 10 + slot as u16,
            width: 1280,
            height: 800,
            browser_pid: None,
            started: false,
            idle_ms,
        }
    }

    fn held(bots: &[&str]) -> HashSet<String> {
        bots.iter().map(|b| b.to_string()).collect()
    }

    #[test]
    fn the_oldest_idle_unheld_screen_is_picked() {
        let me = BotId::new("new").unwrap();
        let screens = [
            screen("a", 0, 5_000),
            screen("b", 1, 9_000),
            screen("c", 2, 1),
        ];
        assert_eq!(pick(&screens, &held(&[]), &me).unwrap().bot.as_str(), "b");
        // b runs (an execution lease) or a user controls it: a is next.
        assert_eq!(
            pick(&screens, &held(&["b"]), &me).unwrap().bot.as_str(),
            "a"
        );
        assert_eq!(
            pick(&screens, &held(&["a", "b"]), &me)
                .unwrap()
                .bot
                .as_str(),
            "c"
        );
        assert!(pick(&screens, &held(&["a", "b", "c"]), &me).is_none());
        // Never the asking bot's own screen.
        let mine = [screen("new", 0, 99_000)];
        assert!(pick(&mine, &held(&[]), &me).is_none());
        // Equally idle: the lowest slot.
        let tie = [screen("x", 3, 10), screen("y", 1, 10)];
        assert_eq!(pick(&tie, &held(&[]), &me).unwrap().bot.as_str(), "y");
    }
}
