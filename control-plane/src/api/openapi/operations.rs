//! What the OpenAPI document says about each route of [`crate::route`]: its tag, summary, query,
//! body, success and the codes it may answer. One exhaustive match over [`Endpoint`], so a route
//! added to the table does not compile until it is documented here (or said to be outside the
//! document, with the reason). Paths, path parameters, operationIds, the 401 of routes behind the
//! token and each status's codes are derived by [`super`], not written here.

use super::{
    bytes, integer, json_body, json_ok, query, revision_query, string, without_required, Doc,
};
use crate::route::Endpoint;
use crate::schema::activity::{ActivityEvent, ActivityPage};
use crate::schema::browser::{PageRequest, PageResult};
use crate::schema::code::ApiCode::{self, *};
use crate::schema::computer::{Computer, ComputerList, CreateComputer, ForkComputer};
use crate::schema::exec::{ExecLine, ExecSpec};
use crate::schema::files::{AttachRequest, Attached, FileList, Uploaded, Written};
use crate::schema::home::{
    HomeDiff, HomeEntries, HomeInfo, HomeLine, HomeRevisions, Purged, Reconciled,
};
use crate::schema::job::{Job, JobList, ReleaseInterrupted};
use crate::schema::lease::{Lease, LeaseReleased, LeaseRequest};
use crate::schema::mcp::{McpToken, McpTokenRequest};
use crate::schema::network::{NetworkPolicy, SetNetworkPolicy, WorkspaceNetworkPolicy};
use crate::schema::preview::{CreatePreview, CreatedPreview, Preview, PreviewList};
use crate::schema::process::{KillRequest, LogLine, Process, ProcessList};
use crate::schema::screen::{
    ActRequest, ActResult, ControlReleased, ControlTaken, LeaseBody, LiveUrl, Observation,
    ObserveRequest, Screen, ScreenList, ScreenReleased, UrlRequest, WaitingTakeover,
    WaitingTakeoverRequest,
};
use crate::schema::secret::{PutSecret, SecretDeleted, SecretInfo, SecretList};
use crate::schema::service::{Service, ServiceList, SetService};
use crate::schema::token::{
    CreateToken, CreatedToken, OpenSession, SessionInfo, TokenInfo, TokenList,
};
use crate::schema::{Empty, Health};
use serde_json::{json, Value};

/// One route as the document describes it.
pub(super) struct Operation {
    pub tag: &'static str,
    pub summary: &'static str,
    pub description: Option<&'static str>,
    /// Query parameters ([`query`]).
    pub query: Vec<Value>,
    pub body: Option<Value>,
    /// The success: its status and response object.
    pub ok: (u16, Value),
    /// The codes it may answer besides `unauthorized` (derived from its authentication).
    pub codes: Vec<ApiCode>,
}

/// Whether a route is in the document.
pub(super) enum Described {
    Yes(Operation),
    /// Outside the document, for this reason.
    #[cfg_attr(
        not(test),
        allow(dead_code, reason = "the tests check every route gives one")
    )]
    No(&'static str),
}

mod pools;
mod recordings;

/// The refusals of a JSON body.
const JSON_BODY: &[ApiCode] = &[BadRequest, BodyTimeout, PayloadTooLarge];

/// The refusals of an operation that goes through the computer's guest.
const GUEST: &[ApiCode] = &[
    BadRequest,
    PathRejected,
    NotFound,
    ComputerNotRunning,
    ComputerSuspending,
    StaleLease,
    LeaseHeld,
    LeaseMismatch,
    ComputerDestroyed,
    ScreenReleasing,
    ActionRefused,
    Exists,
    TooLarge,
    PayloadTooLarge,
    Unsupported,
    TunnelLost,
    GuestProtocolError,
    Failed,
    ComputerUnavailable,
    ScreenUnavailable,
    GuestTimeout,
];

/// The refusals of starting, stopping or destroying a computer.
const LIFECYCLE: &[ApiCode] = &[
    NotFound,
    ComputerDestroyed,
    ComputerSuspending,
    ComputerReserved,
    MachineGone,
    HomePendingRestore,
    HomeLeasesHeld,
    HomeChanged,
    HomeInUse,
    HomeQuotaExceeded,
    ProviderInvalid,
    HomeStoreFailed,
    TunnelLost,
    ProviderCapacity,
    ProviderUnavailable,
    ComputerUnavailable,
    GuestTimeout,
];

/// The refusals of a stored home's routes.
const HOME: &[ApiCode] = &[
    BadRequest,
    NotFound,
    ComputerSuspending,
    ComputerNotRunning,
    HomePendingRestore,
    HomeLeasesHeld,
    HomeChanged,
    HomeInUse,
    HomeTooManyLeases,
    HomeQuotaExceeded,
    HomeNotIncremental,
    HomeStoreFailed,
];

/// The refusals of a lease's routes, and of the live routes under a bot's lease.
const LEASE: &[ApiCode] = &[
    BadRequest,
    NotFound,
    BodyTimeout,
    LeaseHeld,
    LeaseMismatch,
    StaleLease,
    FenceExhausted,
    ComputerNotRunning,
    ComputerSuspending,
    ComputerDestroyed,
    BotRunning,
    PayloadTooLarge,
];

fn codes(sets: &[&[ApiCode]]) -> Vec<ApiCode> {
    sets.iter().flat_map(|s| s.iter().copied()).collect()
}

/// The optional `bot` + `lease` pair of the file routes.
fn lease_params() -> [Value; 2] {
    [
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
}

fn op(
    tag: &'static str,
    summary: &'static str,
    ok: (u16, Value),
    codes: Vec<ApiCode>,
) -> Operation {
    Operation {
        tag,
        summary,
        description: None,
        query: Vec::new(),
        body: None,
        ok,
        codes,
    }
}

impl Operation {
    fn body(mut self, body: Value) -> Self {
        self.body = Some(body);
        self
    }

    fn query(mut self, query: impl IntoIterator<Item = Value>) -> Self {
        self.query.extend(query);
        self
    }

    fn description(mut self, description: &'static str) -> Self {
        self.description = Some(description);
        self
    }
}

/// What the document says about `e`.
pub(super) fn describe(e: Endpoint, doc: &mut Doc) -> Described {
    use Endpoint as E;
    let guest_json = || codes(&[GUEST, JSON_BODY]);
    let operation = match e {
        E::Mcp => {
            return Described::No(
                "MCP's streamable HTTP transport, described by MCP; the document's description \
                 points at it",
            )
        }
        E::Download => return Described::No("an attachment link: its path is its credential"),
        E::Metrics => return Described::No("Prometheus' text format, outside /v1"),
        E::PreviewSignIn | E::PreviewHandOff => {
            return Described::No("a browser's page and form on the console's origin, not an API")
        }
        E::SetService => op(
            "processes",
            "Set a service: a detached process the computer starts again each time it starts \
             (after a stop, an idle suspension, a crash). Started now on a running computer; a \
             new command line ends the old one's process.",
            (200, json_ok("The service.", doc.of::<Service>())),
            codes(&[GUEST, JSON_BODY, &[TooManyProcesses, TooManyServices]]),
        )
        .body(json_body(doc.of::<SetService>(), true)),
        E::ListServices => op(
            "processes",
            "The computer's services, each with its process as the computer reports it.",
            (200, json_ok("Its services.", doc.of::<ServiceList>())),
            vec![NotFound],
        ),
        E::CreatePool | E::ListPools | E::GetPool | E::ResizePool | E::DeletePool => {
            match pools::describe(e, doc) {
                Some(op) => op,
                None => unreachable!("a pool route"),
            }
        }
        E::SetRecording | E::SetWorkspaceRecording | E::ListRecordings | E::ReadRecording => {
            match recordings::describe(e, doc) {
                Some(op) => op,
                None => unreachable!("a recording route"),
            }
        }
        E::DeleteService => op(
            "processes",
            "Remove a service; its process, if it runs, is sent TERM.",
            (200, json_ok("The service, removed.", doc.of::<Service>())),
            vec![NotFound],
        ),
        E::CreatePreview => op(
            "previews",
            "Make a preview URL for a TCP port on the computer's loopback (docs/previews.md): \
             its own origin, expiring and revocable. Its URL is answered this once.",
            (
                201,
                json_ok("The preview, with its URL.", doc.of::<CreatedPreview>()),
            ),
            codes(&[
                JSON_BODY,
                &[
                    NotFound,
                    ComputerDestroyed,
                    TooManyPreviews,
                    PreviewUnavailable,
                ],
            ]),
        )
        .body(json_body(doc.of::<CreatePreview>(), true)),
        E::ListPreviews => op(
            "previews",
            "The computer's preview URLs (never the URLs themselves); `all=true` also lists \
             expired and revoked ones.",
            (200, json_ok("Its previews.", doc.of::<PreviewList>())),
            vec![BadRequest, NotFound],
        )
        .query(vec![query(
            "all",
            false,
            "Also expired and revoked previews.",
            json!({ "type": "boolean" }),
        )]),
        E::RevokePreview => op(
            "previews",
            "Revoke a preview URL: refused from now on, its open connections closed.",
            (200, json_ok("The preview, revoked.", doc.of::<Preview>())),
            vec![NotFound],
        ),
        E::CreateComputer => op(
            "computers",
            "Create a computer: a team computer (`workspace`) or a bot's private one \
             (`private_bot`), and start its machine.",
            (201, json_ok("The computer, created.", doc.of::<Computer>())),
            codes(&[
                JSON_BODY,
                &[ComputerExists, HomeInUse, ProviderInvalid, PoolNotFound],
                &[ProviderCapacity, ProviderUnavailable],
            ]),
        )
        .body(json_body(doc.of::<CreateComputer>(), true)),
        E::ForkComputer => op(
            "computers",
            "Fork a computer: a new computer (team or private, as on create) whose home starts \
             from a revision of this one's (default: its latest, after a checkpoint if it \
             runs), sharing its stored data. Bots' browser profiles come along, signed-in \
             sessions included.",
            (
                201,
                json_ok("The new computer, started.", doc.of::<Computer>()),
            ),
            codes(&[
                JSON_BODY,
                &[
                    NotFound,
                    ComputerExists,
                    HomeInUse,
                    Exists,
                    HomeNotIncremental,
                ],
                &[HomeLeasesHeld, HomeStoreFailed, ProviderInvalid],
                &[ProviderCapacity, ProviderUnavailable],
            ]),
        )
        .body(json_body(doc.of::<ForkComputer>(), true)),
        E::ListComputers => op(
            "computers",
            "List the computers the token sees.",
            (
                200,
                json_ok("Every computer it sees.", doc.of::<ComputerList>()),
            ),
            vec![BadRequest],
        )
        .query([query(
            "machine",
            false,
            "`true`: each running computer's machine report too (reused for 3 s; a guest \
             that does not answer within 1 s is shown without one).",
            json!({ "type": "string", "enum": ["true", "false"] }),
        )]),
        E::GetComputer => op(
            "computers",
            "Show a computer, with its machine's figures when its guest is connected.",
            (200, json_ok("The computer.", doc.of::<Computer>())),
            vec![NotFound],
        ),
        E::DestroyComputer => op(
            "computers",
            "Destroy a computer: its machine goes; its stored home stays until purged.",
            (204, json!({ "description": "Destroyed." })),
            LIFECYCLE.to_vec(),
        ),
        E::StopComputer => op(
            "computers",
            "Stop a computer (its home is checkpointed first).",
            (200, json_ok("The computer now.", doc.of::<Computer>())),
            LIFECYCLE.to_vec(),
        ),
        E::StartComputer => op(
            "computers",
            "Start a stopped computer (a gone machine is replaced).",
            (200, json_ok("The computer now.", doc.of::<Computer>())),
            LIFECYCLE.to_vec(),
        ),
        E::UpdateComputer | E::RecoverComputer => op(
            "maintenance",
            if e == E::UpdateComputer {
                "Start a maintenance job replacing the computer's machine with a fresh one (home \
                 checkpointed, then restored)."
            } else {
                "Start a maintenance job recovering a computer whose machine failed."
            },
            (202, json_ok("The job, accepted.", doc.of::<Job>())),
            vec![
                NotFound,
                ComputerReserved,
                ComputerBusy,
                JobConflict,
                ComputerDestroyed,
                ComputerSuspending,
            ],
        ),
        E::ListJobs => op(
            "maintenance",
            "A computer's maintenance jobs.",
            (200, json_ok("Its jobs.", doc.of::<JobList>())),
            vec![NotFound],
        ),
        E::GetJob => op(
            "maintenance",
            "Show a maintenance job.",
            (200, json_ok("The job.", doc.of::<Job>())),
            vec![JobNotFound],
        ),
        E::ReleaseInterrupted => op(
            "maintenance",
            "Release an interrupted job's hold on its computer (an operator's call).",
            (200, json_ok("The job, released.", doc.of::<Job>())),
            codes(&[JSON_BODY, &[JobNotFound, JobNotInterrupted]]),
        )
        .body(json_body(doc.of::<ReleaseInterrupted>(), true)),
        E::Exec => {
            let spec = doc.of::<ExecSpec>();
            let line = doc.of::<ExecLine>();
            op(
                "exec",
                "Run a command. The answer streams as NDJSON: `started`, `stdout`/`stderr` \
                 chunks, then one `exit` or `error` line (each line an `ExecLine`).",
                (
                    200,
                    json!({
                        "description": "The command's events, one JSON `ExecLine` per line.",
                        "content": { "application/x-ndjson": { "schema": line } },
                    }),
                ),
                guest_json(),
            )
            .description(
                "To stream stdin, send `application/vnd.rakazo.exec-stream`: the `ExecSpec` as \
                 JSON on the first line, then the raw stdin bytes.",
            )
            .body(json!({
                "required": true,
                "content": {
                    "application/json": { "schema": spec },
                    crate::api::EXEC_STREAM_CONTENT_TYPE: {
                        "schema": { "type": "string", "format": "binary" },
                    },
                },
            }))
        }
        E::Activity => {
            let seq = "a seq: a non-negative integer";
            let after = format!("Events after this seq ({seq}).");
            let before = format!("Events before this seq ({seq}).");
            op(
                "activity",
                "A page of the computer's activity feed (a destroyed computer's stays readable).",
                (200, json_ok("The page.", doc.of::<ActivityPage>())),
                vec![BadRequest, NotFound],
            )
            .query([
                query("after", false, &after, integer(0, None)),
                query("before", false, &before, integer(0, None)),
                query(
                    "limit",
                    false,
                    "At most this many events (default 100).",
                    integer(1, Some(500)),
                ),
                query(
                    "order",
                    false,
                    "`asc` (oldest first, the default) or `desc`.",
                    json!({ "type": "string", "enum": ["asc", "desc"] }),
                ),
            ])
        }
        E::ActivityStream => {
            let event = doc.of::<ActivityEvent>();
            op(
                "activity",
                "Follow the activity feed as server-sent events, until the client leaves.",
                (
                    200,
                    json!({
                        "description": "The event stream.",
                        "content": { "text/event-stream": { "schema": {
                            "description": "One event: `event: activity`, `id:` its seq, \
                                            `data:` the `ActivityEvent` as JSON.",
                            "type": "object",
                            "required": ["event", "data"],
                            "properties": {
                                "event": { "const": "activity" },
                                "id": { "type": "string", "pattern": "^[0-9]+$" },
                                "data": { "type": "string",
                                          "contentMediaType": "application/json",
                                          "contentSchema": event },
                            },
                        } } },
                    }),
                ),
                vec![BadRequest, NotFound],
            )
            .description(
                "Each event's `data` is one `ActivityEvent` as JSON; `: keepalive` comments keep \
                 a quiet stream open.",
            )
            .query([query(
                "after",
                false,
                "Events after this seq (default: only what comes next).",
                integer(0, None),
            )])
        }
        E::StartProcess => op(
            "processes",
            "Start a detached process: it outlives the request, its output is kept by the \
             computer (docs/api.md#processes). `stdin` is refused: attach to write to it.",
            (201, json_ok("The process, started.", doc.of::<Process>())),
            codes(&[GUEST, JSON_BODY, &[TooManyProcesses]]),
        )
        .body(json_body(doc.of::<ExecSpec>(), true)),
        E::ListProcesses => op(
            "processes",
            "The computer's detached processes: running, and the last exited.",
            (200, json_ok("Its processes.", doc.of::<ProcessList>())),
            GUEST.to_vec(),
        ),
        E::GetProcess => op(
            "processes",
            "One detached process.",
            (200, json_ok("The process.", doc.of::<Process>())),
            GUEST.to_vec(),
        ),
        E::ProcessLogs | E::AttachProcess => {
            let line = doc.of::<LogLine>();
            let ok = (
                200,
                json!({
                    "description": "NDJSON, one `LogLine` per line: `opened`, then `output` \
                                    chunks, then `exit` (or `error`).",
                    "content": { "application/x-ndjson": { "schema": line } },
                }),
            );
            let offset = query(
                "offset",
                false,
                "The byte offset to read from (default: the oldest kept; for an attach, now). \
                 Output older than what is kept is reported as `dropped`.",
                integer(0, None),
            );
            if e == E::ProcessLogs {
                op(
                    "processes",
                    "A process's output (stdout and stderr interleaved), optionally followed \
                     until it exits.",
                    ok,
                    GUEST.to_vec(),
                )
                .query([
                    offset,
                    query(
                        "follow",
                        false,
                        "Keep the answer open and stream output as it comes, until the process \
                         exits.",
                        json!({ "type": "boolean" }),
                    ),
                ])
            } else {
                op(
                    "processes",
                    "Attach to a process: the request body streams to its stdin, its output \
                     streams back; ending the body detaches (the process keeps running).",
                    ok,
                    GUEST.to_vec(),
                )
                .query([offset])
                .body(without_required(bytes(
                    "Bytes for the process's stdin, streamed.",
                )))
            }
        }
        E::KillProcess => op(
            "processes",
            "Send a signal (default TERM) to a process's group.",
            (200, json_ok("The process.", doc.of::<Process>())),
            guest_json(),
        )
        .body(json_body(doc.of::<KillRequest>(), false)),
        E::ListFiles => op(
            "files",
            "List a directory of the computer's home.",
            (200, json_ok("Its entries.", doc.of::<FileList>())),
            GUEST.to_vec(),
        )
        .query([query(
            "path",
            false,
            "A path in the home (default: the home).",
            string(),
        )])
        .query(lease_params()),
        E::ReadFile => op(
            "files",
            "Download a file's bytes.",
            (
                200,
                without_required(bytes(
                    "The file's bytes, streamed (`Content-Length` is its size).",
                )),
            ),
            GUEST.to_vec(),
        )
        .query([
            query("path", true, "The file's path in the home.", string()),
            query(
                "max_bytes",
                false,
                "Refuse (413) a file larger than this.",
                integer(0, None),
            ),
        ])
        .query(lease_params()),
        E::WriteFile => op(
            "files",
            "Upload a file (replacing one there), streamed; `Content-Length` required.",
            (200, json_ok("The bytes written.", doc.of::<Written>())),
            codes(&[GUEST, &[LengthRequired]]),
        )
        .query([
            query("path", true, "The file's path in the home.", string()),
            query(
                "executable",
                false,
                "Make the file executable.",
                json!({ "type": "boolean" }),
            ),
        ])
        .query(lease_params())
        .body(bytes("The file's bytes.")),
        E::AttachFile => op(
            "files",
            "A bot's file as a download URL for its user (`/att/…`, expires).",
            (200, json_ok("The download link.", doc.of::<Attached>())),
            guest_json(),
        )
        .body(json_body(doc.of::<AttachRequest>(), true)),
        E::UploadToBot => op(
            "files",
            "A user's upload into a bot's directory, under the user's control of the bot; \
             `Content-Length` required.",
            (200, json_ok("Where it landed.", doc.of::<Uploaded>())),
            codes(&[
                GUEST,
                &[LengthRequired, ControlRequired, AttachmentTooLarge],
            ]),
        )
        .query([
            query(
                "name",
                true,
                "The file's name (no `/`, at most 255 bytes).",
                string(),
            ),
            query(
                "control",
                true,
                "The user's control lease (from takeover).",
                string(),
            ),
        ])
        .body(bytes("The file's bytes.")),
        E::GetHome => op(
            "homes",
            "The computer's stored home: store, revision, whether a restore is pending.",
            (200, json_ok("The home.", doc.of::<HomeInfo>())),
            HOME.to_vec(),
        ),
        E::CheckpointHome => op(
            "homes",
            "Checkpoint the home now.",
            (200, home_flow(doc)),
            HOME.to_vec(),
        )
        .query([query(
            "wait_ms",
            false,
            "How long to wait for bots' leases to end first.",
            integer(0, Some(600_000)),
        )]),
        E::RestoreHome => op(
            "homes",
            "Restore the latest checkpoint, or an earlier revision, into the computer's home. \
             A revision is first saved as it is now (if the computer runs), then the chosen \
             revision becomes the latest and is imported; a stopped computer gets it at its \
             next start.",
            (200, home_flow(doc)),
            HOME.to_vec(),
        )
        .query([revision_query(
            "The revision to go back to (default: the latest).",
        )]),
        E::HomeRevisions => op(
            "homes",
            "The home's revisions, oldest first (no guest needed).",
            (200, json_ok("The revisions.", doc.of::<HomeRevisions>())),
            HOME.to_vec(),
        ),
        E::HomeDiff => op(
            "homes",
            "What changed between two revisions: paths added, removed and changed.",
            (200, json_ok("The differences.", doc.of::<HomeDiff>())),
            HOME.to_vec(),
        )
        .query([
            query("from", true, "The earlier revision.", integer(1, None)),
            query("to", true, "The later revision.", integer(1, None)),
            query(
                "limit",
                false,
                "At most this many (default 10000).",
                integer(1, Some(100_000)),
            ),
        ]),
        E::HomeEntries => op(
            "homes",
            "The latest checkpoint's entries (no guest needed).",
            (200, json_ok("The entries.", doc.of::<HomeEntries>())),
            HOME.to_vec(),
        )
        .query([
            query("prefix", false, "Only entries under this path.", string()),
            revision_query("The revision to list (default: the latest)."),
            query(
                "limit",
                false,
                "At most this many (default 10000).",
                integer(1, Some(100_000)),
            ),
        ]),
        E::HomeContent => op(
            "homes",
            "One file's bytes out of the latest checkpoint (no guest needed).",
            (200, without_required(bytes("The file's bytes, streamed."))),
            HOME.to_vec(),
        )
        .query([
            query("path", true, "The file's path in the home.", string()),
            revision_query("The revision to read (default: the latest)."),
        ]),
        E::ReconcileHomes => op(
            "homes",
            "Run the home store's reconciler now.",
            (200, json_ok("What it did.", doc.of::<Reconciled>())),
            vec![HomeStoreFailed],
        ),
        E::PurgeHome => op(
            "homes",
            "Purge a stored home no live computer holds.",
            (200, json_ok("Purged.", doc.of::<Purged>())),
            vec![BadRequest, NotFound, HomeInUse, HomeStoreFailed],
        ),
        E::ListSecrets => op(
            "secrets",
            "A workspace's secrets: names, domains, header templates, placeholders (never a \
             value).",
            (200, json_ok("Its secrets.", doc.of::<SecretList>())),
            vec![BadRequest],
        ),
        E::PutSecret => op(
            "secrets",
            "Set or rotate a secret: its contained computers get its placeholder, their egress \
             gateway puts the value into requests to its domains only.",
            (
                200,
                json_ok("The secret, without its value.", doc.of::<SecretInfo>()),
            ),
            codes(&[JSON_BODY, &[TooManySecrets]]),
        )
        .body(json_body(doc.of::<PutSecret>(), true)),
        E::DeleteSecret => op(
            "secrets",
            "Delete a secret; its computers stop substituting it at once.",
            (200, json_ok("Deleted.", doc.of::<SecretDeleted>())),
            vec![BadRequest, NotFound],
        ),
        E::ListScreens => op(
            "desktops",
            "The computer's bot desktops.",
            (200, json_ok("Its desktops.", doc.of::<ScreenList>())),
            GUEST.to_vec(),
        ),
        E::EnsureScreen => op(
            "desktops",
            "Start (or find) the bot's desktop, under its lease.",
            (200, json_ok("The desktop.", doc.of::<Screen>())),
            guest_json(),
        )
        .body(json_body(doc.of::<LeaseBody>(), true)),
        E::ReleaseScreen => op(
            "desktops",
            "Stop the bot's desktop (its live URLs die first).",
            (200, json_ok("Released.", doc.of::<ScreenReleased>())),
            guest_json(),
        )
        .body(json_body(doc.of::<LeaseBody>(), true)),
        E::Observe => op(
            "desktops",
            "A screenshot of the bot's desktop (PNG in base64), or a note that it is unchanged \
             since the previous one; optionally scaled down, with the page's interactive \
             elements marked, or only the regions changed since the previous one.",
            (200, json_ok("The observation.", doc.of::<Observation>())),
            guest_json(),
        )
        .body(json_body(doc.of::<ObserveRequest>(), true)),
        E::Act => op(
            "desktops",
            "Mouse and keyboard actions on the bot's desktop, optionally observed after the \
             screen settles.",
            (200, json_ok("What was done.", doc.of::<ActResult>())),
            guest_json(),
        )
        .body(json_body(doc.of::<ActRequest>(), true)),
        E::BrowserNavigate | E::BrowserSnapshot | E::BrowserAct => op(
            "browser",
            match e {
                E::BrowserNavigate => "Open `url` in the bot's browser and snapshot the page.",
                E::BrowserSnapshot => "The page's interactive elements, each with a ref.",
                _ => {
                    "Click, fill, type, select or press by ref (`steps`); a step that fails \
                     answers `ok: false` with what completed."
                }
            },
            (
                200,
                json_ok("The page now, or the failed step.", doc.of::<PageResult>()),
            ),
            guest_json(),
        )
        .body(json_body(doc.of::<PageRequest>(), true)),
        E::GetLease => op(
            "leases",
            "The bot's execution lease on the computer.",
            (200, json_ok("The lease.", doc.of::<Lease>())),
            vec![BadRequest, NotFound],
        ),
        E::AcquireLease | E::RenewLease => op(
            "leases",
            if e == E::AcquireLease {
                "Take the bot's execution lease (`owner` required)."
            } else {
                "Extend the lease (`lease` required)."
            },
            (200, json_ok("The lease.", doc.of::<Lease>())),
            LEASE.to_vec(),
        )
        .body(json_body(doc.of::<LeaseRequest>(), true)),
        E::ReleaseLease => op(
            "leases",
            "End the run (`lease` required, `outcome`): the home is checkpointed when the last \
             run ends.",
            (
                200,
                json_ok(
                    "Released, with the run-end checkpoint.",
                    doc.of::<LeaseReleased>(),
                ),
            ),
            LEASE.to_vec(),
        )
        .body(json_body(doc.of::<LeaseRequest>(), true)),
        E::WaitingTakeover => op(
            "live",
            "The run holding `lease` asks for (or no longer needs) a person to take over.",
            (200, json_ok("The flag now.", doc.of::<WaitingTakeover>())),
            LEASE.to_vec(),
        )
        .body(json_body(doc.of::<WaitingTakeoverRequest>(), true)),
        E::LiveUrl | E::TerminalUrl => op(
            "live",
            if e == E::LiveUrl {
                "A capability URL (`/cap/…`) to watch (`view`), drive (`control`) or type in \
                 (`terminal`) the bot's desktop; the body may be empty."
            } else {
                "A capability URL to the bot's terminal; the body may be empty."
            },
            (200, json_ok("The URL.", doc.of::<LiveUrl>())),
            LEASE.to_vec(),
        )
        .body(json_body(doc.of::<UrlRequest>(), false)),
        E::Takeover => op(
            "live",
            "The user takes control of the bot's desktop (the bot's run must have stopped).",
            (200, json_ok("The control lease.", doc.of::<ControlTaken>())),
            LEASE.to_vec(),
        )
        .body(json_body(doc.of::<Empty>(), false)),
        E::ReleaseControl => op(
            "live",
            "The user gives the bot's desktop back.",
            (200, json_ok("Released.", doc.of::<ControlReleased>())),
            LEASE.to_vec(),
        )
        .body(json_body(doc.of::<Empty>(), false)),
        E::MintMcpToken => op(
            "mcp",
            "A session token for the bot's MCP endpoint on this computer \
             (`/v1/mcp/{computer}/{bot}`) and nothing else; `ttl_secs` defaults to an hour.",
            (
                200,
                json_ok("The token and its endpoint.", doc.of::<McpToken>()),
            ),
            codes(&[JSON_BODY, &[NotFound]]),
        )
        .body(json_body(doc.of::<McpTokenRequest>(), true)),
        E::GetNetwork => op(
            "network",
            "The network policy in force for the computer, where it comes from, and whether its \
             provider enforces it.",
            (200, json_ok("The policy.", doc.of::<NetworkPolicy>())),
            vec![NotFound],
        ),
        E::SetNetwork => op(
            "network",
            "Set the computer's own network policy (`null`: follow its workspace's default); a \
             running computer's next connection and DNS query see it.",
            (
                200,
                json_ok("The policy now in force.", doc.of::<NetworkPolicy>()),
            ),
            codes(&[JSON_BODY, &[NotFound]]),
        )
        .body(json_body(doc.of::<SetNetworkPolicy>(), true)),
        E::GetWorkspaceNetwork => op(
            "network",
            "A workspace's default network policy (`null`: the server's).",
            (
                200,
                json_ok("The policy.", doc.of::<WorkspaceNetworkPolicy>()),
            ),
            vec![BadRequest],
        ),
        E::SetWorkspaceNetwork => op(
            "network",
            "Set a workspace's default network policy (`null`: the server's); its running \
             computers without a policy of their own take it at once.",
            (
                200,
                json_ok("The policy.", doc.of::<WorkspaceNetworkPolicy>()),
            ),
            codes(&[JSON_BODY]),
        )
        .body(json_body(doc.of::<SetNetworkPolicy>(), true)),
        E::CreateToken => op(
            "tokens",
            "Make a scoped API token: admin, operator or viewer, optionally limited to \
             workspaces and expiring. Its value is answered this once.",
            (
                201,
                json_ok("The token, with its value.", doc.of::<CreatedToken>()),
            ),
            codes(&[JSON_BODY, &[Exists]]),
        )
        .body(json_body(doc.of::<CreateToken>(), true)),
        E::ListTokens => op(
            "tokens",
            "The scoped tokens (never their values).",
            (200, json_ok("The tokens.", doc.of::<TokenList>())),
            vec![],
        ),
        E::RevokeToken => op(
            "tokens",
            "Revoke a token: it and its console sessions stop working at once.",
            (200, json_ok("The token, revoked.", doc.of::<TokenInfo>())),
            vec![NotFound],
        ),
        E::OpenSession => op(
            "console",
            "Sign the console in with an API token: sets the HttpOnly session cookie and answers \
             the session's CSRF token.",
            (200, json_ok("The session.", doc.of::<SessionInfo>())),
            codes(&[JSON_BODY, &[Unauthorized, Csrf, UnsupportedMediaType]]),
        )
        .body(json_body(doc.of::<OpenSession>(), true)),
        E::ShowSession => op(
            "console",
            "The console session of the request's cookie.",
            (200, json_ok("The session.", doc.of::<SessionInfo>())),
            vec![Unauthorized],
        ),
        E::CloseSession => op(
            "console",
            "Sign the console out (with the session's `X-CSRF-Token`): the session ends.",
            (
                204,
                json!({ "description": "Signed out; the cookie is cleared." }),
            ),
            vec![Unauthorized, Csrf],
        ),
        E::Health => op(
            "service",
            "Whether the server answers (no token needed).",
            (200, json_ok("It does.", doc.of::<Health>())),
            vec![],
        ),
        E::OpenApi => op(
            "service",
            "This document (no token needed).",
            (
                200,
                json_ok("The OpenAPI 3.1 document.", json!({ "type": "object" })),
            ),
            vec![],
        ),
        E::Tunnel => op(
            "service",
            "The guests' tunnel over a websocket (guests authenticate inside it, not with the \
             API token).",
            (101, json!({ "description": "Switching to the websocket." })),
            vec![BadRequest, TunnelUnavailable, TunnelBusy],
        )
        .description(
            "Only a guest's upgrade (`Connection: Upgrade`, `Upgrade: websocket`, \
             `Sec-WebSocket-Key`) gets the 101; the API tester checks the refusals here, and the \
             tunnel itself is tested through real guests (`tests/system/tunnel_tcp.rs`).",
        ),
    };
    Described::Yes(operation)
}

/// A home flow's answer: NDJSON lines.
fn home_flow(doc: &mut Doc) -> Value {
    json!({
        "description": "NDJSON `HomeLine`s: `progress` lines, then one `done` or `error`. The \
                        flow runs to its end even if the client leaves.",
        "content": { "application/x-ndjson": { "schema": doc.of::<HomeLine>() } },
    })
}
