//! `/v1/computers`: create, list, show, start, stop (each answers a [`Computer`]) and destroy
//! (`204`, no body).

use providers::MachineLimits;
use serde::{Deserialize, Serialize};

/// `POST /v1/computers`: exactly one of `workspace` (a Team computer) and `private_bot` (a
/// Private computer for that bot).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateComputer {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub private_bot: Option<String>,
    /// The provider to run it on (default: the server's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Resource limits of its machines; every one unset leaves the provider's default.
    #[serde(default, skip_serializing_if = "is_default_limits")]
    pub limits: MachineLimits,
    /// Where its machines go, in the provider's terms: a docker engine's name, a Daytona
    /// region (1 to 63 of a-z, 0-9, '.', '_', '-'). Unset: wherever the provider chooses (for
    /// docker, the engine with the fewest computers). A provider that cannot honour it refuses
    /// the create.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    /// A warm pool to take the computer from (docs/pools.md): a ready member is handed out at
    /// once, with the stored home of a returning workspace or bot imported first; none ready,
    /// one boots cold on the pool's provider with its limits. Excludes `provider`, `limits` and
    /// `placement` (the pool's are used).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
}

/// `POST /v1/computers/{id}/fork`: a new computer, made like [`CreateComputer`], whose home
/// starts from a revision of the source computer's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkComputer {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub private_bot: Option<String>,
    /// The source home's revision to start from. Unset: its latest, after a checkpoint if the
    /// source runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "is_default_limits")]
    pub limits: MachineLimits,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
}

/// Whether `limits` sets nothing (it is then left out).
pub fn is_default_limits(limits: &MachineLimits) -> bool {
    *limits == MachineLimits::default()
}

/// A computer as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Computer {
    pub id: String,
    pub kind: ComputerKind,
    /// A Team computer's workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// A Private computer's bot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot: Option<String>,
    pub home_key: String,
    pub provider: String,
    #[serde(default, skip_serializing_if = "is_default_limits")]
    pub limits: MachineLimits,
    /// Where the create asked its machines to go (a replacement whose place is gone runs
    /// elsewhere, and the server logs a WARN saying where).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    pub state: ComputerState,
    /// Whether its guest is connected now.
    pub connected: bool,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    /// What idle suspension last decided about it (shown by list and show, on computers the
    /// idle job has looked at).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<IdleReport>,
    /// What its guest reports about the machine: shown by `show` for a running computer whose
    /// guest answers in time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<Machine>,
    /// An unassigned warm-pool member's pool (kind `pool`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// How a create from a pool went (only in the answer to that create).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_pool: Option<FromPool>,
}

/// How a create from a warm pool went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FromPool {
    pub pool: String,
    /// `true`: a ready member was handed out; `false`: none was ready, so it booted cold.
    pub handed_out: bool,
}

/// A running computer's machine, as its guest reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Machine {
    /// Seconds since the kernel booted (a container reports its host's kernel).
    pub uptime_secs: u64,
    /// The 1, 5 and 15 minute load averages.
    pub load: [f64; 3],
    /// CPUs the guest may run on.
    pub cpus: u32,
    /// Size of the filesystem holding the home, and what is free to the home's user.
    pub home_total_bytes: u64,
    pub home_free_bytes: u64,
    /// The machine's memory (its cgroup's limit in a container) and what is still available.
    #[serde(default)]
    pub memory_total_bytes: u64,
    #[serde(default)]
    pub memory_available_bytes: u64,
    /// The total is a cgroup limit, not the kernel's memory.
    #[serde(default)]
    pub memory_limited: bool,
    /// Disk used by the home's own files (allocated blocks), from a walk bounded to 200,000
    /// entries and reused for 10 s.
    #[serde(default)]
    pub home_used_bytes: u64,
    /// The walk stopped at its bound: `home_used_bytes` is a lower bound.
    #[serde(default)]
    pub home_used_partial: bool,
    /// Live desktops.
    #[serde(default)]
    pub desktops: u32,
    /// Its detached processes (docs/api.md#processes), running and recently exited.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<super::process::Process>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ComputerKind {
    Team,
    Private,
    /// A warm pool's member, not handed out yet.
    Pool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ComputerState {
    Provisioning,
    Running,
    Stopped,
    Destroyed,
}

/// Idle suspension's last decision about a computer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct IdleReport {
    /// `awake`, `busy`, `blocked`, `suspending`, `failed` or `suspended`.
    pub decision: String,
    pub reason: String,
    pub at_ms: i64,
    /// `awake`: not idle before then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<i64>,
}

/// `GET /v1/computers`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ComputerList {
    pub computers: Vec<Computer>,
}
