//! The noVNC viewer and terminal pages in a real headless Chromium.

use super::*;

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

/// What the terminal page's screen shows (xterm.js's rows).
async fn screen_text(tab: &chromiumoxide::Page) -> Result<String> {
    Ok(tab
        .evaluate("(document.querySelector('.xterm-rows') || {}).innerText || ''")
        .await?
        .into_value()
        .unwrap_or_default())
}

/// Waits until the terminal page's screen shows `text`.
async fn wait_screen(tab: &chromiumoxide::Page, text: &str) -> Result<String> {
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let screen = screen_text(tab).await?;
        if screen.contains(text) {
            return Ok(screen);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("timed out waiting for {text:?} on the terminal page: {screen:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Types a line into the terminal page.
async fn type_line(tab: &chromiumoxide::Page, line: &str) -> Result<()> {
    tab.evaluate("document.querySelector('.xterm-helper-textarea').focus()")
        .await?;
    let input = tab.find_element(".xterm-helper-textarea").await?;
    input.type_str(line).await?;
    input.press_key("Enter").await?;
    Ok(())
}

/// The terminal page (docs/screens.md#reconnecting): a restarted control plane drops its
/// websocket, and the page reconnects by itself to the same shell, its screen redrawn; a shell
/// that exits comes back as a fresh one that says so; releasing control closes the page's
/// terminal for good.
#[tokio::test]
async fn the_terminal_page_reattaches_after_a_drop_and_stops_when_control_ends() -> Result<()> {
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
    type_line(&tab, "KEPT=page-$((6*7)); echo READY-$KEPT").await?;
    wait_screen(&tab, "READY-page-42").await?;

    // Every websocket drops with the control plane; the page finds its shell again.
    w.kill_server();
    w.spawn_server().await?;
    let h = wait_history(&tab, "a second connection", |h| count(h, "connected") >= 2).await?;
    assert!(h.contains(&"reconnecting".to_string()), "{h:?}");
    // The same shell: its variable is still set.
    type_line(&tab, "echo AGAIN-$KEPT-END").await?;
    wait_screen(&tab, "AGAIN-page-42-END").await?;

    // The shell exits: the page reconnects to a fresh shell, which says so.
    type_line(&tab, "exit").await?;
    wait_history(&tab, "a third connection", |h| count(h, "connected") >= 3).await?;
    wait_screen(&tab, "the previous shell is gone").await?;
    type_line(&tab, "echo FRESH-${KEPT:-none}-END").await?;
    wait_screen(&tab, "FRESH-none-END").await?;

    // Releasing control ends the shell and the page stops: no retry.
    a.release_control(&w).await?;
    let h = wait_history(&tab, "disconnected", |h| {
        h.last().is_some_and(|s| s == "disconnected")
    })
    .await?;
    wait_screen(&tab, "[terminal closed: ").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = reporter_history(&tab).await?;
    assert_eq!(after, h, "the page retried after a revocation");
    assert_eq!(count(&h, "connected"), 3, "{h:?}");
    drop(browser);
    w.check_log()?;
    Ok(())
}
