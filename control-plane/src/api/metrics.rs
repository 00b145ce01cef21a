//! `GET /metrics`: the API's side of [`crate::metrics`]. Here the router records every
//! operation once ([`record`], called by `super::handle` for every request) and the scrape is
//! answered ([`scrape`]), on the API listener behind the API token, or on the plain
//! `--metrics-addr` listener ([`serve_plain`]) for a scraper on a private network.
//!
//! An operation is named by its route ([`op_kind`], a fixed table mirroring `super::dispatch`):
//! the name, never a computer id, bot id or path, is the `op` label. A route added to the
//! router without a line here is counted as `other`.

use super::body::{full, RespBody};
use crate::core::Core;
use crate::metrics::{LateOutcome, Metrics, Outcome, Sample, CONTENT_TYPE};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::{header, Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tracing::{debug, info, warn};

/// The operation a request is, by its route: `None` for what is not an operation (health,
/// the guests' tunnel, the scrape itself, capability pages). Unknown routes under `/v1` are
/// `other` (they are answered 404 by the router, or are routes this table lacks).
pub fn op_kind(method: &Method, path: &str) -> Option<&'static str> {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    let m = method;
    let kind = match segments.as_slice() {
        ["v1", "health"] | ["v1", "openapi.json"] | ["v1", "tunnel"] | ["metrics"] => return None,
        ["v1", "computers"] if m == Method::POST => "computer.create",
        ["v1", "computers"] if m == Method::GET => "computer.list",
        ["v1", "computers", _] if m == Method::GET => "computer.show",
        ["v1", "computers", _] if m == Method::DELETE => "computer.destroy",
        ["v1", "computers", _, "stop"] if m == Method::POST => "computer.stop",
        ["v1", "computers", _, "start"] if m == Method::POST => "computer.start",
        ["v1", "computers", _, "exec"] if m == Method::POST => "exec",
        ["v1", "computers", _, "files"] if m == Method::GET => "files.list",
        ["v1", "computers", _, "files", "content"] if m == Method::GET => "files.read",
        ["v1", "computers", _, "files", "content"] if m == Method::PUT => "files.write",
        ["v1", "computers", _, "home"] if m == Method::GET => "home.show",
        ["v1", "computers", _, "home", "checkpoint"] if m == Method::POST => "home.checkpoint",
        ["v1", "computers", _, "home", "restore"] if m == Method::POST => "home.restore",
        ["v1", "computers", _, "home", "entries"] if m == Method::GET => "home.entries",
        ["v1", "computers", _, "home", "content"] if m == Method::GET => "home.content",
        ["v1", "homes", "reconcile"] if m == Method::POST => "homes.reconcile",
        ["v1", "homes", _] if m == Method::DELETE => "homes.purge",
        ["v1", "computers", _, "screens"] if m == Method::GET => "screen.list",
        ["v1", "computers", _, "screens", _, action] if m == Method::POST => match *action {
            "ensure" => "screen.ensure",
            "release" => "screen.release",
            "observe" => "screen.observe",
            "act" => "screen.act",
            "url" => "screen.url",
            "takeover" => "screen.takeover",
            "release-control" => "screen.release_control",
            _ => "other",
        },
        ["v1", "computers", _, "terminals", _, "url"] if m == Method::POST => "terminal.url",
        ["v1", "computers", _, "leases", _, "waiting_takeover"] if m == Method::POST => {
            "lease.waiting_takeover"
        }
        ["v1", "computers", _, "browser", _, action] if m == Method::POST => match *action {
            "navigate" => "browser.navigate",
            "snapshot" => "browser.snapshot",
            "act" => "browser.act",
            _ => "other",
        },
        ["v1", "computers", _, "leases", _] if m == Method::GET => "lease.show",
        ["v1", "computers", _, "leases", _, action] if m == Method::POST => match *action {
            "acquire" => "lease.acquire",
            "renew" => "lease.renew",
            "release" => "lease.release",
            _ => "other",
        },
        ["v1", "computers", _, "uploads", _] if m == Method::PUT => "files.upload",
        ["v1", "computers", _, "files", "attach"] if m == Method::POST => "files.attach",
        ["att", _] if m == Method::GET => "files.download",
        ["v1", "computers", _, "activity"] if m == Method::GET => "activity.history",
        ["v1", "computers", _, "activity", "stream"] if m == Method::GET => "activity.stream",
        ["v1", "computers", _, "update"] if m == Method::POST => "job.update",
        ["v1", "computers", _, "recover"] if m == Method::POST => "job.recover",
        ["v1", "computers", _, "jobs"] if m == Method::GET => "job.list",
        ["v1", "jobs", _] if m == Method::GET => "job.show",
        ["v1", "mcp", _, _] => "mcp",
        ["v1", "computers", _, "mcp-tokens", _] if m == Method::POST => "mcp.token",
        ["v1", "jobs", _, "release-interrupted"] if m == Method::POST => "job.release_interrupted",
        ["v1", ..] => "other",
        // Capability pages, their assets and anything outside /v1: not operations.
        _ => return None,
    };
    Some(kind)
}

/// Records the request's HTTP class now and, if it is an operation, the operation when its
/// response body ends: the outcome is `head` (the error the router answered), else the
/// stream's [`LateOutcome`] when the handler attached one, else the status. A request refused
/// for its API token is not an operation.
pub fn record(
    metrics: &Arc<Metrics>,
    op: Option<&'static str>,
    started: Instant,
    head: Option<Outcome>,
    mut resp: Response<RespBody>,
) -> Response<RespBody> {
    let status = resp.status().as_u16();
    metrics.http_request(status);
    let late = resp.extensions_mut().remove::<LateOutcome>();
    let Some(op) = op.filter(|_| status != 401) else {
        return resp;
    };
    let pending = Pending {
        metrics: metrics.clone(),
        op,
        outcome: head.unwrap_or_else(|| Outcome::of_status(status, false)),
        late,
        started,
        recorded: AtomicBool::new(false),
    };
    resp.map(|body| BodyExt::boxed(Recorded { body, pending }))
}

/// An operation waiting for its response to end.
struct Pending {
    metrics: Arc<Metrics>,
    op: &'static str,
    outcome: Outcome,
    late: Option<LateOutcome>,
    started: Instant,
    recorded: AtomicBool,
}

impl Pending {
    /// Records the operation, once: when the body ends (before hyper writes its last bytes, so
    /// a client that has read the whole answer finds it counted), or when the body is dropped
    /// unfinished (the client went away).
    fn record(&self, broken: bool) {
        if self.recorded.swap(true, Ordering::AcqRel) {
            return;
        }
        let outcome = match self.late.as_ref().and_then(LateOutcome::get) {
            Some(late) => late,
            // A stream that broke off without saying why: the computer's failure.
            None if broken => Outcome::Failed,
            None => self.outcome,
        };
        let took = crate::clock::monotonic().saturating_duration_since(self.started);
        self.metrics.operation(self.op, outcome, took);
    }
}

/// A response body that records its operation when it ends.
struct Recorded {
    body: RespBody,
    pending: Pending,
}

impl Body for Recorded {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.pending.record(false),
            Poll::Ready(Some(Err(_))) => self.pending.record(true),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        let end = self.body.is_end_stream();
        if end {
            self.pending.record(false);
        }
        end
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        self.pending.record(false);
    }
}

/// What the scrape reads from the modules that own the live state.
pub async fn sample(core: &Core) -> Sample {
    let (view, control, terminal) = core.live.streams.count_by_kind();
    Sample {
        connected_guests: core.registry.len() as u64,
        live_streams: vec![
            ("view", view as u64),
            ("control", control as u64),
            ("terminal", terminal as u64),
        ],
        // Maintenance jobs by kind and state, from the jobs table (every replica reports the
        // same figures: sum only one). A database that does not answer leaves the family out
        // of this scrape rather than failing it.
        jobs: match core.jobs.store.counts().await {
            Ok(counts) => counts,
            Err(e) => {
                warn!(error = %e, "metrics: cannot count maintenance jobs");
                Vec::new()
            }
        },
    }
}

/// The scrape's answer.
pub async fn scrape(core: &Core) -> Response<RespBody> {
    let text = core.metrics.encode(&sample(core).await);
    let mut resp = Response::new(full(Bytes::from(text)));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(CONTENT_TYPE),
    );
    resp
}

/// Connections the plain metrics listener serves at once; more wait in the kernel's backlog.
const PLAIN_MAX_CONNECTIONS: usize = 16;
/// How long a plain metrics connection may last, whatever it does.
const PLAIN_CONNECTION_LIFETIME: Duration = Duration::from_secs(30);

/// Serves `GET /metrics` without a token on `listener` (`--metrics-addr`): only the metrics,
/// nothing else of the API, a few connections at a time, each bounded in time.
pub async fn serve_plain(listener: TcpListener, core: Arc<Core>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(PLAIN_MAX_CONNECTIONS));
    if let Ok(addr) = listener.local_addr() {
        info!(metrics_addr = %addr, "metrics listening (no token: keep this address private)");
    }
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "metrics listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let core = core.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let core = core.clone();
                async move { Ok::<_, std::convert::Infallible>(plain(&core, &req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = tokio::time::timeout(PLAIN_CONNECTION_LIFETIME, conn).await {
                debug!(error = %e, "metrics connection closed at its time limit");
            }
        });
    }
}

async fn plain(core: &Core, req: &Request<Incoming>) -> Response<RespBody> {
    if req.method() == Method::GET && req.uri().path() == "/metrics" {
        return scrape(core).await;
    }
    let mut resp = Response::new(full(Bytes::from_static(
        b"only GET /metrics is served here\n",
    )));
    *resp.status_mut() = StatusCode::NOT_FOUND;
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_named_by_route_never_by_id() {
        let k = |m: Method, p: &str| op_kind(&m, p);
        assert_eq!(k(Method::POST, "/v1/computers/c-1/exec"), Some("exec"));
        assert_eq!(
            k(Method::PUT, "/v1/computers/c-1/files/content"),
            Some("files.write")
        );
        assert_eq!(
            k(Method::POST, "/v1/computers/c-9/screens/bot-7/takeover"),
            Some("screen.takeover")
        );
        assert_eq!(
            k(Method::POST, "/v1/computers/c-9/screens/bot-7/nonsense-123"),
            Some("other")
        );
        assert_eq!(k(Method::GET, "/v1/whatever/c-1"), Some("other"));
        assert_eq!(k(Method::GET, "/v1/health"), None);
        assert_eq!(k(Method::GET, "/metrics"), None);
        assert_eq!(k(Method::GET, "/cap/abc"), None);
        // Every name is one of a fixed set: no part of the path is ever returned.
        for path in [
            "/v1/computers/secret-id",
            "/v1/computers/secret-id/leases/secret-bot/secret-action",
            "/v1/homes/secret-key",
        ] {
            for m in [Method::GET, Method::POST, Method::DELETE, Method::PUT] {
                if let Some(kind) = k(m, path) {
                    assert!(!kind.contains("secret"), "{kind}");
                }
            }
        }
    }
}
