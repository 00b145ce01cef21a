//! Maintenance jobs (docs/lifecycle.md#maintenance-jobs): update (checkpoint the live home, rebuild
//! the machine with the configured provider and image, restore the home) and recovery (rebuild the
//! machine from the last saved home, without a checkpoint) run as durable jobs in the database.
//!
//! A job in state `queued`, `running` or `interrupted` reserves its computer: new execution
//! leases, stop, start, destroy, takeover and idle suspension are refused with 409
//! `computer_reserved` naming the job ([`Core::check_unreserved`](crate::core::Core)); a second
//! job is refused the same way. Leases held before the reservation keep working (renewals,
//! their commands) until the machine goes; an update first waits for them to be released.
//!
//! Parts: [`rules`] (pure: the states, stages and who may change a job), [`store`] (the `jobs`
//! table, migration 0009: every change a locked read, a rule, a write), [`worker`] (claims a
//! queued job, heartbeats it, drives the core through its stages; and the sweep every control
//! plane runs: interrupt jobs whose worker went silent, claim queued ones nobody ran). The
//! worker drives the core; the core holds only this module's state ([`Jobs`]), never the worker.
//!
//! Across replicas nothing lives in process memory: the claim is the row's `queued → running`
//! transition, the heartbeat is the row's `heartbeat_at`, and any replica (or the restarted
//! process) marks a job whose heartbeat is older than `--job-heartbeat-timeout-secs`
//! `interrupted`. A claimed job is never claimed again: after a crash it stays reserved until an
//! operator asserts its workers stopped (`release-interrupted`, state `released`), and then
//! recovers the computer.

pub mod rules;
pub mod store;
mod worker;

pub use rules::{Job, JobKind, JobState, Refusal, Stage};
pub use store::JobStore;
pub use worker::{create, recover_warning, spawn, start};

use crate::claims::{Claims, Held, DEFAULT_CLAIM_TTL};
use crate::computers::ComputerId;
use clap::Args;
use std::time::Duration;

/// The heartbeat window (docs/lifecycle.md#maintenance-jobs: 10 minutes).
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// How long an update waits for runs holding execution leases to end before it gives up,
/// changing nothing: one execution lease's time to live (docs/lifecycle.md#leases).
pub const DEFAULT_LEASE_WAIT: Duration = crate::lease::EXEC_LEASE_TTL;

/// Errors of the jobs boundary.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("job {0} not found")]
    NotFound(String),
    /// The computer is reserved by this job.
    #[error("{}", reserved_message(.0))]
    Reserved(Box<Job>),
    #[error("job {id}: {}", refusal_message(.refusal))]
    Refused { id: String, refusal: Refusal },
    /// A lifecycle action (stop, start, destroy, a new takeover) holds the computer: a job is
    /// not created under it, and another action waited for it in vain.
    #[error(
        "computer {0} is busy: a stop, start, destroy or takeover of it is under way; try again \
         when it has ended"
    )]
    Busy(String),
    #[error("job store failed")]
    Db(#[from] crate::db::DbError),
}

/// What a refused caller reads: the job, its kind, state and stage, and what to do.
fn reserved_message(job: &Job) -> String {
    let mut msg = format!(
        "computer {} is reserved by {} job {} ({}, stage {})",
        job.computer,
        job.kind.as_str(),
        job.id,
        job.state,
        job.stage
    );
    if job.state == JobState::Interrupted {
        msg.push_str(&format!(
            ": its worker stopped heartbeating; once its workers and provider operations have \
             stopped, release it (`rakazo computer release-interrupted {} --workers-stopped`)",
            job.id
        ));
    } else {
        msg.push_str(&format!(
            "; wait for it to end (`rakazo computer jobs {}`)",
            job.computer
        ));
    }
    msg
}

fn refusal_message(r: &Refusal) -> String {
    match r {
        Refusal::NotQueued(s) => format!("is {s}, not queued"),
        Refusal::Lost { state, worker } => format!(
            "is {state} under worker {}, no longer this worker's",
            worker.as_deref().unwrap_or("none")
        ),
        Refusal::BadStage { from, to } => format!("cannot go from stage {from} to {to}"),
        Refusal::NotAsserted => "releasing an interrupted job needs {\"workers_stopped\": true}: \
                                 assert that its workers and provider operations have stopped"
            .to_string(),
        Refusal::NotInterrupted(s) => {
            format!("is {s}; only an interrupted job can be released")
        }
    }
}

/// `rakazo serve` flags of maintenance jobs.
#[derive(Debug, Clone, Args)]
pub struct JobArgs {
    /// Seconds a running job's worker may go without a heartbeat before any control plane
    /// marks the job interrupted (it stays reserved until released).
    #[arg(long, env = "RAKAZO_JOB_HEARTBEAT_TIMEOUT_SECS",
          default_value_t = DEFAULT_HEARTBEAT_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub job_heartbeat_timeout_secs: u64,
    /// Seconds an update waits for runs that hold execution leases to end before it fails,
    /// changing nothing.
    #[arg(long, env = "RAKAZO_JOB_LEASE_WAIT_SECS",
          default_value_t = DEFAULT_LEASE_WAIT.as_secs(),
          value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub job_lease_wait_secs: u64,
}

impl JobArgs {
    pub fn resolve(&self) -> JobConfig {
        JobConfig {
            heartbeat_timeout: Duration::from_secs(self.job_heartbeat_timeout_secs),
            lease_wait: Duration::from_secs(self.job_lease_wait_secs),
        }
    }
}

/// Settings of maintenance jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobConfig {
    pub heartbeat_timeout: Duration,
    pub lease_wait: Duration,
}

impl Default for JobConfig {
    fn default() -> Self {
        Self {
            heartbeat_timeout: DEFAULT_HEARTBEAT_TIMEOUT,
            lease_wait: DEFAULT_LEASE_WAIT,
        }
    }
}

impl JobConfig {
    /// How often a worker heartbeats and the sweep looks: a quarter of the timeout, between
    /// 100 ms and 30 s.
    pub fn period(&self) -> Duration {
        (self.heartbeat_timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(30))
    }
}

/// The claim kind (`lifecycle/<computer>`) that makes a lifecycle action and a job's creation
/// exclusive across replicas.
pub const LIFECYCLE_CLAIM: &str = "lifecycle";
/// How long a lifecycle action waits for another one on the same computer to end before it is
/// refused `computer_busy`: a start waits up to 30 s for its guest, then restores the home.
pub const LIFECYCLE_WAIT: Duration = Duration::from_secs(180);

/// The jobs' state in the core: the store, the settings, who this process's worker is, and the
/// claims a lifecycle action and a job's creation take.
pub struct Jobs {
    pub store: JobStore,
    pub config: JobConfig,
    worker: String,
    claims: Claims,
}

impl Jobs {
    /// Jobs in `db`, worked here under a fresh process id (`p-<hex>`) until [`Jobs::set_worker`].
    pub fn new(db: crate::db::Db) -> Self {
        let worker = format!("p-{}", hex::encode(rand::random::<[u8; 6]>()));
        Self {
            store: JobStore::new(db.clone()),
            config: JobConfig::default(),
            claims: Claims::new(db, worker.clone(), DEFAULT_CLAIM_TTL),
            worker,
        }
    }

    /// Works jobs as `worker` (a replica's id), taking lifecycle claims through `claims` (the
    /// replica's, with its time to live).
    pub fn set_worker(&mut self, worker: impl Into<String>, claims: Claims) {
        self.worker = worker.into();
        self.claims = claims;
    }

    /// The claims lifecycle actions take (also read by the lost-guest check).
    pub fn claims(&self) -> &Claims {
        &self.claims
    }

    /// Holds computer `id` for a lifecycle action (stop, start, destroy, a new takeover) until
    /// the returned claim is released: no job is created meanwhile, so the action's reservation
    /// check (made after this) stays true until it has acted. Waits up to [`LIFECYCLE_WAIT`]
    /// for another action on it, then refuses [`JobError::Busy`].
    pub async fn act(&self, id: &ComputerId) -> Result<Held, JobError> {
        self.claims
            .wait_for(LIFECYCLE_CLAIM, id.as_str(), LIFECYCLE_WAIT)
            .await?
            .ok_or_else(|| JobError::Busy(id.to_string()))
    }

    /// Holds computer `id` for a job's creation, refusing [`JobError::Busy`] at once while a
    /// lifecycle action holds it.
    pub(crate) async fn hold_for_creation(&self, id: &ComputerId) -> Result<Held, JobError> {
        self.claims
            .hold(LIFECYCLE_CLAIM, id.as_str())
            .await?
            .ok_or_else(|| JobError::Busy(id.to_string()))
    }

    /// Who claims jobs in this process.
    pub fn worker(&self) -> &str {
        &self.worker
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing;

    /// Two replicas (two `Jobs` on one database, each its own claim holder): while one holds a
    /// computer for a lifecycle action, the other's job creation is refused at once and its
    /// own action waits, getting the computer when the first releases it.
    #[tokio::test]
    async fn a_lifecycle_action_excludes_a_job_creation_across_replicas() {
        for db in [
            testing::sqlite().await.unwrap(),
            testing::postgres(testing::DEFAULT_PG_URL).await.unwrap(),
        ] {
            let mut a = Jobs::new(db.clone());
            a.set_worker("r-a", Claims::new(db.clone(), "r-a", DEFAULT_CLAIM_TTL));
            let mut b = Jobs::new(db.clone());
            b.set_worker("r-b", Claims::new(db, "r-b", DEFAULT_CLAIM_TTL));
            let id = ComputerId::new("c-race").unwrap();
            let act = a.act(&id).await.unwrap();
            match b.hold_for_creation(&id).await {
                Err(JobError::Busy(c)) => assert_eq!(c, "c-race"),
                other => panic!("expected Busy, got {:?}", other.map(|h| h.id().clone())),
            }
            let b = std::sync::Arc::new(b);
            let waiting = tokio::spawn({
                let (b, id) = (b.clone(), id.clone());
                async move {
                    let held = b.act(&id).await?;
                    let fence = held.id().fence;
                    held.release().await;
                    Ok::<_, JobError>(fence)
                }
            });
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert!(
                !waiting.is_finished(),
                "an action waits for the one under way"
            );
            act.release().await;
            let fence = tokio::time::timeout(Duration::from_secs(10), waiting)
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            assert!(fence >= 2, "taken after the first: fence {fence}");
            // Released by the waiter too: a job may be created.
            b.hold_for_creation(&id).await.unwrap().release().await;
        }
    }
}
