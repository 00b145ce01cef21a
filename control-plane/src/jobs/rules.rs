//! The pure rules of a maintenance job: from the stored [`Job`] and `now` to the next [`Job`] or
//! a [`Refusal`]. The store applies them inside a write transaction that locks the row, so every
//! replica sharing the database applies the same rule to the same row, one at a time.
//!
//! States: `queued` → (claim) `running` → `succeeded` | `failed`; `running` → `interrupted` once
//! its worker's heartbeat is older than the timeout; `interrupted` → `released` only by an
//! operator's assertion that the workers stopped. `queued`, `running` and `interrupted` reserve
//! the computer. Nothing leads back to `queued` or `running`: a claimed job is never run again.

use crate::computers::ComputerId;
use std::fmt;
use std::time::Duration;

/// What a job does to its computer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    /// Checkpoint live work, then rebuild the machine with the configured provider and image
    /// and restore the home.
    Update,
    /// Replace the machine from the last saved home, without a checkpoint.
    Recover,
}

impl JobKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Update => "update",
            Self::Recover => "recover",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "update" => Some(Self::Update),
            "recover" => Some(Self::Recover),
            _ => None,
        }
    }

    /// The stages a job of this kind goes through, in order (it may skip some: an update of a
    /// stopped computer has nothing to wait for or checkpoint).
    pub fn stages(self) -> &'static [Stage] {
        use Stage::*;
        match self {
            Self::Update => &[
                Queued,
                Waiting,
                Checkpointing,
                Stopping,
                Provisioning,
                Starting,
                Restoring,
                Done,
            ],
            Self::Recover => &[Queued, Stopping, Provisioning, Starting, Restoring, Done],
        }
    }
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    Queued,
    Running,
    Succeeded,
    Failed,
    Interrupted,
    Released,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Interrupted => "interrupted",
            Self::Released => "released",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => Self::Queued,
            "running" => Self::Running,
            "succeeded" => Self::Succeeded,
            "failed" => Self::Failed,
            "interrupted" => Self::Interrupted,
            "released" => Self::Released,
            _ => return None,
        })
    }

    /// Whether a job in this state holds its computer's reservation.
    pub fn reserves(self) -> bool {
        matches!(self, Self::Queued | Self::Running | Self::Interrupted)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A lifecycle stage a job reached: what it is actually doing, not an estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Not claimed by a worker yet.
    Queued,
    /// Waiting for runs that held execution leases before the reservation to end.
    Waiting,
    /// Saving the live home (update only).
    Checkpointing,
    /// Removing the old machine.
    Stopping,
    /// The provider makes the new machine.
    Provisioning,
    /// Waiting for the new machine's guest to dial in.
    Starting,
    /// Importing the last saved home into the new machine.
    Restoring,
    Done,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Waiting => "waiting",
            Self::Checkpointing => "checkpointing",
            Self::Stopping => "stopping",
            Self::Provisioning => "provisioning",
            Self::Starting => "starting",
            Self::Restoring => "restoring",
            Self::Done => "done",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => Self::Queued,
            "waiting" => Self::Waiting,
            "checkpointing" => Self::Checkpointing,
            "stopping" => Self::Stopping,
            "provisioning" => Self::Provisioning,
            "starting" => Self::Starting,
            "restoring" => Self::Restoring,
            "done" => Self::Done,
            _ => return None,
        })
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One maintenance job as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub id: String,
    pub computer: ComputerId,
    pub kind: JobKind,
    pub state: JobState,
    pub stage: Stage,
    /// Every stage reached, with when (ms), oldest first.
    pub stages: Vec<(Stage, i64)>,
    /// Who claimed it.
    pub worker: Option<String>,
    /// Its worker's last sign of life (ms); 0 before the claim.
    pub heartbeat_at_ms: i64,
    pub error: Option<String>,
    pub warning: Option<String>,
    /// The home revision it checkpointed (update) or restored (either).
    pub revision: Option<u64>,
    pub created_at_ms: i64,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
    pub updated_at_ms: i64,
}

/// Why a rule refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Only a queued job can be claimed (it was claimed already, by us or another worker).
    NotQueued(JobState),
    /// The job is no longer `running` under this worker (interrupted, or never ours): the
    /// worker must stop before its next step.
    Lost {
        state: JobState,
        worker: Option<String>,
    },
    /// A stage that is not this kind's, or not later than the current one.
    BadStage { from: Stage, to: Stage },
    /// `release-interrupted` needs the explicit assertion that the workers stopped.
    NotAsserted,
    /// Only an interrupted job can be released.
    NotInterrupted(JobState),
}

/// A job just created: queued, reserving its computer.
pub fn new_job(
    id: String,
    computer: ComputerId,
    kind: JobKind,
    warning: Option<String>,
    now_ms: i64,
) -> Job {
    Job {
        id,
        computer,
        kind,
        state: JobState::Queued,
        stage: Stage::Queued,
        stages: vec![(Stage::Queued, now_ms)],
        worker: None,
        heartbeat_at_ms: 0,
        error: None,
        warning,
        revision: None,
        created_at_ms: now_ms,
        started_at_ms: None,
        finished_at_ms: None,
        updated_at_ms: now_ms,
    }
}

/// `worker` claims a queued job: it runs from now, heartbeating.
pub fn claim(job: &Job, worker: &str, now_ms: i64) -> Result<Job, Refusal> {
    if job.state != JobState::Queued {
        return Err(Refusal::NotQueued(job.state));
    }
    Ok(Job {
        state: JobState::Running,
        worker: Some(worker.to_owned()),
        heartbeat_at_ms: now_ms,
        started_at_ms: Some(now_ms),
        updated_at_ms: now_ms,
        ..job.clone()
    })
}

/// Only the worker of a running job may change it.
fn ours(job: &Job, worker: &str) -> Result<(), Refusal> {
    if job.state == JobState::Running && job.worker.as_deref() == Some(worker) {
        Ok(())
    } else {
        Err(Refusal::Lost {
            state: job.state,
            worker: job.worker.clone(),
        })
    }
}

/// The worker is alive.
pub fn heartbeat(job: &Job, worker: &str, now_ms: i64) -> Result<Job, Refusal> {
    ours(job, worker)?;
    Ok(Job {
        heartbeat_at_ms: now_ms.max(job.heartbeat_at_ms),
        updated_at_ms: now_ms,
        ..job.clone()
    })
}

/// The worker begins `stage` (a later one of its kind's); it counts as a heartbeat.
pub fn advance(job: &Job, worker: &str, stage: Stage, now_ms: i64) -> Result<Job, Refusal> {
    ours(job, worker)?;
    let order = job.kind.stages();
    let at = |s: Stage| order.iter().position(|x| *x == s);
    match (at(job.stage), at(stage)) {
        (Some(from), Some(to)) if to > from && stage != Stage::Done => {}
        _ => {
            return Err(Refusal::BadStage {
                from: job.stage,
                to: stage,
            })
        }
    }
    let mut stages = job.stages.clone();
    stages.push((stage, now_ms));
    Ok(Job {
        stage,
        stages,
        heartbeat_at_ms: now_ms.max(job.heartbeat_at_ms),
        updated_at_ms: now_ms,
        ..job.clone()
    })
}

/// The worker records the home revision it checkpointed or restored.
pub fn note_revision(job: &Job, worker: &str, revision: u64, now_ms: i64) -> Result<Job, Refusal> {
    ours(job, worker)?;
    Ok(Job {
        revision: Some(revision),
        updated_at_ms: now_ms,
        ..job.clone()
    })
}

/// The worker is done: `Ok` succeeded (stage `done`), `Err(error)` failed at its current stage.
/// Either ends the reservation.
pub fn finish(
    job: &Job,
    worker: &str,
    outcome: Result<(), String>,
    now_ms: i64,
) -> Result<Job, Refusal> {
    ours(job, worker)?;
    let mut next = Job {
        finished_at_ms: Some(now_ms),
        updated_at_ms: now_ms,
        ..job.clone()
    };
    match outcome {
        Ok(()) => {
            next.state = JobState::Succeeded;
            next.stage = Stage::Done;
            next.stages.push((Stage::Done, now_ms));
        }
        Err(error) => {
            next.state = JobState::Failed;
            next.error = Some(error);
        }
    }
    Ok(next)
}

/// Whether `job` is running with a worker silent for `timeout` at `now_ms`.
pub fn is_stale(job: &Job, timeout: Duration, now_ms: i64) -> bool {
    let timeout_ms = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
    job.state == JobState::Running && now_ms.saturating_sub(job.heartbeat_at_ms) >= timeout_ms
}

/// Marks a running job whose worker has been silent for `timeout` interrupted: it stays
/// reserved (its provider calls may still be running) until an operator releases it. `None`
/// when the job is not (or no longer) stale.
pub fn interrupt(job: &Job, timeout: Duration, now_ms: i64) -> Option<Job> {
    if !is_stale(job, timeout, now_ms) {
        return None;
    }
    let worker = job.worker.as_deref().unwrap_or("?");
    Some(Job {
        state: JobState::Interrupted,
        error: Some(format!(
            "worker {worker} sent no heartbeat for {}s during stage {}; what it started may \
             still be running. Once its workers and provider operations have stopped, release \
             the computer (release-interrupted with workers_stopped: true), then recover it",
            timeout.as_secs(),
            job.stage
        )),
        updated_at_ms: now_ms,
        ..job.clone()
    })
}

/// An operator releases an interrupted job, asserting its workers and provider calls stopped:
/// the computer is free again (and recovery available).
pub fn release(job: &Job, workers_stopped: bool, now_ms: i64) -> Result<Job, Refusal> {
    if !workers_stopped {
        return Err(Refusal::NotAsserted);
    }
    if job.state != JobState::Interrupted {
        return Err(Refusal::NotInterrupted(job.state));
    }
    Ok(Job {
        state: JobState::Released,
        finished_at_ms: Some(now_ms),
        updated_at_ms: now_ms,
        ..job.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(kind: JobKind) -> Job {
        new_job(
            "j-1".into(),
            ComputerId::new("c-1").unwrap(),
            kind,
            None,
            1_000,
        )
    }

    const T: Duration = Duration::from_secs(600);

    #[test]
    fn a_job_runs_its_stages_in_order_and_ends_once() {
        let q = job(JobKind::Update);
        assert!(q.state.reserves());
        let r = claim(&q, "w1", 2_000).unwrap();
        assert_eq!((r.state, r.heartbeat_at_ms), (JobState::Running, 2_000));
        // Claimed: never claimed again, by anyone.
        assert_eq!(
            claim(&r, "w1", 2_001),
            Err(Refusal::NotQueued(JobState::Running))
        );
        assert_eq!(
            claim(&r, "w2", 2_001),
            Err(Refusal::NotQueued(JobState::Running))
        );
        // Stages go forward, may skip, never back or sideways into another kind's.
        let c = advance(&r, "w1", Stage::Checkpointing, 3_000).unwrap();
        assert_eq!(
            advance(&c, "w1", Stage::Waiting, 3_001),
            Err(Refusal::BadStage {
                from: Stage::Checkpointing,
                to: Stage::Waiting
            })
        );
        let p = advance(&c, "w1", Stage::Provisioning, 4_000).unwrap();
        assert_eq!(p.heartbeat_at_ms, 4_000);
        // Only the worker that claimed it moves it.
        assert!(matches!(
            advance(&p, "w2", Stage::Starting, 4_001),
            Err(Refusal::Lost { .. })
        ));
        let done = finish(&p, "w1", Ok(()), 5_000).unwrap();
        assert_eq!((done.state, done.stage), (JobState::Succeeded, Stage::Done));
        assert!(!done.state.reserves());
        let seen: Vec<Stage> = done.stages.iter().map(|(s, _)| *s).collect();
        assert_eq!(
            seen,
            [
                Stage::Queued,
                Stage::Checkpointing,
                Stage::Provisioning,
                Stage::Done
            ]
        );
        assert!(finish(&done, "w1", Ok(()), 5_001).is_err());
        // A recovery has no checkpoint stage.
        let rec = claim(&job(JobKind::Recover), "w1", 1).unwrap();
        assert!(advance(&rec, "w1", Stage::Checkpointing, 2).is_err());
        assert!(advance(&rec, "w1", Stage::Stopping, 2).is_ok());
    }

    #[test]
    fn a_failure_keeps_its_stage_and_error_and_frees_the_computer() {
        let r = claim(&job(JobKind::Recover), "w1", 1).unwrap();
        let p = advance(&r, "w1", Stage::Provisioning, 2).unwrap();
        let f = finish(&p, "w1", Err("no capacity".into()), 3).unwrap();
        assert_eq!(f.state, JobState::Failed);
        assert_eq!(f.stage, Stage::Provisioning);
        assert_eq!(f.error.as_deref(), Some("no capacity"));
        assert!(!f.state.reserves());
    }

    #[test]
    fn a_silent_worker_is_interrupted_and_only_an_assertion_releases_it() {
        let r = claim(&job(JobKind::Update), "w1", 10_000).unwrap();
        let r = heartbeat(&r, "w1", 20_000).unwrap();
        // Within the window: not stale.
        assert_eq!(interrupt(&r, T, 20_000 + 599_999), None);
        let i = interrupt(&r, T, 20_000 + 600_000).unwrap();
        assert_eq!(i.state, JobState::Interrupted);
        assert!(i.state.reserves());
        assert!(i.error.as_deref().unwrap().contains("w1"));
        // The old worker can no longer heartbeat, advance or finish it: nothing replays it.
        assert!(matches!(heartbeat(&i, "w1", 1), Err(Refusal::Lost { .. })));
        assert!(advance(&i, "w1", Stage::Stopping, 1).is_err());
        assert!(finish(&i, "w1", Ok(()), 1).is_err());
        assert_eq!(
            claim(&i, "w2", 1),
            Err(Refusal::NotQueued(JobState::Interrupted))
        );
        // Interrupting twice changes nothing.
        assert_eq!(interrupt(&i, T, i64::MAX), None);
        // Release needs the assertion, and an interrupted job.
        assert_eq!(release(&i, false, 1), Err(Refusal::NotAsserted));
        assert_eq!(
            release(&r, true, 1),
            Err(Refusal::NotInterrupted(JobState::Running))
        );
        let freed = release(&i, true, 700_000).unwrap();
        assert_eq!(freed.state, JobState::Released);
        assert!(!freed.state.reserves());
        assert_eq!(
            release(&freed, true, 1),
            Err(Refusal::NotInterrupted(JobState::Released))
        );
    }

    #[test]
    fn names_round_trip() {
        for s in [
            JobState::Queued,
            JobState::Running,
            JobState::Succeeded,
            JobState::Failed,
            JobState::Interrupted,
            JobState::Released,
        ] {
            assert_eq!(JobState::parse(s.as_str()), Some(s));
        }
        for k in [JobKind::Update, JobKind::Recover] {
            assert_eq!(JobKind::parse(k.as_str()), Some(k));
            for s in k.stages() {
                assert_eq!(Stage::parse(s.as_str()), Some(*s));
            }
        }
    }
}
