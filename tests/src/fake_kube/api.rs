//! The fake's HTTP API: routing, authentication, injected failures, and each verb (create, get,
//! list, watch, delete, merge patch) with the API server's checks.

use super::kubelet;
use super::{
    delete, event_line, now_rfc3339, parse_selector, schema, selects, status, Res, Shared, Watcher,
    NAMESPACE, STORAGE_CLASSES,
};
use crate::fake_service::{json, streamed, Body, Req};
use bytes::Bytes;
use hyper::Response;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The resource and name a path names, in the fake's namespace.
pub(super) fn route(path: &str) -> Result<(Res, Option<String>), Box<Response<Body>>> {
    let nowhere = || {
        Box::new(status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ))
    };
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (ns, rest) = match parts.as_slice() {
        ["api", "v1", "namespaces", ns, rest @ ..] => (*ns, rest),
        ["apis", "networking.k8s.io", "v1", "namespaces", ns, rest @ ..] => (*ns, rest),
        ["apis", "agents.x-k8s.io", "v1beta1", "namespaces", ns, rest @ ..] => (*ns, rest),
        _ => return Err(nowhere()),
    };
    let group = parts[0..2].join("/");
    let (plural, name) = match rest {
        [p] => (*p, None),
        [p, n] => (*p, Some(n.to_string())),
        _ => return Err(nowhere()),
    };
    let res = Res::ALL
        .into_iter()
        .find(|r| {
            r.plural() == plural
                && match r {
                    Res::Policies => group == "apis/networking.k8s.io",
                    Res::Sandboxes => group == "apis/agents.x-k8s.io",
                    _ => group == "api/v1",
                }
        })
        .ok_or_else(nowhere)?;
    if ns != NAMESPACE {
        let gone = format!("namespaces \"{ns}\" not found");
        return Err(Box::new(status(404, "NotFound", &gone)));
    }
    Ok((res, name))
}

pub(super) async fn handle(s: &Arc<Shared>, req: Req) -> Response<Body> {
    let watching = req
        .query
        .get("watch")
        .is_some_and(|w| w == "true" || w == "1");
    let verb = match (req.method.as_str(), watching) {
        ("GET", true) => "WATCH",
        ("GET", false) if route(&req.path).is_ok_and(|(_, n)| n.is_none()) => "LIST",
        (m, _) => m,
    };
    // The request log names the verb (LIST and WATCH apart from GET).
    let logged = Req {
        method: hyper::Method::from_bytes(verb.as_bytes()).unwrap_or(req.method.clone()),
        path: req.path.clone(),
        query: HashMap::new(),
        headers: hyper::HeaderMap::new(),
        body: Bytes::new(),
    };
    let fault = s.recorder.take(&logged);
    let bearer = format!("Bearer {}", s.token);
    if req.header("authorization") != Some(bearer.as_str()) {
        return status(401, "Unauthorized", "Unauthorized");
    }
    if let Some((code, message)) = fault {
        let reason = match code {
            404 => "NotFound",
            409 => "Conflict",
            410 => "Gone",
            422 => "Invalid",
            429 => "TooManyRequests",
            500 => "InternalError",
            503 => "ServiceUnavailable",
            _ => "Unknown",
        };
        return status(code, reason, &message);
    }
    let (res, name) = match route(&req.path) {
        Ok(r) => r,
        Err(e) => return *e,
    };
    match (req.method.as_str(), name) {
        ("GET", None) if watching => watch(s, res, &req),
        ("GET", None) => list(s, res, &req),
        ("POST", None) => {
            let body: Value = match serde_json::from_slice(&req.body) {
                Ok(v) => v,
                Err(e) => return status(400, "BadRequest", &format!("the body is not JSON: {e}")),
            };
            create(s, res, body)
        }
        ("GET", Some(n)) => match s.store().get(res, &n) {
            Some(o) => json(200, o),
            None => not_found(res, &n),
        },
        ("DELETE", Some(n)) => {
            let options: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
            let grace = options["gracePeriodSeconds"].as_u64().or_else(|| {
                req.query
                    .get("gracePeriodSeconds")
                    .and_then(|g| g.parse().ok())
            });
            match delete(s, res, &n, grace).await {
                Some(o) => json(200, &o),
                None => not_found(res, &n),
            }
        }
        ("PATCH", Some(n)) => patch(s, res, &n, &req),
        _ => status(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
    }
}

pub(super) fn not_found(res: Res, name: &str) -> Response<Body> {
    status(
        404,
        "NotFound",
        &format!("{} \"{name}\" not found", res.plural()),
    )
}

pub(super) fn invalid(res: Res, name: &str, what: &str) -> Box<Response<Body>> {
    Box::new(status(
        422,
        "Invalid",
        &format!("{} \"{name}\" is invalid: {what}", res.kind()),
    ))
}

/// Checks a whole object of kind `res` as the API server would before storing it.
pub(super) fn validate(res: Res, obj: &Value) -> Result<(), Box<Response<Body>>> {
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    if let Err(r) = schema::check(res.schema(), obj, "") {
        return Err(if r.code == 400 {
            Box::new(status(400, "BadRequest", &r.message))
        } else {
            invalid(res, name, &r.message)
        });
    }
    if !schema::dns_subdomain(name) || (res == Res::Sandboxes && name.len() > 63) {
        return Err(invalid(
            res,
            name,
            &format!("metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"),
        ));
    }
    schema::labels_ok(&obj["metadata"]).map_err(|e| invalid(res, name, &e))?;
    match res {
        Res::Pods => {
            schema::pod_spec_semantics(&obj["spec"], "spec").map_err(|e| invalid(res, name, &e))
        }
        // A CRD's schema has no cross-field checks: the pod the controller makes gets them.
        Res::Sandboxes => Ok(()),
        Res::Claims => {
            if obj["spec"]["resources"]["requests"]["storage"]
                .as_str()
                .is_none()
            {
                return Err(invalid(
                    res,
                    name,
                    "spec.resources[storage]: Required value",
                ));
            }
            Ok(())
        }
        Res::Secrets => {
            use base64::Engine;
            for (k, v) in obj["data"].as_object().into_iter().flatten() {
                if base64::engine::general_purpose::STANDARD
                    .decode(v.as_str().unwrap_or(""))
                    .is_err()
                {
                    return Err(invalid(
                        res,
                        name,
                        &format!("data[{k}]: Invalid value: not base64"),
                    ));
                }
            }
            Ok(())
        }
        Res::Policies => Ok(()),
    }
}

pub(super) fn create(s: &Arc<Shared>, res: Res, mut body: Value) -> Response<Body> {
    if let Err(r) = validate(res, &body) {
        return *r;
    }
    if body["kind"].as_str().is_some_and(|k| k != res.kind()) {
        return status(
            400,
            "BadRequest",
            &format!("the body's kind is not {}", res.kind()),
        );
    }
    let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
    let obj = {
        let mut st = s.store();
        if st.get(res, &name).is_some() {
            return status(
                409,
                "AlreadyExists",
                &format!("{} \"{name}\" already exists", res.plural()),
            );
        }
        let meta = &mut body["metadata"];
        meta["namespace"] = json!(NAMESPACE);
        meta["uid"] = json!(uuid());
        meta["creationTimestamp"] = json!(now_rfc3339());
        if res == Res::Sandboxes {
            meta["generation"] = json!(1);
        }
        let instance = body["metadata"]["labels"]["rakazo.dev/instance"]
            .as_str()
            .map(String::from);
        if let Some(i) = instance {
            let t = st.timelines.entry(i).or_default();
            t.first_create.get_or_insert_with(Instant::now);
            if res == Res::Pods {
                t.pod_create = Some(Instant::now());
                t.started = None;
            }
        }
        match res {
            Res::Pods => body["status"] = json!({ "phase": "Pending" }),
            Res::Claims => {
                let class = body["spec"]["storageClassName"]
                    .as_str()
                    .unwrap_or("standard");
                let bound = STORAGE_CLASSES.contains(&class);
                body["status"] = json!({ "phase": if bound { "Bound" } else { "Pending" } });
                if bound {
                    let _ = std::fs::create_dir_all(s.claim_dir(&name));
                }
            }
            _ => {}
        }
        st.put(res, body, "ADDED")
    };
    match res {
        Res::Pods => kubelet::schedule(s.clone(), name),
        Res::Sandboxes => kubelet::reconcile_sandbox(s.clone(), name),
        _ => {}
    }
    json(201, &obj)
}

pub(super) fn uuid() -> String {
    let b = rand::random::<[u8; 16]>();
    let h = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

pub(super) fn list(s: &Arc<Shared>, res: Res, req: &Req) -> Response<Body> {
    let selector = parse_selector(req.query.get("labelSelector").map_or("", String::as_str));
    let st = s.store();
    let items: Vec<Value> = st
        .objects
        .iter()
        .filter(|((r, _), o)| *r == res && selects(&selector, o))
        .map(|(_, o)| o.clone())
        .collect();
    json(
        200,
        &json!({
            "kind": format!("{}List", res.kind()),
            "apiVersion": res.api_version(),
            "metadata": { "resourceVersion": st.rv.to_string() },
            "items": items,
        }),
    )
}

pub(super) fn watch(s: &Arc<Shared>, res: Res, req: &Req) -> Response<Body> {
    let selector = parse_selector(req.query.get("labelSelector").map_or("", String::as_str));
    let from: u64 = req
        .query
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let (tx, rx) = mpsc::channel(4096);
    let mut st = s.store();
    if from < st.compacted {
        let gone = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("too old resource version: {from} ({})", st.compacted),
            "reason": "Expired", "code": 410,
        });
        let _ = tx.try_send(event_line("ERROR", &gone));
        drop(tx);
        return streamed(200, "application/json", rx);
    }
    if from == 0 {
        for ((r, _), o) in &st.objects {
            if *r == res && selects(&selector, o) {
                let _ = tx.try_send(event_line("ADDED", o));
            }
        }
    } else {
        for (rv, r, kind, o) in &st.history {
            if *rv > from && *r == res && selects(&selector, o) {
                let _ = tx.try_send(event_line(kind, o));
            }
        }
    }
    st.watchers.push(Watcher { res, selector, tx });
    streamed(200, "application/json", rx)
}

/// RFC 7386: `patch` merged into `target`.
pub(super) fn merge(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

pub(super) fn patch(s: &Arc<Shared>, res: Res, name: &str, req: &Req) -> Response<Body> {
    if req.header("content-type") != Some("application/merge-patch+json") {
        return status(
            415,
            "UnsupportedMediaType",
            "the fake takes JSON merge patches only",
        );
    }
    let p: Value = match serde_json::from_slice(&req.body) {
        Ok(v) => v,
        Err(e) => return status(400, "BadRequest", &format!("the patch is not JSON: {e}")),
    };
    let obj = {
        let mut st = s.store();
        let Some(current) = st.get(res, name).cloned() else {
            return not_found(res, name);
        };
        if p["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|v| current["metadata"]["resourceVersion"] != v)
        {
            return status(409, "Conflict", &format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                res.plural()
            ));
        }
        let mut next = current.clone();
        merge(&mut next, &p);
        // Neither identity nor status changes through the main resource.
        next["metadata"]["name"] = current["metadata"]["name"].clone();
        next["metadata"]["uid"] = current["metadata"]["uid"].clone();
        next["status"] = current["status"].clone();
        if next["status"].is_null() {
            next.as_object_mut().map(|o| o.remove("status"));
        }
        if let Err(r) = validate(res, &next) {
            return *r;
        }
        if res == Res::Pods && next["spec"] != current["spec"] {
            return *invalid(
                res,
                name,
                "spec: Forbidden: pod updates may not change fields other than those allowed",
            );
        }
        if res == Res::Sandboxes && next["spec"] != current["spec"] {
            let g = current["metadata"]["generation"].as_i64().unwrap_or(1);
            next["metadata"]["generation"] = json!(g + 1);
        }
        st.put(res, next, "MODIFIED")
    };
    if res == Res::Sandboxes {
        kubelet::reconcile_sandbox(s.clone(), name.to_string());
    }
    json(200, &obj)
}
