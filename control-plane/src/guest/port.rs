//! A preview's connection to a port on the computer's loopback: `Opened`, then the stream is a
//! byte stream both ways ([`PortStream`]), for the preview proxy's HTTP client to speak over.

use super::live::ConnectError;
use super::Guest;
use gateway_proto::live::PortConnect;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// One TCP connection to a port inside the computer, as a byte stream. Shutting down its write
/// side finishes the stream (the guest shuts the connection's write half); dropping it before
/// resets the stream, and the guest closes the connection.
pub struct PortStream {
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    /// Bytes the guest sent right after `Opened`, read with the answer.
    pending: Vec<u8>,
    finished: bool,
}

impl Guest {
    /// Connects to `port` on the computer's loopback. No deadline once open: the proxy bounds
    /// what it waits for (a response head), an app's stream may be quiet for long.
    pub async fn connect_port(&self, port: u16) -> Result<PortStream, ConnectError> {
        let op = self.open_duplex(PortConnect { port }).await?;
        let (recv, pending) = op.rx.into_raw();
        Ok(PortStream {
            send: op.tx.into_raw(),
            recv,
            pending,
            finished: false,
        })
    }
}

impl AsyncRead for PortStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.pending.is_empty() {
            let n = self.pending.len().min(buf.remaining());
            buf.put_slice(&self.pending[..n]);
            self.pending.drain(..n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.recv).poll_read(cx, buf)
    }
}

impl AsyncWrite for PortStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        AsyncWrite::poll_write(Pin::new(&mut self.send), cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        AsyncWrite::poll_flush(Pin::new(&mut self.send), cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.finished = true;
        AsyncWrite::poll_shutdown(Pin::new(&mut self.send), cx)
    }
}

impl Drop for PortStream {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.send.reset(0u32.into());
        }
        let _ = self.recv.stop(0u32.into());
    }
}
