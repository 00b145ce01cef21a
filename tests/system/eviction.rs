//! Screen eviction (docs/screens.md#slots) through the real control plane and guest, with real Xvnc
//! and Chromium and `SANDBOX_TEAM_SCREEN_LIMIT=2`: a third bot's desktop takes the slot of the
//! oldest idle screen that no user controls and no run holds (its view URL and open viewer die,
//! its profile stays); a screen under an execution lease or a user's control lease is never
//! evicted, and when none qualifies the third bot is refused with `COMPUTER_SCREEN_UNAVAILABLE`.

use anyhow::{anyhow, Result};
use control_plane::client::ClientError;
use hyper::StatusCode;
use sha2::{Digest, Sha256};
use std::time::Duration;
use tests::bot::Bot;
use tests::live::{connect, upgrade_status, wait_closed};
use tests::{World, WorldOptions};

fn limited() -> WorldOptions {
    WorldOptions {
        screen_limit: Some(2),
        ..Default::default()
    }
}

/// The profile directory of a bot, relative to the home (docs/screens.md#chrome).
fn profile_of(bot: &str) -> String {
    format!(
        ".browser-profiles/{}",
        &hex::encode(Sha256::digest(bot.as_bytes()))[..32]
    )
}

/// Starts `bot`'s desktop under a run that then ends successfully: the desktop stays, idle.
async fn idle_desktop(w: &World, c: &str, bot: &str) -> Result<serde_json::Value> {
    let b = Bot::new(w, c, bot).await?;
    let s = b.ensure().await?;
    b.end_run().await?;
    Ok(s)
}

fn refusal(e: &ClientError) -> Option<(StatusCode, String, String)> {
    match e {
        ClientError::Api {
            status,
            code,
            message,
            ..
        } => Some((*status, code.clone(), message.clone())),
        _ => None,
    }
}

/// Two idle screens fill the limit; a third bot evicts the one idle longest: its open viewer is
/// disconnected, its view URL stops working, its profile stays in the home, and the new bot's
/// desktop takes its slot.
#[tokio::test(flavor = "multi_thread")]
async fn a_new_bot_evicts_the_oldest_idle_uncontrolled_screen() -> Result<()> {
    let mut w = World::start_with(limited()).await?;
    let c = w.create_computer("ws-evict").await?;
    let old = idle_desktop(&w, &c, "bot-old").await?;
    idle_desktop(&w, &c, "bot-mid").await?;
    // A marker in bot-old's profile: it must survive the eviction.
    let marker = format!("{}/kept.txt", profile_of("bot-old"));
    w.sh(&c, &format!("echo kept > '{marker}'")).await?;

    // A person watches bot-old's screen.
    let view = w
        .post(
            &format!("/v1/computers/{c}/screens/bot-old/url"),
            serde_json::json!({ "policy": "view" }),
        )
        .await?["path"]
        .as_str()
        .ok_or_else(|| anyhow!("no view path"))?
        .to_string();
    w.add_secret(view.trim_start_matches("/cap/"));
    let mut viewer = connect(&w.http, &view).await?;

    // bot-mid was used after bot-old, so bot-old is idle longest: the guest says so.
    let listed = w.screens(&c).await?;
    let idle = |bot: &str| {
        listed["screens"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["bot"] == bot)
            .and_then(|s| s["idle_ms"].as_u64())
    };
    assert!(
        idle("bot-old") > idle("bot-mid"),
        "bot-old must be idle longer than bot-mid: {listed}"
    );
    let new = Bot::new(&w, &c, "bot-new").await?;
    let s = new.ensure().await?;
    assert_eq!(s["started"], true, "{s}");
    assert_eq!(s["slot"], old["slot"], "the evicted screen's slot: {s}");
    assert_eq!(w.screen_bots(&c).await?, vec!["bot-new", "bot-mid"]);

    wait_closed(&mut viewer, Duration::from_secs(10)).await?;
    let again = upgrade_status(&w.http, &view).await?;
    assert_ne!(again, None, "the evicted screen's view URL still opens");
    assert_eq!(&w.get_file(&c, &marker).await?[..], b"kept\n");
    assert!(
        w.log()
            .contains("screen limit reached: evicted the oldest idle screen nobody holds"),
        "no eviction in the log"
    );

    // The evicted bot comes back: it evicts in turn (bot-mid, idle longest now), with its
    // profile as it was.
    new.end_run().await?;
    let back = Bot::new(&w, &c, "bot-old").await?;
    back.ensure().await?;
    assert_eq!(w.screen_bots(&c).await?, vec!["bot-new", "bot-old"]);
    assert_eq!(&w.get_file(&c, &marker).await?[..], b"kept\n");
    back.end_run().await?;
    w.check_log()
}

/// A screen whose bot holds an execution lease, or that a user controls, is never evicted; with
/// both held the third bot is refused with the contract's error. Once control is released, that
/// screen is evicted even though the running bot's is idle longer.
#[tokio::test(flavor = "multi_thread")]
async fn held_screens_are_never_evicted() -> Result<()> {
    let mut w = World::start_with(limited()).await?;
    let c = w.create_computer("ws-evict-held").await?;
    // bot-run's screen is the older one, and its run goes on (its lease is live).
    let run = Bot::new(&w, &c, "bot-run").await?;
    run.ensure().await?;
    // bot-ctl's run ended; a person takes control of it.
    idle_desktop(&w, &c, "bot-ctl").await?;
    w.post(
        &format!("/v1/computers/{c}/screens/bot-ctl/takeover"),
        serde_json::json!({}),
    )
    .await?;

    let third = Bot::new(&w, &c, "bot-third").await?;
    let err = third.ensure().await.expect_err("no screen qualifies");
    let (status, code, message) = refusal(&err).ok_or_else(|| anyhow!("{err}"))?;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(code, "COMPUTER_SCREEN_UNAVAILABLE");
    assert_eq!(
        message,
        "This computer cannot allocate another screen (limit 2)"
    );
    // The other graphical tools are refused the same way; nothing was evicted.
    let err = third
        .observe()
        .await
        .expect_err("observe: no screen qualifies");
    assert_eq!(
        refusal(&err).map(|r| r.1),
        Some("COMPUTER_SCREEN_UNAVAILABLE".into())
    );
    assert_eq!(w.screen_bots(&c).await?, vec!["bot-run", "bot-ctl"]);

    // Control released: bot-ctl's screen is now idle and unheld; bot-run's still runs.
    w.post(
        &format!("/v1/computers/{c}/screens/bot-ctl/release-control"),
        serde_json::json!({}),
    )
    .await?;
    third.ensure().await?;
    assert_eq!(w.screen_bots(&c).await?, vec!["bot-run", "bot-third"]);
    run.release().await?;
    third.release().await?;
    w.check_log()
}

/// Two new bots refused at once evict one screen each, not the same one twice: evictions on a
/// computer take turns (the `evict` claim), and a turn first runs its call again. Both bots get
/// a desktop, in the slots of the two idle screens.
#[tokio::test(flavor = "multi_thread")]
async fn two_bots_refused_at_once_evict_one_screen_each() -> Result<()> {
    let mut w = World::start_with(limited()).await?;
    let c = w.create_computer("ws-evict-two").await?;
    idle_desktop(&w, &c, "bot-old").await?;
    idle_desktop(&w, &c, "bot-mid").await?;
    let a = Bot::new(&w, &c, "bot-a").await?;
    let b = Bot::new(&w, &c, "bot-b").await?;
    let (got_a, got_b) = tokio::join!(a.ensure(), b.ensure());
    let (got_a, got_b) = (got_a?, got_b?);
    assert_eq!(got_a["started"], true, "{got_a}");
    assert_eq!(got_b["started"], true, "{got_b}");
    assert_ne!(got_a["slot"], got_b["slot"], "{got_a} {got_b}");
    let mut now = w.screen_bots(&c).await?;
    now.sort();
    assert_eq!(now, vec!["bot-a", "bot-b"]);
    let evictions = w
        .log()
        .lines()
        .filter(|l| l.contains("screen limit reached: evicted the oldest idle screen nobody holds"))
        .count();
    assert_eq!(evictions, 2, "one eviction per refused bot");
    a.release().await?;
    b.release().await?;
    w.check_log()
}
