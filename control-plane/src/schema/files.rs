//! `/v1/computers/{id}/files`: a directory listing ([`FileList`]) and an upload's answer
//! ([`Written`]). Reads and uploads are raw bytes; the path, bot, lease, `max_bytes` and
//! `executable` travel in the query string.

use serde::{Deserialize, Serialize};

/// One entry of a listing (also of a stored home's, `home::HomeEntries`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Relative to the home.
    pub path: String,
    pub kind: EntryKind,
    pub size: u64,
    pub executable: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    File,
    Dir,
}

/// `GET /v1/computers/{id}/files?path=`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileList {
    pub entries: Vec<Entry>,
}

/// `PUT /v1/computers/{id}/files/content?path=`: bytes written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Written {
    pub written: u64,
}
