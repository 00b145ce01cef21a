//! Tests of connecting and migrating, on SQLite and on the real PostgreSQL.

use super::testing;
use super::*;
use sqlx::Row;

// Tests are allowed to read their environment; the URL names the PostgreSQL the CI starts.
#[allow(clippy::disallowed_methods)]
fn pg_url() -> String {
    std::env::var("RAKAZO_TEST_PG_URL").unwrap_or_else(|_| testing::DEFAULT_PG_URL.to_owned())
}

async fn pg() -> Db {
    let url = pg_url();
    testing::postgres_empty(&url)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at RAKAZO_TEST_PG_URL ({url}) is required: {e:?}"))
}

async fn sqlite() -> Db {
    testing::sqlite_empty().await.expect("sqlite fixture")
}

#[test]
fn kind_comes_from_the_scheme() {
    assert_eq!(
        DbKind::from_url("sqlite://x.db?mode=rwc").unwrap(),
        DbKind::Sqlite
    );
    assert_eq!(DbKind::from_url("sqlite::memory:").unwrap(), DbKind::Sqlite);
    assert_eq!(
        DbKind::from_url("postgres://u@h/d").unwrap(),
        DbKind::Postgres
    );
    assert_eq!(
        DbKind::from_url("postgresql://u@h/d").unwrap(),
        DbKind::Postgres
    );
    let err = DbKind::from_url("mysql://root:hunter2@h/d").unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

#[test]
fn sqlite_url_escapes_the_path() {
    let url = sqlite_url(Path::new("/tmp/a b/c?d#e%f/rakazo.db")).unwrap();
    assert_eq!(url, "sqlite:///tmp/a%20b/c%3Fd%23e%25f/rakazo.db?mode=rwc");
}

async fn dollar_placeholders(db: &Db) {
    // Out of order and repeated: SQLite must bind `$N` by number, not by position.
    let row = sqlx::query("SELECT $2 AS b, $1 AS a, $2 AS b2")
        .bind(1_i64)
        .bind("two")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(row.try_get::<i64, _>("a").unwrap(), 1);
    assert_eq!(row.try_get::<String, _>("b").unwrap(), "two");
    assert_eq!(row.try_get::<String, _>("b2").unwrap(), "two");
}

#[tokio::test]
async fn sqlite_binds_dollar_placeholders() {
    dollar_placeholders(&sqlite().await).await;
}

#[tokio::test]
async fn postgres_binds_dollar_placeholders() {
    dollar_placeholders(&pg().await).await;
}

async fn migrate_is_idempotent(db: &Db) {
    assert_eq!(db.migrate(7).await.unwrap(), all_versions());
    assert_eq!(db.migrate(8).await.unwrap(), Vec::<i64>::new());
    let row = sqlx::query("SELECT name, applied_at FROM rakazo_migrations WHERE version = 1")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(
        row.try_get::<String, _>("name").unwrap(),
        "computers_and_leases"
    );
    assert_eq!(row.try_get::<i64, _>("applied_at").unwrap(), 7);
}

#[tokio::test]
async fn sqlite_migrate_is_idempotent() {
    migrate_is_idempotent(&sqlite().await).await;
}

#[tokio::test]
async fn postgres_migrate_is_idempotent() {
    migrate_is_idempotent(&pg().await).await;
}

async fn concurrent_migrations(db: Db) {
    // Separate tasks on separate pool connections: separate database sessions.
    let runs: Vec<_> = (0..4)
        .map(|i| {
            let db = db.clone();
            tokio::spawn(async move { db.migrate(i).await })
        })
        .collect();
    let mut applied = Vec::new();
    for run in runs {
        applied.extend(run.await.unwrap().unwrap());
    }
    // Different sessions may apply different migrations; together, each exactly once.
    applied.sort_unstable();
    assert_eq!(
        applied,
        all_versions(),
        "each migration is applied exactly once"
    );
    let tables = sqlx::query("SELECT COUNT(*) AS n FROM computers")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(tables.try_get::<i64, _>("n").unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_concurrent_migrations_apply_once() {
    concurrent_migrations(sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_concurrent_migrations_apply_once() {
    concurrent_migrations(pg().await).await;
}

async fn refuses_newer_schema(db: &Db) {
    db.migrate(0).await.unwrap();
    sqlx::query("INSERT INTO rakazo_migrations (version, name, applied_at) VALUES (999, 'x', 0)")
        .execute(db.pool())
        .await
        .unwrap();
    let err = db.migrate(0).await.unwrap_err();
    let latest = *all_versions().last().expect("at least one migration");
    assert!(
        matches!(err, DbError::SchemaTooNew { version: 999, known } if known == latest),
        "{err:?}"
    );
}

#[tokio::test]
async fn sqlite_refuses_newer_schema() {
    refuses_newer_schema(&sqlite().await).await;
}

#[tokio::test]
async fn postgres_refuses_newer_schema() {
    refuses_newer_schema(&pg().await).await;
}

#[tokio::test]
async fn sqlite_in_uses_wal_and_survives_odd_paths() {
    let dir = std::env::temp_dir()
        .join(format!("rakazo-test-{}", testing::random_suffix()))
        .join("a b?c#d%e");
    let db = Db::sqlite_in(&dir).await.unwrap();
    assert_eq!(db.kind(), DbKind::Sqlite);
    let mode: String = sqlx::query("PRAGMA journal_mode")
        .fetch_one(db.pool())
        .await
        .unwrap()
        .try_get(0)
        .unwrap();
    assert_eq!(mode, "wal");
    let busy: i64 = sqlx::query("PRAGMA busy_timeout")
        .fetch_one(db.pool())
        .await
        .unwrap()
        .try_get(0)
        .unwrap();
    assert_eq!(busy, SQLITE_BUSY_TIMEOUT.as_millis() as i64);
    db.migrate(0).await.unwrap();
    assert!(dir.join(SQLITE_FILE).is_file());
    db.close().await;
    // Reopening finds the migrated file.
    let db = Db::sqlite_in(&dir).await.unwrap();
    assert_eq!(db.migrate(0).await.unwrap(), Vec::<i64>::new());
    db.close().await;
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

/// Mode bits of a file.
fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn sqlite_files_are_private_from_the_start_and_old_ones_are_tightened() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("rakazo-test-{}", testing::random_suffix()));
    let db = Db::sqlite_in(&dir).await.unwrap();
    db.migrate(0).await.unwrap();
    // WAL mode: the -wal and -shm files exist while connections are open.
    for suffix in ["", "-wal", "-shm"] {
        let path = dir.join(format!("{SQLITE_FILE}{suffix}"));
        assert_eq!(mode_of(&path), 0o600, "{}", path.display());
    }
    db.close().await;
    // A database an older build left world-readable is made private on the next open.
    let file = dir.join(SQLITE_FILE);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let db = Db::sqlite_in(&dir).await.unwrap();
    assert_eq!(mode_of(&file), 0o600);
    db.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn postgres_kind_is_reported() {
    assert_eq!(pg().await.kind(), DbKind::Postgres);
}

fn all_versions() -> Vec<i64> {
    super::MIGRATIONS.iter().map(|m| m.version).collect()
}
