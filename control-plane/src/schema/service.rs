//! `/v1/computers/{id}/services`: detached processes the computer starts again each time it
//! starts (docs/api.md#services).

use super::process::Process;
use serde::{Deserialize, Serialize};

/// `PUT /v1/computers/{id}/services/{name}`: set a service (and start it now on a running
/// computer; a new command line replaces the old one's process).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetService {
    /// The program and its arguments; not empty.
    pub argv: Vec<String>,
    /// Working directory, relative to the home (default: the home).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// One service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Service {
    pub name: String,
    pub argv: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    pub created_at_ms: i64,
    /// The detached process last started for it, as the computer reports it now (absent: none
    /// yet, or the computer is not running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<Process>,
}

/// `GET /v1/computers/{id}/services`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ServiceList {
    pub services: Vec<Service>,
}
