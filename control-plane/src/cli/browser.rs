//! `rakazo browser …`: page tools on a bot's browser (`/v1/computers/{id}/browser/{bot}/…`).

use super::{print_json, Global};
use crate::client::q;
use anyhow::{Context, Result};
use clap::Subcommand;
use hyper::Method;

#[derive(Subcommand)]
pub enum BrowserCmd {
    /// Open an http(s) URL in the bot's visible tab.
    Navigate {
        computer: String,
        bot: String,
        /// The page to open. Its own argument id: named `url`, it would be the global `--url`
        /// (the control plane's address), and the request would go to the page's server.
        #[arg(value_name = "URL")]
        page_url: String,
        #[arg(long)]
        lease: String,
    },
    /// Page text and interactive elements with refs.
    Snapshot {
        computer: String,
        bot: String,
        #[arg(long)]
        lease: String,
    },
    /// Run steps, e.g. '[{"type":"click","ref":"e3"}]' ("-" reads stdin).
    Act {
        computer: String,
        bot: String,
        #[arg(long)]
        lease: String,
        #[arg(long)]
        steps: String,
    },
}

pub(super) async fn run(g: &Global, cmd: BrowserCmd) -> Result<i32> {
    let c = g.client()?;
    let (computer, bot, action, body) = match cmd {
        BrowserCmd::Navigate {
            computer,
            bot,
            page_url,
            lease,
        } => (
            computer,
            bot,
            "navigate",
            serde_json::json!({ "lease": lease, "url": page_url }),
        ),
        BrowserCmd::Snapshot {
            computer,
            bot,
            lease,
        } => (
            computer,
            bot,
            "snapshot",
            serde_json::json!({ "lease": lease }),
        ),
        BrowserCmd::Act {
            computer,
            bot,
            lease,
            steps,
        } => {
            let raw = if steps == "-" {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
                s
            } else {
                steps
            };
            let steps: serde_json::Value =
                serde_json::from_str(&raw).context("--steps must be a JSON array")?;
            (
                computer,
                bot,
                "act",
                serde_json::json!({ "lease": lease, "steps": steps }),
            )
        }
    };
    let path = format!(
        "/v1/computers/{}/browser/{}/{action}",
        q(&computer),
        q(&bot)
    );
    let v = c.json(Method::POST, &path, Some(&body)).await?;
    if g.json {
        print_json(&v);
        // A failed page action fails the command in both output modes.
        return Ok(if v["ok"] == false { 1 } else { 0 });
    } else if v["ok"] == false {
        eprintln!(
            "rakazo: {} (completed {}, uncertain {}; fall back to {})",
            v["error"].as_str().unwrap_or("failed"),
            v["completed"],
            v["uncertain"],
            v["fallback"].as_str().unwrap_or("computer_act"),
        );
        return Ok(1);
    } else {
        let s = &v["snapshot"];
        println!(
            "{} — {}",
            s["title"].as_str().unwrap_or(""),
            s["url"].as_str().unwrap_or("")
        );
        println!("{}", s["tree"].as_str().unwrap_or(""));
    }
    Ok(0)
}
