//! File bytes over an operation stream: a download ([`read_file`]: `ReadStart { size }`, then
//! exactly `size` raw bytes) and an upload ([`write_file`]: exactly `size` raw bytes in, then
//! `Written` or an error). Paths are checked and files opened by [`Home`]; lease checks were done
//! by the caller ([`crate::ops`]).

use super::Home;
use crate::opstream::write_frame;
use gateway_proto::{ErrorCode, Op, OpError, ReadFile, WriteFile};
use std::io::{Read, Write};
use tokio::sync::mpsc;
use tracing::warn;

/// Buffer size of file writes during an upload.
const WRITE_BUF: usize = 256 * 1024;

/// A download's file shrank or failed after its size was announced: the caller resets the stream
/// with the protocol reset code, since the promised size cannot be met.
#[derive(Debug)]
pub struct FileChanged;

/// Streams the file at `path` (at most `max` bytes) to `send`. Finishes the stream unless a
/// write fails (the peer went away) or the file changed under us ([`FileChanged`]).
pub async fn read_file(
    home: &Home,
    send: &mut quinn::SendStream,
    path: &str,
    max: u64,
) -> Result<(), FileChanged> {
    let (mut file, size) = match home.open_read(path, max) {
        Ok(v) => v,
        Err(e) => {
            let _ = write_frame(send, &ReadFile::refusal_frame(e)).await;
            let _ = send.finish();
            return Ok(());
        }
    };
    if write_frame(send, &ReadFile::reply_frame(size))
        .await
        .is_err()
    {
        return Ok(());
    }
    let mut left = size;
    while left > 0 {
        let want = WRITE_BUF.min(usize::try_from(left).unwrap_or(usize::MAX));
        // A fresh buffer per chunk is handed to quinn whole (write_chunk), without a copy.
        let mut buf = vec![0u8; want];
        // A blocking read of a local file chunk is short; the runtime tolerates it.
        let n = match tokio::task::block_in_place(|| file.read(&mut buf)) {
            Ok(0) | Err(_) => {
                warn!(path, "file changed while being read; resetting the stream");
                return Err(FileChanged);
            }
            Ok(n) => n,
        };
        buf.truncate(n);
        if send.write_chunk(bytes::Bytes::from(buf)).await.is_err() {
            return Ok(());
        }
        left -= n as u64;
    }
    let _ = send.finish();
    Ok(())
}

/// Receives exactly `size` bytes (the first of them in `remainder`) into the file at `path`,
/// then answers `Written` or the error and finishes the stream.
pub async fn write_file(
    home: &Home,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    remainder: Vec<u8>,
    r: &WriteFile,
) {
    let reply = match receive_file(home, &mut recv, remainder, r).await {
        Ok(()) => WriteFile::reply_frame(r.size),
        Err(e) => WriteFile::refusal_frame(e),
    };
    let _ = write_frame(&mut send, &reply).await;
    let _ = send.finish();
}

async fn receive_file(
    home: &Home,
    recv: &mut quinn::RecvStream,
    remainder: Vec<u8>,
    r: &WriteFile,
) -> Result<(), OpError> {
    let (path, size) = (r.path.as_str(), r.size);
    let mut pending = home.create_write(path, r.executable)?;
    if r.no_replace {
        pending = pending.keep_existing()?;
    }
    let io_err =
        |e: std::io::Error| OpError::new(ErrorCode::Failed, format!("write {path:?}: {e}"));
    // A writer thread takes 256 KiB buffers, so the disk and the network overlap and the
    // file is written in large pieces rather than one QUIC packet at a time.
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(4);
    let writer = tokio::task::spawn_blocking(move || {
        let mut pending = pending;
        while let Some(buf) = rx.blocking_recv() {
            if let Err(e) = pending.file().write_all(&buf) {
                return (pending, Err(e));
            }
        }
        (pending, Ok(()))
    });
    let received = async {
        let mut got = remainder.len() as u64;
        if got > size {
            return Err(too_many(path, size));
        }
        let mut buf = remainder;
        buf.reserve(WRITE_BUF.saturating_sub(buf.len()));
        while got < size {
            match recv.read_chunk(WRITE_BUF, true).await {
                Ok(Some(chunk)) => {
                    got += chunk.bytes.len() as u64;
                    if got > size {
                        return Err(too_many(path, size));
                    }
                    buf.extend_from_slice(&chunk.bytes);
                    if buf.len() >= WRITE_BUF {
                        let full = std::mem::replace(&mut buf, Vec::with_capacity(WRITE_BUF));
                        if tx.send(full).await.is_err() {
                            // The writer stopped on an error; it reports it below.
                            return Ok(());
                        }
                    }
                }
                Ok(None) | Err(_) => {
                    return Err(OpError::new(
                        ErrorCode::BadRequest,
                        format!("upload of {path:?} ended after {got} of {size} bytes"),
                    ))
                }
            }
        }
        // Anything past the announced size is a protocol violation, not data.
        if let Ok(Some(_)) = recv.read_chunk(1, true).await {
            return Err(too_many(path, size));
        }
        if !buf.is_empty() {
            let _ = tx.send(buf).await;
        }
        Ok(())
    }
    .await;
    drop(tx);
    let (pending, written) = writer
        .await
        .map_err(|e| OpError::new(ErrorCode::Failed, format!("write {path:?}: {e}")))?;
    // On any error `pending` is dropped here, which removes its temp file.
    received?;
    written.map_err(io_err)?;
    tokio::task::block_in_place(|| pending.commit())
}

fn too_many(path: &str, size: u64) -> OpError {
    OpError::new(
        ErrorCode::BadRequest,
        format!("upload of {path:?} sent more than {size} bytes"),
    )
}
