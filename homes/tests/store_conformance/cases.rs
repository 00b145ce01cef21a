//! The conformance cases, each written once against any `Fixture`; `conformance!` in `main.rs`
//! turns each into one `#[tokio::test]` per backend.

use super::*;

pub async fn round_trip<F: Fixture>() {
    let f = F::start().await.unwrap();
    let store = f.store();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("home");
    write_sample_home(&src).unwrap();
    let home = key("team-w1");
    let rev = store.commit(&home, pack_reader(src.clone())).await.unwrap();
    assert_eq!(rev, Revision::FIRST);
    // The computer is destroyed: only the store has the home now.
    let want = expected_after_restore(&manifest(&src).unwrap());
    std::fs::remove_dir_all(&src).unwrap();
    let cp = store
        .open_latest(&home)
        .await
        .unwrap()
        .expect("a checkpoint");
    assert_eq!(cp.revision, rev);
    let dst = tmp.path().join("new-computer-home");
    restore_async(cp.archive, dst.clone(), UnpackOptions::default())
        .await
        .unwrap();
    assert_eq!(manifest(&dst).unwrap(), want);
    assert!(want.keys().any(|k| k.ends_with("/Default/Cookies")));
    assert!(!want
        .keys()
        .any(|k| k.ends_with("/SingletonLock") || k.contains("GPUCache")));
}

pub async fn large_home_round_trip<F: Fixture>() {
    let f = F::start().await.unwrap();
    let store = f.store();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("home");
    std::fs::create_dir_all(src.join("big")).unwrap();
    std::fs::write(src.join("big/blob"), noise(12 << 20, 5)).unwrap();
    std::fs::write(src.join("small"), b"s").unwrap();
    let home = key("bot-large");
    store.commit(&home, pack_reader(src.clone())).await.unwrap();
    let cp = store.open_latest(&home).await.unwrap().unwrap();
    let dst = tmp.path().join("out");
    restore_async(cp.archive, dst.clone(), UnpackOptions::default())
        .await
        .unwrap();
    assert_eq!(manifest(&dst).unwrap(), manifest(&src).unwrap());
}

pub async fn empty_store<F: Fixture>() {
    let f = F::start().await.unwrap();
    let store = f.store();
    let home = key("nobody");
    assert_eq!(store.current_revision(&home).await.unwrap(), None);
    assert!(store.open_latest(&home).await.unwrap().is_none());
    store.delete(&home).await.unwrap();
}

pub async fn revisions_increment<F: Fixture>() {
    let f = F::start().await.unwrap();
    let store = f.store();
    let home = key("bot-1");
    for n in 1..=3u64 {
        let rev = store.commit(&home, small(&[n as u8])).await.unwrap();
        assert_eq!(rev.get(), n);
        assert_eq!(store.current_revision(&home).await.unwrap(), Some(rev));
    }
    let tmp = tempfile::tempdir().unwrap();
    let cp = store.open_latest(&home).await.unwrap().unwrap();
    assert_eq!(cp.revision.get(), 3);
    assert_eq!(restore_small(cp, &tmp.path().join("x")).await, [3]);
}

pub async fn concurrent_commits_are_serialized<F: Fixture>() {
    let f = F::start().await.unwrap();
    let home = key("team-busy");
    let mut tasks = Vec::new();
    for n in 0..6u8 {
        let store = f.store();
        let home = home.clone();
        tasks.push(tokio::spawn(async move {
            let rev = store
                .commit(&home, small(&noise(100_000, u64::from(n))))
                .await;
            (n, rev.unwrap())
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    let mut revs: Vec<u64> = results.iter().map(|(_, r)| r.get()).collect();
    revs.sort_unstable();
    assert_eq!(revs, (1..=6).collect::<Vec<_>>());
    let (winner, _) = results.iter().find(|(_, r)| r.get() == 6).unwrap();
    let store = f.store();
    let tmp = tempfile::tempdir().unwrap();
    let cp = store.open_latest(&home).await.unwrap().unwrap();
    assert_eq!(
        restore_small(cp, &tmp.path().join("x")).await,
        noise(100_000, u64::from(*winner))
    );
}

pub async fn delete_forgets_the_home<F: Fixture>() {
    let f = F::start().await.unwrap();
    let store = f.store();
    let (a, b) = (key("bot-a"), key("bot-b"));
    store.commit(&a, small(b"a")).await.unwrap();
    store.commit(&a, small(b"a2")).await.unwrap();
    store.commit(&b, small(b"b")).await.unwrap();
    store.delete(&a).await.unwrap();
    store.delete(&a).await.unwrap();
    assert_eq!(store.current_revision(&a).await.unwrap(), None);
    assert!(store.open_latest(&a).await.unwrap().is_none());
    // Other homes are untouched, and a deleted home starts over.
    let tmp = tempfile::tempdir().unwrap();
    let cp = store.open_latest(&b).await.unwrap().unwrap();
    assert_eq!(restore_small(cp, &tmp.path().join("b")).await, b"b");
    assert_eq!(
        store.commit(&a, small(b"again")).await.unwrap(),
        Revision::FIRST
    );
}

pub async fn a_bad_archive_keeps_the_previous_revision<F: Fixture>() {
    let f = F::start().await.unwrap();
    let store = f.store();
    let home = key("bot-1");
    store.commit(&home, small(b"good")).await.unwrap();
    let hostile = [
        RawArchive::new().file(b"../x", false, b"x").end(),
        RawArchive::new()
            .raw(&[3, 0, 1, b'l', 0, 4])
            .raw(b"/etc")
            .end(),
        RawArchive::new().file(b"f", false, b"x").unfinished(),
        b"not an archive at all".to_vec(),
    ];
    for bytes in hostile {
        let err = store.commit(&home, Cursor::new(bytes)).await.unwrap_err();
        let text = support::chain(&err);
        assert!(text.contains("archive"), "{text}");
    }
    assert_eq!(
        store.current_revision(&home).await.unwrap(),
        Some(Revision::FIRST)
    );
    let tmp = tempfile::tempdir().unwrap();
    let cp = store.open_latest(&home).await.unwrap().unwrap();
    assert_eq!(restore_small(cp, &tmp.path().join("x")).await, b"good");
}
