//! The page browser (contracts.md §5): browser_navigate, browser_snapshot and browser_act on a
//! bot's own Chrome, over CDP.
//!
//! [`PageBrowser`] is one bot's state across calls: the bot's browser's CDP connection (a
//! [`CdpClient`] handle; a different one means a restarted browser), per tab the isolated world the runtime created and the handle of
//! the helper installed in it, the ref counter, and the refs of fields filled from saved logins.
//! The caller (the desktops layer) owns one per bot, serializes calls on it, checks leases and
//! fences first, and resets the desktop refusal streak after a successful navigate or act.
//!
//! Design, in short:
//!
//! - **Tab.** Among the browser's page targets (no prerenders, no DevTools windows) the helper
//!   reports `document.visibilityState` and `document.hasFocus()` from each tab's isolated world.
//!   The single focused visible tab wins, else the single visible tab, else the call fails with
//!   [`NO_TAB`] as [`ErrorCode::Failed`] (the request is well-formed; the screen is ambiguous).
//!   A tab that does not answer within [`PROBE_TIMEOUT`] (a busy or hung page) counts as
//!   unknown: it is chosen only when no tab is visible and it is the only unknown one, so the
//!   agent can still navigate away from a hung page. A snapshot with a single tab skips the
//!   probe and gets the visibility back with the snapshot itself.
//! - **Isolated world.** All page code runs in a world created with `Page.createIsolatedWorld`
//!   under a fresh random name; the helper (`page.js`) is evaluated once in the returned context
//!   id and afterwards called by object id (`Runtime.callFunctionOn`), so no context is ever
//!   looked up by name and a page-owned context of the same name could never be used. The world
//!   lives as long as its document: when a call finds its object gone (a navigation), the world
//!   is created again for the new document (a snapshot retries once; an act step reports a stale
//!   ref, since refs belong to the old document). Re-using the world is what keeps refs stable;
//!   creating it costs one getFrameTree, one createIsolatedWorld and one evaluate.
//! - **Refs.** The helper maps elements to refs in a `WeakMap` and refs to elements through
//!   `WeakRef`s, inside the world, where the page cannot read or forge them. New refs are minted
//!   from a counter this struct owns and passes in, so `e<N>` is never reused while this
//!   [`PageBrowser`] lives, across tabs, documents and browser restarts. A ref resolves only to
//!   its own element, and only while that element is connected, visible and in the same
//!   document; otherwise [`STALE_REF`], and nothing similar is ever retargeted.
//! - **Visible** means rendered (not `display:none`, not `visibility:hidden`, not under
//!   `content-visibility:hidden`), at least 2x2 CSS pixels, reachable by scrolling, and not in an
//!   `aria-hidden="true"` or `inert` subtree; opacity is ignored (transparent inputs laid over
//!   styled ones are real targets). Beyond [`MAX_ELEMENTS`], elements in the viewport come first,
//!   then the nearest; the chosen ones are listed in document order.
//! - **Bounds.** The contract's caps apply (80 elements, 200-character names, 2,000-character
//!   values, 12,000 characters of text); on top, the text is cut at a line break (and ends with
//!   `…`) so that the whole snapshot serialized as JSON stays within [`MAX_SNAPSHOT_BYTES`]
//!   whenever the elements leave room. The helper bounds what it returns, walks large pages'
//!   text only as far as needed, and measures only a window of candidates around the viewport on
//!   pages with thousands of them; everything it returns is checked and cut again here.
//! - **Secrets.** Password fields, fields with a password `autocomplete`, and fields filled with
//!   an `origin` never show a value. Fill text is sealed for the isolated world ([`seal`]) on
//!   every secure page, so it never crosses CDP (whose client traces whole messages) in the
//!   clear; a saved-login fill additionally checks `https:` and the exact origin in the same
//!   synchronous evaluation that sets the value. Only a fill without `origin` on an insecure
//!   `http:` page, and `type` (real key events), send their text in the clear.
//! - **Acting.** The batch is validated whole (including `press` key names) before anything
//!   runs. Each step first resolves and checks its element in the helper (stale, disabled, for a
//!   click also scrolled into view and hit-tested at the center of its first client rect:
//!   another element there refuses the click, naming it), then dispatches: real CDP mouse and key
//!   events for click, type and press; the native value setter plus `input` and `change` events
//!   for fill and select, verified afterwards. `uncertain` is true exactly when the failure came
//!   after dispatching began (the page may have acted) and before the step was confirmed.
//!   Nothing is replayed. After the last step the tab is given [`ACT_SETTLE`] to start a
//!   navigation; if it did, the act waits for it like navigate does, then snapshots.
//!
//! It leaves to others: starting Chrome and its CDP connection ([`crate::browser`]), leases,
//! fences and the refusal streak ([`crate::screens`], [`crate::ops`]), and the wire types and
//! their validation ([`gateway_proto::page`]).

mod cdp;
mod keys;
mod seal;

use std::collections::{HashMap, HashSet};
use std::fmt::{Debug, Write as _};
use std::time::Duration;

use gateway_proto::page::{
    validate_steps, validate_url, PageActFailure, PageElement, PageStep, Snapshot, DISABLED,
    FRAMES_NOTE, MAX_ELEMENTS, MAX_NAME_CHARS, MAX_TEXT_CHARS, MAX_TITLE_CHARS, MAX_URL_LEN,
    MAX_VALUE_CHARS, NOT_SETTLED, NO_TAB, STALE_REF,
};
use gateway_proto::{ErrorCode, OpError};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::browser::CdpClient;
use cdp::{CdpError, FrameActivity};

/// The helper evaluated in every isolated world.
const HELPER: &str = include_str!("page.js");

/// How long `Page.navigate` may take until the navigation commits (contracts.md §5).
pub const NAVIGATION_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a committed document may take to become interactive (contracts.md §5).
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long after an act's last step a navigation it caused may take to start.
pub const ACT_SETTLE: Duration = Duration::from_millis(50);
/// Longest wait for one tab's visibility probe; a tab that does not answer is not chosen.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest wait for the snapshot evaluation.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for one helper call of an act step.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// `type` sends real key events for texts up to this many characters, and one
/// `Input.insertText` beyond (100,000 characters key by key would take minutes).
const TYPE_KEYS_MAX_CHARS: usize = 500;
/// Longest role or tag name kept from the page.
const MAX_ROLE_CHARS: usize = 40;
/// The budget of a whole snapshot serialized as JSON (about 4,000 tokens): the text is cut
/// (below [`MAX_TEXT_CHARS`]) to stay within it whenever the elements leave room.
pub const MAX_SNAPSHOT_BYTES: usize = 16 * 1024;

/// One bot's page browser. See the module documentation for the design.
pub struct PageBrowser {
    /// The number of the next new ref; only ever grows.
    next_ref: u64,
    /// Refs of fields filled from a saved login: their value is never shown (the helper masks
    /// them too; this covers a helper that lost its state).
    saved_login_refs: HashSet<String>,
    conn: Option<Conn>,
}

impl Debug for PageBrowser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageBrowser")
            .field("next_ref", &self.next_ref)
            .field("connected", &self.conn.as_ref().map(|c| !c.cdp.is_closed()))
            .finish_non_exhaustive()
    }
}

/// The cached connection to one browser and what we know of its tabs.
struct Conn {
    cdp: cdp::Connection,
    tabs: HashMap<String, TabState>,
}

struct TabState {
    tab: cdp::Tab,
    world: Option<World>,
}

/// The isolated world of a tab's current document and the handle of its helper.
#[derive(Clone)]
struct World {
    helper: String,
    frame_id: String,
}

/// Why a step failed, for [`PageActFailure`].
#[derive(Debug)]
struct StepFailure {
    uncertain: bool,
    error: String,
}

impl StepFailure {
    fn before(error: impl Into<String>) -> Self {
        Self {
            uncertain: false,
            error: error.into(),
        }
    }

    fn after(error: impl Into<String>) -> Self {
        Self {
            uncertain: true,
            error: error.into(),
        }
    }
}

/// A validated step, ready to run.
enum Planned<'a> {
    Click {
        element: &'a str,
    },
    Fill {
        element: &'a str,
        text: &'a str,
        origin: Option<String>,
    },
    Type {
        element: &'a str,
        text: &'a str,
    },
    Select {
        element: &'a str,
        value: &'a str,
    },
    Press {
        key: keys::KeyPress,
    },
}

// ---------------------------------------------------------------- helper arguments and results

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct SnapshotArgs {
    next: u64,
    max_elements: usize,
    max_text: usize,
    max_name: usize,
    max_value: usize,
    max_title: usize,
    max_url: usize,
    /// The whole snapshot's JSON budget, for the helper to estimate how much text to collect.
    max_bytes: usize,
    /// Also report whether the tab is visible (when the tab was chosen without a probe).
    probe: bool,
}

#[derive(Debug, Deserialize)]
struct RawSnapshot {
    url: String,
    title: String,
    text: String,
    /// The helper cut the text (there was more).
    #[serde(default, rename = "textCut")]
    text_cut: bool,
    elements: Vec<RawElement>,
    frames: bool,
    next: u64,
    #[serde(default = "yes")]
    visible: bool,
    #[serde(default)]
    candidates: u64,
    #[serde(default)]
    ms: f64,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
struct RawElement {
    #[serde(rename = "ref")]
    element: String,
    role: String,
    name: String,
    value: String,
    tag: String,
}

#[derive(Debug, Clone, Serialize)]
struct NoArgs {}

#[derive(Debug, Deserialize)]
struct Probe {
    visible: bool,
    focused: bool,
}

#[derive(Debug, Clone, Serialize)]
struct WaitArgs {
    ms: u64,
}

#[derive(Debug, Clone, Serialize)]
struct RefArgs {
    #[serde(rename = "ref")]
    element: String,
}

/// A plain fill's argument. No `Debug`: the text may be a secret.
#[derive(Clone, Serialize)]
struct FillArgs {
    #[serde(rename = "ref")]
    element: String,
    text: String,
}

#[derive(Debug, Clone, Serialize)]
struct SealBeginArgs {
    #[serde(rename = "ref")]
    element: String,
    origin: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
struct SealFillArgs {
    #[serde(rename = "ref")]
    element: String,
    origin: Option<String>,
    #[serde(rename = "pub")]
    public_key: String,
    sealed: String,
    label: &'static str,
}

#[derive(Debug, Clone, Serialize)]
struct SelectArgs {
    #[serde(rename = "ref")]
    element: String,
    value: String,
}

/// Any helper step reply: `{ok}`, `{x, y}`, `{pub}` or `{error, detail?, dispatched?}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Reply {
    error: Option<String>,
    detail: Option<String>,
    dispatched: bool,
    x: Option<f64>,
    y: Option<f64>,
    #[serde(rename = "pub")]
    public_key: Option<String>,
}

impl Default for PageBrowser {
    fn default() -> Self {
        Self::new()
    }
}

impl PageBrowser {
    /// A page browser with no connection yet; refs start at `e1`.
    pub fn new() -> Self {
        Self {
            next_ref: 1,
            saved_login_refs: HashSet::new(),
            conn: None,
        }
    }

    /// The bot's browser was restarted (a new process, a new CDP connection): the connection,
    /// tabs and worlds of the old one are dropped, so its refs are unknown from now on. The ref
    /// counter keeps increasing. A call with a different connection than the cached one does
    /// this by itself.
    pub fn browser_restarted(&mut self) {
        self.conn = None;
        self.saved_login_refs.clear();
    }

    /// browser_snapshot on the browser behind `browser` ([`crate::browser::Browser::cdp`]).
    pub async fn snapshot(&mut self, browser: &CdpClient) -> Result<Snapshot, OpError> {
        // With a single tab, its visibility comes back with the snapshot: one round trip less.
        let (target, probed) = self.select_tab(browser, true).await?;
        self.snapshot_tab(&target, !probed).await
    }

    /// browser_navigate: checks the URL before any CDP call ([`validate_url`], as
    /// [`ErrorCode::BadRequest`]), navigates the chosen tab (up to [`NAVIGATION_TIMEOUT`] until
    /// the new document commits), waits up to [`READY_TIMEOUT`] for it to be interactive, and
    /// returns its snapshot. Timeouts fail with [`NOT_SETTLED`]; a failed navigation (DNS,
    /// refused connection) fails with Chrome's error text.
    pub async fn navigate(&mut self, browser: &CdpClient, url: &str) -> Result<Snapshot, OpError> {
        validate_url(url)?;
        let (target, _) = self.select_tab(browser, false).await?;
        let tab = self.tab(&target)?;
        let started = Instant::now();
        let navigation = match tab.navigate(url, NAVIGATION_TIMEOUT).await {
            Ok(n) => n,
            Err(CdpError::Timeout { .. }) => return Err(not_settled()),
            Err(error) => return Err(self.failed("navigate", error)),
        };
        // A new document means a new world; a same-document navigation (no loader) keeps the
        // world and its refs.
        if navigation.loader_id.is_some() && !navigation.is_download {
            self.forget_world(&target);
        }
        if !navigation.is_download {
            if let Some(error) = navigation.error_text {
                return Err(OpError::new(
                    ErrorCode::Failed,
                    format!("navigation to {url} failed: {error}"),
                ));
            }
            if let Some(loader) = navigation.loader_id {
                self.wait_commit(&tab, &loader, started + NAVIGATION_TIMEOUT)
                    .await?;
            }
        }
        self.wait_ready(&target, READY_TIMEOUT).await?;
        self.snapshot_tab(&target, false).await
    }

    /// browser_act: validates the whole batch first ([`validate_steps`] and key names, as
    /// [`ErrorCode::BadRequest`]), picks the tab (failures before any step are `Err`), runs the
    /// steps in order and returns the snapshot after them, or the failure: how many steps were
    /// confirmed, whether the failing one may have acted, and why. Nothing is replayed.
    pub async fn act(
        &mut self,
        browser: &CdpClient,
        steps: &[PageStep],
    ) -> Result<Result<Snapshot, PageActFailure>, OpError> {
        validate_steps(steps)?;
        let plan = plan(steps)?;
        let (target, _) = self.select_tab(browser, false).await?;
        let (tab, world) = self
            .ensure_world(&target)
            .await
            .map_err(|e| self.failed("open the page", e))?;
        let mut watch = tab
            .watch_navigation()
            .await
            .map_err(|e| self.failed("watch navigation", e))?;
        let mut completed: u32 = 0;
        for step in &plan {
            if let Err(failure) = self.run_step(&target, &tab, step).await {
                tracing::debug!(completed, uncertain = failure.uncertain, error = %failure.error, "browser_act step failed");
                return Ok(Err(PageActFailure {
                    completed,
                    uncertain: failure.uncertain,
                    error: failure.error,
                }));
            }
            completed += 1;
        }
        let done = |error: String| {
            Ok(Err(PageActFailure {
                completed,
                uncertain: false,
                error,
            }))
        };
        // Give a navigation the steps caused time to start; follow it like navigate does.
        tokio::time::sleep(ACT_SETTLE).await;
        let mut activity = FrameActivity::default();
        watch.drain(&world.frame_id, &mut activity);
        if activity.started && !activity.committed && !activity.stopped {
            let deadline = Instant::now() + NAVIGATION_TIMEOUT;
            while !activity.committed && !activity.stopped {
                if Instant::now() >= deadline {
                    return done(NOT_SETTLED.to_owned());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                watch.drain(&world.frame_id, &mut activity);
            }
        }
        drop(watch);
        if activity.committed {
            self.forget_world(&target);
        }
        if activity.started || activity.committed {
            if let Err(e) = self.wait_ready(&target, READY_TIMEOUT).await {
                return done(e.message);
            }
        }
        match self.snapshot(browser).await {
            Ok(snapshot) => Ok(Ok(snapshot)),
            Err(e) => done(e.message),
        }
    }

    // ------------------------------------------------------------ connection, tabs, worlds

    /// The cached connection, replaced (with a fresh tab cache) when `browser` is another
    /// browser's; fails when the browser is gone.
    fn connection(&mut self, browser: &CdpClient) -> Result<&mut Conn, OpError> {
        if browser.is_closed() {
            self.conn = None;
            return Err(OpError::new(ErrorCode::Failed, chain(&CdpError::Closed)));
        }
        if !self.conn.as_ref().is_some_and(|c| c.cdp.is(browser)) {
            if self.conn.is_some() {
                self.browser_restarted();
            }
            self.conn = Some(Conn {
                cdp: cdp::Connection::new(browser.clone()),
                tabs: HashMap::new(),
            });
        }
        match self.conn.as_mut() {
            Some(conn) => Ok(conn),
            None => Err(OpError::new(ErrorCode::Failed, "no cdp connection")),
        }
    }

    /// The single focused visible tab, else the single visible tab, else [`NO_TAB`]. With
    /// `unprobed_single`, a browser with one tab returns it without asking whether it is
    /// visible (`false` in the result): the caller must check.
    async fn select_tab(
        &mut self,
        browser: &CdpClient,
        unprobed_single: bool,
    ) -> Result<(String, bool), OpError> {
        let conn = self.connection(browser)?;
        let targets = match conn.cdp.page_targets().await {
            Ok(t) => t,
            Err(e) => return Err(self.failed("list tabs", e)),
        };
        conn.tabs
            .retain(|id, _| targets.iter().any(|t| &t.id == id));
        let single = unprobed_single && targets.len() == 1;
        let mut visible = Vec::new();
        let mut focused = Vec::new();
        // Tabs that did not answer the probe (a busy or hung page): their visibility is unknown.
        let mut unknown = Vec::new();
        for target in targets {
            let Some(conn) = self.conn.as_mut() else {
                break;
            };
            if !conn.tabs.contains_key(&target.id) {
                match conn.cdp.tab(&target.id).await {
                    Ok(tab) => {
                        conn.tabs
                            .insert(target.id.clone(), TabState { tab, world: None });
                    }
                    Err(error) => {
                        tracing::debug!(target = %target.id, %error, "cannot attach to a tab");
                        continue;
                    }
                }
            }
            if single {
                return Ok((target.id, false));
            }
            match self
                .call::<_, Probe>(&target.id, "probe", NoArgs {}, PROBE_TIMEOUT, true)
                .await
            {
                Ok(p) if p.visible => {
                    if p.focused {
                        focused.push(target.id.clone());
                    }
                    visible.push(target.id);
                }
                Ok(_) => {}
                Err(CdpError::Closed) => {
                    return Err(OpError::new(
                        ErrorCode::Failed,
                        "the browser's devtools connection closed",
                    ))
                }
                Err(error) => {
                    tracing::debug!(target = %target.id, url = %target.url, %error, "tab did not answer the visibility probe");
                    unknown.push(target.id);
                }
            }
        }
        // A hung page cannot answer; when it is the only candidate left it is still the tab
        // (navigating away is how the agent gets out of it).
        let chosen = match (focused.len(), visible.len(), unknown.len()) {
            (1, _, _) => focused.pop(),
            (_, 1, _) => visible.pop(),
            (_, 0, 1) => unknown.pop(),
            _ => None,
        };
        tracing::debug!(visible = visible.len(), focused = focused.len(), chosen = ?chosen, "page browser tab selection");
        chosen
            .map(|t| (t, true))
            .ok_or_else(|| OpError::new(ErrorCode::Failed, NO_TAB))
    }

    fn tab(&self, target: &str) -> Result<cdp::Tab, OpError> {
        self.conn
            .as_ref()
            .and_then(|c| c.tabs.get(target))
            .map(|t| t.tab.clone())
            .ok_or_else(|| OpError::new(ErrorCode::Failed, NO_TAB))
    }

    fn forget_world(&mut self, target: &str) {
        if let Some(t) = self.conn.as_mut().and_then(|c| c.tabs.get_mut(target)) {
            t.world = None;
        }
    }

    /// The tab and its world, creating the world for the current document when there is none.
    async fn ensure_world(&mut self, target: &str) -> Result<(cdp::Tab, World), CdpError> {
        let state = self
            .conn
            .as_mut()
            .and_then(|c| c.tabs.get_mut(target))
            .ok_or(CdpError::WorldGone)?;
        if let Some(world) = &state.world {
            return Ok((state.tab.clone(), world.clone()));
        }
        let tab = state.tab.clone();
        let frame = tab.main_frame().await?;
        // A fresh random name per world; the name is only a label, never used to find it.
        let name = format!("rakazo-{:016x}", rand::random::<u64>());
        let context = tab.create_world(&frame.id, &name).await?;
        let helper = tab.install(context, HELPER).await?;
        let world = World {
            helper,
            frame_id: frame.id,
        };
        if let Some(state) = self.conn.as_mut().and_then(|c| c.tabs.get_mut(target)) {
            state.world = Some(world.clone());
        }
        Ok((tab, world))
    }

    /// Calls `this.<method>(arg)` on the tab's helper. With `retry`, a world that is gone (a
    /// new document) is created again and the call repeated once: only for calls that change
    /// nothing on the page.
    async fn call<A, R>(
        &mut self,
        target: &str,
        method: &str,
        arg: A,
        timeout: Duration,
        retry: bool,
    ) -> Result<R, CdpError>
    where
        A: Serialize + Clone + Send + 'static,
        R: DeserializeOwned + Debug + Send + 'static,
    {
        let function = format!("function(a) {{ return this.{method}(a); }}");
        let mut attempts = if retry { 2 } else { 1 };
        loop {
            attempts -= 1;
            let result = match self.ensure_world(target).await {
                Ok((tab, world)) => {
                    tab.call(&world.helper, &function, arg.clone(), timeout)
                        .await
                }
                Err(e) => Err(e),
            };
            match result {
                Err(CdpError::WorldGone) if attempts > 0 => self.forget_world(target),
                Err(CdpError::WorldGone | CdpError::Interrupted) => {
                    self.forget_world(target);
                    return result;
                }
                Err(CdpError::Closed) => {
                    self.conn = None;
                    return result;
                }
                other => return other,
            }
        }
    }

    /// Waits until the tab's main frame shows the navigation's document, until `deadline`.
    async fn wait_commit(
        &mut self,
        tab: &cdp::Tab,
        loader: &str,
        deadline: Instant,
    ) -> Result<(), OpError> {
        loop {
            match tab.main_frame().await {
                Ok(frame) if frame.loader_id == loader => return Ok(()),
                Ok(_) => {}
                Err(CdpError::Closed) => return Err(self.failed("navigate", CdpError::Closed)),
                Err(error) => tracing::debug!(%error, "main frame not readable yet"),
            }
            if Instant::now() >= deadline {
                return Err(not_settled());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits up to `budget` for the tab's document to be past "loading", following a document
    /// that is replaced meanwhile (redirects, reloads).
    async fn wait_ready(&mut self, target: &str, budget: Duration) -> Result<(), OpError> {
        let deadline = Instant::now() + budget;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(not_settled());
            }
            let ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
            let answer = self
                .call::<_, String>(
                    target,
                    "waitReady",
                    WaitArgs { ms },
                    left + Duration::from_secs(1),
                    false,
                )
                .await;
            match answer {
                Ok(state) if state != "loading" => return Ok(()),
                Ok(_) | Err(CdpError::Timeout { .. }) => {}
                Err(CdpError::Closed) => return Err(self.failed("wait", CdpError::Closed)),
                Err(error) => {
                    // Mid-commit the frame or its context may not be usable for a moment.
                    tracing::debug!(%error, "document not ready to answer yet");
                    self.forget_world(target);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }

    // ------------------------------------------------------------ snapshot

    /// The snapshot of the tab; with `probe`, fails with [`NO_TAB`] when the tab is hidden.
    async fn snapshot_tab(&mut self, target: &str, probe: bool) -> Result<Snapshot, OpError> {
        let args = SnapshotArgs {
            next: self.next_ref,
            max_elements: MAX_ELEMENTS,
            max_text: MAX_TEXT_CHARS,
            max_name: MAX_NAME_CHARS,
            max_value: MAX_VALUE_CHARS,
            max_title: MAX_TITLE_CHARS,
            max_url: MAX_URL_LEN,
            max_bytes: MAX_SNAPSHOT_BYTES,
            probe,
        };
        let raw: RawSnapshot = match self
            .call(target, "snapshot", args, SNAPSHOT_TIMEOUT, true)
            .await
        {
            Ok(raw) => raw,
            Err(CdpError::WorldGone | CdpError::Interrupted) => return Err(not_settled()),
            Err(error) => return Err(self.failed("snapshot", error)),
        };
        if !raw.visible {
            return Err(OpError::new(ErrorCode::Failed, NO_TAB));
        }
        tracing::debug!(
            candidates = raw.candidates,
            elements = raw.elements.len(),
            helper_ms = raw.ms,
            "page snapshot"
        );
        let (snapshot, next) = build_snapshot(raw, self.next_ref, &self.saved_login_refs)
            .map_err(|m| OpError::new(ErrorCode::Failed, m))?;
        self.next_ref = next;
        Ok(snapshot)
    }

    // ------------------------------------------------------------ steps

    async fn run_step(
        &mut self,
        target: &str,
        tab: &cdp::Tab,
        step: &Planned<'_>,
    ) -> Result<(), StepFailure> {
        match step {
            Planned::Click { element } => {
                let reply = self
                    .step_call(target, "prepareClick", ref_args(element))
                    .await
                    .map_err(before_dispatch)?;
                check(&reply, None)?;
                let (x, y) = match (reply.x, reply.y) {
                    (Some(x), Some(y)) if x.is_finite() && y.is_finite() => (x, y),
                    _ => return Err(StepFailure::before("the page helper gave no click point")),
                };
                tab.click(x, y).await.map_err(|e| {
                    StepFailure::after(format!(
                        "The click was sent but not confirmed ({e}); inspect the screen before continuing"
                    ))
                })
            }
            Planned::Fill {
                element,
                text,
                origin,
            } => self.fill(target, element, text, origin.clone()).await,
            Planned::Type { element, text } => {
                let reply = self
                    .step_call(target, "focusForTyping", ref_args(element))
                    .await
                    .map_err(before_dispatch)?;
                check(&reply, None)?;
                let unconfirmed = |e: CdpError| {
                    StepFailure::after(format!(
                        "Typing was not confirmed ({e}); inspect the screen before continuing"
                    ))
                };
                if text.chars().count() <= TYPE_KEYS_MAX_CHARS {
                    // A CRLF line break is one Enter, like LF alone.
                    let mut chars = text.chars().peekable();
                    while let Some(c) = chars.next() {
                        if c == '\r' && chars.peek() == Some(&'\n') {
                            continue;
                        }
                        for event in keys::char_events(c) {
                            tab.key(event).await.map_err(unconfirmed)?;
                        }
                    }
                    Ok(())
                } else {
                    tab.insert_text(text).await.map_err(unconfirmed)
                }
            }
            Planned::Select { element, value } => {
                let args = SelectArgs {
                    element: (*element).to_owned(),
                    value: (*value).to_owned(),
                };
                let reply = self
                    .step_call(target, "select", args)
                    .await
                    .map_err(during_dispatch)?;
                check(&reply, Some(value))
            }
            Planned::Press { key } => {
                for event in key.events() {
                    tab.key(event).await.map_err(|e| {
                        StepFailure::after(format!(
                            "The key press was not confirmed ({e}); inspect the screen before continuing"
                        ))
                    })?;
                }
                Ok(())
            }
        }
    }

    /// A fill: sealed when the page offers WebCrypto (every secure page, hence every saved
    /// login), plain otherwise. See [`seal`].
    async fn fill(
        &mut self,
        target: &str,
        element: &str,
        text: &str,
        origin: Option<String>,
    ) -> Result<(), StepFailure> {
        let begin = SealBeginArgs {
            element: element.to_owned(),
            origin: origin.clone(),
        };
        let reply = self
            .step_call(target, "sealBegin", begin)
            .await
            .map_err(before_dispatch)?;
        if reply.error.as_deref() == Some("nocrypto") && origin.is_none() {
            let args = FillArgs {
                element: element.to_owned(),
                text: text.to_owned(),
            };
            let reply = self
                .step_call(target, "fill", args)
                .await
                .map_err(during_dispatch)?;
            return check(&reply, None);
        }
        check_origin(&reply, origin.as_deref())?;
        let peer = reply
            .public_key
            .ok_or_else(|| StepFailure::before("the page helper gave no key"))?;
        let sealed = seal::seal(&peer, text).map_err(StepFailure::before)?;
        let args = SealFillArgs {
            element: element.to_owned(),
            origin: origin.clone(),
            public_key: sealed.public_key,
            sealed: sealed.ciphertext,
            label: seal::LABEL,
        };
        let reply = self
            .step_call(target, "sealFill", args)
            .await
            .map_err(during_dispatch)?;
        check_origin(&reply, origin.as_deref())?;
        if origin.is_some() {
            self.saved_login_refs.insert(element.to_owned());
        }
        Ok(())
    }

    /// A helper call of an act step: never retried, since refs belong to the world they were
    /// made in (a new world means a new document, where the ref is stale).
    async fn step_call<A>(&mut self, target: &str, method: &str, arg: A) -> Result<Reply, CdpError>
    where
        A: Serialize + Clone + Send + 'static,
    {
        self.call(target, method, arg, STEP_TIMEOUT, false).await
    }

    /// An [`OpError`] for a CDP failure outside any step.
    fn failed(&mut self, what: &str, error: CdpError) -> OpError {
        if matches!(error, CdpError::Closed) {
            self.conn = None;
        }
        OpError::new(ErrorCode::Failed, format!("{what}: {}", chain(&error)))
    }
}

// ---------------------------------------------------------------- pure helpers

fn not_settled() -> OpError {
    OpError::new(ErrorCode::Failed, NOT_SETTLED)
}

/// An error and its sources on one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let _ = write!(out, ": {s}");
        source = s.source();
    }
    out
}

fn ref_args(element: &str) -> RefArgs {
    RefArgs {
        element: element.to_owned(),
    }
}

/// Checks the batch beyond [`validate_steps`]: key names, origins.
fn plan(steps: &[PageStep]) -> Result<Vec<Planned<'_>>, OpError> {
    let bad = |n: usize, m: String| OpError::new(ErrorCode::BadRequest, format!("step {n}: {m}"));
    steps
        .iter()
        .enumerate()
        .map(|(i, step)| {
            Ok(match step {
                PageStep::Click { element } => Planned::Click { element },
                PageStep::Fill {
                    element,
                    text,
                    origin,
                } => Planned::Fill {
                    element,
                    text,
                    origin: match origin {
                        Some(o) => Some(normalize_origin(o).map_err(|m| bad(i + 1, m))?),
                        None => None,
                    },
                },
                PageStep::Type { element, text } => Planned::Type { element, text },
                PageStep::Select { element, value } => Planned::Select { element, value },
                PageStep::Press { key } => Planned::Press {
                    key: keys::parse(key).map_err(|m| bad(i + 1, m))?,
                },
            })
        })
        .collect()
}

/// `https://Example.com/` → `https://example.com`; an origin has no path, query or fragment.
fn normalize_origin(origin: &str) -> Result<String, String> {
    let o = origin
        .strip_suffix('/')
        .unwrap_or(origin)
        .to_ascii_lowercase();
    let host = o.strip_prefix("https://").unwrap_or("");
    if host.is_empty()
        || host.contains(['/', '?', '#', '@'])
        || host.chars().any(char::is_whitespace)
    {
        return Err(format!("{origin:?} is not an https origin"));
    }
    Ok(o)
}

/// A helper failure before anything was dispatched.
fn before_dispatch(error: CdpError) -> StepFailure {
    match error {
        CdpError::WorldGone | CdpError::Interrupted => StepFailure::before(STALE_REF),
        other => StepFailure::before(format!(
            "The page did not answer ({}); nothing was done",
            chain(&other)
        )),
    }
}

/// A helper failure of a call that checks and dispatches in one evaluation.
fn during_dispatch(error: CdpError) -> StepFailure {
    match error {
        // The call never ran: the document it belonged to is gone.
        CdpError::WorldGone => StepFailure::before(STALE_REF),
        other => StepFailure::after(format!(
            "The step was not confirmed ({}); inspect the screen before continuing",
            chain(&other)
        )),
    }
}

/// Turns a helper reply's error into a step failure. `value` is a select step's value, which
/// may be quoted (it is never a secret); fill text never is.
fn check(reply: &Reply, value: Option<&str>) -> Result<(), StepFailure> {
    let Some(code) = reply.error.as_deref() else {
        return Ok(());
    };
    let detail = reply.detail.as_deref().unwrap_or("another element");
    let message = match code {
        "stale" => STALE_REF.to_owned(),
        "disabled" => DISABLED.to_owned(),
        "covered" => format!("Element is covered by {detail}; the click was not sent"),
        "offscreen" => "Element could not be scrolled into view; the click was not sent".to_owned(),
        "notfillable" => format!("Element cannot be filled (it is a {detail}); use click"),
        "readonly" => "Element is read-only".to_owned(),
        "notselect" => "Element is not a select; use fill or click".to_owned(),
        "nooption" => format!(
            "No option has the value or text {:?}",
            value.unwrap_or_default()
        ),
        "optiondisabled" => "That option is disabled".to_owned(),
        "focus" => "Element could not be focused for typing".to_owned(),
        "verify" => "The field did not keep the filled value; take a fresh snapshot".to_owned(),
        "origin" => "Saved login refused: the page is not an HTTPS page of that origin".to_owned(),
        "nocrypto" => "Saved login refused: the page is not a secure page".to_owned(),
        other => format!("The page helper failed ({other})"),
    };
    Err(StepFailure {
        uncertain: reply.dispatched,
        error: message,
    })
}

/// Like [`check`], naming the origin a saved-login fill was refused for.
fn check_origin(reply: &Reply, origin: Option<&str>) -> Result<(), StepFailure> {
    match (reply.error.as_deref(), origin) {
        (Some("origin"), Some(o)) => Err(StepFailure::before(format!(
            "Saved login refused: the page is not an HTTPS page of {o}"
        ))),
        _ => check(reply, None),
    }
}

/// Checks and bounds the helper's snapshot (the page is untrusted input even though the helper
/// is ours) and renders the tree. Returns the snapshot and the next ref number.
fn build_snapshot(
    raw: RawSnapshot,
    next_ref: u64,
    saved_login_refs: &HashSet<String>,
) -> Result<(Snapshot, u64), String> {
    let max_next = next_ref.saturating_add(MAX_ELEMENTS as u64);
    if raw.next < next_ref || raw.next > max_next {
        return Err(format!(
            "the page helper minted refs out of order ({} after {next_ref})",
            raw.next
        ));
    }
    let mut elements = Vec::with_capacity(raw.elements.len().min(MAX_ELEMENTS));
    let mut seen = HashSet::new();
    for e in raw.elements.into_iter().take(MAX_ELEMENTS) {
        let number = e
            .element
            .strip_prefix('e')
            .filter(|n| !n.is_empty() && n.len() <= 11 && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u64>().ok());
        match number {
            Some(n) if n >= 1 && n < raw.next && seen.insert(n) => {}
            _ => return Err("the page helper returned a malformed ref".to_owned()),
        }
        let value = if saved_login_refs.contains(&e.element) {
            String::new()
        } else {
            truncate_chars(&e.value, MAX_VALUE_CHARS)
        };
        elements.push(PageElement {
            role: token(&e.role, "generic"),
            name: truncate_chars(&e.name, MAX_NAME_CHARS),
            value,
            tag: token(&e.tag, "element"),
            element: e.element,
        });
    }
    let url = truncate_chars(&raw.url, MAX_URL_LEN);
    let title = truncate_chars(&raw.title, MAX_TITLE_CHARS);
    // Everything but the text, as JSON; the text gets what is left of the budget.
    let lines = render_tree("", &elements, raw.frames);
    let rest = snapshot_json_len(&url, &title, &elements, &lines) + "\\n".len();
    let text = fit_text(
        &raw.text,
        raw.text_cut,
        MAX_SNAPSHOT_BYTES.saturating_sub(rest),
    );
    let tree = render_tree(&text, &elements, raw.frames);
    let snapshot = Snapshot {
        url,
        title,
        elements,
        tree,
    };
    Ok((snapshot, raw.next))
}

/// At most [`MAX_TEXT_CHARS`] characters of `text` whose JSON encoding takes at most
/// `budget` bytes. A cut text (here, or already by the helper: `cut`) ends with `…`, at a line
/// break when one is near.
fn fit_text(text: &str, cut: bool, budget: usize) -> String {
    let mut used = 0;
    let mut end = text.len();
    for (count, (i, c)) in text.char_indices().enumerate() {
        used += json_char_len(c);
        // Keep room for the ellipsis (3 bytes) in case this is cut.
        if count == MAX_TEXT_CHARS || used + 3 > budget {
            end = i;
            break;
        }
    }
    if end == text.len() && !cut {
        return text.to_owned();
    }
    let mut kept = &text[..end];
    // Cut here: back to a line break when one is near. (Cut by the helper: it ended a line.)
    if end < text.len() {
        if let Some(nl) = kept.rfind('\n') {
            if end - nl < 400 {
                kept = &kept[..nl];
            }
        }
    }
    if kept.trim_end().is_empty() {
        return String::new();
    }
    // The loop kept room for the mark's 3 bytes.
    let mut out = kept.trim_end().to_owned();
    if out.chars().count() >= MAX_TEXT_CHARS {
        out = truncate_chars(&out, MAX_TEXT_CHARS - 1);
    }
    out.push('…');
    out
}

/// Bytes of `c` inside a JSON string as serde_json writes it.
fn json_char_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if u32::from(c) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// Bytes of `s` as a JSON string literal.
fn json_len(s: &str) -> usize {
    2 + s.chars().map(json_char_len).sum::<usize>()
}

/// Bytes of a [`Snapshot`] serialized as JSON (serde's field names, no whitespace).
fn snapshot_json_len(url: &str, title: &str, elements: &[PageElement], tree: &str) -> usize {
    let element = |e: &PageElement| {
        r#"{"element":,"role":,"name":,"value":,"tag":}"#.len()
            + json_len(&e.element)
            + json_len(&e.role)
            + json_len(&e.name)
            + json_len(&e.value)
            + json_len(&e.tag)
    };
    r#"{"url":,"title":,"elements":[],"tree":}"#.len()
        + json_len(url)
        + json_len(title)
        + elements.iter().map(element).sum::<usize>()
        + elements.len().saturating_sub(1)
        + json_len(tree)
}

/// The tree: the visible text, one line per element, then the frames note.
fn render_tree(text: &str, elements: &[PageElement], frames: bool) -> String {
    let mut tree = String::with_capacity(text.len() + elements.len() * 48 + FRAMES_NOTE.len() + 2);
    tree.push_str(text);
    for e in elements {
        if !tree.is_empty() {
            tree.push('\n');
        }
        let _ = write!(tree, "- {} ", e.role);
        json_string(&e.name, &mut tree);
        let _ = write!(tree, " [{}]", e.element);
        if !e.value.is_empty() {
            tree.push_str(" value=");
            json_string(&e.value, &mut tree);
        }
    }
    if frames {
        if !tree.is_empty() {
            tree.push('\n');
        }
        tree.push_str(FRAMES_NOTE);
    }
    tree
}

/// Appends `s` as a JSON string literal.
fn json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// At most `max` characters of `s`.
fn truncate_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((end, _)) => s[..end].to_owned(),
        None => s.to_owned(),
    }
}

/// A role or tag from the page: lowercase letters, digits and `-`, else `fallback`.
fn token(s: &str, fallback: &str) -> String {
    let ok = !s.is_empty()
        && s.len() <= MAX_ROLE_CHARS
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        s.to_owned()
    } else {
        fallback.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(elements: Vec<RawElement>, next: u64) -> RawSnapshot {
        RawSnapshot {
            url: "http://x/".into(),
            title: "t".repeat(500),
            text: "a".repeat(20_000),
            text_cut: true,
            elements,
            frames: true,
            next,
            visible: true,
            candidates: 0,
            ms: 0.0,
        }
    }

    fn el(r: &str, value: &str) -> RawElement {
        RawElement {
            element: r.into(),
            role: "textbox".into(),
            name: "Say \"hi\"\n".into(),
            value: value.into(),
            tag: "input".into(),
        }
    }

    #[test]
    fn snapshots_are_bounded_and_rendered() {
        let (s, next) = build_snapshot(
            raw(vec![el("e3", "x"), el("e4", "")], 5),
            3,
            &HashSet::new(),
        )
        .unwrap();
        assert_eq!(next, 5);
        assert_eq!(s.title.chars().count(), MAX_TITLE_CHARS);
        let (text, lines) = s.tree.split_once('\n').unwrap();
        assert_eq!(text.chars().count(), MAX_TEXT_CHARS);
        assert!(text.ends_with("a…"));
        assert_eq!(
            lines,
            "- textbox \"Say \\\"hi\\\"\\n\" [e3] value=\"x\"\n- textbox \"Say \\\"hi\\\"\\n\" [e4]\n\
             Embedded frames require desktop tools."
        );
    }

    #[test]
    fn the_text_gives_way_to_keep_a_snapshot_within_its_byte_budget() {
        let many: Vec<RawElement> = (1..=80)
            .map(|i| RawElement {
                element: format!("e{i}"),
                role: "button".into(),
                name: format!("Add item number {i} to the shopping cart"),
                value: String::new(),
                tag: "button".into(),
            })
            .collect();
        let mut r = raw(many, 81);
        r.text = "Line of catalog text\n".repeat(1000);
        let (s, _) = build_snapshot(r, 1, &HashSet::new()).unwrap();
        let size = snapshot_json_len(&s.url, &s.title, &s.elements, &s.tree);
        assert!(size <= MAX_SNAPSHOT_BYTES, "{size}");
        assert!(
            size > MAX_SNAPSHOT_BYTES - 400,
            "{size}: the budget is used"
        );
        let text = s.tree.split("\n- ").next().unwrap();
        assert!(
            text.ends_with("Line of catalog text…"),
            "cut at a line break"
        );
        // A short text is kept whole.
        let mut r = raw(vec![], 1);
        r.text = "Hello \"world\"".into();
        r.text_cut = false;
        let (s, _) = build_snapshot(r, 1, &HashSet::new()).unwrap();
        assert_eq!(s.tree, format!("Hello \"world\"\n{FRAMES_NOTE}"));
        // Cut by the helper: marked.
        let mut r = raw(vec![], 1);
        r.text = "First lines".into();
        let (s, _) = build_snapshot(r, 1, &HashSet::new()).unwrap();
        assert_eq!(s.tree, format!("First lines…\n{FRAMES_NOTE}"));
    }

    #[test]
    fn json_lengths_match_serde() {
        assert_eq!(
            json_len("a\"b\\c\n\u{1}é"),
            2 + 1 + 2 + 1 + 2 + 1 + 2 + 6 + 2
        );
        let e = PageElement {
            element: "e1".into(),
            role: "link".into(),
            name: "Home".into(),
            value: String::new(),
            tag: "a".into(),
        };
        let expected = r#"{"url":"u","title":"t","elements":[{"element":"e1","role":"link","name":"Home","value":"","tag":"a"},{"element":"e1","role":"link","name":"Home","value":"","tag":"a"}],"tree":"x"}"#;
        assert_eq!(
            snapshot_json_len("u", "t", &[e.clone(), e], "x"),
            expected.len()
        );
    }

    #[test]
    fn saved_login_values_are_masked_and_bad_refs_refused() {
        let saved: HashSet<String> = ["e3".to_owned()].into();
        let (s, _) = build_snapshot(raw(vec![el("e3", "secret")], 4), 3, &saved).unwrap();
        assert_eq!(s.elements[0].value, "");
        assert!(!s.tree.contains("secret"));
        for bad in ["x3", "e", "e-1", "e99", "e0"] {
            assert!(
                build_snapshot(raw(vec![el(bad, "")], 4), 3, &saved).is_err(),
                "{bad}"
            );
        }
        assert!(build_snapshot(raw(vec![el("e3", ""), el("e3", "")], 5), 3, &saved).is_err());
        // The counter never goes back, nor jumps further than one snapshot's worth.
        assert!(build_snapshot(raw(vec![], 2), 3, &saved).is_err());
        assert!(build_snapshot(raw(vec![], 3 + 81), 3, &saved).is_err());
    }

    #[test]
    fn roles_and_tags_from_the_page_are_tokens() {
        assert_eq!(token("button", "generic"), "button");
        assert_eq!(token("my-widget2", "element"), "my-widget2");
        assert_eq!(token("Button", "generic"), "generic");
        assert_eq!(token("a\" [e1]", "generic"), "generic");
        assert_eq!(token("", "generic"), "generic");
    }

    #[test]
    fn origins_are_normalized() {
        assert_eq!(
            normalize_origin("https://Example.com/").unwrap(),
            "https://example.com"
        );
        assert_eq!(
            normalize_origin("https://a.test:8443").unwrap(),
            "https://a.test:8443"
        );
        for bad in ["https://", "https://a/b", "https://u@a", "http://a"] {
            assert!(normalize_origin(bad).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn the_api_can_be_used_from_spawned_tasks() {
        fn send<T: Send>(_: T) {}
        let (_, to) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let (from, _) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let browser = CdpClient::from_pipes(to, from).unwrap();
        let mut pages = PageBrowser::new();
        send(pages.snapshot(&browser));
        send(pages.navigate(&browser, "http://x/"));
        send(pages.act(&browser, &[]));
        send(pages);
    }

    #[test]
    fn key_names_are_checked_with_the_batch() {
        let steps = [
            PageStep::Click {
                element: "e1".into(),
            },
            PageStep::Press {
                key: "Hyperdrive".into(),
            },
        ];
        let err = plan(&steps).err().unwrap();
        assert_eq!(err.code, ErrorCode::BadRequest);
        assert!(err.message.starts_with("step 2:"), "{}", err.message);
    }

    #[test]
    fn helper_errors_map_to_the_contract_texts() {
        let reply = |code: &str, dispatched| Reply {
            error: Some(code.into()),
            dispatched,
            ..Reply::default()
        };
        let f = check(&reply("stale", false), None).unwrap_err();
        assert_eq!((f.error.as_str(), f.uncertain), (STALE_REF, false));
        let f = check(&reply("disabled", false), None).unwrap_err();
        assert_eq!(f.error, DISABLED);
        let f = check(&reply("verify", true), None).unwrap_err();
        assert!(f.uncertain);
        assert!(check(&Reply::default(), None).is_ok());
    }
}
