//! The page browser's Chrome DevTools Protocol calls, on the bot's one CDP connection
//! ([`crate::browser::cdp::CdpClient`], which owns the transport).
//!
//! It owns the list of page targets ([`TargetWatch`]: kept current from Chrome's `Target.*`
//! discovery events, so finding the tabs costs no round trip), and per tab ([`Tab`], a flat
//! session) the handful of raw commands the page browser needs: the main frame,
//! `Page.createIsolatedWorld`, installing and calling the helper in that world
//! (`Runtime.evaluate` / `Runtime.callFunctionOn` by object id), `Page.navigate`, pointer and key
//! input, and navigation events. Commands are our own small
//! serde types, so a field Chrome adds or drops cannot break parsing: call arguments and results
//! are serde structs end to end. No domain is enabled on a tab except `Page` while an act
//! watches for navigations, so an idle tab reports nothing (no requests, no console messages).
//!
//! Every call is bounded by a timeout. It leaves to others: which tab to use, what the helper
//! does, and what errors mean to the agent ([`super`]).

use std::collections::HashMap;
use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::browser::cdp::{self as transport, CdpClient, CdpEvent, NoParams, SessionId};

mod commands;
pub use commands::KeyEvent;
use commands::{
    CallArgument, CallFunctionOn, Command, CreateIsolatedWorld, DispatchMouseEvent, Evaluate,
    FrameEvent, GetFrameTree, GetTargets, InsertText, Lenient, Navigate, PageEnable, RawException,
    RawTarget, SetDiscoverTargets, TargetDestroyedEvent, TargetInfoEvent, NAVIGATION_EVENTS, PAGES,
    TARGET_EVENTS,
};

/// The longest one command may take unless the caller gives its own bound.
pub const COMMAND_TIMEOUT: Duration = transport::COMMAND_TIMEOUT;

/// A CDP failure, classified by what the caller does about it.
#[derive(Debug, thiserror::Error)]
pub enum CdpError {
    /// The pipe is gone (the browser exited, crashed or was killed).
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
        source: serde_json::Error,
    },
}

impl From<transport::CdpError> for CdpError {
    fn from(error: transport::CdpError) -> Self {
        use transport::CdpError as E;
        match error {
            E::Closed => Self::Closed,
            E::Timeout { what, timeout } => Self::Timeout { what, timeout },
            E::Protocol { what, message, .. } => classify_protocol(what, message),
            E::Encode { what, source } | E::Decode { what, source } => Self::Other { what, source },
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

/// The page browser's view of one Chrome's CDP connection.
#[derive(Debug, Clone)]
pub struct Connection {
    client: CdpClient,
}

impl Connection {
    pub fn new(client: CdpClient) -> Self {
        Self { client }
    }

    /// Whether the connection has ended (the browser is gone).
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Whether this is the connection of the browser behind `client`.
    pub fn is(&self, client: &CdpClient) -> bool {
        self.client.same_connection(client)
    }

    async fn run<C: Command>(
        &self,
        session: Option<&SessionId>,
        command: &C,
        timeout: Duration,
    ) -> Result<C::Returns, CdpError> {
        Ok(self
            .client
            .call(C::METHOD, session, command, timeout)
            .await?)
    }

    /// Every page target the browser lists now (`Target.getTargets`, one round trip).
    async fn list_targets(&self) -> Result<HashMap<String, RawTarget>, CdpError> {
        let targets = self
            .run(None, &GetTargets { filter: PAGES }, COMMAND_TIMEOUT)
            .await?;
        Ok(targets
            .target_infos
            .into_iter()
            .map(|t| (t.target_id.clone(), t))
            .collect())
    }

    /// Starts following the browser's page targets: subscribes to the discovery events, turns
    /// discovery on and takes the current list as the starting point (two round trips, once per
    /// connection). Events that arrived before the list's answer are older than it and are
    /// dropped in its favour; later ones apply on top of it.
    pub async fn watch_targets(&self) -> Result<TargetWatch, CdpError> {
        let events = self.client.subscribe(None, TARGET_EVENTS);
        self.run(
            None,
            &SetDiscoverTargets {
                discover: true,
                filter: PAGES,
            },
            COMMAND_TIMEOUT,
        )
        .await?;
        let mut watch = TargetWatch {
            events,
            targets: HashMap::new(),
        };
        watch.resync(self).await?;
        Ok(watch)
    }

    /// A session on the tab `target_id` (flat, on the browser's one connection). It is
    /// detached when the last clone of the [`Tab`] is dropped.
    pub async fn tab(&self, target_id: &str) -> Result<Tab, CdpError> {
        let session = self.client.attach(target_id).await?;
        Ok(Tab {
            session: Arc::new(Session {
                conn: self.clone(),
                id: session,
            }),
        })
    }
}

/// The browser's page targets as its discovery events have reported them (see
/// [`Connection::watch_targets`]). Reading them is no round trip: the events queued so far are
/// applied first. A tab opened or closed a moment ago may not be reported yet; a caller whose
/// choice of tab failed can [`TargetWatch::resync`].
pub struct TargetWatch {
    events: mpsc::UnboundedReceiver<CdpEvent>,
    targets: HashMap<String, RawTarget>,
}

impl Debug for TargetWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TargetWatch")
            .field("targets", &self.targets.len())
            .finish_non_exhaustive()
    }
}

impl TargetWatch {
    /// The browser's tabs: page targets, without prerenders and DevTools windows, in no
    /// particular order. Fails with [`CdpError::Closed`] once the connection has ended.
    pub fn pages(&mut self) -> Result<Vec<PageTarget>, CdpError> {
        self.apply_events()?;
        Ok(self
            .targets
            .values()
            .filter(|t| t.kind == "page" && t.subtype.is_none())
            .filter(|t| !t.url.starts_with("devtools://"))
            .map(|t| PageTarget {
                id: t.target_id.clone(),
                url: t.url.clone(),
            })
            .collect())
    }

    /// Replaces what the events said with the browser's own list (`Target.getTargets`, one
    /// round trip), dropping the events that came before its answer.
    pub async fn resync(&mut self, conn: &Connection) -> Result<(), CdpError> {
        let listed = conn.list_targets().await?;
        // Every event sent before the answer is queued by now (one reader, in order).
        self.apply_events()?;
        self.targets = listed;
        Ok(())
    }

    /// Applies the events received so far, without waiting.
    fn apply_events(&mut self) -> Result<(), CdpError> {
        loop {
            match self.events.try_recv() {
                Ok(event) => self.apply(&event),
                Err(mpsc::error::TryRecvError::Empty) => return Ok(()),
                Err(mpsc::error::TryRecvError::Disconnected) => return Err(CdpError::Closed),
            }
        }
    }

    fn apply(&mut self, event: &CdpEvent) {
        match event.method.as_str() {
            "Target.targetCreated" | "Target.targetInfoChanged" => {
                match event.params::<TargetInfoEvent>() {
                    Ok(e) if e.target_info.kind == "page" => {
                        self.targets
                            .insert(e.target_info.target_id.clone(), e.target_info);
                    }
                    // A target that is no page (any more) is no tab.
                    Ok(e) => {
                        self.targets.remove(&e.target_info.target_id);
                    }
                    Err(error) => tracing::debug!(%error, "unreadable target event"),
                }
            }
            "Target.targetDestroyed" => match event.params::<TargetDestroyedEvent>() {
                Ok(e) => {
                    self.targets.remove(&e.target_id);
                }
                Err(error) => tracing::debug!(%error, "unreadable target event"),
            },
            _ => {}
        }
    }
}

/// One attached session; detached on drop.
#[derive(Debug)]
struct Session {
    conn: Connection,
    id: SessionId,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.conn.client.detach(&self.id);
    }
}

/// One tab, attached.
#[derive(Debug, Clone)]
pub struct Tab {
    session: Arc<Session>,
}

impl Tab {
    async fn run<C: Command>(
        &self,
        command: &C,
        timeout: Duration,
    ) -> Result<C::Returns, CdpError> {
        let s = &self.session;
        s.conn.run(Some(&s.id), command, timeout).await
    }

    /// The tab's main frame and current document loader.
    pub async fn main_frame(&self) -> Result<MainFrame, CdpError> {
        let tree = self
            .run(&GetFrameTree {}, COMMAND_TIMEOUT)
            .await?
            .frame_tree;
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
        let created = self
            .run(
                &CreateIsolatedWorld {
                    frame_id: frame_id.to_owned(),
                    world_name: world_name.to_owned(),
                    grant_univeral_access: false,
                },
                COMMAND_TIMEOUT,
            )
            .await?;
        Ok(created.execution_context_id)
    }

    /// Evaluates `source` in context `context_id` and returns the object id of its value.
    pub async fn install(&self, context_id: i64, source: &'static str) -> Result<String, CdpError> {
        let evaluated = self
            .run(
                &Evaluate {
                    expression: source,
                    context_id,
                    return_by_value: false,
                    silent: true,
                },
                COMMAND_TIMEOUT,
            )
            .await?;
        if let Some(details) = evaluated.exception_details {
            return Err(script_error(details));
        }
        evaluated.result.object_id.ok_or(CdpError::Protocol {
            what: "Runtime.evaluate",
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
        let returned = self
            .run(
                &CallFunctionOn::<A, R> {
                    function_declaration: function.to_owned(),
                    object_id: helper.to_owned(),
                    arguments: [CallArgument { value: arg }],
                    return_by_value: true,
                    await_promise: true,
                    silent: true,
                    returns: PhantomData,
                },
                timeout,
            )
            .await?;
        if let Some(details) = returned.exception_details {
            return Err(script_error(details));
        }
        match returned.result.value {
            Some(Lenient::Expected(value)) => Ok(value),
            _ => Err(CdpError::Protocol {
                what: "Runtime.callFunctionOn",
                message: "the helper returned an unexpected value".to_owned(),
            }),
        }
    }

    /// `Page.navigate`: answers once the navigation committed (a new document), finished (a
    /// same-document one) or failed, bounded by `timeout`.
    pub async fn navigate(&self, url: &str, timeout: Duration) -> Result<Navigation, CdpError> {
        let answer = self.run(&Navigate { url }, timeout).await?;
        Ok(Navigation {
            loader_id: answer.loader_id,
            error_text: answer.error_text,
            is_download: answer.is_download.unwrap_or(false),
        })
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
            self.run(&event, COMMAND_TIMEOUT).await?;
        }
        Ok(())
    }

    /// One key event.
    pub async fn key(&self, event: KeyEvent) -> Result<(), CdpError> {
        self.run(&event, COMMAND_TIMEOUT).await?;
        Ok(())
    }

    /// `Input.insertText`: commits `text` into the focused field as one edit.
    pub async fn insert_text(&self, text: &str) -> Result<(), CdpError> {
        let insert = InsertText {
            text: text.to_owned(),
        };
        self.run(&insert, COMMAND_TIMEOUT).await?;
        Ok(())
    }

    /// Starts listening for navigations of this tab's frames (subscribes, then enables the
    /// `Page` domain, which is what makes Chrome send them).
    pub async fn watch_navigation(&self) -> Result<NavigationWatch, CdpError> {
        let s = &self.session;
        let events = s.conn.client.subscribe(Some(&s.id), NAVIGATION_EVENTS);
        self.run(&PageEnable(NoParams {}), COMMAND_TIMEOUT).await?;
        Ok(NavigationWatch { events })
    }
}

/// Navigation events of one tab since [`Tab::watch_navigation`].
pub struct NavigationWatch {
    events: mpsc::UnboundedReceiver<CdpEvent>,
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
        while let Ok(event) = self.events.try_recv() {
            let Ok(e) = event.params::<FrameEvent>() else {
                continue;
            };
            let id = e.frame.map(|f| f.id).or(e.frame_id);
            if id.as_deref() != Some(frame_id) {
                continue;
            }
            match event.method.as_str() {
                "Page.frameRequestedNavigation" | "Page.frameStartedLoading" => {
                    into.started = true;
                }
                "Page.frameNavigated" => into.committed = true,
                "Page.frameStoppedLoading" => into.stopped = true,
                _ => {}
            }
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

    fn event(method: &str, params: serde_json::Value) -> CdpEvent {
        CdpEvent {
            method: method.to_owned(),
            params: serde_json::value::to_raw_value(&params).unwrap(),
        }
    }

    fn info(id: &str, kind: &str, url: &str) -> serde_json::Value {
        serde_json::json!({ "targetInfo": {
            "targetId": id, "type": kind, "url": url, "title": "t", "attached": false,
            "canAccessOpener": false, "browserContextId": "B"
        } })
    }

    fn ids(watch: &mut TargetWatch) -> Vec<String> {
        let mut ids: Vec<String> = watch.pages().unwrap().into_iter().map(|t| t.id).collect();
        ids.sort();
        ids
    }

    #[test]
    fn target_events_keep_the_tab_list() {
        let (tx, events) = mpsc::unbounded_channel();
        let mut watch = TargetWatch {
            events,
            targets: HashMap::new(),
        };
        let send = |method: &str, params| tx.send(event(method, params)).unwrap();
        send("Target.targetCreated", info("A", "page", "http://a/"));
        send(
            "Target.targetCreated",
            info("W", "service_worker", "http://a/sw.js"),
        );
        send(
            "Target.targetCreated",
            info("D", "page", "devtools://devtools/x"),
        );
        assert_eq!(ids(&mut watch), ["A"], "workers and devtools are no tabs");
        send("Target.targetCreated", info("B", "page", "http://b/"));
        // A prerender is no tab until it is activated (its info changes to a plain page).
        let mut prerender = info("P", "page", "http://p/");
        prerender["targetInfo"]["subtype"] = "prerender".into();
        send("Target.targetCreated", prerender);
        assert_eq!(ids(&mut watch), ["A", "B"]);
        send("Target.targetInfoChanged", info("P", "page", "http://p/"));
        send(
            "Target.targetDestroyed",
            serde_json::json!({ "targetId": "A" }),
        );
        send(
            "Target.targetDestroyed",
            serde_json::json!({ "targetId": "unknown" }),
        );
        send(
            "Target.targetCreated",
            serde_json::json!({ "garbage": true }),
        );
        assert_eq!(ids(&mut watch), ["B", "P"]);
        // Its info changing to another type takes it out.
        send("Target.targetInfoChanged", info("B", "other", "http://b/"));
        assert_eq!(ids(&mut watch), ["P"]);
        // The connection closed: the list is no longer known.
        drop(tx);
        assert!(matches!(watch.pages(), Err(CdpError::Closed)));
    }
}
