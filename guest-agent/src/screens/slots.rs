//! Slot allocation for desktops (docs/screens.md#slots), as a pure table.
//!
//! A slot is the lowest free index; a bot keeps its slot while it holds it. A slot being
//! released refuses new claims ("still being released"); a teardown that failed keeps the slot
//! reserved until a retried teardown succeeds. `SANDBOX_TEAM_SCREEN_LIMIT` caps occupied slots.
//! This module decides; [`super::Screens`] runs the processes.

use gateway_proto::BotId;
use std::collections::BTreeMap;

/// What occupies a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotState {
    /// The bot's desktop runs (or is starting) here.
    Live(BotId),
    /// Teardown in progress; no claim may take it.
    Releasing(BotId),
    /// Teardown failed; reserved until a retried teardown succeeds.
    Reserved(BotId),
}

impl SlotState {
    pub fn bot(&self) -> &BotId {
        match self {
            Self::Live(b) | Self::Releasing(b) | Self::Reserved(b) => b,
        }
    }
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The bot already holds this slot.
    Existing(u32),
    /// A new slot was allocated for the bot.
    New(u32),
}

/// Why a claim was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimError {
    /// The bot's slot is being released.
    Releasing(u32),
    /// The bot's last teardown failed: retry it before a new desktop starts.
    NeedsTeardown(u32),
    /// Every allowed slot is occupied.
    Unavailable { limit: u32 },
}

/// Occupied slots by index.
#[derive(Debug, Default)]
pub struct SlotTable {
    slots: BTreeMap<u32, SlotState>,
    limit: Option<u32>,
}

impl SlotTable {
    /// `limit`: `None` (or 0 at configuration) means no cap.
    pub fn new(limit: Option<u32>) -> Self {
        Self {
            slots: BTreeMap::new(),
            limit: limit.filter(|l| *l > 0),
        }
    }

    pub fn limit(&self) -> Option<u32> {
        self.limit
    }

    /// The slot of a bot, in whatever state.
    pub fn slot_of(&self, bot: &BotId) -> Option<(u32, &SlotState)> {
        self.slots
            .iter()
            .find(|(_, s)| s.bot() == bot)
            .map(|(i, s)| (*i, s))
    }

    pub fn get(&self, slot: u32) -> Option<&SlotState> {
        self.slots.get(&slot)
    }

    /// Occupied slots (live, releasing or reserved).
    pub fn occupied(&self) -> usize {
        self.slots.len()
    }

    /// Live slots, in index order.
    pub fn live(&self) -> impl Iterator<Item = (u32, &BotId)> {
        self.slots.iter().filter_map(|(i, s)| match s {
            SlotState::Live(b) => Some((*i, b)),
            _ => None,
        })
    }

    /// Claims a slot for `bot`.
    pub fn claim(&mut self, bot: &BotId) -> Result<Claim, ClaimError> {
        if let Some((slot, state)) = self.slot_of(bot) {
            return match state {
                SlotState::Live(_) => Ok(Claim::Existing(slot)),
                SlotState::Releasing(_) => Err(ClaimError::Releasing(slot)),
                SlotState::Reserved(_) => Err(ClaimError::NeedsTeardown(slot)),
            };
        }
        if let Some(limit) = self.limit {
            if self.slots.len() >= limit as usize {
                return Err(ClaimError::Unavailable { limit });
            }
        }
        let slot = (0u32..)
            .find(|i| !self.slots.contains_key(i))
            .unwrap_or(u32::MAX);
        self.slots.insert(slot, SlotState::Live(bot.clone()));
        Ok(Claim::New(slot))
    }

    /// Marks the bot's live (or reserved) slot as releasing; returns it.
    pub fn begin_release(&mut self, bot: &BotId) -> Option<u32> {
        let (slot, state) = self.slot_of(bot)?;
        match state {
            SlotState::Live(_) | SlotState::Reserved(_) => {
                self.slots.insert(slot, SlotState::Releasing(bot.clone()));
                Some(slot)
            }
            SlotState::Releasing(_) => None,
        }
    }

    /// Ends a release: the slot is free if teardown succeeded, reserved if it failed.
    pub fn finish_release(&mut self, slot: u32, ok: bool) {
        if let Some(SlotState::Releasing(bot)) = self.slots.get(&slot).cloned() {
            if ok {
                self.slots.remove(&slot);
            } else {
                self.slots.insert(slot, SlotState::Reserved(bot));
            }
        }
    }

    /// Frees a slot whose desktop never started (a failed start).
    pub fn abandon(&mut self, slot: u32) {
        self.slots.remove(&slot);
    }
}

/// Parses `SANDBOX_TEAM_SCREEN_LIMIT`: a positive integer caps live desktops; unset or `0` means
/// no cap; anything else is a configuration error.
pub fn parse_limit(raw: Option<&str>) -> Result<Option<u32>, String> {
    match raw.map(str::trim) {
        None | Some("") | Some("0") => Ok(None),
        Some(v) => match v.parse::<u32>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(format!(
                "SANDBOX_TEAM_SCREEN_LIMIT must be a positive integer or 0, got {v:?}"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bot(s: &str) -> BotId {
        BotId::new(s).unwrap()
    }

    #[test]
    fn lowest_free_slot_and_keeping_it() {
        let mut t = SlotTable::new(None);
        assert_eq!(t.claim(&bot("a")), Ok(Claim::New(0)));
        assert_eq!(t.claim(&bot("b")), Ok(Claim::New(1)));
        assert_eq!(t.claim(&bot("a")), Ok(Claim::Existing(0)));
        let s = t.begin_release(&bot("a")).unwrap();
        t.finish_release(s, true);
        assert_eq!(
            t.claim(&bot("c")),
            Ok(Claim::New(0)),
            "the freed lowest slot is reused"
        );
        assert_eq!(t.claim(&bot("a")), Ok(Claim::New(2)));
    }

    #[test]
    fn releasing_slots_refuse_claims() {
        let mut t = SlotTable::new(None);
        t.claim(&bot("a")).unwrap();
        let s = t.begin_release(&bot("a")).unwrap();
        assert_eq!(t.claim(&bot("a")), Err(ClaimError::Releasing(s)));
        assert_eq!(
            t.claim(&bot("b")),
            Ok(Claim::New(1)),
            "a releasing slot is not free"
        );
        assert_eq!(t.begin_release(&bot("a")), None, "no double release");
    }

    #[test]
    fn failed_teardown_keeps_the_slot_reserved_until_a_retry_succeeds() {
        let mut t = SlotTable::new(None);
        t.claim(&bot("a")).unwrap();
        let s = t.begin_release(&bot("a")).unwrap();
        t.finish_release(s, false);
        assert_eq!(t.get(s), Some(&SlotState::Reserved(bot("a"))));
        assert_eq!(t.claim(&bot("a")), Err(ClaimError::NeedsTeardown(s)));
        assert_eq!(t.claim(&bot("b")), Ok(Claim::New(1)));
        let s2 = t.begin_release(&bot("a")).unwrap();
        assert_eq!(s2, s);
        t.finish_release(s2, true);
        assert_eq!(t.claim(&bot("c")), Ok(Claim::New(0)));
    }

    #[test]
    fn the_limit_counts_every_occupied_slot() {
        let mut t = SlotTable::new(Some(2));
        t.claim(&bot("a")).unwrap();
        t.claim(&bot("b")).unwrap();
        assert_eq!(
            t.claim(&bot("c")),
            Err(ClaimError::Unavailable { limit: 2 })
        );
        assert_eq!(
            t.claim(&bot("a")),
            Ok(Claim::Existing(0)),
            "holders keep their slot"
        );
        let s = t.begin_release(&bot("a")).unwrap();
        assert_eq!(
            t.claim(&bot("c")),
            Err(ClaimError::Unavailable { limit: 2 })
        );
        t.finish_release(s, true);
        assert_eq!(t.claim(&bot("c")), Ok(Claim::New(0)));
    }

    #[test]
    fn limit_configuration() {
        assert_eq!(parse_limit(None), Ok(None));
        assert_eq!(parse_limit(Some("0")), Ok(None));
        assert_eq!(parse_limit(Some("3")), Ok(Some(3)));
        for bad in ["-1", "x", "1.5", "99999999999"] {
            assert!(parse_limit(Some(bad)).is_err(), "{bad}");
        }
        assert_eq!(SlotTable::new(Some(0)).limit(), None);
    }
}
