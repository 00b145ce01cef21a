//! The object store: each checkpoint is one sealed object `homes/<storage id>/<revision>` in an
//! S3-compatible bucket, read and written through aws-sdk-s3 (docs/homes.md#object-store).
//!
//! A commit streams the archive through the format checker ([`crate::archive::ArchiveChecker`])
//! and the sealer into a multipart upload (parts of `part_size`, at most `parts_in_flight`
//! uploading at once, so memory stays near `(parts_in_flight + 1) * part_size`), then advances
//! the [`RevisionLedger`] from the previous revision to the new one (a compare-and-set), and only
//! then deletes the previous object. A failure before the advance leaves the previous revision
//! current and the new object (if any) an orphan; [`ObjectHomeStore::reconcile`] deletes orphans.
//! Every S3 failure is returned as an error: a commit that returns `Ok` is in the bucket and in the
//! ledger.
//!
//! A multipart upload is recorded in the ledger ([`PendingUpload`]) before its first part goes out
//! and cleared after it is completed or aborted. A commit that never gets to either (the process
//! was killed, or the commit future dropped) leaves the record behind, and the reconciler aborts
//! the upload, which deletes its parts: listing objects never shows parts, and S3-compatible
//! servers need not list multipart uploads (s3s-fs does not).
//!
//! Configuration comes from the caller ([`ObjectStoreConfig`]); nothing here reads the
//! environment. Credentials are static keys; there is no `aws-config` chain.

use super::keys::{object_key, parse_object_key, OBJECT_PREFIX};
use super::ledger::{LedgerEntry, LedgerError, PendingUpload, RevisionLedger, UploadId};
use super::locks::KeyLocks;
use super::{Checkpoint, Guarded, HomeStore, HomeStoreError};
use crate::archive::{ArchiveChecker, Limits};
use crate::seal::{
    plaintext_len, unwrap_data_key, wrap_data_key, ContentKey, DataKey, OpenReader, SealReader,
};
use crate::{HomeKey, Revision};
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use aws_sdk_s3::Client;
use std::collections::HashSet;
use std::fmt;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinSet;

/// Smallest part S3 accepts (all parts but the last).
pub const MIN_PART_SIZE: usize = 5 << 20;
/// Default part size: large enough for throughput, small enough for bounded memory.
pub const DEFAULT_PART_SIZE: usize = 8 << 20;
/// Most parts of one multipart upload (an S3 limit).
pub const MAX_PARTS: i32 = 10_000;

/// Where the bucket is and how to reach it.
#[derive(Clone)]
pub struct ObjectStoreConfig {
    /// `None` for AWS itself; e.g. `http://127.0.0.1:8014` for a local S3-compatible server.
    pub endpoint: Option<String>,
    pub region: String,
    pub bucket: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    /// Path-style addressing (`endpoint/bucket/key`), which most S3-compatible servers need.
    pub force_path_style: bool,
    /// Bytes per multipart part; raised to [`MIN_PART_SIZE`] if lower.
    pub part_size: usize,
    /// Parts uploading at once.
    pub parts_in_flight: usize,
    /// Limits the archive of a commit must stay within.
    pub limits: Limits,
    /// How long one attempt of an incremental repository's request may take before it is
    /// abandoned and tried again (`DEFAULT_ATTEMPT_TIMEOUT`, 60 s, unless set).
    pub attempt_timeout: std::time::Duration,
}

/// How long one attempt of an incremental repository's bucket request may take, unless
/// configured otherwise.
pub const DEFAULT_ATTEMPT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

impl ObjectStoreConfig {
    /// A configuration with default part size (8 MiB), 2 parts in flight and default limits.
    pub fn new(
        bucket: impl Into<String>,
        region: impl Into<String>,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
    ) -> Self {
        Self {
            endpoint: None,
            region: region.into(),
            bucket: bucket.into(),
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            force_path_style: false,
            part_size: DEFAULT_PART_SIZE,
            parts_in_flight: 2,
            limits: Limits::default(),
            attempt_timeout: DEFAULT_ATTEMPT_TIMEOUT,
        }
    }
}

impl fmt::Debug for ObjectStoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStoreConfig")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("bucket", &self.bucket)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"***")
            .field("force_path_style", &self.force_path_style)
            .field("part_size", &self.part_size)
            .field("parts_in_flight", &self.parts_in_flight)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("limits", &self.limits)
            .finish()
    }
}

/// What [`ObjectHomeStore::reconcile`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReconcileStats {
    pub kept: u64,
    pub deleted: u64,
    /// Objects under `homes/` whose names this store never writes; left alone.
    pub foreign: u64,
    /// Recorded multipart uploads of commits no longer running, aborted (or found already gone)
    /// and forgotten.
    pub aborted: u64,
    /// Recorded uploads whose abort failed; they stay recorded for the next run.
    pub abort_failed: u64,
}

/// The S3 client of `config`: rustls on ring, path style when asked, checksums only where
/// required (everything stored is sealed).
pub(crate) fn s3_client(config: &ObjectStoreConfig) -> Client {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let credentials = Credentials::new(
        config.access_key_id.clone(),
        config.secret_access_key.clone(),
        None,
        None,
        "rakazo-config",
    );
    let mut builder = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(config.region.clone()))
        .credentials_provider(credentials)
        .force_path_style(config.force_path_style)
        // Checkpoints are sealed: AES-GCM authenticates every byte end to end, which a SigV4
        // payload hash and a CRC per part would only repeat at full-body cost (each a pass
        // over every byte on both ends). Requests are still signed.
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
        .http_client(http);
    if let Some(endpoint) = &config.endpoint {
        builder = builder.endpoint_url(endpoint.clone());
    }
    Client::from_conf(builder.build())
}

/// Keeps each home's latest checkpoint sealed in an S3-compatible bucket.
pub struct ObjectHomeStore<L> {
    client: Client,
    bucket: String,
    content_key: ContentKey,
    ledger: L,
    locks: KeyLocks,
    part_size: usize,
    parts_in_flight: usize,
    limits: Limits,
}

fn s3_err<E>(op: &'static str, object: &str, e: E) -> HomeStoreError
where
    E: std::error::Error + Send + Sync + 'static,
{
    HomeStoreError::S3 {
        op,
        object: object.to_owned(),
        source: Box::new(e),
    }
}

impl<L: RevisionLedger> ObjectHomeStore<L> {
    /// A store on the bucket `config` names. `content_key` wraps every home's data key; `ledger`
    /// records revisions and wrapped keys.
    pub fn new(config: &ObjectStoreConfig, content_key: ContentKey, ledger: L) -> Self {
        Self {
            client: s3_client(config),
            bucket: config.bucket.clone(),
            content_key,
            ledger,
            locks: KeyLocks::default(),
            part_size: config.part_size.max(MIN_PART_SIZE),
            parts_in_flight: config.parts_in_flight.max(1),
            limits: config.limits,
        }
    }

    /// The S3 client (for tests and tools that inspect the bucket).
    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    pub fn ledger(&self) -> &L {
        &self.ledger
    }

    fn ledger_err(home: &HomeKey) -> impl FnOnce(LedgerError) -> HomeStoreError + '_ {
        move |source| HomeStoreError::Ledger {
            home: home.clone(),
            source,
        }
    }

    /// The home's data key and wrapped form, and its current revision; a fresh key for a home
    /// the ledger does not know.
    async fn key_of(&self, home: &HomeKey) -> Result<(DataKey, LedgerEntry), HomeStoreError> {
        match self
            .ledger
            .load(home)
            .await
            .map_err(Self::ledger_err(home))?
        {
            Some(entry) => {
                let key = unwrap_data_key(&self.content_key, home, &entry.wrapped_key).map_err(
                    |source| HomeStoreError::Seal {
                        home: home.clone(),
                        source,
                    },
                )?;
                Ok((key, entry))
            }
            None => {
                let key = DataKey::generate();
                let wrapped_key = wrap_data_key(&self.content_key, home, &key);
                Ok((
                    key,
                    LedgerEntry {
                        revision: None,
                        wrapped_key,
                    },
                ))
            }
        }
    }

    async fn delete_object(&self, object: &str) -> Result<(), HomeStoreError> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(object)
            .send()
            .await
            .map_err(|e| s3_err("delete", object, e))?;
        Ok(())
    }

    /// Uploads `body` as `object`: one PUT if it fits in a part, else a multipart upload that is
    /// aborted on any failure.
    async fn upload<R>(
        &self,
        home: &HomeKey,
        mut body: R,
        object: &str,
    ) -> Result<(), HomeStoreError>
    where
        R: AsyncRead + Unpin,
    {
        let read_err = |source| HomeStoreError::Read {
            home: home.clone(),
            source,
        };
        let first = read_part(&mut body, self.part_size)
            .await
            .map_err(read_err)?;
        if first.len() < self.part_size {
            self.client
                .put_object()
                .bucket(&self.bucket)
                .key(object)
                .body(ByteStream::from(first))
                .customize()
                .disable_payload_signing()
                .send()
                .await
                .map_err(|e| s3_err("put", object, e))?;
            return Ok(());
        }
        let created = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(object)
            .send()
            .await
            .map_err(|e| s3_err("create multipart upload", object, e))?;
        let raw_id = created
            .upload_id()
            .ok_or_else(|| s3_err("create multipart upload", object, MissingField("UploadId")))?;
        let pending = match UploadId::new(raw_id)
            .and_then(|id| PendingUpload::new(home.clone(), object, id))
        {
            Ok(p) => p,
            Err(e) => {
                // It cannot be recorded, so abort it now or never; S3 only reads the id back.
                warn_unaborted(object, self.abort_raw(object, raw_id).await.map(drop));
                return Err(s3_err("create multipart upload", object, e));
            }
        };
        // Recorded before the first part goes out: if this process dies from here on, the record
        // is how the reconciler finds the parts.
        if let Err(source) = self.ledger.record_upload(&pending).await {
            warn_unaborted(object, self.abort_upload(&pending).await);
            return Err(HomeStoreError::Ledger {
                home: home.clone(),
                source,
            });
        }
        let upload_id = pending.upload_id().as_str();
        let result = match self
            .upload_parts(home, &mut body, object, upload_id, first)
            .await
        {
            Ok(parts) => self
                .client
                .complete_multipart_upload()
                .bucket(&self.bucket)
                .key(object)
                .upload_id(upload_id)
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(parts))
                        .build(),
                )
                .send()
                .await
                .map(drop)
                .map_err(|e| s3_err("complete multipart upload", object, e)),
            Err(e) => Err(e),
        };
        match &result {
            Ok(()) => {
                // Only bookkeeping: a record left behind makes the reconciler abort a completed
                // upload, which S3 answers with NoSuchUpload and leaves the object alone.
                if let Err(e) = self.ledger.clear_upload(&pending).await {
                    tracing::warn!(object, error = %crate::error_chain(&e),
                        "cannot clear the record of a completed multipart upload");
                }
            }
            // On failure the record stays and the reconciler tries again.
            Err(_) => warn_unaborted(object, self.abort_upload(&pending).await),
        }
        result
    }

    /// Aborts a recorded multipart upload, which deletes its parts, then forgets the record. An
    /// upload S3 no longer knows (`NoSuchUpload`: completed or aborted already) counts as aborted.
    /// S3 may still store a part that was uploading while the abort ran; callers make sure
    /// nothing is (the home's lock, or the process that uploaded is gone).
    async fn abort_upload(&self, upload: &PendingUpload) -> Result<(), HomeStoreError> {
        let object = upload.object();
        if self.abort_raw(object, upload.upload_id().as_str()).await? {
            tracing::info!(object, upload_id = %upload.upload_id(),
                "multipart upload was already gone");
        }
        self.ledger
            .clear_upload(upload)
            .await
            .map_err(Self::ledger_err(upload.home()))
    }

    /// Aborts the multipart upload `upload_id` of `object`; `NoSuchUpload` counts as aborted and
    /// answers `true`. The id is not logged here: it may be one S3 sent that failed validation.
    async fn abort_raw(&self, object: &str, upload_id: &str) -> Result<bool, HomeStoreError> {
        let aborted = self
            .client
            .abort_multipart_upload()
            .bucket(&self.bucket)
            .key(object)
            .upload_id(upload_id)
            .send()
            .await;
        match aborted {
            Ok(_) => Ok(false),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_upload()) => Ok(true),
            Err(e) => Err(s3_err("abort multipart upload", object, e)),
        }
    }

    async fn upload_parts<R>(
        &self,
        home: &HomeKey,
        body: &mut R,
        object: &str,
        upload_id: &str,
        first: Vec<u8>,
    ) -> Result<Vec<CompletedPart>, HomeStoreError>
    where
        R: AsyncRead + Unpin,
    {
        let mut tasks: JoinSet<Result<CompletedPart, HomeStoreError>> = JoinSet::new();
        let result = self
            .send_parts(home, body, object, upload_id, first, &mut tasks)
            .await;
        if result.is_err() {
            // Let the parts already on their way finish (at most `parts_in_flight`), so that the
            // abort which follows finds every part S3 will store: a part still uploading while
            // an upload is aborted may be stored after it.
            while tasks.join_next().await.is_some() {}
        }
        result
    }

    async fn send_parts<R>(
        &self,
        home: &HomeKey,
        body: &mut R,
        object: &str,
        upload_id: &str,
        first: Vec<u8>,
        tasks: &mut JoinSet<Result<CompletedPart, HomeStoreError>>,
    ) -> Result<Vec<CompletedPart>, HomeStoreError>
    where
        R: AsyncRead + Unpin,
    {
        let mut parts = Vec::new();
        let mut next = first;
        let mut number: i32 = 0;
        while !next.is_empty() {
            number += 1;
            if number > MAX_PARTS {
                return Err(s3_err("upload part", object, MissingField("part budget")));
            }
            while tasks.len() >= self.parts_in_flight {
                parts.push(join_part(home, tasks).await?);
            }
            let request = self
                .client
                .upload_part()
                .bucket(&self.bucket)
                .key(object)
                .upload_id(upload_id)
                .part_number(number)
                .body(ByteStream::from(std::mem::take(&mut next)));
            let object = object.to_owned();
            tasks.spawn(async move {
                let out = request
                    .customize()
                    .disable_payload_signing()
                    .send()
                    .await
                    .map_err(|e| s3_err("upload part", &object, e))?;
                let e_tag = out
                    .e_tag()
                    .ok_or_else(|| s3_err("upload part", &object, MissingField("ETag")))?;
                Ok(CompletedPart::builder()
                    .e_tag(e_tag)
                    .part_number(number)
                    .build())
            });
            // The next part is read while the previous ones upload.
            next =
                read_part(body, self.part_size)
                    .await
                    .map_err(|source| HomeStoreError::Read {
                        home: home.clone(),
                        source,
                    })?;
        }
        while !tasks.is_empty() {
            parts.push(join_part(home, tasks).await?);
        }
        parts.sort_by_key(|p| p.part_number());
        Ok(parts)
    }

    /// Aborts every multipart upload the ledger records that no commit of this process is
    /// running, then deletes every object under `homes/` that neither `owned` nor the ledger
    /// (checked again under the home's lock, so a commit that advanced after `owned` was taken is
    /// safe) says is a home's current checkpoint. Objects whose names this store never writes are
    /// left alone. A failed abort is logged and counted (`abort_failed`), and the record kept for
    /// the next run; any other failure ends the run with an error.
    ///
    /// Commits in other processes are not locked out: run the reconciler where the commits run
    /// (it would abort another process's live upload and delete its finished, not yet recorded
    /// object), or only while no other process can be committing.
    pub async fn reconcile(
        &self,
        owned: &HashSet<(HomeKey, Revision)>,
    ) -> Result<ReconcileStats, HomeStoreError> {
        let mut stats = ReconcileStats::default();
        self.abort_abandoned_uploads(&mut stats).await?;
        let mut token: Option<String> = None;
        loop {
            let page = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(OBJECT_PREFIX)
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| s3_err("list", OBJECT_PREFIX, e))?;
            for object in page.contents() {
                let Some(key) = object.key() else { continue };
                let Some((home, revision)) = parse_object_key(key) else {
                    stats.foreign += 1;
                    continue;
                };
                if owned.contains(&(home.clone(), revision)) {
                    stats.kept += 1;
                    continue;
                }
                let _guard = self.locks.write(&home).await;
                if self
                    .ledger
                    .busy_elsewhere(&home)
                    .await
                    .map_err(Self::ledger_err(&home))?
                {
                    stats.kept += 1;
                    continue;
                }
                let entry = self
                    .ledger
                    .load(&home)
                    .await
                    .map_err(Self::ledger_err(&home))?;
                if entry.and_then(|e| e.revision) == Some(revision) {
                    stats.kept += 1;
                    continue;
                }
                tracing::info!(object = key, "deleting an unowned home checkpoint");
                self.delete_object(key).await?;
                stats.deleted += 1;
            }
            match page.next_continuation_token() {
                Some(t) if page.is_truncated() == Some(true) => token = Some(t.to_owned()),
                _ => return Ok(stats),
            }
        }
    }
}

impl<L: RevisionLedger> ObjectHomeStore<L> {
    /// The reconciler's first half: aborts recorded uploads whose commit is not running.
    async fn abort_abandoned_uploads(
        &self,
        stats: &mut ReconcileStats,
    ) -> Result<(), HomeStoreError> {
        let recorded = self
            .ledger
            .pending_uploads()
            .await
            .map_err(HomeStoreError::PendingUploads)?;
        for upload in recorded {
            // A commit holds its home's write lock from before it records its upload until after
            // it has cleared it. Under the lock, an upload still recorded belongs to no running
            // commit of this process: it is what a killed process or a dropped commit left.
            let _guard = self.locks.write(upload.home()).await;
            let still = self
                .ledger
                .pending_uploads()
                .await
                .map_err(HomeStoreError::PendingUploads)?
                .contains(&upload);
            // Another replica's commit of this home may be writing it.
            let busy = self
                .ledger
                .busy_elsewhere(upload.home())
                .await
                .map_err(HomeStoreError::PendingUploads)?;
            if !still || busy {
                continue;
            }
            tracing::info!(object = upload.object(), upload_id = %upload.upload_id(),
                "aborting an abandoned multipart upload");
            match self.abort_upload(&upload).await {
                Ok(()) => stats.aborted += 1,
                Err(e) => {
                    tracing::warn!(object = upload.object(), upload_id = %upload.upload_id(),
                        error = %crate::error_chain(&e),
                        "cannot abort an abandoned multipart upload; it stays recorded");
                    stats.abort_failed += 1;
                }
            }
        }
        Ok(())
    }
}

/// Logs an abort of a failed upload that did not go through (the reconciler tries again when the
/// upload is recorded).
fn warn_unaborted(object: &str, aborted: Result<(), HomeStoreError>) {
    if let Err(e) = aborted {
        tracing::warn!(object, error = %crate::error_chain(&e),
            "cannot abort a failed multipart upload");
    }
}

async fn join_part(
    home: &HomeKey,
    tasks: &mut JoinSet<Result<CompletedPart, HomeStoreError>>,
) -> Result<CompletedPart, HomeStoreError> {
    match tasks.join_next().await {
        Some(Ok(part)) => part,
        Some(Err(source)) => Err(HomeStoreError::Task {
            home: home.clone(),
            source,
        }),
        None => Err(HomeStoreError::S3 {
            op: "upload part",
            object: home.to_string(),
            source: Box::new(MissingField("part task")),
        }),
    }
}

/// A field the S3 server should have returned but did not.
#[derive(Debug, thiserror::Error)]
#[error("response lacks {0}")]
struct MissingField(&'static str);

/// Reads up to `size` bytes (fewer only at end of stream).
async fn read_part<R: AsyncRead + Unpin>(r: &mut R, size: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(size);
    while buf.len() < size {
        let want = (size - buf.len()) as u64;
        if (&mut *r).take(want).read_buf(&mut buf).await? == 0 {
            break;
        }
    }
    Ok(buf)
}

impl<L: RevisionLedger> HomeStore for ObjectHomeStore<L> {
    async fn commit<R>(&self, home: &HomeKey, archive: R) -> Result<Revision, HomeStoreError>
    where
        R: AsyncRead + Send + Unpin + 'static,
    {
        let _guard = self.locks.write(home).await;
        let (data_key, entry) = self.key_of(home).await?;
        let current = entry.revision;
        let next = Revision::after(current);
        let object = object_key(home, next);
        let checked = ArchiveChecker::new(archive, self.limits);
        let sealed = SealReader::new(checked, &data_key, home, next);
        self.upload(home, sealed, &object).await?;
        let advanced = LedgerEntry {
            revision: Some(next),
            wrapped_key: entry.wrapped_key,
        };
        match self.ledger.advance(home, current, &advanced).await {
            Ok(()) => {}
            Err(source @ LedgerError::Conflict { .. }) => {
                // Definitely not recorded: the object is ours to remove.
                if let Err(e) = self.delete_object(&object).await {
                    tracing::warn!(object, error = %e, "cannot remove an unrecorded checkpoint");
                }
                return Err(HomeStoreError::Ledger {
                    home: home.clone(),
                    source,
                });
            }
            // Maybe recorded: keep the object; the reconciler removes it if it was not.
            Err(source) => {
                return Err(HomeStoreError::Ledger {
                    home: home.clone(),
                    source,
                })
            }
        }
        if let Some(previous) = current {
            let old = object_key(home, previous);
            // The new revision is recorded; a leftover old object is only garbage, which the
            // reconciler removes.
            if let Err(e) = self.delete_object(&old).await {
                tracing::warn!(object = old, error = %e, "cannot delete a superseded checkpoint");
            }
        }
        Ok(next)
    }

    async fn open_latest(&self, home: &HomeKey) -> Result<Option<Checkpoint>, HomeStoreError> {
        let guard = self.locks.read(home).await;
        let Some(entry) = self
            .ledger
            .load(home)
            .await
            .map_err(Self::ledger_err(home))?
        else {
            return Ok(None);
        };
        let Some(revision) = entry.revision else {
            return Ok(None);
        };
        let key =
            unwrap_data_key(&self.content_key, home, &entry.wrapped_key).map_err(|source| {
                HomeStoreError::Seal {
                    home: home.clone(),
                    source,
                }
            })?;
        let object = object_key(home, revision);
        let out = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&object)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => {
                return Err(HomeStoreError::MissingObject {
                    home: home.clone(),
                    revision,
                    object,
                })
            }
            Err(e) => return Err(s3_err("get", &object, e)),
        };
        let archive_len = out
            .content_length()
            .and_then(|n| u64::try_from(n).ok())
            .and_then(|n| plaintext_len(n, home));
        let reader = OpenReader::new(out.body.into_async_read(), &key, home, revision);
        Ok(Some(Checkpoint {
            revision,
            archive: Box::pin(Guarded {
                inner: reader,
                _guard: guard,
            }),
            archive_len,
        }))
    }

    async fn current_revision(&self, home: &HomeKey) -> Result<Option<Revision>, HomeStoreError> {
        let _guard = self.locks.read(home).await;
        let entry = self
            .ledger
            .load(home)
            .await
            .map_err(Self::ledger_err(home))?;
        Ok(entry.and_then(|e| e.revision))
    }

    async fn delete(&self, home: &HomeKey) -> Result<(), HomeStoreError> {
        let _guard = self.locks.write(home).await;
        // Forget first: from then on every object of the home is unowned, so one this delete
        // fails to remove is still the reconciler's.
        self.ledger
            .forget(home)
            .await
            .map_err(Self::ledger_err(home))?;
        let prefix = format!("{OBJECT_PREFIX}{home}/");
        let mut token: Option<String> = None;
        loop {
            let page = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(&prefix)
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| s3_err("list", &prefix, e))?;
            for object in page.contents() {
                if let Some(key) = object.key() {
                    self.delete_object(key).await?;
                }
            }
            match page.next_continuation_token() {
                Some(t) if page.is_truncated() == Some(true) => token = Some(t.to_owned()),
                _ => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_debug_hides_the_secret() {
        let c = ObjectStoreConfig::new("b", "us-east-1", "AKID", "very-secret");
        assert!(!format!("{c:?}").contains("very-secret"));
    }
}
