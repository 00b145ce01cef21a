//! `/v1/computers/{id}/files`: a directory listing ([`FileList`]) and an upload's answer
//! ([`Written`]). Reads and uploads are raw bytes; the path, bot, lease, `max_bytes` and
//! `executable` travel in the query string.

use serde::{Deserialize, Serialize};

/// One entry of a listing (also of a stored home's, `home::HomeEntries`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Entry {
    /// Relative to the home.
    pub path: String,
    pub kind: EntryKind,
    pub size: u64,
    pub executable: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    File,
    Dir,
}

/// `GET /v1/computers/{id}/files?path=`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FileList {
    pub entries: Vec<Entry>,
}

/// `PUT /v1/computers/{id}/files/content?path=`: bytes written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Written {
    pub written: u64,
}

/// `PUT /v1/computers/{id}/uploads/{bot}?name=&control=`: where a user's upload landed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Uploaded {
    /// Relative to the home: the bot's upload directory and the name, suffixed ` (n)` if the
    /// asked name was taken.
    pub path: String,
    pub size: u64,
}

/// `POST /v1/computers/{id}/files/attach`: a bot hands a file out (`attach_file`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AttachRequest {
    /// Relative to the home.
    pub path: String,
    pub bot: String,
    /// The bot's execution lease.
    pub lease: String,
}

/// A download URL for an attached file: the URL is the credential until it expires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Attached {
    /// Absolute when the request named its host, else the same as `path`.
    pub url: String,
    /// `/att/<sealed>`.
    pub path: String,
    pub name: String,
    pub size: u64,
    pub expires_at_ms: i64,
}
