//! The screen gateway against real desktops (Xvnc + Chromium), real shells on real PTYs, driven
//! as the control plane drives it: `Connect`/`Revoke` requests on QUIC streams (real QUIC on
//! loopback, served by the real `Ops` dispatch), then raw RFB or terminal frames.
//!
//! One Xvnc serves a desktop's view and control capabilities alike, with no view-only setting of
//! its own, so the gateway's RFB filter is the only thing that can stop a viewer's input. Nothing
//! sleeps to wait for readiness: every wait polls up to a generous deadline, and absence is
//! checked after a round trip through the same stream.

use anyhow::{anyhow, bail, Context, Result};
use gateway_proto::desktop::{ScreenInfo, ScreenRelease, ScreenRequest};
use gateway_proto::live::{CapabilityKind, ConnectRequest, RevokeRequest, RevokeScope};
use gateway_proto::termframe::{encode_input, encode_resize};
use gateway_proto::wire::{RESET_PROTOCOL, RESET_REVOKED};
use gateway_proto::{BotId, ErrorCode, LeaseToken, Reply, Request, StartDir};
use guest_agent::gateway::capstream::{self, CapStream};
use guest_agent::gateway::rfb::client::RfbClient;
use guest_agent::gateway::GatewayConfig;
use guest_agent::home::Home;
use guest_agent::ops::Ops;
use guest_agent::screens::{Screens, ScreensConfig};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use x11rb::protocol::xproto::ConnectionExt as _;
use x11rb::wrapper::ConnectionExt as _;

/// Bound on every single wait; generous for a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(25);

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> Result<T> {
    tokio::time::timeout(WAIT, fut)
        .await
        .map_err(|_| anyhow!("timed out after {WAIT:?} waiting for {what}"))
}

/// Polls `check` until it holds.
async fn eventually(what: &str, mut check: impl FnMut() -> Result<bool>) -> Result<()> {
    within(what, async {
        loop {
            if check()? {
                return Ok(());
            }
            tokio::time::sleep(POLL).await;
        }
    })
    .await?
}

fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("guest_agent=debug"))
        .with_test_writer()
        .try_init();
}

/// A guest (`Ops` with real desktops) reachable over QUIC, and the control plane's connection.
struct Guest {
    ops: Arc<Ops>,
    conn: quinn::Connection,
    runtime: tempfile::TempDir,
    home: tempfile::TempDir,
    _server: quinn::Endpoint,
    _client: quinn::Endpoint,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for Guest {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// A TLS 1.3 (ring) QUIC server whose every stream is served by `ops`, and a client trusting it.
async fn quic_pair(
    ops: Arc<Ops>,
) -> Result<(
    quinn::Endpoint,
    quinn::Endpoint,
    quinn::Connection,
    tokio::task::JoinHandle<()>,
)> {
    let ck = rcgen::generate_simple_self_signed(vec!["guest".into()])?;
    let cert: CertificateDer<'static> = ck.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server_tls = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)?;
    let server_cfg = quinn::ServerConfig::with_crypto(Arc::new(
        quinn::crypto::rustls::QuicServerConfig::try_from(server_tls)?,
    ));
    let server = quinn::Endpoint::server(server_cfg, "127.0.0.1:0".parse()?)?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert)?;
    let client_tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut client_cfg = quinn::ClientConfig::new(Arc::new(
        quinn::crypto::rustls::QuicClientConfig::try_from(client_tls)?,
    ));
    let mut transport = quinn::TransportConfig::default();
    transport.keep_alive_interval(Some(Duration::from_secs(2)));
    client_cfg.transport_config(Arc::new(transport));
    let mut client = quinn::Endpoint::client("127.0.0.1:0".parse()?)?;
    client.set_default_client_config(client_cfg);
    let accepting = server.clone();
    let accept = tokio::spawn(async move {
        let Some(incoming) = accepting.accept().await else {
            return;
        };
        let Ok(conn) = incoming.await else { return };
        while let Ok((send, recv)) = conn.accept_bi().await {
            let ops = ops.clone();
            tokio::spawn(async move { ops.serve_stream(send, recv).await });
        }
    });
    let conn = client.connect(server.local_addr()?, "guest")?.await?;
    Ok((server, client, conn, accept))
}

impl Guest {
    async fn start(limit: Option<u32>) -> Result<Self> {
        Self::start_with(limit, |_| {}).await
    }

    /// [`Guest::start`] with the gateway's configuration adjusted by `adjust`.
    async fn start_with(
        limit: Option<u32>,
        adjust: impl FnOnce(&mut GatewayConfig),
    ) -> Result<Self> {
        init_logging();
        let home = tempfile::tempdir()?;
        let runtime = tempfile::tempdir()?;
        std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o700))?;
        let screens = Arc::new(Screens::new(
            ScreensConfig {
                home: home.path().to_path_buf(),
                runtime_dir: runtime.path().to_path_buf(),
                limit,
                chromium: "/usr/bin/chromium".into(),
            },
            guest_agent::clock::monotonic(),
        ));
        let mut cfg = GatewayConfig::new(runtime.path().to_path_buf(), home.path().to_path_buf());
        adjust(&mut cfg);
        let ops = Arc::new(Ops::with_gateway(Home::new(home.path())?, screens, cfg));
        let (server, client, conn, accept) = quic_pair(ops.clone()).await?;
        Ok(Self {
            ops,
            conn,
            runtime,
            home,
            _server: server,
            _client: client,
            accept,
        })
    }

    /// Tears every desktop down (revoking its capabilities first), as the guest does at exit.
    async fn shutdown(self) {
        self.ops.screens().shutdown().await;
    }

    /// Sends `req` on a new stream; returns the first reply and the open stream.
    async fn request(&self, req: &Request) -> Result<(Reply, Stream)> {
        Ok(capstream::request(&self.conn, req, WAIT).await?)
    }

    async fn ensure_screen(&self, bot: &str) -> Result<ScreenInfo> {
        let req = Request::ScreenEnsure(ScreenRequest {
            bot: BotId::new(bot)?,
            lease: LeaseToken::parse(&format!("run-{bot}:1"))?,
        });
        match self.request(&req).await?.0 {
            Reply::Screen(info) => Ok(info),
            other => bail!("screen ensure for {bot} answered {other:?}"),
        }
    }

    async fn release_screen(&self, bot: &str) -> Result<()> {
        let req = Request::ScreenRelease(ScreenRelease {
            bot: BotId::new(bot)?,
            lease: None,
        });
        match self.request(&req).await?.0 {
            Reply::Released => Ok(()),
            other => bail!("screen release for {bot} answered {other:?}"),
        }
    }

    async fn connect(&self, bot: &str, kind: CapabilityKind, lease: Option<&str>) -> Result<Reply> {
        Ok(self.try_connect(bot, kind, lease).await?.0)
    }

    async fn try_connect(
        &self,
        bot: &str,
        kind: CapabilityKind,
        lease: Option<&str>,
    ) -> Result<(Reply, Stream)> {
        self.try_connect_in(bot, kind, lease, StartDir::Home).await
    }

    async fn try_connect_in(
        &self,
        bot: &str,
        kind: CapabilityKind,
        lease: Option<&str>,
        start: StartDir,
    ) -> Result<(Reply, Stream)> {
        let req = Request::Connect(ConnectRequest {
            bot: BotId::new(bot)?,
            kind,
            control_lease: lease.map(String::from),
            start,
        });
        self.request(&req).await
    }

    /// Opens a capability and expects `Opened`.
    async fn open(&self, bot: &str, kind: CapabilityKind, lease: Option<&str>) -> Result<Stream> {
        match self.try_connect(bot, kind, lease).await? {
            (Reply::Opened, stream) => Ok(stream),
            (other, _) => bail!("connect {} for {bot} answered {other:?}", kind.as_str()),
        }
    }

    async fn rfb(&self, bot: &str, kind: CapabilityKind) -> Result<RfbClient<Stream>> {
        let stream = self.open(bot, kind, Some("lease-1")).await?;
        within("the rfb handshake", RfbClient::connect(stream))
            .await?
            .context("rfb handshake through the gateway")
    }

    async fn revoke(&self, bot: &str, scope: RevokeScope) -> Result<()> {
        let req = Request::Revoke(RevokeRequest {
            bot: BotId::new(bot)?,
            scope,
        });
        match self.request(&req).await?.0 {
            Reply::Revoked => Ok(()),
            other => bail!("revoke answered {other:?}"),
        }
    }

    /// The bot's live desktop (locked while held).
    async fn live(&self, bot: &str) -> Result<guest_agent::screens::LiveScreen> {
        self.ops
            .screens()
            .live(&BotId::new(bot)?)
            .await
            .ok_or_else(|| anyhow!("bot {bot} has no live desktop"))
    }

    /// An X connection to the bot's display, with the cookie the display module wrote.
    async fn x_connection(&self, bot: &str) -> Result<x11rb::rust_connection::RustConnection> {
        let access = self.live(bot).await?.access();
        Ok(access.connect()?)
    }

    /// The names in the gateway's socket directory.
    fn gateway_files(&self) -> Vec<String> {
        let dir = self.runtime.path().join("gateway");
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }
}

type Stream = CapStream;

/// Reads `term` until `pattern` holds for what was read (kept in `seen`).
async fn read_until(
    term: &mut Stream,
    seen: &mut Vec<u8>,
    pattern: impl Fn(&str) -> bool,
) -> Result<String> {
    let mut buf = vec![0u8; 64 * 1024];
    within("terminal output", async {
        loop {
            let text = String::from_utf8_lossy(seen).into_owned();
            if pattern(&text) {
                return Ok(text);
            }
            let n = term.read(&mut buf).await?;
            if n == 0 {
                bail!("the terminal ended; output so far: {text:?}");
            }
            seen.extend_from_slice(&buf[..n]);
        }
    })
    .await?
}

/// Reads a stream to its end; returns the reset code (`None` for a clean finish).
async fn stream_end(stream: &mut Stream) -> Result<Option<u64>> {
    Ok(within("the stream's end", stream.read_to_end()).await??.1)
}

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

/// Reads the shell's answer to `echo MARK-$(stty size)-$(id -u)-$$`.
async fn probe_shell(term: &mut Stream) -> Result<(String, u32, u32, String)> {
    let mut seen = Vec::new();
    let cmd = encode_input(b"echo MARK-$(stty size)-$(id -u)-$$\r");
    // Split the frame across writes, inside its header and inside its payload.
    for piece in [&cmd[..2], &cmd[2..9], &cmd[9..]] {
        term.send.write_all(piece).await?;
        term.send.flush().await?;
    }
    // The first complete line `MARK-<rows> <cols>-<uid>-<pid>` (the echoed command line also
    // starts with MARK-, but does not parse).
    let re = |t: &str| -> Option<(String, u32, u32)> {
        t.match_indices("MARK-").find_map(|(at, _)| {
            let (line, _) = t[at + 5..].split_once('\n')?;
            let mut parts = line.trim_end().rsplitn(3, '-');
            let pid = parts.next()?.parse().ok()?;
            let uid = parts.next()?.parse().ok()?;
            let size = parts.next()?.to_string();
            Some((size, uid, pid))
        })
    };
    let text = match read_until(term, &mut seen, |t| re(t).is_some()).await {
        Ok(t) => t,
        Err(e) => bail!("{e:#}; output: {:?}", String::from_utf8_lossy(&seen)),
    };
    let (size, uid, pid) = re(&text).ok_or_else(|| anyhow!("no probe line in {text:?}"))?;
    Ok((size, uid, pid, text))
}

fn process_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminals_resize_run_as_the_workspace_user_and_end_with_control() -> Result<()> {
    let guest = Guest::start(None).await?;
    guest.ensure_screen("bot-term").await?;
    let mut first = guest
        .open("bot-term", CapabilityKind::Terminal, Some("lease-1"))
        .await?;
    let resize = encode_resize(123, 45);
    first.send.write_all(&resize[..3]).await?;
    first.send.flush().await?;
    first.send.write_all(&resize[3..]).await?;
    let (size, uid, pid_1, text) = probe_shell(&mut first).await?;
    assert!(!text.contains("cannot enter the home"), "{text:?}");
    assert_eq!(size, "45 123");
    assert_ne!(uid, 0, "the shell runs as root");
    assert!(process_alive(pid_1));

    // A second connection under the same lease is a fresh shell of its own.
    let mut second = guest
        .open("bot-term", CapabilityKind::Terminal, Some("lease-1"))
        .await?;
    let (size, _, pid_2, _) = probe_shell(&mut second).await?;
    assert_eq!(size, "24 80", "a new shell starts at the default size");
    assert_ne!(pid_1, pid_2);

    // A frame over 1 MiB closes its connection (and only that one).
    let mut big = guest
        .open("bot-term", CapabilityKind::Terminal, Some("lease-1"))
        .await?;
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(2u32 * 1024 * 1024).to_be_bytes());
    frame.extend_from_slice(&vec![b'x'; 64 * 1024]);
    big.send.write_all(&frame).await?;
    let reset = stream_end(&mut big).await?;
    assert_eq!(
        reset, None,
        "the guest finishes the stream when the terminal closes"
    );
    let bot = BotId::new("bot-term")?;
    let sockets = |g: &Guest| -> Vec<String> {
        g.gateway_files()
            .into_iter()
            .filter(|f| f.ends_with("-terminal.sock"))
            .collect()
    };
    eventually("the oversized session's socket to go", || {
        Ok(sockets(&guest).len() == 2)
    })
    .await?;
    assert_eq!(guest.ops.gateway().capability_count(&bot).await, 2);

    // Revoking control ends every shell, its processes and its socket.
    guest.revoke("bot-term", RevokeScope::Control).await?;
    for mut term in [first, second] {
        let reset = stream_end(&mut term).await?;
        assert_eq!(reset, Some(RESET_REVOKED.into()));
    }
    assert!(
        !process_alive(pid_1),
        "shell {pid_1} survived the revocation"
    );
    assert!(
        !process_alive(pid_2),
        "shell {pid_2} survived the revocation"
    );
    assert!(sockets(&guest).is_empty(), "{:?}", guest.gateway_files());
    assert_eq!(guest.ops.gateway().capability_count(&bot).await, 0);

    // A dropped connection ends its shell; the next one is fresh.
    // (Its home is now closed to the workspace user: the shell still starts, in /, and says so.)
    std::fs::set_permissions(guest.home.path(), std::fs::Permissions::from_mode(0o700))?;
    let mut third = guest
        .open("bot-term", CapabilityKind::Terminal, Some("lease-2"))
        .await?;
    let (_, _, pid_3, text) = probe_shell(&mut third).await?;
    assert!(text.starts_with("rakazo: uid "), "{text:?}");
    assert!(text.contains("cannot enter the home"), "{text:?}");
    third.send.reset(0u32.into())?;
    drop(third);
    eventually("the dropped terminal's shell to end", || {
        Ok(!process_alive(pid_3))
    })
    .await?;
    eventually("the dropped terminal's socket to go", || {
        Ok(sockets(&guest).is_empty())
    })
    .await?;

    // A client that finishes its stream ends its shell too, and the guest finishes its side.
    let mut fourth = guest
        .open("bot-term", CapabilityKind::Terminal, Some("lease-2"))
        .await?;
    let (_, _, pid_4, _) = probe_shell(&mut fourth).await?;
    fourth.send.finish()?;
    assert_eq!(stream_end(&mut fourth).await?, None);
    eventually("the finished terminal's shell to end", || {
        Ok(!process_alive(pid_4))
    })
    .await?;
    guest.shutdown().await;
    Ok(())
}

/// The terminal session directories in the temporary directory owned by `uid`.
fn terminal_session_dirs(uid: u32) -> Vec<std::path::PathBuf> {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(std::env::temp_dir())
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("rakazo-terminal-"))
                        && std::fs::metadata(p).is_ok_and(|m| m.uid() == uid)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A Team bot's terminal, as a root guest drops to a workspace uid that has no passwd entry:
/// the shell starts in the bot's own `bots/<bot>/` (created for that user, 0700), reads a
/// profile, and is called `rakazo` by `whoami` (nss_wrapper), `$USER` and its prompt; the
/// session's files go when it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_bots_terminal_starts_in_its_directory_as_a_named_user_with_a_profile() -> Result<()>
{
    use std::os::unix::fs::MetadataExt;
    const UID: u32 = 4242;
    const GID: u32 = 4343;
    if !nix::unistd::geteuid().is_root() {
        bail!("this test drops a root guest to uid {UID}: run it as root");
    }
    let user = guest_agent::gateway::terminal::user::WorkspaceUser { uid: UID, gid: GID };
    let guest = Guest::start_with(None, |cfg| cfg.workspace_user = Some(user)).await?;
    // The workspace user's home, as a provider sets it up.
    std::os::unix::fs::chown(guest.home.path(), Some(UID), Some(GID))?;
    guest.ensure_screen("bot-team").await?;
    let before = terminal_session_dirs(UID);
    let mut term = match guest
        .try_connect_in(
            "bot-team",
            CapabilityKind::Terminal,
            Some("lease-1"),
            StartDir::BotDir,
        )
        .await?
    {
        (Reply::Opened, s) => s,
        (other, _) => bail!("terminal answered {other:?}"),
    };
    let home = guest.home.path().canonicalize()?;
    let bot_dir = home.join("bots/bot-team");
    let meta = std::fs::metadata(&bot_dir)?;
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (UID, GID, 0o700)
    );

    let mut seen = Vec::new();
    // The prompt, before anything is typed: `\u@\h:\w` with the user named.
    let text = read_until(&mut term, &mut seen, |t| t.contains(":~/bots/bot-team$ ")).await?;
    assert!(text.contains("rakazo@"), "{text:?}");
    assert!(!text.contains("I have no name"), "{text:?}");
    term.send
        .write_all(&encode_input(
            b"printf 'P=%s\\n' \"$(pwd)\"; printf 'W=%s\\n' \"$(whoami)\"; \
              printf 'E=%s:%s:%s\\n' \"$HOME\" \"$USER\" \"$(id -u)\"\r",
        ))
        .await?;
    let expected_env = format!("E={}:rakazo:{UID}", guest.home.path().display());
    let text = read_until(&mut term, &mut seen, |t| t.contains(&expected_env)).await?;
    assert!(
        text.contains(&format!("P={}\r\n", bot_dir.display())),
        "{text:?}"
    );
    assert!(text.contains("W=rakazo\r\n"), "{text:?}");

    // The session's directory (profile, passwd) is the user's while it runs and goes with it.
    let sessions = || -> Vec<std::path::PathBuf> {
        let mut now = terminal_session_dirs(UID);
        now.retain(|p| !before.contains(p));
        now
    };
    assert_eq!(sessions().len(), 1, "{:?}", sessions());
    guest.revoke("bot-team", RevokeScope::Control).await?;
    stream_end(&mut term).await?;
    eventually("the session directory to go", || Ok(sessions().is_empty())).await?;
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
