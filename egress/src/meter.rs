//! Byte counting, bandwidth limits and the idle deadline of a spliced connection.
//!
//! This module owns [`Metered`], a wrapper around the gateway's connection to the destination:
//! what is written to it is the computer's upload, what is read from it the download. Each
//! direction debits the computer's token bucket for that direction and, when in debt, waits
//! before its next read or write (so all of a computer's connections share its bandwidth).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::Sleep;

use crate::registry::{Computer, Counters};

/// Bytes moved through one connection, and a tick per transfer for the idle watch.
#[derive(Default)]
pub struct Transferred {
    up: AtomicU64,
    down: AtomicU64,
    activity: AtomicU64,
}

impl Transferred {
    pub fn up(&self) -> u64 {
        self.up.load(Ordering::Relaxed)
    }

    pub fn down(&self) -> u64 {
        self.down.load(Ordering::Relaxed)
    }
}

/// The destination side of a spliced connection, metered and limited for `computer`.
pub struct Metered<S> {
    inner: S,
    computer: Arc<Computer>,
    transferred: Arc<Transferred>,
    up_wait: Option<Pin<Box<Sleep>>>,
    down_wait: Option<Pin<Box<Sleep>>>,
}

impl<S> Metered<S> {
    pub fn new(inner: S, computer: Arc<Computer>) -> Metered<S> {
        Metered {
            inner,
            computer,
            transferred: Arc::default(),
            up_wait: None,
            down_wait: None,
        }
    }

    pub fn transferred(&self) -> Arc<Transferred> {
        self.transferred.clone()
    }
}

/// The most bytes one read or write moves in a direction limited to `rate` bytes a second
/// (unlimited: no cap): the bucket is debited after each, so this bounds how far a transfer
/// can run ahead of its limit (a sixteenth of a second's worth, at least 1 KiB).
fn chunk_cap(rate: u64) -> usize {
    match rate {
        0 => usize::MAX,
        r => usize::try_from(r / 16).unwrap_or(usize::MAX).max(1024),
    }
}

fn wait_over(wait: &mut Option<Pin<Box<Sleep>>>, cx: &mut Context<'_>) -> Poll<()> {
    if let Some(sleep) = wait {
        ready!(sleep.as_mut().poll(cx));
        *wait = None;
    }
    Poll::Ready(())
}

impl<S> Metered<S> {
    /// Counts `n` bytes one way and schedules the wait the bucket asks for.
    fn account(&mut self, n: usize, up: bool) {
        if n == 0 {
            return;
        }
        let n = n as u64;
        let t = &self.transferred;
        t.activity.fetch_add(1, Ordering::Relaxed);
        let counters = self.computer.counters();
        let limits = self.computer.limits();
        let (total, counter, bucket, rate, wait) = if up {
            (
                &t.up,
                &counters.bytes_up,
                &self.computer.up,
                limits.up_bytes_per_sec,
                &mut self.up_wait,
            )
        } else {
            (
                &t.down,
                &counters.bytes_down,
                &self.computer.down,
                limits.down_bytes_per_sec,
                &mut self.down_wait,
            )
        };
        total.fetch_add(n, Ordering::Relaxed);
        Counters::add(counter, n);
        let pause = bucket.lock().unwrap_or_else(PoisonError::into_inner).debit(
            crate::clock::now(),
            n,
            rate,
        );
        if !pause.is_zero() {
            *wait = Some(Box::pin(tokio::time::sleep(pause)));
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(wait_over(&mut this.down_wait, cx));
        let cap = chunk_cap(this.computer.limits().down_bytes_per_sec);
        let n = if buf.remaining() > cap {
            // A limited direction moves at most `cap` bytes before its bucket is asked again.
            let mut part = ReadBuf::new(buf.initialize_unfilled_to(cap));
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut part))?;
            let n = part.filled().len();
            buf.advance(n);
            n
        } else {
            let before = buf.filled().len();
            ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
            buf.filled().len() - before
        };
        this.account(n, false);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(wait_over(&mut this.up_wait, cx));
        let cap = chunk_cap(this.computer.limits().up_bytes_per_sec);
        let data = &data[..data.len().min(cap)];
        let n = ready!(Pin::new(&mut this.inner).poll_write(cx, data))?;
        this.account(n, true);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Resolves once `transferred` has seen no byte either way for a whole `idle` period (so
/// between `idle` and twice `idle` after the last byte).
pub async fn idle(transferred: Arc<Transferred>, idle: Duration) {
    let mut seen = transferred.activity.load(Ordering::Relaxed);
    loop {
        tokio::time::sleep(idle).await;
        let now = transferred.activity.load(Ordering::Relaxed);
        if now == seen {
            return;
        }
        seen = now;
    }
}

/// The copy buffer of each direction of a spliced connection. tokio's default (8 KiB) held a
/// 1 GiB download to 0.20× of the direct path; 64 KiB gives 0.55× for 128 KiB of memory per
/// open connection, 256 KiB only 0.57× for 512 KiB (BENCHMARKS.md, "Containment").
const SPLICE_BUF: usize = 64 * 1024;

/// Writes `head` (the bytes already read from the client) to `upstream`, then splices `client`
/// and `upstream` both ways until both are done, an error, or the idle deadline. Returns the
/// bytes (up, down).
pub async fn splice<C, S>(
    client: &mut C,
    upstream: S,
    head: &[u8],
    computer: Arc<Computer>,
    idle_timeout: Duration,
) -> (u64, u64)
where
    C: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut upstream = Metered::new(upstream, computer);
    let transferred = upstream.transferred();
    let wrote = tokio::time::timeout(idle_timeout, upstream.write_all(head)).await;
    if !matches!(wrote, Ok(Ok(()))) {
        return (transferred.up(), transferred.down());
    }
    tokio::select! {
        _ = tokio::io::copy_bidirectional_with_sizes(client, &mut upstream, SPLICE_BUF, SPLICE_BUF) => {}
        () = idle(transferred.clone(), idle_timeout) => {}
    }
    (transferred.up(), transferred.down())
}
