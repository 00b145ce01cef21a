//! Async adapters for the blocking archive writer and reader: [`PackReader`] is an `AsyncRead`
//! of a home's archive produced on the blocking pool, and [`unpack_new_async`] /
//! [`restore_async`] feed an `AsyncRead` to the reader there.
//!
//! Memory stays bounded: the writer hands over chunks of at most 64 KiB through a channel of
//! [`CHANNEL_CHUNKS`] slots, and the reader pulls through `SyncIoBridge` as it goes.

use super::{pack, restore, unpack_new, ArchiveError, PackStats, UnpackOptions, UnpackStats};
use bytes::Bytes;
use std::future::Future;
use std::io::{self, Write};
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::io::SyncIoBridge;

/// Chunks in flight between the writer thread and the reader.
pub const CHANNEL_CHUNKS: usize = 8;

/// An `AsyncRead` of the archive of one directory, written on tokio's blocking pool as it is
/// read. A failure of the writer (an unreadable file, say) is returned by `poll_read` as an
/// `io::Error` wrapping the [`ArchiveError`]. Dropping the reader stops the writer.
pub type PackReader = TaskReader<PackStats, ArchiveError>;

/// Starts writing the archive of `root`; see [`PackReader`]. Must be called inside a tokio
/// runtime.
pub fn pack_reader(root: PathBuf) -> PackReader {
    task_reader(move |w| pack(&root, w))
}

/// An `AsyncRead` of what a blocking writer produces on tokio's blocking pool as it is read:
/// end of stream only once the writer has succeeded; its error (as `io::Error::other`) if it
/// failed. Dropping the reader makes the writer's next write fail, which stops it.
pub struct TaskReader<T, E> {
    rx: mpsc::Receiver<Bytes>,
    chunk: Bytes,
    task: Option<JoinHandle<Result<T, E>>>,
    stats: Option<T>,
}

/// Runs `write` on the blocking pool with a writer into the returned reader. Must be called
/// inside a tokio runtime.
pub fn task_reader<T, E, F>(write: F) -> TaskReader<T, E>
where
    T: Send + 'static,
    E: Send + 'static,
    F: FnOnce(ChannelWriter) -> Result<T, E> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(CHANNEL_CHUNKS);
    let task = tokio::task::spawn_blocking(move || write(ChannelWriter { tx }));
    TaskReader {
        rx,
        chunk: Bytes::new(),
        task: Some(task),
        stats: None,
    }
}

fn ended<T, E>(result: Result<Result<T, E>, tokio::task::JoinError>) -> io::Result<T>
where
    E: std::error::Error + Send + Sync + 'static,
{
    match result {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(io::Error::other(e)),
        Err(e) => Err(io::Error::other(ArchiveError::Task(e))),
    }
}

impl<T, E> TaskReader<T, E> {
    /// What the writer answered, taken, once the reader has returned end of stream.
    pub fn take(&mut self) -> Option<T> {
        self.stats.take()
    }
}

impl<T: Copy, E: std::error::Error + Send + Sync + 'static> TaskReader<T, E> {
    /// What the writer answered, once the reader has returned end of stream.
    pub fn stats(&self) -> Option<T> {
        self.stats
    }
}

impl<T, E: std::error::Error + Send + Sync + 'static> TaskReader<T, E> {
    /// The next piece as the writer produced it (at most its write size), without a copy;
    /// `None` at the end of a complete stream. For a caller that passes the bytes on whole (a
    /// QUIC stream's `write_chunk`); mixing it with `poll_read` is fine.
    pub async fn next_chunk(&mut self) -> io::Result<Option<Bytes>> {
        if !self.chunk.is_empty() {
            return Ok(Some(std::mem::take(&mut self.chunk)));
        }
        if let Some(chunk) = self.rx.recv().await {
            return Ok(Some(chunk));
        }
        let Some(task) = self.task.as_mut() else {
            return Ok(None);
        };
        let result = task.await;
        self.task = None;
        self.stats = Some(ended(result)?);
        Ok(None)
    }
}

impl<T: Unpin, E: std::error::Error + Send + Sync + 'static> AsyncRead for TaskReader<T, E> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if !this.chunk.is_empty() {
                let n = this.chunk.len().min(buf.remaining());
                buf.put_slice(&this.chunk.split_to(n));
                return Poll::Ready(Ok(()));
            }
            if let Some(chunk) = ready!(this.rx.poll_recv(cx)) {
                this.chunk = chunk;
                continue;
            }
            // The writer is done: end of stream only if it succeeded.
            let Some(task) = this.task.as_mut() else {
                return Poll::Ready(Ok(()));
            };
            let result = ready!(Pin::new(task).poll(cx));
            this.task = None;
            return Poll::Ready(ended(result).map(|v| this.stats = Some(v)));
        }
    }
}

/// Feeds the writer's output into the channel, blocking the writer thread while it is full.
pub struct ChannelWriter {
    tx: mpsc::Sender<Bytes>,
}

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tx
            .blocking_send(Bytes::copy_from_slice(buf))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "reader dropped"))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// [`unpack_new`] on the blocking pool, reading `input` as it goes.
pub async fn unpack_new_async<R>(
    input: R,
    dir: PathBuf,
    opts: UnpackOptions,
) -> Result<UnpackStats, ArchiveError>
where
    R: AsyncRead + Send + Unpin + 'static,
{
    let bridge = SyncIoBridge::new(input);
    tokio::task::spawn_blocking(move || unpack_new(bridge, &dir, &opts))
        .await
        .map_err(ArchiveError::Task)?
}

/// [`restore`] on the blocking pool, reading `input` as it goes.
pub async fn restore_async<R>(
    input: R,
    target: PathBuf,
    opts: UnpackOptions,
) -> Result<UnpackStats, ArchiveError>
where
    R: AsyncRead + Send + Unpin + 'static,
{
    let bridge = SyncIoBridge::new(input);
    tokio::task::spawn_blocking(move || restore(bridge, &target, &opts))
        .await
        .map_err(ArchiveError::Task)?
}
