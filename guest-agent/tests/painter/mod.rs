//! An X client for the settle tests (`display.rs`, `screens.rs`): a window that answers button
//! presses by painting itself, from its own connection and thread, as an application answering a
//! click would; and reading a pixel of a captured frame.

use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use guest_agent::display::{wait_for_event, DisplayAccess, Frame};
use x11rb::connection::Connection as _;
use x11rb::protocol::xproto::{
    ChangeGCAux, ConfigureWindowAux, ConnectionExt as _, CreateGCAux, CreateWindowAux, EventMask,
    Rectangle, StackMode, Visibility, WindowClass,
};
use x11rb::protocol::Event;
use x11rb::rust_connection::RustConnection;
use x11rb::wrapper::ConnectionExt as _;

/// The painter window's colour before it answers.
pub const BACKGROUND: u32 = 0x0010_1010;

#[allow(
    clippy::disallowed_methods,
    reason = "the painter's own deadline for a press that never comes"
)]
fn now() -> Instant {
    Instant::now()
}

/// A window at `area` (x, y, width, height) whose thread answers the first button presses on it,
/// one per entry of `answers`, by painting the window in the entry's colour after its delay.
/// It is override-redirect and raises itself again when another window covers it (Chromium
/// raises its own as it starts). The thread returns its connection: the window lives until that
/// is dropped.
pub fn painter(
    access: &DisplayAccess,
    area: (i16, i16, u16, u16),
    answers: Vec<(Duration, u32)>,
) -> Result<std::thread::JoinHandle<Result<RustConnection>>> {
    let (x, y, width, height) = area;
    let conn = access.connect()?;
    let display = access.display();
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
            .background_pixel(BACKGROUND)
            .override_redirect(1)
            .event_mask(EventMask::BUTTON_PRESS | EventMask::VISIBILITY_CHANGE),
    )?
    .check()?;
    conn.map_window(window)?;
    let gc = conn.generate_id()?;
    conn.create_gc(gc, window, &CreateGCAux::new())?;
    conn.sync()?;
    Ok(std::thread::spawn(move || -> Result<RustConnection> {
        for (delay, colour) in answers {
            let deadline = now() + Duration::from_secs(30);
            loop {
                let left = deadline.saturating_duration_since(now());
                ensure!(!left.is_zero(), "no button press reached the painter");
                match wait_for_event(&conn, display, left)? {
                    Some(Event::ButtonPress(_)) => break,
                    Some(Event::VisibilityNotify(v)) if v.state != Visibility::UNOBSCURED => {
                        conn.configure_window(
                            window,
                            &ConfigureWindowAux::new().stack_mode(StackMode::ABOVE),
                        )?;
                        conn.sync()?;
                    }
                    _ => {}
                }
            }
            std::thread::sleep(delay);
            conn.change_gc(gc, &ChangeGCAux::new().foreground(colour))?;
            conn.poly_fill_rectangle(
                window,
                gc,
                &[Rectangle {
                    x: 0,
                    y: 0,
                    width,
                    height,
                }],
            )?;
            conn.sync()?;
        }
        Ok(conn)
    }))
}

/// The RGB pixel at (`x`, `y`) of a frame.
pub fn pixel(frame: &Frame, x: u32, y: u32) -> u32 {
    let at = usize::try_from((y * frame.width + x) * 3).expect("in range");
    u32::from_be_bytes([0, frame.rgb[at], frame.rgb[at + 1], frame.rgb[at + 2]])
}
