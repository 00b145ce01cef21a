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
use crate::home::stream::{self, FileChanged};
use crate::home::Home;
use crate::opstream::write_frame;
use crate::screens::Screens;
use gateway_proto::desktop::ObservationMeta;
use gateway_proto::{
    BotId, BotLease, ErrorCode, ExecEvent, FrameDecoder, LeaseToken, OpError, Reply, Request,
};
use std::sync::{Arc, Mutex};
use tracing::{debug, warn};

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
            Request::ReadFile(r) => {
                let read = stream::read_file(&self.home, &mut send, &r.path, r.max_bytes).await;
                if let Err(FileChanged) = read {
                    let _ = send.reset(RESET_PROTOCOL.into());
                }
            }
            Request::WriteFile(r) => {
                let (path, executable, size) = (&r.path, r.executable, r.size);
                stream::write_file(&self.home, send, recv, remainder, path, executable, size).await
            }
            Request::Exec(r) => exec::pump::serve(&self.home, send, recv, remainder, r).await,
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

/// An observation: its metadata frame, then the PNG raw.
async fn write_observation(
    send: &mut quinn::SendStream,
    meta: ObservationMeta,
    png: &[u8],
) -> std::io::Result<()> {
    write_frame(send, &Reply::Observation(meta)).await?;
    send.write_all(png).await.map_err(std::io::Error::other)
}
