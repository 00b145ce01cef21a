//! computer_act's actions on one desktop, run in order by [`run_batch`]: pointer and keys
//! through its [`Input`](crate::display::Input) (sent without waiting, one round trip per run of
//! them), and `wait`, `open`, `focus` and `launch` of the bot's browser or a program from
//! `PATH`. It also arms the desktop's settler before what the settle after the batch waits for.
//!
//! It leaves to others ([`super::Screens::act`]): validation, the refusal rule, the settle
//! itself and the observation.

use std::time::Duration;

use gateway_proto::desktop::{frame_to_screen, Action, FrameSize, MouseButton, ScrollDirection};
use gateway_proto::{BotId, ErrorCode, OpError};

use super::{failed, op_err, Desktop, Screens};
use crate::browser::Browser;
use crate::display::{self, Activation, Button, DisplayError, KeyCombo, WindowMatch};

/// The coordinate space of a batch's pointer actions: a frame's (mapped to the screen pixel at
/// the centre of the block each frame pixel covers) or, without `frame`, the screen's.
#[derive(Debug, Clone, Copy)]
pub(super) struct Space {
    pub frame: Option<FrameSize>,
    pub screen: FrameSize,
}

impl Space {
    /// The screen point of `(x, y)` given in this space.
    pub(super) fn point(&self, x: i64, y: i64) -> (i64, i64) {
        use gateway_proto::desktop::clamp_coord;
        match self.frame {
            Some(frame) => frame_to_screen(x, y, frame, self.screen),
            None => (clamp_coord(x), clamp_coord(y)),
        }
    }
}

fn button(b: MouseButton) -> Button {
    match b {
        MouseButton::Left => Button::Left,
        MouseButton::Right => Button::Right,
    }
}

/// Whether an application name means the bot's own browser.
fn is_browser(application: &str) -> bool {
    matches!(
        application.to_ascii_lowercase().as_str(),
        "browser" | "chrome" | "chromium" | "google-chrome"
    )
}

/// Opens a URL in a new tab of the bot's browser. Only the CDP handle crosses the await: the
/// desktop's X clients are not `Sync`.
fn open_in_browser(
    d: &Desktop,
    url: &str,
) -> impl std::future::Future<Output = Result<(), OpError>> + Send + 'static {
    let cdp = d.browser.as_ref().map(Browser::cdp);
    let url = url.to_string();
    async move {
        let cdp = cdp.ok_or_else(|| failed("the browser is not running"))?;
        cdp.open_tab(&url).await.map_err(failed)?;
        Ok(())
    }
}

/// An `open` target as a URL: http(s) as given, a home path as `file://`.
fn open_url(home: &std::path::Path, target: &str) -> Result<String, OpError> {
    if let Some(rest) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    {
        if rest.is_empty() {
            return Err(op_err(ErrorCode::BadRequest, "open needs a host"));
        }
        return Ok(target.to_string());
    }
    if target.contains("://") || target.starts_with("javascript:") || target.starts_with("data:") {
        return Err(op_err(
            ErrorCode::BadRequest,
            format!("open takes a home path or an http(s) URL, not {target:?}"),
        ));
    }
    let rel = crate::home::normalize(target)?;
    let path = home.join(rel.to_string());
    Ok(format!("file://{}", path.display()))
}

/// Whether `action` is pointer or keyboard input: sent on the desktop's
/// [`Input`](crate::display::Input) without waiting, a run of them confirmed by one
/// [`Input::finish`](crate::display::Input::finish).
fn is_input(action: &Action) -> bool {
    (action.is_visual() && !matches!(action, Action::ClickRef { .. }))
        || matches!(action, Action::Type { .. })
}

/// Sends an input action ([`is_input`]); the server's answer comes with the run's
/// [`Input::finish`](crate::display::Input::finish). Other actions do nothing here.
fn send_input(d: &mut Desktop, action: &Action, space: Space) -> Result<(), DisplayError> {
    tokio::task::block_in_place(|| match action {
        Action::Click {
            x,
            y,
            button: b,
            double,
        } => {
            let (x, y) = space.point(*x, *y);
            d.input.click(x, y, button(*b), *double)
        }
        Action::Move { x, y } => {
            let (x, y) = space.point(*x, *y);
            d.input.move_to(x, y).map(drop)
        }
        Action::Down { x, y, button: b } => {
            let (x, y) = space.point(*x, *y);
            d.input.button_down(x, y, button(*b))
        }
        Action::Up { x, y, button: b } => {
            let (x, y) = space.point(*x, *y);
            d.input.button_up(x, y, button(*b))
        }
        Action::Type { text } => d.input.type_text(text),
        Action::Key { key, modifiers } => d.input.key(&KeyCombo::parse(key, modifiers)?),
        Action::Scroll { direction, amount } => {
            let dir = match direction {
                ScrollDirection::Up => display::ScrollDirection::Up,
                ScrollDirection::Down => display::ScrollDirection::Down,
            };
            d.input.scroll(dir, u32::from(*amount))
        }
        Action::Wait { .. }
        | Action::Open { .. }
        | Action::Focus { .. }
        | Action::Launch { .. }
        | Action::ClickRef { .. } => Ok(()),
    })
}

/// An input failure as the agent sees it: an unknown key name is the request's fault.
fn input_err(e: DisplayError) -> OpError {
    match e {
        DisplayError::UnknownKey(_) => op_err(ErrorCode::BadRequest, e),
        other => failed(other),
    }
}

/// Runs an action that is not input ([`is_input`]): `wait`, `open`, `focus`, `launch`.
async fn run_other(
    screens: &Screens,
    bot: &BotId,
    d: &mut Desktop,
    action: &Action,
    space: Space,
) -> Result<(), OpError> {
    match action {
        Action::Wait { ms } => {
            tokio::time::sleep(Duration::from_millis(u64::from(*ms))).await;
            Ok(())
        }
        Action::Open { target } => {
            let url = open_url(&screens.cfg.home, target)?;
            open_in_browser(d, &url).await
        }
        Action::Focus { application, uri } => {
            let found =
                tokio::task::block_in_place(|| d.windows.find(WindowMatch::Class(application)))
                    .map_err(failed)?;
            match found.first() {
                Some(w) => {
                    let id = w.id;
                    tokio::task::block_in_place(|| d.windows.activate(id))
                        .map_err(failed)
                        .map(|_: Activation| ())?;
                    if let Some(u) = uri {
                        if is_browser(application) {
                            open_in_browser(d, &open_url(&screens.cfg.home, u)?).await?;
                        }
                    }
                    Ok(())
                }
                None => launch(screens, bot, d, application, uri.as_deref()).await,
            }
        }
        Action::Launch { application, uri } => {
            launch(screens, bot, d, application, uri.as_deref()).await
        }
        Action::ClickRef {
            element,
            button: b,
            double,
        } => click_ref(d, element, *b, *double, space).await,
        // Input: sent by `send_input` and confirmed by `run_batch`.
        _ => Ok(()),
    }
}

/// Runs a validated batch in order. Input actions are sent without waiting, and each run of
/// them is confirmed by one round trip ([`Input::finish`](crate::display::Input::finish)) before
/// anything else happens (a `wait`, `open`, `focus` or `launch`, which must come after the input
/// took effect) and at the end: a batch of input alone costs one X round trip. With `arm`, the
/// desktop's settler is armed before each run of input and before each `open`, `focus` and
/// `launch`, so the settle after the batch sees the damage its last causes drew (not before a
/// `wait`: what is drawn during a wait answers what came before it). Returns whether anything
/// armed it.
///
/// On failure: the index of the action that failed and why. An X error found after the fact is
/// attributed to the action that sent the refused request; a failure that cannot be attributed
/// (the connection broke) counts from the start of the unconfirmed run, whose effect is unknown.
pub(super) async fn run_batch(
    screens: &Screens,
    bot: &BotId,
    d: &mut Desktop,
    actions: &[Action],
    arm: bool,
    space: Space,
) -> Result<bool, (usize, OpError)> {
    let mut armed = false;
    // The first action of the run of input not yet confirmed.
    let mut run: Option<usize> = None;
    for (i, action) in actions.iter().enumerate() {
        if is_input(action) {
            if run.is_none() {
                if arm {
                    arm_settler(d).map_err(|e| (i, e))?;
                    armed = true;
                }
                run = Some(i);
            }
            if let Err(error) = send_input(d, action, space) {
                let start = run.unwrap_or(i);
                let own = match &error {
                    DisplayError::InputAction { action, .. } => start + action,
                    _ => i,
                };
                // An earlier action of the run may have been refused first.
                let earlier = finish_input(d, start).err().filter(|(j, _)| *j < own);
                return Err(earlier.unwrap_or((own, input_err(error))));
            }
        } else {
            if let Some(start) = run.take() {
                finish_input(d, start)?;
            }
            if arm && !matches!(action, Action::Wait { .. }) {
                arm_settler(d).map_err(|e| (i, e))?;
                armed = true;
            }
            run_other(screens, bot, d, action, space)
                .await
                .map_err(|e| (i, e))?;
        }
    }
    if let Some(start) = run {
        finish_input(d, start)?;
    }
    Ok(armed)
}

/// Confirms the run of input that began at batch index `start` (one round trip).
fn finish_input(d: &mut Desktop, start: usize) -> Result<(), (usize, OpError)> {
    tokio::task::block_in_place(|| d.input.finish()).map_err(|e| match e {
        DisplayError::InputAction { action, .. } => (start + action, failed(e)),
        other => (start, failed(other)),
    })
}

/// Clicks the centre of the element `element` names, its box read now through the bot's page
/// (scrolled into view and hit-tested first, as browser_act's click), mapped to the screen.
async fn click_ref(
    d: &mut Desktop,
    element: &str,
    b: MouseButton,
    double: bool,
    space: Space,
) -> Result<(), OpError> {
    let cdp = Screens::cdp_of(d)?;
    let (x, y) = d.page.locate(&cdp, element, space.screen.width).await?;
    let x = (x.floor() as i64).clamp(0, i64::from(space.screen.width) - 1);
    let y = (y.floor() as i64).clamp(0, i64::from(space.screen.height) - 1);
    tokio::task::block_in_place(|| {
        d.input.click(x, y, button(b), double)?;
        d.input.finish()
    })
    .map_err(failed)
}

fn arm_settler(d: &mut Desktop) -> Result<(), OpError> {
    tokio::task::block_in_place(|| d.settler.arm()).map_err(failed)
}

/// Launches an application on the bot's display: the bot's own browser for browser names,
/// otherwise the program of that name from `PATH`.
async fn launch(
    screens: &Screens,
    bot: &BotId,
    d: &mut Desktop,
    application: &str,
    uri: Option<&str>,
) -> Result<(), OpError> {
    if is_browser(application) {
        if !d.browser.as_mut().is_some_and(Browser::is_alive) {
            screens.start_browser(bot, d).await?;
        }
        if let Some(u) = uri {
            open_in_browser(d, &open_url(&screens.cfg.home, u)?).await?;
        }
        return Ok(());
    }
    if !application
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(op_err(
            ErrorCode::BadRequest,
            format!("application {application:?} is not a program name"),
        ));
    }
    let mut cmd = tokio::process::Command::new(application);
    cmd.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", &screens.cfg.home)
        .env("LANG", "C.UTF-8")
        .env("DISPLAY", d.xserver.display_env())
        .env("XAUTHORITY", d.xserver.xauthority())
        .current_dir(&screens.cfg.home)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(u) = uri {
        cmd.arg(u);
    }
    let child = cmd.spawn().map_err(|e| {
        op_err(
            ErrorCode::BadRequest,
            format!("cannot launch {application:?}: {e}"),
        )
    })?;
    d.launched.push(child);
    Ok(())
}
