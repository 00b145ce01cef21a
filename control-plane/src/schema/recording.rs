//! `/v1/computers/{id}/recording(s)`: screen recordings (docs/recordings.md).

use serde::{Deserialize, Serialize};

/// `PUT /v1/computers/{id}/recording`: turn recording of the computer's screens on or off.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetRecording {
    pub enabled: bool,
}

/// Whether a computer's screens are recorded (or, for a workspace, its computers' by default).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RecordingSetting {
    pub enabled: bool,
    /// Where it comes from: `computer` (its own), `workspace` (its workspace's default) or
    /// `default` (never set: not recorded).
    pub source: String,
    /// The token name that set it (absent: never set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_at_ms: Option<i64>,
    /// How long recordings are kept on this server.
    pub retention_hours: u64,
}

/// What was recorded of one bot's screen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BotRecording {
    pub bot: String,
    pub started_at_ms: i64,
    pub ended_at_ms: i64,
    /// Size of the recording (records, before sealing).
    pub bytes: u64,
    /// Pieces it is stored in.
    pub pieces: u64,
    /// Records the guest had to drop (its buffer was full): gaps in the recording.
    pub lost: u64,
}

/// `GET /v1/computers/{id}/recordings`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RecordingList {
    pub setting: RecordingSetting,
    pub bots: Vec<BotRecording>,
}
