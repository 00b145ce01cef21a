//! Desktops: a display and a browser per bot, observed and driven in-process (issue 3), with
//! real Xvnc and real Chromium behind the real API.

use anyhow::{anyhow, Result};
use base64::Engine;
use control_plane::client::ClientError;
use hyper::StatusCode;
use sha2::{Digest, Sha256};
use std::time::Duration;
use tests::bot::Bot;
use tests::fixture::Fixture;
use tests::{pids_with_cmdline, wait_for, World, WorldOptions};

fn code_of(e: &ClientError) -> Option<(StatusCode, String, String)> {
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

/// The profile directory of a bot, relative to the home (docs/screens.md#chrome).
fn profile_of(bot: &str) -> String {
    format!(
        ".browser-profiles/{}",
        &hex::encode(Sha256::digest(bot.as_bytes()))[..32]
    )
}

/// Waits until the fixture has seen a `/whoami` from `tag`; returns the cookies it carried.
async fn whoami(fx: &Fixture, tag: &str) -> Result<Vec<String>> {
    wait_for(
        Duration::from_secs(20),
        &format!("whoami from {tag}"),
        || fx.cookies(tag),
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn bots_get_their_own_displays_browsers_and_cookies() -> Result<()> {
    let fx = Fixture::start().await?;
    let mut w = World::start().await?;
    let c = w.create_computer("ws-desk").await?;
    let a = Bot::new(&w, &c, "bot-a").await?;
    let b = Bot::new(&w, &c, "bot-b").await?;
    let sa = a.ensure().await?;
    let sb = b.ensure().await?;
    assert_eq!(
        (sa["slot"].as_u64(), sb["slot"].as_u64()),
        (Some(0), Some(1))
    );
    assert_ne!(sa["display"], sb["display"]);
    assert_ne!(sa["browser_pid"], sb["browser_pid"]);
    assert!(sa["browser_pid"].as_u64().is_some());

    a.open(&format!("{}/set?bot=a", fx.base)).await?;
    b.open(&format!("{}/set?bot=b", fx.base)).await?;
    // Setting is asynchronous to the act: open whoami until the cookie is there.
    a.open(&format!("{}/whoami?from=a1", fx.base)).await?;
    b.open(&format!("{}/whoami?from=b1", fx.base)).await?;
    assert_eq!(whoami(&fx, "a1").await?, vec!["bot=a".to_string()]);
    assert_eq!(whoami(&fx, "b1").await?, vec!["bot=b".to_string()]);

    // A marker in bot-a's profile, written through exec.
    let marker = format!("{}/marker.txt", profile_of("bot-a"));
    assert_eq!(
        w.exec(
            &c,
            serde_json::json!({ "argv": ["sh", "-c", format!("echo kept > '{marker}'")] })
        )
        .await?
        .code,
        Some(0)
    );

    // Stop and ensure bot-a again: same profile, cookie intact.
    a.release().await?;
    let again = a.ensure().await?;
    assert_eq!(again["started"], true);
    a.open(&format!("{}/whoami?from=a2", fx.base)).await?;
    assert_eq!(whoami(&fx, "a2").await?, vec!["bot=a".to_string()]);
    assert_eq!(w.get_file(&c, &marker).await?.as_ref(), b"kept\n");

    // bot-a leaves; bot-c takes the freed slot and sees neither cookie.
    a.release().await?;
    let cbot = Bot::new(&w, &c, "bot-c").await?;
    let sc = cbot.ensure().await?;
    assert_eq!(
        sc["slot"].as_u64(),
        Some(0),
        "the freed lowest slot is reused"
    );
    cbot.open(&format!("{}/whoami?from=c1", fx.base)).await?;
    assert_eq!(whoami(&fx, "c1").await?, vec![String::new()]);
    let profile_c = w.home_of(&c).join(profile_of("bot-c"));
    assert!(!profile_c.join("marker.txt").exists());

    assert_eq!(w.screen_bots(&c).await?, vec!["bot-c", "bot-b"]);
    b.release().await?;
    cbot.release().await?;
    w.check_log()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_screen_limit_refuses_desktops_but_not_exec() -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        screen_limit: Some(1),
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("ws-limit").await?;
    let a = Bot::new(&w, &c, "bot-a").await?;
    let b = Bot::new(&w, &c, "bot-b").await?;
    a.ensure().await?;
    let err = b.ensure().await.expect_err("over the limit");
    let (status, code, message) = code_of(&err).ok_or_else(|| anyhow!("{err}"))?;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(code, "COMPUTER_SCREEN_UNAVAILABLE");
    assert_eq!(
        message,
        "This computer cannot allocate another screen (limit 1)"
    );
    // Graphical tools are refused the same way; shell and files keep working.
    let err = b.observe().await.expect_err("observe over the limit");
    assert_eq!(
        code_of(&err).map(|c| c.1),
        Some("COMPUTER_SCREEN_UNAVAILABLE".into())
    );
    let out = w
        .exec(&c, serde_json::json!({ "argv": ["echo", "still works"] }))
        .await?;
    assert_eq!(out.stdout, b"still works\n");
    a.release().await?;
    b.ensure().await?;
    b.release().await?;
    w.check_log()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_fence_is_refused_without_effect() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-fence").await?;
    let old = w.lease(&c, "bot-z", "run-1").await?;
    w.post(
        &format!("/v1/computers/{c}/leases/bot-z/release"),
        serde_json::json!({ "lease": old }),
    )
    .await?;
    let new = w.lease(&c, "bot-z", "run-2").await?;
    let stale = Bot {
        w: &w,
        computer: c.clone(),
        bot: "bot-z".into(),
        lease: old,
    };
    for result in [
        stale.ensure().await,
        stale.observe().await,
        stale
            .act(serde_json::json!([{ "type": "wait", "ms": 1 }]))
            .await,
    ] {
        let err = result.expect_err("stale");
        assert_eq!(
            code_of(&err).map(|c| c.1),
            Some("stale_lease".into()),
            "{err}"
        );
    }
    let list = w.screens(&c).await?;
    assert_eq!(
        list["screens"].as_array().map(Vec::len),
        Some(0),
        "no desktop was started"
    );
    let fresh = Bot {
        w: &w,
        computer: c.clone(),
        bot: "bot-z".into(),
        lease: new,
    };
    fresh.ensure().await?;
    fresh.release().await?;
    w.check_log()
}

const ACT_PAGE: &str = r#"<!doctype html><html><head><meta charset="utf-8"><title>act fixture</title>
<style>html,body{margin:0;height:100%} #go{position:fixed;left:0;top:0;width:100%;height:45%;font-size:40px}
#t{position:fixed;left:0;top:55%;width:100%;height:30%;font-size:30px}</style></head><body>
<button id="go">Press me</button><input id="t" autocomplete="off">
<script>
const go = document.getElementById('go'), t = document.getElementById('t');
go.addEventListener('click', () => { fetch('/event?clicked=1'); t.focus(); });
fetch('/event?loaded=1');
t.addEventListener('input', () => fetch('/event?value=' + encodeURIComponent(t.value)));
</script></body></html>"#;

#[tokio::test(flavor = "multi_thread")]
async fn act_clicks_and_types_unicode_the_page_reports_it() -> Result<()> {
    let fx = Fixture::start().await?;
    let url = fx.page("act", ACT_PAGE);
    let mut w = World::start().await?;
    let c = w.create_computer("ws-act").await?;
    let bot = Bot::new(&w, &c, "bot-act").await?;
    bot.ensure().await?;
    bot.open(&url).await?;
    // The button fills the top of the viewport: click well inside it, below the browser's bars.
    let text = "héllo Ωλ 中文 ✓";
    wait_for(Duration::from_secs(20), "the page to load", || {
        fx.events()
            .iter()
            .any(|e| e.contains_key("loaded"))
            .then_some(())
    })
    .await?;
    let clicked = bot
        .act(serde_json::json!([
            { "type": "click", "x": 640, "y": 250 },
            { "type": "type", "text": text },
        ]))
        .await?;
    assert_eq!(clicked["completed"], 2);
    wait_for(Duration::from_secs(10), "the click event", || {
        fx.events()
            .iter()
            .any(|e| e.get("clicked").map(String::as_str) == Some("1"))
            .then_some(())
    })
    .await?;
    // Each input event is its own fetch, and fetches may reach the fixture out of order: look
    // for the full text among them, not only in the last one to arrive.
    let last = wait_for(Duration::from_secs(20), "the typed text", || {
        fx.events()
            .iter()
            .filter_map(|e| e.get("value").cloned())
            .find(|v| v == text)
    })
    .await?;
    assert_eq!(last, text);
    bot.release().await?;
    w.check_log()
}

#[tokio::test(flavor = "multi_thread")]
async fn observe_returns_a_png_and_omits_an_identical_frame() -> Result<()> {
    let fx = Fixture::start().await?;
    let url = fx.page(
        "still",
        "<!doctype html><title>still</title><body style='background:#3a6'>still</body>",
    );
    let mut w = World::start().await?;
    let c = w.create_computer("ws-observe").await?;
    let bot = Bot::new(&w, &c, "bot-o").await?;
    bot.ensure().await?;
    bot.open(&url).await?;
    let first = bot.observe().await?;
    let png = base64::engine::general_purpose::STANDARD
        .decode(first["image"].as_str().ok_or_else(|| anyhow!("no image"))?)?;
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // IHDR: width and height, big-endian, at bytes 16..24.
    let (wd, ht) = (
        u32::from_be_bytes(png[16..20].try_into()?),
        u32::from_be_bytes(png[20..24].try_into()?),
    );
    assert_eq!((wd, ht), (1280, 800));
    assert_eq!(
        (first["width"].as_u64(), first["height"].as_u64()),
        (Some(1280), Some(800))
    );
    assert_eq!(first["mimeType"], "image/png");
    assert_eq!(first["frameId"].as_str().map(str::len), Some(64));
    // The page may still be painting: observe until two frames in a row are identical.
    let mut prev = first["frameId"].as_str().unwrap_or_default().to_string();
    let mut omitted = None;
    // Time-bound, not count-bound: on a loaded machine Chromium may keep painting for seconds.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let next = bot.observe().await?;
        if next["frameId"].as_str() == Some(prev.as_str()) {
            omitted = Some(next);
            break;
        }
        assert!(
            next["image"].is_string(),
            "a changed frame carries its image"
        );
        prev = next["frameId"].as_str().unwrap_or_default().to_string();
    }
    let omitted = omitted.ok_or_else(|| anyhow!("the screen never settled"))?;
    assert_eq!(omitted["unchanged"], true);
    assert!(omitted["image"].is_null());
    assert!(omitted["note"]
        .as_str()
        .unwrap_or_default()
        .contains("previous screenshot remains valid"));
    bot.release().await?;
    w.check_log()
}

/// Processes, X locks and sockets of the displays this world used.
/// What computer `c` of `w` left behind: its Chromes (profiles in the data dir), its X servers
/// (their `-auth` file is in the guest's runtime dir `/tmp/rakazo-guest-<c>`), and the X locks
/// and sockets of `displays` that are still its own or stale. Display numbers are machine-wide
/// and other tests run at the same time, so a lock held by another computer's live X server is
/// not ours.
fn leftovers(w: &World, c: &str, displays: &[u64]) -> Vec<String> {
    let cmdline = |pid: i32| {
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        String::from_utf8_lossy(&cmd).replace('\0', " ")
    };
    let ours = format!("/rakazo-guest-{c}/");
    let mut found = Vec::new();
    let home = w.data_dir.path().display().to_string();
    for pid in pids_with_cmdline(&home)
        .into_iter()
        .chain(pids_with_cmdline(&ours))
    {
        let cmd = cmdline(pid);
        if cmd.contains("chromium") || cmd.contains("Xvnc") {
            found.push(format!("process {pid}: {cmd}"));
        }
    }
    for d in displays {
        let lock = format!("/tmp/.X{d}-lock");
        let Ok(text) = std::fs::read_to_string(&lock) else {
            continue;
        };
        let holder = text.trim().parse::<i32>().map(cmdline).unwrap_or_default();
        // A dead holder (empty command line) is a stale lock: nobody cleaned it up.
        if holder.is_empty() || holder.contains(&ours) {
            found.push(format!("{lock} (held by {holder:?})"));
            found.push(format!("/tmp/.X11-unix/X{d}"));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hundred_profiles_in_turn_and_ten_desktops_at_once_leak_nothing() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-many").await?;
    let mut displays = Vec::new();
    for i in 0..100 {
        let bot = Bot::new(&w, &c, &format!("p{i:03}")).await?;
        let s = bot.ensure().await?;
        displays.push(s["display"].as_u64().unwrap_or_default());
        bot.release().await?;
    }
    let profiles = std::fs::read_dir(w.home_of(&c).join(".browser-profiles"))?.count();
    assert_eq!(profiles, 100, "every bot kept its own profile");
    let mut live = Vec::new();
    for i in 0..10 {
        live.push(Bot::new(&w, &c, &format!("live{i}")).await?);
    }
    let started = futures_util::future::join_all(live.iter().map(|b| b.ensure())).await;
    for s in &started {
        let s = s.as_ref().map_err(|e| anyhow!("{e}"))?;
        displays.push(s["display"].as_u64().unwrap_or_default());
    }
    let list = w.screens(&c).await?;
    assert_eq!(list["screens"].as_array().map(Vec::len), Some(10));
    for b in &live {
        b.release().await?;
    }
    displays.sort_unstable();
    displays.dedup();
    let left = leftovers(&w, &c, &displays);
    assert!(left.is_empty(), "leaked after release: {left:#?}");
    w.check_log()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_successful_run_keeps_the_desktop_and_a_failed_one_tears_it_down() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-runs").await?;
    let ok = Bot::new(&w, &c, "bot-ok").await?;
    let failed = Bot::new(&w, &c, "bot-failed").await?;
    let cancelled = Bot::new(&w, &c, "bot-cancel").await?;
    for b in [&ok, &failed, &cancelled] {
        b.ensure().await?;
    }
    for (b, outcome) in [
        (&ok, "success"),
        (&failed, "failed"),
        (&cancelled, "cancelled"),
    ] {
        w.post(
            &format!("/v1/computers/{c}/leases/{}/release", b.bot),
            serde_json::json!({ "lease": b.lease, "outcome": outcome }),
        )
        .await?;
    }
    assert_eq!(
        w.screen_bots(&c).await?,
        vec!["bot-ok".to_string()],
        "only the successful run's desktop remains"
    );
    let next = Bot::new(&w, &c, "bot-ok").await?;
    let again = next.ensure().await?;
    assert_eq!(
        again["started"], false,
        "the next run finds the same desktop"
    );
    next.release().await?;
    w.check_log()
}
