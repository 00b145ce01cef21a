//! A fault-injecting HTTP proxy in front of a real S3 server ([`crate::s3::S3Server`]): the
//! control plane's `RAKAZO_S3_ENDPOINT` points here, and the test scripts what the next
//! requests get: an HTTP error status (an S3 `InternalError` body), a connection reset (closed
//! before any answer), or a stall (held before it is forwarded, for a time or until the client
//! gives up). Everything not scripted is forwarded unchanged (the `Host` header too, so SigV4
//! signatures still verify), one upstream connection per request.

use anyhow::Result;
use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a scripted request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// An error answer with this status and an S3 error body.
    Status(u16),
    /// The connection is closed without an answer.
    Reset,
    /// Held this long, then forwarded (the client may give up first).
    Stall(Duration),
}

/// Which requests a rule applies to, and how many times (`None`: every one, until cleared).
#[derive(Debug, Clone)]
pub struct Rule {
    pub method: Option<Method>,
    /// A substring of the path (`/index/`, `/packs/`).
    pub path_contains: Option<String>,
    pub fault: Fault,
    pub times: Option<u32>,
}

impl Rule {
    /// The next `n` requests, whatever they are.
    pub fn next(n: u32, fault: Fault) -> Self {
        Self {
            method: None,
            path_contains: None,
            fault,
            times: Some(n),
        }
    }

    /// Every request of `method` whose path contains `path` (any method or path when `None`),
    /// until the rules are cleared.
    pub fn always(method: Option<Method>, path: Option<&str>, fault: Fault) -> Self {
        Self {
            method,
            path_contains: path.map(str::to_string),
            fault,
            times: None,
        }
    }

    fn matches(&self, method: &Method, path: &str) -> bool {
        self.times != Some(0)
            && self.method.as_ref().is_none_or(|m| m == method)
            && self
                .path_contains
                .as_deref()
                .is_none_or(|p| path.contains(p))
    }
}

#[derive(Default)]
struct State {
    rules: VecDeque<Rule>,
    /// Requests seen, and how many of them got a fault.
    requests: u64,
    injected: u64,
    /// `METHOD path -> what happened`, in order.
    log: Vec<String>,
}

/// The proxy; its task ends when this is dropped.
pub struct S3Fault {
    /// `http://127.0.0.1:<port>`: the endpoint to give the control plane.
    pub endpoint: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for S3Fault {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Body = BoxBody<Bytes, hyper::Error>;

impl S3Fault {
    /// Listens on a free loopback port, forwarding to `127.0.0.1:<upstream_port>`.
    pub async fn start(upstream_port: u16) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let state = Arc::new(Mutex::new(State::default()));
        let st = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let st = st.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        handle(st.clone(), upstream_port, req)
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self {
            endpoint,
            state,
            task,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a rule after the others; a request gets the first rule that matches it.
    pub fn push(&self, rule: Rule) {
        self.state().rules.push_back(rule);
    }

    /// Removes every rule: everything is forwarded again.
    pub fn clear(&self) {
        self.state().rules.clear();
    }

    /// Whether every counted rule has been used up (the faults it scripted all happened).
    pub fn spent(&self) -> bool {
        self.state()
            .rules
            .iter()
            .all(|r| r.times.is_none_or(|n| n == 0))
    }

    /// Requests seen so far, and how many got a fault.
    pub fn counts(&self) -> (u64, u64) {
        let s = self.state();
        (s.requests, s.injected)
    }

    /// The last `n` requests as `METHOD path -> outcome`.
    pub fn recent(&self, n: usize) -> Vec<String> {
        let s = self.state();
        s.log[s.log.len().saturating_sub(n)..].to_vec()
    }
}

/// The fault scripted for this request, if any (a counted rule is used up by one).
fn take_fault(state: &Mutex<State>, method: &Method, path: &str) -> Option<Fault> {
    let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
    s.requests += 1;
    let fault = s
        .rules
        .iter_mut()
        .find(|r| r.matches(method, path))
        .map(|r| {
            if let Some(n) = &mut r.times {
                *n -= 1;
            }
            r.fault
        });
    if fault.is_some() {
        s.injected += 1;
    }
    let what = match fault {
        Some(f) => format!("{f:?}"),
        None => "forwarded".into(),
    };
    s.log.push(format!("{method} {path} -> {what}"));
    fault
}

async fn handle(
    state: Arc<Mutex<State>>,
    upstream_port: u16,
    req: Request<Incoming>,
) -> Result<Response<Body>, std::io::Error> {
    let path = req.uri().path().to_string();
    match take_fault(&state, req.method(), &path) {
        Some(Fault::Status(code)) => {
            let body = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>InternalError</Code>\
                 <Message>injected by the test's proxy</Message><Resource>{path}</Resource>\
                 </Error>"
            );
            let mut resp = Response::new(full(body));
            *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY);
            resp.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/xml"),
            );
            return Ok(resp);
        }
        // An error from the service makes hyper drop the connection without an answer.
        Some(Fault::Reset) => return Err(std::io::Error::other("injected reset")),
        Some(Fault::Stall(d)) => tokio::time::sleep(d).await,
        None => {}
    }
    match forward(upstream_port, req).await {
        Ok(resp) => Ok(resp),
        Err(e) => {
            let mut resp = Response::new(full(format!("proxy: {e}")));
            *resp.status_mut() = StatusCode::BAD_GATEWAY;
            Ok(resp)
        }
    }
}

fn full(s: String) -> Body {
    Full::new(Bytes::from(s))
        .map_err(|never| match never {})
        .boxed()
}

/// Sends `req` as it is to the upstream server on a connection of its own.
async fn forward(upstream_port: u16, req: Request<Incoming>) -> Result<Response<Body>> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", upstream_port)).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let resp = sender.send_request(req).await?;
    Ok(resp.map(BodyExt::boxed))
}

/// Waits up to `within` for `proxy`'s counted rules to be used up.
pub async fn wait_spent(proxy: &S3Fault, within: Duration) -> Result<()> {
    crate::wait_for(within, "the scripted store faults", || {
        proxy.spent().then_some(())
    })
    .await
}
