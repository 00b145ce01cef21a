//! Hostile homes: tampered checkpoints refused before the guest sees a byte, and sealed
//! archives that only the guest's import can tell are hostile.

use super::*;

/// Tampering through the real bucket: a flipped bit, a truncated object, two swapped segments,
/// an older revision's object presented as the current one, and another home's object → the
/// restore fails with a clear error and the computer's home is untouched.
#[tokio::test(flavor = "multi_thread")]
async fn tampered_checkpoints_are_refused_and_write_nothing() -> Result<()> {
    let s3 = S3Server::start().await?;
    let mut w = object_world(&s3, &["home restore failed"]).await?;
    let c = w.create_computer("ws-tamper").await?;
    let home = w.home_of(&c);
    std::fs::write(home.join("first.txt"), b"revision one")?;
    // Every phase of the checkpoint gets its line, however quick: the export, then the store's
    // commit of the whole archive.
    let lines = w.home_flow(&c, "checkpoint").await?;
    let phases: Vec<&str> = lines
        .iter()
        .filter(|l| l["type"] == "progress")
        .filter_map(|l| l["phase"].as_str())
        .collect();
    let first = |p: &str| phases.iter().position(|x| *x == p);
    assert!(
        first("exporting").is_some() && first("exporting") < first("committing"),
        "{lines:?}"
    );
    assert_eq!(
        lines.last().map(|l| l["type"].clone()),
        Some("done".into()),
        "{lines:?}"
    );
    let rev1 = s3.get(&only_object(&s3).await?).await?;
    // Three full segments and a last one, so two can be swapped.
    std::fs::write(home.join("big.bin"), homes::testing::noise(200_000, 9))?;
    w.home_ok(&c, "checkpoint").await?;
    let key = only_object(&s3).await?;
    let good = s3.get(&key).await?;

    let other = w.create_computer("ws-other").await?;
    std::fs::write(w.home_of(&other).join("x"), b"other home")?;
    w.home_ok(&other, "checkpoint").await?;
    let keys = s3.keys("homes/").await?;
    let foreign_key = keys.iter().find(|k| **k != key).context("other object")?;
    let foreign = s3.get(foreign_key).await?;

    // The computer's home now differs from the checkpoint: a restore that wrote anything shows.
    std::fs::write(home.join("unsaved.txt"), b"not in any checkpoint")?;
    let untouched = manifest(&home)?;

    // FORMAT.md: magic 8, version 2, segment size 4, revision 8, salt 32, id length 1, id.
    let sid = key
        .split('/')
        .nth(1)
        .context("storage id in the object key")?;
    let header = 55 + sid.len();
    assert!(
        good.len() > header + 3 * SEALED_SEGMENT,
        "at least three full segments"
    );
    let mut flipped = good.clone();
    flipped[header + 1000] ^= 0x01;
    // Cut at a segment boundary: what is left authenticates, but its last segment is not final.
    let truncated = good[..header + 2 * SEALED_SEGMENT].to_vec();
    let mut swapped = good.clone();
    let (a, b) = (header, header + SEALED_SEGMENT);
    let seg_a = good[a..a + SEALED_SEGMENT].to_vec();
    swapped[a..a + SEALED_SEGMENT].copy_from_slice(&good[b..b + SEALED_SEGMENT]);
    swapped[b..b + SEALED_SEGMENT].copy_from_slice(&seg_a);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("flipped bit", flipped, "failed authentication"),
        ("truncated", truncated, "truncated"),
        ("swapped segments", swapped, "failed authentication"),
        ("older revision", rev1, "expected revision 2"),
        ("another home", foreign, "expected home"),
    ];
    for (what, bytes, expect) in cases {
        s3.put(&key, bytes).await?;
        let lines = w.home_flow(&c, "restore").await?;
        let last = lines.last().cloned().unwrap_or_default();
        assert_eq!(last["type"], "error", "{what}: {lines:?}");
        let msg = last["message"].as_str().unwrap_or_default();
        assert!(msg.contains(expect), "{what}: {msg}");
        assert_eq!(manifest(&home)?, untouched, "{what}: nothing written");
    }
    // The untampered object restores, replacing the home with the checkpoint.
    s3.put(&key, good).await?;
    let done = w.home_ok(&c, "restore").await?;
    assert_eq!(done["revision"], 2);
    assert!(!home.join("unsaved.txt").exists());
    assert_eq!(std::fs::read(home.join("first.txt"))?, b"revision one");
    w.check_log()
}

/// Seals `archive` as revision `rev` of the storage id `sid`, with the data key the server
/// wrapped (read from its SQLite database) under the world's content key: what only someone
/// holding the content key could write into the bucket.
async fn forge(
    w: &World,
    content_key_hex: &str,
    sid: &str,
    rev: u64,
    archive: &[u8],
) -> Result<Vec<u8>> {
    use homes::seal::{unwrap_data_key, ContentKey, SegmentSealer, WrappedKey, SEGMENT_SIZE};
    use sqlx::{Connection, Row};
    let db = w.data_dir.path().join("rakazo.db");
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display())).await?;
    let row = sqlx::query("SELECT home_wrapped_key FROM computers WHERE home_storage_id = ?")
        .bind(sid)
        .fetch_one(&mut conn)
        .await?;
    let wrapped = WrappedKey::from_bytes(hex::decode(row.try_get::<String, _>(0)?)?);
    let ck: [u8; 32] = hex::decode(content_key_hex)?
        .try_into()
        .map_err(|_| anyhow!("content key length"))?;
    let home = homes::HomeKey::new(sid)?;
    let key = unwrap_data_key(&ContentKey::from_bytes(ck), &home, &wrapped)?;
    let revision = homes::Revision::new(rev).context("revision")?;
    let mut sealer = SegmentSealer::new(&key, &home, revision);
    let mut out = sealer.header().to_vec();
    let chunks: Vec<&[u8]> = archive.chunks(SEGMENT_SIZE).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let mut buf = chunk.to_vec();
        sealer.seal(&mut buf, i + 1 == chunks.len())?;
        out.extend_from_slice(&buf);
    }
    Ok(out)
}

/// A hostile archive that only the guest can see is hostile (the control plane's streaming check
/// has no tree, so an entry before its parent or a duplicate passes it): correctly sealed into
/// the bucket, it reaches the guest's import, which refuses it and writes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_archive_is_refused_by_the_guest_and_writes_nothing() -> Result<()> {
    let s3 = S3Server::start().await?;
    let opts = ObjectStoreOptions::for_server(&s3);
    let mut w = World::start_with(WorldOptions {
        object_store: Some(opts.clone()),
        home_format: Some("archive"),
        allow_warn: vec!["home restore failed".into()],
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("ws-hostile").await?;
    let home = w.home_of(&c);
    std::fs::write(home.join("keep.txt"), b"kept")?;
    w.home_ok(&c, "checkpoint").await?;
    let key = only_object(&s3).await?;
    let sid = key.split('/').nth(1).context("storage id")?.to_string();
    let untouched = manifest(&home)?;
    let cases = [
        (
            "entry before its parent",
            homes::testing::RawArchive::new()
                .file(b"orphan/dir/file", false, b"x")
                .end(),
            "before its parent directory",
        ),
        (
            "duplicate entry",
            homes::testing::RawArchive::new()
                .dir(b"d")
                .file(b"d/f", false, b"1")
                .file(b"d/f", false, b"2")
                .end(),
            "appears twice",
        ),
    ];
    for (what, archive, expect) in cases {
        s3.put(
            &key,
            forge(&w, &opts.content_key_hex, &sid, 1, &archive).await?,
        )
        .await?;
        let lines = w.home_flow(&c, "restore").await?;
        let last = lines.last().cloned().unwrap_or_default();
        assert_eq!(last["type"], "error", "{what}: {lines:?}");
        let msg = last["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains(expect) && msg.contains("nothing written"),
            "{what}: {msg}"
        );
        assert_eq!(manifest(&home)?, untouched, "{what}: nothing written");
        let leftovers: Vec<_> = std::fs::read_dir(home.parent().context("parent")?)?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains("rakazo-restore"))
            .collect();
        assert!(leftovers.is_empty(), "{what}: staging removed");
    }
    w.check_log()
}
