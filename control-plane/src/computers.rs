//! The computers table: which machines exist, whose home each one carries, where they run (and
//! where the caller asked them to), and the hash of each one's enrollment token.
//!
//! This module owns the domain types (`Computer`, `ComputerId`, `WorkspaceId`, …), their
//! validation, token generation and verification, and the SQL behind [`ComputerStore`]. It does
//! not provision anything (providers do) and does not serialize anything (the HTTP layer converts
//! these types into its own wire types).
//!
//! Invariants: an enrollment token is never stored, only its sha256; a destroyed computer stays
//! destroyed; two live computers never share a home key (a unique index enforces it); the screen
//! generation bumps whenever the state or the provider reference changes
//! (docs/security.md#capability-urls), which revokes every outstanding screen URL.

use crate::db::{column, non_negative, Db, DbError};
use gateway_proto::{BotId, Secret};
use sha2::{Digest, Sha256};
use sqlx::any::AnyRow;
use std::fmt;
use subtle::ConstantTimeEq;

/// Longest computer or workspace id accepted.
pub const MAX_ID_LEN: usize = 128;
/// Longest provider name accepted.
pub const MAX_PROVIDER_LEN: usize = 64;
/// Longest placement accepted (a docker engine name is at most as long).
pub const MAX_PLACEMENT_LEN: usize = 63;
/// Prefix of a team computer's home key; bots whose ids start with it cannot own a private one.
pub const TEAM_HOME_PREFIX: &str = "team-";
/// Prefix of an unassigned pool member's home key: `~` is in no bot or workspace id, so it never
/// names a real home, and a member never checkpoints (docs/pools.md).
pub const POOL_HOME_PREFIX: &str = "~pool-";
/// The placeholder workspace of a pool member's row (the `kind` CHECK of migration 0001 knows
/// only `team` and `private`; the `pool` column says what the row is).
const POOL_WORKSPACE: &str = "~pool";

const TABLE: &str = "computers";
const COLUMNS: &str = "id, kind, workspace, bot, home_key, provider, provider_ref, state, \
                       connected, last_seen_at, screen_generation, created_at, updated_at, limits, \
                       placement, pool";

/// Errors of the computers boundary.
#[derive(Debug, thiserror::Error)]
pub enum ComputerError {
    #[error("computer id {0:?} must be 1..={MAX_ID_LEN} characters of [A-Za-z0-9._-]")]
    BadId(String),
    #[error("workspace id {0:?} must be 1..={MAX_ID_LEN} characters of [A-Za-z0-9._-]")]
    BadWorkspace(String),
    #[error("pool name {0:?} must be 1..={MAX_ID_LEN} characters of [A-Za-z0-9._-]")]
    BadPool(String),
    #[error("provider name {0:?} must be 1..={MAX_PROVIDER_LEN} characters of [A-Za-z0-9._-]")]
    BadProvider(String),
    #[error(
        "placement {0:?} must be 1..={MAX_PLACEMENT_LEN} characters of [a-z0-9._-], starting \
         with a letter or digit"
    )]
    BadPlacement(String),
    #[error("bot {0} cannot have a private computer: its home key would read as a team home")]
    ReservedBotId(BotId),
    #[error("computer {0} not found")]
    NotFound(ComputerId),
    #[error("computer {0} already exists")]
    AlreadyExists(ComputerId),
    #[error("home {home_key} already belongs to computer {holder}; use it, or destroy it first")]
    HomeInUse {
        id: ComputerId,
        home_key: String,
        /// The live computer that holds the home (empty if it went away meanwhile).
        holder: String,
    },
    #[error("computer {0} is destroyed")]
    Destroyed(ComputerId),
    #[error("computer store failed")]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for ComputerError {
    fn from(e: sqlx::Error) -> Self {
        Self::Db(DbError::Query(e))
    }
}

fn is_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_ID_LEN
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Checks a placement's shape (like a docker engine name: it may become one); whether the
/// provider knows the place is its own business.
pub fn check_placement(placement: &str) -> Result<(), ComputerError> {
    let ok = (1..=MAX_PLACEMENT_LEN).contains(&placement.len())
        && placement.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && placement
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(ComputerError::BadPlacement(placement.to_string()))
    }
}

/// Declares a string newtype whose `new` accepts only [`is_id`] strings and refuses the rest
/// with `$bad`; it shows as itself and debugs as `Name(value)`.
macro_rules! id_newtype {
    ($(#[$doc:meta])* $name:ident, $bad:path) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            pub fn new(s: impl Into<String>) -> Result<Self, ComputerError> {
                let s = s.into();
                if is_id(&s) {
                    Ok(Self(s))
                } else {
                    Err($bad(s))
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self.0)
            }
        }
    };
}

id_newtype!(
    /// A computer id, validated like a bot id (it ends up in paths, URLs and keys).
    ComputerId,
    ComputerError::BadId
);

id_newtype!(
    /// A workspace id, validated like a bot id.
    WorkspaceId,
    ComputerError::BadWorkspace
);

id_newtype!(
    /// A warm pool's name, validated like a bot id (docs/pools.md).
    PoolName,
    ComputerError::BadPool
);

/// Whose computer it is: a workspace's shared Team computer, one bot's Private computer, or
/// nobody's yet: a warm pool's member, booted and waiting to be handed out (docs/pools.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComputerKind {
    Team {
        workspace: WorkspaceId,
    },
    Private {
        bot: BotId,
    },
    /// Pool `pool`'s member `member` (its own id: its home key names it, so two members never
    /// share one).
    Pool {
        pool: PoolName,
        member: ComputerId,
    },
}

impl ComputerKind {
    /// The key of the home this computer carries: `team-<workspace>` or the bot id
    /// (docs/lifecycle.md#vocabulary).
    pub fn home_key(&self) -> String {
        match self {
            Self::Team { workspace } => format!("{TEAM_HOME_PREFIX}{workspace}"),
            Self::Private { bot } => bot.as_str().to_owned(),
            Self::Pool { member, .. } => format!("{POOL_HOME_PREFIX}{member}"),
        }
    }

    /// The `kind` column (a pool member's row is a placeholder team row; its `pool` column
    /// says what it is).
    fn as_str(&self) -> &'static str {
        match self {
            Self::Team { .. } | Self::Pool { .. } => "team",
            Self::Private { .. } => "private",
        }
    }

    /// The workspace whose computer this is, if it is a team computer.
    pub fn workspace(&self) -> Option<&WorkspaceId> {
        match self {
            Self::Team { workspace } => Some(workspace),
            _ => None,
        }
    }

    /// The pool this computer waits in, if it is an unassigned pool member.
    pub fn pool(&self) -> Option<&PoolName> {
        match self {
            Self::Pool { pool, .. } => Some(pool),
            _ => None,
        }
    }
}

/// Where a computer is in its life. `Destroyed` is terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComputerState {
    Provisioning,
    Running,
    Stopped,
    Destroyed,
}

impl ComputerState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Provisioning => "provisioning",
            Self::Running => "running",
            Self::Stopped => "stopped",
            Self::Destroyed => "destroyed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "provisioning" => Self::Provisioning,
            "running" => Self::Running,
            "stopped" => Self::Stopped,
            "destroyed" => Self::Destroyed,
            _ => return None,
        })
    }
}

impl fmt::Display for ComputerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The sha256 (lowercase hex) of an enrollment token: what the database keeps instead of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenHash(String);

impl TokenHash {
    pub fn of(token: &str) -> Self {
        Self(hex::encode(Sha256::digest(token.as_bytes())))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A fresh computer id: `c-` and 16 random hex characters.
pub fn new_computer_id() -> ComputerId {
    ComputerId(format!("c-{}", hex::encode(rand::random::<[u8; 8]>())))
}

/// A fresh enrollment token: 32 random bytes, hex. Hand it to the guest once; store only
/// [`TokenHash::of`] it.
pub fn new_token() -> Secret {
    Secret::new(hex::encode(rand::random::<[u8; 32]>()))
}

/// What [`ComputerStore::create`] needs.
#[derive(Debug, Clone)]
pub struct NewComputer {
    pub id: ComputerId,
    pub kind: ComputerKind,
    /// The provider's name in configuration (`docker`, `local`, …).
    pub provider: String,
    pub token_hash: TokenHash,
    /// Resource limits of its machines (checked by the caller).
    pub limits: providers::MachineLimits,
    /// Where its machines go, in its provider's terms (checked by [`check_placement`]; whether
    /// the provider knows the place is the caller's to check).
    pub placement: Option<String>,
}

/// One computer as stored. Not serializable: the HTTP layer converts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Computer {
    pub id: ComputerId,
    pub kind: ComputerKind,
    pub home_key: String,
    pub provider: String,
    /// The provider's handle on the machine: an acceleration path, not durable data.
    pub provider_ref: Option<String>,
    pub state: ComputerState,
    /// Whether its guest holds a tunnel to this control plane right now.
    pub connected: bool,
    pub last_seen_at_ms: Option<i64>,
    pub screen_generation: u64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    /// Resource limits of its machines; a replacement gets the same.
    pub limits: providers::MachineLimits,
    /// Where the caller asked its machines to go (a docker engine, a Daytona region); a
    /// replacement is asked for there too. `None`: wherever the provider chooses.
    pub placement: Option<String>,
}

/// The computers table.
#[derive(Debug, Clone)]
pub struct ComputerStore {
    db: Db,
}

impl ComputerStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Inserts a computer in state `provisioning`.
    pub async fn create(&self, new: NewComputer, now_ms: i64) -> Result<Computer, ComputerError> {
        if !is_id(&new.provider) || new.provider.len() > MAX_PROVIDER_LEN {
            return Err(ComputerError::BadProvider(new.provider));
        }
        if let Some(p) = &new.placement {
            check_placement(p)?;
        }
        let (workspace, bot, pool) = match &new.kind {
            ComputerKind::Team { workspace } => (Some(workspace.as_str()), None, None),
            ComputerKind::Private { bot } => {
                if bot.as_str().starts_with(TEAM_HOME_PREFIX) {
                    return Err(ComputerError::ReservedBotId(bot.clone()));
                }
                (None, Some(bot.as_str()), None)
            }
            ComputerKind::Pool { pool, member } => {
                if member != &new.id {
                    return Err(ComputerError::BadId(member.to_string()));
                }
                (Some(POOL_WORKSPACE), None, Some(pool.as_str()))
            }
        };
        let home_key = new.kind.home_key();
        // DO NOTHING covers both the primary key and the live-home unique index; which one
        // fired is worked out below.
        let sql = format!(
            "INSERT INTO computers (id, kind, workspace, bot, home_key, provider, provider_ref, \
             state, token_hash, connected, last_seen_at, screen_generation, created_at, updated_at, \
             limits, placement, pool) \
             VALUES ($1, $2, $3, $4, $5, $6, NULL, $7, $8, 0, NULL, 0, $9, $9, $10, $11, $12) \
             ON CONFLICT DO NOTHING RETURNING {COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(new.id.as_str())
            .bind(new.kind.as_str())
            .bind(workspace)
            .bind(bot)
            .bind(home_key.as_str())
            .bind(new.provider.as_str())
            .bind(ComputerState::Provisioning.as_str())
            .bind(new.token_hash.as_str())
            .bind(now_ms)
            .bind(serde_json::to_string(&new.limits).expect("limits serialize"))
            .bind(new.placement.as_deref())
            .bind(pool)
            .fetch_optional(self.db.pool())
            .await?;
        match row {
            Some(row) => Ok(from_row(&row)?),
            None if self.exists(&new.id).await? => Err(ComputerError::AlreadyExists(new.id)),
            None => {
                let holder = sqlx::query_scalar::<_, String>(
                    "SELECT id FROM computers WHERE home_key = $1 AND state <> 'destroyed'",
                )
                .bind(home_key.as_str())
                .fetch_optional(self.db.pool())
                .await?
                .unwrap_or_default();
                Err(ComputerError::HomeInUse {
                    id: new.id,
                    home_key,
                    holder,
                })
            }
        }
    }

    /// The computer, destroyed or not.
    pub async fn get(&self, id: &ComputerId) -> Result<Option<Computer>, ComputerError> {
        let sql = format!("SELECT {COLUMNS} FROM computers WHERE id = $1");
        let row = sqlx::query(&sql)
            .bind(id.as_str())
            .fetch_optional(self.db.pool())
            .await?;
        Ok(row.as_ref().map(from_row).transpose()?)
    }

    /// Every computer not destroyed, oldest first.
    pub async fn list(&self) -> Result<Vec<Computer>, ComputerError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM computers WHERE state <> 'destroyed' ORDER BY created_at, id"
        );
        let rows = sqlx::query(&sql).fetch_all(self.db.pool()).await?;
        Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
    }

    /// Moves the computer to `state`, bumping its screen generation if the state changes.
    /// Setting `destroyed` again is a no-op; leaving `destroyed` fails.
    pub async fn set_state(
        &self,
        id: &ComputerId,
        state: ComputerState,
        now_ms: i64,
    ) -> Result<Computer, ComputerError> {
        let sql = format!(
            "UPDATE computers SET state = $2, updated_at = $3, \
             screen_generation = screen_generation + CASE WHEN state = $2 THEN 0 ELSE 1 END \
             WHERE id = $1 AND state <> 'destroyed' RETURNING {COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(id.as_str())
            .bind(state.as_str())
            .bind(now_ms)
            .fetch_optional(self.db.pool())
            .await?;
        if let Some(row) = row {
            return Ok(from_row(&row)?);
        }
        match self.get(id).await? {
            None => Err(ComputerError::NotFound(id.clone())),
            Some(c) if state == ComputerState::Destroyed => Ok(c),
            Some(_) => Err(ComputerError::Destroyed(id.clone())),
        }
    }

    /// Moves a computer to another provider kind (its old kind is no longer configured): the
    /// old reference and placement mean nothing there, so they are cleared, bumping the screen
    /// generation.
    pub async fn set_provider(
        &self,
        id: &ComputerId,
        provider: &str,
        now_ms: i64,
    ) -> Result<(), ComputerError> {
        if !is_id(provider) || provider.len() > MAX_PROVIDER_LEN {
            return Err(ComputerError::BadProvider(provider.to_string()));
        }
        sqlx::query(
            "UPDATE computers SET provider = $2, provider_ref = NULL, placement = NULL, \
             updated_at = $3, \
             screen_generation = screen_generation + 1 WHERE id = $1",
        )
        .bind(id.as_str())
        .bind(provider)
        .bind(now_ms)
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// Records (or clears) the provider's handle, bumping the screen generation if it changes.
    pub async fn set_provider_ref(
        &self,
        id: &ComputerId,
        provider_ref: Option<&str>,
        now_ms: i64,
    ) -> Result<Computer, ComputerError> {
        let sql = format!(
            "UPDATE computers SET provider_ref = $2, updated_at = $3, \
             screen_generation = screen_generation \
             + CASE WHEN provider_ref IS NOT DISTINCT FROM $2 THEN 0 ELSE 1 END \
             WHERE id = $1 RETURNING {COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(id.as_str())
            .bind(provider_ref)
            .bind(now_ms)
            .fetch_optional(self.db.pool())
            .await?;
        match row {
            Some(row) => Ok(from_row(&row)?),
            None => Err(ComputerError::NotFound(id.clone())),
        }
    }

    /// Records that the guest's tunnel came up or went down; either way it was seen at `now_ms`.
    pub async fn set_connected(
        &self,
        id: &ComputerId,
        connected: bool,
        now_ms: i64,
    ) -> Result<(), ComputerError> {
        let done = sqlx::query(
            "UPDATE computers SET connected = $2, last_seen_at = $3, updated_at = $3 WHERE id = $1",
        )
        .bind(id.as_str())
        .bind(i64::from(connected))
        .bind(now_ms)
        .execute(self.db.pool())
        .await?;
        if done.rows_affected() == 0 {
            return Err(ComputerError::NotFound(id.clone()));
        }
        Ok(())
    }

    /// Marks every computer disconnected: at startup no tunnel can be up yet. Returns how many
    /// were marked connected.
    pub async fn mark_all_disconnected(&self, now_ms: i64) -> Result<u64, ComputerError> {
        let done =
            sqlx::query("UPDATE computers SET connected = 0, updated_at = $1 WHERE connected <> 0")
                .bind(now_ms)
                .execute(self.db.pool())
                .await?;
        Ok(done.rows_affected())
    }

    /// Replaces the enrollment token's hash (a re-issued token); the old token stops verifying.
    pub async fn set_token_hash(
        &self,
        id: &ComputerId,
        token_hash: &TokenHash,
        now_ms: i64,
    ) -> Result<(), ComputerError> {
        let done =
            sqlx::query("UPDATE computers SET token_hash = $2, updated_at = $3 WHERE id = $1")
                .bind(id.as_str())
                .bind(token_hash.as_str())
                .bind(now_ms)
                .execute(self.db.pool())
                .await?;
        if done.rows_affected() == 0 {
            return Err(ComputerError::NotFound(id.clone()));
        }
        Ok(())
    }

    /// Whether `token` is the enrollment token of computer `id`. Unknown and destroyed
    /// computers verify nothing. The hashes are compared in constant time.
    pub async fn verify_token(&self, id: &ComputerId, token: &str) -> Result<bool, ComputerError> {
        // Hash first, so an unknown id costs about what a known one does.
        let presented = TokenHash::of(token);
        let row = sqlx::query("SELECT token_hash, state FROM computers WHERE id = $1")
            .bind(id.as_str())
            .fetch_optional(self.db.pool())
            .await?;
        let Some(row) = row else {
            return Ok(false);
        };
        let stored: String = column(&row, TABLE, id.as_str(), "token_hash")?;
        let state: String = column(&row, TABLE, id.as_str(), "state")?;
        let matches: bool = presented
            .as_str()
            .as_bytes()
            .ct_eq(stored.as_bytes())
            .into();
        Ok(matches && state != ComputerState::Destroyed.as_str())
    }

    /// Pool `pool`'s members not destroyed, oldest first.
    pub async fn pool_members(&self, pool: &PoolName) -> Result<Vec<Computer>, ComputerError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM computers WHERE pool = $1 AND state <> 'destroyed' \
             ORDER BY created_at, id"
        );
        let rows = sqlx::query(&sql)
            .bind(pool.as_str())
            .fetch_all(self.db.pool())
            .await?;
        Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
    }

    /// Marks pool member `member` ready: its boot has finished.
    pub async fn set_pool_ready(&self, member: &ComputerId) -> Result<(), ComputerError> {
        sqlx::query("UPDATE computers SET pool_ready = 1 WHERE id = $1 AND pool IS NOT NULL")
            .bind(member.as_str())
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// Takes pool member `member` out of reach of hand-outs (before it is destroyed): `false`
    /// when it is no longer an unassigned member of `pool` (handed out meanwhile).
    pub async fn retire_member(
        &self,
        member: &ComputerId,
        pool: &PoolName,
    ) -> Result<bool, ComputerError> {
        let done = sqlx::query("UPDATE computers SET pool_ready = 0 WHERE id = $1 AND pool = $2")
            .bind(member.as_str())
            .bind(pool.as_str())
            .execute(self.db.pool())
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// The ids of pool `pool`'s members whose boot has finished.
    pub async fn pool_ready_ids(&self, pool: &PoolName) -> Result<Vec<String>, ComputerError> {
        Ok(sqlx::query_scalar::<_, String>(
            "SELECT id FROM computers WHERE pool = $1 AND pool_ready = 1 AND state <> 'destroyed'",
        )
        .bind(pool.as_str())
        .fetch_all(self.db.pool())
        .await?)
    }

    /// Hands pool `pool`'s running member `member` out as a computer of kind `to` (team or
    /// private), in one conditional update: of two callers racing for one member, one gets it
    /// and the other `None`. `HomeInUse` if `to`'s home already has a live computer.
    pub async fn hand_out(
        &self,
        member: &ComputerId,
        pool: &PoolName,
        to: &ComputerKind,
        now_ms: i64,
    ) -> Result<Option<Computer>, ComputerError> {
        let (workspace, bot) = match to {
            ComputerKind::Team { workspace } => (Some(workspace.as_str()), None),
            ComputerKind::Private { bot } if bot.as_str().starts_with(TEAM_HOME_PREFIX) => {
                return Err(ComputerError::ReservedBotId(bot.clone()))
            }
            ComputerKind::Private { bot } => (None, Some(bot.as_str())),
            ComputerKind::Pool { .. } => return Err(ComputerError::BadId(member.to_string())),
        };
        let home_key = to.home_key();
        let holder = sqlx::query_scalar::<_, String>(
            "SELECT id FROM computers WHERE home_key = $1 AND state <> 'destroyed'",
        )
        .bind(home_key.as_str())
        .fetch_optional(self.db.pool())
        .await?;
        if let Some(holder) = holder {
            return Err(ComputerError::HomeInUse {
                id: member.clone(),
                home_key,
                holder,
            });
        }
        let sql = format!(
            "UPDATE computers SET kind = $3, workspace = $4, bot = $5, home_key = $6, pool = NULL, \
             pool_ready = 0, updated_at = $7, screen_generation = screen_generation + 1 \
             WHERE id = $1 AND pool = $2 AND pool_ready = 1 AND state = 'running' \
             RETURNING {COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(member.as_str())
            .bind(pool.as_str())
            .bind(to.as_str())
            .bind(workspace)
            .bind(bot)
            .bind(home_key.as_str())
            .bind(now_ms)
            .fetch_optional(self.db.pool())
            .await?;
        Ok(row.as_ref().map(from_row).transpose()?)
    }

    async fn exists(&self, id: &ComputerId) -> Result<bool, ComputerError> {
        let row = sqlx::query("SELECT id FROM computers WHERE id = $1")
            .bind(id.as_str())
            .fetch_optional(self.db.pool())
            .await?;
        Ok(row.is_some())
    }
}

/// Maps a row selected with [`COLUMNS`], checking every invariant the types carry.
fn from_row(row: &AnyRow) -> Result<Computer, DbError> {
    let raw_id: String = column(row, TABLE, "?", "id")?;
    let key = raw_id.as_str();
    let corrupt = |reason: String| DbError::corrupt(TABLE, key, reason);
    let id = ComputerId::new(raw_id.clone()).map_err(|e| corrupt(e.to_string()))?;
    let kind: String = column(row, TABLE, key, "kind")?;
    let workspace: Option<String> = column(row, TABLE, key, "workspace")?;
    let bot: Option<String> = column(row, TABLE, key, "bot")?;
    let pool: Option<String> = column(row, TABLE, key, "pool")?;
    let kind = match (kind.as_str(), workspace, bot) {
        ("team", Some(ws), None) if ws == POOL_WORKSPACE => ComputerKind::Pool {
            pool: PoolName::new(pool.ok_or_else(|| corrupt("a pool row without its pool".into()))?)
                .map_err(|e| corrupt(e.to_string()))?,
            member: id.clone(),
        },
        _ if pool.is_some() => return Err(corrupt("a pool column on a handed-out row".into())),
        ("team", Some(ws), None) => ComputerKind::Team {
            workspace: WorkspaceId::new(ws).map_err(|e| corrupt(e.to_string()))?,
        },
        ("private", None, Some(bot)) => ComputerKind::Private {
            bot: BotId::new(bot).map_err(|e| corrupt(e.to_string()))?,
        },
        (kind, ws, bot) => {
            return Err(corrupt(format!(
                "kind {kind:?} with workspace {ws:?} and bot {bot:?}"
            )))
        }
    };
    let home_key: String = column(row, TABLE, key, "home_key")?;
    if home_key != kind.home_key() {
        return Err(corrupt(format!(
            "home_key {home_key:?} does not match its kind"
        )));
    }
    let state: String = column(row, TABLE, key, "state")?;
    let state = ComputerState::parse(&state).ok_or_else(|| corrupt(format!("state {state:?}")))?;
    let connected: i64 = column(row, TABLE, key, "connected")?;
    let connected = match connected {
        0 => false,
        1 => true,
        other => return Err(corrupt(format!("connected is {other}"))),
    };
    let screen_generation: i64 = column(row, TABLE, key, "screen_generation")?;
    let limits: String = column(row, TABLE, key, "limits")?;
    let limits = serde_json::from_str(&limits).map_err(|e| corrupt(format!("limits: {e}")))?;
    let placement: Option<String> = column(row, TABLE, key, "placement")?;
    if let Some(p) = &placement {
        check_placement(p).map_err(|e| corrupt(e.to_string()))?;
    }
    Ok(Computer {
        limits,
        placement,
        home_key,
        provider: column(row, TABLE, key, "provider")?,
        provider_ref: column(row, TABLE, key, "provider_ref")?,
        state,
        connected,
        last_seen_at_ms: column(row, TABLE, key, "last_seen_at")?,
        screen_generation: non_negative(screen_generation, TABLE, key, "screen_generation")?,
        created_at_ms: column(row, TABLE, key, "created_at")?,
        updated_at_ms: column(row, TABLE, key, "updated_at")?,
        kind,
        id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_keys_follow_the_contract() {
        let team = ComputerKind::Team {
            workspace: WorkspaceId::new("ws-1").unwrap(),
        };
        let private = ComputerKind::Private {
            bot: BotId::new("bot.a").unwrap(),
        };
        assert_eq!(team.home_key(), "team-ws-1");
        assert_eq!(private.home_key(), "bot.a");
    }

    #[test]
    fn ids_are_validated_like_bot_ids() {
        assert!(ComputerId::new("c-0123456789abcdef").is_ok());
        assert!(WorkspaceId::new("ws_1.x").is_ok());
        for bad in ["", ".", "..", "a/b", "a b", "é", &"x".repeat(129)] {
            assert!(ComputerId::new(bad).is_err(), "{bad:?} accepted");
            assert!(WorkspaceId::new(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn ids_show_and_fail_under_their_own_names() {
        let c = ComputerId::new("c-1").unwrap();
        let w = WorkspaceId::new("ws-1").unwrap();
        assert_eq!(
            (c.to_string(), format!("{c:?}")),
            ("c-1".into(), "ComputerId(c-1)".into())
        );
        assert_eq!(
            (w.as_str(), format!("{w:?}")),
            ("ws-1", "WorkspaceId(ws-1)".into())
        );
        let err = ComputerId::new("a b").unwrap_err();
        assert!(
            matches!(&err, ComputerError::BadId(s) if s == "a b"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "computer id \"a b\" must be 1..=128 characters of [A-Za-z0-9._-]"
        );
        let err = WorkspaceId::new("").unwrap_err();
        assert!(
            matches!(&err, ComputerError::BadWorkspace(s) if s.is_empty()),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "workspace id \"\" must be 1..=128 characters of [A-Za-z0-9._-]"
        );
    }

    #[test]
    fn generated_ids_and_tokens_have_their_shape() {
        let id = new_computer_id();
        assert_eq!(id.as_str().len(), 18);
        assert!(id.as_str().starts_with("c-"));
        assert_ne!(new_computer_id(), id);
        let token = new_token();
        assert_eq!(token.expose().len(), 64);
        assert!(token.expose().bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(new_token().expose(), token.expose());
    }

    #[test]
    fn token_hash_is_sha256_hex() {
        assert_eq!(
            TokenHash::of("abc").as_str(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn placements_are_shaped_like_engine_names() {
        for good in ["b", "eu", "engine-2.rack_1", &"a".repeat(63)] {
            assert!(check_placement(good).is_ok(), "{good:?}");
        }
        for bad in ["", "-b", ".b", "B", "a/b", "a b", "é", &"a".repeat(64)] {
            let err = check_placement(bad).unwrap_err();
            assert!(
                matches!(&err, ComputerError::BadPlacement(s) if s == bad),
                "{bad:?}: {err:?}"
            );
        }
        assert_eq!(
            check_placement("A").unwrap_err().to_string(),
            "placement \"A\" must be 1..=63 characters of [a-z0-9._-], starting with a letter \
             or digit"
        );
    }

    #[test]
    fn states_round_trip() {
        use ComputerState::*;
        for s in [Provisioning, Running, Stopped, Destroyed] {
            assert_eq!(ComputerState::parse(s.as_str()), Some(s));
        }
        assert_eq!(ComputerState::parse("gone"), None);
    }
}
