//! `rakazo computer network …` and `rakazo workspace network …`: show and set network policies
//! (`/v1/computers/{id}/network`, `/v1/workspaces/{workspace}/network`).

use super::{print_json, Global};
use crate::route::{ComputerId, Route, WorkspaceId};
use crate::schema::network::{NetworkPolicy, SetNetworkPolicy, WorkspaceNetworkPolicy};
use anyhow::{bail, Result};
use clap::Subcommand;

#[derive(Subcommand)]
pub enum NetworkCmd {
    /// The policy in force, where it comes from, and whether it is enforced.
    Show { id: String },
    /// Set the computer's own policy: `open`, `none`, or `allow NAME[:PORTS]|CIDR[:PORTS]…
    /// [deny …]` (e.g. `allow github.com '*.pythonhosted.org:443'`); --default: follow its
    /// workspace's default again. A running computer's next connection sees it.
    Set {
        id: String,
        #[arg(num_args = 0..)]
        policy: Vec<String>,
        /// Remove the computer's own policy.
        #[arg(long, conflicts_with = "policy")]
        default: bool,
    },
}

#[derive(Subcommand)]
pub enum WorkspaceCmd {
    /// A workspace's default network policy, for its computers without one of their own.
    #[command(subcommand)]
    Network(WorkspaceNetworkCmd),
}

#[derive(Subcommand)]
pub enum WorkspaceNetworkCmd {
    Show {
        workspace: String,
    },
    /// Set the workspace's default (same words as `computer network set`); --default: the
    /// server's default again.
    Set {
        workspace: String,
        #[arg(num_args = 0..)]
        policy: Vec<String>,
        #[arg(long, conflicts_with = "policy")]
        default: bool,
    },
}

/// The words of a policy, or `None` for `--default`; neither is an error.
fn policy_body(policy: Vec<String>, default: bool) -> Result<SetNetworkPolicy> {
    if default {
        return Ok(SetNetworkPolicy { policy: None });
    }
    if policy.is_empty() {
        bail!("give a policy (open, none, allow …) or --default");
    }
    Ok(SetNetworkPolicy {
        policy: Some(policy.join(" ")),
    })
}

fn print_policy(p: &NetworkPolicy) {
    println!(
        "{}\t(from {})",
        p.policy.as_deref().unwrap_or("(none set)"),
        p.source
    );
    if let Some(note) = &p.note {
        println!("not enforced: {note}");
    }
    if p.applied == Some(false) && p.enforced {
        println!("the computer is not running here: its next start applies it");
    }
}

fn print_workspace(p: &WorkspaceNetworkPolicy) {
    match &p.policy {
        Some(policy) => println!("{}\t{policy}", p.workspace),
        None => println!("{}\t(the server's default)", p.workspace),
    }
}

pub async fn run(g: &Global, cmd: NetworkCmd) -> Result<i32> {
    let c = g.client()?;
    let shown: NetworkPolicy = match cmd {
        NetworkCmd::Show { id } => {
            let route = Route::GetNetwork {
                computer: ComputerId::new(id),
            };
            c.fetch(route.method(), &route.path()).await?
        }
        NetworkCmd::Set {
            id,
            policy,
            default,
        } => {
            let body = policy_body(policy, default)?;
            let route = Route::SetNetwork {
                computer: ComputerId::new(id),
            };
            c.call(route.method(), &route.path(), &body).await?
        }
    };
    if g.json {
        print_json(&shown);
    } else {
        print_policy(&shown);
    }
    Ok(0)
}

pub async fn run_workspace(g: &Global, cmd: WorkspaceCmd) -> Result<i32> {
    let c = g.client()?;
    let WorkspaceCmd::Network(cmd) = cmd;
    let shown: WorkspaceNetworkPolicy = match cmd {
        WorkspaceNetworkCmd::Show { workspace } => {
            let route = Route::GetWorkspaceNetwork {
                workspace: WorkspaceId::new(workspace),
            };
            c.fetch(route.method(), &route.path()).await?
        }
        WorkspaceNetworkCmd::Set {
            workspace,
            policy,
            default,
        } => {
            let body = policy_body(policy, default)?;
            let route = Route::SetWorkspaceNetwork {
                workspace: WorkspaceId::new(workspace),
            };
            c.call(route.method(), &route.path(), &body).await?
        }
    };
    if g.json {
        print_json(&shown);
    } else {
        print_workspace(&shown);
    }
    Ok(0)
}
