//! The handshake and control-stream messages, and the exec and file messages.
//!
//! The operation streams' first frames ([`crate::Request`]) and single answers ([`crate::Reply`])
//! are declared with their operations in [`crate::op`]. Variant order is wire order (postcard
//! encodes the variant index): append new variants at the end and bump
//! [`crate::PROTOCOL_VERSION`]. Golden-byte tests in `tests/golden.rs` pin each one. Only these
//! wire types derive `Serialize`; the guest and the control plane convert at the edge.

use crate::lease::{BotId, LeaseToken};
use crate::secret::Secret;
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;

// Defined in leaf modules (so those and this one never import each other), re-exported here so
// `gateway_proto::msg::*` and the crate root keep naming them.
pub use crate::error::{ErrorCode, OpError};
pub use crate::home::StartDir;

/// First frame on the control stream, guest to control plane.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The newest protocol version the guest speaks.
    pub version: u16,
    /// The oldest protocol version the guest still speaks.
    pub min_version: u16,
    /// The computer this guest runs on, as issued at provisioning.
    pub computer_id: String,
    /// The per-computer enrollment token issued at provisioning. Never logged.
    pub token: Secret,
    /// Free-form build description of the guest, for logs (bounded by the control plane).
    pub agent: String,
}

/// The control plane's answer to an accepted [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The version both ends now speak.
    pub version: u16,
}

/// The control plane's answer to a refused [`Hello`]; the connection closes after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    pub reason: RefuseReason,
}

/// Why a guest connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RefuseReason {
    /// Unknown computer or wrong token; deliberately not distinguished.
    BadCredentials,
    /// No version in common.
    UnsupportedVersion { min: u16, max: u16 },
    /// The hello frame was not understood.
    Malformed,
    /// Another connection from the same computer replaced this one.
    Superseded,
}

impl std::fmt::Display for RefuseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BadCredentials => f.write_str("bad credentials"),
            Self::UnsupportedVersion { min, max } => {
                write!(
                    f,
                    "unsupported protocol version (control plane speaks {min}..={max})"
                )
            }
            Self::Malformed => f.write_str("malformed hello"),
            Self::Superseded => f.write_str("superseded by a newer connection"),
        }
    }
}

/// The control plane's reply on the control stream: exactly one, right after [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HelloReply {
    Welcome(Welcome),
    Refused(Refused),
}

/// Messages on the control stream after the handshake, in either direction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ControlMsg {
    /// Control plane to guest: the lease store granted `lease` to `bot`, or (`None`) the bot's
    /// lease was released. The guest raises its fence table; it never lowers a fence.
    Lease {
        bot: BotId,
        lease: Option<LeaseToken>,
    },
    /// Liveness probe; the peer answers [`ControlMsg::Pong`] with the same sequence number.
    Ping {
        seq: u64,
    },
    Pong {
        seq: u64,
    },
}

/// A lease presented with a command that acts for a bot.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BotLease {
    pub bot: BotId,
    pub token: LeaseToken,
}

/// A command to run in the home.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecRequest {
    /// Program and arguments; the program is looked up in `PATH`.
    pub argv: Vec<String>,
    /// Working directory relative to the home; `None` is the home itself.
    pub cwd: Option<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Kill the whole process tree after this long: exit 124.
    pub timeout_ms: Option<u64>,
    /// Whether the control plane will stream stdin; if false stdin is `/dev/null`.
    pub stdin: bool,
    /// The lease of the bot this command acts for, checked by the guest before anything runs.
    pub lease: Option<BotLease>,
    /// Where the command starts when `cwd` is `None`; [`StartDir::BotDir`] needs `lease` (the
    /// directory is its bot's).
    pub start: StartDir,
}

/// Control plane to guest during an exec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecInput {
    /// Bytes for the command's stdin, at most [`crate::frame::MAX_CHUNK`].
    Stdin(ByteBuf),
    /// End of stdin.
    CloseStdin,
    /// The client went away: kill the process tree and exit 130.
    Abort,
}

/// Guest to control plane during an exec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecEvent {
    /// The process started.
    Started {
        pid: u32,
    },
    /// Output chunks, at most [`crate::frame::MAX_CHUNK`] each, in the order produced.
    Stdout(ByteBuf),
    Stderr(ByteBuf),
    /// The last event of a command that ran (or was refused with an exit code, like a bad cwd).
    Exit {
        code: i32,
        message: Option<String>,
    },
    /// The command could not be started at all.
    Failed(OpError),
}

/// List the entries of a directory of the home.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListFiles {
    pub path: String,
    pub lease: Option<BotLease>,
}

/// Read a file of the home, refusing files larger than `max_bytes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadFile {
    pub path: String,
    pub max_bytes: u64,
    pub lease: Option<BotLease>,
}

/// Write a file of the home (mode 0700 if `executable`, else 0600).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteFile {
    pub path: String,
    pub executable: bool,
    pub size: u64,
    pub lease: Option<BotLease>,
    /// Never replace an existing entry: refused with [`ErrorCode::Exists`] before any byte is
    /// read, or at commit if the name appeared meanwhile (a user's upload never overwrites).
    pub no_replace: bool,
}

/// One directory entry. Symlinks are never listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Path relative to the home.
    pub path: String,
    pub kind: FileKind,
    pub size: u64,
    pub executable: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileKind {
    File,
    Dir,
}
