//! The control plane against a slow or hostile guest (issue 11): a guest that authenticates and
//! then goes silent fails only its own operations, with a clear error, within the guest deadline;
//! the home lock and the idle job are not held by it; a sparse 60 GB file fails the checkpoint
//! without a large byte read or stored; a restarted guest learns the live fences at its hello;
//! a home export or import begun on older leases than the guest knows is refused by the guest.
//!
//! The stalled guest is `rogue_guest` (tests/src/bin): a real QUIC guest that says hello, answers
//! pings and then never answers an operation (a home export gets its first frame and a few
//! archive bytes). It stands in for the real guest only on the computers told to stall; every
//! other computer of the same world runs the real guest.
//!
//! Every wait is bounded; nothing passes or fails on how long something took (the deadlines are
//! set short or long only so a test ends soon, or so a stall outlasts it).

use anyhow::{anyhow, bail, ensure, Context, Result};
use control_plane::client::ClientError;
use hyper::{Method, StatusCode};
use std::path::Path;

use std::time::Duration;
use tests::bystander::Bystander;
use tests::{rogue, World, WorldOptions};

/// Bound on any one thing these tests wait for.
const WAIT: Duration = Duration::from_secs(90);

/// A checkpoint's last NDJSON line, bounded by [`WAIT`] (a flow that hangs fails the test).
async fn checkpoint(w: &World, c: &str) -> Result<serde_json::Value> {
    home_last(w, c, "checkpoint").await
}

/// The NDJSON lines of a home flow, bounded by [`WAIT`]; its last line.
async fn home_last(w: &World, c: &str, flow: &str) -> Result<serde_json::Value> {
    let lines = tokio::time::timeout(WAIT, w.home_flow(c, flow))
        .await
        .map_err(|_| anyhow!("home {flow} of {c} did not end within {WAIT:?}"))??;
    lines
        .last()
        .cloned()
        .ok_or_else(|| anyhow!("home {flow} of {c} answered nothing"))
}

/// A guest that answers a home export's first frame and then goes silent fails the checkpoint
/// with 504-class `guest_timeout` naming the deadline; the home's lock is released with it (a
/// second checkpoint reaches the guest again and fails the same way instead of waiting on the
/// first); no revision is recorded; and a real computer beside it runs commands throughout.
#[tokio::test(flavor = "multi_thread")]
async fn a_silent_guest_fails_its_checkpoint_and_holds_nothing() -> Result<()> {
    let mut w = World::start_with(rogue::options(4, None)).await?;
    let real = w.create_computer("ws-real").await?;
    rogue::stall_next(&w)?;
    let stalled = w.create_computer("ws-stalled").await?;
    ensure!(
        w.local_dir_of(&stalled).join("rogue-mode").exists(),
        "the second computer's guest did not take the stall marker"
    );

    // An exec loop on the real computer for as long as the stalled checkpoints run.
    let bystander = Bystander::start(w.client.clone(), real.clone());
    let first = checkpoint(&w, &stalled).await;
    let second = checkpoint(&w, &stalled).await;
    let ran = bystander.finish().await?;
    let (first, second) = (first?, second?);
    for (n, line) in [("first", &first), ("second", &second)] {
        ensure!(line["type"] == "error", "{n} checkpoint: {line}");
        ensure!(line["code"] == "guest_timeout", "{n} checkpoint: {line}");
        let msg = line["message"].as_str().unwrap_or("");
        ensure!(
            msg.contains(&stalled) && msg.contains("did not answer within 4 s"),
            "{n} checkpoint: {msg}"
        );
        ensure!(line["uncertain"] == true, "{n} checkpoint: {line}");
    }
    ensure!(ran > 0, "the exec loop never ran on the real computer");
    ensure!(
        w.home_revision(&stalled).await?.is_none(),
        "a failed checkpoint recorded a revision"
    );
    // Other operations on the stalled computer fail the same way, not forever.
    let listed = tokio::time::timeout(
        WAIT,
        w.client
            .json(Method::GET, &format!("/v1/computers/{stalled}/files"), None),
    )
    .await
    .map_err(|_| anyhow!("listing files of the stalled computer hung"))?;
    match listed {
        Err(ClientError::Api { status, code, .. }) => {
            ensure!(
                status == StatusCode::GATEWAY_TIMEOUT && code == "guest_timeout",
                "files: {status} {code}"
            );
        }
        other => bail!("files of a silent guest: {other:?}"),
    }
    w.check_log()
}

/// The idle job looks at computers concurrently: while one computer's idle checkpoint waits on
/// its silent guest (a deadline longer than the test), another idle computer is still
/// checkpointed and stopped. The other computer is held up (a control lease) until the stalled
/// one's look is stuck, so a job that looks at one computer at a time never reaches it.
#[tokio::test(flavor = "multi_thread")]
async fn one_stalled_computer_does_not_hold_the_idle_job() -> Result<()> {
    let mut w = World::start_with(rogue::options(600, Some(3))).await?;
    rogue::stall_next(&w)?;
    let stalled = w.create_computer("ws-idle-stalled").await?;
    let real = w.create_computer("ws-idle-real").await?;
    // A person's control lease holds the real computer up until the stalled one is claimed, so
    // the real one goes idle only while the stalled one's look is stuck.
    let hold = format!("/v1/computers/{real}/screens/setup-hold");
    w.post(&format!("{hold}/takeover"), serde_json::json!({}))
        .await?;
    ensure!(
        w.local_dir_of(&stalled).join("rogue-mode").exists()
            && !w.local_dir_of(&real).join("rogue-mode").exists(),
        "the stall marker went to the wrong computer"
    );
    // The stalled computer is claimed (its checkpoint waits on the guest) ...
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let v = w.show(&stalled).await?;
        if v["idle"]["decision"] == "suspending" {
            break;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the stalled computer was never claimed: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Its silent guest was first asked what still works inside; the job waited its bounded
    // while, counted it as nothing and went on.
    ensure!(
        w.log()
            .contains("the guest did not report its activity in time; counted as none"),
        "no bounded activity wait in the log"
    );
    // ... and the real one, let go now, is suspended meanwhile.
    w.post(&format!("{hold}/release-control"), serde_json::json!({}))
        .await?;
    let deadline = tokio::time::Instant::now() + WAIT;
    let suspended = loop {
        let v = w.show(&real).await?;
        // The idle job records its decision just after the stop: wait for both.
        if v["state"] == "stopped" && v["idle"]["decision"] != "suspending" {
            break v;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the idle real computer was not suspended while another stalled: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    ensure!(suspended["idle"]["decision"] == "suspended", "{suspended}");
    ensure!(
        w.home_revision(&real).await?.is_some(),
        "suspended without a checkpoint"
    );
    let v = w.show(&stalled).await?;
    ensure!(
        v["state"] == "running" && v["idle"]["decision"] == "suspending",
        "the stalled computer: {v}"
    );
    w.check_log()
}

/// Sum of the apparent sizes of every file under `dir` (a sparse file counts whole).
fn apparent_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(meta) = e.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                total += meta.len();
            }
        }
    }
    total
}

/// A sparse 60 GB file in a home (made from exec, as a user would) fails the checkpoint with
/// `home_quota_exceeded` naming the 20 GiB default; the previous revision stays current and the
/// store (under the data dir) does not grow by a gigabyte. Removing the file lets the next
/// checkpoint through.
#[tokio::test(flavor = "multi_thread")]
async fn a_sparse_60_gb_file_fails_the_checkpoint_and_writes_nothing_large() -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        allow_warn: vec!["home checkpoint failed".into()],
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("ws-quota").await?;
    w.sh(&c, "echo kept > notes.txt").await?;
    let before = w.home_ok(&c, "checkpoint").await?;
    let rev = before["revision"].as_u64().context("first revision")?;
    let store_before = apparent_size(w.data_dir.path());

    w.sh(&c, "truncate -s 60G big && ls -l big").await?;
    let line = checkpoint(&w, &c).await?;
    ensure!(line["type"] == "error", "{line}");
    ensure!(line["code"] == "home_quota_exceeded", "{line}");
    let msg = line["message"].as_str().unwrap_or("");
    ensure!(
        msg.contains(&c) && msg.contains("quota") && msg.contains("21474836480"),
        "{msg}"
    );
    ensure!(
        w.home_revision(&c).await? == Some(rev),
        "the revision moved after a refused checkpoint"
    );
    let grown = apparent_size(w.data_dir.path()).saturating_sub(store_before);
    ensure!(
        grown < 1 << 30,
        "the data dir grew by {grown} bytes during a refused checkpoint"
    );

    w.sh(&c, "rm big").await?;
    let after = w.home_ok(&c, "checkpoint").await?;
    ensure!(after["revision"].as_u64() == Some(rev + 1), "{after}");
    w.check_log()
}

/// Fences survive a guest restart: after the guest is SIGKILLed and started again, the control
/// plane tells the new guest every live lease at its hello, so the guest itself refuses an older
/// fence. To reach the guest below the control plane's own check, the test turns the database's
/// lease row back to the older lease (a control plane reading stale state); the request then
/// passes the control plane and is refused by the guest, with the guest's message.
#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_guest_refuses_a_fence_older_than_it_was_told() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-fence").await?;
    let old = w.lease(&c, "b1", "run-1").await?;
    w.post(
        &format!("/v1/computers/{c}/leases/b1/release"),
        serde_json::json!({ "lease": old }),
    )
    .await?;
    let live = w.lease(&c, "b1", "run-2").await?;
    ensure!(old == "run-1:1" && live == "run-2:2", "{old} {live}");

    // The guest dies without a word and comes back as a new process with an empty fence table.
    let home = w.home_of(&c).display().to_string();
    let guests = tests::pids_with_env("RAKAZO_HOME", &home);
    ensure!(!guests.is_empty(), "no guest process for {c}");
    // The jail's bubblewrap processes carry the same environment and exit with the guest: one
    // may be gone by the time it is its turn (ESRCH), which is what this wants anyway.
    for pid in &guests {
        match nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        ) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // SIGKILL is delivered asynchronously: wait until the guest is dead (gone or a zombie),
    // or start would still find it running.
    let dead = |pid: &i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit_once(") ").is_some_and(|(_, f)| f.starts_with('Z'))
        })
    };
    tests::wait_for(WAIT, "the killed guest to die", || {
        guests.iter().all(dead).then_some(())
    })
    .await?;
    // Start finds the machine's guest dead and starts a new one (with a new token).
    w.post(&format!("/v1/computers/{c}/start"), serde_json::json!({}))
        .await?;
    let restarted = tests::pids_with_env("RAKAZO_HOME", &home);
    ensure!(
        !restarted.is_empty() && restarted.iter().all(|p| !guests.contains(p)),
        "the guest was not restarted: {guests:?} -> {restarted:?}"
    );

    // The control plane's view goes stale: its row says run-1:1 is live again.
    let db = w.data_dir.path().join("rakazo.db");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display())).await?;
    let updated = sqlx::query(
        "UPDATE leases SET owner = 'run-1', fence = 1 WHERE computer_id = $1 AND bot = 'b1'",
    )
    .bind(&c)
    .execute(&pool)
    .await?;
    ensure!(updated.rows_affected() == 1, "no lease row to turn back");
    pool.close().await;

    let refused = w
        .exec(
            &c,
            serde_json::json!({ "argv": ["touch", "ran-under-a-stale-fence"], "bot": "b1", "lease": old }),
        )
        .await;
    match refused {
        Err(ClientError::Api {
            status,
            code,
            message,
            ..
        }) => {
            ensure!(
                status == StatusCode::CONFLICT && code == "stale_lease",
                "{status} {code}: {message}"
            );
            // The guest's own words: it knew fence 2 from the hello.
            ensure!(message.contains("current fence 2"), "{message}");
        }
        other => bail!("a stale fence reached a restarted guest and was not refused: {other:?}"),
    }
    ensure!(
        !w.home_of(&c).join("ran-under-a-stale-fence").exists(),
        "the stale command ran"
    );
    w.check_log()
}

/// Sets the control plane's lease row of `b1` on `c` behind its back (a control plane reading
/// stale state): `None` deletes it (no lease known), else `(owner, fence, expires_at)`.
async fn set_b1_row(w: &World, c: &str, row: Option<(Option<&str>, i64, i64)>) -> Result<()> {
    let db = w.data_dir.path().join("rakazo.db");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display())).await?;
    let changed = match row {
        None => {
            sqlx::query("DELETE FROM leases WHERE computer_id = $1 AND bot = 'b1'")
                .bind(c)
                .execute(&pool)
                .await?
        }
        Some((owner, fence, expires_at)) => {
            sqlx::query(
                "INSERT INTO leases (computer_id, bot, owner, fence, expires_at) \
                 VALUES ($1, 'b1', $2, $3, $4) ON CONFLICT (computer_id, bot) \
                 DO UPDATE SET owner = $2, fence = $3, expires_at = $4",
            )
            .bind(c)
            .bind(owner)
            .bind(fence)
            .bind(expires_at)
            .execute(&pool)
            .await?
        }
    };
    ensure!(changed.rows_affected() == 1, "no lease row of b1 changed");
    pool.close().await;
    Ok(())
}

/// Releases b1's `lease` on `c`; the release's checkpoint must have saved the home.
async fn release_saving(w: &World, c: &str, lease: &str) -> Result<()> {
    let released = w
        .post(
            &format!("/v1/computers/{c}/leases/b1/release"),
            serde_json::json!({ "lease": lease }),
        )
        .await?;
    ensure!(
        released["checkpoint"]["status"] == "saved",
        "release of {lease}: {released}"
    );
    Ok(())
}

/// Home export and import carry the authority they act under (issue 11): the control plane
/// names the lease fences it knows, and a guest that knows a newer lease refuses the operation
/// itself, before anything happens. The guest learns `run-2:2` of b1 (a command presents it);
/// then the database's row is turned back, as a control plane on stale state would read it:
/// - b1 released at fence 1: the checkpoint is refused (409-class `stale_lease`, the guest's
///   words), no revision is recorded; the restore is refused the same way and the home keeps
///   its newer file;
/// - no row of b1 at all (a run the control plane has not seen): the restore is refused too;
/// - the row as it really is: the restore goes through (the home lock was released by every
///   refusal), and the run's release checkpoints the home.
#[tokio::test(flavor = "multi_thread")]
async fn a_home_operation_on_stale_leases_is_refused_by_the_guest() -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        allow_warn: vec![
            "home checkpoint failed".into(),
            "home restore failed".into(),
        ],
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("ws-home-fence").await?;
    // 8 MiB more than a stream's window: the refused import's sender runs into the guest's
    // stop before it sends the whole archive, and still reports the guest's refusal.
    w.sh(
        &c,
        "echo v1 > notes.txt && head -c 8388608 /dev/urandom > big.bin",
    )
    .await?;
    let saved = w.home_ok(&c, "checkpoint").await?;
    let old = w.lease(&c, "b1", "run-1").await?;
    release_saving(&w, &c, &old).await?;
    let rev = w.home_revision(&c).await?.context("a revision")?;
    ensure!(
        saved["revision"].as_u64().is_some_and(|r| r < rev),
        "{saved} then {rev}"
    );
    let live = w.lease(&c, "b1", "run-2").await?;
    ensure!(old == "run-1:1" && live == "run-2:2", "{old} {live}");
    // A command under the new lease: the guest has run-2:2 now, whatever the push's timing.
    let out = w
        .exec(
            &c,
            serde_json::json!({ "argv": ["true"], "bot": "b1", "lease": live }),
        )
        .await?;
    ensure!(out.code == Some(0), "exec under {live}: {:?}", out.error);
    w.sh(&c, "echo v2 > notes.txt").await?;
    let notes = w.home_of(&c).join("notes.txt");

    // The control plane's view goes back: b1's lease released at fence 1.
    set_b1_row(&w, &c, Some((None, 1, 0))).await?;
    for flow in ["checkpoint", "restore"] {
        let line = home_last(&w, &c, flow).await?;
        ensure!(
            line["type"] == "error" && line["code"] == "stale_lease",
            "{flow} on stale leases: {line}"
        );
        let msg = line["message"].as_str().unwrap_or("");
        let op = if flow == "checkpoint" {
            "home export"
        } else {
            "home import"
        };
        ensure!(
            msg.contains(&format!("{op} refused"))
                && msg.contains("it named fence 1 for bot b1")
                && msg.contains("run-2:2"),
            "{flow}: {msg}"
        );
        ensure!(line["uncertain"] == false, "{flow}: {line}");
        ensure!(
            w.home_revision(&c).await? == Some(rev),
            "the revision moved after a refused {flow}"
        );
        ensure!(
            std::fs::read_to_string(&notes)? == "v2\n",
            "the home changed after a refused {flow}"
        );
    }

    // No row at all: the control plane knows no lease of b1; the guest knows a live one.
    set_b1_row(&w, &c, None).await?;
    let line = home_last(&w, &c, "restore").await?;
    ensure!(line["code"] == "stale_lease", "restore without b1: {line}");
    let msg = line["message"].as_str().unwrap_or("");
    ensure!(
        msg.contains("it did not name bot b1") && msg.contains("replace the home under that run"),
        "{msg}"
    );
    ensure!(
        std::fs::read_to_string(&notes)? == "v2\n",
        "the home changed"
    );

    // The row as it is (held by run-2:2; its expiry put in 2100): the same restore goes through.
    set_b1_row(&w, &c, Some((Some("run-2"), 2, 4_102_444_800_000))).await?;
    let restored = w.home_ok(&c, "restore").await?;
    ensure!(restored["revision"].as_u64() == Some(rev), "{restored}");
    ensure!(
        std::fs::read_to_string(&notes)? == "v1\n",
        "the restore did not bring the checkpoint back"
    );
    release_saving(&w, &c, &live).await?;
    w.check_log()
}
