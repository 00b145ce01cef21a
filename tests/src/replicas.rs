//! Several `rakazo serve` replicas on one real PostgreSQL schema and one S3 bucket, as a
//! deployment behind one address runs them: the first creates the shared secrets, the others
//! get copies of them (`WorldOptions::secrets_from`).

use crate::s3::S3Server;
use crate::{ObjectStoreOptions, World, WorldOptions};
use anyhow::Result;
use std::collections::HashMap;

/// Replicas of one cluster; `worlds[i]` is replica `i`, each its own process and data dir.
pub struct Replicas {
    pub worlds: Vec<World>,
    pub s3: S3Server,
    /// The object store every replica keeps homes in (one content key).
    pub store: ObjectStoreOptions,
    pub database_url: String,
    /// The schema `database_url` uses; dropped after the replicas (fields drop in order).
    _schema: control_plane::db::testing::PgSchema,
}

/// A fresh schema in the test PostgreSQL (`RAKAZO_TEST_PG_URL`, else the default), dropped
/// with the returned guard; its `url()` is a `DATABASE_URL` whose connections use it.
pub async fn fresh_pg() -> Result<control_plane::db::testing::PgSchema> {
    #[allow(clippy::disallowed_methods)] // the test's one knob: where PostgreSQL runs
    let base = std::env::var("RAKAZO_TEST_PG_URL")
        .unwrap_or_else(|_| control_plane::db::testing::DEFAULT_PG_URL.into());
    Ok(control_plane::db::testing::postgres_schema(&base).await?)
}

impl Replicas {
    /// Starts `n` replicas; `tune` adjusts each one's options (environment, allowed WARNs).
    pub async fn start(n: usize, tune: impl Fn(usize, &mut WorldOptions)) -> Result<Self> {
        Self::start_with(fresh_pg().await?, n, tune).await
    }

    /// [`Self::start`] on a fresh schema of the PostgreSQL at `base_url` (a private cluster a
    /// test may stop and start: `tests::pgcluster`).
    pub async fn start_on(
        base_url: &str,
        n: usize,
        tune: impl Fn(usize, &mut WorldOptions),
    ) -> Result<Self> {
        let schema = control_plane::db::testing::postgres_schema(base_url).await?;
        Self::start_with(schema, n, tune).await
    }

    async fn start_with(
        schema: control_plane::db::testing::PgSchema,
        n: usize,
        tune: impl Fn(usize, &mut WorldOptions),
    ) -> Result<Self> {
        let s3 = S3Server::start().await?;
        let store = ObjectStoreOptions::for_server(&s3);
        let database_url = schema.url().to_owned();
        let mut worlds: Vec<World> = Vec::with_capacity(n);
        for i in 0..n {
            let mut opts = WorldOptions {
                database_url: Some(database_url.clone()),
                object_store: Some(store.clone()),
                secrets_from: worlds.first().map(|w| w.data_dir.path().to_owned()),
                ..Default::default()
            };
            // A killed replica is taken for dead after 3 s, its claims after 4 s.
            opts.env
                .push(("RAKAZO_REPLICA_DEAD_AFTER_SECS".into(), "3".into()));
            opts.env.push(("RAKAZO_CLAIM_TTL_SECS".into(), "4".into()));
            // One host: every replica's local provider keeps its machines (and the users it
            // makes for them) in the first replica's root, as replicas sharing a host must.
            if let Some(first) = worlds.first() {
                opts.env.push((
                    "RAKAZO_LOCAL_ROOT".into(),
                    first
                        .machines_dir
                        .path()
                        .join("local")
                        .display()
                        .to_string(),
                ));
            }
            tune(i, &mut opts);
            worlds.push(World::start_with(opts).await?);
        }
        // Every replica is registered (its heartbeat row written) before the test creates
        // computers, so their guests learn every replica's address.
        for w in &worlds {
            crate::wait_for(
                std::time::Duration::from_secs(10),
                "replica registered",
                || w.log().contains("replica registered").then_some(()),
            )
            .await?;
        }
        Ok(Self {
            worlds,
            s3,
            store,
            database_url,
            _schema: schema,
        })
    }

    /// The replica whose log says `computer`'s guest connected to it last (and not since
    /// disconnected), if any.
    pub fn holder_of(&self, computer: &str) -> Option<usize> {
        self.holders().get(computer).copied()
    }

    /// [`Self::holder_of`] for every computer at once: one read of each replica's log.
    pub fn holders(&self) -> HashMap<String, usize> {
        let mut out = HashMap::new();
        for (i, w) in self.worlds.iter().enumerate() {
            let mut net: HashMap<&str, i64> = HashMap::new();
            let log = w.log();
            for l in log.lines() {
                let step = if l.contains("guest connected") {
                    1
                } else if l.contains("guest disconnected") {
                    -1
                } else {
                    continue;
                };
                let Some(id) = l
                    .split_whitespace()
                    .find_map(|f| f.strip_prefix("computer_id="))
                else {
                    continue;
                };
                *net.entry(id).or_default() += step;
            }
            for (id, n) in net {
                if n > 0 {
                    out.insert(id.to_owned(), i);
                }
            }
        }
        out
    }
}
