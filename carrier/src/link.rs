//! One carrier connection: a bounded [`Outbox`] drained by a writer, and a reader that decodes
//! frames into its socket's inbound queue.
//!
//! Both directions run in one future ([`run`]), so the failure of either ends the whole
//! connection. What ends it is a [`LinkEnd`]; the sockets decide what to log. The datagram
//! plumbing shared by both sockets ([`poll_inbound`], [`push_transmit`]) lives here too.

use crate::frame::{self, Decoder, FrameError, HEADER, MAX_DATAGRAM};
use bytes::{Bytes, BytesMut};
use quinn::udp::{RecvMeta, Transmit};
use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

/// How much a reader asks the kernel for at once.
const READ_CHUNK: usize = 256 * 1024;

/// A received datagram and the (synthetic or real) address quinn sees it from.
#[derive(Debug)]
pub(crate) struct Datagram {
    pub from: SocketAddr,
    pub bytes: Bytes,
}

/// Why a connection ended.
#[derive(Debug)]
pub enum LinkEnd {
    /// The peer closed it, or we released it and everything queued was sent.
    Closed,
    /// The peer broke the frame format.
    Frame(FrameError),
    /// No preamble within the deadline.
    NoPreamble,
    /// Nothing received (or nothing written could be sent) for the idle deadline.
    Idle,
    /// A server connection whose QUIC connection the application never confirmed in time.
    Unconfirmed,
    Io(io::Error),
}

impl fmt::Display for LinkEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Closed => f.write_str("closed"),
            Self::Frame(e) => write!(f, "protocol error: {e}"),
            Self::NoPreamble => f.write_str("no preamble in time"),
            Self::Idle => f.write_str("idle past the deadline"),
            Self::Unconfirmed => f.write_str("not confirmed in time"),
            Self::Io(e) => write!(f, "i/o: {e}"),
        }
    }
}

/// Datagrams waiting for the writer, as encoded frames in one buffer, at most `limit` bytes.
///
/// A datagram that does not fit is dropped, as a full UDP socket buffer drops it: QUIC's loss
/// recovery resends what mattered and its congestion control slows down. While the writer
/// sends one full buffer the next fills, so at most twice `limit` is held per connection.
#[derive(Debug)]
pub(crate) struct Outbox {
    state: Mutex<OutState>,
    ready: Notify,
    limit: usize,
}

#[derive(Debug, Default)]
struct OutState {
    frames: Vec<u8>,
    /// No more datagrams are taken; the writer sends what is queued and ends the connection.
    closing: bool,
}

impl Outbox {
    pub fn new(limit: usize) -> Self {
        Self {
            state: Mutex::default(),
            ready: Notify::new(),
            limit,
        }
    }

    /// Queues one datagram; `false` when it was dropped (full, closing, or unframeable).
    pub fn push(&self, datagram: &[u8]) -> bool {
        let mut s = lock(&self.state);
        if s.closing || s.frames.len() + HEADER + datagram.len() > self.limit {
            return false;
        }
        let was_empty = s.frames.is_empty();
        if !frame::encode(datagram, &mut s.frames) {
            return false;
        }
        drop(s);
        if was_empty {
            // A stored permit covers a writer that is between its check and its wait.
            self.ready.notify_one();
        }
        true
    }

    /// Waits for queued frames and swaps them into `out` (empty); `false` once the outbox is
    /// closing and everything was taken.
    pub(crate) async fn next_batch(&self, out: &mut Vec<u8>) -> bool {
        out.clear();
        if out.capacity() > 2 * self.limit {
            *out = Vec::new();
        }
        loop {
            let closing = {
                let mut s = lock(&self.state);
                std::mem::swap(&mut s.frames, out);
                s.closing
            };
            if !out.is_empty() {
                return true;
            }
            if closing {
                return false;
            }
            self.ready.notified().await;
        }
    }

    /// Takes no more datagrams; the connection ends once what is queued is written.
    pub fn close(&self) {
        lock(&self.state).closing = true;
        self.ready.notify_one();
    }
}

/// Splits a (possibly segmented) transmit into datagrams for `outbox`.
pub(crate) fn push_transmit(outbox: &Outbox, transmit: &Transmit<'_>) {
    match transmit.segment_size {
        Some(size) if size > 0 => {
            for datagram in transmit.contents.chunks(size) {
                outbox.push(datagram);
            }
        }
        _ => {
            outbox.push(transmit.contents);
        }
    }
}

/// Hands queued datagrams to quinn: as many as it has buffers for, each copied into its buffer.
/// A datagram larger than quinn's buffer (more than its configured payload size) is dropped,
/// as quinn would drop it.
pub(crate) fn poll_inbound(
    inbound: &Mutex<mpsc::Receiver<Datagram>>,
    cx: &mut Context<'_>,
    bufs: &mut [IoSliceMut<'_>],
    meta: &mut [RecvMeta],
) -> Poll<io::Result<usize>> {
    let mut rx = lock(inbound);
    let max = bufs.len().min(meta.len());
    let mut n = 0;
    while n < max {
        let d = if n == 0 {
            match rx.poll_recv(cx) {
                Poll::Ready(Some(d)) => d,
                // Every link is gone (a client whose connection ended): nothing will arrive;
                // the owner learns of the end through its own signal.
                Poll::Ready(None) | Poll::Pending => return Poll::Pending,
            }
        } else {
            match rx.try_recv() {
                Ok(d) => d,
                Err(_) => break,
            }
        };
        let len = d.bytes.len();
        if len > bufs[n].len() {
            continue;
        }
        bufs[n][..len].copy_from_slice(&d.bytes);
        meta[n] = RecvMeta {
            addr: d.from,
            len,
            stride: len,
            ecn: None,
            dst_ip: None,
        };
        n += 1;
    }
    Poll::Ready(Ok(n))
}

/// Deadlines of one connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LinkDeadlines {
    /// When the preamble must have arrived (accepting end only).
    pub preamble_by: Option<Instant>,
    /// The longest time without a byte received, or without progress on a write.
    pub idle: Duration,
}

/// A carrier connection's byte stream.
pub(crate) enum Stream {
    /// Frames on TCP, after the preamble (checked by the decoder at the accepting end).
    Tcp(TcpStream, Decoder),
    /// One datagram per websocket binary message.
    Ws(Box<crate::ws::Ws>),
}

/// Runs one connection of either kind until either direction ends.
pub(crate) async fn run_stream(
    stream: Stream,
    from: SocketAddr,
    outbox: &Outbox,
    inbound: &mpsc::Sender<Datagram>,
    deadlines: LinkDeadlines,
) -> LinkEnd {
    match stream {
        Stream::Tcp(tcp, decoder) => run(tcp, from, decoder, outbox, inbound, deadlines).await,
        Stream::Ws(ws) => crate::ws::run(*ws, from, outbox, inbound, deadlines.idle).await,
    }
}

/// Runs one connection until either direction ends. Received datagrams go to `inbound`
/// labelled `from`; queued ones leave from `outbox`.
async fn run(
    stream: TcpStream,
    from: SocketAddr,
    decoder: Decoder,
    outbox: &Outbox,
    inbound: &mpsc::Sender<Datagram>,
    deadlines: LinkDeadlines,
) -> LinkEnd {
    // Small datagrams (an exec's few bytes, an ACK) leave at once; the writer batches under
    // load by itself, since everything queued while it writes goes out in its next write.
    if let Err(e) = stream.set_nodelay(true) {
        return LinkEnd::Io(e);
    }
    let (rd, wr) = stream.into_split();
    tokio::select! {
        end = read_loop(rd, from, decoder, inbound, deadlines) => end,
        end = write_loop(wr, outbox, deadlines.idle) => end,
    }
}

async fn read_loop(
    mut rd: tokio::net::tcp::OwnedReadHalf,
    from: SocketAddr,
    mut decoder: Decoder,
    inbound: &mpsc::Sender<Datagram>,
    deadlines: LinkDeadlines,
) -> LinkEnd {
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    loop {
        loop {
            match decoder.next(&mut buf) {
                Ok(Some(bytes)) => {
                    // Waiting here stops reading this connection only: TCP pushes back on its
                    // sender while quinn catches up.
                    if inbound.send(Datagram { from, bytes }).await.is_err() {
                        return LinkEnd::Closed;
                    }
                }
                Ok(None) => break,
                Err(e) => return LinkEnd::Frame(e),
            }
        }
        if buf.capacity() - buf.len() < HEADER + MAX_DATAGRAM {
            buf.reserve(READ_CHUNK);
        }
        let by = match deadlines.preamble_by {
            Some(by) if !decoder.preamble_done() => by,
            _ => Instant::now() + deadlines.idle,
        };
        match tokio::time::timeout_at(by, rd.read_buf(&mut buf)).await {
            Err(_) if !decoder.preamble_done() => return LinkEnd::NoPreamble,
            Err(_) => return LinkEnd::Idle,
            Ok(Ok(0)) => return LinkEnd::Closed,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return LinkEnd::Io(e),
        }
    }
}

async fn write_loop(
    mut wr: tokio::net::tcp::OwnedWriteHalf,
    outbox: &Outbox,
    idle: Duration,
) -> LinkEnd {
    let mut out = Vec::new();
    while outbox.next_batch(&mut out).await {
        match tokio::time::timeout(idle, wr.write_all(&out)).await {
            Err(_) => return LinkEnd::Idle,
            Ok(Err(e)) => return LinkEnd::Io(e),
            Ok(Ok(())) => {}
        }
    }
    let _ = wr.shutdown().await;
    LinkEnd::Closed
}

/// Locks `m`; a poisoned lock still holds consistent data here (no code panics while holding
/// one), so it is used as is.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(outbox: &Outbox) -> Vec<u8> {
        lock(&outbox.state).frames.clone()
    }

    #[test]
    fn a_full_outbox_drops_and_a_closing_one_takes_nothing() {
        let outbox = Outbox::new(3 * (HEADER + 100));
        for _ in 0..3 {
            assert!(outbox.push(&[1; 100]));
        }
        assert!(!outbox.push(&[2; 100]), "over the limit");
        assert!(!outbox.push(&[]), "unframeable");
        assert_eq!(queued(&outbox).len(), 3 * (HEADER + 100));
        let outbox = Outbox::new(1 << 20);
        outbox.close();
        assert!(!outbox.push(&[1; 10]));
        assert!(queued(&outbox).is_empty());
    }

    #[test]
    fn a_segmented_transmit_becomes_one_frame_per_segment() {
        let outbox = Outbox::new(1 << 20);
        let contents: Vec<u8> = (0..250u8).collect();
        push_transmit(
            &outbox,
            &Transmit {
                destination: "127.0.0.1:1".parse().unwrap(),
                ecn: None,
                contents: &contents,
                segment_size: Some(100),
                src_ip: None,
            },
        );
        let mut buf = BytesMut::from(&queued(&outbox)[..]);
        let mut decoder = Decoder::dialing();
        let mut got = Vec::new();
        while let Some(d) = decoder.next(&mut buf).unwrap() {
            got.push(d);
        }
        assert_eq!(
            got,
            vec![&contents[..100], &contents[100..200], &contents[200..]]
        );
    }
}
