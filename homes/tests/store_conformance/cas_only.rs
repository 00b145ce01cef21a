//! What only the incremental store does: history, reading any revision, dedup across
//! checkpoints, the older store's checkpoints read through it, and collection.

use super::*;
use homes::cas::{Cause, Keep};

async fn commit_dir<S: HomeStore>(store: &S, home: &HomeKey, dir: &Path) -> Revision {
    store
        .commit(home, pack_reader(dir.to_path_buf()))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_dedup_and_any_revision() {
    let f = CasLocalFixture::start().await.unwrap();
    let store = f.store();
    let src = f.tmp.path().join("home");
    std::fs::create_dir_all(src.join("big")).unwrap();
    std::fs::write(src.join("big/blob"), noise(8 << 20, 1)).unwrap();
    std::fs::write(src.join("note"), b"one").unwrap();
    let home = key("w1-hist");
    let first = store
        .commit_as(&home, pack_reader(src.clone()), Cause::RunEnd, 1_000)
        .await
        .unwrap();
    let v1 = manifest(&src).unwrap();
    std::fs::write(src.join("note"), b"two").unwrap();
    let second = store
        .commit_as(&home, pack_reader(src.clone()), Cause::Stop, 2_000)
        .await
        .unwrap();
    // The second stored the changed note and the root tree, not the 8 MiB file again.
    assert!(first.new_bytes > 8 << 20, "{first:?}");
    assert!(second.new_bytes < 4096, "{second:?}");
    assert_eq!(second.parent, Some(first.revision));
    let revs = store.revisions(&home).await.unwrap();
    assert_eq!(
        revs.iter()
            .map(|r| (r.revision, r.cause))
            .collect::<Vec<_>>(),
        vec![(1, Cause::RunEnd), (2, Cause::Stop)]
    );
    // Revision 1 comes back whole, with the length it announced.
    let cp = store.open_revision(&home, 1).await.unwrap().unwrap();
    let len = cp.archive_len.unwrap();
    let dst = f.tmp.path().join("r1");
    restore_async(cp.archive, dst.clone(), UnpackOptions::default())
        .await
        .unwrap();
    assert_eq!(manifest(&dst).unwrap(), v1);
    assert!(len > 8 << 20);
    assert!(store.open_revision(&home, 9).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_checkpoints_stay_readable_and_numbers_go_on() {
    let f = CasLocalFixture::start().await.unwrap();
    let store = f.store();
    let src = f.tmp.path().join("home");
    write_sample_home(&src).unwrap();
    let home = key("w1-old");
    // Two whole-archive checkpoints, made before the incremental store existed.
    commit_dir(store.legacy(), &home, &src).await;
    let old = commit_dir(store.legacy(), &home, &src).await;
    assert_eq!(store.current_revision(&home).await.unwrap(), Some(old));
    let cp = store.open_latest(&home).await.unwrap().unwrap();
    assert_eq!(cp.revision, old);
    let dst = f.tmp.path().join("from-old");
    restore_async(cp.archive, dst.clone(), UnpackOptions::default())
        .await
        .unwrap();
    assert_eq!(
        manifest(&dst).unwrap(),
        expected_after_restore(&manifest(&src).unwrap())
    );
    // The first incremental checkpoint is a full one, numbered after the old one.
    let next = commit_dir(&*store, &home, &dst).await;
    assert_eq!(next.get(), old.get() + 1);
    assert_eq!(store.current_revision(&home).await.unwrap(), Some(next));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collection_frees_forgotten_revisions_only() {
    let f = CasObjectFixture::start().await.unwrap();
    let store = f.store();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("home");
    std::fs::create_dir_all(&src).unwrap();
    let home = key("w1-gc");
    for i in 0..4u8 {
        // Each revision its own 2 MiB file: forgetting one frees its bytes.
        let _ = std::fs::remove_file(src.join(format!("f{}", i.wrapping_sub(1))));
        std::fs::write(src.join(format!("f{i}")), noise(2 << 20, u64::from(i) + 10)).unwrap();
        store
            .commit_as(
                &home,
                pack_reader(src.clone()),
                Cause::Manual,
                i64::from(i) * 1000,
            )
            .await
            .unwrap();
    }
    let want = manifest(&src).unwrap();
    let (gone, stats) = store
        .collect(
            &home,
            Keep {
                last: 2,
                ..Keep::default()
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(gone, vec![1, 2]);
    assert!(stats.bytes_deleted >= 4 << 20, "{stats:?}");
    let revs = store.revisions(&home).await.unwrap();
    assert_eq!(
        revs.iter().map(|r| r.revision).collect::<Vec<_>>(),
        vec![3, 4]
    );
    for n in [3, 4] {
        let cp = store.open_revision(&home, n).await.unwrap().unwrap();
        let dst = tmp.path().join(format!("r{n}"));
        restore_async(cp.archive, dst.clone(), UnpackOptions::default())
            .await
            .unwrap();
        if n == 4 {
            assert_eq!(manifest(&dst).unwrap(), want);
        }
    }
    // Deleting the home leaves nothing of it in the bucket.
    store.delete(&home).await.unwrap();
    assert!(store.revisions(&home).await.unwrap().is_empty());
    assert_eq!(store.current_revision(&home).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_shares_the_past_and_goes_on_alone() {
    use std::os::unix::fs::MetadataExt;
    let f = CasLocalFixture::start().await.unwrap();
    let store = f.store();
    let src = f.tmp.path().join("home");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("big"), noise(4 << 20, 9)).unwrap();
    std::fs::write(src.join("note"), b"parent").unwrap();
    let (a, b) = (key("w1-parent"), key("w1-fork"));
    store
        .commit_as(&a, pack_reader(src.clone()), Cause::Manual, 1)
        .await
        .unwrap();
    let want = manifest(&src).unwrap();
    let forked = store
        .fork(&a, None, &b, Cause::Fork, 2)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((forked.revision, forked.cause), (1, Cause::Fork));
    assert_eq!(forked.stored_bytes, 0, "a fork writes no data: {forked:?}");
    // The packs are the parent's files, linked.
    let packs = |home: &str| -> Vec<u64> {
        let dir = f.tmp.path().join("data/home-cas").join(home).join("packs");
        let mut v: Vec<u64> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().ino())
            .collect();
        v.sort();
        v
    };
    assert_eq!(packs("w1-parent"), packs("w1-fork"));
    let cp = store.open_latest(&b).await.unwrap().unwrap();
    let dst = f.tmp.path().join("fork-home");
    restore_async(cp.archive, dst.clone(), UnpackOptions::default())
        .await
        .unwrap();
    assert_eq!(manifest(&dst).unwrap(), want);

    // Each goes on alone; the fork's next checkpoint dedupes against the shared past.
    std::fs::write(dst.join("note"), b"fork").unwrap();
    let next = store
        .commit_as(&b, pack_reader(dst.clone()), Cause::Manual, 3)
        .await
        .unwrap();
    assert!(next.new_bytes < 4096, "{next:?}");
    let back = store.open_latest(&a).await.unwrap().unwrap();
    let again = f.tmp.path().join("parent-again");
    restore_async(back.archive, again.clone(), UnpackOptions::default())
        .await
        .unwrap();
    assert_eq!(std::fs::read(again.join("note")).unwrap(), b"parent");
    // A collection of the parent keeps the fork whole (its packs are its own links).
    std::fs::write(src.join("big"), b"small now").unwrap();
    store
        .commit_as(&a, pack_reader(src.clone()), Cause::Manual, 4)
        .await
        .unwrap();
    store
        .collect(
            &a,
            Keep {
                last: 1,
                ..Keep::default()
            },
        )
        .await
        .unwrap();
    let cp = store.open_revision(&b, 1).await.unwrap().unwrap();
    let check = f.tmp.path().join("fork-again");
    restore_async(cp.archive, check.clone(), UnpackOptions::default())
        .await
        .unwrap();
    assert_eq!(manifest(&check).unwrap(), want);

    // A destination with checkpoints is refused; a missing source forks nothing.
    let e = store.fork(&a, None, &b, Cause::Fork, 5).await.unwrap_err();
    assert!(
        matches!(
            e,
            homes::HomeStoreError::Cas {
                source: homes::cas::CasError::Exists(_),
                ..
            }
        ),
        "{e:?}"
    );
    assert!(store
        .fork(&key("nobody"), None, &key("w1-new"), Cause::Fork, 6)
        .await
        .unwrap()
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_in_a_bucket_copies_server_side_and_an_archive_home_forks_too() {
    let f = CasObjectFixture::start().await.unwrap();
    let store = f.store();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("home");
    write_sample_home(&src).unwrap();
    let want = expected_after_restore(&manifest(&src).unwrap());
    // One home in the archive format, one incremental.
    let (old, new) = (key("w1-archive"), key("w1-incr"));
    commit_dir(store.legacy(), &old, &src).await;
    commit_dir(&*store, &new, &src).await;
    for (from, to) in [(&old, key("w1-from-archive")), (&new, key("w1-from-incr"))] {
        let info = store
            .fork(from, None, &to, Cause::Fork, 1)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(info.cause, Cause::Fork);
        let cp = store.open_latest(&to).await.unwrap().unwrap();
        let dst = tmp.path().join(to.as_str());
        restore_async(cp.archive, dst.clone(), UnpackOptions::default())
            .await
            .unwrap();
        assert_eq!(manifest(&dst).unwrap(), want, "{to}");
    }
}
