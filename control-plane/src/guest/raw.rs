//! Raw bytes after a typed header, both ways, held to the size the header announced.
//!
//! From the guest ([`ByteStream`]): exactly the announced bytes; a piece past them resets the
//! stream ([`ByteError::Overrun`]) and the guest ending its side early is a lost stream. To the
//! guest ([`Guest::send_body`]): exactly the bytes the request announced, or the stream is reset so
//! the guest commits nothing; a guest that refused and stopped reading is heard out.

use super::Guest;
use crate::tunnel::{OpReceiver, OpSender, OpStream, TunnelError};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use gateway_proto::op::Answered;
use gateway_proto::Op;

/// Why bytes from the guest stopped short of what it announced.
#[derive(Debug, thiserror::Error)]
pub enum ByteError {
    /// The guest sent more than it announced; the stream was reset.
    #[error("guest sent more bytes than announced")]
    Overrun,
    /// The stream failed or ended early (a lost stream).
    #[error(transparent)]
    Tunnel(#[from] TunnelError),
}

/// The next piece of a body of which `left` bytes are still due (at most `max` bytes); `None`
/// once all of it came.
pub(super) async fn next_exact(
    rx: &mut OpReceiver,
    computer: &str,
    left: &mut u64,
    max: usize,
) -> Result<Option<Bytes>, ByteError> {
    if *left == 0 {
        return Ok(None);
    }
    match rx.read_raw(max).await? {
        Some(piece) if piece.len() as u64 <= *left => {
            *left -= piece.len() as u64;
            Ok(Some(piece))
        }
        Some(_) => {
            rx.abort();
            Err(ByteError::Overrun)
        }
        None => Err(TunnelError::Lost(computer.to_owned()).into()),
    }
}

/// Exactly the bytes a guest announced (a file read).
pub struct ByteStream {
    computer: String,
    tx: OpSender,
    rx: OpReceiver,
    left: u64,
}

impl ByteStream {
    /// The rest of `op`, after its header announced `size` bytes.
    pub(super) fn new(computer: &str, mut op: OpStream, size: u64) -> Self {
        op.rx.start_raw();
        Self {
            computer: computer.to_owned(),
            tx: op.tx,
            rx: op.rx,
            left: size,
        }
    }

    /// Bytes still due.
    pub fn remaining(&self) -> u64 {
        self.left
    }

    /// The next piece, at most `max` bytes; `None` once every announced byte came (our side of
    /// the stream is then finished).
    pub async fn next(&mut self, max: usize) -> Result<Option<Bytes>, ByteError> {
        let piece = next_exact(&mut self.rx, &self.computer, &mut self.left, max).await?;
        if piece.is_none() {
            let _ = self.tx.finish();
        }
        Ok(piece)
    }

    /// Gives up (the reader went away): the guest sees both directions reset.
    pub fn abort(&mut self) {
        self.rx.abort();
        self.tx.abort();
    }
}

/// Why sending a body to the guest failed.
#[derive(Debug)]
pub enum SendError<E> {
    /// The body's source failed after `sent` bytes; the stream was reset, so the guest commits
    /// nothing.
    Source { error: E, sent: u64 },
    /// The source had more bytes than the request announced; the stream was reset before any
    /// byte past them went.
    TooLong,
    /// The source ended after `sent` of the announced bytes; the stream was reset.
    TooShort { sent: u64 },
    /// The tunnel failed, or the guest refused.
    Tunnel(TunnelError),
}

impl<E> From<TunnelError> for SendError<E> {
    fn from(e: TunnelError) -> Self {
        Self::Tunnel(e)
    }
}

impl Guest {
    /// Sends `O`'s request, then the `size` bytes of `body` it announced, then reads the guest's
    /// answer.
    pub(super) async fn send_body<O: Op, E>(
        &self,
        req: O,
        size: u64,
        body: impl Stream<Item = Result<Bytes, E>>,
    ) -> Result<O::Reply, SendError<E>> {
        let mut op = self.open(req).await?;
        let mut body = std::pin::pin!(body);
        let mut sent = 0u64;
        while let Some(piece) = body.next().await {
            let piece = match piece {
                Ok(piece) => piece,
                Err(error) => {
                    op.abort();
                    return Err(SendError::Source { error, sent });
                }
            };
            sent += piece.len() as u64;
            if sent > size {
                op.abort();
                return Err(SendError::TooLong);
            }
            if let Err(e) = op.tx.write_raw(piece).await {
                return Err(heard_out::<O>(&mut op, e).await.into());
            }
        }
        if sent != size {
            op.abort();
            return Err(SendError::TooShort { sent });
        }
        if let Err(e) = op.tx.finish() {
            return Err(heard_out::<O>(&mut op, e).await.into());
        }
        Ok(self.answer::<O>(&mut op.rx).await?)
    }
}

/// A write to the guest failed. A guest that refused the operation (a stale authority, a size
/// it will not take) answered and stopped reading, so the write sees a lost stream: its answer,
/// read within the reply deadline, says why. Anything else keeps the write's error.
async fn heard_out<O: Op>(op: &mut OpStream, e: TunnelError) -> TunnelError {
    if matches!(e, TunnelError::Lost(_)) {
        if let Ok(frame) = op.rx.expect::<O::Frame>().await {
            if let Err(Answered::Refused(refusal)) = O::read_frame(frame) {
                return TunnelError::Guest(refusal);
            }
        }
    }
    e
}
