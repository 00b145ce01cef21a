//! Throw-away, migrated databases for tests: a SQLite file in a fresh temp directory, or a fresh
//! schema in a real PostgreSQL database.
//!
//! The fixture lives as long as any clone of the returned [`Db`]; when the last one drops, the
//! temp directory is removed or the schema dropped, even if the test panicked. Tests pass the
//! PostgreSQL URL in (from `RAKAZO_TEST_PG_URL`): this module reads no environment.

use super::{Db, DbError};
use sqlx::{AnyConnection, Connection, Executor};
use std::path::PathBuf;
use std::sync::Arc;

/// Where tests find PostgreSQL when `RAKAZO_TEST_PG_URL` is unset.
pub const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// `applied_at` recorded by fixture migrations.
const FIXTURE_NOW_MS: i64 = 0;

/// A migrated SQLite database in a new temp directory.
pub async fn sqlite() -> Result<Db, DbError> {
    let db = sqlite_empty().await?;
    db.migrate(FIXTURE_NOW_MS).await?;
    Ok(db)
}

/// Like [`sqlite`], but nothing is migrated: for tests of the migrations themselves.
pub async fn sqlite_empty() -> Result<Db, DbError> {
    let dir = std::env::temp_dir().join(format!("rakazo-test-{}", random_suffix()));
    let guard = TempDir(dir.clone());
    let db = Db::sqlite_in(&dir).await?;
    Ok(db.with_fixture(Arc::new(guard)))
}

/// A migrated, empty schema `rk_<random>` in the database at `base_url`; every connection of the
/// returned pool has it as its `search_path`.
pub async fn postgres(base_url: &str) -> Result<Db, DbError> {
    let db = postgres_empty(base_url).await?;
    db.migrate(FIXTURE_NOW_MS).await?;
    Ok(db)
}

/// Like [`postgres`], but nothing is migrated: for tests of the migrations themselves.
pub async fn postgres_empty(base_url: &str) -> Result<Db, DbError> {
    let schema = postgres_schema(base_url).await?;
    let db = Db::connect(schema.url()).await?;
    Ok(db.with_fixture(Arc::new(schema)))
}

/// An empty schema `rk_<random>` in the database at `base_url`, dropped with the returned
/// guard; [`PgSchema::url`] is a URL whose connections use it, for a control plane started
/// on it (which migrates it itself).
pub async fn postgres_schema(base_url: &str) -> Result<PgSchema, DbError> {
    let schema = format!("rk_{}", random_suffix());
    sqlx::any::install_default_drivers();
    let mut admin = AnyConnection::connect(base_url)
        .await
        .map_err(|source| DbError::Connect {
            kind: super::DbKind::Postgres,
            source,
        })?;
    admin
        .execute(format!("CREATE SCHEMA {schema}").as_str())
        .await?;
    let _ = admin.close().await;
    let separator = if base_url.contains('?') { '&' } else { '?' };
    let url = format!("{base_url}{separator}options=-c%20search_path%3D{schema}");
    Ok(PgSchema {
        base_url: base_url.to_owned(),
        schema,
        url,
    })
}

/// 16 random lowercase hex characters: unique names for concurrent test fixtures.
pub fn random_suffix() -> String {
    hex::encode(rand::random::<[u8; 8]>())
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        // Best effort: a leftover temp directory is harmless.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A throw-away PostgreSQL schema: dropped (with everything in it) when this is dropped.
pub struct PgSchema {
    base_url: String,
    schema: String,
    url: String,
}

impl PgSchema {
    /// The database URL whose connections use the schema.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        // Drop runs inside the test's runtime (or while it unwinds), where nothing can be
        // awaited, so the cleanup gets a thread and a runtime of its own.
        let base_url = self.base_url.clone();
        let schema = self.schema.clone();
        let cleanup = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async {
                let mut conn = AnyConnection::connect(&base_url)
                    .await
                    .map_err(|e| e.to_string())?;
                // The pool's connections are closing; don't wait forever on a straggler.
                let sql =
                    format!("SET lock_timeout = '10s'; DROP SCHEMA IF EXISTS {schema} CASCADE");
                conn.execute(sqlx::raw_sql(&sql))
                    .await
                    .map_err(|e| e.to_string())?;
                let _ = conn.close().await;
                Ok::<(), String>(())
            })
        });
        match cleanup.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("cannot drop test schema {}: {e}", self.schema),
            Err(_) => eprintln!("cannot drop test schema {}: cleanup panicked", self.schema),
        }
    }
}
