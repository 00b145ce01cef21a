//! Desktop messages: per-bot screens, observations and batched actions (docs/screens.md).
//!
//! The bounds the contract sets are constants here and [`validate_actions`] applies them, so the
//! control plane (before sending) and the guest (before running) check a batch the same way: the
//! whole batch is validated before anything runs.

use crate::error::{ErrorCode, OpError};
use crate::lease::{BotId, LeaseToken};
use serde::{Deserialize, Serialize};

/// Most actions in one batch after expansion (a double click counts twice).
pub const MAX_ACTIONS: usize = 24;
/// Coordinates are clamped to `0..=MAX_COORD` before use.
pub const MAX_COORD: i64 = 100_000;
/// `wait.ms` and `settle_ms` are at most this.
pub const MAX_WAIT_MS: u32 = 5_000;
/// `wait.ms` when not given.
pub const DEFAULT_WAIT_MS: u32 = 350;
/// `scroll.amount` bounds and default.
pub const MAX_SCROLL: u8 = 20;
pub const DEFAULT_SCROLL: u8 = 3;
/// Longest text a `type` action may carry.
pub const MAX_TYPE_CHARS: usize = 10_000;
/// Longest application name, key name, URI or path in an action.
pub const MAX_ACTION_STRING: usize = 4096;

/// Which bot a screen request is for, with the lease it acts under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScreenRequest {
    pub bot: BotId,
    /// The bot's execution lease; required for every graphical call.
    pub lease: LeaseToken,
}

/// Release a bot's screen (teardown in the order of docs/screens.md#teardown).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScreenRelease {
    pub bot: BotId,
    /// The lease of the run releasing it; `None` for a control-plane decision (failed run,
    /// computer deletion) that holds no lease of its own.
    pub lease: Option<LeaseToken>,
}

/// A live screen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScreenInfo {
    pub bot: BotId,
    /// Slot index: the lowest free one at allocation.
    pub slot: u32,
    /// X display number.
    pub display: u16,
    pub width: u16,
    pub height: u16,
    /// Chrome's pid, when it runs.
    pub browser_pid: Option<u32>,
    /// Whether the desktop was started by this call.
    pub started: bool,
    /// Milliseconds since the bot last used it (its last graphical call); screen eviction
    /// takes the oldest idle one.
    pub idle_ms: u64,
}

/// Take a screenshot of a bot's screen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObserveRequest {
    pub bot: BotId,
    pub lease: LeaseToken,
}

/// An observation's metadata; the PNG follows raw when `png_len > 0`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservationMeta {
    /// sha256 hex of the PNG bytes.
    pub frame_id: String,
    pub captured_at_ms: i64,
    pub width: u16,
    pub height: u16,
    pub cursor: (i32, i32),
    pub active_window: Option<WindowInfo>,
    /// The frame equals the bot's previous one: the image is omitted and the previous
    /// screenshot remains valid.
    pub unchanged: bool,
    /// Length of the raw PNG that follows this frame (0 when unchanged).
    pub png_len: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowInfo {
    pub id: u32,
    pub title: String,
}

/// Mouse buttons of pointer actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MouseButton {
    Left,
    Right,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScrollDirection {
    Up,
    Down,
}

/// One desktop action (docs/screens.md#observe-and-act).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    Click {
        x: i64,
        y: i64,
        button: MouseButton,
        double: bool,
    },
    Move {
        x: i64,
        y: i64,
    },
    Down {
        x: i64,
        y: i64,
        button: MouseButton,
    },
    Up {
        x: i64,
        y: i64,
        button: MouseButton,
    },
    Type {
        text: String,
    },
    Key {
        key: String,
        modifiers: Vec<String>,
    },
    Scroll {
        direction: ScrollDirection,
        amount: u8,
    },
    Wait {
        ms: u32,
    },
    /// Raise the application's window, or launch it if absent.
    Focus {
        application: String,
        uri: Option<String>,
    },
    /// Open a path of the home or an http(s) URL.
    Open {
        target: String,
    },
    Launch {
        application: String,
        uri: Option<String>,
    },
}

impl Action {
    /// Pointer, key and scroll actions: the ones that form a batch's repeat key.
    pub fn is_visual(&self) -> bool {
        matches!(
            self,
            Self::Click { .. }
                | Self::Move { .. }
                | Self::Down { .. }
                | Self::Up { .. }
                | Self::Key { .. }
                | Self::Scroll { .. }
        )
    }

    /// Actions that exempt a batch from the repeated-action refusal (non-visual, non-wait).
    pub fn exempts_from_refusal(&self) -> bool {
        !self.is_visual() && !matches!(self, Self::Wait { .. })
    }
}

/// Run a batch of actions on a bot's screen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActRequest {
    pub bot: BotId,
    pub lease: LeaseToken,
    pub actions: Vec<Action>,
    /// Return an observation after the actions.
    pub observe: bool,
    /// Fixed wait before observing; `None` waits for the screen to settle.
    pub settle_ms: Option<u32>,
}

/// What a batch did. When `observe` was asked, an [`ObservationMeta`] frame (and its PNG)
/// follows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActOutcome {
    /// Actions completed, after expansion.
    pub completed: u32,
    /// How long the guest waited for the screen to settle (or the fixed `settle_ms`).
    pub settled_ms: u32,
    /// Whether the screen had settled (no damage for the quiet window) when observed.
    pub settled: bool,
}

fn bad(message: impl Into<String>) -> OpError {
    OpError::new(ErrorCode::BadRequest, message)
}

fn check_len(what: &str, s: &str, max: usize) -> Result<(), OpError> {
    if s.chars().count() > max {
        return Err(bad(format!("{what} is longer than {max} characters")));
    }
    Ok(())
}

/// Validates a whole batch before anything runs; returns the number of actions after
/// expansion.
pub fn validate_actions(actions: &[Action], settle_ms: Option<u32>) -> Result<usize, OpError> {
    if actions.is_empty() {
        return Err(bad("a batch needs at least one action"));
    }
    let mut expanded = 0usize;
    for (i, a) in actions.iter().enumerate() {
        let n = i + 1;
        expanded += match a {
            Action::Click { double: true, .. } => 2,
            _ => 1,
        };
        match a {
            Action::Type { text } => {
                if text.is_empty() {
                    return Err(bad(format!("action {n}: type needs text")));
                }
                check_len(&format!("action {n}: text"), text, MAX_TYPE_CHARS)?;
            }
            Action::Key { key, modifiers } => {
                if key.is_empty() {
                    return Err(bad(format!("action {n}: key needs a key name")));
                }
                check_len(&format!("action {n}: key"), key, 64)?;
                if modifiers.len() > 8 {
                    return Err(bad(format!("action {n}: at most 8 modifiers")));
                }
            }
            Action::Scroll { amount, .. } => {
                if !(1..=MAX_SCROLL).contains(amount) {
                    return Err(bad(format!(
                        "action {n}: scroll amount must be 1..={MAX_SCROLL}"
                    )));
                }
            }
            Action::Wait { ms } => {
                if *ms > MAX_WAIT_MS {
                    return Err(bad(format!(
                        "action {n}: wait ms must be 0..={MAX_WAIT_MS}"
                    )));
                }
            }
            Action::Focus { application, uri } | Action::Launch { application, uri } => {
                if application.is_empty() {
                    return Err(bad(format!("action {n}: application is required")));
                }
                check_len(&format!("action {n}: application"), application, 128)?;
                if let Some(u) = uri {
                    check_len(&format!("action {n}: uri"), u, MAX_ACTION_STRING)?;
                }
            }
            Action::Open { target } => {
                if target.is_empty() {
                    return Err(bad(format!("action {n}: open needs a path or URL")));
                }
                check_len(&format!("action {n}: target"), target, MAX_ACTION_STRING)?;
            }
            Action::Click { .. }
            | Action::Move { .. }
            | Action::Down { .. }
            | Action::Up { .. } => {}
        }
    }
    if expanded > MAX_ACTIONS {
        return Err(bad(format!(
            "the batch has {expanded} actions after expansion; at most {MAX_ACTIONS}: split the batch"
        )));
    }
    if let Some(ms) = settle_ms {
        if ms > MAX_WAIT_MS {
            return Err(bad(format!("settle_ms must be 0..={MAX_WAIT_MS}")));
        }
    }
    Ok(expanded)
}

/// Clamps a coordinate to `0..=MAX_COORD`.
pub fn clamp_coord(v: i64) -> i64 {
    v.clamp(0, MAX_COORD)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn click(double: bool) -> Action {
        Action::Click {
            x: 1,
            y: 2,
            button: MouseButton::Left,
            double,
        }
    }

    #[test]
    fn double_clicks_count_twice_toward_the_limit() {
        assert_eq!(validate_actions(&vec![click(false); 24], None), Ok(24));
        let err = validate_actions(&vec![click(true); 13], None).unwrap_err();
        assert!(err.message.contains("26 actions after expansion"), "{err}");
        assert!(err.message.contains("split the batch"));
    }

    #[test]
    fn bounds_are_checked_before_anything_runs() {
        assert!(validate_actions(&[], None).is_err());
        assert!(validate_actions(&[Action::Wait { ms: 5001 }], None).is_err());
        assert!(validate_actions(&[Action::Wait { ms: 5000 }], Some(5001)).is_err());
        assert!(validate_actions(
            &[Action::Scroll {
                direction: ScrollDirection::Up,
                amount: 0
            }],
            None
        )
        .is_err());
        assert!(validate_actions(
            &[Action::Scroll {
                direction: ScrollDirection::Up,
                amount: 21
            }],
            None
        )
        .is_err());
        assert!(validate_actions(
            &[Action::Type {
                text: String::new()
            }],
            None
        )
        .is_err());
        // The failing action is named by its position.
        let err = validate_actions(
            &[
                click(false),
                Action::Open {
                    target: String::new(),
                },
            ],
            None,
        )
        .unwrap_err();
        assert!(err.message.starts_with("action 2:"), "{err}");
    }

    #[test]
    fn visual_and_exempt_actions() {
        assert!(click(false).is_visual());
        assert!(Action::Key {
            key: "a".into(),
            modifiers: vec![]
        }
        .is_visual());
        assert!(!Action::Wait { ms: 1 }.is_visual());
        assert!(!Action::Wait { ms: 1 }.exempts_from_refusal());
        assert!(Action::Type { text: "x".into() }.exempts_from_refusal());
        assert!(Action::Focus {
            application: "x".into(),
            uri: None
        }
        .exempts_from_refusal());
    }

    #[test]
    fn coordinates_are_clamped() {
        assert_eq!(clamp_coord(-5), 0);
        assert_eq!(clamp_coord(1_000_000), MAX_COORD);
        assert_eq!(clamp_coord(640), 640);
    }
}
