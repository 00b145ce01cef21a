//! What the core does for maintenance jobs (docs/lifecycle.md#maintenance-jobs): the reservation
//! check every refused action makes, and the steps of a machine replacement, each a separate call
//! so the job's worker (`jobs::worker`) records its stage between them. The steps are those `boot`
//! takes for a gone machine, apart: remove the old machine, provision a new one (fresh token, the
//! stored home pending), wait for its guest, restore the home.

use super::{Core, CoreError, CONNECT_TIMEOUT};
use crate::clock::now_ms;
use crate::computers::{new_token, Computer, ComputerId, ComputerState, TokenHash};
use crate::homes::HomeError;
use crate::jobs::JobError;
use crate::schema::activity::{Cause, LifecycleKind as Lifecycle};
use providers::{ProviderRef, SandboxProvider};
use tracing::{info, warn};

impl Core {
    /// Refuses with [`JobError::Reserved`] while a maintenance job reserves computer `id`.
    pub async fn check_unreserved(&self, id: &ComputerId) -> Result<(), CoreError> {
        match self.jobs.store.reservation(id).await? {
            Some(job) => Err(JobError::Reserved(Box::new(job)).into()),
            None => Ok(()),
        }
    }

    /// Runs lifecycle action `act` (stop, start, destroy, a new takeover) on computer `id`:
    /// holding its lifecycle claim (`Jobs::act`), refused while a job reserves it, and acting
    /// before the claim is given back. A job's creation takes the same claim, so no job can
    /// appear between the check and the act, on any replica: either the job exists first and
    /// the action is refused `computer_reserved`, or the action has acted (or failed) first
    /// and the job's creation meanwhile was refused `computer_busy`.
    pub(crate) async fn unreserved_act<T, F>(
        &self,
        id: &ComputerId,
        act: impl FnOnce() -> F,
    ) -> Result<T, CoreError>
    where
        F: std::future::Future<Output = Result<T, CoreError>>,
    {
        let held = self.jobs.act(id).await?;
        let result = match self.check_unreserved(id).await {
            Ok(()) => act().await,
            Err(e) => Err(e),
        };
        held.release().await;
        result
    }

    /// Removes `c`'s machine for a replacement: the computer is `provisioning` from now on (no
    /// operation reaches it), its stored home pending (nothing checkpoints the empty home that
    /// follows), its machine destroyed and its guest's connection dropped.
    pub(crate) async fn job_remove_machine(&self, c: &Computer) -> Result<(), CoreError> {
        self.homes
            .ledger()
            .set_pending_restore(&c.id, true)
            .await
            .map_err(HomeError::from)?;
        self.computers
            .set_state(&c.id, ComputerState::Provisioning, now_ms())
            .await?;
        // Closed first, while the machine's network still exists (see `stop_machine`).
        self.drop_guest(&c.id).await;
        match (&c.provider_ref, self.providers.get(&c.provider)) {
            (Some(r), Some(provider)) => provider.destroy(&ProviderRef(r.clone())).await?,
            (Some(r), None) => {
                warn!(computer_id = %c.id, provider = %c.provider, provider_ref = %r, "provider not configured: its old machine, if any, is left to the operator")
            }
            (None, _) => {}
        }
        self.computers
            .set_provider_ref(&c.id, None, now_ms())
            .await?;
        info!(computer_id = %c.id, "machine removed for its replacement");
        self.activity
            .lifecycle(
                c.id.as_str(),
                Lifecycle::Stopped,
                Cause::Maintenance,
                "a maintenance job removed the machine to replace it",
            )
            .await;
        Ok(())
    }

    /// Provisions `c`'s new machine with the configured provider (the default one if `c`'s is
    /// no longer configured) and a fresh enrollment token.
    pub(crate) async fn job_provision(&self, c: &Computer) -> Result<Computer, CoreError> {
        if !self.has_provider(c) {
            let to = self.providers.default_kind();
            warn!(computer_id = %c.id, from = %c.provider, to, "provider not configured: the replacement machine goes on the default provider");
            self.computers.set_provider(&c.id, to, now_ms()).await?;
        }
        let c = self.get(c.id.as_str()).await?;
        let provider = self.provider_of(&c)?;
        let token = new_token();
        self.computers
            .set_token_hash(&c.id, &TokenHash::of(token.expose()), now_ms())
            .await?;
        let spec = self.spec(&c, token).await;
        let r = Self::replace(provider, &c, &spec).await?;
        self.computers
            .set_provider_ref(&c.id, Some(&r.0), now_ms())
            .await?;
        info!(computer_id = %c.id, provider_ref = %r, "replacement machine provisioned");
        self.activity
            .lifecycle(
                c.id.as_str(),
                Lifecycle::Replaced,
                Cause::Maintenance,
                format!(
                    "a maintenance job provisioned a new machine on {}",
                    c.provider
                ),
            )
            .await;
        self.get(c.id.as_str()).await
    }

    /// Waits for `c`'s new guest to dial in.
    pub(crate) async fn job_wait_guest(&self, c: &Computer) -> Result<(), CoreError> {
        Ok(self.wait_connected(c.id.as_str(), CONNECT_TIMEOUT).await?)
    }

    /// Restores the stored home into `c`'s new machine and records the computer running;
    /// returns the revision restored (`None`: there was no stored home).
    pub(crate) async fn job_restore(&self, c: &Computer) -> Result<Option<u64>, CoreError> {
        let restored = self
            .restore_and_record(
                c,
                Cause::Maintenance,
                "a maintenance job restored the stored home into the new machine",
            )
            .await?;
        self.idle
            .booted(&c.id)
            .await
            .map_err(crate::computers::ComputerError::from)?;
        Ok(restored.map(|r| r.revision.get()))
    }

    /// The revision of `c`'s latest stored home, if any.
    pub(crate) async fn stored_revision(&self, c: &Computer) -> Result<Option<u64>, CoreError> {
        let Some(key) = self.homes.existing_key(c).await? else {
            return Ok(None);
        };
        Ok(self.homes.current_revision(&key).await?.map(|r| r.get()))
    }
}
