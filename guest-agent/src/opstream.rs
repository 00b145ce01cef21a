//! Writing replies on an operation stream: the two helpers every capability that serves a stream
//! shares ([`crate::ops`], [`crate::gateway`], [`crate::homeio`], the file and exec pumps).
//!
//! A leaf: it imports no other module of the guest, so the dispatcher and the capabilities it
//! dispatches to can both use it without importing each other.

use gateway_proto::{encode, OpError, Reply};
use serde::Serialize;

/// Writes one encoded frame of `msg`.
pub(crate) async fn write_frame<T: Serialize>(
    send: &mut quinn::SendStream,
    msg: &T,
) -> std::io::Result<()> {
    let frame = encode(msg).map_err(std::io::Error::other)?;
    send.write_all(&frame).await.map_err(std::io::Error::other)
}

/// Answers `err` and finishes the stream.
pub(crate) async fn refuse(mut send: quinn::SendStream, err: OpError) {
    let _ = write_frame(&mut send, &Reply::Error(err)).await;
    let _ = send.finish();
}
