//! Maintenance jobs (docs/lifecycle.md#maintenance-jobs): `POST /v1/computers/{id}/update` and
//! `…/recover` (`202` with the [`Job`]), `GET /v1/computers/{id}/jobs` ([`JobList`]),
//! `GET /v1/jobs/{id}`, and `POST /v1/jobs/{id}/release-interrupted` ([`ReleaseInterrupted`]).

use serde::{Deserialize, Serialize};

/// A maintenance job as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Job {
    pub id: String,
    pub computer: String,
    /// `update` or `recover`.
    pub kind: String,
    /// `queued`, `running`, `succeeded`, `failed`, `interrupted` or `released`; the first three
    /// of `queued`, `running` and `interrupted` reserve the computer.
    pub state: String,
    /// Whether it reserves its computer now.
    pub reserving: bool,
    /// The lifecycle stage reached: `queued`, `waiting`, `checkpointing`, `stopping`,
    /// `provisioning`, `starting`, `restoring`, `done`.
    pub stage: String,
    /// Every stage reached, oldest first.
    pub stages: Vec<JobStage>,
    /// Who claimed it (a replica's or process's id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// Its worker's last heartbeat (ms since the epoch); absent before the claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_at_ms: Option<i64>,
    /// Why it failed or was interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the user should know before it runs (a recovery's unsaved work).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// The home revision it checkpointed (update) or, once done, restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    pub created_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<i64>,
    pub updated_at_ms: i64,
}

/// One stage a job reached, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobStage {
    pub stage: String,
    pub at_ms: i64,
}

/// `GET /v1/computers/{id}/jobs`: its newest jobs first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobList {
    pub jobs: Vec<Job>,
}

/// The body of `POST /v1/jobs/{id}/release-interrupted`: `workers_stopped` must be `true`, the
/// operator's assertion that the job's workers and provider operations have stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseInterrupted {
    #[serde(default)]
    pub workers_stopped: bool,
}
