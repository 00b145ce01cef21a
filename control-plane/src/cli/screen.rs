//! `rakazo screen …`, `terminal …`, `observe` and `act`: a bot's desktop and its live views
//! (`/v1/computers/{id}/screens/…` and `/v1/computers/{id}/terminals/…`).

use super::ids;
use super::{print_json, user_array, Global};
use crate::client::Client;
use crate::route::{ComputerId, Route};
use crate::schema::screen::{
    ActRequest, ActResult, ControlReleased, ControlTaken, FrameSize, LeaseBody, LiveUrl,
    Observation, ObserveRequest, Screen, ScreenList, ScreenReleased, UrlRequest,
};
use crate::schema::Empty;
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde::de::DeserializeOwned;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum ScreenCmd {
    /// Start (or keep) the bot's desktop.
    Ensure {
        computer: String,
        bot: String,
        #[arg(long)]
        lease: String,
    },
    /// Tear the bot's desktop down (its browser profile stays).
    Stop {
        computer: String,
        bot: String,
        #[arg(long)]
        lease: Option<String>,
    },
    /// List live desktops.
    List { computer: String },
    /// A live view URL of the bot's desktop (a control URL with --control, which needs
    /// `screen takeover` first). The URL is the credential: share it with care.
    Url {
        computer: String,
        bot: String,
        #[arg(long)]
        control: bool,
    },
    /// Take control of the bot (refused while it runs, unless it is waiting for a takeover).
    Takeover { computer: String, bot: String },
    /// Release control: control views and every terminal of the bot close.
    Release { computer: String, bot: String },
}

#[derive(Subcommand)]
pub enum TerminalCmd {
    /// A live terminal URL for the bot (needs `screen takeover` first).
    Url { computer: String, bot: String },
}

#[derive(Args)]
pub struct ObserveArgs {
    pub computer: String,
    pub bot: String,
    #[arg(long)]
    pub lease: String,
    /// Write the PNG here (unless the frame is unchanged, or only regions were sent).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Scale the frame down to this width (keeping the aspect ratio).
    #[arg(long)]
    pub width: Option<u16>,
    /// Draw each interactive element of the bot's page as a mark labelled with its ref, and
    /// list the marks.
    #[arg(long)]
    pub marks: bool,
    /// Send only the regions changed since the previous observation when cheaper.
    #[arg(long, conflicts_with = "full")]
    pub changes: bool,
    /// Always send the whole frame, even when unchanged.
    #[arg(long)]
    pub full: bool,
}

#[derive(Args)]
pub struct ActArgs {
    pub computer: String,
    pub bot: String,
    #[arg(long)]
    pub lease: String,
    /// The actions as a JSON array, e.g. '[{"type":"click","x":10,"y":20}]' ("-" reads stdin).
    #[arg(long)]
    pub actions: String,
    /// Observe after the actions.
    #[arg(long)]
    pub observe: bool,
    #[arg(long)]
    pub settle_ms: Option<u32>,
    /// With --observe: write the PNG here.
    #[arg(long, requires = "observe")]
    pub out: Option<PathBuf>,
    /// The actions' coordinates are in a frame of this size (`WIDTHxHEIGHT`, from a scaled-down
    /// observation).
    #[arg(long, value_parser = parse_frame)]
    pub frame: Option<FrameSize>,
}

/// `--frame WIDTHxHEIGHT`.
fn parse_frame(s: &str) -> std::result::Result<FrameSize, String> {
    let (w, h) = s
        .split_once(['x', 'X'])
        .ok_or_else(|| format!("expected WIDTHxHEIGHT, got {s:?}"))?;
    let num = |v: &str| v.trim().parse::<u16>().map_err(|e| format!("{v:?}: {e}"));
    Ok(FrameSize {
        width: num(w)?,
        height: num(h)?,
    })
}

/// `POST .../screens/{bot}/takeover` or `.../release-control`, which take an empty object.
async fn control_action<R: DeserializeOwned>(c: &Client, route: Route) -> Result<R> {
    Ok(c.call(route.method(), &route.path(), &Empty {}).await?)
}

/// Prints a capability URL: on stdout only, so it can be piped and never lands in a log.
pub(super) async fn live_url(g: &Global, computer: &str, bot: &str, policy: &str) -> Result<i32> {
    let c = g.client()?;
    let (computer, bot) = ids(computer, bot)?;
    let route = if policy == "terminal" {
        Route::TerminalUrl { computer, bot }
    } else {
        Route::LiveUrl { computer, bot }
    };
    let body = UrlRequest {
        policy: Some(policy.to_string()),
        ttl_secs: None,
    };
    let url: LiveUrl = c.call(route.method(), &route.path(), &body).await?;
    if g.json {
        print_json(&url);
    } else {
        println!("{}", url.url);
    }
    Ok(0)
}

/// `{bot}\tslot {slot}\tdisplay :{display}`
fn print_screen(s: &Screen) {
    println!("{}\tslot {}\tdisplay :{}", s.bot, s.slot, s.display);
}

pub(super) async fn run(g: &Global, cmd: ScreenCmd) -> Result<i32> {
    let c = g.client()?;
    match cmd {
        ScreenCmd::Ensure {
            computer,
            bot,
            lease,
        } => {
            let (computer, bot) = ids(&computer, &bot)?;
            let route = Route::EnsureScreen { computer, bot };
            let body = LeaseBody { lease: Some(lease) };
            let screen: Screen = c.call(route.method(), &route.path(), &body).await?;
            if g.json {
                print_json(&screen);
            } else {
                print_screen(&screen);
            }
        }
        ScreenCmd::Url {
            computer,
            bot,
            control,
        } => {
            let policy = if control { "control" } else { "view" };
            return live_url(g, &computer, &bot, policy).await;
        }
        ScreenCmd::Takeover { computer, bot } => {
            let (computer, bot_id) = ids(&computer, &bot)?;
            let route = Route::Takeover {
                computer,
                bot: bot_id,
            };
            let taken: ControlTaken = control_action(&c, route).await?;
            if g.json {
                print_json(&taken);
            } else {
                println!(
                    "control of {bot} taken (lease {}, until {} ms)",
                    taken.control_lease, taken.expires_at_ms
                );
            }
        }
        ScreenCmd::Release { computer, bot } => {
            let (computer, bot_id) = ids(&computer, &bot)?;
            let route = Route::ReleaseControl {
                computer,
                bot: bot_id,
            };
            let released: ControlReleased = control_action(&c, route).await?;
            if g.json {
                print_json(&released);
            } else {
                println!("control of {bot} released");
            }
        }
        ScreenCmd::Stop {
            computer,
            bot,
            lease,
        } => {
            let (computer, bot) = ids(&computer, &bot)?;
            let route = Route::ReleaseScreen { computer, bot };
            let released: ScreenReleased = c
                .call(route.method(), &route.path(), &LeaseBody { lease })
                .await?;
            if g.json {
                print_json(&released);
            } else {
                println!("released");
            }
        }
        ScreenCmd::List { computer } => {
            let route = Route::ListScreens {
                computer: ComputerId::new(computer),
            };
            let list: ScreenList = c.fetch(route.method(), &route.path()).await?;
            if g.json {
                print_json(&list);
            } else {
                list.screens.iter().for_each(print_screen);
            }
        }
    }
    Ok(0)
}

/// Writes an observation's image to `out` (if any), then prints it: its metadata for `--json`
/// (the image left out), else one line.
fn save_observation(g: &Global, mut obs: Observation, out: Option<&PathBuf>) -> Result<()> {
    write_image(obs.image.as_deref(), out)?;
    if g.json {
        obs.image = None;
        print_json(&obs);
    } else if obs.unchanged {
        println!(
            "frame {} unchanged: the previous screenshot remains valid",
            obs.frame_id
        );
    } else {
        // The screen's size when the frame was scaled down; `regions` when only those came.
        let mut size = format!("{}x{}", obs.width, obs.height);
        if (obs.width, obs.height) != (obs.screen_width, obs.screen_height) {
            size.push_str(&format!(
                " (screen {}x{})",
                obs.screen_width, obs.screen_height
            ));
        }
        if obs.kind == "regions" {
            size.push_str(&format!(" {} regions", obs.regions.len()));
        }
        println!(
            "frame {} {size} cursor {},{} window {:?}{}",
            obs.frame_id,
            obs.cursor.x,
            obs.cursor.y,
            obs.active_window.as_ref().map_or("", |w| w.title.as_str()),
            out.filter(|_| obs.image.is_some())
                .map(|p| format!(" -> {}", p.display()))
                .unwrap_or_default(),
        );
        for r in &obs.regions {
            println!("region {}x{} at {},{}", r.width, r.height, r.x, r.y);
        }
    }
    if !g.json {
        for m in obs.marks.iter().flatten() {
            println!(
                "{} {} {:?} at {},{} {}x{}",
                m.element, m.role, m.name, m.x, m.y, m.width, m.height
            );
        }
        if let Some(note) = &obs.marks_note {
            println!("marks: {note}");
        }
    }
    Ok(())
}

/// Writes an observation's PNG (`image`, base64) to `out`, when both are there.
fn write_image(image: Option<&str>, out: Option<&PathBuf>) -> Result<()> {
    use base64::Engine;
    if let (Some(path), Some(img)) = (out, image) {
        let png = base64::engine::general_purpose::STANDARD.decode(img)?;
        std::fs::write(path, png).with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}

pub(super) async fn observe(g: &Global, a: ObserveArgs) -> Result<i32> {
    let c = g.client()?;
    let (computer, bot) = ids(&a.computer, &a.bot)?;
    let route = Route::Observe { computer, bot };
    let body = ObserveRequest {
        lease: Some(a.lease),
        width: a.width,
        marks: a.marks,
        changes: a.changes,
        full: a.full,
        budget: None,
    };
    let obs: Observation = c.call(route.method(), &route.path(), &body).await?;
    save_observation(g, obs, a.out.as_ref())?;
    Ok(0)
}

pub(super) async fn act(g: &Global, a: ActArgs) -> Result<i32> {
    let c = g.client()?;
    let body = ActRequest {
        lease: a.lease,
        actions: user_array(&a.actions, "--actions", "action")?,
        observe: a.observe,
        settle_ms: a.settle_ms,
        frame: a.frame,
        observe_options: None,
    };
    let (computer, bot) = ids(&a.computer, &a.bot)?;
    let route = Route::Act { computer, bot };
    let mut result: ActResult = c.call(route.method(), &route.path(), &body).await?;
    match result.observation.take() {
        Some(mut obs) if g.json => {
            let image = obs.image.take();
            result.observation = Some(obs);
            print_json(&result);
            write_image(image.as_deref(), a.out.as_ref())?;
        }
        Some(obs) => {
            println!(
                "completed {} actions (settled after {} ms)",
                result.completed, result.settled_ms
            );
            save_observation(g, obs, a.out.as_ref())?;
        }
        None if g.json => print_json(&result),
        None => println!("completed {} actions", result.completed),
    }
    Ok(0)
}
