//! Homes in the local store and on the static guest: checkpoints on stop, browsing a stopped
//! home, waiting for other bots, and export and import.

use super::*;

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
    // The incremental store knows the archive's size from its trees: no verifying pass.
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

/// A control plane killed mid-write leaves the store's temporary files (`.tmp-…`, which no
/// listing shows): the reconciler removes those last written before the control plane started
/// (at its start) or more than an hour ago (on request), and leaves a younger one, which may be
/// a write in progress (docs/faults-storage.md, "A full disk").
#[tokio::test(flavor = "multi_thread")]
#[allow(clippy::disallowed_methods)] // reason: file times are set against the wall clock
async fn the_reconciler_removes_stale_temporaries_of_a_killed_control_plane() -> Result<()> {
    use std::time::SystemTime;
    let mut w = World::start().await?;
    let c = w.create_computer("ws-temps").await?;
    std::fs::write(w.home_of(&c).join("notes.txt"), b"kept")?;
    assert_eq!(w.home_ok(&c, "checkpoint").await?["revision"], 1);
    let packs = w.data_dir.path().join("home-cas/team-ws-temps/packs");
    let recording = w.data_dir.path().join("recordings").join(&c);
    std::fs::create_dir_all(&recording)?;
    let plant = |path: &std::path::Path, ago: Duration| -> Result<()> {
        let f = std::fs::File::create(path)?;
        f.set_modified(SystemTime::now() - ago)?;
        Ok(())
    };

    // What a SIGKILL mid-write leaves: a pack's and a recording piece's temporaries, one
    // written just before the kill, one long before.
    w.kill_server();
    let killed = [
        packs.join(".tmp-00000000000000a1"),
        recording.join(".tmp-00000000000000a2"),
    ];
    plant(&killed[0], Duration::ZERO)?;
    plant(&killed[1], Duration::from_secs(3 * 3600))?;
    w.spawn_server().await?;
    wait_for(Duration::from_secs(30), "the start-up sweep", || {
        killed.iter().all(|p| !p.exists()).then_some(())
    })
    .await?;
    let log = w.log();
    assert!(
        log.lines()
            .any(|l| l.contains("home reconciler ran") && l.contains("temporaries_removed=2")),
        "the start-up run counts what it removed:\n{log}"
    );

    // Written after this control plane started, recently: maybe a live write, left alone.
    let young = packs.join(".tmp-00000000000000b1");
    plant(&young, Duration::ZERO)?;
    let reconcile = || w.client.json(Method::POST, "/v1/homes/reconcile", None);
    let v = reconcile().await?;
    assert_eq!(
        (
            &v["store"],
            &v["temporaries_removed"],
            &v["temporaries_young"]
        ),
        (&"local".into(), &0.into(), &1.into()),
        "{v}"
    );
    assert!(young.exists(), "a young temporary file stays");
    // Unwritten for more than an hour: stale, whoever wrote it.
    plant(&young, Duration::from_secs(2 * 3600))?;
    let v = reconcile().await?;
    assert_eq!(
        (
            &v["temporaries_removed"],
            &v["temporaries_young"],
            &v["temporaries_failed"]
        ),
        (&1.into(), &0.into(), &0.into()),
        "{v}"
    );
    assert!(!young.exists(), "a stale temporary file goes");

    // The store's objects are untouched: revision 1 reads back.
    let notes = w
        .client
        .send(
            Method::GET,
            &format!("/v1/computers/{c}/home/content?path=notes.txt"),
            None,
            None,
            full_body(bytes::Bytes::new()),
        )
        .await?;
    assert_eq!(&notes.into_body().collect().await?.to_bytes()[..], b"kept");
    w.check_log()
}
