//! Maintenance jobs (docs/lifecycle.md#maintenance-jobs) through the real control plane, guest and
//! `rakazo` CLI, on the fake provider (a replaced machine is a new directory and a new guest
//! process): an update and a recovery run to completion through their stages; a job's reservation
//! refuses a second job, new leases, stop, start, destroy, takeover and idle suspension while a
//! lease held before it keeps working; kill -9 of the control plane mid-job leaves the job
//! `interrupted` once the (shortened) heartbeat window passes after the restart, never run again,
//! the computer reserved until `release-interrupted --workers-stopped`, then recovered.
//!
//! A job is held in a stage deterministically, never by timing: by a lease it waits for
//! (`waiting`), or by the fake provider's `provision hang` fault (`provisioning`).

use anyhow::{anyhow, bail, ensure, Context, Result};
use control_plane::client::ClientError;
use hyper::{Method, StatusCode};
use std::process::{Output, Stdio};
use std::time::Duration;
use tests::{World, WorldOptions};

/// Upper bound for anything a job or the sweep is expected to do.
const WAIT: Duration = Duration::from_secs(90);
/// Bound on one CLI invocation (`--wait` follows a whole job).
const CLI_TIMEOUT: Duration = Duration::from_secs(120);

/// A world whose computers run on the fake provider, with `env` added to the server's.
async fn world(env: &[(&str, &str)], allow_warn: &[&str]) -> Result<World> {
    World::start_with(WorldOptions {
        providers: Some("fake,local".into()),
        default_provider: Some("fake".into()),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        allow_warn: allow_warn.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    })
    .await
}

/// `rakazo <args>` against `w` with a cleared environment.
async fn rakazo(w: &World, args: &[&str]) -> Result<Output> {
    let mut cmd = tokio::process::Command::new(tests::bin("rakazo"));
    cmd.args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("RAKAZO_URL", &w.http)
        .env("RAKAZO_TOKEN", w.api_token())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().context("start rakazo")?;
    tokio::time::timeout(CLI_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| anyhow!("rakazo {args:?} did not finish within {CLI_TIMEOUT:?}"))?
        .context("rakazo")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `rakazo <args>`, which must succeed; its stdout.
async fn rakazo_ok(w: &World, args: &[&str]) -> Result<String> {
    let out = rakazo(w, args).await?;
    ensure!(
        out.status.success(),
        "rakazo {args:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    Ok(text(&out.stdout))
}

/// `rakazo <args>`, which must fail with one `rakazo: …` line containing every needle; its
/// stderr.
async fn rakazo_refused(w: &World, args: &[&str], needles: &[&str]) -> Result<String> {
    let out = rakazo(w, args).await?;
    let stderr = text(&out.stderr);
    ensure!(
        out.status.code() == Some(1),
        "rakazo {args:?} should fail with 1, got {}: {}{stderr}",
        out.status,
        text(&out.stdout)
    );
    ensure!(stderr.starts_with("rakazo: "), "{args:?}: {stderr}");
    for n in needles {
        ensure!(stderr.contains(n), "{args:?}: {n:?} not in {stderr}");
    }
    Ok(stderr)
}

/// The API error's status, code and message.
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

/// Checks a `computer_reserved` refusal naming `job`, its kind and `stage`.
fn assert_reserved<T: std::fmt::Debug>(
    what: &str,
    r: Result<T, ClientError>,
    job: &str,
    kind: &str,
    stage: &str,
) -> Result<String> {
    let (status, code, msg) = refusal(r).with_context(|| what.to_string())?;
    ensure!(
        status == StatusCode::CONFLICT && code == "computer_reserved",
        "{what}: {status} {code} {msg}"
    );
    for needle in [job, kind, &format!("stage {stage}")] {
        ensure!(msg.contains(needle), "{what}: {needle:?} not in {msg:?}");
    }
    Ok(msg)
}

async fn job(w: &World, id: &str) -> Result<serde_json::Value> {
    Ok(w.client
        .json(Method::GET, &format!("/v1/jobs/{id}"), None)
        .await?)
}

/// Polls job `id` until `pred` holds; returns the view that satisfied it.
async fn wait_job(
    w: &World,
    id: &str,
    what: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> Result<serde_json::Value> {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut last = serde_json::Value::Null;
    while tokio::time::Instant::now() < deadline {
        last = job(w, id).await?;
        if pred(&last) {
            return Ok(last);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("timed out waiting for {what}; last view: {last}")
}

fn stages(j: &serde_json::Value) -> Vec<String> {
    j["stages"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s["stage"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The fake machines of computer `c` that exist now (their directories).
fn machines(w: &World, c: &str) -> Result<Vec<String>> {
    let root = w.machines_dir.path().join("fake");
    let mut found = Vec::new();
    for e in std::fs::read_dir(&root)? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!("fake-{c}-")) {
            found.push(name);
        }
    }
    found.sort();
    Ok(found)
}

async fn start(w: &World, c: &str, action: &str) -> Result<serde_json::Value, ClientError> {
    w.post(
        &format!("/v1/computers/{c}/{action}"),
        serde_json::json!({}),
    )
    .await
}

/// `rakazo computer update --wait` and `recover --wait`: each runs its stages to the end, the
/// machine is replaced (a new fake machine, the old one gone), the update keeps the live home
/// (it checkpoints first) and the recovery falls back to the last saved home, saying so.
#[tokio::test(flavor = "multi_thread")]
async fn an_update_and_a_recovery_run_to_completion_with_their_stages() -> Result<()> {
    let mut w = world(&[], &[]).await?;
    let c = w.create_computer("ws-jobs").await?;
    let first = machines(&w, &c)?;
    assert_eq!(first.len(), 1, "{first:?}");
    // Live work, never checkpointed: the update saves it before replacing the machine.
    w.sh(&c, "echo live-before-update > kept.txt").await?;
    assert_eq!(w.home_revision(&c).await?, None);

    let out = rakazo_ok(&w, &["computer", "update", &c, "--wait"]).await?;
    let seen: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("stage "))
        .collect();
    assert_eq!(
        seen,
        [
            "queued",
            "checkpointing",
            "stopping",
            "provisioning",
            "starting",
            "restoring",
            "done"
        ],
        "{out}"
    );
    assert!(out.trim_end().ends_with("succeeded"), "{out}");
    let second = machines(&w, &c)?;
    assert_eq!(second.len(), 1, "one machine: {second:?}");
    assert_ne!(second, first, "the machine was replaced");
    assert_eq!(w.sh(&c, "cat kept.txt").await?, "live-before-update\n");
    let revision = w
        .home_revision(&c)
        .await?
        .context("the update checkpointed")?;
    let shown = w.show(&c).await?;
    assert_eq!(shown["state"], "running", "{shown}");

    // `computer jobs` lists it, with the revision it saved and restored.
    let listed: serde_json::Value =
        serde_json::from_str(&rakazo_ok(&w, &["computer", "jobs", &c, "--json"]).await?)?;
    let jobs = listed["jobs"].as_array().context("jobs")?;
    assert_eq!(jobs.len(), 1, "{listed}");
    assert_eq!(jobs[0]["kind"], "update");
    assert_eq!(jobs[0]["state"], "succeeded");
    assert_eq!(jobs[0]["reserving"], false);
    assert_eq!(jobs[0]["revision"].as_u64(), Some(revision));
    let update_id = jobs[0]["id"].as_str().context("id")?.to_string();
    let one = rakazo_ok(&w, &["computer", "jobs", &c, "--job", &update_id]).await?;
    assert!(
        one.starts_with(&format!("{update_id}\t{c}\tupdate\tsucceeded\tstage done")),
        "{one}"
    );

    // Work after the last checkpoint is what a recovery loses, and it says so first.
    w.sh(&c, "echo unsaved > lost.txt").await?;
    let out = rakazo_ok(&w, &["computer", "recover", &c, "--wait"]).await?;
    assert!(
        out.contains(&format!(
            "warning: recovery restores the last saved home (revision {revision})"
        )),
        "{out}"
    );
    let seen: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("stage "))
        .collect();
    assert_eq!(
        seen,
        [
            "queued",
            "stopping",
            "provisioning",
            "starting",
            "restoring",
            "done"
        ],
        "no checkpoint: {out}"
    );
    let third = machines(&w, &c)?;
    assert_eq!(third.len(), 1, "{third:?}");
    assert!(
        third != second && third != first,
        "replaced again: {third:?}"
    );
    assert_eq!(w.sh(&c, "cat kept.txt").await?, "live-before-update\n");
    assert_eq!(
        w.sh(&c, "test -e lost.txt && echo there || echo gone")
            .await?,
        "gone\n"
    );
    assert_eq!(w.home_revision(&c).await?, Some(revision), "no checkpoint");
    w.check_log()
}

/// While an update waits for a run that held its lease before the job began, the computer is
/// reserved: a second update or a recovery, a new lease (API and CLI), stop, start, destroy
/// and takeover are refused with 409 `computer_reserved` naming the job, its kind and stage;
/// the running bot renews its lease and keeps running commands. Its release lets the update
/// through, and then leases are granted again.
#[tokio::test(flavor = "multi_thread")]
async fn a_reservation_refuses_leases_stop_takeover_and_a_second_job() -> Result<()> {
    let mut w = world(&[], &[]).await?;
    let c = w.create_computer("ws-reserve").await?;
    let held = w.lease(&c, "bot-1", "run-1").await?;
    // A user in control of bot-4 before the job keeps it: renewals are not takeovers.
    let takeover4 = format!("/v1/computers/{c}/screens/bot-4/takeover");
    let control = w.post(&takeover4, serde_json::json!({})).await?;
    let control_id = control["control_lease"]
        .as_str()
        .context("control lease")?
        .to_string();
    let created = start(&w, &c, "update").await?;
    let id = created["id"].as_str().context("job id")?.to_string();
    assert_eq!(created["kind"], "update");
    assert_eq!(created["reserving"], true);
    let waiting = wait_job(&w, &id, "the update waiting for bot-1's run", |j| {
        j["stage"] == "waiting"
    })
    .await?;
    assert_eq!(waiting["state"], "running", "{waiting}");
    assert!(waiting["heartbeat_at_ms"].as_i64().is_some(), "{waiting}");

    let stage = "waiting";
    let refused = [
        ("a second update", start(&w, &c, "update").await),
        ("a recovery", start(&w, &c, "recover").await),
        (
            "a new lease",
            w.post(
                &format!("/v1/computers/{c}/leases/bot-2/acquire"),
                serde_json::json!({"owner": "run-2"}),
            )
            .await,
        ),
        ("stop", start(&w, &c, "stop").await),
        ("start", start(&w, &c, "start").await),
        ("takeover", start(&w, &c, "screens/bot-2/takeover").await),
        (
            "a new takeover",
            start(&w, &c, "screens/bot-5/takeover").await,
        ),
        (
            "destroy",
            w.client
                .json(Method::DELETE, &format!("/v1/computers/{c}"), None)
                .await,
        ),
    ];
    for (what, r) in refused {
        assert_reserved(what, r, &id, "update", stage)?;
    }
    rakazo_refused(
        &w,
        &["lease", "acquire", &c, "bot-3", "--owner", "run-3"],
        &["reserved by update job", &id],
    )
    .await?;
    // The user who held control of bot-4 before the job renews it (the same lease, a later
    // expiry); nobody takes new control (bot-2, bot-5 above).
    let renewed = w.post(&takeover4, serde_json::json!({})).await?;
    assert_eq!(renewed["control_lease"], control_id.as_str(), "{renewed}");
    assert!(
        renewed["expires_at_ms"].as_i64() >= control["expires_at_ms"].as_i64(),
        "{renewed} vs {control}"
    );
    // Control that lapses or is released is gone for the job's time: taking it again is new.
    w.post(
        &format!("/v1/computers/{c}/screens/bot-4/release-control"),
        serde_json::json!({}),
    )
    .await?;
    assert_reserved(
        "taking bot-4's control again once released",
        w.post(&takeover4, serde_json::json!({})).await,
        &id,
        "update",
        stage,
    )?;
    rakazo_refused(&w, &["computer", "update", &c], &["reserved", &id]).await?;

    // The run that held its lease before the job keeps going: renewals and its commands work.
    w.post(
        &format!("/v1/computers/{c}/leases/bot-1/renew"),
        serde_json::json!({"lease": held}),
    )
    .await?;
    let out = w
        .exec(
            &c,
            serde_json::json!({
                "argv": ["sh", "-c", "echo run-output > run.txt; cat run.txt"],
                "bot": "bot-1",
                "lease": held,
            }),
        )
        .await?;
    assert_eq!(out.code, Some(0));
    assert_eq!(text(&out.stdout), "run-output\n");
    // No lease was granted meanwhile.
    assert!(w
        .client
        .json(
            Method::GET,
            &format!("/v1/computers/{c}/leases/bot-2"),
            None
        )
        .await
        .is_err_and(
            |e| matches!(e, ClientError::Api { status, .. } if status == StatusCode::NOT_FOUND)
        ));

    // The run ends: the update checkpoints its work and replaces the machine.
    w.post(
        &format!("/v1/computers/{c}/leases/bot-1/release"),
        serde_json::json!({"lease": held}),
    )
    .await?;
    let done = wait_job(&w, &id, "the update to end", |j| {
        j["state"] != "running" && j["state"] != "queued"
    })
    .await?;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(
        stages(&done),
        [
            "queued",
            "waiting",
            "checkpointing",
            "stopping",
            "provisioning",
            "starting",
            "restoring",
            "done"
        ]
    );
    // A Team bot's commands run in its own directory: the run's work survived the update.
    assert_eq!(w.sh(&c, "cat bots/bot-1/run.txt").await?, "run-output\n");
    // Free again.
    w.lease(&c, "bot-2", "run-2").await?;
    w.check_log()
}

/// The idle job does not suspend a reserved computer: a run waiting for a takeover does not
/// keep a computer awake, so once the idle timeout passes it would be suspended, but the update
/// waiting for that run reserves it: the idle job reports it blocked by the job and leaves it
/// running.
#[tokio::test(flavor = "multi_thread")]
async fn idle_suspension_leaves_a_reserved_computer_alone() -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        providers: Some("fake,local".into()),
        default_provider: Some("fake".into()),
        idle_timeout_secs: Some(1),
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("ws-idle").await?;
    let held = w.lease(&c, "bot-1", "run-1").await?;
    w.post(
        &format!("/v1/computers/{c}/leases/bot-1/waiting_takeover"),
        serde_json::json!({"lease": held}),
    )
    .await?;
    let created = start(&w, &c, "update").await?;
    let id = created["id"].as_str().context("job id")?.to_string();
    wait_job(&w, &id, "the update waiting", |j| j["stage"] == "waiting").await?;
    let deadline = tokio::time::Instant::now() + WAIT;
    let blocked = loop {
        let v = w.show(&c).await?;
        if v["idle"]["decision"] == "blocked"
            && v["idle"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains(&id))
        {
            break v;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the idle job never reported the reservation: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(blocked["state"], "running", "{blocked}");
    assert!(
        blocked["idle"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("reserved by update job")),
        "{blocked}"
    );
    w.post(
        &format!("/v1/computers/{c}/leases/bot-1/release"),
        serde_json::json!({"lease": held}),
    )
    .await?;
    let done = wait_job(&w, &id, "the update to end", |j| {
        j["state"] != "running" && j["state"] != "queued"
    })
    .await?;
    assert_eq!(done["state"], "succeeded", "{done}");
    w.check_log()
}

/// kill -9 of the control plane while an update is stuck provisioning: after the restart the
/// job is not run again; once the heartbeat window (3 s here) passes it is `interrupted`, the
/// computer still refuses leases, stop and a recovery; `release-interrupted` needs
/// `--workers-stopped`, then frees it, and a recovery brings it back from the update's
/// checkpoint.
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_mid_job_leaves_it_interrupted_until_released() -> Result<()> {
    let mut w = world(
        &[("RAKAZO_JOB_HEARTBEAT_TIMEOUT_SECS", "3")],
        &["maintenance job interrupted"],
    )
    .await?;
    let c = w.create_computer("ws-kill").await?;
    w.sh(&c, "echo saved-by-the-update > kept.txt").await?;
    let faults = w.machines_dir.path().join("fake").join("faults");
    std::fs::write(&faults, "provision hang\n")?;
    let created = start(&w, &c, "update").await?;
    let id = created["id"].as_str().context("job id")?.to_string();
    let stuck = wait_job(&w, &id, "the update stuck provisioning", |j| {
        j["stage"] == "provisioning"
    })
    .await?;
    assert_eq!(stuck["state"], "running");
    let worker = stuck["worker"].as_str().context("worker")?.to_string();
    assert!(machines(&w, &c)?.is_empty(), "the old machine was removed");

    w.kill_server();
    w.spawn_server().await?;
    let interrupted = wait_job(&w, &id, "the job interrupted", |j| {
        j["state"] == "interrupted"
    })
    .await?;
    // Never claimed again: the same worker, the same stages, nothing provisioned.
    assert_eq!(interrupted["worker"], worker.as_str());
    assert_eq!(
        stages(&interrupted),
        ["queued", "checkpointing", "stopping", "provisioning"]
    );
    assert_eq!(interrupted["reserving"], true);
    assert!(
        interrupted["error"]
            .as_str()
            .is_some_and(|e| e.contains("no heartbeat")),
        "{interrupted}"
    );
    assert!(machines(&w, &c)?.is_empty(), "nothing provisioned again");
    let claims = w
        .log()
        .lines()
        .filter(|l| l.contains("maintenance job claimed") && l.contains(&id))
        .count();
    assert_eq!(claims, 1, "claimed once, by the killed process");

    // Still reserved: leases, stop and a recovery are refused, naming the job and the way out.
    let msg = assert_reserved(
        "a lease after the restart",
        w.post(
            &format!("/v1/computers/{c}/leases/bot-1/acquire"),
            serde_json::json!({"owner": "run-1"}),
        )
        .await,
        &id,
        "update",
        "provisioning",
    )?;
    assert!(msg.contains("release-interrupted"), "{msg}");
    assert_reserved(
        "stop",
        start(&w, &c, "stop").await,
        &id,
        "update",
        "provisioning",
    )?;
    rakazo_refused(&w, &["computer", "recover", &c], &["interrupted", &id]).await?;
    let listed = rakazo_ok(&w, &["computer", "jobs", &c]).await?;
    assert!(
        listed.starts_with(&format!(
            "{id}\t{c}\tupdate\tinterrupted\tstage provisioning"
        )),
        "{listed}"
    );

    // Only the explicit assertion releases it.
    rakazo_refused(
        &w,
        &["computer", "release-interrupted", &id],
        &["workers_stopped"],
    )
    .await?;
    assert_eq!(job(&w, &id).await?["state"], "interrupted");
    let out = rakazo_ok(
        &w,
        &["computer", "release-interrupted", &id, "--workers-stopped"],
    )
    .await?;
    assert!(out.contains("released"), "{out}");
    rakazo_refused(
        &w,
        &["computer", "release-interrupted", &id, "--workers-stopped"],
        &["only an interrupted job can be released"],
    )
    .await?;
    let released = job(&w, &id).await?;
    assert_eq!(released["state"], "released");
    assert_eq!(released["reserving"], false);
    assert!(machines(&w, &c)?.is_empty(), "released, not replayed");

    // Recovery is available: it rebuilds the machine from the update's checkpoint.
    let out = rakazo_ok(&w, &["computer", "recover", &c, "--wait"]).await?;
    assert!(out.trim_end().ends_with("succeeded"), "{out}");
    assert_eq!(machines(&w, &c)?.len(), 1);
    assert_eq!(w.sh(&c, "cat kept.txt").await?, "saved-by-the-update\n");
    w.lease(&c, "bot-1", "run-1").await?;
    w.check_log()
}

/// The fake machines' directory (its `faults` file, its `held-<op>` files).
fn fake_root(w: &World) -> std::path::PathBuf {
    w.machines_dir.path().join("fake")
}

/// Waits until the fake provider holds a call of `op` (`<op> hold` fault).
async fn until_held(w: &World, op: &str) -> Result<std::path::PathBuf> {
    let held = fake_root(w).join(format!("held-{op}"));
    let deadline = tokio::time::Instant::now() + WAIT;
    while !held.exists() {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the provider's {op} was never reached"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(held)
}

/// A stop under way holds the computer from its reservation check to its end: an update or a
/// recovery asked while its provider call is in progress (held there by the fake provider) is
/// refused 409 `computer_busy`, rather than created between the stop's check and its act. Once
/// the stop has ended an update is created and runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_stop_under_way_refuses_a_job_created_meanwhile() -> Result<()> {
    let mut w = world(&[], &[]).await?;
    let c = w.create_computer("ws-race").await?;
    std::fs::write(fake_root(&w).join("faults"), "stop hold\n")?;
    let stopping = start(&w, &c, "stop");
    let meanwhile = async {
        let held = until_held(&w, "stop").await?;
        let update = start(&w, &c, "update").await;
        let recover = start(&w, &c, "recover").await;
        std::fs::remove_file(&held)?;
        anyhow::Ok((update, recover))
    };
    let (stopped, meanwhile) = tokio::join!(stopping, meanwhile);
    let (update, recover) = meanwhile?;
    let stopped = stopped.context("the stop")?;
    assert_eq!(stopped["state"], "stopped", "{stopped}");
    for (what, r) in [("an update", update), ("a recovery", recover)] {
        let (status, code, msg) = refusal(r).with_context(|| what.to_string())?;
        ensure!(
            status == StatusCode::CONFLICT && code == "computer_busy",
            "{what} during the stop: {status} {code} {msg}"
        );
        ensure!(
            msg.contains(&c) && msg.contains("stop, start, destroy or takeover"),
            "{msg}"
        );
    }
    let listed = w
        .client
        .json(Method::GET, &format!("/v1/computers/{c}/jobs"), None)
        .await?;
    assert_eq!(listed["jobs"].as_array().map(Vec::len), Some(0), "{listed}");

    // Free once the stop has ended: the update runs on the stopped computer.
    let created = start(&w, &c, "update").await?;
    let id = created["id"].as_str().context("job id")?.to_string();
    let done = wait_job(&w, &id, "the update to end", |j| {
        j["state"] != "running" && j["state"] != "queued"
    })
    .await?;
    assert_eq!(done["state"], "succeeded", "{done}");
    w.check_log()
}

/// Every lifecycle event of computer `c` as `(event, cause, reason)`, oldest first.
async fn lifecycle(w: &World, c: &str) -> Result<Vec<(String, String, String)>> {
    Ok(w.lifecycle(c)
        .await?
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
            (s("event"), s("cause"), s("reason"))
        })
        .collect())
}

/// An update whose new machine cannot be provisioned (the fake provider refuses it) ends
/// `failed` at stage `provisioning` with the provider's error and the way out; `--wait` exits
/// non-zero. The reservation ends with it: leases are granted again. The computer is what the
/// README says a job failed from `stopping` on leaves: `provisioning`, without a machine, its
/// home safe in the store. The feed tells it: the machine removed, then the job's failure with
/// its stage and error. A recovery then rebuilds it from the update's checkpoint.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_job_ends_failed_with_its_stage_and_frees_the_computer() -> Result<()> {
    let mut w = world(&[], &["maintenance job failed"]).await?;
    let c = w.create_computer("ws-fail").await?;
    w.sh(&c, "echo saved-by-the-update > kept.txt").await?;
    std::fs::write(fake_root(&w).join("faults"), "provision invalid\n")?;
    let out = rakazo(&w, &["computer", "update", &c, "--wait"]).await?;
    let stdout = text(&out.stdout);
    ensure!(
        !out.status.success(),
        "a failed job's --wait fails: {stdout}"
    );
    let listed: serde_json::Value =
        serde_json::from_str(&rakazo_ok(&w, &["computer", "jobs", &c, "--json"]).await?)?;
    let failed = &listed["jobs"][0];
    let id = failed["id"].as_str().context("job id")?.to_string();
    assert_eq!(failed["state"], "failed", "{failed}");
    assert_eq!(failed["stage"], "provisioning", "{failed}");
    assert_eq!(failed["reserving"], false, "{failed}");
    let error = failed["error"].as_str().context("error")?;
    for needle in [
        "provisioning failed",
        "refused (injected)",
        &format!("rakazo computer recover {c}"),
    ] {
        assert!(error.contains(needle), "{needle:?} not in {error:?}");
    }
    assert!(stdout.contains("failed"), "{stdout}");

    // What the README says: no machine, `provisioning`, the update's checkpoint stored.
    let shown = w.show(&c).await?;
    assert_eq!(shown["state"], "provisioning", "{shown}");
    assert!(machines(&w, &c)?.is_empty(), "the old machine was removed");
    let revision = w
        .home_revision(&c)
        .await?
        .context("the update checkpointed")?;
    assert_eq!(failed["revision"].as_u64(), Some(revision), "{failed}");
    // The reservation is gone: a lease is granted (the run ends before the recovery).
    let lease = w.lease(&c, "bot-1", "run-1").await?;
    w.post(
        &format!("/v1/computers/{c}/leases/bot-1/release"),
        serde_json::json!({"lease": lease}),
    )
    .await?;

    // The feed: checkpointed and removed by the job, then its failure with stage and error.
    let events = lifecycle(&w, &c).await?;
    let tail: Vec<(&str, &str)> = events
        .iter()
        .rev()
        .take(3)
        .rev()
        .map(|(e, c, _)| (e.as_str(), c.as_str()))
        .collect();
    assert_eq!(
        tail,
        [
            ("checkpointed", "maintenance"),
            ("stopped", "maintenance"),
            ("job_failed", "maintenance")
        ],
        "{events:#?}"
    );
    let reason = &events.last().context("events")?.2;
    assert!(
        reason.starts_with(&format!(
            "update job {id} failed at stage provisioning: provisioning failed"
        )),
        "{reason}"
    );

    // The way out it names works.
    let out = rakazo_ok(&w, &["computer", "recover", &c, "--wait"]).await?;
    assert!(out.trim_end().ends_with("succeeded"), "{out}");
    assert_eq!(w.sh(&c, "cat kept.txt").await?, "saved-by-the-update\n");
    w.check_log()
}
