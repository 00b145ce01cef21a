//! Page-browser messages: browser_navigate, browser_snapshot and browser_act
//! (docs/screens.md#page-browser).
//!
//! The bounds of the contract are constants here. A `fill` step's text may be a saved login's
//! secret, so [`PageStep`]'s `Debug` never prints any fill or type text.

use crate::error::{ErrorCode, OpError};
use crate::lease::{BotId, LeaseToken};
use serde::{Deserialize, Serialize};
use std::fmt;

/// At most this many steps in one browser_act.
pub const MAX_PAGE_STEPS: usize = 24;
/// Snapshot bounds.
pub const MAX_ELEMENTS: usize = 80;
pub const MAX_TITLE_CHARS: usize = 200;
pub const MAX_NAME_CHARS: usize = 200;
pub const MAX_VALUE_CHARS: usize = 2000;
pub const MAX_TEXT_CHARS: usize = 12_000;
/// Longest URL accepted by navigate.
pub const MAX_URL_LEN: usize = 8192;
/// Longest text a fill or type step may carry.
pub const MAX_STEP_TEXT: usize = 100_000;

/// The fallback every page-act failure points to.
pub const FALLBACK: &str = "computer_act";
/// The error of a ref that no longer names a live, visible element.
pub const STALE_REF: &str = "Stale element ref. Take a fresh snapshot.";
/// The error of a disabled element.
pub const DISABLED: &str = "Element is disabled";
/// The error when no single visible tab can be chosen.
pub const NO_TAB: &str = "No unambiguous visible browser tab. Use desktop tools to select a tab.";
/// The error when a navigation did not settle in time.
pub const NOT_SETTLED: &str = "Navigation did not settle; inspect the screen before continuing";
/// The line added to a snapshot's tree when the page has frames.
pub const FRAMES_NOTE: &str = "Embedded frames require desktop tools.";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NavigateRequest {
    pub bot: BotId,
    pub lease: LeaseToken,
    pub url: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRequest {
    pub bot: BotId,
    pub lease: LeaseToken,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageActRequest {
    pub bot: BotId,
    pub lease: LeaseToken,
    pub steps: Vec<PageStep>,
}

/// One browser_act step. Refs are short ids like `e12` from a snapshot.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PageStep {
    Click {
        element: String,
    },
    /// Sets the value with the native setter and fires input and change events. With `origin`
    /// (a saved login) it runs only on an HTTPS page of exactly that origin.
    Fill {
        element: String,
        text: String,
        origin: Option<String>,
    },
    /// Types text key by key into the element.
    Type {
        element: String,
        text: String,
    },
    Select {
        element: String,
        value: String,
    },
    Press {
        key: String,
    },
}

impl fmt::Debug for PageStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Click { element } => write!(f, "Click({element})"),
            Self::Fill {
                element, origin, ..
            } => {
                write!(f, "Fill({element}, text: ***, origin: {origin:?})")
            }
            Self::Type { element, .. } => write!(f, "Type({element}, text: ***)"),
            Self::Select { element, value } => write!(f, "Select({element}, {value:?})"),
            Self::Press { key } => write!(f, "Press({key:?})"),
        }
    }
}

/// A visible interactive element of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageElement {
    pub element: String,
    pub role: String,
    pub name: String,
    /// Empty for password fields and fields filled from saved logins.
    pub value: String,
    pub tag: String,
}

/// browser_snapshot's result (docs/screens.md#page-browser).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub url: String,
    pub title: String,
    pub elements: Vec<PageElement>,
    /// Visible text, then one line per element, then the frames note when there are frames.
    pub tree: String,
}

/// A failed browser_act: what was confirmed, and whether the failing step may have acted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageActFailure {
    pub completed: u32,
    pub uncertain: bool,
    pub error: String,
}

/// Checks a navigate URL before any CDP call: http(s) only, no credentials, bounded.
pub fn validate_url(url: &str) -> Result<(), OpError> {
    let bad = |m: &str| Err(OpError::new(ErrorCode::BadRequest, m.to_string()));
    if url.len() > MAX_URL_LEN {
        return bad("the URL is too long");
    }
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return bad("the URL contains whitespace or control characters");
    }
    let lower = url.to_ascii_lowercase();
    let rest = match lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))
    {
        Some(r) => r,
        None => return bad("only http and https URLs can be opened"),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.is_empty() {
        return bad("the URL has no host");
    }
    if authority.contains('@') {
        return bad("URLs with credentials are refused");
    }
    Ok(())
}

/// Checks a whole act batch before any step runs.
pub fn validate_steps(steps: &[PageStep]) -> Result<(), OpError> {
    let bad = |m: String| Err(OpError::new(ErrorCode::BadRequest, m));
    if steps.is_empty() || steps.len() > MAX_PAGE_STEPS {
        return bad(format!("browser_act takes 1..={MAX_PAGE_STEPS} steps"));
    }
    for (i, s) in steps.iter().enumerate() {
        let n = i + 1;
        let element = match s {
            PageStep::Click { element }
            | PageStep::Fill { element, .. }
            | PageStep::Type { element, .. }
            | PageStep::Select { element, .. } => Some(element),
            PageStep::Press { .. } => None,
        };
        if let Some(e) = element {
            let ok = e.len() >= 2
                && e.len() <= 12
                && e.starts_with('e')
                && e[1..].bytes().all(|b| b.is_ascii_digit());
            if !ok {
                return bad(format!("step {n}: {e:?} is not an element ref like e12"));
            }
        }
        match s {
            PageStep::Fill { text, origin, .. } => {
                if text.len() > MAX_STEP_TEXT {
                    return bad(format!("step {n}: text is too long"));
                }
                if let Some(o) = origin {
                    if !o.starts_with("https://") || o.len() > 2048 {
                        return bad(format!("step {n}: origin must be an https origin"));
                    }
                }
            }
            PageStep::Type { text, .. } if text.len() > MAX_STEP_TEXT => {
                return bad(format!("step {n}: text is too long"));
            }
            PageStep::Select { value, .. } if value.len() > MAX_VALUE_CHARS => {
                return bad(format!("step {n}: value is too long"));
            }
            PageStep::Press { key } if key.is_empty() || key.len() > 64 => {
                return bad(format!("step {n}: press needs a key name"));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_before_any_cdp_call() {
        assert!(validate_url("http://127.0.0.1:8080/x").is_ok());
        assert!(validate_url("https://example.test/?q=a@b").is_ok());
        for bad in [
            "file:///etc/passwd",
            "javascript:alert(1)",
            "http://user:pw@host/",
            "https://u@host/",
            "ftp://x/",
            "http:///nohost",
            "http://a b/",
            "data:text/html,hi",
        ] {
            assert!(validate_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn steps_are_validated_as_a_batch() {
        let click = PageStep::Click {
            element: "e1".into(),
        };
        assert!(validate_steps(std::slice::from_ref(&click)).is_ok());
        assert!(validate_steps(&[]).is_err());
        assert!(validate_steps(&vec![click; 25]).is_err());
        let err = validate_steps(&[
            PageStep::Click {
                element: "e1".into(),
            },
            PageStep::Click {
                element: "x".into(),
            },
        ])
        .unwrap_err();
        assert!(err.message.starts_with("step 2:"), "{err}");
        let fill = PageStep::Fill {
            element: "e2".into(),
            text: "s3cret".into(),
            origin: Some("http://x".into()),
        };
        assert!(validate_steps(&[fill]).is_err());
    }

    #[test]
    fn debug_never_shows_step_text() {
        let fill = PageStep::Fill {
            element: "e2".into(),
            text: "hunter2".into(),
            origin: Some("https://x".into()),
        };
        let typed = PageStep::Type {
            element: "e3".into(),
            text: "hunter2".into(),
        };
        assert!(!format!("{fill:?}{typed:?}").contains("hunter2"));
    }
}
