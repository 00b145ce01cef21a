//! `rakazo computer …`: create, list, show, start, stop and destroy computers
//! (`/v1/computers`).

use super::{print_json, Global};
use crate::client::q;
use anyhow::Result;
use clap::Subcommand;
use hyper::Method;

#[derive(Subcommand)]
pub enum ComputerCmd {
    /// Create a Team computer for a workspace or a Private computer for one bot.
    Create {
        #[arg(
            long,
            conflicts_with = "private_bot",
            required_unless_present = "private_bot"
        )]
        workspace: Option<String>,
        #[arg(long)]
        private_bot: Option<String>,
        /// The provider to run it on (local, docker, …; default: the server's default).
        #[arg(long)]
        provider: Option<String>,
        /// Memory limit of its machine, MiB.
        #[arg(long)]
        memory_mb: Option<u64>,
        /// CPU limit, in thousandths of a CPU (1500 = 1.5 CPUs).
        #[arg(long)]
        cpu_millis: Option<u32>,
        /// Process limit.
        #[arg(long)]
        pids: Option<u32>,
        /// Size of /dev/shm, MiB.
        #[arg(long)]
        shm_mb: Option<u64>,
    },
    List,
    Show {
        id: String,
    },
    /// Start a stopped computer (or replace a gone machine).
    Start {
        id: String,
    },
    Stop {
        id: String,
    },
    /// Destroy a computer (idempotent).
    Destroy {
        id: String,
    },
}

fn print_computer(v: &serde_json::Value) {
    let owner = v["workspace"]
        .as_str()
        .map(|w| format!("workspace {w}"))
        .or_else(|| v["bot"].as_str().map(|b| format!("bot {b}")))
        .unwrap_or_default();
    println!(
        "{}\t{}\t{}\t{}\t{}",
        v["id"].as_str().unwrap_or("?"),
        v["kind"].as_str().unwrap_or("?"),
        owner,
        v["state"].as_str().unwrap_or("?"),
        if v["connected"].as_bool() == Some(true) {
            "connected"
        } else {
            "disconnected"
        },
    );
}

pub(super) async fn run(g: &Global, cmd: ComputerCmd) -> Result<i32> {
    let c = g.client()?;
    let v = match cmd {
        ComputerCmd::Create {
            workspace,
            private_bot,
            provider,
            memory_mb,
            cpu_millis,
            pids,
            shm_mb,
        } => {
            let mut body = serde_json::json!({});
            let limits = providers::MachineLimits {
                memory_mb,
                cpu_millis,
                pids,
                shm_mb,
            };
            if limits != providers::MachineLimits::default() {
                body["limits"] = serde_json::to_value(limits)?;
            }
            if let Some(w) = workspace {
                body["workspace"] = w.into();
            }
            if let Some(b) = private_bot {
                body["private_bot"] = b.into();
            }
            if let Some(p) = provider {
                body["provider"] = p.into();
            }
            c.json(Method::POST, "/v1/computers", Some(&body)).await?
        }
        ComputerCmd::List => {
            let v = c.json(Method::GET, "/v1/computers", None).await?;
            if g.json {
                print_json(&v);
            } else {
                for comp in v["computers"].as_array().into_iter().flatten() {
                    print_computer(comp);
                }
            }
            return Ok(0);
        }
        ComputerCmd::Show { id } => {
            c.json(Method::GET, &format!("/v1/computers/{}", q(&id)), None)
                .await?
        }
        ComputerCmd::Start { id } => {
            c.json(
                Method::POST,
                &format!("/v1/computers/{}/start", q(&id)),
                None,
            )
            .await?
        }
        ComputerCmd::Stop { id } => {
            c.json(
                Method::POST,
                &format!("/v1/computers/{}/stop", q(&id)),
                None,
            )
            .await?
        }
        ComputerCmd::Destroy { id } => {
            c.json(Method::DELETE, &format!("/v1/computers/{}", q(&id)), None)
                .await?;
            if g.json {
                print_json(&serde_json::json!({ "destroyed": id }));
            } else {
                println!("destroyed {id}");
            }
            return Ok(0);
        }
    };
    if g.json {
        print_json(&v)
    } else {
        print_computer(&v)
    }
    Ok(0)
}
