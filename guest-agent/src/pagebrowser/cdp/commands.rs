//! The raw CDP commands and events the page browser uses, as our own small serde types: each
//! command's parameters, its method name and the fields of its result that are read, and the
//! events' payloads and names. A field Chrome adds or drops cannot break parsing.

use super::*;

/// A raw command: its parameters are the type itself, its method name and result type are
/// declared with it.
pub(super) trait Command: Serialize {
    const METHOD: &'static str;
    type Returns: DeserializeOwned;
}

/// Declares a raw command: its method name and the serde type of its result.
macro_rules! command {
    ($params:ty, $method:literal, $returns:ty) => {
        impl Command for $params {
            const METHOD: &'static str = $method;
            type Returns = $returns;
        }
    };
}

#[derive(Debug, Serialize)]
pub(super) struct GetTargets {
    pub(super) filter: [TargetFilter; 1],
}
/// Every page target (the default filter leaves out nothing we need, but say so).
#[derive(Debug, Serialize)]
pub(super) struct TargetFilter {
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
}
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct GetTargetsReturns {
    pub(super) target_infos: Vec<RawTarget>,
}
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RawTarget {
    pub(super) target_id: String,
    #[serde(rename = "type")]
    pub(super) kind: String,
    #[serde(default)]
    pub(super) url: String,
    #[serde(default)]
    pub(super) subtype: Option<String>,
}
command!(GetTargets, "Target.getTargets", GetTargetsReturns);

/// Page targets only, like [`GetTargets`]'s filter.
pub(super) const PAGES: [TargetFilter; 1] = [TargetFilter { kind: "page" }];

#[derive(Debug, Serialize)]
pub(super) struct SetDiscoverTargets {
    pub(super) discover: bool,
    pub(super) filter: [TargetFilter; 1],
}
command!(SetDiscoverTargets, "Target.setDiscoverTargets", Empty);

/// The discovery events [`TargetWatch`] follows (`Target.targetCrashed` is not one: a crashed
/// tab stays a target, as `Target.getTargets` lists it).
pub(super) const TARGET_EVENTS: &[&str] = &[
    "Target.targetCreated",
    "Target.targetInfoChanged",
    "Target.targetDestroyed",
];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TargetInfoEvent {
    pub(super) target_info: RawTarget,
}
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TargetDestroyedEvent {
    pub(super) target_id: String,
}

#[derive(Debug, Serialize)]
pub(super) struct GetFrameTree {}
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct GetFrameTreeReturns {
    pub(super) frame_tree: RawFrameTree,
}
#[derive(Debug, Deserialize)]
pub(super) struct RawFrameTree {
    pub(super) frame: RawFrame,
    #[serde(default, rename = "childFrames")]
    pub(super) child_frames: Vec<IgnoredAny>,
}
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RawFrame {
    pub(super) id: String,
    #[serde(default)]
    pub(super) loader_id: String,
}
command!(GetFrameTree, "Page.getFrameTree", GetFrameTreeReturns);

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CreateIsolatedWorld {
    pub(super) frame_id: String,
    pub(super) world_name: String,
    pub(super) grant_univeral_access: bool,
}
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CreateIsolatedWorldReturns {
    pub(super) execution_context_id: i64,
}
command!(
    CreateIsolatedWorld,
    "Page.createIsolatedWorld",
    CreateIsolatedWorldReturns
);

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Evaluate {
    pub(super) expression: &'static str,
    pub(super) context_id: i64,
    pub(super) return_by_value: bool,
    pub(super) silent: bool,
}
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct EvaluateReturns {
    pub(super) result: RawRemoteObject,
    #[serde(default)]
    pub(super) exception_details: Option<RawException>,
}
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RawRemoteObject {
    #[serde(default)]
    pub(super) object_id: Option<String>,
    #[serde(default)]
    pub(super) class_name: Option<String>,
}
#[derive(Debug, Deserialize)]
pub(super) struct RawException {
    #[serde(default)]
    pub(super) exception: Option<RawRemoteObject>,
}
command!(Evaluate, "Runtime.evaluate", EvaluateReturns);

/// `Runtime.callFunctionOn` on the helper object with one JSON argument, result by value.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CallFunctionOn<A, R> {
    pub(super) function_declaration: String,
    pub(super) object_id: String,
    pub(super) arguments: [CallArgument<A>; 1],
    pub(super) return_by_value: bool,
    pub(super) await_promise: bool,
    pub(super) silent: bool,
    #[serde(skip)]
    pub(super) returns: PhantomData<fn() -> R>,
}
#[derive(Serialize)]
pub(super) struct CallArgument<A> {
    pub(super) value: A,
}
/// The helper's result: a value of type `R`, or (after an exception) something else.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
#[serde(bound = "R: DeserializeOwned")]
pub struct CallReturns<R> {
    pub(super) result: CallValue<R>,
    #[serde(default)]
    pub(super) exception_details: Option<RawException>,
}
#[derive(Debug, Deserialize)]
#[serde(bound = "R: DeserializeOwned")]
pub(super) struct CallValue<R> {
    #[serde(default = "none")]
    pub(super) value: Option<Lenient<R>>,
}
fn none<T>() -> Option<T> {
    None
}
/// A value that is either the expected shape or anything else (an exception's value).
#[derive(Debug, Deserialize)]
#[serde(untagged, bound = "R: DeserializeOwned")]
pub(super) enum Lenient<R> {
    Expected(R),
    Other(IgnoredAny),
}
impl<A: Serialize, R: DeserializeOwned> Command for CallFunctionOn<A, R> {
    const METHOD: &'static str = "Runtime.callFunctionOn";
    type Returns = CallReturns<R>;
}

#[derive(Debug, Serialize)]
pub(super) struct Navigate<'a> {
    pub(super) url: &'a str,
}
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct NavigateReturns {
    #[serde(default)]
    pub(super) loader_id: Option<String>,
    #[serde(default)]
    pub(super) error_text: Option<String>,
    #[serde(default)]
    pub(super) is_download: Option<bool>,
}
command!(Navigate<'_>, "Page.navigate", NavigateReturns);

/// A result with nothing in it.
#[derive(Debug, Deserialize)]
pub struct Empty {}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct DispatchMouseEvent {
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
    pub(super) x: f64,
    pub(super) y: f64,
    pub(super) button: &'static str,
    pub(super) buttons: u8,
    pub(super) click_count: u8,
}
command!(DispatchMouseEvent, "Input.dispatchMouseEvent", Empty);

/// One `Input.dispatchKeyEvent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyEvent {
    /// `keyDown` (produces text), `rawKeyDown` (no text) or `keyUp`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub key: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub code: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub text: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub unmodified_text: String,
    pub windows_virtual_key_code: u32,
    pub native_virtual_key_code: u32,
    /// Alt=1, Ctrl=2, Meta=4, Shift=8.
    pub modifiers: u8,
}
command!(KeyEvent, "Input.dispatchKeyEvent", Empty);

#[derive(Serialize)]
pub(super) struct InsertText {
    pub(super) text: String,
}
// No Debug on InsertText: its text is whatever the agent typed.
impl Debug for InsertText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InsertText(***)")
    }
}
command!(InsertText, "Input.insertText", Empty);

/// `Page.enable`.
#[derive(Debug, Serialize)]
pub(super) struct PageEnable(pub(super) NoParams);
command!(PageEnable, "Page.enable", Empty);

pub(super) const NAVIGATION_EVENTS: &[&str] = &[
    "Page.frameRequestedNavigation",
    "Page.frameStartedLoading",
    "Page.frameNavigated",
    "Page.frameStoppedLoading",
];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct FrameEvent {
    #[serde(default)]
    pub(super) frame_id: Option<String>,
    #[serde(default)]
    pub(super) frame: Option<FrameOfEvent>,
}
#[derive(Debug, Deserialize)]
pub(super) struct FrameOfEvent {
    pub(super) id: String,
}
