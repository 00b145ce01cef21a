//! The guest's fence table: which lease of each bot is current, so stale commands are refused.
//!
//! docs/lifecycle.md#fences: the agent checks fences itself, and a command carrying a stale fence
//! is refused before it does anything. This module owns that decision. It learns fences from two
//! sources: the control plane's lease pushes ([`FenceTable::update`], from `ControlMsg::Lease`) and
//! the leases commands present ([`FenceTable::check`]). A fence never goes down. A home export or
//! import carries no single lease but the control plane's knowledge of all of them
//! (`HomeAuthority`), checked against the table by [`FenceTable::check_home`]. Who holds a lease is
//! decided by the control plane's lease store; carrying the pushes and answering refused commands
//! is the tunnel's job.

use gateway_proto::home::HomeAuthority;
use gateway_proto::{BotId, BotLease, ErrorCode, LeaseToken, OpError};
use std::collections::HashMap;
use std::fmt;

/// The home operation an authority is checked for: only the refusal's words differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HomeOp {
    Export,
    Import,
}

impl fmt::Display for HomeOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Export => "home export",
            Self::Import => "home import",
        })
    }
}

/// Current lease state of every bot this guest has heard of.
#[derive(Debug, Default)]
pub struct FenceTable {
    bots: HashMap<BotId, BotFence>,
}

/// One bot's fence. Invariant: `holder` always refers to the lease with fence `highest`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct BotFence {
    highest: u64,
    holder: Holder,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Holder {
    /// A fence is known (e.g. its holder was never seen) but no owner is attached to it.
    None,
    /// The owner currently holding the lease at fence `highest`.
    Held(String),
    /// The owner whose lease at fence `highest` was released; it can never be used again.
    Released(String),
}

impl FenceTable {
    /// An empty table: every bot is unknown.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies a lease push from the control plane: `Some` grants `lease` to `bot`, `None`
    /// marks the bot's current lease released.
    ///
    /// Never lowers a fence: a grant older than the highest fence seen is ignored, and so is a
    /// grant at the same fence that would replace the holder or revive a released lease.
    pub fn update(&mut self, bot: BotId, lease: Option<LeaseToken>) {
        match lease {
            Some(token) => match self.bots.get_mut(&bot) {
                None => {
                    self.bots.insert(bot, BotFence::held(&token));
                }
                Some(entry) if token.fence() > entry.highest => *entry = BotFence::held(&token),
                Some(entry) if token.fence() == entry.highest => {
                    if entry.holder == Holder::None {
                        entry.holder = Holder::Held(token.owner().to_owned());
                    }
                    // Held by the same owner: nothing changes. Held by another owner, or
                    // released: the control plane bumps the fence on every acquire, so an equal
                    // fence with a different story is a duplicate or a bug; the first word stands.
                }
                Some(_) => {}
            },
            None => {
                if let Some(entry) = self.bots.get_mut(&bot) {
                    if let Holder::Held(owner) = &entry.holder {
                        entry.holder = Holder::Released(owner.clone());
                    }
                }
            }
        }
    }

    /// Checks a lease presented with a command, before the command does anything.
    ///
    /// Accepted when the bot has no known lease, when the lease is the current holder's
    /// (same owner, same fence), or when its fence is greater than the highest seen (it is then
    /// adopted as the holder). Refused with [`ErrorCode::StaleLease`] when its fence is lower
    /// than the highest seen, equal to it with a different owner, or when it was released.
    pub fn check(&mut self, lease: &BotLease) -> Result<(), OpError> {
        let BotLease { bot, token } = lease;
        let Some(entry) = self.bots.get_mut(bot) else {
            self.bots.insert(bot.clone(), BotFence::held(token));
            return Ok(());
        };
        let fence = token.fence();
        if fence > entry.highest {
            *entry = BotFence::held(token);
            return Ok(());
        }
        let highest = entry.highest;
        if fence < highest {
            return Err(stale(format!(
                "lease {token} for bot {bot} is stale (current fence {highest})"
            )));
        }
        match &entry.holder {
            Holder::None => {
                entry.holder = Holder::Held(token.owner().to_owned());
                Ok(())
            }
            Holder::Held(owner) if owner == token.owner() => Ok(()),
            Holder::Held(owner) => Err(stale(format!(
                "lease {token} for bot {bot} is stale (fence {highest} is held by {owner})"
            ))),
            Holder::Released(owner) if owner == token.owner() => {
                Err(stale(format!("lease {token} for bot {bot} was released")))
            }
            Holder::Released(owner) => Err(stale(format!(
                "lease {token} for bot {bot} is stale (fence {highest} belonged to {owner} and \
                 was released)"
            ))),
        }
    }

    /// Checks the authority a home export or import acts under, before it does anything; the
    /// table is not changed.
    ///
    /// Refused with [`ErrorCode::StaleLease`] when this guest knows a higher fence for some bot
    /// than the authority names for it (0 when it does not name the bot): the control plane
    /// started the operation on older knowledge than the guest's, such as before a run's lease
    /// was granted (an export would quiesce that run's browser, an import would replace the home
    /// under it) or from a lease row that went back. The same rule covers a named fence that is
    /// lower and a live lease not named at all; a bot known only at fence 0 (a viewer's token)
    /// needs no naming.
    pub fn check_home(&self, op: HomeOp, authority: &HomeAuthority) -> Result<(), OpError> {
        let named: HashMap<&BotId, u64> = authority
            .fences()
            .iter()
            .map(|f| (&f.bot, f.fence))
            .collect();
        let mut known: Vec<(&BotId, &BotFence)> = self.bots.iter().collect();
        // The first stale bot by name, so the refusal reads the same every time.
        known.sort_by(|a, b| a.0.cmp(b.0));
        for (bot, entry) in known {
            let highest = entry.highest;
            let presented = named.get(bot).copied().unwrap_or(0);
            if presented >= highest {
                continue;
            }
            let lease = match &entry.holder {
                Holder::None => format!("fence {highest}"),
                Holder::Held(owner) => format!("lease {owner}:{highest}"),
                Holder::Released(owner) => format!("lease {owner}:{highest} (released)"),
            };
            let what = if named.contains_key(bot) {
                format!("it named fence {presented} for bot {bot}, this guest knows {lease}")
            } else {
                format!("it did not name bot {bot}, this guest knows {lease}")
            };
            let harm = match (&entry.holder, op) {
                (Holder::Released(_), _) => "",
                (_, HomeOp::Import) => "; importing now would replace the home under that run",
                (_, HomeOp::Export) => "; exporting now would quiesce that run's browser",
            };
            return Err(stale(format!(
                "{op} refused: the control plane acts on stale leases: {what}{harm}"
            )));
        }
        Ok(())
    }

    /// The highest fence seen for `bot`, if any.
    pub fn highest_fence(&self, bot: &BotId) -> Option<u64> {
        self.bots.get(bot).map(|e| e.highest)
    }
}

impl BotFence {
    fn held(token: &LeaseToken) -> Self {
        Self {
            highest: token.fence(),
            holder: Holder::Held(token.owner().to_owned()),
        }
    }
}

fn stale(message: String) -> OpError {
    OpError::new(ErrorCode::StaleLease, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bot(s: &str) -> BotId {
        BotId::new(s).expect("bot id")
    }

    fn token(s: &str) -> LeaseToken {
        LeaseToken::parse(s).expect("lease token")
    }

    fn lease(b: &str, t: &str) -> BotLease {
        BotLease {
            bot: bot(b),
            token: token(t),
        }
    }

    fn refused(table: &mut FenceTable, b: &str, t: &str) -> String {
        let err = table
            .check(&lease(b, t))
            .expect_err("expected a stale lease");
        assert_eq!(err.code, ErrorCode::StaleLease);
        err.message
    }

    #[test]
    fn unknown_bot_is_accepted_and_adopted() {
        let mut t = FenceTable::new();
        t.check(&lease("b1", "run-a:3")).expect("accepted");
        assert_eq!(t.highest_fence(&bot("b1")), Some(3));
        // Now run-a:3 is the holder: another owner at the same fence is refused.
        refused(&mut t, "b1", "run-b:3");
        // Other bots are independent.
        t.check(&lease("b2", "run-b:1")).expect("accepted");
    }

    #[test]
    fn same_owner_same_fence_is_accepted_repeatedly() {
        let mut t = FenceTable::new();
        t.update(bot("b1"), Some(token("run-a:2")));
        for _ in 0..3 {
            t.check(&lease("b1", "run-a:2")).expect("accepted");
        }
    }

    #[test]
    fn lower_fence_is_refused() {
        let mut t = FenceTable::new();
        t.update(bot("b1"), Some(token("run-a:2")));
        assert_eq!(
            refused(&mut t, "b1", "run-a:1"),
            "lease run-a:1 for bot b1 is stale (current fence 2)"
        );
        refused(&mut t, "b1", "run-z:0");
    }

    #[test]
    fn equal_fence_other_owner_is_refused() {
        let mut t = FenceTable::new();
        t.update(bot("b1"), Some(token("run-a:2")));
        assert_eq!(
            refused(&mut t, "b1", "run-b:2"),
            "lease run-b:2 for bot b1 is stale (fence 2 is held by run-a)"
        );
    }

    #[test]
    fn higher_fence_is_adopted_and_supersedes() {
        let mut t = FenceTable::new();
        t.update(bot("b1"), Some(token("run-a:2")));
        t.check(&lease("b1", "run-b:5"))
            .expect("higher fence accepted");
        assert_eq!(t.highest_fence(&bot("b1")), Some(5));
        refused(&mut t, "b1", "run-a:2");
        t.check(&lease("b1", "run-b:5"))
            .expect("new holder accepted");
    }

    #[test]
    fn released_lease_is_refused_and_a_higher_fence_accepted() {
        let mut t = FenceTable::new();
        t.update(bot("b1"), Some(token("run-a:1")));
        t.check(&lease("b1", "run-a:1")).expect("holder accepted");
        t.update(bot("b1"), None);
        assert_eq!(
            refused(&mut t, "b1", "run-a:1"),
            "lease run-a:1 for bot b1 was released"
        );
        // Another owner cannot claim the released fence either.
        refused(&mut t, "b1", "run-b:1");
        // A new grant, pushed or presented, with a higher fence is accepted.
        t.check(&lease("b1", "run-b:2"))
            .expect("higher fence accepted");
        refused(&mut t, "b1", "run-a:1");
    }

    #[test]
    fn duplicate_push_does_not_revive_a_released_lease() {
        let mut t = FenceTable::new();
        t.update(bot("b1"), Some(token("run-a:1")));
        t.update(bot("b1"), None);
        t.update(bot("b1"), Some(token("run-a:1")));
        refused(&mut t, "b1", "run-a:1");
        t.update(bot("b1"), Some(token("run-a:2")));
        t.check(&lease("b1", "run-a:2"))
            .expect("re-granted at a higher fence");
    }

    #[test]
    fn pushes_never_lower_a_fence() {
        let mut t = FenceTable::new();
        t.update(bot("b1"), Some(token("run-b:7")));
        t.update(bot("b1"), Some(token("run-a:3")));
        assert_eq!(t.highest_fence(&bot("b1")), Some(7));
        refused(&mut t, "b1", "run-a:3");
        t.check(&lease("b1", "run-b:7")).expect("holder accepted");
        // An equal-fence push naming another owner does not replace the holder.
        t.update(bot("b1"), Some(token("run-c:7")));
        refused(&mut t, "b1", "run-c:7");
        t.check(&lease("b1", "run-b:7"))
            .expect("holder still accepted");
    }

    fn authority(fences: &[(&str, u64)]) -> HomeAuthority {
        HomeAuthority::new(
            fences
                .iter()
                .map(|(b, fence)| gateway_proto::home::LeaseFence {
                    bot: bot(b),
                    fence: *fence,
                })
                .collect(),
        )
        .expect("authority")
    }

    fn home_refused(t: &FenceTable, op: HomeOp, fences: &[(&str, u64)]) -> String {
        let err = t
            .check_home(op, &authority(fences))
            .expect_err("expected a stale authority");
        assert_eq!(err.code, ErrorCode::StaleLease);
        err.message
    }

    #[test]
    fn a_home_authority_naming_every_known_fence_is_accepted() {
        let mut t = FenceTable::new();
        for op in [HomeOp::Export, HomeOp::Import] {
            t.check_home(op, &authority(&[])).expect("nothing known");
            t.check_home(op, &authority(&[("b9", 3)]))
                .expect("the control plane may know more");
        }
        t.update(bot("b1"), Some(token("run-a:2")));
        t.update(bot("b2"), Some(token("run-b:5")));
        t.update(bot("b2"), None);
        // A viewer's fence-0 token of a bot that never had a lease needs no naming.
        t.check(&lease("b3", "screen-view-b3:0"))
            .expect("viewer accepted");
        for op in [HomeOp::Export, HomeOp::Import] {
            t.check_home(op, &authority(&[("b1", 2), ("b2", 5)]))
                .expect("every fence named");
            // Higher than known: the control plane is ahead (a push still on its way).
            t.check_home(op, &authority(&[("b1", 3), ("b2", 6), ("b4", 1)]))
                .expect("newer knowledge");
        }
        // The check changes nothing.
        assert_eq!(t.highest_fence(&bot("b1")), Some(2));
        assert_eq!(t.highest_fence(&bot("b4")), None);
    }

    #[test]
    fn a_home_authority_naming_a_lower_fence_is_refused() {
        let mut t = FenceTable::new();
        t.update(bot("b1"), Some(token("run-a:1")));
        t.update(bot("b1"), None);
        t.update(bot("b1"), Some(token("run-b:2")));
        assert_eq!(
            home_refused(&t, HomeOp::Export, &[("b1", 1)]),
            "home export refused: the control plane acts on stale leases: it named fence 1 for \
             bot b1, this guest knows lease run-b:2; exporting now would quiesce that run's browser"
        );
        assert_eq!(
            home_refused(&t, HomeOp::Import, &[("b1", 1)]),
            "home import refused: the control plane acts on stale leases: it named fence 1 for \
             bot b1, this guest knows lease run-b:2; importing now would replace the home under \
             that run"
        );
        // A released lease's fence counts too: the control plane's rows went back.
        t.update(bot("b1"), None);
        assert_eq!(
            home_refused(&t, HomeOp::Import, &[("b1", 1)]),
            "home import refused: the control plane acts on stale leases: it named fence 1 for \
             bot b1, this guest knows lease run-b:2 (released)"
        );
    }

    #[test]
    fn a_home_authority_missing_a_known_lease_is_refused() {
        let mut t = FenceTable::new();
        t.update(bot("b1"), Some(token("run-a:3")));
        // A run started after the control plane read its leases: it names b1 not at all.
        assert_eq!(
            home_refused(&t, HomeOp::Import, &[("b2", 7)]),
            "home import refused: the control plane acts on stale leases: it did not name bot \
             b1, this guest knows lease run-a:3; importing now would replace the home under \
             that run"
        );
        home_refused(&t, HomeOp::Export, &[]);
        // Learnt from a command as well as from a push.
        let mut t = FenceTable::new();
        t.check(&lease("b2", "run-c:4")).expect("adopted");
        home_refused(&t, HomeOp::Import, &[("b1", 9)]);
        t.check_home(HomeOp::Import, &authority(&[("b2", 4)]))
            .expect("named");
    }

    #[test]
    fn release_of_unknown_bot_is_a_no_op() {
        let mut t = FenceTable::new();
        t.update(bot("b1"), None);
        assert_eq!(t.highest_fence(&bot("b1")), None);
        t.check(&lease("b1", "run-a:0"))
            .expect("unknown bot accepted");
    }

    #[test]
    fn release_then_push_at_higher_fence_accepts_only_the_new_holder() {
        let mut t = FenceTable::new();
        t.update(bot("b1"), Some(token("run-a:4")));
        t.update(bot("b1"), None);
        t.update(bot("b1"), Some(token("run-b:5")));
        refused(&mut t, "b1", "run-a:4");
        refused(&mut t, "b1", "run-c:5");
        t.check(&lease("b1", "run-b:5"))
            .expect("new holder accepted");
    }
}
