//! The browser providers (docs/screens.md#browser-providers): what serves a bot's page tools.
//!
//! - `chrome` (the default): the bot's desktop Chrome, on its own X server, with its persistent
//!   logged-in profile; the desktop tools see the same browser.
//! - `emulator`: an in-process session per bot on a **headless** Chromium, on a temporary profile
//!   of its own (never the bot's logged-in profile) in the private runtime directory, driven by
//!   the same CDP page browser ([`PageBrowser`]), so the page tools behave as on `chrome`. No X
//!   server is started.
//! - `fake`: an in-process session per bot with no browser at all ([`FakePage`]): pages fetched
//!   over HTTP(S) and parsed in the guest; no JavaScript.
//!
//! With `emulator` or `fake` the computer has no desktops: the desktop tools (observe, act,
//! screen ensure, live views and terminals, which attach to a desktop) answer
//! [`ErrorCode::Unsupported`] naming the provider (recordings find no desktop to record),
//! and a warm pool's prewarm has nothing to start. Sessions count against the screen limit like
//! desktops, end with the bot's screen release and at shutdown, and a session whose headless
//! browser died is started again (its refs stale) on the bot's next call; a snapshot or
//! navigate that finds it gone mid-call is retried once on the new one (an act is not: it may
//! have acted).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use gateway_proto::page::{validate_steps, validate_url, PageActFailure, PageStep, Snapshot};
use gateway_proto::{BotId, ErrorCode, OpError};
use tokio::sync::Mutex;
use tracing::{info, warn};

use super::{failed, unavailable, Screens};
use crate::browser::{Browser, BrowserOptions};
use crate::pagebrowser::fake::FakePage;
use crate::pagebrowser::PageBrowser;

/// How long a browser whose DevTools pipe closed gets to be seen exiting before it is started
/// again all the same.
const GONE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// What serves the page tools of every bot of this computer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BrowserProvider {
    /// The bot's desktop Chrome.
    #[default]
    Chrome,
    /// Headless Chromium per bot, on a temporary profile; no desktop.
    Emulator,
    /// No browser: pages fetched and parsed in the guest, no JavaScript; no desktop.
    Fake,
}

impl BrowserProvider {
    /// `chrome`, `emulator` or `fake`.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value.trim() {
            "chrome" => Ok(Self::Chrome),
            "emulator" => Ok(Self::Emulator),
            "fake" => Ok(Self::Fake),
            other => Err(format!(
                "unknown browser provider {other:?}; expected chrome, emulator or fake"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chrome => "chrome",
            Self::Emulator => "emulator",
            Self::Fake => "fake",
        }
    }

    /// Whether bots get desktops (an X server, the desktop tools).
    pub fn has_desktop(self) -> bool {
        self == Self::Chrome
    }
}

/// One bot's in-process page session.
enum Session {
    Emulator(Box<Emulated>),
    Fake(Box<FakePage>),
}

/// An emulator session: a headless browser and the page tools' state for it.
struct Emulated {
    browser: Browser,
    page: PageBrowser,
    /// The temporary profile, removed when the session ends.
    profile: PathBuf,
}

/// The bots' sessions (emulator and fake providers). A bot's entry is `None` while its session
/// starts or after a start failed.
#[derive(Default)]
pub(super) struct Sessions {
    map: Mutex<HashMap<BotId, Arc<Mutex<Option<Session>>>>>,
}

impl Screens {
    /// Sets what serves the page tools ([`BrowserProvider::Chrome`] unless set).
    pub fn with_browser_provider(mut self, provider: BrowserProvider) -> Self {
        self.provider = provider;
        self
    }

    /// What serves the page tools.
    pub fn browser_provider(&self) -> BrowserProvider {
        self.provider
    }

    /// The refusal of a desktop tool (observe, act, screen ensure, a live view's or terminal's
    /// capability) on a computer whose browser provider has no desktop.
    pub fn no_desktop(&self) -> Result<(), OpError> {
        if self.provider.has_desktop() {
            return Ok(());
        }
        Err(OpError::new(
            ErrorCode::Unsupported,
            format!(
                "this computer's browser provider ({}) has no desktop: only the page tools \
                 (browser_navigate, browser_snapshot, browser_act) are available",
                self.provider.as_str()
            ),
        ))
    }

    /// browser_snapshot.
    pub async fn page_snapshot(&self, bot: &BotId) -> Result<Snapshot, OpError> {
        if self.provider.has_desktop() {
            let (desktop, _) = self.desktop(bot).await?;
            let mut d = desktop.lock().await;
            let cdp = Self::cdp_of(&d)?;
            return d.page.snapshot(&cdp).await;
        }
        let entry = self.session(bot).await?;
        let mut s = entry.lock().await;
        match s.as_mut() {
            Some(Session::Emulator(e)) => {
                let result = e.page.snapshot(&e.browser.cdp()).await;
                if result.is_err() && self.restarted_after(bot, e).await? {
                    return e.page.snapshot(&e.browser.cdp()).await;
                }
                result
            }
            Some(Session::Fake(page)) => page.snapshot().await,
            None => Err(failed("the page session is not running")),
        }
    }

    /// browser_navigate: the URL is checked before anything starts; success resets the bot's
    /// repeated-action streak.
    pub async fn page_navigate(&self, bot: &BotId, url: &str) -> Result<Snapshot, OpError> {
        validate_url(url)?;
        if self.provider.has_desktop() {
            let (desktop, _) = self.desktop(bot).await?;
            let mut d = desktop.lock().await;
            let cdp = Self::cdp_of(&d)?;
            let snapshot = d.page.navigate(&cdp, url).await?;
            d.streak.reset();
            return Ok(snapshot);
        }
        let entry = self.session(bot).await?;
        let mut s = entry.lock().await;
        match s.as_mut() {
            Some(Session::Emulator(e)) => {
                let result = e.page.navigate(&e.browser.cdp(), url).await;
                if result.is_err() && self.restarted_after(bot, e).await? {
                    return e.page.navigate(&e.browser.cdp(), url).await;
                }
                result
            }
            Some(Session::Fake(page)) => page.navigate(url).await,
            None => Err(failed("the page session is not running")),
        }
    }

    /// browser_act: the batch is checked before anything starts; success resets the bot's
    /// repeated-action streak.
    pub async fn page_act(
        &self,
        bot: &BotId,
        steps: &[PageStep],
    ) -> Result<Result<Snapshot, PageActFailure>, OpError> {
        validate_steps(steps)?;
        if self.provider.has_desktop() {
            let (desktop, _) = self.desktop(bot).await?;
            let mut d = desktop.lock().await;
            let cdp = Self::cdp_of(&d)?;
            let result = d.page.act(&cdp, steps).await?;
            if result.is_ok() {
                d.streak.reset();
            }
            return Ok(result);
        }
        let entry = self.session(bot).await?;
        let mut s = entry.lock().await;
        match s.as_mut() {
            Some(Session::Emulator(e)) => e.page.act(&e.browser.cdp(), steps).await,
            Some(Session::Fake(page)) => page.act(steps).await,
            None => Err(failed("the page session is not running")),
        }
    }

    /// The bot's session, started (or its dead browser started again) as needed.
    async fn session(&self, bot: &BotId) -> Result<Arc<Mutex<Option<Session>>>, OpError> {
        let entry = {
            let mut map = self.sessions.map.lock().await;
            if !map.contains_key(bot) {
                if let Some(limit) = self.cfg.limit.filter(|&l| map.len() >= l as usize) {
                    return Err(unavailable(limit));
                }
            }
            map.entry(bot.clone()).or_default().clone()
        };
        let mut s = entry.lock().await;
        let dead = match s.as_mut() {
            Some(Session::Emulator(e)) => !e.browser.is_alive(),
            _ => false,
        };
        match s.as_mut() {
            Some(Session::Emulator(e)) if dead => self.restart(bot, e).await?,
            Some(_) => {}
            None if self.provider == BrowserProvider::Fake => {
                *s = Some(Session::Fake(Box::new(FakePage::new())));
                info!(bot = %bot, "fake page session started");
            }
            None => {
                let (browser, profile) = self.start_headless(bot).await?;
                info!(bot = %bot, pid = browser.pid(), "emulator page session started");
                *s = Some(Session::Emulator(Box::new(Emulated {
                    browser,
                    page: PageBrowser::new(),
                    profile,
                })));
            }
        }
        drop(s);
        Ok(entry)
    }

    /// Starts the session's browser again: the same page state (its ref counter goes on; the
    /// old refs are stale), a new browser on a new profile.
    async fn restart(&self, bot: &BotId, e: &mut Emulated) -> Result<(), OpError> {
        warn!(bot = %bot, "the headless browser is not running; starting it again");
        let _ = e.browser.stop().await;
        remove_profile(&e.profile);
        let (browser, profile) = self.start_headless(bot).await?;
        (e.browser, e.profile) = (browser, profile);
        e.page.browser_restarted();
        Ok(())
    }

    /// After a failed call: whether the session's browser went away meanwhile (its DevTools
    /// pipe closed), in which case it is started again for the caller to retry once. The pipe
    /// closes before the exit can be seen, so the exit gets [`GONE_WAIT`] to show.
    async fn restarted_after(&self, bot: &BotId, e: &mut Emulated) -> Result<bool, OpError> {
        if !e.browser.cdp().is_closed() {
            return Ok(false);
        }
        let deadline = tokio::time::Instant::now() + GONE_WAIT;
        while e.browser.is_alive() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        self.restart(bot, e).await?;
        Ok(true)
    }

    /// A headless browser on a fresh temporary profile: never the bot's logged-in one, removed
    /// when the session ends.
    async fn start_headless(&self, bot: &BotId) -> Result<(Browser, PathBuf), OpError> {
        let profile = self
            .cfg
            .runtime_dir
            .join(format!("emulator-{:016x}", rand::random::<u64>()));
        let mut opts = BrowserOptions::new(
            profile.clone(),
            self.cfg.home.clone(),
            String::new(),
            PathBuf::new(),
            self.cfg.runtime_dir.clone(),
        );
        opts.chromium = self.cfg.chromium.clone();
        opts.headless = true;
        opts.device_scale_percent = self.cfg.device_scale.map(|f| (f * 100.0).round() as u16);
        let browser = match Browser::start(&opts).await {
            Ok(b) => b,
            Err(e) => {
                remove_profile(&profile);
                return Err(failed(format!(
                    "start the headless browser of bot {bot}: {e}"
                )));
            }
        };
        Ok((browser, profile))
    }

    /// Ends the bot's session, if it has one.
    pub(super) async fn end_session(&self, bot: &BotId) {
        let entry = self.sessions.map.lock().await.remove(bot);
        if let Some(entry) = entry {
            if let Some(s) = entry.lock().await.take() {
                end(bot, s).await;
                info!(bot = %bot, "page session ended");
            }
        }
    }

    /// Ends every session (guest shutdown).
    pub(super) async fn end_sessions(&self) {
        let bots: Vec<BotId> = self.sessions.map.lock().await.keys().cloned().collect();
        for bot in bots {
            self.end_session(&bot).await;
        }
    }
}

async fn end(bot: &BotId, session: Session) {
    if let Session::Emulator(mut e) = session {
        if let Err(error) = e.browser.stop().await {
            warn!(bot = %bot, %error, "headless browser stop failed");
        }
        remove_profile(&e.profile);
    }
}

/// Removes a temporary profile and its browser's logs.
fn remove_profile(profile: &std::path::Path) {
    if let Err(e) = std::fs::remove_dir_all(profile) {
        if e.kind() != std::io::ErrorKind::NotFound {
            warn!(profile = %profile.display(), error = %e, "cannot remove a temporary profile");
        }
    }
    if let (Some(dir), Some(name)) = (profile.parent(), profile.file_name()) {
        let name = name.to_string_lossy();
        for log in [
            format!("chromium-{name}.log"),
            format!("chromium-{name}.log.1"),
        ] {
            let _ = std::fs::remove_file(dir.join(log));
        }
    }
}
