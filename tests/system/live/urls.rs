//! Live screens' capability URLs: sealed and failing closed, takeover, reuse of a slot, the
//! generation bump, expiry, and the streams one URL and one screen may open.

use super::*;

/// Swaps the policy byte of a sealed token (header byte 1).
fn swap_policy(path: &str, policy: u8) -> String {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut raw = b64
        .decode(path.trim_start_matches("/cap/"))
        .unwrap_or_default();
    if raw.len() > 1 {
        raw[1] = policy;
    }
    format!("/cap/{}", b64.encode(raw))
}

/// Flips one character in the middle of the token.
fn tamper(path: &str) -> String {
    let mut chars: Vec<char> = path.chars().collect();
    let i = chars.len() / 2 + 3;
    chars[i] = if chars[i] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}

#[tokio::test]
async fn capability_urls_fail_closed() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-live-1").await?;
    let bot = Bot::new(&c, "bot-a");
    let view = bot.url(&mut w, "view").await?;
    let short = {
        let v = w
            .post(
                &bot.path("url"),
                serde_json::json!({ "policy": "view", "ttl_secs": 1 }),
            )
            .await?;
        let p = v["path"].as_str().unwrap_or_default().to_string();
        w.add_secret(p.trim_start_matches("/cap/"));
        p
    };

    // The valid URL opens without the API token and carries the capability headers.
    let page = get(&w.http, &view).await?;
    assert_eq!(page.status, 200);
    assert!(page
        .header("cache-control")
        .is_some_and(|v| v.contains("no-transform")));
    assert_eq!(page.header("referrer-policy"), Some("no-referrer"));
    let html = String::from_utf8_lossy(&page.body);
    assert!(html.contains("data-policy=\"view\""), "{html}");
    let reporter = get(&w.http, "/assets/live/reporter.js").await?;
    assert_eq!(reporter.status, 200);
    assert!(String::from_utf8_lossy(&reporter.body).contains("delete window.VideoDecoder"));
    assert_eq!(get(&w.http, "/assets/novnc/core/rfb.js").await?.status, 200);
    assert_eq!(get(&w.http, "/assets/xterm/xterm.js").await?.status, 200);
    assert_eq!(
        get(&w.http, "/assets/novnc/../api-token").await?.status,
        404
    );

    // Expiry: the one-second URL dies (waiting past a deadline, not timing a result).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let truncated = view[..view.len() - 4].to_string();
    for (what, bad) in [
        ("tampered", tamper(&view)),
        ("policy-swapped", swap_policy(&view, 2)),
        ("policy-swapped to terminal", swap_policy(&view, 3)),
        ("truncated", truncated),
        ("expired", short.clone()),
        ("garbage", "/cap/not-a-token".to_string()),
    ] {
        let got = get(&w.http, &bad).await?;
        assert_eq!(got.status, 404, "{what} page");
        assert_eq!(
            upgrade_status(&w.http, &bad).await?,
            Some(404),
            "{what} websocket"
        );
    }

    // Control and terminal URLs need the user's control lease.
    for path in [
        bot.path("url"),
        format!("/v1/computers/{c}/terminals/bot-a/url"),
    ] {
        let err = w
            .post(&path, serde_json::json!({ "policy": "control" }))
            .await;
        let err = match err {
            Ok(v) if path.contains("terminals") => bail!("terminal URL without control: {v}"),
            Ok(v) => bail!("control URL without control: {v}"),
            Err(e) => e,
        };
        let (status, code, _) = api_status(&err).ok_or_else(|| anyhow!("{err}"))?;
        assert!(
            (status, code.as_str()) == (409, "no_control") || status == 400,
            "{status} {code}"
        );
    }

    let log = w.log();
    assert!(log.contains("screen.proxy.target_rejected"));
    assert!(log.contains("invalid_path"));
    assert!(log.contains("/cap/<redacted>"));
    w.check_log()?;
    Ok(())
}

#[tokio::test]
async fn takeover_needs_a_stopped_or_waiting_bot() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-live-2").await?;
    let bot = Bot::new(&c, "bot-a");
    let run = w.lease(&c, "bot-a", "run-1").await?;

    let err = bot.takeover(&w).await.expect_err("a running bot");
    let (status, code, message) = api_status(&err).ok_or_else(|| anyhow!("{err}"))?;
    assert_eq!((status, code.as_str()), (409, "bot_running"));
    assert_eq!(message, "Stop the bot first");

    // Only the live lease may mark itself waiting.
    let waiting = format!("/v1/computers/{c}/leases/bot-a/waiting_takeover");
    let stale = w
        .post(&waiting, serde_json::json!({ "lease": "run-0:1" }))
        .await
        .expect_err("not the live lease");
    assert_eq!(api_status(&stale).map(|s| s.0), Some(409));
    w.post(&waiting, serde_json::json!({ "lease": run }))
        .await?;
    let taken = bot.takeover(&w).await?;
    let lease_id = taken["control_lease"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!lease_id.is_empty());
    let control = bot.url(&mut w, "control").await?;
    assert_eq!(get(&w.http, &control).await?.status, 200);

    // Releasing control revokes the control URL at once.
    bot.release_control(&w).await?;
    assert_eq!(get(&w.http, &control).await?.status, 403);
    // The waiting mark can be withdrawn: takeover is refused again.
    w.post(
        &waiting,
        serde_json::json!({ "lease": run, "waiting": false }),
    )
    .await?;
    let err = bot.takeover(&w).await.expect_err("no longer waiting");
    assert_eq!(api_status(&err).map(|s| s.0), Some(409));
    // A stopped bot (its run ended) can be taken over.
    bot.end_run(&w, &run).await?;
    let again = bot.takeover(&w).await?;
    assert_ne!(again["control_lease"], taken["control_lease"]);
    w.check_log()?;
    Ok(())
}

#[tokio::test]
async fn old_urls_die_when_a_slot_is_reused() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-live-3").await?;
    let a = Bot::new(&c, "bot-a");
    let first = a.desktop(&w).await?;
    a.takeover(&w).await?;
    let a_view = a.url(&mut w, "view").await?;
    let a_control = a.url(&mut w, "control").await?;
    let mut ws = connect(&w.http, &a_view).await.context("bot-a view")?;
    drop(ws.close(None).await);

    // Bot a's desktop is released; bot b gets its slot.
    w.post(&a.path("release"), serde_json::json!({})).await?;
    let b = Bot::new(&c, "bot-b");
    let second = b.desktop(&w).await?;
    assert_eq!(first["slot"], second["slot"], "the slot is reused");
    for (what, path) in [("view", &a_view), ("control", &a_control)] {
        assert_eq!(get(&w.http, path).await?.status, 403, "old {what} page");
        assert_eq!(
            upgrade_status(&w.http, path).await?,
            Some(403),
            "old {what} websocket"
        );
    }
    let b_view = b.url(&mut w, "view").await?;
    b.takeover(&w).await?;
    let b_control = b.url(&mut w, "control").await?;
    for path in [&b_view, &b_control] {
        let ws = connect(&w.http, path).await?;
        let mut rfb = Rfb::handshake(WsBytes::new(ws)).await?;
        assert!(rfb.width > 0 && rfb.height > 0);
        rfb.sync().await?;
    }
    w.check_log()?;
    Ok(())
}

#[tokio::test]
async fn a_generation_bump_closes_an_open_stream_within_two_seconds() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-live-4").await?;
    let a = Bot::new(&c, "bot-a");
    a.desktop(&w).await?;
    let view = a.url(&mut w, "view").await?;
    let ws = connect(&w.http, &view).await?;
    let mut rfb = Rfb::handshake(WsBytes::new(ws)).await?;
    rfb.sync().await?;

    // Bump the bot's generation behind the control plane's back: only the once-per-second
    // re-check against the database can notice.
    let db = w.data_dir.path().join("rakazo.db");
    let url = format!("sqlite://{}", db.display());
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&url).await?;
    sqlx::query(
        "INSERT INTO live_bots (computer_id, bot, screen_generation) VALUES ($1, $2, 1) \
         ON CONFLICT (computer_id, bot) DO UPDATE SET screen_generation = \
         live_bots.screen_generation + 1",
    )
    .bind(&c)
    .bind("bot-a")
    .execute(&pool)
    .await?;
    pool.close().await;
    wait_closed(&mut rfb.io.ws, Duration::from_secs(2)).await?;
    wait_for(Duration::from_secs(5), "the close event", || {
        w.log()
            .contains("initiator=\"revoked\"")
            .then_some(())
            .or_else(|| w.log().contains("initiator=revoked").then_some(()))
    })
    .await?;
    assert_eq!(get(&w.http, &view).await?.status, 403);
    w.check_log()?;
    Ok(())
}

impl Bot {
    /// Issues a view URL that lives `ttl_secs`; returns its path, recorded as a secret.
    async fn view_url_for(&self, w: &mut World, ttl_secs: u64) -> Result<String> {
        self.url_with(
            w,
            serde_json::json!({ "policy": "view", "ttl_secs": ttl_secs }),
        )
        .await
    }
}

/// A view stream closes soon after its URL's sealed expiry (the once-a-second re-check), with
/// the close reason `expired`, while a stream of a longer URL of the same bot stays open.
#[tokio::test]
async fn a_view_stream_closes_when_its_url_expires() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-live-expiry").await?;
    let a = Bot::new(&c, "bot-a");
    a.desktop(&w).await?;
    let short = a.view_url_for(&mut w, 3).await?;
    let long = a.url(&mut w, "view").await?;
    let mut short_rfb = Rfb::handshake(WsBytes::new(connect(&w.http, &short).await?)).await?;
    short_rfb.sync().await?;
    let mut long_rfb = Rfb::handshake(WsBytes::new(connect(&w.http, &long).await?)).await?;
    long_rfb.sync().await?;

    // 3 s of life, then at most a second to the next re-check: 20 s is only the deadline.
    let reason = close_reason(&mut short_rfb.io.ws, Duration::from_secs(20)).await?;
    assert_eq!(reason, "expired");
    // The longer URL's stream still serves.
    long_rfb.sync().await?;
    let closed = w
        .log()
        .lines()
        .find(|l| l.contains("screen.proxy.websocket_closed"))
        .map(String::from)
        .ok_or_else(|| anyhow!("no close event in the log"))?;
    assert!(
        closed.contains("initiator=\"revoked\"") || closed.contains("initiator=revoked"),
        "{closed}"
    );
    assert!(
        closed.contains("reason=\"expired\"") || closed.contains("reason=expired"),
        "{closed}"
    );
    assert_eq!(get(&w.http, &short).await?.status, 404, "the expired page");
    w.check_log()?;
    Ok(())
}

/// One capability URL opens at most 8 websockets at once (the default); the ninth upgrade is
/// answered 429 with a clear reason, another URL of the same bot still opens, and closing one
/// stream frees a place.
#[tokio::test]
async fn a_url_opens_at_most_eight_streams_and_a_closed_one_frees_a_place() -> Result<()> {
    const CAP: usize = 8;
    let mut w = World::start().await?;
    let c = w.create_computer("ws-live-cap").await?;
    let a = Bot::new(&c, "bot-a");
    a.desktop(&w).await?;
    let view = a.url(&mut w, "view").await?;
    let mut open = Vec::new();
    for _ in 0..CAP {
        open.push(connect(&w.http, &view).await?);
    }
    let refused = tokio_tungstenite::connect_async(tests::live::ws_url(&w.http, &view)).await;
    match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status().as_u16(), 429);
            let body =
                String::from_utf8_lossy(resp.body().as_deref().unwrap_or_default()).to_string();
            assert!(
                body.contains("already open in 8 windows") && body.contains("close one"),
                "{body}"
            );
        }
        Ok(_) => bail!("a ninth stream of one URL was upgraded"),
        Err(e) => bail!("the ninth upgrade failed otherwise: {e}"),
    }
    // Another URL of the same bot has its own count.
    let other = a.url(&mut w, "view").await?;
    let mut other_rfb = Rfb::handshake(WsBytes::new(connect(&w.http, &other).await?)).await?;
    other_rfb.sync().await?;

    // Closing one gives its place back (once the relay has seen the close).
    let mut first = open.remove(0);
    first.close(None).await?;
    wait_closed(&mut first, LONG).await?;
    let again = upgrade_once_freed(&w.http, &view).await?;
    let mut rfb = Rfb::handshake(WsBytes::new(again)).await?;
    rfb.sync().await?;
    assert_eq!(
        upgrade_status(&w.http, &view).await?,
        Some(429),
        "full again"
    );
    assert!(w.log().contains("too_many_streams"));
    w.check_log()?;
    Ok(())
}

/// A screen is shown in at most `RAKAZO_MAX_VIEWERS_PER_SCREEN` windows, whatever URLs they
/// came through (anyone allowed can issue many URLs for one screen): past it the upgrade is
/// answered 429 naming the screen's cap, and a closed window frees a place.
#[tokio::test]
async fn a_screen_shows_in_at_most_its_cap_of_windows_across_urls() -> Result<()> {
    let mut w = World::start_with(tests::WorldOptions {
        env: vec![("RAKAZO_MAX_VIEWERS_PER_SCREEN".into(), "3".into())],
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("ws-live-screen-cap").await?;
    let a = Bot::new(&c, "bot-a");
    a.desktop(&w).await?;
    let (u1, u2, u3) = (
        a.url(&mut w, "view").await?,
        a.url(&mut w, "view").await?,
        a.url(&mut w, "view").await?,
    );
    let mut first = connect(&w.http, &u1).await?;
    let _second = connect(&w.http, &u1).await?;
    let _third = connect(&w.http, &u2).await?;
    match tokio_tungstenite::connect_async(tests::live::ws_url(&w.http, &u3)).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status().as_u16(), 429);
            let body =
                String::from_utf8_lossy(resp.body().as_deref().unwrap_or_default()).to_string();
            assert!(
                body.contains("this screen is already shown in 3 windows"),
                "{body}"
            );
        }
        Ok(_) => bail!("a fourth window of one screen was upgraded through a fresh URL"),
        Err(e) => bail!("the fourth upgrade failed otherwise: {e}"),
    }
    first.close(None).await?;
    wait_closed(&mut first, LONG).await?;
    let again = upgrade_once_freed(&w.http, &u3).await?;
    let mut rfb = Rfb::handshake(WsBytes::new(again)).await?;
    rfb.sync().await?;
    w.check_log()
}

/// Opens a capability websocket once a closed one's place is free again (the relay sees the
/// close a moment later): retried while it answers 429, for up to [`LONG`].
async fn upgrade_once_freed(http: &str, cap_path: &str) -> Result<tests::live::Ws> {
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        match upgrade_or_status(http, cap_path).await? {
            Ok(ws) => return Ok(ws),
            Err(429) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(status) => bail!("after a close, the upgrade still answered {status}"),
        }
    }
}

/// Opens a capability websocket: the stream, or the status of a refused upgrade.
async fn upgrade_or_status(
    http: &str,
    cap_path: &str,
) -> Result<std::result::Result<tests::live::Ws, u16>> {
    match tokio_tungstenite::connect_async(tests::live::ws_url(http, cap_path)).await {
        Ok((ws, _)) => Ok(Ok(ws)),
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Ok(Err(resp.status().as_u16())),
        Err(e) => Err(e.into()),
    }
}
