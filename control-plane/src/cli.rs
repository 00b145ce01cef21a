//! The `rakazo` command line: `serve`, and the client commands that talk to a running server.
//!
//! The server URL and token come from flags (`--url`, `--token-file`), from `RAKAZO_URL` /
//! `RAKAZO_TOKEN`, or from the local data dir (`addresses.json`, `api-token`), in that order.
//! The token is never taken as a command-line argument, so it never shows in `ps`.

use crate::api::ApiLimits;
use crate::client::{full_body, q, Client, ClientError};
use crate::serve::{ServeConfig, ADDRESSES_FILE, API_TOKEN_FILE};
use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use clap::{Args, Parser, Subcommand};
use gateway_proto::Secret;
use http_body_util::BodyExt;
use hyper::Method;
use std::io::Write;
use std::net::SocketAddr;
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
    Home(crate::homes::cli::HomeCmd),
    /// Build the computer image for the docker provider.
    #[command(subcommand)]
    Image(crate::image::ImageCmd),
}

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

#[derive(Subcommand)]
pub enum ScreenCmd {
    /// Start (or keep) the bot's desktop.
    Ensure {
        computer: String,
        bot: String,
        #[arg(long)]
        lease: String,
    },
    /// Tear the bot's desktop down (its browser profile stays).
    Stop {
        computer: String,
        bot: String,
        #[arg(long)]
        lease: Option<String>,
    },
    /// List live desktops.
    List { computer: String },
    /// A live view URL of the bot's desktop (a control URL with --control, which needs
    /// `screen takeover` first). The URL is the credential: share it with care.
    Url {
        computer: String,
        bot: String,
        #[arg(long)]
        control: bool,
    },
    /// Take control of the bot (refused while it runs, unless it is waiting for a takeover).
    Takeover { computer: String, bot: String },
    /// Release control: control views and every terminal of the bot close.
    Release { computer: String, bot: String },
}

#[derive(Subcommand)]
pub enum TerminalCmd {
    /// A live terminal URL for the bot (needs `screen takeover` first).
    Url { computer: String, bot: String },
}

#[derive(Args)]
pub struct ObserveArgs {
    pub computer: String,
    pub bot: String,
    #[arg(long)]
    pub lease: String,
    /// Write the PNG here (unless the frame is unchanged).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Args)]
pub struct ActArgs {
    pub computer: String,
    pub bot: String,
    #[arg(long)]
    pub lease: String,
    /// The actions as a JSON array, e.g. '[{"type":"click","x":10,"y":20}]' ("-" reads stdin).
    #[arg(long)]
    pub actions: String,
    /// Observe after the actions.
    #[arg(long)]
    pub observe: bool,
    #[arg(long)]
    pub settle_ms: Option<u32>,
    /// With --observe: write the PNG here.
    #[arg(long, requires = "observe")]
    pub out: Option<PathBuf>,
}

#[derive(Args)]
pub struct ServeArgs {
    /// HTTP API address; port 0 picks a free port (written to <data dir>/addresses.json).
    #[arg(long, env = "RAKAZO_HTTP_ADDR", default_value = "127.0.0.1:7090")]
    pub http_addr: SocketAddr,
    /// QUIC tunnel address (UDP); port 0 picks a free port.
    #[arg(long, env = "RAKAZO_TUNNEL_ADDR", default_value = "127.0.0.1:7443")]
    pub tunnel_addr: SocketAddr,
    /// PostgreSQL URL; SQLite in the data dir when unset.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// The rakazo-guest binary for local computers (default: beside this binary).
    #[arg(long, env = "RAKAZO_GUEST_BIN")]
    pub guest_bin: Option<PathBuf>,
    /// Log filter handed to local guests (RUST_LOG syntax).
    #[arg(long, env = "RAKAZO_GUEST_LOG")]
    pub guest_log: Option<String>,
    /// Cap on live desktops per computer, handed to local guests (unset or 0: no cap).
    #[arg(long, env = "SANDBOX_TEAM_SCREEN_LIMIT")]
    pub screen_limit: Option<String>,
    /// Debian's noVNC files, served to live screen viewers.
    #[arg(long, env = "RAKAZO_NOVNC_DIR", default_value = "/usr/share/novnc")]
    pub novnc_dir: PathBuf,
    /// The npm install of the live pages (holds node_modules/@xterm); default: the checkout's.
    #[arg(long, env = "RAKAZO_WEB_DIR")]
    pub web_dir: Option<PathBuf>,
    /// Seconds the control plane waits on a guest: for an answer, for the next bytes of a
    /// stream (an export's progress), for a write to be taken. A guest silent for longer fails
    /// that operation with 504 guest_timeout. Exec is bounded by its command's timeout instead.
    #[arg(long, env = "RAKAZO_GUEST_TIMEOUT_SECS", default_value_t = crate::tunnel::DEFAULT_GUEST_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub guest_timeout_secs: u64,
    #[command(flatten)]
    pub homes: crate::homes::HomeArgs,
    #[command(flatten)]
    pub idle: crate::idle::IdleArgs,
    #[command(flatten)]
    pub live: crate::live::LiveArgs,
    #[command(flatten)]
    pub providers: crate::provider_set::ProviderArgs,
    #[command(flatten)]
    pub http: crate::api::HttpArgs,
}

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
    #[arg(long, short = 'i')]
    pub stdin: bool,
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

#[derive(Subcommand)]
pub enum FilesCmd {
    /// List a directory of the home.
    Ls {
        computer: String,
        #[arg(default_value = "")]
        path: String,
    },
    /// Print a file of the home to stdout.
    Cat {
        computer: String,
        path: String,
        #[arg(long)]
        max_bytes: Option<u64>,
    },
    /// Upload a local file into the home.
    Put {
        computer: String,
        local: PathBuf,
        remote: String,
        /// Make it executable (mode 0700 instead of 0600).
        #[arg(long, short = 'x')]
        executable: bool,
    },
}

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
                let v: serde_json::Value = serde_json::from_str(&text)?;
                v["http"]
                    .as_str()
                    .ok_or_else(|| anyhow!("{} has no http address", path.display()))?
                    .to_string()
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
pub(crate) fn print_entries(entries: &serde_json::Value) {
    for e in entries.as_array().into_iter().flatten() {
        let kind = if e["kind"] == "dir" {
            "d"
        } else if e["executable"] == true {
            "x"
        } else {
            "-"
        };
        println!(
            "{kind} {:>12} {}",
            e["size"].as_u64().unwrap_or(0),
            e["path"].as_str().unwrap_or("?")
        );
    }
}

fn print_json(v: &serde_json::Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
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

/// Runs a parsed command; returns the process exit code.
pub async fn run(cli: Cli) -> Result<i32> {
    let g = cli.global.clone();
    match cli.command {
        Command::Serve(args) => {
            let guest_bin = match args.guest_bin {
                Some(p) => p,
                None => std::env::current_exe()?
                    .parent()
                    .map(|d| d.join("rakazo-guest"))
                    .ok_or_else(|| anyhow!("cannot locate rakazo-guest; set RAKAZO_GUEST_BIN"))?,
            };
            crate::serve::serve(ServeConfig {
                data_dir: g.data_dir(),
                http_addr: args.http_addr,
                tunnel_addr: args.tunnel_addr,
                database_url: args.database_url,
                guest_bin,
                guest_log: args.guest_log,
                screen_limit: args.screen_limit,
                guest_timeout: std::time::Duration::from_secs(args.guest_timeout_secs),
                providers: args.providers.resolve()?,
                limits: ApiLimits::default(),
                pages: crate::live::pages::PagesConfig {
                    novnc_dir: args.novnc_dir,
                    web_dir: args
                        .web_dir
                        .unwrap_or_else(|| crate::live::pages::PagesConfig::defaults().web_dir),
                },
                homes: args.homes.resolve(&crate::homes::config::process_env)?,
                idle: args.idle.resolve()?,
                live: args.live.resolve()?,
                http: args.http.resolve()?,
            })
            .await?;
            Ok(0)
        }
        Command::Computer(cmd) => computer(&g, cmd).await,
        Command::Exec(args) => exec(&g, args).await,
        Command::Files(cmd) => files(&g, cmd).await,
        Command::Lease(cmd) => lease(&g, cmd).await,
        Command::Screen(cmd) => screen(&g, cmd).await,
        Command::Terminal(TerminalCmd::Url { computer, bot }) => {
            live_url(&g, &computer, &bot, "terminal").await
        }
        Command::Observe(a) => observe(&g, a).await,
        Command::Act(a) => act(&g, a).await,
        Command::Browser(cmd) => browser(&g, cmd).await,
        Command::Image(cmd) => crate::image::run(cmd, g.json).await,
        Command::Home(cmd) => crate::homes::cli::run(g.client()?, g.json, cmd).await,
    }
}

async fn computer(g: &Global, cmd: ComputerCmd) -> Result<i32> {
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

async fn exec(g: &Global, a: ExecArgs) -> Result<i32> {
    let c = g.client()?;
    let mut env = serde_json::Map::new();
    for kv in &a.env {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| anyhow!("--env takes KEY=VALUE, got {kv:?}"))?;
        env.insert(k.to_string(), v.into());
    }
    let mut spec = serde_json::json!({ "argv": a.argv, "env": env });
    if let Some(cwd) = a.cwd {
        spec["cwd"] = cwd.into();
    }
    if let Some(t) = a.timeout_ms {
        spec["timeout_ms"] = t.into();
    }
    if let (Some(b), Some(l)) = (a.bot, a.lease) {
        spec["bot"] = b.into();
        spec["lease"] = l.into();
    }
    let path = format!("/v1/computers/{}/exec", q(&a.computer));
    let resp = if a.stdin {
        let mut head = serde_json::to_vec(&spec)?;
        head.push(b'\n');
        c.send(
            Method::POST,
            &path,
            Some(crate::api::EXEC_STREAM_CONTENT_TYPE),
            None,
            stdin_body(head),
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
    let mut body = resp.into_body();
    let mut buf: Vec<u8> = Vec::new();
    let mut code = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| anyhow!("output stream broke: {e}"))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buf.extend_from_slice(&data);
        while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            if g.json {
                std::io::stdout().write_all(&line)?;
                std::io::stdout().flush()?;
            }
            let v: serde_json::Value = serde_json::from_slice(&line)?;
            match v["type"].as_str() {
                Some(s @ ("stdout" | "stderr")) if !g.json => {
                    let bytes = match (v["data"].as_str(), v["data_b64"].as_str()) {
                        (Some(t), _) => t.as_bytes().to_vec(),
                        (None, Some(b)) => {
                            use base64::Engine;
                            base64::engine::general_purpose::STANDARD.decode(b)?
                        }
                        _ => Vec::new(),
                    };
                    if s == "stdout" {
                        std::io::stdout().write_all(&bytes)?;
                        std::io::stdout().flush()?;
                    } else {
                        std::io::stderr().write_all(&bytes)?;
                    }
                }
                Some("exit") => {
                    let c = v["code"].as_i64().unwrap_or(1);
                    if let (Some(m), false) = (v["message"].as_str(), g.json) {
                        eprintln!("rakazo: {m}");
                    }
                    code = Some(i32::try_from(c).unwrap_or(1));
                }
                Some("error") => {
                    if !g.json {
                        eprintln!("rakazo: {}", v["message"].as_str().unwrap_or("error"));
                    }
                    code = Some(125);
                }
                _ => {}
            }
        }
    }
    code.ok_or_else(|| {
        anyhow!("the command's output ended without an exit status; its outcome is uncertain")
    })
}

async fn files(g: &Global, cmd: FilesCmd) -> Result<i32> {
    let c = g.client()?;
    match cmd {
        FilesCmd::Ls { computer, path } => {
            let v = c
                .json(
                    Method::GET,
                    &format!("/v1/computers/{}/files?path={}", q(&computer), q(&path)),
                    None,
                )
                .await?;
            if g.json {
                print_json(&v);
            } else {
                print_entries(&v["entries"]);
            }
        }
        FilesCmd::Cat {
            computer,
            path,
            max_bytes,
        } => {
            let mut url = format!(
                "/v1/computers/{}/files/content?path={}",
                q(&computer),
                q(&path)
            );
            if let Some(m) = max_bytes {
                url.push_str(&format!("&max_bytes={m}"));
            }
            let resp = c
                .send(Method::GET, &url, None, None, full_body(Bytes::new()))
                .await?;
            let mut body = resp.into_body();
            let mut out = std::io::stdout().lock();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| anyhow!("download broke: {e}"))?;
                if let Ok(data) = frame.into_data() {
                    out.write_all(&data)?;
                }
            }
            out.flush()?;
        }
        FilesCmd::Put {
            computer,
            local,
            remote,
            executable,
        } => {
            let file = tokio::fs::File::open(&local)
                .await
                .with_context(|| format!("open {}", local.display()))?;
            let len = file.metadata().await?.len();
            let stream = tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024);
            let body = http_body_util::StreamBody::new(futures_util::StreamExt::map(stream, |r| {
                r.map(hyper::body::Frame::data)
            }));
            let url = format!(
                "/v1/computers/{}/files/content?path={}&executable={executable}",
                q(&computer),
                q(&remote)
            );
            let resp = c
                .send(
                    Method::PUT,
                    &url,
                    Some("application/octet-stream"),
                    Some(len),
                    body.boxed(),
                )
                .await?;
            let v: serde_json::Value =
                serde_json::from_slice(&resp.into_body().collect().await?.to_bytes())?;
            if g.json {
                print_json(&v)
            } else {
                println!("wrote {} bytes to {remote}", v["written"]);
            }
        }
    }
    Ok(0)
}

async fn lease(g: &Global, cmd: LeaseCmd) -> Result<i32> {
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

/// `POST .../screens/{bot}/takeover` or `.../release-control`.
async fn control_action(
    c: &Client,
    computer: &str,
    bot: &str,
    action: &str,
) -> Result<serde_json::Value> {
    let path = format!("/v1/computers/{}/screens/{}/{action}", q(computer), q(bot));
    Ok(c.json(Method::POST, &path, Some(&serde_json::json!({})))
        .await?)
}

/// Prints a capability URL: on stdout only, so it can be piped and never lands in a log.
async fn live_url(g: &Global, computer: &str, bot: &str, policy: &str) -> Result<i32> {
    let c = g.client()?;
    let path = if policy == "terminal" {
        format!("/v1/computers/{}/terminals/{}/url", q(computer), q(bot))
    } else {
        format!("/v1/computers/{}/screens/{}/url", q(computer), q(bot))
    };
    let v = c
        .json(
            Method::POST,
            &path,
            Some(&serde_json::json!({ "policy": policy })),
        )
        .await?;
    if g.json {
        print_json(&v);
    } else {
        println!("{}", v["url"].as_str().unwrap_or_default());
    }
    Ok(0)
}

async fn screen(g: &Global, cmd: ScreenCmd) -> Result<i32> {
    let c = g.client()?;
    let v = match cmd {
        ScreenCmd::Ensure {
            computer,
            bot,
            lease,
        } => {
            let path = format!("/v1/computers/{}/screens/{}/ensure", q(&computer), q(&bot));
            c.json(
                Method::POST,
                &path,
                Some(&serde_json::json!({ "lease": lease })),
            )
            .await?
        }
        ScreenCmd::Url {
            computer,
            bot,
            control,
        } => {
            let policy = if control { "control" } else { "view" };
            return live_url(g, &computer, &bot, policy).await;
        }
        ScreenCmd::Takeover { computer, bot } => {
            let v = control_action(&c, &computer, &bot, "takeover").await?;
            if g.json {
                print_json(&v);
            } else {
                println!(
                    "control of {bot} taken (lease {}, until {} ms)",
                    v["control_lease"].as_str().unwrap_or("?"),
                    v["expires_at_ms"]
                );
            }
            return Ok(0);
        }
        ScreenCmd::Release { computer, bot } => {
            let v = control_action(&c, &computer, &bot, "release-control").await?;
            if g.json {
                print_json(&v);
            } else {
                println!("control of {bot} released");
            }
            return Ok(0);
        }
        ScreenCmd::Stop {
            computer,
            bot,
            lease,
        } => {
            let path = format!("/v1/computers/{}/screens/{}/release", q(&computer), q(&bot));
            c.json(
                Method::POST,
                &path,
                Some(&serde_json::json!({ "lease": lease })),
            )
            .await?
        }
        ScreenCmd::List { computer } => {
            c.json(
                Method::GET,
                &format!("/v1/computers/{}/screens", q(&computer)),
                None,
            )
            .await?
        }
    };
    if g.json {
        print_json(&v);
    } else if let Some(all) = v["screens"].as_array() {
        for s in all {
            println!(
                "{}\tslot {}\tdisplay :{}",
                s["bot"].as_str().unwrap_or("?"),
                s["slot"],
                s["display"]
            );
        }
    } else if v["released"] == true {
        println!("released");
    } else {
        println!(
            "{}\tslot {}\tdisplay :{}",
            v["bot"].as_str().unwrap_or("?"),
            v["slot"],
            v["display"]
        );
    }
    Ok(0)
}

/// Writes an observation's image to `out` (if any) and prints its metadata.
fn save_observation(g: &Global, obs: &serde_json::Value, out: Option<&PathBuf>) -> Result<()> {
    use base64::Engine;
    if let (Some(path), Some(img)) = (out, obs["image"].as_str()) {
        let png = base64::engine::general_purpose::STANDARD.decode(img)?;
        std::fs::write(path, png).with_context(|| format!("write {}", path.display()))?;
    }
    if g.json {
        let mut meta = obs.clone();
        meta["image"] = serde_json::Value::Null;
        print_json(&meta);
    } else if obs["unchanged"] == true {
        println!(
            "frame {} unchanged: the previous screenshot remains valid",
            obs["frameId"].as_str().unwrap_or("?")
        );
    } else {
        println!(
            "frame {} {}x{} cursor {},{} window {:?}{}",
            obs["frameId"].as_str().unwrap_or("?"),
            obs["width"],
            obs["height"],
            obs["cursor"]["x"],
            obs["cursor"]["y"],
            obs["activeWindow"]["title"].as_str().unwrap_or(""),
            out.map(|p| format!(" -> {}", p.display()))
                .unwrap_or_default(),
        );
    }
    Ok(())
}

async fn observe(g: &Global, a: ObserveArgs) -> Result<i32> {
    let c = g.client()?;
    let path = format!(
        "/v1/computers/{}/screens/{}/observe",
        q(&a.computer),
        q(&a.bot)
    );
    let v = c
        .json(
            Method::POST,
            &path,
            Some(&serde_json::json!({ "lease": a.lease })),
        )
        .await?;
    save_observation(g, &v, a.out.as_ref())?;
    Ok(0)
}

async fn act(g: &Global, a: ActArgs) -> Result<i32> {
    let c = g.client()?;
    let raw = if a.actions == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
        s
    } else {
        a.actions.clone()
    };
    let actions: serde_json::Value =
        serde_json::from_str(&raw).context("--actions must be a JSON array")?;
    let mut body =
        serde_json::json!({ "lease": a.lease, "actions": actions, "observe": a.observe });
    if let Some(ms) = a.settle_ms {
        body["settle_ms"] = ms.into();
    }
    let path = format!("/v1/computers/{}/screens/{}/act", q(&a.computer), q(&a.bot));
    let v = c.json(Method::POST, &path, Some(&body)).await?;
    if let Some(obs) = v.get("observation") {
        if g.json {
            let mut meta = v.clone();
            meta["observation"]["image"] = serde_json::Value::Null;
            print_json(&meta);
            if let (Some(path), Some(img)) = (a.out.as_ref(), obs["image"].as_str()) {
                use base64::Engine;
                std::fs::write(path, base64::engine::general_purpose::STANDARD.decode(img)?)?;
            }
        } else {
            println!(
                "completed {} actions (settled after {} ms)",
                v["completed"], v["settledMs"]
            );
            save_observation(g, obs, a.out.as_ref())?;
        }
    } else if g.json {
        print_json(&v);
    } else {
        println!("completed {} actions", v["completed"]);
    }
    Ok(0)
}

async fn browser(g: &Global, cmd: BrowserCmd) -> Result<i32> {
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

/// A request body of `head` followed by this process's stdin, read as it arrives.
fn stdin_body(head: Vec<u8>) -> crate::client::ReqBody {
    use tokio::io::AsyncReadExt;
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(8);
    tokio::spawn(async move {
        if tx.send(Ok(Bytes::from(head))).await.is_err() {
            return;
        }
        let mut stdin = tokio::io::stdin();
        let mut buf = vec![0u8; crate::api::PUMP_CHUNK];
        while crate::api::forward(&tx, stdin.read(&mut buf).await, &buf).await {}
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
