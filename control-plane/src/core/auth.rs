//! How guests authenticate to the tunnel: against the computer store (`CoreAuth`).

use super::*;

/// Guests authenticate against the computer store.
pub struct CoreAuth(pub Arc<Core>);

impl GuestAuth for CoreAuth {
    async fn verify(&self, computer_id: &str, token: &Secret) -> bool {
        let Ok(id) = ComputerId::new(computer_id) else {
            return false;
        };
        match self.0.computers.verify_token(&id, token.expose()).await {
            Ok(ok) => ok,
            Err(e) => {
                warn!(error = %e, "token check failed");
                false
            }
        }
    }

    async fn live_leases(&self, computer_id: &str) -> Vec<(BotId, LeaseToken)> {
        let Ok(id) = ComputerId::new(computer_id) else {
            return Vec::new();
        };
        let rows = match self.0.homes.ledger().live_leases(&id, now_ms()).await {
            Ok(rows) => rows,
            Err(e) => {
                warn!(computer_id, error = %crate::homes::chain(&e), "could not read live leases for the guest; it learns them from commands");
                return Vec::new();
            }
        };
        rows.into_iter()
            .filter_map(|(bot, owner, fence)| {
                let bot = BotId::new(bot).ok()?;
                let token = LeaseToken::new(owner, u64::try_from(fence).ok()?).ok()?;
                Some((bot, token))
            })
            .collect()
    }

    async fn set_connected(&self, computer_id: &str, connected: bool) {
        let Ok(id) = ComputerId::new(computer_id) else {
            return;
        };
        if let Err(e) = self
            .0
            .computers
            .set_connected(&id, connected, now_ms())
            .await
        {
            warn!(computer_id, error = %e, "could not record guest connectivity");
        }
        if let Some(cluster) = &self.0.cluster {
            if let Err(e) = cluster.set_link(computer_id, connected).await {
                warn!(computer_id, error = %e, "could not record which replica the guest is connected to");
            }
        }
        // The tunnel reports `false` only for a connection that ended by itself (one the
        // control plane closed, or that a newer one replaced, is forgotten first).
        if !connected {
            self.0.guest_lost(computer_id);
        }
    }
}
