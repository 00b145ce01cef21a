//! An in-memory Daytona for tests: the endpoints of Daytona's public API the `daytona` adapter
//! uses, and each sandbox's toolbox behind the `toolboxProxyUrl` the API hands out.
//!
//! Shapes follow the published documents of daytonaio/daytona at tag v0.190.0 (the last public
//! one):
//! - `libs/api-client-go/api/openapi.yaml`, "Daytona" version 1.0: `POST /sandbox`
//!   (`CreateSandbox`, 200 `Sandbox`), `GET /sandbox/{id}` (`Sandbox`), `POST
//!   /sandbox/{id}/start`, `/stop`, `/recover` (200 `Sandbox`), `DELETE /sandbox/{id}` (200
//!   `Sandbox`); `Authorization: Bearer` authenticates; errors are NestJS's `{statusCode,
//!   message, error}`. Daytona changes states asynchronously: a created or started sandbox is
//!   `starting` until the next look, a stopped one `stopping`, a deleted one `destroying`.
//! - `apps/daemon/pkg/toolbox/docs/swagger.yaml`, "Daytona Toolbox API" v0.0.0-dev:
//!   `GET /user-home-dir` (`UserHomeDirResponse`), `POST /files/folder` (`path`, `mode`; 201),
//!   `POST /files/upload` (multipart `file`, `path`), `POST /files/permissions` (`path`,
//!   `mode`), `POST /process/session` (`CreateSessionRequest`, 201), `GET` and `DELETE
//!   /process/session/{id}` (`Session`), `POST /process/session/{id}/exec`
//!   (`SessionExecuteRequest`, 202 `SessionExecuteResponse` with `runAsync`).
//!
//! Request bodies are checked against those schemas (a property the document does not name, a
//! missing required one or a wrong type is a 400). A sandbox is a directory; its user's home is
//! reported as the host path of `home/daytona` inside it, so the adapter's paths are this
//! host's (anything outside the sandbox is refused). A session command runs for real as
//! `sh -c <command>`. Knobs: [`FakeDaytona::kill`], [`FakeDaytona::stop`] and
//! [`FakeDaytona::break_it`] act behind the adapter's back, [`FakeDaytona::fail_next`]
//! injects error answers.

use crate::fake_service::{
    self, check, empty, end_processes, env_pairs, halt, inside, json, multipart_part, serve_shared,
    spawn, Body, Fake, Proc, Recorder, Req, Schema, Ty,
};
use hyper::Response;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const I32: i64 = i32::MAX as i64;

const CREATE_SANDBOX: Schema = Schema {
    name: "CreateSandbox",
    required: &[],
    props: &[
        ("name", Ty::Str),
        ("snapshot", Ty::Str),
        ("user", Ty::Str),
        ("env", Ty::StrMap),
        ("labels", Ty::StrMap),
        ("public", Ty::Bool),
        ("networkBlockAll", Ty::Bool),
        ("networkAllowList", Ty::Str),
        ("domainAllowList", Ty::Str),
        ("target", Ty::Str),
        ("cpu", Ty::Int(0, I32)),
        ("gpu", Ty::Int(0, I32)),
        ("gpuType", Ty::Arr),
        ("memory", Ty::Int(0, I32)),
        ("disk", Ty::Int(0, I32)),
        ("autoStopInterval", Ty::Int(0, I32)),
        ("autoArchiveInterval", Ty::Int(0, I32)),
        ("autoDeleteInterval", Ty::Int(-I32, I32)),
        ("volumes", Ty::Arr),
        ("buildInfo", Ty::Obj),
        ("linkedSandbox", Ty::Str),
    ],
};
const CREATE_SESSION: Schema = Schema {
    name: "CreateSessionRequest",
    required: &["sessionId"],
    props: &[("sessionId", Ty::Str)],
};
const SESSION_EXECUTE: Schema = Schema {
    name: "SessionExecuteRequest",
    required: &["command"],
    props: &[
        ("async", Ty::Bool),
        ("command", Ty::Str),
        ("runAsync", Ty::Bool),
        ("suppressInputEcho", Ty::Bool),
    ],
};

/// A command of a session.
struct Command {
    id: String,
    command: String,
    proc: Proc,
}

struct Sandbox {
    state: &'static str,
    error_reason: Option<String>,
    recoverable: bool,
    request: Value,
    dir: PathBuf,
    sessions: HashMap<String, Vec<Command>>,
}

impl Sandbox {
    fn take_procs(&mut self) -> Vec<Proc> {
        self.sessions
            .drain()
            .flat_map(|(_, cmds)| cmds.into_iter().map(|c| c.proc))
            .collect()
    }
}

#[derive(Default)]
struct State {
    sandboxes: HashMap<String, Sandbox>,
    /// The `toolboxProxyUrl` sandboxes report.
    toolbox_url: String,
}

type Shared = fake_service::Shared<State>;

/// A running fake Daytona: its API at `api_url`, toolboxes under `toolbox_url`.
pub struct FakeDaytona {
    pub api_url: String,
    pub toolbox_url: String,
    pub api_key: String,
    pub snapshot: String,
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    _root: tempfile::TempDir,
}

fn error(status: u16, message: &str) -> Response<Body> {
    let reason = hyper::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error");
    json(
        status,
        &json!({ "statusCode": status, "message": message, "error": reason }),
    )
}

fn sandbox_json(toolbox_url: &str, id: &str, sb: &Sandbox) -> Value {
    let r = &sb.request;
    let mut v = json!({
        "id": id,
        "organizationId": "fake-org",
        "name": id,
        "snapshot": r["snapshot"],
        "user": "daytona",
        "env": r.get("env").cloned().unwrap_or_else(|| json!({})),
        "labels": r.get("labels").cloned().unwrap_or_else(|| json!({})),
        "public": r["public"].as_bool().unwrap_or(false),
        "networkBlockAll": r["networkBlockAll"].as_bool().unwrap_or(false),
        "target": r["target"].as_str().unwrap_or("us"),
        "cpu": r["cpu"].as_u64().unwrap_or(1),
        "gpu": 0,
        "memory": r["memory"].as_u64().unwrap_or(1),
        "disk": r["disk"].as_u64().unwrap_or(3),
        "state": sb.state,
        "recoverable": sb.recoverable,
        "toolboxProxyUrl": toolbox_url,
    });
    if let Some(list) = r.get("networkAllowList") {
        v["networkAllowList"] = list.clone();
    }
    if let Some(reason) = &sb.error_reason {
        v["errorReason"] = reason.as_str().into();
    }
    v
}

impl FakeDaytona {
    /// Starts the API and the toolbox proxy on loopback, with a fresh API key and one snapshot
    /// (`rakazo-computer`).
    pub async fn start() -> std::io::Result<Self> {
        let root = tempfile::Builder::new().prefix("dtn").tempdir()?;
        let shared = Shared::new(root.path(), "dtn");
        let (api_url, api_task) =
            serve_shared(&shared, |s, req| async move { api(&s, req).await }).await?;
        let (toolbox_base, toolbox_task) =
            serve_shared(&shared, |s, req| async move { toolbox(&s, req).await }).await?;
        let toolbox_url = format!("{toolbox_base}/toolbox");
        shared.state().toolbox_url = toolbox_url.clone();
        Ok(Self {
            api_url,
            toolbox_url,
            api_key: shared.api_key.clone(),
            snapshot: shared.image.clone(),
            shared,
            tasks: vec![api_task, toolbox_task],
            _root: root,
        })
    }

    /// The `rakazo serve` environment that points the daytona provider here.
    pub fn world_env(&self) -> Vec<(String, String)> {
        env_pairs(&[
            ("RAKAZO_DAYTONA_API_URL", &self.api_url),
            ("DAYTONA_API_KEY", &self.api_key),
            ("RAKAZO_DAYTONA_SNAPSHOT", &self.snapshot),
        ])
    }

    /// The sandboxes (in any state) whose labels name `computer`.
    pub fn sandboxes_of(&self, computer: &str) -> Vec<String> {
        self.shared
            .state()
            .sandboxes
            .iter()
            .filter(|(_, s)| s.request["labels"]["rakazo.computer"] == computer)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The sandbox's state; `None` for one Daytona does not know.
    pub fn state_of(&self, id: &str) -> Option<&'static str> {
        self.shared.state().sandboxes.get(id).map(|s| s.state)
    }

    /// The create request of a sandbox, as received.
    pub fn request_of(&self, id: &str) -> Option<Value> {
        self.shared
            .state()
            .sandboxes
            .get(id)
            .map(|s| s.request.clone())
    }

    /// Daytona loses the sandbox: its processes end, its files go, the API no longer knows it.
    pub async fn kill(&self, id: &str) {
        let gone = self.shared.state().sandboxes.remove(id);
        if let Some(mut sb) = gone {
            let procs = sb.take_procs();
            halt(procs, sb.dir.clone(), true).await;
        }
    }

    /// The sandbox stops behind the adapter's back (an operator, Daytona's own auto-stop).
    pub async fn stop(&self, id: &str) {
        self.set(id, "stopped", None, false).await;
    }

    /// The sandbox fails (`error`); `recoverable` says whether `recover` brings it back.
    pub async fn break_it(&self, id: &str, recoverable: bool) {
        self.set(
            id,
            "error",
            Some("the runner went away".into()),
            recoverable,
        )
        .await;
    }

    async fn set(&self, id: &str, state: &'static str, reason: Option<String>, recoverable: bool) {
        let halted = {
            let mut st = self.shared.state();
            let Some(sb) = st.sandboxes.get_mut(id) else {
                return;
            };
            sb.state = state;
            sb.error_reason = reason;
            sb.recoverable = recoverable;
            (sb.take_procs(), sb.dir.clone())
        };
        halt(halted.0, halted.1, false).await;
    }
}

impl Fake for FakeDaytona {
    fn recorder(&self) -> &Recorder {
        &self.shared.recorder
    }
}

impl Drop for FakeDaytona {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        let all: Vec<Sandbox> = self
            .shared
            .state()
            .sandboxes
            .drain()
            .map(|(_, s)| s)
            .collect();
        for mut sb in all {
            let procs = sb.take_procs();
            end_processes(&procs, &sb.dir);
        }
    }
}

fn body_json(req: &Req, schema: &Schema) -> Result<Value, Box<Response<Body>>> {
    let v: Value = serde_json::from_slice(&req.body)
        .map_err(|e| Box::new(error(400, &format!("request body is not JSON: {e}"))))?;
    check(schema, &v).map_err(|e| Box::new(error(400, &e)))?;
    Ok(v)
}

async fn api(s: &Shared, req: Req) -> Response<Body> {
    let fault = s.recorder.take(&req);
    if req.header("authorization") != Some(format!("Bearer {}", s.api_key).as_str()) {
        return error(401, "Unauthorized");
    }
    if let Some((status, message)) = fault {
        return error(status, &message);
    }
    let parts: Vec<&str> = req.path.trim_matches('/').split('/').collect();
    match (req.method.as_str(), parts.as_slice()) {
        ("POST", ["sandbox"]) => create(s, &req),
        ("GET", ["sandbox", id]) => {
            let mut st = s.state();
            let tb = st.toolbox_url.clone();
            let Some(sb) = st.sandboxes.get_mut(*id) else {
                return not_found(id);
            };
            // The asynchronous transitions finish by the next look.
            match sb.state {
                "starting" => sb.state = "started",
                "stopping" => sb.state = "stopped",
                "destroying" => {
                    st.sandboxes.remove(*id);
                    return not_found(id);
                }
                _ => {}
            }
            json(200, &sandbox_json(&tb, id, &st.sandboxes[*id]))
        }
        ("DELETE", ["sandbox", id]) => {
            let halted = {
                let mut st = s.state();
                let tb = st.toolbox_url.clone();
                let Some(sb) = st.sandboxes.get_mut(*id) else {
                    return not_found(id);
                };
                sb.state = "destroying";
                (sb.take_procs(), sb.dir.clone(), sandbox_json(&tb, id, sb))
            };
            halt(halted.0, halted.1, true).await;
            json(200, &halted.2)
        }
        ("POST", ["sandbox", id, action @ ("start" | "stop" | "recover")]) => {
            let halted = {
                let mut st = s.state();
                let tb = st.toolbox_url.clone();
                let Some(sb) = st.sandboxes.get_mut(*id) else {
                    return not_found(id);
                };
                let allowed = match *action {
                    "start" => matches!(sb.state, "stopped" | "archived" | "paused" | "started"),
                    "stop" => matches!(sb.state, "started" | "stopped"),
                    _ => sb.state == "error" && sb.recoverable,
                };
                if !allowed {
                    return error(
                        400,
                        &format!("Sandbox {id} is {}: cannot {action} it", sb.state),
                    );
                }
                let procs = match *action {
                    "stop" if sb.state == "started" => {
                        sb.state = "stopping";
                        sb.take_procs()
                    }
                    "stop" => Vec::new(),
                    _ => {
                        if sb.state != "started" {
                            sb.state = "starting";
                        }
                        sb.error_reason = None;
                        Vec::new()
                    }
                };
                (procs, sb.dir.clone(), sandbox_json(&tb, id, sb))
            };
            if !halted.0.is_empty() {
                halt(halted.0, halted.1, false).await;
            }
            json(200, &halted.2)
        }
        _ => error(404, &format!("Cannot {} {}", req.method, req.path)),
    }
}

fn not_found(id: &str) -> Response<Body> {
    error(404, &format!("Sandbox with ID or name {id} not found"))
}

fn create(s: &Shared, req: &Req) -> Response<Body> {
    let v = match body_json(req, &CREATE_SANDBOX) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    if v["snapshot"] != s.image.as_str() {
        return error(
            400,
            &format!(
                "Snapshot {} not found. Did you add it through the Daytona Dashboard?",
                v["snapshot"].as_str().unwrap_or("")
            ),
        );
    }
    let id = format!(
        "{}-{}",
        hex::encode(rand::random::<[u8; 4]>()),
        hex::encode(rand::random::<[u8; 2]>())
    );
    let dir = s.root.join(&id);
    for d in ["home/daytona", "tmp"] {
        if let Err(e) = std::fs::create_dir_all(dir.join(d)) {
            return error(500, &format!("cannot make the sandbox: {e}"));
        }
    }
    let sb = Sandbox {
        state: "starting",
        error_reason: None,
        recoverable: false,
        request: v,
        dir,
        sessions: HashMap::new(),
    };
    let mut st = s.state();
    let answer = sandbox_json(&st.toolbox_url, &id, &sb);
    st.sandboxes.insert(id, sb);
    json(200, &answer)
}

/// `path` if it names something inside the sandbox directory `dir`.
fn confined(dir: &Path, path: &str) -> Option<PathBuf> {
    inside(Path::new("/"), path).filter(|p| p.starts_with(dir) && p != dir)
}

async fn toolbox(s: &Shared, req: Req) -> Response<Body> {
    let fault = s.recorder.take(&req);
    if req.header("authorization") != Some(format!("Bearer {}", s.api_key).as_str()) {
        return error(401, "Unauthorized");
    }
    let Some(rest) = req.path.strip_prefix("/toolbox/") else {
        return error(404, "no such endpoint");
    };
    let (id, op) = rest.split_once('/').unwrap_or((rest, ""));
    let dir = {
        let st = s.state();
        match st.sandboxes.get(id) {
            Some(sb) if sb.state == "started" => sb.dir.clone(),
            Some(sb) => return error(400, &format!("Sandbox {id} is not started ({})", sb.state)),
            None => return not_found(id),
        }
    };
    if let Some((status, message)) = fault {
        return error(status, &message);
    }
    let home = dir.join("home/daytona");
    let path = req.query.get("path").map(String::as_str);
    let target = path.and_then(|p| confined(&dir, p));
    if path.is_some() && target.is_none() {
        return error(
            400,
            &format!("path {} is outside the sandbox", path.unwrap_or("")),
        );
    }
    let mode = |req: &Req| {
        req.query
            .get("mode")
            .and_then(|m| u32::from_str_radix(m, 8).ok())
            .filter(|m| *m <= 0o7777)
    };
    let parts: Vec<&str> = op.split('/').collect();
    match (req.method.as_str(), parts.as_slice()) {
        ("GET", ["user-home-dir"]) => json(200, &json!({ "dir": home.display().to_string() })),
        ("POST", ["files", "folder"]) => {
            let (Some(t), Some(m)) = (target, mode(&req)) else {
                return error(400, "path and an octal mode are required");
            };
            match std::fs::create_dir_all(&t).and_then(|()| set_mode(&t, m)) {
                Ok(()) => empty(201),
                Err(e) => error(400, &e.to_string()),
            }
        }
        ("POST", ["files", "upload"]) => {
            let (Some(t), Some(content)) = (target, multipart_part(&req, "file")) else {
                return error(400, "path and a multipart part named file are required");
            };
            let written = t
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::write(&t, &content))
                .and_then(|()| set_mode(&t, 0o644));
            match written {
                Ok(()) => json(200, &json!({})),
                Err(e) => error(400, &e.to_string()),
            }
        }
        ("POST", ["files", "permissions"]) => {
            let Some(t) = target else {
                return error(400, "path is required");
            };
            match mode(&req).map(|m| set_mode(&t, m)) {
                Some(Ok(())) => empty(200),
                Some(Err(e)) => error(400, &e.to_string()),
                None => error(400, "mode must be octal"),
            }
        }
        ("POST", ["process", "session"]) => {
            let v = match body_json(&req, &CREATE_SESSION) {
                Ok(v) => v,
                Err(r) => return *r,
            };
            let sid = v["sessionId"].as_str().unwrap_or("").to_string();
            let mut st = s.state();
            let sessions = &mut st.sandboxes.get_mut(id).expect("looked up").sessions;
            if sessions.contains_key(&sid) {
                return error(409, &format!("session {sid} already exists"));
            }
            sessions.insert(sid, Vec::new());
            empty(201)
        }
        ("GET", ["process", "session", sid]) => {
            let st = s.state();
            match st.sandboxes[id].sessions.get(*sid) {
                None => error(404, &format!("session {sid} not found")),
                Some(cmds) => {
                    let commands: Vec<Value> = cmds
                        .iter()
                        .map(|c| {
                            let mut v = json!({ "id": c.id, "command": c.command });
                            if let Some(code) = *c.proc.exit.borrow() {
                                v["exitCode"] = code.into();
                            }
                            v
                        })
                        .collect();
                    json(200, &json!({ "sessionId": sid, "commands": commands }))
                }
            }
        }
        ("DELETE", ["process", "session", sid]) => {
            let cmds = s
                .state()
                .sandboxes
                .get_mut(id)
                .and_then(|sb| sb.sessions.remove(*sid));
            match cmds {
                None => error(404, &format!("session {sid} not found")),
                Some(cmds) => {
                    let procs: Vec<Proc> = cmds.into_iter().map(|c| c.proc).collect();
                    let pids: Vec<i32> = procs
                        .iter()
                        .filter(|p| p.running())
                        .map(|p| p.pid)
                        .collect();
                    let _ = tokio::task::spawn_blocking(move || {
                        crate::term_then_kill(&pids, std::time::Duration::from_secs(10))
                    })
                    .await;
                    empty(204)
                }
            }
        }
        ("POST", ["process", "session", sid, "exec"]) => exec(s, &req, id, sid, &dir, &home).await,
        _ => error(404, &format!("Cannot {} {}", req.method, req.path)),
    }
}

fn set_mode(p: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
}

async fn exec(
    s: &Shared,
    req: &Req,
    id: &str,
    sid: &str,
    dir: &Path,
    home: &Path,
) -> Response<Body> {
    let v = match body_json(req, &SESSION_EXECUTE) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    if !s.state().sandboxes[id].sessions.contains_key(sid) {
        return error(404, &format!("session {sid} not found"));
    }
    let command = v["command"].as_str().unwrap_or("").to_string();
    let env = vec![
        ("HOME".to_string(), home.display().to_string()),
        ("USER".to_string(), "daytona".to_string()),
        ("TMPDIR".to_string(), dir.join("tmp").display().to_string()),
        (
            "PATH".to_string(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        ),
    ];
    let proc = match spawn(
        Path::new("/bin/sh"),
        &["-c".to_string(), command.clone()],
        &env,
        home,
        &dir.with_extension("log"),
        None,
    ) {
        Ok(p) => p,
        Err(e) => return error(500, &format!("cannot run the command: {e}")),
    };
    let cmd_id = hex::encode(rand::random::<[u8; 8]>());
    let mut exit = proc.exit.clone();
    if let Some(cmds) = s
        .state()
        .sandboxes
        .get_mut(id)
        .and_then(|sb| sb.sessions.get_mut(sid))
    {
        cmds.push(Command {
            id: cmd_id.clone(),
            command,
            proc,
        });
    }
    if v["runAsync"].as_bool() == Some(true) || v["async"].as_bool() == Some(true) {
        return json(202, &json!({ "cmdId": cmd_id }));
    }
    let _ = exit.wait_for(Option::is_some).await;
    let code = exit.borrow().unwrap_or(-1);
    json(
        200,
        &json!({ "cmdId": cmd_id, "exitCode": code, "output": "" }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toolbox_paths_stay_in_their_sandbox() {
        let dir = Path::new("/tmp/dtn/sb");
        assert_eq!(
            confined(dir, "/tmp/dtn/sb/home/daytona/.rakazo/t"),
            Some(PathBuf::from("/tmp/dtn/sb/home/daytona/.rakazo/t"))
        );
        assert_eq!(confined(dir, "/tmp/dtn/sb/../other/x"), None);
        assert_eq!(confined(dir, "/etc/passwd"), None);
        assert_eq!(confined(dir, "/tmp/dtn/sb"), None);
    }
}
