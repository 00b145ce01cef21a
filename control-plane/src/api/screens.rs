//! `/v1/computers/{id}/screens`: per-bot desktops, computer_observe and computer_act.
//!
//! The JSON action vocabulary of contracts.md §4 is parsed here into the wire
//! [`gateway_proto::desktop::Action`]s, with the contract's defaults, and the whole batch is
//! validated before it is sent; the guest validates it again before anything runs. Every call
//! carries the bot's lease, checked against the database here and against the fence on the guest.

use super::body::{json_response, ApiError, RespBody};
use super::{bot_json, parse_lease, Api};
use crate::guest::Observation;
use base64::Engine;
use gateway_proto::desktop::{
    validate_actions, ActRequest, Action, MouseButton, ObserveRequest, ScreenInfo, ScreenRelease,
    ScreenRequest, ScrollDirection, DEFAULT_SCROLL, DEFAULT_WAIT_MS,
};
use gateway_proto::op::ScreenListRequest;
use gateway_proto::{BotId, LeaseToken};
use hyper::body::Incoming;
use hyper::{Response, StatusCode};
use serde::Deserialize;
use std::sync::Arc;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LeaseOnly {
    lease: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ActBody {
    lease: String,
    actions: Vec<serde_json::Value>,
    #[serde(default)]
    observe: bool,
    settle_ms: Option<u32>,
}

fn lease_of(raw: Option<&str>) -> Result<LeaseToken, ApiError> {
    parse_lease(raw.ok_or_else(|| ApiError::bad_request("lease is required"))?)
}

fn screen_view(s: &ScreenInfo) -> serde_json::Value {
    serde_json::json!({
        "bot": s.bot.as_str(), "slot": s.slot, "display": s.display,
        "width": s.width, "height": s.height, "browser_pid": s.browser_pid, "started": s.started,
    })
}

/// The bot named in the path and the lease its body must hold.
async fn bot_and_lease(
    bot: &str,
    req: hyper::Request<Incoming>,
) -> Result<(BotId, LeaseToken), ApiError> {
    let (bot, body): (_, LeaseOnly) = bot_json(bot, req).await?;
    Ok((bot, lease_of(body.lease.as_deref())?))
}

pub async fn ensure(
    api: &Arc<Api>,
    id: &str,
    bot: &str,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let (bot, lease) = bot_and_lease(bot, req).await?;
    let screen = api.core.call(id, ScreenRequest { bot, lease }).await?;
    Ok(json_response(StatusCode::OK, &screen_view(&screen)))
}

pub async fn release(
    api: &Arc<Api>,
    id: &str,
    bot: &str,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let (bot, body): (_, LeaseOnly) = bot_json(bot, req).await?;
    let lease = body.lease.as_deref().map(parse_lease).transpose()?;
    api.core.call(id, ScreenRelease { bot, lease }).await?;
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({ "released": true }),
    ))
}

pub async fn list(api: &Arc<Api>, id: &str) -> Result<Response<RespBody>, ApiError> {
    let all = api.core.call(id, ScreenListRequest).await?;
    let v: Vec<serde_json::Value> = all.iter().map(screen_view).collect();
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({ "screens": v }),
    ))
}

/// The §4 JSON of an observation.
fn observation_json(o: &Observation) -> serde_json::Value {
    let meta = &o.meta;
    let mut v = serde_json::json!({
        "frameId": meta.frame_id,
        "capturedAt": meta.captured_at_ms,
        "mimeType": "image/png",
        "width": meta.width,
        "height": meta.height,
        "cursor": { "x": meta.cursor.0, "y": meta.cursor.1 },
        "activeWindow": meta.active_window.as_ref().map(|w| serde_json::json!({ "id": w.id, "title": w.title })),
        "unchanged": meta.unchanged,
    });
    if meta.unchanged {
        v["image"] = serde_json::Value::Null;
        v["note"] = "The screen is unchanged since the previous observation; the previous screenshot remains valid.".into();
    } else {
        v["image"] = base64::engine::general_purpose::STANDARD
            .encode(&o.png)
            .into();
    }
    v
}

pub async fn observe(
    api: &Arc<Api>,
    id: &str,
    bot: &str,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let (bot, lease) = bot_and_lease(bot, req).await?;
    let req = ObserveRequest { bot, lease };
    let observation = api.core.guest_for(id, &req).await?.observe(req).await?;
    Ok(json_response(
        StatusCode::OK,
        &observation_json(&observation),
    ))
}

pub async fn act(
    api: &Arc<Api>,
    id: &str,
    bot: &str,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let (bot, body): (_, ActBody) = bot_json(bot, req).await?;
    let lease = parse_lease(&body.lease)?;
    let actions = body
        .actions
        .iter()
        .enumerate()
        .map(|(i, a)| {
            parse_action(a).map_err(|m| ApiError::bad_request(format!("action {}: {m}", i + 1)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    validate_actions(&actions, body.settle_ms).map_err(|e| ApiError::bad_request(e.message))?;
    let request = ActRequest {
        bot,
        lease,
        actions,
        observe: body.observe,
        settle_ms: body.settle_ms,
    };
    let guest = api.core.guest_for(id, &request).await?;
    let (outcome, observation) = guest.act(request).await?;
    let mut v = serde_json::json!({
        "ok": true,
        "completed": outcome.completed,
        "settledMs": outcome.settled_ms,
        "settled": outcome.settled,
    });
    if let Some(observation) = observation {
        v["observation"] = observation_json(&observation);
    }
    Ok(json_response(StatusCode::OK, &v))
}

fn coord(v: &serde_json::Value, k: &str) -> Result<i64, String> {
    match &v[k] {
        serde_json::Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f.round() as i64))
            .ok_or_else(|| format!("{k} must be a number")),
        _ => Err(format!("{k} is required")),
    }
}

fn string(v: &serde_json::Value, k: &str) -> Result<String, String> {
    v[k].as_str()
        .map(String::from)
        .ok_or_else(|| format!("{k} must be a string"))
}

fn opt_string(v: &serde_json::Value, k: &str) -> Result<Option<String>, String> {
    match &v[k] {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::String(s) => Ok(Some(s.clone())),
        _ => Err(format!("{k} must be a string")),
    }
}

fn button(v: &serde_json::Value) -> Result<MouseButton, String> {
    match v["button"].as_str() {
        None | Some("left") => Ok(MouseButton::Left),
        Some("right") => Ok(MouseButton::Right),
        Some(other) => Err(format!("button must be left or right, got {other:?}")),
    }
}

/// Parses one §4 action object (`{"type": "click", ...}`).
pub fn parse_action(v: &serde_json::Value) -> Result<Action, String> {
    let kind = v["type"].as_str().ok_or("type is required")?;
    let allowed: &[&str] = match kind {
        "click" => &["type", "x", "y", "button", "double"],
        "move" => &["type", "x", "y"],
        "down" | "up" => &["type", "x", "y", "button"],
        "type" => &["type", "text"],
        "key" => &["type", "key", "modifiers"],
        "scroll" => &["type", "direction", "amount"],
        "wait" => &["type", "ms"],
        "focus" | "launch" => &["type", "application", "uri"],
        "open" => &["type", "path", "url", "target"],
        other => return Err(format!("unknown action type {other:?}")),
    };
    if let Some(obj) = v.as_object() {
        if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(format!("unknown field {k:?} for {kind}"));
        }
    } else {
        return Err("an action must be an object".into());
    }
    Ok(match kind {
        "click" => Action::Click {
            x: coord(v, "x")?,
            y: coord(v, "y")?,
            button: button(v)?,
            double: v["double"].as_bool().unwrap_or(false),
        },
        "move" => Action::Move {
            x: coord(v, "x")?,
            y: coord(v, "y")?,
        },
        "down" => Action::Down {
            x: coord(v, "x")?,
            y: coord(v, "y")?,
            button: button(v)?,
        },
        "up" => Action::Up {
            x: coord(v, "x")?,
            y: coord(v, "y")?,
            button: button(v)?,
        },
        "type" => Action::Type {
            text: string(v, "text")?,
        },
        "key" => Action::Key {
            key: string(v, "key")?,
            modifiers: match &v["modifiers"] {
                serde_json::Value::Null => Vec::new(),
                serde_json::Value::Array(a) => a
                    .iter()
                    .map(|m| {
                        m.as_str()
                            .map(String::from)
                            .ok_or("modifiers must be strings")
                    })
                    .collect::<Result<_, _>>()?,
                _ => return Err("modifiers must be an array".into()),
            },
        },
        "scroll" => Action::Scroll {
            direction: match v["direction"].as_str() {
                Some("up") => ScrollDirection::Up,
                Some("down") => ScrollDirection::Down,
                _ => return Err("direction must be up or down".into()),
            },
            amount: match &v["amount"] {
                serde_json::Value::Null => DEFAULT_SCROLL,
                a => a
                    .as_u64()
                    .and_then(|n| u8::try_from(n).ok())
                    .ok_or("amount must be 1..20")?,
            },
        },
        "wait" => Action::Wait {
            ms: match &v["ms"] {
                serde_json::Value::Null => DEFAULT_WAIT_MS,
                m => m
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or("ms must be 0..5000")?,
            },
        },
        "focus" => Action::Focus {
            application: string(v, "application")?,
            uri: opt_string(v, "uri")?,
        },
        "launch" => Action::Launch {
            application: string(v, "application")?,
            uri: opt_string(v, "uri")?,
        },
        "open" => Action::Open {
            target: opt_string(v, "target")?
                .or(opt_string(v, "url")?)
                .or(opt_string(v, "path")?)
                .ok_or("open needs a path or url")?,
        },
        _ => unreachable!("kinds are checked above"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_parse_with_the_contract_defaults() {
        let a = parse_action(&serde_json::json!({"type": "click", "x": 10, "y": 20.4})).unwrap();
        assert_eq!(
            a,
            Action::Click {
                x: 10,
                y: 20,
                button: MouseButton::Left,
                double: false
            }
        );
        let a = parse_action(&serde_json::json!({"type": "scroll", "direction": "down"})).unwrap();
        assert_eq!(
            a,
            Action::Scroll {
                direction: ScrollDirection::Down,
                amount: 3
            }
        );
        let a = parse_action(&serde_json::json!({"type": "wait"})).unwrap();
        assert_eq!(a, Action::Wait { ms: 350 });
        let a =
            parse_action(&serde_json::json!({"type": "key", "key": "a", "modifiers": ["ctrl"]}))
                .unwrap();
        assert_eq!(
            a,
            Action::Key {
                key: "a".into(),
                modifiers: vec!["ctrl".into()]
            }
        );
        let a = parse_action(&serde_json::json!({"type": "open", "url": "http://x/"})).unwrap();
        assert_eq!(
            a,
            Action::Open {
                target: "http://x/".into()
            }
        );
    }

    #[test]
    fn bad_actions_say_what_is_wrong() {
        for (v, want) in [
            (serde_json::json!({"type": "fly"}), "unknown action type"),
            (
                serde_json::json!({"type": "click", "x": 1}),
                "y is required",
            ),
            (
                serde_json::json!({"type": "click", "x": 1, "y": 1, "button": "middle"}),
                "button",
            ),
            (
                serde_json::json!({"type": "click", "x": 1, "y": 1, "z": 1}),
                "unknown field",
            ),
            (
                serde_json::json!({"type": "scroll", "direction": "left"}),
                "direction",
            ),
            (serde_json::json!("click"), "type is required"),
        ] {
            let err = parse_action(&v).unwrap_err();
            assert!(err.contains(want), "{v}: {err}");
        }
    }
}
