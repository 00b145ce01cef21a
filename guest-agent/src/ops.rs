//! Serving one operation stream: decode the request, check its authority, dispatch, answer.
//!
//! This is the guest's single front door for the tunnel: every stream is parsed into a typed
//! [`Request`] and handed to the capability that owns it ([`crate::exec`], [`crate::home`],
//! [`crate::screens`], [`crate::gateway`], [`crate::homeio`]). Dispatch is one table
//! (`Ops::dispatch`) from operation to handler. What an operation answers and refuses with is
//! its [`Op`] declaration in `gateway_proto::op`: the table refuses, and answers for the unary
//! handlers, through it; streaming handlers write their own header frames.
//!
//! Fences are checked here, before any capability runs, against what the request acts under
//! ([`Request::authority`]): a bot's lease, or for a home export or import every bot's fence.
//! A refused operation is answered with its own refusal frame ([`Op::refusal_frame`]). A stream
//! whose first frame is malformed or oversized is answered with an error and reset; other
//! streams are unaffected.

use crate::activity::Activity;
use crate::clock::now_ms;
use crate::exec;
use crate::fence::{FenceTable, HomeOp};
use crate::gateway::{Gateway, GatewayConfig};
use crate::home::stream::{self, FileChanged};
use crate::home::Home;
use crate::machine::{self, HomeUseCache};
use crate::opstream::write_frame;
use crate::procs::{ProcConfig, Procs};
use crate::screens::Screens;
use gateway_proto::desktop::{
    ActRequest, ObservationMeta, ObserveRequest, ScreenInfo, ScreenPrewarm, ScreenRelease,
    ScreenRequest,
};
use gateway_proto::home::{HomeExportRequest, HomeImportRequest};
use gateway_proto::live::{ConnectRequest, RevokeRequest};
use gateway_proto::op::{
    malformed, ActivityRequest, Authority, GuestActivity, MachineStatus, PingRequest,
    ScreenListRequest, StatusRequest,
};
use gateway_proto::page::{
    NavigateRequest, PageActFailure, PageActRequest, Snapshot, SnapshotRequest,
};
use gateway_proto::process::{
    ProcAttach, ProcEvent, ProcInfo, ProcKill, ProcList, ProcLogs, ProcStart,
};
use gateway_proto::recording::RecordingPull;
use gateway_proto::{
    BotId, BotLease, ErrorCode, ExecRequest, FileEntry, FrameDecoder, LeaseToken, ListFiles, Op,
    OpError, ReadFile, Reply, Request, UnaryOp, WriteFile,
};
use std::future::Future;
use std::sync::{Arc, Mutex};
use tracing::{debug, warn};

use gateway_proto::wire::RESET_PROTOCOL;

/// Everything the guest serves.
pub struct Ops {
    home: Home,
    fences: Mutex<FenceTable>,
    screens: Arc<Screens>,
    gateway: Arc<Gateway>,
    /// What is still working (commands, background, terminals, CPU): `Activity`.
    activity: Arc<Activity>,
    /// The home's disk use for `Status`, walked at most every few seconds.
    home_use: Arc<HomeUseCache>,
    /// Detached processes.
    procs: Procs,
    /// Preview URLs' connections to the computer's ports.
    ports: crate::ports::Ports,
}

/// An operation stream past its request frame: what a streaming handler serves.
struct Io {
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    /// Bytes read past the request frame: the first input frames or raw bytes.
    remainder: Vec<u8>,
}

/// A stream and the fence check of its request, on its way to the operation's handler.
struct Checked {
    io: Io,
    fence: Result<(), OpError>,
}

impl Checked {
    /// The stream when the fence check passed; otherwise answers `O`'s refusal frame, finishes
    /// and gives nothing: the handler never runs.
    async fn admit<O: Op>(self) -> Option<Io> {
        let Checked { mut io, fence } = self;
        let err = match fence {
            Ok(()) => return Some(io),
            Err(err) => err,
        };
        debug!(op = O::NAME, error = %err, "refused a stale lease");
        let _ = write_frame(&mut io.send, &O::refusal_frame(err)).await;
        let _ = io.send.finish();
        None
    }
}

impl Ops {
    pub fn new(home: Home, screens: Arc<Screens>) -> Self {
        let cfg = screens.config();
        let gateway = GatewayConfig::new(cfg.runtime_dir.clone(), cfg.home.clone());
        Self::with_gateway(home, screens, gateway)
    }

    /// [`Ops::new`] with the screen gateway's settings given.
    pub fn with_gateway(home: Home, screens: Arc<Screens>, gateway: GatewayConfig) -> Self {
        let activity = Arc::new(Activity::new(home.root(), gateway.terminal_output.clone()));
        let home_use = Arc::new(HomeUseCache::new(home.root()));
        Self {
            procs: Procs::linked(
                home.clone(),
                ProcConfig::default(),
                activity.detached.clone(),
                activity.process_output.clone(),
            ),
            home,
            fences: Mutex::new(FenceTable::new()),
            gateway: Gateway::new(gateway, screens.clone()),
            screens,
            activity,
            home_use,
            ports: crate::ports::Ports::default(),
        }
    }

    /// Sets the limits of the detached processes (before any starts).
    pub fn with_processes(mut self, config: ProcConfig) -> Self {
        self.procs = Procs::linked(
            self.home.clone(),
            config,
            self.activity.detached.clone(),
            self.activity.process_output.clone(),
        );
        self
    }

    /// The screen gateway.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// The desktops (for shutdown).
    pub fn screens(&self) -> &Arc<Screens> {
        &self.screens
    }

    /// Applies a lease push from the control plane.
    pub fn update_fence(&self, bot: BotId, lease: Option<LeaseToken>) {
        self.fences
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .update(bot, lease);
    }

    /// Checks what a request acts under against the fence table: its lease, or for a home
    /// export or import its whole authority.
    fn check(&self, authority: Authority<'_>) -> Result<(), OpError> {
        let mut fences = self.fences.lock().unwrap_or_else(|e| e.into_inner());
        match authority {
            Authority::None => Ok(()),
            Authority::Lease(bot, token) => fences.check(&BotLease {
                bot: bot.clone(),
                token: token.clone(),
            }),
            Authority::HomeExport(a) => fences.check_home(HomeOp::Export, a),
            Authority::HomeImport(a) => fences.check_home(HomeOp::Import, a),
        }
    }

    /// Serves one operation stream to its end.
    pub async fn serve_stream(&self, send: quinn::SendStream, recv: quinn::RecvStream) {
        let Some((request, io)) = read_request(send, recv).await else {
            return;
        };
        // Before anything runs: no browser quiesced, no byte of an import read.
        let fence = self.check(request.authority());
        self.dispatch(request, Checked { io, fence }).await
    }

    /// The table: each operation and the handler serving it. Unary operations answer through
    /// [`Ops::unary`] from a typed handler; the others own their stream through
    /// [`Ops::streaming`]. Both refuse a request the fence check refused with its operation's
    /// refusal frame.
    async fn dispatch(&self, request: Request, s: Checked) {
        match request {
            Request::Exec(r) => self.streaming(r, s, Self::exec).await,
            Request::ListFiles(r) => self.unary(r, s, Self::list_files).await,
            Request::ReadFile(r) => self.streaming(r, s, Self::read_file).await,
            Request::WriteFile(r) => self.streaming(r, s, Self::write_file).await,
            Request::Ping => self.unary(PingRequest, s, Self::ping).await,
            Request::ScreenEnsure(r) => self.unary(r, s, Self::screen_ensure).await,
            Request::ScreenRelease(r) => self.unary(r, s, Self::screen_release).await,
            Request::ScreenList => self.unary(ScreenListRequest, s, Self::screen_list).await,
            Request::Observe(r) => self.streaming(r, s, Self::observe).await,
            Request::Act(r) => self.streaming(r, s, Self::act).await,
            Request::Navigate(r) => self.unary(r, s, Self::navigate).await,
            Request::Snapshot(r) => self.unary(r, s, Self::snapshot).await,
            Request::PageAct(r) => self.unary(r, s, Self::page_act).await,
            Request::Connect(r) => self.streaming(r, s, Self::connect).await,
            Request::Revoke(r) => self.unary(r, s, Self::revoke).await,
            Request::HomeExport(r) => self.streaming(r, s, Self::home_export).await,
            Request::HomeImport(r) => self.streaming(r, s, Self::home_import).await,
            Request::Status => self.unary(StatusRequest, s, Self::status).await,
            Request::Activity => self.unary(ActivityRequest, s, Self::activity).await,
            Request::ProcStart(r) => self.unary(r, s, Self::process_start).await,
            Request::ProcList(r) => self.unary(r, s, Self::process_list).await,
            Request::ProcKill(r) => self.unary(r, s, Self::process_kill).await,
            Request::ProcLogs(r) => self.streaming(r, s, Self::process_logs).await,
            Request::ProcAttach(r) => self.streaming(r, s, Self::process_attach).await,
            Request::PortConnect(r) => self.streaming(r, s, Self::port_connect).await,
            Request::RecordingPull(r) => self.streaming(r, s, Self::recording_pull).await,
            Request::ScreenPrewarm(r) => self.unary(r, s, Self::screen_prewarm).await,
        }
    }

    /// Serves a unary operation: answers its handler's reply as `O`'s reply frame, or its error
    /// as `O`'s refusal frame, and finishes.
    async fn unary<'s, O, F>(
        &'s self,
        r: O,
        checked: Checked,
        handler: impl FnOnce(&'s Self, O) -> F,
    ) where
        O: UnaryOp,
        F: Future<Output = Result<O::Reply, OpError>>,
    {
        let Some(mut io) = checked.admit::<O>().await else {
            return;
        };
        let frame = match handler(self, r).await {
            Ok(reply) => O::reply_frame(reply),
            Err(err) => O::refusal_frame(err),
        };
        let _ = write_frame(&mut io.send, &frame).await;
        let _ = io.send.finish();
    }

    /// Serves a streaming operation: its handler answers and owns the stream to its end.
    async fn streaming<'s, O, F>(
        &'s self,
        r: O,
        checked: Checked,
        handler: impl FnOnce(&'s Self, O, Io) -> F,
    ) where
        O: Op,
        F: Future<Output = ()>,
    {
        if let Some(io) = checked.admit::<O>().await {
            handler(self, r, io).await
        }
    }

    // Unary handlers.

    async fn ping(&self, _: PingRequest) -> Result<(), OpError> {
        Ok(())
    }

    /// The machine's uptime and load (`/proc`) and the home's filesystem (`statvfs`).
    async fn status(&self, _: StatusRequest) -> Result<MachineStatus, OpError> {
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            OpError::new(ErrorCode::Failed, format!("cannot read {what}: {e}"))
        };
        let read = |path: &str| std::fs::read_to_string(path).map_err(|e| failed(path, &e));
        let (uptime_secs, load_milli) = parse_proc(&read("/proc/uptime")?, &read("/proc/loadavg")?)
            .ok_or_else(|| failed("/proc/uptime and /proc/loadavg", &"unexpected format"))?;
        let fs = nix::sys::statvfs::statvfs(self.home.root())
            .map_err(|e| failed("the home's filesystem", &e))?;
        let block = fs.fragment_size() as u64;
        let home_use = self.home_use.clone();
        let (memory, used) =
            tokio::task::spawn_blocking(move || (machine::memory(), home_use.get()))
                .await
                .map_err(|e| failed("memory and home use", &e))?;
        let memory = memory.ok_or_else(|| failed("/proc/meminfo", &"unexpected format"))?;
        let desktops = self.screens.list().await.len();
        Ok(MachineStatus {
            uptime_secs,
            load_milli,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            home_total_bytes: (fs.blocks() as u64).saturating_mul(block),
            home_free_bytes: (fs.blocks_available() as u64).saturating_mul(block),
            memory_total_bytes: memory.total,
            memory_available_bytes: memory.available,
            memory_limited: memory.limited,
            home_used_bytes: used.bytes,
            home_used_partial: used.partial,
            desktops: u32::try_from(desktops).unwrap_or(u32::MAX),
        })
    }

    /// What is still working in the computer ([`crate::activity`]).
    async fn activity(&self, _: ActivityRequest) -> Result<GuestActivity, OpError> {
        let activity = self.activity.clone();
        tokio::task::spawn_blocking(move || activity.look())
            .await
            .map_err(|e| OpError::new(ErrorCode::Failed, format!("cannot look at activity: {e}")))
    }

    async fn process_start(&self, r: ProcStart) -> Result<ProcInfo, OpError> {
        self.procs.start(r.command).await
    }

    async fn process_list(&self, _: ProcList) -> Result<Vec<ProcInfo>, OpError> {
        Ok(self.procs.list())
    }

    async fn process_kill(&self, r: ProcKill) -> Result<ProcInfo, OpError> {
        self.procs.kill(&r)
    }

    async fn list_files(&self, r: ListFiles) -> Result<Vec<FileEntry>, OpError> {
        self.home.list(&r.path)
    }

    async fn screen_ensure(&self, r: ScreenRequest) -> Result<ScreenInfo, OpError> {
        self.screens.ensure(&r.bot).await
    }

    async fn screen_release(&self, r: ScreenRelease) -> Result<(), OpError> {
        self.screens.release(&r.bot).await
    }

    async fn screen_prewarm(&self, _: ScreenPrewarm) -> Result<(), OpError> {
        self.screens.prewarm().await
    }

    async fn screen_list(&self, _: ScreenListRequest) -> Result<Vec<ScreenInfo>, OpError> {
        Ok(self.screens.list().await)
    }

    async fn navigate(&self, r: NavigateRequest) -> Result<Snapshot, OpError> {
        self.screens.page_navigate(&r.bot, &r.url).await
    }

    async fn snapshot(&self, r: SnapshotRequest) -> Result<Snapshot, OpError> {
        self.screens.page_snapshot(&r.bot).await
    }

    async fn page_act(
        &self,
        r: PageActRequest,
    ) -> Result<Result<Snapshot, PageActFailure>, OpError> {
        self.screens.page_act(&r.bot, &r.steps).await
    }

    async fn revoke(&self, r: RevokeRequest) -> Result<(), OpError> {
        self.gateway.revoke(&r).await;
        Ok(())
    }

    // Streaming handlers: each answers its header frame itself.

    async fn exec(&self, r: ExecRequest, io: Io) {
        exec::pump::serve(
            &self.home,
            &self.activity.running,
            io.send,
            io.recv,
            io.remainder,
            r,
        )
        .await
    }

    async fn process_logs(&self, r: ProcLogs, mut io: Io) {
        self.procs
            .serve_output(
                r.id,
                r.offset,
                r.follow,
                None,
                &mut io.send,
                ProcEvent::Failed,
            )
            .await
    }

    async fn process_attach(&self, r: ProcAttach, mut io: Io) {
        let attach = Some((io.recv, io.remainder));
        self.procs
            .serve_output(
                r.id,
                r.offset,
                true,
                attach,
                &mut io.send,
                ProcEvent::Failed,
            )
            .await
    }

    async fn read_file(&self, r: ReadFile, mut io: Io) {
        let read = stream::read_file(&self.home, &mut io.send, &r.path, r.max_bytes).await;
        if let Err(FileChanged) = read {
            let _ = io.send.reset(RESET_PROTOCOL.into());
        }
    }

    async fn write_file(&self, r: WriteFile, io: Io) {
        stream::write_file(&self.home, io.send, io.recv, io.remainder, &r).await
    }

    async fn observe(&self, r: ObserveRequest, mut io: Io) {
        match self.screens.observe(&r.bot, r.options, now_ms()).await {
            Ok((meta, png)) => {
                let _ = write_observation(&mut io.send, meta, &png).await;
            }
            Err(e) => {
                let _ = write_frame(&mut io.send, &ObserveRequest::refusal_frame(e)).await;
            }
        }
        let _ = io.send.finish();
    }

    async fn act(&self, r: ActRequest, mut io: Io) {
        let send = &mut io.send;
        match self
            .screens
            .act(
                &r.bot,
                &r.actions,
                r.observe.then_some(r.observe_options),
                r.settle_ms,
                r.frame,
                now_ms,
            )
            .await
        {
            Ok((outcome, observation)) => {
                if write_frame(send, &ActRequest::reply_frame(outcome))
                    .await
                    .is_ok()
                {
                    if let Some((meta, png)) = observation {
                        let _ = write_observation(send, meta, &png).await;
                    }
                }
            }
            Err(e) => {
                let _ = write_frame(send, &ActRequest::refusal_frame(e)).await;
            }
        }
        let _ = io.send.finish();
    }

    async fn connect(&self, r: ConnectRequest, io: Io) {
        self.gateway
            .connect(io.send, io.recv, io.remainder, r)
            .await
    }

    async fn recording_pull(&self, r: RecordingPull, mut io: Io) {
        match self.screens.recording_pull(&r).await {
            Ok((chunk, bytes)) => {
                let send = &mut io.send;
                if write_frame(send, &RecordingPull::reply_frame(chunk))
                    .await
                    .is_ok()
                {
                    let _ = send.write_all(&bytes).await;
                }
            }
            Err(e) => {
                let _ = write_frame(&mut io.send, &RecordingPull::refusal_frame(e)).await;
            }
        }
        let _ = io.send.finish();
    }

    async fn port_connect(&self, r: gateway_proto::live::PortConnect, io: Io) {
        self.ports.connect(io.send, io.recv, io.remainder, r).await
    }

    async fn home_export(&self, r: HomeExportRequest, io: Io) {
        crate::homeio::export(&self.home, &self.screens, io.send, r).await;
    }

    async fn home_import(&self, r: HomeImportRequest, io: Io) {
        let (send, recv, remainder) = (io.send, io.recv, io.remainder);
        crate::homeio::import(&self.home, &self.screens, send, recv, remainder, r).await;
    }
}

/// Reads the request frame that opens a stream. A malformed one is answered with
/// [`malformed`] and the stream given up; a stream that ends first is dropped.
async fn read_request(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
) -> Option<(Request, Io)> {
    let mut decoder = FrameDecoder::new();
    loop {
        match decoder.next_message::<Request>() {
            Ok(Some(request)) => {
                let remainder = decoder.into_remainder();
                return Some((
                    request,
                    Io {
                        send,
                        recv,
                        remainder,
                    },
                ));
            }
            Ok(None) => {}
            Err(e) => {
                warn!(error = %e, "malformed request frame; resetting the stream");
                // Finish rather than reset our side, so the error reaches the control plane;
                // stop reading theirs.
                let _ = write_frame(&mut send, &Reply::Error(malformed(e))).await;
                let _ = send.finish();
                let _ = recv.stop(RESET_PROTOCOL.into());
                return None;
            }
        }
        match recv.read_chunk(64 * 1024, true).await {
            Ok(Some(chunk)) => decoder.push(&chunk.bytes),
            Ok(None) | Err(_) => return None,
        }
    }
}

/// An observation: its metadata frame (an observe's answer), then the PNG raw.
async fn write_observation(
    send: &mut quinn::SendStream,
    meta: ObservationMeta,
    png: &[u8],
) -> std::io::Result<()> {
    write_frame(send, &ObserveRequest::reply_frame(meta)).await?;
    send.write_all(png).await.map_err(std::io::Error::other)
}

/// Seconds of uptime from `/proc/uptime` and the three load averages, in thousandths, from
/// `/proc/loadavg`; `None` when either is not in the kernel's format.
fn parse_proc(uptime: &str, loadavg: &str) -> Option<(u64, [u32; 3])> {
    let secs = uptime.split_whitespace().next()?.parse::<f64>().ok()?;
    let mut loads = loadavg.split_whitespace().map(|l| l.parse::<f64>().ok());
    let mut milli = || -> Option<u32> { Some((loads.next()?? * 1000.0).round() as u32) };
    let load_milli = [milli()?, milli()?, milli()?];
    Some((secs as u64, load_milli))
}

#[cfg(test)]
mod tests {
    use super::parse_proc;

    #[test]
    fn proc_uptime_and_loadavg_are_read_in_the_kernels_format() {
        assert_eq!(
            parse_proc("12345.67 4567.89\n", "0.12 1.50 10.01 1/234 5678\n"),
            Some((12345, [120, 1500, 10010]))
        );
        assert_eq!(parse_proc("", "0.1 0.2 0.3"), None);
        assert_eq!(parse_proc("5.0 1.0", "0.1 x 0.3"), None);
        assert_eq!(parse_proc("5.0 1.0", "0.1 0.2"), None);
    }
}
