//! `rakazo mcp token …`: mint an MCP session token for one computer and bot
//! (`POST /v1/computers/{id}/mcp-tokens/{bot}`).

use super::ids;
use super::{print_json, Global};
use crate::route::Route;
use crate::schema::mcp::{McpToken, McpTokenRequest};
use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum McpCmd {
    /// A bearer token that opens this computer and bot's MCP endpoint and nothing else; prints
    /// the endpoint URL, then the token.
    Token {
        computer: String,
        bot: String,
        /// How long it works (default 3600, at most 86400).
        #[arg(long)]
        ttl_secs: Option<u64>,
    },
}

pub(super) async fn run(g: &Global, cmd: McpCmd) -> Result<i32> {
    let c = g.client()?;
    let McpCmd::Token {
        computer,
        bot,
        ttl_secs,
    } = cmd;
    let (computer, bot) = ids(&computer, &bot)?;
    let route = Route::MintMcpToken { computer, bot };
    let token: McpToken = c
        .call(route.method(), &route.path(), &McpTokenRequest { ttl_secs })
        .await?;
    if g.json {
        print_json(&token);
    } else {
        println!("{}\n{}", token.url, token.token);
    }
    Ok(0)
}
