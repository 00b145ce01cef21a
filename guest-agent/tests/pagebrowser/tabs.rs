//! Navigation and tabs: navigate waiting for the new document, tab selection by visibility
//! and focus, and snapshots following tabs the page opens and closes.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn navigate_waits_for_the_new_document_and_reports_failures() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/start")).await?;
    // A slow server: the snapshot is of the new document, never the old one.
    let slow = env.navigate(&server.url("/slow/700")).await?;
    assert_eq!(slow.title, "700");
    assert_eq!(slow.url, server.url("/slow/700"));
    // Interactive is enough: an image that loads for 8 s does not hold the navigation up.
    let started = Instant::now();
    let early = env.navigate(&server.url("/slow-image")).await?;
    assert_eq!(early.tree, "Text first");
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    // A document still loading after 10 s has not settled.
    let started = Instant::now();
    let err = env.navigate(&server.url("/stall")).await.unwrap_err();
    let waited = started.elapsed();
    assert!(format!("{err:#}").contains(NOT_SETTLED), "{err:#}");
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_secs(14),
        "{waited:?}"
    );
    // A same-document navigation keeps the document, so its refs.
    let search = env.navigate(&server.url("/search")).await?;
    let moved = env.navigate(&server.url("/search#results")).await?;
    assert_eq!(moved.url, server.url("/search#results"));
    assert_eq!(moved.elements, search.elements);
    let closed = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let err = env
        .navigate(&format!("http://127.0.0.1:{closed}/"))
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("net::ERR_CONNECTION_REFUSED"),
        "{err:#}"
    );

    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tab_selection_follows_visibility_and_focus() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/one")).await?;
    env.navigate(&server.url("/page/one")).await?;

    // A second tab in the window becomes the visible one (the first is hidden) and is chosen.
    let cdp = env.browser.cdp();
    cdp.open_tab(&server.url("/page/second")).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = env.snapshot().await;
        if s.as_ref().is_ok_and(|s| s.title == "second") {
            break;
        }
        if Instant::now() >= deadline {
            bail!("the new tab was not chosen: {s:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A second window: two visible tabs. The test's own sessions pin which of them has focus
    // (focus emulation lasts as long as the session that set it).
    let t = Duration::from_secs(10);
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Created {
        target_id: String,
    }
    let created: Created = cdp
        .call(
            "Target.createTarget",
            None,
            &serde_json::json!({ "url": server.url("/page/third"), "newWindow": true }),
            t,
        )
        .await?;
    let third = cdp.attach(&created.target_id).await?;
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Targets {
        target_infos: Vec<Target>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Target {
        target_id: String,
        url: String,
    }
    let targets: Targets = cdp
        .call("Target.getTargets", None, &serde_json::json!({}), t)
        .await?;
    let second = targets
        .target_infos
        .iter()
        .find(|target| target.url.ends_with("/page/second"))
        .map(|target| target.target_id.clone());
    let second = cdp.attach(&second.context("the second tab")?).await?;
    let focus = |session: SessionId, enabled: bool| {
        let cdp = cdp.clone();
        async move {
            cdp.call::<_, serde_json::Value>(
                "Emulation.setFocusEmulationEnabled",
                Some(&session),
                &serde_json::json!({ "enabled": enabled }),
                Duration::from_secs(10),
            )
            .await
        }
    };
    // The new window has the focus: the single focused visible tab is chosen (once it loaded).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = env.snapshot().await;
        if s.as_ref().is_ok_and(|s| s.title == "third") {
            break;
        }
        if Instant::now() >= deadline {
            bail!("the new window's tab was not chosen: {s:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Both visible tabs focused: ambiguous, so refused.
    focus(second.clone(), true).await?;
    let err = env.pages.snapshot(&env.ws()).await.unwrap_err();
    assert_eq!(
        (err.code, err.message.as_str()),
        (ErrorCode::Failed, NO_TAB)
    );
    let steps = [PageStep::Press { key: "Tab".into() }];
    let err = env.pages.act(&env.ws(), &steps).await.unwrap_err();
    assert_eq!(err.message, NO_TAB, "act refuses before any step");
    let err = env
        .pages
        .navigate(&env.ws(), &server.url("/page/x"))
        .await
        .unwrap_err();
    assert_eq!(err.message, NO_TAB);
    // Focus back on the third tab alone: chosen again.
    focus(second.clone(), false).await?;
    focus(third.clone(), true).await?;
    assert_eq!(env.snapshot().await?.title, "third");
    cdp.detach(&second);
    cdp.detach(&third);
    env.stop().await
}

/// Snapshots until one shows the tab titled `title`, up to 10 s (a tab the page just opened or
/// closed becomes the visible one a moment later).
async fn snapshot_of(env: &mut Env, title: &str) -> Result<Snapshot> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = env.snapshot().await;
        match s {
            Ok(s) if s.title == title => return Ok(s),
            _ if Instant::now() >= deadline => bail!("no snapshot of {title:?}: {s:?}"),
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_follow_tabs_the_page_opens_and_closes_from_target_events() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/opener")).await?;
    env.navigate(&server.url("/opener")).await?;
    let cdp = env.ws();

    // One tab, its world in place: a snapshot is one CDP command (the tab comes from the target
    // events, its visibility back with the snapshot).
    let sent = cdp.commands_sent();
    let opener = env.snapshot().await?;
    assert_eq!(opener.title, "Opener");
    assert_eq!(cdp.commands_sent() - sent, 1, "commands of a warm snapshot");

    // The page opens a tab, which becomes the visible one: the snapshot follows it.
    env.act_ok(&[click(&find(&opener, "button", "Open popup")?)])
        .await?;
    let popup = snapshot_of(&mut env, "Popup").await?;

    // The popup closes itself: the snapshot is the opener's again. The act may fail or not
    // (its tab went away under it); what counts is what the next snapshots see.
    let _ = env
        .act(&[click(&find(&popup, "button", "Close me")?)])
        .await;
    snapshot_of(&mut env, "Opener").await?;
    // And the closed tab is forgotten: one tab again, one command per snapshot.
    let sent = cdp.commands_sent();
    assert_eq!(env.snapshot().await?.title, "Opener");
    assert_eq!(
        cdp.commands_sent() - sent,
        1,
        "commands of a warm snapshot after the popup closed"
    );
    env.stop().await
}
