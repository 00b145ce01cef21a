//! [`JobStore`]: maintenance jobs in the `jobs` table (migration 0009) of SQLite or PostgreSQL.
//!
//! Every change is one write transaction that locks the row (`SELECT … FOR UPDATE` on
//! PostgreSQL; `BEGIN IMMEDIATE` takes SQLite's write lock), applies a [`rules`] function and
//! writes the result, so replicas sharing the database never act on different views of a job.
//! Creating a job locks the computer's row first, so two requests cannot both reserve it (the
//! partial unique index `jobs_one_reservation` is the backstop).

use super::rules::{self, Job, JobKind, JobState, Refusal, Stage};
use super::JobError;
use crate::computers::ComputerId;
use crate::db::{column, non_negative, Db, DbError};
use sqlx::any::AnyRow;

const TABLE: &str = "jobs";
const COLUMNS: &str = "id, computer_id, kind, state, stage, stages, worker, heartbeat_at, error, \
                       warning, revision, created_at, started_at, finished_at, updated_at";
/// The states that reserve a computer, as SQL.
const RESERVING: &str = "('queued', 'running', 'interrupted')";

/// Jobs in the database. Cheap to clone.
#[derive(Debug, Clone)]
pub struct JobStore {
    db: Db,
}

/// A fresh job id: `j-` and 16 random hex characters.
pub fn new_job_id() -> String {
    format!("j-{}", hex::encode(rand::random::<[u8; 8]>()))
}

impl JobStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Creates a queued job of `kind` on `computer`, reserving it; refused with
    /// [`JobError::Reserved`] while another job reserves it.
    pub async fn create(
        &self,
        computer: &ComputerId,
        kind: JobKind,
        warning: Option<String>,
        now_ms: i64,
    ) -> Result<Job, JobError> {
        let mut tx = self.db.begin_write().await?;
        // The computer's row is the lock two creators of a job on it queue on.
        let lock = format!(
            "SELECT id FROM computers WHERE id = $1{}",
            self.db.for_update()
        );
        sqlx::query(&lock)
            .bind(computer.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(DbError::from)?;
        let sql =
            format!("SELECT {COLUMNS} FROM jobs WHERE computer_id = $1 AND state IN {RESERVING}");
        let active = sqlx::query(&sql)
            .bind(computer.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(DbError::from)?;
        if let Some(row) = active {
            return Err(JobError::Reserved(Box::new(from_row(&row)?)));
        }
        let job = rules::new_job(new_job_id(), computer.clone(), kind, warning, now_ms);
        sqlx::query(&format!(
            "INSERT INTO jobs ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, \
             $12, $13, $14, $15)"
        ))
        .bind(&job.id)
        .bind(job.computer.as_str())
        .bind(job.kind.as_str())
        .bind(job.state.as_str())
        .bind(job.stage.as_str())
        .bind(stages_text(&job.stages))
        .bind(job.worker.as_deref())
        .bind(job.heartbeat_at_ms)
        .bind(job.error.as_deref())
        .bind(job.warning.as_deref())
        .bind(revision_column(job.revision))
        .bind(job.created_at_ms)
        .bind(job.started_at_ms)
        .bind(job.finished_at_ms)
        .bind(job.updated_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(DbError::from)?;
        tx.commit().await.map_err(DbError::from)?;
        Ok(job)
    }

    /// The job `id`, if it exists.
    pub async fn get(&self, id: &str) -> Result<Option<Job>, JobError> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM jobs WHERE id = $1"))
            .bind(id)
            .fetch_optional(self.db.pool())
            .await
            .map_err(DbError::from)?;
        Ok(row.map(|r| from_row(&r)).transpose()?)
    }

    /// The job reserving `computer`, if any.
    pub async fn reservation(&self, computer: &ComputerId) -> Result<Option<Job>, JobError> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM jobs WHERE computer_id = $1 AND state IN {RESERVING}"
        ))
        .bind(computer.as_str())
        .fetch_optional(self.db.pool())
        .await
        .map_err(DbError::from)?;
        Ok(row.map(|r| from_row(&r)).transpose()?)
    }

    /// `computer`'s newest `limit` jobs, newest first.
    pub async fn list(&self, computer: &ComputerId, limit: u32) -> Result<Vec<Job>, JobError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM jobs WHERE computer_id = $1 ORDER BY created_at DESC, id \
             LIMIT $2"
        ))
        .bind(computer.as_str())
        .bind(i64::from(limit))
        .fetch_all(self.db.pool())
        .await
        .map_err(DbError::from)?;
        rows.iter()
            .map(|r| from_row(r).map_err(JobError::from))
            .collect()
    }

    /// How many jobs there are of each kind in each state (for the metrics).
    pub async fn counts(&self) -> Result<Vec<(&'static str, &'static str, u64)>, JobError> {
        let rows = sqlx::query("SELECT kind, state, COUNT(*) AS n FROM jobs GROUP BY kind, state")
            .fetch_all(self.db.pool())
            .await
            .map_err(DbError::from)?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let kind = column::<String>(r, TABLE, "?", "kind")?;
            let state = column::<String>(r, TABLE, "?", "state")?;
            let n = column::<i64>(r, TABLE, "?", "n")?;
            // Only the fixed names: a label never carries stored text.
            if let (Some(k), Some(s)) = (JobKind::parse(&kind), JobState::parse(&state)) {
                out.push((k.as_str(), s.as_str(), u64::try_from(n).unwrap_or(0)));
            }
        }
        Ok(out)
    }

    /// The ids of jobs in `state`, oldest first.
    pub async fn ids_in(&self, state: JobState) -> Result<Vec<String>, JobError> {
        let rows = sqlx::query("SELECT id FROM jobs WHERE state = $1 ORDER BY created_at, id")
            .bind(state.as_str())
            .fetch_all(self.db.pool())
            .await
            .map_err(DbError::from)?;
        rows.iter()
            .map(|r| column::<String>(r, TABLE, "?", "id").map_err(JobError::from))
            .collect()
    }

    /// Applies `rule` to the locked row of job `id` and writes what it returns; `Ok(None)` when
    /// the rule leaves it as it is.
    async fn update(
        &self,
        id: &str,
        rule: impl FnOnce(&Job) -> Result<Option<Job>, Refusal>,
    ) -> Result<Option<Job>, JobError> {
        let mut tx = self.db.begin_write().await?;
        let sql = format!(
            "SELECT {COLUMNS} FROM jobs WHERE id = $1{}",
            self.db.for_update()
        );
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(DbError::from)?
            .ok_or_else(|| JobError::NotFound(id.to_owned()))?;
        let current = from_row(&row)?;
        // A refusal drops `tx`, which rolls back.
        let next = rule(&current).map_err(|r| JobError::Refused {
            id: id.to_owned(),
            refusal: r,
        })?;
        let Some(next) = next else {
            return Ok(None);
        };
        sqlx::query(
            "UPDATE jobs SET state = $2, stage = $3, stages = $4, worker = $5, heartbeat_at = $6, \
             error = $7, warning = $8, revision = $9, started_at = $10, finished_at = $11, \
             updated_at = $12 WHERE id = $1",
        )
        .bind(id)
        .bind(next.state.as_str())
        .bind(next.stage.as_str())
        .bind(stages_text(&next.stages))
        .bind(next.worker.as_deref())
        .bind(next.heartbeat_at_ms)
        .bind(next.error.as_deref())
        .bind(next.warning.as_deref())
        .bind(revision_column(next.revision))
        .bind(next.started_at_ms)
        .bind(next.finished_at_ms)
        .bind(next.updated_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(DbError::from)?;
        tx.commit().await.map_err(DbError::from)?;
        Ok(Some(next))
    }

    /// [`rules::claim`].
    pub async fn claim(&self, id: &str, worker: &str, now_ms: i64) -> Result<Job, JobError> {
        self.apply(id, |j| rules::claim(j, worker, now_ms)).await
    }

    /// [`rules::heartbeat`].
    pub async fn heartbeat(&self, id: &str, worker: &str, now_ms: i64) -> Result<Job, JobError> {
        self.apply(id, |j| rules::heartbeat(j, worker, now_ms))
            .await
    }

    /// [`rules::advance`].
    pub async fn advance(
        &self,
        id: &str,
        worker: &str,
        stage: Stage,
        now_ms: i64,
    ) -> Result<Job, JobError> {
        self.apply(id, |j| rules::advance(j, worker, stage, now_ms))
            .await
    }

    /// [`rules::note_revision`].
    pub async fn note_revision(
        &self,
        id: &str,
        worker: &str,
        revision: u64,
        now_ms: i64,
    ) -> Result<Job, JobError> {
        self.apply(id, |j| rules::note_revision(j, worker, revision, now_ms))
            .await
    }

    /// [`rules::finish`].
    pub async fn finish(
        &self,
        id: &str,
        worker: &str,
        outcome: Result<(), String>,
        now_ms: i64,
    ) -> Result<Job, JobError> {
        self.apply(id, |j| rules::finish(j, worker, outcome, now_ms))
            .await
    }

    /// [`rules::release`].
    pub async fn release(
        &self,
        id: &str,
        workers_stopped: bool,
        now_ms: i64,
    ) -> Result<Job, JobError> {
        self.apply(id, |j| rules::release(j, workers_stopped, now_ms))
            .await
    }

    /// [`rules::interrupt`] on every running job whose worker has been silent for `timeout`;
    /// returns the jobs it interrupted.
    pub async fn interrupt_stale(
        &self,
        timeout: std::time::Duration,
        now_ms: i64,
    ) -> Result<Vec<Job>, JobError> {
        let cutoff = now_ms.saturating_sub(i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX));
        let rows = sqlx::query(
            "SELECT id FROM jobs WHERE state = 'running' AND heartbeat_at <= $1 ORDER BY id",
        )
        .bind(cutoff)
        .fetch_all(self.db.pool())
        .await
        .map_err(DbError::from)?;
        let mut done = Vec::new();
        for row in rows {
            let id: String = column(&row, TABLE, "?", "id")?;
            // Looked at again under the row's lock: a heartbeat since the select keeps it.
            if let Some(job) = self
                .update(&id, |j| Ok(rules::interrupt(j, timeout, now_ms)))
                .await?
            {
                done.push(job);
            }
        }
        Ok(done)
    }

    async fn apply(
        &self,
        id: &str,
        rule: impl FnOnce(&Job) -> Result<Job, Refusal>,
    ) -> Result<Job, JobError> {
        let next = self.update(id, |j| rule(j).map(Some)).await?;
        next.ok_or_else(|| JobError::NotFound(id.to_owned()))
    }
}

fn revision_column(r: Option<u64>) -> Option<i64> {
    r.map(|r| i64::try_from(r).unwrap_or(i64::MAX))
}

/// The stage history as stored: a JSON array of `{"stage", "at_ms"}`.
fn stages_text(stages: &[(Stage, i64)]) -> String {
    let list: Vec<serde_json::Value> = stages
        .iter()
        .map(|(s, at)| serde_json::json!({"stage": s.as_str(), "at_ms": at}))
        .collect();
    serde_json::Value::Array(list).to_string()
}

fn parse_stages(text: &str, key: &str) -> Result<Vec<(Stage, i64)>, DbError> {
    let bad = |why: &str| DbError::corrupt(TABLE, key, format!("stages: {why}"));
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(&e.to_string()))?;
    let list = value.as_array().ok_or_else(|| bad("not an array"))?;
    list.iter()
        .map(|v| {
            let stage = v["stage"]
                .as_str()
                .and_then(Stage::parse)
                .ok_or_else(|| bad("unknown stage"))?;
            let at = v["at_ms"].as_i64().ok_or_else(|| bad("no at_ms"))?;
            Ok((stage, at))
        })
        .collect()
}

fn from_row(row: &AnyRow) -> Result<Job, DbError> {
    let id: String = column(row, TABLE, "?", "id")?;
    let key = id.as_str();
    let computer: String = column(row, TABLE, key, "computer_id")?;
    let kind: String = column(row, TABLE, key, "kind")?;
    let state: String = column(row, TABLE, key, "state")?;
    let stage: String = column(row, TABLE, key, "stage")?;
    let stages: String = column(row, TABLE, key, "stages")?;
    let revision: Option<i64> = column(row, TABLE, key, "revision")?;
    Ok(Job {
        computer: ComputerId::new(computer.as_str())
            .map_err(|e| DbError::corrupt(TABLE, key, e.to_string()))?,
        kind: JobKind::parse(&kind)
            .ok_or_else(|| DbError::corrupt(TABLE, key, format!("kind {kind:?}")))?,
        state: JobState::parse(&state)
            .ok_or_else(|| DbError::corrupt(TABLE, key, format!("state {state:?}")))?,
        stage: Stage::parse(&stage)
            .ok_or_else(|| DbError::corrupt(TABLE, key, format!("stage {stage:?}")))?,
        stages: parse_stages(&stages, key)?,
        worker: column(row, TABLE, key, "worker")?,
        heartbeat_at_ms: column(row, TABLE, key, "heartbeat_at")?,
        error: column(row, TABLE, key, "error")?,
        warning: column(row, TABLE, key, "warning")?,
        revision: revision
            .map(|r| non_negative(r, TABLE, key, "revision"))
            .transpose()?,
        created_at_ms: column(row, TABLE, key, "created_at")?,
        started_at_ms: column(row, TABLE, key, "started_at")?,
        finished_at_ms: column(row, TABLE, key, "finished_at")?,
        updated_at_ms: column(row, TABLE, key, "updated_at")?,
        id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::computers::{ComputerKind, ComputerStore, NewComputer, TokenHash, WorkspaceId};
    use crate::db::testing;
    use std::time::Duration;

    async fn each_backend(f: impl AsyncFn(Db)) {
        f(testing::sqlite().await.unwrap()).await;
        f(testing::postgres(testing::DEFAULT_PG_URL).await.unwrap()).await;
    }

    async fn computer(db: &Db, id: &str) -> ComputerId {
        let c = ComputerStore::new(db.clone())
            .create(
                NewComputer {
                    id: ComputerId::new(id).unwrap(),
                    kind: ComputerKind::Team {
                        workspace: WorkspaceId::new(format!("w-{id}")).unwrap(),
                    },
                    provider: "local".into(),
                    token_hash: TokenHash::of("t"),
                    limits: Default::default(),
                    placement: None,
                },
                1,
            )
            .await
            .unwrap();
        c.id
    }

    #[tokio::test]
    async fn one_reservation_per_computer_until_the_job_ends() {
        each_backend(async |db| {
            let store = JobStore::new(db.clone());
            let c = computer(&db, "c-1").await;
            let other = computer(&db, "c-2").await;
            let job = store.create(&c, JobKind::Update, None, 10).await.unwrap();
            assert_eq!(store.reservation(&c).await.unwrap().unwrap().id, job.id);
            // A second job on the same computer is refused, naming the first.
            match store.create(&c, JobKind::Recover, None, 11).await {
                Err(JobError::Reserved(j)) => assert_eq!(j.id, job.id),
                other => panic!("expected Reserved, got {other:?}"),
            }
            // Another computer is another reservation.
            store
                .create(&other, JobKind::Recover, None, 11)
                .await
                .unwrap();
            // Claimed by one worker only.
            store.claim(&job.id, "w1", 20).await.unwrap();
            assert!(matches!(
                store.claim(&job.id, "w2", 21).await,
                Err(JobError::Refused {
                    refusal: Refusal::NotQueued(JobState::Running),
                    ..
                })
            ));
            store
                .advance(&job.id, "w1", Stage::Checkpointing, 30)
                .await
                .unwrap();
            store.note_revision(&job.id, "w1", 4, 31).await.unwrap();
            let done = store.finish(&job.id, "w1", Ok(()), 40).await.unwrap();
            assert_eq!(done.state, JobState::Succeeded);
            // Read back as written.
            let read = store.get(&job.id).await.unwrap().unwrap();
            assert_eq!(read, done);
            assert_eq!(read.revision, Some(4));
            assert_eq!(
                read.stages.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
                [Stage::Queued, Stage::Checkpointing, Stage::Done]
            );
            // Ended: the computer takes a new job.
            assert!(store.reservation(&c).await.unwrap().is_none());
            let next = store.create(&c, JobKind::Recover, None, 50).await.unwrap();
            let listed = store.list(&c, 10).await.unwrap();
            assert_eq!(
                listed.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
                [next.id.as_str(), job.id.as_str()]
            );
            assert!(matches!(store.get("j-none").await, Ok(None)));
        })
        .await;
    }

    #[tokio::test]
    async fn concurrent_creators_reserve_a_computer_once() {
        each_backend(async |db| {
            let store = JobStore::new(db.clone());
            let c = computer(&db, "c-1").await;
            let tries = (0..8).map(|i| {
                let (store, c) = (store.clone(), c.clone());
                tokio::spawn(async move { store.create(&c, JobKind::Update, None, i).await })
            });
            let mut ok = 0;
            for t in tries {
                match t.await.unwrap() {
                    Ok(_) => ok += 1,
                    Err(JobError::Reserved(_)) => {}
                    Err(e) => panic!("unexpected {e:?}"),
                }
            }
            assert_eq!(ok, 1);
        })
        .await;
    }

    #[tokio::test]
    async fn a_silent_worker_is_interrupted_by_anyone_and_never_claimed_again() {
        each_backend(async |db| {
            let store = JobStore::new(db.clone());
            // A second process on the same database: what a restarted control plane or another
            // replica sees.
            let other = JobStore::new(db.clone());
            let c = computer(&db, "c-1").await;
            let timeout = Duration::from_secs(600);
            let job = store.create(&c, JobKind::Update, None, 0).await.unwrap();
            store.claim(&job.id, "w1", 1_000).await.unwrap();
            store.heartbeat(&job.id, "w1", 5_000).await.unwrap();
            assert!(other
                .interrupt_stale(timeout, 604_999)
                .await
                .unwrap()
                .is_empty());
            let hit = other.interrupt_stale(timeout, 605_000).await.unwrap();
            assert_eq!(hit.len(), 1);
            assert_eq!(hit[0].state, JobState::Interrupted);
            // Still reserved; the old worker is locked out; no one claims it again.
            assert!(other.reservation(&c).await.unwrap().is_some());
            assert!(matches!(
                store.heartbeat(&job.id, "w1", 606_000).await,
                Err(JobError::Refused {
                    refusal: Refusal::Lost { .. },
                    ..
                })
            ));
            assert!(other.claim(&job.id, "w2", 606_000).await.is_err());
            assert!(other.ids_in(JobState::Queued).await.unwrap().is_empty());
            // Release: only with the assertion.
            assert!(matches!(
                other.release(&job.id, false, 607_000).await,
                Err(JobError::Refused {
                    refusal: Refusal::NotAsserted,
                    ..
                })
            ));
            let freed = other.release(&job.id, true, 607_000).await.unwrap();
            assert_eq!(freed.state, JobState::Released);
            assert!(other.reservation(&c).await.unwrap().is_none());
            assert!(matches!(
                other.release("j-missing", true, 1).await,
                Err(JobError::NotFound(_))
            ));
        })
        .await;
    }
}
