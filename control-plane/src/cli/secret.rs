//! `rakazo secret …`: a workspace's secrets (`/v1/workspaces/{workspace}/secrets…`,
//! docs/security.md#secrets). The value is read from standard input, never from argv (which
//! every user of the host can read), and is never printed.

use super::{print_json, Global};
use crate::route::{Route, WorkspaceId};
use crate::schema::secret::{PutSecret, SecretDeleted, SecretInfo, SecretList};
use anyhow::{bail, Context, Result};
use clap::Subcommand;
use std::io::Read;

/// Longest value read from standard input (the server takes at most 4096 bytes).
const MAX_STDIN: u64 = 64 << 10;

#[derive(Subcommand)]
pub enum SecretCmd {
    /// Set a secret, its value read from standard input (one trailing newline dropped). Setting
    /// it again rotates it: new value, domains and header, same placeholder.
    #[command(alias = "rotate")]
    Set {
        #[arg(long)]
        workspace: String,
        /// 1 to 64 of a-z, 0-9, `_` and `-`.
        name: String,
        /// A domain the value may be sent to (a name, or `*.example.com`); repeat for more.
        #[arg(long = "domain", required = true)]
        domains: Vec<String>,
        /// A header the gateway sets on every request to the domains, `{}` where the value
        /// goes: `--header "Authorization: Bearer {}"`. Without it, placeholders in request
        /// headers are replaced.
        #[arg(long)]
        header: Option<String>,
    },
    /// List a workspace's secrets: names, domains, placeholders (never values).
    List {
        #[arg(long)]
        workspace: String,
    },
    /// Delete a secret.
    Delete {
        #[arg(long)]
        workspace: String,
        name: String,
    },
}

fn print_secret(s: &SecretInfo) {
    let header = s.header.as_deref().unwrap_or("-");
    println!(
        "{}\t{}\t{}\t{}={}",
        s.name,
        s.domains.join(","),
        header,
        s.env_var,
        s.placeholder
    );
}

pub(super) async fn run(g: &Global, cmd: SecretCmd) -> Result<i32> {
    let c = g.client()?;
    match cmd {
        SecretCmd::Set {
            workspace,
            name,
            domains,
            header,
        } => {
            let mut value = String::new();
            std::io::stdin()
                .take(MAX_STDIN)
                .read_to_string(&mut value)
                .context("read the secret's value from standard input")?;
            let value = value
                .strip_suffix('\n')
                .map(|v| v.strip_suffix('\r').unwrap_or(v))
                .unwrap_or(&value)
                .to_string();
            if value.is_empty() {
                bail!("the secret's value is read from standard input, which was empty");
            }
            let route = Route::PutSecret {
                workspace: WorkspaceId::new(workspace),
                name,
            };
            let body = PutSecret {
                value,
                domains,
                header,
            };
            let s: SecretInfo = c.call(route.method(), &route.path(), &body).await?;
            if g.json {
                print_json(&s);
            } else {
                print_secret(&s);
            }
        }
        SecretCmd::List { workspace } => {
            let route = Route::ListSecrets {
                workspace: WorkspaceId::new(workspace),
            };
            let list: SecretList = c.fetch(route.method(), &route.path()).await?;
            if g.json {
                print_json(&list);
            } else {
                for s in &list.secrets {
                    print_secret(s);
                }
            }
        }
        SecretCmd::Delete { workspace, name } => {
            let route = Route::DeleteSecret {
                workspace: WorkspaceId::new(workspace),
                name,
            };
            let done: SecretDeleted = c.fetch(route.method(), &route.path()).await?;
            if g.json {
                print_json(&done);
            } else {
                println!("deleted {}", done.deleted);
            }
        }
    }
    Ok(0)
}
