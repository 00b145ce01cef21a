//! The page browser (docs/screens.md#page-browser): browser_navigate, browser_snapshot and
//! browser_act on a bot's own Chrome, over CDP.
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
//!   probe and gets the visibility back with the snapshot itself. The page targets are followed
//!   from Chrome's target discovery events (`Target.setDiscoverTargets` once per connection,
//!   then `targetCreated` / `targetInfoChanged` / `targetDestroyed`), so finding them costs no
//!   round trip: a warm snapshot of a single tab is one CDP call. Events may lag a tab the page
//!   opened or closed a moment ago, so when the choice fails (no tab, or the single tab taken
//!   unprobed is hidden or gone) the list is read again with `Target.getTargets` and, if it
//!   differs, the choice is made again.
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
//!   document; otherwise [`STALE_REF`](gateway_proto::page::STALE_REF), and nothing similar is
//!   ever retargeted.
//! - **Visible** means rendered (not `display:none`, not `visibility:hidden`, not under
//!   `content-visibility:hidden`), at least 2x2 CSS pixels, reachable by scrolling, and not in an
//!   `aria-hidden="true"` or `inert` subtree; opacity is ignored (transparent inputs laid over
//!   styled ones are real targets). Beyond [`MAX_ELEMENTS`](gateway_proto::page::MAX_ELEMENTS),
//!   elements in the viewport come first, then the nearest; the chosen ones are listed in
//!   document order.
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
//! The same contract without Chrome: [`fake`] (the fake browser provider, docs/screens.md#browser-providers)
//! shares the validation, step planning, failure messages and snapshot bounds of this module.
//!
//! It leaves to others: starting Chrome and its CDP connection ([`crate::browser`]), leases,
//! fences and the refusal streak ([`crate::screens`], [`crate::ops`]), and the wire types and
//! their validation ([`gateway_proto::page`]).

mod cdp;
pub mod fake;
mod keys;
mod marks;
mod seal;
mod snapshot;
mod steps;

use std::collections::{HashMap, HashSet};
use std::fmt::{Debug, Write as _};
use std::time::Duration;

use gateway_proto::page::{validate_url, Snapshot, NOT_SETTLED, NO_TAB};
use gateway_proto::{ErrorCode, OpError};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::browser::CdpClient;
use cdp::CdpError;
pub use marks::{PageMarks, ScreenMark, View};

/// The helper evaluated in every isolated world.
const HELPER: &str = include_str!("page.js");

/// How long `Page.navigate` may take until the navigation commits (docs/screens.md#page-browser).
pub const NAVIGATION_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a committed document may take to become interactive (docs/screens.md#page-browser).
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long after an act's last step a navigation it caused may take to start.
pub const ACT_SETTLE: Duration = Duration::from_millis(50);
/// Longest wait for one tab's visibility probe; a tab that does not answer is not chosen.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// The budget of a whole snapshot serialized as JSON (about 4,000 tokens): the text is cut
/// (below [`MAX_TEXT_CHARS`](gateway_proto::page::MAX_TEXT_CHARS)) to stay within it whenever
/// the elements leave room.
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
    /// The browser's tabs, followed from its target events.
    targets: cdp::TargetWatch,
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

// ---------------------------------------------------------------- helper arguments and results

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
    /// With a single tab and its world in place, this is one CDP round trip: the tab comes from
    /// the target events, its visibility back with the snapshot.
    pub async fn snapshot(&mut self, browser: &CdpClient) -> Result<Snapshot, OpError> {
        let (target, probed) = self.select_tab(browser, true).await?;
        let result = self.snapshot_tab(&target, !probed).await;
        if probed || result.is_ok() {
            return result;
        }
        // The only tab the events reported, taken unprobed, is hidden or gone: a tab opened or
        // closed a moment ago may not have been reported yet. Ask the browser; if it knows
        // other tabs than the events did, choose again among them.
        if self.resync_targets().await? {
            let (target, probed) = self.select_tab(browser, false).await?;
            return self.snapshot_tab(&target, !probed).await;
        }
        result
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

    // ------------------------------------------------------------ connection, tabs, worlds

    /// The cached connection, replaced (with a fresh tab cache, following the new browser's
    /// targets) when `browser` is another browser's; fails when the browser is gone.
    async fn connection(&mut self, browser: &CdpClient) -> Result<&mut Conn, OpError> {
        if browser.is_closed() {
            self.conn = None;
            return Err(OpError::new(ErrorCode::Failed, chain(&CdpError::Closed)));
        }
        if !self.conn.as_ref().is_some_and(|c| c.cdp.is(browser)) {
            if self.conn.is_some() {
                self.browser_restarted();
            }
            let cdp = cdp::Connection::new(browser.clone());
            let targets = match cdp.watch_targets().await {
                Ok(t) => t,
                Err(e) => return Err(self.failed("follow tabs", e)),
            };
            self.conn = Some(Conn {
                cdp,
                targets,
                tabs: HashMap::new(),
            });
        }
        match self.conn.as_mut() {
            Some(conn) => Ok(conn),
            None => Err(OpError::new(ErrorCode::Failed, "no cdp connection")),
        }
    }

    /// Replaces the tabs the target events reported with the browser's own list; true when
    /// that changed them.
    async fn resync_targets(&mut self) -> Result<bool, OpError> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(false);
        };
        let ids = |pages: Vec<cdp::PageTarget>| {
            let mut ids: Vec<String> = pages.into_iter().map(|t| t.id).collect();
            ids.sort_unstable();
            ids
        };
        let before = conn.targets.pages().map(ids);
        let resynced = conn.targets.resync(&conn.cdp).await;
        let after = conn.targets.pages().map(ids);
        match (resynced, before, after) {
            (Ok(()), Ok(before), Ok(after)) => Ok(before != after),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => Err(self.failed("list tabs", e)),
        }
    }

    /// The single focused visible tab, else the single visible tab, else [`NO_TAB`], among the
    /// tabs the target events reported (no round trip); when that finds none, once more among
    /// the browser's own list if that differs. With `unprobed_single`, a browser with one tab
    /// returns it without asking whether it is visible (`false` in the result): the caller
    /// must check.
    async fn select_tab(
        &mut self,
        browser: &CdpClient,
        unprobed_single: bool,
    ) -> Result<(String, bool), OpError> {
        let chosen = self.choose_tab(browser, unprobed_single).await;
        match chosen {
            Err(e) if e.message == NO_TAB && self.resync_targets().await? => {
                self.choose_tab(browser, unprobed_single).await
            }
            other => other,
        }
    }

    /// [`PageBrowser::select_tab`] among the tabs known now.
    async fn choose_tab(
        &mut self,
        browser: &CdpClient,
        unprobed_single: bool,
    ) -> Result<(String, bool), OpError> {
        let conn = self.connection(browser).await?;
        let targets = match conn.targets.pages() {
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

#[cfg(test)]
mod tests;
