//! Detached processes (docs/api.md#processes): commands that outlive the client that started
//! them. The guest keeps each one's output (stdout and stderr interleaved, as produced) in a
//! bounded ring; offsets count every byte the process ever wrote, so a reader that asks from an
//! offset the ring no longer holds is told how many bytes were dropped.
//!
//! - [`ProcStart`]: start one (fenced like an exec by the lease it names). Answer: `Process`.
//! - [`ProcList`]: every process the guest keeps (the live ones and the last exited). Answer:
//!   `Processes`.
//! - [`ProcLogs`]: its output from an offset, then (with `follow`) as it comes, until it exits:
//!   [`ProcEvent`] frames, `Opened` first.
//! - [`ProcAttach`]: the same output stream, plus [`crate::ExecInput`] frames from the control
//!   plane to the process's stdin; the control plane finishing its side detaches.
//! - [`ProcKill`]: a signal to the process's group. Answer: `Process`.

use crate::error::OpError;
use crate::lease::BotId;
use crate::msg::{BotLease, ExecRequest};
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;

/// Start a detached process: the command as an exec would run it (its stdin stays open for
/// attaching clients).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcStart {
    pub command: ExecRequest,
}

/// List the processes the guest keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcList;

/// Read a process's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcLogs {
    pub id: u32,
    /// The offset to start from; `None` is the oldest byte kept.
    pub offset: Option<u64>,
    /// Keep the stream open and send output as it comes, until the process exits.
    pub follow: bool,
}

/// Attach to a process: its output from `offset` (`None`: from now on) and stdin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcAttach {
    pub id: u32,
    pub offset: Option<u64>,
    pub lease: Option<BotLease>,
}

/// Send `signal` (its Linux number) to a process's group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcKill {
    pub id: u32,
    pub signal: i32,
    pub lease: Option<BotLease>,
}

/// How a process ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcExit {
    /// Its exit code; a signal gives `128 + signal`.
    pub code: i32,
    pub message: Option<String>,
}

/// One process as the guest keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcInfo {
    /// The guest's id for it (never reused while the guest runs).
    pub id: u32,
    /// Its operating-system process id (also its process group).
    pub pid: u32,
    pub argv: Vec<String>,
    /// The bot it was started for, under its lease.
    pub bot: Option<BotId>,
    /// Milliseconds since the Unix epoch.
    pub started_ms: u64,
    pub exited_ms: Option<u64>,
    pub exit: Option<ProcExit>,
    /// Bytes of output it wrote in all (the offset of the next byte).
    pub output_bytes: u64,
    /// The offset of the oldest byte still kept.
    pub kept_from: u64,
}

/// Guest to control plane on a logs or attach stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProcEvent {
    /// The first frame: output follows from `offset`; `dropped` bytes before it that the
    /// request asked for are no longer kept.
    Opened { offset: u64, dropped: u64 },
    /// Output at `offset`, at most [`crate::MAX_CHUNK`] bytes. A gap between one chunk's end
    /// and the next one's offset is output dropped while the reader was behind.
    Output { offset: u64, data: ByteBuf },
    /// The process exited; the last frame.
    Exit(ProcExit),
    /// The request was refused; nothing follows.
    Failed(OpError),
}
