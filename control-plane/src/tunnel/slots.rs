//! The leases to push to one guest: the latest word per bot, kept until sent.

use gateway_proto::{BotId, ControlMsg, LeaseToken};
use std::collections::HashMap;

/// The latest lease the control plane told a guest about, per bot.
#[derive(Debug, Clone)]
struct LeaseSlot {
    token: LeaseToken,
    released: bool,
    sent: bool,
}

/// The leases to tell one guest: the latest word per bot, kept until sent.
#[derive(Debug, Default)]
pub(super) struct LeaseSlots(HashMap<BotId, LeaseSlot>);

impl LeaseSlots {
    /// Records a grant (`released` false) or a release of `token`; true if there is something
    /// new to send. An older lease (a lower fence) never replaces a newer one.
    pub(super) fn push(&mut self, bot: &BotId, token: &LeaseToken, released: bool) -> bool {
        match self.0.get_mut(bot) {
            Some(slot) if slot.token.fence() > token.fence() => false,
            Some(slot) if slot.token == *token => {
                let changed = released && !slot.released;
                if changed {
                    slot.released = true;
                    slot.sent = false;
                }
                changed
            }
            _ => {
                self.0.insert(
                    bot.clone(),
                    LeaseSlot {
                        token: token.clone(),
                        released,
                        sent: false,
                    },
                );
                true
            }
        }
    }

    /// The control messages of every slot not sent yet, marking them sent. A release follows
    /// its grant, so a guest that never saw the grant still learns the fence it must refuse.
    pub(super) fn take_unsent(&mut self) -> Vec<ControlMsg> {
        let mut out = Vec::new();
        for (bot, slot) in self.0.iter_mut().filter(|(_, s)| !s.sent) {
            slot.sent = true;
            out.push(ControlMsg::Lease {
                bot: bot.clone(),
                lease: Some(slot.token.clone()),
            });
            if slot.released {
                out.push(ControlMsg::Lease {
                    bot: bot.clone(),
                    lease: None,
                });
            }
        }
        out
    }
}
