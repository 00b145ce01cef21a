//! Operations on a running computer's guest (a lease checked against the store first, then
//! the call through the tunnel) and the execution leases themselves: acquire, renew, release
//! (a release ends the bot's run: its screen is released, its home checkpointed), show.

use super::*;

impl Core {
    /// Checks that `lease` is the live lease of its bot on this computer.
    async fn check_lease(&self, c: &Computer, lease: &BotLease) -> Result<(), CoreError> {
        let live = self.leases.get(&c.id, &lease.bot, now_ms()).await?;
        match live {
            Some(l) if l.token == lease.token => Ok(()),
            _ => Err(CoreError::StaleLease {
                bot: lease.bot.clone(),
                lease: lease.token.clone(),
            }),
        }
    }

    /// The guest of running computer `id` for `op`: the lease `op` acts under, if any, must be
    /// its bot's live lease (the guest checks it again against its fence), and the guest must
    /// be connected, or connect within [`OPERATION_CONNECT_TIMEOUT`].
    pub async fn guest_for<O: Op>(&self, id: &str, op: &O) -> Result<Guest, CoreError> {
        let c = self.get(id).await?;
        if c.state != ComputerState::Running {
            return Err(CoreError::NotRunning {
                id: id.to_string(),
                state: c.state,
            });
        }
        if let Some(pool) = c.kind.pool() {
            return Err(CoreError::PoolMember {
                id: id.to_string(),
                pool: pool.to_string(),
            });
        }
        if let Some(lease) = op.authority().lease() {
            self.check_lease(&c, &lease).await?;
        }
        Ok(self.wait_guest(&c, true).await?)
    }

    /// Runs a unary operation on running computer `id` ([`Core::guest_for`], then the call).
    pub async fn call<O: UnaryOp>(&self, id: &str, op: O) -> Result<O::Reply, CoreError> {
        let guest = self.guest_for(id, &op).await?;
        Ok(guest.call(op).await?)
    }

    /// The guest of `c`, waiting up to [`OPERATION_CONNECT_TIMEOUT`] for it to connect.
    ///
    /// With several replicas, the guest is followed wherever it is connected; `refusable`
    /// (operations of the API, not the core's own checkpoints and restores) is refused while
    /// idle suspension claims the computer there.
    pub(super) async fn wait_guest(
        &self,
        c: &Computer,
        refusable: bool,
    ) -> Result<Guest, TunnelError> {
        if let Some(cluster) = &self.cluster {
            return Ok(Guest::followed(
                cluster.clone(),
                c.id.as_str(),
                refusable,
                OPERATION_CONNECT_TIMEOUT,
            ));
        }
        let conn = self
            .registry
            .wait_connected(c.id.as_str(), OPERATION_CONNECT_TIMEOUT)
            .await?;
        Ok(conn.into())
    }

    /// The computer's guest if it is connected now (best-effort calls: revocations, teardown).
    pub async fn connected_guest(&self, id: &str) -> Option<Guest> {
        if let Some(conn) = self.registry.get(id) {
            return Some(conn.into());
        }
        let cluster = self.cluster.as_ref()?;
        match cluster.where_is(id).await {
            Ok(Some(r)) if r.id != cluster.me().id => {
                Some(Guest::followed(cluster.clone(), id, false, Duration::ZERO))
            }
            _ => None,
        }
    }

    /// Tells the computer's guest about a granted or released lease (the guest also learns
    /// every live lease on each hello: `CoreAuth::live_leases`).
    async fn push_lease(&self, c: &Computer, bot: &BotId, token: &LeaseToken, released: bool) {
        if let Some(guest) = self.registry.get(c.id.as_str()) {
            guest.push_lease(bot, token, released);
            return;
        }
        // Connected to another replica: pushed through it. A guest connected nowhere learns
        // every live lease on its next hello.
        let Some(cluster) = &self.cluster else {
            return;
        };
        if let Ok(Some(r)) = cluster.where_is(c.id.as_str()).await {
            if r.id != cluster.me().id {
                if let Err(e) = cluster
                    .peers
                    .push_lease(&r, c.id.as_str(), bot, token, released)
                    .await
                {
                    debug!(computer_id = %c.id.as_str(), replica = %r.id, error = %e, "lease not pushed through the guest's replica; the guest learns live leases on its next hello");
                }
            }
        }
    }

    pub async fn acquire_lease(
        &self,
        id: &str,
        bot: &BotId,
        owner: &str,
        ttl: Duration,
    ) -> Result<Lease, CoreError> {
        let c = self.get(id).await?;
        self.check_unreserved(&c.id).await?;
        let lease = self
            .leases
            .acquire(&c.id, bot, owner, ttl, now_ms())
            .await?;
        // A job that reserved the computer between the check and the grant wins: the lease is
        // given back before anyone learns of it (so a reservation never sees a lease it let in).
        if let Err(e) = self.check_unreserved(&c.id).await {
            if let Err(r) = self
                .leases
                .release(&c.id, bot, &lease.token, now_ms())
                .await
            {
                warn!(computer_id = %c.id.as_str(), bot = %bot, error = %r, "could not give back a lease granted as a job reserved the computer; it expires by itself");
            }
            return Err(e);
        }
        self.push_lease(&c, bot, &lease.token, false).await;
        Ok(lease)
    }

    pub async fn renew_lease(
        &self,
        id: &str,
        bot: &BotId,
        token: &LeaseToken,
        ttl: Duration,
    ) -> Result<Lease, CoreError> {
        let c = self.get(id).await?;
        Ok(self.leases.renew(&c.id, bot, token, ttl, now_ms()).await?)
    }

    /// Ends a run: releases its lease and, when the run failed or was cancelled, tears the
    /// bot's desktop down (a successful run keeps it for the bot's next run,
    /// docs/screens.md#teardown).
    pub async fn release_lease(
        &self,
        id: &str,
        bot: &BotId,
        token: &LeaseToken,
        outcome: RunOutcome,
    ) -> Result<RunCheckpoint, CoreError> {
        let c = self.get(id).await?;
        let released = self.leases.release(&c.id, bot, token, now_ms()).await?;
        if released == crate::lease::Released::Already {
            // A repeated release (a retried request, a second `lease release`) changes nothing:
            // no teardown, and no new checkpoint revision of a home nobody touched since.
            return Ok(RunCheckpoint::Skipped("already released"));
        }
        self.push_lease(&c, bot, token, true).await;
        if outcome != RunOutcome::Success {
            self.release_screen(&c, bot).await;
        }
        let checkpoint = self.checkpoint_after_run(&c, bot).await;
        self.log_run_checkpoint(&c, bot, &checkpoint);
        Ok(checkpoint)
    }

    /// Asks the guest to tear a bot's desktop down; logged, not failed, when it cannot.
    async fn release_screen(&self, c: &Computer, bot: &BotId) {
        // Its capabilities go first (docs/screens.md#teardown).
        if let Err(e) = self.screen_gone(&c.id, bot).await {
            warn!(computer_id = %c.id.as_str(), bot = %bot, error = %e, "revoking the bot's capabilities failed");
        }
        let Some(guest) = self.connected_guest(c.id.as_str()).await else {
            return;
        };
        let release = ScreenRelease {
            bot: bot.clone(),
            lease: None,
        };
        let id = c.id.as_str();
        match guest.call(release).await {
            Ok(()) => {
                info!(computer_id = %id, bot = %bot, "desktop torn down after an unsuccessful run")
            }
            Err(TunnelError::Guest(e)) => {
                warn!(computer_id = %id, bot = %bot, error = %e, "desktop teardown refused")
            }
            Err(e) => warn!(computer_id = %id, bot = %bot, error = %e, "desktop teardown failed"),
        }
    }

    /// The bot's desktop is going away (released, or torn down after a failed run): its URLs
    /// die, its streams close and its guest revokes its capabilities, before the desktop itself
    /// is stopped (docs/screens.md#teardown).
    pub async fn screen_gone(&self, id: &ComputerId, bot: &BotId) -> Result<(), LiveStoreError> {
        let guest = self.connected_guest(id.as_str()).await;
        self.live.screen_gone(guest.as_ref(), id, bot).await
    }

    pub async fn get_lease(&self, id: &str, bot: &BotId) -> Result<Option<Lease>, CoreError> {
        let c = self.get(id).await?;
        Ok(self.leases.get(&c.id, bot, now_ms()).await?)
    }
}
