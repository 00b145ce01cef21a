//! `rakazo lease …`: acquire, renew, release and show a bot's execution lease
//! (`/v1/computers/{id}/leases/{bot}…`).

use super::{print_json, Global};
use crate::client::q;
use anyhow::Result;
use clap::Subcommand;
use hyper::Method;

#[derive(Subcommand)]
pub enum LeaseCmd {
    /// Take the bot's execution lease for a run; prints `<owner>:<fence>`.
    Acquire {
        computer: String,
        bot: String,
        /// The run id that owns the lease.
        #[arg(long)]
        owner: String,
        #[arg(long)]
        ttl_ms: Option<u64>,
    },
    /// Extend a lease the run still holds.
    Renew {
        computer: String,
        bot: String,
        lease: String,
        #[arg(long)]
        ttl_ms: Option<u64>,
    },
    /// End the run: release its lease (the last lease out checkpoints the home).
    Release {
        computer: String,
        bot: String,
        lease: String,
        /// How the run ended; `failed` and `cancelled` also tear the bot's desktop down.
        #[arg(long, value_parser = ["success", "failed", "cancelled"])]
        outcome: Option<String>,
    },
    /// The bot's live lease.
    Show { computer: String, bot: String },
}

pub(super) async fn run(g: &Global, cmd: LeaseCmd) -> Result<i32> {
    let c = g.client()?;
    let v = match cmd {
        LeaseCmd::Acquire {
            computer,
            bot,
            owner,
            ttl_ms,
        } => {
            let mut body = serde_json::json!({ "owner": owner });
            if let Some(t) = ttl_ms {
                body["ttl_ms"] = t.into();
            }
            c.json(
                Method::POST,
                &format!("/v1/computers/{}/leases/{}/acquire", q(&computer), q(&bot)),
                Some(&body),
            )
            .await?
        }
        LeaseCmd::Renew {
            computer,
            bot,
            lease,
            ttl_ms,
        } => {
            let mut body = serde_json::json!({ "lease": lease });
            if let Some(t) = ttl_ms {
                body["ttl_ms"] = t.into();
            }
            c.json(
                Method::POST,
                &format!("/v1/computers/{}/leases/{}/renew", q(&computer), q(&bot)),
                Some(&body),
            )
            .await?
        }
        LeaseCmd::Release {
            computer,
            bot,
            lease,
            outcome,
        } => {
            let mut body = serde_json::json!({ "lease": lease });
            if let Some(o) = outcome {
                body["outcome"] = o.into();
            }
            c.json(
                Method::POST,
                &format!("/v1/computers/{}/leases/{}/release", q(&computer), q(&bot)),
                Some(&body),
            )
            .await?
        }
        LeaseCmd::Show { computer, bot } => {
            c.json(
                Method::GET,
                &format!("/v1/computers/{}/leases/{}", q(&computer), q(&bot)),
                None,
            )
            .await?
        }
    };
    if g.json {
        print_json(&v);
    } else if let Some(l) = v["lease"].as_str() {
        println!("{l}\texpires_at_ms={}", v["expires_at_ms"]);
    } else {
        println!("released");
        // The run-end checkpoint (contracts.md §9): a failure must reach the user, not only
        // the server log; the release itself stands, and the previous revision stays current.
        let cp = &v["checkpoint"];
        match cp["status"].as_str() {
            Some("saved") => println!("home checkpointed: revision {}", cp["revision"]),
            Some("failed") => eprintln!(
                "rakazo: the home checkpoint after this run failed (the previous revision stays current): {}",
                cp["error"].as_str().unwrap_or("unknown error")
            ),
            Some(other) => println!("home checkpoint {other}"),
            None => {}
        }
    }
    Ok(0)
}
