//! The home flows between a guest and the store: checkpoint (guest export → quota → checker →
//! sealer → store commit) and restore (store → open → guest import), both streaming end to end
//! with bounded memory. When they run, under which lock, lease wait and authority, is the core's
//! (`Core::checkpoint_home`, `Core::restore_home` and the triggers of docs/homes.md#checkpoints);
//! this module moves bytes through a [`Guest`] and the [`HomeService`] and knows nothing of
//! computers' states.
//!
//! Checkpoint: the guest quiesces its browsers and streams its archive; the bytes go through the
//! store's checker and sealer straight into the upload (the object store uploads parts of 8 MiB,
//! two in flight). A tunnel failure mid-stream fails the commit, so the previous revision stays
//! current: a checkpoint is either recorded whole or reported as failed, never lost silently.
//!
//! Quota: the guest's estimate in `ExportStart` already over the home's quota fails the
//! checkpoint before a byte of the archive is read (the stream is reset, so an honest guest stops
//! reading a sparse 60 GB file at once); a guest that lies is caught by the archive's own headers,
//! checked as they arrive ([`ArchiveParser`]): a file whose announced size passes the quota fails
//! the stream before its content is read or stored. Either way [`HomeError::Quota`] names the
//! limit and the previous revision stays current.
//!
//! Deadlines: every wait on the guest is bounded by the tunnel's (`tunnel` module doc): the
//! answer to the export or import, and each next piece of the archive (no progress for that
//! long fails the checkpoint with `guest_timeout`).
//!
//! Authority: both requests carry the lease fences the control plane knows for the computer
//! when the core opens the stream, so a guest that knows a newer lease refuses with
//! `stale_lease` before it quiesces or reads anything (guest `fence::FenceTable::check_home`).
//! An import the guest refused may reach us as a stopped stream first: [`Guest::import_home`]
//! reads its answer then, so the refusal is reported and not a lost tunnel.
//!
//! Restore: the guest protocol wants the archive's exact size first. The object store derives it
//! from the sealed object's length, so the object streams once, straight into the guest's import;
//! a tampered object fails authentication on the way, the stream to the guest is reset, and the
//! guest's staging import writes nothing. The local store packs its tree on the fly and cannot
//! know the size, so its checkpoint is read twice: once to check and count it ([`sized`]), then
//! into the guest.

use super::{chain, HomeError, HomeService, Progress};
use crate::computers::ComputerId;
use crate::guest::{ExportBytes, Guest, SendError};
use crate::tunnel::TunnelError;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use gateway_proto::home::{HomeAuthority, HomeExportRequest, HomeImportRequest, Imported};
use homes::archive::{ArchiveChecker, ArchiveError, ArchiveParser, Limits};
use homes::store::ArchiveStream;
use homes::{Checkpoint, HomeKey, Revision};
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::io::StreamReader;
use tracing::{info, warn};

/// Raw chunk size read from or written to the tunnel.
const RAW_CHUNK: usize = 256 * 1024;
/// Bytes between two progress updates of an export.
const PROGRESS_BATCH: u64 = 1 << 20;
/// How long an explicit checkpoint or a stop waits for other bots' leases by default.
pub const DEFAULT_LEASE_WAIT: Duration = Duration::from_secs(30);

/// Why a flow failed: the tunnel (or the guest's refusal), or the home's store and rules.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    #[error(transparent)]
    Tunnel(#[from] TunnelError),
    #[error(transparent)]
    Home(#[from] HomeError),
}

/// A completed checkpoint.
#[derive(Debug, Clone, Copy)]
pub struct Checkpointed {
    pub revision: Revision,
    /// Archive bytes received from the guest.
    pub bytes: u64,
}

/// A completed restore.
#[derive(Debug, Clone, Copy)]
pub struct Restored {
    pub revision: Revision,
    /// Archive bytes sent to the guest.
    pub bytes: u64,
    pub content_bytes: u64,
    pub entries: u64,
}

/// What the run-completion trigger did.
#[derive(Debug)]
pub enum RunCheckpoint {
    Saved(Checkpointed),
    /// Other bots still hold leases: the last run to finish saves the shared home.
    Deferred(Vec<String>),
    /// Nothing to save from (no connected guest, or the home was never restored).
    Skipped(&'static str),
    Failed(String),
}

/// Has `guest` quiesce its browsers and export the home under `authority`, and commits the
/// archive as the next revision of `key`.
pub async fn checkpoint(
    guest: &Guest,
    homes: &HomeService,
    id: &ComputerId,
    key: &HomeKey,
    authority: HomeAuthority,
    cause: homes::cas::Cause,
    progress: &Progress,
) -> Result<Checkpointed, FlowError> {
    // A delta of the latest revision's export, which the guest sends whole if it no longer
    // has that export's stamps (a restarted guest).
    let base = homes.delta_base(key).await?;
    let token: [u8; 16] = rand::random();
    let req = HomeExportRequest {
        quiesce_browsers: true,
        authority,
        token,
        since: base.map(|(_, t)| t),
    };
    let (start, mut archive) = guest.export_home(req).await?;
    let quota = homes.quota();
    if let Some(what) = over_quota(start.content_bytes, start.entries, quota) {
        // Reset at once: the guest stops packing instead of reading it all.
        archive.abort();
        return Err(HomeError::Quota {
            id: id.clone(),
            what,
        }
        .into());
    }
    progress.phase("exporting", start.content_bytes);
    let fault = FaultSlot::default();
    let parser = match base {
        Some(_) => ArchiveParser::delta(quota),
        None => ArchiveParser::new(quota),
    };
    let (reader, counter) = export_reader(archive, progress.clone(), parser, fault.clone());
    let export = homes::store::Export {
        token: hex::encode(token),
        base: base.map(|(rev, _)| rev),
    };
    let committed = homes.commit(key, reader, cause, Some(export)).await;
    // The store saw only an I/O error; what the export itself ran into says more.
    let fault = fault.lock().unwrap_or_else(|e| e.into_inner()).take();
    let revision = match (committed, fault) {
        (Ok(revision), _) => revision,
        (Err(_), Some(ExportFault::Quota(what))) => {
            return Err(HomeError::Quota {
                id: id.clone(),
                what,
            }
            .into());
        }
        (Err(_), Some(ExportFault::Tunnel(e))) => return Err(e.into()),
        (Err(e), None) => return Err(e.into()),
    };
    let bytes = counter.report().done;
    info!(computer_id = %id, store = homes.kind(), revision = revision.get(), bytes,
        "home checkpointed");
    Ok(Checkpointed { revision, bytes })
}

/// The archive of `first` (the latest checkpoint of `key`) with its exact size. The object store
/// knows it from the sealed object's length; otherwise the checkpoint is read once to check and
/// count it, then opened again, which must give the same revision.
pub async fn sized(
    homes: &HomeService,
    key: &HomeKey,
    home_key: &str,
    first: Checkpoint,
    progress: &Progress,
) -> Result<(u64, ArchiveStream), HomeError> {
    if let Some(size) = first.archive_len {
        return Ok((size, first.archive));
    }
    let revision = first.revision;
    progress.phase("verifying", 0);
    let size = drain(
        ArchiveChecker::new(first.archive, Limits::default()),
        progress,
    )
    .await
    .map_err(HomeError::Read)?;
    let Some(second) = homes.open_latest(key).await? else {
        return Err(HomeError::NoHome(home_key.to_owned()));
    };
    if second.revision != revision {
        return Err(HomeError::Changed {
            key: key.to_string(),
            before: revision,
            after: second.revision,
        });
    }
    Ok((size, second.archive))
}

/// Streams `archive` of exactly `size` bytes into `guest`'s import under `authority`.
pub async fn import(
    guest: &Guest,
    key: &HomeKey,
    size: u64,
    archive: ArchiveStream,
    authority: HomeAuthority,
    progress: &Progress,
) -> Result<Imported, FlowError> {
    progress.phase("importing", size);
    // Checked on the way too, so a bad archive names its fault here and not only in the guest.
    let checker = ArchiveChecker::new(archive, Limits::default());
    let counted = progress.clone();
    let pieces = chunks(checker).inspect(move |piece| {
        if let Ok(piece) = piece {
            counted.add(piece.len() as u64);
        }
    });
    let req = HomeImportRequest { size, authority };
    match guest.import_home(req, pieces).await {
        Ok(imported) => Ok(imported),
        // The guest sees the reset and writes nothing.
        Err(SendError::Source { error, .. }) => Err(HomeError::Read(error).into()),
        Err(SendError::TooLong) => Err(HomeError::Read(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("checkpoint of {key} grew past the {size} bytes verified"),
        ))
        .into()),
        Err(SendError::TooShort { sent }) => Err(HomeError::Read(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("checkpoint of {key} ended after {sent} of {size} bytes verified"),
        ))
        .into()),
        Err(SendError::Tunnel(e)) => Err(e.into()),
    }
}

/// How a home of `bytes` of content in `entries` entries passes `quota`, if it does.
fn over_quota(bytes: u64, entries: u64, quota: Limits) -> Option<String> {
    if bytes > quota.max_bytes {
        Some(format!(
            "it holds {} of files, more than the {} allowed",
            size(bytes),
            size(quota.max_bytes)
        ))
    } else if entries > quota.max_entries {
        Some(format!(
            "it holds {entries} entries, more than the {} allowed",
            quota.max_entries
        ))
    } else {
        None
    }
}

/// A byte count for people: exact bytes, with GiB or MiB beside them.
fn size(bytes: u64) -> String {
    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;
    if bytes >= GIB {
        format!("{bytes} bytes ({:.1} GiB)", bytes as f64 / GIB as f64)
    } else if bytes >= MIB {
        format!("{bytes} bytes ({:.1} MiB)", bytes as f64 / MIB as f64)
    } else {
        format!("{bytes} bytes")
    }
}

/// What stopped an export, as the flow reports it (the store sees only an `io::Error`).
enum ExportFault {
    /// The archive's headers broke the quota: why.
    Quota(String),
    /// The tunnel failed: the guest went silent past its deadline, the stream was lost.
    Tunnel(TunnelError),
}

type FaultSlot = Arc<Mutex<Option<ExportFault>>>;

/// The raw bytes of an export as an `AsyncRead`, counted into `progress`. A tunnel failure is an
/// `io::Error`, which fails the commit, and is kept in `fault`. The archive's headers are parsed
/// as they arrive: an entry that passes `quota` fails the stream before any byte of its chunk is
/// handed on, and says why in `fault`.
fn export_reader(
    rx: ExportBytes,
    progress: Progress,
    parser: ArchiveParser,
    fault: FaultSlot,
) -> (impl AsyncRead + Send + Unpin + 'static, Progress) {
    let counter = progress.clone();
    // QUIC hands over about one packet per read: gather them into chunks of up to RAW_CHUNK, so
    // the checker and sealer run on large buffers. Progress is published per MiB, not per packet:
    // every publish wakes the API's watcher.
    let stream =
        futures_util::stream::unfold((Some((rx, parser)), 0u64), move |(state, unreported)| {
            let progress = progress.clone();
            let fault = fault.clone();
            async move {
                let (mut rx, mut parser) = state?;
                let mut buf = BytesMut::new();
                let mut ended = false;
                while buf.len() < RAW_CHUNK {
                    match rx.read(RAW_CHUNK - buf.len()).await {
                        Ok(Some(b)) => buf.extend_from_slice(&b),
                        Ok(None) => {
                            ended = true;
                            break;
                        }
                        Err(e) => {
                            progress.add(unreported);
                            let err = io::Error::other(e.to_string());
                            *fault.lock().unwrap_or_else(|p| p.into_inner()) =
                                Some(ExportFault::Tunnel(e));
                            return Some((Err(err), (None, 0)));
                        }
                    }
                }
                if let Err(e) = parser.feed(&buf) {
                    let why = match e {
                        ArchiveError::TooManyBytes { limit } => Some(format!(
                            "a file's announced size takes it past {} of files",
                            size(limit)
                        )),
                        ArchiveError::TooManyEntries { limit } => {
                            Some(format!("it holds more than {limit} entries"))
                        }
                        _ => None,
                    };
                    if let Some(why) = why {
                        *fault.lock().unwrap_or_else(|p| p.into_inner()) =
                            Some(ExportFault::Quota(why));
                    }
                    // Nothing of this chunk goes on; dropping the stream stops the guest.
                    progress.add(unreported);
                    let err = io::Error::new(io::ErrorKind::InvalidData, e);
                    return Some((Err(err), (None, 0)));
                }
                let mut unreported = unreported + buf.len() as u64;
                if ended || unreported >= PROGRESS_BATCH {
                    progress.add(unreported);
                    unreported = 0;
                }
                if ended {
                    // The whole archive is in hand: what remains is the store's (the last parts,
                    // completing the upload, advancing the revision).
                    let exported = progress.report().done;
                    progress.phase("committing", exported);
                    progress.add(exported);
                }
                if buf.is_empty() {
                    return None;
                }
                let next = (!ended).then_some((rx, parser));
                Some((Ok::<Bytes, io::Error>(buf.freeze()), (next, unreported)))
            }
        });
    (StreamReader::new(Box::pin(stream)), counter)
}

/// `r` in chunks of [`RAW_CHUNK`] (see [`read_chunk`]) until its end or its first error.
fn chunks<R: AsyncRead + Unpin>(r: R) -> impl futures_util::Stream<Item = io::Result<Bytes>> {
    futures_util::stream::unfold(Some(r), |r| async move {
        let mut r = r?;
        match read_chunk(&mut r).await {
            Ok(buf) if buf.is_empty() => None,
            Ok(buf) => Some((Ok(buf.freeze()), Some(r))),
            Err(e) => Some((Err(e), None)),
        }
    })
}

/// Up to [`RAW_CHUNK`] bytes of `r`, as many as it has: a short chunk only at its end. quinn
/// keeps each chunk it was handed, allocation and all, until the guest acknowledges it, so a
/// half-empty buffer would cost its whole capacity for up to a stream window of data.
async fn read_chunk<R: AsyncRead + Unpin>(r: &mut R) -> io::Result<BytesMut> {
    let mut buf = BytesMut::with_capacity(RAW_CHUNK);
    while buf.len() < RAW_CHUNK {
        if r.read_buf(&mut buf).await? == 0 {
            break;
        }
    }
    Ok(buf)
}

/// Reads `r` to its end, counting bytes into `progress`; returns the count.
async fn drain<R: AsyncRead + Unpin>(mut r: R, progress: &Progress) -> io::Result<u64> {
    let mut buf = vec![0u8; RAW_CHUNK];
    let mut total = 0u64;
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return Ok(total);
        }
        total += n as u64;
        progress.add(n as u64);
    }
}

/// Runs the reconciler once and logs what it did (an error is logged, not fatal: the next run
/// retries, and unowned objects and stale temporary files are only garbage).
pub async fn reconcile_logged(homes: &HomeService) {
    match homes.reconcile().await {
        Ok(super::Reconciled::Object(stats)) => info!(
            kept = stats.kept,
            deleted = stats.deleted,
            foreign = stats.foreign,
            aborted_uploads = stats.aborted,
            abort_failed = stats.abort_failed,
            "home reconciler ran"
        ),
        Ok(super::Reconciled::Local(swept)) => info!(
            temporaries_removed = swept.removed,
            temporaries_young = swept.young,
            temporaries_failed = swept.failed,
            "home reconciler ran"
        ),
        Err(e) => warn!(error = %chain(&e), "home reconciler failed"),
    }
}
