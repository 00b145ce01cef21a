//! The control plane's end of one operation stream, for tests and benchmarks (ours and the
//! control plane's): send a request, read its first reply, then use the stream as one duplex
//! byte stream (RFB or terminal bytes after `Opened`). The guest itself never uses this.

use gateway_proto::{encode, FrameDecoder, FrameError, Reply, Request};
use std::io::Cursor;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, Chain, ReadBuf};

/// Why a request got no reply.
#[derive(Debug, thiserror::Error)]
pub enum CapStreamError {
    #[error("cannot open a stream")]
    Open(#[from] quinn::ConnectionError),
    #[error("cannot send the request")]
    Write(#[from] quinn::WriteError),
    #[error("cannot read the reply")]
    Read(#[from] quinn::ReadError),
    #[error("malformed reply")]
    Frame(#[from] FrameError),
    #[error("the stream ended before a reply")]
    Ended,
    #[error("no reply within {0:?}")]
    TimedOut(Duration),
}

/// An operation stream after its first reply: whatever the guest sent after the reply is read
/// first.
pub struct CapStream {
    /// The sending half, for writes that must be placed exactly (split frames) or a reset.
    pub send: quinn::SendStream,
    recv: Chain<Cursor<Vec<u8>>, quinn::RecvStream>,
}

/// Opens a stream on `conn`, sends `request` and waits up to `limit` for the first reply.
pub async fn request(
    conn: &quinn::Connection,
    request: &Request,
    limit: Duration,
) -> Result<(Reply, CapStream), CapStreamError> {
    let exchange = async {
        let (mut send, mut recv) = conn.open_bi().await?;
        let frame = encode(request)?;
        send.write_all(&frame).await?;
        let mut decoder = FrameDecoder::new();
        let reply = loop {
            if let Some(r) = decoder.next_message::<Reply>()? {
                break r;
            }
            let chunk = recv
                .read_chunk(64 * 1024, true)
                .await?
                .ok_or(CapStreamError::Ended)?;
            decoder.push(&chunk.bytes);
        };
        let rest = Cursor::new(decoder.into_remainder());
        Ok((
            reply,
            CapStream {
                send,
                recv: AsyncReadExt::chain(rest, recv),
            },
        ))
    };
    tokio::time::timeout(limit, exchange)
        .await
        .unwrap_or(Err(CapStreamError::TimedOut(limit)))
}

impl CapStream {
    /// Reads until the guest ends the stream; returns what was read and the reset code if it
    /// reset the stream rather than finishing it.
    pub async fn read_to_end(&mut self) -> std::io::Result<(Vec<u8>, Option<u64>)> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match self.recv.read(&mut buf).await {
                Ok(0) => return Ok((out, None)),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => {
                    let code = e
                        .get_ref()
                        .and_then(|inner| inner.downcast_ref::<quinn::ReadError>())
                        .and_then(|r| match r {
                            quinn::ReadError::Reset(code) => Some(code.into_inner()),
                            _ => None,
                        });
                    return match code {
                        Some(c) => Ok((out, Some(c))),
                        None => Err(e),
                    };
                }
            }
        }
    }
}

impl AsyncRead for CapStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.recv).poll_read(cx, buf)
    }
}

impl AsyncWrite for CapStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        AsyncWrite::poll_write(Pin::new(&mut self.send), cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        AsyncWrite::poll_flush(Pin::new(&mut self.send), cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        AsyncWrite::poll_shutdown(Pin::new(&mut self.send), cx)
    }
}
