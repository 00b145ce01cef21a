//! `/v1/computers/{id}/screens`: per-bot desktops, computer_observe and computer_act.
//!
//! Bodies are the [`crate::schema::screen`] types. A batch's actions are read one by one as
//! typed actions, so a bad one is named by its position (`action 2: …`) in the words the API has
//! always used ([`misread`]); each is converted to the wire [`desktop::Action`] with the
//! documented defaults (docs/screens.md#observe-and-act), and the whole batch is validated before
//! it is sent; the guest validates it again before anything runs. Every call carries the bot's
//! lease, checked against the database here and against the fence on the guest.

use super::body::{invalid_json, json_response, read_json_bytes, ApiError, RespBody};
use super::{bot_json, parse_lease, Api};
use crate::activity::CommandStart;
use crate::core::CoreError;
use crate::guest;
use crate::schema::activity::CommandAction;
use crate::schema::screen::{
    self, ActRequest, ActResult, Cursor, LeaseBody, Mark, Observation, RegionImage, Screen,
    ScreenList, ScreenReleased, Window,
};
use base64::Engine;
use gateway_proto::desktop::{
    self, validate_actions, validate_frame, validate_observe, Action, FrameKind, FrameSize,
    MouseButton, ObserveOptions, ObserveRequest, ScreenInfo, ScreenRelease, ScreenRequest,
    ScrollDirection, SendMode, DEFAULT_SCROLL, DEFAULT_WAIT_MS,
};
use gateway_proto::op::ScreenListRequest;
use gateway_proto::{BotId, LeaseToken};
use hyper::body::Incoming;
use hyper::{Response, StatusCode};
use serde::Deserialize;
use serde_json::{Number, Value};
use std::sync::Arc;

/// What an unchanged observation says instead of an image.
const UNCHANGED_NOTE: &str =
    "The screen is unchanged since the previous observation; the previous screenshot remains valid.";

fn lease_of(raw: Option<&str>) -> Result<LeaseToken, ApiError> {
    parse_lease(raw.ok_or_else(|| ApiError::bad_request("lease is required"))?)
}

fn screen_view(s: ScreenInfo) -> Screen {
    Screen {
        bot: s.bot.as_str().to_string(),
        slot: s.slot,
        display: s.display,
        width: s.width,
        height: s.height,
        browser_pid: s.browser_pid,
        started: s.started,
        idle_ms: s.idle_ms,
        run_active: false,
        waiting_takeover: false,
        control_expires_at_ms: None,
    }
}

/// The bot named in the path and the lease its body must hold.
async fn bot_and_lease(
    bot: BotId,
    req: hyper::Request<Incoming>,
) -> Result<(BotId, LeaseToken), ApiError> {
    let (bot, body): (_, LeaseBody) = bot_json(bot, req).await?;
    Ok((bot, lease_of(body.lease.as_deref())?))
}

pub async fn ensure(
    api: &Arc<Api>,
    id: &str,
    bot: BotId,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let (bot, lease) = bot_and_lease(bot, req).await?;
    let screen = api
        .core
        .call_screen(id, ScreenRequest { bot, lease })
        .await?;
    Ok(json_response(StatusCode::OK, &screen_view(screen)))
}

pub async fn release(
    api: &Arc<Api>,
    id: &str,
    bot: BotId,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let (bot, body): (_, LeaseBody) = bot_json(bot, req).await?;
    let lease = body.lease.as_deref().map(parse_lease).transpose()?;
    api.core.call(id, ScreenRelease { bot, lease }).await?;
    Ok(json_response(
        StatusCode::OK,
        &ScreenReleased { released: true },
    ))
}

/// `GET …/screens`: the guest's desktops, each with what a person deciding to take over needs
/// (whether a run holds the bot, whether it waits for a person, the user's control's end).
pub async fn list(api: &Arc<Api>, id: &str) -> Result<Response<RespBody>, ApiError> {
    use crate::lease::LeaseStore;
    let all = api.core.call(id, ScreenListRequest).await?;
    let c = api.core.get(id).await?;
    let now = crate::clock::now_ms();
    let mut screens = Vec::with_capacity(all.len());
    for s in all {
        let bot = s.bot.clone();
        let mut view = screen_view(s);
        let run = api
            .core
            .leases
            .get(&c.id, &bot, now)
            .await
            .map_err(|e| ApiError::from(crate::core::CoreError::Lease(e)))?;
        let live = api
            .core
            .live
            .store
            .get(&c.id, &bot)
            .await
            .map_err(crate::live::authority::LiveError::from)?;
        view.run_active = run.is_some();
        view.waiting_takeover = run
            .as_ref()
            .is_some_and(|r| live.waiting_takeover.as_ref() == Some(&r.token));
        view.control_expires_at_ms = live.control_at(now).map(|c| c.expires_at_ms);
        screens.push(view);
    }
    Ok(json_response(StatusCode::OK, &ScreenList { screens }))
}

/// What a regions observation says besides its regions.
const REGIONS_NOTE: &str = "Only the regions changed since the previous observation are sent: \
     paste each region's image at its x, y onto the previous frame (baseFrameId).";

/// The wire options of an observe body's options (docs/screens.md#observe-and-act), checked
/// as the guest will check them.
pub(super) fn wire_options(o: &screen::ObserveOptions) -> Result<ObserveOptions, ApiError> {
    if o.changes && o.full {
        return Err(ApiError::bad_request(
            "changes and full exclude each other: full always sends the whole frame",
        ));
    }
    let send = match (o.changes, o.full) {
        (true, _) => SendMode::Changes,
        (_, true) => SendMode::Full,
        _ => SendMode::Auto,
    };
    let options = ObserveOptions {
        width: o.width,
        marks: o.marks,
        send,
        budget: o.budget,
    };
    validate_observe(&options).map_err(|e| ApiError::bad_request(e.message))?;
    Ok(options)
}

/// The observation (docs/screens.md#observe-and-act): the PNG in base64, the changed regions'
/// PNGs, or a note that the previous one stands; with the marks when asked. The guest client
/// checked that the regions' lengths add up to the bytes received.
fn observation(o: guest::Observation) -> Observation {
    let meta = o.meta;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut regions = Vec::new();
    let (image, note, kind) = match meta.kind {
        FrameKind::Unchanged => (None, Some(UNCHANGED_NOTE.to_string()), "unchanged"),
        FrameKind::Full => (Some(b64(&o.png)), None, "full"),
        FrameKind::Regions => {
            let mut at = 0usize;
            for r in &meta.regions {
                let len = usize::try_from(r.png_len).unwrap_or(usize::MAX);
                let bytes = o.png.get(at..at.saturating_add(len)).unwrap_or_default();
                at = at.saturating_add(len);
                regions.push(RegionImage {
                    x: r.x,
                    y: r.y,
                    width: r.width,
                    height: r.height,
                    image: b64(bytes),
                });
            }
            (None, Some(REGIONS_NOTE.to_string()), "regions")
        }
    };
    let (marks, marks_note) = match meta.marks {
        Some(m) => (
            Some(
                m.items
                    .into_iter()
                    .map(|m| Mark {
                        element: m.element,
                        role: m.role,
                        name: m.name,
                        x: m.x,
                        y: m.y,
                        width: m.width,
                        height: m.height,
                    })
                    .collect(),
            ),
            m.note,
        ),
        None => (None, None),
    };
    Observation {
        frame_id: meta.frame_id,
        captured_at: meta.captured_at_ms,
        mime_type: "image/png".to_string(),
        width: meta.width,
        height: meta.height,
        screen_width: meta.screen_width,
        screen_height: meta.screen_height,
        kind: kind.to_string(),
        base_frame_id: meta.base_frame_id,
        regions,
        marks,
        marks_note,
        cursor: Cursor {
            x: meta.cursor.0,
            y: meta.cursor.1,
        },
        active_window: meta.active_window.map(|w| Window {
            id: w.id,
            title: w.title,
        }),
        unchanged: meta.unchanged,
        image,
        note,
    }
}

pub async fn observe(
    api: &Arc<Api>,
    id: &str,
    bot: BotId,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let (bot, body): (_, screen::ObserveRequest) = bot_json(bot, req).await?;
    let lease = lease_of(body.lease.as_deref())?;
    let options = wire_options(&body.options())?;
    let taken = observe_bot(api, id, bot, lease, options).await?;
    Ok(json_response(StatusCode::OK, &taken))
}

/// computer_observe for `bot` under `lease`: the operation behind `POST …/observe` and MCP's
/// `computer_observe`.
pub(super) async fn observe_bot(
    api: &Arc<Api>,
    id: &str,
    bot: BotId,
    lease: LeaseToken,
    options: ObserveOptions,
) -> Result<Observation, ApiError> {
    let req = ObserveRequest {
        bot: bot.clone(),
        lease,
        options,
    };
    let taken = api
        .core
        .with_screen(id, &bot, || async {
            let guest = api.core.guest_for(id, &req).await?;
            Ok::<_, CoreError>(guest.observe(req.clone()).await?)
        })
        .await?;
    Ok(observation(taken))
}

pub async fn act(
    api: &Arc<Api>,
    id: &str,
    bot: BotId,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let result = act_batch(api, id, bot, &read_json_bytes(req.into_body()).await?).await?;
    Ok(json_response(StatusCode::OK, &result))
}

/// computer_act: a batch body (`{lease, actions, observe?, settle_ms?}`) read, then run as
/// [`Batch::run`] does; `POST …/act`.
async fn act_batch(
    api: &Arc<Api>,
    id: &str,
    bot: BotId,
    body: &[u8],
) -> Result<ActResult, ApiError> {
    let (body, lease, actions) = read_batch(body)?;
    let batch = Batch {
        lease,
        actions,
        observe: body.observe,
        settle_ms: body.settle_ms,
        frame: body.frame.map(|f| FrameSize {
            width: f.width,
            height: f.height,
        }),
        observe_options: body
            .observe_options
            .as_ref()
            .map(wire_options)
            .transpose()?
            .unwrap_or_default(),
    };
    batch.run(api, id, bot).await
}

/// A computer_act batch, typed: the operation behind `POST …/act` and MCP's `computer_act`.
pub(super) struct Batch {
    pub lease: LeaseToken,
    pub actions: Vec<Action>,
    pub observe: bool,
    pub settle_ms: Option<u32>,
    /// The coordinate space of the pointer actions (`None`: screen pixels).
    pub frame: Option<FrameSize>,
    pub observe_options: ObserveOptions,
}

impl Batch {
    /// MCP's batch: its actions read one by one, each refused in the words `POST …/act` uses
    /// for it (`action N: …`, the first bad one).
    pub(super) fn of_values(
        lease: LeaseToken,
        actions: &[Value],
        observe: bool,
        settle_ms: Option<u32>,
    ) -> Result<Self, ApiError> {
        let actions = actions
            .iter()
            .enumerate()
            .map(|(i, a)| read_action(a).map_err(|m| numbered(i, m)))
            .collect::<Result<_, _>>()?;
        Ok(Batch {
            lease,
            actions,
            observe,
            settle_ms,
            frame: None,
            observe_options: ObserveOptions::default(),
        })
    }

    /// The same batch with its pointer coordinates in a frame of `frame`'s size, observed with
    /// `options`.
    pub(super) fn in_frame(
        mut self,
        frame: Option<screen::FrameSize>,
        options: Option<&screen::ObserveOptions>,
    ) -> Result<Self, ApiError> {
        self.frame = frame.map(|f| FrameSize {
            width: f.width,
            height: f.height,
        });
        if let Some(o) = options {
            self.observe_options = wire_options(o)?;
        }
        Ok(self)
    }

    /// Validates, runs and records the batch for `bot` on computer `id`.
    pub(super) async fn run(
        self,
        api: &Arc<Api>,
        id: &str,
        bot: BotId,
    ) -> Result<ActResult, ApiError> {
        run_batch(api, id, bot, self).await
    }
}

async fn run_batch(
    api: &Arc<Api>,
    id: &str,
    bot: BotId,
    body: Batch,
) -> Result<ActResult, ApiError> {
    let Batch {
        lease,
        actions,
        observe,
        settle_ms,
        frame,
        observe_options,
    } = body;
    validate_actions(&actions, settle_ms).map_err(|e| ApiError::bad_request(e.message))?;
    if let Some(f) = &frame {
        validate_frame(f).map_err(|e| ApiError::bad_request(e.message))?;
    }
    // `open` and `launch` are recorded in the feed, one line each; other actions (pointer,
    // keys, typed text, which may be a password) are not.
    let records = feed_lines(id, &bot, &actions);
    let request = desktop::ActRequest {
        bot: bot.clone(),
        lease,
        actions,
        observe,
        settle_ms,
        frame,
        observe_options,
    };
    let acted = api
        .core
        .with_screen(id, &bot, || async {
            let guest = api.core.guest_for(id, &request).await?;
            Ok::<_, CoreError>(guest.act(request.clone()).await?)
        })
        .await;
    let acted = match acted {
        // No such computer: no feed to record in.
        Err(e @ CoreError::NotFound(_)) => return Err(e.into()),
        other => other.map_err(ApiError::from),
    };
    if !records.is_empty() {
        let activity = api.core.activity.clone();
        let result = match &acted {
            Ok(_) => Ok(None),
            Err(e) => Err((format!("the batch failed: {}", e.message), e.uncertain)),
        };
        tokio::spawn(async move {
            for r in &records {
                activity.action(r, result.clone()).await;
            }
        });
    }
    let (outcome, taken) = acted?;
    let result = ActResult {
        ok: true,
        completed: outcome.completed,
        settled_ms: outcome.settled_ms,
        settled: outcome.settled,
        observation: taken.map(observation),
    };
    Ok(result)
}

/// The feed's lines of a batch: its `open` and `launch` actions.
fn feed_lines(id: &str, bot: &BotId, actions: &[Action]) -> Vec<CommandStart> {
    actions
        .iter()
        .filter_map(|a| {
            let (action, line) = match a {
                Action::Open { target } => (CommandAction::Open, target.clone()),
                Action::Launch { application, uri } => (
                    CommandAction::Launch,
                    match uri {
                        Some(uri) => format!("{application} {uri}"),
                        None => application.clone(),
                    },
                ),
                _ => return None,
            };
            Some(CommandStart::action(id, Some(bot.as_str()), action, line))
        })
        .collect()
}

/// A computer_act body, its lease, and its actions as the guest takes them (taken out of the
/// body). The first error is the one reported: the body's shape, then the lease, then each
/// action in turn.
fn read_batch(bytes: &[u8]) -> Result<(ActRequest, LeaseToken, Vec<Action>), ApiError> {
    super::body::check_object(bytes)?;
    let mut body: ActRequest =
        serde_json::from_slice(bytes).map_err(|e| refused_batch(bytes, e))?;
    let lease = parse_lease(&body.lease)?;
    let actions = std::mem::take(&mut body.actions)
        .into_iter()
        .enumerate()
        .map(|(i, a)| wire_action(a).map_err(|m| numbered(i, m)))
        .collect::<Result<_, _>>()?;
    Ok((body, lease, actions))
}

/// The refusal of action `i` (from 0) of a batch.
fn numbered(i: usize, message: String) -> ApiError {
    ApiError::bad_request(format!("action {}: {message}", i + 1))
}

/// Why a computer_act body did not parse (serde said `e`), as the API has always said it: a
/// malformed body as such, else a bad lease, else the first bad action by its position.
fn refused_batch(bytes: &[u8], e: serde_json::Error) -> ApiError {
    // The body with its actions set aside: when that parses, an action is what was wrong.
    let Ok(Value::Object(mut shape)) = serde_json::from_slice::<Value>(bytes) else {
        return invalid_json(e);
    };
    let items = match shape.get_mut("actions") {
        Some(Value::Array(items)) => std::mem::take(items),
        _ => return invalid_json(e),
    };
    let body = match ActRequest::deserialize(&Value::Object(shape)) {
        Ok(body) => body,
        // `e` is that error with its position, unless serde met a bad action first.
        Err(wrong) if e.to_string().starts_with(&wrong.to_string()) => return invalid_json(e),
        Err(wrong) => return invalid_json(wrong),
    };
    if let Err(bad_lease) = parse_lease(&body.lease) {
        return bad_lease;
    }
    match items
        .iter()
        .enumerate()
        .find_map(|(i, a)| Some((i, read_action(a).err()?)))
    {
        Some((i, message)) => numbered(i, message),
        None => invalid_json(e),
    }
}

/// Reads one desktop action object (`{"type": "click", ...}`) as the typed action, then as the wire
/// action with the contract's defaults; a refusal in the words the API has always used.
fn read_action(raw: &Value) -> Result<Action, String> {
    let typed = screen::Action::deserialize(raw)
        .map_err(|e| misread(raw).unwrap_or_else(|| e.to_string()))?;
    wire_action(typed)
}

/// A coordinate rounded to a pixel.
fn pixel(n: &Number, name: &str) -> Result<i64, String> {
    n.as_i64()
        .or_else(|| n.as_f64().map(|f| f.round() as i64))
        .ok_or_else(|| format!("{name} must be a number"))
}

fn wire_button(b: Option<screen::MouseButton>) -> MouseButton {
    match b {
        None | Some(screen::MouseButton::Left) => MouseButton::Left,
        Some(screen::MouseButton::Right) => MouseButton::Right,
    }
}

/// The wire action of a typed one: coordinates rounded, defaults filled in, `open`'s target
/// picked (`target`, else `url`, else `path`).
fn wire_action(a: screen::Action) -> Result<Action, String> {
    use screen::Action as A;
    Ok(match a {
        A::Click {
            element: Some(element),
            x: None,
            y: None,
            button,
            double,
        } => Action::ClickRef {
            element,
            button: wire_button(button),
            double: double.unwrap_or(false),
        },
        A::Click {
            element: Some(_), ..
        } => return Err("click takes x and y or ref, not both".to_string()),
        A::Click {
            x,
            y,
            button,
            double,
            element: None,
        } => Action::Click {
            x: pixel(&x.ok_or("x is required")?, "x")?,
            y: pixel(&y.ok_or("y is required")?, "y")?,
            button: wire_button(button),
            double: double.unwrap_or(false),
        },
        A::Move { x, y } => Action::Move {
            x: pixel(&x, "x")?,
            y: pixel(&y, "y")?,
        },
        A::Down { x, y, button } => Action::Down {
            x: pixel(&x, "x")?,
            y: pixel(&y, "y")?,
            button: wire_button(button),
        },
        A::Up { x, y, button } => Action::Up {
            x: pixel(&x, "x")?,
            y: pixel(&y, "y")?,
            button: wire_button(button),
        },
        A::Type { text } => Action::Type { text },
        A::Key { key, modifiers } => Action::Key {
            key,
            modifiers: modifiers.unwrap_or_default(),
        },
        A::Scroll { direction, amount } => Action::Scroll {
            direction: match direction {
                screen::ScrollDirection::Up => ScrollDirection::Up,
                screen::ScrollDirection::Down => ScrollDirection::Down,
            },
            amount: amount.unwrap_or(DEFAULT_SCROLL),
        },
        A::Wait { ms } => Action::Wait {
            ms: ms.unwrap_or(DEFAULT_WAIT_MS),
        },
        A::Focus { application, uri } => Action::Focus { application, uri },
        A::Launch { application, uri } => Action::Launch { application, uri },
        A::Open { path, url, target } => Action::Open {
            target: target.or(url).or(path).ok_or("open needs a path or url")?,
        },
    })
}

/// How a field of an action is read, to word a refusal. (A `button` that is not a string and a
/// `double` that is not a boolean were once read as `left` and `false`; the typed action refuses
/// them, and [`Field::misread`] says so.)
#[derive(Clone, Copy)]
enum Field {
    Coord,
    Button,
    Flag,
    Text,
    OptText,
    Modifiers,
    Direction,
    Amount,
    Ms,
}

/// Each action type's fields, in the order the API has always checked them.
const FIELDS: &[(&str, &[(&str, Field)])] = {
    use Field::*;
    &[
        (
            "click",
            &[
                ("x", Coord),
                ("y", Coord),
                ("ref", OptText),
                ("button", Button),
                ("double", Flag),
            ],
        ),
        ("move", &[("x", Coord), ("y", Coord)]),
        ("down", &[("x", Coord), ("y", Coord), ("button", Button)]),
        ("up", &[("x", Coord), ("y", Coord), ("button", Button)]),
        ("type", &[("text", Text)]),
        ("key", &[("key", Text), ("modifiers", Modifiers)]),
        ("scroll", &[("direction", Direction), ("amount", Amount)]),
        ("wait", &[("ms", Ms)]),
        ("focus", &[("application", Text), ("uri", OptText)]),
        ("launch", &[("application", Text), ("uri", OptText)]),
        (
            "open",
            &[("target", OptText), ("url", OptText), ("path", OptText)],
        ),
    ]
};

impl Field {
    /// What is wrong with `v` as field `name`, if anything.
    fn misread(self, name: &str, v: &Value) -> Option<String> {
        let bounded = |fits: fn(u64) -> bool| !v.is_null() && !v.as_u64().is_some_and(fits);
        match self {
            Self::Coord => match v {
                Value::Number(n) => pixel(n, name).err(),
                _ => Some(format!("{name} is required")),
            },
            Self::Button => match v {
                Value::Null => None,
                Value::String(b) if b == "left" || b == "right" => None,
                Value::String(other) => {
                    Some(format!("button must be left or right, got {other:?}"))
                }
                other => Some(format!("button must be left or right, got {other}")),
            },
            Self::Flag => {
                (!v.is_null() && !v.is_boolean()).then(|| format!("{name} must be true or false"))
            }
            Self::Text => (!v.is_string()).then(|| format!("{name} must be a string")),
            Self::OptText => {
                (!v.is_null() && !v.is_string()).then(|| format!("{name} must be a string"))
            }
            Self::Modifiers => match v {
                Value::Null => None,
                Value::Array(a) => a
                    .iter()
                    .any(|m| !m.is_string())
                    .then(|| "modifiers must be strings".to_string()),
                _ => Some("modifiers must be an array".to_string()),
            },
            Self::Direction => match v.as_str() {
                Some("up" | "down") => None,
                _ => Some("direction must be up or down".to_string()),
            },
            Self::Amount => {
                bounded(|n| u8::try_from(n).is_ok()).then(|| "amount must be 1..20".to_string())
            }
            Self::Ms => {
                bounded(|n| u32::try_from(n).is_ok()).then(|| "ms must be 0..5000".to_string())
            }
        }
    }
}

/// Why `raw` is not an action, in the words the API has always used: the first problem in the
/// order it has always checked (type, then unknown fields, then each field's value). `None`
/// when none of those is found: serde's own words then.
fn misread(raw: &Value) -> Option<String> {
    let Some(kind) = raw.get("type").and_then(Value::as_str) else {
        return Some("type is required".to_string());
    };
    let Some((_, fields)) = FIELDS.iter().find(|(k, _)| *k == kind) else {
        return Some(format!("unknown action type {kind:?}"));
    };
    let known = |k: &str| k == "type" || fields.iter().any(|(f, _)| *f == k);
    if let Some(k) = raw.as_object()?.keys().find(|k| !known(k)) {
        return Some(format!("unknown field {k:?} for {kind}"));
    }
    // A click by ref has no coordinates.
    let by_ref = kind == "click" && raw.get("ref").is_some_and(|r| !r.is_null());
    fields
        .iter()
        .filter(|(_, field)| !(by_ref && matches!(field, Field::Coord)))
        .find_map(|(name, field)| field.misread(name, &raw[*name]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_parse_with_the_contract_defaults() {
        let a = read_action(&serde_json::json!({"type": "click", "x": 10, "y": 20.4})).unwrap();
        assert_eq!(
            a,
            Action::Click {
                x: 10,
                y: 20,
                button: MouseButton::Left,
                double: false
            }
        );
        let a = read_action(&serde_json::json!({"type": "scroll", "direction": "down"})).unwrap();
        assert_eq!(
            a,
            Action::Scroll {
                direction: ScrollDirection::Down,
                amount: 3
            }
        );
        let a = read_action(&serde_json::json!({"type": "wait"})).unwrap();
        assert_eq!(a, Action::Wait { ms: 350 });
        let a = read_action(&serde_json::json!({"type": "key", "key": "a", "modifiers": ["ctrl"]}))
            .unwrap();
        assert_eq!(
            a,
            Action::Key {
                key: "a".into(),
                modifiers: vec!["ctrl".into()]
            }
        );
        let a = read_action(&serde_json::json!({"type": "open", "url": "http://x/"})).unwrap();
        assert_eq!(
            a,
            Action::Open {
                target: "http://x/".into()
            }
        );
    }

    #[test]
    fn a_click_takes_coordinates_or_a_ref() {
        let a = read_action(&serde_json::json!({"type": "click", "ref": "e15", "double": true}))
            .unwrap();
        assert_eq!(
            a,
            Action::ClickRef {
                element: "e15".into(),
                button: MouseButton::Left,
                double: true
            }
        );
        let err = read_action(&serde_json::json!({"type": "click", "ref": "e1", "x": 1, "y": 2}))
            .unwrap_err();
        assert!(err.contains("not both"), "{err}");
        let err = read_action(&serde_json::json!({"type": "click", "x": 1})).unwrap_err();
        assert_eq!(err, "y is required");
        let err = read_action(&serde_json::json!({"type": "click", "ref": 5})).unwrap_err();
        assert!(err.contains("ref must be a string"), "{err}");
    }

    #[test]
    fn observe_options_are_checked_before_the_guest() {
        let o = |v: serde_json::Value| {
            wire_options(&serde_json::from_value::<screen::ObserveOptions>(v).unwrap())
        };
        assert_eq!(
            o(serde_json::json!({"width": 640, "changes": true})).unwrap(),
            ObserveOptions {
                width: Some(640),
                marks: false,
                send: SendMode::Changes,
                budget: None
            }
        );
        for (bad, want) in [
            (serde_json::json!({"width": 0}), "width must be"),
            (
                serde_json::json!({"changes": true, "full": true}),
                "exclude each other",
            ),
            (
                serde_json::json!({"budget": 5}),
                "budget applies only to changes",
            ),
        ] {
            let err = o(bad.clone()).unwrap_err();
            assert!(err.message.contains(want), "{bad}: {}", err.message);
        }
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
            let err = read_action(&v).unwrap_err();
            assert!(err.contains(want), "{v}: {err}");
        }
    }

    #[test]
    fn a_batch_names_its_bad_action_after_checking_the_body_and_lease() {
        let err = |body: &str| read_batch(body.as_bytes()).unwrap_err().message;
        assert_eq!(
            err(r#"{"lease":"r:1","actions":[{"type":"wait"},{"type":"fly"}]}"#),
            "action 2: unknown action type \"fly\""
        );
        assert_eq!(
            err(r#"{"lease":"r:1","actions":[{"type":"wait"},{"type":"open"}]}"#),
            "action 2: open needs a path or url"
        );
        assert!(err(r#"{"lease":"bad","actions":[{"type":"fly"}]}"#).starts_with("lease: "));
        assert_eq!(
            err(r#"{"foo":1,"lease":"r:1","actions":[{"type":"fly"}]}"#),
            "invalid JSON body: unknown field `foo`, expected one of `lease`, `actions`, \
             `observe`, `settle_ms`, `frame`, `observe_options` at line 1 column 6"
        );
        let body = r#"{"lease":"r:1","actions":[{"type":"click","x":1.6,"y":2}],"observe":true}"#;
        let (body, _, actions) = read_batch(body.as_bytes()).unwrap();
        assert!(body.observe);
        assert_eq!(
            actions,
            [Action::Click {
                x: 2,
                y: 2,
                button: MouseButton::Left,
                double: false
            }]
        );
    }

    #[test]
    fn every_field_worded_is_one_of_the_typed_action() {
        for (kind, fields) in FIELDS {
            let mut raw = serde_json::Map::new();
            raw.insert("type".into(), (*kind).into());
            for (name, field) in *fields {
                let sample: Value = match field {
                    Field::Coord | Field::Amount | Field::Ms => 1.into(),
                    Field::Button => "left".into(),
                    Field::Flag => true.into(),
                    Field::Text | Field::OptText => "a".into(),
                    Field::Modifiers => vec!["ctrl"].into(),
                    Field::Direction => "up".into(),
                };
                raw.insert((*name).into(), sample);
            }
            let raw = Value::Object(raw);
            let typed = screen::Action::deserialize(&raw).unwrap();
            assert_eq!(serde_json::to_value(typed).unwrap(), raw);
        }
    }
}
