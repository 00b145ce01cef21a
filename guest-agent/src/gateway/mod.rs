//! The screen gateway (docs/screens.md#live-views, #terminal): view, control and terminal
//! capabilities of the bots' live desktops, each its own unix socket found through a table, relayed
//! to the control plane over one QUIC stream per connection.
//!
//! A `Connect` finds the bot's live desktop in [`Screens`] (the control plane ensures it first),
//! then the capability in the [`table`]: the RFB server of (bot, view|control), a socket of its
//! own joined to the desktop's Xvnc, is started lazily and shared by that policy's clients
//! ([`rfb`]); a terminal connection gets a fresh shell with its own socket ([`terminal`]), or,
//! when it carries the session key of a shell its page had before, that shell again.
//! A terminal opened with a key outlives its connection for [`GatewayConfig::terminal_grace`]
//! (docs/screens.md#reconnecting): a connection with the same bot, control lease and key within
//! that time takes it over (the previous connection, if any, is closed); after it, or at once
//! when the control plane resets the stream as revoked, the shell is stopped. At most
//! [`MAX_DETACHED_PER_BOT`] shells of a bot wait at once; beyond that the longest waiting is
//! stopped, and a bot at [`MAX_TERMINALS_PER_BOT`] makes room by stopping its longest waiting
//! one before a new shell is refused.
//! After `Opened` the bytes are relayed ([`relay`]), through the RFB filter that makes a view
//! view-only. Revocation follows docs/screens.md#teardown: the mappings leave the
//! table, the clients are disconnected, the servers and shells are stopped and their sockets
//! removed. [`Screens`] calls [`Gateway::revoke_scope`] with `All` before it stops a desktop's
//! Chrome and X server, so nothing of one bot can reach a slot reused by another.
//!
//! It leaves to the control plane: who may open what (sealed URLs, the control lease's
//! validity, generations), and websockets. It leaves to [`crate::screens`] the desktops.

pub mod capstream;
pub mod procs;
pub mod relay;
pub mod rfb;
pub mod table;
pub mod terminal;

use crate::screens::recorder::PersonInput;
use crate::screens::{CapabilityRevoker, Screens};
use gateway_proto::live::{
    valid_control_lease_id, valid_terminal_key, CapabilityKind, ConnectRequest, RevokeRequest,
    RevokeScope,
};
use gateway_proto::{BotId, ErrorCode, Op, OpError, StartDir};
use rfb::{ClientFilter, Input, Policy, RfbServer, RfbServerSpec};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;
use table::{CapTable, Capability, ClientGuard};
use terminal::user::{plan_shell, shell_user, ShellPlace, WorkspaceUser};
use terminal::TerminalSession;
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// How long a revocation waits for a capability's relays to let go.
const DISCONNECT_LIMIT: Duration = Duration::from_secs(5);
/// How long a connect retries a socket that refuses (a server that has bound but not listened).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most clients one view or control server serves at once.
const MAX_CLIENTS_PER_SERVER: usize = 32;
/// Most terminals one bot may have open at once (each is a shell and two threads), waiting for
/// a reattachment or not.
pub const MAX_TERMINALS_PER_BOT: usize = 16;
/// Most terminals of one bot that wait for a reattachment at once.
pub const MAX_DETACHED_PER_BOT: usize = 4;
/// How long a terminal opened with a session key waits for its page to reconnect
/// (`RAKAZO_TERMINAL_GRACE_SECS`).
pub const TERMINAL_GRACE: Duration = Duration::from_secs(60);
/// What a fresh shell says first when its page asked for the previous one.
const PREVIOUS_SHELL_GONE: &str =
    "\r\nrakazo: the previous shell is gone (it ended, or waited too long); this is a new shell\r\n";
/// Longest socket path a `sockaddr_un` holds (108 bytes with the NUL).
const MAX_SOCKET_PATH: usize = 107;

/// What the gateway needs from the guest's configuration.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// The guest's private runtime directory; sockets live in its `gateway/` (0700).
    pub runtime_dir: PathBuf,
    /// The computer's home (the terminal's `HOME` and working directory).
    pub home: PathBuf,
    /// Who shells run as when the guest is root (`None`: the home's owner, else 1000:1000).
    pub workspace_user: Option<WorkspaceUser>,
    /// Stamped whenever a terminal's shell prints (the guest's activity report).
    pub terminal_output: crate::activity::LastOutput,
    /// How long a terminal whose connection dropped waits for its page (zero: it ends with its
    /// connection).
    pub terminal_grace: Duration,
}

impl GatewayConfig {
    /// Defaults for a guest with this runtime directory and home.
    pub fn new(runtime_dir: PathBuf, home: PathBuf) -> Self {
        Self {
            runtime_dir,
            home,
            workspace_user: None,
            terminal_output: Default::default(),
            terminal_grace: TERMINAL_GRACE,
        }
    }
}

/// What serves a capability's socket.
#[derive(Debug)]
enum Serving {
    Rfb(RfbServer),
    Terminal(TerminalSession),
}

impl Serving {
    fn is_alive(&mut self) -> bool {
        match self {
            Self::Rfb(s) => s.is_alive(),
            Self::Terminal(s) => s.is_alive(),
        }
    }

    async fn stop(&mut self) {
        match self {
            Self::Rfb(s) => s.stop().await,
            Self::Terminal(s) => s.stop().await,
        }
    }
}

/// The desktop an RFB server serves (copied out of the locked [`crate::screens::LiveScreen`],
/// whose X clients cannot be shared across threads).
struct RfbTarget {
    display: crate::display::DisplayNum,
    /// The display's Xvnc socket (`None`: its server speaks no RFB).
    rfb_socket: Option<PathBuf>,
    epoch: u64,
}

/// A connection ready to relay.
struct Opened {
    stream: UnixStream,
    cancel: CancellationToken,
    guard: ClientGuard,
    filter: Option<ClientFilter>,
    /// The terminal session's id: when the connection ends, it waits for a reattachment or
    /// is stopped ([`Gateway::terminal_ended`]).
    terminal: Option<u64>,
}

/// The capability table of this guest and the servers behind it.
pub struct Gateway {
    /// Itself, for the timers of terminals waiting for a reattachment.
    me: Weak<Gateway>,
    cfg: GatewayConfig,
    screens: Arc<Screens>,
    table: tokio::sync::Mutex<CapTable<Serving>>,
}

fn failed(e: impl std::fmt::Display) -> OpError {
    OpError::new(ErrorCode::Failed, e.to_string())
}

impl Gateway {
    /// A gateway over `screens`, registered with it so a desktop's teardown revokes first.
    pub fn new(cfg: GatewayConfig, screens: Arc<Screens>) -> Arc<Self> {
        let dir = cfg.runtime_dir.join("gateway");
        let gateway = Arc::new_cyclic(|me| Self {
            me: me.clone(),
            cfg,
            screens: screens.clone(),
            table: tokio::sync::Mutex::new(CapTable::new(dir)),
        });
        let weak = Arc::downgrade(&gateway);
        screens.set_revoker(weak);
        gateway
    }

    /// Serves one `Connect` stream: answers `Opened` and relays, or answers `Error`.
    pub async fn connect(
        &self,
        mut send: quinn::SendStream,
        mut recv: quinn::RecvStream,
        remainder: Vec<u8>,
        request: ConnectRequest,
    ) {
        let bot = request.bot.clone();
        let kind = request.kind;
        let opened = match self.open(&request).await {
            Ok(o) => o,
            Err(e) => {
                debug!(bot = %bot, kind = kind.as_str(), error = %e, "capability refused");
                let _ = recv.stop(0u32.into());
                crate::opstream::refuse(send, e).await;
                return;
            }
        };
        let Opened {
            stream,
            cancel,
            guard,
            filter,
            terminal,
        } = opened;
        let end = if crate::opstream::write_frame(&mut send, &ConnectRequest::reply_frame(()))
            .await
            .is_ok()
        {
            info!(bot = %bot, kind = kind.as_str(), "capability connection opened");
            let noted = self.person_inputs(&request);
            relay::relay(
                &mut send, &mut recv, remainder, stream, filter, &cancel, noted,
            )
            .await
        } else {
            relay::RelayEnd::ClientGone
        };
        relay::close(&mut send, &mut recv, &end);
        info!(bot = %bot, kind = kind.as_str(), end = ?end, "capability connection closed");
        drop(guard);
        if let Some(id) = terminal {
            let revoked = matches!(
                end,
                relay::RelayEnd::Revoked | relay::RelayEnd::ClientRevoked
            );
            self.terminal_ended(&bot, id, revoked).await;
        }
    }

    /// A terminal's connection ended: the shell waits for a reattachment when it was opened with
    /// a session key, still runs, and was not revoked; otherwise it is stopped now. A shell that
    /// another connection has taken over meanwhile is left to it.
    async fn terminal_ended(&self, bot: &BotId, id: u64, revoked: bool) {
        let grace = self.cfg.terminal_grace;
        let mut table = self.table.lock().await;
        // Gone already: revoked, or ended by a later connection's failure.
        let Some(cap) = table.terminal(bot, id) else {
            return;
        };
        let keep = !revoked && !grace.is_zero() && cap.reattach.is_some() && cap.serving.is_alive();
        let mut ended = Vec::new();
        if keep {
            if cap.connected() > 0 {
                return;
            }
            let Some(generation) = table.detach(bot, id) else {
                return;
            };
            for old in table.detached_beyond(bot, MAX_DETACHED_PER_BOT) {
                ended.extend(table.take_terminal(bot, old));
            }
            let me = self.me.clone();
            let waiting = bot.clone();
            tokio::spawn(async move {
                tokio::time::sleep(grace).await;
                if let Some(gateway) = me.upgrade() {
                    gateway.terminal_grace_over(&waiting, id, generation).await;
                }
            });
            info!(bot = %bot, ?grace, "terminal detached; its shell waits for a reattachment");
        } else {
            ended.extend(table.take_terminal(bot, id));
        }
        drop(table);
        for mut cap in ended {
            end_capability(&mut cap).await;
        }
    }

    /// The grace period of terminal `id` that began after its `generation`-th connection is
    /// over: stopped unless a connection came since.
    async fn terminal_grace_over(&self, bot: &BotId, id: u64, generation: u64) {
        let taken = {
            let mut table = self.table.lock().await;
            let waiting = table.terminal(bot, id).is_some_and(|cap| {
                cap.connected() == 0
                    && cap
                        .reattach
                        .as_ref()
                        .is_some_and(|r| r.attachments == generation)
            });
            if waiting {
                table.take_terminal(bot, id)
            } else {
                None
            }
        };
        if let Some(mut cap) = taken {
            info!(bot = %bot, "terminal stopped: nobody reattached within the grace period");
            end_capability(&mut cap).await;
        }
    }

    /// Serves a `Revoke` request.
    pub async fn revoke(&self, request: &RevokeRequest) {
        self.revoke_scope(&request.bot, request.scope).await;
    }

    /// Revokes a bot's capabilities in the teardown order: out of the table, clients disconnected,
    /// servers and shells stopped, sockets removed.
    pub async fn revoke_scope(&self, bot: &BotId, scope: RevokeScope) {
        let mut caps = self.table.lock().await.take_scope(bot, scope);
        if caps.is_empty() {
            return;
        }
        for cap in &caps {
            cap.cancel.cancel();
        }
        for cap in &mut caps {
            end_capability(cap).await;
        }
        info!(bot = %bot, ?scope, count = caps.len(), "capabilities revoked");
    }

    /// Checks the request, finds the desktop and the capability, and connects to its socket.
    async fn open(&self, req: &ConnectRequest) -> Result<Opened, OpError> {
        let lease = match (&req.control_lease, req.kind) {
            (Some(l), _) if !valid_control_lease_id(l) => {
                return Err(OpError::new(
                    ErrorCode::BadRequest,
                    "the control lease id must be 1 to 64 characters of [A-Za-z0-9_-]",
                ))
            }
            (None, CapabilityKind::Control | CapabilityKind::Terminal) => {
                return Err(OpError::new(
                    ErrorCode::BadRequest,
                    format!("a {} capability needs a control lease", req.kind.as_str()),
                ))
            }
            (l, _) => l.clone(),
        };
        // Capabilities attach to a desktop, which some browser providers never start.
        self.screens.no_desktop()?;
        let mut live = self.screens.live(&req.bot).await.ok_or_else(|| {
            OpError::new(
                ErrorCode::NotFound,
                format!(
                    "bot {} has no live desktop; ensure its screen before connecting",
                    req.bot
                ),
            )
        })?;
        let mut table = self.table.lock().await;
        ensure_private_dir(table.dir()).map_err(failed)?;
        let (socket, cancel, guard, terminal) = match req.kind {
            CapabilityKind::View | CapabilityKind::Control => {
                let target = RfbTarget {
                    display: live.display(),
                    rfb_socket: live.rfb_socket().map(Path::to_path_buf),
                    epoch: live.epoch(),
                };
                match self
                    .rfb_capability(&mut table, &req.bot, req.kind, lease, target)
                    .await
                {
                    // The X server died between the look-up and the server's start: the
                    // desktop is gone, as if it had been looked up a moment later.
                    Err(_) if !live.display_alive() => {
                        return Err(OpError::new(
                            ErrorCode::NotFound,
                            format!(
                                "bot {} has no live desktop (its display stopped); ensure its \
                                 screen before connecting",
                                req.bot
                            ),
                        ))
                    }
                    other => other?,
                }
            }
            CapabilityKind::Terminal => {
                let opened = self
                    .terminal_capability(&mut table, req, lease, live.epoch())
                    .await?;
                (opened.0, opened.1, opened.2, Some(opened.3))
            }
        };
        // From here on a revocation finds the capability in the table; the desktop may go.
        drop(table);
        drop(live);
        let stream = match connect_socket(&socket).await {
            Ok(s) => s,
            Err(e) => {
                if let Some(id) = terminal {
                    let taken = self.table.lock().await.take_terminal(&req.bot, id);
                    drop(guard);
                    if let Some(mut cap) = taken {
                        end_capability(&mut cap).await;
                    }
                }
                return Err(failed(format!(
                    "cannot connect to the {} socket of bot {}: {e}",
                    req.kind.as_str(),
                    req.bot
                )));
            }
        };
        let filter = match req.kind {
            CapabilityKind::View => Some(ClientFilter::new(Policy::View)),
            CapabilityKind::Control => Some(ClientFilter::new(Policy::Control).note_inputs()),
            CapabilityKind::Terminal => None,
        };
        Ok(Opened {
            stream,
            cancel,
            guard,
            filter,
            terminal,
        })
    }

    /// What a control connection's inputs become: a person's inputs in the bot's recording
    /// (nothing when the bot's screen is not recorded).
    fn person_inputs(&self, request: &ConnectRequest) -> impl FnMut(Vec<Input>) + Send {
        let screens = self.screens.clone();
        let bot = request.bot.clone();
        let lease = request.control_lease.clone();
        let mut person = PersonInput::default();
        move |inputs| {
            for input in inputs {
                match input {
                    Input::Key { down, keysym } => {
                        if let Some(i) = person.key(down, keysym, &lease) {
                            screens.recorders().input(&bot, i);
                        }
                    }
                    Input::Pointer { mask, x, y } => {
                        for i in person.pointer(mask, x, y, &lease) {
                            screens.recorders().input(&bot, i);
                        }
                    }
                }
            }
        }
    }

    /// The terminal a connection gets: the bot's shell kept under the request's session key (same
    /// lease), or a fresh one. Returns its socket, cancel token, a client guard and its id.
    async fn terminal_capability(
        &self,
        table: &mut CapTable<Serving>,
        req: &ConnectRequest,
        lease: Option<String>,
        epoch: u64,
    ) -> Result<(PathBuf, CancellationToken, ClientGuard, u64), OpError> {
        let resume = req.terminal.as_ref();
        if resume.is_some_and(|r| !valid_terminal_key(&r.key)) {
            return Err(OpError::new(
                ErrorCode::BadRequest,
                "the terminal session key must be 1 to 64 characters of [A-Za-z0-9_-]",
            ));
        }
        let mut notice = None;
        if let Some(r) = resume {
            let found = table
                .terminal_by_key(&req.bot, lease.as_deref(), &r.key)
                .map(|cap| (cap.id, cap.serving.is_alive()));
            match found {
                Some((id, true)) => {
                    let cap = table.terminal(&req.bot, id).ok_or_else(|| failed("lost"))?;
                    let guard = cap.client().ok_or_else(|| failed("terminal revoked"))?;
                    if let Some(re) = cap.reattach.as_mut() {
                        re.attachments += 1;
                        re.detached = None;
                    }
                    info!(bot = %req.bot, "terminal reattached to its shell");
                    return Ok((cap.socket.clone(), cap.cancel.clone(), guard, id));
                }
                Some((id, false)) => {
                    if let Some(mut dead) = table.take_terminal(&req.bot, id) {
                        end_capability(&mut dead).await;
                    }
                }
                None => {}
            }
            if r.resume {
                notice = Some(PREVIOUS_SHELL_GONE);
            }
        }
        if table.terminals(&req.bot) >= MAX_TERMINALS_PER_BOT {
            // Room is made by the shell that has waited longest for its page, if any.
            let oldest = table.detached_beyond(&req.bot, 0).first().copied();
            match oldest.and_then(|id| table.take_terminal(&req.bot, id)) {
                Some(mut cap) => end_capability(&mut cap).await,
                None => {
                    return Err(OpError::new(
                        ErrorCode::BadRequest,
                        format!(
                            "bot {} already has {MAX_TERMINALS_PER_BOT} open terminals",
                            req.bot
                        ),
                    ))
                }
            }
        }
        let (id, socket) = table.allocate(req.kind);
        check_socket_path(&socket)?;
        let euid = nix::unistd::geteuid().as_raw();
        let start = self.terminal_start(&req.bot, req.start, euid)?;
        let private_session_dir = table.dir().join(format!("{id}-terminal.d"));
        let place = ShellPlace {
            home: &self.cfg.home,
            start: &start,
            private_session_dir: &private_session_dir,
        };
        let mut plan = plan_shell(place, euid, self.cfg.workspace_user).map_err(failed)?;
        if let Some(n) = notice {
            plan.notice = Some(format!("{n}{}", plan.notice.unwrap_or_default()));
        }
        let session = TerminalSession::start(plan, &socket, self.cfg.terminal_output.clone())
            .map_err(failed)?;
        let mut cap = Capability::new(
            id,
            req.kind,
            lease,
            epoch,
            socket.clone(),
            Serving::Terminal(session),
        );
        if let Some(r) = resume {
            cap = cap.with_reattach(r.key.clone());
        }
        let cancel = cap.cancel.clone();
        let guard = cap.client().ok_or_else(|| failed("terminal revoked"))?;
        table.insert(&req.bot, cap);
        Ok((socket, cancel, guard, id))
    }

    /// The bot's RFB server of `kind`, started if missing, dead or made for an older desktop.
    async fn rfb_capability(
        &self,
        table: &mut CapTable<Serving>,
        bot: &BotId,
        kind: CapabilityKind,
        lease: Option<String>,
        live: RfbTarget,
    ) -> Result<(PathBuf, CancellationToken, ClientGuard, Option<u64>), OpError> {
        if let Some(cap) = table.rfb(bot, kind) {
            if cap.epoch == live.epoch && cap.serving.is_alive() {
                if cap.connected() >= MAX_CLIENTS_PER_SERVER {
                    return Err(OpError::new(
                        ErrorCode::BadRequest,
                        format!(
                            "the {} capability of bot {bot} already has \
                             {MAX_CLIENTS_PER_SERVER} clients",
                            kind.as_str()
                        ),
                    ));
                }
                let guard = cap
                    .client()
                    .ok_or_else(|| failed("capability is being revoked"))?;
                return Ok((cap.socket.clone(), cap.cancel.clone(), guard, None));
            }
        }
        if let Some(mut stale) = table.take_rfb(bot, kind) {
            debug!(bot = %bot, kind = kind.as_str(), "replacing a stale rfb server");
            stale.cancel.cancel();
            end_capability(&mut stale).await;
        }
        let upstream = live.rfb_socket.as_deref().ok_or_else(|| {
            failed(format!(
                "the display {} of bot {bot} serves no rfb socket",
                live.display
            ))
        })?;
        let (id, socket) = table.allocate(kind);
        check_socket_path(&socket)?;
        let spec = RfbServerSpec {
            display: live.display,
            upstream,
            socket: &socket,
        };
        let server = RfbServer::start(&spec).await.map_err(|e| {
            failed(format!(
                "cannot serve the {} capability of bot {bot}: {e}",
                kind.as_str()
            ))
        })?;
        let cap = Capability::new(
            id,
            kind,
            lease,
            live.epoch,
            socket.clone(),
            Serving::Rfb(server),
        );
        let cancel = cap.cancel.clone();
        let guard = cap
            .client()
            .ok_or_else(|| failed("capability is being revoked"))?;
        table.insert(bot, cap);
        Ok((socket, cancel, guard, None))
    }

    /// Where a terminal of `bot` starts: the home, or its `bots/<bot>/` (created on first use,
    /// never through a symlink, and given to the workspace user when a root guest drops to it).
    fn terminal_start(&self, bot: &BotId, start: StartDir, euid: u32) -> Result<PathBuf, OpError> {
        match start {
            StartDir::Home => Ok(self.cfg.home.clone()),
            StartDir::BotDir => {
                let home = crate::home::Home::new(&self.cfg.home).map_err(|e| {
                    failed(format!(
                        "cannot open the home {}: {e}",
                        self.cfg.home.display()
                    ))
                })?;
                let (user, drops) = shell_user(&self.cfg.home, euid, self.cfg.workspace_user);
                let owner = drops.then_some((user.uid, user.gid));
                crate::exec::bot_dir(&home, bot, owner).map_err(failed)
            }
        }
    }

    /// How many capabilities `bot` has in the table (tests, diagnostics).
    pub async fn capability_count(&self, bot: &BotId) -> usize {
        self.table.lock().await.count(bot)
    }

    /// The directory of the capability sockets.
    pub fn socket_dir(&self) -> PathBuf {
        self.cfg.runtime_dir.join("gateway")
    }
}

impl CapabilityRevoker for Gateway {
    fn revoke_all<'a>(&'a self, bot: &'a BotId) -> futures_util::future::BoxFuture<'a, ()> {
        Box::pin(self.revoke_scope(bot, RevokeScope::All))
    }
}

/// Disconnects a capability's clients (already out of the table), then stops what serves it.
async fn end_capability(cap: &mut Capability<Serving>) {
    if !cap.disconnect(DISCONNECT_LIMIT).await {
        warn!(
            kind = cap.kind.as_str(),
            "capability clients did not let go in time"
        );
    }
    cap.serving.stop().await;
    let _ = std::fs::remove_file(&cap.socket);
}

/// Connects to a capability's socket, retrying while the server is about to listen.
async fn connect_socket(socket: &Path) -> std::io::Result<UnixStream> {
    let attempt = async {
        loop {
            match UnixStream::connect(socket).await {
                Ok(s) => return Ok(s),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
                    ) =>
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => return Err(e),
            }
        }
    };
    tokio::time::timeout(CONNECT_TIMEOUT, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the socket did not accept in time",
            ))
        })
}

fn check_socket_path(socket: &Path) -> Result<(), OpError> {
    if socket.as_os_str().len() > MAX_SOCKET_PATH {
        return Err(failed(format!(
            "the socket path {} is too long for a unix socket; use a shorter RAKAZO_RUNTIME_DIR",
            socket.display()
        )));
    }
    Ok(())
}

/// Creates `dir` 0700 if missing and refuses one that is not a private directory of ours.
fn ensure_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(std::io::Error::other(format!(
            "{} is not a directory of ours",
            dir.display()
        )));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}
