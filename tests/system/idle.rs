//! Idle suspension (docs/lifecycle.md#idle-suspension) through the real control plane and guest,
//! with idle timeouts of a few seconds: an idle computer's home is checkpointed, then its machine
//! stopped; leases and control keep it up; a run that starts during the suspension's claim is
//! refused; a failed checkpoint stops nothing; a takeover request keeps it awake for the keep-awake
//! window and then it suspends while the run keeps waiting.
//!
//! Nothing here passes or fails on how long something took: the tests wait (with generous
//! bounds) for what the idle job reports in `GET /v1/computers/{id}` (`idle.decision`) and for
//! state changes, and compare only the server's own timestamps.

use anyhow::{anyhow, bail, Result};
use control_plane::client::ClientError;
use hyper::{Method, StatusCode};
use std::time::Duration;
use tests::s3::S3Server;
use tests::{ObjectStoreOptions, World, WorldOptions};

/// Upper bound for anything the idle job is expected to do (it looks every few hundred ms).
const WAIT: Duration = Duration::from_secs(90);

/// Polls the computer until `pred` holds; returns the view that satisfied it.
async fn wait_view(
    w: &World,
    c: &str,
    what: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> Result<serde_json::Value> {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut last = serde_json::Value::Null;
    while tokio::time::Instant::now() < deadline {
        last = w.show(c).await?;
        if pred(&last) {
            return Ok(last);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("timed out waiting for {what}; last view: {last}")
}

fn decision(v: &serde_json::Value) -> &str {
    v["idle"]["decision"].as_str().unwrap_or("")
}

fn reason(v: &serde_json::Value) -> &str {
    v["idle"]["reason"].as_str().unwrap_or("")
}

/// The API error's status and code.
fn refusal<T: std::fmt::Debug>(r: Result<T, ClientError>) -> Result<(StatusCode, String, String)> {
    match r {
        Err(ClientError::Api {
            status,
            code,
            message,
            ..
        }) => Ok((status, code, message)),
        other => Err(anyhow!("expected an API refusal, got {other:?}")),
    }
}

/// A person's control lease on a bot nobody runs: holds a new computer up while a test sets it
/// up, whatever the machine's load, and lets it go with [`let_go`].
async fn hold(w: &World, c: &str) -> Result<()> {
    w.post(
        &format!("/v1/computers/{c}/screens/setup-hold/takeover"),
        serde_json::json!({}),
    )
    .await?;
    Ok(())
}

async fn let_go(w: &World, c: &str) -> Result<()> {
    w.post(
        &format!("/v1/computers/{c}/screens/setup-hold/release-control"),
        serde_json::json!({}),
    )
    .await?;
    Ok(())
}

fn world(idle_secs: u64, keep_awake_secs: Option<u64>) -> WorldOptions {
    WorldOptions {
        idle_timeout_secs: Some(idle_secs),
        takeover_keep_awake_secs: keep_awake_secs,
        ..Default::default()
    }
}

/// An idle computer: its home is checkpointed (the revision advances and holds the file), then
/// its machine is stopped; using it answers the stopped computer's 409, which says how to start
/// it, and a start brings it back with its home.
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_computer_is_checkpointed_then_stopped() -> Result<()> {
    let mut w = World::start_with(world(2, None)).await?;
    let c = w.create_computer("ws-idle").await?;
    w.put_file(
        &c,
        "notes/idle.txt",
        b"saved before the stop".to_vec(),
        false,
    )
    .await?;
    let before = w.home_revision(&c).await?;

    // The idle job records its decision just after the stop: wait for both.
    let stopped = wait_view(&w, &c, "the idle computer to stop", |v| {
        v["state"] == "stopped" && decision(v) != "suspending"
    })
    .await?;
    assert_eq!(decision(&stopped), "suspended", "{stopped}");
    let after = w.home_revision(&c).await?;
    assert!(
        after.is_some() && after > before,
        "the checkpoint advanced the revision: {before:?} -> {after:?}"
    );
    let stored = w
        .client
        .send(
            Method::GET,
            &format!("/v1/computers/{c}/home/content?path=notes/idle.txt"),
            None,
            None,
            control_plane::client::full_body(bytes::Bytes::new()),
        )
        .await?;
    let stored = http_body_util::BodyExt::collect(stored.into_body())
        .await?
        .to_bytes();
    assert_eq!(&stored[..], b"saved before the stop");
    let log = w.log();
    let checkpointed = log
        .find("computer idle: checkpointing its home")
        .ok_or_else(|| anyhow!("no idle checkpoint in the log"))?;
    let suspended = log
        .find("computer suspended after being idle")
        .ok_or_else(|| anyhow!("no suspension in the log"))?;
    assert!(checkpointed < suspended, "checkpoint first, then stop");

    let (status, code, message) =
        refusal(w.exec(&c, serde_json::json!({ "argv": ["true"] })).await)?;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::CONFLICT, "computer_not_running")
    );
    assert!(message.contains("start it first"), "{message}");

    let started = w
        .client
        .json(Method::POST, &format!("/v1/computers/{c}/start"), None)
        .await?;
    assert_eq!(started["state"], "running");
    assert_eq!(
        &w.get_file(&c, "notes/idle.txt").await?[..],
        b"saved before the stop"
    );
    w.check_log()
}

/// An execution lease, then a user's control lease, keep an idle computer up (the job reports
/// it busy, past its idle timeout, and leaves it running); once both are gone it suspends.
#[tokio::test(flavor = "multi_thread")]
async fn leases_and_control_keep_an_idle_computer_up() -> Result<()> {
    let mut w = World::start_with(world(3, None)).await?;
    let c = w.create_computer("ws-idle-busy").await?;
    let lease = w.lease(&c, "runner", "run-1").await?;
    let busy = wait_view(&w, &c, "the lease to keep it busy", |v| {
        decision(v) == "busy" && reason(v).contains("execution lease held by runner")
    })
    .await?;
    assert_eq!(busy["state"], "running", "{busy}");

    // A person takes control of another bot, then the run ends: control alone keeps it up.
    w.post(
        &format!("/v1/computers/{c}/screens/person/takeover"),
        serde_json::json!({}),
    )
    .await?;
    w.post(
        &format!("/v1/computers/{c}/leases/runner/release"),
        serde_json::json!({ "lease": lease, "outcome": "success" }),
    )
    .await?;
    let busy = wait_view(&w, &c, "control to keep it busy", |v| {
        decision(v) == "busy" && reason(v).contains("control lease held on person")
    })
    .await?;
    assert_eq!(busy["state"], "running", "{busy}");

    w.post(
        &format!("/v1/computers/{c}/screens/person/release-control"),
        serde_json::json!({}),
    )
    .await?;
    wait_view(&w, &c, "the computer to suspend", |v| {
        v["state"] == "stopped"
    })
    .await?;
    w.check_log()
}

async fn object_world(s3: &S3Server, idle_secs: u64) -> Result<World> {
    World::start_with(WorldOptions {
        object_store: Some(ObjectStoreOptions::for_server(s3)),
        idle_timeout_secs: Some(idle_secs),
        allow_warn: vec![
            "idle checkpoint failed".into(),
            "cannot abort a failed multipart upload".into(),
        ],
        ..Default::default()
    })
    .await
}

/// Sends `sig` (`STOP`, `CONT`) to a process.
fn signal(pid: u32, sig: &str) -> Result<()> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()?;
    if !status.success() {
        bail!("kill -{sig} {pid} failed");
    }
    Ok(())
}

/// The suspension claims the computer before exporting: while its checkpoint is held up (the
/// object store is frozen with SIGSTOP), a new run, a takeover and an operation are refused
/// with 409 `computer_suspending`; once the store resumes, the checkpoint completes and the
/// computer stops.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_starts_during_the_claim_is_refused() -> Result<()> {
    let s3 = S3Server::start().await?;
    let mut w = object_world(&s3, 3).await?;
    let c = w.create_computer("ws-idle-claim").await?;
    hold(&w, &c).await?;
    w.put_file(&c, "work.txt", b"in progress".to_vec(), false)
        .await?;
    let pid = s3.pid().ok_or_else(|| anyhow!("s3s-fs is not running"))?;
    signal(pid, "STOP")?;
    let_go(&w, &c).await?;
    let outcome = async {
        wait_view(&w, &c, "the suspension's claim", |v| {
            decision(v) == "suspending"
        })
        .await?;
        let run = w
            .post(
                &format!("/v1/computers/{c}/leases/late-bot/acquire"),
                serde_json::json!({ "owner": "run-late" }),
            )
            .await;
        let (status, code, message) = refusal(run)?;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::CONFLICT, "computer_suspending")
        );
        assert!(message.contains("idle"), "{message}");
        let takeover = w
            .post(
                &format!("/v1/computers/{c}/screens/late-bot/takeover"),
                serde_json::json!({}),
            )
            .await;
        assert_eq!(refusal(takeover)?.1, "computer_suspending");
        let exec = w.exec(&c, serde_json::json!({ "argv": ["true"] })).await;
        assert_eq!(refusal(exec)?.1, "computer_suspending");
        anyhow::Ok(())
    }
    .await;
    signal(pid, "CONT")?;
    outcome?;
    wait_view(&w, &c, "the computer to stop", |v| v["state"] == "stopped").await?;
    assert_eq!(w.home_revision(&c).await?, Some(1));
    let lease = w
        .client
        .json(
            Method::GET,
            &format!("/v1/computers/{c}/leases/late-bot"),
            None,
        )
        .await;
    assert_eq!(
        refusal(lease)?.0,
        StatusCode::NOT_FOUND,
        "the refused run got no lease"
    );
    w.check_log()
}

/// A checkpoint that fails (the object store is down) stops nothing: the computer keeps running
/// with its home, a WARN says so, and the suspension is retried; with the store back it goes
/// through.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_checkpoint_leaves_the_computer_running() -> Result<()> {
    let mut s3 = S3Server::start().await?;
    // 6 s: the failure is reported, then read back, before the job retries after another idle
    // timeout; at 3 s a loaded machine could let the retry claim the computer in between.
    let mut w = object_world(&s3, 6).await?;
    let c = w.create_computer("ws-idle-fail").await?;
    hold(&w, &c).await?;
    w.put_file(&c, "unsaved.txt", b"only on the machine".to_vec(), false)
        .await?;
    s3.kill();
    let_go(&w, &c).await?;
    let failed = wait_view(&w, &c, "a failed idle checkpoint", |v| {
        decision(v) == "failed"
    })
    .await?;
    assert!(reason(&failed).contains("checkpoint failed"), "{failed}");
    // Read after the failure was reported: nothing stopped it.
    let now = w.show(&c).await?;
    assert_eq!(now["state"], "running", "{now}");
    assert_eq!(
        &w.get_file(&c, "unsaved.txt").await?[..],
        b"only on the machine"
    );
    // The stored home's revisions live in the bucket: while it is down, asking for them is the
    // store's failure, said as such (the revision after the retry, 1, shows nothing was kept).
    let down = w.home_revision(&c).await.unwrap_err().to_string();
    assert!(down.contains("home_store_failed"), "{down}");
    assert!(w.log().contains("idle checkpoint failed"));

    s3.restart().await?;
    wait_view(&w, &c, "the retried suspension", |v| {
        v["state"] == "stopped"
    })
    .await?;
    assert_eq!(w.home_revision(&c).await?, Some(1));
    w.check_log()
}

/// request_takeover on a provider that does not bill (local): the waiting run's lease does not
/// keep the computer up by itself, but the request keeps it awake for the keep-awake window
/// (here 8 s, idle timeout 3 s); after the window it suspends while the run keeps waiting (its
/// lease stays live and renewable).
#[tokio::test(flavor = "multi_thread")]
async fn a_takeover_request_keeps_the_computer_awake_for_the_window() -> Result<()> {
    takeover_window(world(3, Some(8))).await
}

/// The same on PostgreSQL: the idle columns, the lease and `waiting_takeover` reads, the window.
#[tokio::test(flavor = "multi_thread")]
async fn a_takeover_request_keeps_the_computer_awake_on_postgres() -> Result<()> {
    let schema = tests::replicas::fresh_pg().await?;
    takeover_window(WorldOptions {
        database_url: Some(schema.url().to_owned()),
        ..world(3, Some(8))
    })
    .await
}

async fn takeover_window(opts: WorldOptions) -> Result<()> {
    let mut w = World::start_with(opts).await?;
    let c = w.create_computer("ws-idle-takeover").await?;
    // The request comes after the acquire, which the lease's expiry dates (server clock). Two
    // runs wait for a takeover: neither keeps the computer up past the window.
    let ttl_ms = 300_000;
    let mut leases = Vec::new();
    for bot in ["asker", "asker-2"] {
        let acquired = w
            .post(
                &format!("/v1/computers/{c}/leases/{bot}/acquire"),
                serde_json::json!({ "owner": format!("run-2fa-{bot}"), "ttl_ms": ttl_ms }),
            )
            .await?;
        let lease = acquired["lease"]
            .as_str()
            .ok_or_else(|| anyhow!("no lease in {acquired}"))?
            .to_string();
        let requested_after = acquired["expires_at_ms"]
            .as_i64()
            .ok_or_else(|| anyhow!("no expiry in {acquired}"))?
            - ttl_ms;
        w.post(
            &format!("/v1/computers/{c}/leases/{bot}/waiting_takeover"),
            serde_json::json!({ "lease": lease }),
        )
        .await?;
        leases.push((bot, lease, requested_after));
    }
    let requested_after = leases.iter().map(|l| l.2).max().unwrap_or(0);
    // The window lasts the configured 8 s from the last request. The job's report may still be
    // one made between the two requests, so wait for one made after both.
    let awake = wait_view(&w, &c, "the keep-awake window of the last request", |v| {
        decision(v) == "awake"
            && reason(v).contains("takeover")
            && v["idle"]["until_ms"]
                .as_i64()
                .is_some_and(|until| until >= requested_after + 8_000)
    })
    .await?;
    assert_eq!(awake["state"], "running", "{awake}");
    let until = awake["idle"]["until_ms"]
        .as_i64()
        .ok_or_else(|| anyhow!("no until_ms in {awake}"))?;

    let stopped = wait_view(&w, &c, "the suspension after the window", |v| {
        v["state"] == "stopped"
    })
    .await?;
    let stopped_at = stopped["updated_at_ms"].as_i64().unwrap_or(0);
    assert!(
        stopped_at >= until,
        "not suspended inside the window: stopped at {stopped_at}, window until {until}"
    );
    // The runs keep waiting: their leases are still live and renewable.
    for (bot, lease, _) in &leases {
        let renewed = w
            .post(
                &format!("/v1/computers/{c}/leases/{bot}/renew"),
                serde_json::json!({ "lease": lease }),
            )
            .await?;
        assert_eq!(renewed["lease"], lease.as_str());
    }
    w.check_log()
}
