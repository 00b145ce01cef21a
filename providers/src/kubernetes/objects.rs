//! The objects of one computer instance, as the Kubernetes API takes them (core/v1 Pod,
//! PersistentVolumeClaim, Secret; networking.k8s.io/v1 NetworkPolicy; agents.x-k8s.io/v1beta1
//! Sandbox), built as JSON from the spec and the configuration. No API calls: those are the
//! provider's.

use super::{
    instance_labels, KubeConfig, KubeMode, ANN_HOME_KEY, GUEST_PATH, HOME_DIR, HOME_TEMPLATE,
    TOKEN_DIR, TOKEN_FILE, TOKEN_KEY,
};
use crate::SandboxSpec;
use egress::policy::{Mode, Ports, Rule};
use serde_json::{json, Map, Value};
use std::net::{IpAddr, SocketAddr};

/// `/dev/shm` when neither the computer nor the provider sets one: Chrome needs more than the
/// runtime's 64 MiB default.
const DEFAULT_SHM_MB: u64 = 256;
/// Mode of the token's file: read-only, root's alone (`0400`).
const TOKEN_MODE: u32 = 0o400;
const PATH_ENV: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The address ranges an `open` policy never reaches (as the egress gateway's `is_internal`):
/// private, shared, link-local and loopback, IPv4 and IPv6.
const INTERNAL_V4: [&str; 7] = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
];
const INTERNAL_V6: [&str; 3] = ["::1/128", "fc00::/7", "fe80::/10"];

/// An owner reference making `owner` (kind, name, uid) the owner of an object: deleting it
/// deletes the object (the garbage collector), so nothing of a computer outlives it.
pub(super) fn owner_ref(api_version: &str, kind: &str, name: &str, uid: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "blockOwnerDeletion": true,
    })
}

/// Metadata of object `object` of instance `instance`: our labels, the home key.
fn metadata(object: &str, instance: &str, spec: &SandboxSpec, owner: Option<&Value>) -> Value {
    let mut m = json!({
        "name": object,
        "labels": instance_labels(&spec.computer_id, instance),
        "annotations": { ANN_HOME_KEY: spec.home_key },
    });
    if let Some(o) = owner {
        m["ownerReferences"] = json!([o]);
    }
    m
}

/// The PVC holding the home (pod mode), or its spec (a Sandbox's claim template).
pub(super) fn pvc_spec(config: &KubeConfig) -> Value {
    let mut spec = json!({
        "accessModes": ["ReadWriteOnce"],
        "resources": { "requests": { "storage": config.home_size } },
    });
    if let Some(class) = &config.storage_class {
        spec["storageClassName"] = json!(class);
    }
    spec
}

pub(super) fn pvc(config: &KubeConfig, spec: &SandboxSpec, name: &str, claim: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(claim, name, spec, None),
        "spec": pvc_spec(config),
    })
}

/// The Secret holding this boot's enrollment token, mounted read-only for root only.
pub(super) fn secret(
    spec: &SandboxSpec,
    name: &str,
    secret_name: &str,
    owner: Option<&Value>,
) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(secret_name, name, spec, owner),
        "type": "Opaque",
        "immutable": false,
        "data": { TOKEN_KEY: token_data(&spec.guest.token.0) },
    })
}

/// The token as a Secret's `data` value (base64).
pub(super) fn token_data(token: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(token.as_bytes())
}

/// The guest's environment in its container: how it dials home, its home, where its token is
/// (never the token itself), then the configured extra variables.
fn env(config: &KubeConfig, spec: &SandboxSpec) -> Vec<Value> {
    let g = &spec.guest;
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), PATH_ENV.into()),
        ("LANG".into(), "C.UTF-8".into()),
        ("RAKAZO_CONTROL_ADDR".into(), g.control_addr.to_string()),
        ("RAKAZO_CONTROL_TCP_ADDR".into(), g.tcp_addr().to_string()),
        ("RAKAZO_CONTROL_CERT_SHA256".into(), g.cert_sha256.clone()),
        ("RAKAZO_COMPUTER_ID".into(), spec.computer_id.clone()),
        ("RAKAZO_HOME".into(), HOME_DIR.into()),
        ("RAKAZO_ENROLL_TOKEN_FILE".into(), TOKEN_FILE.into()),
    ];
    if let Some(user) = &config.run_as {
        env.push(("RAKAZO_RUN_AS".into(), user.clone()));
    }
    env.extend(
        g.ws_env()
            .into_iter()
            .chain(g.replicas_env())
            .map(|(k, v)| (k.to_string(), v)),
    );
    env.extend(config.guest_env.iter().cloned());
    env.into_iter()
        .map(|(name, value)| json!({ "name": name, "value": value }))
        .collect()
}

/// Requests and limits from the computer's limits over the provider's defaults. Kubernetes
/// has no per-pod process limit (the kubelet's `podPidsLimit` is per node): `pids` is left to
/// it.
fn resources(config: &KubeConfig, spec: &SandboxSpec) -> Value {
    let (l, d) = (&spec.limits, &config.default_limits);
    let mut limits = Map::new();
    if let Some(mb) = l.memory_mb.or(d.memory_mb) {
        limits.insert("memory".into(), json!(format!("{mb}Mi")));
    }
    if let Some(m) = l.cpu_millis.or(d.cpu_millis) {
        limits.insert("cpu".into(), json!(format!("{m}m")));
    }
    if limits.is_empty() {
        return json!({});
    }
    // Requested as much as allowed: the computer gets what it may use (Guaranteed when both
    // are set).
    json!({ "requests": limits.clone(), "limits": limits })
}

/// The pod's spec: the guest as the one container, root, its home and token mounted.
/// `home_claim`: the PVC of the home (pod mode); a Sandbox's controller adds its claim itself.
pub(super) fn pod_spec(config: &KubeConfig, spec: &SandboxSpec, name: &str) -> Value {
    let shm = spec
        .limits
        .shm_mb
        .or(config.default_limits.shm_mb)
        .unwrap_or(DEFAULT_SHM_MB);
    let mut container = json!({
        "name": "guest",
        "image": config.image,
        "command": [GUEST_PATH],
        "workingDir": HOME_DIR,
        "env": env(config, spec),
        "resources": resources(config, spec),
        // The guest starts as root (it reads its token and drops to the workspace user).
        "securityContext": { "runAsUser": 0, "runAsGroup": 0, "privileged": false },
        "volumeMounts": [
            { "name": HOME_TEMPLATE, "mountPath": HOME_DIR },
            { "name": "enroll", "mountPath": TOKEN_DIR, "readOnly": true },
            { "name": "shm", "mountPath": "/dev/shm" },
        ],
    });
    if let Some(policy) = &config.image_pull_policy {
        container["imagePullPolicy"] = json!(policy);
    }
    let mut volumes = vec![
        json!({ "name": "enroll", "secret": {
            "secretName": token_secret(name),
            "defaultMode": TOKEN_MODE,
            "items": [{ "key": TOKEN_KEY, "path": TOKEN_KEY, "mode": TOKEN_MODE }],
        }}),
        json!({ "name": "shm", "emptyDir": { "medium": "Memory", "sizeLimit": format!("{shm}Mi") } }),
    ];
    if config.mode == KubeMode::Pod {
        volumes.insert(
            0,
            json!({ "name": HOME_TEMPLATE, "persistentVolumeClaim": { "claimName": home_claim(config, name) } }),
        );
    }
    let mut pod = json!({
        "restartPolicy": "Never",
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "terminationGracePeriodSeconds": config.stop_grace.as_secs(),
        "containers": [container],
        "volumes": volumes,
    });
    if let Some(rc) = &config.runtime_class {
        pod["runtimeClassName"] = json!(rc);
    }
    if !config.node_selector.is_empty() {
        pod["nodeSelector"] = json!(config.node_selector);
    }
    if !config.tolerations.is_empty() {
        pod["tolerations"] = json!(config.tolerations);
    }
    pod
}

/// The Pod of a computer (pod mode), owned by its home's claim.
pub(super) fn pod(config: &KubeConfig, spec: &SandboxSpec, name: &str, owner: &Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata(name, name, spec, Some(owner)),
        "spec": pod_spec(config, spec, name),
    })
}

/// The Sandbox of a computer (sandbox mode): its pod template, its home's claim template;
/// created suspended, so its token and network policy exist before its pod.
pub(super) fn sandbox(config: &KubeConfig, spec: &SandboxSpec, name: &str) -> Value {
    json!({
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": metadata(name, name, spec, None),
        "spec": {
            "podTemplate": {
                "metadata": { "labels": instance_labels(&spec.computer_id, name) },
                "spec": pod_spec(config, spec, name),
            },
            "volumeClaimTemplates": [{
                "metadata": { "name": HOME_TEMPLATE, "labels": instance_labels(&spec.computer_id, name) },
                "spec": pvc_spec(config),
            }],
            "operatingMode": "Suspended",
        },
    })
}

/// The Secret of instance `name`.
pub(super) fn token_secret(name: &str) -> String {
    format!("{name}-token")
}

/// The home's claim of instance `name`: ours in pod mode, the Sandbox controller's
/// (`<template>-<sandbox>`) in sandbox mode.
pub(super) fn home_claim(config: &KubeConfig, name: &str) -> String {
    match config.mode {
        KubeMode::Pod => format!("{name}-home"),
        KubeMode::Sandbox => format!("{HOME_TEMPLATE}-{name}"),
    }
}

fn cidr(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => format!("{v4}/32"),
        IpAddr::V6(v6) => format!("{v6}/128"),
    }
}

fn port_rules(ports: &Ports) -> Vec<Value> {
    match ports {
        Ports::Any => Vec::new(),
        Ports::Ranges(ranges) => ranges
            .iter()
            .flat_map(|(lo, hi)| {
                ["TCP", "UDP"].map(|protocol| {
                    let mut p = json!({ "protocol": protocol, "port": lo });
                    if hi > lo {
                        p["endPort"] = json!(hi);
                    }
                    p
                })
            })
            .collect(),
    }
}

/// The computer's NetworkPolicy: no ingress at all; egress to the tunnel's endpoints (QUIC on
/// UDP, the TCP carrier, the websocket when its host is an address) and to the address ranges
/// its egress policy allows. Names cannot be allowed by a NetworkPolicy: an allow-list's names
/// stay unreachable (and `open` reaches public addresses, with the cluster's DNS).
pub(super) fn network_policy(
    spec: &SandboxSpec,
    name: &str,
    owner: Option<&Value>,
    ws_host: Option<SocketAddr>,
) -> Value {
    let g = &spec.guest;
    let mut egress = Vec::new();
    let mut tunnel = |addr: SocketAddr, protocols: &[&str]| {
        egress.push(json!({
            "to": [{ "ipBlock": { "cidr": cidr(addr.ip()) } }],
            "ports": protocols.iter().map(|p| json!({ "protocol": p, "port": addr.port() })).collect::<Vec<_>>(),
        }));
    };
    tunnel(g.control_addr, &["UDP"]);
    tunnel(g.tcp_addr(), &["TCP"]);
    for r in &g.other_replicas {
        tunnel(*r, &["UDP", "TCP"]);
    }
    if let Some(ws) = ws_host {
        tunnel(ws, &["TCP"]);
    }
    let policy = spec.network.clone().unwrap_or_else(egress::Policy::open);
    let denied: Vec<&ipnet::IpNet> = policy
        .deny_rules()
        .iter()
        .filter_map(|r| match r {
            Rule::Net { net, .. } => Some(net),
            Rule::Domain { .. } => None,
        })
        .collect();
    let dns = json!({
        "to": [{ "namespaceSelector": {}, "podSelector": { "matchLabels": { "k8s-app": "kube-dns" } } }],
        "ports": [{ "protocol": "UDP", "port": 53 }, { "protocol": "TCP", "port": 53 }],
    });
    match policy.mode() {
        Mode::None => {}
        Mode::Open => {
            let except = |internal: &[&str], v4: bool| -> Vec<String> {
                internal
                    .iter()
                    .map(|s| s.to_string())
                    .chain(
                        denied
                            .iter()
                            .filter(|n| matches!(n, ipnet::IpNet::V4(_)) == v4)
                            .map(|n| n.to_string()),
                    )
                    .collect()
            };
            egress.push(json!({ "to": [
                { "ipBlock": { "cidr": "0.0.0.0/0", "except": except(&INTERNAL_V4, true) } },
                { "ipBlock": { "cidr": "::/0", "except": except(&INTERNAL_V6, false) } },
            ]}));
            egress.push(dns);
        }
        Mode::Allow(rules) => {
            for r in rules {
                if let Rule::Net { net, ports } = r {
                    if denied.iter().any(|d| d.contains(net)) {
                        continue;
                    }
                    let mut rule = json!({ "to": [{ "ipBlock": { "cidr": net.to_string() } }] });
                    let ports = port_rules(ports);
                    if !ports.is_empty() {
                        rule["ports"] = json!(ports);
                    }
                    egress.push(rule);
                }
            }
        }
    }
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(name, name, spec, owner),
        "spec": {
            "podSelector": { "matchLabels": { super::LABEL_INSTANCE: name } },
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": egress,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GuestEnrollment, MachineLimits, Secret};

    pub(crate) fn spec() -> SandboxSpec {
        SandboxSpec {
            computer_id: "c-0123456789abcdef".into(),
            home_key: "team-w".into(),
            guest: GuestEnrollment {
                control_addr: "10.0.0.5:7443".parse().unwrap(),
                control_ws: None,
                control_tcp_addr: None,
                other_replicas: vec!["10.0.0.6:7443".parse().unwrap()],
                cert_sha256: "ab".into(),
                token: Secret("t0ken-never-in-env".into()),
            },
            limits: MachineLimits {
                memory_mb: Some(2048),
                cpu_millis: Some(1500),
                pids: None,
                shm_mb: None,
            },
            placement: None,
            network: None,
        }
    }

    #[test]
    fn the_token_is_a_root_only_secret_file_never_env_or_argv() {
        let config = KubeConfig::new("rakazo", "img");
        let s = spec();
        let pod = pod(&config, &s, "rakazo-c-1-abcdef", &json!({}));
        let text = pod.to_string();
        assert!(!text.contains("t0ken"), "{text}");
        let c = &pod["spec"]["containers"][0];
        assert_eq!(c["command"], json!([GUEST_PATH]));
        let env: Vec<&str> = c["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert!(env.contains(&"RAKAZO_ENROLL_TOKEN_FILE"));
        let vol = &pod["spec"]["volumes"][1]["secret"];
        assert_eq!(vol["defaultMode"], 0o400);
        assert_eq!(vol["items"][0]["mode"], 0o400);
        assert_eq!(
            c["resources"]["limits"],
            json!({ "memory": "2048Mi", "cpu": "1500m" })
        );
        let secret = secret(&s, "rakazo-c-1-abcdef", "x", None);
        assert_eq!(secret["data"][TOKEN_KEY], token_data("t0ken-never-in-env"));
    }

    #[test]
    fn the_network_policy_lets_out_the_tunnel_and_the_policy_s_ranges() {
        let mut s = spec();
        s.network = Some("none".parse().unwrap());
        let np = network_policy(&s, "n", None, None);
        let egress = np["spec"]["egress"].as_array().unwrap();
        assert_eq!(egress.len(), 3, "{egress:?}");
        assert_eq!(egress[0]["to"][0]["ipBlock"]["cidr"], "10.0.0.5/32");
        assert_eq!(
            egress[0]["ports"],
            json!([{ "protocol": "UDP", "port": 7443 }])
        );
        assert_eq!(np["spec"]["ingress"], json!([]));
        s.network = Some("allow github.com 203.0.113.0/24:22".parse().unwrap());
        let np = network_policy(&s, "n", None, None);
        let egress = np["spec"]["egress"].as_array().unwrap();
        assert_eq!(egress.len(), 4, "names are not allowed: {egress:?}");
        assert_eq!(egress[3]["to"][0]["ipBlock"]["cidr"], "203.0.113.0/24");
        s.network = None;
        let np = network_policy(&s, "n", None, None);
        let text = np.to_string();
        assert!(
            text.contains("0.0.0.0/0") && text.contains("10.0.0.0/8"),
            "{text}"
        );
    }
}
