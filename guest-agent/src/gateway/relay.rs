//! Relaying one capability connection: the QUIC stream from the control plane on one side, the
//! capability's unix socket on the other, until either ends or the capability is revoked.
//!
//! Client bytes pass through the RFB filter when the capability serves RFB (dropping a viewer's
//! input); terminal bytes pass untouched (the session decodes its frames). When the client
//! finishes or resets its stream, the unix connection is dropped; when the unix side closes,
//! the QUIC stream is finished; a revocation resets it with [`RESET_REVOKED`], a filter error
//! with [`RESET_PROTOCOL`]. A client that resets with [`RESET_REVOKED`] (the control plane found
//! the capability revoked or expired) is told apart: its terminal ends at once rather than
//! waiting for a reattachment.

use super::rfb::{ClientFilter, FilterError, Input};
use gateway_proto::wire::{RESET_PROTOCOL, RESET_REVOKED};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;

/// Largest read from either side.
const CHUNK: usize = 64 * 1024;

/// How a relay ended.
#[derive(Debug)]
pub enum RelayEnd {
    /// The client finished its stream.
    ClientFinished,
    /// The client reset its stream or the connection to the control plane was lost.
    ClientGone,
    /// The control plane reset the stream with [`RESET_REVOKED`]: the capability no longer holds.
    ClientRevoked,
    /// The capability's server closed the connection.
    ServerClosed,
    /// The capability was revoked.
    Revoked,
    /// The client's RFB stream broke the protocol.
    Protocol(FilterError),
}

/// Relays until one side ends; `remainder` is what the client sent right after its request.
/// The inputs the filter notes are handed to `noted` as they pass.
pub async fn relay(
    send: &mut quinn::SendStream,
    recv: &mut quinn::RecvStream,
    remainder: Vec<u8>,
    unix: UnixStream,
    mut filter: Option<ClientFilter>,
    cancel: &CancellationToken,
    mut noted: impl FnMut(Vec<Input>) + Send,
) -> RelayEnd {
    let (mut unix_rx, mut unix_tx) = unix.into_split();
    let up = async {
        let mut out = Vec::with_capacity(CHUNK);
        let mut pending = Some(remainder);
        loop {
            let bytes = match pending.take() {
                Some(first) => bytes::Bytes::from(first),
                None => match recv.read_chunk(CHUNK, true).await {
                    Ok(Some(chunk)) => chunk.bytes,
                    Ok(None) => return RelayEnd::ClientFinished,
                    Err(quinn::ReadError::Reset(code))
                        if code.into_inner() == u64::from(RESET_REVOKED) =>
                    {
                        return RelayEnd::ClientRevoked
                    }
                    Err(_) => return RelayEnd::ClientGone,
                },
            };
            let result = match &mut filter {
                Some(f) => {
                    out.clear();
                    if let Err(e) = f.push(&bytes, &mut out) {
                        return RelayEnd::Protocol(e);
                    }
                    let inputs = f.take_inputs();
                    if !inputs.is_empty() {
                        noted(inputs);
                    }
                    unix_tx.write_all(&out).await
                }
                None => unix_tx.write_all(&bytes).await,
            };
            if result.is_err() {
                return RelayEnd::ServerClosed;
            }
        }
    };
    let down = async {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match unix_rx.read(&mut buf).await {
                Ok(0) | Err(_) => return RelayEnd::ServerClosed,
                Ok(n) => {
                    // Copied at its length: quinn keeps a chunk until it is acknowledged, and a
                    // short read must not hold (nor zero) a whole 64 KiB buffer each time.
                    let chunk = bytes::Bytes::copy_from_slice(&buf[..n]);
                    if send.write_chunk(chunk).await.is_err() {
                        return RelayEnd::ClientGone;
                    }
                }
            }
        }
    };
    tokio::select! {
        biased;
        () = cancel.cancelled() => RelayEnd::Revoked,
        end = up => end,
        end = down => end,
    }
}

/// Ends the QUIC stream the way `end` calls for.
pub fn close(send: &mut quinn::SendStream, recv: &mut quinn::RecvStream, end: &RelayEnd) {
    match end {
        RelayEnd::ClientFinished | RelayEnd::ServerClosed => {
            let _ = send.finish();
            let _ = recv.stop(0u32.into());
        }
        RelayEnd::ClientGone => {
            let _ = send.reset(0u32.into());
            let _ = recv.stop(0u32.into());
        }
        RelayEnd::Revoked | RelayEnd::ClientRevoked => {
            let _ = send.reset(RESET_REVOKED.into());
            let _ = recv.stop(RESET_REVOKED.into());
        }
        RelayEnd::Protocol(_) => {
            let _ = send.reset(RESET_PROTOCOL.into());
            let _ = recv.stop(RESET_PROTOCOL.into());
        }
    }
}
