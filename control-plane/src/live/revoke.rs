//! What the guest revokes when a desktop goes away or control is released: the decisions are
//! the callers' (the core's teardown, [`super::authority`]); this is their effect here and on
//! the guest.

use super::streams::CloseScope;
use super::LiveState;
use crate::computers::ComputerId;
use crate::guest::Guest;
use crate::live::store::LiveStoreError;
use gateway_proto::live::{RevokeRequest, RevokeScope};
use gateway_proto::BotId;
use tracing::{debug, info};

impl LiveState {
    /// The bot's desktop is going away: bump its generation so every URL dies, close its
    /// streams and have its `guest` (if connected) revoke its capabilities.
    pub async fn screen_gone(
        &self,
        guest: Option<&Guest>,
        computer: &ComputerId,
        bot: &BotId,
    ) -> Result<(), LiveStoreError> {
        self.store.bump_generation(computer, bot).await?;
        self.streams
            .close_bot(computer.as_str(), bot, CloseScope::All);
        revoke_on_guest(guest, bot, RevokeScope::All).await;
        Ok(())
    }
}

/// Best effort: a guest that is not connected has no capability open to revoke.
pub async fn revoke_on_guest(guest: Option<&Guest>, bot: &BotId, scope: RevokeScope) {
    let Some(guest) = guest else {
        return;
    };
    let computer = guest.computer();
    let req = RevokeRequest {
        bot: bot.clone(),
        scope,
    };
    match guest.call(req).await {
        Ok(()) => debug!(computer_id = %computer, bot = %bot, "guest revoked capabilities"),
        Err(e) => {
            info!(computer_id = %computer, bot = %bot, error = %e, "revocation on the guest failed")
        }
    }
}
