//! `/v1/computers/{id}/browser/{bot}/navigate|snapshot|act`: the page tools
//! (docs/screens.md#page-browser).
//!
//! URLs and step batches are validated here before anything is sent (and again on the guest).
//! A browser_act that fails after validation is a tool result, not an HTTP error: `200` with
//! `{ok: false, completed, uncertain, error, fallback: "computer_act"}`. Step texts (a fill may
//! carry a saved login's secret) are never logged: only the request path is.

use super::body::{json_response, ApiError, RespBody};
use super::{bot_json, parse_lease, Api};
use crate::schema::browser::{
    Element, PageDone, PageFailed, PageRequest, PageResult, Snapshot, Step,
};
use gateway_proto::page::{
    self, validate_steps, validate_url, NavigateRequest, PageActRequest, PageStep, SnapshotRequest,
    FALLBACK,
};
use gateway_proto::{BotId, LeaseToken};
use hyper::body::Incoming;
use hyper::{Response, StatusCode};
use std::sync::Arc;

/// One step as the guest takes it.
fn page_step(s: Step) -> PageStep {
    match s {
        Step::Click { element } => PageStep::Click { element },
        Step::Fill {
            element,
            text,
            origin,
        } => PageStep::Fill {
            element,
            text,
            origin,
        },
        Step::Type { element, text } => PageStep::Type { element, text },
        Step::Select { element, value } => PageStep::Select { element, value },
        Step::Press { key } => PageStep::Press { key },
    }
}

/// The page snapshot as the API shows it.
fn snapshot(s: page::Snapshot) -> Snapshot {
    let elements = s
        .elements
        .into_iter()
        .map(|e| Element {
            element: e.element,
            role: e.role,
            name: e.name,
            value: e.value,
            tag: e.tag,
        })
        .collect();
    Snapshot {
        url: s.url,
        title: s.title,
        elements,
        tree: s.tree,
    }
}

/// A successful page tool's answer; a browser_act's also says how many steps completed.
fn snapshot_answer(s: page::Snapshot, completed: Option<usize>) -> PageResult {
    PageResult::Done(PageDone {
        ok: true,
        snapshot: snapshot(s),
        completed,
    })
}

/// Which page tool a call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Navigate,
    Snapshot,
    Act,
}

pub async fn handle(
    api: &Arc<Api>,
    id: &str,
    bot: BotId,
    tool: Tool,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let (bot, body): (_, PageRequest) = bot_json(bot, req).await?;
    let lease = parse_lease(&body.lease)?;
    let result = run(api, id, bot, lease, tool, body.url, body.steps).await?;
    Ok(json_response(StatusCode::OK, &result))
}

/// One page tool for `bot` under `lease`, with its `url` (navigate) or `steps` (act): the
/// operation behind `POST …/browser/{bot}/{action}` and MCP's `browser_*` tools.
pub(super) async fn run(
    api: &Arc<Api>,
    id: &str,
    bot: BotId,
    lease: LeaseToken,
    tool: Tool,
    url: Option<String>,
    steps: Option<Vec<Step>>,
) -> Result<PageResult, ApiError> {
    match tool {
        Tool::Navigate => {
            let url = url.ok_or_else(|| ApiError::bad_request("url is required"))?;
            validate_url(&url).map_err(|e| ApiError::bad_request(e.message))?;
            let page = api
                .core
                .call_screen(id, NavigateRequest { bot, lease, url });
            Ok(snapshot_answer(page.await?, None))
        }
        Tool::Snapshot => {
            let page = api
                .core
                .call_screen(id, SnapshotRequest { bot, lease })
                .await?;
            Ok(snapshot_answer(page, None))
        }
        Tool::Act => {
            let steps: Vec<PageStep> = steps
                .ok_or_else(|| ApiError::bad_request("steps is required"))?
                .into_iter()
                .map(page_step)
                .collect();
            validate_steps(&steps).map_err(|e| ApiError::bad_request(e.message))?;
            let completed = steps.len();
            match api
                .core
                .call_screen(id, PageActRequest { bot, lease, steps })
                .await?
            {
                Ok(page) => Ok(snapshot_answer(page, Some(completed))),
                Err(f) => Ok(PageResult::Failed(PageFailed {
                    ok: false,
                    completed: f.completed,
                    uncertain: f.uncertain,
                    error: f.error,
                    fallback: FALLBACK.to_string(),
                })),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_parse_from_the_api_spelling() {
        let raw = serde_json::json!([
            {"type": "click", "ref": "e1"},
            {"type": "fill", "ref": "e2", "text": "x", "origin": "https://a.test"},
            {"type": "select", "ref": "e3", "value": "v"},
            {"type": "press", "key": "Enter"},
        ]);
        let steps: Vec<Step> = serde_json::from_value(raw).unwrap();
        let steps: Vec<PageStep> = steps.into_iter().map(page_step).collect();
        assert_eq!(
            steps[0],
            PageStep::Click {
                element: "e1".into()
            }
        );
        assert!(
            matches!(&steps[1], PageStep::Fill { origin: Some(o), .. } if o == "https://a.test")
        );
        assert!(
            serde_json::from_value::<Step>(serde_json::json!({"type": "hover", "ref": "e1"}))
                .is_err()
        );
        assert!(serde_json::from_value::<Step>(
            serde_json::json!({"type": "click", "ref": "e1", "x": 1})
        )
        .is_err());
    }
}
