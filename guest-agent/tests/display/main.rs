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

mod capture;
mod input;
mod lifecycle;
mod settle;
mod windows;

#[path = "../painter/mod.rs"]
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
