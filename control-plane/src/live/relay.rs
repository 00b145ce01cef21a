//! One live stream: a browser's websocket relayed to one live connection of the guest
//! ([`LiveStream`], a `Connect` operation stream).
//!
//! Bytes pass unchanged both ways (RFB for view and control; for a terminal, the terminal's client
//! frames one way, checked by [`FrameCheck`] on the way, and raw PTY bytes the other). Towards
//! the browser, what the guest has already sent is gathered into one websocket message
//! ([`gather`]): QUIC hands its data over packet by packet (about 1.2 KiB each), and a message,
//! with its flush, per packet cost more CPU than the bytes themselves. Nothing waits to fill a
//! message, so a keystroke's echo still leaves at once. Once a
//! second the capability is checked again (its URL's sealed expiry, then the database), and the
//! stream closes when it no longer holds (`initiator = revoked`, `reason = expired` for an
//! expired URL); a decision elsewhere (release of control, a torn
//! down desktop) closes it at once through its [`StreamGuard`]. Whoever ends the stream, the
//! other side is ended too and one `screen.proxy.websocket_closed` event says who it was.

use super::authority::{check, Rejection};
use super::seal::Capability;
use super::streams::StreamGuard;
use crate::clock::now_ms;
use crate::core::Core;
use crate::guest::LiveStream;
use futures_util::{FutureExt, SinkExt, StreamExt};
use gateway_proto::live::CapabilityKind;
use gateway_proto::termframe::FrameCheck;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use tracing::info;

/// How often an open stream is checked against the database (docs/security.md#capability-urls).
pub const RECHECK_EVERY: Duration = Duration::from_secs(1);
/// Largest websocket message accepted from a browser: RFB client messages are tiny, terminal
/// frames are at most 1 MiB (a larger one is refused by the frame check, not here).
const MAX_WS_MESSAGE: usize = 4 << 20;
/// Largest websocket message towards the browser (what [`gather`] stops at).
const GUEST_CHUNK: usize = 256 * 1024;

/// The websocket settings of a live stream.
pub fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(MAX_WS_MESSAGE))
        .max_frame_size(Some(MAX_WS_MESSAGE))
}

/// Who ended a stream (the `initiator` of `screen.proxy.websocket_closed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Initiator {
    Client,
    Upstream,
    Revoked,
}

impl Initiator {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Client => "client",
            Self::Upstream => "upstream",
            Self::Revoked => "revoked",
        }
    }
}

/// What a relay needs besides its two ends.
pub struct RelayCtx {
    pub core: Arc<Core>,
    pub cap: Capability,
    pub connection_id: String,
    pub guard: StreamGuard,
}

/// Relays until either side ends or the capability is revoked; logs the close event.
pub async fn relay<S>(mut ws: WebSocketStream<S>, mut op: LiveStream, ctx: RelayCtx)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let started = tokio::time::Instant::now();
    let policy = ctx.cap.policy;
    let mut frames = (policy == CapabilityKind::Terminal).then(FrameCheck::new);
    let mut recheck = tokio::time::interval_at(started + RECHECK_EVERY, RECHECK_EVERY);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The guest's side ended: a revocation decided here (whose `Revoke` to the guest ends that
    // side too, maybe before this task sees its guard) is still told as one, so that a terminal
    // page stops instead of reconnecting.
    let upstream_end = |guard: &StreamGuard| -> (Initiator, &'static str, Option<CloseFrame>) {
        if guard.cancel.is_cancelled() {
            (
                Initiator::Revoked,
                "revoked",
                Some(close_frame(CloseCode::Policy, "revoked")),
            )
        } else {
            (
                Initiator::Upstream,
                "upstream_closed",
                Some(close_frame(CloseCode::Away, "upstream closed")),
            )
        }
    };
    // Who ended the stream, why (the event's `reason`), and the close frame the browser gets.
    let (initiator, reason, close): (Initiator, &'static str, Option<CloseFrame>) = loop {
        tokio::select! {
            msg = ws.next() => match msg {
                Some(Ok(Message::Binary(bytes))) => {
                    if let Some(check) = frames.as_mut() {
                        if let Err(e) = check.push(&bytes) {
                            info!(screen.connection_id = %ctx.connection_id, policy = policy.as_str(), error = %e, "terminal frame refused");
                            break (Initiator::Client, "frame_refused", Some(close_frame(CloseCode::Size, "frame refused")));
                        }
                    }
                    if op.write(bytes).await.is_err() {
                        break upstream_end(&ctx.guard);
                    }
                }
                // Pings are answered by the websocket layer; text has no meaning here.
                Some(Ok(Message::Text(_) | Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break (Initiator::Client, "client_closed", None),
            },
            chunk = op.read(GUEST_CHUNK) => match chunk {
                Ok(Some(first)) => {
                    let (bytes, ended) = gather(&mut op, first);
                    if ws.send(Message::Binary(bytes)).await.is_err() {
                        break (Initiator::Client, "client_closed", None);
                    }
                    if ended {
                        break upstream_end(&ctx.guard);
                    }
                }
                Ok(None) | Err(_) => break upstream_end(&ctx.guard),
            },
            _ = recheck.tick() => {
                if let Err(r) = check(&ctx.core, &ctx.cap, now_ms()).await {
                    if r == Rejection::Unavailable {
                        // Fail closed: a stream whose authority cannot be asked does not stay open.
                        info!(screen.connection_id = %ctx.connection_id, policy = policy.as_str(), reason = r.reason(), "screen.proxy.recheck_failed");
                    }
                    // An expired URL's viewer is told so; anything else is a revocation.
                    let text = if r == Rejection::Expired { "expired" } else { "revoked" };
                    break (Initiator::Revoked, r.reason(), Some(close_frame(CloseCode::Policy, text)));
                }
            }
            () = ctx.guard.cancel.cancelled() => {
                break (Initiator::Revoked, "revoked", Some(close_frame(CloseCode::Policy, "revoked")));
            }
        }
    };
    match initiator {
        // The browser is gone: end the guest's side cleanly so it can tidy up (a terminal's
        // shell then waits for the page to reconnect, docs/screens.md#reconnecting).
        Initiator::Client => op.end(),
        Initiator::Upstream => op.abort(),
        // Revoked or expired: the guest ends a terminal's shell at once.
        Initiator::Revoked => op.revoke(),
    }
    if let Some(frame) = close {
        // Bounded: a browser that does not read cannot hold the task.
        let _ = tokio::time::timeout(Duration::from_secs(2), ws.close(Some(frame))).await;
    }
    info!(
        screen.connection_id = %ctx.connection_id,
        policy = policy.as_str(),
        handshake_completed = true,
        duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        initiator = initiator.as_str(),
        reason,
        "screen.proxy.websocket_closed"
    );
}

/// `first` and whatever else the guest's side already holds, up to [`GUEST_CHUNK`], without
/// waiting for more; `true` if the guest's side ended (or failed) meanwhile, after these bytes.
fn gather(op: &mut LiveStream, first: bytes::Bytes) -> (bytes::Bytes, bool) {
    let mut buf: Vec<u8> = Vec::new();
    let mut ended = false;
    loop {
        let have = if buf.is_empty() {
            first.len()
        } else {
            buf.len()
        };
        if have >= GUEST_CHUNK {
            break;
        }
        // Polled once: ready data only. Dropping a pending read loses nothing (the relay's
        // select drops it the same way), and the next poll registers the real waker.
        match op.read(GUEST_CHUNK - have).now_or_never() {
            None => break,
            Some(Ok(Some(more))) => {
                if buf.is_empty() {
                    buf.extend_from_slice(&first);
                }
                buf.extend_from_slice(&more);
            }
            Some(Ok(None) | Err(_)) => {
                ended = true;
                break;
            }
        }
    }
    if buf.is_empty() {
        (first, ended)
    } else {
        (buf.into(), ended)
    }
}

fn close_frame(code: CloseCode, reason: &'static str) -> CloseFrame {
    CloseFrame {
        code,
        reason: reason.into(),
    }
}
