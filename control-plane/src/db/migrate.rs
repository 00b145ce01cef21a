//! The schema migrations, embedded in the binary, and the runner that applies them.
//!
//! One set of SQL files serves both backends (see the portability rules in `db`). Applied
//! versions are recorded in `rakazo_migrations`. Each migration runs in its own transaction
//! together with its bookkeeping row, so a crash leaves it either fully applied or not at all.
//! Concurrent runners (two control planes starting at once) are serialized by a transaction-scoped
//! advisory lock on PostgreSQL and by `BEGIN IMMEDIATE` on SQLite; each re-checks what is applied
//! after taking the lock.

use super::{Db, DbError, DbKind};
use sqlx::{Any, Executor, Row, Transaction};

/// One schema change. Versions are dense and increasing; never edit an applied one.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration this build knows, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "computers_and_leases",
        sql: include_str!("../../migrations/0001_computers_and_leases.sql"),
    },
    Migration {
        version: 2,
        name: "live",
        sql: include_str!("../../migrations/0002_live.sql"),
    },
    Migration {
        version: 3,
        name: "homes",
        sql: include_str!("../../migrations/0003_homes.sql"),
    },
    Migration {
        version: 4,
        name: "home_uploads",
        sql: include_str!("../../migrations/0004_home_uploads.sql"),
    },
    Migration {
        version: 5,
        name: "idle",
        sql: include_str!("../../migrations/0005_idle.sql"),
    },
    Migration {
        version: 6,
        name: "limits",
        sql: include_str!("../../migrations/0006_limits.sql"),
    },
    Migration {
        version: 7,
        name: "placement",
        sql: include_str!("../../migrations/0007_placement.sql"),
    },
    Migration {
        version: 8,
        name: "cluster",
        sql: include_str!("../../migrations/0008_cluster.sql"),
    },
    Migration {
        version: 9,
        name: "jobs",
        sql: include_str!("../../migrations/0009_jobs.sql"),
    },
    Migration {
        version: 10,
        name: "activity",
        sql: include_str!("../../migrations/0010_activity.sql"),
    },
    Migration {
        version: 11,
        name: "network",
        sql: include_str!("../../migrations/0011_network.sql"),
    },
    Migration {
        version: 12,
        name: "secrets",
        sql: include_str!("../../migrations/0012_secrets.sql"),
    },
    Migration {
        version: 13,
        name: "tokens",
        sql: include_str!("../../migrations/0013_tokens.sql"),
    },
    Migration {
        version: 14,
        name: "previews_and_services",
        sql: include_str!("../../migrations/0014_previews_and_services.sql"),
    },
    Migration {
        version: 15,
        name: "recordings",
        sql: include_str!("../../migrations/0015_recordings.sql"),
    },
    Migration {
        version: 16,
        name: "pools",
        sql: include_str!("../../migrations/0016_pools.sql"),
    },
];

/// Key of the PostgreSQL advisory lock serializing migration runners ("rakazo" in ASCII).
const PG_MIGRATION_LOCK: i64 = 0x7261_6b61_7a6f;

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS rakazo_migrations (\
     version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)";

pub(super) async fn run(
    db: &Db,
    migrations: &[Migration],
    now_ms: i64,
) -> Result<Vec<i64>, DbError> {
    let known = migrations.last().map_or(0, |m| m.version);

    // Even CREATE TABLE IF NOT EXISTS can fail when two PostgreSQL sessions race on it, so the
    // bookkeeping table is created under the lock too.
    let mut tx = locked(db).await?;
    // `Executor::execute` rather than `RawSql::execute`: the latter's future is not provably
    // `Send`, which would stop callers from migrating inside a spawned task.
    Executor::execute(&mut *tx, sqlx::raw_sql(CREATE_TABLE)).await?;
    let newest: Option<i64> = sqlx::query("SELECT MAX(version) AS v FROM rakazo_migrations")
        .fetch_one(&mut *tx)
        .await?
        .try_get("v")?;
    tx.commit().await?;
    if let Some(version) = newest.filter(|v| *v > known) {
        return Err(DbError::SchemaTooNew { version, known });
    }

    let mut applied = Vec::new();
    for m in migrations {
        let mut tx = locked(db).await?;
        let done = sqlx::query("SELECT version FROM rakazo_migrations WHERE version = $1")
            .bind(m.version)
            .fetch_optional(&mut *tx)
            .await?
            .is_some();
        if done {
            tx.commit().await?;
            continue;
        }
        let fail = |source| DbError::Migration {
            version: m.version,
            name: m.name,
            source,
        };
        Executor::execute(&mut *tx, sqlx::raw_sql(m.sql))
            .await
            .map_err(fail)?;
        sqlx::query(
            "INSERT INTO rakazo_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
        )
        .bind(m.version)
        .bind(m.name)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(fail)?;
        tx.commit().await.map_err(fail)?;
        applied.push(m.version);
    }
    Ok(applied)
}

/// A write transaction holding the migration lock until it ends.
async fn locked(db: &Db) -> Result<Transaction<'static, Any>, DbError> {
    let mut tx = db.begin_write().await?;
    if db.kind() == DbKind::Postgres {
        // The function returns void, which the Any driver cannot decode; cast it away.
        sqlx::query("SELECT pg_advisory_xact_lock($1)::text")
            .bind(PG_MIGRATION_LOCK)
            .execute(&mut *tx)
            .await?;
    }
    Ok(tx)
}
