//! The one table of the HTTP API's routes: every operation is declared once, as a variant of
//! [`Route`] with its method, path, name, authentication and idle rule, and everything else is
//! derived from it: the router parses each request into a `Route` once ([`Route::parse`]) and
//! matches it exhaustively (`api::dispatch`), metrics and logs label it by [`Endpoint::name`],
//! idle suspension asks [`Endpoint::idle`], the OpenAPI document lists the table (`api::openapi`,
//! whose exhaustive match on [`Endpoint`] documents each route), and the CLI builds its request
//! paths with [`Route::path`].
//!
//! Ids are typed at this edge: a [`ComputerId`], a [`BotId`] (checked: a bad one is a 400 before
//! any handler runs), a [`JobId`]. Path segments are taken as sent (not percent-decoded), as the
//! router always has; [`Route::path`] encodes them as the CLI always has.
//!
//! Capability pages (`/cap/…`, `/assets/…`) are not routes: their paths are credentials and
//! files, served by `api::live` before any route is parsed.
//!
//! The fuzz target `route` compiles this file on its own (fuzz/src/lib.rs, docs/fuzzing.md): it
//! names nothing of this crate but `schema::code::ApiCode` and `tokens::Role`.

use crate::schema::code::ApiCode;
use gateway_proto::BotId;
use hyper::Method;

/// A computer's id as a route names it. Not checked here: an id the registry does not know is a
/// 404 from the core, whatever it looks like.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ComputerId(String);

/// A maintenance job's id as a route names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JobId(String);

/// A workspace's id as a route names it. Not checked here: the handler refuses a malformed one
/// with a 400.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WorkspaceId(String);

macro_rules! string_id {
    ($t:ident) => {
        impl $t {
            pub fn new(id: impl Into<String>) -> Self {
                Self(id.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::ops::Deref for $t {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl Segment for $t {
            fn parse(raw: &str) -> Result<Self, RouteError> {
                Ok(Self(raw.to_string()))
            }

            fn segment(&self) -> &str {
                &self.0
            }
        }
    };
}

/// A value a path segment holds.
pub trait Segment: Sized {
    fn parse(raw: &str) -> Result<Self, RouteError>;
    fn segment(&self) -> &str;
}

string_id!(ComputerId);
string_id!(JobId);
string_id!(WorkspaceId);

impl Segment for String {
    fn parse(raw: &str) -> Result<Self, RouteError> {
        Ok(raw.to_string())
    }

    fn segment(&self) -> &str {
        self
    }
}

impl Segment for BotId {
    fn parse(raw: &str) -> Result<Self, RouteError> {
        BotId::new(raw).map_err(|e| RouteError::new(ApiCode::BadRequest, format!("bot: {e}")))
    }

    fn segment(&self) -> &str {
        self.as_str()
    }
}

/// A detached process's id on its computer (`/processes/{process}`): a number.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProcessId(u32, String);

impl ProcessId {
    pub fn new(id: u32) -> Self {
        Self(id, id.to_string())
    }

    pub fn get(&self) -> u32 {
        self.0
    }
}

impl Segment for ProcessId {
    fn parse(raw: &str) -> Result<Self, RouteError> {
        raw.parse::<u32>().map(Self::new).map_err(|_| {
            RouteError::new(
                ApiCode::BadRequest,
                format!("process: expected a process id (a number), got {raw:?}"),
            )
        })
    }

    fn segment(&self) -> &str {
        &self.1
    }
}

/// A bot id as a route takes it (the CLI checks its arguments with this, as the server would).
pub fn bot(raw: &str) -> Result<BotId, RouteError> {
    <BotId as Segment>::parse(raw)
}

/// Why a request is no route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteError {
    pub code: ApiCode,
    pub message: String,
    /// Whether the refusal may be answered without the API token (an attachment link's wrong
    /// method); any other is answered only to a caller that holds it (401 otherwise), as every
    /// path under the token is.
    pub public: bool,
}

impl RouteError {
    fn new(code: ApiCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            public: false,
        }
    }
}

/// The method a route takes: one, or any (the MCP endpoint, whose transport uses several).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    Post,
    Put,
    Delete,
    Any,
}

impl Verb {
    fn accepts(self, method: &Method) -> bool {
        match self {
            Verb::Get => method == Method::GET,
            Verb::Post => method == Method::POST,
            Verb::Put => method == Method::PUT,
            Verb::Delete => method == Method::DELETE,
            Verb::Any => true,
        }
    }

    /// The method a client sends (`POST` for the MCP endpoint's messages).
    pub fn method(self) -> Method {
        match self {
            Verb::Get => Method::GET,
            Verb::Post | Verb::Any => Method::POST,
            Verb::Put => Method::PUT,
            Verb::Delete => Method::DELETE,
        }
    }

    /// As the OpenAPI document spells it.
    pub fn lowercase(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::Post => "post",
            Verb::Put => "put",
            Verb::Delete => "delete",
            Verb::Any => "any",
        }
    }
}

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// Anyone (health, the API's description, the console's sign-in, which checks the token
    /// it is given itself).
    Public,
    /// An API token (`Authorization: Bearer`) or a console session's cookie, of a viewer or
    /// more (docs/security.md#api-tokens).
    Viewer,
    /// An API token or console session of an operator or admin.
    Operator,
    /// An API token or console session of an admin.
    Admin,
    /// An operator's API token, or an MCP session token scoped to the path's computer and bot,
    /// checked by the MCP endpoint.
    McpToken,
    /// The path is the credential (an attachment link).
    Capability,
    /// The guests' tunnel: a guest authenticates inside it.
    Guest,
}

impl Auth {
    /// The least role a token needs for the route, where a token is what it takes.
    pub fn role(self) -> Option<crate::tokens::Role> {
        use crate::tokens::Role;
        match self {
            Auth::Viewer => Some(Role::Viewer),
            Auth::Operator | Auth::McpToken => Some(Role::Operator),
            Auth::Admin => Some(Role::Admin),
            Auth::Public | Auth::Capability | Auth::Guest => None,
        }
    }

    /// Whether the route takes an API token or a console session (and nothing else).
    pub fn token(self) -> bool {
        matches!(self, Auth::Viewer | Auth::Operator | Auth::Admin)
    }
}

/// Whether a route is an operation on its computer for idle suspension (`crate::idle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleUse {
    /// Not an operation: showing the computer, reading or renewing a lease (renewals keep a
    /// lease, not the computer, alive), browsing the stored home (no guest involved), reading or
    /// following the activity feed (a follower must not keep a computer awake).
    None,
    /// A use that suspension never refuses: ending a run, giving control back.
    Use,
    /// A use, refused while suspension holds the computer.
    Refusable,
}

macro_rules! routes {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident { $($field:ident: $ty:ty),* }
            = $verb:ident $path:literal, $name:literal, $auth:ident, $idle:ident;
    )*) => {
        /// One request of the API, parsed: its operation and the typed ids of its path.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Route {
            $( $(#[doc = $doc])* $variant { $($field: $ty),* }, )*
        }

        /// A route without its values: what is declared about it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Endpoint {
            $( $(#[doc = $doc])* $variant, )*
        }

        impl Endpoint {
            /// Every route, in the order they are tried.
            pub const ALL: &'static [Endpoint] = &[$(Endpoint::$variant),*];

            /// Its one name: the metrics label, the log field and the OpenAPI operationId.
            pub fn name(self) -> &'static str {
                match self { $(Endpoint::$variant => $name,)* }
            }

            pub fn verb(self) -> Verb {
                match self { $(Endpoint::$variant => Verb::$verb,)* }
            }

            /// Its path, with `{name}` where a value goes.
            pub fn template(self) -> &'static str {
                match self { $(Endpoint::$variant => $path,)* }
            }

            pub fn auth(self) -> Auth {
                match self { $(Endpoint::$variant => Auth::$auth,)* }
            }

            pub fn idle(self) -> IdleUse {
                match self { $(Endpoint::$variant => IdleUse::$idle,)* }
            }
        }

        impl Route {
            pub fn endpoint(&self) -> Endpoint {
                match self { $(Route::$variant { .. } => Endpoint::$variant,)* }
            }

            /// The values of its path, by name.
            pub fn params(&self) -> Vec<(&'static str, &str)> {
                match self {
                    $(Route::$variant { $($field),* } => {
                        vec![$((stringify!($field), Segment::segment($field))),*]
                    })*
                }
            }

            /// The route of `segments` in the table, if one matches.
            fn from_table(method: &Method, segments: &[&str]) -> Option<Result<Route, RouteError>> {
                $(
                    if Verb::$verb.accepts(method) {
                        if let Some(values) = captures($path, segments) {
                            fn build(_values: &[(&str, &str)]) -> Result<Route, RouteError> {
                                Ok(Route::$variant {
                                    $($field: Segment::parse(value(_values, stringify!($field)))?,)*
                                })
                            }
                            return Some(build(&values));
                        }
                    }
                )*
                None
            }
        }
    };
}

routes! {
    CreateComputer {} = Post "/v1/computers", "computer.create", Operator, None;
    /// Makes a warm pool (docs/pools.md).
    CreatePool {} = Post "/v1/pools", "pool.create", Admin, None;
    ListPools {} = Get "/v1/pools", "pool.list", Viewer, None;
    GetPool { pool: String } = Get "/v1/pools/{pool}", "pool.show", Viewer, None;
    ResizePool { pool: String } = Put "/v1/pools/{pool}", "pool.resize", Admin, None;
    DeletePool { pool: String } = Delete "/v1/pools/{pool}", "pool.delete", Admin, None;
    ForkComputer { computer: ComputerId } = Post "/v1/computers/{computer}/fork",
        "computer.fork", Operator, None;
    ListComputers {} = Get "/v1/computers", "computer.list", Viewer, None;
    GetComputer { computer: ComputerId } = Get "/v1/computers/{computer}", "computer.show",
        Viewer, None;
    DestroyComputer { computer: ComputerId } = Delete "/v1/computers/{computer}",
        "computer.destroy", Admin, Refusable;
    StopComputer { computer: ComputerId } = Post "/v1/computers/{computer}/stop",
        "computer.stop", Operator, Refusable;
    StartComputer { computer: ComputerId } = Post "/v1/computers/{computer}/start",
        "computer.start", Operator, Refusable;
    UpdateComputer { computer: ComputerId } = Post "/v1/computers/{computer}/update",
        "job.update", Operator, Refusable;
    RecoverComputer { computer: ComputerId } = Post "/v1/computers/{computer}/recover",
        "job.recover", Operator, Refusable;
    ListJobs { computer: ComputerId } = Get "/v1/computers/{computer}/jobs", "job.list",
        Viewer, None;
    GetJob { job: JobId } = Get "/v1/jobs/{job}", "job.show", Viewer, None;
    ReleaseInterrupted { job: JobId } = Post "/v1/jobs/{job}/release-interrupted",
        "job.release_interrupted", Operator, None;
    Exec { computer: ComputerId } = Post "/v1/computers/{computer}/exec", "exec", Operator,
        Refusable;
    /// Starts a detached process (docs/api.md#processes).
    StartProcess { computer: ComputerId } = Post "/v1/computers/{computer}/processes",
        "process.start", Operator, Refusable;
    ListProcesses { computer: ComputerId } = Get "/v1/computers/{computer}/processes",
        "process.list", Viewer, Refusable;
    GetProcess { computer: ComputerId, process: ProcessId } =
        Get "/v1/computers/{computer}/processes/{process}", "process.show", Viewer, Refusable;
    /// A process's output; a follower does not keep the computer awake (its process may).
    ProcessLogs { computer: ComputerId, process: ProcessId } =
        Get "/v1/computers/{computer}/processes/{process}/logs", "process.logs", Viewer, None;
    AttachProcess { computer: ComputerId, process: ProcessId } =
        Post "/v1/computers/{computer}/processes/{process}/attach", "process.attach", Operator,
        Refusable;
    KillProcess { computer: ComputerId, process: ProcessId } =
        Post "/v1/computers/{computer}/processes/{process}/kill", "process.kill", Operator,
        Refusable;
    /// Sets a service: a detached process started again each time the computer starts.
    SetService { computer: ComputerId, service: String } =
        Put "/v1/computers/{computer}/services/{service}", "service.set", Operator, Refusable;
    ListServices { computer: ComputerId } = Get "/v1/computers/{computer}/services",
        "service.list", Viewer, None;
    DeleteService { computer: ComputerId, service: String } =
        Delete "/v1/computers/{computer}/services/{service}", "service.delete", Operator, None;
    /// Makes a preview URL for a port inside the computer (docs/previews.md).
    CreatePreview { computer: ComputerId } = Post "/v1/computers/{computer}/previews",
        "preview.create", Operator, None;
    ListPreviews { computer: ComputerId } = Get "/v1/computers/{computer}/previews",
        "preview.list", Viewer, None;
    RevokePreview { computer: ComputerId, preview: String } =
        Delete "/v1/computers/{computer}/previews/{preview}", "preview.revoke", Operator, None;
    /// Turns recording of the computer's screens on or off (docs/recordings.md).
    SetRecording { computer: ComputerId } = Put "/v1/computers/{computer}/recording",
        "recording.set", Operator, None;
    /// The default of a workspace's computers without a recording setting of their own.
    SetWorkspaceRecording { workspace: WorkspaceId } =
        Put "/v1/workspaces/{workspace}/recording", "workspace.recording.set", Admin, None;
    ListRecordings { computer: ComputerId } = Get "/v1/computers/{computer}/recordings",
        "recording.list", Viewer, None;
    /// A bot's recording: its records, raw (the record format of docs/recordings.md).
    ReadRecording { computer: ComputerId, bot: BotId } =
        Get "/v1/computers/{computer}/recordings/{bot}", "recording.get", Viewer, None;
    Activity { computer: ComputerId } = Get "/v1/computers/{computer}/activity",
        "activity.history", Viewer, None;
    ActivityStream { computer: ComputerId } = Get "/v1/computers/{computer}/activity/stream",
        "activity.stream", Viewer, None;
    ListFiles { computer: ComputerId } = Get "/v1/computers/{computer}/files", "files.list",
        Viewer, Refusable;
    ReadFile { computer: ComputerId } = Get "/v1/computers/{computer}/files/content",
        "files.read", Viewer, Refusable;
    WriteFile { computer: ComputerId } = Put "/v1/computers/{computer}/files/content",
        "files.write", Operator, Refusable;
    AttachFile { computer: ComputerId } = Post "/v1/computers/{computer}/files/attach",
        "files.attach", Operator, Refusable;
    UploadToBot { computer: ComputerId, bot: BotId } =
        Put "/v1/computers/{computer}/uploads/{bot}", "files.upload", Operator, Refusable;
    /// An attachment's download link: its path is its credential.
    Download { token: String } = Get "/att/{token}", "files.download", Capability, None;
    GetHome { computer: ComputerId } = Get "/v1/computers/{computer}/home", "home.show", Viewer,
        None;
    CheckpointHome { computer: ComputerId } = Post "/v1/computers/{computer}/home/checkpoint",
        "home.checkpoint", Operator, Refusable;
    RestoreHome { computer: ComputerId } = Post "/v1/computers/{computer}/home/restore",
        "home.restore", Operator, Refusable;
    HomeEntries { computer: ComputerId } = Get "/v1/computers/{computer}/home/entries",
        "home.entries", Viewer, None;
    HomeContent { computer: ComputerId } = Get "/v1/computers/{computer}/home/content",
        "home.content", Viewer, None;
    HomeRevisions { computer: ComputerId } = Get "/v1/computers/{computer}/home/revisions",
        "home.revisions", Viewer, None;
    HomeDiff { computer: ComputerId } = Get "/v1/computers/{computer}/home/diff",
        "home.diff", Viewer, None;
    ReconcileHomes {} = Post "/v1/homes/reconcile", "homes.reconcile", Admin, None;
    PurgeHome { home_key: String } = Delete "/v1/homes/{home_key}", "homes.purge", Admin, None;
    ListScreens { computer: ComputerId } = Get "/v1/computers/{computer}/screens",
        "screen.list", Viewer, Refusable;
    EnsureScreen { computer: ComputerId, bot: BotId } =
        Post "/v1/computers/{computer}/screens/{bot}/ensure", "screen.ensure", Operator, Refusable;
    ReleaseScreen { computer: ComputerId, bot: BotId } =
        Post "/v1/computers/{computer}/screens/{bot}/release", "screen.release", Operator,
        Refusable;
    Observe { computer: ComputerId, bot: BotId } =
        Post "/v1/computers/{computer}/screens/{bot}/observe", "screen.observe", Operator,
        Refusable;
    Act { computer: ComputerId, bot: BotId } =
        Post "/v1/computers/{computer}/screens/{bot}/act", "screen.act", Operator, Refusable;
    LiveUrl { computer: ComputerId, bot: BotId } =
        Post "/v1/computers/{computer}/screens/{bot}/url", "screen.url", Viewer, Refusable;
    Takeover { computer: ComputerId, bot: BotId } =
        Post "/v1/computers/{computer}/screens/{bot}/takeover", "screen.takeover", Operator,
        Refusable;
    ReleaseControl { computer: ComputerId, bot: BotId } =
        Post "/v1/computers/{computer}/screens/{bot}/release-control", "screen.release_control",
        Operator, Use;
    TerminalUrl { computer: ComputerId, bot: BotId } =
        Post "/v1/computers/{computer}/terminals/{bot}/url", "terminal.url", Operator, Refusable;
    WaitingTakeover { computer: ComputerId, bot: BotId } =
        Post "/v1/computers/{computer}/leases/{bot}/waiting_takeover", "lease.waiting_takeover",
        Operator, Refusable;
    BrowserNavigate { computer: ComputerId, bot: BotId } =
        Post "/v1/computers/{computer}/browser/{bot}/navigate", "browser.navigate", Operator,
        Refusable;
    BrowserSnapshot { computer: ComputerId, bot: BotId } =
        Post "/v1/computers/{computer}/browser/{bot}/snapshot", "browser.snapshot", Operator,
        Refusable;
    BrowserAct { computer: ComputerId, bot: BotId } =
        Post "/v1/computers/{computer}/browser/{bot}/act", "browser.act", Operator, Refusable;
    GetLease { computer: ComputerId, bot: BotId } =
        Get "/v1/computers/{computer}/leases/{bot}", "lease.show", Viewer, None;
    AcquireLease { computer: ComputerId, bot: BotId } =
        Post "/v1/computers/{computer}/leases/{bot}/acquire", "lease.acquire", Operator, Refusable;
    RenewLease { computer: ComputerId, bot: BotId } =
        Post "/v1/computers/{computer}/leases/{bot}/renew", "lease.renew", Operator, None;
    ReleaseLease { computer: ComputerId, bot: BotId } =
        Post "/v1/computers/{computer}/leases/{bot}/release", "lease.release", Operator, Use;
    MintMcpToken { computer: ComputerId, bot: BotId } =
        Post "/v1/computers/{computer}/mcp-tokens/{bot}", "mcp.token", Operator, Refusable;
    /// The MCP endpoint (streamable HTTP); its bot is checked by the endpoint, after its token.
    Mcp { computer: ComputerId, bot: String } = Any "/v1/mcp/{computer}/{bot}", "mcp", McpToken,
        None;
    GetNetwork { computer: ComputerId } = Get "/v1/computers/{computer}/network",
        "network.show", Viewer, None;
    SetNetwork { computer: ComputerId } = Put "/v1/computers/{computer}/network",
        "network.set", Admin, None;
    GetWorkspaceNetwork { workspace: WorkspaceId } = Get "/v1/workspaces/{workspace}/network",
        "workspace.network.show", Viewer, None;
    SetWorkspaceNetwork { workspace: WorkspaceId } = Put "/v1/workspaces/{workspace}/network",
        "workspace.network.set", Admin, None;
    /// A workspace's secrets (docs/security.md#secrets): names, domains, placeholders; never a
    /// value.
    ListSecrets { workspace: WorkspaceId } = Get "/v1/workspaces/{workspace}/secrets",
        "secret.list", Operator, None;
    /// Sets or rotates a secret (its value in the body, never answered).
    PutSecret { workspace: WorkspaceId, name: String } =
        Put "/v1/workspaces/{workspace}/secrets/{name}", "secret.set", Admin, None;
    DeleteSecret { workspace: WorkspaceId, name: String } =
        Delete "/v1/workspaces/{workspace}/secrets/{name}", "secret.delete", Admin, None;
    /// Makes a scoped API token (shown once).
    CreateToken {} = Post "/v1/tokens", "token.create", Admin, None;
    /// Lists the scoped tokens (never their values).
    ListTokens {} = Get "/v1/tokens", "token.list", Admin, None;
    /// Revokes a token and ends its console sessions.
    RevokeToken { token: String } = Delete "/v1/tokens/{token}", "token.revoke", Admin, None;
    /// Signs the console in with an API token: a session cookie and its CSRF token.
    OpenSession {} = Post "/console/session", "console.session.open", Public, None;
    /// The console session of the request's cookie.
    ShowSession {} = Get "/console/session", "console.session.show", Public, None;
    /// Signs the console out: the session ends everywhere.
    CloseSession {} = Delete "/console/session", "console.session.close", Public, None;
    /// A session preview's sign-in: the console's session cookie is checked here, on the
    /// console's origin, and the visitor is sent back to the preview with a one-time token.
    PreviewSignIn {} = Get "/console/preview", "preview.sign_in", Public, None;
    /// The sign-in page's form: checks the console session (its cookie comes with a request
    /// from the console's own page) and sends the visitor back to the preview.
    PreviewHandOff {} = Post "/console/preview", "preview.hand_off", Public, None;
    Health {} = Get "/v1/health", "health", Public, None;
    OpenApi {} = Get "/v1/openapi.json", "openapi", Public, None;
    Tunnel {} = Get "/v1/tunnel", "tunnel", Guest, None;
    Metrics {} = Get "/metrics", "metrics", Admin, None;
}

impl Endpoint {
    /// Whether requests of this route are operations, counted in metrics under their name:
    /// all but the service's own (health, the description, the tunnel, the scrape) and the MCP
    /// endpoint's transport, whose tool calls are counted instead, each under its own name.
    pub fn is_operation(self) -> bool {
        !matches!(
            self,
            Endpoint::Health
                | Endpoint::OpenApi
                | Endpoint::Tunnel
                | Endpoint::Metrics
                | Endpoint::Mcp
        )
    }
}

impl Route {
    /// Parses a request's method and path (without its query). A trailing `/` is ignored.
    pub fn parse(method: &Method, path: &str) -> Result<Route, RouteError> {
        // An attachment link's token is the rest of its path, as it stands.
        if let Some(token) = path.strip_prefix("/att/") {
            if *method != Method::GET {
                return Err(RouteError {
                    code: ApiCode::MethodNotAllowed,
                    message: "attachment links are fetched with GET".into(),
                    public: true,
                });
            }
            let token = token.to_string();
            return Ok(Route::Download { token });
        }
        let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
        if let Some(route) = Route::from_table(method, &segments) {
            return route;
        }
        Err(no_route(method, path, &segments))
    }

    /// The computer the route is on, if any.
    pub fn computer(&self) -> Option<&str> {
        self.params()
            .into_iter()
            .find_map(|(name, value)| (name == "computer").then_some(value))
    }

    /// The method a client sends.
    pub fn method(&self) -> Method {
        self.endpoint().verb().method()
    }

    /// The path a client requests, its values percent-encoded.
    pub fn path(&self) -> String {
        let params = self.params();
        let mut out = String::new();
        for part in self.endpoint().template().split('/').skip(1) {
            out.push('/');
            match part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                Some(name) => {
                    let value = params.iter().find(|(n, _)| *n == name).map_or("", |p| p.1);
                    out.extend(form_urlencoded::byte_serialize(value.as_bytes()));
                }
                None => out.push_str(part),
            }
        }
        out
    }

    /// [`Route::path`] with a query of `pairs`, percent-encoded (none when empty).
    pub fn path_with_query<'a>(
        &self,
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        query.extend_pairs(pairs);
        let query = query.finish();
        match query.is_empty() {
            true => self.path(),
            false => format!("{}?{query}", self.path()),
        }
    }
}

/// The value named `name` in a route's captured `values`.
fn value<'s>(values: &[(&str, &'s str)], name: &str) -> &'s str {
    values
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("", |(_, v)| v)
}

/// The values of `segments` when they fit `template`.
fn captures<'s>(
    template: &'static str,
    segments: &[&'s str],
) -> Option<Vec<(&'static str, &'s str)>> {
    let parts: Vec<&'static str> = template.split('/').skip(1).collect();
    if parts.len() != segments.len() {
        return None;
    }
    let mut values = Vec::new();
    for (part, seg) in parts.into_iter().zip(segments) {
        match part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
            Some(name) => values.push((name, *seg)),
            None if part == *seg => {}
            None => return None,
        }
    }
    Some(values)
}

/// The refusal of a request no route takes: the actions a path family has are named, an
/// attachment link says it takes GET.
fn no_route(method: &Method, path: &str, segments: &[&str]) -> RouteError {
    let (code, message) = match (method, segments) {
        (&Method::POST, ["v1", "computers", _, "screens", _, other]) => (
            ApiCode::NotFound,
            format!(
                "no screen action {other:?}; use ensure, release, observe, act, url, takeover \
                 or release-control"
            ),
        ),
        (&Method::POST, ["v1", "computers", _, "leases", _, other]) => (
            ApiCode::NotFound,
            format!("no lease action {other:?}; use acquire, renew or release"),
        ),
        (&Method::POST, ["v1", "computers", _, "processes", _, other]) => (
            ApiCode::NotFound,
            format!("no process action {other:?}; use attach or kill"),
        ),
        (&Method::POST, ["v1", "computers", _, "browser", _, other]) => (
            ApiCode::NotFound,
            format!("no browser action {other:?}; use navigate, snapshot or act"),
        ),
        (_, ["v1", ..]) => (ApiCode::NoRoute, format!("no route for {method} {path}")),
        _ => (ApiCode::NoRoute, "the API lives under /v1".to_string()),
    };
    RouteError::new(code, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value for each name a template holds.
    fn example(name: &str) -> &'static str {
        match name {
            "computer" => "c-1",
            "bot" => "bot-7",
            "job" => "j-3",
            "home_key" => "k-5",
            "token" => "t-9",
            "workspace" => "acme",
            "name" => "github",
            "process" => "7",
            "service" => "web",
            "preview" => "pv_0123456789ab",
            "pool" => "warm",
            other => panic!("no example for {{{other}}}"),
        }
    }

    /// Fills a template with [`example`]s.
    pub fn example_path(template: &str) -> String {
        template
            .split('/')
            .map(
                |p| match p.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                    Some(name) => example(name).to_string(),
                    None => p.to_string(),
                },
            )
            .collect::<Vec<_>>()
            .join("/")
    }

    #[test]
    fn every_route_parses_back_from_its_path_and_names_are_unique() {
        let mut names = std::collections::HashSet::new();
        for &e in Endpoint::ALL {
            assert!(names.insert(e.name()), "{} twice", e.name());
            let path = example_path(e.template());
            let route = Route::parse(&e.verb().method(), &path).unwrap();
            assert_eq!(route.endpoint(), e, "{path}");
            assert_eq!(route.path(), path);
            let slash = Route::parse(&e.verb().method(), &format!("{path}/")).unwrap();
            // An attachment token is the rest of its path, a `/` included.
            assert!(slash == route || e == Endpoint::Download, "{path}/");
        }
    }

    #[test]
    fn ids_are_typed_at_the_edge() {
        let r = Route::parse(&Method::POST, "/v1/computers/c-1/browser/b-2/snapshot").unwrap();
        assert_eq!(
            r,
            Route::BrowserSnapshot {
                computer: ComputerId::new("c-1"),
                bot: BotId::new("b-2").unwrap()
            }
        );
        assert_eq!(r.computer(), Some("c-1"));
        let e = Route::parse(&Method::POST, "/v1/computers/c-1/screens/b%20c/ensure").unwrap_err();
        assert_eq!(e.code, ApiCode::BadRequest);
        assert!(e.message.starts_with("bot: "), "{}", e.message);
    }

    #[test]
    fn refusals_name_what_there_is() {
        let e = |m: Method, p: &str| Route::parse(&m, p).unwrap_err();
        assert_eq!(e(Method::PUT, "/v1/computers").code, ApiCode::NoRoute);
        assert_eq!(e(Method::GET, "/").message, "the API lives under /v1");
        let screen = e(Method::POST, "/v1/computers/c/screens/b/dance");
        assert_eq!(screen.code, ApiCode::NotFound);
        assert!(screen.message.starts_with("no screen action \"dance\""));
        let att = e(Method::POST, "/att/x");
        assert_eq!((att.code, att.public), (ApiCode::MethodNotAllowed, true));
    }

    #[test]
    fn paths_are_encoded_as_the_cli_always_did() {
        let r = Route::ListFiles {
            computer: ComputerId::new("a b/c"),
        };
        assert_eq!(r.path(), "/v1/computers/a+b%2Fc/files");
        assert_eq!(
            r.path_with_query([("path", "x y")]),
            "/v1/computers/a+b%2Fc/files?path=x+y"
        );
        assert_eq!(r.path_with_query([]), "/v1/computers/a+b%2Fc/files");
    }
}
