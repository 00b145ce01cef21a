//! `/v1/computers/{id}/home…` and `/v1/homes…`: checkpoints and restores (NDJSON, one
//! [`HomeLine`] per line), the home's state, browsing the latest checkpoint, reconcile and
//! purge (docs/homes.md). `…/home/content?path=` answers raw bytes.

use super::error::ErrorInfo;
use super::files::Entry;
use serde::{Deserialize, Serialize};

/// One line of `POST …/home/checkpoint[?wait_ms=]` and `POST …/home/restore`: `progress` lines,
/// then exactly one `done` or `error`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum HomeLine {
    Progress {
        /// `starting`, `waiting`, `exporting`, `committing`, `verifying`, `importing`.
        phase: String,
        /// Archive bytes moved so far in this phase.
        done: u64,
        /// Expected bytes of the phase; 0 when unknown.
        total: u64,
    },
    Done(HomeDone),
    Error(ErrorInfo),
}

/// A finished checkpoint (`revision`, `bytes`) or restore (also `content_bytes`, `entries`;
/// `revision: null` and nothing else when there was no stored home).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HomeDone {
    pub revision: Option<u64>,
    /// Archive bytes moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<u64>,
}

/// `GET /v1/computers/{id}/home`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HomeInfo {
    pub computer: String,
    pub home_key: String,
    /// `local` or `object`.
    pub store: String,
    /// `incremental` (revisions) or `archive` (the latest checkpoint only).
    #[serde(default)]
    pub format: String,
    /// `null` before the first checkpoint.
    pub revision: Option<u64>,
    pub pending_restore: bool,
}

/// `GET …/home/entries[?prefix=&limit=]`: entries of the latest checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HomeEntries {
    pub entries: Vec<Entry>,
    /// More entries matched than `limit`.
    pub truncated: bool,
}

/// One revision of a home (`GET …/home/revisions`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HomeRevision {
    pub revision: u64,
    /// The revision it was made after (`null` for the first).
    pub parent: Option<u64>,
    pub at_ms: i64,
    /// Why it was made: `run_end`, `stop`, `idle`, `manual`, `fork`, `restore`, `maintenance`.
    pub cause: String,
    pub files: u64,
    /// Bytes of file content it holds.
    pub size: u64,
    /// Bytes of content it added that no earlier revision had.
    pub new_bytes: u64,
    /// Bytes it wrote to the store (sealed packs and index).
    pub stored_bytes: u64,
}

/// `GET …/home/revisions`: the home's revisions, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HomeRevisions {
    pub revisions: Vec<HomeRevision>,
}

/// One difference of `GET …/home/diff`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HomeChange {
    pub path: String,
    pub dir: bool,
    /// `added`, `removed` or `changed`.
    pub change: String,
}

/// `GET …/home/diff?from=&to=`: what changed from one revision to another, in path order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HomeDiff {
    pub from: u64,
    pub to: u64,
    pub changes: Vec<HomeChange>,
    /// More changes than `limit`.
    pub truncated: bool,
}

/// `POST /v1/homes/reconcile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "store", rename_all = "lowercase")]
pub enum Reconciled {
    /// The object store: what the reconciler found.
    Object {
        kept: u64,
        deleted: u64,
        /// Objects under `homes/` this store never writes; left alone.
        foreign: u64,
        aborted_uploads: u64,
        abort_failed: u64,
    },
    /// The local store: the temporary files of writes a killed control plane never finished
    /// (`.tmp-…`), which are removed once last written before this control plane started or
    /// more than an hour ago.
    Local {
        #[serde(default)]
        temporaries_removed: u64,
        /// Written since: maybe a write in progress, left.
        #[serde(default)]
        temporaries_young: u64,
        /// Could not be inspected or removed (each logged).
        #[serde(default)]
        temporaries_failed: u64,
    },
}

/// `DELETE /v1/homes/{home_key}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Purged {
    pub purged: String,
}
