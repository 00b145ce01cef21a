//! The fake provider's document: the page parsed by html5ever (through `scraper`) into an owned
//! arena of elements, plus the form state the page tools change (values, checked boxes,
//! selected options, focus). Roles, names, values and text follow the real helper's rules
//! (`page.js`) on what markup alone says: there is no layout and no script, so "visible" means
//! not hidden by markup (`hidden`, `aria-hidden="true"`, `inert`, an inline `display:none` or
//! `visibility:hidden`, or inside `head`, `script`, `style`, `template` or `noscript`).

use std::collections::HashMap;

use scraper::{Html, Node};

/// Input types a fill sets (`page.js` FILLABLE); the rest are clicked.
const FILLABLE: [&str; 14] = [
    "text",
    "search",
    "email",
    "url",
    "tel",
    "password",
    "number",
    "date",
    "time",
    "datetime-local",
    "month",
    "week",
    "color",
    "range",
];
/// Input types whose value drops line breaks.
const ONE_LINE: [&str; 6] = ["text", "search", "url", "tel", "password", "email"];
/// Elements whose start begins a new line of text.
const BLOCKS: [&str; 40] = [
    "address",
    "article",
    "aside",
    "blockquote",
    "br",
    "caption",
    "dd",
    "details",
    "dialog",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hr",
    "legend",
    "li",
    "main",
    "nav",
    "ol",
    "p",
    "pre",
    "section",
    "summary",
    "table",
    "tbody",
    "thead",
    "tr",
    "ul",
    "body",
];
/// Elements whose content is never shown.
const UNSHOWN: [&str; 9] = [
    "head", "script", "style", "template", "noscript", "title", "meta", "link", "option",
];

/// A child of an element: another element (its index) or text.
#[derive(Debug, Clone)]
pub(super) enum Child {
    El(usize),
    Text(String),
}

/// One element of the arena.
#[derive(Debug, Clone)]
pub(super) struct El {
    pub(super) tag: String,
    attrs: Vec<(String, String)>,
    pub(super) parent: Option<usize>,
    pub(super) children: Vec<Child>,
}

impl El {
    pub(super) fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn has(&self, name: &str) -> bool {
        self.attr(name).is_some()
    }

    /// An input's type, lowercased (`text` when missing); empty for other elements.
    pub(super) fn input_type(&self) -> String {
        if self.tag == "input" {
            self.attr("type")
                .unwrap_or("text")
                .trim()
                .to_ascii_lowercase()
        } else {
            String::new()
        }
    }
}

/// A parsed page and its form state. Its `Debug` shows no values: a fill may be a secret.
pub(super) struct Dom {
    pub(super) els: Vec<El>,
    /// Values of inputs and textareas that the page tools changed.
    values: HashMap<usize, String>,
    /// Checkboxes and radios whose state the page tools changed.
    checked: HashMap<usize, bool>,
    /// The selected option of selects the page tools changed.
    selected: HashMap<usize, usize>,
    pub(super) focused: Option<usize>,
}

impl std::fmt::Debug for Dom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dom")
            .field("elements", &self.els.len())
            .field("values", &self.values.len())
            .finish_non_exhaustive()
    }
}

/// How a fill applies to an element (`page.js` fillKind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FillKind {
    Input,
    Textarea,
    Select,
}

impl Dom {
    /// Parses `html` (html5ever's error recovery, as a browser's).
    pub(super) fn parse(html: &str) -> Self {
        let parsed = Html::parse_document(html);
        let mut els: Vec<El> = Vec::new();
        // (scraper node, parent index), depth first, in document order.
        let root = parsed.root_element();
        let mut stack = vec![(*root, None::<usize>)];
        while let Some((node, parent)) = stack.pop() {
            match node.value() {
                Node::Element(e) => {
                    let index = els.len();
                    els.push(El {
                        tag: e.name().to_ascii_lowercase(),
                        attrs: e
                            .attrs()
                            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
                            .collect(),
                        parent,
                        children: Vec::new(),
                    });
                    if let Some(p) = parent {
                        els[p].children.push(Child::El(index));
                    }
                    let kids: Vec<_> = node.children().collect();
                    for kid in kids.into_iter().rev() {
                        stack.push((kid, Some(index)));
                    }
                }
                Node::Text(t) => {
                    if let Some(p) = parent {
                        els[p].children.push(Child::Text(t.to_string()));
                    }
                }
                _ => {}
            }
        }
        Self {
            els,
            values: HashMap::new(),
            checked: HashMap::new(),
            selected: HashMap::new(),
            focused: None,
        }
    }

    fn ancestors(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(Some(i), move |&j| self.els[j].parent)
    }

    fn descendants(&self, i: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut stack = vec![i];
        while let Some(j) = stack.pop() {
            out.push(j);
            for c in self.els[j].children.iter().rev() {
                if let Child::El(k) = c {
                    stack.push(*k);
                }
            }
        }
        out
    }

    /// Whether markup hides the element itself (not its ancestors).
    fn hides(&self, i: usize) -> bool {
        let e = &self.els[i];
        let style = e.attr("style").map_or_else(String::new, |s| {
            s.to_ascii_lowercase().replace(char::is_whitespace, "")
        });
        UNSHOWN.contains(&e.tag.as_str())
            || e.has("hidden")
            || e.has("inert")
            || e.attr("aria-hidden").is_some_and(|v| v.trim() == "true")
            || style.contains("display:none")
            || style.contains("visibility:hidden")
            || (e.tag == "input" && e.input_type() == "hidden")
    }

    /// Whether the element is shown: neither it nor an ancestor is hidden by markup.
    pub(super) fn shown(&self, i: usize) -> bool {
        i < self.els.len() && !self.ancestors(i).any(|j| self.hides(j))
    }

    /// The document's title, whitespace collapsed.
    pub(super) fn title(&self) -> String {
        let t = self.els.iter().position(|e| e.tag == "title");
        t.map(|i| clip(&self.raw_text(i))).unwrap_or_default()
    }

    /// All text under `i`, hidden or not (textContent).
    fn raw_text(&self, i: usize) -> String {
        let mut out = String::new();
        for j in self.descendants(i) {
            for c in &self.els[j].children {
                if let Child::Text(t) = c {
                    out.push_str(t);
                }
            }
        }
        out
    }

    /// The shown text under `i` with line breaks at blocks (an innerText of markup alone):
    /// trimmed lines, inner whitespace collapsed, no empty lines.
    pub(super) fn text(&self, i: usize) -> String {
        let mut raw = String::new();
        self.collect_text(i, &mut raw, 0);
        let lines: Vec<String> = raw
            .split('\n')
            .map(clip)
            .filter(|l| !l.is_empty())
            .collect();
        lines.join("\n")
    }

    fn collect_text(&self, i: usize, out: &mut String, depth: usize) {
        let e = &self.els[i];
        // Controls show no text of their own but their label (a button's content does).
        if self.hides(i) || depth > 512 || matches!(e.tag.as_str(), "select" | "textarea") {
            return;
        }
        let block = BLOCKS.contains(&e.tag.as_str());
        if block {
            out.push('\n');
        }
        for c in &e.children {
            match c {
                Child::Text(t) => out.push_str(&t.replace(['\n', '\r', '\t'], " ")),
                Child::El(k) => self.collect_text(*k, out, depth + 1),
            }
        }
        if matches!(e.tag.as_str(), "td" | "th") {
            out.push(' ');
        }
        if block {
            out.push('\n');
        }
    }

    /// The page's text: the body's (else the whole document's).
    pub(super) fn page_text(&self) -> String {
        match self.els.iter().position(|e| e.tag == "body") {
            Some(b) => self.text(b),
            None if self.els.is_empty() => String::new(),
            None => self.text(0),
        }
    }

    /// Whether the page shows frames.
    pub(super) fn has_frames(&self) -> bool {
        (0..self.els.len())
            .any(|i| matches!(self.els[i].tag.as_str(), "iframe" | "frame") && self.shown(i))
    }

    /// The shown interactive elements, in document order (`page.js` interactive()).
    pub(super) fn interactive(&self) -> Vec<usize> {
        (0..self.els.len())
            .filter(|&i| {
                let e = &self.els[i];
                let by_tag = match e.tag.as_str() {
                    "a" => e.has("href"),
                    "button" | "select" | "textarea" | "summary" => true,
                    "input" => e.input_type() != "hidden",
                    _ => false,
                };
                by_tag && self.shown(i)
            })
            .collect()
    }

    /// `page.js` roleOf.
    pub(super) fn role(&self, i: usize) -> String {
        let e = &self.els[i];
        let explicit = e
            .attr("role")
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or("")
            .to_ascii_lowercase();
        if !explicit.is_empty() && !matches!(explicit.as_str(), "presentation" | "none" | "generic")
        {
            return explicit;
        }
        match e.tag.as_str() {
            "a" => "link",
            "select" if e.has("multiple") => "listbox",
            "select" => "combobox",
            "textarea" => "textbox",
            "input" => match e.input_type().as_str() {
                "button" | "submit" | "reset" | "image" | "file" | "color" => "button",
                "checkbox" => "checkbox",
                "radio" => "radio",
                "range" => "slider",
                "number" => "spinbutton",
                "search" => "searchbox",
                _ => "textbox",
            },
            _ => "button",
        }
        .to_owned()
    }

    /// A label's text without the controls inside it.
    fn label_text(&self, i: usize) -> String {
        let mut out = String::new();
        self.collect_label(i, &mut out, 0);
        out
    }

    fn collect_label(&self, i: usize, out: &mut String, depth: usize) {
        if depth > 512 {
            return;
        }
        for c in &self.els[i].children {
            match c {
                Child::Text(t) => out.push_str(t),
                Child::El(k) => {
                    let tag = self.els[*k].tag.as_str();
                    if !matches!(
                        tag,
                        "select" | "textarea" | "input" | "button" | "script" | "style"
                    ) {
                        out.push(' ');
                        self.collect_label(*k, out, depth + 1);
                        out.push(' ');
                    }
                }
            }
        }
    }

    fn by_id(&self, id: &str) -> Option<usize> {
        self.els.iter().position(|e| e.attr("id") == Some(id))
    }

    /// `page.js` nameOf.
    pub(super) fn name(&self, i: usize) -> String {
        let e = &self.els[i];
        let (tag, ty) = (e.tag.as_str(), e.input_type());
        if let Some(by) = e.attr("aria-labelledby") {
            let ids: Vec<String> = by
                .split_whitespace()
                .filter_map(|id| self.by_id(id))
                .map(|j| self.raw_text(j))
                .collect();
            let n = clip(&ids.join(" "));
            if !n.is_empty() {
                return n;
            }
        }
        let n = clip(e.attr("aria-label").unwrap_or(""));
        if !n.is_empty() {
            return n;
        }
        if matches!(tag, "input" | "select" | "textarea" | "button") {
            let id = e.attr("id");
            let labels: Vec<String> = (0..self.els.len())
                .filter(|&j| {
                    self.els[j].tag == "label"
                        && match self.els[j].attr("for") {
                            Some(f) => Some(f) == id,
                            None => self.labelled_control(j) == Some(i),
                        }
                })
                .map(|j| self.label_text(j))
                .collect();
            let n = clip(&labels.join(" "));
            if !n.is_empty() {
                return n;
            }
        }
        let mut n = String::new();
        if tag == "input" {
            let value = e.attr("value");
            n = match ty.as_str() {
                "submit" => clip(value.unwrap_or("Submit")),
                "reset" => clip(value.unwrap_or("Reset")),
                "button" => clip(value.unwrap_or("")),
                "image" => clip(e.attr("alt").or(value).unwrap_or("")),
                _ => String::new(),
            };
        } else if !matches!(tag, "select" | "textarea") {
            n = clip(&self.text(i));
            if n.is_empty() {
                let img = self.descendants(i).into_iter().skip(1).find(|&j| {
                    let d = &self.els[j];
                    (d.tag == "img" && d.has("alt")) || d.has("aria-label")
                });
                if let Some(j) = img {
                    let d = &self.els[j];
                    n = clip(d.attr("alt").or(d.attr("aria-label")).unwrap_or(""));
                }
            }
        }
        if n.is_empty() {
            n = clip(e.attr("title").unwrap_or(""));
        }
        if n.is_empty() {
            n = clip(
                e.attr("placeholder")
                    .or(e.attr("aria-placeholder"))
                    .unwrap_or(""),
            );
        }
        n
    }

    /// The first labelable control inside a label without `for`.
    fn labelled_control(&self, label: usize) -> Option<usize> {
        self.descendants(label).into_iter().skip(1).find(|&j| {
            let e = &self.els[j];
            matches!(e.tag.as_str(), "select" | "textarea" | "button")
                || (e.tag == "input" && e.input_type() != "hidden")
        })
    }

    /// Whether the field never shows its value (`page.js` masked, less saved logins).
    pub(super) fn masked(&self, i: usize) -> bool {
        let e = &self.els[i];
        e.tag == "input"
            && (e.input_type() == "password"
                || e.attr("autocomplete")
                    .is_some_and(|a| a.to_ascii_lowercase().contains("password")))
    }

    /// `page.js` valueOf.
    pub(super) fn value_shown(&self, i: usize) -> String {
        if self.masked(i) {
            return String::new();
        }
        let e = &self.els[i];
        match e.tag.as_str() {
            "input" => match e.input_type().as_str() {
                "checkbox" | "radio" => if self.is_checked(i) {
                    "checked"
                } else {
                    "unchecked"
                }
                .to_owned(),
                "button" | "submit" | "reset" | "image" | "file" => String::new(),
                _ => self.value(i),
            },
            "textarea" => self.value(i),
            "select" => self
                .selected_option(i)
                .map(|o| clip(&self.option_label(o)))
                .unwrap_or_default(),
            _ => match e.attr("aria-checked").map(str::trim) {
                Some("true") => "checked".to_owned(),
                Some("false") => "unchecked".to_owned(),
                Some("mixed") => "mixed".to_owned(),
                _ => String::new(),
            },
        }
    }

    /// The current value of an input or textarea.
    pub(super) fn value(&self, i: usize) -> String {
        if let Some(v) = self.values.get(&i) {
            return v.clone();
        }
        let e = &self.els[i];
        if e.tag == "textarea" {
            // The parser drops one leading newline of a textarea's content.
            return self.raw_text(i);
        }
        let v = e.attr("value").unwrap_or("");
        match e.input_type().as_str() {
            t if ONE_LINE.contains(&t) => v.replace(['\r', '\n'], ""),
            "checkbox" | "radio" if e.attr("value").is_none() => "on".to_owned(),
            _ => v.to_owned(),
        }
    }

    pub(super) fn is_checked(&self, i: usize) -> bool {
        self.checked
            .get(&i)
            .copied()
            .unwrap_or_else(|| self.els[i].has("checked"))
    }

    pub(super) fn set_checked(&mut self, i: usize, on: bool) {
        self.checked.insert(i, on);
    }

    /// The options of a select, in order.
    pub(super) fn options(&self, select: usize) -> Vec<usize> {
        self.descendants(select)
            .into_iter()
            .filter(|&j| self.els[j].tag == "option")
            .collect()
    }

    pub(super) fn option_label(&self, o: usize) -> String {
        match self.els[o].attr("label") {
            Some(l) if !l.is_empty() => l.to_owned(),
            _ => clip(&self.raw_text(o)),
        }
    }

    pub(super) fn option_value(&self, o: usize) -> String {
        match self.els[o].attr("value") {
            Some(v) => v.to_owned(),
            None => clip(&self.raw_text(o)),
        }
    }

    /// The selected option: the one chosen, else the last with `selected`, else (single
    /// selects) the first enabled one.
    pub(super) fn selected_option(&self, select: usize) -> Option<usize> {
        let opts = self.options(select);
        if let Some(o) = self.selected.get(&select) {
            return Some(*o);
        }
        if let Some(o) = opts.iter().rev().find(|&&o| self.els[o].has("selected")) {
            return Some(*o);
        }
        if self.els[select].has("multiple") {
            return None;
        }
        opts.into_iter().find(|&o| !self.els[o].has("disabled"))
    }

    pub(super) fn select(&mut self, select: usize, option: usize) {
        self.selected.insert(select, option);
    }

    /// `page.js` optionIndex: by value, else by visible text, else by text ignoring case.
    pub(super) fn find_option(&self, select: usize, want: &str) -> Option<usize> {
        let opts = self.options(select);
        let want_text = clip(want);
        opts.iter()
            .copied()
            .find(|&o| self.option_value(o) == want)
            .or_else(|| {
                opts.iter()
                    .copied()
                    .find(|&o| clip(&self.option_label(o)) == want_text)
            })
            .or_else(|| {
                opts.iter().copied().find(|&o| {
                    clip(&self.option_label(o)).to_lowercase() == want_text.to_lowercase()
                })
            })
    }

    /// `page.js` fillKind; the error is its code and detail.
    pub(super) fn fill_kind(&self, i: usize) -> Result<FillKind, (&'static str, Option<String>)> {
        let e = &self.els[i];
        let kind = match e.tag.as_str() {
            "input" if FILLABLE.contains(&e.input_type().as_str()) => FillKind::Input,
            "textarea" => FillKind::Textarea,
            "select" => FillKind::Select,
            _ => return Err(("notfillable", Some(self.role(i)))),
        };
        if kind != FillKind::Select && e.has("readonly") {
            return Err(("readonly", None));
        }
        Ok(kind)
    }

    /// Sets an input's or textarea's value as the browser would keep it (value sanitization).
    pub(super) fn set_value(&mut self, i: usize, text: &str) {
        let ty = self.els[i].input_type();
        let v = if self.els[i].tag == "textarea" {
            text.replace("\r\n", "\n").replace('\r', "\n")
        } else if ONE_LINE.contains(&ty.as_str()) {
            let t = text.replace(['\r', '\n'], "");
            if ty == "email" || ty == "url" {
                t.trim().to_owned()
            } else {
                t
            }
        } else {
            text.to_owned()
        };
        self.values.insert(i, v);
    }

    /// Whether the element or an enclosing fieldset is disabled.
    pub(super) fn disabled(&self, i: usize) -> bool {
        let e = &self.els[i];
        let control = matches!(
            e.tag.as_str(),
            "button" | "input" | "select" | "textarea" | "option"
        );
        control
            && self.ancestors(i).any(|j| {
                let a = &self.els[j];
                (j == i || a.tag == "fieldset" || a.tag == "optgroup") && a.has("disabled")
            })
    }

    /// The form an element belongs to: its `form` attribute's, else the nearest enclosing one.
    pub(super) fn form_of(&self, i: usize) -> Option<usize> {
        if let Some(id) = self.els[i].attr("form") {
            return self.by_id(id).filter(|&f| self.els[f].tag == "form");
        }
        self.ancestors(i)
            .skip(1)
            .find(|&j| self.els[j].tag == "form")
    }

    /// Whether the element submits its form when clicked.
    pub(super) fn is_submit(&self, i: usize) -> bool {
        let e = &self.els[i];
        match e.tag.as_str() {
            "button" => {
                let t = e
                    .attr("type")
                    .unwrap_or("submit")
                    .trim()
                    .to_ascii_lowercase();
                t == "submit" || !matches!(t.as_str(), "button" | "reset")
            }
            "input" => matches!(e.input_type().as_str(), "submit" | "image"),
            _ => false,
        }
    }

    /// The controls of `form`, in document order.
    fn controls(&self, form: usize) -> Vec<usize> {
        (0..self.els.len())
            .filter(|&j| {
                matches!(
                    self.els[j].tag.as_str(),
                    "input" | "select" | "textarea" | "button"
                ) && self.form_of(j) == Some(form)
            })
            .collect()
    }

    /// The form's default button (implicit submission): its first submit button.
    pub(super) fn default_button(&self, form: usize) -> Option<usize> {
        self.controls(form).into_iter().find(|&j| self.is_submit(j))
    }

    /// The form data set (HTML's "constructing the entry list"): enabled named controls, checked
    /// boxes only, the submitter's own name and value.
    pub(super) fn form_data(&self, form: usize, submitter: Option<usize>) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for j in self.controls(form) {
            let e = &self.els[j];
            let Some(name) = e.attr("name").filter(|n| !n.is_empty()) else {
                continue;
            };
            if self.disabled(j) {
                continue;
            }
            match e.tag.as_str() {
                "button" => {
                    if Some(j) == submitter {
                        out.push((name.to_owned(), e.attr("value").unwrap_or("").to_owned()));
                    }
                }
                "select" => {
                    if let Some(o) = self.selected_option(j) {
                        out.push((name.to_owned(), self.option_value(o)));
                    }
                }
                "textarea" => out.push((name.to_owned(), self.value(j))),
                _ => match e.input_type().as_str() {
                    "submit" | "image" | "button" | "reset" => {
                        if Some(j) == submitter {
                            out.push((name.to_owned(), e.attr("value").unwrap_or("").to_owned()));
                        }
                    }
                    "checkbox" | "radio" => {
                        if self.is_checked(j) {
                            out.push((name.to_owned(), self.value(j)));
                        }
                    }
                    "file" => out.push((name.to_owned(), String::new())),
                    _ => out.push((name.to_owned(), self.value(j))),
                },
            }
        }
        out
    }

    /// Unchecks the other radios of `i`'s group.
    pub(super) fn check_radio(&mut self, i: usize) {
        let name = self.els[i].attr("name").map(str::to_owned);
        let form = self.form_of(i);
        if let Some(name) = name {
            let group: Vec<usize> = (0..self.els.len())
                .filter(|&j| {
                    j != i
                        && self.els[j].input_type() == "radio"
                        && self.els[j].attr("name") == Some(name.as_str())
                        && self.form_of(j) == form
                })
                .collect();
            for j in group {
                self.checked.insert(j, false);
            }
        }
        self.checked.insert(i, true);
    }

    /// Resets a form's controls to their markup.
    pub(super) fn reset(&mut self, form: usize) {
        for j in self.controls(form) {
            self.values.remove(&j);
            self.checked.remove(&j);
            self.selected.remove(&j);
        }
    }

    /// The `<base href>`, if any.
    pub(super) fn base_href(&self) -> Option<&str> {
        self.els
            .iter()
            .find(|e| e.tag == "base" && e.has("href"))
            .and_then(|e| e.attr("href"))
    }
}

/// Whitespace collapsed and trimmed (`page.js` clip, without the cut).
pub(super) fn clip(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
