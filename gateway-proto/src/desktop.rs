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
/// Narrowest frame an observation may be scaled to, and the narrowest coordinate space an act
/// may name.
pub const MIN_FRAME_WIDTH: u16 = 16;
/// Widest frame a request may name; the guest also refuses anything wider than its screen.
pub const MAX_FRAME_WIDTH: u16 = 8192;
/// Most marks one observation lists (elements past it, in document order, are left out).
pub const MAX_MARKS: usize = 1000;
/// Longest name a mark lists (a snapshot's names go to 200): a thousand marks of names in any
/// script stay well inside one frame.
pub const MAX_MARK_NAME_CHARS: usize = 80;
/// Most changed regions one observation sends; more fall back to the full frame.
pub const MAX_REGIONS: usize = 64;
/// Longest element ref (`e123`) an action may carry.
pub const MAX_REF_CHARS: usize = 24;

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

/// Start a spare desktop (X server and Chrome) that the first bot to ask for a screen takes
/// (docs/pools.md#desktops). Idempotent: a guest keeps at most one spare.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScreenPrewarm {}

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
    /// How the frame is taken and sent (v14).
    pub options: ObserveOptions,
}

/// How an observation is taken and sent (docs/screens.md#observe-and-act). The default is the
/// screen at its own size, no marks, the whole frame or `unchanged`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObserveOptions {
    /// Scale the frame down to this width, keeping the aspect ratio (`MIN_FRAME_WIDTH..=` the
    /// screen's width); `None`: the screen's own size.
    pub width: Option<u16>,
    /// Draw each interactive element of the bot's page as a mark labelled with its ref, and
    /// list the marks ([`Marks`]).
    pub marks: bool,
    /// Whole frame, changed regions, or always the whole frame.
    pub send: SendMode,
    /// With [`SendMode::Changes`]: the most PNG bytes the regions may cost together; more falls
    /// back to the whole frame. `None`: the whole frame's size (regions only when cheaper).
    pub budget: Option<u32>,
}

/// What an observation sends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SendMode {
    /// The whole frame, or nothing when it equals the previous one ([`FrameKind::Unchanged`]).
    #[default]
    Auto,
    /// As `Auto`, or only the regions changed since the previous frame when they cost less.
    Changes,
    /// The whole frame, always (even when unchanged).
    Full,
}

/// What an observation's bytes are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum FrameKind {
    /// One PNG of the whole frame.
    #[default]
    Full,
    /// One PNG per [`Region`], in order, to paste onto the frame `base_frame_id`.
    Regions,
    /// Nothing: the frame equals the previous one, which remains valid.
    Unchanged,
}

/// A changed part of the frame (frame coordinates) and the length of its PNG.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    pub x: u16,
    pub y: u16,
    pub width: u16,
    pub height: u16,
    pub png_len: u64,
}

/// A frame's size, the coordinate space of an observation (and of an act's pointer actions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameSize {
    pub width: u16,
    pub height: u16,
}

/// The marks drawn on a frame.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marks {
    pub items: Vec<Mark>,
    /// Why the marks may be missing or off (no page, a page that kept changing while marked).
    pub note: Option<String>,
}

/// One interactive element drawn on the frame: its snapshot ref (the mark's label), role,
/// accessible name, and its visible box in frame coordinates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    pub element: String,
    pub role: String,
    pub name: String,
    pub x: u16,
    pub y: u16,
    pub width: u16,
    pub height: u16,
}

/// An observation's metadata; `png_len` raw bytes follow (the whole frame's PNG, or the
/// regions' PNGs one after another).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservationMeta {
    /// sha256 hex of the whole frame's PNG (also for regions: the frame they make up).
    pub frame_id: String,
    pub captured_at_ms: i64,
    /// The frame's size (smaller than the screen's when scaled down).
    pub width: u16,
    pub height: u16,
    pub cursor: (i32, i32),
    pub active_window: Option<WindowInfo>,
    /// The frame equals the bot's previous one: the image is omitted and the previous
    /// screenshot remains valid.
    pub unchanged: bool,
    /// Length of the raw bytes that follow this frame (0 when unchanged).
    pub png_len: u64,
    /// The screen's size: frame pixel `(x, y)` covers screen pixels from
    /// `(x * screen_width / width, y * screen_height / height)` (v14).
    pub screen_width: u16,
    pub screen_height: u16,
    /// What the bytes are (v14).
    pub kind: FrameKind,
    /// With [`FrameKind::Regions`]: the frame the regions are pasted onto.
    pub base_frame_id: Option<String>,
    /// With [`FrameKind::Regions`]: the regions, in the order their PNGs follow.
    pub regions: Vec<Region>,
    /// When marks were asked.
    pub marks: Option<Marks>,
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
    /// A click at the centre of the element a ref names (from a page snapshot or marks), its box
    /// read when the action runs (v14).
    ClickRef {
        element: String,
        button: MouseButton,
        double: bool,
    },
}

impl Action {
    /// Pointer, key and scroll actions: the ones that form a batch's repeat key.
    pub fn is_visual(&self) -> bool {
        matches!(
            self,
            Self::Click { .. }
                | Self::ClickRef { .. }
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
    /// The coordinate space of the pointer actions: a frame of this size (from an observation
    /// scaled down); `None`: screen pixels (v14).
    pub frame: Option<FrameSize>,
    /// How the observation after the actions is taken (v14).
    pub observe_options: ObserveOptions,
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
            Action::Click { double: true, .. } | Action::ClickRef { double: true, .. } => 2,
            _ => 1,
        };
        match a {
            Action::ClickRef { element, .. } => check_ref(n, element)?,
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

/// Checks an action's element ref: `e` and digits, like the page tools mint.
fn check_ref(n: usize, element: &str) -> Result<(), OpError> {
    let digits = element.strip_prefix('e').unwrap_or("");
    if digits.is_empty()
        || element.len() > MAX_REF_CHARS
        || !digits.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad(format!(
            "action {n}: ref must be an element ref like e12 (from a snapshot or marks), got {element:?}"
        )));
    }
    Ok(())
}

/// Checks a requested frame width against the bounds every screen shares; the guest also
/// refuses one wider than its screen.
pub fn validate_width(width: u16) -> Result<(), OpError> {
    if !(MIN_FRAME_WIDTH..=MAX_FRAME_WIDTH).contains(&width) {
        return Err(bad(format!(
            "width must be {MIN_FRAME_WIDTH}..={MAX_FRAME_WIDTH} (and at most the screen's width), got {width}"
        )));
    }
    Ok(())
}

/// Checks observe options before anything is captured.
pub fn validate_observe(options: &ObserveOptions) -> Result<(), OpError> {
    if let Some(w) = options.width {
        validate_width(w)?;
    }
    if options.budget.is_some() && options.send != SendMode::Changes {
        return Err(bad("budget applies only to changes"));
    }
    Ok(())
}

/// Checks an act's coordinate space: a frame at least `MIN_FRAME_WIDTH` wide and 1 high.
pub fn validate_frame(frame: &FrameSize) -> Result<(), OpError> {
    if !(MIN_FRAME_WIDTH..=MAX_FRAME_WIDTH).contains(&frame.width) {
        return Err(bad(format!(
            "frame width must be {MIN_FRAME_WIDTH}..={MAX_FRAME_WIDTH}, got {}",
            frame.width
        )));
    }
    if frame.height == 0 || frame.height > MAX_FRAME_WIDTH {
        return Err(bad(format!(
            "frame height must be 1..={MAX_FRAME_WIDTH}, got {}",
            frame.height
        )));
    }
    Ok(())
}

/// The frame size a screen of `screen` scales to at `width` (the aspect ratio kept, rounded,
/// at least 1 high); the screen itself when `width` is `None`.
pub fn scaled_size(screen: FrameSize, width: Option<u16>) -> FrameSize {
    match width {
        None => screen,
        Some(w) => {
            let h = (u32::from(screen.height) * u32::from(w) + u32::from(screen.width) / 2)
                / u32::from(screen.width.max(1));
            FrameSize {
                width: w,
                height: u16::try_from(h.max(1)).unwrap_or(u16::MAX),
            }
        }
    }
}

/// Maps a point given in a frame's coordinates to the screen pixel at the centre of the block
/// of screen pixels that frame pixel covers, clamped to the screen: the inverse of scaling the
/// screen down to `frame`. A point outside the frame lands on the screen's nearest edge.
pub fn frame_to_screen(x: i64, y: i64, frame: FrameSize, screen: FrameSize) -> (i64, i64) {
    let axis = |v: i64, f: u16, s: u16| -> i64 {
        let (f, s) = (i64::from(f.max(1)), i64::from(s.max(1)));
        let v = v.clamp(0, f - 1);
        // Centre of [v*s/f, (v+1)*s/f): (2v+1)*s / 2f, in integers.
        ((2 * v + 1) * s / (2 * f)).clamp(0, s - 1)
    };
    (
        axis(x, frame.width, screen.width),
        axis(y, frame.height, screen.height),
    )
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
    fn frame_points_map_to_the_centre_of_their_screen_block() {
        let screen = FrameSize {
            width: 1280,
            height: 800,
        };
        // The screen's own size maps to itself.
        assert_eq!(frame_to_screen(17, 799, screen, screen), (17, 799));
        let half = scaled_size(screen, Some(640));
        assert_eq!((half.width, half.height), (640, 400));
        // Frame pixel 0 covers screen pixels 0 and 1: its centre rounds down to 1.
        assert_eq!(frame_to_screen(0, 0, half, screen), (1, 1));
        assert_eq!(frame_to_screen(639, 399, half, screen), (1279, 799));
        let three_quarters = scaled_size(screen, Some(960));
        assert_eq!((three_quarters.width, three_quarters.height), (960, 600));
        // Frame pixel 1 covers screen [1.33, 2.67): its centre is 2.
        assert_eq!(frame_to_screen(1, 1, three_quarters, screen), (2, 2));
        assert_eq!(
            frame_to_screen(480, 300, three_quarters, screen),
            (640, 400)
        );
        // Outside the frame: the nearest edge of the screen.
        assert_eq!(frame_to_screen(-5, 10_000, half, screen), (1, 799));
        // Rounded to the nearest row.
        assert_eq!(scaled_size(screen, Some(333)).height, 208);
        assert_eq!(scaled_size(screen, None), screen);
    }

    #[test]
    fn widths_frames_and_refs_are_checked() {
        assert!(validate_width(0).is_err());
        assert!(validate_width(MIN_FRAME_WIDTH).is_ok());
        assert!(validate_width(MAX_FRAME_WIDTH + 1).is_err());
        assert!(validate_frame(&FrameSize {
            width: 640,
            height: 0
        })
        .is_err());
        let with_ref = |element: &str| {
            validate_actions(
                &[Action::ClickRef {
                    element: element.into(),
                    button: MouseButton::Left,
                    double: false,
                }],
                None,
            )
        };
        assert_eq!(with_ref("e15"), Ok(1));
        for bad in ["", "e", "15", "e1x", "button"] {
            let err = with_ref(bad).unwrap_err();
            assert!(err.message.contains("element ref like e12"), "{err}");
        }
        let budget_alone = ObserveOptions {
            budget: Some(10),
            ..ObserveOptions::default()
        };
        assert!(validate_observe(&budget_alone).is_err());
    }

    #[test]
    fn the_most_marks_with_the_longest_names_fit_in_one_frame() {
        // Names and roles in a 4-byte script, refs of 11 digits, every field at its largest.
        let wide = |n: usize| "\u{1f600}".repeat(n);
        let mark = Mark {
            element: "e99999999999".into(),
            role: wide(40),
            name: wide(MAX_MARK_NAME_CHARS),
            x: u16::MAX,
            y: u16::MAX,
            width: u16::MAX,
            height: u16::MAX,
        };
        let meta = ObservationMeta {
            frame_id: "f".repeat(64),
            captured_at_ms: i64::MAX,
            width: u16::MAX,
            height: u16::MAX,
            cursor: (i32::MIN, i32::MIN),
            active_window: Some(WindowInfo {
                id: u32::MAX,
                title: wide(1024),
            }),
            unchanged: false,
            png_len: u64::MAX,
            screen_width: u16::MAX,
            screen_height: u16::MAX,
            kind: FrameKind::Regions,
            base_frame_id: Some("f".repeat(64)),
            regions: vec![
                Region {
                    x: u16::MAX,
                    y: u16::MAX,
                    width: u16::MAX,
                    height: u16::MAX,
                    png_len: u64::MAX,
                };
                MAX_REGIONS
            ],
            marks: Some(Marks {
                items: vec![mark; MAX_MARKS],
                note: Some("n".repeat(200)),
            }),
        };
        let frame = crate::encode(&crate::Reply::Observation(meta)).unwrap();
        assert!(
            frame.len() <= crate::frame::MAX_FRAME_LEN,
            "{}",
            frame.len()
        );
    }

    #[test]
    fn coordinates_are_clamped() {
        assert_eq!(clamp_coord(-5), 0);
        assert_eq!(clamp_coord(1_000_000), MAX_COORD);
        assert_eq!(clamp_coord(640), 640);
    }
}
