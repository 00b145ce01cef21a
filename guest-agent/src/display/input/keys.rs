//! Key names, modifiers and keysyms: parsing key combos and mapping characters to keysyms and
//! back (no X connection).

use crate::display::DisplayError;

/// Keysyms used by name here (X11 keysymdef.h).
pub(super) mod ks {
    pub const NO_SYMBOL: u32 = 0;
    pub const BACKSPACE: u32 = 0xff08;
    pub const TAB: u32 = 0xff09;
    pub const RETURN: u32 = 0xff0d;
    pub const ESCAPE: u32 = 0xff1b;
    pub const HOME: u32 = 0xff50;
    pub const LEFT: u32 = 0xff51;
    pub const UP: u32 = 0xff52;
    pub const RIGHT: u32 = 0xff53;
    pub const DOWN: u32 = 0xff54;
    pub const PAGE_UP: u32 = 0xff55;
    pub const PAGE_DOWN: u32 = 0xff56;
    pub const END: u32 = 0xff57;
    pub const INSERT: u32 = 0xff63;
    pub const F1: u32 = 0xffbe;
    pub const SHIFT_L: u32 = 0xffe1;
    pub const CONTROL_L: u32 = 0xffe3;
    pub const ALT_L: u32 = 0xffe9;
    pub const SUPER_L: u32 = 0xffeb;
    pub const DELETE: u32 = 0xffff;
    pub const SPACE: u32 = 0x20;
    /// Offset of the keysyms that stand for Unicode code points.
    pub const UNICODE: u32 = 0x0100_0000;
}

/// A modifier key held around a key press.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Modifier {
    Ctrl,
    Alt,
    Shift,
    /// `meta` and `super` both name this (the Super key, Mod4).
    Super,
}

impl Modifier {
    /// Parses a modifier name, ignoring case: ctrl/control, alt, shift, meta/super.
    pub fn from_name(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "ctrl" | "control" => Some(Modifier::Ctrl),
            "alt" => Some(Modifier::Alt),
            "shift" => Some(Modifier::Shift),
            "meta" | "super" => Some(Modifier::Super),
            _ => None,
        }
    }

    pub(super) fn keysym(self) -> u32 {
        match self {
            Modifier::Ctrl => ks::CONTROL_L,
            Modifier::Alt => ks::ALT_L,
            Modifier::Shift => ks::SHIFT_L,
            Modifier::Super => ks::SUPER_L,
        }
    }
}

/// A key press with modifiers, parsed and validated before anything is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyCombo {
    /// Held in this order, released in reverse; no duplicates.
    pub modifiers: Vec<Modifier>,
    pub keysym: u32,
}

impl KeyCombo {
    /// Parses `key` (a name such as `enter`, `pagedown`, `f5`, `ctrl`, or one character; it may
    /// also carry modifiers itself, as in `ctrl+shift+t`) and `modifiers` (names such as `ctrl`,
    /// `alt`, `shift`, `meta`/`super`). Names ignore case, and so do single letters: `A` is the
    /// `a` key (add `shift` for a capital); other characters that need Shift get it when pressed.
    pub fn parse<S: AsRef<str>>(key: &str, modifiers: &[S]) -> Result<Self, DisplayError> {
        let unknown = || DisplayError::UnknownKey(key.to_owned());
        let mut parts = split_combo(key.trim()).ok_or_else(unknown)?;
        let key_name = parts.pop().ok_or_else(unknown)?;
        let mut mods: Vec<Modifier> = Vec::new();
        let extra = modifiers.iter().map(|m| m.as_ref().trim());
        for name in parts.into_iter().chain(extra) {
            let modifier = Modifier::from_name(name)
                .ok_or_else(|| DisplayError::UnknownKey(name.to_owned()))?;
            if !mods.contains(&modifier) {
                mods.push(modifier);
            }
        }
        let keysym = key_keysym(key_name).ok_or_else(unknown)?;
        Ok(Self {
            modifiers: mods,
            keysym,
        })
    }
}

/// Splits `ctrl+shift+t` into its parts; `+` alone and a trailing `++` name the plus key.
/// `None` for an empty part (`ctrl+`, `+a`).
fn split_combo(key: &str) -> Option<Vec<&str>> {
    if key == "+" {
        return Some(vec!["+"]);
    }
    let (head, plus) = match key.strip_suffix("++") {
        Some(head) => (head, true),
        None => (key, false),
    };
    let mut parts: Vec<&str> = if head.is_empty() {
        Vec::new()
    } else {
        head.split('+').map(str::trim).collect()
    };
    if parts.iter().any(|p| p.is_empty()) {
        return None;
    }
    if plus {
        parts.push("+");
    }
    (!parts.is_empty()).then_some(parts)
}

/// The keysym of a key name or single character (see [`KeyCombo::parse`]).
fn key_keysym(name: &str) -> Option<u32> {
    let mut chars = name.chars();
    if let (Some(ch), None) = (chars.next(), chars.next()) {
        let ch = if ch.is_ascii_alphabetic() {
            ch.to_ascii_lowercase()
        } else {
            ch
        };
        return char_keysym(ch);
    }
    let lower = name.to_ascii_lowercase();
    let keysym = match lower.as_str() {
        "enter" | "return" => ks::RETURN,
        "esc" | "escape" => ks::ESCAPE,
        "tab" => ks::TAB,
        "backspace" => ks::BACKSPACE,
        "delete" | "del" => ks::DELETE,
        "insert" => ks::INSERT,
        "space" => ks::SPACE,
        "up" => ks::UP,
        "down" => ks::DOWN,
        "left" => ks::LEFT,
        "right" => ks::RIGHT,
        "home" => ks::HOME,
        "end" => ks::END,
        "pageup" | "page_up" => ks::PAGE_UP,
        "pagedown" | "page_down" => ks::PAGE_DOWN,
        other => {
            if let Some(modifier) = Modifier::from_name(other) {
                return Some(modifier.keysym());
            }
            let n: u32 = other.strip_prefix('f')?.parse().ok()?;
            if !(1..=12).contains(&n) || other.starts_with("f0") {
                return None;
            }
            ks::F1 + n - 1
        }
    };
    Some(keysym)
}

/// The keysym that types `ch`: Return for a newline, Tab for a tab, the Latin-1 keysym below
/// U+0100, else the Unicode keysym. `None` for other control characters.
pub fn char_keysym(ch: char) -> Option<u32> {
    let cp = u32::from(ch);
    match ch {
        '\n' | '\r' => Some(ks::RETURN),
        '\t' => Some(ks::TAB),
        _ if ch.is_control() => None,
        _ if cp < 0x100 => Some(cp),
        _ => Some(ks::UNICODE + cp),
    }
}

/// The character a keysym types, the inverse of [`char_keysym`] (Return gives `\n`). `None` for
/// keysyms that are not text (function keys, modifiers, legacy non-Latin-1 keysyms).
pub fn keysym_char(keysym: u32) -> Option<char> {
    match keysym {
        ks::RETURN => Some('\n'),
        ks::TAB => Some('\t'),
        0x20..=0x7e | 0xa0..=0xff => char::from_u32(keysym),
        0x0100_0100..=0x0110_ffff => char::from_u32(keysym - ks::UNICODE),
        _ => None,
    }
}
