//! The home flows between a guest and the store, as methods of [`Core`]: checkpoint (guest
//! export → seal → store commit) and restore (store → open → guest import), both streaming end
//! to end with bounded memory, plus the rules the §9 triggers in `core` share.
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
//! long fails the checkpoint with `guest_timeout`). The home's lock is a guard, released when
//! the flow returns, whatever it returns.
//!
//! Authority: both requests carry the lease fences the control plane knows for the computer
//! when it opens the stream ([`Core::home_authority`], read after any lease wait), so a guest
//! that knows a newer lease refuses with `stale_lease` before it quiesces or reads anything
//! (guest `fence::FenceTable::check_home`). An import the guest refused may reach us as a stopped
//! stream first: its answer is read then, so the refusal is reported and not a lost tunnel.
//!
//! Restore: the guest protocol wants the archive's exact size first. The object store derives it
//! from the sealed object's length, so the object streams once, straight into the guest's import;
//! a tampered object fails authentication on the way, the stream to the guest is reset, and the
//! guest's staging import writes nothing. The local store packs its tree on the fly and cannot
//! know the size, so its checkpoint is read twice: once to check and count it, then into the
//! guest.

use super::{chain, HomeError, Progress};
use crate::computers::{Computer, ComputerState};
use crate::core::{Core, CoreError, OPERATION_CONNECT_TIMEOUT};
use crate::db::DbError;
use crate::tunnel::{OpReceiver, OpStream, TunnelError};
use bytes::{Bytes, BytesMut};
use gateway_proto::home::{
    HomeAuthority, HomeAuthorityError, HomeExportRequest, HomeImportRequest, LeaseFence,
    MAX_HOME_AUTHORITY,
};
use gateway_proto::{BotId, Reply, Request};
use homes::archive::{ArchiveChecker, ArchiveError, ArchiveParser, Limits};
use homes::Revision;
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
/// How often a checkpoint re-checks other bots' leases while it waits.
const LEASE_POLL: Duration = Duration::from_millis(500);
/// How long an explicit checkpoint or a stop waits for other bots' leases by default.
pub const DEFAULT_LEASE_WAIT: Duration = Duration::from_secs(30);

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

impl RunCheckpoint {
    /// The outcome as the lease release answers it: a failed checkpoint is reported to the run,
    /// not only logged (the previous revision stays current either way).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Self::Saved(done) => serde_json::json!({
                "status": "saved",
                "revision": done.revision.get(),
                "bytes": done.bytes,
            }),
            Self::Deferred(bots) => {
                serde_json::json!({ "status": "deferred", "waiting_for": bots })
            }
            Self::Skipped(why) => serde_json::json!({ "status": "skipped", "reason": why }),
            Self::Failed(error) => serde_json::json!({ "status": "failed", "error": error }),
        }
    }
}

fn protocol(c: &Computer, reply: &Reply) -> CoreError {
    CoreError::Tunnel(TunnelError::Protocol {
        computer: c.id.as_str().to_owned(),
        detail: format!("unexpected reply {reply:?}"),
    })
}

/// A write into the guest's import failed. A guest that refused the import (a stale authority,
/// a size it will not take) answered and stopped reading, so the write sees a lost stream: its
/// answer, read within the reply deadline, says why. Anything else keeps the write's error.
async fn refusal_or(op: &mut OpStream, e: TunnelError) -> CoreError {
    if matches!(e, TunnelError::Lost(_)) {
        if let Ok(Reply::Error(refusal)) = op.rx.expect::<Reply>().await {
            return TunnelError::Guest(refusal).into();
        }
    }
    e.into()
}

impl Core {
    /// Checkpoints `c`'s home now: waits up to `lease_wait` while bots other than those in
    /// `except` hold execution leases, has the guest quiesce its browsers and export, and
    /// commits the stream.
    pub async fn checkpoint_home(
        &self,
        c: &Computer,
        except: &[BotId],
        lease_wait: Duration,
        progress: &Progress,
    ) -> Result<Checkpointed, CoreError> {
        Self::require_running(c)?;
        let _busy = self.homes.lock(&c.id).await;
        if self.restore_pending(c).await? {
            return Err(HomeError::PendingRestore(c.id.clone()).into());
        }
        self.wait_for_leases(c, except, lease_wait, progress)
            .await?;
        let key = self.homes.key_for(c).await?;
        let guest = self
            .registry
            .wait_connected(c.id.as_str(), OPERATION_CONNECT_TIMEOUT)
            .await?;
        let req = Request::HomeExport(HomeExportRequest {
            quiesce_browsers: true,
            authority: self.home_authority(c).await?,
        });
        let mut op = guest.open(&req).await?;
        let quota = self.homes.quota();
        match op.expect::<Reply>().await? {
            Reply::ExportStart(s) => {
                if let Some(what) = over_quota(s.content_bytes, s.entries, quota) {
                    // Reset at once: the guest stops packing instead of reading it all.
                    op.abort();
                    return Err(HomeError::Quota {
                        id: c.id.clone(),
                        what,
                    }
                    .into());
                }
                progress.phase("exporting", s.content_bytes)
            }
            Reply::Error(e) => return Err(TunnelError::Guest(e).into()),
            other => return Err(protocol(c, &other)),
        }
        op.rx.start_raw();
        let fault = FaultSlot::default();
        let (reader, counter) = export_reader(op.rx, progress.clone(), quota, fault.clone());
        let committed = self.homes.commit(&key, reader).await;
        // The store saw only an I/O error; what the export itself ran into says more.
        let fault = fault.lock().unwrap_or_else(|e| e.into_inner()).take();
        let revision = match (committed, fault) {
            (Ok(revision), _) => revision,
            (Err(_), Some(ExportFault::Quota(what))) => {
                return Err(HomeError::Quota {
                    id: c.id.clone(),
                    what,
                }
                .into());
            }
            (Err(_), Some(ExportFault::Tunnel(e))) => return Err(e.into()),
            (Err(e), None) => return Err(e.into()),
        };
        let bytes = counter.report().done;
        info!(computer_id = %c.id, store = self.homes.kind(), revision = revision.get(), bytes,
            "home checkpointed");
        Ok(Checkpointed { revision, bytes })
    }

    /// Restores the latest stored home of the running computer `c` into its guest; `None` when
    /// the store has none. Clears the computer's pending-restore mark on success (or when there
    /// is nothing to restore).
    pub async fn restore_home(
        &self,
        c: &Computer,
        progress: &Progress,
    ) -> Result<Option<Restored>, CoreError> {
        Self::require_running(c)?;
        self.restore_into(c, progress).await
    }

    /// [`Core::restore_home`] without the state check: `boot` restores a fresh machine while the
    /// computer is still `provisioning`, so nothing else reaches its empty home first.
    pub(crate) async fn restore_into(
        &self,
        c: &Computer,
        progress: &Progress,
    ) -> Result<Option<Restored>, CoreError> {
        let _busy = self.homes.lock(&c.id).await;
        let key = self.homes.key_for(c).await?;
        let Some(first) = self.homes.open_latest(&key).await? else {
            self.homes
                .ledger()
                .set_pending_restore(&c.id, false)
                .await
                .map_err(HomeError::from)?;
            return Ok(None);
        };
        let revision = first.revision;
        let (size, archive) = match first.archive_len {
            // The object store knows the length from the sealed object's: one pass.
            Some(size) => (size, first.archive),
            None => {
                progress.phase("verifying", 0);
                let size = drain(
                    ArchiveChecker::new(first.archive, Limits::default()),
                    progress,
                )
                .await
                .map_err(HomeError::Read)?;
                let Some(second) = self.homes.open_latest(&key).await? else {
                    return Err(HomeError::NoHome(c.home_key.clone()).into());
                };
                if second.revision != revision {
                    return Err(HomeError::Changed {
                        key: key.to_string(),
                        before: revision,
                        after: second.revision,
                    }
                    .into());
                }
                (size, second.archive)
            }
        };
        let guest = self
            .registry
            .wait_connected(c.id.as_str(), OPERATION_CONNECT_TIMEOUT)
            .await?;
        let req = Request::HomeImport(HomeImportRequest {
            size,
            authority: self.home_authority(c).await?,
        });
        let mut op = guest.open(&req).await?;
        progress.phase("importing", size);
        // Checked on the way too, so a bad archive names its fault here and not only in the guest.
        let mut archive = ArchiveChecker::new(archive, Limits::default());
        let mut sent: u64 = 0;
        loop {
            let buf = match read_chunk(&mut archive).await {
                Ok(buf) => buf,
                Err(e) => {
                    // The guest sees the reset and writes nothing.
                    op.abort();
                    return Err(HomeError::Read(e).into());
                }
            };
            let n = buf.len();
            if n == 0 {
                break;
            }
            sent += n as u64;
            if sent > size {
                op.abort();
                return Err(HomeError::Read(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("checkpoint of {key} grew past the {size} bytes verified"),
                ))
                .into());
            }
            if let Err(e) = op.tx.write_raw(buf.freeze()).await {
                return Err(refusal_or(&mut op, e).await);
            }
            progress.add(n as u64);
        }
        if sent != size {
            op.abort();
            return Err(HomeError::Read(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("checkpoint of {key} ended after {sent} of {size} bytes verified"),
            ))
            .into());
        }
        if let Err(e) = op.tx.finish() {
            return Err(refusal_or(&mut op, e).await);
        }
        let imported = match op.rx.expect::<Reply>().await? {
            Reply::Imported(i) => i,
            Reply::Error(e) => return Err(TunnelError::Guest(e).into()),
            other => return Err(protocol(c, &other)),
        };
        self.homes
            .ledger()
            .set_pending_restore(&c.id, false)
            .await
            .map_err(HomeError::from)?;
        info!(computer_id = %c.id, store = self.homes.kind(), revision = revision.get(),
            bytes = sent, "home restored");
        Ok(Some(Restored {
            revision,
            bytes: sent,
            content_bytes: imported.content_bytes,
            entries: imported.entries,
        }))
    }

    /// The run-completion trigger (§9): after `bot`'s lease is released, save the home unless
    /// another bot still holds a lease (the last run to finish saves it).
    pub(crate) async fn checkpoint_after_run(&self, c: &Computer, bot: &BotId) -> RunCheckpoint {
        if c.state != ComputerState::Running || self.registry.get(c.id.as_str()).is_none() {
            return RunCheckpoint::Skipped("the guest is not connected");
        }
        match self.homes.ledger().pending_restore(&c.id).await {
            Ok(false) => {}
            Ok(true) => return RunCheckpoint::Skipped("the stored home was not restored yet"),
            Err(e) => return RunCheckpoint::Failed(chain(&e)),
        }
        match self
            .homes
            .ledger()
            .live_lease_holders(&c.id, &[bot.as_str()], crate::clock::now_ms())
            .await
        {
            Ok(bots) if !bots.is_empty() => return RunCheckpoint::Deferred(bots),
            Ok(_) => {}
            Err(e) => return RunCheckpoint::Failed(chain(&e)),
        }
        match self
            .checkpoint_home(
                c,
                std::slice::from_ref(bot),
                Duration::ZERO,
                &Progress::new(),
            )
            .await
        {
            Ok(done) => RunCheckpoint::Saved(done),
            Err(e) => RunCheckpoint::Failed(chain(&e)),
        }
    }

    /// The before-stop trigger (§9). An error refuses the stop, so the machine keeps running
    /// with its home and the previous checkpoint stays current. Without a connected guest (or
    /// before the stored home was restored) there is nothing newer to save: the stop proceeds.
    pub(crate) async fn checkpoint_before_stop(&self, c: &Computer) -> Result<(), CoreError> {
        if c.state != ComputerState::Running || self.registry.get(c.id.as_str()).is_none() {
            info!(computer_id = %c.id, "stopping without a checkpoint: the guest is not connected");
            return Ok(());
        }
        if self.restore_pending(c).await? {
            info!(computer_id = %c.id, "stopping without a checkpoint: the stored home was never restored");
            return Ok(());
        }
        match self
            .checkpoint_home(c, &[], DEFAULT_LEASE_WAIT, &Progress::new())
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                warn!(computer_id = %c.id, error = %chain(&e), "checkpoint before stop failed; not stopping");
                Err(e)
            }
        }
    }

    /// What a home export or import of `c` acts under: the latest lease fence of every bot the
    /// lease store knows on it, read now (after any wait for leases), so the guest can refuse an
    /// operation begun before a lease it has already been told of.
    pub(crate) async fn home_authority(&self, c: &Computer) -> Result<HomeAuthority, CoreError> {
        let rows = self
            .homes
            .ledger()
            .lease_fences(&c.id)
            .await
            .map_err(HomeError::from)?;
        let mut fences = Vec::with_capacity(rows.len().min(MAX_HOME_AUTHORITY));
        for (bot, fence) in rows {
            let corrupt = |reason: String| {
                HomeError::from(DbError::corrupt(
                    "leases",
                    format!("{}/{bot}", c.id),
                    reason,
                ))
            };
            let id = BotId::new(bot.as_str()).map_err(|e| corrupt(e.to_string()))?;
            let fence = u64::try_from(fence).map_err(|_| corrupt(format!("fence is {fence}")))?;
            fences.push(LeaseFence { bot: id, fence });
        }
        let count = fences.len();
        HomeAuthority::new(fences).map_err(|e| match e {
            HomeAuthorityError::TooMany(_) => HomeError::TooManyLeases {
                id: c.id.clone(),
                count,
                max: MAX_HOME_AUTHORITY,
            }
            .into(),
            // (computer, bot) is the lease table's key: a bot twice is a broken database.
            HomeAuthorityError::Duplicate(_) => {
                HomeError::from(DbError::corrupt("leases", c.id.as_str(), e.to_string())).into()
            }
        })
    }

    /// Whether `c`'s machine has not imported its stored home yet.
    async fn restore_pending(&self, c: &Computer) -> Result<bool, CoreError> {
        let pending = self.homes.ledger().pending_restore(&c.id).await;
        Ok(pending.map_err(HomeError::from)?)
    }

    /// Checkpoints and restores need the computer's guest: refuse at once when it is not running.
    fn require_running(c: &Computer) -> Result<(), CoreError> {
        if c.state == ComputerState::Running {
            Ok(())
        } else {
            Err(CoreError::NotRunning {
                id: c.id.as_str().to_owned(),
                state: c.state,
            })
        }
    }

    /// Waits while bots other than `except` hold execution leases on `c`, up to `wait`.
    async fn wait_for_leases(
        &self,
        c: &Computer,
        except: &[BotId],
        wait: Duration,
        progress: &Progress,
    ) -> Result<(), CoreError> {
        let polls = wait.as_millis() / LEASE_POLL.as_millis();
        let except: Vec<&str> = except.iter().map(BotId::as_str).collect();
        for poll in 0..=polls {
            let bots = self
                .homes
                .ledger()
                .live_lease_holders(&c.id, &except, crate::clock::now_ms())
                .await
                .map_err(HomeError::from)?;
            if bots.is_empty() {
                return Ok(());
            }
            if poll == polls {
                return Err(HomeError::LeasesHeld {
                    id: c.id.clone(),
                    bots,
                }
                .into());
            }
            if poll == 0 {
                progress.phase("waiting", 0);
                info!(computer_id = %c.id, ?bots, "checkpoint waits for other bots' leases");
            }
            tokio::time::sleep(LEASE_POLL).await;
        }
        Ok(())
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
    rx: OpReceiver,
    progress: Progress,
    quota: Limits,
    fault: FaultSlot,
) -> (impl AsyncRead + Send + Unpin + 'static, Progress) {
    let counter = progress.clone();
    let parser = ArchiveParser::new(quota);
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
                    match rx.read_raw(RAW_CHUNK - buf.len()).await {
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

impl Core {
    /// Logs what the run-completion trigger did: a failure is a WARN naming the computer, never
    /// dropped; the previous revision stays current.
    pub(crate) fn log_run_checkpoint(&self, c: &Computer, bot: &BotId, outcome: &RunCheckpoint) {
        match outcome {
            RunCheckpoint::Saved(_) => {}
            RunCheckpoint::Deferred(bots) => {
                info!(computer_id = %c.id, bot = %bot, ?bots, "checkpoint deferred: other bots still hold leases")
            }
            RunCheckpoint::Skipped(why) => {
                info!(computer_id = %c.id, bot = %bot, why, "checkpoint after the run skipped")
            }
            RunCheckpoint::Failed(error) => {
                warn!(computer_id = %c.id, bot = %bot, error, "checkpoint after the run failed; the previous revision stays current")
            }
        }
    }
}

/// Runs the reconciler once and logs what it did (an error is logged, not fatal: the next run
/// retries, and unowned objects are only garbage).
pub async fn reconcile_logged(core: &Core) {
    match core.homes.reconcile().await {
        Ok(Some(stats)) => info!(
            kept = stats.kept,
            deleted = stats.deleted,
            foreign = stats.foreign,
            aborted_uploads = stats.aborted,
            abort_failed = stats.abort_failed,
            "home reconciler ran"
        ),
        Ok(None) => {}
        Err(e) => warn!(error = %chain(&e), "home reconciler failed"),
    }
}
