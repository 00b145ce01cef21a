//! The request bodies the fake API server takes, checked against the published schemas' types,
//! written out by hand for the fields a Rakazo computer's objects use (and their siblings). The
//! Kubernetes types below were written from the API as documented, not compared line by line with
//! the 1.8 MB OpenAPI document (only its start was read here); agent-sandbox's CRD was read. The
//! opt-in live run against a real cluster (`providers/tests/kubernetes_live.rs`) is what checks
//! them against a real API server:
//!
//! - Kubernetes' OpenAPI v3 document `api/openapi-spec/v3/api__v1_openapi.json` (core/v1:
//!   `Pod`, `PodSpec`, `Container`, `EnvVar`, `ResourceRequirements`, `SecurityContext`,
//!   `VolumeMount`, `Volume`, `PersistentVolumeClaimVolumeSource`, `SecretVolumeSource`,
//!   `KeyToPath`, `EmptyDirVolumeSource`, `Toleration`, `PersistentVolumeClaim(Spec)`,
//!   `VolumeResourceRequirements`, `Secret`; meta/v1 `ObjectMeta`, `OwnerReference`,
//!   `LabelSelector`) and `apis__networking.k8s.io__v1_openapi.json` (`NetworkPolicy`,
//!   `NetworkPolicySpec`, `NetworkPolicyEgressRule`, `NetworkPolicyIngressRule`,
//!   `NetworkPolicyPeer`, `NetworkPolicyPort`, `IPBlock`): property names, types, `required`.
//! - agent-sandbox's CRD `k8s/crds/agents.x-k8s.io_sandboxes.yaml` (v1beta1, served and
//!   stored): `spec.podTemplate` (required, with `spec` required), `spec.volumeClaimTemplates`,
//!   `spec.operatingMode` (enum Running, Suspended), `spec.shutdownTime`, `spec.shutdownPolicy`
//!   (enum Delete, Retain), `spec.service`.
//!
//! The API server's own validation beyond the schema, where the adapter could get it wrong, is
//! checked too (a container needs an image; a mount names a volume of the pod; names are DNS
//! subdomains, label values at most 63 characters). Unknown fields are refused, as with
//! `fieldValidation=Strict` (the API server's default only warns): the fake is stricter, so an
//! adapter field the schema does not have fails here first.

use serde_json::Value;

/// A schema node.
pub enum S {
    Str,
    Int,
    Bool,
    /// Anything (a part the fake does not check).
    Any,
    /// `int-or-string`.
    IntOrStr,
    /// One of these strings.
    Enum(&'static [&'static str]),
    /// `additionalProperties: {type: string}`.
    StrMap,
    /// An object: its properties and the required ones.
    Obj(&'static [(&'static str, S)], &'static [&'static str]),
    Arr(&'static S),
}

/// A failed check: `(422 Invalid, message)` for a value, `(400 BadRequest, …)` for an unknown
/// field.
pub struct Refusal {
    pub code: u16,
    pub message: String,
}

/// Checks `v` at `path` against `s`.
pub fn check(s: &S, v: &Value, path: &str) -> Result<(), Refusal> {
    let invalid = |what: &str| Refusal {
        code: 422,
        message: format!("{path}: {what}"),
    };
    match s {
        S::Any => Ok(()),
        S::Str if v.is_string() => Ok(()),
        S::Int if v.is_i64() => Ok(()),
        S::Bool if v.is_boolean() => Ok(()),
        S::IntOrStr if v.is_i64() || v.is_string() => Ok(()),
        S::Enum(values) => match v.as_str() {
            Some(x) if values.contains(&x) => Ok(()),
            _ => Err(invalid(&format!(
                "Unsupported value: {v}: supported values: {}",
                values.join(", ")
            ))),
        },
        S::StrMap => match v.as_object() {
            Some(m) if m.values().all(Value::is_string) => Ok(()),
            _ => Err(invalid("Invalid value: expected a map of strings")),
        },
        S::Arr(item) => {
            let Some(a) = v.as_array() else {
                return Err(invalid("Invalid value: expected an array"));
            };
            for (i, x) in a.iter().enumerate() {
                check(item, x, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        S::Obj(props, required) => {
            let Some(o) = v.as_object() else {
                return Err(invalid("Invalid value: expected an object"));
            };
            for r in *required {
                if o.get(*r).is_none_or(Value::is_null) {
                    return Err(Refusal {
                        code: 422,
                        message: format!("{}: Required value", join(path, r)),
                    });
                }
            }
            for (k, x) in o {
                let Some((_, ps)) = props.iter().find(|(p, _)| p == k) else {
                    return Err(Refusal {
                        code: 400,
                        message: format!(
                            "strict decoding error: unknown field \"{}\"",
                            join(path, k)
                        ),
                    });
                };
                if !x.is_null() {
                    check(ps, x, &join(path, k))?;
                }
            }
            Ok(())
        }
        _ => Err(invalid(&format!("Invalid value: {v}: wrong type"))),
    }
}

fn join(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

const OWNER_REF: S = S::Obj(
    &[
        ("apiVersion", S::Str),
        ("kind", S::Str),
        ("name", S::Str),
        ("uid", S::Str),
        ("controller", S::Bool),
        ("blockOwnerDeletion", S::Bool),
    ],
    &["apiVersion", "kind", "name", "uid"],
);

pub const OBJECT_META: S = S::Obj(
    &[
        ("name", S::Str),
        ("generateName", S::Str),
        ("namespace", S::Str),
        ("labels", S::StrMap),
        ("annotations", S::StrMap),
        ("ownerReferences", S::Arr(&OWNER_REF)),
        ("finalizers", S::Arr(&S::Str)),
        ("resourceVersion", S::Str),
        ("uid", S::Str),
        ("generation", S::Int),
        ("creationTimestamp", S::Str),
        ("deletionTimestamp", S::Str),
        ("deletionGracePeriodSeconds", S::Int),
        ("managedFields", S::Any),
    ],
    &[],
);

const LABEL_SELECTOR: S = S::Obj(
    &[("matchLabels", S::StrMap), ("matchExpressions", S::Any)],
    &[],
);

const ENV_VAR: S = S::Obj(
    &[("name", S::Str), ("value", S::Str), ("valueFrom", S::Any)],
    &["name"],
);

const RESOURCES: S = S::Obj(
    &[
        ("limits", S::StrMap),
        ("requests", S::StrMap),
        ("claims", S::Any),
    ],
    &[],
);

const SECURITY_CONTEXT: S = S::Obj(
    &[
        ("runAsUser", S::Int),
        ("runAsGroup", S::Int),
        ("runAsNonRoot", S::Bool),
        ("privileged", S::Bool),
        ("allowPrivilegeEscalation", S::Bool),
        ("readOnlyRootFilesystem", S::Bool),
        ("capabilities", S::Any),
        ("seccompProfile", S::Any),
        ("appArmorProfile", S::Any),
        ("procMount", S::Str),
        ("seLinuxOptions", S::Any),
    ],
    &[],
);

const VOLUME_MOUNT: S = S::Obj(
    &[
        ("name", S::Str),
        ("mountPath", S::Str),
        ("readOnly", S::Bool),
        ("subPath", S::Str),
        ("mountPropagation", S::Str),
    ],
    &["name", "mountPath"],
);

const CONTAINER: S = S::Obj(
    &[
        ("name", S::Str),
        ("image", S::Str),
        ("command", S::Arr(&S::Str)),
        ("args", S::Arr(&S::Str)),
        ("workingDir", S::Str),
        ("env", S::Arr(&ENV_VAR)),
        ("envFrom", S::Any),
        ("resources", RESOURCES),
        ("securityContext", SECURITY_CONTEXT),
        ("volumeMounts", S::Arr(&VOLUME_MOUNT)),
        (
            "imagePullPolicy",
            S::Enum(&["Always", "IfNotPresent", "Never"]),
        ),
        ("ports", S::Any),
        ("stdin", S::Bool),
        ("tty", S::Bool),
        ("livenessProbe", S::Any),
        ("readinessProbe", S::Any),
        ("startupProbe", S::Any),
        ("terminationMessagePath", S::Str),
        ("terminationMessagePolicy", S::Str),
    ],
    &["name"],
);

const KEY_TO_PATH: S = S::Obj(
    &[("key", S::Str), ("path", S::Str), ("mode", S::Int)],
    &["key", "path"],
);

const VOLUME: S = S::Obj(
    &[
        ("name", S::Str),
        (
            "persistentVolumeClaim",
            S::Obj(
                &[("claimName", S::Str), ("readOnly", S::Bool)],
                &["claimName"],
            ),
        ),
        (
            "secret",
            S::Obj(
                &[
                    ("secretName", S::Str),
                    ("defaultMode", S::Int),
                    ("items", S::Arr(&KEY_TO_PATH)),
                    ("optional", S::Bool),
                ],
                &[],
            ),
        ),
        (
            "emptyDir",
            S::Obj(&[("medium", S::Str), ("sizeLimit", S::Str)], &[]),
        ),
        ("configMap", S::Any),
        ("projected", S::Any),
    ],
    &["name"],
);

const TOLERATION: S = S::Obj(
    &[
        ("key", S::Str),
        ("operator", S::Enum(&["Exists", "Equal"])),
        ("value", S::Str),
        (
            "effect",
            S::Enum(&["NoSchedule", "PreferNoSchedule", "NoExecute"]),
        ),
        ("tolerationSeconds", S::Int),
    ],
    &[],
);

pub const POD_SPEC: S = S::Obj(
    &[
        ("containers", S::Arr(&CONTAINER)),
        ("initContainers", S::Arr(&CONTAINER)),
        ("volumes", S::Arr(&VOLUME)),
        ("restartPolicy", S::Enum(&["Always", "OnFailure", "Never"])),
        ("automountServiceAccountToken", S::Bool),
        ("enableServiceLinks", S::Bool),
        ("terminationGracePeriodSeconds", S::Int),
        ("activeDeadlineSeconds", S::Int),
        ("runtimeClassName", S::Str),
        ("nodeSelector", S::StrMap),
        ("nodeName", S::Str),
        ("tolerations", S::Arr(&TOLERATION)),
        ("affinity", S::Any),
        ("securityContext", S::Any),
        ("serviceAccountName", S::Str),
        ("hostname", S::Str),
        ("priorityClassName", S::Str),
        ("schedulerName", S::Str),
        ("dnsPolicy", S::Str),
    ],
    &["containers"],
);

pub const POD: S = S::Obj(
    &[
        ("apiVersion", S::Str),
        ("kind", S::Str),
        ("metadata", OBJECT_META),
        ("spec", POD_SPEC),
        ("status", S::Any),
    ],
    &[],
);

pub const PVC_SPEC: S = S::Obj(
    &[
        ("accessModes", S::Arr(&S::Str)),
        ("resources", RESOURCES),
        ("storageClassName", S::Str),
        ("volumeMode", S::Enum(&["Filesystem", "Block"])),
        ("volumeName", S::Str),
        ("selector", LABEL_SELECTOR),
        ("dataSource", S::Any),
        ("dataSourceRef", S::Any),
    ],
    &[],
);

pub const PVC: S = S::Obj(
    &[
        ("apiVersion", S::Str),
        ("kind", S::Str),
        ("metadata", OBJECT_META),
        ("spec", PVC_SPEC),
        ("status", S::Any),
    ],
    &[],
);

pub const SECRET: S = S::Obj(
    &[
        ("apiVersion", S::Str),
        ("kind", S::Str),
        ("metadata", OBJECT_META),
        ("data", S::StrMap),
        ("stringData", S::StrMap),
        ("type", S::Str),
        ("immutable", S::Bool),
    ],
    &[],
);

const PEER: S = S::Obj(
    &[
        (
            "ipBlock",
            S::Obj(&[("cidr", S::Str), ("except", S::Arr(&S::Str))], &["cidr"]),
        ),
        ("namespaceSelector", LABEL_SELECTOR),
        ("podSelector", LABEL_SELECTOR),
    ],
    &[],
);

const NP_PORT: S = S::Obj(
    &[
        ("protocol", S::Enum(&["TCP", "UDP", "SCTP"])),
        ("port", S::IntOrStr),
        ("endPort", S::Int),
    ],
    &[],
);

pub const NETWORK_POLICY: S = S::Obj(
    &[
        ("apiVersion", S::Str),
        ("kind", S::Str),
        ("metadata", OBJECT_META),
        (
            "spec",
            S::Obj(
                &[
                    ("podSelector", LABEL_SELECTOR),
                    ("policyTypes", S::Arr(&S::Enum(&["Ingress", "Egress"]))),
                    (
                        "ingress",
                        S::Arr(&S::Obj(
                            &[("from", S::Arr(&PEER)), ("ports", S::Arr(&NP_PORT))],
                            &[],
                        )),
                    ),
                    (
                        "egress",
                        S::Arr(&S::Obj(
                            &[("to", S::Arr(&PEER)), ("ports", S::Arr(&NP_PORT))],
                            &[],
                        )),
                    ),
                ],
                &[],
            ),
        ),
    ],
    &[],
);

pub const SANDBOX: S = S::Obj(
    &[
        ("apiVersion", S::Str),
        ("kind", S::Str),
        ("metadata", OBJECT_META),
        (
            "spec",
            S::Obj(
                &[
                    (
                        "podTemplate",
                        S::Obj(
                            &[
                                ("spec", POD_SPEC),
                                (
                                    "metadata",
                                    S::Obj(
                                        &[("labels", S::StrMap), ("annotations", S::StrMap)],
                                        &[],
                                    ),
                                ),
                            ],
                            &["spec"],
                        ),
                    ),
                    (
                        "volumeClaimTemplates",
                        S::Arr(&S::Obj(
                            &[
                                (
                                    "metadata",
                                    S::Obj(
                                        &[
                                            ("name", S::Str),
                                            ("labels", S::StrMap),
                                            ("annotations", S::StrMap),
                                        ],
                                        &[],
                                    ),
                                ),
                                ("spec", PVC_SPEC),
                            ],
                            &["spec"],
                        )),
                    ),
                    ("service", S::Bool),
                    ("shutdownTime", S::Str),
                    ("shutdownPolicy", S::Enum(&["Delete", "Retain"])),
                    ("operatingMode", S::Enum(&["Running", "Suspended"])),
                ],
                &["podTemplate"],
            ),
        ),
        ("status", S::Any),
    ],
    &["spec"],
);

/// A DNS-1123 subdomain (names of pods, claims, secrets, policies).
pub fn dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// The API server's checks of a pod spec beyond its schema (at `path`).
pub fn pod_spec_semantics(spec: &Value, path: &str) -> Result<(), String> {
    let containers = spec["containers"].as_array().cloned().unwrap_or_default();
    if containers.is_empty() {
        return Err(format!("{path}.containers: Required value"));
    }
    let volumes: Vec<&str> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .collect();
    for (i, c) in containers.iter().enumerate() {
        if c["image"].as_str().is_none_or(str::is_empty) {
            return Err(format!("{path}.containers[{i}].image: Required value"));
        }
        for (j, m) in c["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let name = m["name"].as_str().unwrap_or("");
            if !volumes.contains(&name) {
                return Err(format!(
                    "{path}.containers[{i}].volumeMounts[{j}].name: Not found: \"{name}\""
                ));
            }
        }
    }
    for (i, v) in spec["volumes"].as_array().into_iter().flatten().enumerate() {
        let modes = [&v["secret"]["defaultMode"]].into_iter().chain(
            v["secret"]["items"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|it| &it["mode"]),
        );
        for m in modes {
            if m.as_i64().is_some_and(|m| !(0..=0o777).contains(&m)) {
                return Err(format!(
                    "{path}.volumes[{i}].secret: Invalid value: {m}: must be a number between 0 and 0777"
                ));
            }
        }
    }
    Ok(())
}

/// Label values: at most 63 characters of `[A-Za-z0-9._-]`, alphanumeric at both ends.
pub fn labels_ok(meta: &Value) -> Result<(), String> {
    for (k, v) in meta["labels"].as_object().into_iter().flatten() {
        let v = v.as_str().unwrap_or("");
        let ok = v.len() <= 63
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && v.bytes().next().is_none_or(|b| b.is_ascii_alphanumeric())
            && v.bytes().last().is_none_or(|b| b.is_ascii_alphanumeric());
        if !ok {
            return Err(format!(
                "metadata.labels: Invalid value: \"{v}\": a valid label must be 63 characters or less (label {k})"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bodies_are_checked_as_the_api_server_does() {
        let pod = json!({ "metadata": { "name": "p" }, "spec": { "containers": [{ "name": "c", "image": "i" }] } });
        assert!(check(&POD, &pod, "").is_ok());
        let r = check(
            &POD,
            &json!({ "spec": { "containers": [{ "image": "i" }] } }),
            "",
        )
        .unwrap_err();
        assert_eq!(
            (r.code, r.message.as_str()),
            (422, "spec.containers[0].name: Required value")
        );
        let r = check(
            &POD,
            &json!({ "spec": { "containers": [], "hostPID2": true } }),
            "",
        )
        .unwrap_err();
        assert_eq!(r.code, 400, "{}", r.message);
        assert!(
            r.message.contains("unknown field \"spec.hostPID2\""),
            "{}",
            r.message
        );
        let r = check(&SANDBOX, &json!({ "spec": { "podTemplate": { "spec": { "containers": [] } }, "operatingMode": "Paused" } }), "").unwrap_err();
        assert!(
            r.message.contains("spec.operatingMode: Unsupported value"),
            "{}",
            r.message
        );
        let e = pod_spec_semantics(&json!({ "containers": [{ "name": "c", "image": "i", "volumeMounts": [{ "name": "v", "mountPath": "/x" }] }] }), "spec").unwrap_err();
        assert!(e.contains("volumeMounts[0].name: Not found"), "{e}");
        assert!(
            dns_subdomain("rakazo-c-1-abcdef")
                && !dns_subdomain("Rakazo")
                && !dns_subdomain("a..b")
        );
    }
}
