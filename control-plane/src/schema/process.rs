//! `/v1/computers/{id}/processes`: detached processes (docs/api.md#processes). The start takes
//! an [`super::exec::ExecSpec`] (without `stdin`); the logs and attach answers are NDJSON, one
//! [`LogLine`] per line.

use super::error::ErrorInfo;
use super::exec::Chunk;
use serde::{Deserialize, Serialize};

/// One detached process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Process {
    /// Its id on the computer (the `{process}` of its routes).
    pub id: u32,
    /// Its operating-system process id (and process group) inside the computer.
    pub pid: u32,
    pub argv: Vec<String>,
    /// The bot it was started for, under its lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot: Option<String>,
    /// `running` or `exited`.
    pub state: ProcessState,
    pub started_at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exited_at_ms: Option<u64>,
    /// Its exit code once exited (a signal gives 128 + its number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Why it ended, when the computer says (a signal's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_message: Option<String>,
    /// Bytes of output it wrote in all: the offset the next byte will have.
    pub output_bytes: u64,
    /// The offset of the oldest byte of output still kept (older output was dropped).
    pub kept_from: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProcessState {
    Running,
    Exited,
}

/// `GET …/processes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProcessList {
    pub processes: Vec<Process>,
}

/// `POST …/processes/{process}/kill`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KillRequest {
    /// `TERM` (default), `KILL`, `INT`, `HUP`, `QUIT`, `USR1`, `USR2`, `STOP` or `CONT`
    /// (with or without `SIG`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// The bot the kill acts for, with `lease`: a kill under a lease that is no longer current
    /// is refused (`stale_lease`), as an exec under it would be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot: Option<String>,
    /// The bot's lease, `<owner>:<fence>`, with `bot`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
}

/// One line of a logs or attach answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum LogLine {
    /// The first line: output follows from `offset`; `dropped` bytes before it that were asked
    /// for are no longer kept.
    Opened { offset: u64, dropped: u64 },
    /// Output (stdout and stderr interleaved as produced) at `offset`. A gap before it is
    /// output dropped while the reader was behind.
    Output {
        offset: u64,
        #[serde(flatten)]
        chunk: Chunk,
    },
    /// The process exited: the last line.
    Exit { code: i32, message: Option<String> },
    /// The stream failed.
    Error(ErrorInfo),
}
