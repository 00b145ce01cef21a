//! An in-memory E2B for tests: the endpoints of E2B's public API the `e2b` adapter uses, and
//! the in-sandbox daemon (envd) behind one sandbox URL, routed by `E2b-Sandbox-Id` as E2B's own
//! sandbox proxy does.
//!
//! Shapes follow the published documents of e2b-dev/E2B (commit b8029973, 2026-08-21):
//! - `spec/openapi.yml`, "E2B API" version 0.1.0: `POST /sandboxes` (`NewSandbox`, 201
//!   `Sandbox`), `GET /sandboxes/{id}` (`SandboxDetail`), `DELETE /sandboxes/{id}` (204),
//!   `POST /sandboxes/{id}/pause` (`SandboxPauseRequest`, 204, 409 when paused),
//!   `POST /sandboxes/{id}/connect` (`ConnectSandbox`, 200 running, 201 resumed),
//!   `POST /sandboxes/{id}/timeout` (`SandboxTimeoutRequest`, 204), `POST
//!   /sandboxes/{id}/refreshes` (`SandboxRefreshRequest`, 204); errors are `Error`
//!   `{code, message}`; `X-API-Key` authenticates.
//! - `spec/envd/envd.yaml`, "envd" version 0.1.3: `POST /files` (multipart `file`, `path` and
//!   `username` in the query; 200 `[EntryInfo]`; 401 for an unknown user), `X-Access-Token`.
//! - `spec/envd/process/process.proto`: `process.Process/Start` (a Connect server stream of
//!   `StartResponse`), `List` and `SendSignal` (unary), JSON encoded.
//!
//! Request bodies are checked against those schemas: a property the document does not name, a
//! missing required one or a wrong type is a 400. Requests are refused exactly where the
//! documents say: a wrong API key (401), an unknown sandbox (404), a paused sandbox's envd
//! (502 from the proxy).
//!
//! A sandbox is a directory: its filesystem. Absolute paths a request names (file paths, the
//! command, its arguments, working directory and path-valued environment) are taken inside it;
//! a command that is not there is the host's (the sandbox's image is this host's own). Users
//! `root` (home `/root`) and `user` (`/home/user`) exist; processes all run as the test's user.
//! A sandbox's time to live is kept: when it runs out, the sandbox pauses (`autoPause`) or is
//! killed. Knobs: [`FakeE2b::kill`] and [`FakeE2b::pause`] act behind the adapter's back,
//! [`FakeE2b::fail_next`] injects error answers.

use crate::fake_service::{
    check, empty, end_processes, inside, json, multipart_part, serve, spawn, streamed, Body,
    Ledger, Proc, Req, Schema, Ty,
};
use base64::Engine;
use bytes::Bytes;
use hyper::Response;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::time::{Duration, Instant};

const I32: i64 = i32::MAX as i64;

const NEW_SANDBOX: Schema = Schema {
    name: "NewSandbox",
    required: &["templateID"],
    props: &[
        ("templateID", Ty::Str),
        ("timeout", Ty::Int(0, I32)),
        ("autoPause", Ty::Bool),
        ("autoPauseMemory", Ty::Bool),
        ("autoResume", Ty::Obj),
        ("secure", Ty::Bool),
        ("allow_internet_access", Ty::Bool),
        ("network", Ty::Obj),
        ("metadata", Ty::StrMap),
        ("envVars", Ty::StrMap),
        ("mcp", Ty::Obj),
        ("iam", Ty::Obj),
        ("volumeMounts", Ty::Arr),
    ],
};
const CONNECT_SANDBOX: Schema = Schema {
    name: "ConnectSandbox",
    required: &["timeout"],
    props: &[("timeout", Ty::Int(0, I32))],
};
const TIMEOUT_REQUEST: Schema = Schema {
    name: "SandboxTimeoutRequest",
    required: &["timeout"],
    props: &[("timeout", Ty::Int(0, I32))],
};
const REFRESH_REQUEST: Schema = Schema {
    name: "SandboxRefreshRequest",
    required: &[],
    props: &[("duration", Ty::Int(0, 3600))],
};
const PAUSE_REQUEST: Schema = Schema {
    name: "SandboxPauseRequest",
    required: &[],
    props: &[("memory", Ty::Bool)],
};
const START_REQUEST: Schema = Schema {
    name: "process.StartRequest",
    required: &["process"],
    props: &[
        ("process", Ty::Obj),
        ("pty", Ty::Obj),
        ("tag", Ty::Str),
        ("stdin", Ty::Bool),
    ],
};
const PROCESS_CONFIG: Schema = Schema {
    name: "process.ProcessConfig",
    required: &["cmd"],
    props: &[
        ("cmd", Ty::Str),
        ("args", Ty::Arr),
        ("envs", Ty::StrMap),
        ("cwd", Ty::Str),
    ],
};
const SIGNAL_REQUEST: Schema = Schema {
    name: "process.SendSignalRequest",
    required: &["process", "signal"],
    props: &[("process", Ty::Obj), ("signal", Ty::Str)],
};
const PROCESS_SELECTOR: Schema = Schema {
    name: "process.ProcessSelector",
    required: &[],
    props: &[("pid", Ty::Int(0, u32::MAX as i64)), ("tag", Ty::Str)],
};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Running,
    Paused,
}

struct Sandbox {
    template: String,
    access_token: String,
    metadata: Value,
    phase: Phase,
    auto_pause: bool,
    end_at: Instant,
    refreshes: usize,
    dir: PathBuf,
    procs: Vec<Proc>,
}

#[derive(Default)]
struct State {
    sandboxes: HashMap<String, Sandbox>,
    ledger: Ledger,
}

struct Shared {
    root: PathBuf,
    api_key: String,
    template: String,
    state: Mutex<State>,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running fake E2B: its API at `api_url`, every sandbox's envd at `sandbox_url`.
pub struct FakeE2b {
    pub api_url: String,
    pub sandbox_url: String,
    pub api_key: String,
    pub template: String,
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    _root: tempfile::TempDir,
}

fn error(code: u16, message: &str) -> Response<Body> {
    json(code, &json!({ "code": code, "message": message }))
}

/// A sandbox's filesystem path for `path` as `user` (relative to the user's home).
fn in_sandbox(dir: &Path, user: &str, path: &str) -> Option<PathBuf> {
    if path.starts_with('/') {
        inside(dir, path)
    } else {
        inside(dir, &format!("{}/{path}", user_home(user)))
    }
}

fn user_home(user: &str) -> String {
    if user == "root" {
        "/root".into()
    } else {
        format!("/home/{user}")
    }
}

impl FakeE2b {
    /// Starts the API and the sandbox URL on loopback, with a fresh API key and one template
    /// (`rakazo-computer`).
    pub async fn start() -> std::io::Result<Self> {
        // A short root: a guest's unix sockets live under its sandbox's tmp/.
        let root = tempfile::Builder::new().prefix("e2b").tempdir()?;
        let shared = Arc::new(Shared {
            root: root.path().to_path_buf(),
            api_key: format!("e2b_{}", hex::encode(rand::random::<[u8; 16]>())),
            template: "rakazo-computer".into(),
            state: Mutex::new(State::default()),
        });
        let s = shared.clone();
        let (api_url, api) = serve(move |req| {
            let s = s.clone();
            async move { api(&s, req).await }
        })
        .await?;
        let s = shared.clone();
        let (sandbox_url, envd) = serve(move |req| {
            let s = s.clone();
            async move { envd(&s, req).await }
        })
        .await?;
        let s = shared.clone();
        let ttl = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                expire(&s).await;
            }
        });
        Ok(Self {
            api_url,
            sandbox_url,
            api_key: shared.api_key.clone(),
            template: shared.template.clone(),
            shared,
            tasks: vec![api, envd, ttl],
            _root: root,
        })
    }

    /// The `rakazo serve` environment that points the e2b provider here. The fake cannot
    /// switch users, so guests stay the envd user (`RAKAZO_E2B_RUN_AS=none`).
    pub fn world_env(&self) -> Vec<(String, String)> {
        [
            ("RAKAZO_E2B_API_URL", self.api_url.as_str()),
            ("RAKAZO_E2B_SANDBOX_URL", self.sandbox_url.as_str()),
            ("E2B_API_KEY", self.api_key.as_str()),
            ("RAKAZO_E2B_TEMPLATE", self.template.as_str()),
            ("RAKAZO_E2B_RUN_AS", "none"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// The sandboxes (running or paused) whose metadata names `computer`.
    pub fn sandboxes_of(&self, computer: &str) -> Vec<String> {
        self.shared
            .state()
            .sandboxes
            .iter()
            .filter(|(_, s)| s.metadata["rakazo.computer"] == computer)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// `running` or `paused`; `None` for a sandbox E2B does not know.
    pub fn state_of(&self, id: &str) -> Option<&'static str> {
        self.shared
            .state()
            .sandboxes
            .get(id)
            .map(|s| match s.phase {
                Phase::Running => "running",
                Phase::Paused => "paused",
            })
    }

    /// How often the sandbox's timeout was set again.
    pub fn refreshes(&self, id: &str) -> usize {
        self.shared
            .state()
            .sandboxes
            .get(id)
            .map_or(0, |s| s.refreshes)
    }

    /// The filesystem directory of a sandbox.
    pub fn dir_of(&self, id: &str) -> Option<PathBuf> {
        self.shared.state().sandboxes.get(id).map(|s| s.dir.clone())
    }

    /// `METHOD /path` of every API and envd request so far.
    pub fn requests(&self) -> Vec<String> {
        self.shared.state().ledger.requests.clone()
    }

    /// Makes the next request `method` to a path starting with `path` fail with `status`.
    pub fn fail_next(&self, method: &str, path: &str, status: u16, message: &str) {
        self.shared.state().ledger.faults.push_back((
            method.into(),
            path.into(),
            status,
            message.into(),
        ));
    }

    /// E2B loses the sandbox: its processes end, its files go, the API no longer knows it.
    pub async fn kill(&self, id: &str) {
        let gone = self.shared.state().sandboxes.remove(id);
        if let Some(sb) = gone {
            discard(sb).await;
        }
    }

    /// The sandbox pauses behind the adapter's back (as a lapsed timeout with `autoPause`
    /// does): its processes end, its files stay.
    pub async fn pause(&self, id: &str) {
        let procs = {
            let mut st = self.shared.state();
            let Some(sb) = st.sandboxes.get_mut(id) else {
                return;
            };
            sb.phase = Phase::Paused;
            (std::mem::take(&mut sb.procs), sb.dir.clone())
        };
        halt(procs.0, procs.1).await;
    }
}

impl Drop for FakeE2b {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        let sandboxes: Vec<Sandbox> = self
            .shared
            .state()
            .sandboxes
            .drain()
            .map(|(_, s)| s)
            .collect();
        for sb in sandboxes {
            end_processes(&sb.procs, &sb.dir);
        }
    }
}

/// Ends a sandbox's processes and clears its tmp (a filesystem-only pause reboots it).
async fn halt(procs: Vec<Proc>, dir: PathBuf) {
    let _ = tokio::task::spawn_blocking(move || {
        end_processes(&procs, &dir);
        let _ = std::fs::remove_dir_all(dir.join("tmp"));
        let _ = std::fs::create_dir_all(dir.join("tmp"));
    })
    .await;
}

/// Ends a sandbox's processes and removes its files.
async fn discard(sb: Sandbox) {
    let _ = tokio::task::spawn_blocking(move || {
        end_processes(&sb.procs, &sb.dir);
        let _ = std::fs::remove_dir_all(&sb.dir);
    })
    .await;
}

/// Pauses or kills the sandboxes whose time ran out.
async fn expire(s: &Shared) {
    let now = Instant::now();
    let mut paused = Vec::new();
    let mut killed = Vec::new();
    {
        let mut st = s.state();
        let ids: Vec<String> = st
            .sandboxes
            .iter()
            .filter(|(_, sb)| sb.phase == Phase::Running && sb.end_at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            if st.sandboxes[&id].auto_pause {
                let sb = st.sandboxes.get_mut(&id).expect("listed");
                sb.phase = Phase::Paused;
                paused.push((std::mem::take(&mut sb.procs), sb.dir.clone()));
            } else if let Some(sb) = st.sandboxes.remove(&id) {
                killed.push(sb);
            }
        }
    }
    for (procs, dir) in paused {
        halt(procs, dir).await;
    }
    for sb in killed {
        discard(sb).await;
    }
}

fn body_json(req: &Req, schema: &Schema, optional: bool) -> Result<Value, Box<Response<Body>>> {
    if optional && req.body.is_empty() {
        return Ok(json!({}));
    }
    let v: Value = serde_json::from_slice(&req.body)
        .map_err(|e| Box::new(error(400, &format!("request body is not JSON: {e}"))))?;
    check(schema, &v).map_err(|e| Box::new(error(400, &e)))?;
    Ok(v)
}

fn secs(v: &Value, key: &str) -> Duration {
    Duration::from_secs(v[key].as_u64().unwrap_or(15))
}

fn sandbox_json(id: &str, sb: &Sandbox) -> Value {
    json!({
        "templateID": sb.template,
        "sandboxID": id,
        "clientID": "fake",
        "envdVersion": "0.5.7",
        "envdAccessToken": sb.access_token,
        "domain": null,
    })
}

async fn api(s: &Shared, req: Req) -> Response<Body> {
    let fault = s.state().ledger.take(&req);
    if req.header("x-api-key") != Some(s.api_key.as_str()) {
        return error(401, "Invalid API key");
    }
    if let Some((status, message)) = fault {
        return error(status, &message);
    }
    let parts: Vec<&str> = req.path.trim_matches('/').split('/').collect();
    match (req.method.as_str(), parts.as_slice()) {
        ("POST", ["sandboxes"]) => create(s, &req),
        ("GET", ["sandboxes", id]) => {
            let st = s.state();
            match st.sandboxes.get(*id) {
                None => error(
                    404,
                    &format!("sandbox \"{id}\" doesn't exist or you don't have access to it"),
                ),
                Some(sb) => {
                    let mut v = sandbox_json(id, sb);
                    v["startedAt"] = "2026-01-01T00:00:00Z".into();
                    v["endAt"] = "2026-01-01T00:05:00Z".into();
                    v["cpuCount"] = 2.into();
                    v["memoryMB"] = 2048.into();
                    v["diskSizeMB"] = 10240.into();
                    v["metadata"] = sb.metadata.clone();
                    v["state"] = if sb.phase == Phase::Running {
                        "running"
                    } else {
                        "paused"
                    }
                    .into();
                    json(200, &v)
                }
            }
        }
        ("DELETE", ["sandboxes", id]) => {
            let gone = s.state().sandboxes.remove(*id);
            match gone {
                None => error(404, &format!("sandbox \"{id}\" not found")),
                Some(sb) => {
                    discard(sb).await;
                    empty(204)
                }
            }
        }
        ("POST", ["sandboxes", id, "pause"]) => {
            if let Err(r) = body_json(&req, &PAUSE_REQUEST, true) {
                return *r;
            }
            let halted = {
                let mut st = s.state();
                match st.sandboxes.get_mut(*id) {
                    None => return error(404, &format!("sandbox \"{id}\" not found")),
                    Some(sb) if sb.phase == Phase::Paused => {
                        return error(409, &format!("sandbox \"{id}\" is already paused"))
                    }
                    Some(sb) => {
                        sb.phase = Phase::Paused;
                        (std::mem::take(&mut sb.procs), sb.dir.clone())
                    }
                }
            };
            halt(halted.0, halted.1).await;
            empty(204)
        }
        ("POST", ["sandboxes", id, "connect"]) => {
            let v = match body_json(&req, &CONNECT_SANDBOX, false) {
                Ok(v) => v,
                Err(r) => return *r,
            };
            let mut st = s.state();
            let Some(sb) = st.sandboxes.get_mut(*id) else {
                return error(404, &format!("sandbox \"{id}\" not found"));
            };
            let resumed = sb.phase == Phase::Paused;
            sb.phase = Phase::Running;
            // Connect only ever extends the time to live.
            sb.end_at = sb.end_at.max(Instant::now() + secs(&v, "timeout"));
            json(if resumed { 201 } else { 200 }, &sandbox_json(id, sb))
        }
        ("POST", ["sandboxes", id, "timeout"]) => {
            let v = match body_json(&req, &TIMEOUT_REQUEST, false) {
                Ok(v) => v,
                Err(r) => return *r,
            };
            let mut st = s.state();
            match st.sandboxes.get_mut(*id) {
                Some(sb) if sb.phase == Phase::Running => {
                    sb.end_at = Instant::now() + secs(&v, "timeout");
                    sb.refreshes += 1;
                    empty(204)
                }
                _ => error(404, &format!("sandbox \"{id}\" is not running")),
            }
        }
        ("POST", ["sandboxes", id, "refreshes"]) => {
            let v = match body_json(&req, &REFRESH_REQUEST, true) {
                Ok(v) => v,
                Err(r) => return *r,
            };
            let mut st = s.state();
            match st.sandboxes.get_mut(*id) {
                Some(sb) if sb.phase == Phase::Running => {
                    sb.end_at = sb.end_at.max(Instant::now() + secs(&v, "duration"));
                    sb.refreshes += 1;
                    empty(204)
                }
                _ => error(404, &format!("sandbox \"{id}\" is not running")),
            }
        }
        _ => error(404, "no such endpoint"),
    }
}

fn create(s: &Shared, req: &Req) -> Response<Body> {
    let v = match body_json(req, &NEW_SANDBOX, false) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    if v["templateID"] != s.template.as_str() {
        return error(
            404,
            &format!(
                "template '{}' not found",
                v["templateID"].as_str().unwrap_or("")
            ),
        );
    }
    let id = hex::encode(rand::random::<[u8; 6]>());
    let dir = s.root.join(&id);
    for d in ["root", "home/user", "tmp"] {
        if let Err(e) = std::fs::create_dir_all(dir.join(d)) {
            return error(500, &format!("cannot make the sandbox: {e}"));
        }
    }
    let timeout = secs(&v, "timeout");
    let sb = Sandbox {
        template: s.template.clone(),
        access_token: hex::encode(rand::random::<[u8; 16]>()),
        metadata: v.get("metadata").cloned().unwrap_or_else(|| json!({})),
        phase: Phase::Running,
        auto_pause: v["autoPause"].as_bool().unwrap_or(false),
        end_at: Instant::now() + timeout,
        refreshes: 0,
        dir,
        procs: Vec::new(),
    };
    let answer = sandbox_json(&id, &sb);
    s.state().sandboxes.insert(id, sb);
    json(201, &answer)
}

/// The user of an envd request (`Authorization: Basic <user>:`).
fn envd_user(req: &Req) -> Result<String, Box<Response<Body>>> {
    let user = req
        .header("authorization")
        .and_then(|h| h.strip_prefix("Basic "))
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| s.split_once(':').map(|(u, _)| u.to_string()))
        .ok_or_else(|| Box::new(error(401, "missing or malformed Authorization header")))?;
    if user == "root" || user == "user" {
        Ok(user)
    } else {
        Err(Box::new(error(
            401,
            &format!("error looking up user '{user}': user: unknown user {user}"),
        )))
    }
}

/// A Connect error answer of a unary call.
fn connect_error(status: u16, code: &str, message: &str) -> Response<Body> {
    json(status, &json!({ "code": code, "message": message }))
}

fn envelope(flags: u8, v: &Value) -> Bytes {
    let m = v.to_string();
    let mut out = vec![flags];
    out.extend_from_slice(&(m.len() as u32).to_be_bytes());
    out.extend_from_slice(m.as_bytes());
    Bytes::from(out)
}

async fn envd(s: &Shared, req: Req) -> Response<Body> {
    let fault = s.state().ledger.take(&req);
    let Some(id) = req.header("e2b-sandbox-id").map(str::to_string) else {
        return error(400, "missing E2b-Sandbox-Id");
    };
    if req.header("e2b-sandbox-port") != Some("49983") {
        return error(502, "The sandbox port is not open");
    }
    let (dir, token) = {
        let st = s.state();
        match st.sandboxes.get(&id) {
            Some(sb) if sb.phase == Phase::Running => (sb.dir.clone(), sb.access_token.clone()),
            _ => {
                return json(
                    502,
                    &json!({ "sandboxId": id, "message": "The sandbox was not found", "code": 502 }),
                )
            }
        }
    };
    if req.header("x-access-token") != Some(token.as_str()) {
        return error(
            401,
            "unauthorized access, please provide a valid access token",
        );
    }
    if let Some((status, message)) = fault {
        return error(status, &message);
    }
    let user = match envd_user(&req) {
        Ok(u) => u,
        Err(r) => return *r,
    };
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/health") => empty(204),
        ("POST", "/files") => upload(&req, &dir, &user),
        ("POST", "/process.Process/Start") => start(s, &req, &id, &dir, &user),
        ("POST", "/process.Process/List") => {
            let st = s.state();
            let procs: Vec<Value> = st.sandboxes[&id]
                .procs
                .iter()
                .filter(|p| p.running())
                .map(|p| {
                    let mut v = json!({ "config": { "cmd": "" }, "pid": p.pid });
                    if let Some(t) = &p.tag {
                        v["tag"] = t.as_str().into();
                    }
                    v
                })
                .collect();
            json(200, &json!({ "processes": procs }))
        }
        ("POST", "/process.Process/SendSignal") => signal(s, &req, &id),
        _ => error(404, "no such endpoint"),
    }
}

fn upload(req: &Req, dir: &Path, user: &str) -> Response<Body> {
    let Some(path) = req.query.get("path") else {
        return error(400, "the path query parameter is required");
    };
    let Some(target) = in_sandbox(dir, user, path) else {
        return error(400, &format!("path '{path}' is invalid"));
    };
    let Some(content) = multipart_part(req, "file") else {
        return error(400, "the body holds no multipart part named file");
    };
    if target.is_dir() {
        return error(400, &format!("path '{path}' is a directory"));
    }
    let written = target
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&target, &content))
        .and_then(|()| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644))
        });
    if let Err(e) = written {
        return error(500, &format!("error writing '{path}': {e}"));
    }
    let shown = target
        .strip_prefix(dir)
        .map_or(path.clone(), |p| format!("/{}", p.display()));
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    json(
        200,
        &json!([{ "path": shown, "name": name, "type": "file" }]),
    )
}

/// `value` as the sandbox sees it → this host: an absolute path (not a list like `PATH`) is
/// taken inside the sandbox.
fn map_value(dir: &Path, value: &str) -> String {
    if value.starts_with('/') && !value.contains(':') {
        inside(dir, value).map_or(value.to_string(), |p| p.display().to_string())
    } else {
        value.to_string()
    }
}

fn start(s: &Shared, req: &Req, id: &str, dir: &Path, user: &str) -> Response<Body> {
    if req.header("content-type") != Some("application/connect+json") {
        return connect_error(415, "invalid_argument", "expected application/connect+json");
    }
    let b = &req.body;
    let len = b
        .get(1..5)
        .map(|l| u32::from_be_bytes([l[0], l[1], l[2], l[3]]) as usize);
    let Some(message) = len.and_then(|n| b.get(5..5 + n)) else {
        return connect_error(400, "invalid_argument", "malformed envelope");
    };
    let v: Value = match serde_json::from_slice(message) {
        Ok(v) => v,
        Err(e) => return connect_error(400, "invalid_argument", &e.to_string()),
    };
    if let Err(e) = check(&START_REQUEST, &v).and_then(|()| check(&PROCESS_CONFIG, &v["process"])) {
        return connect_error(400, "invalid_argument", &e);
    }
    let p = &v["process"];
    let cmd = p["cmd"].as_str().unwrap_or("");
    let in_box = inside(dir, cmd).filter(|p| cmd.starts_with('/') && p.exists());
    let cmd = in_box.unwrap_or_else(|| PathBuf::from(cmd));
    let args: Vec<String> = p["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|a| map_value(dir, a))
        .collect();
    let home = in_sandbox(dir, user, ".").unwrap_or_else(|| dir.to_path_buf());
    let mut env = vec![
        ("HOME".to_string(), home.display().to_string()),
        ("USER".to_string(), user.to_string()),
        ("TMPDIR".to_string(), dir.join("tmp").display().to_string()),
        (
            "PATH".to_string(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        ),
    ];
    for (k, val) in p["envs"].as_object().into_iter().flatten() {
        env.retain(|(e, _)| e != k);
        env.push((k.clone(), map_value(dir, val.as_str().unwrap_or(""))));
    }
    let cwd = p["cwd"]
        .as_str()
        .and_then(|c| in_sandbox(dir, user, c))
        .unwrap_or(home);
    let log = dir.with_extension("log");
    let tag = v["tag"].as_str().map(String::from);
    let proc = match spawn(&cmd, &args, &env, &cwd, &log, tag) {
        Ok(p) => p,
        Err(e) => {
            // envd answers a command it cannot start with an error in the stream.
            let (tx, rx) = tokio::sync::mpsc::channel(2);
            let _ = tx.try_send(envelope(
                2,
                &json!({ "error": { "code": "unknown", "message": format!("error starting process: {e}") } }),
            ));
            return streamed(200, "application/connect+json", rx);
        }
    };
    let pid = proc.pid;
    let mut exit = proc.exit.clone();
    {
        let mut st = s.state();
        match st.sandboxes.get_mut(id) {
            Some(sb) => sb.procs.push(proc),
            None => return connect_error(404, "not_found", "sandbox gone"),
        }
    }
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tokio::spawn(async move {
        let start = json!({ "event": { "start": { "pid": pid } } });
        if tx.send(envelope(0, &start)).await.is_err() {
            return;
        }
        // Until the process ends or the client goes (the process runs on without it).
        let code = tokio::select! {
            r = exit.wait_for(Option::is_some) => r.ok().and_then(|c| *c),
            () = tx.closed() => return,
        };
        let code = code.unwrap_or(-1);
        let mut end = json!({ "exited": true, "status": format!("exit status {code}") });
        if code != 0 {
            end["exitCode"] = code.into();
        }
        let _ = tx
            .send(envelope(0, &json!({ "event": { "end": end } })))
            .await;
        let _ = tx.send(envelope(2, &json!({}))).await;
    });
    streamed(200, "application/connect+json", rx)
}

fn signal(s: &Shared, req: &Req, id: &str) -> Response<Body> {
    let v: Value = match serde_json::from_slice(&req.body) {
        Ok(v) => v,
        Err(e) => return connect_error(400, "invalid_argument", &e.to_string()),
    };
    if let Err(e) =
        check(&SIGNAL_REQUEST, &v).and_then(|()| check(&PROCESS_SELECTOR, &v["process"]))
    {
        return connect_error(400, "invalid_argument", &e);
    }
    let sig = match v["signal"].as_str() {
        Some("SIGNAL_SIGTERM") => nix::sys::signal::Signal::SIGTERM,
        Some("SIGNAL_SIGKILL") => nix::sys::signal::Signal::SIGKILL,
        other => {
            return connect_error(
                400,
                "invalid_argument",
                &format!("unknown signal {other:?}"),
            )
        }
    };
    let st = s.state();
    let target = st.sandboxes[id].procs.iter().find(|p| {
        p.running()
            && (v["process"]["tag"]
                .as_str()
                .is_some_and(|t| p.tag.as_deref() == Some(t))
                || v["process"]["pid"].as_i64() == Some(i64::from(p.pid)))
    });
    match target {
        Some(p) => {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p.pid), sig);
            json(200, &json!({}))
        }
        None => connect_error(404, "not_found", "process not found"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_paths_resolve_against_the_users_home() {
        let d = Path::new("/tmp/sb");
        assert_eq!(
            in_sandbox(d, "user", "a/b"),
            Some(PathBuf::from("/tmp/sb/home/user/a/b"))
        );
        assert_eq!(
            in_sandbox(d, "root", "/etc/x"),
            Some(PathBuf::from("/tmp/sb/etc/x"))
        );
        assert_eq!(
            in_sandbox(d, "root", "x"),
            Some(PathBuf::from("/tmp/sb/root/x"))
        );
        assert_eq!(
            map_value(d, "/usr/local/sbin:/usr/bin"),
            "/usr/local/sbin:/usr/bin"
        );
        assert_eq!(map_value(d, "/etc/rakazo/t"), "/tmp/sb/etc/rakazo/t");
        assert_eq!(map_value(d, "info"), "info");
    }
}
