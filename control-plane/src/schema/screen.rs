//! `/v1/computers/{id}/screens/{bot}/…` and `/terminals/{bot}/url`: a bot's desktop (ensure,
//! release, list), computer_observe and computer_act (docs/screens.md#observe-and-act), live view,
//! control and terminal URLs, takeover and its release, and `…/leases/{bot}/waiting_takeover`.

use serde::{Deserialize, Serialize};
use serde_json::Number;

/// The body of ensure, observe and release: the bot's lease (required by ensure and observe;
/// release also takes `null`, to tear down without one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaseBody {
    pub lease: Option<String>,
}

/// `POST …/screens/{bot}/observe`: the bot's lease and how to take the frame
/// (docs/screens.md#observe-and-act).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ObserveRequest {
    pub lease: Option<String>,
    /// See [`ObserveOptions::width`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u16>,
    /// See [`ObserveOptions::marks`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub marks: bool,
    /// See [`ObserveOptions::changes`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub changes: bool,
    /// See [`ObserveOptions::full`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub full: bool,
    /// See [`ObserveOptions::budget`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<u32>,
}

impl ObserveRequest {
    /// Its options without the lease.
    pub fn options(&self) -> ObserveOptions {
        ObserveOptions {
            width: self.width,
            marks: self.marks,
            changes: self.changes,
            full: self.full,
            budget: self.budget,
        }
    }
}

/// How a frame is taken and sent; every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ObserveOptions {
    /// Scale the frame down to this width (16 up to the screen's width), keeping the aspect
    /// ratio; pointer actions given in its coordinates need `frame` on the act.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u16>,
    /// Draw each interactive element of the bot's page as a mark labelled with its ref and
    /// list the marks.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub marks: bool,
    /// Send only the regions changed since the bot's previous frame when they cost less than
    /// the whole frame (or `budget`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub changes: bool,
    /// Always send the whole frame (even when unchanged); not with `changes`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub full: bool,
    /// With `changes`: the most PNG bytes the regions may cost together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<u32>,
}

/// A bot's desktop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Screen {
    pub bot: String,
    pub slot: u32,
    /// X display number.
    pub display: u16,
    pub width: u16,
    pub height: u16,
    /// Chrome's pid, when it runs.
    pub browser_pid: Option<u32>,
    /// Whether this call started it.
    pub started: bool,
    /// Milliseconds since the bot's last graphical call (ensure, observe, act, the page tools;
    /// a person watching does not count), by which screen eviction picks; 0 in an ensure's
    /// answer.
    pub idle_ms: u64,
    /// Whether a run holds the bot's execution lease (the list's answer only).
    #[serde(default)]
    pub run_active: bool,
    /// Whether that run asked for a person (`waiting_takeover`): taking control is allowed.
    #[serde(default)]
    pub waiting_takeover: bool,
    /// When the user's control of the bot ends, while someone holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_expires_at_ms: Option<i64>,
}

/// `GET /v1/computers/{id}/screens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScreenList {
    pub screens: Vec<Screen>,
}

/// `POST …/screens/{bot}/release`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScreenReleased {
    pub released: bool,
}

/// computer_observe's answer (docs/screens.md#observe-and-act); also `ActResult::observation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Observation {
    /// sha256 hex of the whole frame's PNG (also when only regions are sent).
    pub frame_id: String,
    pub captured_at: i64,
    /// `image/png`.
    pub mime_type: String,
    /// The frame's size: the coordinate space of its marks, regions and cursor-free pointer
    /// actions given with `frame` on an act.
    pub width: u16,
    pub height: u16,
    /// The screen's size; `width`/`height` are smaller when the frame was scaled down.
    pub screen_width: u16,
    pub screen_height: u16,
    /// `full` (`image` is the frame), `regions` (`regions` to paste onto `baseFrameId`) or
    /// `unchanged` (nothing sent; the previous frame stands).
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_frame_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<RegionImage>,
    /// With `marks`: each interactive element drawn on the frame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<Vec<Mark>>,
    /// Why marks are missing or may be off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks_note: Option<String>,
    pub cursor: Cursor,
    pub active_window: Option<Window>,
    /// The frame equals the bot's previous one: `image` is `null` and `note` says the previous
    /// screenshot remains valid.
    pub unchanged: bool,
    /// The PNG in base64; `null` when unchanged.
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A changed region of the frame: paste `image` (PNG, base64) at `x`, `y` (frame pixels).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RegionImage {
    pub x: u16,
    pub y: u16,
    pub width: u16,
    pub height: u16,
    pub image: String,
}

/// A mark: the element's ref (its label on the frame), role, name and box in frame pixels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Mark {
    #[serde(rename = "ref")]
    pub element: String,
    pub role: String,
    pub name: String,
    pub x: u16,
    pub y: u16,
    pub width: u16,
    pub height: u16,
}

/// A frame's size: the coordinate space of an act's pointer actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FrameSize {
    pub width: u16,
    pub height: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Cursor {
    pub x: i32,
    pub y: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Window {
    pub id: u32,
    pub title: String,
}

/// `POST …/screens/{bot}/act`: a batch of actions, validated whole before any runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ActRequest {
    pub lease: String,
    pub actions: Vec<Action>,
    /// Observe after the actions.
    #[serde(default)]
    pub observe: bool,
    /// A fixed settle time (0..5000) instead of waiting for the screen to go quiet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle_ms: Option<u32>,
    /// The pointer actions' coordinates are in a frame of this size (an observation scaled
    /// down); each maps to the centre of the screen pixels its frame pixel covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frame: Option<FrameSize>,
    /// How to take the observation after the actions (with `observe`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observe_options: Option<ObserveOptions>,
}

/// One desktop action (docs/screens.md#observe-and-act); a field left out takes its documented
/// default. Coordinates are any JSON number (rounded to a pixel).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum Action {
    /// At `x`, `y`, or at the centre of the element `ref` names (from marks or a page
    /// snapshot), its box read when the click runs.
    Click {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(value_type = Option<f64>)]
        x: Option<Number>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(value_type = Option<f64>)]
        y: Option<Number>,
        #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
        element: Option<String>,
        /// Default `left`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        button: Option<MouseButton>,
        /// Two clicks.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        double: Option<bool>,
    },
    Move {
        #[schema(value_type = f64)]
        x: Number,
        #[schema(value_type = f64)]
        y: Number,
    },
    Down {
        #[schema(value_type = f64)]
        x: Number,
        #[schema(value_type = f64)]
        y: Number,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        button: Option<MouseButton>,
    },
    Up {
        #[schema(value_type = f64)]
        x: Number,
        #[schema(value_type = f64)]
        y: Number,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        button: Option<MouseButton>,
    },
    Type {
        text: String,
    },
    Key {
        key: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        modifiers: Option<Vec<String>>,
    },
    Scroll {
        direction: ScrollDirection,
        /// 1..20, default 3.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        amount: Option<u8>,
    },
    Wait {
        /// 0..5000, default 350.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ms: Option<u32>,
    },
    /// Raise the application, or launch it if absent.
    Focus {
        application: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uri: Option<String>,
    },
    Launch {
        application: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uri: Option<String>,
    },
    /// Open a path or an http(s) URL: `target`, else `url`, else `path`.
    Open {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum MouseButton {
    Left,
    Right,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ScrollDirection {
    Up,
    Down,
}

/// computer_act's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActResult {
    pub ok: bool,
    /// Actions completed, after expansion (a double click is two).
    pub completed: u32,
    /// How long the guest waited for the screen to settle (or the fixed `settle_ms`).
    pub settled_ms: u32,
    /// Whether the screen had gone quiet when observed.
    pub settled: bool,
    /// With `observe`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation: Option<Observation>,
}

/// `POST …/screens/{bot}/url` and `…/terminals/{bot}/url`; the body may also be empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UrlRequest {
    /// `view` (default), `control` or `terminal` (the terminals route takes only `terminal`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Shorter than the 60-minute default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
}

/// A capability URL: the URL is the credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LiveUrl {
    /// Absolute when the request named its host, else the same as `path`.
    pub url: String,
    /// `/cap/<sealed>`.
    pub path: String,
    /// `view`, `control` or `terminal`.
    pub policy: String,
    pub expires_at_ms: i64,
}

/// `POST …/screens/{bot}/takeover` (body [`super::Empty`]): the user's control lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ControlTaken {
    pub computer: String,
    pub bot: String,
    pub control_lease: String,
    pub expires_at_ms: i64,
}

/// `POST …/screens/{bot}/release-control` (body [`super::Empty`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ControlReleased {
    pub released: bool,
    /// Whether a control lease was held.
    pub had_control: bool,
}

/// `POST …/leases/{bot}/waiting_takeover`: the run holding `lease` asks for (or no longer
/// needs) a person to take over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitingTakeoverRequest {
    pub lease: String,
    /// Default `true`.
    #[serde(default = "yes")]
    pub waiting: bool,
}

fn yes() -> bool {
    true
}

/// The answer to [`WaitingTakeoverRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WaitingTakeover {
    pub waiting_takeover: bool,
}
