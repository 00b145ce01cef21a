//! browser_act: plans a batch (validated whole first) and runs its steps through the helper and
//! real CDP input events, classifying each failure as before or after dispatch.

use std::time::Duration;

use gateway_proto::page::{
    validate_steps, PageActFailure, PageStep, Snapshot, DISABLED, NOT_SETTLED, STALE_REF,
};
use gateway_proto::{ErrorCode, OpError};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::cdp::{self, CdpError, FrameActivity};
use super::{chain, keys, seal, PageBrowser, ACT_SETTLE, NAVIGATION_TIMEOUT, READY_TIMEOUT};
use crate::browser::CdpClient;

/// Longest wait for one helper call of an act step.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// `type` sends real key events for texts up to this many characters, and one
/// `Input.insertText` beyond (100,000 characters key by key would take minutes).
const TYPE_KEYS_MAX_CHARS: usize = 500;

/// Why a step failed, for [`PageActFailure`].
#[derive(Debug)]
pub(super) struct StepFailure {
    pub(super) uncertain: bool,
    pub(super) error: String,
}

impl StepFailure {
    pub(super) fn before(error: impl Into<String>) -> Self {
        Self {
            uncertain: false,
            error: error.into(),
        }
    }

    fn after(error: impl Into<String>) -> Self {
        Self {
            uncertain: true,
            error: error.into(),
        }
    }
}

/// A validated step, ready to run.
pub(super) enum Planned<'a> {
    Click {
        element: &'a str,
    },
    Fill {
        element: &'a str,
        text: &'a str,
        origin: Option<String>,
    },
    Type {
        element: &'a str,
        text: &'a str,
    },
    Select {
        element: &'a str,
        value: &'a str,
    },
    Press {
        key: keys::KeyPress,
    },
}

#[derive(Debug, Clone, Serialize)]
struct RefArgs {
    #[serde(rename = "ref")]
    element: String,
}

/// A plain fill's argument. No `Debug`: the text may be a secret.
#[derive(Clone, Serialize)]
struct FillArgs {
    #[serde(rename = "ref")]
    element: String,
    text: String,
}

#[derive(Debug, Clone, Serialize)]
struct SealBeginArgs {
    #[serde(rename = "ref")]
    element: String,
    origin: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
struct SealFillArgs {
    #[serde(rename = "ref")]
    element: String,
    origin: Option<String>,
    #[serde(rename = "pub")]
    public_key: String,
    sealed: String,
    label: &'static str,
}

#[derive(Debug, Clone, Serialize)]
struct SelectArgs {
    #[serde(rename = "ref")]
    element: String,
    value: String,
}

/// Any helper step reply: `{ok}`, `{x, y}`, `{pub}` or `{error, detail?, dispatched?}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Reply {
    pub(super) error: Option<String>,
    pub(super) detail: Option<String>,
    pub(super) dispatched: bool,
    pub(super) x: Option<f64>,
    pub(super) y: Option<f64>,
    #[serde(rename = "pub")]
    pub(super) public_key: Option<String>,
}

impl PageBrowser {
    /// browser_act: validates the whole batch first ([`validate_steps`] and key names, as
    /// [`ErrorCode::BadRequest`]), picks the tab (failures before any step are `Err`), runs the
    /// steps in order and returns the snapshot after them, or the failure: how many steps were
    /// confirmed, whether the failing one may have acted, and why. Nothing is replayed.
    pub async fn act(
        &mut self,
        browser: &CdpClient,
        steps: &[PageStep],
    ) -> Result<Result<Snapshot, PageActFailure>, OpError> {
        validate_steps(steps)?;
        let plan = plan(steps)?;
        let (target, _) = self.select_tab(browser, false).await?;
        let (tab, world) = self
            .ensure_world(&target)
            .await
            .map_err(|e| self.failed("open the page", e))?;
        let mut watch = tab
            .watch_navigation()
            .await
            .map_err(|e| self.failed("watch navigation", e))?;
        let mut completed: u32 = 0;
        for step in &plan {
            if let Err(failure) = self.run_step(&target, &tab, step).await {
                tracing::debug!(completed, uncertain = failure.uncertain, error = %failure.error, "browser_act step failed");
                return Ok(Err(PageActFailure {
                    completed,
                    uncertain: failure.uncertain,
                    error: failure.error,
                }));
            }
            completed += 1;
        }
        let done = |error: String| {
            Ok(Err(PageActFailure {
                completed,
                uncertain: false,
                error,
            }))
        };
        // Give a navigation the steps caused time to start; follow it like navigate does.
        tokio::time::sleep(ACT_SETTLE).await;
        let mut activity = FrameActivity::default();
        watch.drain(&world.frame_id, &mut activity);
        if activity.started && !activity.committed && !activity.stopped {
            let deadline = Instant::now() + NAVIGATION_TIMEOUT;
            while !activity.committed && !activity.stopped {
                if Instant::now() >= deadline {
                    return done(NOT_SETTLED.to_owned());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                watch.drain(&world.frame_id, &mut activity);
            }
        }
        drop(watch);
        if activity.committed {
            self.forget_world(&target);
        }
        if activity.started || activity.committed {
            if let Err(e) = self.wait_ready(&target, READY_TIMEOUT).await {
                return done(e.message);
            }
        }
        match self.snapshot(browser).await {
            Ok(snapshot) => Ok(Ok(snapshot)),
            Err(e) => done(e.message),
        }
    }

    async fn run_step(
        &mut self,
        target: &str,
        tab: &cdp::Tab,
        step: &Planned<'_>,
    ) -> Result<(), StepFailure> {
        match step {
            Planned::Click { element } => {
                let reply = self
                    .step_call(target, "prepareClick", ref_args(element))
                    .await
                    .map_err(before_dispatch)?;
                check(&reply, None)?;
                let (x, y) = match (reply.x, reply.y) {
                    (Some(x), Some(y)) if x.is_finite() && y.is_finite() => (x, y),
                    _ => return Err(StepFailure::before("the page helper gave no click point")),
                };
                tab.click(x, y).await.map_err(|e| {
                    StepFailure::after(format!(
                        "The click was sent but not confirmed ({e}); inspect the screen before continuing"
                    ))
                })
            }
            Planned::Fill {
                element,
                text,
                origin,
            } => self.fill(target, element, text, origin.clone()).await,
            Planned::Type { element, text } => {
                let reply = self
                    .step_call(target, "focusForTyping", ref_args(element))
                    .await
                    .map_err(before_dispatch)?;
                check(&reply, None)?;
                let unconfirmed = |e: CdpError| {
                    StepFailure::after(format!(
                        "Typing was not confirmed ({e}); inspect the screen before continuing"
                    ))
                };
                if text.chars().count() <= TYPE_KEYS_MAX_CHARS {
                    // A CRLF line break is one Enter, like LF alone.
                    let mut chars = text.chars().peekable();
                    while let Some(c) = chars.next() {
                        if c == '\r' && chars.peek() == Some(&'\n') {
                            continue;
                        }
                        for event in keys::char_events(c) {
                            tab.key(event).await.map_err(unconfirmed)?;
                        }
                    }
                    Ok(())
                } else {
                    tab.insert_text(text).await.map_err(unconfirmed)
                }
            }
            Planned::Select { element, value } => {
                let args = SelectArgs {
                    element: (*element).to_owned(),
                    value: (*value).to_owned(),
                };
                let reply = self
                    .step_call(target, "select", args)
                    .await
                    .map_err(during_dispatch)?;
                check(&reply, Some(value))
            }
            Planned::Press { key } => {
                for event in key.events() {
                    tab.key(event).await.map_err(|e| {
                        StepFailure::after(format!(
                            "The key press was not confirmed ({e}); inspect the screen before continuing"
                        ))
                    })?;
                }
                Ok(())
            }
        }
    }

    /// A fill: sealed when the page offers WebCrypto (every secure page, hence every saved
    /// login), plain otherwise. See [`seal`].
    async fn fill(
        &mut self,
        target: &str,
        element: &str,
        text: &str,
        origin: Option<String>,
    ) -> Result<(), StepFailure> {
        let begin = SealBeginArgs {
            element: element.to_owned(),
            origin: origin.clone(),
        };
        let reply = self
            .step_call(target, "sealBegin", begin)
            .await
            .map_err(before_dispatch)?;
        if reply.error.as_deref() == Some("nocrypto") && origin.is_none() {
            let args = FillArgs {
                element: element.to_owned(),
                text: text.to_owned(),
            };
            let reply = self
                .step_call(target, "fill", args)
                .await
                .map_err(during_dispatch)?;
            return check(&reply, None);
        }
        check_origin(&reply, origin.as_deref())?;
        let peer = reply
            .public_key
            .ok_or_else(|| StepFailure::before("the page helper gave no key"))?;
        let sealed = seal::seal(&peer, text).map_err(StepFailure::before)?;
        let args = SealFillArgs {
            element: element.to_owned(),
            origin: origin.clone(),
            public_key: sealed.public_key,
            sealed: sealed.ciphertext,
            label: seal::LABEL,
        };
        let reply = self
            .step_call(target, "sealFill", args)
            .await
            .map_err(during_dispatch)?;
        check_origin(&reply, origin.as_deref())?;
        if origin.is_some() {
            self.saved_login_refs.insert(element.to_owned());
        }
        Ok(())
    }

    /// A helper call of an act step: never retried, since refs belong to the world they were
    /// made in (a new world means a new document, where the ref is stale).
    async fn step_call<A>(&mut self, target: &str, method: &str, arg: A) -> Result<Reply, CdpError>
    where
        A: Serialize + Clone + Send + 'static,
    {
        self.call(target, method, arg, STEP_TIMEOUT, false).await
    }
}

fn ref_args(element: &str) -> RefArgs {
    RefArgs {
        element: element.to_owned(),
    }
}

/// Checks the batch beyond [`validate_steps`]: key names, origins.
pub(super) fn plan(steps: &[PageStep]) -> Result<Vec<Planned<'_>>, OpError> {
    let bad = |n: usize, m: String| OpError::new(ErrorCode::BadRequest, format!("step {n}: {m}"));
    steps
        .iter()
        .enumerate()
        .map(|(i, step)| {
            Ok(match step {
                PageStep::Click { element } => Planned::Click { element },
                PageStep::Fill {
                    element,
                    text,
                    origin,
                } => Planned::Fill {
                    element,
                    text,
                    origin: match origin {
                        Some(o) => Some(normalize_origin(o).map_err(|m| bad(i + 1, m))?),
                        None => None,
                    },
                },
                PageStep::Type { element, text } => Planned::Type { element, text },
                PageStep::Select { element, value } => Planned::Select { element, value },
                PageStep::Press { key } => Planned::Press {
                    key: keys::parse(key).map_err(|m| bad(i + 1, m))?,
                },
            })
        })
        .collect()
}

/// `https://Example.com/` → `https://example.com`; an origin has no path, query or fragment.
pub(super) fn normalize_origin(origin: &str) -> Result<String, String> {
    let o = origin
        .strip_suffix('/')
        .unwrap_or(origin)
        .to_ascii_lowercase();
    let host = o.strip_prefix("https://").unwrap_or("");
    if host.is_empty()
        || host.contains(['/', '?', '#', '@'])
        || host.chars().any(char::is_whitespace)
    {
        return Err(format!("{origin:?} is not an https origin"));
    }
    Ok(o)
}

/// A helper failure before anything was dispatched.
fn before_dispatch(error: CdpError) -> StepFailure {
    match error {
        CdpError::WorldGone | CdpError::Interrupted => StepFailure::before(STALE_REF),
        other => StepFailure::before(format!(
            "The page did not answer ({}); nothing was done",
            chain(&other)
        )),
    }
}

/// A helper failure of a call that checks and dispatches in one evaluation.
fn during_dispatch(error: CdpError) -> StepFailure {
    match error {
        // The call never ran: the document it belonged to is gone.
        CdpError::WorldGone => StepFailure::before(STALE_REF),
        other => StepFailure::after(format!(
            "The step was not confirmed ({}); inspect the screen before continuing",
            chain(&other)
        )),
    }
}

/// Turns a helper reply's error into a step failure. `value` is a select step's value, which
/// may be quoted (it is never a secret); fill text never is.
pub(super) fn check(reply: &Reply, value: Option<&str>) -> Result<(), StepFailure> {
    let Some(code) = reply.error.as_deref() else {
        return Ok(());
    };
    let detail = reply.detail.as_deref().unwrap_or("another element");
    let message = match code {
        "stale" => STALE_REF.to_owned(),
        "disabled" => DISABLED.to_owned(),
        "covered" => format!("Element is covered by {detail}; the click was not sent"),
        "offscreen" => "Element could not be scrolled into view; the click was not sent".to_owned(),
        "notfillable" => format!("Element cannot be filled (it is a {detail}); use click"),
        "readonly" => "Element is read-only".to_owned(),
        "notselect" => "Element is not a select; use fill or click".to_owned(),
        "nooption" => format!(
            "No option has the value or text {:?}",
            value.unwrap_or_default()
        ),
        "optiondisabled" => "That option is disabled".to_owned(),
        "focus" => "Element could not be focused for typing".to_owned(),
        "verify" => "The field did not keep the filled value; take a fresh snapshot".to_owned(),
        "origin" => "Saved login refused: the page is not an HTTPS page of that origin".to_owned(),
        "nocrypto" => "Saved login refused: the page is not a secure page".to_owned(),
        other => format!("The page helper failed ({other})"),
    };
    Err(StepFailure {
        uncertain: reply.dispatched,
        error: message,
    })
}

/// Like [`check`], naming the origin a saved-login fill was refused for.
fn check_origin(reply: &Reply, origin: Option<&str>) -> Result<(), StepFailure> {
    match (reply.error.as_deref(), origin) {
        (Some("origin"), Some(o)) => Err(StepFailure::before(format!(
            "Saved login refused: the page is not an HTTPS page of {o}"
        ))),
        _ => check(reply, None),
    }
}
