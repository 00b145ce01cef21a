//! Per-bot desktops: one X server (Xvnc, which also serves the desktop's RFB socket) and one
//! Chrome per bot, and the two desktop tools.
//!
//! [`Screens`] owns the slot table ([`slots`]), the live desktops and each bot's
//! repeated-action streak ([`refusal`]). It starts a desktop lazily on a bot's first graphical
//! call, tears it down in the order of docs/screens.md#teardown (clients, then Chrome, then the X
//! server and its lock and socket) and runs computer_observe and computer_act on it with the
//! in-process X clients of [`crate::display`]. Lease fences are checked by [`crate::ops`] before
//! any call reaches this module.

mod actions;
pub mod frames;
pub mod observe;
pub mod recorder;
pub mod refusal;
mod sessions;
pub mod slots;
mod spare;

use crate::browser::{ensure_profile_dir, Browser, BrowserOptions, CdpClient};
use crate::display::{
    self, Capturer, Clock, DisplayError, DisplayNum, Input, Settler, WindowControl, XServer,
    XServerOptions,
};
use crate::pagebrowser::PageBrowser;
use actions::run_batch;
use gateway_proto::desktop::{
    validate_actions, validate_frame, validate_observe, ActOutcome, Action, FrameSize,
    ObserveOptions, ScreenInfo,
};
use gateway_proto::{BotId, ErrorCode, OpError};
use refusal::{RefusalStreak, REFUSAL_MESSAGE};
pub use sessions::BrowserProvider;
use slots::{Claim, ClaimError, SlotTable};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;
use tracing::{info, warn};

/// How many display numbers past its slot's a desktop may land on when another process (another
/// local computer on the same host) holds the slot's own number.
const DISPLAY_PROBES: u16 = 64;
/// Settling after actions when `settle_ms` is not given: the first damage after the input
/// within this long (else the screen is taken as unchanged)...
const SETTLE_FIRST_DAMAGE: Duration = display::settle::DEFAULT_FIRST_DAMAGE;
/// ...then no damage for this long...
const SETTLE_QUIET: Duration = display::settle::DEFAULT_QUIET;
/// ...all capped at this.
const SETTLE_CAP: Duration = display::settle::DEFAULT_CAP;

/// What desktops need from the guest's configuration.
#[derive(Debug, Clone)]
pub struct ScreensConfig {
    /// The computer's home (profiles live under `.browser-profiles/`).
    pub home: PathBuf,
    /// A private 0700 directory for X cookies and logs.
    pub runtime_dir: PathBuf,
    /// `SANDBOX_TEAM_SCREEN_LIMIT`.
    pub limit: Option<u32>,
    /// The Chromium executable.
    pub chromium: PathBuf,
    /// Chrome's device scale factor (`RAKAZO_BROWSER_SCALE`; `None`: the display's, 1 on Xvnc).
    pub device_scale: Option<f64>,
}

/// Ends a bot's live capabilities (the screen gateway) before its desktop stops
/// (docs/screens.md#teardown).
pub trait CapabilityRevoker: Send + Sync {
    /// Revokes every capability of `bot`: mappings, clients, servers, sockets.
    fn revoke_all<'a>(&'a self, bot: &'a BotId) -> futures_util::future::BoxFuture<'a, ()>;
}

/// Numbers every desktop start, so a capability made for one desktop is never served by the
/// next one on the same display.
static NEXT_EPOCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A bot's live desktop, locked: nothing tears it down while this is held.
pub struct LiveScreen {
    desktop: tokio::sync::OwnedMutexGuard<Desktop>,
}

impl LiveScreen {
    /// Whether its X server still runs (it may have died since the desktop was looked up).
    pub fn display_alive(&mut self) -> bool {
        self.desktop.xserver.is_alive()
    }

    /// The desktop's X display.
    pub fn display(&self) -> DisplayNum {
        self.desktop.xserver.display()
    }

    /// The display's cookie file.
    pub fn xauthority(&self) -> &std::path::Path {
        self.desktop.xserver.xauthority()
    }

    /// The display's RFB socket (Xvnc's, 0600 in the private runtime directory), which the
    /// screen gateway relays its view and control capabilities to.
    pub fn rfb_socket(&self) -> Option<&std::path::Path> {
        self.desktop.xserver.rfb_socket()
    }

    /// The display's number and cookie, for X connections of its own (tests, benchmarks).
    pub fn access(&self) -> display::DisplayAccess {
        self.desktop.xserver.access().clone()
    }

    /// Round trips the desktop's input and settle clients have waited for so far, as (input
    /// syncs, settler arms), for tests and benchmarks: an act of input alone adds one of each,
    /// however many actions it has.
    pub fn act_round_trips(&self) -> (u64, u64) {
        (
            self.desktop.input.syncs(),
            self.desktop.settler.round_trips(),
        )
    }

    /// Which start of the desktop this is (a restarted display gets a new epoch).
    pub fn epoch(&self) -> u64 {
        self.desktop.epoch
    }
}

/// One live desktop.
struct Desktop {
    slot: u32,
    /// From `NEXT_EPOCH` at start.
    epoch: u64,
    /// Set when its teardown begins: it is no longer live.
    released: bool,
    xserver: XServer,
    browser: Option<Browser>,
    capturer: Capturer,
    input: Input,
    settler: Settler,
    windows: WindowControl,
    /// Processes started by `launch` on this display, ended at teardown.
    launched: Vec<tokio::process::Child>,
    /// The frame last sent to the bot (the base of its next changed regions).
    last_sent: Option<observe::Sent>,
    streak: RefusalStreak,
    /// The page tools' state for this bot's browser (refs, isolated worlds).
    page: PageBrowser,
    /// The spare profile its Chrome runs on, when it was a warm pool's spare desktop
    /// (`spare`): the bot's once that Chrome closes.
    spare_profile: Option<PathBuf>,
}

/// All desktops of this computer.
pub struct Screens {
    cfg: ScreensConfig,
    clock: Clock,
    slots: std::sync::Mutex<SlotTable>,
    desktops: Mutex<HashMap<BotId, Arc<Mutex<Desktop>>>>,
    /// The screen gateway, revoked first at every teardown.
    revoker: std::sync::Mutex<Option<std::sync::Weak<dyn CapabilityRevoker>>>,
    /// When each bot last used its desktop (a graphical call: ensure, observe, act, the page
    /// tools; a person watching is not the bot using it), on the monotonic clock (a step of
    /// the wall clock must not reorder them): [`ScreenInfo::idle_ms`], by which eviction picks.
    used: std::sync::Mutex<HashMap<BotId, std::time::Instant>>,
    /// The screen recorders (docs/recordings.md).
    recorders: recorder::Recorders,
    /// A warm pool member's spare desktop, which the first bot to ask for a screen takes
    /// (`spare`).
    spare: Mutex<Option<Desktop>>,
    /// What serves the page tools (`sessions`).
    provider: BrowserProvider,
    /// The bots' page sessions when the provider has no desktop (`sessions`).
    sessions: sessions::Sessions,
}

fn op_err(code: ErrorCode, e: impl std::fmt::Display) -> OpError {
    OpError::new(code, e.to_string())
}

fn failed(e: impl std::fmt::Display) -> OpError {
    op_err(ErrorCode::Failed, e)
}

impl Screens {
    pub fn new(cfg: ScreensConfig, clock: Clock) -> Self {
        let slots = std::sync::Mutex::new(SlotTable::new(cfg.limit));
        Self {
            cfg,
            clock,
            slots,
            desktops: Mutex::new(HashMap::new()),
            revoker: std::sync::Mutex::new(None),
            used: std::sync::Mutex::new(HashMap::new()),
            recorders: recorder::Recorders::default(),
            spare: Mutex::new(None),
            provider: BrowserProvider::Chrome,
            sessions: sessions::Sessions::default(),
        }
    }

    /// The screen recorders, which the screen gateway gives a person's inputs to.
    pub fn recorders(&self) -> &recorder::Recorders {
        &self.recorders
    }

    /// recording_pull: the bot's recording since `req.after`, its recorder started when none
    /// records its live desktop. Never starts a desktop, nor counts as the bot's use of it.
    pub async fn recording_pull(
        &self,
        req: &gateway_proto::recording::RecordingPull,
    ) -> Result<(gateway_proto::recording::RecordingChunk, Vec<u8>), OpError> {
        let Some(live) = self.live(&req.bot).await else {
            return Err(op_err(
                ErrorCode::NotFound,
                format!("bot {} has no live desktop to record", req.bot),
            ));
        };
        let (access, epoch) = (live.access(), live.epoch());
        drop(live);
        tokio::task::block_in_place(|| self.recorders.pull(req, access, epoch))
    }

    /// The settings this was made with.
    pub fn config(&self) -> &ScreensConfig {
        &self.cfg
    }

    /// Registers what revokes a bot's capabilities before its desktop is torn down.
    pub fn set_revoker(&self, revoker: std::sync::Weak<dyn CapabilityRevoker>) {
        *self.revoker.lock().unwrap_or_else(|e| e.into_inner()) = Some(revoker);
    }

    async fn revoke_capabilities(&self, bot: &BotId) {
        let revoker = self
            .revoker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(std::sync::Weak::upgrade);
        if let Some(r) = revoker {
            r.revoke_all(bot).await;
        }
    }

    /// The bot used its desktop now.
    fn touch(&self, bot: &BotId) {
        let now = self.clock.now();
        self.used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(bot.clone(), now);
    }

    /// Sets each screen's `idle_ms`: milliseconds since its bot last used its desktop
    /// (`u64::MAX` if it never did), all read at one instant, so that they order the screens
    /// as eviction must even when listing them waited on a busy desktop in between.
    fn set_idle(&self, screens: &mut [ScreenInfo]) {
        let used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.clock.now();
        for s in screens {
            s.idle_ms = used.get(&s.bot).map_or(u64::MAX, |at| {
                let idle = now.saturating_duration_since(*at);
                u64::try_from(idle.as_millis()).unwrap_or(u64::MAX)
            });
        }
    }

    /// The bot's desktop if it is live (its X server running), locked; never starts one.
    pub async fn live(&self, bot: &BotId) -> Option<LiveScreen> {
        let desktop = self.desktops.lock().await.get(bot).cloned()?;
        let mut d = desktop.lock_owned().await;
        (!d.released && d.xserver.is_alive()).then_some(LiveScreen { desktop: d })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, SlotTable> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live desktops.
    pub async fn list(&self) -> Vec<ScreenInfo> {
        let desktops = self.desktops.lock().await;
        let mut out = Vec::new();
        for (bot, d) in desktops.iter() {
            let d = d.lock().await;
            out.push(info_of(bot, &d, false));
        }
        self.set_idle(&mut out);
        out.sort_by_key(|s| s.slot);
        out
    }

    /// Starts the bot's desktop if needed (and restarts a crashed Chrome or X server).
    pub async fn ensure(&self, bot: &BotId) -> Result<ScreenInfo, OpError> {
        let (desktop, started) = self.desktop(bot).await?;
        let d = desktop.lock().await;
        Ok(info_of(bot, &d, started))
    }

    /// The bot's desktop, started or repaired as needed.
    async fn desktop(&self, bot: &BotId) -> Result<(Arc<Mutex<Desktop>>, bool), OpError> {
        self.no_desktop()?;
        self.touch(bot);
        let claim = self.table().claim(bot);
        let claim = match claim {
            Ok(c) => c,
            Err(ClaimError::Releasing(_)) => {
                return Err(op_err(
                    ErrorCode::ScreenReleasing,
                    format!("the screen of bot {bot} is still being released"),
                ))
            }
            Err(ClaimError::NeedsTeardown(_)) => {
                // A failed teardown keeps the slot: retry it, then claim again.
                self.release(bot).await?;
                self.table().claim(bot).map_err(|_| {
                    op_err(
                        ErrorCode::ScreenReleasing,
                        format!("the screen of bot {bot} is still being released"),
                    )
                })?
            }
            Err(ClaimError::Unavailable { limit }) => return Err(unavailable(limit)),
        };
        match claim {
            Claim::Existing(_) => {
                let existing = self.desktops.lock().await.get(bot).cloned();
                match existing {
                    Some(d) => {
                        let repaired = self.repair(bot, &d).await?;
                        Ok((d, repaired))
                    }
                    // Claimed by a start still in progress on another call: wait for it.
                    None => Err(op_err(
                        ErrorCode::ScreenReleasing,
                        format!("the screen of bot {bot} is starting; try again"),
                    )),
                }
            }
            Claim::New(slot) => {
                // A warm pool member's spare desktop, if it has one; else a cold start.
                let started = match self.take_spare(bot, slot).await {
                    Some(d) => Ok(d),
                    None => self.start(bot, slot).await,
                };
                match started {
                    Ok(d) => {
                        let d = Arc::new(Mutex::new(d));
                        self.desktops.lock().await.insert(bot.clone(), d.clone());
                        Ok((d, true))
                    }
                    Err(e) => {
                        self.table().abandon(slot);
                        Err(e)
                    }
                }
            }
        }
    }

    /// Starts the X server (Xvnc), the X clients and Chrome for a new slot.
    async fn start(&self, bot: &BotId, slot: u32) -> Result<Desktop, OpError> {
        let mut desktop = self.start_display(bot.as_str(), slot).await?;
        if let Err(e) = self.start_browser(bot, &mut desktop).await {
            let _ = desktop.xserver.stop().await;
            return Err(e);
        }
        info!(bot = %bot, slot, display = desktop.xserver.display().get(), "desktop started");
        Ok(desktop)
    }

    /// Starts the X server (Xvnc) and the X clients for `slot`, for `bot` (a name for messages).
    async fn start_display(&self, bot: &str, slot: u32) -> Result<Desktop, OpError> {
        let base = DisplayNum::for_slot(slot).map_err(failed)?.get();
        let mut last_err = None;
        let mut xserver = None;
        for n in base..base.saturating_add(DISPLAY_PROBES) {
            let Some(num) = DisplayNum::new(n) else { break };
            match XServer::start(num, &self.cfg.runtime_dir, &XServerOptions::default()).await {
                Ok(x) => {
                    xserver = Some(x);
                    break;
                }
                // Another computer on this host holds that number: try the next one.
                Err(e @ (DisplayError::InUse { .. } | DisplayError::SocketInUse { .. })) => {
                    last_err = Some(e)
                }
                Err(e) => return Err(failed(format!("start the display of bot {bot}: {e}"))),
            }
        }
        let mut xserver = xserver.ok_or_else(|| {
            failed(format!(
                "no free display for bot {bot}: {}",
                last_err.map(|e| e.to_string()).unwrap_or_default()
            ))
        })?;
        let clients = (|| -> Result<_, DisplayError> {
            let access = xserver.access();
            Ok((
                Capturer::new(access)?,
                Input::new(access, self.clock.clone())?,
                Settler::new(access, self.clock.clone())?,
                WindowControl::new(access)?,
            ))
        })();
        let (capturer, input, settler, windows) = match clients {
            Ok(c) => c,
            Err(e) => {
                let _ = xserver.stop().await;
                return Err(failed(format!("connect to the display of bot {bot}: {e}")));
            }
        };
        Ok(Desktop {
            slot,
            epoch: NEXT_EPOCH.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            released: false,
            xserver,
            browser: None,
            capturer,
            input,
            settler,
            windows,
            launched: Vec::new(),
            last_sent: None,
            streak: RefusalStreak::default(),
            page: PageBrowser::new(),
            spare_profile: None,
        })
    }

    /// Starts `bot`'s Chrome on its profile (a spare profile its desktop ran on becomes it).
    async fn start_browser(&self, bot: &BotId, d: &mut Desktop) -> Result<(), OpError> {
        self.settle_profile(bot, d);
        let profile = ensure_profile_dir(&self.cfg.home, bot).map_err(failed)?;
        self.start_browser_on(bot.as_str(), d, profile).await
    }

    /// Starts Chrome on `d`'s display with `profile`, for `bot` (a name for messages).
    async fn start_browser_on(
        &self,
        bot: &str,
        d: &mut Desktop,
        profile: PathBuf,
    ) -> Result<(), OpError> {
        let mut opts = BrowserOptions::new(
            profile,
            self.cfg.home.clone(),
            d.xserver.display_env(),
            d.xserver.xauthority().to_path_buf(),
            self.cfg.runtime_dir.clone(),
        );
        opts.chromium = self.cfg.chromium.clone();
        opts.device_scale_percent = self.cfg.device_scale.map(|f| (f * 100.0).round() as u16);
        let browser = Browser::start(&opts)
            .await
            .map_err(|e| failed(format!("start the browser of bot {bot}: {e}")))?;
        d.browser = Some(browser);
        Ok(())
    }

    /// Restarts what crashed: the whole desktop if the X server died, Chrome if only it died.
    async fn repair(&self, bot: &BotId, desktop: &Arc<Mutex<Desktop>>) -> Result<bool, OpError> {
        let mut d = desktop.lock().await;
        if !d.xserver.is_alive() {
            warn!(bot = %bot, "the display died; starting it again");
            let slot = d.slot;
            if let Some(mut b) = d.browser.take() {
                let _ = b.stop().await;
            }
            let _ = d.xserver.stop().await;
            *d = self.start(bot, slot).await?;
            return Ok(true);
        }
        if d.browser.is_none() {
            // Closed on purpose by `quiesce_browsers` (a home export or import). The desktop is
            // the same one (display, slot, profile) and Chrome reopens its last session, so this
            // is not reported as a new desktop; page refs are invalidated all the same.
            info!(bot = %bot, "starting the browser again after a quiesce");
            self.start_browser(bot, &mut d).await?;
            d.page.browser_restarted();
            return Ok(false);
        }
        if !d.browser.as_mut().is_some_and(Browser::is_alive) {
            warn!(bot = %bot, "the browser is not running; starting it again");
            if let Some(mut b) = d.browser.take() {
                let _ = b.stop().await;
            }
            self.start_browser(bot, &mut d).await?;
            d.page.browser_restarted();
            return Ok(true);
        }
        Ok(false)
    }

    /// Every live desktop, copied out so the map's lock is not held while each is worked on.
    async fn all_desktops(&self) -> Vec<(BotId, Arc<Mutex<Desktop>>)> {
        self.desktops
            .lock()
            .await
            .iter()
            .map(|(bot, d)| (bot.clone(), d.clone()))
            .collect()
    }

    /// Closes every bot's Chrome with the docs/screens.md#chrome stop (`Browser.close` first, which
    /// flushes cookies and profile databases), keeping the X servers; each browser starts again on
    /// [`Screens::resume_browsers`] (after an export) or its bot's next graphical call (see `repair`).
    /// Used before a home export or import.
    pub async fn quiesce_browsers(&self) {
        for (bot, desktop) in self.all_desktops().await {
            let mut d = desktop.lock().await;
            let Some(mut browser) = d.browser.take() else {
                continue;
            };
            match browser.stop().await {
                Ok(outcome) => {
                    info!(bot = %bot, ?outcome, "browser quiesced");
                    self.settle_profile(&bot, &mut d);
                }
                // Stop kills the group as a last resort; an error here means it could not even
                // do that. Keep the handle so the next call repairs it.
                Err(e) => {
                    warn!(bot = %bot, error = %e, "browser did not stop for a quiesce");
                    d.browser = Some(browser);
                }
            }
            d.page.browser_restarted();
        }
    }

    /// Starts again every browser [`Screens::quiesce_browsers`] closed (after an export), so
    /// a person watching sees the bot's pages again without waiting for its next graphical call.
    /// A browser that does not start is logged and left for that call to repair.
    pub async fn resume_browsers(&self) {
        for (bot, desktop) in self.all_desktops().await {
            let mut d = desktop.lock().await;
            // Only a live desktop whose browser was closed for the quiesce: one released in the
            // meantime must stay down (its slot may already be another bot's), and a dead
            // display is left to the repair of the bot's next call.
            if d.released || d.browser.is_some() || !d.xserver.is_alive() {
                continue;
            }
            match self.start_browser(&bot, &mut d).await {
                Ok(()) => {
                    d.page.browser_restarted();
                    info!(bot = %bot, "browser started again after a quiesce");
                }
                Err(e) => {
                    warn!(bot = %bot, error = %e, "browser did not start again after a quiesce")
                }
            }
        }
    }

    /// The CDP connection of the bot's browser, started or repaired as needed.
    fn cdp_of(d: &Desktop) -> Result<CdpClient, OpError> {
        d.browser
            .as_ref()
            .map(Browser::cdp)
            .ok_or_else(|| failed("the browser is not running"))
    }

    /// Tears a bot's desktop down in the contract's order. Releasing a bot without a desktop
    /// succeeds.
    pub async fn release(&self, bot: &BotId) -> Result<(), OpError> {
        self.end_session(bot).await;
        let Some(slot) = self.table().begin_release(bot) else {
            return match self.table().slot_of(bot) {
                Some(_) => Err(op_err(
                    ErrorCode::ScreenReleasing,
                    format!("the screen of bot {bot} is still being released"),
                )),
                None => Ok(()),
            };
        };
        let desktop = self.desktops.lock().await.remove(bot);
        self.recorders.stop(bot);
        let ok = match desktop {
            Some(d) => {
                let mut d = d.lock().await;
                // Teardown order: the capabilities go first, while Chrome and X still run. The
                // desktop is locked, so no connection can be opened to it in between.
                d.released = true;
                self.revoke_capabilities(bot).await;
                let ok = teardown(bot, &mut d).await;
                self.settle_profile(bot, &mut d);
                ok
            }
            None => {
                self.revoke_capabilities(bot).await;
                true
            }
        };
        self.table().finish_release(slot, ok);
        if ok {
            info!(bot = %bot, slot, "desktop released");
            Ok(())
        } else {
            Err(failed(format!(
                "teardown of the desktop of bot {bot} failed; its slot stays reserved"
            )))
        }
    }

    /// Tears every desktop down (guest shutdown, computer stop): browsers flush their profiles.
    pub async fn shutdown(&self) {
        let bots: Vec<BotId> = self.desktops.lock().await.keys().cloned().collect();
        let all = bots.iter().map(|b| self.release(b));
        for r in futures_util::future::join_all(all).await {
            if let Err(e) = r {
                warn!(error = %e, "desktop teardown at shutdown failed");
            }
        }
        self.discard_spare().await;
        self.end_sessions().await;
    }

    /// Resets the bot's repeated-action streak (a successful browser_navigate or browser_act).
    pub async fn reset_streak(&self, bot: &BotId) {
        if let Some(d) = self.desktops.lock().await.get(bot).cloned() {
            d.lock().await.streak.reset();
        }
    }

    /// computer_act: validates the whole batch, applies the refusal rule, runs the actions in
    /// order (pointer coordinates in `frame`'s space when given, else screen pixels), settles,
    /// and observes if asked.
    pub async fn act(
        &self,
        bot: &BotId,
        actions: &[Action],
        observe: Option<ObserveOptions>,
        settle_ms: Option<u32>,
        frame: Option<FrameSize>,
        now_ms: impl Fn() -> i64,
    ) -> Result<(ActOutcome, Option<observe::Taken>), OpError> {
        validate_actions(actions, settle_ms)?;
        if let Some(f) = &frame {
            validate_frame(f)?;
        }
        if let Some(o) = &observe {
            validate_observe(o)?;
        }
        let (desktop, _) = self.desktop(bot).await?;
        let mut d = desktop.lock().await;
        if d.streak.should_refuse(actions) {
            return Err(op_err(ErrorCode::ActionRefused, REFUSAL_MESSAGE));
        }
        let before = capture_now(&mut d)?;
        let screen = FrameSize {
            width: u16::try_from(before.width).unwrap_or(u16::MAX),
            height: u16::try_from(before.height).unwrap_or(u16::MAX),
        };
        let space = actions::Space { frame, screen };
        for a in actions {
            let input = recorder::Input::of_action(a, |x, y| space.point(x, y));
            self.recorders.input(bot, input);
        }
        let armed = match run_batch(self, bot, &mut d, actions, settle_ms.is_none(), space).await {
            Ok(armed) => armed,
            Err((index, e)) => {
                // Counted as the contract expands the batch (a double click is two clicks).
                let completed = completed_count(&actions[..index]);
                return Err(OpError::new(
                    e.code,
                    format!(
                        "action {} failed after {completed} completed: {}",
                        completed + 1,
                        e.message
                    ),
                ));
            }
        };
        let completed = completed_count(actions);
        let (settled_ms, settled) = match settle_ms {
            Some(ms) => {
                tokio::time::sleep(Duration::from_millis(u64::from(ms))).await;
                (ms, true)
            }
            None => {
                let outcome = tokio::task::block_in_place(|| {
                    if armed {
                        // The quiet period starts with the first damage after the input.
                        d.settler
                            .wait_after_input(SETTLE_FIRST_DAMAGE, SETTLE_QUIET, SETTLE_CAP)
                    } else {
                        // Only waits: nothing was sent whose drawing to wait for.
                        d.settler.wait(SETTLE_QUIET, SETTLE_CAP)
                    }
                })
                .map_err(failed)?;
                (
                    u32::try_from(outcome.waited.as_millis()).unwrap_or(u32::MAX),
                    outcome.settled,
                )
            }
        };
        let after = capture_now(&mut d)?;
        d.streak.record(actions, after == before);
        let observation = match observe {
            Some(options) => Some(observe::observe_frame(&mut d, after, &options, now_ms()).await?),
            None => None,
        };
        Ok((
            ActOutcome {
                completed,
                settled_ms,
                settled,
            },
            observation,
        ))
    }
}

fn unavailable(limit: u32) -> OpError {
    op_err(
        ErrorCode::ScreenUnavailable,
        format!("This computer cannot allocate another screen (limit {limit})"),
    )
}

fn info_of(bot: &BotId, d: &Desktop, started: bool) -> ScreenInfo {
    ScreenInfo {
        bot: bot.clone(),
        slot: d.slot,
        display: d.xserver.display().get(),
        width: 1280,
        height: 800,
        browser_pid: d.browser.as_ref().and_then(|b| u32::try_from(b.pid()).ok()),
        started,
        idle_ms: 0,
    }
}

/// Teardown in the contract's order; true when everything stopped.
async fn teardown(bot: &BotId, d: &mut Desktop) -> bool {
    // View and control capabilities and the terminals were revoked by the caller (`release`);
    // then Chrome (Browser.close flushes cookies), then launched programs, then the X server.
    let mut ok = true;
    if let Some(mut b) = d.browser.take() {
        if let Err(e) = b.stop().await {
            warn!(bot = %bot, error = %e, "browser stop failed");
            ok = false;
        }
    }
    for mut child in d.launched.drain(..) {
        if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = child.wait().await;
    }
    if let Err(e) = d.xserver.stop().await {
        warn!(bot = %bot, error = %e, "display stop failed");
        ok = false;
    }
    ok
}

/// What `act` counts as completed for these actions (a double click is two clicks).
fn completed_count(actions: &[Action]) -> u32 {
    actions
        .iter()
        .map(|a| match a {
            Action::Click { double: true, .. } | Action::ClickRef { double: true, .. } => 2,
            _ => 1,
        })
        .sum()
}

/// The screen's pixels now. `act` compares two of these for the refusal rule: identical pixels
/// are an identical frame (the PNG encoding is deterministic), without encoding either.
fn capture_now(d: &mut Desktop) -> Result<display::Frame, OpError> {
    tokio::task::block_in_place(|| d.capturer.capture()).map_err(failed)
}

#[cfg(test)]
mod idle_tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    fn screen(bot: &BotId) -> ScreenInfo {
        ScreenInfo {
            bot: bot.clone(),
            slot: 0,
            display: 101,
            width: 1280,
            height: 800,
            browser_pid: None,
            started: false,
            idle_ms: 0,
        }
    }

    /// Every read of this clock is a second later than the previous one: idle times read at
    /// different instants would reorder the screens.
    #[test]
    fn idle_times_are_read_at_one_instant_and_keep_the_order_of_use() {
        let base = crate::clock::monotonic().now();
        let ticks = Arc::new(AtomicU64::new(0));
        let clock = {
            let ticks = ticks.clone();
            Clock::new(move || base + Duration::from_secs(ticks.fetch_add(1, Ordering::SeqCst)))
        };
        let screens = Screens::new(
            ScreensConfig {
                home: PathBuf::from("/nonexistent"),
                runtime_dir: PathBuf::from("/nonexistent"),
                limit: None,
                chromium: PathBuf::from("/nonexistent"),
                device_scale: None,
            },
            clock,
        );
        let (old, mid, never) = (
            BotId::new("bot-old").unwrap(),
            BotId::new("bot-mid").unwrap(),
            BotId::new("bot-never").unwrap(),
        );
        screens.touch(&old);
        screens.touch(&mid);
        let mut list = vec![screen(&old), screen(&mid), screen(&never)];
        screens.set_idle(&mut list);
        assert_eq!(list[0].idle_ms, 2000, "touched at 0 s, read at 2 s");
        assert_eq!(
            list[1].idle_ms, 1000,
            "touched at 1 s, read at the same 2 s"
        );
        assert_eq!(list[2].idle_ms, u64::MAX, "never used");
    }
}
