//! computer_act's actions on one desktop: pointer and keys through its
//! [`Input`](crate::display::Input), and `open`, `focus` and `launch` of the bot's browser or a
//! program from `PATH`.

use std::time::Duration;

use gateway_proto::desktop::{Action, MouseButton, ScrollDirection};
use gateway_proto::{BotId, ErrorCode, OpError};

use super::{failed, op_err, Desktop, Screens};
use crate::browser::Browser;
use crate::display::{self, Activation, Button, DisplayError, KeyCombo, WindowMatch};

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

pub(super) async fn run_action(
    screens: &Screens,
    bot: &BotId,
    d: &mut Desktop,
    action: &Action,
) -> Result<(), OpError> {
    use gateway_proto::desktop::clamp_coord;
    let input_err = |e: DisplayError| match e {
        DisplayError::UnknownKey(_) => op_err(ErrorCode::BadRequest, e),
        other => failed(other),
    };
    match action {
        Action::Click {
            x,
            y,
            button: b,
            double,
        } => tokio::task::block_in_place(|| {
            d.input
                .click(clamp_coord(*x), clamp_coord(*y), button(*b), *double)
        })
        .map_err(input_err),
        Action::Move { x, y } => tokio::task::block_in_place(|| {
            d.input.move_to(clamp_coord(*x), clamp_coord(*y)).map(drop)
        })
        .map_err(input_err),
        Action::Down { x, y, button: b } => tokio::task::block_in_place(|| {
            d.input
                .button_down(clamp_coord(*x), clamp_coord(*y), button(*b))
        })
        .map_err(input_err),
        Action::Up { x, y, button: b } => tokio::task::block_in_place(|| {
            d.input
                .button_up(clamp_coord(*x), clamp_coord(*y), button(*b))
        })
        .map_err(input_err),
        Action::Type { text } => {
            tokio::task::block_in_place(|| d.input.type_text(text)).map_err(input_err)
        }
        Action::Key { key, modifiers } => {
            let combo =
                KeyCombo::parse(key, modifiers).map_err(|e| op_err(ErrorCode::BadRequest, e))?;
            tokio::task::block_in_place(|| d.input.key(&combo)).map_err(input_err)
        }
        Action::Scroll { direction, amount } => {
            let dir = match direction {
                ScrollDirection::Up => display::ScrollDirection::Up,
                ScrollDirection::Down => display::ScrollDirection::Down,
            };
            tokio::task::block_in_place(|| d.input.scroll(dir, u32::from(*amount)))
                .map_err(input_err)
        }
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
    }
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
