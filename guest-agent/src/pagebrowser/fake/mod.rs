//! The fake browser provider (docs/screens.md#browser-providers): the page tools on an
//! in-process session with no browser at all. Pages are fetched over HTTP(S) ([`fetch`]),
//! parsed by html5ever ([`dom`]) and acted on in the guest; **no JavaScript runs**, so a page
//! whose behaviour needs script behaves differently here (its script-driven dialogs never open,
//! its `onclick` handlers never fire).
//!
//! The contract is the real one's, shared where it can be: [`validate_url`] and
//! [`validate_steps`] before anything, the same step planning and failure messages
//! ([`steps::plan`], [`steps::check`]), the same bounds and tree ([`build_snapshot`]), refs `e<N>`
//! from a counter that only grows, kept per element while its document lives and stale
//! ([`STALE_REF`](gateway_proto::page::STALE_REF)) once another document replaced it. Password
//! fields and fields filled from saved logins never show a value. What a click does follows HTML
//! without script: a link navigates, a submit button submits its form (GET, or POST
//! urlencoded, with the button's name and value), a reset button resets it, a checkbox toggles,
//! a radio checks; Enter in a field submits its form (implicit submission). There is no layout:
//! every element not hidden by markup is visible, in document order up to
//! [`MAX_ELEMENTS`], and nothing covers anything.

mod dom;
mod fetch;

use std::collections::{HashMap, HashSet};

use gateway_proto::page::{
    validate_steps, validate_url, PageActFailure, PageStep, Snapshot, MAX_ELEMENTS, MAX_TEXT_CHARS,
    NOT_SETTLED,
};
use gateway_proto::{ErrorCode, OpError};
use tokio::time::Instant;
use url::Url;

use super::snapshot::{build_snapshot, RawElement, RawSnapshot};
use super::steps::{self, check, Planned, Reply, StepFailure};
use super::NAVIGATION_TIMEOUT;
use dom::{Dom, FillKind};
pub use fetch::{MAX_PAGE_BYTES, MAX_REDIRECTS};

/// One bot's fake page session.
#[derive(Debug, Default)]
pub struct FakePage {
    /// Made on the first navigation (reading the system's certificates costs a little).
    fetcher: Option<fetch::Fetcher>,
    /// The number of the next new ref; only ever grows.
    next_ref: u64,
    /// Refs of fields filled from a saved login: their value is never shown.
    saved_login_refs: HashSet<String>,
    doc: Option<Doc>,
}

/// The current document and the refs minted for its elements.
#[derive(Debug)]
struct Doc {
    url: Url,
    dom: Dom,
    refs: HashMap<String, usize>,
    by_el: HashMap<usize, String>,
}

/// What a step leaves to do after it.
enum Effect {
    Stay,
    /// Load this URL (with a urlencoded body: a POST).
    Load(Url, Option<String>),
}

impl FakePage {
    /// A session showing a blank page; refs start at `e1`.
    pub fn new() -> Self {
        Self {
            next_ref: 1,
            ..Self::default()
        }
    }

    /// browser_snapshot.
    pub async fn snapshot(&mut self) -> Result<Snapshot, OpError> {
        let next = self.next_ref.max(1);
        let raw = match self.doc.as_mut() {
            Some(doc) => doc.raw_snapshot(next),
            None => RawSnapshot {
                url: "about:blank".into(),
                title: String::new(),
                text: String::new(),
                text_cut: false,
                elements: Vec::new(),
                frames: false,
                next,
                visible: true,
                candidates: 0,
                ms: 0.0,
            },
        };
        let (snapshot, next) = build_snapshot(raw, next, &self.saved_login_refs)
            .map_err(|m| OpError::new(ErrorCode::Failed, m))?;
        self.next_ref = next;
        Ok(snapshot)
    }

    /// browser_navigate: the URL checked first ([`validate_url`]), then fetched (at most
    /// [`NAVIGATION_TIMEOUT`], else [`NOT_SETTLED`]), parsed, and its snapshot returned.
    pub async fn navigate(&mut self, url: &str) -> Result<Snapshot, OpError> {
        validate_url(url)?;
        let parsed = Url::parse(url)
            .map_err(|e| OpError::new(ErrorCode::BadRequest, format!("the URL is invalid: {e}")))?;
        self.load(parsed, None).await?;
        self.snapshot().await
    }

    /// browser_act: the batch validated whole first, then each step in order; a step that
    /// navigates (a link, a form) loads the new document before the next step, whose refs are
    /// then stale. Returns the snapshot after the last step, or the failure.
    pub async fn act(
        &mut self,
        steps: &[PageStep],
    ) -> Result<Result<Snapshot, PageActFailure>, OpError> {
        validate_steps(steps)?;
        let plan = steps::plan(steps)?;
        let mut completed: u32 = 0;
        let failure = |completed, f: StepFailure| {
            Ok(Err(PageActFailure {
                completed,
                uncertain: f.uncertain,
                error: f.error,
            }))
        };
        for step in &plan {
            match self.run_step(step) {
                Ok(Effect::Stay) => {}
                Ok(Effect::Load(url, form)) => {
                    if let Err(e) = self.load(url, form).await {
                        // The step acted; where it led did not load.
                        return failure(completed + 1, StepFailure::done(e.message));
                    }
                }
                Err(f) => return failure(completed, f),
            }
            completed += 1;
        }
        match self.snapshot().await {
            Ok(s) => Ok(Ok(s)),
            Err(e) => failure(completed, StepFailure::done(e.message)),
        }
    }

    /// Fetches and shows `url`; a change of fragment alone keeps the document (and its refs).
    async fn load(&mut self, url: Url, form: Option<String>) -> Result<(), OpError> {
        if let (Some(doc), None) = (self.doc.as_mut(), &form) {
            let mut a = doc.url.clone();
            let mut b = url.clone();
            a.set_fragment(None);
            b.set_fragment(None);
            if a == b && url.fragment().is_some() {
                doc.url = url;
                return Ok(());
            }
        }
        if self.fetcher.is_none() {
            let f = fetch::Fetcher::new().map_err(|m| OpError::new(ErrorCode::Failed, m))?;
            self.fetcher = Some(f);
        }
        let Some(fetcher) = self.fetcher.as_mut() else {
            return Err(OpError::new(ErrorCode::Failed, "no http client"));
        };
        let shown = url.to_string();
        let deadline = Instant::now() + NAVIGATION_TIMEOUT;
        let fetched = match fetcher.fetch(url, form, deadline).await {
            Ok(f) => f,
            Err(fetch::FetchError::Timeout) => {
                return Err(OpError::new(ErrorCode::Failed, NOT_SETTLED))
            }
            Err(fetch::FetchError::Failed(m)) => {
                return Err(OpError::new(
                    ErrorCode::Failed,
                    format!("navigation to {shown} failed: {m}"),
                ))
            }
        };
        let ct = fetched.content_type.as_str();
        let html = if ct.starts_with("text/html") || ct.starts_with("application/xhtml") {
            String::from_utf8_lossy(&fetched.body).into_owned()
        } else if ct.starts_with("text/") {
            format!(
                "<pre>{}</pre>",
                escape(&String::from_utf8_lossy(&fetched.body))
            )
        } else {
            return Err(OpError::new(
                ErrorCode::Failed,
                format!(
                    "navigation to {shown} failed: the fake browser provider shows only HTML \
                     and text, not {ct}"
                ),
            ));
        };
        // Parsing up to MAX_PAGE_BYTES takes a while: off the async threads.
        let dom = tokio::task::spawn_blocking(move || Dom::parse(&html))
            .await
            .map_err(|e| {
                OpError::new(ErrorCode::Failed, format!("parsing the page failed: {e}"))
            })?;
        self.doc = Some(Doc {
            url: fetched.url,
            dom,
            refs: HashMap::new(),
            by_el: HashMap::new(),
        });
        Ok(())
    }

    /// The element a ref names in the current document, or the step's failure.
    fn resolve(&self, element: &str) -> Result<usize, StepFailure> {
        let doc = self.doc.as_ref().ok_or_else(|| fail("stale", None, None))?;
        match doc.refs.get(element) {
            Some(&i) if doc.dom.shown(i) => {
                if doc.dom.disabled(i) {
                    Err(fail("disabled", None, None))
                } else {
                    Ok(i)
                }
            }
            _ => Err(fail("stale", None, None)),
        }
    }

    fn run_step(&mut self, step: &Planned<'_>) -> Result<Effect, StepFailure> {
        match step {
            Planned::Click { element } => {
                let i = self.resolve(element)?;
                Ok(self.doc_mut()?.click(i))
            }
            Planned::Fill {
                element,
                text,
                origin,
            } => {
                let i = self.resolve(element)?;
                let doc = self.doc_mut()?;
                if let Some(o) = origin {
                    if doc.url.scheme() != "https" {
                        return Err(fail("nocrypto", None, None));
                    }
                    if doc.url.origin().ascii_serialization() != *o {
                        return Err(StepFailure::before(format!(
                            "Saved login refused: the page is not an HTTPS page of {o}"
                        )));
                    }
                }
                match doc.dom.fill_kind(i) {
                    Err((code, detail)) => return Err(fail(code, detail, None)),
                    Ok(FillKind::Select) => doc.select(i, text)?,
                    Ok(_) => doc.dom.set_value(i, text),
                }
                doc.dom.focused = Some(i);
                if origin.is_some() {
                    self.saved_login_refs.insert((*element).to_owned());
                }
                Ok(Effect::Stay)
            }
            Planned::Type { element, text } => {
                let i = self.resolve(element)?;
                self.doc_mut()?.type_text(i, text)
            }
            Planned::Select { element, value } => {
                let i = self.resolve(element)?;
                let doc = self.doc_mut()?;
                if doc.dom.els[i].tag != "select" {
                    return Err(fail("notselect", None, None));
                }
                doc.select(i, value)?;
                Ok(Effect::Stay)
            }
            Planned::Press { key } => match self.doc.as_mut() {
                Some(doc) if key.is_plain("Enter") => Ok(doc.enter()),
                _ => Ok(Effect::Stay),
            },
        }
    }

    fn doc_mut(&mut self) -> Result<&mut Doc, StepFailure> {
        self.doc.as_mut().ok_or_else(|| fail("stale", None, None))
    }
}

impl Doc {
    fn raw_snapshot(&mut self, mut next: u64) -> RawSnapshot {
        let candidates = self.dom.interactive();
        let mut elements = Vec::new();
        for &i in candidates.iter().take(MAX_ELEMENTS) {
            let element = match self.by_el.get(&i) {
                Some(r) => r.clone(),
                None => {
                    let r = format!("e{next}");
                    next += 1;
                    self.by_el.insert(i, r.clone());
                    self.refs.insert(r.clone(), i);
                    r
                }
            };
            elements.push(RawElement {
                element,
                role: self.dom.role(i),
                name: self.dom.name(i),
                value: self.dom.value_shown(i),
                tag: self.dom.els[i].tag.clone(),
            });
        }
        let text = self.dom.page_text();
        let text_cut = text.chars().count() > MAX_TEXT_CHARS;
        RawSnapshot {
            url: self.url.to_string(),
            title: self.dom.title(),
            text,
            text_cut,
            elements,
            frames: self.dom.has_frames(),
            next,
            visible: true,
            candidates: candidates.len() as u64,
            ms: 0.0,
        }
    }

    /// The base URL relative links resolve against.
    fn base(&self) -> Url {
        self.dom
            .base_href()
            .and_then(|b| self.url.join(b).ok())
            .unwrap_or_else(|| self.url.clone())
    }

    /// A click: what HTML does without script.
    fn click(&mut self, i: usize) -> Effect {
        self.dom.focused = Some(i);
        let (tag, ty) = (self.dom.els[i].tag.clone(), self.dom.els[i].input_type());
        if tag == "a" {
            return match self.dom.els[i].attr("href").map(|h| self.base().join(h)) {
                Some(Ok(url)) if matches!(url.scheme(), "http" | "https") => {
                    Effect::Load(url, None)
                }
                _ => Effect::Stay,
            };
        }
        match ty.as_str() {
            "checkbox" => {
                let on = !self.dom.is_checked(i);
                self.dom.set_checked(i, on);
                return Effect::Stay;
            }
            "radio" => {
                self.dom.check_radio(i);
                return Effect::Stay;
            }
            _ => {}
        }
        let Some(form) = self.dom.form_of(i) else {
            return Effect::Stay;
        };
        if self.dom.is_submit(i) {
            return self.submit(form, Some(i));
        }
        let reset = match tag.as_str() {
            "button" => self.dom.els[i]
                .attr("type")
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("reset")),
            _ => ty == "reset",
        };
        if reset {
            self.dom.reset(form);
        }
        Effect::Stay
    }

    /// Enter on the focused element: activates a link or button, submits a field's form.
    fn enter(&mut self) -> Effect {
        let Some(i) = self.dom.focused else {
            return Effect::Stay;
        };
        let e = &self.dom.els[i];
        let field = e.tag == "input"
            && !matches!(
                e.input_type().as_str(),
                "checkbox" | "radio" | "submit" | "image" | "reset" | "button" | "file"
            );
        if !field {
            return match e.tag.as_str() {
                "a" | "button" | "input" => self.click(i),
                _ => Effect::Stay,
            };
        }
        let Some(form) = self.dom.form_of(i) else {
            return Effect::Stay;
        };
        // Implicit submission: through the default button, unless it is disabled.
        match self.dom.default_button(form) {
            Some(b) if self.dom.disabled(b) => Effect::Stay,
            Some(b) => self.submit(form, Some(b)),
            None => self.submit(form, None),
        }
    }

    /// Submits `form`: GET with the data as the query, or POST urlencoded.
    fn submit(&mut self, form: usize, submitter: Option<usize>) -> Effect {
        let attr = |name: &str, form_name: &str| {
            submitter
                .and_then(|s| self.dom.els[s].attr(form_name))
                .or_else(|| self.dom.els[form].attr(name))
                .map(str::trim)
                .map(str::to_owned)
        };
        let action = attr("action", "formaction").filter(|a| !a.is_empty());
        let post = attr("method", "formmethod").is_some_and(|m| m.eq_ignore_ascii_case("post"));
        let mut url = match action {
            Some(a) => match self.base().join(&a) {
                Ok(u) => u,
                Err(_) => return Effect::Stay,
            },
            None => self.url.clone(),
        };
        if !matches!(url.scheme(), "http" | "https") {
            return Effect::Stay;
        }
        let data = self.dom.form_data(form, submitter);
        let encoded = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(data)
            .finish();
        url.set_fragment(None);
        if post {
            Effect::Load(url, Some(encoded))
        } else {
            url.set_query(Some(&encoded));
            Effect::Load(url, None)
        }
    }

    /// Selects the option of `select` whose value or text is `value` (`page.js` selectOption).
    fn select(&mut self, select: usize, value: &str) -> Result<(), StepFailure> {
        let Some(o) = self.dom.find_option(select, value) else {
            return Err(fail("nooption", None, Some(value)));
        };
        if self.dom.disabled(o) {
            return Err(fail("optiondisabled", None, None));
        }
        self.dom.select(select, o);
        self.dom.focused = Some(select);
        Ok(())
    }

    /// Types `text` at the end of a field; a line break in a one-line field is Enter.
    fn type_text(&mut self, i: usize, text: &str) -> Result<Effect, StepFailure> {
        let kind = self
            .dom
            .fill_kind(i)
            .map_err(|(code, detail)| fail(code, detail, None))?;
        if kind == FillKind::Select {
            return Err(fail("notfillable", Some("combobox".into()), None));
        }
        self.dom.focused = Some(i);
        let text = text.replace("\r\n", "\n");
        if kind == FillKind::Textarea {
            let v = self.dom.value(i) + &text;
            self.dom.set_value(i, &v);
            return Ok(Effect::Stay);
        }
        let (line, rest) = match text.split_once(['\n', '\r']) {
            Some((line, rest)) => (line, Some(rest)),
            None => (text.as_str(), None),
        };
        let v = self.dom.value(i) + line;
        self.dom.set_value(i, &v);
        // What follows the Enter would go to the next page's focus; nothing has it here.
        Ok(match rest {
            Some(_) => self.enter(),
            None => Effect::Stay,
        })
    }
}

impl StepFailure {
    /// A failure after the step was confirmed (where it led did not load).
    fn done(error: String) -> Self {
        Self {
            uncertain: false,
            error,
        }
    }
}

/// A step failure with the real helper's code, through the same messages.
fn fail(code: &str, detail: Option<String>, value: Option<&str>) -> StepFailure {
    let reply = Reply {
        error: Some(code.to_owned()),
        detail,
        ..Reply::default()
    };
    match check(&reply, value) {
        Err(f) => f,
        Ok(()) => StepFailure::before(code.to_owned()),
    }
}

/// Text as HTML text.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests;
