//! A live view, control or terminal connection: `Opened`, then raw bytes both ways.

use super::Guest;
use crate::tunnel::{OpReceiver, OpSender, OpStream, TunnelError};
use bytes::Bytes;
use gateway_proto::live::ConnectRequest;
use gateway_proto::{Op, OpError};

/// Why a live connection did not open.
#[derive(Debug)]
pub enum ConnectError {
    /// The stream could not be opened or the request not sent.
    Open(TunnelError),
    /// The guest refused the capability.
    Refused(OpError),
    /// The guest answered something else, or not in time; the stream was reset.
    Answer(TunnelError),
}

/// An open live connection: bytes pass unchanged both ways. The guest's side has no deadline
/// (a static screen is quiet); revocation or either side ending closes it.
pub struct LiveStream {
    tx: OpSender,
    rx: OpReceiver,
}

impl Guest {
    /// Opens a live connection to the bot's desktop or a terminal (a new shell, or the one the
    /// request's session key finds again).
    pub async fn connect(&self, req: ConnectRequest) -> Result<LiveStream, ConnectError> {
        let op = self.open_duplex(req).await?;
        Ok(LiveStream {
            tx: op.tx,
            rx: op.rx,
        })
    }

    /// Opens a [`gateway_proto::op::Shape::Duplex`] operation: its `Opened` answer read, the
    /// stream switched to raw bytes.
    pub(super) async fn open_duplex<O: Op<Reply = ()>>(
        &self,
        req: O,
    ) -> Result<OpStream, ConnectError> {
        let mut op = self.open(req).await.map_err(ConnectError::Open)?;
        match self.answer::<O>(&mut op.rx).await {
            Ok(()) => {}
            Err(TunnelError::Guest(e)) => return Err(ConnectError::Refused(e)),
            Err(e) => {
                op.abort();
                return Err(ConnectError::Answer(e));
            }
        }
        op.rx.start_raw();
        Ok(op)
    }
}

impl LiveStream {
    /// Sends bytes to the guest.
    pub async fn write(&mut self, bytes: Bytes) -> Result<(), TunnelError> {
        self.tx.write_raw(bytes).await
    }

    /// Up to `max` bytes from the guest; `None` once it ended its side.
    pub async fn read(&mut self, max: usize) -> Result<Option<Bytes>, TunnelError> {
        self.rx.read_raw(max).await
    }

    /// Our end went away: ends our side cleanly, so the guest can tidy up, and stops reading.
    pub fn end(&mut self) {
        let _ = self.tx.finish();
        self.rx.abort();
    }

    /// Resets both directions (the guest's side failed, or the browser's upgrade did).
    pub fn abort(&mut self) {
        self.tx.abort();
        self.rx.abort();
    }

    /// Resets both directions because the capability was revoked or expired: the guest stops
    /// what serves it at once (a terminal's shell does not wait for a reattachment).
    pub fn revoke(&mut self) {
        self.tx.revoke();
        self.rx.abort();
    }
}
