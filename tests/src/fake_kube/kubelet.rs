//! The fake's kubelet (a pod's container as a process on this host) and its agent-sandbox
//! controller (a Sandbox's pod and claims, made from its templates; a suspended Sandbox's pod
//! deleted).

use super::{delete, now_rfc3339, Res, Run, Shared, IMAGE, NAMESPACE};
use crate::fake_service::{end_processes, spawn, Proc};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Where the image keeps the guest.
const IMAGE_GUEST: &str = "/usr/local/bin/rakazo-guest";
/// How long a pod waits for its Secret or claim before it fails.
const MOUNT_WAIT: Duration = Duration::from_secs(60);

/// What a pod's container needs, read from the store.
struct Plan {
    uid: String,
    command: Vec<String>,
    env: Vec<(String, String)>,
    working_dir: Option<String>,
    /// (mount path, host directory)
    mounts: Vec<(String, PathBuf)>,
    /// (host file, content, mode)
    files: Vec<(PathBuf, Vec<u8>, u32)>,
    dir: PathBuf,
}

enum Ready {
    Go(Box<Plan>),
    Wait(String),
    Gone,
}

/// Reads pod `name` and what it mounts; `Wait` while a Secret or claim is missing.
fn plan(s: &Shared, name: &str) -> Ready {
    use base64::Engine;
    let st = s.store();
    let Some(pod) = st.get(Res::Pods, name) else {
        return Ready::Gone;
    };
    if !pod["metadata"]["deletionTimestamp"].is_null() {
        return Ready::Gone;
    }
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
    // Short: a guest's unix sockets live under its tmp/.
    let dir = s.root.join("p").join(&uid[..8.min(uid.len())]);
    let spec = &pod["spec"];
    let c = &spec["containers"][0];
    let mut mounts = Vec::new();
    let mut files = Vec::new();
    for m in c["volumeMounts"].as_array().into_iter().flatten() {
        let vname = m["name"].as_str().unwrap_or("");
        let path = m["mountPath"].as_str().unwrap_or("").to_string();
        let Some(v) = spec["volumes"]
            .as_array()
            .and_then(|vs| vs.iter().find(|v| v["name"] == vname))
        else {
            continue;
        };
        if let Some(claim) = v["persistentVolumeClaim"]["claimName"].as_str() {
            match st.get(Res::Claims, claim) {
                Some(c) if c["status"]["phase"] == "Bound" => {
                    mounts.push((path, s.claim_dir(claim)))
                }
                _ => return Ready::Wait(format!("claim {claim} is not bound")),
            }
        } else if let Some(secret) = v["secret"]["secretName"].as_str() {
            let Some(sec) = st.get(Res::Secrets, secret) else {
                return Ready::Wait(format!("secret {secret} not found"));
            };
            let vdir = dir.join("volumes").join(vname);
            let default_mode = v["secret"]["defaultMode"].as_u64().unwrap_or(0o644) as u32;
            let data = sec["data"].as_object().cloned().unwrap_or_default();
            let items: Vec<(String, String, u32)> = match v["secret"]["items"].as_array() {
                Some(items) => items
                    .iter()
                    .map(|it| {
                        (
                            it["key"].as_str().unwrap_or("").to_string(),
                            it["path"].as_str().unwrap_or("").to_string(),
                            it["mode"].as_u64().map_or(default_mode, |m| m as u32),
                        )
                    })
                    .collect(),
                None => data
                    .keys()
                    .map(|k| (k.clone(), k.clone(), default_mode))
                    .collect(),
            };
            for (key, path, mode) in items {
                let Some(b64) = data.get(&key).and_then(Value::as_str) else {
                    return Ready::Wait(format!("secret {secret} has no key {key}"));
                };
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .unwrap_or_default();
                files.push((vdir.join(path), bytes, mode));
            }
            mounts.push((path, vdir));
        } else {
            mounts.push((path, dir.join("volumes").join(vname)));
        }
    }
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str().map(String::from))
            .collect()
    };
    let env = c["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["name"].as_str().unwrap_or("").to_string(),
                e["value"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    Ready::Go(Box::new(Plan {
        uid,
        command: strings(&c["command"]),
        env,
        working_dir: c["workingDir"].as_str().map(String::from),
        mounts,
        files,
        dir,
    }))
}

/// A path in the container → this host: through the longest mount that holds it, else under
/// the pod's own root.
fn host_path(plan: &Plan, path: &str) -> PathBuf {
    let best = plan
        .mounts
        .iter()
        .filter(|(m, _)| path == m || path.starts_with(&format!("{m}/")))
        .max_by_key(|(m, _)| m.len());
    match best {
        Some((m, host)) => host.join(path[m.len()..].trim_start_matches('/')),
        None => crate::fake_service::inside(&plan.dir.join("rootfs"), path)
            .unwrap_or_else(|| plan.dir.join("rootfs")),
    }
}

/// Sets pod `name`'s status (if it is still the pod of `uid`).
fn set_status(s: &Shared, name: &str, uid: &str, status: Value) {
    let mut st = s.store();
    let Some(mut pod) = st.get(Res::Pods, name).cloned() else {
        return;
    };
    if pod["metadata"]["uid"] != uid || !pod["metadata"]["deletionTimestamp"].is_null() {
        return;
    }
    super::api::merge(&mut pod["status"], &status);
    st.put(Res::Pods, pod, "MODIFIED");
}

/// Schedules pod `name` after the scheduling delay and runs its container.
pub(super) fn schedule(s: Arc<Shared>, name: String) {
    tokio::spawn(async move {
        tokio::time::sleep(s.delay()).await;
        let waited = Instant::now();
        let plan = loop {
            match plan(&s, &name) {
                Ready::Go(p) => break p,
                Ready::Gone => return,
                Ready::Wait(why) if waited.elapsed() > MOUNT_WAIT => {
                    let uid = s
                        .store()
                        .get(Res::Pods, &name)
                        .and_then(|p| p["metadata"]["uid"].as_str().map(String::from));
                    if let Some(uid) = uid {
                        set_status(
                            &s,
                            &name,
                            &uid,
                            json!({ "phase": "Failed", "reason": "FailedMount", "message": why }),
                        );
                    }
                    return;
                }
                Ready::Wait(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        match run(&s, &name, &plan) {
            Ok(proc) => watch_exit(s, name, plan, proc),
            Err(e) => set_status(
                &s,
                &name,
                &plan.uid,
                json!({ "phase": "Failed", "reason": "RunContainerError", "message": e.to_string(),
                        "containerStatuses": [{ "name": "guest", "ready": false, "restartCount": 0, "image": IMAGE,
                          "state": { "terminated": { "exitCode": 128, "reason": "StartError", "message": e.to_string() } } }] }),
            ),
        }
    });
}

/// Materialises the pod's volumes and starts its container.
fn run(s: &Shared, name: &str, plan: &Plan) -> std::io::Result<Proc> {
    use std::os::unix::fs::PermissionsExt;
    for d in ["rootfs/root", "tmp", "volumes"] {
        std::fs::create_dir_all(plan.dir.join(d))?;
    }
    for (_, host) in &plan.mounts {
        std::fs::create_dir_all(host)?;
    }
    for (file, bytes, mode) in &plan.files {
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(file, bytes)?;
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(*mode))?;
    }
    let program = plan.command.first().cloned().unwrap_or_default();
    let cmd = if program == IMAGE_GUEST {
        s.guest_bin.clone()
    } else {
        host_path(plan, &program)
    };
    let mut env = vec![
        (
            "HOME".to_string(),
            plan.dir.join("rootfs/root").display().to_string(),
        ),
        (
            "TMPDIR".to_string(),
            plan.dir.join("tmp").display().to_string(),
        ),
        ("HOSTNAME".to_string(), name.to_string()),
        ("KUBERNETES_NAMESPACE".to_string(), NAMESPACE.to_string()),
    ];
    for (k, v) in &plan.env {
        let v = if v.starts_with('/') && !v.contains(':') {
            host_path(plan, v).display().to_string()
        } else {
            v.clone()
        };
        env.retain(|(e, _)| e != k);
        env.push((k.clone(), v));
    }
    let cwd = plan
        .working_dir
        .as_deref()
        .map_or_else(|| plan.dir.join("rootfs"), |w| host_path(plan, w));
    std::fs::create_dir_all(&cwd)?;
    let args: Vec<String> = plan.command.iter().skip(1).cloned().collect();
    let log = plan.dir.with_extension("log");
    let proc = spawn(&cmd, &args, &env, &cwd, &log, Some(name.to_string()))?;
    let mut st = s.store();
    if let Some(t) = st.timelines.get_mut(name) {
        t.started = Some(Instant::now());
    }
    st.runs.insert(
        name.to_string(),
        Run {
            dir: plan.dir.clone(),
            procs: vec![Proc {
                pid: proc.pid,
                tag: proc.tag.clone(),
                exit: proc.exit.clone(),
            }],
        },
    );
    Ok(proc)
}

/// Marks the pod running, then finished when its container ends.
fn watch_exit(s: Arc<Shared>, name: String, plan: Box<Plan>, proc: Proc) {
    let started = now_rfc3339();
    set_status(
        &s,
        &name,
        &plan.uid,
        json!({
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.1",
            "podIPs": [{ "ip": "127.0.0.1" }],
            "startTime": started,
            "conditions": [
                { "type": "PodScheduled", "status": "True" },
                { "type": "Ready", "status": "True" },
            ],
            "containerStatuses": [{ "name": "guest", "ready": true, "restartCount": 0, "image": IMAGE,
                                    "state": { "running": { "startedAt": started } } }],
        }),
    );
    {
        let mut st = s.store();
        if let Some(mut pod) = st.get(Res::Pods, &name).cloned() {
            pod["spec"]["nodeName"] = json!("fake-node-1");
            st.put(Res::Pods, pod, "MODIFIED");
        }
    }
    let mut exit = proc.exit.clone();
    tokio::spawn(async move {
        let code = exit
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|c| *c)
            .unwrap_or(-1);
        let (phase, reason) = if code == 0 {
            ("Succeeded", "Completed")
        } else {
            ("Failed", "Error")
        };
        set_status(
            &s,
            &name,
            &plan.uid,
            json!({
                "phase": phase,
                "conditions": [{ "type": "Ready", "status": "False" }],
                "containerStatuses": [{ "name": "guest", "ready": false, "restartCount": 0, "image": IMAGE,
                                        "state": { "terminated": { "exitCode": code, "reason": reason } } }],
            }),
        );
    });
}

/// Ends a pod's processes (SIGTERM, then SIGKILL) and removes its directory.
pub(super) async fn halt(run: Option<Run>) {
    let Some(run) = run else { return };
    let _ = tokio::task::spawn_blocking(move || {
        end_processes(&run.procs, &run.dir);
        let _ = std::fs::remove_dir_all(&run.dir);
    })
    .await;
}

/// Kills a pod's processes at once (its node is gone) and removes its directory.
pub(super) async fn kill(run: Option<Run>) {
    let Some(run) = run else { return };
    let _ = tokio::task::spawn_blocking(move || {
        let needle = run.dir.display().to_string();
        let mut pids: Vec<i32> = run
            .procs
            .iter()
            .filter(|p| p.running())
            .map(|p| p.pid)
            .collect();
        pids.extend(pids_mentioning(&needle));
        for pid in &pids {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        crate::term_then_kill(&pids, Duration::from_secs(1));
        let _ = std::fs::remove_dir_all(&run.dir);
    })
    .await;
}

fn pids_mentioning(needle: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let mentions = |file: &str| {
            std::fs::read(format!("/proc/{pid}/{file}"))
                .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
        };
        if mentions("cmdline") || mentions("environ") {
            out.push(pid);
        }
    }
    out
}

/// The agent-sandbox controller's reconcile of Sandbox `name`: `Running` makes its claims and
/// its pod (named as the Sandbox) when missing; `Suspended` deletes its pod.
pub(super) fn reconcile_sandbox(s: Arc<Shared>, name: String) {
    tokio::spawn(async move {
        let (sb, pod) = {
            let st = s.store();
            let Some(sb) = st.get(Res::Sandboxes, &name).cloned() else {
                return;
            };
            (sb, st.get(Res::Pods, &name).cloned())
        };
        let suspended = sb["spec"]["operatingMode"] == "Suspended";
        if suspended {
            if let Some(p) = pod {
                if p["metadata"]["deletionTimestamp"].is_null() {
                    delete(&s, Res::Pods, &name, Some(0)).await;
                }
            }
            return;
        }
        if pod.is_some() {
            return;
        }
        let owner = json!({
            "apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "name": name,
            "uid": sb["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true,
        });
        let mut spec = sb["spec"]["podTemplate"]["spec"].clone();
        for t in sb["spec"]["volumeClaimTemplates"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let tpl = t["metadata"]["name"].as_str().unwrap_or("");
            let claim = format!("{tpl}-{name}");
            let exists = s.store().get(Res::Claims, &claim).is_some();
            if !exists {
                let body = json!({
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": { "name": claim, "labels": t["metadata"]["labels"], "ownerReferences": [owner] },
                    "spec": t["spec"],
                });
                let _ = super::api::create(&s, Res::Claims, body);
            }
            if let Some(vs) = spec["volumes"].as_array_mut() {
                vs.push(json!({ "name": tpl, "persistentVolumeClaim": { "claimName": claim } }));
            }
        }
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": sb["spec"]["podTemplate"]["metadata"]["labels"],
                "annotations": { "agents.x-k8s.io/pod-name": name },
                "ownerReferences": [owner],
            },
            "spec": spec,
        });
        let _ = super::api::create(&s, Res::Pods, pod);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn container_paths_go_through_the_mounts() {
        let plan = Plan {
            uid: "u".into(),
            command: vec![],
            env: vec![],
            working_dir: None,
            mounts: vec![
                ("/home/rakazo".into(), PathBuf::from("/c/home")),
                ("/etc/rakazo".into(), PathBuf::from("/p/volumes/enroll")),
            ],
            files: vec![],
            dir: PathBuf::from("/p"),
        };
        assert_eq!(host_path(&plan, "/home/rakazo"), Path::new("/c/home"));
        assert_eq!(
            host_path(&plan, "/etc/rakazo/enroll-token"),
            Path::new("/p/volumes/enroll/enroll-token")
        );
        assert_eq!(
            host_path(&plan, "/home/rakazox"),
            Path::new("/p/rootfs/home/rakazox")
        );
    }
}
