//! The OpenAPI 3.1 description of `/v1`, served at `GET /v1/openapi.json` and committed as
//! `control-plane/openapi.json` (`rakazo openapi` prints it).
//!
//! Bodies are the [`crate::schema`] types themselves: each derives `utoipa::ToSchema`, and a
//! route names the type it takes or answers ([`Doc::of`]), so `components.schemas` holds exactly
//! the types the routes use, generated from the same structs serde reads and writes. The routes
//! are listed here next to the router's ([`super::dispatch`]) with their real content types
//! (NDJSON for exec and home flows, raw bytes for files, `text/event-stream` for the activity
//! stream, a websocket upgrade for the guest tunnel) and the statuses each can answer, every error
//! being an [`crate::schema::error::ErrorBody`] whose `code` the description names.
//!
//! The document is public (no token), as `GET /v1/health`: it describes shapes, holds no id, name
//! or secret, and client generators and API testers fetch it before they hold a credential.
//! schemathesis checks the live server against it in `tests/system/openapi.rs`.

use crate::schema::activity::{ActivityEvent, ActivityPage};
use crate::schema::browser::{PageRequest, PageResult};
use crate::schema::computer::{Computer, ComputerList, CreateComputer};
use crate::schema::error::ErrorBody;
use crate::schema::exec::{ExecLine, ExecSpec};
use crate::schema::files::{AttachRequest, Attached, FileList, Uploaded, Written};
use crate::schema::home::{HomeEntries, HomeInfo, HomeLine, Purged, Reconciled};
use crate::schema::job::{Job, JobList, ReleaseInterrupted};
use crate::schema::lease::{Lease, LeaseReleased, LeaseRequest};
use crate::schema::mcp::{McpToken, McpTokenRequest};
use crate::schema::screen::{
    ActRequest, ActResult, ControlReleased, ControlTaken, LeaseBody, LiveUrl, Observation, Screen,
    ScreenList, ScreenReleased, UrlRequest, WaitingTakeover, WaitingTakeoverRequest,
};
use crate::schema::{Empty, Health};
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

    /// Adds one operation. `spec` holds `summary`, `tags`, `parameters` (queries),
    /// `requestBody`, `responses`; path parameters are derived from `path`.
    fn route(&mut self, method: &str, path: &str, id: &str, mut spec: Value) {
        let mut params: Vec<Value> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            .map(path_param)
            .collect();
        if let Some(Value::Array(q)) = spec.get("parameters") {
            params.extend(q.iter().cloned());
        }
        let op = spec.as_object_mut().expect("an operation is an object");
        op.insert("operationId".into(), json!(id));
        if params.is_empty() {
            op.remove("parameters");
        } else {
            op.insert("parameters".into(), Value::Array(params));
        }
        self.paths
            .entry(path.to_string())
            .or_default()
            .insert(method.to_string(), spec);
    }
}

fn path_param(name: &str) -> Value {
    let (description, schema) = match name {
        "id" => (
            "The computer's id.",
            json!({ "type": "string", "minLength": 1, "maxLength": 64 }),
        ),
        "bot" => (
            "The bot's id: 1 to 64 of `[A-Za-z0-9._-]`.",
            json!({ "type": "string", "minLength": 1, "maxLength": 64 }),
        ),
        "job" => ("The maintenance job's id.", json!({ "type": "string" })),
        "home_key" => ("A stored home's key.", json!({ "type": "string" })),
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

/// An error answer: the one error body; `codes` names its `error.code`s.
fn error(doc: &mut Doc, codes: &str) -> Value {
    let body = doc.of::<ErrorBody>();
    json!({ "description": codes, "content": { "application/json": { "schema": body } } })
}

/// Statuses every operation on a computer can answer besides its own.
const UNAUTHORIZED: &str =
    "`unauthorized`: no `Authorization: Bearer <api token>`, or a wrong one.";
const NO_COMPUTER: &str = "`not_found`: no such computer.";
/// A JSON body's refusals.
const BAD_JSON: &str = "`bad_request`: the body is not the JSON this route takes (or a field is \
                        out of range; the message says which).";
const TOO_LARGE_JSON: &str = "`payload_too_large`: a JSON body over 1 MiB.";
const SLOW_BODY: &str = "`request_timeout`: the body did not arrive in time.";
/// Refusals of an operation that goes through the computer's guest.
const GUEST_400: &str = "`bad_request`, `path_rejected`: a malformed request, or a path outside \
                         the home.";
const GUEST_404: &str = "`not_found`: no such computer (or, on the computer, no such path).";
const GUEST_409: &str = "`computer_not_running` (stopped or provisioning: start it first), \
                         `computer_suspending` (idle suspension holds it), `stale_lease` (a newer \
                         lease fenced this one out), `lease_held`, `lease_mismatch`, \
                         `computer_destroyed`, `screen_releasing`, `action_refused`, `exists`.";
const GUEST_501: &str = "`unsupported`: this computer's guest cannot do that.";
const GUEST_502: &str = "`tunnel_lost` (the computer's connection dropped mid-operation; \
                         `uncertain` says whether it may have run), `guest_protocol_error`, \
                         `failed` (the computer failed at it: a process that would not start, a \
                         full disk).";
const GUEST_503: &str = "`computer_unavailable` (its guest is not connected yet), \
                         `screen_unavailable`.";
const GUEST_504: &str = "`guest_timeout`: the guest did not answer in time.";

/// The refusals of an operation through the guest, plus those of its JSON body if it has one.
fn guest_errors(doc: &mut Doc, json: bool) -> Vec<(u16, Value)> {
    let mut out = vec![
        (400, error(doc, if json { BAD_JSON } else { GUEST_400 })),
        (401, error(doc, UNAUTHORIZED)),
        (404, error(doc, GUEST_404)),
        (409, error(doc, GUEST_409)),
        (
            413,
            error(doc, "`too_large`, `payload_too_large`: over a size limit."),
        ),
        (501, error(doc, GUEST_501)),
        (502, error(doc, GUEST_502)),
        (503, error(doc, GUEST_503)),
        (504, error(doc, GUEST_504)),
    ];
    if json {
        out.push((408, error(doc, SLOW_BODY)));
    }
    out
}

/// `responses` from a success and a list of errors.
fn responses(ok: Vec<(u16, Value)>, errors: Vec<(u16, Value)>) -> Value {
    let mut map = Map::new();
    for (status, resp) in ok.into_iter().chain(errors) {
        map.entry(status.to_string()).or_insert(resp);
    }
    Value::Object(map)
}

/// The whole document.
pub fn document() -> Value {
    let mut doc = Doc::default();
    computers(&mut doc);
    maintenance(&mut doc);
    exec_and_files(&mut doc);
    homes(&mut doc);
    desktops(&mut doc);
    leases_and_live(&mut doc);
    mcp(&mut doc);
    misc(&mut doc);
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
                /v1/computers/{id}/mcp-tokens/{bot}`. Every error is an `ErrorBody` whose \
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
                    "description": "The API token (`rakazo serve` prints where it is).",
                },
            },
        },
    })
}

fn mcp(doc: &mut Doc) {
    let request = doc.of::<McpTokenRequest>();
    let token = doc.of::<McpToken>();
    let errs = vec![
        (
            400,
            error(
                doc,
                "`bad_request`: a malformed body or bot id, or `ttl_secs` outside 1..=86400.",
            ),
        ),
        (401, error(doc, UNAUTHORIZED)),
        (404, error(doc, NO_COMPUTER)),
        (408, error(doc, SLOW_BODY)),
        (413, error(doc, TOO_LARGE_JSON)),
    ];
    doc.route(
        "post",
        "/v1/computers/{id}/mcp-tokens/{bot}",
        "mintMcpToken",
        json!({
            "tags": ["mcp"],
            "summary": "A session token for the bot's MCP endpoint on this computer \
                        (`/v1/mcp/{computer}/{bot}`) and nothing else; `ttl_secs` defaults to an \
                        hour.",
            "requestBody": json_body(request, true),
            "responses": responses(vec![(200, json_ok("The token and its endpoint.", token))], errs),
        }),
    );
}

fn computers(doc: &mut Doc) {
    let create = doc.of::<CreateComputer>();
    let computer = doc.of::<Computer>();
    let list = doc.of::<ComputerList>();
    let body_errors = |doc: &mut Doc| {
        vec![
            (
                400,
                error(
                    doc,
                    "`bad_request`: a malformed body, a bad workspace or bot id, an \
                              unknown provider, limits out of range, or a placement the \
                              provider does not know.",
                ),
            ),
            (401, error(doc, UNAUTHORIZED)),
            (408, error(doc, SLOW_BODY)),
            (
                409,
                error(
                    doc,
                    "`computer_exists`, `home_in_use`: a private bot's computer or a \
                              workspace's team computer already exists.",
                ),
            ),
            (413, error(doc, TOO_LARGE_JSON)),
            (
                422,
                error(doc, "`provider_invalid`: the provider refused the machine."),
            ),
            (
                503,
                error(
                    doc,
                    "`provider_capacity`, `provider_unavailable`: try later.",
                ),
            ),
        ]
    };
    let errs = body_errors(doc);
    doc.route(
        "post",
        "/v1/computers",
        "createComputer",
        json!({
            "tags": ["computers"],
            "summary": "Create a computer: a team computer (`workspace`) or a bot's private one \
                        (`private_bot`), and start its machine.",
            "requestBody": json_body(create, true),
            "responses": responses(vec![(201, json_ok("The computer, created.", computer.clone()))], errs),
        }),
    );
    let errs = vec![(401, error(doc, UNAUTHORIZED))];
    doc.route(
        "get",
        "/v1/computers",
        "listComputers",
        json!({
            "tags": ["computers"],
            "summary": "List computers.",
            "responses": responses(vec![(200, json_ok("Every computer.", list))], errs),
        }),
    );
    let errs = vec![
        (401, error(doc, UNAUTHORIZED)),
        (404, error(doc, NO_COMPUTER)),
    ];
    doc.route(
        "get",
        "/v1/computers/{id}",
        "getComputer",
        json!({
            "tags": ["computers"],
            "summary": "Show a computer, with its machine's figures when its guest is connected.",
            "responses": responses(vec![(200, json_ok("The computer.", computer.clone()))], errs),
        }),
    );
    let lifecycle_errors = |doc: &mut Doc| {
        vec![
            (401, error(doc, UNAUTHORIZED)),
            (404, error(doc, NO_COMPUTER)),
            (409, error(doc, "`computer_destroyed`, `computer_suspending`, `computer_reserved` \
                              (a maintenance job holds it), `machine_gone`, `home_pending_restore`, \
                              `home_leases_held`, `home_changed`, `home_in_use`.")),
            (413, error(doc, "`home_quota_exceeded`: the home is over its quota.")),
            (422, error(doc, "`provider_invalid`: the provider refused the request.")),
            (502, error(doc, "`home_store_failed`, `tunnel_lost`: a step failed.")),
            (503, error(doc, "`provider_capacity`, `provider_unavailable`, `computer_unavailable`.")),
            (504, error(doc, GUEST_504)),
        ]
    };
    let errs = lifecycle_errors(doc);
    doc.route(
        "delete",
        "/v1/computers/{id}",
        "destroyComputer",
        json!({
            "tags": ["computers"],
            "summary": "Destroy a computer: its machine goes; its stored home stays until purged.",
            "responses": responses(vec![(204, json!({ "description": "Destroyed." }))], errs),
        }),
    );
    for (action, id, summary) in [
        (
            "stop",
            "stopComputer",
            "Stop a computer (its home is checkpointed first).",
        ),
        (
            "start",
            "startComputer",
            "Start a stopped computer (a gone machine is replaced).",
        ),
    ] {
        let errs = lifecycle_errors(doc);
        doc.route(
            "post",
            &format!("/v1/computers/{{id}}/{action}"),
            id,
            json!({
                "tags": ["computers"],
                "summary": summary,
                "responses": responses(vec![(200, json_ok("The computer now.", computer.clone()))], errs),
            }),
        );
    }
}

fn maintenance(doc: &mut Doc) {
    let job = doc.of::<Job>();
    let jobs = doc.of::<JobList>();
    let release = doc.of::<ReleaseInterrupted>();
    for (action, id, summary) in [
        (
            "update",
            "updateComputer",
            "Start a maintenance job replacing the computer's machine \
                                      with a fresh one (home checkpointed, then restored).",
        ),
        (
            "recover",
            "recoverComputer",
            "Start a maintenance job recovering a computer whose \
                                        machine failed.",
        ),
    ] {
        let errs = vec![
            (401, error(doc, UNAUTHORIZED)),
            (404, error(doc, NO_COMPUTER)),
            (
                409,
                error(
                    doc,
                    "`computer_reserved` (another job holds it), `job_conflict`, \
                              `computer_destroyed`, `computer_suspending`.",
                ),
            ),
        ];
        doc.route(
            "post",
            &format!("/v1/computers/{{id}}/{action}"),
            id,
            json!({
                "tags": ["maintenance"],
                "summary": summary,
                "responses": responses(vec![(202, json_ok("The job, accepted.", job.clone()))], errs),
            }),
        );
    }
    let errs = vec![
        (401, error(doc, UNAUTHORIZED)),
        (404, error(doc, NO_COMPUTER)),
    ];
    doc.route(
        "get",
        "/v1/computers/{id}/jobs",
        "listJobs",
        json!({
            "tags": ["maintenance"],
            "summary": "A computer's maintenance jobs.",
            "responses": responses(vec![(200, json_ok("Its jobs.", jobs))], errs),
        }),
    );
    let errs = vec![
        (401, error(doc, UNAUTHORIZED)),
        (404, error(doc, "`job_not_found`.")),
    ];
    doc.route(
        "get",
        "/v1/jobs/{job}",
        "getJob",
        json!({
            "tags": ["maintenance"],
            "summary": "Show a maintenance job.",
            "responses": responses(vec![(200, json_ok("The job.", job.clone()))], errs),
        }),
    );
    let errs = vec![
        (400, error(doc, BAD_JSON)),
        (401, error(doc, UNAUTHORIZED)),
        (404, error(doc, "`job_not_found`.")),
        (408, error(doc, SLOW_BODY)),
        (
            409,
            error(
                doc,
                "`job_not_interrupted`: the job is not an interrupted one.",
            ),
        ),
        (413, error(doc, TOO_LARGE_JSON)),
    ];
    doc.route(
        "post",
        "/v1/jobs/{job}/release-interrupted",
        "releaseInterruptedJob",
        json!({
            "tags": ["maintenance"],
            "summary": "Release an interrupted job's hold on its computer (an operator's call).",
            "requestBody": json_body(release, true),
            "responses": responses(vec![(200, json_ok("The job, released.", job))], errs),
        }),
    );
}

fn exec_and_files(doc: &mut Doc) {
    let spec = doc.of::<ExecSpec>();
    let line = doc.of::<ExecLine>();
    let errs = guest_errors(doc, true);
    doc.route(
        "post",
        "/v1/computers/{id}/exec",
        "exec",
        json!({
            "tags": ["exec"],
            "summary": "Run a command. The answer streams as NDJSON: `started`, `stdout`/`stderr` \
                        chunks, then one `exit` or `error` line (each line an `ExecLine`).",
            "description": "To stream stdin, send `application/vnd.rakazo.exec-stream`: the \
                            `ExecSpec` as JSON on the first line, then the raw stdin bytes.",
            "requestBody": {
                "required": true,
                "content": {
                    "application/json": { "schema": spec },
                    super::EXEC_STREAM_CONTENT_TYPE: {
                        "schema": { "type": "string", "format": "binary" },
                    },
                },
            },
            "responses": responses(vec![(200, json!({
                "description": "The command's events, one JSON `ExecLine` per line.",
                "content": { "application/x-ndjson": { "schema": line } },
            }))], errs),
        }),
    );
    let activity = doc.of::<ActivityPage>();
    let event = doc.of::<ActivityEvent>();
    let seq = "a seq: a non-negative integer";
    let errs = vec![
        (
            400,
            error(doc, "`bad_request`: a query parameter out of range."),
        ),
        (401, error(doc, UNAUTHORIZED)),
        (404, error(doc, NO_COMPUTER)),
    ];
    doc.route(
        "get",
        "/v1/computers/{id}/activity",
        "activity",
        json!({
            "tags": ["activity"],
            "summary": "A page of the computer's activity feed (a destroyed computer's stays \
                        readable).",
            "parameters": [
                query("after", false, &format!("Events after this seq ({seq})."), integer(0, None)),
                query("before", false, &format!("Events before this seq ({seq})."), integer(0, None)),
                query("limit", false, "At most this many events (default 100).", integer(1, Some(500))),
                query("order", false, "`asc` (oldest first, the default) or `desc`.",
                      json!({ "type": "string", "enum": ["asc", "desc"] })),
            ],
            "responses": responses(vec![(200, json_ok("The page.", activity))], errs.clone()),
        }),
    );
    doc.route(
        "get",
        "/v1/computers/{id}/activity/stream",
        "activityStream",
        json!({
            "tags": ["activity"],
            "summary": "Follow the activity feed as server-sent events, until the client leaves.",
            "description": "Each event's `data` is one `ActivityEvent` as JSON; `: keepalive` \
                            comments keep a quiet stream open.",
            "parameters": [
                query("after", false, "Events after this seq (default: only what comes next).",
                      integer(0, None)),
            ],
            "responses": responses(vec![(200, json!({
                "description": "The event stream.",
                "content": { "text/event-stream": { "schema": {
                    "description": "One event: `event: activity`, `id:` its seq, `data:` the \
                                    `ActivityEvent` as JSON.",
                    "type": "object",
                    "required": ["event", "data"],
                    "properties": {
                        "event": { "const": "activity" },
                        "id": { "type": "string", "pattern": "^[0-9]+$" },
                        "data": { "type": "string", "contentMediaType": "application/json",
                                  "contentSchema": event },
                    },
                } } },
            }))], errs),
        }),
    );
    let list = doc.of::<FileList>();
    let lease_params = || {
        vec![
            query(
                "bot",
                false,
                "The bot whose lease `lease` is (with `lease`).",
                string(),
            ),
            query(
                "lease",
                false,
                "The bot's execution lease: checked (fenced) on the computer.",
                string(),
            ),
        ]
    };
    let mut params = vec![query(
        "path",
        false,
        "A path in the home (default: the home).",
        string(),
    )];
    params.extend(lease_params());
    let errs = guest_errors(doc, false);
    doc.route(
        "get",
        "/v1/computers/{id}/files",
        "listFiles",
        json!({
            "tags": ["files"],
            "summary": "List a directory of the computer's home.",
            "parameters": params,
            "responses": responses(vec![(200, json_ok("Its entries.", list))], errs),
        }),
    );
    let mut params = vec![
        query("path", true, "The file's path in the home.", string()),
        query(
            "max_bytes",
            false,
            "Refuse (413) a file larger than this.",
            integer(0, None),
        ),
    ];
    params.extend(lease_params());
    let errs = guest_errors(doc, false);
    doc.route(
        "get",
        "/v1/computers/{id}/files/content",
        "readFile",
        json!({
            "tags": ["files"],
            "summary": "Download a file's bytes.",
            "parameters": params,
            "responses": responses(vec![(200, without_required(bytes("The file's bytes, streamed (`Content-Length` is its size).")))], errs),
        }),
    );
    let written = doc.of::<Written>();
    let mut params = vec![
        query("path", true, "The file's path in the home.", string()),
        query(
            "executable",
            false,
            "Make the file executable.",
            json!({ "type": "boolean" }),
        ),
    ];
    params.extend(lease_params());
    let mut errs = guest_errors(doc, false);
    errs.push((
        411,
        error(
            doc,
            "`length_required`: uploads stream and need a Content-Length.",
        ),
    ));
    doc.route(
        "put",
        "/v1/computers/{id}/files/content",
        "writeFile",
        json!({
            "tags": ["files"],
            "summary": "Upload a file (replacing one there), streamed; `Content-Length` required.",
            "parameters": params,
            "requestBody": bytes("The file's bytes."),
            "responses": responses(vec![(200, json_ok("The bytes written.", written))], errs),
        }),
    );
    let attach = doc.of::<AttachRequest>();
    let attached = doc.of::<Attached>();
    let errs = guest_errors(doc, true);
    doc.route(
        "post",
        "/v1/computers/{id}/files/attach",
        "attachFile",
        json!({
            "tags": ["files"],
            "summary": "A bot's file as a download URL for its user (`/att/…`, expires).",
            "requestBody": json_body(attach, true),
            "responses": responses(vec![(200, json_ok("The download link.", attached))], errs),
        }),
    );
    let uploaded = doc.of::<Uploaded>();
    let mut errs = guest_errors(doc, false);
    errs.push((
        411,
        error(
            doc,
            "`length_required`: uploads stream and need a Content-Length.",
        ),
    ));
    errs.retain(|(s, _)| *s != 409 && *s != 413);
    errs.push((
        409,
        error(
            doc,
            "`control_required` (the user must hold the bot's control), \
                                `exists` (the name and its numbered variants are taken), and \
                                the refusals of any operation on the computer.",
        ),
    ));
    errs.push((
        413,
        error(doc, "`attachment_too_large`: over the attachment limit."),
    ));
    doc.route(
        "put",
        "/v1/computers/{id}/uploads/{bot}",
        "uploadToBot",
        json!({
            "tags": ["files"],
            "summary": "A user's upload into a bot's directory, under the user's control of the \
                        bot; `Content-Length` required.",
            "parameters": [
                query("name", true, "The file's name (no `/`, at most 255 bytes).", string()),
                query("control", true, "The user's control lease (from takeover).", string()),
            ],
            "requestBody": bytes("The file's bytes."),
            "responses": responses(vec![(200, json_ok("Where it landed.", uploaded))], errs),
        }),
    );
}

fn homes(doc: &mut Doc) {
    let info = doc.of::<HomeInfo>();
    let line = doc.of::<HomeLine>();
    let entries = doc.of::<HomeEntries>();
    let purged = doc.of::<Purged>();
    let reconciled = doc.of::<Reconciled>();
    let home_errors = |doc: &mut Doc| {
        vec![
            (
                400,
                error(doc, "`bad_request`: a query parameter out of range."),
            ),
            (401, error(doc, UNAUTHORIZED)),
            (
                404,
                error(doc, "`not_found`: no such computer, stored home or path."),
            ),
            (
                409,
                error(
                    doc,
                    "`computer_suspending`, `computer_not_running`, \
                              `home_pending_restore`, `home_leases_held`, `home_changed`, \
                              `home_in_use`, `home_too_many_leases`.",
                ),
            ),
            (413, error(doc, "`home_quota_exceeded`.")),
            (
                502,
                error(doc, "`home_store_failed`: the object store failed."),
            ),
        ]
    };
    let errs = home_errors(doc);
    doc.route(
        "get",
        "/v1/computers/{id}/home",
        "getHome",
        json!({
            "tags": ["homes"],
            "summary": "The computer's stored home: store, revision, whether a restore is pending.",
            "responses": responses(vec![(200, json_ok("The home.", info))], errs),
        }),
    );
    let flow = |line: &Value| {
        json!({
            "description": "NDJSON `HomeLine`s: `progress` lines, then one `done` or `error`. \
                            The flow runs to its end even if the client leaves.",
            "content": { "application/x-ndjson": { "schema": line } },
        })
    };
    let errs = home_errors(doc);
    doc.route(
        "post",
        "/v1/computers/{id}/home/checkpoint",
        "checkpointHome",
        json!({
            "tags": ["homes"],
            "summary": "Checkpoint the home now.",
            "parameters": [
                query("wait_ms", false, "How long to wait for bots' leases to end first.",
                      integer(0, Some(600_000))),
            ],
            "responses": responses(vec![(200, flow(&line))], errs),
        }),
    );
    let errs = home_errors(doc);
    doc.route(
        "post",
        "/v1/computers/{id}/home/restore",
        "restoreHome",
        json!({
            "tags": ["homes"],
            "summary": "Restore the latest checkpoint into the computer's home.",
            "responses": responses(vec![(200, flow(&line))], errs),
        }),
    );
    let errs = home_errors(doc);
    doc.route(
        "get",
        "/v1/computers/{id}/home/entries",
        "listHomeEntries",
        json!({
            "tags": ["homes"],
            "summary": "The latest checkpoint's entries (no guest needed).",
            "parameters": [
                query("prefix", false, "Only entries under this path.", string()),
                query("limit", false, "At most this many (default 10000).", integer(1, Some(100_000))),
            ],
            "responses": responses(vec![(200, json_ok("The entries.", entries))], errs),
        }),
    );
    let errs = home_errors(doc);
    doc.route(
        "get",
        "/v1/computers/{id}/home/content",
        "readHomeFile",
        json!({
            "tags": ["homes"],
            "summary": "One file's bytes out of the latest checkpoint (no guest needed).",
            "parameters": [query("path", true, "The file's path in the home.", string())],
            "responses": responses(vec![(200, without_required(bytes("The file's bytes, streamed.")))], errs),
        }),
    );
    let errs = vec![
        (401, error(doc, UNAUTHORIZED)),
        (
            502,
            error(doc, "`home_store_failed`: the object store failed."),
        ),
    ];
    doc.route(
        "post",
        "/v1/homes/reconcile",
        "reconcileHomes",
        json!({
            "tags": ["homes"],
            "summary": "Run the home store's reconciler now.",
            "responses": responses(vec![(200, json_ok("What it did.", reconciled))], errs),
        }),
    );
    let errs = vec![
        (400, error(doc, "`bad_request`: not a home key.")),
        (401, error(doc, UNAUTHORIZED)),
        (404, error(doc, "`not_found`: no such stored home.")),
        (409, error(doc, "`home_in_use`: a live computer holds it.")),
        (
            502,
            error(doc, "`home_store_failed`: the object store failed."),
        ),
    ];
    doc.route(
        "delete",
        "/v1/homes/{home_key}",
        "purgeHome",
        json!({
            "tags": ["homes"],
            "summary": "Purge a stored home no live computer holds.",
            "responses": responses(vec![(200, json_ok("Purged.", purged))], errs),
        }),
    );
}

fn desktops(doc: &mut Doc) {
    let lease_body = doc.of::<LeaseBody>();
    let screen = doc.of::<Screen>();
    let screens = doc.of::<ScreenList>();
    let released = doc.of::<ScreenReleased>();
    let observation = doc.of::<Observation>();
    let act = doc.of::<ActRequest>();
    let acted = doc.of::<ActResult>();
    let page = doc.of::<PageRequest>();
    let page_result = doc.of::<PageResult>();
    let errs = guest_errors(doc, false);
    doc.route(
        "get",
        "/v1/computers/{id}/screens",
        "listScreens",
        json!({
            "tags": ["desktops"],
            "summary": "The computer's bot desktops.",
            "responses": responses(vec![(200, json_ok("Its desktops.", screens))], errs),
        }),
    );
    for (action, id, summary, body, ok) in [
        (
            "ensure",
            "ensureScreen",
            "Start (or find) the bot's desktop, under its lease.",
            lease_body.clone(),
            json_ok("The desktop.", screen),
        ),
        (
            "release",
            "releaseScreen",
            "Stop the bot's desktop (its live URLs die first).",
            lease_body.clone(),
            json_ok("Released.", released),
        ),
        (
            "observe",
            "observe",
            "A screenshot of the bot's desktop (PNG in base64), or a note \
                                that it is unchanged since the previous one.",
            lease_body,
            json_ok("The observation.", observation),
        ),
        (
            "act",
            "act",
            "Mouse and keyboard actions on the bot's desktop, optionally observed \
                        after the screen settles.",
            act,
            json_ok("What was done.", acted),
        ),
    ] {
        let errs = guest_errors(doc, true);
        doc.route(
            "post",
            &format!("/v1/computers/{{id}}/screens/{{bot}}/{action}"),
            id,
            json!({
                "tags": ["desktops"],
                "summary": summary,
                "requestBody": json_body(body, true),
                "responses": responses(vec![(200, ok)], errs),
            }),
        );
    }
    for (action, id, summary) in [
        (
            "navigate",
            "browserNavigate",
            "Open `url` in the bot's browser and snapshot the page.",
        ),
        (
            "snapshot",
            "browserSnapshot",
            "The page's interactive elements, each with a ref.",
        ),
        (
            "act",
            "browserAct",
            "Click, fill, type, select or press by ref (`steps`); a step that \
                               fails answers `ok: false` with what completed.",
        ),
    ] {
        let errs = guest_errors(doc, true);
        doc.route(
            "post",
            &format!("/v1/computers/{{id}}/browser/{{bot}}/{action}"),
            id,
            json!({
                "tags": ["browser"],
                "summary": summary,
                "requestBody": json_body(page.clone(), true),
                "responses": responses(vec![(200, json_ok("The page now, or the failed step.",
                                                          page_result.clone()))], errs),
            }),
        );
    }
}

fn leases_and_live(doc: &mut Doc) {
    let request = doc.of::<LeaseRequest>();
    let lease = doc.of::<Lease>();
    let released = doc.of::<LeaseReleased>();
    let lease_errors = |doc: &mut Doc| {
        vec![
            (
                400,
                error(
                    doc,
                    "`bad_request`: a malformed body or bot id, a missing `owner` or \
                              `lease`, `ttl_ms` or `outcome` out of range.",
                ),
            ),
            (401, error(doc, UNAUTHORIZED)),
            (404, error(doc, NO_COMPUTER)),
            (408, error(doc, SLOW_BODY)),
            (
                409,
                error(
                    doc,
                    "`lease_held` (another run holds the bot's lease), \
                              `lease_mismatch`, `stale_lease`, `fence_exhausted`, \
                              `computer_not_running`, `computer_suspending`, \
                              `computer_destroyed`, `bot_running`.",
                ),
            ),
            (413, error(doc, TOO_LARGE_JSON)),
        ]
    };
    let errs = vec![
        (400, error(doc, "`bad_request`: not a bot id.")),
        (401, error(doc, UNAUTHORIZED)),
        (
            404,
            error(
                doc,
                "`not_found`: no such computer, or the bot holds no lease.",
            ),
        ),
    ];
    doc.route(
        "get",
        "/v1/computers/{id}/leases/{bot}",
        "getLease",
        json!({
            "tags": ["leases"],
            "summary": "The bot's execution lease on the computer.",
            "responses": responses(vec![(200, json_ok("The lease.", lease.clone()))], errs),
        }),
    );
    for (action, id, summary, ok) in [
        (
            "acquire",
            "acquireLease",
            "Take the bot's execution lease (`owner` required).",
            json_ok("The lease.", lease.clone()),
        ),
        (
            "renew",
            "renewLease",
            "Extend the lease (`lease` required).",
            json_ok("The lease.", lease),
        ),
        (
            "release",
            "releaseLease",
            "End the run (`lease` required, `outcome`): the home is \
                                     checkpointed when the last run ends.",
            json_ok("Released, with the run-end checkpoint.", released),
        ),
    ] {
        let errs = lease_errors(doc);
        doc.route(
            "post",
            &format!("/v1/computers/{{id}}/leases/{{bot}}/{action}"),
            id,
            json!({
                "tags": ["leases"],
                "summary": summary,
                "requestBody": json_body(request.clone(), true),
                "responses": responses(vec![(200, ok)], errs),
            }),
        );
    }
    let waiting = doc.of::<WaitingTakeoverRequest>();
    let waited = doc.of::<WaitingTakeover>();
    let errs = lease_errors(doc);
    doc.route(
        "post",
        "/v1/computers/{id}/leases/{bot}/waiting_takeover",
        "waitingTakeover",
        json!({
            "tags": ["live"],
            "summary": "The run holding `lease` asks for (or no longer needs) a person to take over.",
            "requestBody": json_body(waiting, true),
            "responses": responses(vec![(200, json_ok("The flag now.", waited))], errs),
        }),
    );
    let url_request = doc.of::<UrlRequest>();
    let live_url = doc.of::<LiveUrl>();
    for (path, id, summary) in [
        (
            "screens/{bot}/url",
            "liveUrl",
            "A capability URL (`/cap/…`) to watch (`view`), \
                                          drive (`control`) or type in (`terminal`) the bot's \
                                          desktop; the body may be empty.",
        ),
        (
            "terminals/{bot}/url",
            "terminalUrl",
            "A capability URL to the bot's terminal; the body \
                                                may be empty.",
        ),
    ] {
        let errs = lease_errors(doc);
        doc.route(
            "post",
            &format!("/v1/computers/{{id}}/{path}"),
            id,
            json!({
                "tags": ["live"],
                "summary": summary,
                "requestBody": json_body(url_request.clone(), false),
                "responses": responses(vec![(200, json_ok("The URL.", live_url.clone()))], errs),
            }),
        );
    }
    let empty = doc.of::<Empty>();
    let taken = doc.of::<ControlTaken>();
    let let_go = doc.of::<ControlReleased>();
    for (action, id, summary, ok) in [
        (
            "takeover",
            "takeover",
            "The user takes control of the bot's desktop (the bot's run \
                                  must have stopped).",
            json_ok("The control lease.", taken),
        ),
        (
            "release-control",
            "releaseControl",
            "The user gives the bot's desktop back.",
            json_ok("Released.", let_go),
        ),
    ] {
        let errs = lease_errors(doc);
        doc.route(
            "post",
            &format!("/v1/computers/{{id}}/screens/{{bot}}/{action}"),
            id,
            json!({
                "tags": ["live"],
                "summary": summary,
                "requestBody": json_body(empty.clone(), false),
                "responses": responses(vec![(200, ok)], errs),
            }),
        );
    }
}

fn misc(doc: &mut Doc) {
    let health = doc.of::<Health>();
    doc.route(
        "get",
        "/v1/health",
        "health",
        json!({
            "tags": ["service"],
            "summary": "Whether the server answers (no token needed).",
            "security": [],
            "responses": { "200": json_ok("It does.", health) },
        }),
    );
    doc.route(
        "get",
        "/v1/openapi.json",
        "openapi",
        json!({
            "tags": ["service"],
            "summary": "This document (no token needed).",
            "security": [],
            "responses": { "200": json_ok("The OpenAPI 3.1 document.", json!({ "type": "object" })) },
        }),
    );
    let errs = vec![
        (400, error(doc, "`bad_request`: not a websocket upgrade.")),
        (
            503,
            error(
                doc,
                "`tunnel_unavailable` (this server carries no tunnel), `tunnel_busy`.",
            ),
        ),
    ];
    doc.route(
        "get",
        "/v1/tunnel",
        "guestTunnel",
        json!({
            "tags": ["service"],
            "summary": "The guests' tunnel over a websocket (guests authenticate inside it, not \
                        with the API token).",
            "description": "Only a guest's upgrade (`Connection: Upgrade`, `Upgrade: websocket`, \
                            `Sec-WebSocket-Key`) gets the 101; the API tester checks the \
                            refusals here, and the tunnel itself is tested through real guests \
                            (`tests/system/tunnel_tcp.rs`).",
            "security": [],
            "responses": responses(vec![(101, json!({ "description": "Switching to the websocket." }))], errs),
        }),
    );
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
        assert!(doc["paths"]["/v1/computers/{id}/exec"]["post"].is_object());
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
}
