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
    self, check, empty, end_processes, env_pairs, halt, inside, json, serve_shared, Body, Fake,
    Proc, Recorder, Req, Schema, Ty,
};
use hyper::Response;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::time::{Duration, Instant};

mod envd;

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
}

type Shared = fake_service::Shared<State>;

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
        let shared = Shared::new(root.path(), "e2b");
        let (api_url, api) =
            serve_shared(&shared, |s, req| async move { api(&s, req).await }).await?;
        let (sandbox_url, envd) =
            serve_shared(&shared, |s, req| async move { envd::serve(&s, req).await }).await?;
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
            template: shared.image.clone(),
            shared,
            tasks: vec![api, envd, ttl],
            _root: root,
        })
    }

    /// The `rakazo serve` environment that points the e2b provider here. The fake cannot
    /// switch users, so guests stay the envd user (`RAKAZO_E2B_RUN_AS=none`).
    pub fn world_env(&self) -> Vec<(String, String)> {
        env_pairs(&[
            ("RAKAZO_E2B_API_URL", &self.api_url),
            ("RAKAZO_E2B_SANDBOX_URL", &self.sandbox_url),
            ("E2B_API_KEY", &self.api_key),
            ("RAKAZO_E2B_TEMPLATE", &self.template),
            ("RAKAZO_E2B_RUN_AS", "none"),
        ])
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

    /// E2B loses the sandbox: its processes end, its files go, the API no longer knows it.
    pub async fn kill(&self, id: &str) {
        let gone = self.shared.state().sandboxes.remove(id);
        if let Some(sb) = gone {
            halt(sb.procs, sb.dir, true).await;
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
        halt(procs.0, procs.1, false).await;
    }
}

impl Fake for FakeE2b {
    fn recorder(&self) -> &Recorder {
        &self.shared.recorder
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
        halt(procs, dir, false).await;
    }
    for sb in killed {
        halt(sb.procs, sb.dir, true).await;
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
    let fault = s.recorder.take(&req);
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
                    halt(sb.procs, sb.dir, true).await;
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
            halt(halted.0, halted.1, false).await;
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
    if v["templateID"] != s.image.as_str() {
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
        template: s.image.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use envd::map_value;

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
