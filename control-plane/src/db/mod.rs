//! The control plane's database handle: one `sqlx::AnyPool` over SQLite or PostgreSQL.
//!
//! This module owns connecting (URL parsing, SQLite pragmas, pool sizing), the embedded
//! migrations and their runner ([`Db::migrate`]), and the one portable way to open a write
//! transaction ([`Db::begin_write`]). It knows nothing about tables: the stores (`lease`,
//! `computers`) own their SQL and row mapping.
//!
//! Portability rules for every query in the crate: TEXT and BIGINT columns only (booleans are
//! BIGINT 0/1), `$1`-style parameters (SQLite accepts `$NNN` as positional parameters, checked by
//! a test here), no AUTOINCREMENT/SERIAL, and timestamps as i64 milliseconds since the epoch
//! supplied by the caller: nothing here reads a clock.

mod migrate;
pub mod testing;

#[cfg(test)]
mod tests;

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{Any, AnyPool, Executor, Transaction};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use migrate::{Migration, MIGRATIONS};

/// Name of the SQLite file [`Db::sqlite_in`] keeps in the data directory.
pub const SQLITE_FILE: &str = "rakazo.db";

/// How long a SQLite connection waits for another writer before failing with "database is locked".
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a query waits for a PostgreSQL connection: for a free one of the pool, or for the
/// server to accept a new one. sqlx keeps dialling a server that refuses connections until
/// this runs out (its default, 30 s, held every request that long while PostgreSQL was down);
/// past it the query fails as [`DbError::is_unavailable`], which the API answers with 503.
pub const PG_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);

/// Which backend a [`Db`] talks to. Queries that cannot be written portably branch on this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbKind {
    Sqlite,
    Postgres,
}

impl DbKind {
    /// The backend a connection URL names, from its scheme alone.
    pub fn from_url(url: &str) -> Result<Self, DbError> {
        let scheme = url.split_once(':').map_or("", |(scheme, _)| scheme);
        match scheme {
            "sqlite" => Ok(Self::Sqlite),
            "postgres" | "postgresql" => Ok(Self::Postgres),
            // Only the scheme is echoed: the rest of the URL may carry a password.
            other => Err(DbError::UnsupportedUrl {
                scheme: other.chars().take(32).collect(),
            }),
        }
    }
}

/// Everything that can go wrong below the stores.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("unsupported database url scheme {scheme:?}: use sqlite:// or postgres://")]
    UnsupportedUrl { scheme: String },
    #[error("database path {0} is not valid utf-8")]
    NonUtf8Path(PathBuf),
    #[error("cannot create data directory {path}")]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot connect to the {kind:?} database")]
    Connect {
        kind: DbKind,
        #[source]
        source: sqlx::Error,
    },
    #[error("migration {version} ({name}) failed")]
    Migration {
        version: i64,
        name: &'static str,
        #[source]
        source: sqlx::Error,
    },
    #[error("database has migration {version}, newer than this build knows (latest {known})")]
    SchemaTooNew { version: i64, known: i64 },
    #[error("database query failed")]
    Query(#[from] sqlx::Error),
    #[error("row {key} in table {table} is invalid: {reason}")]
    Corrupt {
        table: &'static str,
        key: String,
        reason: String,
    },
}

impl DbError {
    /// Whether the database could not be reached (down, restarting, every connection busy
    /// past [`PG_ACQUIRE_TIMEOUT`], or the connection dropped under the query): a failure to
    /// try again later, not a wrong row or query.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Query(e) | Self::Connect { source: e, .. } => unavailable(e),
            _ => false,
        }
    }

    /// A row whose stored values break the invariants the code relies on.
    pub fn corrupt(table: &'static str, key: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Corrupt {
            table,
            key: key.into(),
            reason: reason.into(),
        }
    }
}

/// Whether `e` says the database could not be reached: no connection within the acquire
/// timeout, a broken connection, or PostgreSQL's connection exceptions (class 08) and
/// operator interventions (57P: shutting down, starting up).
fn unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(d) => d
            .code()
            .is_some_and(|c| c.starts_with("08") || c.starts_with("57P")),
        _ => false,
    }
}

/// A connection pool to the control plane's database. Cheap to clone.
#[derive(Clone)]
pub struct Db {
    pool: AnyPool,
    kind: DbKind,
    // Keeps a test fixture (temp directory, PostgreSQL schema) alive while any clone of this
    // handle is; declared after `pool` so the pool's connections close before it is torn down.
    _fixture: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl Db {
    /// Connects to `sqlite://path?mode=rwc` or `postgres://...`. Does not migrate: call
    /// [`Db::migrate`] once at startup.
    ///
    /// SQLite databases are switched to WAL mode (persistent in the file) and every connection
    /// gets a busy timeout and foreign keys on.
    pub async fn connect(url: &str) -> Result<Self, DbError> {
        sqlx::any::install_default_drivers();
        let kind = DbKind::from_url(url)?;
        let options = match kind {
            // SQLite serializes writers anyway; a few connections let readers proceed alongside.
            DbKind::Sqlite => {
                AnyPoolOptions::new()
                    .max_connections(4)
                    .after_connect(|conn, _meta| {
                        Box::pin(async move {
                            let pragmas = format!(
                                "PRAGMA busy_timeout = {}; PRAGMA foreign_keys = ON; \
                             PRAGMA synchronous = NORMAL;",
                                SQLITE_BUSY_TIMEOUT.as_millis()
                            );
                            conn.execute(sqlx::raw_sql(&pragmas)).await?;
                            Ok(())
                        })
                    })
            }
            DbKind::Postgres => AnyPoolOptions::new()
                .max_connections(10)
                .acquire_timeout(PG_ACQUIRE_TIMEOUT),
        };
        let pool = options
            .connect(url)
            .await
            .map_err(|source| DbError::Connect { kind, source })?;
        if kind == DbKind::Sqlite {
            // The journal mode is a property of the file, so one connection sets it for all.
            // (sqlx cannot take it from an Any URL, hence the pragma.)
            sqlx::query("PRAGMA journal_mode = WAL")
                .fetch_optional(&pool)
                .await
                .map_err(|source| DbError::Connect { kind, source })?;
        }
        Ok(Self {
            pool,
            kind,
            _fixture: None,
        })
    }

    /// Opens (creating if needed) `data_dir/rakazo.db`, creating `data_dir` too. The database
    /// and its `-wal` and `-shm` files are private (0600): see [`make_sqlite_private`].
    pub async fn sqlite_in(data_dir: &Path) -> Result<Self, DbError> {
        tokio::fs::create_dir_all(data_dir)
            .await
            .map_err(|source| DbError::DataDir {
                path: data_dir.to_owned(),
                source,
            })?;
        let file =
            std::path::absolute(data_dir.join(SQLITE_FILE)).map_err(|source| DbError::DataDir {
                path: data_dir.to_owned(),
                source,
            })?;
        make_sqlite_private(&file).map_err(|source| DbError::DataDir {
            path: data_dir.to_owned(),
            source,
        })?;
        Self::connect(&sqlite_url(&file)?).await
    }

    /// Which backend this is.
    pub fn kind(&self) -> DbKind {
        self.kind
    }

    /// The pool, for stores running their own queries.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Applies the embedded migrations not yet applied, each in its own transaction, recording
    /// `now_ms` as their `applied_at`. Idempotent, and safe when several processes start at once
    /// (a PostgreSQL advisory lock or SQLite's write lock serializes them). Returns the versions
    /// it applied.
    pub async fn migrate(&self, now_ms: i64) -> Result<Vec<i64>, DbError> {
        migrate::run(self, MIGRATIONS, now_ms).await
    }

    /// Begins a transaction that already holds the right to write: `BEGIN IMMEDIATE` on SQLite
    /// (so a read-then-write transaction never fails to upgrade its lock), `BEGIN` on
    /// PostgreSQL, where rows are locked with [`Db::for_update`].
    pub async fn begin_write(&self) -> Result<Transaction<'static, Any>, DbError> {
        let tx = match self.kind {
            DbKind::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await?,
            DbKind::Postgres => self.pool.begin().await?,
        };
        Ok(tx)
    }

    /// The suffix that locks the selected rows inside a [`Db::begin_write`] transaction:
    /// `" FOR UPDATE"` on PostgreSQL, nothing on SQLite (whose write lock covers the database).
    pub fn for_update(&self) -> &'static str {
        match self.kind {
            DbKind::Sqlite => "",
            DbKind::Postgres => " FOR UPDATE",
        }
    }

    /// Closes every connection; later queries fail.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    fn with_fixture(mut self, fixture: Arc<dyn std::any::Any + Send + Sync>) -> Self {
        self._fixture = Some(fixture);
        self
    }
}

/// Creates the SQLite file `db` empty with mode 0600 before SQLite does (SQLite would make it
/// 0644 less the umask, and gives its `-wal` and `-shm` files the database file's mode), and
/// tightens an existing database, `-wal` or `-shm` file made by an older build to 0600.
pub fn make_sqlite_private(db: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(db)
    {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        let path = PathBuf::from(name);
        let mode = match std::fs::metadata(&path) {
            Ok(m) => m.permissions().mode() & 0o7777,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if mode & 0o077 != 0 {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
            tracing::info!(file = %path.display(), was = format!("{mode:04o}"), "database file made private (0600)");
        }
    }
    Ok(())
}

/// `sqlite://<path>?mode=rwc`, percent-encoding everything in the path but `[A-Za-z0-9/._~-]`
/// (sqlx decodes the path, so a `?`, `#` or `%` in a directory name survives).
fn sqlite_url(file: &Path) -> Result<String, DbError> {
    let path = file
        .to_str()
        .ok_or_else(|| DbError::NonUtf8Path(file.to_owned()))?;
    let mut url = String::from("sqlite://");
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'~' | b'-') {
            url.push(char::from(b));
        } else {
            url.push_str(&format!("%{b:02X}"));
        }
    }
    url.push_str("?mode=rwc");
    Ok(url)
}

/// Reads a column, naming the table and key in the error when it is missing or mistyped.
pub fn column<'r, T>(
    row: &'r AnyRow,
    table: &'static str,
    key: &str,
    name: &str,
) -> Result<T, DbError>
where
    T: sqlx::Decode<'r, Any> + sqlx::Type<Any>,
{
    use sqlx::Row;
    row.try_get::<T, _>(name)
        .map_err(|e| DbError::corrupt(table, key, format!("column {name}: {e}")))
}

/// A stored BIGINT that must not be negative (fences, generations), as `u64`.
pub fn non_negative(
    value: i64,
    table: &'static str,
    key: &str,
    name: &str,
) -> Result<u64, DbError> {
    u64::try_from(value).map_err(|_| DbError::corrupt(table, key, format!("{name} is {value}")))
}
