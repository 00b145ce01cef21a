//! The OpenAPI 3.1 description of `/v1`, served at `GET /v1/openapi.json` and committed as
//! `control-plane/openapi.json` (`rakazo openapi` prints it).
//!
//! Derived, not written: the paths, methods, path parameters and operationIds are the route
//! table's ([`crate::route::Endpoint`]); each status an operation answers and the codes under it
//! come from the codes it declares ([`ApiCode`], each with its one status), plus `unauthorized`
//! for every route behind the API token; [`operations`] adds what only a person can say (summary,
//! query, body, success). Bodies are the [`crate::schema`] types themselves: each derives
//! `utoipa::ToSchema`, and an operation names the type it takes or answers ([`Doc::of`]), so
//! `components.schemas` holds exactly the types the routes use, generated from the same structs
//! serde reads and writes. Every error is an [`crate::schema::error::ErrorBody`].
//!
//! The document is public (no token), as `GET /v1/health`: it describes shapes, holds no id, name
//! or secret, and client generators and API testers fetch it before they hold a credential.
//! schemathesis checks the live server against it in `tests/system/openapi.rs`.

mod links;
mod operations;

use crate::route::{Auth, Endpoint};
use crate::schema::code::ApiCode;
use crate::schema::error::ErrorBody;
use operations::{describe, Described};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// The document as the server serves it and the repository commits it: pretty JSON and a
/// final newline.
pub fn document_json() -> String {
    let mut text = serde_json::to_string_pretty(&document()).unwrap_or_default();
    text.push('\n');
    text
}

/// `GET /v1/openapi.json`: the document, built once.
pub(super) fn response() -> hyper::Response<super::RespBody> {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let text = TEXT.get_or_init(document_json);
    let mut resp = hyper::Response::new(super::body::full(bytes::Bytes::from_static(
        text.as_bytes(),
    )));
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    resp
}

/// Collects the schemas the routes name.
#[derive(Default)]
struct Doc {
    schemas: BTreeMap<String, Value>,
    paths: BTreeMap<String, Map<String, Value>>,
}

impl Doc {
    /// A `$ref` to `T`'s schema, registering it and every schema it refers to.
    fn of<T: ToSchema>(&mut self) -> Value {
        let mut deps = Vec::new();
        T::schemas(&mut deps);
        for (name, schema) in deps {
            self.insert(name, json!(schema));
        }
        let name = T::name().to_string();
        self.insert(name.clone(), json!(T::schema()));
        json!({ "$ref": format!("#/components/schemas/{name}") })
    }

    fn insert(&mut self, name: String, schema: Value) {
        self.schemas.entry(name).or_insert(schema);
    }

    /// Adds route `e` as `op` describes it: its path and method, its path parameters (from the
    /// template) before its query, its operationId (its name), its success and, per status, the
    /// codes it may answer.
    fn add(&mut self, e: Endpoint, op: operations::Operation) {
        let path = e.template();
        let mut params: Vec<Value> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            .map(path_param)
            .collect();
        params.extend(op.query);
        let mut codes = op.codes;
        if e.auth().token() {
            // Any token route refuses a role below its own, and a cookie-signed change
            // without its CSRF token; any answers 503 while the database cannot be reached.
            codes.extend([
                ApiCode::Unauthorized,
                ApiCode::Forbidden,
                ApiCode::Csrf,
                ApiCode::DatabaseUnavailable,
            ]);
        }
        let mut by_status: BTreeMap<u16, Vec<ApiCode>> = BTreeMap::new();
        for code in codes {
            let list = by_status.entry(code.status()).or_default();
            if !list.contains(&code) {
                list.push(code);
            }
        }
        let mut responses = Map::new();
        let mut ok = op.ok.1;
        if let (Some(links), Some(o)) = (links::of(e.name()), ok.as_object_mut()) {
            o.insert("links".into(), links);
        }
        responses.insert(op.ok.0.to_string(), ok);
        let error = self.of::<ErrorBody>();
        for (status, codes) in by_status {
            let description = codes
                .iter()
                .map(|c| format!("`{c}`: {}.", c.description()))
                .collect::<Vec<_>>()
                .join(" ");
            responses.insert(
                status.to_string(),
                json!({ "description": description,
                        "content": { "application/json": { "schema": error } } }),
            );
        }
        let mut spec = Map::new();
        spec.insert("tags".into(), json!([op.tag]));
        spec.insert("summary".into(), json!(op.summary));
        if let Some(d) = op.description {
            spec.insert("description".into(), json!(d));
        }
        if matches!(e.auth(), Auth::Public | Auth::Guest) {
            spec.insert("security".into(), json!([]));
        }
        if let Some(role) = e.auth().role() {
            spec.insert("x-rakazo-role".into(), json!(role.as_str()));
        }
        if !params.is_empty() {
            spec.insert("parameters".into(), Value::Array(params));
        }
        if let Some(body) = op.body {
            spec.insert("requestBody".into(), body);
        }
        spec.insert("responses".into(), Value::Object(responses));
        spec.insert("operationId".into(), json!(e.name()));
        self.paths
            .entry(path.to_string())
            .or_default()
            .insert(e.verb().lowercase().to_string(), Value::Object(spec));
    }
}

fn path_param(name: &str) -> Value {
    let (description, schema) = match name {
        "computer" => (
            "The computer's id.",
            json!({ "type": "string", "minLength": 1, "maxLength": 64 }),
        ),
        "bot" => (
            "The bot's id: 1 to 64 of `[A-Za-z0-9._-]`.",
            json!({ "type": "string", "minLength": 1, "maxLength": 64 }),
        ),
        "job" => ("The maintenance job's id.", json!({ "type": "string" })),
        "process" => (
            "The detached process's id on its computer.",
            json!({ "type": "integer", "minimum": 0, "maximum": u32::MAX }),
        ),
        "home_key" => ("A stored home's key.", json!({ "type": "string" })),
        "workspace" => (
            "The workspace's id: 1 to 128 of `[A-Za-z0-9._-]`.",
            json!({ "type": "string", "minLength": 1, "maxLength": 128 }),
        ),
        "name" => (
            "The secret's name: 1 to 64 of `[a-z0-9_-]`.",
            json!({ "type": "string", "minLength": 1, "maxLength": 64 }),
        ),
        "service" => (
            "The service's name: 1 to 32 of `[a-z0-9-]`, not starting with `-`.",
            json!({ "type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,31}$" }),
        ),
        "preview" => ("The preview's id (`pv_…`).", json!({ "type": "string" })),
        other => (other, json!({ "type": "string" })),
    };
    json!({ "name": name, "in": "path", "required": true, "description": description,
            "schema": schema })
}

fn query(name: &str, required: bool, description: &str, schema: Value) -> Value {
    json!({ "name": name, "in": "query", "required": required, "description": description,
            "schema": schema })
}

fn integer(min: u64, max: Option<u64>) -> Value {
    match max {
        Some(max) => json!({ "type": "integer", "minimum": min, "maximum": max }),
        None => json!({ "type": "integer", "minimum": min }),
    }
}

/// The optional `revision` of a stored home's routes.
fn revision_query(description: &str) -> Value {
    query("revision", false, description, integer(1, None))
}

/// A response is `bytes` without the request body's `required`.
fn without_required(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("required");
    }
    v
}

/// Raw bytes (a file's content), request or answer.
fn bytes(description: &str) -> Value {
    json!({ "description": description, "required": true, "content": {
        "application/octet-stream": { "schema": { "type": "string", "format": "binary" } } } })
}

fn string() -> Value {
    json!({ "type": "string" })
}

/// A JSON request body of `schema`.
fn json_body(schema: Value, required: bool) -> Value {
    json!({ "required": required, "content": { "application/json": { "schema": schema } } })
}

/// A success answer with a JSON body.
fn json_ok(description: &str, schema: Value) -> Value {
    json!({ "description": description, "content": { "application/json": { "schema": schema } } })
}

/// The whole document.
pub fn document() -> Value {
    let mut doc = Doc::default();
    for &e in Endpoint::ALL {
        if let Described::Yes(op) = describe(e, &mut doc) {
            doc.add(e, op);
        }
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Rakazo control plane API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Computers for AI agents: create and run them, execute commands, move \
                files, drive their desktops and browsers, hold execution leases. Every route but \
                `GET /v1/health`, `GET /v1/openapi.json` and the guest tunnel needs \
                `Authorization: Bearer <api token>`. MCP clients connect to \
                `/v1/mcp/{computer}/{bot}` (MCP's streamable HTTP transport, not described \
                here) with the API token or a session token from `POST \
                /v1/computers/{computer}/mcp-tokens/{bot}`. Every error is an `ErrorBody` whose \
                `error.code` is stable; `error.uncertain` says whether a failed operation may \
                still have had its effect.",
        },
        "security": [{ "bearer": [] }],
        "paths": doc.paths,
        "components": {
            "schemas": doc.schemas,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The API token (`rakazo serve` prints where it is), or a \
                        scoped one from `rakazo token create`.",
                },
            },
        },
    })
}

#[cfg(test)]
mod tests {
    /// Every `$ref` names a schema the document holds (schemathesis, in the system test,
    /// checks the whole document against the OpenAPI 3.1 meta-schema).
    #[test]
    fn every_reference_resolves() {
        fn refs(v: &serde_json::Value, out: &mut Vec<String>) {
            match v {
                serde_json::Value::Object(o) => {
                    if let Some(serde_json::Value::String(r)) = o.get("$ref") {
                        out.push(r.clone());
                    }
                    o.values().for_each(|v| refs(v, out));
                }
                serde_json::Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
                _ => {}
            }
        }
        let doc = super::document();
        assert_eq!(doc["openapi"], "3.1.0");
        assert!(doc["paths"]["/v1/computers/{computer}/exec"]["post"].is_object());
        let mut all = Vec::new();
        refs(&doc, &mut all);
        assert!(all.len() > 100);
        for r in all {
            let name = r
                .strip_prefix("#/components/schemas/")
                .expect("a schema ref");
            assert!(doc["components"]["schemas"][name].is_object(), "{r}");
        }
    }

    #[test]
    fn the_committed_document_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == super::document_json(),
            "control-plane/openapi.json is not what the server serves: regenerate it with \
             `cargo run -q -p control-plane --bin rakazo -- openapi > control-plane/openapi.json`"
        );
    }

    /// Every operation names its success and its 401 (unless public), and every error is the
    /// one error body.
    #[test]
    fn every_operation_documents_its_statuses() {
        let doc = super::document();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let responses = op["responses"].as_object().unwrap();
                let public = op.get("security") == Some(&serde_json::json!([]));
                assert!(public || responses.contains_key("401"), "{method} {path}");
                assert!(
                    responses.keys().any(|s| s.starts_with('2') || s == "101"),
                    "{method} {path}"
                );
                for (status, r) in responses {
                    if status.starts_with('4') || status.starts_with('5') {
                        assert_eq!(
                            r["content"]["application/json"]["schema"]["$ref"],
                            "#/components/schemas/ErrorBody",
                            "{method} {path} {status}"
                        );
                    }
                }
            }
        }
    }

    /// The document and the router agree: every route the router takes is in the document
    /// (unless it says why not), and every operation in the document is a route the router
    /// takes, under the same method and name.
    #[test]
    fn the_document_and_the_router_agree() {
        use crate::route::{Endpoint, Route};
        let doc = super::document();
        let paths = doc["paths"].as_object().unwrap();
        let mut documented = 0;
        for &e in Endpoint::ALL {
            let op = &doc["paths"][e.template()][e.verb().lowercase()];
            match super::describe(e, &mut super::Doc::default()) {
                super::Described::Yes(_) => {
                    assert_eq!(op["operationId"], e.name(), "{e:?}");
                    documented += 1;
                }
                super::Described::No(why) => {
                    assert!(op.is_null() && !why.is_empty(), "{e:?}");
                }
            }
        }
        let mut operations = 0;
        for (path, item) in paths {
            for (method, op) in item.as_object().unwrap() {
                operations += 1;
                let example: String = path
                    .split('/')
                    .map(|p| match p {
                        "{process}" => "1",
                        p if p.starts_with('{') => "x-1",
                        p => p,
                    })
                    .collect::<Vec<_>>()
                    .join("/");
                let method: hyper::Method = method.to_uppercase().parse().unwrap();
                let route = Route::parse(&method, &example)
                    .unwrap_or_else(|e| panic!("{method} {path}: {}", e.message));
                assert_eq!(route.endpoint().template(), path);
                assert_eq!(op["operationId"], route.endpoint().name());
            }
        }
        assert_eq!(operations, documented);
        assert!(documented >= 45, "{documented}");
    }
}
