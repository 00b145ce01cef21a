//! One operation's stream to a guest: typed frames, then optionally raw bytes, every wait bounded.

use super::deadlines::{within, Deadlines};
use super::TunnelError;
use gateway_proto::wire::{RESET_ABORTED, RESET_PROTOCOL, RESET_REVOKED};
use gateway_proto::{encode, FrameDecoder, FrameError};
use serde::{de::DeserializeOwned, Serialize};
use std::time::Duration;

/// One operation's stream: typed frames, then optionally raw bytes.
pub struct OpStream {
    pub tx: OpSender,
    pub rx: OpReceiver,
}

/// The sending half of an operation stream.
pub struct OpSender {
    computer: String,
    send: quinn::SendStream,
    deadline: Option<Duration>,
}

/// The receiving half of an operation stream.
pub struct OpReceiver {
    computer: String,
    recv: quinn::RecvStream,
    decoder: FrameDecoder,
    pending_raw: Vec<u8>,
    reply_deadline: Option<Duration>,
    raw_deadline: Option<Duration>,
}

impl OpStream {
    /// A stream over `send`/`recv` to `computer`'s guest, with `deadlines`.
    fn new(
        computer: String,
        send: quinn::SendStream,
        recv: quinn::RecvStream,
        deadlines: Deadlines,
    ) -> Self {
        Self {
            tx: OpSender {
                computer: computer.clone(),
                send,
                deadline: deadlines.out,
            },
            rx: OpReceiver {
                computer,
                recv,
                decoder: FrameDecoder::new(),
                pending_raw: Vec::new(),
                reply_deadline: deadlines.reply,
                raw_deadline: deadlines.raw_in,
            },
        }
    }

    /// The stream of one operation over `send`/`recv` (to the guest, or through the replica
    /// it is connected to): sends the request frame, with the deadlines
    /// [`Deadlines::for_request`] gives it on a guest whose base deadline is `timeout`.
    pub async fn start(
        computer: String,
        send: quinn::SendStream,
        recv: quinn::RecvStream,
        req: &gateway_proto::Request,
        timeout: Duration,
    ) -> Result<Self, TunnelError> {
        let deadlines = Deadlines::for_request(req, timeout);
        let mut op = Self::new(computer, send, recv, deadlines);
        op.tx.set_deadline(Some(timeout));
        let sent = op.send(req).await;
        op.tx.set_deadline(deadlines.out);
        sent?;
        Ok(op)
    }

    /// Sends one typed frame.
    pub async fn send<T: Serialize>(&mut self, msg: &T) -> Result<(), TunnelError> {
        self.tx.send(msg).await
    }

    /// Receives a typed frame that must be there.
    pub async fn expect<T: DeserializeOwned>(&mut self) -> Result<T, TunnelError> {
        self.rx.expect().await
    }

    /// Gives up on the operation: resets both directions so the guest sees it at once.
    pub fn abort(&mut self) {
        self.tx.abort();
        self.rx.abort();
    }
}

impl OpSender {
    fn lost(&self) -> TunnelError {
        TunnelError::Lost(self.computer.clone())
    }

    /// The deadline of each write; `None` lifts it.
    pub fn set_deadline(&mut self, d: Option<Duration>) {
        self.deadline = d;
    }

    /// Sends one typed frame.
    pub async fn send<T: Serialize>(&mut self, msg: &T) -> Result<(), TunnelError> {
        let frame = encode(msg).map_err(|e| TunnelError::Protocol {
            computer: self.computer.clone(),
            detail: format!("cannot encode request: {e}"),
        })?;
        let written = within(self.deadline, &self.computer, self.send.write_all(&frame)).await;
        self.settle(written)
    }

    /// Sends raw bytes (after a typed header).
    pub async fn write_raw(&mut self, bytes: bytes::Bytes) -> Result<(), TunnelError> {
        // write_chunk hands the buffer to quinn without copying it.
        let written = within(self.deadline, &self.computer, self.send.write_chunk(bytes)).await;
        self.settle(written)
    }

    /// A write's outcome: a timeout resets the stream, a transport error is a lost outcome.
    fn settle<E>(&mut self, r: Result<Result<(), E>, TunnelError>) -> Result<(), TunnelError> {
        match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(self.lost()),
            Err(timeout) => {
                self.abort();
                Err(timeout)
            }
        }
    }

    /// The QUIC stream under it, for a relay that writes it as a byte stream.
    pub fn into_raw(self) -> quinn::SendStream {
        self.send
    }

    /// Ends our side of the stream.
    pub fn finish(&mut self) -> Result<(), TunnelError> {
        self.send.finish().map_err(|_| self.lost())
    }

    /// Resets our side so the guest sees the abort at once.
    pub fn abort(&mut self) {
        let _ = self.send.reset(RESET_ABORTED.into());
    }

    /// Resets our side as revoked: the capability of this live stream no longer holds, and the
    /// guest ends what serves it at once (a terminal's shell does not wait for a reattachment).
    pub fn revoke(&mut self) {
        let _ = self.send.reset(RESET_REVOKED.into());
    }
}

impl OpReceiver {
    fn lost(&self) -> TunnelError {
        TunnelError::Lost(self.computer.clone())
    }

    fn protocol(&mut self, detail: impl Into<String>) -> TunnelError {
        let _ = self.recv.stop(RESET_PROTOCOL.into());
        TunnelError::Protocol {
            computer: self.computer.clone(),
            detail: detail.into(),
        }
    }

    /// Stops reading so the guest sees the abort at once.
    pub fn abort(&mut self) {
        let _ = self.recv.stop(RESET_ABORTED.into());
    }

    /// The deadlines of each typed frame and of each next piece of raw bytes; `None` lifts one.
    pub fn set_deadlines(&mut self, reply: Option<Duration>, raw: Option<Duration>) {
        self.reply_deadline = reply;
        self.raw_deadline = raw;
    }

    /// A timeout stops the stream, so the guest sees that the control plane gave up.
    fn timed_out(&mut self, e: TunnelError) -> TunnelError {
        self.abort();
        e
    }

    /// Receives the next typed frame; `None` when the guest finished its side cleanly. Fails
    /// with [`TunnelError::Timeout`] when the frame does not arrive within the reply deadline.
    pub async fn recv<T: DeserializeOwned>(&mut self) -> Result<Option<T>, TunnelError> {
        let computer = self.computer.clone();
        match within(self.reply_deadline, &computer, self.recv_inner()).await {
            Ok(r) => r,
            Err(e) => Err(self.timed_out(e)),
        }
    }

    async fn recv_inner<T: DeserializeOwned>(&mut self) -> Result<Option<T>, TunnelError> {
        loop {
            match self.decoder.next_message::<T>() {
                Ok(Some(msg)) => return Ok(Some(msg)),
                Ok(None) => {}
                Err(e) => return Err(self.protocol(e.to_string())),
            }
            match self.recv.read_chunk(64 * 1024, true).await {
                Ok(Some(chunk)) => self.decoder.push(&chunk.bytes),
                Ok(None) => {
                    return match self.decoder.finish() {
                        Ok(()) => Ok(None),
                        Err(FrameError::Truncated(_)) => Err(self.lost()),
                        Err(e) => Err(self.protocol(e.to_string())),
                    }
                }
                Err(_) => return Err(self.lost()),
            }
        }
    }

    /// Receives a typed frame that must be there.
    pub async fn expect<T: DeserializeOwned>(&mut self) -> Result<T, TunnelError> {
        match self.recv().await? {
            Some(msg) => Ok(msg),
            None => Err(self.lost()),
        }
    }

    /// Switches to raw bytes: call after the last typed frame has been received.
    pub fn start_raw(&mut self) {
        let decoder = std::mem::take(&mut self.decoder);
        self.pending_raw = decoder.into_remainder();
    }

    /// The QUIC stream under it and the raw bytes already read past the last frame (after
    /// [`Self::start_raw`]): for a relay that reads it as a byte stream.
    pub fn into_raw(self) -> (quinn::RecvStream, Vec<u8>) {
        (self.recv, self.pending_raw)
    }

    /// Reads up to `max` raw bytes; `None` at the end of the guest's side. Fails with
    /// [`TunnelError::Timeout`] when nothing arrives within the raw deadline (an export that
    /// stopped making progress).
    pub async fn read_raw(&mut self, max: usize) -> Result<Option<bytes::Bytes>, TunnelError> {
        if !self.pending_raw.is_empty() {
            let take = self.pending_raw.len().min(max);
            let rest = self.pending_raw.split_off(take);
            let head = std::mem::replace(&mut self.pending_raw, rest);
            return Ok(Some(head.into()));
        }
        let computer = self.computer.clone();
        match within(
            self.raw_deadline,
            &computer,
            self.recv.read_chunk(max, true),
        )
        .await
        {
            Ok(Ok(Some(chunk))) => Ok(Some(chunk.bytes)),
            Ok(Ok(None)) => Ok(None),
            Ok(Err(_)) => Err(self.lost()),
            Err(e) => Err(self.timed_out(e)),
        }
    }
}
