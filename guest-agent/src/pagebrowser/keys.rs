//! Key names of browser_act's `press` step and the CDP key events for them and for typed text.
//!
//! A key name is a DOM key name (`Enter`, `Tab`, `Escape`, `ArrowDown`, `Backspace`, `F5`, ...),
//! `Space`, or one character, optionally after modifiers joined with `+` (`Control+a`,
//! `Shift+Tab`). Names are parsed before any step runs, so a bad name fails the whole batch.
//! It leaves sending the events to [`super::cdp`].

use super::cdp::KeyEvent;

/// A parsed key press: modifiers and the main key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPress {
    modifiers: u8,
    key: KeyDef,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct KeyDef {
    key: String,
    code: String,
    key_code: u32,
    /// The text the key produces (without Control, Alt or Meta).
    text: String,
}

const ALT: u8 = 1;
const CONTROL: u8 = 2;
const META: u8 = 4;
const SHIFT: u8 = 8;

/// Named keys: DOM key, DOM code, Windows virtual key code, text produced.
const NAMED: &[(&str, &str, u32, &str)] = &[
    ("Enter", "Enter", 13, "\r"),
    ("Tab", "Tab", 9, ""),
    ("Escape", "Escape", 27, ""),
    ("Backspace", "Backspace", 8, ""),
    ("Delete", "Delete", 46, ""),
    ("Insert", "Insert", 45, ""),
    ("ArrowUp", "ArrowUp", 38, ""),
    ("ArrowDown", "ArrowDown", 40, ""),
    ("ArrowLeft", "ArrowLeft", 37, ""),
    ("ArrowRight", "ArrowRight", 39, ""),
    ("Home", "Home", 36, ""),
    ("End", "End", 35, ""),
    ("PageUp", "PageUp", 33, ""),
    ("PageDown", "PageDown", 34, ""),
    ("Space", "Space", 32, " "),
    ("F1", "F1", 112, ""),
    ("F2", "F2", 113, ""),
    ("F3", "F3", 114, ""),
    ("F4", "F4", 115, ""),
    ("F5", "F5", 116, ""),
    ("F6", "F6", 117, ""),
    ("F7", "F7", 118, ""),
    ("F8", "F8", 119, ""),
    ("F9", "F9", 120, ""),
    ("F10", "F10", 121, ""),
    ("F11", "F11", 122, ""),
    ("F12", "F12", 123, ""),
];

/// Modifier keys: name aliases, DOM key, code, key code, bit.
const MODIFIERS: &[(&[&str], &str, &str, u32, u8)] = &[
    (&["alt", "option"], "Alt", "AltLeft", 18, ALT),
    (&["control", "ctrl"], "Control", "ControlLeft", 17, CONTROL),
    (
        &["meta", "cmd", "command", "super"],
        "Meta",
        "MetaLeft",
        91,
        META,
    ),
    (&["shift"], "Shift", "ShiftLeft", 16, SHIFT),
];

/// Parses a `press` key name; the error says what is wrong.
pub fn parse(name: &str) -> Result<KeyPress, String> {
    let bad = || {
        format!("unknown key {name:?}; use a key name like Enter, Tab, ArrowDown or one character")
    };
    // "+" alone, or a trailing "+" ("Control++"), is the plus key itself.
    let (mods, main) = match name.strip_suffix("++") {
        Some(prefix) => (prefix, "+"),
        None if name == "+" => ("", "+"),
        None => match name.rsplit_once('+') {
            Some((m, k)) => (m, k),
            None => ("", name),
        },
    };
    let mut modifiers = 0;
    if !mods.is_empty() {
        for m in mods.split('+') {
            let lower = m.to_ascii_lowercase();
            let (.., bit) = MODIFIERS
                .iter()
                .find(|(names, ..)| names.contains(&lower.as_str()))
                .ok_or_else(bad)?;
            modifiers |= bit;
        }
    }
    let key = key_def(main).ok_or_else(bad)?;
    Ok(KeyPress { modifiers, key })
}

fn key_def(name: &str) -> Option<KeyDef> {
    if let Some((key, code, key_code, text)) = NAMED
        .iter()
        .find(|(k, ..)| k.eq_ignore_ascii_case(name))
        .copied()
    {
        let key = if key == "Space" { " " } else { key };
        return Some(KeyDef {
            key: key.to_owned(),
            code: code.to_owned(),
            key_code,
            text: text.to_owned(),
        });
    }
    let mut chars = name.chars();
    let c = chars.next()?;
    if chars.next().is_some() || c.is_control() {
        return None;
    }
    Some(char_def(c))
}

/// The key of one character: letters and digits get their physical code and key code; other
/// characters are sent by their text alone, which is what a layout-independent typist does.
fn char_def(c: char) -> KeyDef {
    let (code, key_code) = if c.is_ascii_alphabetic() {
        let upper = c.to_ascii_uppercase();
        (format!("Key{upper}"), u32::from(upper))
    } else if c.is_ascii_digit() {
        (format!("Digit{c}"), u32::from(c))
    } else if c == ' ' {
        ("Space".to_owned(), 32)
    } else {
        (String::new(), 0)
    };
    KeyDef {
        key: c.to_string(),
        code,
        key_code,
        text: c.to_string(),
    }
}

impl KeyPress {
    /// Whether this is `key` (a DOM key name) without modifiers.
    pub(super) fn is_plain(&self, key: &str) -> bool {
        self.modifiers == 0 && self.key.key == key
    }

    /// The events of the press: modifier downs, the key down and up, modifier ups.
    pub fn events(&self) -> Vec<KeyEvent> {
        let mut out = Vec::new();
        let mut held = 0;
        for (_, key, code, key_code, bit) in MODIFIERS {
            if self.modifiers & bit != 0 {
                held |= bit;
                out.push(event("rawKeyDown", key, code, *key_code, "", held));
            }
        }
        // With Control, Alt or Meta held a key is a shortcut and types nothing.
        let text = if self.modifiers & (CONTROL | ALT | META) == 0 {
            self.key.text.as_str()
        } else {
            ""
        };
        let down = if text.is_empty() {
            "rawKeyDown"
        } else {
            "keyDown"
        };
        let k = &self.key;
        out.push(event(down, &k.key, &k.code, k.key_code, text, held));
        out.push(event("keyUp", &k.key, &k.code, k.key_code, "", held));
        for (_, key, code, key_code, bit) in MODIFIERS.iter().rev() {
            if self.modifiers & bit != 0 {
                held &= !bit;
                out.push(event("keyUp", key, code, *key_code, "", held));
            }
        }
        out
    }
}

/// The events that type one character (a newline is Enter).
pub fn char_events(c: char) -> Vec<KeyEvent> {
    let key = if c == '\n' || c == '\r' {
        key_def("Enter").unwrap_or_else(|| char_def(c))
    } else {
        char_def(c)
    };
    KeyPress { modifiers: 0, key }.events()
}

fn event(
    kind: &'static str,
    key: &str,
    code: &str,
    key_code: u32,
    text: &str,
    modifiers: u8,
) -> KeyEvent {
    KeyEvent {
        kind,
        key: key.to_owned(),
        code: code.to_owned(),
        text: text.to_owned(),
        unmodified_text: text.to_owned(),
        windows_virtual_key_code: key_code,
        native_virtual_key_code: key_code,
        modifiers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse() {
        for ok in [
            "Enter",
            "enter",
            "Tab",
            "Escape",
            "ArrowDown",
            "Backspace",
            "a",
            "Z",
            "é",
            "+",
            "Control+a",
            "Shift+Tab",
            "Control+Shift+ArrowLeft",
            "Control++",
            "Space",
            "F5",
        ] {
            assert!(parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Enterr", "ab", "Hyper+a", "Control+", "\u{7}"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn enter_produces_a_carriage_return_and_shortcuts_produce_no_text() {
        let enter = parse("Enter").unwrap().events();
        assert_eq!(enter.len(), 2);
        assert_eq!(enter[0].kind, "keyDown");
        assert_eq!(enter[0].text, "\r");
        assert_eq!(enter[1].kind, "keyUp");
        let select_all = parse("Control+a").unwrap().events();
        let kinds: Vec<_> = select_all.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, ["rawKeyDown", "rawKeyDown", "keyUp", "keyUp"]);
        assert_eq!(select_all[1].key, "a");
        assert_eq!(select_all[1].modifiers, CONTROL);
        assert!(select_all[1].text.is_empty());
        assert_eq!(select_all[3].modifiers, 0);
    }

    #[test]
    fn typed_characters_carry_their_text() {
        let a = char_events('A');
        assert_eq!(a[0].code, "KeyA");
        assert_eq!(a[0].windows_virtual_key_code, 65);
        assert_eq!(a[0].text, "A");
        let nl = char_events('\n');
        assert_eq!(nl[0].key, "Enter");
    }
}
