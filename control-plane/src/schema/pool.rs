//! `/v1/pools`: warm pools (docs/pools.md).

use providers::MachineLimits;
use serde::{Deserialize, Serialize};

fn is_default_limits(l: &MachineLimits) -> bool {
    *l == MachineLimits::default()
}

/// `POST /v1/pools`: keep `size` computers booted on a provider, unassigned, for creates that
/// name the pool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePool {
    /// 1..=128 characters of [A-Za-z0-9._-].
    pub name: String,
    /// The provider its members run on (default: the server's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// How many unassigned members it keeps booted (0..=64).
    #[schema(minimum = 0, maximum = 64)]
    pub size: u32,
    /// Whether each member has a desktop and Chrome up before it is handed out, which the first
    /// bot to ask for a screen takes.
    #[serde(default)]
    pub desktop: bool,
    /// Resource limits of its members' machines.
    #[serde(default, skip_serializing_if = "is_default_limits")]
    pub limits: MachineLimits,
}

/// `PUT /v1/pools/{pool}`: change a pool's size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResizePool {
    #[schema(minimum = 0, maximum = 64)]
    pub size: u32,
}

/// One unassigned member of a pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PoolMember {
    pub id: String,
    /// `provisioning`, `running`, `stopped`.
    pub state: String,
    /// Running with its guest connected: the next create from the pool may take it.
    pub ready: bool,
}

/// A warm pool and its unassigned members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Pool {
    pub name: String,
    pub provider: String,
    pub size: u32,
    pub desktop: bool,
    #[serde(default, skip_serializing_if = "is_default_limits")]
    pub limits: MachineLimits,
    /// Members ready to be handed out now.
    pub ready: u32,
    pub members: Vec<PoolMember>,
    pub created_by: String,
    pub created_at_ms: i64,
}

/// `GET /v1/pools`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PoolList {
    pub pools: Vec<Pool>,
}

/// `DELETE /v1/pools/{pool}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PoolDeleted {
    pub name: String,
    /// Unassigned members destroyed with it.
    pub destroyed: u32,
}
