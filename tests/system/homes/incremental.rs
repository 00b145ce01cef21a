//! Incremental homes in the object store (docs/homes.md#incremental-checkpoints), the default
//! format: a byte changed in the middle of a big file stores only the chunks around it, every
//! revision is listed and readable, a new computer of the workspace restores the latest, and a
//! purge deletes the home's repository.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn incremental_checkpoints_store_what_changed_and_restore_whole() -> Result<()> {
    let s3 = S3Server::start().await?;
    let mut w = World::start_with(WorldOptions {
        object_store: Some(ObjectStoreOptions::for_server(&s3)),
        ..Default::default()
    })
    .await?;
    let c1 = w.create_computer("ws-incr").await?;
    let home = w.home_of(&c1);
    write_sample_home(&home)?;
    let mut big = homes::testing::noise(6 << 20, 3);
    std::fs::write(home.join("big.bin"), &big)?;
    w.give_home(&c1)?;
    let first = w.home_ok(&c1, "checkpoint").await?;
    assert_eq!(first["revision"], 1, "{first}");
    // The repository is in the bucket under cas/, sealed: no whole-archive object.
    assert!(s3.keys("homes/").await?.is_empty());
    let objects = s3.keys("cas/").await?;
    for part in ["/key", "/index/", "/packs/", "/revisions/"] {
        assert!(
            objects.iter().any(|k| k.contains(part)),
            "{part}: {objects:?}"
        );
    }

    // One byte in the middle of the big file: the next checkpoint stores the chunks around it.
    big[3 << 20] ^= 0xff;
    std::fs::write(home.join("big.bin"), &big)?;
    let second = w.home_ok(&c1, "checkpoint").await?;
    assert_eq!(second["revision"], 2, "{second}");
    let revs = w.revisions(&c1).await?;
    assert_eq!(revs.len(), 2, "{revs:?}");
    let stored = |i: usize| revs[i].stored_bytes;
    assert!(stored(0) > 6 << 20, "{revs:?}");
    // At most two chunks of 256 KiB, the trees on the way, and a pack index.
    assert!(stored(1) < 600 << 10, "{revs:?}");
    // Only what changed crosses the tunnel: the guest sends files unchanged since the last
    // export as such, without their content.
    w.sh(&c1, "echo tiny > small.txt").await?;
    let third = w.home_ok(&c1, "checkpoint").await?;
    let sent = third["bytes"].as_u64().context("bytes")?;
    assert!(sent < 256 << 10, "a delta export: {third}");
    assert!(
        second["bytes"].as_u64().context("bytes")? > 6 << 20,
        "{second}"
    );
    let diff: serde_json::Value = w
        .client
        .json(
            Method::GET,
            &format!("/v1/computers/{c1}/home/diff?from=1&to=3"),
            None,
        )
        .await?;
    assert_eq!(
        diff["changes"],
        serde_json::json!([
            {"path": "big.bin", "dir": false, "change": "changed"},
            {"path": "small.txt", "dir": false, "change": "added"},
        ]),
        "{diff}"
    );

    // The computer goes; the next one of the workspace gets the latest revision, whole.
    let want = expected_after_restore(&manifest(&home)?);
    w.client
        .json(Method::DELETE, &format!("/v1/computers/{c1}"), None)
        .await?;
    let c2 = w.create_computer("ws-incr").await?;
    assert_eq!(manifest(&w.home_of(&c2))?, want);

    // A purge deletes the whole repository.
    w.client
        .json(Method::DELETE, &format!("/v1/computers/{c2}"), None)
        .await?;
    w.client
        .json(Method::DELETE, "/v1/homes/team-ws-incr", None)
        .await?;
    assert_eq!(s3.keys("cas/").await?, Vec::<String>::new());
    w.check_log()
}
