//! What the in-memory fakes of sandbox services ([`crate::fake_e2b`], [`crate::fake_daytona`])
//! share: an HTTP server on loopback, request-shape checks against a service's published
//! schemas, injected failures, a request log, and sandboxes whose processes run for real on
//! this host (as the test's own user: no isolation).
//!
//! A fake sandbox is a directory; its processes get `HOME` inside it and `TMPDIR` at its
//! `tmp/`, so everything a guest makes (its runtime dir, X authority files, Chrome profiles)
//! stays inside. Stopping or losing a sandbox ends every process that names the directory in its
//! command line or environment: SIGTERM first, so desktops tear down cleanly, then SIGKILL.

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use tokio::sync::watch;

/// A response body: whole, or streamed (Connect server streams).
pub type Body = BoxBody<Bytes, Infallible>;

/// One request, read whole.
pub struct Req {
    pub method: Method,
    pub path: String,
    pub query: HashMap<String, String>,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Req {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// `METHOD /path`, as the request log records it.
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

/// A whole JSON response.
pub fn json(status: u16, v: &Value) -> Response<Body> {
    bytes(status, "application/json", Bytes::from(v.to_string()))
}

/// A response with `body` of `content_type`.
pub fn bytes(status: u16, content_type: &str, body: Bytes) -> Response<Body> {
    let mut r = Response::new(Full::new(body).boxed());
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

/// A response without a body.
pub fn empty(status: u16) -> Response<Body> {
    bytes(status, "text/plain", Bytes::new())
}

/// A streamed response fed from `rx`.
pub fn streamed(
    status: u16,
    content_type: &str,
    rx: tokio::sync::mpsc::Receiver<Bytes>,
) -> Response<Body> {
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    let mut r = Response::new(BodyExt::boxed(http_body_util::StreamBody::new(stream)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

/// Serves `handler` on 127.0.0.1 (port chosen by the kernel) until the returned task is
/// aborted; returns `http://127.0.0.1:<port>` and the task.
pub async fn serve<F, Fut>(handler: F) -> std::io::Result<(String, tokio::task::JoinHandle<()>)>
where
    F: Fn(Req) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let handler = Arc::new(handler);
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let handler = handler.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let handler = handler.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let req = Req {
                            method: parts.method,
                            path: parts.uri.path().to_string(),
                            query: crate::fixture::form_urlencoded(parts.uri.query().unwrap_or("")),
                            headers: parts.headers,
                            body,
                        };
                        Ok::<_, Infallible>(handler(req).await)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok((base, task))
}

/// The content of the part named `field` of a `multipart/form-data` request.
pub fn multipart_part(req: &Req, field: &str) -> Option<Bytes> {
    let ct = req.header("content-type")?;
    let boundary = ct
        .split(';')
        .find_map(|p| p.trim().strip_prefix("boundary="))?
        .trim_matches('"');
    let delim = format!("--{boundary}");
    let body = &req.body[..];
    let mut at = find(body, delim.as_bytes(), 0)?;
    loop {
        let start = at + delim.len();
        if body.get(start..start + 2) == Some(b"--") {
            return None;
        }
        let head_end = find(body, b"\r\n\r\n", start)?;
        let head = String::from_utf8_lossy(&body[start..head_end]);
        let next = find(body, format!("\r\n{delim}").as_bytes(), head_end + 4)?;
        if head.contains(&format!("name=\"{field}\"")) {
            return Some(Bytes::copy_from_slice(&body[head_end + 4..next]));
        }
        at = next + 2;
    }
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

/// A JSON type in a published schema.
#[derive(Clone, Copy)]
pub enum Ty {
    Str,
    Bool,
    /// An integer within bounds (`format: int32`, `minimum`, `maximum`).
    Int(i64, i64),
    Num,
    /// An object of string values (`additionalProperties: {type: string}`).
    StrMap,
    Obj,
    Arr,
}

/// The request schema of one operation, as its document publishes it.
pub struct Schema {
    pub name: &'static str,
    pub required: &'static [&'static str],
    pub props: &'static [(&'static str, Ty)],
}

/// Checks `v` against `schema`: an object, every required property there, no property the
/// schema does not name, every property of its type. The message names the property.
pub fn check(schema: &Schema, v: &Value) -> Result<(), String> {
    let Some(obj) = v.as_object() else {
        return Err(format!("{}: the body is not a JSON object", schema.name));
    };
    for r in schema.required {
        if !obj.contains_key(*r) {
            return Err(format!("{}: {r} is required", schema.name));
        }
    }
    for (k, val) in obj {
        let Some((_, ty)) = schema.props.iter().find(|(p, _)| p == k) else {
            return Err(format!("{}: unknown property {k}", schema.name));
        };
        let ok = match ty {
            Ty::Str => val.is_string(),
            Ty::Bool => val.is_boolean(),
            Ty::Int(lo, hi) => val.as_i64().is_some_and(|n| n >= *lo && n <= *hi),
            Ty::Num => val.is_number(),
            Ty::StrMap => val
                .as_object()
                .is_some_and(|m| m.values().all(Value::is_string)),
            Ty::Obj => val.is_object(),
            Ty::Arr => val.is_array(),
        };
        if !ok {
            return Err(format!(
                "{}: {k} has the wrong type or range: {val}",
                schema.name
            ));
        }
    }
    Ok(())
}

/// What every fake records and injects: the requests it saw and failures waiting to be
/// answered.
#[derive(Default)]
pub struct Recorder(std::sync::Mutex<Ledger>);

#[derive(Default)]
struct Ledger {
    /// `METHOD /path` of every request, in order.
    requests: Vec<String>,
    /// Injected failures: (method, path prefix, status, message), each used once.
    faults: VecDeque<(String, String, u16, String)>,
}

impl Recorder {
    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `req` and takes the first injected failure that matches it.
    pub fn take(&self, req: &Req) -> Option<(u16, String)> {
        let mut l = self.ledger();
        l.requests.push(req.line());
        let i = l.faults.iter().position(|(m, p, _, _)| {
            *m == req.method.as_str() && req.path.starts_with(p.as_str())
        })?;
        l.faults.remove(i).map(|(_, _, s, m)| (s, m))
    }
}

/// What a test does to any fake service.
pub trait Fake {
    fn recorder(&self) -> &Recorder;

    /// `METHOD /path` of every request the fake answered so far.
    fn requests(&self) -> Vec<String> {
        self.recorder().ledger().requests.clone()
    }

    /// Makes the next request `method` to a path starting with `path` fail with `status`.
    fn fail_next(&self, method: &str, path: &str, status: u16, message: &str) {
        self.recorder().ledger().faults.push_back((
            method.into(),
            path.into(),
            status,
            message.into(),
        ));
    }
}

/// [`serve`] with a handler of the fake's shared state `shared`.
pub async fn serve_shared<T, F, Fut>(
    shared: &Arc<T>,
    handler: F,
) -> std::io::Result<(String, tokio::task::JoinHandle<()>)>
where
    T: Send + Sync + 'static,
    F: Fn(Arc<T>, Req) -> Fut + Send + Sync + Copy + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let shared = shared.clone();
    serve(move |req| handler(shared.clone(), req)).await
}

/// The state every fake service shares between its servers: `St` is the service's own (its
/// sandboxes), beside its directory, its API key, the one image (template, snapshot) it knows
/// and its [`Recorder`].
pub struct Shared<St> {
    pub root: PathBuf,
    pub api_key: String,
    pub image: String,
    pub recorder: Recorder,
    state: std::sync::Mutex<St>,
}

impl<St: Default> Shared<St> {
    /// A fresh service under `root`, with an API key `<prefix>_<32 hex>` and the image
    /// `rakazo-computer`.
    pub fn new(root: &Path, key_prefix: &str) -> Arc<Self> {
        Arc::new(Self {
            root: root.to_path_buf(),
            api_key: format!("{key_prefix}_{}", hex::encode(rand::random::<[u8; 16]>())),
            image: "rakazo-computer".into(),
            recorder: Recorder::default(),
            state: std::sync::Mutex::new(St::default()),
        })
    }
}

impl<St> Shared<St> {
    pub fn state(&self) -> std::sync::MutexGuard<'_, St> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Ends a sandbox's processes (off the async threads: it waits for them), then removes its
/// files (`remove`) or only clears its `tmp/`, as a restart of the machine does.
pub async fn halt(procs: Vec<Proc>, dir: PathBuf, remove: bool) {
    let _ = tokio::task::spawn_blocking(move || {
        end_processes(&procs, &dir);
        let _ = std::fs::remove_dir_all(dir.join("tmp"));
        if remove {
            let _ = std::fs::remove_dir_all(&dir);
        } else {
            let _ = std::fs::create_dir_all(dir.join("tmp"));
        }
    })
    .await;
}

/// `(name, value)` pairs as owned strings (a `rakazo serve` environment).
pub fn env_pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A process a fake sandbox runs.
pub struct Proc {
    pub pid: i32,
    pub tag: Option<String>,
    /// Its exit code once it ended (`128 + signal` for a killed one).
    pub exit: watch::Receiver<Option<i32>>,
}

impl Proc {
    pub fn running(&self) -> bool {
        self.exit.borrow().is_none()
    }
}

/// Starts `cmd args` in `cwd` with exactly `env` (plus nothing of the test's), its output
/// appended to `log`, in its own process group; a thread reaps it and records its exit.
pub fn spawn(
    cmd: &Path,
    args: &[String],
    env: &[(String, String)],
    cwd: &Path,
    log: &Path,
    tag: Option<String>,
) -> std::io::Result<Proc> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let mut child = std::process::Command::new(cmd)
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .process_group(0)
        .spawn()?;
    let pid = child.id() as i32;
    let (tx, rx) = watch::channel(None);
    std::thread::spawn(move || {
        use std::os::unix::process::ExitStatusExt;
        let code = match child.wait() {
            Ok(s) => s.code().or(s.signal().map(|n| 128 + n)).unwrap_or(-1),
            Err(_) => -1,
        };
        let _ = tx.send(Some(code));
    });
    Ok(Proc { pid, tag, exit: rx })
}

/// `path` (absolute, without `..`) inside `root`; `None` for anything that would leave it.
pub fn inside(root: &Path, path: &str) -> Option<PathBuf> {
    let p = Path::new(path);
    if !p.is_absolute() {
        return None;
    }
    let mut out = root.to_path_buf();
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// Ends every process of a sandbox: the ones it started and whatever names `dir` in its
/// command line or environment (the guest's desktops, browsers and commands).
pub fn end_processes(procs: &[Proc], dir: &Path) {
    let needle = dir.display().to_string();
    let mut pids: Vec<i32> = procs
        .iter()
        .filter(|p| p.running())
        .map(|p| p.pid)
        .collect();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let mentions = |file: &str| {
            std::fs::read(format!("/proc/{pid}/{file}"))
                .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
        };
        if !pids.contains(&pid) && (mentions("cmdline") || mentions("environ")) {
            pids.push(pid);
        }
    }
    crate::term_then_kill(&pids, std::time::Duration::from_secs(10));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_sandbox() {
        let root = Path::new("/tmp/sb");
        assert_eq!(
            inside(root, "/etc/rakazo/t"),
            Some(PathBuf::from("/tmp/sb/etc/rakazo/t"))
        );
        assert_eq!(inside(root, "/a/../../x"), None);
        assert_eq!(inside(root, "relative"), None);
    }

    #[test]
    fn schemas_name_what_is_wrong() {
        const S: Schema = Schema {
            name: "NewSandbox",
            required: &["templateID"],
            props: &[
                ("templateID", Ty::Str),
                ("timeout", Ty::Int(0, i32::MAX as i64)),
            ],
        };
        assert!(check(&S, &serde_json::json!({ "templateID": "t", "timeout": 5 })).is_ok());
        let e = check(&S, &serde_json::json!({ "timeout": 5 })).unwrap_err();
        assert!(e.contains("templateID is required"), "{e}");
        let e = check(&S, &serde_json::json!({ "templateID": "t", "x": 1 })).unwrap_err();
        assert!(e.contains("unknown property x"), "{e}");
        let e = check(&S, &serde_json::json!({ "templateID": "t", "timeout": -1 })).unwrap_err();
        assert!(e.contains("timeout"), "{e}");
    }
}
