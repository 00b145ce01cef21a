//! The clipboard: no client receives the bot's selection, and only a controller pastes.

use super::*;

/// The display and cookie file of `bot`'s desktop, for X tools.
async fn x_env(guest: &Guest, bot: &str) -> Result<(String, std::path::PathBuf)> {
    let live = guest.live(bot).await?;
    Ok((live.display().to_string(), live.xauthority().to_path_buf()))
}

/// Makes `text` the bot's X `selection` (`clipboard` or `primary`) with xclip, which serves it
/// until killed (dropping the child kills it).
async fn set_selection(
    guest: &Guest,
    bot: &str,
    selection: &str,
    text: &str,
) -> Result<tokio::process::Child> {
    let (display, xauthority) = x_env(guest, bot).await?;
    let mut child = tokio::process::Command::new("xclip")
        .args(["-quiet", "-selection", selection, "-i"])
        .env("DISPLAY", display)
        .env("XAUTHORITY", xauthority)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("run xclip (Debian package xclip)")?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| anyhow!("xclip has no stdin"))?;
    stdin.write_all(text.as_bytes()).await?;
    drop(stdin);
    Ok(child)
}

/// The bot's X `selection` as xclip reads it (`None` when nobody owns it).
async fn selection(guest: &Guest, bot: &str, selection: &str) -> Result<Option<String>> {
    let (display, xauthority) = x_env(guest, bot).await?;
    let out = within(
        "xclip -o",
        tokio::process::Command::new("xclip")
            .args(["-o", "-selection", selection])
            .env("DISPLAY", display)
            .env("XAUTHORITY", xauthority)
            .kill_on_drop(true)
            .output(),
    )
    .await??;
    Ok(out
        .status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// No client receives what the bot copies (CLIPBOARD or PRIMARY): Xvnc's `SendCutText` is global
/// to the server and a viewer must never get the bot's clipboard, so bot→user clipboard is off
/// for controllers too, and no program on the desktop can turn it back on. A controller's paste
/// (ClientCutText) becomes the desktop's clipboard; a viewer's is dropped by the gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_client_receives_the_bots_clipboard_and_only_a_controller_pastes() -> Result<()> {
    /// How long both clients are watched after the bot copied. A server that sends the
    /// clipboard sends it about at once; this window only bounds how long the test looks, it
    /// cannot make a correct server fail.
    const QUIET: Duration = Duration::from_secs(4);
    let guest = Guest::start(None).await?;
    guest.ensure_screen("bot-clip").await?;
    let mut view = guest.rfb("bot-clip", CapabilityKind::View).await?;
    let mut control = guest.rfb("bot-clip", CapabilityKind::Control).await?;
    for client in [&mut view, &mut control] {
        client.request_update(false).await?;
        within("a first update", client.next_update()).await??;
    }

    // A viewer's paste is dropped (a round trip later the clipboard is still nobody's)...
    view.cut_text(b"pasted-by-a-viewer-5d1e").await?;
    view.request_update(false).await?;
    within("an update after the viewer's paste", view.next_update()).await??;
    assert_eq!(selection(&guest, "bot-clip", "clipboard").await?, None);
    // ...and a controller's becomes the desktop's clipboard.
    let pasted = "pasted-by-the-controller-0b77";
    control.cut_text(pasted.as_bytes()).await?;
    eventually_async("the controller's paste on the desktop", || async {
        Ok(selection(&guest, "bot-clip", "clipboard").await?.as_deref() == Some(pasted))
    })
    .await?;

    // A program on the desktop tries to turn the clipboard on through the VNC extension; the
    // server lets no X client change its parameters.
    let (display, xauthority) = x_env(&guest, "bot-clip").await?;
    for param in ["SendCutText=1", "SendPrimary=1"] {
        within(
            "vncconfig",
            tokio::process::Command::new("vncconfig")
                .args(["-set", param])
                .env("DISPLAY", &display)
                .env("XAUTHORITY", &xauthority)
                .kill_on_drop(true)
                .output(),
        )
        .await?
        .context("run vncconfig (Debian package tigervnc-common)")?;
    }
    let _clip = set_selection(&guest, "bot-clip", "clipboard", "copied-by-the-bot-7f3a").await?;
    let _prim = set_selection(&guest, "bot-clip", "primary", "selected-by-the-bot-91c2").await?;
    eventually_async("the bot's copy on the desktop", || async {
        Ok(selection(&guest, "bot-clip", "clipboard").await?.as_deref()
            == Some("copied-by-the-bot-7f3a"))
    })
    .await?;
    view.request_update(true).await?;
    control.request_update(true).await?;
    let watched = tokio::time::timeout(QUIET, async {
        tokio::try_join!(no_cut_text(&mut view), no_cut_text(&mut control))
    })
    .await;
    if let Ok(received) = watched {
        received?;
    }
    guest.shutdown().await;
    Ok(())
}

/// Polls an async `check` until it holds.
async fn eventually_async<F, Fut>(what: &str, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    within(what, async {
        loop {
            if check().await? {
                return Ok(());
            }
            tokio::time::sleep(POLL).await;
        }
    })
    .await?
}

/// Reads a client's messages, asking for updates, and fails on the first ServerCutText.
async fn no_cut_text(client: &mut RfbClient<Stream>) -> Result<()> {
    use guest_agent::gateway::rfb::client::ServerMsg;
    loop {
        match client.read_message().await? {
            ServerMsg::CutText(t) => bail!("a client received {:?}", String::from_utf8_lossy(&t)),
            ServerMsg::FramebufferUpdate { .. } => client.request_update(true).await?,
            ServerMsg::ColourMap | ServerMsg::Bell => {}
        }
    }
}
