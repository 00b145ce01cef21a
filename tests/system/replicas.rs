//! Several control planes on one PostgreSQL (issue 14): any replica serves any computer, and a
//! replica killed with its guests connected loses only what was in flight.

use anyhow::{anyhow, bail, Context, Result};
use control_plane::client::ClientError;
use futures_util::StreamExt;
use std::time::Duration;
use tests::live::{close_reason, connect, Rfb, WsBytes};
use tests::replicas::Replicas;
use tests::{wait_for, ExecOutput, World};
use tokio_tungstenite::tungstenite::Message;

/// What an exec through the API came to.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Ok,
    /// Failed with `uncertain: true` (in flight when the tunnel went).
    Uncertain(String),
    /// Any other failure.
    Failed(String),
}

fn outcome(r: &Result<ExecOutput, ClientError>, want: &[u8]) -> Outcome {
    match r {
        Ok(out) if out.code == Some(0) && out.stdout == want => Outcome::Ok,
        Ok(out) => match &out.error {
            Some(e) if e["uncertain"] == true => Outcome::Uncertain(e.to_string()),
            Some(e) => Outcome::Failed(e.to_string()),
            None => Outcome::Failed(format!("{:?} {:?}", out.code, out.message)),
        },
        Err(ClientError::Api {
            uncertain: true,
            code,
            ..
        }) => Outcome::Uncertain(code.clone()),
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

fn allow_failover_warns(o: &mut tests::WorldOptions) {
    // A replica killed mid-operation: the others see its relayed streams and its guests go.
    o.allow_warn.push("peer connection refused".into());
    // sqlx flags statements over 1 s: two cores running three replicas and their guests.
    o.allow_warn.push("slow statement".into());
}

async fn lease_of(w: &World, c: &str, bot: &str) -> Result<serde_json::Value> {
    Ok(w.client
        .json(
            hyper::Method::GET,
            &format!("/v1/computers/{c}/leases/{bot}"),
            None,
        )
        .await?)
}

/// Execs `echo n<i>` (after a 50 ms sleep) through `w` in a loop, up to `max` times or until
/// `done` says the outcomes so far are enough.
fn exec_loop(
    w: &World,
    c: &str,
    max: u32,
    done: impl Fn(&[Outcome]) -> bool + Send + 'static,
) -> tokio::task::JoinHandle<Vec<Outcome>> {
    let client = w.client.clone();
    let path = format!("/v1/computers/{c}/exec");
    tokio::spawn(async move {
        let mut seen = Vec::new();
        for i in 0..max {
            let want = format!("n{i}\n");
            let spec =
                serde_json::json!({ "argv": ["sh", "-c", "sleep 0.05; echo n$0", i.to_string()] });
            seen.push(outcome(
                &tests::exec_via(&client, &path, &spec).await,
                want.as_bytes(),
            ));
            if done(&seen) {
                break;
            }
        }
        seen
    })
}

/// Starts `bot`'s desktop through `w` under a run's lease, then ends the run.
async fn desktop(w: &World, c: &str, bot: &str) -> Result<()> {
    let lease = w.lease(c, bot, "run-desk").await?;
    w.post(
        &format!("/v1/computers/{c}/screens/{bot}/ensure"),
        serde_json::json!({ "lease": lease }),
    )
    .await?;
    w.post(
        &format!("/v1/computers/{c}/leases/{bot}/release"),
        serde_json::json!({ "lease": lease, "outcome": "success" }),
    )
    .await?;
    Ok(())
}

/// A view URL of `bot`'s desktop issued by `w`, and its websocket opened on `w`.
async fn view(w: &mut World, c: &str, bot: &str) -> Result<tests::live::Ws> {
    let path = w.screen_url(c, bot, "view").await?;
    w.add_secret(path.trim_start_matches("/cap/"));
    connect(&w.http, &path).await
}

/// How long a refused `rakazo serve` may take to exit.
const REFUSAL_WAIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn any_replica_serves_any_computer_and_a_killed_holder_loses_only_what_was_in_flight(
) -> Result<()> {
    let mut r = Replicas::start(3, |_, o| {
        allow_failover_warns(o);
        // The checkpoint in flight through the killed replica.
        o.allow_warn
            .push("home checkpoint failed; the previous revision stays current".into());
    })
    .await?;
    // Created through replica 0 (its guest dials replica 0 first).
    let c = r.worlds[0].create_computer("ws-replicas").await?;
    let holder = wait_for(Duration::from_secs(10), "the guest's replica", || {
        r.holder_of(&c)
    })
    .await?;
    let (a, b) = ((holder + 1) % 3, (holder + 2) % 3);

    // Exec'd through another replica: relayed through the holder.
    let out = r.worlds[a]
        .exec(
            &c,
            serde_json::json!({ "argv": ["sh", "-c", "echo via $0", "relay"] }),
        )
        .await?;
    assert_eq!(out.stdout, b"via relay\n", "{:?}", out.events);
    // Shown by the third: connected, with the guest's report of its machine.
    let shown = r.worlds[b].show(&c).await?;
    assert_eq!(shown["connected"], true, "{shown}");
    assert!(shown["machine"]["uptime_secs"].is_u64(), "{shown}");

    // Viewed through the third: a desktop started through one replica, a view URL issued by
    // another, its websocket on the third, an RFB session relayed through the holder.
    desktop(&r.worlds[a], &c, "bot-v").await?;
    let ws = view(&mut r.worlds[b], &c, "bot-v").await?;
    let rfb = Rfb::handshake(WsBytes::new(ws)).await?;
    assert!(
        rfb.width >= 640 && rfb.height >= 480,
        "{}x{}",
        rfb.width,
        rfb.height
    );
    drop(rfb);

    // A home worth checkpointing for a while, and a first revision.
    r.worlds[a]
        .sh(
            &c,
            "head -c 200000000 /dev/urandom > big.bin && echo kept > kept.txt",
        )
        .await?;
    r.worlds[b].home_ok(&c, "checkpoint").await?;
    let before = r.worlds[b]
        .home_revision(&c)
        .await?
        .ok_or_else(|| anyhow!("no revision after a checkpoint"))?;

    // An exec loop through replica a and a checkpoint through replica b, then kill -9 of the
    // replica holding the guest.
    let execs = exec_loop(&r.worlds[a], &c, 400, |seen| {
        let first_failure = seen.iter().position(|o| *o != Outcome::Ok);
        first_failure.is_some_and(|f| seen[f..].iter().filter(|o| **o == Outcome::Ok).count() == 20)
    });
    let client_b = r.worlds[b].client.clone();
    let cc = c.clone();
    let checkpoint = tokio::spawn(async move {
        let resp = client_b
            .send(
                hyper::Method::POST,
                &format!("/v1/computers/{cc}/home/checkpoint"),
                None,
                None,
                control_plane::client::full_body(bytes::Bytes::new()),
            )
            .await;
        match resp {
            Ok(resp) => {
                use http_body_util::BodyExt;
                let body = resp.into_body().collect().await.map(|b| b.to_bytes());
                format!("{body:?}")
            }
            Err(e) => e.to_string(),
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A run's lease, taken through replica a before the kill (after the checkpoint began: it
    // would wait for it otherwise).
    let run = r.worlds[a].lease(&c, "bot-l", "run-l").await?;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    r.worlds[holder].kill_server();

    let seen = execs.await?;
    let failures: Vec<&Outcome> = seen.iter().filter(|o| **o != Outcome::Ok).collect();
    assert!(
        failures.iter().all(|o| matches!(o, Outcome::Uncertain(_))),
        "only operations in flight may fail, as uncertain: {failures:?}"
    );
    assert!(
        failures.len() <= 2,
        "at most the operation(s) in flight fail: {failures:?}"
    );
    assert!(
        seen.ends_with(&[Outcome::Ok]),
        "the loop succeeds again after the kill: {seen:?}"
    );
    let checkpointed = checkpoint.await?;
    // The checkpoint completed or left the previous revision; either way exactly one later
    // checkpoint advances it by one, and the home is whole.
    let now = r.worlds[b].home_revision(&c).await?.unwrap_or(0);
    assert!(
        now == before || now == before + 1,
        "revision {before} became {now}; checkpoint said {checkpointed}"
    );

    // The lease survived the kill, neither lost nor doubled: same fence, still renewable, and
    // released once.
    let l = lease_of(&r.worlds[b], &c, "bot-l").await?;
    assert_eq!(l["lease"], run.as_str(), "{l}");
    let again = r.worlds[b].lease(&c, "bot-l", "run-other").await;
    assert!(again.is_err(), "a second run must not get a held lease");
    r.worlds[a]
        .post(
            &format!("/v1/computers/{c}/leases/bot-l/release"),
            serde_json::json!({ "lease": run, "outcome": "success" }),
        )
        .await?;
    // Released through another replica than took it: that release's checkpoint, and one more,
    // each advance the revision by exactly one; the home is whole.
    let after_release = r.worlds[b].home_revision(&c).await?.unwrap_or(0);
    assert!(
        after_release == now || after_release == now + 1,
        "{now} -> {after_release}"
    );
    r.worlds[b].home_ok(&c, "checkpoint").await?;
    assert_eq!(
        r.worlds[a].home_revision(&c).await?,
        Some(after_release + 1)
    );
    assert_eq!(
        r.worlds[a].sh(&c, "cat kept.txt; wc -c < big.bin").await?,
        "kept\n200000000\n"
    );
    // The guest now runs on one of the live replicas.
    wait_for(
        Duration::from_secs(20),
        "the guest on a live replica",
        || r.holder_of(&c).filter(|h| *h != holder),
    )
    .await?;
    for i in [a, b] {
        r.worlds[i].check_log()?;
    }
    r.worlds[holder].allow_warn("");
    r.worlds[holder].check_log()?;
    Ok(())
}

#[tokio::test]
async fn a_second_serve_on_one_sqlite_data_dir_is_refused() -> Result<()> {
    let mut w = World::start().await?;
    let out = tokio::process::Command::new(tests::bin("rakazo"))
        .arg("serve")
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("RAKAZO_DATA_DIR", w.data_dir.path())
        .env("RAKAZO_HTTP_ADDR", "127.0.0.1:0")
        .env("RAKAZO_TUNNEL_ADDR", "127.0.0.1:0")
        .kill_on_drop(true)
        .output();
    // A refused serve exits at once; one that started would serve until killed.
    let out = tokio::time::timeout(REFUSAL_WAIT, out)
        .await
        .map_err(|_| anyhow!("a second serve on the data dir started and kept running"))??;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a second serve started: {stderr}");
    assert!(
        stderr.contains("another rakazo serve is running on data dir")
            && stderr.contains("SQLite allows one control plane"),
        "{stderr}"
    );
    // The first is undisturbed.
    let c = w.create_computer("ws-one").await?;
    assert_eq!(w.sh(&c, "echo still").await?, "still\n");
    w.check_log()
}

#[tokio::test]
async fn a_replica_with_other_secrets_is_refused() -> Result<()> {
    let r = Replicas::start(1, |_, _| {}).await?;
    let dir = tempfile::tempdir()?;
    // Configured as a replica should be (the shared database and object store), so nothing
    // but its own secrets (a fresh data dir: its own API token, capability key and tunnel
    // certificate) can refuse it.
    let store = &r.store;
    let out = tokio::process::Command::new(tests::bin("rakazo"))
        .arg("serve")
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("RAKAZO_DATA_DIR", dir.path())
        .env("DATABASE_URL", &r.database_url)
        .env("RAKAZO_HTTP_ADDR", "127.0.0.1:0")
        .env("RAKAZO_TUNNEL_ADDR", "127.0.0.1:0")
        .env("RAKAZO_HOME_STORE", "object")
        .env("RAKAZO_S3_ENDPOINT", &store.endpoint)
        .env("RAKAZO_S3_BUCKET", &store.bucket)
        .env("RAKAZO_S3_ACCESS_KEY_ID", &store.access_key_id)
        .env("RAKAZO_S3_SECRET_ACCESS_KEY", &store.secret_access_key)
        .env("RAKAZO_S3_PATH_STYLE", "true")
        .env("RAKAZO_HOME_CONTENT_KEY", &store.content_key_hex)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(REFUSAL_WAIT, out)
        .await
        .map_err(|_| anyhow!("a replica with its own secrets started and kept running"))??;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        bail!("a replica with its own secrets started: {stderr}");
    }
    assert!(
        stderr.contains("differs from the one the other replicas on this database share"),
        "{stderr}"
    );
    Ok(())
}

#[tokio::test]
async fn an_idle_claim_of_a_killed_replica_is_taken_over() -> Result<()> {
    let mut r = Replicas::start(2, |_, o| {
        allow_failover_warns(o);
        o.idle_timeout_secs = Some(4);
    })
    .await?;
    let c = r.worlds[0].create_computer("ws-idle-replicas").await?;
    let holder = wait_for(Duration::from_secs(10), "the guest's replica", || {
        r.holder_of(&c)
    })
    .await?;
    let other = 1 - holder;
    // A home big enough that its idle checkpoint is still running when its replica dies.
    r.worlds[other]
        .sh(
            &c,
            "head -c 400000000 /dev/urandom > big.bin && echo kept > kept.txt",
        )
        .await?;
    r.worlds[other].home_ok(&c, "checkpoint").await?;
    let before = r.worlds[other]
        .home_revision(&c)
        .await?
        .ok_or_else(|| anyhow!("no revision"))?;
    // The holder judges the computer idle, claims it and starts checkpointing: killed then.
    wait_for(Duration::from_secs(30), "the holder's idle claim", || {
        r.worlds[holder]
            .log()
            .contains("computer idle: checkpointing its home")
            .then_some(())
    })
    .await?;
    r.worlds[holder].kill_server();
    // The guest moves to the survivor, whose idle job takes the claim once the dead one's has
    // expired, checkpoints and stops the computer.
    let survivor = &r.worlds[other];
    let stopped = wait_for(Duration::from_secs(90), "the survivor's suspension", || {
        survivor
            .log()
            .contains("computer suspended after being idle")
            .then_some(())
    })
    .await;
    if stopped.is_err() {
        bail!(
            "not suspended by the survivor; its log:\n{}",
            survivor.log()
        );
    }
    let shown = survivor.show(&c).await?;
    assert_eq!(shown["state"], "stopped", "{shown}");
    // Nothing doubled: the dead replica's checkpoint left no revision or one, the survivor's
    // added exactly one.
    let now = survivor.home_revision(&c).await?.unwrap_or(0);
    assert!(
        now == before + 1 || now == before + 2,
        "revision {before} became {now}"
    );
    // Nothing lost: started again, the home is there.
    let s = survivor
        .client
        .json(
            hyper::Method::POST,
            &format!("/v1/computers/{c}/start"),
            Some(&serde_json::json!({})),
        )
        .await?;
    assert_eq!(s["state"], "running", "{s}");
    assert_eq!(
        survivor.sh(&c, "cat kept.txt; wc -c < big.bin").await?,
        "kept\n400000000\n"
    );
    r.worlds[other].check_log()?;
    r.worlds[holder].allow_warn("");
    r.worlds[holder].check_log()?;
    Ok(())
}

/// SIGTERM drains a replica (a rollout's shutdown): it tells its guests to go, and they dial
/// another replica at once, not after the dead-replica timeout; a view stream through it and
/// one relayed through it from another replica each end with a close frame; an exec loop
/// through another replica sees at most what was in flight fail, as `uncertain`; the replica
/// leaves the cluster and exits 0.
#[tokio::test]
async fn a_terminated_replica_drains_its_guests_and_ends_its_streams_cleanly() -> Result<()> {
    let mut r = Replicas::start(3, |_, o| allow_failover_warns(o)).await?;
    let c = r.worlds[0].create_computer("ws-drain").await?;
    let holder = wait_for(Duration::from_secs(10), "the guest's replica", || {
        r.holder_of(&c)
    })
    .await?;
    let (a, b) = ((holder + 1) % 3, (holder + 2) % 3);

    // A desktop, and two view streams: one on the holder, one on b relayed through it.
    desktop(&r.worlds[a], &c, "bot-v").await?;
    let mut streams = Vec::new();
    for i in [holder, b] {
        let mut ws = view(&mut r.worlds[i], &c, "bot-v").await?;
        // The relay is up: the RFB server's version greeting came through.
        let first = tokio::time::timeout(Duration::from_secs(20), ws.next())
            .await
            .map_err(|_| anyhow!("no RFB greeting through replica {i}"))?;
        assert!(
            matches!(&first, Some(Ok(Message::Binary(b))) if b.starts_with(b"RFB ")),
            "{first:?}"
        );
        streams.push((i, ws));
    }

    // An exec loop through a, running across the drain.
    let execs = exec_loop(&r.worlds[a], &c, 300, |seen| seen.len() == 60);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let status = r.worlds[holder]
        .terminate_server(Duration::from_secs(20))
        .await?;
    assert!(status.success(), "the drained replica exited {status:?}");
    let log = r.worlds[holder].log();
    assert!(
        log.contains("draining: guests are sent to the other replicas"),
        "{log}"
    );
    assert!(log.contains("drained; exiting"), "{log}");

    // Both view streams end with a close frame, not a reset.
    for (i, ws) in &mut streams {
        let reason = close_reason(ws, Duration::from_secs(20))
            .await
            .with_context(|| format!("the view stream through replica {i}"))?;
        assert!(!reason.is_empty(), "replica {i} closed without a reason");
    }

    // The guest was told to go, and went: to a live replica, at once.
    let guest_log = std::fs::read_to_string(
        r.worlds[0]
            .machines_dir
            .path()
            .join("local")
            .join(&c)
            .join("guest.log"),
    )?;
    assert!(
        guest_log.contains("the control-plane replica is draining; dialling the next"),
        "{guest_log}"
    );
    wait_for(
        Duration::from_secs(20),
        "the guest on a live replica",
        || r.holder_of(&c).filter(|h| *h != holder),
    )
    .await?;

    let seen = execs.await?;
    let failures: Vec<&Outcome> = seen.iter().filter(|o| **o != Outcome::Ok).collect();
    assert!(
        failures.iter().all(|o| matches!(o, Outcome::Uncertain(_))),
        "only operations in flight may fail, as uncertain: {failures:?}"
    );
    assert!(failures.len() <= 2, "{failures:?}");
    assert!(seen.ends_with(&[Outcome::Ok]), "{seen:?}");

    // The cluster no longer lists it, so no new guest is sent there.
    let db = control_plane::db::Db::connect(&r.database_url).await?;
    let replicas: i64 = sqlx::query_scalar("SELECT count(*) FROM replicas")
        .fetch_one(db.pool())
        .await?;
    db.close().await;
    assert_eq!(replicas, 2, "the drained replica left the replicas table");
    for i in [a, b] {
        r.worlds[i].check_log()?;
    }
    r.worlds[holder].check_log()?;
    Ok(())
}
