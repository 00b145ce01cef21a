//! The repeated-action refusal of docs/screens.md#repeated-action-refusal, kept per bot.
//!
//! The visual actions (pointer, key, scroll) of a batch form its key. When a batch with the same
//! key runs and the frame stays unchanged, a streak counts up; at [`REFUSE_AT`] the next batch
//! with that key is refused without running. A new frame resets the streak; a batch containing a
//! non-visual, non-wait action (type, focus, open, launch) is exempt and resets it; a successful
//! page-browser navigate or act resets it too.

use gateway_proto::desktop::Action;

/// Streak length at which the next batch with the same key is refused.
pub const REFUSE_AT: u32 = 3;

/// The refusal text of the contract.
pub const REFUSAL_MESSAGE: &str = "The same visual action left the screen unchanged 3 times and was not run again. The previous screenshot remains valid. Use browser_snapshot or a different action.";

/// One bot's streak.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RefusalStreak {
    key: Vec<Action>,
    count: u32,
}

/// The key of a batch: its visual actions, or `None` when the batch is exempt or has none.
fn batch_key(actions: &[Action]) -> Option<Vec<Action>> {
    if actions.iter().any(Action::exempts_from_refusal) {
        return None;
    }
    let key: Vec<Action> = actions.iter().filter(|a| a.is_visual()).cloned().collect();
    (!key.is_empty()).then_some(key)
}

impl RefusalStreak {
    /// Before running: whether this batch must be refused.
    pub fn should_refuse(&self, actions: &[Action]) -> bool {
        self.count >= REFUSE_AT && batch_key(actions).is_some_and(|k| k == self.key)
    }

    /// After running: `unchanged` says whether the frame after equals the frame before.
    pub fn record(&mut self, actions: &[Action], unchanged: bool) {
        match batch_key(actions) {
            None if actions.iter().any(Action::exempts_from_refusal) => self.reset(),
            // A wait-only batch neither counts nor resets, unless the screen moved.
            None => {
                if !unchanged {
                    self.reset()
                }
            }
            Some(_) if !unchanged => self.reset(),
            Some(key) if key == self.key => self.count += 1,
            Some(key) => {
                self.key = key;
                self.count = 1;
            }
        }
    }

    /// A successful browser_navigate or browser_act, or a new frame seen elsewhere.
    pub fn reset(&mut self) {
        self.key.clear();
        self.count = 0;
    }

    pub fn count(&self) -> u32 {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_proto::desktop::{MouseButton, ScrollDirection};

    fn click(x: i64) -> Action {
        Action::Click {
            x,
            y: 10,
            button: MouseButton::Left,
            double: false,
        }
    }

    fn run(s: &mut RefusalStreak, actions: &[Action], unchanged: bool) -> bool {
        if s.should_refuse(actions) {
            return false;
        }
        s.record(actions, unchanged);
        true
    }

    #[test]
    fn three_unchanged_repeats_refuse_the_fourth() {
        let mut s = RefusalStreak::default();
        for i in 1..=3 {
            assert!(run(&mut s, &[click(5)], true), "run {i} allowed");
            assert_eq!(s.count(), i);
        }
        assert!(!run(&mut s, &[click(5)], true), "the fourth is refused");
        assert!(!run(&mut s, &[click(5)], true), "and stays refused");
    }

    #[test]
    fn a_different_key_is_not_refused_and_starts_its_own_streak() {
        let mut s = RefusalStreak::default();
        for _ in 0..3 {
            run(&mut s, &[click(5)], true);
        }
        assert!(run(&mut s, &[click(6)], true));
        assert_eq!(s.count(), 1);
        assert!(
            run(&mut s, &[click(5)], true),
            "the old key's streak was replaced"
        );
    }

    #[test]
    fn a_new_frame_resets_the_streak() {
        let mut s = RefusalStreak::default();
        run(&mut s, &[click(5)], true);
        run(&mut s, &[click(5)], true);
        run(&mut s, &[click(5)], false);
        assert_eq!(s.count(), 0);
        for _ in 0..3 {
            assert!(run(&mut s, &[click(5)], true));
        }
        assert!(!run(&mut s, &[click(5)], true));
    }

    #[test]
    fn type_and_focus_batches_are_exempt_and_reset() {
        let mut s = RefusalStreak::default();
        let with_type = [click(5), Action::Type { text: "x".into() }];
        for _ in 0..5 {
            assert!(run(&mut s, &with_type, true), "exempt batches always run");
        }
        for _ in 0..3 {
            run(&mut s, &[click(5)], true);
        }
        let focus = [Action::Focus {
            application: "chromium".into(),
            uri: None,
        }];
        assert!(run(&mut s, &focus, true));
        assert_eq!(s.count(), 0);
        assert!(run(&mut s, &[click(5)], true));
    }

    #[test]
    fn waits_are_not_part_of_the_key() {
        let mut s = RefusalStreak::default();
        run(&mut s, &[click(5)], true);
        run(&mut s, &[click(5), Action::Wait { ms: 100 }], true);
        run(&mut s, &[Action::Wait { ms: 50 }, click(5)], true);
        assert_eq!(s.count(), 3);
        assert!(!run(&mut s, &[click(5), Action::Wait { ms: 999 }], true));
        // A wait-only batch is neither refused nor counted.
        assert!(run(&mut s, &[Action::Wait { ms: 10 }], true));
        assert_eq!(s.count(), 3);
    }

    #[test]
    fn keys_and_scrolls_are_visual() {
        let mut s = RefusalStreak::default();
        let batch = [
            Action::Key {
                key: "Down".into(),
                modifiers: vec![],
            },
            Action::Scroll {
                direction: ScrollDirection::Down,
                amount: 3,
            },
        ];
        for _ in 0..3 {
            run(&mut s, &batch, true);
        }
        assert!(!run(&mut s, &batch, true));
        s.reset();
        assert!(
            run(&mut s, &batch, true),
            "a browser_navigate/act reset clears it"
        );
    }
}
