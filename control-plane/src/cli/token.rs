//! `rakazo token …`: scoped API tokens (`/v1/tokens…`, docs/security.md#api-tokens). `create`
//! prints the token once, on standard output alone (the details go to standard error), so
//! `TOKEN=$(rakazo token create …)` keeps it out of the terminal's scrollback.

use super::{print_json, Global};
use crate::route::Route;
use crate::schema::token::{CreateToken, CreatedToken, TokenInfo, TokenList};
use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum TokenCmd {
    /// Make a token. Roles: viewer (watch screens, read activity and files), operator (also
    /// create/stop/start computers, take control, shells, files), admin (everything).
    Create {
        #[arg(long, value_parser = ["admin", "operator", "viewer"])]
        role: String,
        /// Limit it to a workspace's computers; repeat for more. None: every computer.
        #[arg(long = "workspace")]
        workspaces: Vec<String>,
        /// When it expires: `90m`, `12h`, `30d`. None: never.
        #[arg(long, value_parser = crate::tokens::parse_duration)]
        expires: Option<std::time::Duration>,
        /// A name to know it by.
        #[arg(long, default_value = "token")]
        name: String,
    },
    /// List the tokens (never their values).
    List,
    /// Revoke a token by its id: it and its console sessions stop working at once.
    Revoke { id: String },
}

fn print_token(t: &TokenInfo) {
    let ws = t
        .workspaces
        .as_ref()
        .map_or_else(|| "*".to_string(), |w| w.join(","));
    let state = if t.revoked_at_ms.is_some() {
        "revoked"
    } else {
        "live"
    };
    println!("{}\t{}\t{}\t{}\t{}", t.id, t.role, ws, state, t.name);
}

pub(super) async fn run(g: &Global, cmd: TokenCmd) -> Result<i32> {
    let c = g.client()?;
    match cmd {
        TokenCmd::Create {
            role,
            workspaces,
            expires,
            name,
        } => {
            let route = Route::CreateToken {};
            let body = CreateToken {
                role,
                workspaces: (!workspaces.is_empty()).then_some(workspaces),
                expires_in_secs: expires.map(|d| d.as_secs()),
                name,
            };
            let t: CreatedToken = c.call(route.method(), &route.path(), &body).await?;
            if g.json {
                print_json(&t);
            } else {
                eprintln!(
                    "token {} ({}, {}): shown once, keep it now",
                    t.info.id,
                    t.info.role,
                    t.info
                        .workspaces
                        .as_ref()
                        .map_or_else(|| "every computer".to_string(), |w| w.join(", "))
                );
                println!("{}", t.token);
            }
        }
        TokenCmd::List => {
            let route = Route::ListTokens {};
            let list: TokenList = c.fetch(route.method(), &route.path()).await?;
            if g.json {
                print_json(&list);
            } else {
                for t in &list.tokens {
                    print_token(t);
                }
            }
        }
        TokenCmd::Revoke { id } => {
            let route = Route::RevokeToken { token: id };
            let t: TokenInfo = c.fetch(route.method(), &route.path()).await?;
            if g.json {
                print_json(&t);
            } else {
                println!("revoked {}", t.id);
            }
        }
    }
    Ok(0)
}
