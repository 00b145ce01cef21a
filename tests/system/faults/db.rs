//! PostgreSQL restarted under load (issue 36): two replicas on a private cluster, runs taking a
//! bot's lease and running commands under it on two computers, two runs contending for each
//! lease through different replicas; PostgreSQL stopped (`pg_ctl stop -m fast`), kept down
//! about 10 s, started again.
//!
//! While it is down every request answers 503 `database_unavailable` (not 500, and not a
//! request held until the database returns: the pool's acquire timeout bounds the wait);
//! after it returns requests succeed again with the same processes; no lease is granted twice
//! (the fences the grants returned are unique, and no grant answered before the previous
//! holder let go or lapsed); and what was committed before the stop is all there.

use anyhow::{bail, Context, Result};
use control_plane::client::{q, Client, ClientError};
use http_body_util::BodyExt;
use hyper::{Method, StatusCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tests::pgcluster::{PgCluster, OUTAGE_WARNS};
use tests::replicas::Replicas;

/// The contended lease's TTL: shorter than the outage, so leases lapse while it lasts.
const TTL_MS: i64 = 3000;
/// How long PostgreSQL stays down.
const OUTAGE: Duration = Duration::from_secs(10);
/// A request's answer is waited for this long at most.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// The wall clock in ms, the one the replicas on this host date leases with.
#[allow(clippy::disallowed_methods)] // reason: compared with the server's expires_at_ms
fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// One grant a run saw.
#[derive(Debug, Clone)]
struct Grant {
    owner: String,
    fence: u64,
    expires_ms: i64,
    /// When the run had its answer (after the grant committed).
    answered_ms: i64,
    /// When the run first asked to release it (it was held until then at least).
    release_sent_ms: Option<i64>,
}

/// What one contending run saw.
#[derive(Debug, Default)]
struct Tally {
    grants: Vec<Grant>,
    execs_ok: u32,
    /// 503 `database_unavailable` answers.
    unavailable: u32,
    /// Anything but the expected refusals.
    unexpected: Vec<String>,
}

/// The API code of a failure, if the server answered one.
fn code_of(e: &ClientError) -> Option<(StatusCode, &str)> {
    match e {
        ClientError::Api { status, code, .. } => Some((*status, code.as_str())),
        _ => None,
    }
}

/// Refusals a run may get while it contends: the other run holds the lease, its own lapsed or
/// was taken over, or the database is down.
const EXPECTED: [&str; 4] = [
    "lease_held",
    "lease_mismatch",
    "stale_lease",
    "database_unavailable",
];

fn note(t: &mut Tally, what: &str, e: &ClientError) {
    match code_of(e) {
        Some((s, "database_unavailable")) if s == StatusCode::SERVICE_UNAVAILABLE => {
            t.unavailable += 1
        }
        Some((_, c)) if EXPECTED.contains(&c) => {}
        _ => t.unexpected.push(format!("{what}: {e}")),
    }
}

/// A run contending for `bot`'s lease on `c` through `client` until `stop`: acquire, one
/// command under the lease, release; the release is asked again until it is answered, refused
/// as not the holder's, or the lease lapsed.
fn contend(
    client: Client,
    c: String,
    bot: &'static str,
    owner: &'static str,
    stop: Arc<AtomicBool>,
    granted: Arc<std::sync::atomic::AtomicU32>,
) -> tokio::task::JoinHandle<Tally> {
    tokio::spawn(async move {
        let mut t = Tally::default();
        let base = format!("/v1/computers/{}/leases/{bot}", q(&c));
        let exec_path = format!("/v1/computers/{}/exec", q(&c));
        while !stop.load(Ordering::Relaxed) {
            let body = serde_json::json!({ "owner": owner, "ttl_ms": TTL_MS });
            let asked = tokio::time::timeout(
                ANSWER_WITHIN,
                client.json(Method::POST, &format!("{base}/acquire"), Some(&body)),
            )
            .await;
            let v = match asked {
                Err(_) => {
                    t.unexpected.push("acquire: no answer".into());
                    continue;
                }
                Ok(Err(e)) => {
                    note(&mut t, "acquire", &e);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                Ok(Ok(v)) => v,
            };
            let (Some(lease), Some(fence), Some(expires_ms)) = (
                v["lease"].as_str().map(str::to_string),
                v["fence"].as_u64(),
                v["expires_at_ms"].as_i64(),
            ) else {
                t.unexpected.push(format!("acquire answered {v}"));
                continue;
            };
            granted.fetch_add(1, Ordering::Relaxed);
            let mut grant = Grant {
                owner: owner.into(),
                fence,
                expires_ms,
                answered_ms: wall_ms(),
                release_sent_ms: None,
            };
            let spec = serde_json::json!({
                "argv": ["sh", "-c", "echo $0", fence.to_string()],
                "bot": bot, "lease": lease,
            });
            match tokio::time::timeout(ANSWER_WITHIN, tests::exec_via(&client, &exec_path, &spec))
                .await
            {
                Ok(Ok(out)) if out.code == Some(0) => t.execs_ok += 1,
                Ok(Ok(out)) => match &out.error {
                    Some(e) if EXPECTED.iter().any(|c| e["code"] == *c) => {
                        if e["code"] == "database_unavailable" {
                            t.unavailable += 1;
                        }
                    }
                    _ => t.unexpected.push(format!("exec: {:?}", out.events)),
                },
                Ok(Err(e)) => note(&mut t, "exec", &e),
                Err(_) => t.unexpected.push("exec: no answer".into()),
            }
            let release = serde_json::json!({ "lease": lease, "outcome": "success" });
            loop {
                grant.release_sent_ms.get_or_insert_with(wall_ms);
                let r = tokio::time::timeout(
                    ANSWER_WITHIN,
                    client.json(Method::POST, &format!("{base}/release"), Some(&release)),
                )
                .await;
                match r {
                    Ok(Ok(_)) => break,
                    Ok(Err(e)) => {
                        note(&mut t, "release", &e);
                        let unavailable =
                            code_of(&e).is_some_and(|(_, c)| c == "database_unavailable");
                        if !unavailable || wall_ms() > expires_ms || stop.load(Ordering::Relaxed) {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(_) => {
                        t.unexpected.push("release: no answer".into());
                        break;
                    }
                }
            }
            t.grants.push(grant);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        t
    })
}

/// No lease granted twice: fences unique, and no grant answered while the previous holder (of
/// another run) still held it, that is before that holder asked to release it and before it
/// lapsed.
fn check_grants(computer: &str, grants: &mut [Grant]) -> Result<()> {
    grants.sort_by_key(|g| g.fence);
    for pair in grants.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if a.fence == b.fence {
            bail!("{computer}: fence {} granted twice: {a:?} {b:?}", a.fence);
        }
        if a.owner == b.owner {
            continue;
        }
        let held_until = a.release_sent_ms.unwrap_or(i64::MAX).min(a.expires_ms);
        if b.answered_ms < held_until {
            bail!("{computer}: {b:?} was granted while {a:?} held the lease");
        }
    }
    Ok(())
}

/// One request through each replica during the outage: what it answered and how long it took.
async fn probe(client: &Client, c: &str) -> Result<Vec<(String, Duration)>> {
    let acquire = serde_json::json!({ "owner": "run-probe", "ttl_ms": TTL_MS });
    let exec = serde_json::json!({ "argv": ["true"] });
    let asks = [
        ("show", Method::GET, format!("/v1/computers/{c}"), None),
        (
            "acquire",
            Method::POST,
            format!("/v1/computers/{c}/leases/bot-probe/acquire"),
            Some(&acquire),
        ),
        (
            "exec",
            Method::POST,
            format!("/v1/computers/{c}/exec"),
            Some(&exec),
        ),
    ];
    let asks = asks
        .into_iter()
        .map(|(what, method, path, body)| async move {
            let t0 = tokio::time::Instant::now();
            let answer = tokio::time::timeout(ANSWER_WITHIN, client.json(method, &path, body))
                .await
                .with_context(|| format!("{what}: no answer within {ANSWER_WITHIN:?}"))?;
            let took = t0.elapsed();
            match answer {
                Err(ClientError::Api {
                    status,
                    code,
                    message,
                    ..
                }) if status == StatusCode::SERVICE_UNAVAILABLE
                    && code == "database_unavailable" =>
                {
                    assert!(message.contains("database"), "{message}");
                    anyhow::Ok((what.to_string(), took))
                }
                other => bail!("{what} while the database is down answered {other:?}"),
            }
        });
    futures_util::future::join_all(asks)
        .await
        .into_iter()
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_database_fails_requests_with_503_and_loses_nothing() -> Result<()> {
    let pg = PgCluster::start()?;
    let mut r = Replicas::start_on(&pg.url(), 2, |_, o| {
        o.allow_warn
            .extend(OUTAGE_WARNS.iter().map(|w| w.to_string()));
        // Two cores running two replicas, four runs' worth of load and PostgreSQL.
        o.allow_warn.push("slow statement".into());
        // A replica taken for dead while the heartbeats could not be written.
        o.allow_warn.push("peer connection refused".into());
        // A run that ends while the database is down cannot record its checkpoint: the home's
        // changes stay on the computer for the next one (the test reads every committed write
        // back after the outage).
        o.allow_warn
            .push("checkpoint after the run failed; the previous revision stays current".into());
    })
    .await?;
    let c1 = r.worlds[0].create_computer("ws-pg-a").await?;
    let c2 = r.worlds[1].create_computer("ws-pg-b").await?;

    // Committed before the stop: the computers, a file written and checkpointed, a lease on
    // each computer (which also defers the run-end checkpoints of the contending runs).
    r.worlds[0]
        .put_file(
            &c1,
            "kept.txt",
            b"committed before the stop".to_vec(),
            false,
        )
        .await?;
    let revision = r.worlds[1].home_ok(&c1, "checkpoint").await?["revision"].clone();
    let mut witnesses = Vec::new();
    for c in [&c1, &c2] {
        witnesses.push(r.worlds[0].lease(c, "bot-w", "run-w").await?);
    }

    let stop = Arc::new(AtomicBool::new(false));
    let mut runs = Vec::new();
    let mut granted = Vec::new();
    for c in [&c1, &c2] {
        for (i, owner) in [(0, "run-a"), (1, "run-b")] {
            let client = r.worlds[i].client.clone();
            let count = Arc::new(std::sync::atomic::AtomicU32::new(0));
            granted.push(count.clone());
            runs.push(contend(
                client,
                c.clone(),
                "bot-x",
                owner,
                stop.clone(),
                count,
            ));
        }
    }
    // Every run holds the lease at least once before the outage (on a loaded machine the
    // contending runs may take turns slowly), and again after it.
    let every_run_granted = |since: &[u32]| {
        granted
            .iter()
            .zip(since)
            .all(|(g, n)| g.load(Ordering::Relaxed) > *n)
    };
    let none = vec![0u32; granted.len()];
    tokio::time::sleep(Duration::from_secs(3)).await;
    tests::wait_for(
        Duration::from_secs(60),
        "every run to get the lease",
        || every_run_granted(&none).then_some(()),
    )
    .await?;

    let stopped_at = tokio::time::Instant::now();
    pg.stop()?;
    let stopped_ms = wall_ms();
    let mut failed = Vec::new();
    while stopped_at.elapsed() < OUTAGE - Duration::from_secs(4) {
        let rounds = r.worlds.iter().map(|w| probe(&w.client, &c1));
        for answers in futures_util::future::join_all(rounds).await {
            failed.extend(answers?);
        }
    }
    tokio::time::sleep(OUTAGE.saturating_sub(stopped_at.elapsed())).await;
    pg.start_again()?;
    let started = tokio::time::Instant::now();
    let started_ms = wall_ms();
    let mut recovered = Vec::new();
    for w in &r.worlds {
        let deadline = Duration::from_secs(60);
        loop {
            if w.show(&c1).await.is_ok() {
                recovered.push(started.elapsed());
                break;
            }
            if started.elapsed() > deadline {
                bail!("no request succeeded within {deadline:?} of PostgreSQL's return");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let at_return: Vec<u32> = granted.iter().map(|g| g.load(Ordering::Relaxed)).collect();
    tokio::time::sleep(Duration::from_secs(4)).await;
    tests::wait_for(
        Duration::from_secs(60),
        "every run to get the lease after the outage",
        || every_run_granted(&at_return).then_some(()),
    )
    .await?;
    stop.store(true, Ordering::Relaxed);
    let mut tallies = Vec::new();
    for run in runs {
        tallies.push(run.await?);
    }
    let worst = failed.iter().map(|(_, d)| *d).max().unwrap_or_default();
    eprintln!(
        "database down: {} requests answered 503, slowest {worst:?}; first success after the \
         start: {recovered:?}",
        failed.len()
    );
    assert!(!failed.is_empty());

    for (i, t) in tallies.iter().enumerate() {
        assert!(t.unexpected.is_empty(), "run {i}: {:?}", t.unexpected);
        let before = t
            .grants
            .iter()
            .filter(|g| g.answered_ms < stopped_ms)
            .count();
        let after = t
            .grants
            .iter()
            .filter(|g| g.answered_ms > started_ms)
            .count();
        assert!(
            before > 0 && after > 0,
            "run {i} before {before}, after {after}: {t:?}"
        );
        assert!(t.execs_ok > 0, "run {i}: {t:?}");
    }
    assert!(
        tallies.iter().any(|t| t.unavailable > 0),
        "the runs saw the outage"
    );
    for (k, c) in [&c1, &c2].into_iter().enumerate() {
        let mut grants: Vec<Grant> = tallies[2 * k..2 * k + 2]
            .iter()
            .flat_map(|t| t.grants.clone())
            .collect();
        check_grants(c, &mut grants)?;
    }

    // Nothing committed is lost: the computers, the leases held across the outage, the
    // checkpointed file.
    for (c, witness) in [&c1, &c2].into_iter().zip(&witnesses) {
        let shown = r.worlds[1].show(c).await?;
        assert_eq!(shown["state"], "running", "{shown}");
        let l = r.worlds[1]
            .client
            .json(
                Method::GET,
                &format!("/v1/computers/{c}/leases/bot-w"),
                None,
            )
            .await?;
        assert_eq!(l["lease"], witness.as_str(), "{l}");
    }
    assert_eq!(
        r.worlds[0].home_revision(&c1).await?,
        revision.as_u64(),
        "the checkpoint before the stop is the latest"
    );
    let stored = r.worlds[0]
        .client
        .send(
            Method::GET,
            &format!("/v1/computers/{c1}/home/content?path=kept.txt"),
            None,
            None,
            control_plane::client::full_body(bytes::Bytes::new()),
        )
        .await?;
    let stored = stored.into_body().collect().await?.to_bytes();
    assert_eq!(&stored[..], b"committed before the stop");
    // The same processes serve the computers again.
    assert_eq!(
        r.worlds[1].sh(&c1, "cat kept.txt").await?,
        "committed before the stop"
    );
    for w in &mut r.worlds {
        w.check_log()?;
    }
    drop(r);
    drop(pg);
    Ok(())
}
