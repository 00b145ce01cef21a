//! Homes in the object store (a real S3 server): the round trip of files and cookies, a crash
//! mid-checkpoint, a replacement machine, a purge, and a restore that failed at create.

use super::*;

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
