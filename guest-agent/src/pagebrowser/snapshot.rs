//! Snapshots: asks the helper for one, checks and bounds what it returns (the contract's caps and
//! [`MAX_SNAPSHOT_BYTES`]) and renders the tree.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::time::Duration;

use gateway_proto::page::{
    PageElement, Snapshot, FRAMES_NOTE, MAX_ELEMENTS, MAX_NAME_CHARS, MAX_TEXT_CHARS,
    MAX_TITLE_CHARS, MAX_URL_LEN, MAX_VALUE_CHARS, NO_TAB,
};
use gateway_proto::{ErrorCode, OpError};
use serde::{Deserialize, Serialize};

use super::cdp::CdpError;
use super::{not_settled, PageBrowser, MAX_SNAPSHOT_BYTES};

/// Longest wait for the snapshot evaluation.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest role or tag name kept from the page.
const MAX_ROLE_CHARS: usize = 40;

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct SnapshotArgs {
    next: u64,
    max_elements: usize,
    max_text: usize,
    max_name: usize,
    max_value: usize,
    max_title: usize,
    max_url: usize,
    /// The whole snapshot's JSON budget, for the helper to estimate how much text to collect.
    max_bytes: usize,
    /// Also report whether the tab is visible (when the tab was chosen without a probe).
    probe: bool,
}

#[derive(Debug, Deserialize)]
pub(super) struct RawSnapshot {
    pub(super) url: String,
    pub(super) title: String,
    pub(super) text: String,
    /// The helper cut the text (there was more).
    #[serde(default, rename = "textCut")]
    pub(super) text_cut: bool,
    pub(super) elements: Vec<RawElement>,
    pub(super) frames: bool,
    pub(super) next: u64,
    #[serde(default = "yes")]
    pub(super) visible: bool,
    #[serde(default)]
    pub(super) candidates: u64,
    #[serde(default)]
    pub(super) ms: f64,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
pub(super) struct RawElement {
    #[serde(rename = "ref")]
    pub(super) element: String,
    pub(super) role: String,
    pub(super) name: String,
    pub(super) value: String,
    pub(super) tag: String,
}

impl PageBrowser {
    /// The snapshot of the tab; with `probe`, fails with [`NO_TAB`] when the tab is hidden.
    pub(super) async fn snapshot_tab(
        &mut self,
        target: &str,
        probe: bool,
    ) -> Result<Snapshot, OpError> {
        let args = SnapshotArgs {
            next: self.next_ref,
            max_elements: MAX_ELEMENTS,
            max_text: MAX_TEXT_CHARS,
            max_name: MAX_NAME_CHARS,
            max_value: MAX_VALUE_CHARS,
            max_title: MAX_TITLE_CHARS,
            max_url: MAX_URL_LEN,
            max_bytes: MAX_SNAPSHOT_BYTES,
            probe,
        };
        let raw: RawSnapshot = match self
            .call(target, "snapshot", args, SNAPSHOT_TIMEOUT, true)
            .await
        {
            Ok(raw) => raw,
            Err(CdpError::WorldGone | CdpError::Interrupted) => return Err(not_settled()),
            Err(error) => return Err(self.failed("snapshot", error)),
        };
        if !raw.visible {
            return Err(OpError::new(ErrorCode::Failed, NO_TAB));
        }
        tracing::debug!(
            candidates = raw.candidates,
            elements = raw.elements.len(),
            helper_ms = raw.ms,
            "page snapshot"
        );
        let (snapshot, next) = build_snapshot(raw, self.next_ref, &self.saved_login_refs)
            .map_err(|m| OpError::new(ErrorCode::Failed, m))?;
        self.next_ref = next;
        Ok(snapshot)
    }
}

/// Checks and bounds the helper's snapshot (the page is untrusted input even though the helper
/// is ours) and renders the tree. Returns the snapshot and the next ref number.
pub(super) fn build_snapshot(
    raw: RawSnapshot,
    next_ref: u64,
    saved_login_refs: &HashSet<String>,
) -> Result<(Snapshot, u64), String> {
    let max_next = next_ref.saturating_add(MAX_ELEMENTS as u64);
    if raw.next < next_ref || raw.next > max_next {
        return Err(format!(
            "the page helper minted refs out of order ({} after {next_ref})",
            raw.next
        ));
    }
    let mut elements = Vec::with_capacity(raw.elements.len().min(MAX_ELEMENTS));
    let mut seen = HashSet::new();
    for e in raw.elements.into_iter().take(MAX_ELEMENTS) {
        let number = e
            .element
            .strip_prefix('e')
            .filter(|n| !n.is_empty() && n.len() <= 11 && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u64>().ok());
        match number {
            Some(n) if n >= 1 && n < raw.next && seen.insert(n) => {}
            _ => return Err("the page helper returned a malformed ref".to_owned()),
        }
        let value = if saved_login_refs.contains(&e.element) {
            String::new()
        } else {
            truncate_chars(&e.value, MAX_VALUE_CHARS)
        };
        elements.push(PageElement {
            role: token(&e.role, "generic"),
            name: truncate_chars(&e.name, MAX_NAME_CHARS),
            value,
            tag: token(&e.tag, "element"),
            element: e.element,
        });
    }
    let url = truncate_chars(&raw.url, MAX_URL_LEN);
    let title = truncate_chars(&raw.title, MAX_TITLE_CHARS);
    // Everything but the text, as JSON; the text gets what is left of the budget.
    let lines = render_tree("", &elements, raw.frames);
    let rest = snapshot_json_len(&url, &title, &elements, &lines) + "\\n".len();
    let text = fit_text(
        &raw.text,
        raw.text_cut,
        MAX_SNAPSHOT_BYTES.saturating_sub(rest),
    );
    let tree = render_tree(&text, &elements, raw.frames);
    let snapshot = Snapshot {
        url,
        title,
        elements,
        tree,
    };
    Ok((snapshot, raw.next))
}

/// At most [`MAX_TEXT_CHARS`] characters of `text` whose JSON encoding takes at most
/// `budget` bytes. A cut text (here, or already by the helper: `cut`) ends with `…`, at a line
/// break when one is near.
fn fit_text(text: &str, cut: bool, budget: usize) -> String {
    let mut used = 0;
    let mut end = text.len();
    for (count, (i, c)) in text.char_indices().enumerate() {
        used += json_char_len(c);
        // Keep room for the ellipsis (3 bytes) in case this is cut.
        if count == MAX_TEXT_CHARS || used + 3 > budget {
            end = i;
            break;
        }
    }
    if end == text.len() && !cut {
        return text.to_owned();
    }
    let mut kept = &text[..end];
    // Cut here: back to a line break when one is near. (Cut by the helper: it ended a line.)
    if end < text.len() {
        if let Some(nl) = kept.rfind('\n') {
            if end - nl < 400 {
                kept = &kept[..nl];
            }
        }
    }
    if kept.trim_end().is_empty() {
        return String::new();
    }
    // The loop kept room for the mark's 3 bytes.
    let mut out = kept.trim_end().to_owned();
    if out.chars().count() >= MAX_TEXT_CHARS {
        out = truncate_chars(&out, MAX_TEXT_CHARS - 1);
    }
    out.push('…');
    out
}

/// Bytes of `c` inside a JSON string as serde_json writes it.
fn json_char_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if u32::from(c) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// Bytes of `s` as a JSON string literal.
pub(super) fn json_len(s: &str) -> usize {
    2 + s.chars().map(json_char_len).sum::<usize>()
}

/// Bytes of a [`Snapshot`] serialized as JSON (serde's field names, no whitespace).
pub(super) fn snapshot_json_len(
    url: &str,
    title: &str,
    elements: &[PageElement],
    tree: &str,
) -> usize {
    let element = |e: &PageElement| {
        r#"{"element":,"role":,"name":,"value":,"tag":}"#.len()
            + json_len(&e.element)
            + json_len(&e.role)
            + json_len(&e.name)
            + json_len(&e.value)
            + json_len(&e.tag)
    };
    r#"{"url":,"title":,"elements":[],"tree":}"#.len()
        + json_len(url)
        + json_len(title)
        + elements.iter().map(element).sum::<usize>()
        + elements.len().saturating_sub(1)
        + json_len(tree)
}

/// The tree: the visible text, one line per element, then the frames note.
fn render_tree(text: &str, elements: &[PageElement], frames: bool) -> String {
    let mut tree = String::with_capacity(text.len() + elements.len() * 48 + FRAMES_NOTE.len() + 2);
    tree.push_str(text);
    for e in elements {
        if !tree.is_empty() {
            tree.push('\n');
        }
        let _ = write!(tree, "- {} ", e.role);
        json_string(&e.name, &mut tree);
        let _ = write!(tree, " [{}]", e.element);
        if !e.value.is_empty() {
            tree.push_str(" value=");
            json_string(&e.value, &mut tree);
        }
    }
    if frames {
        if !tree.is_empty() {
            tree.push('\n');
        }
        tree.push_str(FRAMES_NOTE);
    }
    tree
}

/// Appends `s` as a JSON string literal.
fn json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// At most `max` characters of `s`.
fn truncate_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((end, _)) => s[..end].to_owned(),
        None => s.to_owned(),
    }
}

/// A role or tag from the page: lowercase letters, digits and `-`, else `fallback`.
pub(super) fn token(s: &str, fallback: &str) -> String {
    let ok = !s.is_empty()
        && s.len() <= MAX_ROLE_CHARS
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        s.to_owned()
    } else {
        fallback.to_owned()
    }
}
