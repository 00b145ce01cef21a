//! The page browser's Chrome DevTools Protocol client: the only file of [`super`] that names
//! `chromiumoxide`, so the client library could be replaced here alone.
//!
//! It owns one websocket connection to a browser endpoint ([`Connection`]), the list of page
//! targets, and per tab ([`Tab`]) the handful of raw commands the page browser needs: the main
//! frame, `Page.createIsolatedWorld`, installing and calling the helper in that world
//! (`Runtime.evaluate` / `Runtime.callFunctionOn` by object id), `Page.navigate`, pointer and key
//! input, and navigation events. Commands are our own small serde types rather than the
//! generated ones, so a field Chrome adds or drops cannot break parsing, and so no JSON value
//! type is needed: call arguments and results are serde structs end to end.
//!
//! Every call is bounded by a timeout. It leaves to others: which tab to use, what the helper
//! does, and what errors mean to the agent ([`super`]).

use std::error::Error as StdError;
use std::fmt::Debug;
use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::page::{
    EventFrameNavigated, EventFrameRequestedNavigation, EventFrameStartedLoading,
    EventFrameStoppedLoading,
};
use chromiumoxide::cdp::browser_protocol::target::TargetId;
use chromiumoxide::handler::HandlerConfig;
use chromiumoxide::listeners::EventStream;
use chromiumoxide::types::{Command, Method, MethodId};
use futures_util::{FutureExt as _, StreamExt as _};
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

/// The longest one command may take unless the caller gives its own bound.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a just-discovered target may take until the client has attached to it.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(2);

type BoxError = Box<dyn StdError + Send + Sync>;

/// A CDP failure, classified by what the caller does about it.
#[derive(Debug, thiserror::Error)]
pub enum CdpError {
    #[error("cannot connect to the browser's devtools at {url}")]
    Connect {
        url: String,
        #[source]
        source: BoxError,
    },
    /// The websocket is gone (the browser exited or closed the connection).
    #[error("the devtools connection to the browser is closed")]
    Closed,
    /// The execution context or object named by the call no longer exists: the document was
    /// replaced, so the call never ran.
    #[error("the page's execution context is gone")]
    WorldGone,
    /// The context went away while the call was running (a navigation or a crash).
    #[error("the page navigated or closed while the call ran")]
    Interrupted,
    /// Chrome answered with a protocol error.
    #[error("cdp {what} failed: {message}")]
    Protocol { what: &'static str, message: String },
    /// The helper threw. Only the exception's class is kept: a message could quote page data.
    #[error("the page helper threw {class}")]
    Script { class: String },
    #[error("cdp {what} took longer than {timeout:?}")]
    Timeout {
        what: &'static str,
        timeout: Duration,
    },
    #[error("cdp {what} failed")]
    Other {
        what: &'static str,
        #[source]
        source: BoxError,
    },
}

impl CdpError {
    fn from_client(what: &'static str, error: chromiumoxide::error::CdpError) -> Self {
        use chromiumoxide::error::CdpError as E;
        match error {
            E::Chrome(e) => classify_protocol(what, e.message),
            E::ChromeMessage(message) => classify_protocol(what, message),
            E::Ws(_) | E::Io(_) | E::ChannelSendError(_) | E::NoResponse => Self::Closed,
            E::Timeout => Self::Timeout {
                what,
                timeout: COMMAND_TIMEOUT,
            },
            other => Self::Other {
                what,
                source: Box::new(other),
            },
        }
    }
}

/// Sorts Chrome's error texts for a gone context: "never ran" versus "interrupted".
fn classify_protocol(what: &'static str, message: String) -> CdpError {
    let m = message.to_ascii_lowercase();
    if m.contains("cannot find context")
        || m.contains("could not find object")
        || m.contains("no frame for given id")
        || m.contains("cannot find default execution context")
    {
        CdpError::WorldGone
    } else if m.contains("execution context was destroyed")
        || m.contains("inspected target navigated or closed")
        || m.contains("target closed")
    {
        CdpError::Interrupted
    } else {
        CdpError::Protocol { what, message }
    }
}

/// Runs a client call under `timeout`.
async fn bounded<T>(
    what: &'static str,
    timeout: Duration,
    call: impl Future<Output = Result<T, chromiumoxide::error::CdpError>>,
) -> Result<T, CdpError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(CdpError::from_client(what, error)),
        Err(_elapsed) => Err(CdpError::Timeout { what, timeout }),
    }
}

/// Declares a raw command: its method name and the serde type of its result.
macro_rules! command {
    ($params:ty, $method:literal, $returns:ty) => {
        impl Method for $params {
            fn identifier(&self) -> MethodId {
                $method.into()
            }
        }
        impl Command for $params {
            type Response = $returns;
        }
    };
}

#[derive(Debug, Serialize)]
struct GetTargets {}
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GetTargetsReturns {
    target_infos: Vec<RawTarget>,
}
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawTarget {
    target_id: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    url: String,
    #[serde(default)]
    subtype: Option<String>,
}
command!(GetTargets, "Target.getTargets", GetTargetsReturns);

#[derive(Debug, Serialize)]
struct GetFrameTree {}
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GetFrameTreeReturns {
    frame_tree: RawFrameTree,
}
#[derive(Debug, Deserialize)]
struct RawFrameTree {
    frame: RawFrame,
    #[serde(default, rename = "childFrames")]
    child_frames: Vec<IgnoredAny>,
}
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawFrame {
    id: String,
    #[serde(default)]
    loader_id: String,
}
command!(GetFrameTree, "Page.getFrameTree", GetFrameTreeReturns);

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CreateIsolatedWorld {
    frame_id: String,
    world_name: String,
    grant_univeral_access: bool,
}
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateIsolatedWorldReturns {
    execution_context_id: i64,
}
command!(
    CreateIsolatedWorld,
    "Page.createIsolatedWorld",
    CreateIsolatedWorldReturns
);

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Evaluate {
    expression: &'static str,
    context_id: i64,
    return_by_value: bool,
    silent: bool,
}
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EvaluateReturns {
    result: RawRemoteObject,
    #[serde(default)]
    exception_details: Option<RawException>,
}
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRemoteObject {
    #[serde(default)]
    object_id: Option<String>,
    #[serde(default)]
    class_name: Option<String>,
}
#[derive(Debug, Deserialize)]
struct RawException {
    #[serde(default)]
    exception: Option<RawRemoteObject>,
}
command!(Evaluate, "Runtime.evaluate", EvaluateReturns);

/// `Runtime.callFunctionOn` on the helper object with one JSON argument, result by value.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CallFunctionOn<A, R> {
    function_declaration: String,
    object_id: String,
    arguments: [CallArgument<A>; 1],
    return_by_value: bool,
    await_promise: bool,
    silent: bool,
    #[serde(skip)]
    returns: PhantomData<fn() -> R>,
}
#[derive(Serialize)]
struct CallArgument<A> {
    value: A,
}
/// The helper's result: a value of type `R`, or (after an exception) something else.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
#[serde(bound = "R: DeserializeOwned")]
pub struct CallReturns<R> {
    result: CallValue<R>,
    #[serde(default)]
    exception_details: Option<RawException>,
}
#[derive(Debug, Deserialize)]
#[serde(bound = "R: DeserializeOwned")]
struct CallValue<R> {
    #[serde(default = "none")]
    value: Option<Lenient<R>>,
}
fn none<T>() -> Option<T> {
    None
}
/// A value that is either the expected shape or anything else (an exception's value).
#[derive(Debug, Deserialize)]
#[serde(untagged, bound = "R: DeserializeOwned")]
enum Lenient<R> {
    Expected(R),
    Other(IgnoredAny),
}
impl<A: Serialize, R> Method for CallFunctionOn<A, R> {
    fn identifier(&self) -> MethodId {
        "Runtime.callFunctionOn".into()
    }
}
impl<A: Serialize, R: DeserializeOwned + Debug> Command for CallFunctionOn<A, R> {
    type Response = CallReturns<R>;
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NavigateReturns {
    #[serde(default)]
    loader_id: Option<String>,
    #[serde(default)]
    error_text: Option<String>,
    #[serde(default)]
    is_download: Option<bool>,
}

/// `<Domain>.disable`.
#[derive(Debug, Serialize)]
struct Disable {
    #[serde(skip)]
    method: &'static str,
}
impl Method for Disable {
    fn identifier(&self) -> MethodId {
        self.method.into()
    }
}
impl Command for Disable {
    type Response = Empty;
}

/// A result with nothing in it.
#[derive(Debug, Deserialize)]
pub struct Empty {}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct DispatchMouseEvent {
    #[serde(rename = "type")]
    kind: &'static str,
    x: f64,
    y: f64,
    button: &'static str,
    buttons: u8,
    click_count: u8,
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
struct InsertText {
    text: String,
}
// No Debug on InsertText: its text is whatever the agent typed.
impl Debug for InsertText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InsertText(***)")
    }
}
command!(InsertText, "Input.insertText", Empty);

/// A page target (a tab) as the browser lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageTarget {
    pub id: String,
    pub url: String,
}

/// The main frame of a tab: its id and the loader of its current document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MainFrame {
    pub id: String,
    pub loader_id: String,
    /// How many frames the tab has besides the main frame.
    pub child_frames: usize,
}

/// What `Page.navigate` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Navigation {
    /// The new document's loader; `None` for a same-document navigation.
    pub loader_id: Option<String>,
    /// Chrome's error (`net::ERR_CONNECTION_REFUSED`) when the navigation failed.
    pub error_text: Option<String>,
    pub is_download: bool,
}

/// One websocket connection to a Chrome browser endpoint. Dropping it closes the connection;
/// Chrome keeps running.
#[derive(Debug)]
pub struct Connection {
    browser: chromiumoxide::Browser,
    handler: JoinHandle<()>,
}

impl Connection {
    /// Connects to `ws://127.0.0.1:<port>/devtools/browser/<id>`.
    pub async fn connect(ws_url: &str) -> Result<Self, CdpError> {
        let config = HandlerConfig {
            // Never change what a page looks like or accepts just because we connected.
            viewport: None,
            ignore_https_errors: false,
            // The client closes a tab whose attach sequence outlives this; our own calls carry
            // their own, shorter bounds, so make it long enough never to close a slow tab.
            request_timeout: Duration::from_secs(600),
            ..HandlerConfig::default()
        };
        let connect = chromiumoxide::Browser::connect_with_config(ws_url, config);
        let (browser, mut handler) = match tokio::time::timeout(COMMAND_TIMEOUT, connect).await {
            Ok(Ok(pair)) => pair,
            Ok(Err(source)) => {
                return Err(CdpError::Connect {
                    url: ws_url.to_owned(),
                    source: Box::new(source),
                })
            }
            Err(_elapsed) => {
                return Err(CdpError::Timeout {
                    what: "connect",
                    timeout: COMMAND_TIMEOUT,
                })
            }
        };
        // The handler drives the websocket; it ends when Chrome closes the connection.
        let handler = tokio::spawn(async move {
            while let Some(event) = handler.next().await {
                if let Err(error) = event {
                    tracing::debug!(%error, "page browser cdp connection ended");
                    break;
                }
            }
        });
        Ok(Self { browser, handler })
    }

    /// Whether the connection has ended.
    pub fn is_closed(&self) -> bool {
        self.handler.is_finished()
    }

    /// The browser's tabs: page targets, without prerenders and DevTools windows.
    pub async fn page_targets(&self) -> Result<Vec<PageTarget>, CdpError> {
        let targets = bounded(
            "Target.getTargets",
            COMMAND_TIMEOUT,
            self.browser.execute(GetTargets {}),
        )
        .await?;
        Ok(targets
            .result
            .target_infos
            .into_iter()
            .filter(|t| t.kind == "page" && t.subtype.is_none())
            .filter(|t| !t.url.starts_with("devtools://"))
            .map(|t| PageTarget {
                id: t.target_id,
                url: t.url,
            })
            .collect())
    }

    /// The tab `target_id`, once the client has attached to it (a tab opened a moment ago may
    /// need a few milliseconds).
    pub async fn tab(&self, target_id: &str) -> Result<Tab, CdpError> {
        let deadline = tokio::time::Instant::now() + ATTACH_TIMEOUT;
        loop {
            let id = TargetId::new(target_id.to_owned());
            match bounded("attach", COMMAND_TIMEOUT, self.browser.get_page(id)).await {
                Ok(page) => {
                    let tab = Tab { page };
                    tab.quiet().await;
                    return Ok(tab);
                }
                Err(CdpError::Other { .. }) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(CdpError::Other { source, .. }) => {
                    return Err(CdpError::Other {
                        what: "attach",
                        source,
                    })
                }
                Err(other) => return Err(other),
            }
        }
    }
}

/// `Page.navigate` of tab `target_id` of the browser at `ws_url`, over a connection of its own
/// (see [`RawSession`]); answers once the navigation committed (a new document), finished (a
/// same-document one) or failed, bounded by `timeout`.
pub async fn navigate(
    ws_url: &str,
    target_id: &str,
    url: &str,
    timeout: Duration,
) -> Result<Navigation, CdpError> {
    let navigate = async {
        let mut raw = RawSession::attach(ws_url, target_id).await?;
        let answer: NavigateReturns = raw
            .call("Page.navigate", &[("url", Field::Str(url))])
            .await?;
        Ok(Navigation {
            loader_id: answer.loader_id,
            error_text: answer.error_text,
            is_download: answer.is_download.unwrap_or(false),
        })
    };
    match tokio::time::timeout(timeout, navigate).await {
        Ok(result) => result,
        Err(_elapsed) => Err(CdpError::Timeout {
            what: "Page.navigate",
            timeout,
        }),
    }
}

/// A session on one tab over a websocket of its own, driven by hand.
///
/// The client library answers a `Page.navigate` sent through its page handle only once the
/// page's load event fired (and never for a same-document navigation), while the contract
/// wants the commit, then "interactive". So navigation goes through the library's bare
/// connection type instead: attach to the target (flat session), send `Page.navigate`, read
/// its answer, drop the connection.
struct RawSession {
    conn: chromiumoxide::conn::Connection<chromiumoxide::types::CdpJsonEventMessage>,
    session: Option<chromiumoxide::cdp::browser_protocol::target::SessionId>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AttachToTargetReturns {
    session_id: String,
}

impl RawSession {
    async fn attach(ws_url: &str, target_id: &str) -> Result<Self, CdpError> {
        let conn = chromiumoxide::conn::Connection::connect(ws_url)
            .await
            .map_err(|e| CdpError::from_client("connect", e))?;
        let mut raw = Self {
            conn,
            session: None,
        };
        let attached: AttachToTargetReturns = raw
            .call(
                "Target.attachToTarget",
                &[
                    ("targetId", Field::Str(target_id)),
                    ("flatten", Field::Bool(true)),
                ],
            )
            .await?;
        raw.session = Some(attached.session_id.into());
        Ok(raw)
    }

    /// Sends `method` with `params` (in the session once attached) and decodes the answer.
    async fn call<R: DeserializeOwned>(
        &mut self,
        method: &'static str,
        params: &[(&'static str, Field<'_>)],
    ) -> Result<R, CdpError> {
        let what = method;
        let params = json_object(params).map_err(|e| CdpError::Other {
            what,
            source: Box::new(e),
        })?;
        let id = self
            .conn
            .submit_command(method.into(), self.session.clone(), params)
            .map_err(|e| CdpError::Other {
                what,
                source: Box::new(e),
            })?;
        loop {
            match self.conn.next().await {
                None => return Err(CdpError::Closed),
                Some(Err(e)) => return Err(CdpError::from_client(what, e)),
                Some(Ok(chromiumoxide::types::Message::Response(r))) if r.id == id => {
                    if let Some(error) = r.error {
                        return Err(classify_protocol(what, error.message));
                    }
                    let value = r.result.unwrap_or_default();
                    return R::deserialize(value).map_err(|e| CdpError::Other {
                        what,
                        source: Box::new(e),
                    });
                }
                // Events, and answers to nothing we wait for.
                Some(Ok(_)) => {}
            }
        }
    }
}

/// A field of the JSON object [`json_object`] builds.
#[derive(Debug, Clone, Copy)]
enum Field<'a> {
    Str(&'a str),
    Bool(bool),
}

/// Builds a JSON object as the client library's JSON value type (its bare connection takes
/// params as that type) through serde's value deserializers, so this crate needs no JSON
/// library of its own: the type is whatever `V` the caller needs.
fn json_object<V: serde::de::DeserializeOwned>(
    fields: &[(&'static str, Field<'_>)],
) -> Result<V, serde::de::value::Error> {
    use serde::de::value::MapDeserializer;
    let entries = fields.iter().map(|&(k, v)| (k, v));
    V::deserialize(MapDeserializer::<_, serde::de::value::Error>::new(entries))
}

impl<'de, E: serde::de::Error> serde::de::IntoDeserializer<'de, E> for Field<'_> {
    type Deserializer = FieldDeserializer<'de, E>;

    fn into_deserializer(self) -> Self::Deserializer {
        let value = match self {
            Field::Str(s) => FieldValue::Str(s.to_owned()),
            Field::Bool(b) => FieldValue::Bool(b),
        };
        FieldDeserializer {
            value,
            marker: PhantomData,
        }
    }
}

enum FieldValue {
    Str(String),
    Bool(bool),
}

/// Deserializes one [`Field`]: a string or a bool, whatever is asked for.
struct FieldDeserializer<'de, E> {
    value: FieldValue,
    marker: PhantomData<(&'de (), E)>,
}

impl<'de, E: serde::de::Error> serde::de::Deserializer<'de> for FieldDeserializer<'de, E> {
    type Error = E;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, E> {
        match self.value {
            FieldValue::Str(s) => visitor.visit_string(s),
            FieldValue::Bool(b) => visitor.visit_bool(b),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.handler.abort();
    }
}

/// One tab, attached.
#[derive(Debug, Clone)]
pub struct Tab {
    page: chromiumoxide::Page,
}

impl Tab {
    /// Turns off the domains the client enables on every tab it attaches to but the page
    /// browser never uses, so an idle cached connection does not make the bot's browser report
    /// every request (Network) or console message (Runtime, Log), and a page cannot make this
    /// process parse arbitrarily large console messages. Calls into a world by id or object
    /// do not need the Runtime domain enabled. Best effort.
    async fn quiet(&self) {
        let domains = [
            "Network.disable",
            "Runtime.disable",
            "Log.disable",
            "Performance.disable",
        ];
        for method in domains {
            let call = self.page.execute(Disable { method });
            if let Err(error) = bounded("disable", COMMAND_TIMEOUT, call).await {
                tracing::debug!(%error, method, "cannot disable a cdp domain");
            }
        }
    }

    /// The tab's main frame and current document loader.
    pub async fn main_frame(&self) -> Result<MainFrame, CdpError> {
        let tree = bounded(
            "Page.getFrameTree",
            COMMAND_TIMEOUT,
            self.page.execute(GetFrameTree {}),
        )
        .await?;
        let tree = tree.result.frame_tree;
        Ok(MainFrame {
            id: tree.frame.id,
            loader_id: tree.frame.loader_id,
            child_frames: tree.child_frames.len(),
        })
    }

    /// `Page.createIsolatedWorld` in `frame_id` under `world_name`, without universal access;
    /// returns the new context's id. The caller uses that id once, right away, to install the
    /// helper; contexts are never looked up by name.
    pub async fn create_world(&self, frame_id: &str, world_name: &str) -> Result<i64, CdpError> {
        let created = bounded(
            "Page.createIsolatedWorld",
            COMMAND_TIMEOUT,
            self.page.execute(CreateIsolatedWorld {
                frame_id: frame_id.to_owned(),
                world_name: world_name.to_owned(),
                grant_univeral_access: false,
            }),
        )
        .await?;
        Ok(created.result.execution_context_id)
    }

    /// Evaluates `source` in context `context_id` and returns the object id of its value.
    pub async fn install(&self, context_id: i64, source: &'static str) -> Result<String, CdpError> {
        let what = "Runtime.evaluate";
        let evaluated = bounded(
            what,
            COMMAND_TIMEOUT,
            self.page.execute(Evaluate {
                expression: source,
                context_id,
                return_by_value: false,
                silent: true,
            }),
        )
        .await?
        .result;
        if let Some(details) = evaluated.exception_details {
            return Err(script_error(details));
        }
        evaluated.result.object_id.ok_or(CdpError::Protocol {
            what,
            message: "the helper evaluated to no object".to_owned(),
        })
    }

    /// Calls `function` (`function(a) { ... }`, with `this` = the helper) with one argument and
    /// returns its (awaited) result by value.
    pub async fn call<A, R>(
        &self,
        helper: &str,
        function: &str,
        arg: A,
        timeout: Duration,
    ) -> Result<R, CdpError>
    where
        A: Serialize + Send + 'static,
        R: DeserializeOwned + Debug + Send + 'static,
    {
        let what = "Runtime.callFunctionOn";
        let returned = bounded(
            what,
            timeout,
            self.page.execute(CallFunctionOn::<A, R> {
                function_declaration: function.to_owned(),
                object_id: helper.to_owned(),
                arguments: [CallArgument { value: arg }],
                return_by_value: true,
                await_promise: true,
                silent: true,
                returns: PhantomData,
            }),
        )
        .await?
        .result;
        if let Some(details) = returned.exception_details {
            return Err(script_error(details));
        }
        match returned.result.value {
            Some(Lenient::Expected(value)) => Ok(value),
            _ => Err(CdpError::Protocol {
                what,
                message: "the helper returned an unexpected value".to_owned(),
            }),
        }
    }

    /// The tab's target id.
    pub fn target_id(&self) -> &str {
        self.page.target_id().inner()
    }

    /// A real left click at a viewport point: move, press, release (click count 1).
    pub async fn click(&self, x: f64, y: f64) -> Result<(), CdpError> {
        for (kind, buttons, button) in [
            ("mouseMoved", 0, "none"),
            ("mousePressed", 1, "left"),
            ("mouseReleased", 0, "left"),
        ] {
            let event = DispatchMouseEvent {
                kind,
                x,
                y,
                button,
                buttons,
                click_count: if kind == "mouseMoved" { 0 } else { 1 },
            };
            bounded(
                "Input.dispatchMouseEvent",
                COMMAND_TIMEOUT,
                self.page.execute(event),
            )
            .await?;
        }
        Ok(())
    }

    /// One key event.
    pub async fn key(&self, event: KeyEvent) -> Result<(), CdpError> {
        bounded(
            "Input.dispatchKeyEvent",
            COMMAND_TIMEOUT,
            self.page.execute(event),
        )
        .await?;
        Ok(())
    }

    /// `Input.insertText`: commits `text` into the focused field as one edit.
    pub async fn insert_text(&self, text: &str) -> Result<(), CdpError> {
        bounded(
            "Input.insertText",
            COMMAND_TIMEOUT,
            self.page.execute(InsertText {
                text: text.to_owned(),
            }),
        )
        .await?;
        Ok(())
    }

    /// Starts listening for navigations of this tab's frames.
    pub async fn watch_navigation(&self) -> Result<NavigationWatch, CdpError> {
        let what = "listen";
        let listen = async {
            Ok::<_, chromiumoxide::error::CdpError>(NavigationWatch {
                requested: self
                    .page
                    .event_listener::<EventFrameRequestedNavigation>()
                    .await?,
                started: self
                    .page
                    .event_listener::<EventFrameStartedLoading>()
                    .await?,
                navigated: self.page.event_listener::<EventFrameNavigated>().await?,
                stopped: self
                    .page
                    .event_listener::<EventFrameStoppedLoading>()
                    .await?,
            })
        };
        bounded(what, COMMAND_TIMEOUT, listen).await
    }
}

/// Navigation events of one tab since [`Tab::watch_navigation`].
pub struct NavigationWatch {
    requested: EventStream<EventFrameRequestedNavigation>,
    started: EventStream<EventFrameStartedLoading>,
    navigated: EventStream<EventFrameNavigated>,
    stopped: EventStream<EventFrameStoppedLoading>,
}

impl Debug for NavigationWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NavigationWatch")
    }
}

/// What happened to a frame since the watch began.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameActivity {
    /// A navigation was requested or began loading.
    pub started: bool,
    /// A new document committed.
    pub committed: bool,
    /// Loading stopped (finished, failed, or turned into a download).
    pub stopped: bool,
}

impl NavigationWatch {
    /// Drains the events seen so far for frame `frame_id` into `into`, without waiting.
    pub fn drain(&mut self, frame_id: &str, into: &mut FrameActivity) {
        while let Some(Some(e)) = self.requested.next().now_or_never() {
            into.started |= e.frame_id.inner() == frame_id;
        }
        while let Some(Some(e)) = self.started.next().now_or_never() {
            into.started |= e.frame_id.inner() == frame_id;
        }
        while let Some(Some(e)) = self.navigated.next().now_or_never() {
            into.committed |= e.frame.id.inner() == frame_id;
        }
        while let Some(Some(e)) = self.stopped.next().now_or_never() {
            into.stopped |= e.frame_id.inner() == frame_id;
        }
    }
}

fn script_error(details: RawException) -> CdpError {
    let class = details
        .exception
        .and_then(|e| e.class_name)
        .filter(|c| c.len() <= 64 && c.bytes().all(|b| b.is_ascii_alphanumeric()))
        .unwrap_or_else(|| "a value".to_owned());
    CdpError::Script { class }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gone_contexts_are_told_apart_from_interruptions() {
        let gone = classify_protocol("x", "Cannot find context with specified id".into());
        assert!(matches!(gone, CdpError::WorldGone));
        let gone = classify_protocol("x", "Could not find object with given id".into());
        assert!(matches!(gone, CdpError::WorldGone));
        let cut = classify_protocol("x", "Execution context was destroyed.".into());
        assert!(matches!(cut, CdpError::Interrupted));
        let other = classify_protocol("x", "Invalid parameters".into());
        assert!(matches!(other, CdpError::Protocol { .. }));
    }
}
