//! `rakazo screen …`, `terminal …`, `observe` and `act`: a bot's desktop and its live views
//! (`/v1/computers/{id}/screens/…` and `/v1/computers/{id}/terminals/…`).

use super::{print_json, Global};
use crate::client::{q, Client};
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use hyper::Method;
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
    /// Write the PNG here (unless the frame is unchanged).
    #[arg(long)]
    pub out: Option<PathBuf>,
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
}

/// `POST .../screens/{bot}/takeover` or `.../release-control`.
async fn control_action(
    c: &Client,
    computer: &str,
    bot: &str,
    action: &str,
) -> Result<serde_json::Value> {
    let path = format!("/v1/computers/{}/screens/{}/{action}", q(computer), q(bot));
    Ok(c.json(Method::POST, &path, Some(&serde_json::json!({})))
        .await?)
}

/// Prints a capability URL: on stdout only, so it can be piped and never lands in a log.
pub(super) async fn live_url(g: &Global, computer: &str, bot: &str, policy: &str) -> Result<i32> {
    let c = g.client()?;
    let path = if policy == "terminal" {
        format!("/v1/computers/{}/terminals/{}/url", q(computer), q(bot))
    } else {
        format!("/v1/computers/{}/screens/{}/url", q(computer), q(bot))
    };
    let v = c
        .json(
            Method::POST,
            &path,
            Some(&serde_json::json!({ "policy": policy })),
        )
        .await?;
    if g.json {
        print_json(&v);
    } else {
        println!("{}", v["url"].as_str().unwrap_or_default());
    }
    Ok(0)
}

pub(super) async fn run(g: &Global, cmd: ScreenCmd) -> Result<i32> {
    let c = g.client()?;
    let v = match cmd {
        ScreenCmd::Ensure {
            computer,
            bot,
            lease,
        } => {
            let path = format!("/v1/computers/{}/screens/{}/ensure", q(&computer), q(&bot));
            c.json(
                Method::POST,
                &path,
                Some(&serde_json::json!({ "lease": lease })),
            )
            .await?
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
            let v = control_action(&c, &computer, &bot, "takeover").await?;
            if g.json {
                print_json(&v);
            } else {
                println!(
                    "control of {bot} taken (lease {}, until {} ms)",
                    v["control_lease"].as_str().unwrap_or("?"),
                    v["expires_at_ms"]
                );
            }
            return Ok(0);
        }
        ScreenCmd::Release { computer, bot } => {
            let v = control_action(&c, &computer, &bot, "release-control").await?;
            if g.json {
                print_json(&v);
            } else {
                println!("control of {bot} released");
            }
            return Ok(0);
        }
        ScreenCmd::Stop {
            computer,
            bot,
            lease,
        } => {
            let path = format!("/v1/computers/{}/screens/{}/release", q(&computer), q(&bot));
            c.json(
                Method::POST,
                &path,
                Some(&serde_json::json!({ "lease": lease })),
            )
            .await?
        }
        ScreenCmd::List { computer } => {
            c.json(
                Method::GET,
                &format!("/v1/computers/{}/screens", q(&computer)),
                None,
            )
            .await?
        }
    };
    if g.json {
        print_json(&v);
    } else if let Some(all) = v["screens"].as_array() {
        for s in all {
            println!(
                "{}\tslot {}\tdisplay :{}",
                s["bot"].as_str().unwrap_or("?"),
                s["slot"],
                s["display"]
            );
        }
    } else if v["released"] == true {
        println!("released");
    } else {
        println!(
            "{}\tslot {}\tdisplay :{}",
            v["bot"].as_str().unwrap_or("?"),
            v["slot"],
            v["display"]
        );
    }
    Ok(0)
}

/// Writes an observation's image to `out` (if any) and prints its metadata.
fn save_observation(g: &Global, obs: &serde_json::Value, out: Option<&PathBuf>) -> Result<()> {
    use base64::Engine;
    if let (Some(path), Some(img)) = (out, obs["image"].as_str()) {
        let png = base64::engine::general_purpose::STANDARD.decode(img)?;
        std::fs::write(path, png).with_context(|| format!("write {}", path.display()))?;
    }
    if g.json {
        let mut meta = obs.clone();
        meta["image"] = serde_json::Value::Null;
        print_json(&meta);
    } else if obs["unchanged"] == true {
        println!(
            "frame {} unchanged: the previous screenshot remains valid",
            obs["frameId"].as_str().unwrap_or("?")
        );
    } else {
        println!(
            "frame {} {}x{} cursor {},{} window {:?}{}",
            obs["frameId"].as_str().unwrap_or("?"),
            obs["width"],
            obs["height"],
            obs["cursor"]["x"],
            obs["cursor"]["y"],
            obs["activeWindow"]["title"].as_str().unwrap_or(""),
            out.map(|p| format!(" -> {}", p.display()))
                .unwrap_or_default(),
        );
    }
    Ok(())
}

pub(super) async fn observe(g: &Global, a: ObserveArgs) -> Result<i32> {
    let c = g.client()?;
    let path = format!(
        "/v1/computers/{}/screens/{}/observe",
        q(&a.computer),
        q(&a.bot)
    );
    let v = c
        .json(
            Method::POST,
            &path,
            Some(&serde_json::json!({ "lease": a.lease })),
        )
        .await?;
    save_observation(g, &v, a.out.as_ref())?;
    Ok(0)
}

pub(super) async fn act(g: &Global, a: ActArgs) -> Result<i32> {
    let c = g.client()?;
    let raw = if a.actions == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
        s
    } else {
        a.actions.clone()
    };
    let actions: serde_json::Value =
        serde_json::from_str(&raw).context("--actions must be a JSON array")?;
    let mut body =
        serde_json::json!({ "lease": a.lease, "actions": actions, "observe": a.observe });
    if let Some(ms) = a.settle_ms {
        body["settle_ms"] = ms.into();
    }
    let path = format!("/v1/computers/{}/screens/{}/act", q(&a.computer), q(&a.bot));
    let v = c.json(Method::POST, &path, Some(&body)).await?;
    if let Some(obs) = v.get("observation") {
        if g.json {
            let mut meta = v.clone();
            meta["observation"]["image"] = serde_json::Value::Null;
            print_json(&meta);
            if let (Some(path), Some(img)) = (a.out.as_ref(), obs["image"].as_str()) {
                use base64::Engine;
                std::fs::write(path, base64::engine::general_purpose::STANDARD.decode(img)?)?;
            }
        } else {
            println!(
                "completed {} actions (settled after {} ms)",
                v["completed"], v["settledMs"]
            );
            save_observation(g, obs, a.out.as_ref())?;
        }
    } else if g.json {
        print_json(&v);
    } else {
        println!("completed {} actions", v["completed"]);
    }
    Ok(0)
}
