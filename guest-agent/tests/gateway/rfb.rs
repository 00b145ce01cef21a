//! RFB through the gateway: a viewer's input filtered out and a controller's passed, broken RFB
//! and bad requests, revocation, and a restarted display served by its new server only.

use super::*;

/// The X pointer's position on the root window.
fn pointer(x: &impl x11rb::connection::Connection) -> Result<(i16, i16)> {
    let root = x.setup().roots[0].root;
    let p = x.query_pointer(root)?.reply()?;
    Ok((p.root_x, p.root_y))
}

/// Whether any key of the X keyboard is down.
fn any_key_down(x: &impl x11rb::connection::Connection) -> Result<bool> {
    Ok(x.query_keymap()?.reply()?.keys.iter().any(|&b| b != 0))
}

const XK_SHIFT_L: u32 = 0xffe1;

/// Sends a pointer move and a key press, then round-trips a full update request through the
/// same stream: when the update arrives, the gateway has handled the input messages before it.
async fn send_input_and_round_trip(client: &mut RfbClient<Stream>, x: u16, y: u16) -> Result<()> {
    client.pointer(x, y, 0).await?;
    client.key(true, XK_SHIFT_L).await?;
    client.cut_text(b"clipboard from a viewer").await?;
    client.request_update(false).await?;
    within("a framebuffer update", client.next_update()).await??;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_cannot_move_the_pointer_or_press_keys_and_a_controller_can() -> Result<()> {
    let guest = Guest::start(None).await?;
    guest.ensure_screen("bot-rfb").await?;
    let x = guest.x_connection("bot-rfb").await?;
    let start = pointer(&x)?;
    let target = (321u16, 123u16);
    assert_ne!(start, (321, 123));
    assert!(!any_key_down(&x)?);

    let mut view = guest.rfb("bot-rfb", CapabilityKind::View).await?;
    assert_eq!((view.init.width, view.init.height), (1280, 800));
    send_input_and_round_trip(&mut view, target.0, target.1).await?;
    // A second round trip: whatever the first one let through has surely been handled.
    view.request_update(false).await?;
    within("a second update", view.next_update()).await??;
    x.sync()?;
    assert_eq!(pointer(&x)?, start, "a viewer moved the X pointer");
    assert!(!any_key_down(&x)?, "a viewer pressed a key");

    let mut control = guest.rfb("bot-rfb", CapabilityKind::Control).await?;
    send_input_and_round_trip(&mut control, target.0, target.1).await?;
    eventually("the pointer to move", || Ok(pointer(&x)? == (321, 123))).await?;
    eventually("the key to be down", || any_key_down(&x)).await?;
    control.key(false, XK_SHIFT_L).await?;
    eventually("the key to be up", || Ok(!any_key_down(&x)?)).await?;

    // The viewer still watches while the controller drives.
    view.request_update(false).await?;
    within("an update after control", view.next_update()).await??;
    guest.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_breaking_rfb_is_reset_and_bad_requests_are_refused() -> Result<()> {
    let guest = Guest::start(None).await?;
    // No desktop yet: nothing to connect to.
    match guest.connect("bot-bad", CapabilityKind::View, None).await? {
        Reply::Error(e) => assert_eq!(e.code, ErrorCode::NotFound, "{e:?}"),
        other => bail!("connect without a desktop answered {other:?}"),
    }
    guest.ensure_screen("bot-bad").await?;
    for (kind, lease) in [
        (CapabilityKind::Control, None),
        (CapabilityKind::Terminal, None),
        (CapabilityKind::Control, Some("bad lease!")),
        (CapabilityKind::Terminal, Some(&"x".repeat(65)[..])),
    ] {
        match guest.connect("bot-bad", kind, lease).await? {
            Reply::Error(e) => assert_eq!(e.code, ErrorCode::BadRequest, "{e:?}"),
            other => bail!("connect {kind:?} with lease {lease:?} answered {other:?}"),
        }
    }
    let mut view = guest.rfb("bot-bad", CapabilityKind::View).await?;
    // Message type 7 does not exist: its length is unknown, so the connection must end.
    view.send_raw(&[7, 0, 0, 0]).await?;
    let reset = stream_end(&mut view.into_inner()).await?;
    assert_eq!(reset, Some(RESET_PROTOCOL.into()));
    guest.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_ends_control_then_everything_and_a_reused_slot_is_unreachable() -> Result<()> {
    // One slot: the second bot gets the first one's display number.
    let guest = Guest::start(Some(1)).await?;
    guest.ensure_screen("bot-a").await?;
    let mut view = guest.rfb("bot-a", CapabilityKind::View).await?;
    let control = guest.rfb("bot-a", CapabilityKind::Control).await?;
    let bot_a = BotId::new("bot-a")?;
    assert_eq!(guest.ops.gateway().capability_count(&bot_a).await, 2);

    guest.revoke("bot-a", RevokeScope::Control).await?;
    let reset = stream_end(&mut control.into_inner()).await?;
    assert_eq!(reset, Some(RESET_REVOKED.into()));
    view.request_update(false).await?;
    within("an update after revoking control", view.next_update()).await??;
    assert_eq!(guest.ops.gateway().capability_count(&bot_a).await, 1);

    // A new control connection gets a new server on a new socket.
    let control = guest.rfb("bot-a", CapabilityKind::Control).await?;
    let before = guest.gateway_files();
    assert!(
        before.iter().any(|f| f.ends_with("-control.sock")),
        "{before:?}"
    );

    // Releasing the screen revokes everything before Chrome and X stop.
    guest.release_screen("bot-a").await?;
    let reset = stream_end(&mut view.into_inner()).await?;
    assert_eq!(reset, Some(RESET_REVOKED.into()));
    let reset = stream_end(&mut control.into_inner()).await?;
    assert_eq!(reset, Some(RESET_REVOKED.into()));
    assert_eq!(guest.ops.gateway().capability_count(&bot_a).await, 0);
    let after = guest.gateway_files();
    assert!(
        after.iter().all(|f| !f.ends_with(".sock")),
        "sockets left: {after:?}"
    );

    // The slot goes to another bot; the old bot's capabilities reach nothing.
    guest.ensure_screen("bot-b").await?;
    match guest.connect("bot-a", CapabilityKind::View, None).await? {
        Reply::Error(e) => assert_eq!(e.code, ErrorCode::NotFound, "{e:?}"),
        other => bail!("the released bot's view answered {other:?}"),
    }
    let mut view_b = guest.rfb("bot-b", CapabilityKind::View).await?;
    view_b.request_update(false).await?;
    within("the new bot's update", view_b.next_update()).await??;
    let new_sockets: Vec<_> = guest
        .gateway_files()
        .into_iter()
        .filter(|f| f.ends_with(".sock"))
        .collect();
    assert!(
        new_sockets.iter().all(|f| !before.contains(f)),
        "a socket name came back: {new_sockets:?} vs {before:?}"
    );
    guest.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_display_is_served_by_a_new_server_never_the_old_one() -> Result<()> {
    let guest = Guest::start(None).await?;
    let info = guest.ensure_screen("bot-crash").await?;
    let mut view = guest.rfb("bot-crash", CapabilityKind::View).await?;
    view.request_update(false).await?;
    within("an update", view.next_update()).await??;
    let old_sockets = guest.gateway_files();

    // The X server (Xvnc, the RFB server too) dies under the viewer: the stream ends.
    let lock = std::fs::read_to_string(format!("/tmp/.X{}-lock", info.display))?;
    let xvnc: i32 = lock.trim().parse()?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(xvnc),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    let reset = stream_end(&mut view.into_inner()).await?;
    assert_eq!(
        reset, None,
        "the guest finishes a stream whose server went away"
    );
    // A dying process closes its sockets (which ended the stream) before it has exited; the
    // display is dead once the process has (a zombie until the guest reaps it).
    eventually("the x server to exit", || {
        let stat = std::fs::read_to_string(format!("/proc/{xvnc}/stat")).unwrap_or_default();
        Ok(stat.is_empty() || stat.rsplit(") ").next().is_some_and(|s| s.starts_with('Z')))
    })
    .await?;
    match guest
        .connect("bot-crash", CapabilityKind::View, None)
        .await?
    {
        Reply::Error(e) => assert_eq!(e.code, ErrorCode::NotFound, "{e:?}"),
        other => bail!("a view of a dead display answered {other:?}"),
    }

    // Repaired (a new desktop epoch): a new server on a new socket serves the new display.
    let repaired = guest.ensure_screen("bot-crash").await?;
    assert!(repaired.started, "{repaired:?}");
    let mut view = guest.rfb("bot-crash", CapabilityKind::View).await?;
    view.request_update(false).await?;
    within("an update of the repaired display", view.next_update()).await??;
    let new_sockets: Vec<_> = guest
        .gateway_files()
        .into_iter()
        .filter(|f| f.ends_with(".sock"))
        .collect();
    assert_eq!(new_sockets.len(), 1, "{new_sockets:?}");
    assert!(!old_sockets.contains(&new_sockets[0]), "{new_sockets:?}");
    guest.shutdown().await;
    Ok(())
}
