//! The home archive: a streaming format of directories and regular files only (`FORMAT.md`,
//! "Archive"), its writer ([`pack`]) and its reader ([`unpack_new`], [`restore`]).
//!
//! This module owns the byte layout, path validation, the browser-profile skip list
//! (docs/homes.md#checkpoints) and the limits a reader enforces. The writer never follows a symlink
//! and skips everything that is not a directory or a regular file. The reader treats every archive
//! as hostile: it creates only directories and regular files, only at validated relative paths,
//! inside a fresh staging directory it walks with `O_NOFOLLOW`, and swaps the result in only after
//! the whole archive has been read and checked, so a bad archive writes nothing.
//!
//! Sealing, transport and storage are left to [`crate::seal`], the tunnel and [`crate::store`].
//! The async adapters ([`PackReader`], [`unpack_new_async`], [`restore_async`]) run the blocking
//! filesystem work on tokio's blocking pool.

mod check;
mod pack;
mod stream;
mod unpack;

pub use check::{ArchiveChecker, Parser as ArchiveParser};
pub use pack::{pack, pack_delta, PackStats, Stamp, Stamps};
pub use stream::{
    pack_reader, restore_async, task_reader, unpack_new_async, ChannelWriter, PackReader,
    TaskReader,
};
pub use unpack::{restore, restore_in_place, unpack_new, UnpackOptions, UnpackStats};

use std::io;
use std::path::Path;

/// First bytes of every archive.
pub const MAGIC: [u8; 8] = *b"RKZHOMEA";
/// The archive format version this crate writes and reads.
pub const VERSION: u16 = 1;
/// Entry tag of a directory.
pub const TAG_DIR: u8 = 1;
/// Entry tag of a regular file.
pub const TAG_FILE: u8 = 2;
/// Entry tag of a regular file unchanged since the export the archive is a delta of: flags, path
/// and size as [`TAG_FILE`], no content. Only a delta archive ([`ArchiveParser::delta`]) may
/// hold it; every other reader refuses it as an unknown entry.
pub const TAG_SAME: u8 = 3;
/// Tag of the end record (entry and byte counts), after which the stream must end.
pub const TAG_END: u8 = 0xFF;
/// File flag: the file is executable (restored as 0700 instead of 0600).
pub const FLAG_EXEC: u8 = 1;
/// Longest entry path, in bytes (Linux `PATH_MAX`).
pub const MAX_PATH_LEN: usize = 4096;
/// Longest path component, in bytes (Linux `NAME_MAX`).
pub const MAX_COMPONENT_LEN: usize = 255;

/// The directory, directly under the home, that holds the bots' browser profiles; the skip lists
/// below apply only inside it.
pub const BROWSER_PROFILES_DIR: &str = ".browser-profiles";
/// Directories never archived anywhere under [`BROWSER_PROFILES_DIR`] (docs/homes.md#checkpoints).
pub const EXCLUDED_PROFILE_DIRS: [&str; 8] = [
    "Cache",
    "Code Cache",
    "GPUCache",
    "GrShaderCache",
    "ShaderCache",
    "DawnGraphiteCache",
    "DawnWebGPUCache",
    "Crashpad",
];
/// Files never archived anywhere under [`BROWSER_PROFILES_DIR`] (docs/homes.md#checkpoints).
pub const EXCLUDED_PROFILE_FILES: [&str; 7] = [
    "BrowserMetrics",
    "DevToolsActivePort",
    "SingletonCookie",
    "SingletonLock",
    "SingletonSocket",
    ".parentlock",
    "lock",
];

/// What a reader accepts at most. Checked before anything is written for the entry that would
/// exceed them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Directories plus files.
    pub max_entries: u64,
    /// Sum of the sizes of all files.
    pub max_bytes: u64,
}

impl Default for Limits {
    /// One million entries and 64 GiB: far above a working home, far below what would exhaust
    /// the control plane's disk by accident.
    fn default() -> Self {
        Self {
            max_entries: 1_000_000,
            max_bytes: 64 << 30,
        }
    }
}

/// Errors of writing or reading an archive.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("cannot {op} {path}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("reading the archive stream failed")]
    Read(#[source] io::Error),
    #[error("writing the archive stream failed")]
    Write(#[source] io::Error),
    #[error("not a home archive (bad magic)")]
    BadMagic,
    #[error("home archive version {0} is not supported (this build reads version {VERSION})")]
    UnsupportedVersion(u16),
    #[error(
        "archive entry {index} has type {tag}: only directories and regular files are allowed"
    )]
    UnsupportedEntry { index: u64, tag: u8 },
    #[error("archive entry path {path:?} rejected: {reason}")]
    BadPath { path: String, reason: &'static str },
    #[error("archive entry {path:?} has unknown flags {flags:#04x}")]
    BadFlags { path: String, flags: u8 },
    #[error("archive entry {path:?} comes before its parent directory")]
    MissingParent { path: String },
    #[error("archive entry {path:?} appears twice")]
    Duplicate { path: String },
    #[error("archive has more than {limit} entries")]
    TooManyEntries { limit: u64 },
    #[error("archive holds more than {limit} bytes of files")]
    TooManyBytes { limit: u64 },
    #[error("archive is truncated")]
    Truncated,
    #[error("archive has data after its end record")]
    TrailingData,
    #[error(
        "archive end record says {claimed_entries} entries and {claimed_bytes} bytes \
         but the archive held {entries} entries and {bytes} bytes"
    )]
    EndMismatch {
        claimed_entries: u64,
        claimed_bytes: u64,
        entries: u64,
        bytes: u64,
    },
    #[error("restore target {path} rejected: {reason}")]
    Target { path: String, reason: &'static str },
    #[error("home path {path:?} is longer than {MAX_PATH_LEN} bytes")]
    PathTooLong { path: String },
    #[error("the archive task ended abnormally")]
    Task(#[source] tokio::task::JoinError),
}

impl ArchiveError {
    fn io(op: &'static str, path: impl AsRef<Path>, source: impl Into<io::Error>) -> Self {
        Self::Io {
            op,
            path: path.as_ref().display().to_string(),
            source: source.into(),
        }
    }
}

/// A path as raw bytes, shown lossily in messages.
fn show(path: &[u8]) -> String {
    String::from_utf8_lossy(path).into_owned()
}

/// Splits and validates an entry path: relative, `/`-separated, no empty, `.` or `..`
/// components, no NUL, within [`MAX_PATH_LEN`] and [`MAX_COMPONENT_LEN`].
pub fn validate_path(path: &[u8]) -> Result<Vec<&[u8]>, ArchiveError> {
    let bad = |reason| ArchiveError::BadPath {
        path: show(path),
        reason,
    };
    if path.is_empty() {
        return Err(bad("empty path"));
    }
    if path.len() > MAX_PATH_LEN {
        return Err(bad("longer than 4096 bytes"));
    }
    if path[0] == b'/' {
        return Err(bad("absolute path"));
    }
    if path.contains(&0) {
        return Err(bad("contains a NUL byte"));
    }
    let parts: Vec<&[u8]> = path.split(|&b| b == b'/').collect();
    for part in &parts {
        match *part {
            b"" => return Err(bad("empty component")),
            b"." => return Err(bad("'.' component")),
            b".." => return Err(bad("'..' component")),
            p if p.len() > MAX_COMPONENT_LEN => return Err(bad("component longer than 255 bytes")),
            _ => {}
        }
    }
    Ok(parts)
}

/// Whether `name`, a directory inside the browser-profiles tree, is skipped.
fn excluded_dir(name: &[u8]) -> bool {
    EXCLUDED_PROFILE_DIRS.iter().any(|d| d.as_bytes() == name)
}

/// Whether `name`, a file inside the browser-profiles tree, is skipped.
fn excluded_file(name: &[u8]) -> bool {
    EXCLUDED_PROFILE_FILES.iter().any(|f| f.as_bytes() == name)
}

#[cfg(test)]
mod tests;
