//! `rakazo browser …`: page tools on a bot's browser (`/v1/computers/{id}/browser/{bot}/…`).

use super::ids;
use super::{print_json, user_array, Global};
use crate::route::{ComputerId, Route};
use crate::schema::browser::{PageRequest, PageResult};
use anyhow::Result;
use clap::Subcommand;
use gateway_proto::BotId;

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
    let (computer, bot, action, body): (_, _, fn(ComputerId, BotId) -> Route, _) = match cmd {
        BrowserCmd::Navigate {
            computer,
            bot,
            page_url,
            lease,
        } => (
            computer,
            bot,
            |computer, bot| Route::BrowserNavigate { computer, bot },
            PageRequest {
                lease,
                url: Some(page_url),
                steps: None,
            },
        ),
        BrowserCmd::Snapshot {
            computer,
            bot,
            lease,
        } => (
            computer,
            bot,
            |computer, bot| Route::BrowserSnapshot { computer, bot },
            PageRequest {
                lease,
                ..Default::default()
            },
        ),
        BrowserCmd::Act {
            computer,
            bot,
            lease,
            steps,
        } => {
            let body = PageRequest {
                lease,
                url: None,
                steps: Some(user_array(&steps, "--steps", "step")?),
            };
            let act = |computer, bot| Route::BrowserAct { computer, bot };
            (computer, bot, act, body)
        }
    };
    let (computer, bot) = ids(&computer, &bot)?;
    let route: Route = action(computer, bot);
    let result: PageResult = c.call(route.method(), &route.path(), &body).await?;
    if g.json {
        print_json(&result);
        // A failed page action fails the command in both output modes.
        return Ok(if result.ok() { 0 } else { 1 });
    }
    match result {
        PageResult::Failed(f) => {
            eprintln!(
                "rakazo: {} (completed {}, uncertain {}; fall back to {})",
                f.error, f.completed, f.uncertain, f.fallback,
            );
            Ok(1)
        }
        PageResult::Done(d) => {
            println!("{} — {}", d.snapshot.title, d.snapshot.url);
            println!("{}", d.snapshot.tree);
            Ok(0)
        }
    }
}
