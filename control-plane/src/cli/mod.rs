//! The `rakazo` command line: `serve`, and the client commands that talk to a running server.
//!
//! The server URL and token come from flags (`--url`, `--token-file`), from `RAKAZO_URL` /
//! `RAKAZO_TOKEN`, or from the local data dir (`addresses.json`, `api-token`), in that order.
//! The token is never taken as a command-line argument, so it never shows in `ps`.

//!
//! One file per area of the API, each owning its subcommands and their bodies: [`computer`],
//! [`exec`], [`files`], [`lease`], [`screen`] (screens, terminals, observe and act), [`browser`],
//! [`home`], [`activity`], [`mcp`] (session tokens); [`serve`] runs the control plane itself.
//! This file holds the top-level parser, the global flags, finding the server and token, and the
//! shared printing.

pub mod activity;
pub mod browser;
pub mod computer;
pub mod exec;
pub mod files;
pub mod home;
pub mod lease;
pub mod mcp;
pub mod network;
pub mod pool;
pub mod preview;
pub mod process;
pub mod recording;
pub mod screen;
pub mod secret;
pub mod serve;
pub mod service;
pub mod token;

pub use browser::BrowserCmd;
pub use computer::ComputerCmd;
pub use exec::ExecArgs;
pub use files::FilesCmd;
pub use home::HomeCmd;
pub use lease::LeaseCmd;
pub use mcp::McpCmd;
pub use screen::{ActArgs, ObserveArgs, ScreenCmd, TerminalCmd};
pub use serve::ServeArgs;

use crate::client::{Client, ClientError, LocalAddresses};
use crate::route::ComputerId;
use crate::schema::files::{Entry, EntryKind};
use crate::serve::{ADDRESSES_FILE, API_TOKEN_FILE};
use anyhow::{anyhow, Context, Result};
use clap::{Args, Parser, Subcommand};
use gateway_proto::BotId;
use gateway_proto::Secret;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "rakazo",
    version,
    about = "Rakazo computer runtime: control plane and CLI"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Clone)]
pub struct Global {
    /// Data dir of the control plane (also where the CLI finds a local server's address and token).
    #[arg(long, global = true, env = "RAKAZO_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Base URL of the control plane API.
    #[arg(long, global = true, env = "RAKAZO_URL")]
    pub url: Option<String>,
    /// File holding the API token (the token itself comes from RAKAZO_TOKEN, never argv).
    #[arg(long, global = true)]
    pub token_file: Option<PathBuf>,
    /// Machine-readable JSON output.
    #[arg(long, global = true)]
    pub json: bool,
    /// PEM file of the CA (or self-signed) certificate an https control plane's certificate
    /// must chain to. Unset: the local server's own certificate when the address comes from
    /// the data dir, else the system's CAs.
    #[arg(long, global = true, env = "RAKAZO_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// Log lines as text, or as one JSON object per line (`level`, `message`, fields) for a log
    /// collector; `serve` hands the choice to local guests.
    #[arg(long, global = true, env = "RAKAZO_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// How log lines are written (`--log-format`, `RAKAZO_LOG_FORMAT`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // reason: parsed once per process; boxing buys nothing
pub enum Command {
    /// Run the control plane.
    Serve(ServeArgs),
    /// Create, list, show, start, stop and destroy computers.
    #[command(subcommand)]
    Computer(ComputerCmd),
    /// Run a command on a computer, streaming its output; exits with its exit code.
    Exec(ExecArgs),
    /// A computer's detached processes (`exec --detach` starts one): id, state, output size,
    /// command.
    Ps(process::PsArgs),
    /// A detached process's output (--follow: until it exits).
    Logs(process::LogsArgs),
    /// Attach to a detached process: stdin to it, its output back; closing stdin or Ctrl-]
    /// (then Enter on a terminal) detaches.
    Attach(process::AttachArgs),
    /// Send a signal (default TERM) to a detached process.
    Kill(process::KillArgs),
    /// List, read and write files of a computer's home.
    #[command(subcommand)]
    Files(FilesCmd),
    /// Acquire, renew, release and show execution leases.
    #[command(subcommand)]
    Lease(LeaseCmd),
    /// Start, stop and list bots' desktops; live view URLs and takeover.
    #[command(subcommand)]
    Screen(ScreenCmd),
    /// Live terminal URLs (under the user's control lease).
    #[command(subcommand)]
    Terminal(TerminalCmd),
    /// Screenshot a bot's desktop (computer_observe).
    Observe(ObserveArgs),
    /// Run a batch of desktop actions (computer_act).
    Act(ActArgs),
    /// Page tools on the bot's browser: navigate, snapshot, act.
    #[command(subcommand)]
    Browser(BrowserCmd),
    /// Checkpoint, restore and browse a computer's stored home.
    #[command(subcommand)]
    Home(HomeCmd),
    /// A computer's activity feed: bots' commands and why it started or stopped (--follow: live).
    Activity(activity::ActivityArgs),
    /// MCP session tokens: one computer and bot's MCP endpoint for an MCP client.
    #[command(subcommand)]
    Mcp(McpCmd),
    /// Workspaces' defaults: the network policy of their computers without one of their own.
    #[command(subcommand)]
    Workspace(network::WorkspaceCmd),
    /// A workspace's secrets: set (value on stdin), rotate, list, delete. Its contained
    /// computers hold placeholders; the egress gateway sends the value to its domains only.
    #[command(subcommand)]
    Secret(secret::SecretCmd),
    /// Services: detached processes a computer starts again each time it starts (set, list,
    /// rm).
    #[command(subcommand)]
    Service(service::ServiceCmd),
    /// Preview URLs: a port inside a computer at its own expiring, revocable origin (url,
    /// list, revoke).
    #[command(subcommand)]
    Preview(preview::PreviewCmd),
    /// Screen recordings: on, off, list, get (raw records), export (WebM or MP4 via ffmpeg).
    #[command(subcommand)]
    Recording(recording::RecordingCmd),
    /// Warm pools: computers booted ahead, handed out by `computer create --pool` (create,
    /// list, show, resize, delete).
    #[command(subcommand)]
    Pool(pool::PoolCmd),
    /// Scoped API tokens: create (admin, operator or viewer; limited to workspaces;
    /// expiring), list, revoke.
    #[command(subcommand)]
    Token(token::TokenCmd),
    /// Build the computer image for the docker provider.
    #[command(subcommand)]
    Image(crate::image::ImageCmd),
    /// Print the API's OpenAPI 3.1 document (what `GET /v1/openapi.json` serves); needs no
    /// server. `rakazo openapi > control-plane/openapi.json` regenerates the committed copy.
    Openapi,
}

/// The default data dir: `$XDG_DATA_HOME/rakazo` or `~/.local/share/rakazo`.
pub fn default_data_dir() -> PathBuf {
    #[allow(clippy::disallowed_methods)] // the CLI's one read of the user's environment
    let (xdg, home) = (
        std::env::var("XDG_DATA_HOME").ok(),
        std::env::var("HOME").ok(),
    );
    match (xdg, home) {
        (Some(x), _) if !x.is_empty() => PathBuf::from(x).join("rakazo"),
        (_, Some(h)) => PathBuf::from(h).join(".local/share/rakazo"),
        _ => PathBuf::from(".rakazo"),
    }
}

impl Global {
    fn data_dir(&self) -> PathBuf {
        self.data_dir.clone().unwrap_or_else(default_data_dir)
    }

    /// Finds the server and token: flags, then environment, then the local data dir.
    fn client(&self) -> Result<Client> {
        let dir = self.data_dir();
        let url = match &self.url {
            Some(u) => u.clone(),
            None => {
                let path = dir.join(ADDRESSES_FILE);
                let text = std::fs::read_to_string(&path).with_context(|| {
                    format!(
                        "no --url or RAKAZO_URL, and no local server address in {}",
                        path.display()
                    )
                })?;
                let recorded: LocalAddresses = serde_json::from_str(&text)?;
                recorded
                    .http
                    .ok_or_else(|| anyhow!("{} has no http address", path.display()))?
            }
        };
        #[allow(clippy::disallowed_methods)] // the CLI's one read of the token variable
        let env_token = std::env::var("RAKAZO_TOKEN").ok().filter(|t| !t.is_empty());
        let token = match (&self.token_file, env_token) {
            (Some(f), _) => {
                std::fs::read_to_string(f).with_context(|| format!("read {}", f.display()))?
            }
            (None, Some(t)) => t,
            (None, None) => {
                let path = dir.join(API_TOKEN_FILE);
                std::fs::read_to_string(&path).with_context(|| {
                    format!(
                        "no RAKAZO_TOKEN or --token-file, and no token in {}",
                        path.display()
                    )
                })?
            }
        };
        let token = Secret::new(token.trim().to_string());
        Ok(Client::for_cli(url, token, self.ca_file.as_deref(), &dir)?)
    }
}

/// A listing (`files ls`, `home ls`): kind (`d`, `x` executable, `-`), size, path.
fn print_entries(entries: &[Entry]) {
    for e in entries {
        let kind = match (e.kind, e.executable) {
            (EntryKind::Dir, _) => "d",
            (EntryKind::File, true) => "x",
            (EntryKind::File, false) => "-",
        };
        println!("{kind} {:>12} {}", e.size, e.path);
    }
}

/// Prints an answer for `--json`: pretty, with its keys in order (as a `serde_json::Value`
/// orders them), whatever order its type declares them in.
fn print_json<T: Serialize>(answer: &T) {
    let v = serde_json::to_value(answer).unwrap_or_default();
    println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
}

/// A JSON array a user gave as `flag` (`-`: read from stdin), each element read as a `T`; a bad
/// element is named by its position, as the API names it (`action 2: …`).
fn user_array<T: DeserializeOwned>(arg: &str, flag: &str, what: &str) -> Result<Vec<T>> {
    let raw = if arg == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
        s
    } else {
        arg.to_string()
    };
    let items: Vec<serde_json::Value> =
        serde_json::from_str(&raw).with_context(|| format!("{flag} must be a JSON array"))?;
    items
        .into_iter()
        .enumerate()
        .map(|(i, v)| serde_json::from_value(v).map_err(|e| anyhow!("{what} {}: {e}", i + 1)))
        .collect()
}

/// The computer and bot of a command, as its routes take them (a bad bot id is refused as the
/// server refuses it).
fn ids(computer: &str, bot: &str) -> Result<(ComputerId, BotId)> {
    let bot = crate::route::bot(bot).map_err(ClientError::from)?;
    Ok((ComputerId::new(computer), bot))
}

/// Runs a parsed command; returns the process exit code.
pub async fn run(cli: Cli) -> Result<i32> {
    let g = cli.global.clone();
    match cli.command {
        Command::Serve(args) => serve::run(&g, args).await,
        Command::Computer(cmd) => computer::run(&g, cmd).await,
        Command::Workspace(cmd) => network::run_workspace(&g, cmd).await,
        Command::Exec(args) => exec::run(&g, args).await,
        Command::Ps(a) => process::ps(&g, a).await,
        Command::Logs(a) => process::logs(&g, a).await,
        Command::Attach(a) => process::attach(&g, a).await,
        Command::Kill(a) => process::kill(&g, a).await,
        Command::Files(cmd) => files::run(&g, cmd).await,
        Command::Lease(cmd) => lease::run(&g, cmd).await,
        Command::Screen(cmd) => screen::run(&g, cmd).await,
        Command::Terminal(TerminalCmd::Url { computer, bot }) => {
            screen::live_url(&g, &computer, &bot, "terminal").await
        }
        Command::Observe(a) => screen::observe(&g, a).await,
        Command::Act(a) => screen::act(&g, a).await,
        Command::Browser(cmd) => browser::run(&g, cmd).await,
        Command::Image(cmd) => crate::image::run(cmd, g.json).await,
        Command::Home(cmd) => home::run(g.client()?, g.json, cmd).await,
        Command::Activity(a) => activity::run(&g, a).await,
        Command::Mcp(cmd) => mcp::run(&g, cmd).await,
        Command::Secret(cmd) => secret::run(&g, cmd).await,
        Command::Token(cmd) => token::run(&g, cmd).await,
        Command::Preview(cmd) => preview::run(&g, cmd).await,
        Command::Recording(cmd) => recording::run(&g, cmd).await,
        Command::Pool(cmd) => pool::run(&g, cmd).await,
        Command::Service(cmd) => service::run(&g, cmd).await,
        Command::Openapi => {
            print!("{}", crate::api::openapi_json());
            Ok(0)
        }
    }
}

/// Prints a client error the way people read it and picks the exit code.
pub fn report(e: &anyhow::Error) -> i32 {
    if let Some(ClientError::Api {
        uncertain: true, ..
    }) = e.downcast_ref::<ClientError>()
    {
        eprintln!("rakazo: {e} (the outcome is uncertain)");
    } else {
        eprintln!("rakazo: {e:#}");
    }
    1
}

/// The lines of an NDJSON answer (exec's events, a process's output), each with its `\n`, as
/// they arrive.
pub(crate) struct NdjsonLines {
    body: hyper::body::Incoming,
    buf: Vec<u8>,
}

impl NdjsonLines {
    pub(crate) fn new(resp: hyper::Response<hyper::body::Incoming>) -> Self {
        Self {
            body: resp.into_body(),
            buf: Vec::new(),
        }
    }

    /// The next whole line; `None` once the answer ended.
    pub(crate) async fn next(&mut self) -> Result<Option<Vec<u8>>> {
        use http_body_util::BodyExt;
        loop {
            if let Some(nl) = self.buf.iter().position(|b| *b == b'\n') {
                return Ok(Some(self.buf.drain(..=nl).collect()));
            }
            let Some(frame) = self.body.frame().await else {
                return Ok(None);
            };
            let frame = frame.map_err(|e| anyhow!("output stream broke: {e}"))?;
            if let Ok(data) = frame.into_data() {
                self.buf.extend_from_slice(&data);
            }
        }
    }
}

/// A request body of `head` followed by this process's stdin, read as it arrives, up to its end
/// or (`until`) the first such byte, which is not sent.
pub(crate) fn stdin_body(head: Vec<u8>, until: Option<u8>) -> crate::client::ReqBody {
    use bytes::Bytes;
    use http_body_util::BodyExt;
    use tokio::io::AsyncReadExt;
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(8);
    tokio::spawn(async move {
        if tx.send(Ok(Bytes::from(head))).await.is_err() {
            return;
        }
        let mut stdin = tokio::io::stdin();
        let mut buf = vec![0u8; crate::api::PUMP_CHUNK];
        loop {
            let read = stdin.read(&mut buf).await;
            let stop = match (&read, until) {
                (Ok(n), Some(b)) => buf[..*n].iter().position(|x| *x == b),
                _ => None,
            };
            match stop {
                Some(at) => {
                    if at > 0 {
                        let _ = tx.send(Ok(Bytes::copy_from_slice(&buf[..at]))).await;
                    }
                    return;
                }
                None => {
                    if !crate::api::forward(&tx, read, &buf).await {
                        return;
                    }
                }
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|item| (item.map(hyper::body::Frame::data), rx))
    });
    http_body_util::StreamBody::new(stream).boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("rakazo").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?} does not parse: {e}"))
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The README's `browser navigate` line: the page URL is the command's own argument and
    /// never the control plane's address (`--url`), with or without `--url` given.
    #[test]
    fn the_readme_navigate_line_keeps_the_page_url_apart_from_the_server_url() {
        let page = "http://127.0.0.1:8000/";
        let readme = [
            "browser",
            "navigate",
            "c-0123456789abcdef",
            "bot-1",
            page,
            "--lease",
            "run-42:1",
        ];
        let check = |cli: Cli| -> Option<String> {
            let Command::Browser(BrowserCmd::Navigate {
                computer,
                bot,
                page_url,
                lease,
            }) = cli.command
            else {
                panic!("not browser navigate");
            };
            assert_eq!(
                (computer.as_str(), bot.as_str(), page_url.as_str()),
                ("c-0123456789abcdef", "bot-1", page)
            );
            assert_eq!(lease, "run-42:1");
            cli.global.url
        };
        // RAKAZO_URL may be set where the tests run; it is never the page.
        assert_ne!(check(parse(&readme)).as_deref(), Some(page));
        let mut with_server = readme.to_vec();
        with_server.extend(["--url", "http://cp.example:7090"]);
        assert_eq!(
            check(parse(&with_server)).as_deref(),
            Some("http://cp.example:7090")
        );
        let mut before = vec!["--url", "http://cp.example:7090"];
        before.extend(readme);
        assert_eq!(
            check(parse(&before)).as_deref(),
            Some("http://cp.example:7090")
        );
    }

    /// A subcommand argument with the id of a global option (`--url`, `--json`, `--data-dir`,
    /// `--token-file`) is silently the same value as that option: the navigate bug, for any
    /// command.
    #[test]
    fn no_subcommand_argument_shares_an_id_with_a_global_option() {
        fn walk(cmd: &clap::Command, path: &str, globals: &[String], clashes: &mut Vec<String>) {
            for a in cmd.get_arguments() {
                if globals.iter().any(|g| g == a.get_id().as_str()) {
                    clashes.push(format!("{path}: {}", a.get_id()));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), globals, clashes);
            }
        }
        let cli = Cli::command();
        let globals: Vec<String> = cli
            .get_arguments()
            .filter(|a| a.is_global_set())
            .map(|a| a.get_id().to_string())
            .collect();
        assert!(globals.contains(&"url".to_string()), "{globals:?}");
        let mut clashes = Vec::new();
        for sub in cli.get_subcommands() {
            walk(sub, sub.get_name(), &globals, &mut clashes);
        }
        assert!(clashes.is_empty(), "{clashes:?}");
    }
}
