//! The spare desktop of a warm pool's member (docs/pools.md#desktops): an X server and a Chrome
//! started before any bot asks, which the first bot to ask for a screen takes in place of a cold
//! start.
//!
//! Its Chrome runs on a profile of its own (`.browser-profiles/.spare-<epoch>`): nobody's yet.
//! The bot that takes it keeps that Chrome running when it has no profile of its own, and the
//! profile moves to the bot's place the next time its Chrome is closed (a quiesce before a home
//! export or import, its teardown, a restart), so what the bot did is exported as its own. A bot
//! whose profile exists already (a returning workspace's restored home) gets the display only:
//! its Chrome starts on its own profile.

use super::{failed, teardown, Desktop, Screens};
use crate::browser::{profile_dir, Browser, PROFILES_DIR};
use gateway_proto::{BotId, OpError};
use std::path::PathBuf;
use tracing::{info, warn};

/// The name the spare's logs and errors go by (it has no bot).
const SPARE: &str = "(spare)";

impl Screens {
    /// Starts the spare desktop if there is none (or the one there died). Idempotent.
    pub async fn prewarm(&self) -> Result<(), OpError> {
        // A browser provider without desktops has nothing to warm.
        if !self.browser_provider().has_desktop() {
            return Ok(());
        }
        let mut spare = self.spare.lock().await;
        if let Some(d) = spare.as_mut() {
            if d.xserver.is_alive() && d.browser.as_mut().is_some_and(Browser::is_alive) {
                return Ok(());
            }
        }
        if let Some(mut dead) = spare.take() {
            discard(&mut dead).await;
        }
        let epoch = super::NEXT_EPOCH.load(std::sync::atomic::Ordering::Relaxed);
        let profile = self
            .cfg
            .home
            .join(PROFILES_DIR)
            .join(format!(".spare-{epoch}"));
        crate::browser::create_profile(&profile).map_err(failed)?;
        // Slot 0's display number, or the first free one past it: a bot's slot is claimed when it
        // takes the desktop.
        let mut d = self.start_display(SPARE, 0).await?;
        if let Err(e) = self.start_browser_on(SPARE, &mut d, profile.clone()).await {
            let _ = d.xserver.stop().await;
            let _ = std::fs::remove_dir_all(&profile);
            return Err(e);
        }
        d.spare_profile = Some(profile);
        info!(display = d.xserver.display().get(), "spare desktop started");
        *spare = Some(d);
        Ok(())
    }

    /// The spare desktop for `bot`'s new `slot`, if there is a live one: its Chrome kept when the
    /// bot has no profile yet, else started again on the bot's own.
    pub(super) async fn take_spare(&self, bot: &BotId, slot: u32) -> Option<Desktop> {
        let mut d = self.spare.lock().await.take()?;
        if !d.xserver.is_alive() {
            discard(&mut d).await;
            return None;
        }
        d.slot = slot;
        let own = profile_dir(&self.cfg.home, bot).exists();
        let alive = d.browser.as_mut().is_some_and(Browser::is_alive);
        if own || !alive {
            if let Some(mut b) = d.browser.take() {
                let _ = b.stop().await;
            }
            if let Some(p) = d.spare_profile.take() {
                let _ = std::fs::remove_dir_all(p);
            }
            if let Err(e) = self.start_browser(bot, &mut d).await {
                warn!(bot = %bot, error = %e, "Chrome did not start on the spare desktop: starting a desktop cold");
                discard(&mut d).await;
                return None;
            }
        }
        info!(bot = %bot, slot, display = d.xserver.display().get(), own_profile = own, "spare desktop taken");
        Some(d)
    }

    /// Moves the spare profile `d`'s Chrome ran on to `bot`'s place, once that Chrome is closed
    /// (a profile `bot` has meanwhile, from an imported home, wins).
    pub(super) fn settle_profile(&self, bot: &BotId, d: &mut Desktop) {
        let Some(spare) = d.spare_profile.take() else {
            return;
        };
        let own = profile_dir(&self.cfg.home, bot);
        let moved: Result<(), std::io::Error> = if own.exists() {
            std::fs::remove_dir_all(&spare)
        } else {
            std::fs::rename(&spare, &own)
        };
        match moved {
            Ok(()) => info!(bot = %bot, "the spare desktop's profile is the bot's now"),
            Err(e) => warn!(bot = %bot, error = %e, "could not move the spare desktop's profile"),
        }
    }

    /// Tears the spare desktop down, if there is one (guest shutdown).
    pub(super) async fn discard_spare(&self) {
        if let Some(mut d) = self.spare.lock().await.take() {
            discard(&mut d).await;
        }
    }

    /// Whether a spare desktop is up (tests, `computer show`).
    pub async fn has_spare(&self) -> bool {
        self.spare.lock().await.is_some()
    }
}

/// Tears a spare desktop down and deletes its profile.
async fn discard(d: &mut Desktop) {
    let spare = BotId::new("spare").expect("a valid bot id");
    teardown(&spare, d).await;
    if let Some(p) = d.spare_profile.take() {
        let _ = std::fs::remove_dir_all::<PathBuf>(p);
    }
}
