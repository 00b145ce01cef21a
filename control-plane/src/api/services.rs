//! `/v1/computers/{id}/services` (docs/api.md#services): set, list and delete services, and
//! start them again whenever their computer boots ([`spawn_on_boot`]).

use super::body::{json_response, read_json};
use super::processes::{start_spec, view};
use super::{Api, ApiError, RespBody};
use crate::clock::now_ms;
use crate::computers::ComputerState;
use crate::schema::code::ApiCode;
use crate::schema::exec::ExecSpec;
use crate::schema::service::{Service, ServiceList, SetService};
use crate::services::{ServiceError, ServiceRow};
use gateway_proto::process::{ProcInfo, ProcKill, ProcList};
use hyper::body::Incoming;
use hyper::{Response, StatusCode};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;
use tracing::{info, warn};

/// Most arguments, and bytes of them all, a service's command line has.
const MAX_ARGS: usize = 256;
const MAX_ARGV_BYTES: usize = 64 << 10;

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::Bad(m) => ApiError::bad_request(m),
            ServiceError::NotFound(_) => ApiError::new(ApiCode::NotFound, e.to_string()),
            ServiceError::TooMany => ApiError::new(ApiCode::TooManyServices, e.to_string()),
            ServiceError::Db(e) => ApiError::db(&e),
        }
    }
}

fn shown(r: &ServiceRow, process: Option<ProcInfo>) -> Service {
    Service {
        name: r.name.clone(),
        argv: r.argv.clone(),
        cwd: r.cwd.clone(),
        created_at_ms: r.created_at_ms,
        process: process.map(view),
    }
}

/// Starts `r`'s process now and records it.
async fn start(api: &Arc<Api>, r: &ServiceRow) -> Result<ProcInfo, ApiError> {
    let spec = ExecSpec {
        argv: r.argv.clone(),
        cwd: r.cwd.clone(),
        env: BTreeMap::new(),
        timeout_ms: None,
        stdin: None,
        bot: None,
        lease: None,
    };
    let info = start_spec(api, &r.computer, spec).await?;
    api.core
        .services
        .started(&r.computer, &r.name, info.id)
        .await
        .map_err(ApiError::internal)?;
    Ok(info)
}

/// Ends `process` of computer `id` if it still runs (best effort: it may be gone).
async fn end(api: &Arc<Api>, id: &str, process: u32) {
    let req = ProcKill {
        id: process,
        signal: 15,
        lease: None,
    };
    if let Err(e) = api.core.call(id, req).await {
        info!(computer_id = %id, process, error = %e, "the service's old process was not signalled");
    }
}

/// `PUT …/services/{name}`.
pub async fn set(
    api: &Arc<Api>,
    id: &str,
    name: &str,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    crate::services::check_name(name)?;
    let body: SetService = read_json(req.into_body()).await?;
    if body.argv.is_empty() || body.argv[0].is_empty() {
        return Err(ApiError::bad_request("argv must name a program"));
    }
    if body.argv.len() > MAX_ARGS
        || body.argv.iter().map(String::len).sum::<usize>() > MAX_ARGV_BYTES
    {
        return Err(ApiError::bad_request(format!(
            "a service's command line is at most {MAX_ARGS} arguments and {MAX_ARGV_BYTES} bytes"
        )));
    }
    // A destroyed computer is a 404 from `get`.
    let c = api.core.get(id).await?;
    let (row, old) = api
        .core
        .services
        .set(id, name, &body.argv, body.cwd.as_deref(), now_ms())
        .await?;
    let mut process = None;
    if c.state == ComputerState::Running {
        if let Some(p) = old.and_then(|o| o.process) {
            end(api, id, p).await;
        }
        process = Some(start(api, &row).await?);
    }
    info!(computer_id = %id, service = %name, started = process.is_some(), "service set");
    Ok(json_response(StatusCode::OK, &shown(&row, process)))
}

/// `GET …/services`: each with its process as the computer reports it (none while stopped).
pub async fn list(api: &Arc<Api>, id: &str) -> Result<Response<RespBody>, ApiError> {
    let c = api.core.get(id).await?;
    let rows = api
        .core
        .services
        .list(id)
        .await
        .map_err(ApiError::internal)?;
    let procs = if c.state == ComputerState::Running && !rows.is_empty() {
        api.core.call(id, ProcList).await.unwrap_or_default()
    } else {
        Vec::new()
    };
    let services = rows
        .iter()
        .map(|r| {
            let p = r
                .process
                .and_then(|pid| procs.iter().find(|p| p.id == pid).cloned());
            shown(r, p)
        })
        .collect();
    Ok(json_response(StatusCode::OK, &ServiceList { services }))
}

/// `DELETE …/services/{name}`: removed, and its process ended if it runs.
pub async fn delete(api: &Arc<Api>, id: &str, name: &str) -> Result<Response<RespBody>, ApiError> {
    let c = api.core.get(id).await?;
    let row = api.core.services.remove(id, name).await?;
    if let (ComputerState::Running, Some(p)) = (c.state, row.process) {
        end(api, id, p).await;
    }
    info!(computer_id = %id, service = %name, "service removed");
    Ok(json_response(StatusCode::OK, &shown(&row, None)))
}

/// Starts every service of each computer this process boots, as soon as it is up.
pub fn spawn_on_boot(api: Arc<Api>) {
    let mut booted = api.core.booted.subscribe();
    tokio::spawn(async move {
        loop {
            let id = match booted.recv().await {
                Ok(id) => id,
                Err(RecvError::Lagged(n)) => {
                    warn!(
                        missed = n,
                        "services: boots were missed; their services start at the next"
                    );
                    continue;
                }
                Err(RecvError::Closed) => return,
            };
            let api = api.clone();
            tokio::spawn(async move { start_all(&api, &id).await });
        }
    });
}

async fn start_all(api: &Arc<Api>, id: &str) {
    let rows = match api.core.services.list(id).await {
        Ok(r) => r,
        Err(e) => {
            warn!(computer_id = %id, error = %e, "cannot read the computer's services");
            return;
        }
    };
    for r in rows {
        match start(api, &r).await {
            Ok(p) => {
                info!(computer_id = %id, service = %r.name, process = p.id, "service started with its computer")
            }
            Err(e) => {
                warn!(computer_id = %id, service = %r.name, error = %e.message, "a service could not start with its computer")
            }
        }
    }
}
