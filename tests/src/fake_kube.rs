//! An in-memory Kubernetes API server for tests: the endpoints the `kubernetes` provider uses,
//! with the API server's semantics where the adapter depends on them, and a kubelet and an
//! agent-sandbox controller that run a pod's container as a process on this host.
//!
//! - core/v1 `pods`, `persistentvolumeclaims`, `secrets`; networking.k8s.io/v1
//!   `networkpolicies`; agents.x-k8s.io/v1beta1 `sandboxes` (the CRD), in one namespace: create
//!   (`POST`, 201), get, list (with `labelSelector`), delete (200 with the object, background
//!   propagation: the garbage collector deletes what an object owns), JSON merge patch.
//! - A global `resourceVersion`; list answers carry it; `watch=true` streams `ADDED`,
//!   `MODIFIED`, `DELETED` events after a given resourceVersion. A resourceVersion older than
//!   the last compaction gets an `ERROR` event with a `410 Gone` Status (as the API server
//!   answers a watch of an expired version), which makes kube's watcher list again.
//! - Failures are `Status` objects as the API returns them: 401 `Unauthorized`, 404
//!   `NotFound`, 409 `AlreadyExists` / `Conflict`, 422 `Invalid` (and 400 for an unknown field),
//!   checked against the published schemas ([`schema`]).
//!
//! A pod is a directory (`p/<its uid's first 8 hex>`) and its container a process started from the
//! pod's command, environment and working directory, after the scheduling delay
//! ([`FakeKube::set_scheduling_delay`]): the image `rakazo-computer` has the guest binary at
//! `/usr/local/bin/rakazo-guest`; a Secret volume is materialised as files with their modes, a
//! claim is a directory that outlives pods (`claims/<name>`), an `emptyDir` a directory of the
//! pod. Absolute paths in the environment are taken through the pod's mounts. Processes run as
//! the test's user, as in the other fakes ([`crate::fake_service`]).
//!
//! Knobs: [`FakeKube::lose_node`] (a pod goes with its node: processes killed, the pod deleted
//! with a DELETED event, claims kept), [`FakeKube::lose_node_unwatched`] (the same while every
//! watch is cut and its resourceVersion compacted: the loss is seen only by listing again),
//! [`FakeKube::expire_watches`], [`FakeKube::delete_computer`] (kubectl delete behind the
//! adapter's back), [`Fake::fail_next`] for injected failures.

mod api;
mod kubelet;
pub mod schema;

use crate::fake_service::{json, serve, Body, Fake, Proc, Recorder};
use bytes::Bytes;
use hyper::Response;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The namespace the fake serves.
pub const NAMESPACE: &str = "rakazo";
/// The one image it knows.
pub const IMAGE: &str = "rakazo-computer";
/// The storage classes it knows.
pub const STORAGE_CLASSES: [&str; 1] = ["standard"];

/// The kinds of objects the fake keeps.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Res {
    Pods,
    Claims,
    Secrets,
    Policies,
    Sandboxes,
}

impl Res {
    fn plural(self) -> &'static str {
        match self {
            Res::Pods => "pods",
            Res::Claims => "persistentvolumeclaims",
            Res::Secrets => "secrets",
            Res::Policies => "networkpolicies",
            Res::Sandboxes => "sandboxes",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Res::Pods => "Pod",
            Res::Claims => "PersistentVolumeClaim",
            Res::Secrets => "Secret",
            Res::Policies => "NetworkPolicy",
            Res::Sandboxes => "Sandbox",
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            Res::Pods | Res::Claims | Res::Secrets => "v1",
            Res::Policies => "networking.k8s.io/v1",
            Res::Sandboxes => "agents.x-k8s.io/v1beta1",
        }
    }

    fn schema(self) -> &'static schema::S {
        match self {
            Res::Pods => &schema::POD,
            Res::Claims => &schema::PVC,
            Res::Secrets => &schema::SECRET,
            Res::Policies => &schema::NETWORK_POLICY,
            Res::Sandboxes => &schema::SANDBOX,
        }
    }

    const ALL: [Res; 5] = [
        Res::Pods,
        Res::Claims,
        Res::Secrets,
        Res::Policies,
        Res::Sandboxes,
    ];
}

/// An open watch.
struct Watcher {
    res: Res,
    selector: Vec<(String, Option<String>, bool)>,
    tx: mpsc::Sender<Bytes>,
}

/// A pod's run on the kubelet.
struct Run {
    dir: PathBuf,
    procs: Vec<Proc>,
}

/// When things happened to an instance: its first object created, its container started.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timeline {
    pub first_create: Option<Instant>,
    pub pod_create: Option<Instant>,
    pub started: Option<Instant>,
}

#[derive(Default)]
struct Store {
    objects: BTreeMap<(Res, String), Value>,
    rv: u64,
    compacted: u64,
    history: Vec<(u64, Res, &'static str, Value)>,
    watchers: Vec<Watcher>,
    runs: HashMap<String, Run>,
    timelines: HashMap<String, Timeline>,
}

pub(crate) struct Shared {
    root: PathBuf,
    token: String,
    guest_bin: PathBuf,
    recorder: Recorder,
    delay: Mutex<Duration>,
    store: Mutex<Store>,
}

impl Shared {
    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A claim's directory: short (a guest's sockets may live in its home).
    fn claim_dir(&self, name: &str) -> PathBuf {
        use sha2::Digest;
        let h = hex::encode(sha2::Sha256::digest(name.as_bytes()));
        self.root.join("c").join(&h[..8])
    }

    fn delay(&self) -> Duration {
        *self.delay.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running fake API server.
pub struct FakeKube {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// The bearer token of its one user.
    pub token: String,
    /// A kubeconfig (mode 0600) pointing at it.
    pub kubeconfig: PathBuf,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
    _root: tempfile::TempDir,
}

/// A `Status` object as the API server answers a failure.
pub fn status(code: u16, reason: &str, message: &str) -> Response<Body> {
    json(
        code,
        &json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }),
    )
}

#[allow(clippy::disallowed_methods)] // reason: an API server stamps objects with wall-clock time
fn now_rfc3339() -> String {
    // Seconds since the epoch as a valid RFC 3339 time is enough for the adapter.
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = secs / 86_400;
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}Z")
}

fn parse_selector(s: &str) -> Vec<(String, Option<String>, bool)> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let p = p.trim();
            if let Some((k, v)) = p.split_once("!=") {
                (k.to_string(), Some(v.to_string()), false)
            } else if let Some((k, v)) = p.split_once("==").or_else(|| p.split_once('=')) {
                (k.to_string(), Some(v.to_string()), true)
            } else {
                (p.to_string(), None, true)
            }
        })
        .collect()
}

fn selects(selector: &[(String, Option<String>, bool)], obj: &Value) -> bool {
    let labels = &obj["metadata"]["labels"];
    selector
        .iter()
        .all(|(k, v, eq)| match (v, labels[k].as_str()) {
            (None, l) => l.is_some(),
            (Some(v), l) => (l == Some(v.as_str())) == *eq,
        })
}

fn event_line(kind: &str, obj: &Value) -> Bytes {
    let mut line = json!({ "type": kind, "object": obj }).to_string();
    line.push('\n');
    Bytes::from(line)
}

impl Store {
    /// Records a change of `obj` (already stored or removed) and tells the watches.
    fn emit(&mut self, res: Res, kind: &'static str, obj: &Value) {
        let rv = self.rv;
        self.history.push((rv, res, kind, obj.clone()));
        self.watchers.retain(|w| {
            if w.res != res || !selects(&w.selector, obj) {
                return !w.tx.is_closed();
            }
            w.tx.try_send(event_line(kind, obj)).is_ok()
        });
    }

    fn next_rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    /// Stores `obj` (new or changed) with a fresh resourceVersion.
    fn put(&mut self, res: Res, mut obj: Value, kind: &'static str) -> Value {
        obj["metadata"]["resourceVersion"] = json!(self.next_rv());
        obj["kind"] = json!(res.kind());
        obj["apiVersion"] = json!(res.api_version());
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        self.objects.insert((res, name), obj.clone());
        self.emit(res, kind, &obj);
        obj
    }

    /// Removes an object; returns it.
    fn remove(&mut self, res: Res, name: &str) -> Option<Value> {
        let mut obj = self.objects.remove(&(res, name.to_string()))?;
        obj["metadata"]["resourceVersion"] = json!(self.next_rv());
        self.emit(res, "DELETED", &obj);
        Some(obj)
    }

    fn get(&self, res: Res, name: &str) -> Option<&Value> {
        self.objects.get(&(res, name.to_string()))
    }

    /// What `uid` owns, by kind and name.
    fn owned_by(&self, uid: &str) -> Vec<(Res, String)> {
        self.objects
            .iter()
            .filter(|(_, o)| {
                o["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid))
            })
            .map(|(k, _)| k.clone())
            .collect()
    }
}

impl FakeKube {
    /// Starts the API server on loopback with a fresh bearer token; its image's guest is
    /// `guest_bin`.
    pub async fn start(guest_bin: &Path) -> std::io::Result<Self> {
        // A short root: a guest's unix sockets live under its pod's tmp/.
        let root = tempfile::Builder::new().prefix("k8s").tempdir()?;
        for d in ["p", "c"] {
            std::fs::create_dir_all(root.path().join(d))?;
        }
        let shared = Arc::new(Shared {
            root: root.path().to_path_buf(),
            token: format!("fake-k8s-{}", hex::encode(rand::random::<[u8; 16]>())),
            guest_bin: guest_bin.to_path_buf(),
            recorder: Recorder::default(),
            delay: Mutex::new(Duration::ZERO),
            store: Mutex::new(Store::default()),
        });
        let s = shared.clone();
        let (url, task) = serve(move |req| {
            let s = s.clone();
            async move { api::handle(&s, req).await }
        })
        .await?;
        let kubeconfig = root.path().join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {url}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: {NAMESPACE}\n\
             current-context: fake\nusers:\n- name: fake\n  user:\n    token: {}\n",
            shared.token
        );
        {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .mode(0o600)
                .open(&kubeconfig)?;
            f.write_all(text.as_bytes())?;
        }
        Ok(Self {
            url,
            token: shared.token.clone(),
            kubeconfig,
            shared,
            task,
            _root: root,
        })
    }

    /// The `rakazo serve` environment that points the kubernetes provider here, in `mode`
    /// (`pod` or `sandbox`). The fake cannot switch users: guests stay root's here
    /// (`RAKAZO_KUBE_RUN_AS=none`).
    pub fn world_env(&self, mode: &str) -> Vec<(String, String)> {
        crate::fake_service::env_pairs(&[
            ("RAKAZO_KUBECONFIG", &self.kubeconfig.display().to_string()),
            ("RAKAZO_KUBE_NAMESPACE", NAMESPACE),
            ("RAKAZO_KUBE_IMAGE", IMAGE),
            ("RAKAZO_KUBE_MODE", mode),
            ("RAKAZO_KUBE_STORAGE_CLASS", STORAGE_CLASSES[0]),
            ("RAKAZO_KUBE_RUN_AS", "none"),
        ])
    }

    /// Sets how long a new pod waits to be scheduled and started.
    pub fn set_scheduling_delay(&self, d: Duration) {
        *self.shared.delay.lock().unwrap_or_else(|e| e.into_inner()) = d;
    }

    /// The object of kind `res` named `name`.
    pub fn object(&self, res: Res, name: &str) -> Option<Value> {
        self.shared.store().get(res, name).cloned()
    }

    /// The names of the objects of kind `res` labelled as computer `computer`'s.
    pub fn objects_of(&self, res: Res, computer: &str) -> Vec<String> {
        self.shared
            .store()
            .objects
            .iter()
            .filter(|((r, _), o)| {
                *r == res && o["metadata"]["labels"]["rakazo.dev/computer"] == computer
            })
            .map(|((_, n), _)| n.clone())
            .collect()
    }

    /// The names of every object of kind `res`.
    pub fn all_of_kind(&self, res: Res) -> Vec<String> {
        self.shared
            .store()
            .objects
            .keys()
            .filter(|(r, _)| *r == res)
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// Every object labelled as computer `computer`'s, as `kind/name`.
    pub fn all_of(&self, computer: &str) -> Vec<String> {
        Res::ALL
            .iter()
            .flat_map(|r| {
                self.objects_of(*r, computer)
                    .into_iter()
                    .map(move |n| format!("{}/{n}", r.plural()))
            })
            .collect()
    }

    /// The directory of claim `name` (its files).
    pub fn claim_dir(&self, name: &str) -> PathBuf {
        self.shared.claim_dir(name)
    }

    /// When instance `name`'s first object was created and its container started.
    pub fn timeline(&self, name: &str) -> Timeline {
        self.shared
            .store()
            .timelines
            .get(name)
            .copied()
            .unwrap_or_default()
    }

    /// Pod `pod` goes with its node: its processes are killed at once, the pod is deleted (a
    /// DELETED event), its claims stay (network storage outlives a node).
    pub async fn lose_node(&self, pod: &str) {
        let run = {
            let mut st = self.shared.store();
            st.remove(Res::Pods, pod);
            st.runs.remove(pod)
        };
        kubelet::kill(run).await;
    }

    /// [`Self::lose_node`] while every watch is cut and compacted past the deletion: the
    /// adapter's watch resumes with an expired resourceVersion (410) and learns of the loss
    /// only by listing again.
    pub async fn lose_node_unwatched(&self, pod: &str) {
        let run = {
            let mut st = self.shared.store();
            st.watchers.clear();
            st.remove(Res::Pods, pod);
            st.compacted = st.rv;
            st.runs.remove(pod)
        };
        kubelet::kill(run).await;
    }

    /// Ends every watch and compacts the history: a watch resumed from any earlier
    /// resourceVersion gets 410 Gone.
    pub fn expire_watches(&self) {
        let mut st = self.shared.store();
        st.watchers.clear();
        st.compacted = st.rv;
    }

    /// How many pod lists (not watches) the fake answered.
    pub fn pod_lists(&self) -> usize {
        self.requests()
            .iter()
            .filter(|l| l.starts_with("LIST ") && l.ends_with("/pods"))
            .count()
    }

    /// `kubectl delete` of every object of computer `computer` behind the adapter's back.
    pub async fn delete_computer(&self, computer: &str) {
        for res in Res::ALL {
            for name in self.objects_of(res, computer) {
                delete(&self.shared, res, &name, Some(0)).await;
            }
        }
    }
}

impl Fake for FakeKube {
    fn recorder(&self) -> &Recorder {
        &self.shared.recorder
    }
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.task.abort();
        let runs: Vec<Run> = self.shared.store().runs.drain().map(|(_, r)| r).collect();
        for r in runs {
            crate::fake_service::end_processes(&r.procs, &r.dir);
        }
    }
}

/// Deletes an object (a pod after its processes end) and, in the background as the garbage
/// collector does, what it owns. Returns the object as it was.
pub(crate) async fn delete(
    s: &Arc<Shared>,
    res: Res,
    name: &str,
    grace: Option<u64>,
) -> Option<Value> {
    let obj = s.store().get(res, name).cloned()?;
    if res == Res::Pods {
        let marked = {
            let mut st = s.store();
            let mut o = obj.clone();
            if o["metadata"]["deletionTimestamp"].is_null() {
                o["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
                o["metadata"]["deletionGracePeriodSeconds"] = json!(grace.unwrap_or(30));
                st.put(res, o.clone(), "MODIFIED");
            }
            o
        };
        let s2 = s.clone();
        let pod = name.to_string();
        tokio::spawn(async move {
            let run = s2.store().runs.remove(&pod);
            kubelet::halt(run).await;
            s2.store().remove(Res::Pods, &pod);
        });
        collect(s, &obj);
        return Some(marked);
    }
    s.store().remove(res, name);
    if res == Res::Claims {
        let _ = std::fs::remove_dir_all(s.claim_dir(name));
    }
    collect(s, &obj);
    Some(obj)
}

/// The garbage collector: deletes what `owner` owned, in the background.
fn collect(s: &Arc<Shared>, owner: &Value) {
    let Some(uid) = owner["metadata"]["uid"].as_str() else {
        return;
    };
    let owned = s.store().owned_by(uid);
    if owned.is_empty() {
        return;
    }
    let s = s.clone();
    tokio::spawn(async move {
        for (res, name) in owned {
            Box::pin(delete(&s, res, &name, Some(0))).await;
        }
    });
}
