//! `/v1/computers/{id}/home…` and `/v1/homes…`: checkpoints, restores and browsing of stored
//! homes (docs/homes.md).
//!
//! - `POST /v1/computers/{id}/home/checkpoint[?wait_ms=N]` and `POST …/home/restore` answer
//!   NDJSON: `progress` lines (`phase`, `done`, `total` bytes) while the flow runs, then exactly one
//!   `done` (with the revision) or `error` line. The flow runs to its end even if the client goes
//!   away, so a checkpoint is never abandoned half-way by a dropped connection.
//! - `GET /v1/computers/{id}/home`: the store, revision and whether a restore is pending.
//! - `GET …/home/entries[?prefix=&limit=]` and `GET …/home/content?path=`: the latest checkpoint's
//!   entries, and one file's bytes streamed out of it, without a guest (a stopped computer works).
//! - `POST /v1/homes/reconcile`: run the reconciler now. `DELETE /v1/homes/{home_key}`: purge a
//!   home no live computer holds (its objects become unreadable, then are deleted).

use super::body::{forward, json_response, ApiError, ChannelBody, RespBody, PUMP_CHUNK};
use super::Api;
use crate::core::{Core, CoreError};
use crate::homes::browse::{clean_path, Walker};
use crate::homes::flow::DEFAULT_LEASE_WAIT;
use crate::homes::{chain, HomeError, Progress, ProgressReport};
use crate::metrics::{LateOutcome, Outcome};
use crate::schema::activity::Cause;
use crate::schema::code::ApiCode;
use crate::schema::error::ErrorInfo;
use crate::schema::files::{Entry, EntryKind};
use crate::schema::home::{
    HomeChange, HomeDiff, HomeDone, HomeEntries, HomeInfo, HomeLine, HomeRevision, HomeRevisions,
    Purged, Reconciled,
};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{header, Response, StatusCode};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tracing::{info, warn};

/// Longest lease wait a caller may ask for: 10 minutes.
const MAX_WAIT_MS: u64 = 10 * 60 * 1000;
/// Entries listed when no limit is given, and the most a caller may ask for.
const DEFAULT_LIST_LIMIT: usize = 10_000;
const MAX_LIST_LIMIT: usize = 100_000;
/// A progress line at least every this many bytes (and on every phase change).
const PROGRESS_STEP: u64 = 8 << 20;

type Out = mpsc::Sender<Result<Bytes, std::io::Error>>;

fn line(value: &HomeLine) -> Bytes {
    let mut v = serde_json::to_vec(value).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

fn progress_line(r: &ProgressReport) -> Bytes {
    line(&HomeLine::Progress {
        phase: r.phase.to_string(),
        done: r.done,
        total: r.total,
    })
}

/// The API shape of a home error. Store failures carry their cause chain: it names objects and
/// checks (authentication failed, truncated), never keys or credentials.
pub fn home_error(e: HomeError) -> ApiError {
    let msg = chain(&e);
    match e {
        HomeError::PendingRestore(_) => ApiError::new(ApiCode::HomePendingRestore, msg),
        HomeError::LeasesHeld { .. } => ApiError::new(ApiCode::HomeLeasesHeld, msg),
        HomeError::Changed { .. } => ApiError::new(ApiCode::HomeChanged, msg),
        HomeError::InUse(..) => ApiError::new(ApiCode::HomeInUse, msg),
        HomeError::TooManyLeases { .. } => ApiError::new(ApiCode::HomeTooManyLeases, msg),
        HomeError::Quota { .. } => ApiError::new(ApiCode::HomeQuotaExceeded, msg),
        HomeError::NoHome(_) | HomeError::NoSuchPath(_) | HomeError::NoRevision(_) => {
            ApiError::new(ApiCode::NotFound, msg)
        }
        HomeError::NotIncremental => ApiError::new(ApiCode::HomeNotIncremental, msg),
        HomeError::Exists(_) => ApiError::new(ApiCode::Exists, msg),
        HomeError::Db(d) => ApiError::db(&d),
        HomeError::BadKey(..) => ApiError::internal(msg),
        // The control plane's own disk (the local store) is full: say so, it is not the data.
        HomeError::Store(s) if homes::out_of_space(&s) => ApiError::new(
            ApiCode::HomeStoreFailed,
            format!("the home store is out of space; free space on its disk and try again: {msg}"),
        ),
        HomeError::Store(_) | HomeError::Archive(_) | HomeError::Read(_) => {
            ApiError::new(ApiCode::HomeStoreFailed, msg)
        }
    }
}

fn error_line(e: ApiError) -> Bytes {
    line(&HomeLine::Error(ErrorInfo {
        code: e.code.to_string(),
        message: e.message,
        uncertain: e.uncertain,
    }))
}

/// Which progress lines a reader sends: the final reading of every phase that ended (even one
/// that began and ended between two reads), the first reading of each new phase, and within a
/// phase one every [`PROGRESS_STEP`] bytes.
#[derive(Default)]
struct ProgressLines {
    last: Option<ProgressReport>,
}

impl ProgressLines {
    fn next(&mut self, progress: &Progress, r: ProgressReport, last_word: bool) -> Vec<Bytes> {
        let mut lines = Vec::new();
        if self.last.is_none_or(|l| l.seq != r.seq) {
            // The final reading of the phase last reported (unless that very reading was sent)
            // and of every later phase that ended before `r`'s.
            let seen = self.last.map_or(0, |l| l.seq);
            lines.extend(
                progress
                    .ended_since(seen)
                    .iter()
                    .filter(|e| e.seq < r.seq && Some(**e) != self.last)
                    .map(progress_line),
            );
        }
        let due = last_word
            || match self.last {
                None => true,
                Some(l) => l.seq != r.seq || r.done >= l.done.saturating_add(PROGRESS_STEP),
            };
        if due {
            self.last = Some(r);
            lines.push(progress_line(&r));
        }
        lines
    }
}

/// Runs a flow in its own task and answers NDJSON progress, then its outcome.
fn ndjson_flow<F>(
    progress: Progress,
    flow: F,
    done: impl FnOnce(F::Output) -> (Bytes, Outcome) + Send + 'static,
) -> Response<RespBody>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let mut rx = progress.subscribe();
    let mut job = tokio::spawn(flow);
    let (tx, body) = ChannelBody::new(16);
    // The flow's outcome, told after the 200, is the operation's in the metrics.
    let late = LateOutcome::default();
    let told = late.clone();
    tokio::spawn(async move {
        let out: Out = tx;
        let mut lines = ProgressLines::default();
        let mut client = true;
        loop {
            tokio::select! {
                result = &mut job => {
                    let (final_line, outcome) = match result {
                        Ok(v) => done(v),
                        Err(e) => (error_line(ApiError::internal(format!("home flow task failed: {e}"))), Outcome::Failed),
                    };
                    told.set(outcome);
                    if client {
                        let r = *rx.borrow();
                        for l in lines.next(&progress, r, true) {
                            if out.send(Ok(l)).await.is_err() {
                                return;
                            }
                        }
                        let _ = out.send(Ok(final_line)).await;
                    }
                    return;
                }
                changed = rx.changed(), if client => {
                    if changed.is_err() {
                        continue;
                    }
                    let r = *rx.borrow_and_update();
                    for l in lines.next(&progress, r, false) {
                        // A client that went away stops the lines, not the flow.
                        client = out.send(Ok(l)).await.is_ok();
                        if !client {
                            break;
                        }
                    }
                }
            }
        }
    });
    let mut resp = Response::new(body.boxed());
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/x-ndjson"),
    );
    resp.extensions_mut().insert(late);
    resp
}

fn wait_of(q: &HashMap<String, String>) -> Result<Duration, ApiError> {
    match q.get("wait_ms") {
        None => Ok(DEFAULT_LEASE_WAIT),
        Some(v) => match v.parse::<u64>() {
            Ok(ms) if ms <= MAX_WAIT_MS => Ok(Duration::from_millis(ms)),
            _ => Err(ApiError::bad_request(format!(
                "wait_ms must be 0..={MAX_WAIT_MS}"
            ))),
        },
    }
}

fn outcome_line(r: Result<HomeDone, CoreError>) -> (Bytes, Outcome) {
    match r {
        Ok(done) => (line(&HomeLine::Done(done)), Outcome::Ok),
        Err(e) => {
            let e: ApiError = e.into();
            let outcome = Outcome::of_status(e.status().as_u16(), e.uncertain);
            (error_line(e), outcome)
        }
    }
}

pub async fn checkpoint(
    api: &Arc<Api>,
    id: &str,
    q: &HashMap<String, String>,
) -> Result<Response<RespBody>, ApiError> {
    let wait = wait_of(q)?;
    let c = api.core.get(id).await?;
    let core: Arc<Core> = api.core.clone();
    let progress = Progress::new();
    let p = progress.clone();
    let flow = async move {
        let r = core
            .checkpoint_home(&c, &[], wait, homes::cas::Cause::Manual, &p)
            .await;
        match &r {
            Err(e) => {
                warn!(computer_id = %c.id, error = %chain(e), "home checkpoint failed; the previous revision stays current");
            }
            Ok(done) => {
                core.record_checkpoint(&c, done, Cause::User, "checkpointed by a user")
                    .await;
            }
        }
        r.map(|d| HomeDone {
            revision: Some(d.revision.get()),
            bytes: Some(d.bytes),
            content_bytes: None,
            entries: None,
        })
    };
    Ok(ndjson_flow(progress, flow, outcome_line))
}

pub async fn restore(
    api: &Arc<Api>,
    id: &str,
    q: &HashMap<String, String>,
) -> Result<Response<RespBody>, ApiError> {
    let revision = revision_of(q, "revision")?;
    if let Some(n) = revision {
        // An unknown revision is refused before the flow starts (and saves anything).
        let key = stored_key(api, id).await?;
        let revs = api.core.homes.revisions(&key).await.map_err(home_error)?;
        if !revs.iter().any(|r| r.revision == n) {
            return Err(home_error(HomeError::NoRevision(n)));
        }
    }
    let c = api.core.get(id).await?;
    let core: Arc<Core> = api.core.clone();
    let progress = Progress::new();
    let p = progress.clone();
    let flow = async move {
        let r = match revision {
            Some(n) => core.restore_revision(&c, n, &p).await,
            None => core.restore_home(&c, &p).await,
        };
        match &r {
            // A revision gone meanwhile (collected, or the home purged): the caller's to fix.
            Err(e @ CoreError::Home(HomeError::NoRevision(_))) => {
                info!(computer_id = %c.id, error = %chain(e), "home restore refused; nothing was written");
            }
            Err(e) => {
                warn!(computer_id = %c.id, error = %chain(e), "home restore failed; nothing was written");
            }
            Ok(_) => {}
        }
        r.map(|d| HomeDone {
            revision: d.map(|d| d.revision.get()),
            bytes: d.map(|d| d.bytes),
            content_bytes: d.map(|d| d.content_bytes),
            entries: d.map(|d| d.entries),
        })
    };
    Ok(ndjson_flow(progress, flow, outcome_line))
}

pub async fn show(api: &Arc<Api>, id: &str) -> Result<Response<RespBody>, ApiError> {
    let c = api.core.get(id).await?;
    let homes = &api.core.homes;
    let key = homes.existing_key(&c).await.map_err(home_error)?;
    let revision = match &key {
        Some(k) => homes.current_revision(k).await.map_err(home_error)?,
        None => None,
    };
    let pending = homes
        .ledger()
        .pending_restore(&c.id)
        .await
        .map_err(|e| home_error(e.into()))?;
    let info = HomeInfo {
        computer: c.id.as_str().to_string(),
        home_key: c.home_key,
        store: homes.kind().to_string(),
        format: homes.format().to_string(),
        revision: revision.map(|r| r.get()),
        pending_restore: pending,
    };
    Ok(json_response(StatusCode::OK, &info))
}

/// The store key of `id`'s home, which must have been checkpointed.
async fn stored_key(api: &Arc<Api>, id: &str) -> Result<homes::HomeKey, ApiError> {
    let c = api.core.get(id).await?;
    api.core
        .homes
        .existing_key(&c)
        .await
        .map_err(home_error)?
        .ok_or_else(|| home_error(HomeError::NoHome(c.home_key.clone())))
}

/// The walker over revision `revision` (default: the latest checkpoint) of `id`'s home.
async fn open_walker(
    api: &Arc<Api>,
    id: &str,
    revision: Option<u64>,
) -> Result<Walker<homes::store::ArchiveStream>, ApiError> {
    let homes = &api.core.homes;
    let key = stored_key(api, id).await?;
    let cp = match revision {
        Some(n) => homes.open_revision(&key, n).await.map_err(home_error)?,
        None => homes
            .open_latest(&key)
            .await
            .map_err(home_error)?
            .ok_or_else(|| home_error(HomeError::NoHome(key.to_string())))?,
    };
    Walker::new(cp.archive).await.map_err(home_error)
}

/// An optional revision number of the query.
fn revision_of(q: &HashMap<String, String>, name: &str) -> Result<Option<u64>, ApiError> {
    match q.get(name) {
        None => Ok(None),
        Some(v) => match v.parse::<u64>() {
            Ok(n) if n >= 1 => Ok(Some(n)),
            _ => Err(ApiError::bad_request(format!(
                "{name} must be a revision number (1 or more)"
            ))),
        },
    }
}

/// The listing limit of the query.
fn limit_of(q: &HashMap<String, String>) -> Result<usize, ApiError> {
    match q.get("limit") {
        None => Ok(DEFAULT_LIST_LIMIT),
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=MAX_LIST_LIMIT).contains(&n) => Ok(n),
            _ => Err(ApiError::bad_request(format!(
                "limit must be 1..={MAX_LIST_LIMIT}"
            ))),
        },
    }
}

pub async fn revisions(api: &Arc<Api>, id: &str) -> Result<Response<RespBody>, ApiError> {
    Ok(json_response(StatusCode::OK, &revisions_of(api, id).await?))
}

/// The revisions of `id`'s home (HTTP and MCP).
pub async fn revisions_of(api: &Arc<Api>, id: &str) -> Result<HomeRevisions, ApiError> {
    let key = stored_key(api, id).await?;
    let revs = api.core.homes.revisions(&key).await.map_err(home_error)?;
    let listed = HomeRevisions {
        revisions: revs
            .into_iter()
            .map(|r| HomeRevision {
                revision: r.revision,
                parent: r.parent,
                at_ms: r.at_ms,
                cause: serde_json::to_value(r.cause)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                files: r.files,
                size: r.size,
                new_bytes: r.new_bytes,
                stored_bytes: r.stored_bytes,
            })
            .collect(),
    };
    Ok(listed)
}

pub async fn diff(
    api: &Arc<Api>,
    id: &str,
    q: &HashMap<String, String>,
) -> Result<Response<RespBody>, ApiError> {
    let need = |name| {
        revision_of(q, name)?.ok_or_else(|| ApiError::bad_request(format!("{name} is required")))
    };
    let (from, to) = (need("from")?, need("to")?);
    let limit = limit_of(q)?;
    Ok(json_response(
        StatusCode::OK,
        &diff_of(api, id, from, to, limit).await?,
    ))
}

/// What changed in `id`'s home from revision `from` to `to` (HTTP and MCP).
pub async fn diff_of(
    api: &Arc<Api>,
    id: &str,
    from: u64,
    to: u64,
    limit: usize,
) -> Result<HomeDiff, ApiError> {
    let key = stored_key(api, id).await?;
    let found = api
        .core
        .homes
        .read(&key, move |repo| repo.diff(from, to, limit))
        .await
        .map_err(home_error)?;
    let (changes, truncated) = found.ok_or_else(|| home_error(HomeError::NoRevision(from)))?;
    let body = HomeDiff {
        from,
        to,
        changes: changes
            .into_iter()
            .map(|d| HomeChange {
                path: d.path,
                dir: d.dir,
                change: match d.change {
                    homes::cas::Change::Added => "added",
                    homes::cas::Change::Removed => "removed",
                    homes::cas::Change::Changed => "changed",
                }
                .to_owned(),
            })
            .collect(),
        truncated,
    };
    Ok(body)
}

pub async fn entries(
    api: &Arc<Api>,
    id: &str,
    q: &HashMap<String, String>,
) -> Result<Response<RespBody>, ApiError> {
    let prefix = clean_path(q.get("prefix").map(String::as_str).unwrap_or(""));
    let limit = limit_of(q)?;
    let revision = revision_of(q, "revision")?;
    let mut walker = open_walker(api, id, revision).await?;
    let mut out = Vec::new();
    let mut truncated = false;
    while let Some(e) = walker.next().await.map_err(home_error)? {
        let inside = prefix.is_empty()
            || e.path == prefix
            || e.path
                .strip_prefix(prefix.as_str())
                .is_some_and(|r| r.starts_with('/'));
        if !inside {
            continue;
        }
        if out.len() == limit {
            truncated = true;
            break;
        }
        out.push(Entry {
            path: e.path,
            kind: if e.dir {
                EntryKind::Dir
            } else {
                EntryKind::File
            },
            size: e.size,
            executable: e.executable,
        });
    }
    let listed = HomeEntries {
        entries: out,
        truncated,
    };
    Ok(json_response(StatusCode::OK, &listed))
}

pub async fn content(
    api: &Arc<Api>,
    id: &str,
    q: &HashMap<String, String>,
) -> Result<Response<RespBody>, ApiError> {
    let path = clean_path(q.get("path").map(String::as_str).unwrap_or(""));
    if path.is_empty() {
        return Err(ApiError::bad_request("path is required"));
    }
    let revision = revision_of(q, "revision")?;
    let mut walker = open_walker(api, id, revision).await?;
    let size = loop {
        match walker.next().await.map_err(home_error)? {
            Some(e) if e.path == path && !e.dir => break e.size,
            Some(e) if e.path == path => {
                return Err(ApiError::bad_request(format!("{path:?} is a directory")))
            }
            Some(_) => continue,
            None => return Err(home_error(HomeError::NoSuchPath(path))),
        }
    };
    let (tx, body) = ChannelBody::new(8);
    tokio::spawn(async move {
        let mut buf = vec![0u8; PUMP_CHUNK];
        loop {
            let read = walker.read_content(&mut buf).await;
            let read = read.map_err(|e| std::io::Error::other(chain(&e)));
            if !forward(&tx, read, &buf).await {
                return;
            }
        }
    });
    let mut resp = Response::new(body.boxed());
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/octet-stream"),
    );
    resp.headers_mut()
        .insert(header::CONTENT_LENGTH, header::HeaderValue::from(size));
    Ok(resp)
}

pub async fn reconcile(api: &Arc<Api>) -> Result<Response<RespBody>, ApiError> {
    let stats = api.core.homes.reconcile().await.map_err(home_error)?;
    let body = match stats {
        crate::homes::Reconciled::Object(s) => Reconciled::Object {
            kept: s.kept,
            deleted: s.deleted,
            foreign: s.foreign,
            aborted_uploads: s.aborted,
            abort_failed: s.abort_failed,
        },
        crate::homes::Reconciled::Local(s) => Reconciled::Local {
            temporaries_removed: s.removed,
            temporaries_young: s.young,
            temporaries_failed: s.failed,
        },
    };
    Ok(json_response(StatusCode::OK, &body))
}

pub async fn purge(api: &Arc<Api>, home_key: &str) -> Result<Response<RespBody>, ApiError> {
    let core = &api.core;
    let Some(holder) = core
        .homes
        .ledger()
        .holder_of(home_key)
        .await
        .map_err(|e| home_error(e.into()))?
    else {
        return local_purge(api, home_key).await;
    };
    let c = core
        .computers
        .get(&holder)
        .await
        .map_err(|e| ApiError::from(CoreError::from(e)))?
        .ok_or_else(|| ApiError::not_found(format!("home {home_key} not found")))?;
    if c.state != crate::computers::ComputerState::Destroyed {
        return Err(home_error(HomeError::InUse(home_key.to_owned(), c.id)));
    }
    let key = core
        .homes
        .existing_key(&c)
        .await
        .map_err(home_error)?
        .ok_or_else(|| ApiError::not_found(format!("home {home_key} not found")))?;
    core.homes.purge(&key).await.map_err(home_error)?;
    Ok(purged(home_key))
}

fn purged(home_key: &str) -> Response<RespBody> {
    tracing::info!(home_key, "stored home purged");
    let body = Purged {
        purged: home_key.to_string(),
    };
    json_response(StatusCode::OK, &body)
}

/// The local store keys homes by home key; purging one needs no computer row.
async fn local_purge(api: &Arc<Api>, home_key: &str) -> Result<Response<RespBody>, ApiError> {
    let core = &api.core;
    if core.homes.kind() != "local" {
        return Err(ApiError::not_found(format!("home {home_key} not found")));
    }
    if let Some(c) = core
        .list()
        .await?
        .into_iter()
        .find(|c| c.home_key == home_key)
    {
        return Err(home_error(HomeError::InUse(home_key.to_owned(), c.id)));
    }
    let key = homes::HomeKey::new(home_key)
        .map_err(|e| ApiError::bad_request(format!("home key: {e}")))?;
    core.homes.purge(&key).await.map_err(home_error)?;
    Ok(purged(home_key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phases(lines: &[Bytes]) -> Vec<(String, u64)> {
        lines
            .iter()
            .map(|l| match serde_json::from_slice(l).expect("json line") {
                HomeLine::Progress { phase, done, .. } => (phase, done),
                other => panic!("not a progress line: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_phase_the_reader_never_saw_still_gets_its_line() {
        let p = Progress::new();
        let mut lines = ProgressLines::default();
        p.phase("verifying", 0);
        p.add(5);
        p.phase("importing", 5);
        p.add(5);
        // The reader wakes up only now, when the flow is already importing.
        let got = phases(&lines.next(&p, p.report(), false));
        assert_eq!(got, [("verifying".into(), 5), ("importing".into(), 5)]);
        // Ending: the last reading again, nothing repeated from before.
        let got = phases(&lines.next(&p, p.report(), true));
        assert_eq!(got, [("importing".into(), 5)]);
    }

    #[test]
    fn within_a_phase_lines_come_every_step_and_the_phase_end_is_reported() {
        let p = Progress::new();
        let mut lines = ProgressLines::default();
        p.phase("exporting", 0);
        assert_eq!(lines.next(&p, p.report(), false).len(), 1);
        p.add(1);
        assert!(lines.next(&p, p.report(), false).is_empty());
        p.add(PROGRESS_STEP);
        assert_eq!(lines.next(&p, p.report(), false).len(), 1);
        p.add(3);
        p.phase("importing", 9);
        let got = phases(&lines.next(&p, p.report(), false));
        assert_eq!(
            got,
            [
                ("exporting".into(), PROGRESS_STEP + 4),
                ("importing".into(), 0)
            ]
        );
    }
}
