//! The worker side of maintenance jobs: creating a job (the reservation), claiming and running
//! it through its stages while heartbeating, and the sweep every control plane runs.
//!
//! A job runs where it was created (the API's process starts it at once); the sweep, every
//! [`JobConfig::period`](super::JobConfig::period), marks running jobs whose worker went silent
//! `interrupted` and claims queued jobs nobody claimed (their creator died before it could).
//! Every step first records its stage through a rule that only this worker's running job
//! passes: a worker whose job was interrupted meanwhile (it stalled past the heartbeat window)
//! stops before its next step.

use super::{JobError, JobKind, Stage};
use crate::clock::now_ms;
use crate::computers::{Computer, ComputerState};
use crate::core::{Core, CoreError};
use crate::homes::{chain, Progress};
use crate::schema::activity::{Cause, LifecycleKind as Lifecycle};
use crate::tunnel::TunnelError;
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// How often an update looks again at the execution leases it waits for.
const LEASE_POLL: Duration = Duration::from_millis(500);

/// Creates a `kind` job on computer `id` (refused while another job reserves it, or while idle
/// suspension holds it) and starts running it here.
pub async fn create(core: &Arc<Core>, id: &str, kind: JobKind) -> Result<super::Job, CoreError> {
    let c = core.get(id).await?;
    // Idle suspension's claim and a reservation exclude each other: in one process the API's
    // idle gate refuses this request while the idle job claims the computer (and an idle job
    // that claims after this request entered the gate looks again); across replicas the idle
    // job's claim is in the database, and it checks for a reservation once it holds it.
    let idle_claim = match &core.cluster {
        None => None,
        Some(cluster) => match cluster
            .claims
            .try_take("idle", id, now_ms())
            .await
            .map_err(JobError::from)?
        {
            Some(claim) => Some((cluster.claims.clone(), claim)),
            None => return Err(TunnelError::Suspending(id.to_owned()).into()),
        },
    };
    let warning = match kind {
        JobKind::Update => None,
        JobKind::Recover => Some(recover_warning(core.stored_revision(&c).await?)),
    };
    // A stop, start, destroy or takeover checks the reservation once it holds the computer's
    // lifecycle claim, and acts before giving it back: while one holds it no job is created
    // (refused `computer_busy`), and once the job exists the next one is refused by it.
    let created = match core.jobs.hold_for_creation(&c.id).await {
        Ok(act) => {
            let created = core.jobs.store.create(&c.id, kind, warning, now_ms()).await;
            act.release().await;
            created
        }
        Err(e) => Err(e),
    };
    if let Some((claims, claim)) = idle_claim {
        if let Err(e) = claims.release(&claim).await {
            warn!(computer_id = %id, error = %e, "releasing the idle claim a job took failed; it expires by itself");
        }
    }
    let job = created?;
    info!(job_id = %job.id, computer_id = %id, kind = kind.as_str(), "maintenance job queued");
    start(core.clone(), job.id.clone());
    Ok(job)
}

/// What a recovery warns of: the home it falls back to.
pub fn recover_warning(revision: Option<u64>) -> String {
    match revision {
        Some(r) => format!(
            "recovery restores the last saved home (revision {r}): work since that checkpoint \
             is lost"
        ),
        None => "there is no saved home: the new machine starts with an empty home, and \
                 anything in the old one is lost"
            .to_string(),
    }
}

/// Tries to claim job `id` and run it, in the background (nothing if another worker has it).
pub fn start(core: Arc<Core>, id: String) {
    tokio::spawn(async move { run(&core, &id).await });
}

/// Starts the sweep: at once, then every period, interrupt silent workers' jobs and run queued
/// jobs nobody claimed.
pub fn spawn(core: Arc<Core>) {
    let period = core.jobs.config.period();
    tokio::spawn(async move {
        loop {
            sweep(&core).await;
            tokio::time::sleep(period).await;
        }
    });
}

async fn sweep(core: &Arc<Core>) {
    let timeout = core.jobs.config.heartbeat_timeout;
    match core.jobs.store.interrupt_stale(timeout, now_ms()).await {
        Ok(jobs) => {
            for j in jobs {
                warn!(job_id = %j.id, computer_id = %j.computer, kind = j.kind.as_str(), stage = %j.stage,
                    worker = j.worker.as_deref().unwrap_or(""), timeout_secs = timeout.as_secs(),
                    "maintenance job interrupted: its worker stopped heartbeating; the computer stays reserved until it is released");
            }
        }
        Err(e) => warn!(error = %chain(&e), "could not look for interrupted jobs"),
    }
    match core.jobs.store.ids_in(super::JobState::Queued).await {
        Ok(ids) => ids.into_iter().for_each(|id| start(core.clone(), id)),
        Err(e) => warn!(error = %chain(&e), "could not look for queued jobs"),
    }
}

/// Why a run stopped before the end.
enum Stop {
    /// The job failed: recorded, the reservation ends.
    Failed(String),
    /// The job is no longer ours (interrupted meanwhile): nothing more is done or recorded.
    Lost(JobError),
}

/// One claimed job as its worker runs it.
struct Run<'a> {
    core: &'a Arc<Core>,
    id: &'a str,
    worker: &'a str,
}

impl Run<'_> {
    /// Records that the job begins `stage`; only while it is still ours.
    async fn stage(&self, stage: Stage) -> Result<(), Stop> {
        self.core
            .jobs
            .store
            .advance(self.id, self.worker, stage, now_ms())
            .await
            .map_err(Stop::Lost)?;
        info!(job_id = %self.id, stage = %stage, "maintenance job stage");
        Ok(())
    }

    async fn revision(&self, revision: u64) -> Result<(), Stop> {
        self.core
            .jobs
            .store
            .note_revision(self.id, self.worker, revision, now_ms())
            .await
            .map_err(Stop::Lost)?;
        Ok(())
    }
}

fn failed(what: &str, e: &CoreError) -> Stop {
    Stop::Failed(format!("{what}: {}", chain(e)))
}

async fn run(core: &Arc<Core>, id: &str) {
    let worker = core.jobs.worker().to_owned();
    let job = match core.jobs.store.claim(id, &worker, now_ms()).await {
        Ok(job) => job,
        // Claimed by another worker (or this process's other look) first.
        Err(JobError::Refused { .. } | JobError::NotFound(_)) => return,
        Err(e) => {
            warn!(job_id = %id, error = %chain(&e), "could not claim a queued job; the next sweep tries again");
            return;
        }
    };
    info!(job_id = %id, computer_id = %job.computer, kind = job.kind.as_str(), worker, "maintenance job claimed");
    let beat = tokio::spawn(heartbeat(core.clone(), id.to_owned(), worker.clone()));
    let r = Run {
        core,
        id,
        worker: &worker,
    };
    let outcome = match job.kind {
        JobKind::Update => update(&r, job.computer.as_str()).await,
        JobKind::Recover => recover(&r, job.computer.as_str()).await,
    };
    beat.abort();
    let (result, failure) = match outcome {
        Ok(()) => (Ok(()), None),
        Err(Stop::Failed(e)) => (Err(e.clone()), Some(e)),
        Err(Stop::Lost(e)) => {
            warn!(job_id = %id, error = %chain(&e), "maintenance job no longer this worker's (interrupted meanwhile): stopped before its next step");
            return;
        }
    };
    match core.jobs.store.finish(id, &worker, result, now_ms()).await {
        Ok(finished) => match failure {
            None => info!(job_id = %id, computer_id = %job.computer, "maintenance job succeeded"),
            Some(error) => {
                warn!(job_id = %id, computer_id = %job.computer, error, "maintenance job failed");
                core.activity
                    .lifecycle(
                        job.computer.as_str(),
                        Lifecycle::JobFailed,
                        Cause::Maintenance,
                        format!(
                            "{} job {id} failed at stage {}: {error}",
                            job.kind.as_str(),
                            finished.stage
                        ),
                    )
                    .await;
            }
        },
        Err(e) => {
            warn!(job_id = %id, error = %chain(&e), "could not record the end of a maintenance job")
        }
    }
}

/// Keeps the job's `heartbeat_at` fresh while it runs (aborted when the run ends).
async fn heartbeat(core: Arc<Core>, id: String, worker: String) {
    let period = core.jobs.config.period();
    loop {
        tokio::time::sleep(period).await;
        match core.jobs.store.heartbeat(&id, &worker, now_ms()).await {
            Ok(_) => {}
            Err(e @ (JobError::Refused { .. } | JobError::NotFound(_))) => {
                warn!(job_id = %id, error = %chain(&e), "maintenance job no longer this worker's: heartbeat stopped");
                return;
            }
            Err(e) => warn!(job_id = %id, error = %chain(&e), "job heartbeat failed; retrying"),
        }
    }
}

/// Update: wait for held leases, checkpoint the live home, then replace the machine.
async fn update(r: &Run<'_>, id: &str) -> Result<(), Stop> {
    let core = r.core;
    let c = core.get(id).await.map_err(|e| failed("update", &e))?;
    let pending = core
        .homes
        .ledger()
        .pending_restore(&c.id)
        .await
        .map_err(|e| Stop::Failed(format!("update: {}", chain(&e))))?;
    // A stopped computer's home was saved when it stopped; one whose stored home was never
    // restored holds nothing newer. Anything else has live work to save first.
    let live = c.state != ComputerState::Stopped && !pending;
    if live {
        if c.state != ComputerState::Running || !core.guest_connected(id).await {
            return Err(Stop::Failed(format!(
                "the guest of computer {id} is not connected, so its live work cannot be \
                 checkpointed; nothing was changed. `rakazo computer recover {id}` rebuilds it \
                 from the last saved home instead"
            )));
        }
        wait_for_runs(r, &c).await?;
        r.stage(Stage::Checkpointing).await?;
        let saved = core
            .checkpoint_home(
                &c,
                &[],
                Duration::ZERO,
                homes::cas::Cause::Maintenance,
                &Progress::new(),
            )
            .await
            .map_err(|e| failed("checkpoint failed; nothing was changed", &e))?;
        core.record_checkpoint(
            &c,
            &saved,
            Cause::Maintenance,
            "saved before the update replaces the machine",
        )
        .await;
        r.revision(saved.revision.get()).await?;
    }
    replace(r, &c).await
}

/// Waits (stage `waiting`) while runs that took execution leases before the reservation hold
/// them, up to the configured wait; past it the update fails, changing nothing.
async fn wait_for_runs(r: &Run<'_>, c: &Computer) -> Result<(), Stop> {
    let wait = r.core.jobs.config.lease_wait;
    let polls = wait.as_millis() / LEASE_POLL.as_millis();
    for poll in 0..=polls {
        let bots = r
            .core
            .homes
            .ledger()
            .live_lease_holders(&c.id, &[], now_ms())
            .await
            .map_err(|e| Stop::Failed(format!("update: {}", chain(&e))))?;
        if bots.is_empty() {
            return Ok(());
        }
        if poll == 0 {
            r.stage(Stage::Waiting).await?;
        }
        if poll == polls {
            return Err(Stop::Failed(format!(
                "bots {} still hold execution leases on computer {} after {} s; nothing was \
                 changed: update it when their runs have ended",
                bots.join(", "),
                c.id,
                wait.as_secs()
            )));
        }
        tokio::time::sleep(LEASE_POLL).await;
    }
    Ok(())
}

/// Recovery: replace the machine from the last saved home, without a checkpoint.
async fn recover(r: &Run<'_>, id: &str) -> Result<(), Stop> {
    let c = r.core.get(id).await.map_err(|e| failed("recover", &e))?;
    replace(r, &c).await
}

/// The replacement both kinds end with: remove the old machine, provision a new one, wait for
/// its guest, restore the stored home.
async fn replace(r: &Run<'_>, c: &Computer) -> Result<(), Stop> {
    let core = r.core;
    let id = c.id.as_str();
    let retry = format!(
        "; computer {id} has no machine: `rakazo computer recover {id}` rebuilds it from the \
         last saved home"
    );
    r.stage(Stage::Stopping).await?;
    core.job_remove_machine(c)
        .await
        .map_err(|e| failed("removing the old machine failed", &e))?;
    r.stage(Stage::Provisioning).await?;
    let c = core
        .job_provision(c)
        .await
        .map_err(|e| Stop::Failed(format!("provisioning failed: {}{retry}", chain(&e))))?;
    r.stage(Stage::Starting).await?;
    core.job_wait_guest(&c)
        .await
        .map_err(|e| Stop::Failed(format!("the new machine's guest: {}{retry}", chain(&e))))?;
    r.stage(Stage::Restoring).await?;
    let restored = core
        .job_restore(&c)
        .await
        .map_err(|e| Stop::Failed(format!("restoring the home failed: {}{retry}", chain(&e))))?;
    if let Some(revision) = restored {
        r.revision(revision).await?;
    }
    Ok(())
}
