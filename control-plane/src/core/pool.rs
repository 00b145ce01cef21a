//! Warm pools (docs/pools.md): members booted ahead of need, handed out as a workspace's or a
//! bot's computer in one conditional update, and replaced when lost.
//!
//! A member is a computer of kind [`ComputerKind::Pool`]: booted like any computer (a fresh
//! enrollment token, its provider's machine, its guest connected) but with no home: it never
//! imports, checkpoints or idles, and operations on it are refused until it is handed out. A
//! hand-out rewrites the row into the asked-for kind (`ComputerStore::hand_out`: of two callers
//! racing for one member, one gets it), then, before the caller is answered, gives the machine
//! its workspace's secrets and network policy and imports the stored home of a returning
//! workspace or bot. A create that finds no ready member boots a computer cold (a miss).

use super::{Core, CoreError};
use crate::clock::now_ms;
use crate::computers::{Computer, ComputerKind, ComputerState, PoolName};
use crate::pools::{Pool, PoolError};
use crate::schema::activity::{Cause, LifecycleKind as Lifecycle};
use gateway_proto::desktop::ScreenPrewarm;
use providers::MachineLimits;
use tracing::{info, warn};

/// What a create from a pool did.
#[derive(Debug, Clone)]
pub struct FromPool {
    pub computer: Computer,
    /// `true`: a ready member was handed out; `false`: none was ready, so it booted cold.
    pub handed_out: bool,
}

impl Core {
    fn pool_name(name: &str) -> Result<PoolName, CoreError> {
        PoolName::new(name).map_err(|_| PoolError::NotFound(name.to_string()).into())
    }

    /// The pool `name`.
    pub async fn pool(&self, name: &str) -> Result<Pool, CoreError> {
        let n = Self::pool_name(name)?;
        self.pools
            .get(&n)
            .await?
            .ok_or_else(|| PoolError::NotFound(name.to_string()).into())
    }

    /// Makes pool `name`: `size` members on `provider` (default: the default provider), each
    /// with a desktop up when `desktop`. The refiller boots them in the background.
    pub async fn create_pool(
        &self,
        name: &str,
        provider: Option<&str>,
        size: u32,
        desktop: bool,
        limits: MachineLimits,
        by: &str,
    ) -> Result<Pool, CoreError> {
        let name = PoolName::new(name)?;
        let provider = provider.unwrap_or(self.providers.default_kind());
        if self.providers.get(provider).is_none() {
            return Err(CoreError::UnknownProvider(provider.to_string()));
        }
        limits.validate().map_err(CoreError::BadLimits)?;
        let pool = Pool {
            name,
            provider: provider.to_string(),
            size,
            desktop,
            limits,
            created_by: by.to_string(),
            created_at_ms: now_ms(),
        };
        self.pools.create(&pool).await?;
        info!(pool = %pool.name, provider, size, desktop, "warm pool created");
        self.pool_wake.notify_one();
        Ok(pool)
    }

    /// Changes pool `name`'s size: the refiller boots what is missing, and destroys unassigned
    /// members beyond it.
    pub async fn resize_pool(&self, name: &str, size: u32) -> Result<Pool, CoreError> {
        let n = Self::pool_name(name)?;
        self.pools.resize(&n, size).await?;
        self.pool_wake.notify_one();
        self.pool(name).await
    }

    /// Deletes pool `name` and destroys its unassigned members (computers handed out from it
    /// are not its any more and stay); returns how many it destroyed.
    pub async fn delete_pool(&self, name: &str) -> Result<u32, CoreError> {
        let n = Self::pool_name(name)?;
        if !self.pools.delete(&n).await? {
            return Err(PoolError::NotFound(name.to_string()).into());
        }
        self.metrics.pool_deleted(name);
        let mut destroyed = 0;
        for m in self.computers.pool_members(&n).await? {
            self.drop_member(&n, &m.id).await;
            destroyed += 1;
        }
        info!(pool = %n, destroyed, "warm pool deleted");
        Ok(destroyed)
    }

    /// The unassigned members of pool `name`, each with whether it is ready (booted, running
    /// and its guest connected).
    pub async fn pool_members(&self, name: &PoolName) -> Result<Vec<(Computer, bool)>, CoreError> {
        let booted = self.computers.pool_ready_ids(name).await?;
        let mut out = Vec::new();
        for m in self.computers.pool_members(name).await? {
            let ready = booted.iter().any(|id| id == m.id.as_str())
                && m.state == ComputerState::Running
                && self.guest_connected(m.id.as_str()).await;
            out.push((m, ready));
        }
        Ok(out)
    }

    /// Creates a computer of `kind` from pool `name`: a ready member handed out, or, when none
    /// is ready, one booted cold on the pool's provider with its limits.
    pub async fn create_from_pool(
        &self,
        name: &str,
        kind: ComputerKind,
    ) -> Result<FromPool, CoreError> {
        let pool = self.pool(name).await?;
        if matches!(kind, ComputerKind::Pool { .. }) {
            return Err(CoreError::BadLimits(
                "a computer from a pool is a team or a private computer".into(),
            ));
        }
        for (m, ready) in self.pool_members(&pool.name).await? {
            if !ready {
                continue;
            }
            // `None`: another create took it first.
            if let Some(c) = self
                .computers
                .hand_out(&m.id, &pool.name, &kind, now_ms())
                .await?
            {
                self.pool_wake.notify_one();
                let c = self.adopt_member(c, &pool).await?;
                self.metrics.pool_create(pool.name.as_str(), true);
                return Ok(FromPool {
                    computer: c,
                    handed_out: true,
                });
            }
        }
        self.metrics.pool_create(pool.name.as_str(), false);
        self.pool_wake.notify_one();
        info!(pool = %pool.name, "no ready member in the warm pool: booting a computer cold");
        let c = self
            .create(kind, Some(&pool.provider), pool.limits, None)
            .await?;
        Ok(FromPool {
            computer: c,
            handed_out: false,
        })
    }

    /// Makes a handed-out member its new owner's: the feed's first event, the workspace's
    /// secrets and network policy, and the stored home of a returning workspace or bot,
    /// imported before the caller gets the computer.
    async fn adopt_member(&self, c: Computer, pool: &Pool) -> Result<Computer, CoreError> {
        let id = c.id.as_str();
        info!(computer_id = %id, pool = %pool.name, home_key = %c.home_key, "warm pool member handed out");
        self.activity
            .lifecycle(
                id,
                Lifecycle::Created,
                Cause::User,
                format!(
                    "created by a user from warm pool {} (a machine booted ahead on provider {})",
                    pool.name, c.provider
                ),
            )
            .await;
        self.push_secrets(&c).await;
        if let Err(e) = self.apply_network_policy(&c).await {
            warn!(computer_id = %id, error = %e, "could not apply the network policy of a handed-out member");
        }
        // The stored home of a returning workspace or bot, if the store has one (on a new one
        // the restore finds nothing and only clears the mark). Nothing may use the empty home
        // until then.
        self.homes
            .ledger()
            .set_pending_restore(&c.id, true)
            .await
            .map_err(crate::homes::HomeError::from)?;
        let c = self
            .computers
            .set_state(&c.id, ComputerState::Provisioning, now_ms())
            .await?;
        self.restore_and_record(
            &c,
            Cause::FreshMachine,
            "the stored home was restored into a machine from a warm pool",
        )
        .await?;
        if let Err(e) = self.idle.booted(&c.id).await {
            warn!(computer_id = %id, error = %e, "could not start the handed-out computer's idle timer");
        }
        let _ = self.booted.send(id.to_string());
        self.get(id).await
    }

    /// Boots one new member of `pool` until it is ready (with its desktop up when the pool
    /// asks for one). A member that fails is destroyed.
    pub async fn boot_pool_member(
        &self,
        pool: &Pool,
        member: crate::computers::ComputerId,
    ) -> Result<Computer, CoreError> {
        let kind = ComputerKind::Pool {
            pool: pool.name.clone(),
            member: member.clone(),
        };
        let booted = self
            .create(kind, Some(&pool.provider), pool.limits, None)
            .await;
        let c = match booted {
            Ok(c) => c,
            Err(e) => {
                self.drop_member(&pool.name, &member).await;
                return Err(e);
            }
        };
        if pool.desktop {
            if let Err(e) = self.prewarm_desktop(&c).await {
                self.drop_member(&pool.name, &c.id).await;
                return Err(e);
            }
        }
        self.computers.set_pool_ready(&c.id).await?;
        Ok(c)
    }

    /// Has `c`'s guest start a desktop and Chrome that the first bot to ask for a screen takes.
    async fn prewarm_desktop(&self, c: &Computer) -> Result<(), CoreError> {
        let guest = self.wait_guest(c, false).await?;
        guest.call(ScreenPrewarm {}).await?;
        Ok(())
    }

    /// Destroys pool `pool`'s member `id` (failed, lost, beyond the size, or its pool deleted),
    /// unless a create took it meanwhile: it is first put out of reach of hand-outs.
    pub async fn drop_member(&self, pool: &PoolName, id: &crate::computers::ComputerId) {
        match self.computers.retire_member(id, pool).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                warn!(computer_id = %id, error = %e, "could not retire a pool member");
                return;
            }
        }
        match self.destroy(id.as_str()).await {
            Ok(()) | Err(CoreError::NotFound(_)) => {}
            Err(e) => warn!(computer_id = %id, error = %e, "could not destroy a pool member"),
        }
    }
}
