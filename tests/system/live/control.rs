//! View against control: input dropped or passed, a lapsed control lease closing control and
//! terminals, and the CLI taking and releasing control.

use super::*;

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
