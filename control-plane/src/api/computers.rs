//! `/v1/computers`: create, list, show, start, stop, destroy.

use super::body::{empty, json_response, read_json, ApiError, RespBody};
use super::{parse_bot, Api};
use crate::computers::{Computer, ComputerKind, ComputerState, WorkspaceId};
use crate::schema::computer::{
    self as schema, ComputerList, CreateComputer, ForkComputer, IdleReport,
};
use crate::tokens::Principal;
use gateway_proto::op::StatusRequest;
use gateway_proto::process::ProcList;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How long `show` waits for the guest's machine report before it shows the computer without it.
const MACHINE_REPORT_WAIT: Duration = Duration::from_secs(2);

/// The API's view of a computer (its idle report left to [`with_idle`]).
fn view(c: &Computer) -> schema::Computer {
    let (kind, workspace, bot) = match &c.kind {
        ComputerKind::Team { workspace } => (
            schema::ComputerKind::Team,
            Some(workspace.as_str().to_string()),
            None,
        ),
        ComputerKind::Private { bot } => (
            schema::ComputerKind::Private,
            None,
            Some(bot.as_str().to_string()),
        ),
        ComputerKind::Pool { .. } => (schema::ComputerKind::Pool, None, None),
    };
    schema::Computer {
        id: c.id.as_str().to_string(),
        kind,
        workspace,
        bot,
        home_key: c.home_key.clone(),
        provider: c.provider.clone(),
        limits: c.limits,
        placement: c.placement.clone(),
        state: match c.state {
            ComputerState::Provisioning => schema::ComputerState::Provisioning,
            ComputerState::Running => schema::ComputerState::Running,
            ComputerState::Stopped => schema::ComputerState::Stopped,
            ComputerState::Destroyed => schema::ComputerState::Destroyed,
        },
        connected: c.connected,
        created_at_ms: c.created_at_ms,
        updated_at_ms: c.updated_at_ms,
        idle: None,
        machine: None,
        pool: c.kind.pool().map(|p| p.to_string()),
        from_pool: None,
    }
}

/// `view` with what idle suspension last decided about it (running computers; see
/// `crate::idle`).
fn with_idle(api: &Api, c: &Computer) -> schema::Computer {
    let idle = api.core.idle.report(c.id.as_str()).map(|r| IdleReport {
        decision: r.decision.to_string(),
        reason: r.reason,
        at_ms: r.at_ms,
        until_ms: r.until_ms,
    });
    schema::Computer { idle, ..view(c) }
}

pub async fn create(
    api: &Arc<Api>,
    who: &Principal,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let body: CreateComputer = read_json(req.into_body()).await?;
    let kind = kind_of(who, body.workspace, body.private_bot)?;
    if let Some(pool) = body.pool {
        if body.provider.is_some() || body.placement.is_some() || body.limits != Default::default()
        {
            return Err(ApiError::bad_request(
                "a create from a pool takes the pool's provider, limits and placement: give \
                 none of them",
            ));
        }
        let made = api.core.create_from_pool(&pool, kind).await?;
        let mut v = view(&made.computer);
        v.from_pool = Some(schema::FromPool {
            pool,
            handed_out: made.handed_out,
        });
        return Ok(json_response(StatusCode::CREATED, &v));
    }
    let c = api
        .core
        .create(kind, body.provider.as_deref(), body.limits, body.placement)
        .await?;
    Ok(json_response(StatusCode::CREATED, &view(&c)))
}

/// The kind of computer a create or fork asks for, which `who` must be allowed to make: a token
/// limited to workspaces makes their team computers only.
fn kind_of(
    who: &Principal,
    workspace: Option<String>,
    private_bot: Option<String>,
) -> Result<ComputerKind, ApiError> {
    let allowed = match (&workspace, &private_bot) {
        (Some(ws), _) => who.sees_workspace(ws),
        (None, _) => who.unlimited(),
    };
    if !allowed {
        return Err(ApiError::new(
            crate::schema::code::ApiCode::Forbidden,
            "this token is limited to other workspaces: it makes team computers of its own \
             workspaces only",
        ));
    }
    match (workspace, private_bot) {
        (Some(ws), None) => Ok(ComputerKind::Team {
            workspace: WorkspaceId::new(ws).map_err(|e| ApiError::bad_request(e.to_string()))?,
        }),
        (None, Some(bot)) => Ok(ComputerKind::Private {
            bot: parse_bot(&bot)?,
        }),
        _ => Err(ApiError::bad_request(
            "give exactly one of workspace or private_bot",
        )),
    }
}

/// `POST /v1/computers/{id}/fork`: a new computer whose home starts from the source's.
pub async fn fork(
    api: &Arc<Api>,
    who: &Principal,
    id: &str,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let body: ForkComputer = read_json(req.into_body()).await?;
    if body.revision == Some(0) {
        return Err(ApiError::bad_request("revision must be 1 or more"));
    }
    let kind = kind_of(who, body.workspace, body.private_bot)?;
    let src = api.core.get(id).await?;
    let c = api
        .core
        .fork(
            &src,
            body.revision,
            kind,
            body.provider.as_deref(),
            body.limits,
            body.placement,
        )
        .await?;
    Ok(json_response(StatusCode::CREATED, &view(&c)))
}

/// `GET /v1/computers[?machine=true]`: the computers `who` sees; with `machine`, each running
/// one's machine report too (a report younger than [`MACHINE_REPORT_REUSE`] is reused; the
/// guests are asked [`MACHINE_LIST_CONCURRENCY`] at a time, each within [`MACHINE_LIST_WAIT`],
/// so a list never waits on a silent guest for long).
pub async fn list(
    api: &Arc<Api>,
    who: &Principal,
    query: &HashMap<String, String>,
) -> Result<Response<RespBody>, ApiError> {
    let with_machine = match query.get("machine").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::bad_request("machine must be true or false")),
    };
    let all = api.core.list().await?;
    let seen: Vec<&Computer> = all.iter().filter(|c| who.sees(c)).collect();
    let mut computers: Vec<schema::Computer> = seen.iter().map(|c| with_idle(api, c)).collect();
    if with_machine {
        use futures_util::StreamExt;
        // Owned futures: the stream's closure borrows nothing (which `Send` across the
        // listener's spawn needs).
        let owned: Vec<Computer> = seen.iter().map(|c| (*c).clone()).collect();
        let reports: Vec<Option<schema::Machine>> = futures_util::stream::iter(owned)
            .map(|c| {
                let api = api.clone();
                async move { machine_cached(&api, &c).await }
            })
            .buffered(MACHINE_LIST_CONCURRENCY)
            .collect()
            .await;
        for (c, m) in computers.iter_mut().zip(reports) {
            c.machine = m;
        }
    }
    Ok(json_response(StatusCode::OK, &ComputerList { computers }))
}

pub async fn show(api: &Arc<Api>, id: &str) -> Result<Response<RespBody>, ApiError> {
    let c = api.core.get(id).await?;
    let machine = machine(api, &c).await;
    let shown = schema::Computer {
        machine,
        ..with_idle(api, &c)
    };
    Ok(json_response(StatusCode::OK, &shown))
}

/// How long a machine report is reused by the list.
const MACHINE_REPORT_REUSE: Duration = Duration::from_secs(3);
/// How long the list waits for one guest's report.
const MACHINE_LIST_WAIT: Duration = Duration::from_secs(1);
/// How many guests the list asks at once.
const MACHINE_LIST_CONCURRENCY: usize = 16;

/// [`machine`] for the list: a recent report is reused, and a guest gets [`MACHINE_LIST_WAIT`].
async fn machine_cached(api: &Api, c: &Computer) -> Option<schema::Machine> {
    if c.state != ComputerState::Running {
        return None;
    }
    let now = crate::clock::monotonic();
    if let Some((at, m)) = api.machines.lock().ok()?.get(c.id.as_str()) {
        if now.duration_since(*at) < MACHINE_REPORT_REUSE {
            return Some(m.clone());
        }
    }
    let m = tokio::time::timeout(MACHINE_LIST_WAIT, machine(api, c))
        .await
        .ok()
        .flatten()?;
    if let Ok(mut cache) = api.machines.lock() {
        // Forget what is long gone (destroyed computers' reports), so the cache stays the size of
        // the fleet.
        cache.retain(|_, (at, _)| now.duration_since(*at) < 20 * MACHINE_REPORT_REUSE);
        cache.insert(c.id.as_str().to_string(), (now, m.clone()));
    }
    Some(m)
}

/// The guest's report on a running computer's machine; `None` when it is not connected, or
/// does not answer within [`MACHINE_REPORT_WAIT`] (a computer is shown whatever its guest does).
async fn machine(api: &Api, c: &Computer) -> Option<schema::Machine> {
    if c.state != ComputerState::Running {
        return None;
    }
    let guest = api.core.connected_guest(c.id.as_str()).await?;
    let both = async { tokio::join!(guest.call(StatusRequest), guest.call(ProcList)) };
    let (status, procs) = tokio::time::timeout(MACHINE_REPORT_WAIT, both).await.ok()?;
    let s = status.ok()?;
    // An older guest knows no processes: none are shown.
    let processes = procs
        .map(|all| all.into_iter().map(super::processes::view).collect())
        .unwrap_or_default();
    Some(schema::Machine {
        uptime_secs: s.uptime_secs,
        load: s.load_milli.map(|l| f64::from(l) / 1000.0),
        cpus: s.cpus,
        home_total_bytes: s.home_total_bytes,
        home_free_bytes: s.home_free_bytes,
        memory_total_bytes: s.memory_total_bytes,
        memory_available_bytes: s.memory_available_bytes,
        memory_limited: s.memory_limited,
        home_used_bytes: s.home_used_bytes,
        home_used_partial: s.home_used_partial,
        desktops: s.desktops,
        processes,
    })
}

pub async fn start(api: &Arc<Api>, id: &str) -> Result<Response<RespBody>, ApiError> {
    let c = api.core.start(id).await?;
    Ok(json_response(StatusCode::OK, &view(&c)))
}

pub async fn stop(api: &Arc<Api>, id: &str) -> Result<Response<RespBody>, ApiError> {
    let c = api.core.stop(id).await?;
    Ok(json_response(StatusCode::OK, &view(&c)))
}

pub async fn destroy(api: &Arc<Api>, id: &str) -> Result<Response<RespBody>, ApiError> {
    api.core.destroy(id).await?;
    let mut resp = Response::new(empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    Ok(resp)
}
