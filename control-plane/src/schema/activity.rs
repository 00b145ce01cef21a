//! `/v1/computers/{id}/activity`: the activity feed of a computer (docs/api.md#activity): what
//! its bots did (`computer.command`) and what happened to it (`computer.lifecycle`), each event
//! numbered per computer (`seq`, growing).
//!
//! `GET …/activity?after=&before=&limit=&order=` answers an [`ActivityPage`]; `GET
//! …/activity/stream?after=` is a server-sent event stream, one [`ActivityEvent`] per `data:`
//! line (its `id:` is the `seq`). Every text in an event was redacted before it was stored.

use serde::{Deserialize, Serialize};

/// One event of the feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ActivityEvent {
    /// Position in the computer's feed: 1, 2, 3, … (pruned events leave a gap at the start).
    pub seq: u64,
    /// When it was recorded, milliseconds since the epoch.
    pub at_ms: i64,
    #[serde(flatten)]
    pub body: ActivityBody,
}

/// What an event says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type")]
pub enum ActivityBody {
    /// A bot's action on the computer: a command, a file write, an `open` or `launch`.
    #[serde(rename = "computer.command")]
    Command(CommandEvent),
    /// A change of the computer itself, with its reason.
    #[serde(rename = "computer.lifecycle")]
    Lifecycle(LifecycleEvent),
    /// Connections or DNS queries the egress gateway let through (aggregated per second).
    #[serde(rename = "network.allowed")]
    NetworkAllowed(NetworkEvent),
    /// Connections or DNS queries the egress gateway refused (aggregated per second).
    #[serde(rename = "network.denied")]
    NetworkDenied(NetworkEvent),
}

/// A `network.allowed` / `network.denied` event: one second's decisions of one kind on one
/// destination, merged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NetworkEvent {
    /// `dns`, `connection` or `http_proxy`.
    pub via: String,
    /// The name asked for or seen (TLS SNI, HTTP Host), when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// The address, when no name was seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    pub port: u16,
    /// Why (e.g. `allowed`, `not in the allow list`, `internal address`).
    pub reason: String,
    /// How many decisions this event stands for.
    pub count: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
}

/// The kind of a recorded bot action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CommandAction {
    /// A shell command (`POST …/exec`).
    Exec,
    /// A file written or uploaded (`PUT …/files/content`).
    WriteFile,
    /// A desktop `open` action (open_path: a path or URL).
    Open,
    /// A desktop `launch` action (launch_app).
    Launch,
    /// A person's upload into the bot's directory (`PUT …/uploads/{bot}`).
    Upload,
    /// A file the bot handed out (`attach_file`).
    AttachFile,
    /// An attached file fetched through its URL.
    Download,
    /// A detached process started (`POST …/processes`); its line starts with `[id]`.
    ProcessStart,
    /// A detached process exited (its exit code and output tail), or ended with its computer.
    ProcessExit,
}

/// A `computer.command` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CommandEvent {
    pub action: CommandAction,
    /// The bot it ran for, when it ran under a bot's lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot: Option<String>,
    /// The redacted command line (exec), path (write_file), target (open) or application.
    pub line: String,
    /// A command's exit code, when it ran to an exit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    /// The redacted last bytes of a command's stdout and stderr, interleaved as they came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tail: Option<String>,
    /// Whether `output_tail` is the end of a longer output.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_truncated: bool,
    /// Bytes written (write_file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Why it failed (redacted), when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The outcome is unknown (the tunnel was lost mid-operation).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub uncertain: bool,
}

/// What happened to the computer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LifecycleKind {
    Created,
    Started,
    Stopped,
    /// The machine died or stopped on its own (found not running).
    Crashed,
    /// The provider no longer has the machine.
    Gone,
    /// A new machine took the place of a gone one.
    Replaced,
    /// The stored home was restored into the machine.
    Restored,
    /// The home was checkpointed.
    Checkpointed,
    Destroyed,
    /// Starting the computer failed.
    StartFailed,
    /// A maintenance job failed (its reason names the job, its stage and the error).
    JobFailed,
    /// A new computer was made from this one's home (its reason names it and the revision).
    Forked,
}

/// Who or what caused a lifecycle event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// A user's request (`computer create|start|stop|destroy`, `home checkpoint`).
    User,
    /// Idle suspension.
    Idle,
    /// A maintenance job (update, recovery).
    Maintenance,
    /// A run's lease was released (the last one out saves the home).
    RunEnded,
    /// The checkpoint taken before a stop.
    BeforeStop,
    /// The control plane restarted and found the computer's machine not running.
    Recovery,
    /// The machine stopped on its own (crashed, OOM-killed, killed outside Rakazo).
    MachineStopped,
    /// The computer's guest connection was lost while its machine still ran.
    GuestLost,
    /// The provider killed the machine for running out of memory (docker's `OOMKilled`).
    OutOfMemory,
    /// The provider no longer has the machine (removed, its engine gone).
    MachineGone,
    /// The provider failed.
    ProviderError,
    /// A fresh machine got its stored home.
    FreshMachine,
    /// A visit to one of its preview URLs woke it (docs/previews.md#waking).
    PreviewVisit,
}

/// A `computer.lifecycle` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LifecycleEvent {
    pub event: LifecycleKind,
    pub cause: Cause,
    /// The reason in words (redacted).
    pub reason: String,
    /// The home revision checkpointed or restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    /// Archive bytes checkpointed or restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// The answer of `GET /v1/computers/{id}/activity`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ActivityPage {
    /// In the order asked for (`order=asc`, the default, oldest first; `desc` newest first).
    pub events: Vec<ActivityEvent>,
    /// The highest `seq` recorded for the computer so far (0: none): a follower starts after it.
    pub last_seq: u64,
}
