//! Home export and import over the tunnel (docs/homes.md).
//!
//! Export quiesces the bots' browsers when asked (so cookies and profile databases are flushed;
//! they start again, on their last session, once the archive is sent), estimates the archive's content from a walk, answers `ExportStart`, then streams the home as
//! one archive (`homes::archive::pack_reader`) straight into the QUIC stream: the archive is never
//! held in memory or on disk, and a failure resets the stream, which the control plane sees as a
//! lost (never a complete) checkpoint.
//!
//! Import reads exactly the announced number of bytes from the stream into
//! `homes::archive::restore`, which unpacks into a staging directory beside the home, checks the
//! whole (untrusted) archive, and only then swaps it in; a bad archive writes nothing. Browsers are
//! quiesced first so no Chrome keeps writing into the tree being replaced.
//!
//! Both run only after `ops` checked the authority they act under against the fence table
//! (`FenceTable::check_home`): a stale one is refused before browsers are quiesced or a byte of
//! an import is read.
//!
//! The archive format, its limits and the skip list belong to the `homes` crate; sealing and
//! storage to the control plane.

use crate::home::Home;
use crate::opstream::{refuse, write_frame};
use crate::screens::Screens;
use bytes::Bytes;
use gateway_proto::home::{
    ExportStart, ExportToken, HomeExportRequest, HomeImportRequest, Imported,
};
use gateway_proto::{ErrorCode, Op, OpError};
use homes::archive::{
    pack_delta, restore_async, task_reader, Limits, UnpackOptions, BROWSER_PROFILES_DIR,
    EXCLUDED_PROFILE_DIRS, EXCLUDED_PROFILE_FILES,
};
use homes::error_chain as chain;
use std::io;
use std::path::Path;
use tokio_util::io::StreamReader;
use tracing::{info, warn};

use gateway_proto::wire::RESET_ABORTED;
/// Bytes gathered per read of an import from the stream.
const CHUNK: usize = 256 * 1024;

/// Streams the home out as one archive.
pub async fn export(
    home: &Home,
    screens: &Screens,
    send: quinn::SendStream,
    req: HomeExportRequest,
) {
    if req.quiesce_browsers {
        screens.quiesce_browsers().await;
    }
    export_tree(home, send, req.token, req.since).await;
    if req.quiesce_browsers {
        // A checkpoint at a run's end must not take the bot's browser away
        // (docs/screens.md#teardown: a successful run keeps it): Chrome reopens its last session on
        // the same profile.
        screens.resume_browsers().await;
    }
}

/// Writes `ExportStart` and the archive of the home to `send`: a delta of export `since` when
/// the guest still has its stamps, whole otherwise. A complete export's stamps are kept under
/// `token`.
async fn export_tree(
    home: &Home,
    mut send: quinn::SendStream,
    token: ExportToken,
    since: Option<ExportToken>,
) {
    let root = home.root().to_path_buf();
    let walk_root = root.clone();
    let estimate = tokio::task::spawn_blocking(move || estimate(&walk_root)).await;
    let start = match estimate {
        Ok(Ok(start)) => start,
        Ok(Err(e)) => {
            let msg = format!("cannot walk the home for export: {e}");
            return refuse(send, OpError::new(ErrorCode::Failed, msg)).await;
        }
        Err(e) => {
            let msg = format!("home export walk ended abnormally: {e}");
            return refuse(send, OpError::new(ErrorCode::Failed, msg)).await;
        }
    };
    if write_frame(&mut send, &HomeExportRequest::reply_frame(start))
        .await
        .is_err()
    {
        return;
    }
    let base = since.and_then(|t| home.exports().get(&t));
    let delta = base.is_some();
    let mut reader = task_reader(move |w| pack_delta(&root, w, base.as_deref()));
    let mut sent: u64 = 0;
    loop {
        // The writer's pieces go to quinn as they are (write_chunk takes them without a copy).
        match reader.next_chunk().await {
            Ok(None) => break,
            Ok(Some(chunk)) => {
                let n = chunk.len() as u64;
                if send.write_chunk(chunk).await.is_err() {
                    // The control plane went away or gave up; nothing to tell it.
                    return;
                }
                sent += n;
            }
            Err(e) => {
                warn!(error = %chain(&e), sent, "home export failed; resetting the stream");
                let _ = send.reset(RESET_ABORTED.into());
                return;
            }
        }
    }
    let _ = send.finish();
    let (stats, stamps) = reader.take().unwrap_or_default();
    home.exports().put(token, stamps);
    info!(
        bytes = sent,
        delta,
        unchanged = stats.unchanged,
        files = stats.files,
        dirs = stats.dirs,
        skipped = stats.skipped_symlinks + stats.skipped_special,
        excluded = stats.excluded,
        "home exported"
    );
}

/// Reads one archive into the home.
pub async fn import(
    home: &Home,
    screens: &Screens,
    mut send: quinn::SendStream,
    recv: quinn::RecvStream,
    remainder: Vec<u8>,
    req: HomeImportRequest,
) {
    let limits = Limits::default();
    // The archive of a home within the limits is its content plus per-entry headers; anything
    // announcing more than that cannot be a home we would accept.
    let max_size = limits
        .max_bytes
        .saturating_add(limits.max_entries.saturating_mul(4096 + 16));
    if req.size > max_size {
        let msg = format!("home import of {} bytes exceeds {max_size}", req.size);
        return refuse(send, OpError::new(ErrorCode::TooLarge, msg)).await;
    }
    screens.quiesce_browsers().await;
    // Whatever the import writes, the stamps of earlier exports no longer describe the home.
    home.exports().clear();
    let input = StreamReader::new(Box::pin(exact_bytes(recv, remainder, req.size)));
    let opts = UnpackOptions { limits, sync: true };
    let reply = match restore_async(input, home.root().to_path_buf(), opts).await {
        Ok(stats) => {
            info!(
                bytes = stats.bytes,
                files = stats.files,
                dirs = stats.dirs,
                "home imported"
            );
            HomeImportRequest::reply_frame(Imported {
                content_bytes: stats.bytes,
                entries: stats.files + stats.dirs,
            })
        }
        // A full disk is this computer's failure, not a bad archive.
        Err(e) if homes::out_of_space(&e) => {
            let msg = format!(
                "home import failed, nothing written: the computer's disk is full: {}",
                chain(&e)
            );
            warn!(error = %msg, "home import failed");
            HomeImportRequest::refusal_frame(OpError::new(ErrorCode::Failed, msg))
        }
        Err(e) => {
            let msg = format!("home import rejected, nothing written: {}", chain(&e));
            warn!(error = %msg, "home import failed");
            HomeImportRequest::refusal_frame(OpError::new(ErrorCode::BadRequest, msg))
        }
    };
    let _ = write_frame(&mut send, &reply).await;
    let _ = send.finish();
}

/// The stream's next `size` bytes (the frame decoder's `remainder` first): an error if it ends
/// early or the remainder already carries more. QUIC hands over about one packet per read; they
/// are gathered into chunks of up to [`CHUNK`] bytes, because the unpacker reads through a
/// blocking bridge that costs one hand-off per chunk.
fn exact_bytes(
    recv: quinn::RecvStream,
    remainder: Vec<u8>,
    size: u64,
) -> impl futures_util::Stream<Item = io::Result<Bytes>> + Send {
    futures_util::stream::unfold(
        (Some(recv), remainder, 0u64),
        move |(recv, first, got)| async move {
            let mut recv = recv?;
            let fail = |e: io::Error| Some((Err(e), (None, Vec::new(), got)));
            let mut buf = bytes::BytesMut::with_capacity(CHUNK.max(first.len()));
            buf.extend_from_slice(&first);
            if got + buf.len() as u64 > size {
                return fail(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("import stream carries more than the announced {size} bytes"),
                ));
            }
            while buf.len() < CHUNK && got + (buf.len() as u64) < size {
                let left = size - got - buf.len() as u64;
                let want = (CHUNK - buf.len()).min(usize::try_from(left).unwrap_or(CHUNK));
                match recv.read_chunk(want, true).await {
                    Ok(Some(c)) => buf.extend_from_slice(&c.bytes),
                    Ok(None) => {
                        return fail(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!(
                                "import stream ended after {} of {size} bytes",
                                got + buf.len() as u64
                            ),
                        ))
                    }
                    Err(e) => return fail(io::Error::other(e)),
                }
            }
            if buf.is_empty() {
                return None;
            }
            let got = got + buf.len() as u64;
            Some((Ok(buf.freeze()), (Some(recv), Vec::new(), got)))
        },
    )
}

/// Content bytes and entries the archive of `root` will hold, from a walk that follows no
/// symlink and applies the browser-profile skip list. An estimate for progress: files may change
/// before they are packed.
fn estimate(root: &Path) -> io::Result<ExportStart> {
    let mut start = ExportStart {
        content_bytes: 0,
        entries: 0,
    };
    // (directory, whether it is inside the browser-profiles tree)
    let mut stack = vec![(root.to_path_buf(), false)];
    while let Some((dir, in_profiles)) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let meta = match entry.metadata() {
                Ok(m) => m,
                // Removed while we walk: the writer will not see it either.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let name = name.as_encoded_bytes();
            if meta.is_dir() {
                if in_profiles && EXCLUDED_PROFILE_DIRS.iter().any(|d| d.as_bytes() == name) {
                    continue;
                }
                let profiles =
                    in_profiles || (dir == root && name == BROWSER_PROFILES_DIR.as_bytes());
                start.entries += 1;
                stack.push((entry.path(), profiles));
            } else if meta.is_file() {
                if in_profiles && EXCLUDED_PROFILE_FILES.iter().any(|f| f.as_bytes() == name) {
                    continue;
                }
                start.entries += 1;
                start.content_bytes += meta.len();
            }
        }
    }
    Ok(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_matches_what_pack_writes() {
        let dir = tempfile::tempdir().unwrap();
        homes::testing::write_sample_home(dir.path()).unwrap();
        let start = estimate(dir.path()).unwrap();
        let stats = homes::archive::pack(dir.path(), io::sink()).unwrap();
        assert_eq!(start.entries, stats.files + stats.dirs);
        assert_eq!(start.content_bytes, stats.bytes);
    }
}
