//! Maintenance jobs (docs/lifecycle.md#maintenance-jobs): start an update or a recovery (`202` with
//! the job), list a computer's jobs, show one, release an interrupted one. Decisions are the core's
//! and `crate::jobs`'; this is translation.

use super::body::{json_response, read_json, ApiError, RespBody};
use super::Api;
use crate::clock::now_ms;
use crate::jobs::{Job, JobError, JobKind, Refusal};
use crate::schema::code::ApiCode;
use crate::schema::job::{self as schema, JobList, ReleaseInterrupted};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use std::sync::Arc;
use tracing::info;

/// How many of a computer's jobs the list shows.
const LIST_LIMIT: u32 = 50;

/// The API's view of a job.
pub fn view(j: &Job) -> schema::Job {
    schema::Job {
        id: j.id.clone(),
        computer: j.computer.as_str().to_string(),
        kind: j.kind.as_str().to_string(),
        state: j.state.as_str().to_string(),
        reserving: j.state.reserves(),
        stage: j.stage.as_str().to_string(),
        stages: j
            .stages
            .iter()
            .map(|(s, at)| schema::JobStage {
                stage: s.as_str().to_string(),
                at_ms: *at,
            })
            .collect(),
        worker: j.worker.clone(),
        heartbeat_at_ms: (j.heartbeat_at_ms > 0).then_some(j.heartbeat_at_ms),
        error: j.error.clone(),
        warning: j.warning.clone(),
        revision: j.revision,
        created_at_ms: j.created_at_ms,
        started_at_ms: j.started_at_ms,
        finished_at_ms: j.finished_at_ms,
        updated_at_ms: j.updated_at_ms,
    }
}

/// `POST /v1/computers/{id}/update` and `…/recover`.
pub async fn start(
    api: &Arc<Api>,
    id: &str,
    kind: JobKind,
) -> Result<Response<RespBody>, ApiError> {
    let job = crate::jobs::create(&api.core, id, kind).await?;
    Ok(json_response(StatusCode::ACCEPTED, &view(&job)))
}

/// `GET /v1/computers/{id}/jobs`.
pub async fn list(api: &Arc<Api>, id: &str) -> Result<Response<RespBody>, ApiError> {
    let c = api.core.get(id).await?;
    let jobs = api
        .core
        .jobs
        .store
        .list(&c.id, LIST_LIMIT)
        .await
        .map_err(job_error)?;
    let jobs = jobs.iter().map(view).collect();
    Ok(json_response(StatusCode::OK, &JobList { jobs }))
}

/// `GET /v1/jobs/{id}`.
pub async fn show(api: &Arc<Api>, id: &str) -> Result<Response<RespBody>, ApiError> {
    let job = api
        .core
        .jobs
        .store
        .get(id)
        .await
        .map_err(job_error)?
        .ok_or_else(|| job_error(JobError::NotFound(id.to_owned())))?;
    Ok(json_response(StatusCode::OK, &view(&job)))
}

/// Whether `who` sees job `id`'s computer: a job of a computer it does not see is missing.
pub async fn check_scope(
    api: &Api,
    who: &crate::tokens::Principal,
    id: &str,
) -> Result<(), ApiError> {
    let missing = || job_error(JobError::NotFound(id.to_owned()));
    let job = api.core.jobs.store.get(id).await.map_err(job_error)?;
    let job = job.ok_or_else(missing)?;
    match api.core.get(job.computer.as_str()).await {
        Ok(c) if who.sees(&c) => Ok(()),
        Ok(_) | Err(crate::core::CoreError::NotFound(_)) => Err(missing()),
        Err(e) => Err(e.into()),
    }
}

/// `POST /v1/jobs/{id}/release-interrupted` with `{"workers_stopped": true}`.
pub async fn release_interrupted(
    api: &Arc<Api>,
    id: &str,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let body: ReleaseInterrupted = read_json(req.into_body()).await?;
    let job = api
        .core
        .jobs
        .store
        .release(id, body.workers_stopped, now_ms())
        .await
        .map_err(job_error)?;
    info!(job_id = %id, computer_id = %job.computer, "interrupted maintenance job released by an operator: the computer is free, and recovery available");
    Ok(json_response(StatusCode::OK, &view(&job)))
}

/// A jobs refusal: the user's conflict or mistake; only a failing database is internal.
pub fn job_error(e: JobError) -> ApiError {
    let msg = e.to_string();
    match e {
        JobError::NotFound(_) => ApiError::new(ApiCode::JobNotFound, msg),
        JobError::Reserved(_) => ApiError::new(ApiCode::ComputerReserved, msg),
        JobError::Busy(_) => ApiError::new(ApiCode::ComputerBusy, msg),
        JobError::Refused {
            refusal: Refusal::NotAsserted,
            ..
        } => ApiError::bad_request(msg),
        JobError::Refused {
            refusal: Refusal::NotInterrupted(_),
            ..
        } => ApiError::new(ApiCode::JobNotInterrupted, msg),
        JobError::Refused { .. } => ApiError::new(ApiCode::JobConflict, msg),
        JobError::Db(d) => ApiError::db(&d),
    }
}
