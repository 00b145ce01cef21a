//! The display module against real X servers (Xvnc, the desktops' server; Xvfb, the benchmarks'
//! anchor, for its lifecycle): lifecycle and cleanup, access control, Xvnc's RFB socket and the
//! absence of any TCP listener, MIT-SHM capture and frame ids, XTEST input received by real X
//! clients (including Unicode typed through remapped keycodes), DAMAGE-based settling, and window
//! focus.
//!
//! Every test starts its own server on a display number from a random base (150 and up) and
//! stops it. Nothing sleeps to wait for readiness: the server announces itself on `-displayfd`, X round trips
//! order requests, and events are awaited with timeouts. The only sleeps pace a drawing thread
//! that keeps the screen busy for the settle tests. Timings print with `--nocapture`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use guest_agent::display::capture::{encode_png, frame_id};
use guest_agent::display::input::{char_keysym, keysym_char};
use guest_agent::display::{
    wait_for_event, Activation, Button, Capturer, Clock, Cookie, DisplayAccess, DisplayError,
    DisplayNum, Input, KeyCombo, ScrollDirection, Settler, WindowControl, WindowMatch, XServer,
    XServerKind, XServerOptions,
};
use x11rb::connection::Connection;
use x11rb::protocol::xproto::{
    AtomEnum, ChangeWindowAttributesAux, ConnectionExt as _, CreateGCAux, CreateWindowAux,
    EventMask, KeyButMask, PropMode, Rectangle, Window, WindowClass,
};
use x11rb::protocol::Event;
use x11rb::rust_connection::RustConnection;
use x11rb::wrapper::ConnectionExt as _;

mod painter;
use painter::{painter, pixel};

#[allow(
    clippy::disallowed_methods,
    reason = "these tests measure real waits against real X servers"
)]
fn now() -> Instant {
    Instant::now()
}

fn clock() -> Clock {
    Clock::new(now)
}

/// Display numbers for this test process: a random base so parallel test runs rarely meet,
/// then sequential so the tests of one run never do.
fn next_display() -> DisplayNum {
    static NEXT: OnceLock<AtomicU16> = OnceLock::new();
    let next = NEXT.get_or_init(|| AtomicU16::new(150 + rand::random::<u16>() % 20_000));
    DisplayNum::new(next.fetch_add(1, Ordering::Relaxed)).expect("display number in range")
}

/// A fresh 0700 runtime directory.
fn private_dir() -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

/// An X server (Xvnc unless said) with its private runtime directory.
struct Desktop {
    server: XServer,
    dir: tempfile::TempDir,
}

impl Desktop {
    async fn start() -> Result<Self> {
        Self::start_kind(XServerKind::Xvnc).await
    }

    async fn start_kind(kind: XServerKind) -> Result<Self> {
        let dir = private_dir()?;
        for _ in 0..20 {
            match XServer::start(next_display(), dir.path(), &XServerOptions::of(kind)).await {
                Ok(server) => return Ok(Self { server, dir }),
                // Another process holds that number; take the next one.
                Err(DisplayError::InUse { .. } | DisplayError::ExitedEarly { .. }) => continue,
                Err(error) => return Err(error).context("starting the x server"),
            }
        }
        bail!("no free display number in 20 tries")
    }

    fn access(&self) -> &DisplayAccess {
        self.server.access()
    }

    fn display(&self) -> DisplayNum {
        self.server.display()
    }

    async fn stop(mut self) -> Result<()> {
        self.server.stop().await?;
        Ok(())
    }
}

/// A mapped test window with a background colour and `WM_CLASS`/titles set.
fn create_window(
    conn: &RustConnection,
    (x, y, width, height): (i16, i16, u16, u16),
    color: u32,
    events: EventMask,
    class: &str,
    title: &str,
) -> Result<Window> {
    let screen = &conn.setup().roots[0];
    let window = conn.generate_id()?;
    conn.create_window(
        screen.root_depth,
        window,
        screen.root,
        x,
        y,
        width,
        height,
        0,
        WindowClass::INPUT_OUTPUT,
        screen.root_visual,
        &CreateWindowAux::new()
            .background_pixel(color)
            .event_mask(events),
    )?
    .check()?;
    let wm_class = format!("{class}\0{}\0", class.to_uppercase());
    conn.change_property8(
        PropMode::REPLACE,
        window,
        AtomEnum::WM_CLASS,
        AtomEnum::STRING,
        wm_class.as_bytes(),
    )?;
    let net_wm_name = conn.intern_atom(false, b"_NET_WM_NAME")?.reply()?.atom;
    let utf8 = conn.intern_atom(false, b"UTF8_STRING")?.reply()?.atom;
    conn.change_property8(
        PropMode::REPLACE,
        window,
        net_wm_name,
        utf8,
        title.as_bytes(),
    )?;
    conn.change_property8(
        PropMode::REPLACE,
        window,
        AtomEnum::WM_NAME,
        AtomEnum::STRING,
        b"legacy title",
    )?;
    conn.map_window(window)?;
    conn.sync()?;
    Ok(window)
}

/// Collects events until `done` says so or `timeout` passes.
fn collect_events(
    conn: &RustConnection,
    display: DisplayNum,
    timeout: Duration,
    mut done: impl FnMut(&[Event]) -> bool,
) -> Result<Vec<Event>> {
    let deadline = now() + timeout;
    let mut events = Vec::new();
    while !done(&events) {
        let left = deadline.saturating_duration_since(now());
        if left.is_zero() {
            break;
        }
        if let Some(event) = wait_for_event(conn, display, left)? {
            events.push(event);
        }
    }
    Ok(events)
}

/// A client-side keymap, decoded the way core X clients do.
struct ClientKeymap {
    min: u8,
    per: usize,
    syms: Vec<u32>,
}

impl ClientKeymap {
    fn fetch(conn: &RustConnection) -> Result<Self> {
        let setup = conn.setup();
        let (min, max) = (setup.min_keycode, setup.max_keycode);
        let reply = conn.get_keyboard_mapping(min, max - min + 1)?.reply()?;
        Ok(Self {
            min,
            per: usize::from(reply.keysyms_per_keycode),
            syms: reply.keysyms,
        })
    }

    /// The keysym of `keycode` with or without Shift (core protocol rules, no Caps Lock).
    fn keysym(&self, keycode: u8, shift: bool) -> u32 {
        let row = usize::from(keycode - self.min) * self.per;
        let first = self.syms[row];
        let second = self.syms[row + 1];
        match (shift, second) {
            (false, _) => first,
            (true, 0) => char::from_u32(first)
                .filter(|c| c.is_ascii_lowercase())
                .map_or(first, |c| u32::from(c.to_ascii_uppercase())),
            (true, s) => s,
        }
    }

    /// The text a key press types, if any.
    fn text(&self, keycode: u8, state: KeyButMask) -> Option<char> {
        keysym_char(self.keysym(keycode, state.contains(KeyButMask::SHIFT)))
    }
}

fn key_presses(events: &[Event]) -> impl Iterator<Item = (u8, KeyButMask)> + '_ {
    events.iter().filter_map(|e| match e {
        Event::KeyPress(k) => Some((k.detail, k.state)),
        _ => None,
    })
}

fn pid_alive(pid: u32) -> bool {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap());
    nix::sys::signal::kill(pid, None).is_ok()
}

#[tokio::test]
async fn start_and_stop_leave_no_lock_socket_or_process() -> Result<()> {
    for kind in [XServerKind::Xvnc, XServerKind::Xvfb] {
        let started = now();
        let mut desktop = Desktop::start_kind(kind).await?;
        eprintln!("{} cold start: {:?}", kind.program(), started.elapsed());
        let display = desktop.display();
        let pid = desktop.server.pid();
        let xauthority = desktop.server.xauthority().to_path_buf();
        let rfb = desktop.server.rfb_socket().map(|p| p.to_path_buf());
        assert_eq!(rfb.is_some(), kind == XServerKind::Xvnc, "{kind:?}");
        ensure!(display.lock_path().exists(), "no lock file");
        ensure!(display.socket_path().exists(), "no socket");
        ensure!(pid_alive(pid));
        ensure!(desktop.server.is_alive());
        assert_eq!(desktop.server.display_env(), format!(":{}", display.get()));
        assert_eq!(
            fs::metadata(&xauthority)?.permissions().mode() & 0o777,
            0o600
        );
        let lock = fs::read_to_string(display.lock_path())?;
        assert_eq!(lock.trim(), pid.to_string());
        desktop.access().connect()?.sync()?;

        desktop.server.stop().await?;
        ensure!(!desktop.server.is_alive());
        ensure!(!pid_alive(pid), "{kind:?} pid {pid} still exists");
        ensure!(!display.lock_path().exists(), "lock file left behind");
        ensure!(!display.socket_path().exists(), "socket left behind");
        ensure!(!xauthority.exists(), "cookie file left behind");
        if let Some(rfb) = rfb {
            ensure!(!rfb.exists(), "rfb socket left behind");
        }
        // Stop is idempotent.
        desktop.server.stop().await?;
    }
    Ok(())
}

/// The socket inodes a process holds open (`socket:[N]` links in `/proc/<pid>/fd`).
fn socket_inodes(pid: u32) -> Result<Vec<String>> {
    let mut inodes = Vec::new();
    for fd in fs::read_dir(format!("/proc/{pid}/fd"))? {
        let target = fs::read_link(fd?.path()).unwrap_or_default();
        let target = target.to_string_lossy();
        if let Some(inode) = target
            .strip_prefix("socket:[")
            .and_then(|t| t.strip_suffix(']'))
        {
            inodes.push(inode.to_string());
        }
    }
    Ok(inodes)
}

/// The lines of `/proc/net/<table>` (tcp, udp, unix...) whose inode is one of `inodes`.
fn sockets_in(table: &str, inodes: &[String]) -> Result<Vec<String>> {
    let text = fs::read_to_string(format!("/proc/net/{table}"))?;
    // The inode is column 10 of tcp/udp lines and column 7 of unix lines.
    let column = if table == "unix" { 6 } else { 9 };
    Ok(text
        .lines()
        .skip(1)
        .filter(|l| {
            l.split_whitespace()
                .nth(column)
                .is_some_and(|i| inodes.iter().any(|n| n == i))
        })
        .map(str::to_string)
        .collect())
}

/// Xvnc serves RFB on its private unix socket only (mode 0600, security type None), holds no
/// TCP or UDP socket at all, and offers the extensions the guest's capture and input use (GLX
/// is off).
#[tokio::test]
async fn xvnc_serves_rfb_on_its_private_socket_only() -> Result<()> {
    use std::io::{Read, Write};
    let desktop = Desktop::start().await?;
    let pid = desktop.server.pid();
    let rfb = desktop
        .server
        .rfb_socket()
        .context("xvnc has an rfb socket")?
        .to_path_buf();
    assert_eq!(rfb.parent(), Some(desktop.dir.path()));
    assert_eq!(fs::metadata(&rfb)?.permissions().mode() & 0o777, 0o600);

    let inodes = socket_inodes(pid)?;
    for table in ["tcp", "tcp6", "udp", "udp6", "raw", "raw6"] {
        let held = sockets_in(table, &inodes)?;
        ensure!(held.is_empty(), "Xvnc holds {table} sockets: {held:?}");
    }
    let unix = sockets_in("unix", &inodes)?;
    let listening: Vec<&str> = unix
        .iter()
        // Flags 00010000 = __SO_ACCEPTCON: a listening socket; the path is the last column.
        .filter(|l| l.split_whitespace().nth(3) == Some("00010000"))
        .filter_map(|l| l.split_whitespace().nth(7))
        .collect();
    let mut want = vec![
        desktop.display().socket_path().display().to_string(),
        rfb.display().to_string(),
    ];
    let mut got: Vec<String> = listening.iter().map(|s| s.to_string()).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want, "Xvnc's listening sockets");

    // It speaks RFB there and offers security type None only.
    let mut s = std::os::unix::net::UnixStream::connect(&rfb)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut version = [0u8; 12];
    s.read_exact(&mut version)?;
    assert_eq!(&version, b"RFB 003.008\n");
    s.write_all(b"RFB 003.008\n")?;
    let mut n = [0u8; 1];
    s.read_exact(&mut n)?;
    let mut types = vec![0u8; usize::from(n[0])];
    s.read_exact(&mut types)?;
    assert_eq!(types, [1], "security types");
    drop(s);

    let conn = desktop.access().connect()?;
    use x11rb::connection::RequestConnection as _;
    for (name, want) in [
        ("GLX", false),
        ("MIT-SHM", true),
        ("XTEST", true),
        ("DAMAGE", true),
        ("RANDR", true),
        ("XFIXES", true),
    ] {
        assert_eq!(conn.extension_information(name)?.is_some(), want, "{name}");
    }
    drop(conn);
    desktop.stop().await
}

#[tokio::test]
async fn only_the_cookie_opens_the_display() -> Result<()> {
    let desktop = Desktop::start().await?;
    let display = desktop.display();
    let n = display.get();

    let wrong = DisplayAccess::new(display, Cookie::random()).connect();
    assert!(
        matches!(wrong, Err(DisplayError::Connect { .. })),
        "wrong cookie: {wrong:?}"
    );
    let socket = std::os::unix::net::UnixStream::connect(display.socket_path())?;
    let (stream, _) = x11rb::rust_connection::DefaultStream::from_unix_stream(socket)?;
    ensure!(
        RustConnection::connect_to_stream(stream, 0).is_err(),
        "a client without a cookie got in"
    );

    // No abstract socket (file permissions would not apply) and no TCP listener.
    let unix = fs::read_to_string("/proc/net/unix")?;
    let path = format!("/tmp/.X11-unix/X{n}");
    ensure!(unix.lines().any(|l| l.ends_with(&format!(" {path}"))));
    ensure!(
        !unix.lines().any(|l| l.ends_with(&format!(" @{path}"))),
        "abstract socket present"
    );
    ensure!(std::net::TcpStream::connect(("127.0.0.1", 6000 + n)).is_err());

    // An Xlib client (what Chrome is) gets in with DISPLAY and XAUTHORITY, and not without.
    let xdpyinfo = |xauthority: &std::path::Path| {
        std::process::Command::new("xdpyinfo")
            .env_clear()
            .env("DISPLAY", desktop.server.display_env())
            .env("XAUTHORITY", xauthority)
            .env("HOME", desktop.dir.path())
            .output()
    };
    let ok = xdpyinfo(desktop.server.xauthority())?;
    ensure!(
        ok.status.success(),
        "xdpyinfo failed: {}",
        String::from_utf8_lossy(&ok.stderr)
    );
    ensure!(String::from_utf8_lossy(&ok.stdout).contains("dimensions:    1280x800 pixels"));
    let denied = xdpyinfo(&desktop.dir.path().join("missing"))?;
    ensure!(
        !denied.status.success(),
        "xdpyinfo got in without the cookie"
    );
    // (Its extensions: `xvnc_serves_rfb_on_its_private_socket_only`.)
    desktop.stop().await
}

#[tokio::test]
async fn a_live_lock_refuses_the_display_and_a_dead_ones_files_are_cleared() -> Result<()> {
    let dir = private_dir()?;
    let display = next_display();
    // A lock naming a live process (this test) makes the display unavailable.
    fs::write(display.lock_path(), format!("{:>10}\n", std::process::id()))?;
    let refused = XServer::start(display, dir.path(), &XServerOptions::default()).await;
    let message = match refused {
        Err(error @ DisplayError::InUse { .. }) => error.to_string(),
        other => bail!("expected InUse, got {other:?}"),
    };
    assert_eq!(
        message,
        format!(
            "display :{} is in use by live pid {}",
            display.get(),
            std::process::id()
        )
    );
    ensure!(
        display.lock_path().exists(),
        "a live lock must be left alone"
    );

    // A lock naming a dead process, and its socket, are removed and the server starts.
    let mut dead = std::process::Command::new("true").spawn()?;
    let dead_pid = dead.id();
    dead.wait()?;
    fs::write(display.lock_path(), format!("{dead_pid:>10}\n"))?;
    fs::write(display.socket_path(), b"stale")?;
    let mut server = XServer::start(display, dir.path(), &XServerOptions::default()).await?;
    server.access().connect()?.sync()?;
    // While it runs, the display is refused to a second server, which leaves it working.
    let second_dir = private_dir()?;
    let second = XServer::start(display, second_dir.path(), &XServerOptions::default()).await;
    match second {
        Err(DisplayError::InUse { pid, .. }) => assert_eq!(u32::try_from(pid)?, server.pid()),
        other => bail!("expected InUse, got {other:?}"),
    }
    server.access().connect()?.sync()?;
    server.stop().await?;
    ensure!(!display.lock_path().exists() && !display.socket_path().exists());

    // A runtime directory others can read is refused before anything starts.
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))?;
    let open = XServer::start(display, dir.path(), &XServerOptions::default()).await;
    ensure!(matches!(
        open,
        Err(DisplayError::RuntimeDirNotPrivate { .. })
    ));
    Ok(())
}

#[tokio::test]
async fn a_killed_server_is_noticed_and_its_files_cleaned_on_stop() -> Result<()> {
    let mut desktop = Desktop::start().await?;
    let display = desktop.display();
    let rfb = desktop
        .server
        .rfb_socket()
        .context("xvnc has an rfb socket")?
        .to_path_buf();
    let pid = nix::unistd::Pid::from_raw(i32::try_from(desktop.server.pid())?);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL)?;
    let status = tokio::time::timeout(Duration::from_secs(5), desktop.server.wait_exit()).await??;
    ensure!(!status.success());
    ensure!(!desktop.server.is_alive());
    ensure!(display.lock_path().exists(), "SIGKILL leaves the lock");
    ensure!(rfb.exists(), "SIGKILL leaves the rfb socket");
    desktop.server.stop().await?;
    ensure!(!display.lock_path().exists() && !display.socket_path().exists());
    ensure!(!rfb.exists(), "the rfb socket is removed");

    // The same display starts again.
    let mut again = XServer::start(display, desktop.dir.path(), &XServerOptions::default()).await?;
    again.stop().await?;
    Ok(())
}

#[tokio::test]
async fn capture_is_a_1280x800_png_with_a_stable_frame_id() -> Result<()> {
    let desktop = Desktop::start().await?;
    let mut capturer = Capturer::new(desktop.access())?;
    ensure!(capturer.uses_shm(), "MIT-SHM not used");

    let first = capturer.observe()?;
    let decoder = png::Decoder::new(std::io::Cursor::new(&first.png));
    let reader = decoder.read_info()?;
    let info = reader.info();
    assert_eq!((info.width, info.height), (1280, 800));
    assert_eq!((first.width, first.height), (1280, 800));
    assert_eq!(first.frame_id, frame_id(&first.png));
    assert_eq!(first.active_window, None);

    let second = capturer.observe()?;
    assert_eq!(
        first.frame_id, second.frame_id,
        "unchanged screen, new frame id"
    );
    assert_eq!(second.png, first.png);
    assert_eq!(
        capturer.encodes(),
        1,
        "an unchanged screen was encoded again"
    );

    // Timings (debug build): capture alone, encode alone, the whole observation.
    const N: u32 = 10;
    let t = now();
    for _ in 0..N {
        capturer.capture()?;
    }
    let capture = t.elapsed() / N;
    let frame = capturer.capture()?;
    let t = now();
    for _ in 0..N {
        encode_png(&frame)?;
    }
    let encode = t.elapsed() / N;
    let t = now();
    for _ in 0..N {
        capturer.observe()?;
    }
    let observe = t.elapsed() / N;
    eprintln!("1280x800 blank desktop: capture {capture:?}, png {encode:?}, observe {observe:?}");
    drop(capturer);
    desktop.stop().await
}

#[tokio::test]
async fn the_getimage_fallback_sees_the_same_pixels() -> Result<()> {
    let desktop = Desktop::start().await?;
    let conn = desktop.access().connect()?;
    create_window(
        &conn,
        (10, 20, 200, 100),
        0x0012_3456,
        EventMask::NO_EVENT,
        "fallback",
        "Fallback",
    )?;
    let mut shm = Capturer::new(desktop.access())?;
    let mut plain = Capturer::without_shm(desktop.access())?;
    ensure!(shm.uses_shm() && !plain.uses_shm());
    let (a, b) = (shm.capture()?, plain.capture()?);
    assert_eq!((b.width, b.height), (1280, 800));
    ensure!(a == b, "shm and getimage frames differ");
    assert_eq!(shm.observe()?.frame_id, plain.observe()?.frame_id);
    drop((shm, plain, conn));
    desktop.stop().await
}

#[tokio::test]
async fn a_drawn_window_changes_the_frame_id() -> Result<()> {
    let desktop = Desktop::start().await?;
    let mut capturer = Capturer::new(desktop.access())?;
    let before = capturer.observe()?;

    let conn = desktop.access().connect()?;
    create_window(
        &conn,
        (100, 50, 300, 200),
        0x00c0_2030,
        EventMask::NO_EVENT,
        "painter",
        "Painter",
    )?;
    let after = capturer.observe()?;
    assert_ne!(before.frame_id, after.frame_id);
    assert_eq!(capturer.encodes(), 2, "a changed screen is encoded");
    assert_eq!(after.frame_id, frame_id(&after.png));

    let frame = capturer.capture()?;
    let pixel = |x: usize, y: usize| {
        let i = (y * 1280 + x) * 3;
        (frame.rgb[i], frame.rgb[i + 1], frame.rgb[i + 2])
    };
    assert_eq!(pixel(250, 150), (0xc0, 0x20, 0x30), "inside the window");
    assert_eq!(pixel(50, 20), (0, 0, 0), "outside the window");
    drop((capturer, conn));
    desktop.stop().await
}

#[tokio::test]
async fn xtest_moves_the_pointer_where_query_pointer_finds_it() -> Result<()> {
    let desktop = Desktop::start().await?;
    let mut input = Input::new(desktop.access(), clock())?;
    let mut capturer = Capturer::new(desktop.access())?;
    assert_eq!(input.move_to(100, 200)?, (100, 200));
    input.finish()?;
    assert_eq!(capturer.cursor()?, (100, 200));
    assert_eq!(input.move_to(-5, 99_999)?, (0, 799));
    input.finish()?;
    assert_eq!(capturer.cursor()?, (0, 799));
    assert_eq!(input.move_to(i64::MAX, 3)?, (1279, 3));
    input.finish()?;
    assert_eq!(capturer.observe()?.cursor, (1279, 3));

    const N: u32 = 50;
    let t = now();
    for i in 0..N {
        input.click(i64::from(i), 10, Button::Left, false)?;
        input.finish()?;
    }
    eprintln!(
        "xtest click incl. move and sync (debug build): {:?}",
        t.elapsed() / N
    );
    let t = now();
    for i in 0..N {
        input.click(i64::from(i), 10, Button::Left, false)?;
    }
    input.finish()?;
    eprintln!(
        "xtest click incl. move, one sync per {N} (debug build): {:?}",
        t.elapsed() / N
    );
    drop((input, capturer));
    desktop.stop().await
}

#[tokio::test]
async fn clicks_scrolls_and_keys_reach_the_focused_window() -> Result<()> {
    let desktop = Desktop::start().await?;
    let display = desktop.display();
    let conn = desktop.access().connect()?;
    let window = create_window(
        &conn,
        (0, 0, 640, 480),
        0x0020_2020,
        EventMask::BUTTON_PRESS | EventMask::KEY_PRESS,
        "target",
        "Target",
    )?;
    let mut wm = WindowControl::new(desktop.access())?;
    assert_eq!(wm.activate(window)?, Activation::Direct);
    let mut input = Input::new(desktop.access(), clock())?;

    // One batch: six actions, one round trip (at `finish`), the events still in order.
    let trips = input.syncs();
    input.click(30, 40, Button::Left, false)?;
    input.click(31, 41, Button::Right, true)?;
    input.scroll(ScrollDirection::Down, 3)?;
    input.scroll(ScrollDirection::Up, 1)?;
    input.button_down(50, 60, Button::Left)?;
    input.button_up(70, 80, Button::Left)?;
    assert!(matches!(
        input.scroll(ScrollDirection::Up, 21),
        Err(DisplayError::ScrollAmount(21))
    ));
    assert_eq!(input.syncs(), trips, "no action waits for the server");
    input.finish()?;
    assert_eq!(input.syncs(), trips + 1, "one sync per batch");
    let events = collect_events(&conn, display, Duration::from_secs(5), |e| {
        e.iter()
            .filter(|e| matches!(e, Event::ButtonPress(_)))
            .count()
            >= 8
    })?;
    let presses: Vec<(u8, i16, i16)> = events
        .iter()
        .filter_map(|e| match e {
            Event::ButtonPress(b) => Some((b.detail, b.event_x, b.event_y)),
            _ => None,
        })
        .collect();
    assert_eq!(
        presses,
        vec![
            (1, 30, 40),
            (3, 31, 41),
            (3, 31, 41),
            (5, 31, 41),
            (5, 31, 41),
            (5, 31, 41),
            (4, 31, 41),
            (1, 50, 60),
        ]
    );

    let keymap = ClientKeymap::fetch(&conn)?;
    let trips = input.syncs();
    input.key(&KeyCombo::parse("ctrl+shift+t", &[] as &[&str])?)?;
    input.key(&KeyCombo::parse("Enter", &[] as &[&str])?)?;
    input.key(&KeyCombo::parse("f5", &["alt"])?)?;
    input.key(&KeyCombo::parse("!", &[] as &[&str])?)?;
    input.finish()?;
    assert_eq!(input.syncs(), trips + 1, "one sync per batch");
    let events = collect_events(&conn, display, Duration::from_secs(5), |e| {
        key_presses(e).count() >= 8
    })?;
    let keys: Vec<(u32, KeyButMask)> = key_presses(&events)
        .map(|(kc, state)| (keymap.keysym(kc, false), state))
        .collect();
    let control = KeyButMask::CONTROL;
    let shift = KeyButMask::SHIFT;
    let alt = KeyButMask::MOD1;
    assert_eq!(
        keys,
        vec![
            (0xffe3, KeyButMask::default()), // Control_L
            (0xffe1, control),               // Shift_L
            (u32::from('t'), control | shift),
            (0xff0d, KeyButMask::default()), // Return
            (0xffe9, KeyButMask::default()), // Alt_L
            (0xffc2, alt),                   // F5
            (0xffe1, KeyButMask::default()), // Shift for '!'
            (u32::from('1'), shift),         // the '!' key unshifted is '1'
        ]
    );
    let last = key_presses(&events).nth(7).context("no '!' press")?;
    assert_eq!(keymap.text(last.0, last.1), Some('!'));

    // Typing characters of the keymap changes no binding: no round trip before `finish`.
    let trips = input.syncs();
    input.move_to(5, 5)?;
    input.type_text("ok")?;
    input.click(6, 6, Button::Left, false)?;
    input.finish()?;
    assert_eq!(input.syncs(), trips + 1, "one sync per batch");
    let events = collect_events(&conn, display, Duration::from_secs(5), |e| {
        key_presses(e).count() >= 2
    })?;
    let typed: String = key_presses(&events)
        .filter_map(|(kc, state)| keymap.text(kc, state))
        .collect();
    assert_eq!(typed, "ok");
    drop((input, wm, conn));
    desktop.stop().await
}

#[tokio::test]
async fn typed_unicode_arrives_intact_including_characters_outside_the_keymap() -> Result<()> {
    let desktop = Desktop::start().await?;
    let display = desktop.display();
    let conn = desktop.access().connect()?;
    let window = create_window(
        &conn,
        (0, 0, 640, 480),
        0,
        EventMask::KEY_PRESS,
        "typing",
        "Typing",
    )?;
    WindowControl::new(desktop.access())?.activate(window)?;
    let before = ClientKeymap::fetch(&conn)?;
    let mut input = Input::new(desktop.access(), clock())?;

    let text = "héllo 🙂 Ωλ 中文 Hello, World! ~|\n\tok é🙂";
    let t = now();
    input.type_text(text)?;
    input.finish()?;
    eprintln!(
        "typed {} chars (debug build) in {:?}",
        text.chars().count(),
        t.elapsed()
    );
    let typed = text.chars().filter(|&c| char_keysym(c).is_some()).count();
    let events = collect_events(&conn, display, Duration::from_secs(5), |e| {
        key_presses(e)
            .filter(|(kc, _)| before.keysym(*kc, false) != 0xffe1)
            .count()
            >= typed
    })?;
    // Decode like a core client that re-reads the map after MappingNotify.
    ensure!(events.iter().any(|e| matches!(e, Event::MappingNotify(_))));
    let keymap = ClientKeymap::fetch(&conn)?;
    let received: String = key_presses(&events)
        .filter_map(|(kc, state)| keymap.text(kc, state))
        .collect();
    assert_eq!(received, text);

    // Control characters other than newline and tab are refused before anything is typed.
    let refused = input.type_text("ab\u{7}c");
    ensure!(matches!(
        refused,
        Err(DisplayError::UntypableChar { ch: '\u{7}' })
    ));

    // Bindings live until restored; restoring leaves the map as it was.
    input.restore_keymap()?;
    let after = ClientKeymap::fetch(&conn)?;
    assert_eq!(before.syms, after.syms, "keymap not restored");
    drop((input, conn));
    desktop.stop().await
}

#[tokio::test]
async fn typing_more_distinct_characters_than_spare_keycodes_recycles_them() -> Result<()> {
    let desktop = Desktop::start().await?;
    let display = desktop.display();
    let conn = desktop.access().connect()?;
    let window = create_window(
        &conn,
        (0, 0, 640, 480),
        0,
        EventMask::NO_EVENT,
        "typing",
        "Typing",
    )?;
    WindowControl::new(desktop.access())?.activate(window)?;
    let keymap = ClientKeymap::fetch(&conn)?;
    let spare = keymap
        .syms
        .chunks(keymap.per)
        .filter(|row| row.iter().all(|&s| s == 0))
        .count();
    // More distinct CJK characters than spare keycodes, so some are recycled mid-text.
    let text: String = (0..u32::try_from(spare)? + 12)
        .map(|i| char::from_u32(0x4e00 + i * 7).expect("cjk"))
        .collect();

    // The reader models a live client: it decodes each key press as it arrives and re-reads
    // the map as soon as it sees MappingNotify.
    let reader_conn = desktop.access().connect()?;
    reader_conn.change_window_attributes(
        window,
        &ChangeWindowAttributesAux::new().event_mask(EventMask::KEY_PRESS),
    )?;
    reader_conn.sync()?;
    let expected = text.chars().count();
    let reader = {
        let conn = reader_conn;
        std::thread::spawn(move || -> Result<String> {
            let mut keymap = ClientKeymap::fetch(&conn)?;
            let mut out = String::new();
            let deadline = now() + Duration::from_secs(20);
            while out.chars().count() < expected && now() < deadline {
                match wait_for_event(&conn, display, deadline.saturating_duration_since(now()))? {
                    Some(Event::MappingNotify(_)) => keymap = ClientKeymap::fetch(&conn)?,
                    Some(Event::KeyPress(k)) if k.event == window => {
                        out.extend(keymap.text(k.detail, k.state));
                    }
                    _ => {}
                }
            }
            Ok(out)
        })
    };
    let mut input = Input::new(desktop.access(), clock())?;
    input.type_text(&text)?;
    input.finish()?;
    let received = reader.join().expect("reader thread")?;
    assert_eq!(received, text);
    eprintln!("typed {expected} distinct characters over {spare} spare keycodes");
    drop((input, conn));
    desktop.stop().await
}

#[tokio::test]
async fn settle_returns_after_the_quiet_period_on_a_still_screen() -> Result<()> {
    let desktop = Desktop::start().await?;
    let mut settler = Settler::new(desktop.access(), clock())?;
    let quiet = Duration::from_millis(100);
    let started = now();
    let outcome = settler.wait(quiet, Duration::from_secs(2))?;
    let elapsed = started.elapsed();
    eprintln!("still screen: {outcome:?}, wall {elapsed:?}");
    ensure!(outcome.settled);
    assert_eq!(outcome.damage_events, 0);
    ensure!(outcome.waited >= quiet && outcome.waited < quiet + Duration::from_millis(150));
    ensure!(elapsed >= quiet && elapsed < Duration::from_secs(1));
    drop(settler);
    desktop.stop().await
}

/// What a painter thread did.
struct Painted {
    frames: u32,
    /// The longest pause between two repaints: a loaded machine can stall the painter longer
    /// than the quiet period, and then the screen really was quiet.
    max_gap: Duration,
}

/// Repaints a window every 20 ms for `duration` from its own connection.
fn keep_busy(
    access: &DisplayAccess,
    duration: Duration,
) -> Result<std::thread::JoinHandle<Result<Painted>>> {
    let conn = access.connect()?;
    let window = create_window(
        &conn,
        (0, 0, 400, 400),
        0,
        EventMask::NO_EVENT,
        "busy",
        "Busy",
    )?;
    let gc = conn.generate_id()?;
    conn.create_gc(gc, window, &CreateGCAux::new().foreground(0x00ff_ffff))?;
    conn.sync()?;
    Ok(std::thread::spawn(move || -> Result<Painted> {
        let end = now() + duration;
        let mut frames = 0u32;
        let mut max_gap = Duration::ZERO;
        let mut last: Option<Instant> = None;
        while now() < end {
            let color = if frames.is_multiple_of(2) {
                0x00ff_0000
            } else {
                0x0000_ff00
            };
            conn.change_gc(
                gc,
                &x11rb::protocol::xproto::ChangeGCAux::new().foreground(color),
            )?;
            conn.poly_fill_rectangle(
                window,
                gc,
                &[Rectangle {
                    x: 0,
                    y: 0,
                    width: 400,
                    height: 400,
                }],
            )?;
            conn.sync()?;
            frames += 1;
            let painted = now();
            if let Some(last) = last {
                max_gap = max_gap.max(painted - last);
            }
            last = Some(painted);
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Painted { frames, max_gap })
    }))
}

#[tokio::test]
async fn settle_waits_out_a_busy_screen_and_stops_at_the_cap() -> Result<()> {
    let desktop = Desktop::start().await?;
    let mut settler = Settler::new(desktop.access(), clock())?;
    let quiet = Duration::from_millis(100);

    // The strict bounds hold only if the painter never paused for most of a quiet period.
    let steady = |p: &Painted| p.max_gap < quiet - Duration::from_millis(30);

    let busy_for = Duration::from_millis(400);
    let started = now();
    let painter = keep_busy(desktop.access(), busy_for)?;
    let outcome = settler.wait(quiet, Duration::from_secs(2))?;
    let painted = painter.join().expect("painter")?;
    eprintln!(
        "busy screen: {outcome:?} after {} repaints (longest gap {:?}), wall {:?}",
        painted.frames,
        painted.max_gap,
        started.elapsed()
    );
    ensure!(outcome.settled);
    ensure!(outcome.damage_events >= 1, "{outcome:?}");
    if steady(&painted) {
        ensure!(outcome.damage_events >= 3, "{outcome:?}");
        ensure!(
            outcome.waited >= busy_for - Duration::from_millis(50),
            "{outcome:?}"
        );
    }

    let cap = Duration::from_millis(200);
    let painter = keep_busy(desktop.access(), Duration::from_millis(800))?;
    let outcome = settler.wait(quiet, cap)?;
    let painted = painter.join().expect("painter")?;
    eprintln!("capped: {outcome:?} (longest gap {:?})", painted.max_gap);
    ensure!(outcome.waited <= cap);
    if steady(&painted) {
        ensure!(!outcome.settled);
        assert_eq!(outcome.waited, cap);
    }
    drop(settler);
    desktop.stop().await
}

#[tokio::test]
async fn after_input_the_settle_waits_for_a_late_draw_and_sees_an_early_one() -> Result<()> {
    let desktop = Desktop::start().await?;
    let quiet = Duration::from_millis(100);
    // Generous bounds: the test is about what the frame shows, not how long it took.
    let (first_within, cap) = (Duration::from_secs(5), Duration::from_secs(10));
    let mut settler = Settler::new(desktop.access(), clock())?;
    let mut input = Input::new(desktop.access(), clock())?;
    let mut capturer = Capturer::new(desktop.access())?;
    // Draws three times the quiet period after the click, then at once after the next click.
    let (late, early) = (0x00ff_0000, 0x0000_ff00);
    let painter = painter(
        desktop.access(),
        (0, 0, 400, 400),
        vec![(3 * quiet, late), (Duration::ZERO, early)],
    )?;

    // Armed before the click, as `act` does; the draw comes well after the quiet period.
    settler.arm()?;
    input.click(100, 100, Button::Left, false)?;
    input.finish()?;
    let outcome = settler.wait_after_input(first_within, quiet, cap)?;
    eprintln!("late draw: {outcome:?}");
    assert_eq!(
        pixel(&capturer.capture()?, 100, 100),
        late,
        "the settle returned before the late draw ({outcome:?})"
    );
    ensure!(
        outcome.settled && outcome.first_damage.is_some(),
        "{outcome:?}"
    );

    // A draw at once, possibly before the wait begins: it is seen (the arm came first), so the
    // wait does not run to its bound.
    settler.arm()?;
    input.click(100, 100, Button::Left, false)?;
    input.finish()?;
    let outcome = settler.wait_after_input(first_within, quiet, cap)?;
    eprintln!("early draw: {outcome:?}");
    let painter = painter.join().expect("painter")?;
    assert_eq!(pixel(&capturer.capture()?, 100, 100), early);
    ensure!(outcome.first_damage.is_some(), "{outcome:?}");

    // A click where no client draws: no damage, and the wait ends settled at its bound.
    settler.arm()?;
    input.click(1000, 700, Button::Left, false)?;
    input.finish()?;
    let short = Duration::from_millis(300);
    let outcome = settler.wait_after_input(short, quiet, cap)?;
    eprintln!("no draw: {outcome:?}");
    ensure!(
        outcome.settled && outcome.damage_events == 0 && outcome.first_damage.is_none(),
        "{outcome:?}"
    );
    assert_eq!(outcome.waited, short);
    drop((settler, input, capturer, painter));
    desktop.stop().await
}

#[tokio::test]
async fn windows_are_found_by_class_and_title_and_focused() -> Result<()> {
    let desktop = Desktop::start().await?;
    let conn = desktop.access().connect()?;
    let title = "Ωλ Test 中文";
    let first = create_window(
        &conn,
        (0, 0, 300, 300),
        0x00ff_0000,
        EventMask::NO_EVENT,
        "alpha",
        title,
    )?;
    let second = create_window(
        &conn,
        (100, 100, 300, 300),
        0x0000_ff00,
        EventMask::NO_EVENT,
        "beta",
        "Beta window",
    )?;
    let mut wm = WindowControl::new(desktop.access())?;
    let all = wm.windows()?;
    let ids: Vec<u32> = all.iter().map(|w| w.id).collect();
    assert_eq!(ids, vec![second, first], "topmost first");
    let alpha = wm.find(WindowMatch::Class("ALPHA"))?;
    assert_eq!(alpha.len(), 1);
    assert_eq!(alpha[0].id, first);
    assert_eq!(alpha[0].class, "ALPHA");
    assert_eq!(alpha[0].title, title);
    ensure!(alpha[0].viewable);
    let by_title = wm.find(WindowMatch::Title("ωλ test"))?;
    assert_eq!(
        by_title.iter().map(|w| w.id).collect::<Vec<_>>(),
        vec![first]
    );
    ensure!(wm.find(WindowMatch::Class("gamma"))?.is_empty());

    let mut capturer = Capturer::new(desktop.access())?;
    assert_eq!(capturer.active_window()?, None);
    assert_eq!(wm.activate(first)?, Activation::Direct);
    assert_eq!(conn.get_input_focus()?.reply()?.focus, first);
    let stack = conn
        .query_tree(conn.setup().roots[0].root)?
        .reply()?
        .children;
    assert_eq!(stack.last(), Some(&first), "raised to the top");
    assert_eq!(capturer.active_window()?, Some((first, title.to_owned())));
    assert_eq!(wm.active_window()?, Some((first, title.to_owned())));
    // The raised window now covers the overlap.
    let frame = capturer.capture()?;
    let i = (150 * 1280 + 150) * 3;
    assert_eq!(&frame.rgb[i..i + 3], &[0xff, 0, 0]);

    // An unmapped window is mapped when activated; a destroyed one is reported gone.
    conn.unmap_window(second)?;
    conn.sync()?;
    wm.activate(second)?;
    assert_eq!(conn.get_input_focus()?.reply()?.focus, second);
    conn.destroy_window(first)?;
    conn.sync()?;
    ensure!(matches!(
        wm.activate(first),
        Err(DisplayError::WindowGone { .. })
    ));
    drop((capturer, wm, conn));
    desktop.stop().await
}
