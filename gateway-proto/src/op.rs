//! Every guest operation, declared once: its request, its answer, the shape of its stream and the
//! authority it acts under.
//!
//! An operation is a request type implementing [`Op`]. The trait ties together what used to live
//! in doc comments: which [`Reply`] variant answers which [`Request`] ([`Op::read_frame`],
//! [`Op::reply_frame`]), what follows on the stream ([`Op::SHAPE`]) and what the guest checks
//! before it runs anything ([`Op::NEEDS`], [`Op::authority`]). Both ends use it: the guest's
//! dispatch table answers through [`Op::reply_frame`] and refuses through
//! [`Op::refusal_frame`]; the control plane's guest client sends with `Into<Request>` and reads
//! the answer through [`Op::read_frame`], so a reply of the wrong kind is a protocol error in one
//! place. Operations answered by a single frame also implement [`UnaryOp`], which the control
//! plane's generic `call` requires, so the compiler refuses a unary call of a streaming operation.
//!
//! The wire stays as it was: [`Request`] and [`Reply`] are the frames (variant order is wire
//! order; append, never reorder, and bump [`PROTOCOL_VERSION`]), pinned by golden bytes and
//! fuzzed in `tests/`. ARCHITECTURE.md, "Adding an operation", is the recipe.

use crate::desktop::{
    ActOutcome, ActRequest, ObservationMeta, ObserveRequest, ScreenInfo, ScreenPrewarm,
    ScreenRelease, ScreenRequest,
};
use crate::error::{ErrorCode, OpError};
use crate::home::{ExportStart, HomeAuthority, HomeExportRequest, HomeImportRequest, Imported};
use crate::lease::{BotId, LeaseToken};
use crate::live::{ConnectRequest, PortConnect, RevokeRequest};
use crate::msg::{BotLease, ExecEvent, ExecRequest, FileEntry, ListFiles, ReadFile, WriteFile};
use crate::page::{NavigateRequest, PageActFailure, PageActRequest, Snapshot, SnapshotRequest};
use crate::process::{ProcAttach, ProcEvent, ProcInfo, ProcKill, ProcList, ProcLogs, ProcStart};
use crate::recording::{RecordingChunk, RecordingPull};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// The protocol version this build speaks.
///
/// History (one line per version; golden-byte tests pin every message, so a wire change cannot
/// land without a bump here):
/// - 1: hello/welcome handshake, lease push, exec with streamed stdin/stdout/stderr, file
///   list/read/write with raw bulk bodies.
/// - 2: desktops: `ScreenEnsure`, `ScreenRelease`, `ScreenList`, `Observe`, `Act` requests, their
///   replies, and the `ScreenUnavailable`, `ScreenReleasing`, `ActionRefused` error codes.
/// - 3: page browser: `Navigate`, `Snapshot`, `PageAct` requests; `Snapshot` and
///   `PageActFailed` replies.
/// - 4: live screens and homes: `Connect`, `Revoke`, `HomeExport`, `HomeImport` requests;
///   `Opened`, `Revoked`, `ExportStart`, `Imported` replies.
/// - 5: `ExecRequest.start` and `ConnectRequest.start` (`StartDir`): a Team computer's bot
///   starts its commands and terminals in `bots/<bot-id>/`.
/// - 6: `HomeExportRequest.authority` and `HomeImportRequest.authority` (`HomeAuthority`: the
///   lease fences a home operation acts under; the guest refuses one older than its own).
/// - 7: `Status` request and `Status` reply (`MachineStatus`: uptime, load, CPUs, home disk),
///   shown by `computer show`.
/// - 8: `Activity` request and `Activity` reply (`GuestActivity`: running commands, background
///   processes, terminal output, CPU; the idle job's view of the guest); `MachineStatus` gains
///   memory, home use and live desktops; `ScreenInfo.idle_ms` (screen eviction picks the
///   oldest idle screen).
/// - 9: `WriteFile.no_replace` and the `Exists` error code (a user's upload never overwrites).
/// - 10: `ConnectRequest.terminal` (`TerminalResume`): a terminal's shell outlives a dropped
///   connection for a grace period and the same page gets it back.
/// - 11: detached processes: `ProcStart`, `ProcList`, `ProcLogs`, `ProcAttach`, `ProcKill`
///   requests, `Process` and `Processes` replies, `ProcEvent` frames and the `TooManyProcesses`
///   error code.
/// - 12: `HomeExportRequest.token` and `.since`: delta exports, which send files unchanged since
///   an earlier export as `TAG_SAME` entries without their content.
/// - 13: `PortConnect` request (a preview URL's connection to a port on the computer's loopback);
///   `GuestActivity.process_output_ago_ms` (detached processes count by their output and CPU,
///   no longer by being alive).
/// - 14: grounded observations: `ObserveRequest.options` (`ObserveOptions`: a scaled-down
///   width, marks, changed regions), `ObservationMeta` gains the screen's size, `kind`,
///   `base_frame_id`, `regions` and `marks`; `ActRequest.frame` (the coordinate space of its
///   pointer actions) and `.observe_options`; `Action::ClickRef` (a click on an element ref).
/// - 15: `RecordingPull` request and `Recording` reply (screen recordings, docs/recordings.md).
/// - 16: `ScreenPrewarm` request (a warm pool's member starts a desktop and Chrome that the first
///   bot to ask for a screen takes, docs/pools.md), answered `Pong`.
pub const PROTOCOL_VERSION: u16 = 16;

/// The oldest protocol version this build still accepts from a peer.
pub const MIN_PROTOCOL_VERSION: u16 = 1;

/// What follows an operation's request frame on its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// The guest answers one frame and finishes.
    Unary,
    /// Typed frames both ways: the control plane sends input frames, the guest sends events
    /// until its last one (exec: `ExecInput` / `ExecEvent`).
    Events,
    /// The guest answers a header frame, then raw bytes: as many as the header announces (a file
    /// read, an observation), or until it finishes its side (a home export).
    BytesFromGuest,
    /// The control plane sends as many raw bytes as the request announces right after it; the
    /// guest answers one frame once it has them all.
    BytesToGuest,
    /// The guest answers a header frame, then raw bytes flow both ways until either side ends
    /// (a live view, control or terminal connection).
    Duplex,
}

/// The authority an operation needs, checked by the guest before anything runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Nothing: health checks, listings, and decisions the control plane takes on its own.
    Nothing,
    /// The acting bot's execution lease, always.
    BotLease,
    /// A bot's execution lease when the request names one (an administrator's call names none).
    OptionalBotLease,
    /// The lease fences of every bot of the computer ([`HomeAuthority`]).
    Home,
    /// A capability (a user's control lease), checked by the control plane against its database
    /// when the stream opens and every second after; the guest cannot check it.
    Capability,
}

/// What one request acts under: what [`Op::authority`] gives the fence checks of both ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Authority<'a> {
    None,
    /// The bot and lease a command acts for.
    Lease(&'a BotId, &'a LeaseToken),
    /// A home export acting under these fences.
    HomeExport(&'a HomeAuthority),
    /// A home import acting under these fences.
    HomeImport(&'a HomeAuthority),
}

impl<'a> Authority<'a> {
    /// The bot lease it names, if any.
    pub fn lease(self) -> Option<BotLease> {
        match self {
            Self::Lease(bot, token) => Some(BotLease {
                bot: bot.clone(),
                token: token.clone(),
            }),
            _ => None,
        }
    }

    fn of(lease: &'a Option<BotLease>) -> Self {
        match lease {
            Some(l) => Self::Lease(&l.bot, &l.token),
            None => Self::None,
        }
    }
}

/// A first frame that is not a successful answer of the operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answered {
    /// The guest refused or failed the operation.
    Refused(OpError),
    /// A reply this operation is never answered with (a protocol error). The reply itself, so
    /// the caller decides how much of it a log may show (a page tool's may carry page text).
    Unexpected(Box<Reply>),
}

/// One guest operation: its request type implements this.
pub trait Op: Into<Request> + Sized {
    /// A short name for logs and errors (`exec`, `list_files`).
    const NAME: &'static str;
    /// What follows the request frame.
    const SHAPE: Shape;
    /// What the guest checks before running it.
    const NEEDS: Needs;
    /// The frame type the guest answers with on this stream ([`Reply`], or [`ExecEvent`]).
    type Frame: Serialize + DeserializeOwned + std::fmt::Debug;
    /// What a successful first answer carries (the header, for the byte-stream shapes).
    type Reply;

    /// What this request acts under, for the fence checks.
    fn authority(&self) -> Authority<'_>;
    /// The frame a successful answer is sent as.
    fn reply_frame(reply: Self::Reply) -> Self::Frame;
    /// The frame refusing the operation (nothing ran).
    fn refusal_frame(err: OpError) -> Self::Frame;
    /// Reads the guest's first answer frame.
    fn read_frame(frame: Self::Frame) -> Result<Self::Reply, Answered>;
}

/// Operations answered by exactly one frame and nothing after it.
pub trait UnaryOp: Op<Frame = Reply> {}

/// The [`Answered`] for a [`Reply`] that is not the operation's answer.
fn other(reply: Reply) -> Answered {
    match reply {
        Reply::Error(e) => Answered::Refused(e),
        other => Answered::Unexpected(Box::new(other)),
    }
}

/// `Op` for a request answered with [`Reply`] frames: `$variant` wraps it in [`Request`],
/// `$ok` builds the reply frame from the typed reply bound to `$r`, `$read` reads it back.
macro_rules! reply_op {
    (
        $ty:ty, $name:literal, $shape:ident, $needs:ident, $reply:ty,
        request($q:ident) $req:expr,
        authority($s:ident) $auth:expr,
        reply($r:ident) $ok:expr,
        read { $($pat:pat => $val:expr),+ $(,)? }
    ) => {
        impl From<$ty> for Request {
            fn from($q: $ty) -> Request {
                $req
            }
        }
        impl Op for $ty {
            const NAME: &'static str = $name;
            const SHAPE: Shape = Shape::$shape;
            const NEEDS: Needs = Needs::$needs;
            type Frame = Reply;
            type Reply = $reply;
            fn authority(&self) -> Authority<'_> {
                let $s = self;
                $auth
            }
            fn reply_frame($r: $reply) -> Reply {
                $ok
            }
            fn refusal_frame(err: OpError) -> Reply {
                Reply::Error(err)
            }
            fn read_frame(frame: Reply) -> Result<$reply, Answered> {
                match frame {
                    $($pat => Ok($val),)+
                    other_reply => Err(other(other_reply)),
                }
            }
        }
    };
}

/// First frame of every operation stream, control plane to guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Run a command. Then: control plane sends [`ExecInput`] frames, the guest sends
    /// [`ExecEvent`] frames ending with `Exit` or `Failed`, then finishes its side.
    Exec(ExecRequest),
    /// List a directory. The guest answers one [`Reply`]: `Files` or `Error`.
    ListFiles(ListFiles),
    /// Read a file. The guest answers [`Reply::ReadStart`] then exactly `size` raw bytes, or
    /// `Error`.
    ReadFile(ReadFile),
    /// Write a file. The control plane sends exactly `size` raw bytes after the request frame;
    /// the guest answers [`Reply::Written`] or `Error`.
    WriteFile(WriteFile),
    /// Round trip with no work, for health checks and latency measurement. Answer: `Pong`.
    Ping,
    /// Start (or keep) the bot's desktop. Answer: `Screen` or `Error`.
    ScreenEnsure(ScreenRequest),
    /// Tear the bot's desktop down (docs/screens.md#teardown). Answer: `Released` or `Error`.
    ScreenRelease(ScreenRelease),
    /// The live desktops. Answer: `Screens`.
    ScreenList,
    /// Screenshot. Answer: `Observation` then `png_len` raw bytes, or `Error`.
    Observe(ObserveRequest),
    /// Run a batch of actions. Answer: `Acted`, then (if asked) `Observation` and its bytes; or
    /// `Error`.
    Act(ActRequest),
    /// browser_navigate. Answer: `Snapshot` of the page after it settled, or `Error`.
    Navigate(NavigateRequest),
    /// browser_snapshot. Answer: `Snapshot` or `Error`.
    Snapshot(SnapshotRequest),
    /// browser_act. Answer: `Snapshot` after the steps, `PageActFailed`, or `Error` (nothing
    /// ran: validation, tab selection).
    PageAct(PageActRequest),
    /// Open a view, control or terminal capability (docs/screens.md#live-views). Answer: `Opened`,
    /// then raw bytes both ways (see [`crate::live`]); or `Error`.
    Connect(ConnectRequest),
    /// Revoke a bot's capabilities. Answer: `Revoked`.
    Revoke(RevokeRequest),
    /// Export the home as an archive. Answer: `ExportStart`, then the raw archive bytes until the
    /// stream finishes; or `Error`.
    HomeExport(HomeExportRequest),
    /// Import an archive into the home: `size` raw bytes follow. Answer: `Imported` or `Error`.
    HomeImport(HomeImportRequest),
    /// The machine's uptime, load and home disk. Answer: `Status`.
    Status,
    /// What is still working in the computer (idle suspension). Answer: `Activity`.
    Activity,
    /// Start a detached process. Answer: `Process` or `Error`.
    ProcStart(ProcStart),
    /// The detached processes. Answer: `Processes`.
    ProcList(ProcList),
    /// A process's output: [`ProcEvent`] frames, `Opened` first (or `Failed`).
    ProcLogs(ProcLogs),
    /// A process's output as [`ProcLogs`] with follow, and [`crate::ExecInput`] frames to its
    /// stdin; the control plane finishing its side detaches.
    ProcAttach(ProcAttach),
    /// Signal a process. Answer: `Process` or `Error`.
    ProcKill(ProcKill),
    /// Connect to a port on the computer's loopback (a preview URL). Answer: `Opened`, then the
    /// connection's bytes both ways; or `Error`.
    PortConnect(PortConnect),
    /// Take a bot's screen recording. Answer: `Recording`, then `len` raw bytes of records; or
    /// `Error`.
    RecordingPull(RecordingPull),
    /// Start a spare desktop and Chrome for the first bot that asks for a screen (a warm pool's
    /// member). Answer: `Pong` once they run, or `Error`.
    ScreenPrewarm(ScreenPrewarm),
}

/// The guest's single answer to a non-streaming request (or the header before raw bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    Files(Vec<FileEntry>),
    ReadStart { size: u64 },
    Written { size: u64 },
    Pong,
    Error(OpError),
    Screen(ScreenInfo),
    Screens(Vec<ScreenInfo>),
    Released,
    Observation(ObservationMeta),
    Acted(ActOutcome),
    Snapshot(Snapshot),
    PageActFailed(PageActFailure),
    Opened,
    Revoked,
    ExportStart(ExportStart),
    Imported(Imported),
    Status(MachineStatus),
    Activity(GuestActivity),
    Process(ProcInfo),
    Processes(Vec<ProcInfo>),
    Recording(RecordingChunk),
}

/// The request of [`Request::Ping`] (it carries nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PingRequest;

/// The request of [`Request::ScreenList`] (it carries nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScreenListRequest;

impl From<ExecRequest> for Request {
    fn from(r: ExecRequest) -> Request {
        Request::Exec(r)
    }
}

/// Exec answers with [`ExecEvent`] frames: the first is `Started`, or `Exit` for a command
/// refused with an exit code (a bad working directory), or `Failed` when nothing could run.
impl Op for ExecRequest {
    const NAME: &'static str = "exec";
    const SHAPE: Shape = Shape::Events;
    const NEEDS: Needs = Needs::OptionalBotLease;
    type Frame = ExecEvent;
    type Reply = ExecEvent;
    fn authority(&self) -> Authority<'_> {
        Authority::of(&self.lease)
    }
    fn reply_frame(event: ExecEvent) -> ExecEvent {
        event
    }
    fn refusal_frame(err: OpError) -> ExecEvent {
        ExecEvent::Failed(err)
    }
    fn read_frame(frame: ExecEvent) -> Result<ExecEvent, Answered> {
        match frame {
            ExecEvent::Failed(e) => Err(Answered::Refused(e)),
            event => Ok(event),
        }
    }
}

reply_op!(ListFiles, "list_files", Unary, OptionalBotLease, Vec<FileEntry>,
    request(r) Request::ListFiles(r),
    authority(r) Authority::of(&r.lease),
    reply(entries) Reply::Files(entries),
    read { Reply::Files(entries) => entries });

reply_op!(ReadFile, "read_file", BytesFromGuest, OptionalBotLease, u64,
    request(r) Request::ReadFile(r),
    authority(r) Authority::of(&r.lease),
    reply(size) Reply::ReadStart { size },
    read { Reply::ReadStart { size } => size });

reply_op!(WriteFile, "write_file", BytesToGuest, OptionalBotLease, u64,
    request(r) Request::WriteFile(r),
    authority(r) Authority::of(&r.lease),
    reply(size) Reply::Written { size },
    read { Reply::Written { size } => size });

reply_op!(PingRequest, "ping", Unary, Nothing, (),
    request(_r) Request::Ping,
    authority(_r) Authority::None,
    reply(_u) Reply::Pong,
    read { Reply::Pong => () });

reply_op!(ScreenRequest, "screen_ensure", Unary, BotLease, ScreenInfo,
    request(r) Request::ScreenEnsure(r),
    authority(r) Authority::Lease(&r.bot, &r.lease),
    reply(info) Reply::Screen(info),
    read { Reply::Screen(info) => info });

reply_op!(ScreenRelease, "screen_release", Unary, OptionalBotLease, (),
    request(r) Request::ScreenRelease(r),
    authority(r) match &r.lease {
        Some(token) => Authority::Lease(&r.bot, token),
        None => Authority::None,
    },
    reply(_u) Reply::Released,
    read { Reply::Released => () });

reply_op!(ScreenPrewarm, "screen_prewarm", Unary, Nothing, (),
    request(_r) Request::ScreenPrewarm(ScreenPrewarm {}),
    authority(_r) Authority::None,
    reply(_u) Reply::Pong,
    read { Reply::Pong => () });

reply_op!(ScreenListRequest, "screen_list", Unary, Nothing, Vec<ScreenInfo>,
    request(_r) Request::ScreenList,
    authority(_r) Authority::None,
    reply(all) Reply::Screens(all),
    read { Reply::Screens(all) => all });

reply_op!(ObserveRequest, "observe", BytesFromGuest, BotLease, ObservationMeta,
    request(r) Request::Observe(r),
    authority(r) Authority::Lease(&r.bot, &r.lease),
    reply(meta) Reply::Observation(meta),
    read { Reply::Observation(meta) => meta });

// `Acted`, then, when the request asked to observe, an `Observation` frame and its PNG.
reply_op!(ActRequest, "act", BytesFromGuest, BotLease, ActOutcome,
    request(r) Request::Act(r),
    authority(r) Authority::Lease(&r.bot, &r.lease),
    reply(outcome) Reply::Acted(outcome),
    read { Reply::Acted(outcome) => outcome });

reply_op!(NavigateRequest, "browser_navigate", Unary, BotLease, Snapshot,
    request(r) Request::Navigate(r),
    authority(r) Authority::Lease(&r.bot, &r.lease),
    reply(s) Reply::Snapshot(s),
    read { Reply::Snapshot(s) => s });

reply_op!(SnapshotRequest, "browser_snapshot", Unary, BotLease, Snapshot,
    request(r) Request::Snapshot(r),
    authority(r) Authority::Lease(&r.bot, &r.lease),
    reply(s) Reply::Snapshot(s),
    read { Reply::Snapshot(s) => s });

// A step that failed is an answer, not a refusal: the page may have changed before it.
reply_op!(PageActRequest, "browser_act", Unary, BotLease, Result<Snapshot, PageActFailure>,
request(r) Request::PageAct(r),
authority(r) Authority::Lease(&r.bot, &r.lease),
reply(r) match r {
    Ok(s) => Reply::Snapshot(s),
    Err(f) => Reply::PageActFailed(f),
},
read {
    Reply::Snapshot(s) => Ok(s),
    Reply::PageActFailed(f) => Err(f),
});

reply_op!(ConnectRequest, "connect", Duplex, Capability, (),
    request(r) Request::Connect(r),
    authority(_r) Authority::None,
    reply(_u) Reply::Opened,
    read { Reply::Opened => () });

reply_op!(PortConnect, "port_connect", Duplex, Capability, (),
    request(r) Request::PortConnect(r),
    authority(_r) Authority::None,
    reply(_u) Reply::Opened,
    read { Reply::Opened => () });

reply_op!(RecordingPull, "recording_pull", BytesFromGuest, Nothing, RecordingChunk,
    request(r) Request::RecordingPull(r),
    authority(_r) Authority::None,
    reply(chunk) Reply::Recording(chunk),
    read { Reply::Recording(chunk) => chunk });

reply_op!(RevokeRequest, "revoke", Unary, Nothing, (),
    request(r) Request::Revoke(r),
    authority(_r) Authority::None,
    reply(_u) Reply::Revoked,
    read { Reply::Revoked => () });

reply_op!(HomeExportRequest, "home_export", BytesFromGuest, Home, ExportStart,
    request(r) Request::HomeExport(r),
    authority(r) Authority::HomeExport(&r.authority),
    reply(start) Reply::ExportStart(start),
    read { Reply::ExportStart(start) => start });

reply_op!(HomeImportRequest, "home_import", BytesToGuest, Home, Imported,
    request(r) Request::HomeImport(r),
    authority(r) Authority::HomeImport(&r.authority),
    reply(done) Reply::Imported(done),
    read { Reply::Imported(done) => done });

impl UnaryOp for ListFiles {}
impl UnaryOp for PingRequest {}
impl UnaryOp for ScreenRequest {}
impl UnaryOp for ScreenRelease {}
impl UnaryOp for ScreenPrewarm {}
impl UnaryOp for ScreenListRequest {}
impl UnaryOp for NavigateRequest {}
impl UnaryOp for SnapshotRequest {}
impl UnaryOp for PageActRequest {}
impl UnaryOp for RevokeRequest {}

/// The request of [`Request::Status`] (it carries nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusRequest;

/// What a guest reports about its machine: read-only, cheap (two small `/proc` files and one
/// `statvfs`), so the control plane can ask whenever a computer is shown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineStatus {
    /// Seconds since the kernel booted (in a container: the host's kernel).
    pub uptime_secs: u64,
    /// The 1, 5 and 15 minute load averages, in thousandths.
    pub load_milli: [u32; 3],
    /// CPUs the guest may run on.
    pub cpus: u32,
    /// Size of the filesystem holding the home, and what is still free to its user.
    pub home_total_bytes: u64,
    pub home_free_bytes: u64,
    /// Memory the machine may use (its cgroup's `memory.max` when that is lower than the
    /// kernel's `MemTotal`) and what of it is still available.
    pub memory_total_bytes: u64,
    pub memory_available_bytes: u64,
    /// The total is a cgroup limit (a container), not the kernel's memory.
    pub memory_limited: bool,
    /// Disk used by the home's own files (allocated blocks), from a bounded walk.
    pub home_used_bytes: u64,
    /// The walk stopped at its bound: `home_used_bytes` is a lower bound.
    pub home_used_partial: bool,
    /// Live desktops.
    pub desktops: u32,
}

/// The request of [`Request::Activity`] (it carries nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActivityRequest;

/// What is still working inside a computer, as its guest sees it: the idle job counts it as use
/// (bounded by the background work's maximum lifetime) besides the API's own traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestActivity {
    /// Commands running now (their exec streams are open).
    pub commands: u32,
    /// Live processes that finished commands left running (`nohup … &`): they carry the exec-id
    /// marker of a command that has ended. Detached processes are not counted here: their
    /// output ([`Self::process_output_ago_ms`]) and CPU are.
    pub background: u32,
    /// Milliseconds since a terminal session last printed; `None` when none has.
    pub terminal_output_ago_ms: Option<u64>,
    /// CPU used by the computer's work (every process but the guest itself) over the last
    /// `cpu_interval_ms`, in thousandths of one CPU.
    pub cpu_milli: u32,
    pub cpu_interval_ms: u64,
    /// Milliseconds since a detached process last printed; `None` when none has.
    pub process_output_ago_ms: Option<u64>,
}

reply_op!(StatusRequest, "status", Unary, Nothing, MachineStatus,
    request(_r) Request::Status,
    authority(_r) Authority::None,
    reply(status) Reply::Status(status),
    read { Reply::Status(status) => status });

impl UnaryOp for StatusRequest {}

reply_op!(ActivityRequest, "activity", Unary, Nothing, GuestActivity,
    request(_r) Request::Activity,
    authority(_r) Authority::None,
    reply(activity) Reply::Activity(activity),
    read { Reply::Activity(activity) => activity });

impl UnaryOp for ActivityRequest {}

reply_op!(ProcStart, "process_start", Unary, OptionalBotLease, ProcInfo,
    request(r) Request::ProcStart(r),
    authority(r) Authority::of(&r.command.lease),
    reply(info) Reply::Process(info),
    read { Reply::Process(info) => info });

reply_op!(ProcList, "process_list", Unary, Nothing, Vec<ProcInfo>,
    request(r) Request::ProcList(r),
    authority(_r) Authority::None,
    reply(all) Reply::Processes(all),
    read { Reply::Processes(all) => all });

reply_op!(ProcKill, "process_kill", Unary, OptionalBotLease, ProcInfo,
    request(r) Request::ProcKill(r),
    authority(r) Authority::of(&r.lease),
    reply(info) Reply::Process(info),
    read { Reply::Process(info) => info });

impl UnaryOp for ProcStart {}
impl UnaryOp for ProcList {}
impl UnaryOp for ProcKill {}

/// `Op` for the output streams: the first frame is `Opened { offset, dropped }`.
macro_rules! proc_stream_op {
    ($ty:ty, $name:literal, $needs:ident, $variant:ident, authority($s:ident) $auth:expr) => {
        impl From<$ty> for Request {
            fn from(r: $ty) -> Request {
                Request::$variant(r)
            }
        }
        impl Op for $ty {
            const NAME: &'static str = $name;
            const SHAPE: Shape = Shape::Events;
            const NEEDS: Needs = Needs::$needs;
            type Frame = ProcEvent;
            type Reply = (u64, u64);
            fn authority(&self) -> Authority<'_> {
                let $s = self;
                $auth
            }
            fn reply_frame((offset, dropped): (u64, u64)) -> ProcEvent {
                ProcEvent::Opened { offset, dropped }
            }
            fn refusal_frame(err: OpError) -> ProcEvent {
                ProcEvent::Failed(err)
            }
            fn read_frame(frame: ProcEvent) -> Result<(u64, u64), Answered> {
                match frame {
                    ProcEvent::Opened { offset, dropped } => Ok((offset, dropped)),
                    ProcEvent::Failed(e) => Err(Answered::Refused(e)),
                    other => Err(Answered::Unexpected(Box::new(Reply::Error(OpError::new(
                        ErrorCode::Failed,
                        format!("{other:?} before Opened"),
                    ))))),
                }
            }
        }
    };
}

proc_stream_op!(ProcLogs, "process_logs", Nothing, ProcLogs, authority(_r) Authority::None);
proc_stream_op!(ProcAttach, "process_attach", OptionalBotLease, ProcAttach,
    authority(r) Authority::of(&r.lease));

impl Request {
    /// What the request acts under ([`Op::authority`] of its operation).
    pub fn authority(&self) -> Authority<'_> {
        match self {
            Request::Exec(r) => r.authority(),
            Request::ListFiles(r) => r.authority(),
            Request::ReadFile(r) => r.authority(),
            Request::WriteFile(r) => r.authority(),
            Request::Ping => Authority::None,
            Request::ScreenEnsure(r) => r.authority(),
            Request::ScreenRelease(r) => r.authority(),
            Request::ScreenList => Authority::None,
            Request::Observe(r) => r.authority(),
            Request::Act(r) => r.authority(),
            Request::Navigate(r) => r.authority(),
            Request::Snapshot(r) => r.authority(),
            Request::PageAct(r) => r.authority(),
            Request::Connect(r) => r.authority(),
            Request::Revoke(r) => r.authority(),
            Request::HomeExport(r) => r.authority(),
            Request::HomeImport(r) => r.authority(),
            Request::Status => Authority::None,
            Request::Activity => Authority::None,
            Request::ProcStart(r) => r.authority(),
            Request::ProcList(r) => r.authority(),
            Request::ProcLogs(r) => r.authority(),
            Request::ProcAttach(r) => r.authority(),
            Request::ProcKill(r) => r.authority(),
            Request::PortConnect(r) => r.authority(),
            Request::RecordingPull(r) => r.authority(),
            Request::ScreenPrewarm(r) => r.authority(),
        }
    }

    /// The operation's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Exec(_) => ExecRequest::NAME,
            Request::ListFiles(_) => ListFiles::NAME,
            Request::ReadFile(_) => ReadFile::NAME,
            Request::WriteFile(_) => WriteFile::NAME,
            Request::Ping => PingRequest::NAME,
            Request::ScreenEnsure(_) => ScreenRequest::NAME,
            Request::ScreenRelease(_) => ScreenRelease::NAME,
            Request::ScreenList => ScreenListRequest::NAME,
            Request::Observe(_) => ObserveRequest::NAME,
            Request::Act(_) => ActRequest::NAME,
            Request::Navigate(_) => NavigateRequest::NAME,
            Request::Snapshot(_) => SnapshotRequest::NAME,
            Request::PageAct(_) => PageActRequest::NAME,
            Request::Connect(_) => ConnectRequest::NAME,
            Request::Revoke(_) => RevokeRequest::NAME,
            Request::HomeExport(_) => HomeExportRequest::NAME,
            Request::HomeImport(_) => HomeImportRequest::NAME,
            Request::Status => StatusRequest::NAME,
            Request::Activity => ActivityRequest::NAME,
            Request::ProcStart(_) => ProcStart::NAME,
            Request::ProcList(_) => ProcList::NAME,
            Request::ProcLogs(_) => ProcLogs::NAME,
            Request::ProcAttach(_) => ProcAttach::NAME,
            Request::ProcKill(_) => ProcKill::NAME,
            Request::PortConnect(_) => PortConnect::NAME,
            Request::RecordingPull(_) => RecordingPull::NAME,
            Request::ScreenPrewarm(_) => ScreenPrewarm::NAME,
        }
    }
}

/// The error the guest answers a request it cannot decode with.
pub fn malformed(detail: impl std::fmt::Display) -> OpError {
    OpError::new(
        ErrorCode::BadRequest,
        format!("malformed request: {detail}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desktop::ScreenInfo;

    fn bot() -> BotId {
        BotId::new("bot-1").unwrap()
    }

    fn lease() -> LeaseToken {
        LeaseToken::parse("run-1:7").unwrap()
    }

    /// An answer goes out and comes back as the same typed reply; a refusal comes back refused;
    /// another operation's answer is a protocol error.
    fn round_trip<O: Op>(reply: O::Reply, wrong: O::Frame)
    where
        O::Reply: Clone + PartialEq + std::fmt::Debug,
    {
        assert_eq!(O::read_frame(O::reply_frame(reply.clone())), Ok(reply));
        let err = OpError::new(ErrorCode::NotFound, "gone");
        assert_eq!(
            O::read_frame(O::refusal_frame(err.clone())),
            Err(Answered::Refused(err))
        );
        assert!(matches!(O::read_frame(wrong), Err(Answered::Unexpected(_))));
    }

    #[test]
    fn every_operation_reads_back_its_own_answer_and_no_other() {
        let refused =
            |e: ExecEvent| matches!(ExecRequest::read_frame(e), Err(Answered::Refused(_)));
        assert!(refused(ExecRequest::refusal_frame(OpError::new(
            ErrorCode::StaleLease,
            "x"
        ))));
        let started = ExecEvent::Started { pid: 4 };
        assert_eq!(ExecRequest::read_frame(started.clone()), Ok(started));
        round_trip::<ListFiles>(vec![], Reply::Pong);
        round_trip::<ReadFile>(9, Reply::Written { size: 9 });
        round_trip::<WriteFile>(9, Reply::ReadStart { size: 9 });
        round_trip::<PingRequest>((), Reply::Released);
        let info = ScreenInfo {
            bot: bot(),
            slot: 0,
            display: 10,
            width: 1280,
            height: 800,
            browser_pid: None,
            started: true,
            idle_ms: 0,
        };
        round_trip::<ScreenRequest>(info.clone(), Reply::Screens(vec![info]));
        round_trip::<ScreenRelease>((), Reply::Revoked);
        round_trip::<ScreenListRequest>(vec![], Reply::Files(vec![]));
        round_trip::<ConnectRequest>((), Reply::Revoked);
        round_trip::<PortConnect>((), Reply::Revoked);
        round_trip::<RevokeRequest>((), Reply::Opened);
        let chunk = RecordingChunk {
            session: "s".into(),
            first: 0,
            next: 0,
            lost: 0,
            len: 0,
            width: 1,
            height: 1,
        };
        round_trip::<RecordingPull>(chunk, Reply::Pong);
        let start = ExportStart {
            content_bytes: 1,
            entries: 2,
        };
        round_trip::<HomeExportRequest>(start, Reply::Pong);
        let done = Imported {
            content_bytes: 1,
            entries: 2,
        };
        round_trip::<HomeImportRequest>(done, Reply::ExportStart(start));
        round_trip::<StatusRequest>(MachineStatus::default(), Reply::Pong);
        round_trip::<ActivityRequest>(GuestActivity::default(), Reply::Pong);
    }

    #[test]
    fn a_page_step_failure_is_an_answer_not_a_refusal() {
        let failure = PageActFailure {
            completed: 1,
            uncertain: false,
            error: "no element".into(),
        };
        assert_eq!(
            PageActRequest::read_frame(Reply::PageActFailed(failure.clone())),
            Ok(Err(failure))
        );
    }

    #[test]
    fn authority_names_the_lease_each_request_carries() {
        let held = BotLease {
            bot: bot(),
            token: lease(),
        };
        let r = ScreenRequest {
            bot: bot(),
            lease: lease(),
        };
        assert_eq!(r.authority().lease(), Some(held.clone()));
        let admin = ScreenRelease {
            bot: bot(),
            lease: None,
        };
        assert_eq!(admin.authority(), Authority::None);
        let list = ListFiles {
            path: String::new(),
            lease: Some(held.clone()),
        };
        assert_eq!(list.authority().lease(), Some(held));
        let export = HomeExportRequest {
            quiesce_browsers: false,
            authority: HomeAuthority::default(),
            token: [0; 16],
            since: None,
        };
        assert!(matches!(export.authority(), Authority::HomeExport(_)));
        assert_eq!(HomeExportRequest::NEEDS, Needs::Home);
        assert_eq!(ConnectRequest::NEEDS, Needs::Capability);
    }
}
