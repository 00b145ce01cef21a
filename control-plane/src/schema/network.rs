//! `/v1/computers/{id}/network` and `/v1/workspaces/{workspace}/network`: network policies
//! (docs/security.md#network-policies), in their text form: `open`, `none`, or
//! `allow github.com *.pythonhosted.org:443 10.1.2.0/24:80 … [deny …]`.

use serde::{Deserialize, Serialize};

/// `GET`/`PUT /v1/computers/{id}/network`: the policy in force for a computer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NetworkPolicy {
    /// The policy in force; `null` when nothing applies (a provider without a default).
    pub policy: Option<String>,
    /// Where it comes from: `computer` (its own), `workspace` (its workspace's default) or
    /// `default` (the server's, `--local-egress`).
    pub source: String,
    /// Whether the computer's provider enforces it (behind the egress gateway).
    pub enforced: bool,
    /// Why it is not enforced, when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// On a `PUT`: whether the running computer took the change now (new connections and DNS
    /// queries see it); `false` when it is not running here, where its next start applies it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<bool>,
    /// What the gateway counted for it since it was attached (a running computer behind this
    /// replica's gateway).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<NetworkCounters>,
}

/// A computer's egress figures since it was attached to the gateway.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NetworkCounters {
    pub connections_allowed: u64,
    /// Refused by the policy or a limit.
    pub connections_denied: u64,
    /// Open now.
    pub connections_active: u32,
    /// Refused at the concurrent connection limit (also counted denied).
    pub connections_limited: u64,
    /// Bytes sent out.
    pub bytes_up: u64,
    /// Bytes received.
    pub bytes_down: u64,
    pub dns_answered: u64,
    /// Refused for any reason, the rate limit included.
    pub dns_refused: u64,
    pub dns_rate_limited: u64,
}

/// `PUT /v1/computers/{id}/network` and `PUT /v1/workspaces/{workspace}/network`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetNetworkPolicy {
    /// The new policy; `null` removes it (a computer then follows its workspace's default, a
    /// workspace the server's).
    pub policy: Option<String>,
}

/// `GET`/`PUT /v1/workspaces/{workspace}/network`: a workspace's default policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkspaceNetworkPolicy {
    pub workspace: String,
    /// The default of its computers that have no policy of their own; `null`: the server's.
    pub policy: Option<String>,
}
