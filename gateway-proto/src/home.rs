//! Home export and import (contracts.md §9): the guest streams its home out as one archive
//! (homes `FORMAT.md`, "Archive") and reads one back in. The archive is plaintext on the tunnel
//! (QUIC is the transport's encryption); sealing happens in the control plane.

use serde::{Deserialize, Serialize};

/// Export the home. The guest quiesces browsers first if asked, answers
/// [`crate::Reply::ExportStart`], then sends the archive as raw bytes and finishes the stream.
/// A failure after `ExportStart` resets the stream; the archive's own end marker tells a
/// complete export from a truncated one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HomeExportRequest {
    /// Close every bot's browser first (CDP `Browser.close` flushes cookies); each restarts on
    /// the bot's next graphical call.
    pub quiesce_browsers: bool,
}

/// Import an archive into the (fresh) home. The control plane sends exactly `size` raw bytes
/// after this frame; the guest unpacks into a staging directory, checks the whole archive, then
/// swaps it in and answers [`crate::Reply::Imported`], or `Error` with nothing written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HomeImportRequest {
    pub size: u64,
}

/// The guest's estimate of an export, from a walk before packing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportStart {
    /// Bytes of file content the archive will carry (progress total; the archive adds headers).
    pub content_bytes: u64,
    pub entries: u64,
}

/// What an import wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Imported {
    pub content_bytes: u64,
    pub entries: u64,
}
