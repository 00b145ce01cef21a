//! Homes (issue 6, docs/homes.md): checkpoints and restores through the real control plane and
//! guest, to the local store and to a real S3 server (s3s-fs) with sealed objects.
//!
//! Hostile archives (`..`, absolute paths, symlinks, devices and FIFOs, too many entries or
//! bytes) are covered at crate level against the same reader the guest runs:
//! `homes/src/archive/tests.rs` and `homes/tests/store_conformance.rs`. Here tampered objects are
//! refused before the guest sees a byte, and correctly sealed archives that only a reader with
//! the tree can tell are hostile (an entry before its parent, a duplicate) reach the guest's
//! import, which refuses them.

use anyhow::{anyhow, bail, Context, Result};
use control_plane::client::{full_body, q};
use homes::testing::{expected_after_restore, manifest, write_sample_home};
use http_body_util::BodyExt;
use hyper::Method;
use sha2::{Digest, Sha256};
use std::process::Stdio;
use std::time::Duration;
use tests::fixture::Fixture;
use tests::s3::S3Server;
use tests::{wait_for, ObjectStoreOptions, World, WorldOptions};

/// Segment size of the sealed format (homes `FORMAT.md`): 64 KiB of plaintext plus a 16-byte tag.
const SEALED_SEGMENT: usize = 65536 + 16;

fn profile_of(bot: &str) -> String {
    format!(
        ".browser-profiles/{}",
        &hex::encode(Sha256::digest(bot.as_bytes()))[..32]
    )
}

async fn object_world(s3: &S3Server, allow: &[&str]) -> Result<World> {
    World::start_with(WorldOptions {
        object_store: Some(ObjectStoreOptions::for_server(s3)),
        allow_warn: allow.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    })
    .await
}

async fn home_info(w: &World, c: &str) -> Result<serde_json::Value> {
    Ok(w.client
        .json(Method::GET, &format!("/v1/computers/{c}/home"), None)
        .await?)
}

/// Ends a run successfully; returns what its run-end checkpoint did (the release's answer).
async fn release(w: &World, c: &str, bot: &str, lease: &str) -> Result<serde_json::Value> {
    let v = w
        .post(
            &format!("/v1/computers/{c}/leases/{bot}/release"),
            serde_json::json!({ "lease": lease, "outcome": "success" }),
        )
        .await?;
    Ok(v["checkpoint"].clone())
}

async fn screen(
    w: &World,
    c: &str,
    bot: &str,
    lease: &str,
    action: &str,
    extra: serde_json::Value,
) -> Result<serde_json::Value> {
    let mut body = serde_json::json!({ "lease": lease });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    Ok(
        w.post(&format!("/v1/computers/{c}/screens/{bot}/{action}"), body)
            .await?,
    )
}

async fn open_url(w: &World, c: &str, bot: &str, lease: &str, url: &str) -> Result<()> {
    screen(
        w,
        c,
        bot,
        lease,
        "act",
        serde_json::json!({ "actions": [{ "type": "open", "url": url }] }),
    )
    .await?;
    Ok(())
}

/// The one checkpoint object of the world's bucket.
async fn only_object(s3: &S3Server) -> Result<String> {
    let keys = s3.keys("homes/").await?;
    match keys.as_slice() {
        [one] => Ok(one.clone()),
        other => bail!("expected one checkpoint object, found {other:?}"),
    }
}

/// Round trip: a home with nested dirs, binary files, exec bits, empty dirs and a bot's real
/// browser profile → checkpoint (run completion, then explicit) into the object store →
/// computer destroyed → a new computer with the same home key restores it before first use →
/// same tree by hashes, exclusions absent, and the bot's cookie still valid on a local page.
#[tokio::test(flavor = "multi_thread")]
async fn round_trip_through_the_object_store_keeps_files_and_cookies() -> Result<()> {
    let fx = Fixture::start().await?;
    let s3 = S3Server::start().await?;
    let mut w = object_world(&s3, &[]).await?;
    let c1 = w.create_computer("ws-homes").await?;
    let home1 = w.home_of(&c1);
    write_sample_home(&home1)?;
    w.give_home(&c1)?;

    let bot = "bot-home";
    let lease = w.lease(&c1, bot, "run-1").await?;
    screen(&w, &c1, bot, &lease, "ensure", serde_json::json!({})).await?;
    open_url(&w, &c1, bot, &lease, &format!("{}/set?bot=kept", fx.base)).await?;
    open_url(
        &w,
        &c1,
        bot,
        &lease,
        &format!("{}/whoami?from=before", fx.base),
    )
    .await?;
    let seen = wait_for(Duration::from_secs(20), "whoami before", || {
        fx.cookies("before")
    })
    .await?;
    assert_eq!(seen, vec!["bot=kept".to_string()]);

    // Run completion checkpoints (and quiesces the browser, flushing its cookies).
    release(&w, &c1, bot, &lease).await?;
    assert_eq!(home_info(&w, &c1).await?["revision"], 1);
    // The browser was closed for the export (the cookie in the restored home below proves it
    // was flushed) and starts again by itself, on the same profile: a successful run keeps the
    // bot's browser (docs/screens.md#chrome), and a person watching sees its pages again.
    let profile = home1.join(profile_of(bot)).display().to_string();
    wait_for(
        Duration::from_secs(30),
        "the browser back after the export",
        || {
            (!tests::pids_with_cmdline(&format!("--user-data-dir={profile}")).is_empty())
                .then_some(())
        },
    )
    .await?;
    // The same desktop is reported (not a new one).
    let lease = w.lease(&c1, bot, "run-1b").await?;
    let again = screen(&w, &c1, bot, &lease, "ensure", serde_json::json!({})).await?;
    assert_eq!(again["started"], false, "{again}");
    open_url(
        &w,
        &c1,
        bot,
        &lease,
        &format!("{}/whoami?from=between", fx.base),
    )
    .await?;
    let seen = wait_for(Duration::from_secs(20), "whoami between", || {
        fx.cookies("between")
    })
    .await?;
    assert_eq!(seen, vec!["bot=kept".to_string()]);
    release(&w, &c1, bot, &lease).await?;
    assert_eq!(home_info(&w, &c1).await?["revision"], 2);
    // The browser came back after that checkpoint and keeps writing its profile; tear the
    // desktop down so the tree compared below is the one the next checkpoint saves.
    w.post(
        &format!("/v1/computers/{c1}/screens/{bot}/release"),
        serde_json::json!({}),
    )
    .await?;
    let done = w.home_ok(&c1, "checkpoint").await?;
    assert_eq!(done["revision"], 3);
    let object = only_object(&s3).await?;
    assert!(
        object.ends_with("/3"),
        "{object}: the previous object is deleted"
    );
    let before = manifest(&home1)?;
    assert!(before.contains_key(&format!("{}/Default/Cookies", profile_of(bot))));

    w.client
        .json(Method::DELETE, &format!("/v1/computers/{c1}"), None)
        .await?;
    let c2 = w.create_computer("ws-homes").await?;
    let info = home_info(&w, &c2).await?;
    assert_eq!(info["revision"], 3, "{info}");
    assert_eq!(info["pending_restore"], false, "{info}");
    let home2 = w.home_of(&c2);
    assert_eq!(manifest(&home2)?, expected_after_restore(&before));
    let profile = home2.join(".browser-profiles/0123456789abcdef");
    assert!(!profile.join("SingletonLock").exists());
    assert!(!profile.join("Default/Cache").exists());
    assert!(
        home2.join("lock").exists(),
        "look-alikes outside profiles are kept"
    );

    let lease = w.lease(&c2, bot, "run-2").await?;
    screen(&w, &c2, bot, &lease, "ensure", serde_json::json!({})).await?;
    open_url(
        &w,
        &c2,
        bot,
        &lease,
        &format!("{}/whoami?from=after", fx.base),
    )
    .await?;
    let seen = wait_for(Duration::from_secs(20), "whoami after", || {
        fx.cookies("after")
    })
    .await?;
    assert_eq!(
        seen,
        vec!["bot=kept".to_string()],
        "the cookie survived the move"
    );
    release(&w, &c2, bot, &lease).await?;
    w.check_log()
}

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

/// The files s3s-fs keeps for unfinished multipart uploads (`.upload-<id>.json` and a
/// `.upload_id-<id>.part-<n>` per stored part), at the top of its directory. Object listings never
/// show them.
fn upload_files(s3: &S3Server) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(s3.dir())? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.starts_with(".upload") {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// kill -9 of the control plane in the middle of a multipart upload (a home of several parts,
/// killed once s3s-fs holds at least one part): after a restart the previous revision is still
/// the current one and restores, and the start-up reconciler aborts the dead upload (its parts
/// are gone from the server's directory) and deletes an orphaned object (an upload that completed
/// but was never recorded: the other crash window). S3 outages come back as errors (the
/// checkpoint, and the stop it guards, fail) and never as a silently lost checkpoint.
#[tokio::test(flavor = "multi_thread")]
async fn a_crash_mid_checkpoint_keeps_the_previous_revision() -> Result<()> {
    let mut s3 = S3Server::start().await?;
    let mut w = object_world(
        &s3,
        &[
            "home checkpoint failed",
            "checkpoint before stop failed",
            "cannot abort a failed multipart upload",
        ],
    )
    .await?;
    let c = w.create_computer("ws-crash").await?;
    let home = w.home_of(&c);
    std::fs::write(home.join("small.txt"), b"revision one")?;
    w.home_ok(&c, "checkpoint").await?;
    let rev1_key = only_object(&s3).await?;
    let saved = manifest(&home)?;
    assert_eq!(upload_files(&s3)?, Vec::<String>::new());

    // A large home: the upload is multipart (5 MiB parts, the default) and takes a while.
    let status = std::process::Command::new("head")
        .args(["-c", "400M", "/dev/urandom"])
        .stdout(std::fs::File::create(home.join("large.bin"))?)
        .stderr(Stdio::null())
        .status()?;
    assert!(status.success());
    let client = w.client.clone();
    let path = format!("/v1/computers/{}/home/checkpoint", q(&c));
    let checkpoint = tokio::spawn(async move {
        // Read the progress stream until it breaks (the server is killed under it).
        let resp = client
            .send(
                Method::POST,
                &path,
                None,
                None,
                full_body(bytes::Bytes::new()),
            )
            .await?;
        let mut body = resp.into_body();
        while let Some(frame) = body.frame().await {
            frame?;
        }
        anyhow::Ok(())
    });
    // Readiness, polled: the kill comes once a part is stored, mid-upload.
    tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let files = upload_files(&s3)?;
            if files.iter().any(|f| f.contains(".part-")) {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .map_err(|_| anyhow!("no part of the checkpoint reached the object store"))??;
    w.kill_server();
    let _ = checkpoint.await;
    let left = upload_files(&s3)?;
    assert!(
        left.iter().any(|f| f.contains(".part-")),
        "the killed upload left its parts: {left:?}"
    );
    assert_eq!(s3.keys("homes/").await?, vec![rev1_key.clone()]);

    // An upload that completed but was never recorded (the crash came between the two).
    let sid_prefix = rev1_key.trim_end_matches("/1");
    let orphan = format!("{sid_prefix}/7");
    s3.put(&orphan, s3.get(&rev1_key).await?).await?;

    w.spawn_server().await?;
    assert_eq!(home_info(&w, &c).await?["revision"], 1);
    // The start-up reconciler aborts the dead upload (its parts go) and deletes the orphan.
    let deadline = Duration::from_secs(30);
    tokio::time::timeout(deadline, async {
        loop {
            let parts = upload_files(&s3).ok();
            let keys = s3.keys("homes/").await.ok();
            if parts == Some(vec![]) && keys == Some(vec![rev1_key.clone()]) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .map_err(|_| {
        anyhow!(
            "the reconciler left parts {:?} or the orphan {orphan}",
            upload_files(&s3)
        )
    })?;
    assert!(
        w.log().contains("aborting an abandoned multipart upload"),
        "the reconciler, not something else, removed the parts"
    );
    // A reconcile on request finds nothing more to do.
    let again = w
        .client
        .json(Method::POST, "/v1/homes/reconcile", None)
        .await?;
    assert_eq!(
        (again["kept"].as_u64(), again["deleted"].as_u64()),
        (Some(1), Some(0)),
        "{again}"
    );
    assert_eq!(upload_files(&s3)?, Vec::<String>::new());
    let done = w.home_ok(&c, "restore").await?;
    assert_eq!(done["revision"], 1);
    assert_eq!(manifest(&home)?, saved, "the previous revision came back");

    // S3 down: the checkpoint is an error, the revision stays, and the stop is refused.
    std::fs::write(home.join("new.txt"), b"unsaved")?;
    s3.kill();
    let lines = w.home_flow(&c, "checkpoint").await?;
    let last = lines.last().cloned().unwrap_or_default();
    assert_eq!(last["type"], "error", "{lines:?}");
    assert_eq!(last["code"], "home_store_failed", "{last}");
    assert_eq!(home_info(&w, &c).await?["revision"], 1);
    let stop = w
        .client
        .json(Method::POST, &format!("/v1/computers/{c}/stop"), None)
        .await;
    assert!(stop.is_err(), "a stop whose checkpoint fails is refused");
    let shown = w
        .client
        .json(Method::GET, &format!("/v1/computers/{c}"), None)
        .await?;
    assert_eq!(shown["state"], "running", "{shown}");
    s3.restart().await?;
    assert_eq!(w.home_ok(&c, "checkpoint").await?["revision"], 2);
    assert_eq!(upload_files(&s3)?, Vec::<String>::new());
    w.check_log()
}

/// The local store (the default): a stop checkpoints first; the stopped computer's home is
/// browsed and read through the CLI without a guest; a replacement computer with the same home
/// key restores it; a purge forgets it.
#[tokio::test(flavor = "multi_thread")]
async fn local_store_checkpoints_on_stop_and_browses_a_stopped_home() -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        allow_warn: vec!["home checkpoint failed".into()],
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("ws-local").await?;
    let blob = homes::testing::noise(150_000, 4);
    w.put_file(&c, "data/blob.bin", blob.clone(), false).await?;
    w.put_file(&c, "bin/tool", b"#!/bin/sh\necho hi\n".to_vec(), true)
        .await?;
    w.client
        .json(Method::POST, &format!("/v1/computers/{c}/stop"), None)
        .await?;
    let info = home_info(&w, &c).await?;
    assert_eq!(
        (info["store"].as_str(), info["revision"].as_u64()),
        (Some("local"), Some(1))
    );

    let (http, token) = (w.http.clone(), w.api_token().to_string());
    let run = |args: Vec<String>| {
        let mut cmd = std::process::Command::new(tests::bin("rakazo"));
        cmd.args(&args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("RAKAZO_URL", &http)
            .env("RAKAZO_TOKEN", &token)
            .stdin(Stdio::null());
        cmd.output()
    };
    let ls = run(vec!["home".into(), "ls".into(), c.clone()])?;
    assert!(
        ls.status.success(),
        "{}",
        String::from_utf8_lossy(&ls.stderr)
    );
    let listing = String::from_utf8(ls.stdout)?;
    let rows: Vec<Vec<&str>> = listing
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(rows.contains(&vec!["d", "0", "bin"]), "{listing}");
    assert!(rows.contains(&vec!["x", "18", "bin/tool"]), "{listing}");
    assert!(
        rows.contains(&vec!["-", "150000", "data/blob.bin"]),
        "{listing}"
    );
    let cat = run(vec![
        "home".into(),
        "cat".into(),
        c.clone(),
        "data/blob.bin".into(),
    ])?;
    assert!(
        cat.status.success(),
        "{}",
        String::from_utf8_lossy(&cat.stderr)
    );
    assert_eq!(cat.stdout, blob);
    let missing = run(vec!["home".into(), "cat".into(), c.clone(), "nope".into()])?;
    assert!(!missing.status.success());
    let cp = run(vec!["home".into(), "checkpoint".into(), c.clone()])?;
    // Stopped: the guest is not there to export.
    assert!(!cp.status.success());

    w.client
        .json(Method::DELETE, &format!("/v1/computers/{c}"), None)
        .await?;
    let c2 = w.create_computer("ws-local").await?;
    assert_eq!(std::fs::read(w.home_of(&c2).join("data/blob.bin"))?, blob);
    let restore = run(vec!["home".into(), "restore".into(), c2.clone()])?;
    assert!(
        restore.status.success(),
        "{}",
        String::from_utf8_lossy(&restore.stderr)
    );
    let out = String::from_utf8(restore.stdout)?;
    assert!(out.starts_with("revision 1"), "{out}");
    // Not a terminal: progress comes as plain lines on stderr, one per phase at least.
    let progress = String::from_utf8(restore.stderr)?;
    assert!(progress.contains("verifying: "), "{progress}");
    assert!(progress.contains("importing: "), "{progress}");

    w.client
        .json(Method::DELETE, &format!("/v1/computers/{c2}"), None)
        .await?;
    w.client
        .json(Method::DELETE, "/v1/homes/team-ws-local", None)
        .await?;
    let c3 = w.create_computer("ws-local").await?;
    assert!(
        !w.home_of(&c3).join("data").exists(),
        "a purged home is gone"
    );
    w.check_log()
}

/// docs/homes.md#checkpoints: a checkpoint waits while another bot holds a lease (bounded, then a
/// clear error); the run-completion checkpoint is deferred while another run is still going, and
/// the last run to finish saves the shared home.
#[tokio::test(flavor = "multi_thread")]
async fn checkpoints_wait_for_other_bots_and_the_last_run_saves() -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        allow_warn: vec!["home checkpoint failed".into()],
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("ws-leases").await?;
    std::fs::write(w.home_of(&c).join("shared.txt"), b"team work")?;
    let a = w.lease(&c, "bot-a", "run-a").await?;
    let b = w.lease(&c, "bot-b", "run-b").await?;

    let lines = w.home_flow(&c, "checkpoint?wait_ms=0").await?;
    let last = lines.last().cloned().unwrap_or_default();
    assert_eq!(last["code"], "home_leases_held", "{lines:?}");
    let msg = last["message"].as_str().unwrap_or_default();
    assert!(msg.contains("bot-a") && msg.contains("bot-b"), "{msg}");

    let deferred = release(&w, &c, "bot-a", &a).await?;
    assert_eq!(deferred["status"], "deferred", "{deferred}");
    assert_eq!(
        deferred["waiting_for"],
        serde_json::json!(["bot-b"]),
        "{deferred}"
    );
    assert_eq!(
        home_info(&w, &c).await?["revision"],
        serde_json::Value::Null,
        "bot-b still runs: the checkpoint is deferred"
    );
    let saved = release(&w, &c, "bot-b", &b).await?;
    assert_eq!(saved["status"], "saved", "{saved}");
    assert_eq!(saved["revision"], 1, "{saved}");
    assert_eq!(
        home_info(&w, &c).await?["revision"],
        1,
        "the last run saved"
    );
    assert_eq!(w.home_ok(&c, "checkpoint?wait_ms=0").await?["revision"], 2);
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

/// A machine that is gone (its provider no longer has it) is replaced on `start`, and the
/// replacement imports the stored home before the computer is reported running again.
#[tokio::test(flavor = "multi_thread")]
async fn a_replacement_machine_gets_the_stored_home_before_use() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-replace").await?;
    w.put_file(
        &c,
        "work/report.txt",
        b"saved before the stop".to_vec(),
        false,
    )
    .await?;
    w.client
        .json(Method::POST, &format!("/v1/computers/{c}/stop"), None)
        .await?;
    // The machine is lost: the local provider keeps each machine in its own directory.
    let machine = w.home_of(&c).parent().context("machine dir")?.to_path_buf();
    std::fs::remove_dir_all(&machine)?;
    let started = w
        .client
        .json(Method::POST, &format!("/v1/computers/{c}/start"), None)
        .await?;
    assert_eq!(started["state"], "running", "{started}");
    assert_eq!(
        std::fs::read(w.home_of(&c).join("work/report.txt"))?,
        b"saved before the stop"
    );
    let info = home_info(&w, &c).await?;
    assert_eq!(info["pending_restore"], false, "{info}");
    w.check_log()
}

/// Ownership in the object store: destroying a computer keeps its stored home (the next
/// computer with the same home key adopts it); a purge forgets the home's key and revision,
/// which makes its objects unreadable, and deletes them; a home a live computer holds cannot be
/// purged.
#[tokio::test(flavor = "multi_thread")]
async fn a_purge_forgets_a_destroyed_computers_home() -> Result<()> {
    let s3 = S3Server::start().await?;
    let mut w = object_world(&s3, &[]).await?;
    let c1 = w.create_computer("ws-purge").await?;
    std::fs::write(w.home_of(&c1).join("old.txt"), b"old")?;
    w.home_ok(&c1, "checkpoint").await?;
    assert_eq!(s3.keys("homes/").await?.len(), 1);
    let refused = w
        .client
        .json(Method::DELETE, "/v1/homes/team-ws-purge", None)
        .await;
    assert!(refused.is_err(), "a live computer's home is not purged");
    w.client
        .json(Method::DELETE, &format!("/v1/computers/{c1}"), None)
        .await?;
    assert_eq!(
        s3.keys("homes/").await?.len(),
        1,
        "destroy keeps the stored home"
    );
    w.client
        .json(Method::DELETE, "/v1/homes/team-ws-purge", None)
        .await?;
    assert!(
        s3.keys("homes/").await?.is_empty(),
        "purge deletes the objects"
    );
    let c2 = w.create_computer("ws-purge").await?;
    assert!(!w.home_of(&c2).join("old.txt").exists());
    assert_eq!(
        home_info(&w, &c2).await?["revision"],
        serde_json::Value::Null
    );
    // The adopted storage id starts over with a fresh data key.
    assert_eq!(w.home_ok(&c2, "checkpoint").await?["revision"], 1);
    w.check_log()
}

/// The static (musl) guest exports and imports homes too: its staging swap is two renames,
/// where glibc's is one `renameat2` exchange.
#[tokio::test(flavor = "multi_thread")]
async fn the_static_guest_exports_and_imports_a_home() -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        guest_bin: Some(tests::static_guest()),
        ..Default::default()
    })
    .await?;
    let c1 = w.create_computer("ws-static").await?;
    write_sample_home(&w.home_of(&c1))?;
    let before = manifest(&w.home_of(&c1))?;
    w.home_ok(&c1, "checkpoint").await?;
    w.client
        .json(Method::DELETE, &format!("/v1/computers/{c1}"), None)
        .await?;
    let c2 = w.create_computer("ws-static").await?;
    assert_eq!(manifest(&w.home_of(&c2))?, expected_after_restore(&before));
    w.check_log()
}

/// A create whose restore failed (the store was down) leaves its machine running and its home
/// waiting for the restore; `start` finishes the restore on that machine (no new one, no new
/// token), and only then reports the computer running.
#[tokio::test(flavor = "multi_thread")]
async fn start_finishes_a_restore_that_failed_at_create() -> Result<()> {
    let mut s3 = S3Server::start().await?;
    let mut w = object_world(&s3, &[]).await?;
    let c1 = w.create_computer("ws-late-restore").await?;
    w.put_file(&c1, "kept.txt", b"from the checkpoint".to_vec(), false)
        .await?;
    w.home_ok(&c1, "checkpoint").await?;
    w.client
        .json(Method::DELETE, &format!("/v1/computers/{c1}"), None)
        .await?;

    s3.kill();
    w.client
        .json(
            Method::POST,
            "/v1/computers",
            Some(&serde_json::json!({ "workspace": "ws-late-restore" })),
        )
        .await
        .expect_err("the store is down: the restore fails");
    let list = w.client.json(Method::GET, "/v1/computers", None).await?;
    let c2 = list["computers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["home_key"] == "team-ws-late-restore")
        .and_then(|c| c["id"].as_str())
        .context("the half-made computer is listed")?
        .to_string();
    let shown = w
        .client
        .json(Method::GET, &format!("/v1/computers/{c2}"), None)
        .await?;
    assert_eq!(shown["state"], "provisioning", "{shown}");
    let guest_before = tests::pids_with_env("RAKAZO_COMPUTER_ID", &c2);
    assert!(!guest_before.is_empty(), "its machine runs");

    s3.restart().await?;
    let started = w
        .post(&format!("/v1/computers/{c2}/start"), serde_json::json!({}))
        .await?;
    assert_eq!(started["state"], "running", "{started}");
    assert_eq!(
        tests::pids_with_env("RAKAZO_COMPUTER_ID", &c2),
        guest_before,
        "the same machine and guest"
    );
    assert_eq!(
        &w.get_file(&c2, "kept.txt").await?[..],
        b"from the checkpoint"
    );
    Ok(())
}
