//! `POST /v1/computers/{id}/exec`: the command ([`ExecSpec`]: the JSON body, or the first line
//! of a streamed-stdin body) and the NDJSON answer, one [`ExecLine`] per line: `started`, then
//! `stdout`/`stderr` chunks, then exactly one `exit` or `error`.

use super::error::ErrorInfo;
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A command to run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecSpec {
    /// The program and its arguments; not empty.
    pub argv: Vec<String>,
    /// Working directory, relative to the home (default: the home, or a Team bot's own
    /// `bots/<bot>/` under its lease).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Extra environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The whole stdin, for the plain JSON form (a streamed exec sends it after the spec line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    /// The bot it runs for, with `lease`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot: Option<String>,
    /// The bot's lease, `<owner>:<fence>`, with `bot`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
}

/// One line of the exec answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ExecLine {
    /// The process started.
    Started {
        pid: u32,
    },
    Stdout(Chunk),
    Stderr(Chunk),
    /// The last line of a command that ran: its exit code (124 timed out, 130 aborted) and
    /// why, when the guest says.
    Exit {
        code: i32,
        message: Option<String>,
    },
    /// The last line when the command could not run or its outcome is unknown.
    Error(ErrorInfo),
}

/// An output chunk: UTF-8 text as it is, other bytes in base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum Chunk {
    Text { data: String },
    Base64 { data_b64: String },
}

impl Chunk {
    /// The chunk of `bytes`: text when they are UTF-8.
    pub fn of(bytes: &[u8]) -> Self {
        match std::str::from_utf8(bytes) {
            Ok(text) => Self::Text {
                data: text.to_string(),
            },
            Err(_) => Self::Base64 {
                data_b64: base64::engine::general_purpose::STANDARD.encode(bytes),
            },
        }
    }

    /// The bytes it carries.
    pub fn bytes(&self) -> Result<Vec<u8>, base64::DecodeError> {
        match self {
            Self::Text { data } => Ok(data.as_bytes().to_vec()),
            Self::Base64 { data_b64 } => base64::engine::general_purpose::STANDARD.decode(data_b64),
        }
    }
}
