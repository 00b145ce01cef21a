//! Windows on a display: list and find top-level client windows by `WM_CLASS` or title, read
//! titles, tell which window is active, and raise and focus one.
//!
//! Focus goes through EWMH (`_NET_ACTIVE_WINDOW` client message to the root) when an
//! EWMH-compliant window manager runs, and otherwise directly: map if needed, ConfigureWindow
//! stack mode Above, SetInputFocus. Titles come from `_NET_WM_NAME` (UTF8_STRING), falling back to
//! `WM_NAME`.
//!
//! It leaves to others: launching applications when no window matches (the desktop layer),
//! choosing among several matches, and window placement.

use x11rb::connection::Connection;
use x11rb::protocol::xproto::{
    AtomEnum, ClientMessageEvent, ConfigureWindowAux, ConnectionExt as _, EventMask, InputFocus,
    MapState, StackMode, Window,
};
use x11rb::protocol::Event;
use x11rb::rust_connection::RustConnection;
use x11rb::CURRENT_TIME;

use super::{x11_err, DisplayAccess, DisplayError, DisplayNum};

x11rb::atom_manager! {
    /// The atoms this module's X clients use, interned once per connection.
    pub(crate) Atoms: AtomsCookie {
        _NET_ACTIVE_WINDOW,
        _NET_CLIENT_LIST,
        _NET_SUPPORTING_WM_CHECK,
        _NET_WM_NAME,
        UTF8_STRING,
        COMPOUND_TEXT,
    }
}

/// Longest title read from a window, in bytes; longer titles are cut (on a char boundary).
const MAX_TITLE_BYTES: u32 = 4096;

/// How far below the root the window walk looks for client windows when no window manager
/// publishes `_NET_CLIENT_LIST` (depth 1 without a WM, 2 under a reparenting one).
const MAX_DEPTH: u32 = 3;

/// One top-level client window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowInfo {
    pub id: u32,
    /// First `WM_CLASS` string (the resource name, e.g. `chromium`).
    pub instance: String,
    /// Second `WM_CLASS` string (the class, e.g. `Chromium`).
    pub class: String,
    pub title: String,
    /// Mapped and on a mapped parent.
    pub viewable: bool,
}

/// How to pick windows. Both comparisons ignore case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowMatch<'a> {
    /// Equal to the `WM_CLASS` instance or class.
    Class(&'a str),
    /// Contained in the title.
    Title(&'a str),
}

impl WindowMatch<'_> {
    /// Whether `window` matches.
    pub fn matches(&self, window: &WindowInfo) -> bool {
        match *self {
            WindowMatch::Class(want) => {
                window.instance.eq_ignore_ascii_case(want)
                    || window.class.eq_ignore_ascii_case(want)
            }
            WindowMatch::Title(want) => window.title.to_lowercase().contains(&want.to_lowercase()),
        }
    }
}

/// How [`WindowControl::activate`] asked for focus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// A `_NET_ACTIVE_WINDOW` request to the running window manager, which applies it
    /// asynchronously.
    Ewmh,
    /// Raised and focused directly (no window manager); applied before `activate` returned.
    Direct,
}

/// An X client that lists, finds and focuses windows. Owns its connection.
#[derive(Debug)]
pub struct WindowControl {
    conn: RustConnection,
    display: DisplayNum,
    root: Window,
    atoms: Atoms,
}

impl WindowControl {
    /// Connects to the display.
    pub fn new(access: &DisplayAccess) -> Result<Self, DisplayError> {
        let display = access.display();
        let conn = access.connect()?;
        let root = conn.setup().roots[0].root;
        let atoms = intern_atoms(&conn, display)?;
        Ok(Self {
            conn,
            display,
            root,
            atoms,
        })
    }

    /// Client windows, topmost first.
    pub fn windows(&mut self) -> Result<Vec<WindowInfo>, DisplayError> {
        self.drain_events()?;
        let ids = self.client_window_ids()?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            match self.info(id) {
                Ok(info) => out.push(info),
                // A window can vanish between listing and reading it.
                Err(DisplayError::WindowGone { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(out)
    }

    /// Client windows matching `what`, topmost first.
    pub fn find(&mut self, what: WindowMatch<'_>) -> Result<Vec<WindowInfo>, DisplayError> {
        Ok(self
            .windows()?
            .into_iter()
            .filter(|w| what.matches(w))
            .collect())
    }

    /// The active window and its title: `_NET_ACTIVE_WINDOW` when a window manager sets it,
    /// else the top-level window holding the input focus. `None` when nothing has focus.
    pub fn active_window(&mut self) -> Result<Option<(u32, String)>, DisplayError> {
        self.drain_events()?;
        active_window(&self.conn, self.display, self.root, &self.atoms)
    }

    /// Raises `window` and gives it the input focus (see [`Activation`]).
    pub fn activate(&mut self, window: u32) -> Result<Activation, DisplayError> {
        self.drain_events()?;
        let display = self.display;
        let err = x11_err(display);
        let gone = |e: DisplayError| match e {
            DisplayError::X11 { .. } => DisplayError::WindowGone { display, window },
            other => other,
        };
        if self.ewmh_wm_running()? {
            let event = ClientMessageEvent::new(
                32,
                window,
                self.atoms._NET_ACTIVE_WINDOW,
                // Source 2 ("pager"): a request on the user's behalf, which WMs honour without
                // focus-stealing prevention.
                [2, CURRENT_TIME, 0, 0, 0],
            );
            self.conn
                .send_event(
                    false,
                    self.root,
                    EventMask::SUBSTRUCTURE_REDIRECT | EventMask::SUBSTRUCTURE_NOTIFY,
                    event,
                )
                .map_err(err)?
                .check()
                .map_err(x11_err(display))?;
            return Ok(Activation::Ewmh);
        }
        let attrs = self
            .conn
            .get_window_attributes(window)
            .map_err(x11_err(display))?
            .reply()
            .map_err(|e| gone(x11_err(display)(e)))?;
        if attrs.map_state == MapState::UNMAPPED {
            self.conn
                .map_window(window)
                .map_err(x11_err(display))?
                .check()
                .map_err(|e| gone(x11_err(display)(e)))?;
        }
        self.conn
            .configure_window(
                window,
                &ConfigureWindowAux::new().stack_mode(StackMode::ABOVE),
            )
            .map_err(x11_err(display))?
            .check()
            .map_err(|e| gone(x11_err(display)(e)))?;
        self.conn
            .set_input_focus(InputFocus::PARENT, window, CURRENT_TIME)
            .map_err(x11_err(display))?
            .check()
            .map_err(|e| gone(x11_err(display)(e)))?;
        Ok(Activation::Direct)
    }

    /// Whether an EWMH window manager runs: the root's `_NET_SUPPORTING_WM_CHECK` names a window
    /// whose own property names itself (a stale property left by a dead WM fails this).
    fn ewmh_wm_running(&self) -> Result<bool, DisplayError> {
        let check = self.atoms._NET_SUPPORTING_WM_CHECK;
        let Some(wm) = window_property(&self.conn, self.display, self.root, check)? else {
            return Ok(false);
        };
        match window_property(&self.conn, self.display, wm, check) {
            Ok(own) => Ok(own == Some(wm)),
            Err(DisplayError::WindowGone { .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// `_NET_CLIENT_LIST` when a window manager keeps one, else a walk of the window tree.
    /// Topmost first.
    fn client_window_ids(&self) -> Result<Vec<u32>, DisplayError> {
        let display = self.display;
        if self.ewmh_wm_running()? {
            let reply = self
                .conn
                .get_property(
                    false,
                    self.root,
                    self.atoms._NET_CLIENT_LIST,
                    AtomEnum::WINDOW,
                    0,
                    4096,
                )
                .map_err(x11_err(display))?
                .reply()
                .map_err(x11_err(display))?;
            let ids: Option<Vec<u32>> = reply.value32().map(Iterator::collect);
            if let Some(mut ids) = ids {
                // _NET_CLIENT_LIST is in mapping order, oldest first.
                ids.reverse();
                return Ok(ids);
            }
        }
        let mut found = Vec::new();
        self.walk(self.root, 0, &mut found)?;
        Ok(found)
    }

    /// Depth-first from the top of the stacking order; a window with `WM_CLASS` is a client
    /// window and its subtree is not searched further.
    fn walk(&self, parent: Window, depth: u32, found: &mut Vec<u32>) -> Result<(), DisplayError> {
        if depth >= MAX_DEPTH {
            return Ok(());
        }
        let display = self.display;
        let children = match self
            .conn
            .query_tree(parent)
            .map_err(x11_err(display))?
            .reply()
        {
            Ok(tree) => tree.children,
            Err(x11rb::errors::ReplyError::X11Error(_)) => return Ok(()), // destroyed meanwhile
            Err(e) => return Err(x11_err(display)(e)),
        };
        // QueryTree lists children bottom to top.
        for &child in children.iter().rev() {
            match wm_class(&self.conn, display, child) {
                Ok(Some(_)) => found.push(child),
                Ok(None) => self.walk(child, depth + 1, found)?,
                Err(DisplayError::WindowGone { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    fn info(&self, id: u32) -> Result<WindowInfo, DisplayError> {
        let display = self.display;
        let (instance, class) = wm_class(&self.conn, display, id)?.unwrap_or_default();
        let title = window_title(&self.conn, display, &self.atoms, id)?.unwrap_or_default();
        let viewable = match self
            .conn
            .get_window_attributes(id)
            .map_err(x11_err(display))?
            .reply()
        {
            Ok(attrs) => attrs.map_state == MapState::VIEWABLE,
            Err(x11rb::errors::ReplyError::X11Error(_)) => {
                return Err(DisplayError::WindowGone {
                    display,
                    window: id,
                })
            }
            Err(e) => return Err(x11_err(display)(e)),
        };
        Ok(WindowInfo {
            id,
            instance,
            class,
            title,
            viewable,
        })
    }

    /// Discards queued events (MappingNotify reaches every client) and surfaces errors of
    /// unchecked requests.
    fn drain_events(&mut self) -> Result<(), DisplayError> {
        drain_events(&self.conn, self.display)
    }
}

/// Interns [`Atoms`] on `conn`.
pub(crate) fn intern_atoms(
    conn: &RustConnection,
    display: DisplayNum,
) -> Result<Atoms, DisplayError> {
    Atoms::new(conn)
        .map_err(x11_err(display))?
        .reply()
        .map_err(x11_err(display))
}

/// Discards every queued event on `conn`; the first X error among them is returned.
pub(crate) fn drain_events(conn: &RustConnection, display: DisplayNum) -> Result<(), DisplayError> {
    let mut first_error = None;
    while let Some(event) = conn.poll_for_event().map_err(x11_err(display))? {
        if let Event::Error(error) = event {
            first_error.get_or_insert(error);
        }
    }
    match first_error {
        Some(error) => Err(x11_err(display)(error)),
        None => Ok(()),
    }
}

/// The active window and its title; see [`WindowControl::active_window`].
pub(crate) fn active_window(
    conn: &RustConnection,
    display: DisplayNum,
    root: Window,
    atoms: &Atoms,
) -> Result<Option<(u32, String)>, DisplayError> {
    if let Some(window) = window_property(conn, display, root, atoms._NET_ACTIVE_WINDOW)? {
        if window != x11rb::NONE {
            match window_title(conn, display, atoms, window) {
                Ok(title) => return Ok(Some((window, title.unwrap_or_default()))),
                Err(DisplayError::WindowGone { .. }) => {}
                Err(error) => return Err(error),
            }
        }
    }
    let focus = conn
        .get_input_focus()
        .map_err(x11_err(display))?
        .reply()
        .map_err(x11_err(display))?
        .focus;
    // Focus None (0) and PointerRoot (1) name no window.
    if focus == x11rb::NONE || focus == 1 || focus == root {
        return Ok(None);
    }
    // The focus may sit on a child of the application's window: climb to the first ancestor
    // with a title, or else to the top-level window (the child of the root).
    let mut window = focus;
    loop {
        if let Some(title) = window_title(conn, display, atoms, window)? {
            return Ok(Some((window, title)));
        }
        let tree = conn
            .query_tree(window)
            .map_err(x11_err(display))?
            .reply()
            .map_err(x11_err(display))?;
        if tree.parent == root || tree.parent == x11rb::NONE {
            return Ok(Some((window, String::new())));
        }
        window = tree.parent;
    }
}

/// A single WINDOW-typed property, `None` when absent or empty.
fn window_property(
    conn: &RustConnection,
    display: DisplayNum,
    window: Window,
    property: u32,
) -> Result<Option<u32>, DisplayError> {
    let reply = conn
        .get_property(false, window, property, AtomEnum::WINDOW, 0, 1)
        .map_err(x11_err(display))?
        .reply();
    match reply {
        Ok(reply) => Ok(reply.value32().and_then(|mut v| v.next())),
        Err(x11rb::errors::ReplyError::X11Error(_)) => {
            Err(DisplayError::WindowGone { display, window })
        }
        Err(e) => Err(x11_err(display)(e)),
    }
}

/// `WM_CLASS` as (instance, class); `None` when the window has none.
fn wm_class(
    conn: &RustConnection,
    display: DisplayNum,
    window: Window,
) -> Result<Option<(String, String)>, DisplayError> {
    let reply = conn
        .get_property(false, window, AtomEnum::WM_CLASS, AtomEnum::STRING, 0, 256)
        .map_err(x11_err(display))?
        .reply();
    let reply = match reply {
        Ok(reply) => reply,
        Err(x11rb::errors::ReplyError::X11Error(_)) => {
            return Err(DisplayError::WindowGone { display, window })
        }
        Err(e) => return Err(x11_err(display)(e)),
    };
    if reply.format != 8 || reply.value.is_empty() {
        return Ok(None);
    }
    let mut parts = reply.value.split(|&b| b == 0).map(latin1);
    let instance = parts.next().unwrap_or_default();
    let class = parts.next().unwrap_or_default();
    Ok(Some((instance, class)))
}

/// The window's title: `_NET_WM_NAME` (UTF-8), else `WM_NAME` (STRING is Latin-1; UTF8_STRING
/// and COMPOUND_TEXT are read as UTF-8, which is right for the ASCII subset COMPOUND_TEXT
/// shares). `None` when it has neither.
pub(crate) fn window_title(
    conn: &RustConnection,
    display: DisplayNum,
    atoms: &Atoms,
    window: Window,
) -> Result<Option<String>, DisplayError> {
    let long_length = MAX_TITLE_BYTES / 4;
    let get = |property: u32, type_: u32| match conn
        .get_property(false, window, property, type_, 0, long_length)
        .map_err(x11_err(display))?
        .reply()
    {
        Ok(reply) => Ok(reply),
        Err(x11rb::errors::ReplyError::X11Error(_)) => {
            Err(DisplayError::WindowGone { display, window })
        }
        Err(e) => Err(x11_err(display)(e)),
    };
    let net = get(atoms._NET_WM_NAME, atoms.UTF8_STRING)?;
    if net.format == 8 && net.type_ == atoms.UTF8_STRING {
        return Ok(Some(utf8_lossy_cut(&net.value)));
    }
    let legacy = get(AtomEnum::WM_NAME.into(), AtomEnum::ANY.into())?;
    if legacy.format != 8 || legacy.type_ == x11rb::NONE {
        return Ok(None);
    }
    if legacy.type_ == u32::from(AtomEnum::STRING) {
        Ok(Some(latin1(&legacy.value)))
    } else {
        Ok(Some(utf8_lossy_cut(&legacy.value)))
    }
}

/// Latin-1 bytes as a string (every byte is the code point of the same value).
fn latin1(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| char::from(b)).collect()
}

/// UTF-8 with invalid sequences replaced; a code point cut at the read limit becomes U+FFFD.
fn utf8_lossy_cut(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(instance: &str, class: &str, title: &str) -> WindowInfo {
        WindowInfo {
            id: 1,
            instance: instance.into(),
            class: class.into(),
            title: title.into(),
            viewable: true,
        }
    }

    #[test]
    fn class_matches_instance_or_class_ignoring_case() {
        let w = window("chromium", "Chromium", "New Tab - Chromium");
        assert!(WindowMatch::Class("CHROMIUM").matches(&w));
        assert!(WindowMatch::Class("chromium").matches(&w));
        assert!(!WindowMatch::Class("chrom").matches(&w));
    }

    #[test]
    fn title_matches_substrings_ignoring_case() {
        let w = window("xterm", "XTerm", "Ωλ Über Shell");
        assert!(WindowMatch::Title("über").matches(&w));
        assert!(WindowMatch::Title("ωλ").matches(&w));
        assert!(!WindowMatch::Title("bash").matches(&w));
    }

    #[test]
    fn latin1_maps_bytes_to_code_points() {
        assert_eq!(latin1(b"caf\xe9"), "café");
        assert_eq!(utf8_lossy_cut("中文".as_bytes()), "中文");
        assert_eq!(utf8_lossy_cut(&"中".as_bytes()[..2]), "\u{fffd}");
    }
}
