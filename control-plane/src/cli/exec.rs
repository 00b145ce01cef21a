//! `rakazo exec`: run a command on a computer, streaming its output
//! (`/v1/computers/{id}/exec`).

use super::Global;
use crate::client::full_body;
use crate::route::{ComputerId, Route};
use crate::schema::exec::{ExecLine, ExecSpec};
use anyhow::{anyhow, Result};
use clap::Args;
use hyper::Method;
use std::collections::BTreeMap;
use std::io::Write;

#[derive(Args)]
pub struct ExecArgs {
    pub computer: String,
    /// Working directory, relative to the home.
    #[arg(long)]
    pub cwd: Option<String>,
    /// Extra environment, KEY=VALUE (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Stream this process's stdin to the command.
    #[arg(long, short = 'i', conflicts_with = "detach")]
    pub stdin: bool,
    /// Start it as a detached process that outlives this client and print its id
    /// (`rakazo ps`, `logs`, `attach`, `kill`).
    #[arg(long, short = 'd')]
    pub detach: bool,
    /// Act for this bot under `--lease`.
    #[arg(long, requires = "lease")]
    pub bot: Option<String>,
    /// The bot's lease, `<owner>:<fence>`.
    #[arg(long, requires = "bot")]
    pub lease: Option<String>,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true)]
    pub argv: Vec<String>,
}

pub(super) async fn run(g: &Global, a: ExecArgs) -> Result<i32> {
    let c = g.client()?;
    let mut env = BTreeMap::new();
    for kv in &a.env {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| anyhow!("--env takes KEY=VALUE, got {kv:?}"))?;
        env.insert(k.to_string(), v.to_string());
    }
    // clap gives --bot and --lease together or neither.
    let spec = ExecSpec {
        argv: a.argv,
        cwd: a.cwd,
        env,
        timeout_ms: a.timeout_ms,
        stdin: None,
        bot: a.bot,
        lease: a.lease,
    };
    if a.detach {
        return super::process::start(g, a.computer, spec).await;
    }
    let path = Route::Exec {
        computer: ComputerId::new(a.computer),
    }
    .path();
    let resp = if a.stdin {
        let mut head = serde_json::to_vec(&spec)?;
        head.push(b'\n');
        c.send(
            Method::POST,
            &path,
            Some(crate::api::EXEC_STREAM_CONTENT_TYPE),
            None,
            super::stdin_body(head, None),
        )
        .await?
    } else {
        c.send(
            Method::POST,
            &path,
            Some("application/json"),
            None,
            full_body(serde_json::to_vec(&spec)?),
        )
        .await?
    };
    let mut lines = super::NdjsonLines::new(resp);
    let mut code = None;
    while let Some(line) = lines.next().await? {
        if g.json {
            std::io::stdout().write_all(&line)?;
            std::io::stdout().flush()?;
        }
        match serde_json::from_slice(&line)? {
            ExecLine::Stdout(chunk) if !g.json => {
                std::io::stdout().write_all(&chunk.bytes()?)?;
                std::io::stdout().flush()?;
            }
            ExecLine::Stderr(chunk) if !g.json => {
                std::io::stderr().write_all(&chunk.bytes()?)?;
            }
            ExecLine::Exit { code: c, message } => {
                if let (Some(m), false) = (message, g.json) {
                    eprintln!("rakazo: {m}");
                }
                code = Some(c);
            }
            ExecLine::Error(e) => {
                if !g.json {
                    eprintln!("rakazo: {}", e.message);
                }
                code = Some(125);
            }
            ExecLine::Started { .. } | ExecLine::Stdout(_) | ExecLine::Stderr(_) => {}
        }
    }
    code.ok_or_else(|| {
        anyhow!("the command's output ended without an exit status; its outcome is uncertain")
    })
}
