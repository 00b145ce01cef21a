//! `GET /metrics`: the API's side of [`crate::metrics`]. Here the router records every
//! operation once ([`record`], called by `super::handle` for every request) and the scrape is
//! answered ([`scrape`]), on the API listener behind the API token, or on the plain
//! `--metrics-addr` listener ([`serve_plain`]) for a scraper on a private network.
//!
//! An operation is named by its route ([`crate::route::Endpoint::name`], declared with the route
//! itself): the name, never a computer id, bot id or path, is the `op` label. A request under
//! `/v1` that is no route is counted as `other`. MCP's transport requests are not operations:
//! its tool calls are, recorded by the tools themselves (`mcp.<tool>`).

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
        egress: core.network_totals(),
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
        use crate::route::Route;
        let k = |m: Method, p: &str| Route::parse(&m, p).map(|r| r.endpoint().name());
        assert_eq!(k(Method::POST, "/v1/computers/c-1/exec"), Ok("exec"));
        assert_eq!(
            k(Method::PUT, "/v1/computers/c-1/files/content"),
            Ok("files.write")
        );
        assert_eq!(
            k(Method::POST, "/v1/computers/c-9/screens/bot-7/takeover"),
            Ok("screen.takeover")
        );
        assert!(k(Method::POST, "/v1/computers/c-9/screens/bot-7/nonsense-123").is_err());
        // Every name is one of a fixed set: no part of the path is ever returned.
        for path in [
            "/v1/computers/secret-id",
            "/v1/computers/secret-id/leases/secret-bot/secret-action",
            "/v1/computers/secret-id/leases/secret-bot/renew",
            "/v1/homes/secret-key",
        ] {
            for m in [Method::GET, Method::POST, Method::DELETE, Method::PUT] {
                if let Ok(kind) = k(m, path) {
                    assert!(!kind.contains("secret"), "{kind}");
                }
            }
        }
    }
}
