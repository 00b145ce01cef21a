//! The MCP tools of one session: each is a thin translation from its arguments to the operation
//! the HTTP API runs, with typed values (`api::screens::observe_bot`/`Batch`, `api::browser::run`,
//! `api::exec::start`, `api::files::{list_entries, open_read, write_file}`,
//! `live::authority::set_waiting_takeover`), under the session's lease and through the same idle
//! gate (`api::operate`, with the rule of the route the tool stands for), so limits, error texts and
//! activity-feed lines are the API's. Each call is one operation in the metrics, labelled
//! `mcp.<tool>`. A refusal is a tool
//! result with `isError` whose text is the API's message (prefixed with its code), never a
//! protocol error: the model reads it.

use crate::activity::Tail;
use crate::api::browser::Tool;
use crate::api::screens::Batch;
use crate::api::{self, Api, ApiError};
use crate::clock::now_ms;
use crate::guest::ByteError;
use crate::mcp::session::{Binding, Held, Registry};
use crate::mcp::LEASE_HEADER;
use crate::metrics::Outcome;
use crate::route::Endpoint;
use crate::schema::code::ApiCode;
use crate::schema::exec::ExecSpec;
use crate::schema::screen::Observation;
use base64::Engine;
use bytes::Bytes;
use gateway_proto::{BotLease, LeaseToken};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, InitializeRequestParams, InitializeResult,
    ProtocolVersion, ServerCapabilities, ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData as McpError, RoleServer};
use serde::Deserialize;
use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// `shell`'s timeout when the call names none.
pub const DEFAULT_SHELL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long past its own timeout `shell` waits for the guest's exit before giving up.
const SHELL_GRACE: Duration = Duration::from_secs(30);
/// `read_file`'s cap when the call names none, and the largest it may name.
pub const READ_DEFAULT_MAX: u64 = 1 << 20;
pub const READ_MAX: u64 = 16 << 20;
/// Chunks pulled from the guest while reading a file.
const READ_CHUNK: usize = 256 * 1024;

/// The handler of one MCP session.
#[derive(Clone)]
pub struct Tools {
    api: Arc<Api>,
    binding: Binding,
    registry: Arc<Registry>,
    /// Set by `initialize`: the session's lease.
    held: Arc<OnceLock<Arc<Held>>>,
    tool_router: ToolRouter<Self>,
}

/// A refusal as the model reads it.
fn refused(e: ApiError) -> CallToolResult {
    let mut text = format!("{}: {}", e.code, e.message);
    if e.uncertain {
        text.push_str(" (the outcome is uncertain: inspect the state before trying again)");
    }
    CallToolResult::error(vec![ContentBlock::text(text)])
}

fn json_text<T: serde::Serialize>(v: &T) -> ContentBlock {
    ContentBlock::text(serde_json::to_string(v).unwrap_or_default())
}

/// An observation as tool content: its metadata as JSON text, then the PNG as image content,
/// or (an identical frame) no image and the note that the previous screenshot remains valid.
/// Changed regions follow as one image each, in the order the metadata lists them (their
/// `image` fields emptied there).
fn observation_content(mut o: Observation) -> Vec<ContentBlock> {
    let image = o.image.take();
    let regions: Vec<String> = o
        .regions
        .iter_mut()
        .map(|r| std::mem::take(&mut r.image))
        .collect();
    let mut content = vec![json_text(&o)];
    if let Some(png) = image {
        content.push(ContentBlock::image(png, o.mime_type.clone()));
    }
    for png in regions {
        content.push(ContentBlock::image(png, o.mime_type.clone()));
    }
    content
}

/// How computer_observe takes its frame (docs/screens.md#observe-and-act).
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ObserveParams {
    /// Scale the frame down to this width (keeping the aspect ratio); pointer actions given in
    /// its coordinates need `frame` on computer_act.
    #[serde(default)]
    pub width: Option<u16>,
    /// Draw each interactive element of the page as a mark labelled with its ref (usable as
    /// {"type": "click", "ref": ...}) and list the marks with their boxes.
    #[serde(default)]
    pub marks: bool,
    /// Send only the regions changed since the previous observation when cheaper.
    #[serde(default)]
    pub changes: bool,
    /// Always send the whole frame.
    #[serde(default)]
    pub full: bool,
}

impl ObserveParams {
    fn options(&self) -> crate::schema::screen::ObserveOptions {
        crate::schema::screen::ObserveOptions {
            width: self.width,
            marks: self.marks,
            changes: self.changes,
            full: self.full,
            budget: None,
        }
    }
}

/// A frame's size: the coordinate space of computer_act's pointer actions.
#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FrameParams {
    pub width: u16,
    pub height: u16,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ActParams {
    /// 1 to 24 actions, run in order. Each is an object with "type": click|move|down|up {x, y,
    /// button?: left|right, double?: bool}, click {ref: an element ref from marks or a
    /// snapshot, button?, double?}, type {text}, key {key, modifiers?: [ctrl, alt, shift,
    /// meta]}, scroll {direction: up|down, amount?: 1..20}, wait {ms?: 0..5000}, focus|launch
    /// {application, uri?}, open {target: path or http(s) URL}.
    pub actions: Vec<serde_json::Value>,
    /// Return an observation after the actions.
    #[serde(default)]
    pub observe: bool,
    /// Wait this long (0..5000 ms) after the actions instead of until the screen is quiet.
    #[serde(default)]
    pub settle_ms: Option<u32>,
    /// The coordinates are in a frame of this size (a scaled-down observation's width and
    /// height); omitted: screen pixels.
    #[serde(default)]
    pub frame: Option<FrameParams>,
    /// How to take the observation after the actions.
    #[serde(default)]
    pub observe_options: Option<ObserveParams>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NavigateParams {
    /// An http or https URL without credentials.
    pub url: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BrowserActParams {
    /// 1 to 24 steps, validated before any runs: {"type": "click", "ref"}, {"type": "fill",
    /// "ref", "text"}, {"type": "type", "ref", "text"}, {"type": "select", "ref", "value"},
    /// {"type": "press", "key"}. Refs come from the latest browser_snapshot.
    pub steps: Vec<serde_json::Value>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellParams {
    /// A shell command line, run with `sh -c`.
    pub command: String,
    /// Working directory relative to the home (default: the bot's own directory).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Kill the command (exit 124) after this many milliseconds; default 120000.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Text given to the command on stdin.
    #[serde(default)]
    pub stdin: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    /// File path relative to the home.
    pub path: String,
    /// Refuse files larger than this (default 1048576, at most 16777216).
    #[serde(default)]
    pub max_bytes: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteParams {
    /// File path relative to the home; parent directories are created.
    pub path: String,
    /// The whole new content.
    pub content: String,
    /// `base64` when content is base64-encoded bytes; default `utf8`.
    #[serde(default)]
    pub encoding: Option<String>,
    /// Make the file executable.
    #[serde(default)]
    pub executable: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Directory relative to the home; default the home itself.
    #[serde(default)]
    pub path: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessStartParams {
    /// A shell command line, run with `sh -c` as a detached process that outlives this call.
    pub command: String,
    /// Working directory relative to the home (default: the bot's own directory).
    #[serde(default)]
    pub cwd: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessLogsParams {
    /// The process's id (from process_start or process_list).
    pub id: u32,
    /// Read from this byte offset of its output (default: the oldest kept).
    #[serde(default)]
    pub offset: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessKillParams {
    pub id: u32,
    /// TERM (default), KILL, INT, HUP, QUIT, USR1, USR2, STOP or CONT.
    #[serde(default)]
    pub signal: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HomeDiffParams {
    /// The earlier revision (from home_revisions).
    pub from: u64,
    /// The later revision.
    pub to: u64,
}

/// The most changes `home_diff` returns.
const HOME_DIFF_MAX: usize = 1000;

/// The most output `process_logs` returns: the last 64 KiB of what it read.
const PROCESS_LOGS_MAX: usize = 64 << 10;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TakeoverParams {
    /// false withdraws an earlier request; default true.
    #[serde(default)]
    pub waiting: Option<bool>,
}

impl Tools {
    pub fn new(api: Arc<Api>, binding: Binding, registry: Arc<Registry>) -> Self {
        Self {
            api,
            binding,
            registry,
            held: Arc::new(OnceLock::new()),
            tool_router: Self::tool_router(),
        }
    }

    fn id(&self) -> &str {
        &self.binding.computer
    }

    /// The session's lease, after checking this request came to the session's own endpoint
    /// (a session id is only good at the path it was made at).
    fn lease(&self, ctx: &RequestContext<RoleServer>) -> Result<LeaseToken, ApiError> {
        let Some(held) = self.held.get() else {
            return Err(ApiError::bad_request(
                "no MCP session: connect with the initialize handshake (protocol 2025-11-25 or \
                 earlier) to get a session holding the bot's lease",
            ));
        };
        if let Some(parts) = ctx.extensions.get::<hyper::http::request::Parts>() {
            if parts.uri.path().trim_end_matches('/') != self.binding.endpoint() {
                return Err(ApiError::not_found("no such MCP session here"));
            }
            if let Some(sid) = parts
                .headers
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
            {
                held.register(sid);
            }
        }
        if let Some(why) = held.lost() {
            return Err(ApiError::new(
                ApiCode::LeaseLost,
                format!(
                    "this session no longer holds the bot's lease ({why}); start a new session"
                ),
            ));
        }
        Ok(held.token.clone())
    }

    fn bot_lease(&self, token: LeaseToken) -> BotLease {
        BotLease {
            bot: self.binding.bot.clone(),
            token,
        }
    }

    /// Runs tool call `tool` (its metrics label) under the session's lease, as the operation
    /// `endpoint` on the session's computer: through the API's idle gate with that route's
    /// rule, recorded in the metrics under the tool's own name.
    async fn run<F, Fut>(
        &self,
        ctx: &RequestContext<RoleServer>,
        tool: &'static str,
        endpoint: Endpoint,
        op: F,
    ) -> CallToolResult
    where
        F: FnOnce(LeaseToken) -> Fut,
        Fut: std::future::Future<Output = Result<CallToolResult, ApiError>>,
    {
        let started = crate::clock::monotonic();
        let result: Result<CallToolResult, ApiError> = async {
            let lease = self.lease(ctx)?;
            let (answer, _operation) =
                api::operate(&self.api, endpoint, Some(self.id()), op(lease)).await?;
            Ok(answer)
        }
        .await;
        let outcome = match &result {
            Ok(_) => Outcome::Ok,
            Err(e) => Outcome::of_status(e.status().as_u16(), e.uncertain),
        };
        let took = started.elapsed();
        self.api.core.metrics.operation(tool, outcome, took);
        result.unwrap_or_else(refused)
    }

    async fn page(
        &self,
        tool: Tool,
        lease: LeaseToken,
        url: Option<String>,
        steps: Option<Vec<serde_json::Value>>,
    ) -> Result<CallToolResult, ApiError> {
        let steps = steps
            .map(|s| serde_json::from_value(serde_json::Value::Array(s)))
            .transpose()
            .map_err(api::invalid_json)?;
        let bot = self.binding.bot.clone();
        let result = api::browser::run(&self.api, self.id(), bot, lease, tool, url, steps).await?;
        Ok(CallToolResult::success(vec![json_text(&result)]))
    }
}

#[tool_router]
impl Tools {
    #[tool(
        description = "Screenshot the bot's desktop: metadata (frameId, size, cursor, kind) and \
                       a PNG, or none when unchanged. Options: width (scale down), marks \
                       (interactive elements drawn and listed with their refs and boxes), \
                       changes (only the changed regions, each an image to paste at its x, y)."
    )]
    async fn computer_observe(
        &self,
        Parameters(p): Parameters<ObserveParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        Ok(self
            .run(
                &ctx,
                "mcp.computer_observe",
                Endpoint::Observe,
                |lease| async move {
                    let options = api::screens::wire_options(&p.options())?;
                    let o = api::screens::observe_bot(
                        &self.api,
                        self.id(),
                        self.binding.bot.clone(),
                        lease,
                        options,
                    )
                    .await?;
                    Ok(CallToolResult::success(observation_content(o)))
                },
            )
            .await)
    }

    #[tool(
        description = "Run 1-24 desktop actions in order (pointer, keys, typing, scroll, wait, \
                       focus/launch an application, open a path or URL). Coordinates are \
                       screen pixels, or a scaled frame's with `frame`; a click may take a ref. \
                       A visual action repeated on an unchanged screen is refused after 3 tries."
    )]
    async fn computer_act(
        &self,
        Parameters(p): Parameters<ActParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        Ok(self
            .run(
                &ctx,
                "mcp.computer_act",
                Endpoint::Act,
                |lease| async move {
                    let options = p.observe_options.as_ref().map(ObserveParams::options);
                    let frame = p.frame.map(|f| crate::schema::screen::FrameSize {
                        width: f.width,
                        height: f.height,
                    });
                    let batch = Batch::of_values(lease, &p.actions, p.observe, p.settle_ms)?
                        .in_frame(frame, options.as_ref())?;
                    let bot = self.binding.bot.clone();
                    let mut result = batch.run(&self.api, self.id(), bot).await?;
                    let observation = result.observation.take();
                    let mut content = vec![json_text(&result)];
                    if let Some(o) = observation {
                        content.extend(observation_content(o));
                    }
                    Ok(CallToolResult::success(content))
                },
            )
            .await)
    }

    #[tool(
        description = "Open an http(s) URL in the bot's browser tab and return a page snapshot \
                       (url, title, visible text, interactive elements with refs)."
    )]
    async fn browser_navigate(
        &self,
        Parameters(p): Parameters<NavigateParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        Ok(self
            .run(
                &ctx,
                "mcp.browser_navigate",
                Endpoint::BrowserNavigate,
                |lease| self.page(Tool::Navigate, lease, Some(p.url), None),
            )
            .await)
    }

    #[tool(
        description = "Snapshot the bot's browser tab: url, title, visible text and up to 80 \
                       interactive elements, each with a ref (e.g. e12) for browser_act."
    )]
    async fn browser_snapshot(
        &self,
        Parameters(_): Parameters<NoParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        Ok(self
            .run(
                &ctx,
                "mcp.browser_snapshot",
                Endpoint::BrowserSnapshot,
                |lease| self.page(Tool::Snapshot, lease, None, None),
            )
            .await)
    }

    #[tool(
        description = "Act on elements of the latest snapshot by ref: click, fill, type, \
                       select, press. Returns a fresh snapshot, or {ok: false, completed, \
                       uncertain, error}; never retry completed or uncertain steps blindly."
    )]
    async fn browser_act(
        &self,
        Parameters(p): Parameters<BrowserActParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        Ok(self
            .run(&ctx, "mcp.browser_act", Endpoint::BrowserAct, |lease| {
                self.page(Tool::Act, lease, None, Some(p.steps))
            })
            .await)
    }

    #[tool(
        description = "Run a shell command (sh -c) on the computer as the bot; returns its exit \
                       code and the last 64 KiB of stdout and stderr. Killed with exit 124 \
                       after timeout_ms (default 120000)."
    )]
    async fn shell(
        &self,
        Parameters(p): Parameters<ShellParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        Ok(self
            .run(&ctx, "mcp.shell", Endpoint::Exec, |lease| {
                self.shell_run(lease, p)
            })
            .await)
    }

    #[tool(
        description = "Start a shell command (sh -c) as a detached process that keeps running \
                       after this call (a dev server, a long build). Returns its id; read its \
                       output with process_logs, stop it with process_kill."
    )]
    async fn process_start(
        &self,
        Parameters(p): Parameters<ProcessStartParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        Ok(self
            .run(
                &ctx,
                "mcp.process_start",
                Endpoint::StartProcess,
                |lease| async move {
                    let spec = ExecSpec {
                        argv: vec!["sh".into(), "-c".into(), p.command],
                        cwd: p.cwd,
                        bot: Some(self.binding.bot.as_str().to_string()),
                        lease: Some(lease.to_string()),
                        ..ExecSpec::default()
                    };
                    let info = api::processes::start_spec(&self.api, self.id(), spec).await?;
                    Ok(CallToolResult::success(vec![json_text(
                        &api::processes::view(info),
                    )]))
                },
            )
            .await)
    }

    #[tool(
        description = "List the computer's detached processes: id, state (running or exited), \
                       exit code, output size, command."
    )]
    async fn process_list(
        &self,
        Parameters(_): Parameters<NoParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        Ok(self
            .run(
                &ctx,
                "mcp.process_list",
                Endpoint::ListProcesses,
                |_lease| async move {
                    let all = self
                        .api
                        .core
                        .call(self.id(), gateway_proto::process::ProcList)
                        .await?;
                    let list = crate::schema::process::ProcessList {
                        processes: all.into_iter().map(api::processes::view).collect(),
                    };
                    Ok(CallToolResult::success(vec![json_text(&list)]))
                },
            )
            .await)
    }

    #[tool(
        description = "Read a detached process's output (stdout and stderr interleaved) from \
                       offset; returns its last 64 KiB with the offsets read, how many bytes \
                       were dropped (older than the computer keeps), and its exit if it ended. \
                       Call again with offset=end for what came since."
    )]
    async fn process_logs(
        &self,
        Parameters(p): Parameters<ProcessLogsParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        Ok(self
            .run(
                &ctx,
                "mcp.process_logs",
                Endpoint::ProcessLogs,
                |_lease| async move {
                    let g = api::processes::gather(
                        &self.api,
                        self.id(),
                        p.id,
                        p.offset,
                        PROCESS_LOGS_MAX,
                    )
                    .await?;
                    let result = serde_json::json!({
                        "offset": g.offset,
                        "end": g.end,
                        "dropped": g.dropped,
                        "output": String::from_utf8_lossy(&g.output),
                        "exit_code": g.exit.as_ref().map(|e| e.code),
                    });
                    Ok(CallToolResult::success(vec![json_text(&result)]))
                },
            )
            .await)
    }

    #[tool(
        description = "List the revisions of the computer's stored home, oldest first: number, \
                       time, cause (run_end, stop, idle, manual, restore, fork), files, size and \
                       bytes each added. Every checkpoint is one."
    )]
    async fn home_revisions(
        &self,
        Parameters(_): Parameters<NoParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        Ok(self
            .run(
                &ctx,
                "mcp.home_revisions",
                Endpoint::HomeRevisions,
                |_lease| async move {
                    let listed = api::homes::revisions_of(&self.api, self.id()).await?;
                    Ok(CallToolResult::success(vec![json_text(&listed)]))
                },
            )
            .await)
    }

    #[tool(
        description = "What changed in the stored home between two revisions: paths added, \
                       removed and changed (at most 1000; truncated says if more)."
    )]
    async fn home_diff(
        &self,
        Parameters(p): Parameters<HomeDiffParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        Ok(self
            .run(
                &ctx,
                "mcp.home_diff",
                Endpoint::HomeDiff,
                |_lease| async move {
                    if p.from == 0 || p.to == 0 {
                        return Err(ApiError::bad_request("revisions are numbered from 1"));
                    }
                    let d = api::homes::diff_of(&self.api, self.id(), p.from, p.to, HOME_DIFF_MAX)
                        .await?;
                    Ok(CallToolResult::success(vec![json_text(&d)]))
                },
            )
            .await)
    }

    #[tool(description = "Send a signal (default TERM) to a detached process's group.")]
    async fn process_kill(
        &self,
        Parameters(p): Parameters<ProcessKillParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        Ok(self
            .run(
                &ctx,
                "mcp.process_kill",
                Endpoint::KillProcess,
                |lease| async move {
                    let info = api::processes::kill_signal(
                        &self.api,
                        self.id(),
                        p.id,
                        p.signal.as_deref(),
                        Some(self.bot_lease(lease)),
                    )
                    .await?;
                    Ok(CallToolResult::success(vec![json_text(
                        &api::processes::view(info),
                    )]))
                },
            )
            .await)
    }

    #[tool(
        description = "Read a file of the computer's home (path relative to the home). Text \
                       comes back as text, other bytes as base64. Files over max_bytes \
                       (default 1 MiB) are refused."
    )]
    async fn read_file(
        &self,
        Parameters(p): Parameters<ReadParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        Ok(self
            .run(&ctx, "mcp.read_file", Endpoint::ReadFile, |lease| {
                self.read_run(lease, p)
            })
            .await)
    }

    #[tool(
        description = "Write a whole file in the computer's home (path relative to the home), \
                       replacing it atomically; content is UTF-8 text, or bytes with \
                       encoding=base64."
    )]
    async fn write_file(
        &self,
        Parameters(p): Parameters<WriteParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        Ok(self
            .run(
                &ctx,
                "mcp.write_file",
                Endpoint::WriteFile,
                |lease| async move {
                    let bytes = match p.encoding.as_deref() {
                        None | Some("utf8") => Bytes::from(p.content.into_bytes()),
                        Some("base64") => Bytes::from(
                            base64::engine::general_purpose::STANDARD
                                .decode(p.content.as_bytes())
                                .map_err(|e| {
                                    ApiError::bad_request(format!("content is not base64: {e}"))
                                })?,
                        ),
                        Some(other) => {
                            return Err(ApiError::bad_request(format!(
                                "encoding must be utf8 or base64, got {:?}",
                                other.chars().take(32).collect::<String>()
                            )))
                        }
                    };
                    let size = bytes.len() as u64;
                    let written = api::files::write_file(
                        &self.api,
                        self.id(),
                        p.path.clone(),
                        p.executable,
                        Some(self.bot_lease(lease)),
                        size,
                        futures_util::stream::iter([Ok::<_, std::convert::Infallible>(bytes)]),
                    )
                    .await?;
                    Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                        "wrote {written} bytes to {}",
                        p.path
                    ))]))
                },
            )
            .await)
    }

    #[tool(
        description = "List a directory of the computer's home, recursively: path, kind \
                       (file|dir), size, executable. Symlinks are skipped."
    )]
    async fn list_files(
        &self,
        Parameters(p): Parameters<ListParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        Ok(self
            .run(
                &ctx,
                "mcp.list_files",
                Endpoint::ListFiles,
                |lease| async move {
                    let listing = api::files::list_entries(
                        &self.api,
                        self.id(),
                        p.path.unwrap_or_default(),
                        Some(self.bot_lease(lease)),
                    )
                    .await?;
                    Ok(CallToolResult::success(vec![json_text(&listing)]))
                },
            )
            .await)
    }

    #[tool(
        description = "Ask a person to take over the bot's screen (for a login, 2FA, a CAPTCHA \
                       or a judgment call). While waiting, they may take control; observe \
                       after they are done. waiting=false withdraws the request."
    )]
    async fn request_takeover(
        &self,
        Parameters(p): Parameters<TakeoverParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        Ok(self
            .run(
                &ctx,
                "mcp.request_takeover",
                Endpoint::WaitingTakeover,
                |lease| async move {
                    let waiting = p.waiting.unwrap_or(true);
                    crate::live::authority::set_waiting_takeover(
                        &self.api.core,
                        self.id(),
                        &self.binding.bot,
                        &lease,
                        waiting,
                        now_ms(),
                    )
                    .await
                    .map_err(ApiError::from)?;
                    let text = if waiting {
                        "Takeover requested: a person may now take control of this screen. Wait, \
                     then observe before continuing."
                    } else {
                        "Takeover request withdrawn."
                    };
                    Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
                },
            )
            .await)
    }
}

impl Tools {
    async fn shell_run(
        &self,
        lease: LeaseToken,
        p: ShellParams,
    ) -> Result<CallToolResult, ApiError> {
        let timeout_ms = p
            .timeout_ms
            .unwrap_or(DEFAULT_SHELL_TIMEOUT.as_millis() as u64);
        let stdin = p.stdin.map(|s| Bytes::from(s.into_bytes()));
        let spec = ExecSpec {
            argv: vec!["sh".into(), "-c".into(), p.command],
            cwd: p.cwd,
            env: Default::default(),
            timeout_ms: Some(timeout_ms),
            stdin: None,
            bot: None,
            lease: None,
        };
        api::exec::check(&spec)?;
        let lease = Some(self.bot_lease(lease));
        let (exec, record) =
            api::exec::start(&self.api, self.id(), spec, lease, stdin.is_some()).await?;
        let mut tail = Tail::default();
        let deadline = Duration::from_millis(timeout_ms).saturating_add(SHELL_GRACE);
        let ran =
            tokio::time::timeout(deadline, super::shell::collect(exec, stdin, &mut tail)).await;
        let (outcome, result) = match ran {
            Ok(Ok((outcome, result))) => (outcome, Ok(result)),
            Ok(Err((outcome, e))) => (outcome, Err(e)),
            Err(_) => {
                let e = ApiError::new(
                    ApiCode::GuestTimeout,
                    format!(
                        "the command did not end within {} ms of its timeout; it was aborted",
                        SHELL_GRACE.as_millis()
                    ),
                );
                let outcome = crate::activity::ExecOutcome {
                    exit_code: None,
                    error: Some(e.message.clone()),
                    uncertain: true,
                };
                (outcome, Err(e))
            }
        };
        let activity = self.api.core.activity.clone();
        tokio::spawn(async move { activity.command(&record, outcome, Some(&tail)).await });
        result
    }

    async fn read_run(&self, lease: LeaseToken, p: ReadParams) -> Result<CallToolResult, ApiError> {
        let max = p.max_bytes.unwrap_or(READ_DEFAULT_MAX);
        if max > READ_MAX {
            return Err(ApiError::bad_request(format!(
                "max_bytes must be at most {READ_MAX}"
            )));
        }
        let (size, mut bytes) = api::files::open_read(
            &self.api,
            self.id(),
            p.path.clone(),
            Some(max),
            Some(self.bot_lease(lease)),
        )
        .await?;
        let mut buf = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        loop {
            match bytes.next(READ_CHUNK).await {
                Ok(Some(chunk)) => buf.extend_from_slice(&chunk),
                Ok(None) => break,
                Err(ByteError::Overrun) => {
                    return Err(ApiError::new(
                        ApiCode::GuestProtocolError,
                        "guest sent more bytes than announced",
                    ))
                }
                Err(ByteError::Tunnel(e)) => return Err(e.into()),
            }
        }
        let content = match String::from_utf8(buf) {
            Ok(text) => ContentBlock::text(text),
            Err(e) => ContentBlock::text(format!(
                "{} is not UTF-8 text; its {size} bytes in base64:\n{}",
                p.path,
                base64::engine::general_purpose::STANDARD.encode(e.into_bytes())
            )),
        };
        Ok(CallToolResult::success(vec![content]))
    }
}

#[tool_handler(router = self.tool_router)]
impl rmcp::ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("rakazo", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "Tools for bot {} on computer {}: a Linux desktop with a browser, a shell and \
                 the bot's files. This session holds the bot's execution lease until it ends.",
                self.binding.bot, self.binding.computer
            ))
    }

    /// Sessions need the initialize handshake (the 2026-07-28 protocol has none, so no session
    /// to hold a lease in).
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Owned(vec![
            ProtocolVersion::V_2025_11_25,
            ProtocolVersion::V_2025_06_18,
            ProtocolVersion::V_2025_03_26,
        ])
    }

    /// Starts the session: negotiates, then takes (or checks) the bot's lease.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        let result = self.negotiate_initialize(&request)?;
        let given = match context
            .extensions
            .get::<hyper::http::request::Parts>()
            .and_then(|p| p.headers.get(LEASE_HEADER))
        {
            Some(v) => Some(
                v.to_str()
                    .ok()
                    .and_then(|s| LeaseToken::parse(s).ok())
                    .ok_or_else(|| {
                        McpError::invalid_params(
                            format!("the {LEASE_HEADER} header must be a lease <owner>:<fence>"),
                            None,
                        )
                    })?,
            ),
            None => None,
        };
        if self.held.get().is_some() {
            return Err(McpError::invalid_request(
                "the session is initialized already",
                None,
            ));
        }
        let held = Held::start(
            self.api.core.clone(),
            self.binding.clone(),
            given,
            &self.registry,
        )
        .await
        .map_err(|e| {
            let e = ApiError::from(e);
            McpError::invalid_request(format!("{}: {}", e.code, e.message), None)
        })?;
        let _ = self.held.set(held);
        context.peer.set_peer_info(request);
        Ok(result)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let (Some(held), Some(sid)) = (
            self.held.get(),
            context
                .extensions
                .get::<hyper::http::request::Parts>()
                .and_then(|p| p.headers.get("mcp-session-id"))
                .and_then(|v| v.to_str().ok()),
        ) {
            held.register(sid);
        }
    }
}
