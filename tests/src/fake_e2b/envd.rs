//! The fake envd: `POST /files` (spec/envd/envd.yaml 0.1.3) and `process.Process/Start`, `List`
//! and `SendSignal` (spec/envd/process/process.proto) over Connect in JSON, for the sandboxes of
//! [`super::FakeE2b`].

use super::{error, in_sandbox, Phase, Shared};
use crate::fake_service::{
    check, empty, inside, json, multipart_part, spawn, streamed, Body, Req, Schema, Ty,
};
use base64::Engine;
use bytes::Bytes;
use hyper::Response;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

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

/// Answers one request to a sandbox's envd, routed by `E2b-Sandbox-Id`.
pub(super) async fn serve(s: &Shared, req: Req) -> Response<Body> {
    let fault = s.recorder.take(&req);
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
pub(super) fn map_value(dir: &Path, value: &str) -> String {
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
