//! `POST /v1/computers/{id}/exec`: run a command, streaming stdin in and output out as NDJSON.
//!
//! The request is a JSON object (`application/json`), or, to stream stdin, the same object on
//! the first line followed by raw stdin bytes (`application/vnd.rakazo.exec-stream`). The response
//! is NDJSON: `started`, then `stdout`/`stderr` chunks as they come, then exactly one `exit` (or
//! an `error` that says whether the outcome is uncertain). When the client goes away, the command
//! is aborted (exit 130 on the guest).
//!
//! Without a `cwd`, a command runs in the home, except under a Team computer's bot's lease: then
//! in that bot's `bots/<bot-id>/` (created by the guest on first use, see [`start_dir`]).

use super::body::{read_json, ApiError, ChannelBody, RespBody, MAX_JSON_BODY};
use super::{bot_lease, Api};
use crate::activity::{CommandStart, ExecOutcome, Tail};
use crate::computers::ComputerKind;
use crate::guest::Exec;
use crate::metrics::{LateOutcome, Outcome};
use crate::schema::code::ApiCode;
use crate::schema::error::ErrorInfo;
use crate::schema::exec::{Chunk, ExecLine, ExecSpec};
use crate::tunnel::TunnelError;
use bytes::{Bytes, BytesMut};
use gateway_proto::{BotLease, ExecEvent, ExecRequest, StartDir};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{header, Response, StatusCode};
use std::sync::Arc;
use tokio::sync::mpsc;

/// Content type of a streamed-stdin exec request.
pub const EXEC_STREAM_CONTENT_TYPE: &str = "application/vnd.rakazo.exec-stream";
/// Longest timeout a caller may ask for: a day.
pub(super) const MAX_TIMEOUT_MS: u64 = 24 * 60 * 60 * 1000;

/// Where stdin comes from.
pub(super) enum Stdin {
    None,
    Text(Bytes),
    Stream(Incoming, Bytes),
}

async fn parse(req: hyper::Request<Incoming>) -> Result<(ExecSpec, Stdin), ApiError> {
    let streaming = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(EXEC_STREAM_CONTENT_TYPE));
    if !streaming {
        let body: ExecSpec = read_json(req.into_body()).await?;
        let stdin = match &body.stdin {
            Some(s) => Stdin::Text(Bytes::from(s.clone().into_bytes())),
            None => Stdin::None,
        };
        return Ok((body, stdin));
    }
    // Read up to the first newline (the spec); whatever follows is stdin.
    let mut body = req.into_body();
    let mut head = BytesMut::new();
    loop {
        if let Some(nl) = head.iter().position(|b| *b == b'\n') {
            let rest = head.split_off(nl + 1).freeze();
            super::body::check_object(&head[..nl])?;
            let spec: ExecSpec = serde_json::from_slice(&head[..nl])
                .map_err(|e| ApiError::bad_request(format!("invalid exec spec line: {e}")))?;
            if spec.stdin.is_some() {
                return Err(ApiError::bad_request(
                    "a streamed exec takes stdin from the body, not the spec",
                ));
            }
            return Ok((spec, Stdin::Stream(body, rest)));
        }
        if head.len() > MAX_JSON_BODY {
            return Err(super::body::too_large(MAX_JSON_BODY));
        }
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    head.extend_from_slice(&data);
                }
            }
            Some(Err(_)) => return Err(ApiError::bad_request("request body could not be read")),
            None => {
                return Err(ApiError::bad_request(
                    "streamed exec needs a spec line ending in a newline",
                ))
            }
        }
    }
}

pub async fn exec(
    api: &Arc<Api>,
    id: &str,
    req: hyper::Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let (body, stdin) = parse(req).await?;
    check(&body)?;
    let lease = bot_lease(body.bot.as_deref(), body.lease.as_deref())?;
    let (exec, record) = start(api, id, body, lease, !matches!(stdin, Stdin::None)).await?;
    let (tx, body) = ChannelBody::new(32);
    // What the stream reports after the 200 (a lost tunnel, a timeout) is the operation's
    // outcome in the metrics.
    let late = LateOutcome::default();
    let activity = api.core.activity.clone();
    let relay_late = late.clone();
    tokio::spawn(async move {
        let mut tail = Tail::default();
        let lines = Lines {
            out: tx,
            late: relay_late,
        };
        let pumped = pump(exec, stdin, lines, &mut tail).await;
        // The client has its answer (the pump dropped its sender): record now.
        activity.command(&record, pumped.outcome, Some(&tail)).await;
    });
    let mut resp = Response::new(body.boxed());
    resp.extensions_mut().insert(late);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/x-ndjson"),
    );
    *resp.status_mut() = StatusCode::OK;
    Ok(resp)
}

/// Refuses a spec out of bounds (no argv, a timeout out of range).
pub(super) fn check(body: &ExecSpec) -> Result<(), ApiError> {
    if body.argv.is_empty() {
        return Err(ApiError::bad_request("argv must not be empty"));
    }
    if let Some(ms) = body.timeout_ms {
        if ms == 0 || ms > MAX_TIMEOUT_MS {
            return Err(ApiError::bad_request(format!(
                "timeout_ms must be 1..={MAX_TIMEOUT_MS}"
            )));
        }
    }
    Ok(())
}

/// Starts a command [`check`]ed `body` under `lease` (its `bot` and `lease` fields are
/// the HTTP door's, already read into `lease`): starts it on the guest (with stdin to come
/// when `stdin`), and returns it with its feed record, which the caller writes once the command
/// ends; a command that fails to start is recorded here. The operation behind `POST …/exec`
/// and MCP's `shell`.
pub(super) async fn start(
    api: &Arc<Api>,
    id: &str,
    body: ExecSpec,
    lease: Option<BotLease>,
    stdin: bool,
) -> Result<(Exec, CommandStart), ApiError> {
    // Recorded in the feed once the command ends (or fails to start), redacted there; the env's
    // values are hidden wherever they appear.
    let bot = lease.as_ref().map(|l| l.bot.as_str());
    let record = CommandStart::exec(id, bot, &body.argv, body.env.values().cloned());
    // Without a cwd, a command under a Team bot's lease starts in that bot's directory.
    let start = match (&body.cwd, &lease) {
        (None, Some(_)) => start_dir(&api.core.get(id).await?.kind),
        _ => StartDir::Home,
    };
    let request = ExecRequest {
        argv: body.argv,
        cwd: body.cwd,
        env: body.env.into_iter().collect(),
        timeout_ms: body.timeout_ms,
        stdin,
        lease,
        start,
    };
    // The first event decides the status: a refusal (stale fence, bad request) is an HTTP error.
    let exec = match api.core.guest_for(id, &request).await {
        Ok(guest) => guest.exec(request).await.map_err(ApiError::from),
        // No such computer: no feed to record in.
        Err(e @ crate::core::CoreError::NotFound(_)) => return Err(e.into()),
        Err(e) => Err(ApiError::from(e)),
    };
    match exec {
        Ok(exec) => Ok((exec, record)),
        Err(e) => {
            let activity = api.core.activity.clone();
            let outcome = ExecOutcome {
                exit_code: None,
                error: Some(e.info().message),
                uncertain: e.uncertain,
            };
            tokio::spawn(async move { activity.command(&record, outcome, None).await });
            Err(e)
        }
    }
}

/// Where a bot of a computer of `kind` starts its commands and terminals when it names no
/// directory (docs/api.md#exec): a Team computer's bots in their own `bots/<bot-id>/`, a
/// Private computer's bot in the home, which is its own.
pub fn start_dir(kind: &ComputerKind) -> StartDir {
    match kind {
        ComputerKind::Team { .. } => StartDir::BotDir,
        ComputerKind::Private { .. } | ComputerKind::Pool { .. } => StartDir::Home,
    }
}

type Out = mpsc::Sender<Result<Bytes, std::io::Error>>;

fn line(value: &ExecLine) -> Bytes {
    let mut v = serde_json::to_vec(value).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

fn event_line(ev: &ExecEvent) -> Bytes {
    line(&match ev {
        ExecEvent::Started { pid } => ExecLine::Started { pid: *pid },
        ExecEvent::Stdout(b) => ExecLine::Stdout(Chunk::of(b)),
        ExecEvent::Stderr(b) => ExecLine::Stderr(Chunk::of(b)),
        ExecEvent::Exit { code, message } => ExecLine::Exit {
            code: *code,
            message: message.clone(),
        },
        ExecEvent::Failed(e) => ExecLine::Error(ErrorInfo {
            code: e.code.as_str().to_string(),
            message: e.message.clone(),
            uncertain: false,
        }),
    })
}

/// What the feed says of a command the client left before it ended.
pub(super) fn client_gone() -> ExecOutcome {
    ExecOutcome {
        exit_code: None,
        error: Some("the client went away: the command was aborted".to_string()),
        uncertain: false,
    }
}

/// What the feed records of the command's last event (none: still running).
pub(super) fn outcome_of(ev: &ExecEvent, tail: &mut Tail) -> Option<ExecOutcome> {
    match ev {
        ExecEvent::Stdout(b) | ExecEvent::Stderr(b) => {
            tail.push(b);
            None
        }
        ExecEvent::Started { .. } => None,
        ExecEvent::Exit { code, message } => Some(ExecOutcome {
            exit_code: Some(*code),
            error: message.clone(),
            uncertain: false,
        }),
        ExecEvent::Failed(e) => Some(ExecOutcome {
            exit_code: None,
            error: Some(e.message.clone()),
            uncertain: false,
        }),
    }
}

/// Where a running command's events go: the HTTP answer's NDJSON lines ([`Lines`]) or the
/// output MCP's `shell` gathers. The [`pump`] is the same for both.
pub(super) trait Sink: Send {
    /// Takes one event of the command; `false` when whoever reads them is gone.
    fn event(&mut self, ev: &ExecEvent) -> impl std::future::Future<Output = bool> + Send;
    /// The command's stream failed without an exit status: told once, last.
    fn failed(&mut self, e: &ApiError) -> impl std::future::Future<Output = ()> + Send;
    /// Resolves when whoever reads the events is gone (never, for one that stays).
    fn closed(&self) -> impl std::future::Future<Output = ()> + Send;
}

/// The HTTP answer: one NDJSON line per event, an `error` line for a failed stream. A failure
/// is the operation's outcome in the metrics (`late`), set before its line is sent, since the
/// metrics record when the body ends.
struct Lines {
    out: Out,
    late: LateOutcome,
}

impl Lines {
    fn fail(&self, e: &ApiError) {
        self.late
            .set(Outcome::of_status(e.status().as_u16(), e.uncertain));
    }
}

impl Sink for Lines {
    async fn event(&mut self, ev: &ExecEvent) -> bool {
        if let ExecEvent::Failed(e) = ev {
            self.fail(&TunnelError::Guest(e.clone()).into());
        }
        self.out.send(Ok(event_line(ev))).await.is_ok()
    }

    async fn failed(&mut self, e: &ApiError) {
        self.fail(e);
        let _ = self.out.send(Ok(line(&ExecLine::Error(e.info())))).await;
    }

    async fn closed(&self) {
        self.out.closed().await
    }
}

/// How a command's run ended.
pub(super) struct Pumped {
    /// What the feed records.
    pub outcome: ExecOutcome,
    /// The failure, when it did not exit: the guest's refusal (an event the sink was given) or
    /// the stream's loss (told to the sink with [`Sink::failed`]).
    pub failure: Option<ApiError>,
}

impl Pumped {
    fn done(outcome: ExecOutcome) -> Self {
        Pumped {
            outcome,
            failure: None,
        }
    }

    /// A failure, as the feed says it.
    fn failed(failure: ApiError) -> Self {
        Pumped {
            outcome: ExecOutcome {
                exit_code: None,
                error: Some(failure.message.clone()),
                uncertain: failure.uncertain,
            },
            failure: Some(failure),
        }
    }
}

/// Moves stdin to the guest and events to `sink` until the command ends or either side goes
/// away; keeps the output's tail. The one pump of a command's events, for every door.
pub(super) async fn pump(exec: Exec, stdin: Stdin, mut sink: impl Sink, tail: &mut Tail) -> Pumped {
    let Exec {
        first,
        stdin: mut stdin_tx,
        mut events,
    } = exec;
    let mut next = Some(first);
    // stdin source: a finished text, or the rest of the request body.
    let (mut body, mut pending) = match stdin {
        Stdin::None => (None, None),
        Stdin::Text(b) => (None, Some(b)),
        Stdin::Stream(body, rest) => (Some(body), Some(rest)),
    };
    let mut stdin_open = !matches!((&body, &pending), (None, None));
    loop {
        if let Some(ev) = next.take() {
            let last = outcome_of(&ev, tail);
            if !sink.event(&ev).await {
                stdin_tx.abort().await;
                return Pumped::done(last.unwrap_or_else(client_gone));
            }
            if let Some(done) = last {
                stdin_tx.finish();
                return match ev {
                    ExecEvent::Failed(e) => Pumped {
                        outcome: done,
                        failure: Some(TunnelError::Guest(e).into()),
                    },
                    _ => Pumped::done(done),
                };
            }
        }
        // After the first event, what stdin already holds goes to the guest.
        if let Some(bytes) = pending.take() {
            let _ = stdin_tx.write(&bytes).await;
            if body.is_none() {
                let _ = stdin_tx.close().await;
                stdin_open = false;
            }
        }
        tokio::select! {
            ev = events.next() => match ev {
                Ok(Some(ev)) => next = Some(ev),
                Ok(None) => {
                    let mut e = ApiError::new(
                        ApiCode::TunnelLost,
                        "the guest ended the command stream without an exit status; the \
                         outcome is uncertain",
                    );
                    e.uncertain = true;
                    sink.failed(&e).await;
                    return Pumped::failed(e);
                }
                Err(t) => {
                    let e: ApiError = t.into();
                    sink.failed(&e).await;
                    return Pumped::failed(e);
                }
            },
            frame = async { body.as_mut()?.frame().await }, if stdin_open && body.is_some() => match frame {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        let _ = stdin_tx.write(&data).await;
                    }
                }
                Some(Err(_)) => {
                    // The client's request stream broke: it is gone.
                    stdin_tx.abort().await;
                    body = None;
                    stdin_open = false;
                }
                None => {
                    let _ = stdin_tx.close().await;
                    body = None;
                    stdin_open = false;
                }
            },
            () = sink.closed() => {
                stdin_tx.abort().await;
                return Pumped::done(client_gone());
            }
        }
    }
}
