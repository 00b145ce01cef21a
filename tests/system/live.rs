//! Live screens and terminals (issue 5): sealed capability URLs, takeover, the websocket relay
//! to the guest's gateway, the noVNC viewer in a real headless Chromium, RFB view vs control,
//! and terminals, all through a real `rakazo serve` and a real guest.

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine;
use control_plane::client::ClientError;
use futures_util::{SinkExt, StreamExt};
use gateway_proto::termframe::{encode_input, encode_resize};
use std::time::Duration;
use tests::fixture::Fixture;
use tests::live::{
    close_reason, connect, get, read_until, upgrade_status, wait_closed, Rfb, WsBytes,
};
use tests::{wait_for, World, WorldOptions};
use tokio_tungstenite::tungstenite::Message;

const LONG: Duration = Duration::from_secs(60);

fn api_status(e: &ClientError) -> Option<(u16, String, String)> {
    match e {
        ClientError::Api {
            status,
            code,
            message,
            ..
        } => Some((status.as_u16(), code.clone(), message.clone())),
        _ => None,
    }
}

/// A bot on a computer, seen from the test.
struct Bot {
    c: String,
    bot: String,
}

impl Bot {
    fn new(c: &str, bot: &str) -> Self {
        Self {
            c: c.into(),
            bot: bot.into(),
        }
    }

    fn path(&self, action: &str) -> String {
        format!("/v1/computers/{}/screens/{}/{action}", self.c, self.bot)
    }

    /// Starts the bot's desktop under a short run that ends successfully (the desktop stays).
    async fn desktop(&self, w: &World) -> Result<serde_json::Value> {
        let lease = w.lease(&self.c, &self.bot, "run-setup").await?;
        let v = w
            .post(&self.path("ensure"), serde_json::json!({ "lease": lease }))
            .await?;
        self.end_run(w, &lease).await?;
        Ok(v)
    }

    async fn end_run(&self, w: &World, lease: &str) -> Result<()> {
        w.post(
            &format!("/v1/computers/{}/leases/{}/release", self.c, self.bot),
            serde_json::json!({ "lease": lease, "outcome": "success" }),
        )
        .await?;
        Ok(())
    }

    /// Issues a capability URL; returns its path (`/cap/<sealed>`), recorded as a secret.
    async fn url(&self, w: &mut World, policy: &str) -> Result<String> {
        self.url_with(w, serde_json::json!({ "policy": policy }))
            .await
    }

    /// Issues a capability URL as `body` asks; returns its path, recorded as a secret.
    async fn url_with(&self, w: &mut World, body: serde_json::Value) -> Result<String> {
        let v = w.post(&self.path("url"), body).await?;
        let path = v["path"]
            .as_str()
            .ok_or_else(|| anyhow!("no path in {v}"))?
            .to_string();
        w.add_secret(path.trim_start_matches("/cap/"));
        Ok(path)
    }

    async fn takeover(&self, w: &World) -> Result<serde_json::Value, ClientError> {
        w.post(&self.path("takeover"), serde_json::json!({})).await
    }

    async fn release_control(&self, w: &World) -> Result<serde_json::Value, ClientError> {
        w.post(&self.path("release-control"), serde_json::json!({}))
            .await
    }

    async fn terminal_url(&self, w: &mut World) -> Result<String> {
        let v = w
            .post(
                &format!("/v1/computers/{}/terminals/{}/url", self.c, self.bot),
                serde_json::json!({}),
            )
            .await?;
        let path = v["path"]
            .as_str()
            .ok_or_else(|| anyhow!("no path in {v}"))?
            .to_string();
        w.add_secret(path.trim_start_matches("/cap/"));
        Ok(path)
    }

    /// The X pointer position, from an observation.
    async fn cursor(&self, w: &World) -> Result<(i64, i64)> {
        let lease = w.lease(&self.c, &self.bot, "run-observe").await?;
        let v = w
            .post(&self.path("observe"), serde_json::json!({ "lease": lease }))
            .await;
        self.end_run(w, &lease).await?;
        let v = v?;
        Ok((
            v["cursor"]["x"].as_i64().unwrap_or(-1),
            v["cursor"]["y"].as_i64().unwrap_or(-1),
        ))
    }
}

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

#[tokio::test]
async fn view_drops_input_and_control_passes_it() -> Result<()> {
    let mut w = World::start().await?;
    let site = Fixture::start().await?;
    let c = w.create_computer("ws-live-5").await?;
    let a = Bot::new(&c, "bot-a");
    a.desktop(&w).await?;
    // A page that reports every key it sees to the fixture site.
    let page = site.page(
        "keys",
        "<html><body><input id=k autofocus><script>\
         document.addEventListener('keydown', e => fetch('/event?key=' + e.key));\
         </script></body></html>",
    );
    let lease = w.lease(&c, "bot-a", "run-page").await?;
    w.post(
        &format!("/v1/computers/{c}/browser/bot-a/navigate"),
        serde_json::json!({ "lease": lease, "url": page }),
    )
    .await?;
    w.post(
        &a.path("act"),
        serde_json::json!({ "lease": lease, "actions": [
            { "type": "click", "x": 640, "y": 400 }, { "type": "move", "x": 10, "y": 10 }
        ]}),
    )
    .await?;
    a.end_run(&w, &lease).await?;
    let start = a.cursor(&w).await?;
    assert_eq!(start, (10, 10));

    let view = a.url(&mut w, "view").await?;
    let mut viewer = Rfb::handshake(WsBytes::new(connect(&w.http, &view).await?)).await?;
    viewer.pointer(300, 200, 0).await?;
    viewer.key(u32::from(b'v'), true).await?;
    viewer.key(u32::from(b'v'), false).await?;
    viewer.sync().await?;

    a.takeover(&w).await?;
    let control = a.url(&mut w, "control").await?;
    let mut driver = Rfb::handshake(WsBytes::new(connect(&w.http, &control).await?)).await?;
    assert_eq!(
        a.cursor(&w).await?,
        (10, 10),
        "the viewer's pointer never moved"
    );
    driver.pointer(222, 111, 0).await?;
    driver.sync().await?;
    let deadline = tokio::time::Instant::now() + LONG;
    while a.cursor(&w).await? != (222, 111) {
        if tokio::time::Instant::now() > deadline {
            bail!("the control pointer did not move the X pointer");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    driver.key(u32::from(b'c'), true).await?;
    driver.key(u32::from(b'c'), false).await?;
    driver.sync().await?;
    let keys = || -> Vec<String> {
        site.events()
            .iter()
            .filter_map(|e| e.get("key").cloned())
            .collect()
    };
    wait_for(LONG, "the control key", || {
        keys().contains(&"c".to_string()).then_some(())
    })
    .await?;
    assert_eq!(
        keys(),
        vec!["c".to_string()],
        "the viewer's key never arrived"
    );

    w.check_log()?;
    Ok(())
}

#[tokio::test]
async fn terminal_frames_resize_and_limits() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-live-6").await?;
    let a = Bot::new(&c, "bot-a");
    // Terminals live with the bot's desktop (its teardown stops them, docs/screens.md#terminal).
    a.desktop(&w).await?;
    a.takeover(&w).await?;
    let term = a.terminal_url(&mut w).await?;
    let page = get(&w.http, &term).await?;
    assert_eq!(page.status, 200);
    assert!(String::from_utf8_lossy(&page.body).contains("xterm.js"));

    let mut ws = connect(&w.http, &term).await?;
    let mut out = Vec::new();
    ws.send(Message::Binary(encode_resize(123, 45).into()))
        .await?;
    // One input frame split across three websocket messages.
    let f = encode_input(b"stty size; echo WHO-$(whoami)-AMI\r");
    for part in [&f[..2], &f[2..9], &f[9..]] {
        ws.send(Message::Binary(part.to_vec().into())).await?;
    }
    read_until(&mut ws, &mut out, "45 123", LONG).await?;
    read_until(&mut ws, &mut out, "-AMI", LONG).await?;
    let text = String::from_utf8_lossy(&out).to_string();
    assert!(!text.contains("WHO-root-AMI"), "{text}");

    // A 2 MiB frame closes the connection.
    let mut big = vec![0u8];
    big.extend_from_slice(&(2u32 << 20).to_be_bytes());
    big.extend(vec![b'x'; 64 * 1024]);
    ws.send(Message::Binary(big.into())).await?;
    wait_closed(&mut ws, LONG).await?;
    w.check_log()?;
    Ok(())
}

/// A burst of terminal output (many QUIC packets, gathered into fewer websocket messages)
/// arrives whole and in order, and output written just before the shell exits arrives before
/// the close.
#[tokio::test]
async fn terminal_output_arrives_whole_and_in_order() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-live-12").await?;
    let a = Bot::new(&c, "bot-a");
    a.desktop(&w).await?;
    a.takeover(&w).await?;
    let term = a.terminal_url(&mut w).await?;
    let mut ws = connect(&w.http, &term).await?;
    let mut out = Vec::new();
    ws.send(Message::Binary(
        encode_input(b"stty -echo; seq -f N%g 1 200000; echo END-$((1+1))\r").into(),
    ))
    .await?;
    read_until(&mut ws, &mut out, "END-2", LONG).await?;
    // Every line `N<k>` of seq's output, in order (the echoed command line has none).
    let text = String::from_utf8_lossy(&out).to_string();
    let numbers: Vec<&str> = text
        .split(['\r', '\n'])
        .filter(|l| l.len() > 1 && l.starts_with('N') && l[1..].bytes().all(|b| b.is_ascii_digit()))
        .collect();
    assert_eq!(numbers.len(), 200_000, "lines of seq");
    for (i, n) in numbers.iter().enumerate() {
        assert_eq!(n[1..], (i + 1).to_string(), "line {} of seq", i + 1);
    }
    // The last bytes before the shell exits come before the close.
    let mut last = Vec::new();
    ws.send(Message::Binary(
        encode_input(b"printf 'LAST-%s' $((3*3)); exit\r").into(),
    ))
    .await?;
    read_until(&mut ws, &mut last, "LAST-9", LONG).await?;
    wait_closed(&mut ws, LONG).await?;
    w.check_log()?;
    Ok(())
}

#[tokio::test]
async fn releasing_control_closes_every_shell() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-live-7").await?;
    let a = Bot::new(&c, "bot-a");
    a.desktop(&w).await?;
    a.takeover(&w).await?;
    let view = a.url(&mut w, "view").await?;
    let control = a.url(&mut w, "control").await?;
    let term = a.terminal_url(&mut w).await?;
    let mut shells = Vec::new();
    for i in 0..2 {
        let mut ws = connect(&w.http, &term).await?;
        let mut out = Vec::new();
        let marker = format!("shell-{i}-ready");
        ws.send(Message::Binary(
            encode_input(format!("echo {marker}\r").as_bytes()).into(),
        ))
        .await?;
        read_until(&mut ws, &mut out, &marker, LONG).await?;
        shells.push(ws);
    }
    let mut driver = Rfb::handshake(WsBytes::new(connect(&w.http, &control).await?)).await?;
    driver.sync().await?;
    let mut viewer = Rfb::handshake(WsBytes::new(connect(&w.http, &view).await?)).await?;
    viewer.sync().await?;

    a.release_control(&w).await?;
    for ws in shells.iter_mut() {
        wait_closed(ws, Duration::from_secs(10)).await?;
    }
    wait_closed(&mut driver.io.ws, Duration::from_secs(10)).await?;
    // The view stays.
    viewer.sync().await?;
    assert_eq!(get(&w.http, &term).await?.status, 403);
    assert_eq!(upgrade_status(&w.http, &control).await?, Some(403));
    drop(viewer.io.ws.next());
    w.check_log()?;
    Ok(())
}

/// The pid a shell prints for `echo PID-$$-$((6*7))` (the typed command's echo has no digits).
fn shell_pid(out: &[u8]) -> Option<u32> {
    let text = String::from_utf8_lossy(out);
    text.match_indices("PID-").find_map(|(i, _)| {
        let rest = &text[i + 4..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        rest[digits.len()..]
            .starts_with("-42")
            .then(|| digits.parse().ok())
            .flatten()
    })
}

/// Whether the log has a `screen.proxy.websocket_closed` event of `policy` ended by revocation.
fn closed_revoked(log: &str, policy: &str) -> bool {
    log.lines().any(|l| {
        l.contains("screen.proxy.websocket_closed")
            && (l.contains(&format!("policy=\"{policy}\""))
                || l.contains(&format!("policy={policy} ")))
            && (l.contains("initiator=\"revoked\"") || l.contains("initiator=revoked"))
    })
}

/// The control lease's TTL end to end, with `RAKAZO_CONTROL_LEASE_TTL_SECS` short: while the
/// user keeps taking control the lease is renewed under the same id and its control stream and
/// terminal outlive the TTL; once nobody renews it, both close (revoked, the shell gone), the
/// view stays, and URLs of the lapsed lease are refused, also after control is taken anew.
#[tokio::test]
async fn a_lapsed_control_lease_closes_control_and_terminals() -> Result<()> {
    const TTL: Duration = Duration::from_secs(4);
    let mut w = World::start_with(WorldOptions {
        control_lease_ttl_secs: Some(TTL.as_secs()),
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("ws-live-11").await?;
    let a = Bot::new(&c, "bot-a");
    a.desktop(&w).await?;
    let view = a.url(&mut w, "view").await?;

    let first = a.takeover(&w).await?;
    let granted_by = tokio::time::Instant::now();
    let lease_id = first["control_lease"]
        .as_str()
        .ok_or_else(|| anyhow!("no control_lease in {first}"))?
        .to_string();
    let first_expiry = first["expires_at_ms"].as_i64().unwrap_or(i64::MAX);
    // Renew (take control again) every half second until told to stop; each answer is kept.
    let (renewed_tx, mut renewed) = tokio::sync::mpsc::unbounded_channel();
    let renewer = {
        let client = w.client.clone();
        let path = a.path("takeover");
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let r = client
                    .json(hyper::Method::POST, &path, Some(&serde_json::json!({})))
                    .await
                    .map_err(|e| e.to_string());
                if renewed_tx.send(r).is_err() {
                    return;
                }
            }
        })
    };

    let control = a.url(&mut w, "control").await?;
    let term = a.terminal_url(&mut w).await?;
    // Issued under the lease, opened only after it lapsed.
    let unopened = a.url(&mut w, "control").await?;
    let mut shell = connect(&w.http, &term).await?;
    let mut out = Vec::new();
    shell
        .send(Message::Binary(
            encode_input(b"echo PID-$$-$((6*7))\r").into(),
        ))
        .await?;
    read_until(&mut shell, &mut out, "-42", LONG).await?;
    let pid = shell_pid(&out).ok_or_else(|| {
        anyhow!(
            "no shell pid in {:?}",
            String::from_utf8_lossy(&out).to_string()
        )
    })?;
    let mut driver = Rfb::handshake(WsBytes::new(connect(&w.http, &control).await?)).await?;
    driver.sync().await?;
    let mut viewer = Rfb::handshake(WsBytes::new(connect(&w.http, &view).await?)).await?;
    viewer.sync().await?;

    // Renewed, the streams outlive the first grant's expiry (which was before granted_by + TTL).
    while granted_by.elapsed() < TTL + Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut still = Vec::new();
    shell
        .send(Message::Binary(
            encode_input(b"echo STILL-$((2+3))\r").into(),
        ))
        .await?;
    read_until(&mut shell, &mut still, "STILL-5", LONG).await?;
    driver.sync().await?;
    renewer.abort();
    let _ = renewer.await;
    let mut renewals = 0;
    let mut last_expiry = first_expiry;
    while let Ok(r) = renewed.try_recv() {
        let v = r.map_err(|e| anyhow!("renewing the control lease failed: {e}"))?;
        assert_eq!(
            v["control_lease"].as_str(),
            Some(lease_id.as_str()),
            "a renewal keeps the lease's id: {v}"
        );
        last_expiry = last_expiry.max(v["expires_at_ms"].as_i64().unwrap_or(0));
        renewals += 1;
    }
    assert!(renewals > 0, "the lease was renewed");
    assert!(last_expiry > first_expiry, "renewals moved the expiry");

    // Nobody renews it now: the control stream and the terminal close when it lapses.
    wait_closed(&mut shell, LONG).await?;
    wait_closed(&mut driver.io.ws, LONG).await?;
    wait_for(LONG, "the revoked close events", || {
        let log = w.log();
        (closed_revoked(&log, "terminal") && closed_revoked(&log, "control")).then_some(())
    })
    .await?;
    // The shell's pid is its computer's own: look through the guest's root (its /proc is the
    // computer's; `/` when the computer is not jailed).
    let guest = tests::guest_pid_of(&c).context("no guest process")?;
    let shell_proc = format!("/proc/{guest}/root/proc/{pid}");
    wait_for(LONG, "the shell to be gone", || {
        (!std::path::Path::new(&shell_proc).exists()).then_some(())
    })
    .await?;
    // The view stays.
    viewer.sync().await?;
    assert!(!closed_revoked(&w.log(), "view"), "the view was not closed");
    // Every URL of the lapsed lease is refused, including one never opened before.
    for path in [&control, &term, &unopened] {
        assert_eq!(get(&w.http, path).await?.status, 403, "page of {path}");
        assert_eq!(upgrade_status(&w.http, path).await?, Some(403));
    }
    // No new control or terminal URL without taking control again.
    for policy in ["control", "terminal"] {
        let e = w
            .post(&a.path("url"), serde_json::json!({ "policy": policy }))
            .await
            .expect_err("no control lease, no URL");
        let (status, code, _) = api_status(&e).ok_or_else(|| anyhow!("{e}"))?;
        assert_eq!((status, code.as_str()), (409, "no_control"));
    }
    // Taking control again is a new lease: the lapsed one's URLs stay refused.
    let again = a.takeover(&w).await?;
    assert_ne!(again["control_lease"].as_str(), Some(lease_id.as_str()));
    assert_eq!(upgrade_status(&w.http, &unopened).await?, Some(403));
    let fresh = a.url(&mut w, "control").await?;
    let mut driver = Rfb::handshake(WsBytes::new(connect(&w.http, &fresh).await?)).await?;
    driver.sync().await?;
    a.release_control(&w).await?;
    w.check_log()?;
    Ok(())
}

/// Headless Chromium with a DevTools port, killed on drop.
struct Headless {
    child: tokio::process::Child,
    _profile: tempfile::TempDir,
}

impl Drop for Headless {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

async fn headless_chromium() -> Result<(Headless, String)> {
    use tokio::io::AsyncBufReadExt;
    let profile = tempfile::tempdir()?;
    let mut child = tokio::process::Command::new("/usr/bin/chromium")
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            "--window-size=1280,800",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("start chromium")?;
    let stderr = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    let ws = tokio::time::timeout(LONG, async {
        while let Some(line) = lines.next_line().await? {
            if let Some(url) = line.split("DevTools listening on ").nth(1) {
                return Ok::<_, anyhow::Error>(url.trim().to_string());
            }
        }
        bail!("chromium exited before listening")
    })
    .await
    .context("chromium did not start")??;
    // Keep draining stderr so Chromium never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((
        Headless {
            child,
            _profile: profile,
        },
        ws,
    ))
}

/// How many pixels of a PNG are close to `rgb`.
fn count_colour(png_bytes: &[u8], rgb: [u8; 3]) -> Result<usize> {
    let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    let mut reader = decoder.read_info()?;
    let mut buf = vec![0; reader.output_buffer_size().unwrap_or(0)];
    let info = reader.next_frame(&mut buf)?;
    let channels = info.color_type.samples();
    let near = |a: u8, b: u8| a.abs_diff(b) <= 24;
    Ok(buf[..info.buffer_size()]
        .chunks(channels)
        .filter(|p| p.len() >= 3 && near(p[0], rgb[0]) && near(p[1], rgb[1]) && near(p[2], rgb[2]))
        .count())
}

#[tokio::test]
async fn the_viewer_page_shows_the_desktop_in_chromium() -> Result<()> {
    let mut w = World::start().await?;
    let site = Fixture::start().await?;
    let c = w.create_computer("ws-live-8").await?;
    let a = Bot::new(&c, "bot-a");
    a.desktop(&w).await?;
    let page = site.page(
        "magenta",
        "<html><body style='margin:0;background:rgb(255,0,200)'></body></html>",
    );
    // The bot's own desktop tool opens the page; wait until the desktop shows it.
    let lease = w.lease(&c, "bot-a", "run-page").await?;
    w.post(
        &a.path("act"),
        serde_json::json!({ "lease": lease, "actions": [{ "type": "open", "url": page }] }),
    )
    .await?;
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let v = w
            .post(&a.path("observe"), serde_json::json!({ "lease": lease }))
            .await?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v["image"].as_str().unwrap_or_default())
            .unwrap_or_default();
        if !png.is_empty() && count_colour(&png, [255, 0, 200])? > 100_000 {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the bot's desktop never showed the page");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The run stays on: a viewer watches a working bot.
    let view = a.url(&mut w, "view").await?;

    let (_chromium, devtools) = headless_chromium().await?;
    let (browser, mut handler) = chromiumoxide::Browser::connect(devtools).await?;
    tokio::spawn(async move { while handler.next().await.is_some() {} });
    let tab = browser
        .new_page(format!("{}{view}", w.http))
        .await
        .context("open the viewer")?;
    let deadline = tokio::time::Instant::now() + LONG;
    let status = loop {
        let s: String = tab
            .evaluate("document.documentElement.dataset.rakazoStatus || ''")
            .await?
            .into_value()
            .unwrap_or_default();
        if s == "connected" || s == "failed" || tokio::time::Instant::now() > deadline {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let history: Vec<String> = tab
        .evaluate("window.rakazoStatus")
        .await?
        .into_value()
        .unwrap_or_default();
    assert_eq!(status, "connected", "reporter history {history:?}");
    assert_eq!(&history[..2], ["loading", "connecting"]);
    let decoder: bool = tab
        .evaluate("'VideoDecoder' in window && !!window.VideoDecoder")
        .await?
        .into_value()
        .unwrap_or(true);
    assert!(!decoder, "VideoDecoder is removed");
    // The bot's magenta page appears in the viewer's screenshot.
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let shot = tab
            .screenshot(chromiumoxide::page::ScreenshotParams::builder().build())
            .await?;
        if count_colour(&shot, [255, 0, 200])? > 10_000 {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            let keep = std::env::temp_dir().join("rakazo-live-viewer-failure.png");
            let _ = std::fs::write(&keep, &shot);
            bail!(
                "the desktop never showed in the viewer (screenshot: {})",
                keep.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(browser);
    w.check_log()?;
    Ok(())
}

/// Runs the real `rakazo` CLI against the world; returns (exit code, stdout, stderr).
async fn cli(w: &World, args: &[&str]) -> Result<(i32, String, String)> {
    let out = tokio::time::timeout(
        LONG,
        tokio::process::Command::new(tests::bin("rakazo"))
            .args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("RAKAZO_URL", &w.http)
            .env("RAKAZO_TOKEN", w.api_token())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .context("rakazo did not finish")??;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    ))
}

#[tokio::test]
async fn the_cli_issues_urls_and_takes_and_releases_control() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-live-9").await?;
    let (code, view, err) = cli(&w, &["screen", "url", &c, "bot-a"]).await?;
    assert_eq!(code, 0, "{err}");
    let view = view.trim().to_string();
    let path = view
        .split_once("/cap/")
        .map(|(_, t)| format!("/cap/{t}"))
        .ok_or_else(|| anyhow!("no capability URL in {view:?}"))?;
    w.add_secret(path.trim_start_matches("/cap/"));
    assert_eq!(get(&w.http, &path).await?.status, 200);

    // Control needs the takeover; a running bot refuses it with the contract's words.
    let (code, _, err) = cli(&w, &["screen", "url", &c, "bot-a", "--control"]).await?;
    assert_ne!(code, 0);
    assert!(err.contains("take control"), "{err}");
    let run = w.lease(&c, "bot-a", "run-cli").await?;
    let (code, _, err) = cli(&w, &["screen", "takeover", &c, "bot-a"]).await?;
    assert_ne!(code, 0);
    assert!(err.contains("Stop the bot first"), "{err}");
    Bot::new(&c, "bot-a").end_run(&w, &run).await?;
    let (code, out, err) = cli(&w, &["screen", "takeover", &c, "bot-a"]).await?;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("control of bot-a taken"), "{out}");
    for args in [
        vec!["screen", "url", c.as_str(), "bot-a", "--control"],
        vec!["terminal", "url", c.as_str(), "bot-a"],
    ] {
        let (code, url, err) = cli(&w, &args).await?;
        assert_eq!(code, 0, "{err}");
        let token = url
            .trim()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        w.add_secret(&token);
        assert_eq!(get(&w.http, &format!("/cap/{token}")).await?.status, 200);
    }
    let (code, out, err) = cli(&w, &["screen", "release", &c, "bot-a"]).await?;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("released"), "{out}");
    w.check_log()?;
    Ok(())
}

/// Reads the reporter's state history of a page.
async fn reporter_history(tab: &chromiumoxide::Page) -> Result<Vec<String>> {
    Ok(tab
        .evaluate("window.rakazoStatus || []")
        .await?
        .into_value()
        .unwrap_or_default())
}

/// Waits until the page's reporter history satisfies `done`.
async fn wait_history(
    tab: &chromiumoxide::Page,
    what: &str,
    done: impl Fn(&[String]) -> bool,
) -> Result<Vec<String>> {
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let h = reporter_history(tab).await?;
        if done(&h) {
            return Ok(h);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("timed out waiting for {what}; reporter history {h:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_terminal_page_runs_a_shell_and_reconnects_to_a_fresh_one() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-live-10").await?;
    let a = Bot::new(&c, "bot-a");
    a.desktop(&w).await?;
    a.takeover(&w).await?;
    let term = a.terminal_url(&mut w).await?;

    let (_chromium, devtools) = headless_chromium().await?;
    let (browser, mut handler) = chromiumoxide::Browser::connect(devtools).await?;
    tokio::spawn(async move { while handler.next().await.is_some() {} });
    let tab = browser
        .new_page(format!("{}{term}", w.http))
        .await
        .context("open the terminal page")?;
    let count = |h: &[String], s: &str| h.iter().filter(|x| x.as_str() == s).count();
    wait_history(&tab, "connected", |h| count(h, "connected") >= 1).await?;

    // The shell exits: the page reconnects to a fresh shell by itself (docs/screens.md#terminal).
    tab.evaluate("document.querySelector('.xterm-helper-textarea').focus()")
        .await?;
    let input = tab.find_element(".xterm-helper-textarea").await?;
    input.type_str("exit").await?;
    input.press_key("Enter").await?;
    let h = wait_history(&tab, "a second connection", |h| count(h, "connected") >= 2).await?;
    assert!(h.contains(&"disconnected".to_string()), "{h:?}");

    // Releasing control ends the shell, and the page's retry is refused: it reports failure.
    a.release_control(&w).await?;
    let h = wait_history(&tab, "failed", |h| h.last().is_some_and(|s| s == "failed")).await?;
    assert_eq!(count(&h, "connected"), 2, "{h:?}");
    drop(browser);
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
    let deadline = tokio::time::Instant::now() + LONG;
    let again = loop {
        match upgrade_or_status(&w.http, &view).await? {
            Ok(ws) => break ws,
            Err(429) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(status) => bail!("after a close, the upgrade still answered {status}"),
        }
    };
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

/// A Team computer's bot (docs/lifecycle.md#vocabulary, docs/screens.md#terminal): a command under
/// its lease without a cwd starts in its own `bots/<bot-id>/` (created on first use), an explicit
/// cwd keeps its meaning, and a command without a lease starts in the home; its terminal runs as
/// the same user as its commands, starts in the same directory, and reads a profile: `whoami`,
/// `$HOME`, `$USER` and the prompt (`user@host:~/bots/<bot-id>$`) are right.
#[tokio::test]
async fn a_team_bots_commands_and_terminal_start_in_its_directory_as_one_user() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-live-bots").await?;
    let a = Bot::new(&c, "bot-a");
    a.desktop(&w).await?;
    let lease = w.lease(&c, "bot-a", "run-dirs").await?;
    let probe = "pwd; printf '%s\\n' \"$HOME\"; id -un; id -u";
    let leased = w
        .exec(
            &c,
            serde_json::json!({ "argv": ["sh", "-c", probe], "bot": "bot-a", "lease": lease }),
        )
        .await?;
    assert_eq!(leased.code, Some(0), "{:?}", leased.events);
    let out = String::from_utf8_lossy(&leased.stdout).to_string();
    let lines: Vec<&str> = out.lines().collect();
    let [pwd, home, user, uid] = lines[..] else {
        bail!("unexpected probe output {out:?}");
    };
    assert_eq!(pwd, format!("{home}/bots/bot-a"), "{out}");
    let explicit = w
        .exec(
            &c,
            serde_json::json!({ "argv": ["pwd"], "cwd": "bots", "bot": "bot-a", "lease": lease }),
        )
        .await?;
    assert_eq!(
        String::from_utf8_lossy(&explicit.stdout).trim_end(),
        format!("{home}/bots")
    );
    assert_eq!(
        w.sh(&c, "pwd").await?.trim_end(),
        home,
        "no lease: the home"
    );
    assert_eq!(
        w.sh(&c, "stat -c %a bots/bot-a").await?.trim_end(),
        "700",
        "the bot directory is private"
    );
    a.end_run(&w, &lease).await?;

    a.takeover(&w).await?;
    let term = a.terminal_url(&mut w).await?;
    let mut ws = connect(&w.http, &term).await?;
    let mut seen = Vec::new();
    // The prompt of the profile, before anything is typed.
    read_until(&mut ws, &mut seen, ":~/bots/bot-a$ ", LONG).await?;
    let prompt = String::from_utf8_lossy(&seen).to_string();
    assert!(prompt.contains(&format!("{user}@")), "{prompt:?}");
    ws.send(Message::Binary(
        encode_input(
            b"printf 'P=%s\\n' \"$(pwd)\"; printf 'W=%s\\n' \"$(whoami)\"; \
              printf 'E=%s:%s:%s\\n' \"$HOME\" \"$USER\" \"$(id -u)\"\r",
        )
        .into(),
    ))
    .await?;
    let expected = format!("E={home}:{user}:{uid}");
    read_until(&mut ws, &mut seen, &expected, LONG).await?;
    let text = String::from_utf8_lossy(&seen).to_string();
    assert!(text.contains(&format!("P={pwd}\r\n")), "{text:?}");
    assert!(text.contains(&format!("W={user}\r\n")), "{text:?}");
    w.check_log()?;
    Ok(())
}

/// The SysV shared-memory segments of the computer's user (its own system user when the
/// control plane runs as root, as in CI; else the test's own user, shared with whatever else
/// runs as it).
fn segments_of(uid: u32) -> Result<Vec<u64>> {
    let mut ids: Vec<u64> = tests::procstat::shm_segments()?
        .into_iter()
        .filter(|s| s.uid == uid || s.cuid == uid)
        .map(|s| s.shmid)
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Desktops, their viewers and a controller, observations and acts, then teardown and a stop of
/// the computer: no SysV shared-memory segment of the computer's user is left (x11vnc, which
/// served views before Xvnc, leaked them when it was killed; the guest's own MIT-SHM capture
/// uses a memfd, never a SysV segment).
#[tokio::test]
async fn no_sysv_shared_memory_segment_outlives_desktops_or_their_viewers() -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let mut w = World::start().await?;
    let site = Fixture::start().await?;
    let c = w.create_computer("ws-live-shm").await?;
    let guest = *tests::pids_with_env("RAKAZO_COMPUTER_ID", &c)
        .first()
        .ok_or_else(|| anyhow!("no guest process for {c}"))?;
    let uid = std::fs::metadata(format!("/proc/{guest}"))?.uid();
    let baseline = segments_of(uid)?;

    let page = site.page(
        "moving",
        "<html><body style='margin:0'><div id=d style='width:200px;height:200px;\
         background:rgb(0,90,200)'></div><script>let i = 0; setInterval(() => \
         { d.style.marginLeft = (i++ % 50) * 10 + 'px'; }, 30);</script></body></html>",
    );
    let bots = [Bot::new(&c, "bot-a"), Bot::new(&c, "bot-b")];
    let mut viewers = Vec::new();
    for bot in &bots {
        bot.desktop(&w).await?;
        let lease = w.lease(&c, &bot.bot, "run-shm").await?;
        w.post(
            &bot.path("act"),
            serde_json::json!({ "lease": lease, "actions": [
                { "type": "open", "url": page }, { "type": "click", "x": 640, "y": 400 }
            ]}),
        )
        .await?;
        w.post(&bot.path("observe"), serde_json::json!({ "lease": lease }))
            .await?;
        bot.end_run(&w, &lease).await?;
        let view = bot.url(&mut w, "view").await?;
        let mut rfb = Rfb::handshake(WsBytes::new(connect(&w.http, &view).await?)).await?;
        rfb.sync().await?;
        viewers.push(rfb);
    }
    bots[0].takeover(&w).await?;
    let control = bots[0].url(&mut w, "control").await?;
    let mut driver = Rfb::handshake(WsBytes::new(connect(&w.http, &control).await?)).await?;
    driver.pointer(300, 300, 0).await?;
    driver.sync().await?;
    // The moving page keeps the viewers' incremental updates coming.
    for rfb in &mut viewers {
        for _ in 0..5 {
            rfb.request_update(true).await?;
            rfb.read_update().await?;
        }
    }
    let live = segments_of(uid)?;
    drop(driver);
    drop(viewers);
    bots[0].release_control(&w).await?;
    for bot in &bots {
        w.post(&bot.path("release"), serde_json::json!({})).await?;
    }
    let released = segments_of(uid)?;
    w.client
        .json(
            hyper::Method::POST,
            &format!("/v1/computers/{c}/stop"),
            None,
        )
        .await?;
    let stopped = segments_of(uid)?;
    assert_eq!(
        (released, stopped),
        (baseline.clone(), baseline.clone()),
        "segments of uid {uid}: baseline {baseline:?}, with live desktops {live:?}"
    );
    w.check_log()?;
    Ok(())
}
