//! Services (docs/api.md#services): detached processes a computer starts again each time it
//! starts: after a stop, an idle suspension (a preview visit wakes it, and the app is there to
//! answer), a crash or a restart of the control plane. The spec is a row of `services`
//! (migration 0014); starting one is `api::services`' (a detached process like any other).
//!
//! A service holds a command line and a directory, no environment: configuration belongs in the
//! home, credentials in the workspace's secrets, neither in this table.

use crate::db::{column, Db, DbError};

/// Most services a computer has.
pub const MAX_PER_COMPUTER: i64 = 16;
/// Longest service name.
pub const MAX_NAME: usize = 32;

/// One service, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRow {
    pub computer: String,
    pub name: String,
    pub argv: Vec<String>,
    pub cwd: Option<String>,
    pub created_at_ms: i64,
    /// The detached process last started for it.
    pub process: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{0}")]
    Bad(String),
    #[error("no service {0} on this computer")]
    NotFound(String),
    #[error("this computer has {MAX_PER_COMPUTER} services already: remove one")]
    TooMany,
    #[error(transparent)]
    Db(#[from] DbError),
}

/// Checks a service's name: 1 to [`MAX_NAME`] of `[a-z0-9-]`, a letter or digit first.
pub fn check_name(name: &str) -> Result<(), ServiceError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(ServiceError::Bad(format!(
            "a service name is 1 to {MAX_NAME} of a-z, 0-9 and -, not starting with -"
        )))
    }
}

const COLUMNS: &str = "computer_id, name, argv, cwd, created_at, process";

/// The services of every computer.
pub struct ServiceStore {
    db: Db,
}

impl ServiceStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    fn row(r: &sqlx::any::AnyRow) -> Result<ServiceRow, DbError> {
        let name: String = column(r, "services", "?", "name")?;
        let argv: String = column(r, "services", &name, "argv")?;
        let argv: Vec<String> = serde_json::from_str(&argv)
            .map_err(|e| DbError::corrupt("services", &name, format!("argv: {e}")))?;
        let process: Option<i64> = column(r, "services", &name, "process")?;
        Ok(ServiceRow {
            computer: column(r, "services", &name, "computer_id")?,
            argv,
            cwd: column(r, "services", &name, "cwd")?,
            created_at_ms: column(r, "services", &name, "created_at")?,
            process: process.and_then(|p| u32::try_from(p).ok()),
            name,
        })
    }

    /// Sets service `name` of `computer` (a new one, or a new command line for an old one);
    /// answers it and the one it replaced, if any.
    pub async fn set(
        &self,
        computer: &str,
        name: &str,
        argv: &[String],
        cwd: Option<&str>,
        now_ms: i64,
    ) -> Result<(ServiceRow, Option<ServiceRow>), ServiceError> {
        check_name(name)?;
        let existing = self.get(computer, name).await?;
        if existing.is_none() {
            let row = sqlx::query("SELECT COUNT(*) AS n FROM services WHERE computer_id = $1")
                .bind(computer)
                .fetch_one(self.db.pool())
                .await
                .map_err(DbError::from)?;
            let n: i64 = column(&row, "services", computer, "n")?;
            if n >= MAX_PER_COMPUTER {
                return Err(ServiceError::TooMany);
            }
        }
        let argv_json = serde_json::to_string(argv).expect("strings serialize");
        sqlx::query(
            "INSERT INTO services (computer_id, name, argv, cwd, created_at, process) \
             VALUES ($1, $2, $3, $4, $5, NULL) ON CONFLICT (computer_id, name) DO UPDATE \
             SET argv = excluded.argv, cwd = excluded.cwd, created_at = excluded.created_at, \
             process = NULL",
        )
        .bind(computer)
        .bind(name)
        .bind(&argv_json)
        .bind(cwd)
        .bind(now_ms)
        .execute(self.db.pool())
        .await
        .map_err(DbError::from)?;
        let row = ServiceRow {
            computer: computer.into(),
            name: name.into(),
            argv: argv.to_vec(),
            cwd: cwd.map(String::from),
            created_at_ms: now_ms,
            process: None,
        };
        Ok((row, existing))
    }

    pub async fn get(&self, computer: &str, name: &str) -> Result<Option<ServiceRow>, DbError> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM services WHERE computer_id = $1 AND name = $2"
        ))
        .bind(computer)
        .bind(name)
        .fetch_optional(self.db.pool())
        .await?;
        row.as_ref().map(Self::row).transpose()
    }

    /// A computer's services, by name.
    pub async fn list(&self, computer: &str) -> Result<Vec<ServiceRow>, DbError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM services WHERE computer_id = $1 ORDER BY name"
        ))
        .bind(computer)
        .fetch_all(self.db.pool())
        .await?;
        rows.iter().map(Self::row).collect()
    }

    /// Records the process started for a service.
    pub async fn started(&self, computer: &str, name: &str, process: u32) -> Result<(), DbError> {
        sqlx::query("UPDATE services SET process = $3 WHERE computer_id = $1 AND name = $2")
            .bind(computer)
            .bind(name)
            .bind(i64::from(process))
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// Removes a service; answers it as it was.
    pub async fn remove(&self, computer: &str, name: &str) -> Result<ServiceRow, ServiceError> {
        let Some(row) = self.get(computer, name).await? else {
            return Err(ServiceError::NotFound(name.chars().take(64).collect()));
        };
        sqlx::query("DELETE FROM services WHERE computer_id = $1 AND name = $2")
            .bind(computer)
            .bind(name)
            .execute(self.db.pool())
            .await
            .map_err(DbError::from)?;
        Ok(row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn services_are_set_replaced_listed_and_removed() {
        let store = ServiceStore::new(crate::db::testing::sqlite().await.unwrap());
        let argv = vec!["python3".to_string(), "-m".into(), "http.server".into()];
        store
            .set("c-1", "web", &argv, Some("site"), 1)
            .await
            .unwrap();
        store.started("c-1", "web", 7).await.unwrap();
        let got = store.list("c-1").await.unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].argv.clone(), got[0].process),
            (argv.clone(), Some(7))
        );
        store.set("c-1", "web", &argv[..1], None, 2).await.unwrap();
        let got = store.get("c-1", "web").await.unwrap().unwrap();
        assert_eq!((got.argv.len(), got.cwd, got.process), (1, None, None));
        assert!(store.list("c-2").await.unwrap().is_empty());
        assert!(matches!(check_name("Web"), Err(ServiceError::Bad(_))));
        assert!(matches!(check_name("-x"), Err(ServiceError::Bad(_))));
        store.remove("c-1", "web").await.unwrap();
        assert!(matches!(
            store.remove("c-1", "web").await,
            Err(ServiceError::NotFound(_))
        ));
        for i in 0..MAX_PER_COMPUTER {
            store
                .set("c-3", &format!("s{i}"), &argv, None, 1)
                .await
                .unwrap();
        }
        assert!(matches!(
            store.set("c-3", "one-more", &argv, None, 1).await,
            Err(ServiceError::TooMany)
        ));
    }
}
