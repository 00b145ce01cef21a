//! Network policies (docs/security.md#network-policies): what a computer may reach through the
//! egress gateway. A computer's own policy, else its workspace's default, else the server's
//! default (`--local-egress`), stored in `network_policies` (migration 0011) in their text form.
//! The core resolves the one in force ([`NetworkStore::effective`]), hands it to the provider at
//! every start and applies a change to a running computer at once.

use crate::computers::{Computer, ComputerKind};
use crate::db::{column, Db, DbError};
use egress::Policy;
use tracing::warn;

/// Whose policy a row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Computer,
    Workspace,
}

impl Scope {
    fn as_str(self) -> &'static str {
        match self {
            Scope::Computer => "computer",
            Scope::Workspace => "workspace",
        }
    }
}

/// Where the policy in force comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The computer's own.
    Computer,
    /// Its workspace's default.
    Workspace,
    /// The server's default.
    Default,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Computer => "computer",
            Source::Workspace => "workspace",
            Source::Default => "default",
        }
    }
}

/// Parses a policy as the API and the CLI take it, with the egress crate's message.
pub fn parse(text: &str) -> Result<Policy, String> {
    text.parse::<Policy>().map_err(|e| e.to_string())
}

#[derive(Debug, Clone)]
pub struct NetworkStore {
    db: Db,
}

impl NetworkStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// The policy stored for `id` in `scope`, if any. A stored text this build cannot read
    /// (written by a newer one) counts as `none`: a computer's way out never opens by mistake.
    pub async fn get(&self, scope: Scope, id: &str) -> Result<Option<Policy>, DbError> {
        let row = sqlx::query("SELECT policy FROM network_policies WHERE scope = $1 AND id = $2")
            .bind(scope.as_str())
            .bind(id)
            .fetch_optional(self.db.pool())
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let text: String = column(&row, "network_policies", id, "policy")?;
        Ok(Some(parse(&text).unwrap_or_else(|e| {
            warn!(scope = scope.as_str(), id, error = %e, "a stored network policy does not parse: none applies");
            Policy::none()
        })))
    }

    /// Stores `policy` for `id` in `scope`; `None` removes it.
    pub async fn set(
        &self,
        scope: Scope,
        id: &str,
        policy: Option<&Policy>,
        now_ms: i64,
    ) -> Result<(), DbError> {
        match policy {
            Some(p) => {
                sqlx::query(
                    "INSERT INTO network_policies (scope, id, policy, updated_at) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (scope, id) \
                     DO UPDATE SET policy = excluded.policy, updated_at = excluded.updated_at",
                )
                .bind(scope.as_str())
                .bind(id)
                .bind(p.to_string())
                .bind(now_ms)
                .execute(self.db.pool())
                .await?;
            }
            None => {
                sqlx::query("DELETE FROM network_policies WHERE scope = $1 AND id = $2")
                    .bind(scope.as_str())
                    .bind(id)
                    .execute(self.db.pool())
                    .await?;
            }
        }
        Ok(())
    }

    /// The policy in force for `c` and where it comes from; `None` with [`Source::Default`]:
    /// the server's default.
    pub async fn effective(&self, c: &Computer) -> Result<(Option<Policy>, Source), DbError> {
        if let Some(p) = self.get(Scope::Computer, c.id.as_str()).await? {
            return Ok((Some(p), Source::Computer));
        }
        if let ComputerKind::Team { workspace } = &c.kind {
            if let Some(p) = self.get(Scope::Workspace, workspace.as_str()).await? {
                return Ok((Some(p), Source::Workspace));
            }
        }
        Ok((None, Source::Default))
    }
}

impl NetworkStore {
    /// How many policies there are and when the last one changed: a cheap fingerprint the
    /// replicas poll to notice a change made elsewhere.
    pub async fn version(&self) -> Result<(i64, i64), DbError> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n, COALESCE(MAX(updated_at), 0) AS m FROM network_policies",
        )
        .fetch_one(self.db.pool())
        .await?;
        Ok((
            column(&row, "network_policies", "*", "n")?,
            column(&row, "network_policies", "*", "m")?,
        ))
    }
}
