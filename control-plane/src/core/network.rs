//! Network policies on the core: show and set a computer's or a workspace's, and keep what the
//! providers enforce equal to what is stored (`crate::network`).
//!
//! A change is applied by the replica that takes it at once (the next connection and DNS query
//! of a running computer see it); every replica also re-reads the table when it changes
//! ([`Core::sync_network_policies`], run every second by `serve`), so a computer running behind
//! another replica's gateway, or adopted after a restart (with `none` until then), gets its
//! policy within a second.

use super::{Core, CoreError};
use crate::clock::now_ms;
use crate::computers::{Computer, ComputerError, ComputerKind, ComputerState, WorkspaceId};
use crate::db::DbError;
use crate::network::{Scope, Source};
use egress::Policy;
use providers::NetworkEnforcement;
use tracing::{info, warn};

/// A computer's network policy as the API shows it.
#[derive(Debug, Clone)]
pub struct NetworkView {
    /// The policy in force; `None` when no computer, workspace or server default applies (a
    /// provider that enforces nothing).
    pub policy: Option<Policy>,
    pub source: Source,
    /// `None` when the computer's provider enforces it; else why not.
    pub not_enforced: Option<&'static str>,
    /// Whether the change (for a set) reached the running computer now.
    pub applied: bool,
    /// Its gateway counters since it was attached, when it runs behind this replica's gateway.
    pub counters: Option<egress::CounterSnapshot>,
}

fn db(e: DbError) -> CoreError {
    CoreError::Computer(ComputerError::Db(e))
}

impl Core {
    /// The network policy in force for computer `id`.
    pub async fn network_policy(&self, id: &str) -> Result<NetworkView, CoreError> {
        let c = self.get(id).await?;
        self.network_view(&c, false).await
    }

    async fn network_view(&self, c: &Computer, applied: bool) -> Result<NetworkView, CoreError> {
        let (policy, source) = self.network.effective(c).await.map_err(db)?;
        let provider = self.provider_of(c)?;
        let not_enforced = match provider.network_enforcement() {
            NetworkEnforcement::Gateway => None,
            NetworkEnforcement::NotEnforced(why) => Some(why),
        };
        let policy = policy.or_else(|| provider.default_network_policy().cloned());
        let counters = provider
            .network_counters()
            .into_iter()
            .find_map(|(id, n)| (id == c.id.as_str()).then_some(n));
        Ok(NetworkView {
            policy,
            source,
            not_enforced,
            applied,
            counters,
        })
    }

    /// Sets computer `id`'s own policy (`None`: back to its workspace's or the server's) and
    /// applies it to its running machine at once.
    pub async fn set_network_policy(
        &self,
        id: &str,
        policy: Option<Policy>,
    ) -> Result<NetworkView, CoreError> {
        let c = self.get(id).await?;
        self.network
            .set(Scope::Computer, c.id.as_str(), policy.as_ref(), now_ms())
            .await
            .map_err(db)?;
        let applied = self.apply_network_policy(&c).await?;
        info!(computer_id = %c.id.as_str(), policy = %policy.as_ref().map_or("(default)".to_string(), Policy::to_string), applied, "network policy set");
        self.network_view(&c, applied).await
    }

    /// Workspace `ws`'s default policy, if it has one.
    pub async fn workspace_network_policy(
        &self,
        ws: &WorkspaceId,
    ) -> Result<Option<Policy>, CoreError> {
        self.network
            .get(Scope::Workspace, ws.as_str())
            .await
            .map_err(db)
    }

    /// Sets workspace `ws`'s default (`None`: the server's) and applies it to its running
    /// computers that have no policy of their own.
    pub async fn set_workspace_network_policy(
        &self,
        ws: &WorkspaceId,
        policy: Option<Policy>,
    ) -> Result<Option<Policy>, CoreError> {
        self.network
            .set(Scope::Workspace, ws.as_str(), policy.as_ref(), now_ms())
            .await
            .map_err(db)?;
        for c in self.list().await? {
            let ours = matches!(&c.kind, ComputerKind::Team { workspace } if workspace == ws);
            if ours && c.state == ComputerState::Running {
                self.apply_network_policy(&c).await?;
            }
        }
        info!(workspace = %ws, policy = %policy.as_ref().map_or("(default)".to_string(), Policy::to_string), "workspace network policy set");
        Ok(policy)
    }

    /// Hands `c`'s policy in force to its provider; `true` when a running machine took it.
    pub(crate) async fn apply_network_policy(&self, c: &Computer) -> Result<bool, CoreError> {
        let provider = self.provider_of(c)?;
        let (policy, _) = self.network.effective(c).await.map_err(db)?;
        let Some(policy) = policy.or_else(|| provider.default_network_policy().cloned()) else {
            return Ok(false);
        };
        Ok(provider.set_network_policy(c.id.as_str(), policy))
    }

    /// Re-applies the stored policies to every computer this replica's providers hold behind
    /// the gateway (at start, and whenever the table changed).
    pub async fn sync_network_policies(&self) -> Result<(), CoreError> {
        // Providers may share one gateway (local and Docker): each computer once.
        let ids: std::collections::BTreeSet<String> = self
            .providers
            .kinds()
            .filter_map(|k| self.providers.get(k))
            .flat_map(|p| p.contained_computers())
            .collect();
        for id in ids {
            match self.get(&id).await {
                Ok(c) => {
                    self.apply_network_policy(&c).await?;
                }
                Err(CoreError::NotFound(_)) => {}
                Err(e) => warn!(computer_id = %id, error = %e, "network policy not synced"),
            }
        }
        Ok(())
    }

    /// The egress counters of every computer this replica's providers hold behind the gateway.
    pub fn network_counters(&self) -> Vec<(String, egress::CounterSnapshot)> {
        // Providers may share one gateway (local and Docker): each computer once.
        let by_id: std::collections::BTreeMap<String, egress::CounterSnapshot> = self
            .providers
            .kinds()
            .filter_map(|k| self.providers.get(k))
            .flat_map(|p| p.network_counters())
            .collect();
        by_id.into_iter().collect()
    }

    /// [`Core::network_counters`] summed, for the scrape.
    pub fn network_totals(&self) -> egress::CounterSnapshot {
        let mut t = egress::CounterSnapshot::default();
        for (_, c) in self.network_counters() {
            t += c;
        }
        t
    }

    /// [`Core::sync_network_policies`] when the stored policies changed since `seen` (a
    /// fingerprint of the table; `None`: always), remembering what it synced.
    pub async fn sync_network_policies_since(
        &self,
        seen: &mut Option<(i64, i64)>,
    ) -> Result<(), CoreError> {
        let version = self.network.version().await.map_err(db)?;
        if *seen != Some(version) {
            self.sync_network_policies().await?;
            *seen = Some(version);
        }
        Ok(())
    }
}

/// How often a replica looks for network policies changed elsewhere.
const NETWORK_POLICY_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// Re-applies the stored network policies whenever the table changes (a change made through
/// another replica, or one this replica could not apply at once), within a second.
pub async fn follow_network_policies(core: std::sync::Arc<Core>, mut seen: Option<(i64, i64)>) {
    let mut tick = tokio::time::interval(NETWORK_POLICY_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = core.sync_network_policies_since(&mut seen).await {
            tracing::debug!(error = %e, "network policies not synced");
        }
    }
}
