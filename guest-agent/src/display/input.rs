//! In-process input over XTEST: pointer moves, button presses, clicks, scrolling, key combos
//! with modifiers, and typing of any Unicode text.
//!
//! Typing looks each character up in the core keyboard map (pressing Shift for the second
//! column). A character absent from the map is bound to a spare keycode (one with no keysyms)
//! through ChangeKeyboardMapping, as its Unicode keysym (`0x01000000 + code point`, or the
//! Latin-1 keysym below U+0100), and then pressed.
//!
//! Clients translate keycodes themselves, with a copy of the map they re-read after a mapping
//! notification, and Chromium does so asynchronously and whenever it gets to the notification.
//! Measured in Chromium: a key pressed right after its binding changed was decoded with the old
//! binding, and a binding changed some tens of milliseconds after its key was pressed made a busy
//! Chromium decode that press with the new one. Hence two rules, both bounds on client lag rather than
//! guarantees (no X request can confirm that another client has read the map):
//!
//! - A text is typed in segments. All bindings a segment needs are made up front (reusing
//!   bindings in place, taking spare keycodes, then recycling the least recently used, never one
//!   the segment needs), then one sync and a [`BIND_SETTLE`] pause, and only then its presses.
//!   A new segment starts only when a text has used as many distinct unmapped characters as
//!   there are spare keycodes; a text that needs no new binding needs no pause.
//! - A bound keycode is changed again (recycled, or restored to NoSymbol) only once
//!   [`REBIND_AFTER`] has passed since its last press; the caller blocks until then.
//!
//! So bindings outlive the text that made them (repeated characters cost nothing later) and stay
//! while this [`Input`] lives; [`Input::restore_keymap`] (also run on drop) puts them back to
//! NoSymbol. With these rules, 40 distinct CJK characters typed over the 19 spare keycodes of Xvnc
//! (and of Xvfb, whose keymap is the same) in four back-to-back calls arrived intact in Chromium,
//! recycled keycodes included.
//!
//! Actions only send their requests (and flush them); [`Input::finish`] ends a batch with one
//! GetInputFocus round trip, after which the server has processed every event of the batch (and
//! queued them to clients) and reported any error. So a batch of actions costs one round trip, not
//! one per action (issue 17); events of one batch stay in order, since they travel on one
//! connection. Only typing that changes key bindings waits for the server inside an action (the
//! bindings must be in place before the pause that lets clients re-read the map). An X error
//! names the request that caused it by sequence number: [`Input::finish`] (and any later call)
//! reports it as [`DisplayError::InputAction`] with the index, within the batch, of the action
//! that sent that request, so the caller knows how many actions the server carried out.
//!
//! It leaves to others: batch validation and the 24-action limit, waits between actions,
//! repeated-action refusal (docs/screens.md#repeated-action-refusal), and which window has focus
//! (see `wm`).

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::time::{Duration, Instant};

use x11rb::connection::{Connection, RequestConnection as _, SequenceNumber};
use x11rb::protocol::xproto::{
    ConnectionExt as _, Keycode, Keysym, Mapping, Window, BUTTON_PRESS_EVENT, BUTTON_RELEASE_EVENT,
    KEY_PRESS_EVENT, KEY_RELEASE_EVENT, MOTION_NOTIFY_EVENT,
};
use x11rb::protocol::xtest::ConnectionExt as _;
use x11rb::protocol::Event;
use x11rb::rust_connection::RustConnection;
use x11rb::wrapper::ConnectionExt as _;
use x11rb::CURRENT_TIME;

use super::{x11_err, Clock, DisplayAccess, DisplayError, DisplayNum};

mod keys;

use keys::ks;
pub use keys::{char_keysym, keysym_char, KeyCombo, Modifier};

/// Largest coordinate accepted before clamping to the screen (docs/screens.md#observe-and-act).
pub const MAX_COORDINATE: i64 = 100_000;
/// Scroll amounts run from 1 to this many notches (docs/screens.md#observe-and-act).
pub const MAX_SCROLL: u32 = 20;
/// Pause between changing key bindings and pressing the keys, so clients that re-read the map
/// asynchronously (Chromium) have the new bindings first. 20 ms sufficed in measurements.
pub const BIND_SETTLE: Duration = Duration::from_millis(30);
/// Least time between a bound key's last press and changing its binding again.
pub const REBIND_AFTER: Duration = Duration::from_millis(500);

/// A pointer button.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Button {
    Left,
    Middle,
    Right,
}

impl Button {
    fn detail(self) -> u8 {
        match self {
            Button::Left => 1,
            Button::Middle => 2,
            Button::Right => 3,
        }
    }
}

/// A scroll direction (buttons 4 and 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScrollDirection {
    Up,
    Down,
}
/// Clamps a requested position to 0..=[`MAX_COORDINATE`], then to the screen.
pub fn clamp_point(x: i64, y: i64, width: u16, height: u16) -> (i16, i16) {
    let axis = |v: i64, size: u16| {
        let last = i64::from(size.max(1) - 1).min(i64::from(i16::MAX));
        let v = v.clamp(0, MAX_COORDINATE).min(last);
        i16::try_from(v).unwrap_or(i16::MAX)
    };
    (axis(x, width), axis(y, height))
}

/// The core keyboard map as a keysym index.
#[derive(Debug, Clone)]
struct Keymap {
    min_keycode: Keycode,
    per: usize,
    keysyms: Vec<Keysym>,
    /// keysym → (keycode, needs Shift). Excludes keycodes bound by the remap pool.
    index: HashMap<Keysym, (Keycode, bool)>,
}

impl Keymap {
    /// Indexes a GetKeyboardMapping reply covering `min_keycode..`, skipping `excluded`.
    fn new(
        min_keycode: Keycode,
        per: u8,
        keysyms: Vec<Keysym>,
        excluded: &HashSet<Keycode>,
    ) -> Self {
        let per = usize::from(per);
        let mut index = HashMap::new();
        let rows = || {
            keysyms
                .chunks(per.max(1))
                .zip(min_keycode..=Keycode::MAX)
                .filter(|(_, kc)| !excluded.contains(kc))
        };
        // Unshifted positions win over shifted ones, lower keycodes over higher ones.
        for (row, kc) in rows() {
            if let Some(&sym) = row.first().filter(|&&s| s != ks::NO_SYMBOL) {
                index.entry(sym).or_insert((kc, false));
            }
        }
        for (row, kc) in rows() {
            let first = row.first().copied().unwrap_or(ks::NO_SYMBOL);
            let second = row.get(1).copied().unwrap_or(ks::NO_SYMBOL);
            // Core protocol rule: a letter listed alone has its capital in the second column.
            let second = if second == ks::NO_SYMBOL {
                upper_latin1(first).unwrap_or(ks::NO_SYMBOL)
            } else {
                second
            };
            if second != ks::NO_SYMBOL {
                index.entry(second).or_insert((kc, true));
            }
        }
        Self {
            min_keycode,
            per,
            keysyms,
            index,
        }
    }

    fn lookup(&self, keysym: Keysym) -> Option<(Keycode, bool)> {
        self.index.get(&keysym).copied()
    }

    /// Keycodes without any keysym, the ones typing may bind.
    fn spare_keycodes(&self) -> Vec<Keycode> {
        self.keysyms
            .chunks(self.per.max(1))
            .zip(self.min_keycode..=Keycode::MAX)
            .filter(|(row, _)| row.iter().all(|&s| s == ks::NO_SYMBOL))
            .map(|(_, kc)| kc)
            .collect()
    }

    /// The first keysym of `keycode`.
    fn first_keysym(&self, keycode: Keycode) -> Option<Keysym> {
        let row = usize::from(keycode.checked_sub(self.min_keycode)?);
        self.keysyms.get(row * self.per).copied()
    }
}

/// Capital of a lowercase Latin-1 letter keysym.
fn upper_latin1(keysym: Keysym) -> Option<Keysym> {
    let ch = char::from_u32(keysym).filter(|_| keysym < 0x100)?;
    let mut upper = ch.to_uppercase();
    match (upper.next(), upper.next()) {
        (Some(u), None) if u != ch && u32::from(u) < 0x100 => Some(u32::from(u)),
        _ => None,
    }
}

/// What [`RemapPool::bind_all`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
struct BindPlan {
    /// The keycode of each requested keysym, in order.
    keycodes: Vec<Keycode>,
    /// (keycode, keysym) bindings to send to the server.
    changed: Vec<(Keycode, Keysym)>,
    /// The changes recycle keycodes pressed recently: send them no earlier than this.
    not_before: Option<Instant>,
}

/// Spare keycodes and the keysyms bound to them, with least-recently-used recycling. Pure.
#[derive(Debug, Clone, Default)]
struct RemapPool {
    free: Vec<Keycode>,
    bound: Vec<Binding>,
    /// Counts uses: the recency order.
    tick: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Binding {
    keycode: Keycode,
    keysym: Keysym,
    last_used: u64,
    last_pressed: Option<Instant>,
}

impl RemapPool {
    fn new(mut spare: Vec<Keycode>) -> Self {
        // Hand out the highest keycodes first (pop from the end), far from real keys.
        spare.sort_unstable();
        Self {
            free: spare,
            ..Self::default()
        }
    }

    /// How many keysyms can be bound at once.
    fn capacity(&self) -> usize {
        self.free.len() + self.bound.len()
    }

    /// Binds all of `keysyms` (distinct, at most [`RemapPool::capacity`] of them): bindings in
    /// place are reused, the rest take free keycodes, then the least recently used keycodes
    /// bound to keysyms outside `keysyms`. `None` when they do not fit.
    fn bind_all(&mut self, keysyms: &[Keysym]) -> Option<BindPlan> {
        if keysyms.len() > self.capacity() {
            return None;
        }
        // Touch what is already bound first, so eviction below cannot pick it.
        let mut keycodes = vec![None; keysyms.len()];
        for (slot, &keysym) in keycodes.iter_mut().zip(keysyms) {
            if let Some(b) = self.bound.iter_mut().find(|b| b.keysym == keysym) {
                self.tick += 1;
                b.last_used = self.tick;
                *slot = Some(b.keycode);
            }
        }
        let mut changed = Vec::new();
        let mut not_before = None;
        for (slot, &keysym) in keycodes.iter_mut().zip(keysyms) {
            if slot.is_some() {
                continue;
            }
            self.tick += 1;
            let binding = if let Some(keycode) = self.free.pop() {
                self.bound.push(Binding {
                    keycode,
                    keysym,
                    last_used: self.tick,
                    last_pressed: None,
                });
                self.bound.last_mut()?
            } else {
                let victim = self.bound.iter_mut().min_by_key(|b| b.last_used)?;
                if let Some(pressed) = victim.last_pressed {
                    let at = pressed + REBIND_AFTER;
                    not_before = Some(not_before.map_or(at, |n: Instant| n.max(at)));
                }
                victim.keysym = keysym;
                victim.last_used = self.tick;
                victim.last_pressed = None;
                victim
            };
            *slot = Some(binding.keycode);
            changed.push((binding.keycode, binding.keysym));
        }
        let keycodes = keycodes.into_iter().collect::<Option<Vec<_>>>()?;
        Some(BindPlan {
            keycodes,
            changed,
            not_before,
        })
    }

    /// Records that `keycode` (if bound) was pressed at `at`.
    fn mark_pressed(&mut self, keycode: Keycode, at: Instant) {
        if let Some(b) = self.bound.iter_mut().find(|b| b.keycode == keycode) {
            b.last_pressed = Some(at);
        }
    }

    /// When every binding may be changed again ([`REBIND_AFTER`] after the last press).
    fn all_rebindable_at(&self) -> Option<Instant> {
        self.bound
            .iter()
            .filter_map(|b| b.last_pressed)
            .max()
            .map(|pressed| pressed + REBIND_AFTER)
    }

    fn bound_keycodes(&self) -> HashSet<Keycode> {
        self.bound.iter().map(|b| b.keycode).collect()
    }

    /// Forgets every binding, returning their keycodes to the free list; returns them too.
    fn release_all(&mut self) -> Vec<Keycode> {
        let released: Vec<Keycode> = self.bound.drain(..).map(|b| b.keycode).collect();
        self.free.extend(&released);
        self.free.sort_unstable();
        released
    }
}

/// Splits a text into consecutive segments whose distinct unmapped keysyms (`Some` entries of
/// `unmapped`) number at most `capacity`, each as long as possible. `None` when a keysym needs
/// binding but `capacity` is zero.
fn plan_segments(unmapped: &[Option<Keysym>], capacity: usize) -> Option<Vec<Range<usize>>> {
    let mut segments = Vec::new();
    let mut start = 0;
    let mut distinct: HashSet<Keysym> = HashSet::new();
    for (i, keysym) in unmapped.iter().enumerate() {
        let Some(keysym) = keysym else { continue };
        if distinct.contains(keysym) {
            continue;
        }
        if distinct.len() == capacity {
            if capacity == 0 {
                return None;
            }
            segments.push(start..i);
            start = i;
            distinct.clear();
        }
        distinct.insert(*keysym);
    }
    if start < unmapped.len() || segments.is_empty() {
        segments.push(start..unmapped.len());
    }
    Some(segments)
}

/// The distinct `Some` keysyms of `unmapped`, in first-use order.
fn distinct_unmapped(unmapped: &[Option<Keysym>]) -> Vec<Keysym> {
    let mut seen = HashSet::new();
    unmapped
        .iter()
        .flatten()
        .copied()
        .filter(|k| seen.insert(*k))
        .collect()
}

/// An X client that injects input into one display. Owns its connection.
#[derive(Debug)]
pub struct Input {
    conn: RustConnection,
    display: DisplayNum,
    root: Window,
    width: u16,
    height: u16,
    keymap: Keymap,
    pool: RemapPool,
    clock: Clock,
    /// The sequence number of the last request sent.
    last_sent: SequenceNumber,
    /// Per action of the current batch (since the last [`Input::finish`]), the sequence number
    /// of its last request.
    batch: Vec<SequenceNumber>,
    /// Sync round trips made, for tests and benchmarks.
    syncs: u64,
}

/// The action of a batch that sent request `seq`: the first whose last request is at or after
/// it; `ended.len()` (the action still running) when none is.
fn action_of(ended: &[SequenceNumber], seq: SequenceNumber) -> usize {
    ended.partition_point(|&last| last < seq)
}

impl Input {
    /// Connects to the display and reads its keyboard map; `clock` times the binding rules of
    /// the module docs. Fails when XTEST is missing.
    pub fn new(access: &DisplayAccess, clock: Clock) -> Result<Self, DisplayError> {
        let display = access.display();
        let conn = access.connect()?;
        if conn
            .extension_information(x11rb::protocol::xtest::X11_EXTENSION_NAME)
            .map_err(x11_err(display))?
            .is_none()
        {
            return Err(DisplayError::MissingExtension {
                display,
                extension: "XTEST",
            });
        }
        let screen = &conn.setup().roots[0];
        let (root, width, height) = (screen.root, screen.width_in_pixels, screen.height_in_pixels);
        let keymap = fetch_keymap(&conn, display, &HashSet::new())?;
        let pool = RemapPool::new(keymap.spare_keycodes());
        Ok(Self {
            conn,
            display,
            root,
            width,
            height,
            keymap,
            pool,
            clock,
            last_sent: 0,
            batch: Vec::new(),
            syncs: 0,
        })
    }

    /// How many sync round trips this client made: one per [`Input::finish`], plus one per
    /// segment of typing that changes key bindings. (Re-reading a keyboard map another client
    /// changed, rare, also waits for the server; it is not counted.)
    pub fn syncs(&self) -> u64 {
        self.syncs
    }

    /// Ends a batch: one round trip, after which the server has processed every action sent
    /// since the last `finish` (their events are queued to clients), then handles queued
    /// events. An X error caused by one of those actions is [`DisplayError::InputAction`].
    pub fn finish(&mut self) -> Result<(), DisplayError> {
        let result = self.sync().and_then(|()| self.drain_events());
        self.batch.clear();
        result
    }

    /// The display this drives.
    pub fn display(&self) -> DisplayNum {
        self.display
    }

    /// Moves the pointer to (`x`, `y`), clamped (see [`clamp_point`]); returns where it went.
    pub fn move_to(&mut self, x: i64, y: i64) -> Result<(i16, i16), DisplayError> {
        let point = self.send_move(x, y)?;
        self.end_action()?;
        Ok(point)
    }

    /// Moves to (`x`, `y`) and presses `button` (the `down` action).
    pub fn button_down(&mut self, x: i64, y: i64, button: Button) -> Result<(), DisplayError> {
        self.send_move(x, y)?;
        self.fake(BUTTON_PRESS_EVENT, button.detail())?;
        self.end_action()
    }

    /// Moves to (`x`, `y`) and releases `button` (the `up` action).
    pub fn button_up(&mut self, x: i64, y: i64, button: Button) -> Result<(), DisplayError> {
        self.send_move(x, y)?;
        self.fake(BUTTON_RELEASE_EVENT, button.detail())?;
        self.end_action()
    }

    /// Moves to (`x`, `y`) and clicks `button` once, or twice when `double`.
    pub fn click(
        &mut self,
        x: i64,
        y: i64,
        button: Button,
        double: bool,
    ) -> Result<(), DisplayError> {
        self.send_move(x, y)?;
        for _ in 0..if double { 2 } else { 1 } {
            self.fake(BUTTON_PRESS_EVENT, button.detail())?;
            self.fake(BUTTON_RELEASE_EVENT, button.detail())?;
        }
        self.end_action()
    }

    /// Scrolls `amount` notches (1..=[`MAX_SCROLL`]) at the pointer.
    pub fn scroll(&mut self, direction: ScrollDirection, amount: u32) -> Result<(), DisplayError> {
        if !(1..=MAX_SCROLL).contains(&amount) {
            return Err(DisplayError::ScrollAmount(amount));
        }
        let button = match direction {
            ScrollDirection::Up => 4,
            ScrollDirection::Down => 5,
        };
        for _ in 0..amount {
            self.fake(BUTTON_PRESS_EVENT, button)?;
            self.fake(BUTTON_RELEASE_EVENT, button)?;
        }
        self.end_action()
    }

    /// Presses and releases a key combo: modifiers down in order, the key (with Shift when its
    /// keysym sits in the second column), then everything up in reverse.
    pub fn key(&mut self, combo: &KeyCombo) -> Result<(), DisplayError> {
        let display = self.display;
        // Resolve every keycode before sending anything.
        let mut held = Vec::with_capacity(combo.modifiers.len() + 1);
        for modifier in &combo.modifiers {
            let keysym = modifier.keysym();
            let (kc, _) = self
                .keymap
                .lookup(keysym)
                .ok_or(DisplayError::NoKeycode { display, keysym })?;
            held.push(kc);
        }
        let (kc, needs_shift) = match self.keymap.lookup(combo.keysym) {
            Some(found) => found,
            None => (self.bind_all(&[combo.keysym])?[0], false),
        };
        if needs_shift && !combo.modifiers.contains(&Modifier::Shift) {
            held.push(self.shift_keycode()?);
        }
        for &m in &held {
            self.fake(KEY_PRESS_EVENT, m)?;
        }
        self.fake(KEY_PRESS_EVENT, kc)?;
        self.fake(KEY_RELEASE_EVENT, kc)?;
        for &m in held.iter().rev() {
            self.fake(KEY_RELEASE_EVENT, m)?;
        }
        // Sent (flushed by `end_action`) when marked: the server handles the press at once,
        // and a later binding change for this keycode travels behind it on this connection.
        self.end_action()?;
        self.pool.mark_pressed(kc, self.clock.now());
        Ok(())
    }

    /// Types `text`: every character, including ones absent from the keymap (see the module
    /// docs). `\n`, `\r\n` and `\r` press Return, `\t` presses Tab; other control characters are
    /// refused before anything is typed.
    pub fn type_text(&mut self, text: &str) -> Result<(), DisplayError> {
        let text = text.replace("\r\n", "\n");
        let keysyms = text
            .chars()
            .map(|ch| char_keysym(ch).ok_or(DisplayError::UntypableChar { ch }))
            .collect::<Result<Vec<_>, _>>()?;
        self.drain_events()?;
        let shift = self.shift_keycode()?;
        // Per character: its keycode and Shift from the keymap, or the keysym to bind.
        let strokes: Vec<Result<(Keycode, bool), Keysym>> = keysyms
            .iter()
            .map(|&k| self.keymap.lookup(k).ok_or(k))
            .collect();
        let unmapped: Vec<Option<Keysym>> = strokes.iter().map(|s| s.err()).collect();
        let display = self.display;
        let first_unmapped = unmapped
            .iter()
            .flatten()
            .next()
            .copied()
            .unwrap_or_default();
        let no_keycode = |keysym| DisplayError::NoKeycode { display, keysym };
        let segments = plan_segments(&unmapped, self.pool.capacity())
            .ok_or_else(|| no_keycode(first_unmapped))?;
        for segment in segments {
            let needed = distinct_unmapped(&unmapped[segment.clone()]);
            let keycodes = self.bind_all(&needed)?;
            let bound: HashMap<Keysym, Keycode> = needed.into_iter().zip(keycodes).collect();
            for stroke in &strokes[segment] {
                let (kc, needs_shift) = match *stroke {
                    Ok(found) => found,
                    Err(keysym) => (
                        bound
                            .get(&keysym)
                            .copied()
                            .ok_or_else(|| no_keycode(keysym))?,
                        false,
                    ),
                };
                if needs_shift {
                    self.fake(KEY_PRESS_EVENT, shift)?;
                }
                self.fake(KEY_PRESS_EVENT, kc)?;
                self.fake(KEY_RELEASE_EVENT, kc)?;
                if needs_shift {
                    self.fake(KEY_RELEASE_EVENT, shift)?;
                }
            }
            // Sent now, so the rebinding rule below counts from when the server got them (a
            // later rebinding also travels behind them on this connection).
            self.conn.flush().map_err(x11_err(display))?;
            let pressed_at = self.clock.now();
            for kc in bound.values() {
                self.pool.mark_pressed(*kc, pressed_at);
            }
        }
        self.end_action()
    }

    /// Puts every keycode bound by typing back to NoSymbol, first waiting until
    /// [`REBIND_AFTER`] has passed since the last press of one (so dropping an [`Input`] right
    /// after typing blocks that long). Later typing binds again.
    pub fn restore_keymap(&mut self) -> Result<(), DisplayError> {
        let display = self.display;
        if self.pool.bound.is_empty() {
            return Ok(());
        }
        if let Some(at) = self.pool.all_rebindable_at() {
            self.sleep_until(at);
        }
        for kc in self.pool.release_all() {
            self.conn
                .change_keyboard_mapping(1, kc, 2, &[ks::NO_SYMBOL, ks::NO_SYMBOL])
                .map_err(x11_err(display))?;
        }
        self.end_action()?;
        self.finish()
    }

    /// Keycodes for `keysyms` (distinct, at most the pool's capacity), sending the binding
    /// changes and, if there were any, syncing and pausing [`BIND_SETTLE`] before returning.
    fn bind_all(&mut self, keysyms: &[Keysym]) -> Result<Vec<Keycode>, DisplayError> {
        let display = self.display;
        let no_keycode = || DisplayError::NoKeycode {
            display,
            keysym: keysyms.first().copied().unwrap_or_default(),
        };
        let plan = self.pool.bind_all(keysyms).ok_or_else(no_keycode)?;
        if plan.changed.is_empty() {
            return Ok(plan.keycodes);
        }
        if let Some(at) = plan.not_before {
            tracing::debug!(display = %self.display, "waiting to recycle recently pressed keycodes");
            self.sleep_until(at);
        }
        for &(keycode, keysym) in &plan.changed {
            // Both columns, so Shift or Caps Lock state cannot change what the key types.
            self.last_sent = self
                .conn
                .change_keyboard_mapping(1, keycode, 2, &[keysym, keysym])
                .map_err(x11_err(display))?
                .sequence_number();
        }
        // The pause must begin once the server has the new bindings (and told the clients).
        self.sync()?;
        std::thread::sleep(BIND_SETTLE);
        Ok(plan.keycodes)
    }

    /// Blocks until `at` by the injected clock.
    fn sleep_until(&self, at: Instant) {
        let wait = at.saturating_duration_since(self.clock.now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }

    fn shift_keycode(&self) -> Result<Keycode, DisplayError> {
        self.keymap
            .lookup(ks::SHIFT_L)
            .map(|(kc, _)| kc)
            .ok_or(DisplayError::NoKeycode {
                display: self.display,
                keysym: ks::SHIFT_L,
            })
    }

    fn send_move(&mut self, x: i64, y: i64) -> Result<(i16, i16), DisplayError> {
        let (x, y) = clamp_point(x, y, self.width, self.height);
        self.last_sent = self
            .conn
            .xtest_fake_input(MOTION_NOTIFY_EVENT, 0, CURRENT_TIME, self.root, x, y, 0)
            .map_err(x11_err(self.display))?
            .sequence_number();
        Ok((x, y))
    }

    fn fake(&mut self, event: u8, detail: u8) -> Result<(), DisplayError> {
        self.last_sent = self
            .conn
            .xtest_fake_input(event, detail, CURRENT_TIME, x11rb::NONE, 0, 0, 0)
            .map_err(x11_err(self.display))?
            .sequence_number();
        Ok(())
    }

    /// Ends an action of the batch: remembers its last request and sends what is buffered, so
    /// the server starts on it while the caller goes on. No round trip.
    fn end_action(&mut self) -> Result<(), DisplayError> {
        self.batch.push(self.last_sent);
        self.conn.flush().map_err(x11_err(self.display))
    }

    /// One round trip: the server has processed everything sent.
    fn sync(&mut self) -> Result<(), DisplayError> {
        self.syncs += 1;
        self.conn.sync().map_err(x11_err(self.display))
    }

    /// Surfaces X errors of earlier requests (attributed to the batch's actions) and re-reads
    /// the keymap when another client changed it (our own bindings also cause MappingNotify;
    /// those are recognised and skipped).
    fn drain_events(&mut self) -> Result<(), DisplayError> {
        let display = self.display;
        let mut reload = false;
        let mut first_error = None;
        while let Some((event, seq)) = self
            .conn
            .poll_for_event_with_sequence()
            .map_err(x11_err(display))?
        {
            match event {
                Event::MappingNotify(n) if n.request == Mapping::KEYBOARD => {
                    let ours = self.pool.bound_keycodes();
                    let count = u16::from(n.count);
                    let foreign = (0..count).any(|i| {
                        u8::try_from(u16::from(n.first_keycode) + i)
                            .is_ok_and(|kc| !ours.contains(&kc))
                    });
                    reload |= foreign;
                }
                Event::Error(error) => {
                    first_error.get_or_insert((error, seq));
                }
                _ => {}
            }
        }
        if let Some((error, seq)) = first_error {
            return Err(DisplayError::InputAction {
                display,
                action: action_of(&self.batch, seq),
                source: error.into(),
            });
        }
        if reload {
            self.reload_keymap()?;
        }
        Ok(())
    }

    /// Re-reads the keymap, keeping the bindings that are still in place.
    fn reload_keymap(&mut self) -> Result<(), DisplayError> {
        let display = self.display;
        let all = fetch_keymap(&self.conn, display, &HashSet::new())?;
        self.pool
            .bound
            .retain(|b| all.first_keysym(b.keycode) == Some(b.keysym));
        let bound = self.pool.bound_keycodes();
        self.pool.free = all
            .spare_keycodes()
            .into_iter()
            .filter(|kc| !bound.contains(kc))
            .collect();
        self.keymap = fetch_keymap(&self.conn, display, &bound)?;
        tracing::debug!(display = %self.display, "keyboard map changed by another client; reloaded");
        Ok(())
    }
}

impl Drop for Input {
    fn drop(&mut self) {
        if self.pool.bound.is_empty() {
            return;
        }
        if let Err(error) = self.restore_keymap() {
            tracing::warn!(display = %self.display, %error, "cannot restore the keyboard map");
        }
    }
}

/// Reads the whole core keyboard map.
fn fetch_keymap(
    conn: &RustConnection,
    display: DisplayNum,
    excluded: &HashSet<Keycode>,
) -> Result<Keymap, DisplayError> {
    let setup = conn.setup();
    let (min, max) = (setup.min_keycode, setup.max_keycode);
    let count = max.saturating_sub(min).saturating_add(1);
    let reply = conn
        .get_keyboard_mapping(min, count)
        .map_err(x11_err(display))?
        .reply()
        .map_err(x11_err(display))?;
    Ok(Keymap::new(
        min,
        reply.keysyms_per_keycode,
        reply.keysyms,
        excluded,
    ))
}

#[cfg(test)]
mod tests;
