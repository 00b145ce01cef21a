//! Serving one operation stream: decode the request, check its lease, dispatch, answer.
//!
//! This is the guest's single front door for the tunnel: every stream is parsed into a typed
//! [`Request`] and handed to the capability that owns it ([`crate::exec`], [`crate::home`]).
//! Lease fences are checked here, before any capability runs: a request's own lease, or for a
//! home export or import the whole authority it acts under. A stream whose first frame is
//! malformed or oversized is answered with an error and reset; other streams are unaffected.

use crate::clock::now_ms;
use crate::exec;
use crate::fence::{FenceTable, HomeOp};
use crate::gateway::{Gateway, GatewayConfig};
use crate::home::Home;
use crate::screens::Screens;
use gateway_proto::desktop::ObservationMeta;
use gateway_proto::{
    encode, BotId, BotLease, ErrorCode, ExecEvent, ExecInput, FrameDecoder, LeaseToken, OpError,
    Reply, Request, MAX_CHUNK,
};
use serde::Serialize;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tracing::{debug, warn};

/// Buffer size of file writes during an upload.
const WRITE_BUF: usize = 256 * 1024;

use gateway_proto::wire::RESET_PROTOCOL;

/// Everything the guest serves.
pub struct Ops {
    home: Home,
    fences: Mutex<FenceTable>,
    screens: Arc<Screens>,
    gateway: Arc<Gateway>,
}

impl Ops {
    pub fn new(home: Home, screens: Arc<Screens>) -> Self {
        let cfg = screens.config();
        let gateway = GatewayConfig::new(cfg.runtime_dir.clone(), cfg.home.clone());
        Self::with_gateway(home, screens, gateway)
    }

    /// [`Ops::new`] with the screen gateway's settings given.
    pub fn with_gateway(home: Home, screens: Arc<Screens>, gateway: GatewayConfig) -> Self {
        Self {
            home,
            fences: Mutex::new(FenceTable::new()),
            gateway: Gateway::new(gateway, screens.clone()),
            screens,
        }
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

    fn check_lease(&self, lease: Option<&BotLease>) -> Result<(), OpError> {
        match lease {
            Some(lease) => self
                .fences
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .check(lease),
            None => Ok(()),
        }
    }

    /// Checks what `request` acts under against the fence table: its lease, or for a home
    /// export or import its whole authority.
    fn check_request(&self, request: &Request) -> Result<(), OpError> {
        let fences = || self.fences.lock().unwrap_or_else(|e| e.into_inner());
        match request {
            Request::HomeExport(r) => fences().check_home(HomeOp::Export, &r.authority),
            Request::HomeImport(r) => fences().check_home(HomeOp::Import, &r.authority),
            other => self.check_lease(request_lease(other).as_ref()),
        }
    }

    /// Serves one operation stream to its end.
    pub async fn serve_stream(&self, mut send: quinn::SendStream, mut recv: quinn::RecvStream) {
        let mut decoder = FrameDecoder::new();
        let request = loop {
            match decoder.next_message::<Request>() {
                Ok(Some(req)) => break req,
                Ok(None) => {}
                Err(e) => {
                    warn!(error = %e, "malformed request frame; resetting the stream");
                    let err =
                        OpError::new(ErrorCode::BadRequest, format!("malformed request: {e}"));
                    // Finish rather than reset our side, so the error reaches the control plane;
                    // stop reading theirs.
                    let _ = write_frame(&mut send, &Reply::Error(err)).await;
                    let _ = send.finish();
                    let _ = recv.stop(RESET_PROTOCOL.into());
                    return;
                }
            }
            match recv.read_chunk(64 * 1024, true).await {
                Ok(Some(chunk)) => decoder.push(&chunk.bytes),
                Ok(None) | Err(_) => return,
            }
        };
        let remainder = decoder.into_remainder();
        // Before anything runs: no browser quiesced, no byte of an import read.
        if let Err(err) = self.check_request(&request) {
            debug!(error = %err, "refused a stale lease");
            match request {
                Request::Exec(_) => {
                    let _ = write_frame(&mut send, &ExecEvent::Failed(err)).await;
                }
                _ => {
                    let _ = write_frame(&mut send, &Reply::Error(err)).await;
                }
            }
            let _ = send.finish();
            return;
        }
        match request {
            Request::Connect(r) => self.gateway.connect(send, recv, remainder, r).await,
            Request::Revoke(r) => {
                self.gateway.revoke(&r).await;
                let _ = write_frame(&mut send, &Reply::Revoked).await;
                let _ = send.finish();
            }
            Request::HomeExport(r) => {
                crate::homeio::export(&self.home, &self.screens, send, r).await;
            }
            Request::HomeImport(r) => {
                crate::homeio::import(&self.home, &self.screens, send, recv, remainder, r).await;
            }
            Request::Ping => {
                let _ = write_frame(&mut send, &Reply::Pong).await;
                let _ = send.finish();
            }
            Request::ListFiles(r) => {
                let reply = match self.home.list(&r.path) {
                    Ok(entries) => Reply::Files(entries),
                    Err(e) => Reply::Error(e),
                };
                let _ = write_frame(&mut send, &reply).await;
                let _ = send.finish();
            }
            Request::ReadFile(r) => self.read_file(send, &r.path, r.max_bytes).await,
            Request::WriteFile(r) => {
                self.write_file(send, recv, remainder, &r.path, r.executable, r.size)
                    .await
            }
            Request::Exec(r) => self.exec(send, recv, remainder, r).await,
            Request::ScreenEnsure(r) => {
                let reply = match self.screens.ensure(&r.bot).await {
                    Ok(info) => Reply::Screen(info),
                    Err(e) => Reply::Error(e),
                };
                let _ = write_frame(&mut send, &reply).await;
                let _ = send.finish();
            }
            Request::ScreenRelease(r) => {
                let reply = match self.screens.release(&r.bot).await {
                    Ok(()) => Reply::Released,
                    Err(e) => Reply::Error(e),
                };
                let _ = write_frame(&mut send, &reply).await;
                let _ = send.finish();
            }
            Request::ScreenList => {
                let _ = write_frame(&mut send, &Reply::Screens(self.screens.list().await)).await;
                let _ = send.finish();
            }
            Request::Observe(r) => {
                match self.screens.observe(&r.bot, now_ms()).await {
                    Ok((meta, png)) => {
                        let _ = write_observation(&mut send, meta, &png).await;
                    }
                    Err(e) => {
                        let _ = write_frame(&mut send, &Reply::Error(e)).await;
                    }
                }
                let _ = send.finish();
            }
            Request::Navigate(r) => {
                let reply = match self.screens.page_navigate(&r.bot, &r.url).await {
                    Ok(s) => Reply::Snapshot(s),
                    Err(e) => Reply::Error(e),
                };
                let _ = write_frame(&mut send, &reply).await;
                let _ = send.finish();
            }
            Request::Snapshot(r) => {
                let reply = match self.screens.page_snapshot(&r.bot).await {
                    Ok(s) => Reply::Snapshot(s),
                    Err(e) => Reply::Error(e),
                };
                let _ = write_frame(&mut send, &reply).await;
                let _ = send.finish();
            }
            Request::PageAct(r) => {
                let reply = match self.screens.page_act(&r.bot, &r.steps).await {
                    Ok(Ok(s)) => Reply::Snapshot(s),
                    Ok(Err(failure)) => Reply::PageActFailed(failure),
                    Err(e) => Reply::Error(e),
                };
                let _ = write_frame(&mut send, &reply).await;
                let _ = send.finish();
            }
            Request::Act(r) => {
                match self
                    .screens
                    .act(&r.bot, &r.actions, r.observe, r.settle_ms, now_ms)
                    .await
                {
                    Ok((outcome, observation)) => {
                        if write_frame(&mut send, &Reply::Acted(outcome)).await.is_ok() {
                            if let Some((meta, png)) = observation {
                                let _ = write_observation(&mut send, meta, &png).await;
                            }
                        }
                    }
                    Err(e) => {
                        let _ = write_frame(&mut send, &Reply::Error(e)).await;
                    }
                }
                let _ = send.finish();
            }
        }
    }

    async fn read_file(&self, mut send: quinn::SendStream, path: &str, max: u64) {
        let (mut file, size) = match self.home.open_read(path, max) {
            Ok(v) => v,
            Err(e) => {
                let _ = write_frame(&mut send, &Reply::Error(e)).await;
                let _ = send.finish();
                return;
            }
        };
        if write_frame(&mut send, &Reply::ReadStart { size })
            .await
            .is_err()
        {
            return;
        }
        let mut left = size;
        while left > 0 {
            let want = WRITE_BUF.min(usize::try_from(left).unwrap_or(usize::MAX));
            // A fresh buffer per chunk is handed to quinn whole (write_chunk), without a copy.
            let mut buf = vec![0u8; want];
            // A blocking read of a local file chunk is short; the runtime tolerates it.
            let n = match tokio::task::block_in_place(|| file.read(&mut buf)) {
                Ok(0) | Err(_) => {
                    // The file shrank or failed under us: the promised size cannot be met.
                    warn!(path, "file changed while being read; resetting the stream");
                    let _ = send.reset(RESET_PROTOCOL.into());
                    return;
                }
                Ok(n) => n,
            };
            buf.truncate(n);
            if send.write_chunk(bytes::Bytes::from(buf)).await.is_err() {
                return;
            }
            left -= n as u64;
        }
        let _ = send.finish();
    }

    async fn write_file(
        &self,
        mut send: quinn::SendStream,
        mut recv: quinn::RecvStream,
        remainder: Vec<u8>,
        path: &str,
        executable: bool,
        size: u64,
    ) {
        let reply = match self
            .receive_file(&mut recv, remainder, path, executable, size)
            .await
        {
            Ok(()) => Reply::Written { size },
            Err(e) => Reply::Error(e),
        };
        let _ = write_frame(&mut send, &reply).await;
        let _ = send.finish();
    }

    async fn receive_file(
        &self,
        recv: &mut quinn::RecvStream,
        remainder: Vec<u8>,
        path: &str,
        executable: bool,
        size: u64,
    ) -> Result<(), OpError> {
        let pending = self.home.create_write(path, executable)?;
        let io_err =
            |e: std::io::Error| OpError::new(ErrorCode::Failed, format!("write {path:?}: {e}"));
        // A writer thread takes 256 KiB buffers, so the disk and the network overlap and the
        // file is written in large pieces rather than one QUIC packet at a time.
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(4);
        let writer = tokio::task::spawn_blocking(move || {
            let mut pending = pending;
            while let Some(buf) = rx.blocking_recv() {
                if let Err(e) = pending.file().write_all(&buf) {
                    return (pending, Err(e));
                }
            }
            (pending, Ok(()))
        });
        let received = async {
            let mut got = remainder.len() as u64;
            if got > size {
                return Err(too_many(path, size));
            }
            let mut buf = remainder;
            buf.reserve(WRITE_BUF.saturating_sub(buf.len()));
            while got < size {
                match recv.read_chunk(WRITE_BUF, true).await {
                    Ok(Some(chunk)) => {
                        got += chunk.bytes.len() as u64;
                        if got > size {
                            return Err(too_many(path, size));
                        }
                        buf.extend_from_slice(&chunk.bytes);
                        if buf.len() >= WRITE_BUF {
                            let full = std::mem::replace(&mut buf, Vec::with_capacity(WRITE_BUF));
                            if tx.send(full).await.is_err() {
                                // The writer stopped on an error; it reports it below.
                                return Ok(());
                            }
                        }
                    }
                    Ok(None) | Err(_) => {
                        return Err(OpError::new(
                            ErrorCode::BadRequest,
                            format!("upload of {path:?} ended after {got} of {size} bytes"),
                        ))
                    }
                }
            }
            // Anything past the announced size is a protocol violation, not data.
            if let Ok(Some(_)) = recv.read_chunk(1, true).await {
                return Err(too_many(path, size));
            }
            if !buf.is_empty() {
                let _ = tx.send(buf).await;
            }
            Ok(())
        }
        .await;
        drop(tx);
        let (pending, written) = writer
            .await
            .map_err(|e| OpError::new(ErrorCode::Failed, format!("write {path:?}: {e}")))?;
        // On any error `pending` is dropped here, which removes its temp file.
        received?;
        written.map_err(io_err)?;
        tokio::task::block_in_place(|| pending.commit())
    }

    async fn exec(
        &self,
        mut send: quinn::SendStream,
        mut recv: quinn::RecvStream,
        remainder: Vec<u8>,
        req: gateway_proto::ExecRequest,
    ) {
        let (input_tx, input_rx) = mpsc::channel::<ExecInput>(16);
        let (event_tx, mut event_rx) = mpsc::channel::<ExecEvent>(64);
        // Input pump: frames from the control plane to the command. When the stream is reset
        // (the client went away) or the connection drops, the sender is dropped: exec aborts.
        let pump = tokio::spawn(async move {
            let mut decoder = FrameDecoder::with_max(MAX_CHUNK + 1024);
            decoder.push(&remainder);
            loop {
                loop {
                    match decoder.next_message::<ExecInput>() {
                        Ok(Some(input)) => {
                            if input_tx.send(input).await.is_err() {
                                return;
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            warn!(error = %e, "malformed exec input; aborting the command");
                            let _ = input_tx.send(ExecInput::Abort).await;
                            return;
                        }
                    }
                }
                match recv.read_chunk(64 * 1024, true).await {
                    Ok(Some(chunk)) => decoder.push(&chunk.bytes),
                    // A clean finish means "no more input"; the command keeps running.
                    Ok(None) => {
                        let _ = input_tx.send(ExecInput::CloseStdin).await;
                        input_tx.closed().await;
                        return;
                    }
                    Err(_) => {
                        let _ = input_tx.send(ExecInput::Abort).await;
                        return;
                    }
                }
            }
        });
        let home = &self.home;
        let writer = async {
            while let Some(event) = event_rx.recv().await {
                if write_frame(&mut send, &event).await.is_err() {
                    // Nobody is listening any more; dropping the receiver aborts the command.
                    return;
                }
            }
            let _ = send.finish();
        };
        tokio::join!(exec::run(home, req, input_rx, event_tx), writer);
        pump.abort();
    }
}

/// The lease a request acts under, if any: checked against the fence table before it runs. A
/// home export or import acts under a whole authority instead ([`Ops::check_request`]).
fn request_lease(request: &Request) -> Option<BotLease> {
    let with_bot = |bot: &BotId, token: &LeaseToken| BotLease {
        bot: bot.clone(),
        token: token.clone(),
    };
    match request {
        Request::Exec(r) => r.lease.clone(),
        Request::ListFiles(r) => r.lease.clone(),
        Request::ReadFile(r) => r.lease.clone(),
        Request::WriteFile(r) => r.lease.clone(),
        Request::ScreenEnsure(r) => Some(with_bot(&r.bot, &r.lease)),
        Request::ScreenRelease(r) => r.lease.as_ref().map(|t| with_bot(&r.bot, t)),
        Request::Observe(r) => Some(with_bot(&r.bot, &r.lease)),
        Request::Act(r) => Some(with_bot(&r.bot, &r.lease)),
        Request::Navigate(r) => Some(with_bot(&r.bot, &r.lease)),
        Request::Snapshot(r) => Some(with_bot(&r.bot, &r.lease)),
        Request::PageAct(r) => Some(with_bot(&r.bot, &r.lease)),
        Request::Ping
        | Request::ScreenList
        | Request::Connect(_)
        | Request::Revoke(_)
        | Request::HomeExport(_)
        | Request::HomeImport(_) => None,
    }
}

/// Answers `err` and finishes the stream.
pub(crate) async fn refuse(mut send: quinn::SendStream, err: OpError) {
    let _ = write_frame(&mut send, &Reply::Error(err)).await;
    let _ = send.finish();
}

fn too_many(path: &str, size: u64) -> OpError {
    OpError::new(
        ErrorCode::BadRequest,
        format!("upload of {path:?} sent more than {size} bytes"),
    )
}

/// An observation: its metadata frame, then the PNG raw.
async fn write_observation(
    send: &mut quinn::SendStream,
    meta: ObservationMeta,
    png: &[u8],
) -> std::io::Result<()> {
    write_frame(send, &Reply::Observation(meta)).await?;
    send.write_all(png).await.map_err(std::io::Error::other)
}

pub(crate) async fn write_frame<T: Serialize>(
    send: &mut quinn::SendStream,
    msg: &T,
) -> std::io::Result<()> {
    let frame = encode(msg).map_err(std::io::Error::other)?;
    send.write_all(&frame).await.map_err(std::io::Error::other)
}
