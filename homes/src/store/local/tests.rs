//! Crash recovery of the local store: a commit stopped at each step, then a fresh store (a
//! restarted control plane) on the same data dir.

use super::*;
use crate::archive::restore_async;
use crate::testing::RawArchive;
use std::io::Cursor;

fn key() -> HomeKey {
    HomeKey::new("team-w1").unwrap()
}

fn archive(content: &[u8]) -> Cursor<Vec<u8>> {
    Cursor::new(
        RawArchive::new()
            .dir(b"d")
            .file(b"d/f", false, content)
            .end(),
    )
}

/// The content of `d/f` in the latest checkpoint.
async fn latest(store: &LocalHomeStore, tmp: &Path) -> (Revision, Vec<u8>) {
    let cp = store
        .open_latest(&key())
        .await
        .unwrap()
        .expect("a checkpoint");
    let dst = tmp.join(format!("out-{}", rand::random::<u32>()));
    restore_async(cp.archive, dst.clone(), Default::default())
        .await
        .unwrap();
    (cp.revision, fs::read(dst.join("d/f")).unwrap())
}

#[tokio::test]
async fn a_crash_between_the_two_renames_is_rolled_forward() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let store = LocalHomeStore::new(&data);
    assert_eq!(
        store.commit(&key(), archive(b"one")).await.unwrap().get(),
        1
    );
    let r = store
        .commit_until(&key(), archive(b"two"), Stop::BetweenRenames)
        .await
        .unwrap();
    assert_eq!(r.get(), 2);
    // The crash left no home tree at all, and the marker still at 1.
    assert!(!data.join("homes/team-w1").exists());
    assert_eq!(
        fs::read_to_string(data.join("home-revisions/team-w1")).unwrap(),
        "1\n"
    );
    drop(store);

    let store = LocalHomeStore::new(&data);
    assert_eq!(store.current_revision(&key()).await.unwrap(), Some(r));
    assert_eq!(latest(&store, tmp.path()).await, (r, b"two".to_vec()));
    assert!(!data.join("home-staging/team-w1").exists());
}

#[tokio::test]
async fn a_crash_before_the_commit_point_keeps_the_previous_revision() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let store = LocalHomeStore::new(&data);
    store.commit(&key(), archive(b"one")).await.unwrap();
    store
        .commit_until(&key(), archive(b"two"), Stop::BeforeCommitPoint)
        .await
        .unwrap();
    assert!(data.join("home-staging/team-w1/new").exists());
    drop(store);

    let store = LocalHomeStore::new(&data);
    assert_eq!(
        latest(&store, tmp.path()).await,
        (Revision::FIRST, b"one".to_vec())
    );
    assert!(!data.join("home-staging/team-w1").exists());
    // The next commit gets revision 2, not 3.
    assert_eq!(
        store.commit(&key(), archive(b"three")).await.unwrap().get(),
        2
    );
}

#[tokio::test]
async fn a_crash_in_the_first_commit_is_rolled_forward() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let store = LocalHomeStore::new(&data);
    store
        .commit_until(&key(), archive(b"first"), Stop::BetweenRenames)
        .await
        .unwrap();
    drop(store);
    let store = LocalHomeStore::new(&data);
    assert_eq!(
        latest(&store, tmp.path()).await,
        (Revision::FIRST, b"first".to_vec())
    );
}

#[tokio::test]
async fn an_interrupted_delete_is_finished() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let store = LocalHomeStore::new(&data);
    store.commit(&key(), archive(b"one")).await.unwrap();
    // Delete removes the marker first; simulate a crash right after.
    fs::remove_file(data.join("home-revisions/team-w1")).unwrap();
    let store = LocalHomeStore::new(&data);
    assert_eq!(store.current_revision(&key()).await.unwrap(), None);
    assert!(!data.join("homes/team-w1").exists());
}

#[tokio::test]
async fn a_corrupt_marker_is_an_error_not_an_empty_home() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let store = LocalHomeStore::new(&data);
    store.commit(&key(), archive(b"one")).await.unwrap();
    fs::write(data.join("home-revisions/team-w1"), "garbage").unwrap();
    let err = store.current_revision(&key()).await.unwrap_err();
    assert!(err.to_string().contains("is corrupt"), "{err}");
}
