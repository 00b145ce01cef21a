//! The X core of a bot's desktop: one X server per display number (Xvnc, which also serves RFB
//! on a private unix socket), and in-process capture, input, settling and window focus over
//! x11rb.
//!
//! This module owns the X server process ([`xserver`]), the access credential that reaches it
//! ([`DisplayAccess`]: display number plus MIT-MAGIC-COOKIE-1) and the X clients built on it:
//! [`capture`] (MIT-SHM screenshots, PNG, frame ids), [`input`] (XTEST pointer and keyboard,
//! Unicode typing), [`settle`] (DAMAGE-based quiet-screen waits) and [`wm`] (find, raise and
//! focus windows). All unsafe code (shared memory, `poll`, the child's inherited fd) lives in the
//! private `sys` submodule.
//!
//! It leaves to others: slot allocation and fences, Chrome, the action vocabulary's batch
//! validation and the repeated-action refusal (docs/screens.md), identical-frame omission
//! (callers compare [`capture::Observation::frame_id`]) and the wall clock (callers pass `now`).
//!
//! Threading: the X clients here are blocking (each request is a sub-millisecond round trip on a
//! local socket, a settle wait blocks up to its cap); async callers run them on a blocking thread.
//! [`xserver::XServer`] is async because it waits on a child process.

pub mod capture;
pub mod input;
pub mod settle;
mod sys;
pub mod wm;
pub mod xserver;

use std::fmt;
use std::io;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::os::fd::AsFd as _;

use x11rb::connection::Connection as _;
use x11rb::errors::{ConnectError, ReplyOrIdError};
use x11rb::protocol::Event;
use x11rb::rust_connection::{DefaultStream, RustConnection};

pub use capture::{Capturer, Frame, Observation};
pub use input::{Button, Input, KeyCombo, Modifier, ScrollDirection};
pub use settle::{QuietWindow, SettleOutcome, Settler};
pub use wm::{Activation, WindowControl, WindowInfo, WindowMatch};
pub use xserver::{XServer, XServerKind, XServerOptions};

/// The monotonic clock of the X clients that wait ([`Settler`], [`Input`] typing). Injected, so
/// nothing here reads the time itself (ARCHITECTURE.md, "Cross-cutting"); the agent wraps its clock
/// module's `now`.
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> Instant + Send + Sync>);

impl Clock {
    /// A clock reading `now`.
    pub fn new(now: impl Fn() -> Instant + Send + Sync + 'static) -> Self {
        Self(Arc::new(now))
    }

    /// The current instant.
    pub fn now(&self) -> Instant {
        (self.0)()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Clock")
    }
}

/// The authorization protocol of every cookie this module writes and presents.
const AUTH_NAME: &[u8] = b"MIT-MAGIC-COOKIE-1";

/// An X display number, printed the way `DISPLAY` spells it (`:101`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DisplayNum(u16);

impl DisplayNum {
    /// Display numbers of desktop slots start here, far from the `:0`..`:99` that people and
    /// other tools pick by hand.
    pub const SLOT_BASE: u16 = 100;
    /// The largest display number this module uses (TCP is off, but X tools still assume the
    /// number fits beside port 6000 in a `u16`).
    pub const MAX: u16 = 32_767;

    /// A display number; `None` when it is above [`DisplayNum::MAX`].
    pub fn new(number: u16) -> Option<Self> {
        (number <= Self::MAX).then_some(Self(number))
    }

    /// The display of desktop slot `slot`: `SLOT_BASE + slot`.
    pub fn for_slot(slot: u32) -> Result<Self, DisplayError> {
        u16::try_from(slot)
            .ok()
            .and_then(|slot| Self::SLOT_BASE.checked_add(slot))
            .and_then(Self::new)
            .ok_or(DisplayError::SlotOutOfRange { slot })
    }

    /// The number itself, without the colon.
    pub fn get(self) -> u16 {
        self.0
    }

    /// The X server's lock file for this display (`/tmp/.X<n>-lock`), fixed by the X server.
    pub fn lock_path(self) -> PathBuf {
        PathBuf::from(format!("/tmp/.X{}-lock", self.0))
    }

    /// The X server's listening socket for this display (`/tmp/.X11-unix/X<n>`), fixed by the X
    /// server and by libxcb (see [`xserver`] for why it cannot move to a private directory).
    pub fn socket_path(self) -> PathBuf {
        PathBuf::from(format!("/tmp/.X11-unix/X{}", self.0))
    }
}

impl fmt::Display for DisplayNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, ":{}", self.0)
    }
}

/// A 128-bit MIT-MAGIC-COOKIE-1. Its `Debug` prints `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Cookie([u8; 16]);

impl Cookie {
    /// A fresh cookie from the thread-local CSPRNG (seeded by the OS).
    pub fn random() -> Self {
        Self(rand::random())
    }

    /// A cookie with these bytes, e.g. one read back from an Xauthority file.
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// The secret bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Debug for Cookie {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// What it takes to reach one display: its number and its cookie. Cheap to clone; every X
/// client in this module opens its own connection from it.
#[derive(Debug, Clone)]
pub struct DisplayAccess {
    display: DisplayNum,
    cookie: Cookie,
}

impl DisplayAccess {
    /// Access to `display` with `cookie`.
    pub fn new(display: DisplayNum, cookie: Cookie) -> Self {
        Self { display, cookie }
    }

    /// The display this reaches.
    pub fn display(&self) -> DisplayNum {
        self.display
    }

    /// The cookie presented at connection setup.
    pub fn cookie(&self) -> &Cookie {
        &self.cookie
    }

    /// Opens a new connection to screen 0 of the display over its unix socket, presenting the
    /// cookie directly: neither `DISPLAY` nor `XAUTHORITY` is read or written.
    pub fn connect(&self) -> Result<RustConnection, DisplayError> {
        let display = self.display;
        let socket = UnixStream::connect(display.socket_path())
            .map_err(|source| DisplayError::Socket { display, source })?;
        let (stream, _peer) = DefaultStream::from_unix_stream(socket)
            .map_err(|source| DisplayError::Socket { display, source })?;
        RustConnection::connect_to_stream_with_auth_info(
            stream,
            0,
            AUTH_NAME.to_vec(),
            self.cookie.0.to_vec(),
        )
        .map_err(|source| DisplayError::Connect { display, source })
    }
}

/// Waits up to `timeout` for the next event (or X error) on `conn`; `Ok(None)` when none came
/// in time. Requests buffered on `conn` are flushed first, so a reply-less request sent just
/// before is on its way.
pub fn wait_for_event(
    conn: &RustConnection,
    display: DisplayNum,
    timeout: Duration,
) -> Result<Option<Event>, DisplayError> {
    if let Some(event) = conn.poll_for_event().map_err(x11_err(display))? {
        return Ok(Some(event));
    }
    conn.flush().map_err(x11_err(display))?;
    let readable = sys::wait_readable(conn.stream().as_fd(), timeout)
        .map_err(|source| DisplayError::Poll { display, source })?;
    if !readable {
        return Ok(None);
    }
    conn.poll_for_event().map_err(x11_err(display))
}

/// Everything that can go wrong on a display. Messages name the display (`:101`) and, where
/// there is one, the pid, window or key involved.
#[derive(Debug, thiserror::Error)]
pub enum DisplayError {
    #[error("desktop slot {slot} has no display number")]
    SlotOutOfRange { slot: u32 },
    #[error("runtime directory {} of display {display} is unusable", path.display())]
    RuntimeDir {
        display: DisplayNum,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "runtime directory {} of display {display} is not private (mode {mode:o}, owner {uid}); \
         it must be a directory of ours with mode 0700",
        path.display()
    )]
    RuntimeDirNotPrivate {
        display: DisplayNum,
        path: PathBuf,
        mode: u32,
        uid: u32,
    },
    #[error("display {display} is in use by live pid {pid}")]
    InUse { display: DisplayNum, pid: i32 },
    #[error("display {display} has a live x socket but no lock file")]
    SocketInUse { display: DisplayNum },
    #[error("cannot update the x lock files ({}) of display {display}", path.display())]
    LockFiles {
        display: DisplayNum,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot start {server} for display {display}")]
    Spawn {
        display: DisplayNum,
        server: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("{server} pid {pid} for display {display} exited before it was ready: {log_tail}")]
    ExitedEarly {
        display: DisplayNum,
        server: &'static str,
        pid: u32,
        log_tail: String,
    },
    #[error("{server} pid {pid} for display {display} was not ready within {timeout:?}")]
    StartTimeout {
        display: DisplayNum,
        server: &'static str,
        pid: u32,
        timeout: Duration,
    },
    #[error("{server} pid {pid} for display {display} announced display {announced:?}")]
    WrongDisplay {
        display: DisplayNum,
        server: &'static str,
        pid: u32,
        announced: String,
    },
    #[error("Xvnc pid {pid} for display {display} is ready but made no rfb socket: {log_tail}")]
    NoRfbSocket {
        display: DisplayNum,
        pid: u32,
        log_tail: String,
    },
    #[error("cannot stop {server} pid {pid} of display {display}")]
    Stop {
        display: DisplayNum,
        server: &'static str,
        pid: u32,
        #[source]
        source: io::Error,
    },
    #[error("cannot remove {} of stopped display {display}", path.display())]
    Cleanup {
        display: DisplayNum,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot open the x socket of display {display}")]
    Socket {
        display: DisplayNum,
        #[source]
        source: io::Error,
    },
    #[error("x11 connection setup on display {display} failed")]
    Connect {
        display: DisplayNum,
        #[source]
        source: ConnectError,
    },
    #[error("x11 request on display {display} failed")]
    X11 {
        display: DisplayNum,
        #[source]
        source: ReplyOrIdError,
    },
    /// The server refused a request of an input action; `action` counts the batch's actions
    /// from 0 ([`Input::finish`] ends a batch), so the ones before it were carried out.
    #[error("the x server refused input action {} of the batch on display {display}", .action + 1)]
    InputAction {
        display: DisplayNum,
        action: usize,
        #[source]
        source: ReplyOrIdError,
    },
    #[error("waiting for x events on display {display} failed")]
    Poll {
        display: DisplayNum,
        #[source]
        source: io::Error,
    },
    #[error("display {display} lacks the {extension} extension")]
    MissingExtension {
        display: DisplayNum,
        extension: &'static str,
    },
    #[error(
        "display {display} has an unsupported pixel format \
         (depth {depth}, {bits_per_pixel} bits per pixel)"
    )]
    UnsupportedPixelFormat {
        display: DisplayNum,
        depth: u8,
        bits_per_pixel: u8,
    },
    #[error("png encoding of a {width}x{height} frame failed")]
    Png {
        width: u32,
        height: u32,
        #[source]
        source: png::EncodingError,
    },
    #[error("unknown key name {0:?}")]
    UnknownKey(String),
    #[error("character {ch:?} (U+{:04X}) cannot be typed", u32::from(*ch))]
    UntypableChar { ch: char },
    #[error("scroll amount {0} is outside 1..=20")]
    ScrollAmount(u32),
    #[error("display {display} has no keycode for keysym {keysym:#x}")]
    NoKeycode { display: DisplayNum, keysym: u32 },
    #[error("window {window:#x} on display {display} is gone")]
    WindowGone { display: DisplayNum, window: u32 },
}

/// `map_err` helper: `conn.sync().map_err(x11_err(display))?`.
pub(crate) fn x11_err<E: Into<ReplyOrIdError>>(
    display: DisplayNum,
) -> impl FnOnce(E) -> DisplayError {
    move |error| DisplayError::X11 {
        display,
        source: error.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_map_to_displays_from_the_base() {
        assert_eq!(DisplayNum::for_slot(0).unwrap().get(), 100);
        assert_eq!(DisplayNum::for_slot(7).unwrap().to_string(), ":107");
        assert!(DisplayNum::for_slot(u32::MAX).is_err());
        assert!(DisplayNum::for_slot(40_000).is_err());
        assert_eq!(DisplayNum::new(32_768), None);
    }

    #[test]
    fn paths_follow_the_x_server() {
        let d = DisplayNum::new(150).unwrap();
        assert_eq!(d.lock_path(), PathBuf::from("/tmp/.X150-lock"));
        assert_eq!(d.socket_path(), PathBuf::from("/tmp/.X11-unix/X150"));
    }

    #[test]
    fn cookies_are_random_and_redacted() {
        let (a, b) = (Cookie::random(), Cookie::random());
        assert_ne!(a, b);
        assert_eq!(format!("{a:?}"), "***");
        let access = DisplayAccess::new(DisplayNum::new(1).unwrap(), a);
        assert!(!format!("{access:?}").contains(&hex::encode(access.cookie().as_bytes())));
    }
}
