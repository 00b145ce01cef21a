//! `/v1/computers/{id}/leases/{bot}`: acquire, renew and release a bot's execution lease
//! (`POST …/{action}`, one body for the three) and show it (`GET`).

use serde::{Deserialize, Serialize};

/// The body of acquire (`owner`), renew (`lease`) and release (`lease`, `outcome`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaseRequest {
    /// acquire: the run id that will own the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// renew, release: the lease as `<owner>:<fence>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// acquire, renew: 1..=3600000 (default 5 minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// release: how the run ended, `success` (default), `failed` or `cancelled`; a failed or
    /// cancelled run tears the bot's desktop down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

/// A live execution lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Lease {
    pub computer: String,
    pub bot: String,
    /// `<owner>:<fence>`, what renew, release and leased operations take.
    pub lease: String,
    pub owner: String,
    pub fence: u64,
    pub expires_at_ms: i64,
}

/// The answer to a release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LeaseReleased {
    pub released: bool,
    /// The run-end checkpoint of the home (docs/homes.md#checkpoints).
    pub checkpoint: RunCheckpoint,
}

/// What the run-end checkpoint did. A failed one is reported to the run; the previous revision
/// stays current.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum RunCheckpoint {
    Saved {
        revision: u64,
        bytes: u64,
    },
    /// Other bots still hold leases: the last run to finish saves the shared home.
    Deferred {
        waiting_for: Vec<String>,
    },
    /// Nothing to save from.
    Skipped {
        reason: String,
    },
    Failed {
        error: String,
    },
}
