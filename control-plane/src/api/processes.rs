//! `/v1/computers/{id}/processes`: detached processes (docs/api.md#processes). Start (an
//! `ExecSpec`, fenced by its bot's lease like an exec), list, show, logs (NDJSON, optionally
//! followed), attach (stdin in the request body, output as the logs' NDJSON), kill.
//!
//! A start is a feed event (`process_start`); a watcher follows each process this server
//! started until it exits and records that (`process_exit`, with its output's tail). A guest
//! that reconnects still has its processes: the watcher follows on. When the guest goes away
//! for good first (the computer stopped, or its guest was replaced), the exit event says so: the
//! computer's processes end with its guest. A control plane that restarts records no exit of
//! the processes it watched.

use super::body::{json_response, read_json, ApiError, ChannelBody, RespBody};
use super::exec::{check, start_dir, Stdin};
use super::{bot_lease, Api};
use crate::activity::{CommandStart, ExecOutcome, Tail};
use crate::core::Core;
use crate::guest::ProcOutput;
use crate::schema::activity::CommandAction;
use crate::schema::code::ApiCode;
use crate::schema::exec::{Chunk, ExecSpec};
use crate::schema::process::{KillRequest, LogLine, Process, ProcessList, ProcessState};
use bytes::Bytes;
use gateway_proto::process::{
    ProcAttach, ProcEvent, ProcInfo, ProcKill, ProcList, ProcLogs, ProcStart,
};
use gateway_proto::{BotLease, ExecRequest, StartDir};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{header, Response, StatusCode};
use std::collections::HashMap;
use std::sync::Arc;

/// The API's view of a guest's process.
pub fn view(p: ProcInfo) -> Process {
    let (exit_code, exit_message) = match p.exit {
        Some(e) => (Some(e.code), e.message),
        None => (None, None),
    };
    Process {
        id: p.id,
        pid: p.pid,
        argv: p.argv,
        bot: p.bot.map(|b| b.as_str().to_string()),
        state: match exit_code {
            Some(_) => ProcessState::Exited,
            None => ProcessState::Running,
        },
        started_at_ms: p.started_ms,
        exited_at_ms: p.exited_ms,
        exit_code,
        exit_message,
        output_bytes: p.output_bytes,
        kept_from: p.kept_from,
    }
}

/// A signal's Linux number from its name (`TERM`, `SIGTERM`, `term`).
pub fn signal_number(name: &str) -> Option<i32> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    Some(match bare {
        "HUP" => 1,
        "INT" => 2,
        "QUIT" => 3,
        "KILL" => 9,
        "USR1" => 10,
        "USR2" => 12,
        "TERM" => 15,
        "CONT" => 18,
        "STOP" => 19,
        _ => return None,
    })
}

/// `POST …/processes`.
pub async fn start(
    api: &Arc<Api>,
    id: &str,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let body: ExecSpec = read_json(req.into_body()).await?;
    let info = start_spec(api, id, body).await?;
    Ok(json_response(StatusCode::CREATED, &view(info)))
}

/// Starts a detached process of `body` on `id`, records its start and watches for its exit:
/// the operation behind `POST …/processes` and MCP's `process_start`.
pub(super) async fn start_spec(
    api: &Arc<Api>,
    id: &str,
    body: ExecSpec,
) -> Result<ProcInfo, ApiError> {
    check(&body)?;
    if body.stdin.is_some() {
        return Err(ApiError::bad_request(
            "a detached process takes stdin through attach, not the spec",
        ));
    }
    let lease = bot_lease(body.bot.as_deref(), body.lease.as_deref())?;
    let bot = lease.as_ref().map(|l| l.bot.as_str().to_string());
    let secrets: Vec<String> = body.env.values().cloned().collect();
    let start = match (&body.cwd, &lease) {
        (None, Some(_)) => start_dir(&api.core.get(id).await?.kind),
        _ => StartDir::Home,
    };
    let line = crate::activity::shell_line(&body.argv);
    let request = ProcStart {
        command: ExecRequest {
            argv: body.argv,
            cwd: body.cwd,
            env: body.env.into_iter().collect(),
            timeout_ms: body.timeout_ms,
            stdin: true,
            lease,
            start,
        },
    };
    let info = api.core.call(id, request).await?;
    let record = |action| CommandStart {
        computer: id.to_string(),
        bot: bot.clone(),
        action,
        line: format!("[{}] {line}", info.id),
        secrets: secrets.clone(),
        started_ms: crate::clock::now_ms(),
    };
    let started = record(CommandAction::ProcessStart);
    let exited = record(CommandAction::ProcessExit);
    let core = api.core.clone();
    let (computer, watched) = (id.to_string(), info.clone());
    tokio::spawn(async move {
        core.activity.action(&started, Ok(None)).await;
        watch(core, computer, watched, exited).await;
    });
    Ok(info)
}

/// Follows process `info` until it exits and records its exit with its output's tail. When its
/// stream breaks, the guest is asked again (it may have reconnected, its processes running on):
/// the same process (same id, pid and start) is followed on from where the stream broke; a
/// computer that no longer runs, or a guest that no longer has it, ended it with its guest.
async fn watch(core: Arc<Core>, computer: String, info: ProcInfo, record: CommandStart) {
    let mut tail = Tail::default();
    let mut offset = 0;
    let outcome = loop {
        match follow_until_exit(&core, &computer, &info, &mut offset, &mut tail).await {
            Some(outcome) => break outcome,
            None if still_there(&core, &computer, &info).await => continue,
            None => break gone(),
        }
    };
    core.activity.command(&record, outcome, Some(&tail)).await;
}

/// Follows the process from `offset` until its exit; `None` when the stream broke first.
async fn follow_until_exit(
    core: &Core,
    computer: &str,
    info: &ProcInfo,
    offset: &mut u64,
    tail: &mut Tail,
) -> Option<ExecOutcome> {
    let req = ProcLogs {
        id: info.id,
        offset: Some(*offset),
        follow: true,
    };
    let guest = core.guest_for(computer, &req).await.ok()?;
    let mut out = guest.process_logs(req).await.ok()?;
    *offset = out.offset;
    loop {
        match out.events.next().await {
            Ok(Some(ProcEvent::Output { offset: at, data })) => {
                tail.push(&data);
                *offset = at + data.len() as u64;
            }
            Ok(Some(ProcEvent::Exit(e))) => {
                return Some(ExecOutcome {
                    exit_code: Some(e.code),
                    error: e.message,
                    uncertain: false,
                })
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return None,
        }
    }
}

/// Whether the computer's guest (once connected again, within the core's wait) still has the
/// process: the same id, pid and start.
async fn still_there(core: &Core, computer: &str, info: &ProcInfo) -> bool {
    let running = core.get(computer).await.map(|c| c.state);
    if !matches!(running, Ok(crate::computers::ComputerState::Running)) {
        return false;
    }
    match core.call(computer, ProcList).await {
        Ok(all) => all
            .iter()
            .any(|p| p.id == info.id && p.pid == info.pid && p.started_ms == info.started_ms),
        Err(_) => false,
    }
}

fn gone() -> ExecOutcome {
    ExecOutcome {
        exit_code: None,
        error: Some(
            "the computer's guest went away (the computer stopped or was lost): its processes \
             ended with it"
                .to_string(),
        ),
        uncertain: false,
    }
}

/// `GET …/processes`.
pub async fn list(api: &Arc<Api>, id: &str) -> Result<Response<RespBody>, ApiError> {
    let all = api.core.call(id, ProcList).await?;
    let processes = all.into_iter().map(view).collect();
    Ok(json_response(StatusCode::OK, &ProcessList { processes }))
}

/// `GET …/processes/{process}`.
pub async fn show(api: &Arc<Api>, id: &str, process: u32) -> Result<Response<RespBody>, ApiError> {
    let all = api.core.call(id, ProcList).await?;
    match all.into_iter().find(|p| p.id == process) {
        Some(p) => Ok(json_response(StatusCode::OK, &view(p))),
        None => Err(no_process(id, process)),
    }
}

fn no_process(id: &str, process: u32) -> ApiError {
    ApiError::not_found(format!("no process {process} on computer {id}"))
}

/// A guest's "no process" refusal, naming the computer.
fn named(id: &str, process: u32, e: ApiError) -> ApiError {
    if e.code == ApiCode::NotFound && e.message.starts_with("no process") {
        no_process(id, process)
    } else {
        e
    }
}

/// `POST …/processes/{process}/kill`.
pub async fn kill(
    api: &Arc<Api>,
    id: &str,
    process: u32,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let body: KillRequest = read_json(req.into_body()).await?;
    let lease = bot_lease(body.bot.as_deref(), body.lease.as_deref())?;
    let info = kill_signal(api, id, process, body.signal.as_deref(), lease).await?;
    Ok(json_response(StatusCode::OK, &view(info)))
}

/// Sends `signal` (default TERM) to process `process` of `id`, fenced by `lease` when it names
/// one (the guest refuses a lease that is no longer current before it signals anything).
pub(super) async fn kill_signal(
    api: &Arc<Api>,
    id: &str,
    process: u32,
    signal: Option<&str>,
    lease: Option<BotLease>,
) -> Result<ProcInfo, ApiError> {
    let name = signal.unwrap_or("TERM");
    let signal = signal_number(name).ok_or_else(|| {
        ApiError::bad_request(format!(
            "no signal {name:?}; use TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP or CONT"
        ))
    })?;
    let req = ProcKill {
        id: process,
        signal,
        lease,
    };
    api.core
        .call(id, req)
        .await
        .map_err(|e| named(id, process, e.into()))
}

/// The `offset` and `follow` of a logs request.
pub(super) fn log_query(query: &HashMap<String, String>) -> Result<(Option<u64>, bool), ApiError> {
    let offset = match query.get("offset") {
        None => None,
        Some(v) => Some(v.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!("offset must be a byte offset, got {v:?}"))
        })?),
    };
    let follow = match query.get("follow").map(String::as_str) {
        None | Some("false") | Some("0") => false,
        Some("true") | Some("1") | Some("") => true,
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "follow must be true or false, got {v:?}"
            )))
        }
    };
    Ok((offset, follow))
}

/// `GET …/processes/{process}/logs?offset=&follow=`.
pub async fn logs(
    api: &Arc<Api>,
    id: &str,
    process: u32,
    query: &HashMap<String, String>,
) -> Result<Response<RespBody>, ApiError> {
    let (offset, follow) = log_query(query)?;
    let req = ProcLogs {
        id: process,
        offset,
        follow,
    };
    let guest = api.core.guest_for(id, &req).await?;
    let out = guest
        .process_logs(req)
        .await
        .map_err(|e| named(id, process, e.into()))?;
    Ok(ndjson(out, Stdin::None))
}

/// `POST …/processes/{process}/attach?offset=`: the request body is the process's stdin.
pub async fn attach(
    api: &Arc<Api>,
    id: &str,
    process: u32,
    query: &HashMap<String, String>,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let (offset, _) = log_query(query)?;
    let request = ProcAttach {
        id: process,
        offset,
        lease: None,
    };
    let guest = api.core.guest_for(id, &request).await?;
    let out = guest
        .process_attach(request)
        .await
        .map_err(|e| named(id, process, e.into()))?;
    Ok(ndjson(out, Stdin::Stream(req.into_body(), Bytes::new())))
}

fn line(value: &LogLine) -> Bytes {
    let mut v = serde_json::to_vec(value).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

/// The NDJSON answer of an output stream, moving `stdin` (an attach's body) to the process.
fn ndjson(out: ProcOutput, stdin: Stdin) -> Response<RespBody> {
    let (tx, body) = ChannelBody::new(32);
    tokio::spawn(async move {
        let ProcOutput {
            offset,
            dropped,
            mut events,
            stdin: mut stdin_tx,
        } = out;
        if tx
            .send(Ok(line(&LogLine::Opened { offset, dropped })))
            .await
            .is_err()
        {
            return;
        }
        let mut body = match stdin {
            Stdin::Stream(body, _) => Some(body),
            _ => None,
        };
        loop {
            tokio::select! {
                ev = events.next() => {
                    let l = match ev {
                        Ok(Some(ProcEvent::Output { offset, data })) => LogLine::Output {
                            offset,
                            chunk: Chunk::of(&data),
                        },
                        Ok(Some(ProcEvent::Exit(e))) => LogLine::Exit {
                            code: e.code,
                            message: e.message,
                        },
                        Ok(Some(ProcEvent::Failed(e))) => {
                            let e: ApiError = crate::tunnel::TunnelError::Guest(e).into();
                            LogLine::Error(e.info())
                        }
                        Ok(Some(ProcEvent::Opened { .. })) => continue,
                        Ok(None) => break,
                        Err(e) => {
                            let e: ApiError = e.into();
                            let _ = tx.send(Ok(line(&LogLine::Error(e.info())))).await;
                            break;
                        }
                    };
                    let last = matches!(l, LogLine::Exit { .. } | LogLine::Error(_));
                    if tx.send(Ok(line(&l))).await.is_err() || last {
                        break;
                    }
                }
                frame = async { body.as_mut()?.frame().await }, if body.is_some() => match frame {
                    Some(Ok(frame)) => {
                        if let (Ok(data), Some(s)) = (frame.into_data(), stdin_tx.as_mut()) {
                            let _ = s.write(&data).await;
                        }
                    }
                    // The client closed its stdin (or its request broke): detach.
                    Some(Err(_)) | None => {
                        body = None;
                        if let Some(s) = stdin_tx.as_mut() {
                            s.detach();
                        }
                    }
                },
                () = tx.closed() => break,
            }
        }
        if let Some(s) = stdin_tx.as_mut() {
            s.detach();
        }
    });
    let mut resp = Response::new(body.boxed());
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/x-ndjson"),
    );
    *resp.status_mut() = StatusCode::OK;
    resp
}

/// What a logs read (without follow) gathered.
pub(super) struct Gathered {
    /// The offset of the first byte of `output`.
    pub offset: u64,
    pub dropped: u64,
    /// The last `max` bytes of what was read.
    pub output: Vec<u8>,
    /// The offset after the last byte read.
    pub end: u64,
    pub exit: Option<gateway_proto::process::ProcExit>,
}

/// Reads process `process`'s output kept from `offset`, keeping its last `max` bytes: MCP's
/// `process_logs`.
pub(super) async fn gather(
    api: &Arc<Api>,
    id: &str,
    process: u32,
    offset: Option<u64>,
    max: usize,
) -> Result<Gathered, ApiError> {
    let req = ProcLogs {
        id: process,
        offset,
        follow: false,
    };
    let guest = api.core.guest_for(id, &req).await?;
    let mut out = guest
        .process_logs(req)
        .await
        .map_err(|e| named(id, process, e.into()))?;
    let mut g = Gathered {
        offset: out.offset,
        dropped: out.dropped,
        output: Vec::new(),
        end: out.offset,
        exit: None,
    };
    while let Some(ev) = out.events.next().await.map_err(ApiError::from)? {
        match ev {
            ProcEvent::Output { offset, data } => {
                g.output.extend_from_slice(&data);
                g.end = offset + data.len() as u64;
                if g.output.len() > max {
                    let cut = g.output.len() - max;
                    g.output.drain(..cut);
                    g.offset = g.end - max as u64;
                }
            }
            ProcEvent::Exit(e) => g.exit = Some(e),
            ProcEvent::Failed(e) => return Err(crate::tunnel::TunnelError::Guest(e).into()),
            ProcEvent::Opened { .. } => {}
        }
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::{log_query, signal_number};
    use std::collections::HashMap;

    #[test]
    fn signals_are_named_as_kill_names_them() {
        for (name, n) in [("TERM", 15), ("SIGKILL", 9), ("int", 2), (" HUP ", 1)] {
            assert_eq!(signal_number(name), Some(n), "{name}");
        }
        for bad in ["", "SIG", "TERMINATE", "9", "SIGSEGV"] {
            assert_eq!(signal_number(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_logs_query_takes_an_offset_and_follow() {
        let q = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(log_query(&q(&[])).ok(), Some((None, false)));
        let asked = q(&[("offset", "12"), ("follow", "true")]);
        assert_eq!(log_query(&asked).ok(), Some((Some(12), true)));
        assert!(log_query(&q(&[("offset", "-1")])).is_err());
        assert!(log_query(&q(&[("follow", "maybe")])).is_err());
    }
}
