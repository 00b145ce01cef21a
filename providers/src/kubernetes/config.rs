//! The kubernetes provider's configuration: its mode and how it reaches the cluster.

use crate::MachineLimits;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// How computers are made (`--kube-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeMode {
    /// Pods, claims and Secrets of our own.
    Pod,
    /// agent-sandbox's `Sandbox` custom resources.
    Sandbox,
}

impl KubeMode {
    /// Parses `pod` or `sandbox`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "pod" => Ok(Self::Pod),
            "sandbox" => Ok(Self::Sandbox),
            other => Err(format!("kube mode {other:?}: expected pod or sandbox")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Pod => "pod",
            Self::Sandbox => "sandbox",
        }
    }
}

/// How the kubernetes provider reaches its cluster and what it runs there.
#[derive(Debug, Clone)]
pub struct KubeConfig {
    /// A kubeconfig file; `None`: `KUBECONFIG`, `~/.kube/config` or the in-cluster service
    /// account (kube's `Config::infer`).
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context (default: its current one).
    pub context: Option<String>,
    /// The namespace of every computer.
    pub namespace: String,
    /// The image every computer runs (it carries the guest at [`GUEST_PATH`]).
    pub image: String,
    /// The container's `imagePullPolicy` (`None`: the cluster's default).
    pub image_pull_policy: Option<String>,
    pub mode: KubeMode,
    /// The home claims' storage class (`None`: the cluster's default).
    pub storage_class: Option<String>,
    /// The home claims' size (`10Gi`).
    pub home_size: String,
    /// `runtimeClassName` (gVisor, Kata).
    pub runtime_class: Option<String>,
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations, as the Pod API takes them.
    pub tolerations: Vec<Value>,
    /// The user the guest drops to after reading its token; `None` keeps it root.
    pub run_as: Option<String>,
    /// Limits for a computer whose spec leaves one unset.
    pub default_limits: MachineLimits,
    /// Extra environment for guests (log filter and the like); never secrets.
    pub guest_env: Vec<(String, String)>,
    /// The pods' `terminationGracePeriodSeconds`: the guest closes browsers first.
    pub stop_grace: Duration,
    /// Deadline of one API call.
    pub call_timeout: Duration,
}

impl KubeConfig {
    /// The defaults for `image` in `namespace`: pod mode, the cluster's storage class, 10 GiB
    /// homes, the guest dropping to `rakazo`, a 20 s stop grace and 30 s calls.
    pub fn new(namespace: impl Into<String>, image: impl Into<String>) -> Self {
        Self {
            kubeconfig: None,
            context: None,
            namespace: namespace.into(),
            image: image.into(),
            image_pull_policy: None,
            mode: KubeMode::Pod,
            storage_class: None,
            home_size: "10Gi".into(),
            runtime_class: None,
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            run_as: Some("rakazo".into()),
            default_limits: MachineLimits::default(),
            guest_env: Vec::new(),
            stop_grace: Duration::from_secs(20),
            call_timeout: Duration::from_secs(30),
        }
    }
}

/// Parses a toleration `key[=value]:Effect` (or `key[=value]` for every effect).
pub fn parse_toleration(s: &str) -> Result<Value, String> {
    let (kv, effect) = match s.rsplit_once(':') {
        Some((kv, e)) => (kv, Some(e)),
        None => (s, None),
    };
    if let Some(e) = effect {
        if !matches!(e, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(format!(
                "toleration {s:?}: effect {e:?} is not NoSchedule, PreferNoSchedule or NoExecute"
            ));
        }
    }
    let (key, value) = match kv.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (kv, None),
    };
    if key.is_empty() {
        return Err(format!("toleration {s:?}: expected key[=value][:Effect]"));
    }
    let mut t = json!({ "key": key });
    match value {
        Some(v) => {
            t["operator"] = json!("Equal");
            t["value"] = json!(v);
        }
        None => t["operator"] = json!("Exists"),
    }
    if let Some(e) = effect {
        t["effect"] = json!(e);
    }
    Ok(t)
}
