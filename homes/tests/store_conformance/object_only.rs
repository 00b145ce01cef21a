//! Object-store cases: tampering with the stored object, the reconciler, S3 failures.

use super::*;
use aws_sdk_s3::primitives::ByteStream;
use homes::seal::{HEADER_FIXED_LEN, SEGMENT_SIZE, TAG_LEN};
use homes::store::{object_key, PendingUpload};
use homes::{LedgerEntry, LedgerError, RevisionLedger};
use std::collections::HashSet;

const SEG: usize = SEGMENT_SIZE + TAG_LEN;

async fn get(f: &ObjectFixture, object: &str) -> Vec<u8> {
    let out = f
        .store
        .client()
        .get_object()
        .bucket(BUCKET)
        .key(object)
        .send()
        .await
        .unwrap();
    out.body.collect().await.unwrap().to_vec()
}

async fn put(f: &ObjectFixture, object: &str, bytes: Vec<u8>) {
    f.store
        .client()
        .put_object()
        .bucket(BUCKET)
        .key(object)
        .body(ByteStream::from(bytes))
        .send()
        .await
        .unwrap();
}

async fn objects(f: &ObjectFixture) -> Vec<String> {
    let out = f
        .store
        .client()
        .list_objects_v2()
        .bucket(BUCKET)
        .send()
        .await
        .unwrap();
    let mut keys: Vec<String> = out
        .contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_owned))
        .collect();
    keys.sort();
    keys
}

/// Commits a sample home (several segments) to `home`.
async fn commit_sample(f: &ObjectFixture, home: &HomeKey, seed: u64) -> Revision {
    let tmp = tempfile::tempdir().unwrap();
    write_sample_home(tmp.path()).unwrap();
    std::fs::write(tmp.path().join("seed"), noise(200_000, seed)).unwrap();
    f.store
        .commit(home, pack_reader(tmp.path().to_path_buf()))
        .await
        .unwrap()
}

/// Restores `home` over an existing target and expects a failure mentioning `want`, with
/// the target and its directory exactly as before.
async fn expect_restore_fails(
    store: &ObjectHomeStore<MemRevisionLedger>,
    home: &HomeKey,
    want: &str,
) {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("home");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("sentinel"), b"before").unwrap();
    let before = manifest(tmp.path()).unwrap();
    let result = match store.open_latest(home).await {
        Ok(cp) => {
            let cp = cp.expect("a checkpoint");
            restore_async(cp.archive, target.clone(), UnpackOptions::default())
                .await
                .map(drop)
                .map_err(|e| support::chain(&e))
        }
        Err(e) => Err(support::chain(&e)),
    };
    let err = result.expect_err("restore must fail");
    assert!(err.contains(want), "expected {want:?} in: {err}");
    assert_eq!(
        manifest(tmp.path()).unwrap(),
        before,
        "restore wrote something"
    );
}

fn header_len(home: &HomeKey) -> usize {
    HEADER_FIXED_LEN + home.as_str().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tamper_flipped_bit() {
    let f = ObjectFixture::start().await.unwrap();
    let home = key("team-w1");
    let rev = commit_sample(&f, &home, 1).await;
    let object = object_key(&home, rev);
    let mut bytes = get(&f, &object).await;
    let at = header_len(&home) + 2 * SEG + 1234;
    bytes[at] ^= 0x10;
    put(&f, &object, bytes).await;
    expect_restore_fails(
        &f.store,
        &home,
        "segment 2 of home team-w1 revision 1 failed authentication",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tamper_truncated_object() {
    let f = ObjectFixture::start().await.unwrap();
    let home = key("team-w1");
    let rev = commit_sample(&f, &home, 1).await;
    let object = object_key(&home, rev);
    let mut bytes = get(&f, &object).await;
    bytes.truncate(header_len(&home) + 3 * SEG);
    put(&f, &object, bytes).await;
    expect_restore_fails(&f.store, &home, "is truncated after 3 segments").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tamper_swapped_segments() {
    let f = ObjectFixture::start().await.unwrap();
    let home = key("team-w1");
    let rev = commit_sample(&f, &home, 1).await;
    let object = object_key(&home, rev);
    let mut bytes = get(&f, &object).await;
    let start = header_len(&home) + SEG;
    let (one, two) = bytes[start..start + 2 * SEG].split_at_mut(SEG);
    one.swap_with_slice(two);
    put(&f, &object, bytes).await;
    expect_restore_fails(
        &f.store,
        &home,
        "segment 1 of home team-w1 revision 1 failed authentication",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tamper_older_revision_presented_as_newer() {
    let f = ObjectFixture::start().await.unwrap();
    let home = key("team-w1");
    let old = commit_sample(&f, &home, 1).await;
    let old_bytes = get(&f, &object_key(&home, old)).await;
    let new = commit_sample(&f, &home, 2).await;
    put(&f, &object_key(&home, new), old_bytes.clone()).await;
    expect_restore_fails(&f.store, &home, "is revision 1, expected revision 2").await;
    // With the header's revision rewritten, authentication fails instead.
    let mut forged = old_bytes;
    forged[14..22].copy_from_slice(&new.get().to_be_bytes());
    put(&f, &object_key(&home, new), forged).await;
    expect_restore_fails(
        &f.store,
        &home,
        "segment 0 of home team-w1 revision 2 failed authentication",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tamper_another_homes_key_or_object() {
    let f = ObjectFixture::start().await.unwrap();
    let (a, b) = (key("bot-aa"), key("bot-bb"));
    let ra = commit_sample(&f, &a, 1).await;
    let rb = commit_sample(&f, &b, 2).await;
    // Home a's object under home b's name.
    let a_bytes = get(&f, &object_key(&a, ra)).await;
    put(&f, &object_key(&b, rb), a_bytes.clone()).await;
    expect_restore_fails(
        &f.store,
        &b,
        "belongs to home \"bot-aa\", expected home bot-bb",
    )
    .await;
    // ... with the header rewritten to say bot-bb: a's data key is not b's.
    let mut forged = a_bytes;
    forged[HEADER_FIXED_LEN..HEADER_FIXED_LEN + 6].copy_from_slice(b"bot-bb");
    put(&f, &object_key(&b, rb), forged).await;
    expect_restore_fails(
        &f.store,
        &b,
        "segment 0 of home bot-bb revision 1 failed authentication",
    )
    .await;
    // Home a's wrapped key copied onto home b's row: it is bound to a's storage id.
    let a_entry = f.store.ledger().load(&a).await.unwrap().unwrap();
    let b_entry = LedgerEntry {
        revision: Some(rb),
        wrapped_key: a_entry.wrapped_key,
    };
    f.store
        .ledger()
        .advance(&b, Some(rb), &b_entry)
        .await
        .unwrap();
    expect_restore_fails(&f.store, &b, "data key of home bot-bb does not unwrap").await;
    // Another space's content key cannot open anything.
    let other = f.store_with(ContentKey::generate());
    other
        .ledger()
        .advance(&a, None, &f.store.ledger().load(&a).await.unwrap().unwrap())
        .await
        .unwrap();
    expect_restore_fails(&other, &a, "does not unwrap").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_delete_the_previous_object() {
    let f = ObjectFixture::start().await.unwrap();
    let home = key("bot-1");
    for content in [b"1", b"2", b"3"] {
        f.store.commit(&home, small(content)).await.unwrap();
    }
    assert_eq!(objects(&f).await, vec!["homes/bot-1/3".to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_deletes_objects_no_computer_owns() {
    let f = ObjectFixture::start().await.unwrap();
    let (a, b) = (key("bot-a"), key("bot-b"));
    f.store.commit(&a, small(b"a1")).await.unwrap();
    let ra = f.store.commit(&a, small(b"a2")).await.unwrap();
    let rb = f.store.commit(&b, small(b"b1")).await.unwrap();
    // Orphans: an upload that finished but was never recorded (a kill -9 between upload and
    // ledger advance), an object of a deleted computer, and a name we never write.
    put(&f, "homes/bot-a/7", b"orphan".to_vec()).await;
    put(&f, "homes/gone/3", b"orphan".to_vec()).await;
    put(&f, "homes/not-ours", b"foreign".to_vec()).await;
    let owned: HashSet<_> = [(a.clone(), ra), (b.clone(), rb)].into_iter().collect();
    assert_eq!(owned, f.store.ledger().owned());
    let stats = f.store.reconcile(&owned).await.unwrap();
    assert_eq!((stats.kept, stats.deleted, stats.foreign), (2, 2, 1));
    assert_eq!(
        objects(&f).await,
        vec!["homes/bot-a/2", "homes/bot-b/1", "homes/not-ours"]
    );
    // An owned set read before a commit advanced does not lose the new checkpoint: the
    // ledger is checked again under the home's lock.
    let stale: HashSet<_> = [(a.clone(), ra)].into_iter().collect();
    let rb2 = f.store.commit(&b, small(b"b2")).await.unwrap();
    let stats = f.store.reconcile(&stale).await.unwrap();
    assert_eq!(stats.deleted, 0);
    let tmp = tempfile::tempdir().unwrap();
    let cp = f.store.open_latest(&b).await.unwrap().unwrap();
    assert_eq!(cp.revision, rb2);
    assert_eq!(restore_small(cp, &tmp.path().join("b")).await, b"b2");
}

/// An archive stream that fails after `n` good bytes, like a guest that dies mid-export.
struct FailAfter(Cursor<Vec<u8>>);

impl tokio::io::AsyncRead for FailAfter {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.0.position() as usize >= self.0.get_ref().len() {
            return std::task::Poll::Ready(Err(std::io::Error::other("guest went away")));
        }
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_upload_keeps_the_previous_revision() {
    let f = ObjectFixture::start().await.unwrap();
    let home = key("bot-1");
    f.store.commit(&home, small(b"good")).await.unwrap();
    // 12 MiB of a valid archive, then an error: two parts are uploaded before it fails.
    let partial = RawArchive::new()
        .file(b"big", false, &noise(16 << 20, 1))
        .unfinished();
    let err = f
        .store
        .commit(&home, FailAfter(Cursor::new(partial[..12 << 20].to_vec())))
        .await
        .unwrap_err();
    assert!(
        support::chain(&err).contains("guest went away"),
        "{}",
        support::chain(&err)
    );
    assert_eq!(
        f.store.current_revision(&home).await.unwrap(),
        Some(Revision::FIRST)
    );
    assert_eq!(objects(&f).await, vec!["homes/bot-1/1"]);
    // The failed commit aborted its upload itself: no parts, no record.
    assert_eq!(f.s3.upload_files(), Vec::<String>::new());
    assert_eq!(f.store.ledger().pending_uploads().await.unwrap(), vec![]);
    let tmp = tempfile::tempdir().unwrap();
    let cp = f.store.open_latest(&home).await.unwrap().unwrap();
    assert_eq!(restore_small(cp, &tmp.path().join("x")).await, b"good");
}

/// An archive stream that gives its first `stop_at` bytes, then waits for `gate` before the
/// rest: a guest still exporting (gate later opened) or a commit that never finishes.
struct Gated {
    data: Cursor<Vec<u8>>,
    stop_at: u64,
    gate: Option<tokio::sync::oneshot::Receiver<()>>,
}

impl Gated {
    fn new(data: Vec<u8>, stop_at: usize) -> (Self, tokio::sync::oneshot::Sender<()>) {
        let (open, gate) = tokio::sync::oneshot::channel();
        let gated = Self {
            data: Cursor::new(data),
            stop_at: stop_at as u64,
            gate: Some(gate),
        };
        (gated, open)
    }
}

impl tokio::io::AsyncRead for Gated {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        let this = &mut *self;
        if let Some(gate) = &mut this.gate {
            let left = this.stop_at.saturating_sub(this.data.position());
            if left == 0 {
                match std::pin::Pin::new(gate).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(())) => this.gate = None,
                    Poll::Ready(Err(_)) => {
                        return Poll::Ready(Err(std::io::Error::other("gate dropped")))
                    }
                }
            } else {
                let n = buf
                    .remaining()
                    .min(usize::try_from(left).unwrap_or(usize::MAX));
                let mut limited = tokio::io::ReadBuf::new(buf.initialize_unfilled_to(n));
                std::task::ready!(std::pin::Pin::new(&mut this.data).poll_read(cx, &mut limited))?;
                let filled = limited.filled().len();
                buf.advance(filled);
                return Poll::Ready(Ok(()));
            }
        }
        std::pin::Pin::new(&mut this.data).poll_read(cx, buf)
    }
}

use std::future::Future as _;

/// A 16 MiB archive whose first 11 MiB seal into two full 5 MiB parts and part of a third.
fn three_part_archive() -> (Vec<u8>, usize) {
    let bytes = RawArchive::new()
        .file(b"big", false, &noise(16 << 20, 9))
        .end();
    (bytes, 11 << 20)
}

/// Waits until s3s-fs holds parts 1 and 2 of an upload: both written and renamed into place,
/// so no request of the upload is still in flight. Polls (readiness, not timing); the bound
/// only turns a hang into a failure.
async fn two_parts_stored(s3: &S3sFs) -> Vec<String> {
    for _ in 0..3000 {
        let files = s3.upload_files();
        let has = |n: &str| files.iter().any(|f| f.ends_with(n));
        if has(".part-1") && has(".part-2") {
            return files;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("parts 1 and 2 never appeared: {:?}", s3.upload_files());
}

/// The crash case: a commit dropped in the middle of its multipart upload (what a SIGKILL
/// does to the process) leaves its parts on the server, invisible to object listings; the
/// ledger's record of the upload lets the reconciler abort it, which deletes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconciler_aborts_the_upload_of_a_commit_that_died() {
    let f = ObjectFixture::start().await.unwrap();
    let home = key("bot-1");
    let rev1 = f.store.commit(&home, small(b"good")).await.unwrap();
    assert_eq!(f.s3.upload_files(), Vec::<String>::new());

    let (archive, stop_at) = three_part_archive();
    let (reader, _never_opened) = Gated::new(archive, stop_at);
    let store = f.store.clone();
    let commit = tokio::spawn({
        let home = home.clone();
        async move { store.commit(&home, reader).await }
    });
    let during = two_parts_stored(&f.s3).await;
    let recorded = f.store.ledger().pending_uploads().await.unwrap();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].object(), "homes/bot-1/2");
    assert!(
        during
            .iter()
            .any(|n| n.contains(recorded[0].upload_id().as_str())),
        "the record names the upload on the server: {during:?}"
    );
    // The crash: the commit future is dropped between two parts.
    commit.abort();
    assert!(commit.await.unwrap_err().is_cancelled());
    assert_eq!(
        f.s3.upload_files(),
        during,
        "nothing cleans up a dead commit's parts by itself"
    );
    assert_eq!(
        objects(&f).await,
        vec!["homes/bot-1/1"],
        "listings miss them"
    );

    let owned = f.store.ledger().owned();
    let stats = f.store.reconcile(&owned).await.unwrap();
    assert_eq!(
        (stats.kept, stats.deleted, stats.aborted, stats.abort_failed),
        (1, 0, 1, 0)
    );
    assert_eq!(f.s3.upload_files(), Vec::<String>::new(), "parts deleted");
    assert_eq!(f.store.ledger().pending_uploads().await.unwrap(), vec![]);
    assert_eq!(objects(&f).await, vec!["homes/bot-1/1"]);
    let tmp = tempfile::tempdir().unwrap();
    let cp = f.store.open_latest(&home).await.unwrap().unwrap();
    assert_eq!(cp.revision, rev1);
    assert_eq!(restore_small(cp, &tmp.path().join("x")).await, b"good");
    // Nothing left to do on the next run, and the home commits as usual.
    let again = f.store.reconcile(&owned).await.unwrap();
    assert_eq!((again.aborted, again.abort_failed), (0, 0));
    assert_eq!(
        f.store.commit(&home, small(b"next")).await.unwrap(),
        Revision::new(2).unwrap()
    );
}

/// A recorded upload the server refuses to abort stays recorded (s3s-fs answers an id it
/// does not know with AccessDenied, not NoSuchUpload), is counted, and does not stop the
/// reconciler from deleting orphaned objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_abort_keeps_the_record_and_the_reconciler_goes_on() {
    let f = ObjectFixture::start().await.unwrap();
    let home = key("bot-1");
    let unknown = homes::store::PendingUpload::new(
        home.clone(),
        "homes/bot-1/5",
        homes::store::UploadId::new("0b5e2f6c-1d7a-4c3e-9f80-5a6b7c8d9e0f").unwrap(),
    )
    .unwrap();
    f.store.ledger().record_upload(&unknown).await.unwrap();
    put(&f, "homes/bot-1/4", b"orphan".to_vec()).await;
    let stats = f.store.reconcile(&HashSet::new()).await.unwrap();
    assert_eq!(
        (stats.deleted, stats.aborted, stats.abort_failed),
        (1, 0, 1)
    );
    assert_eq!(
        f.store.ledger().pending_uploads().await.unwrap(),
        vec![unknown]
    );
    assert_eq!(objects(&f).await, Vec::<String>::new());
}

/// A ledger that says when the reconciler has listed the recorded uploads.
#[derive(Default)]
struct Watched {
    inner: MemRevisionLedger,
    listed: tokio::sync::Notify,
}

impl RevisionLedger for Watched {
    async fn load(&self, home: &HomeKey) -> Result<Option<LedgerEntry>, LedgerError> {
        self.inner.load(home).await
    }
    async fn advance(
        &self,
        home: &HomeKey,
        expected: Option<Revision>,
        next: &LedgerEntry,
    ) -> Result<(), LedgerError> {
        self.inner.advance(home, expected, next).await
    }
    async fn forget(&self, home: &HomeKey) -> Result<(), LedgerError> {
        self.inner.forget(home).await
    }
    async fn record_upload(&self, upload: &PendingUpload) -> Result<(), LedgerError> {
        self.inner.record_upload(upload).await
    }
    async fn clear_upload(&self, upload: &PendingUpload) -> Result<(), LedgerError> {
        self.inner.clear_upload(upload).await
    }
    async fn pending_uploads(&self) -> Result<Vec<PendingUpload>, LedgerError> {
        let out = self.inner.pending_uploads().await;
        self.listed.notify_one();
        out
    }
}

/// A reconciler that lists an upload while its commit is still writing parts waits for the
/// commit (its home's lock) and leaves the upload alone: the commit completes and records
/// the new revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconciler_never_aborts_a_live_upload() {
    let f = ObjectFixture::start().await.unwrap();
    let store = Arc::new(ObjectHomeStore::new(
        &object_config(&f.s3.endpoint),
        ContentKey::generate(),
        Watched::default(),
    ));
    let home = key("bot-1");
    let (archive, stop_at) = three_part_archive();
    let (reader, open) = Gated::new(archive.clone(), stop_at);
    let commit = tokio::spawn({
        let (store, home) = (store.clone(), home.clone());
        async move { store.commit(&home, reader).await }
    });
    two_parts_stored(&f.s3).await;
    // (Through the inner ledger: this look is not the reconciler's.)
    let live = store.ledger().inner.pending_uploads().await.unwrap();
    assert_eq!(live.len(), 1);
    let listed = store.ledger().listed.notified();
    let reconcile = tokio::spawn({
        let store = store.clone();
        async move { store.reconcile(&HashSet::new()).await }
    });
    // The reconciler has seen the live upload in the ledger before the guest goes on.
    listed.await;
    open.send(()).unwrap();
    let rev = commit.await.unwrap().unwrap();
    let stats = reconcile.await.unwrap().unwrap();
    assert_eq!(rev, Revision::FIRST);
    assert_eq!((stats.aborted, stats.abort_failed), (0, 0), "{stats:?}");
    assert_eq!(stats.deleted, 0, "{stats:?}");
    assert_eq!(store.ledger().pending_uploads().await.unwrap(), vec![]);
    assert_eq!(f.s3.upload_files(), Vec::<String>::new());
    let cp = store.open_latest(&home).await.unwrap().unwrap();
    let mut restored = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut { cp.archive }, &mut restored)
        .await
        .unwrap();
    assert_eq!(restored, archive, "the whole archive was stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_errors_are_errors() {
    let mut f = ObjectFixture::start().await.unwrap();
    let home = key("bot-1");
    // Wrong credentials (s3s-fs checks SigV4 signatures; it creates missing buckets on PUT,
    // so a missing bucket is not an error there).
    let mut config = object_config(&f.s3.endpoint);
    config.secret_access_key = "wrong".into();
    let lost = ObjectHomeStore::new(
        &config,
        ContentKey::generate(),
        MemRevisionLedger::default(),
    );
    let err = lost.commit(&home, small(b"x")).await.unwrap_err();
    assert!(
        support::chain(&err).contains("object store put of homes/bot-1/1 failed"),
        "{}",
        support::chain(&err)
    );
    assert_eq!(lost.current_revision(&home).await.unwrap(), None);
    // A missing object.
    let rev = f.store.commit(&home, small(b"x")).await.unwrap();
    f.store
        .client()
        .delete_object()
        .bucket(BUCKET)
        .key(object_key(&home, rev))
        .send()
        .await
        .unwrap();
    let err = f.store.open_latest(&home).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("checkpoint object homes/bot-1/1 of home bot-1 revision 1 is missing"),
        "{err}"
    );
    // The server gone.
    f.s3.kill();
    let err = f.store.commit(&home, small(b"y")).await.unwrap_err();
    assert!(
        support::chain(&err).contains("object store put"),
        "{}",
        support::chain(&err)
    );
    assert_eq!(f.store.current_revision(&home).await.unwrap(), Some(rev));
}
