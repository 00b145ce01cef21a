//! Every `error.code` the API answers, each with its one HTTP status and what it means: the
//! handlers fail with an [`ApiCode`], the error body spells it with [`ApiCode::as_str`], and the
//! OpenAPI document lists each route's codes under their statuses from this table, so a code, its
//! status and its description are written once.

macro_rules! codes {
    ($( $(#[doc = $doc:literal])* $variant:ident = $code:literal, $status:literal, $what:literal; )*) => {
        /// A stable error code of the API: `error.code` in every error body and NDJSON `error`
        /// line.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ApiCode {
            $( $(#[doc = $doc])* $variant, )*
        }

        impl ApiCode {
            /// Every code, in the order of the table.
            pub const ALL: &'static [ApiCode] = &[$(ApiCode::$variant),*];

            /// Its spelling on the wire.
            pub fn as_str(self) -> &'static str {
                match self { $(ApiCode::$variant => $code,)* }
            }

            /// The HTTP status an answer with this code has.
            pub fn status(self) -> u16 {
                match self { $(ApiCode::$variant => $status,)* }
            }

            /// What it means, as the API's description says it.
            pub fn description(self) -> &'static str {
                match self { $(ApiCode::$variant => $what,)* }
            }
        }
    };
}

codes! {
    BadRequest = "bad_request", 400, "a malformed request: a body that is not the JSON the route \
        takes, an id or query parameter out of range (the message says which)";
    HttpsRequired = "https_required", 400, "plain HTTP on a port served over TLS: use https";
    PathRejected = "path_rejected", 400, "a path outside the home (absolute, `..`, or through a \
        symlink)";
    Unauthorized = "unauthorized", 401, "no `Authorization: Bearer <api token>`, or a wrong one";
    Forbidden = "forbidden", 403, "the token's role is below the route's (a viewer's cannot take \
        control), or an MCP session token is for another computer or bot";
    Csrf = "csrf", 403, "a state-changing request signed in by the console's cookie without its \
        `X-CSRF-Token`";
    NotFound = "not_found", 404, "no such computer, bot lease, stored home or path";
    JobNotFound = "job_not_found", 404, "no such maintenance job";
    PoolNotFound = "pool_not_found", 404, "no such warm pool";
    NoRoute = "no_route", 404, "no route for that method and path";
    MethodNotAllowed = "method_not_allowed", 405, "the path takes another method";
    TooManyConnections = "too_many_connections", 429, "this client address holds the most HTTP \
        connections one address may, every one mid-request";
    BodyTimeout = "body_timeout", 408, "the request body did not arrive in time";
    UnsupportedMediaType = "unsupported_media_type", 415, "the body is not of the type the \
        route takes (JSON)";
    LengthRequired = "length_required", 411, "uploads stream and need a `Content-Length`";
    PayloadTooLarge = "payload_too_large", 413, "a request body over its limit (1 MiB for JSON)";
    TooLarge = "too_large", 413, "a file over the size asked for";
    AttachmentTooLarge = "attachment_too_large", 413, "over the attachment limit";
    HomeQuotaExceeded = "home_quota_exceeded", 413, "the home is over its quota";
    ComputerNotRunning = "computer_not_running", 409, "the computer is stopped or provisioning: \
        start it first";
    ComputerSuspending = "computer_suspending", 409, "idle suspension holds the computer";
    ComputerExists = "computer_exists", 409, "a private bot's computer or a workspace's team \
        computer already exists";
    ComputerDestroyed = "computer_destroyed", 409, "the computer was destroyed";
    ComputerReserved = "computer_reserved", 409, "a maintenance job holds the computer";
    ComputerBusy = "computer_busy", 409, "the computer is busy with another change";
    MachineGone = "machine_gone", 409, "the computer's machine vanished mid-call";
    StaleLease = "stale_lease", 409, "a newer lease fenced this one out";
    LeaseHeld = "lease_held", 409, "another run holds the bot's lease";
    LeaseMismatch = "lease_mismatch", 409, "the lease is not the bot's current one";
    LeaseLost = "lease_lost", 409, "the MCP session no longer holds the bot's lease";
    FenceExhausted = "fence_exhausted", 409, "the bot's fencing tokens are used up";
    BotRunning = "bot_running", 409, "the bot's run has not stopped";
    NoControl = "no_control", 409, "the user does not hold the bot's control";
    ControlRequired = "control_required", 409, "the user must hold the bot's control";
    Exists = "exists", 409, "the name is taken";
    TooManyProcesses = "too_many_processes", 409, "the computer runs the most detached processes \
        it may: kill one first";
    TooManyServices = "too_many_services", 409, "the computer has the most services it may: \
        remove one first";
    TooManyPreviews = "too_many_previews", 409, "the computer has the most live preview URLs \
        it may: revoke one first";
    PreviewUnavailable = "preview_unavailable", 409, "the computer has no network of its own \
        here, so a port on its loopback would be the host's: no preview";
    TooManySecrets = "too_many_secrets", 409, "the workspace holds the most secrets it may";
    AttachmentChanged = "attachment_changed", 409, "the file changed since it was attached";
    ScreenReleasing = "screen_releasing", 409, "the bot's desktop is still being released";
    ActionRefused = "action_refused", 409, "the computer refused the action";
    JobConflict = "job_conflict", 409, "the job cannot run in the computer's state";
    JobNotInterrupted = "job_not_interrupted", 409, "the job is not an interrupted one";
    HomeInUse = "home_in_use", 409, "a live computer holds the home";
    HomePendingRestore = "home_pending_restore", 409, "the home waits for a restore";
    HomeLeasesHeld = "home_leases_held", 409, "bots' leases are held on the computer";
    HomeChanged = "home_changed", 409, "the stored home changed meanwhile";
    HomeTooManyLeases = "home_too_many_leases", 409, "too many leases on the home";
    HomeNotIncremental = "home_not_incremental", 409, "the home store keeps no revisions \
        (--home-format archive)";
    ProviderInvalid = "provider_invalid", 422, "the provider refused the request";
    Internal = "internal", 500, "an internal failure (logged by the server)";
    Unsupported = "unsupported", 501, "this computer's guest cannot do that";
    TunnelLost = "tunnel_lost", 502, "the computer's connection dropped mid-operation \
        (`uncertain` says whether it may have run)";
    GuestProtocolError = "guest_protocol_error", 502, "the guest answered out of protocol";
    Failed = "failed", 502, "the computer failed at it: a process that would not start, a full \
        disk";
    HomeStoreFailed = "home_store_failed", 502, "the home store failed: its bucket, or its \
        disk (full: the message says so)";
    ComputerUnavailable = "computer_unavailable", 503, "the computer's guest is not connected \
        yet";
    /// Spelled as the guest spells it.
    ScreenUnavailable = "COMPUTER_SCREEN_UNAVAILABLE", 503, "no desktop can be allocated now";
    ProviderCapacity = "provider_capacity", 503, "the provider is out of capacity: try later";
    ProviderUnavailable = "provider_unavailable", 503, "the provider failed in passing: try \
        later";
    TunnelUnavailable = "tunnel_unavailable", 503, "this server carries no tunnel";
    TunnelBusy = "tunnel_busy", 503, "too many guest tunnels are logging in at once";
    ServerBusy = "server_busy", 503, "every HTTP connection of the server is in use";
    DatabaseUnavailable = "database_unavailable", 503, "the control plane's database cannot be \
        reached (restarting, down): try again";
    GuestTimeout = "guest_timeout", 504, "the guest did not answer in time";
}

impl std::fmt::Display for ApiCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<gateway_proto::ErrorCode> for ApiCode {
    /// A guest's refusal, under the same code.
    fn from(code: gateway_proto::ErrorCode) -> Self {
        use gateway_proto::ErrorCode as E;
        match code {
            E::BadRequest => ApiCode::BadRequest,
            E::PathRejected => ApiCode::PathRejected,
            E::NotFound => ApiCode::NotFound,
            E::TooLarge => ApiCode::TooLarge,
            E::StaleLease => ApiCode::StaleLease,
            E::Failed => ApiCode::Failed,
            E::Unsupported => ApiCode::Unsupported,
            E::ScreenUnavailable => ApiCode::ScreenUnavailable,
            E::ScreenReleasing => ApiCode::ScreenReleasing,
            E::ActionRefused => ApiCode::ActionRefused,
            E::Exists => ApiCode::Exists,
            E::TooManyProcesses => ApiCode::TooManyProcesses,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ApiCode;

    #[test]
    fn codes_are_spelled_once() {
        let mut seen = std::collections::HashSet::new();
        for &code in ApiCode::ALL {
            assert!(seen.insert(code.as_str()), "{code} twice");
            assert!((400..600).contains(&code.status()), "{code}");
        }
    }

    #[test]
    fn a_guest_code_keeps_its_spelling() {
        use gateway_proto::ErrorCode as E;
        for code in [
            E::BadRequest,
            E::PathRejected,
            E::NotFound,
            E::TooLarge,
            E::StaleLease,
            E::Failed,
            E::Unsupported,
            E::ScreenUnavailable,
            E::ScreenReleasing,
            E::ActionRefused,
            E::Exists,
            E::TooManyProcesses,
        ] {
            assert_eq!(ApiCode::from(code).as_str(), code.as_str());
        }
    }
}
