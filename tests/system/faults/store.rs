//! The object store failing during checkpoints and restores (issue 36): the control plane talks
//! to a real s3s-fs through a fault-injecting proxy (`tests::s3fault`) that answers 500s,
//! resets connections and stalls requests as each test scripts it, in the default incremental
//! format (docs/homes.md#incremental-checkpoints).
//!
//! Transient failures are retried with backoff, each attempt within its deadline, and the
//! checkpoint or restore succeeds; a store that keeps failing gives the user a clear error
//! once the control plane gives up, the previous revision stays current and restorable, and
//! the packs a failed checkpoint left behind are collected by the next one that succeeds.

use anyhow::{bail, Result};
use homes::testing::noise;
use hyper::Method;
use std::time::Duration;
use tests::s3::S3Server;
use tests::s3fault::{wait_spent, Fault, Rule, S3Fault};
use tests::{ObjectStoreOptions, World, WorldOptions};

/// `RAKAZO_S3_ATTEMPT_TIMEOUT_SECS` of these worlds: a stalled request is abandoned after this.
const ATTEMPT_SECS: u64 = 10;
/// A checkpoint or restore is waited for this long at most.
const FLOW_WITHIN: Duration = Duration::from_secs(180);

/// A world keeping homes in `s3` through `proxy`.
async fn world(s3: &S3Server, proxy: &S3Fault, allow: &[&str]) -> Result<World> {
    let mut store = ObjectStoreOptions::for_server(s3);
    store.endpoint = proxy.endpoint.clone();
    World::start_with(WorldOptions {
        object_store: Some(store),
        env: vec![(
            "RAKAZO_S3_ATTEMPT_TIMEOUT_SECS".into(),
            ATTEMPT_SECS.to_string(),
        )],
        allow_warn: allow.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    })
    .await
}

/// A checkpoint or restore (`flow`), bounded; its NDJSON lines.
pub(super) async fn flow(w: &World, c: &str, flow: &str) -> Result<Vec<serde_json::Value>> {
    match tokio::time::timeout(FLOW_WITHIN, w.home_flow(c, flow)).await {
        Ok(lines) => Ok(lines?),
        Err(_) => bail!("home {flow} of {c} gave no answer within {FLOW_WITHIN:?}"),
    }
}

/// A flow that must succeed; its `done` line.
pub(super) async fn done(w: &World, c: &str, what: &str) -> Result<serde_json::Value> {
    let lines = flow(w, c, what).await?;
    match lines.last() {
        Some(v) if v["type"] == "done" => Ok(v.clone()),
        other => bail!("home {what} of {c} failed: {other:?}"),
    }
}

/// A flow that must fail; its `error` line.
pub(super) async fn failed(w: &World, c: &str, what: &str) -> Result<serde_json::Value> {
    let lines = flow(w, c, what).await?;
    match lines.last() {
        Some(v) if v["type"] == "error" => Ok(v.clone()),
        other => bail!("home {what} of {c} was to fail: {other:?}"),
    }
}

/// Six 500s in a row (more than the S3 client's own three attempts of one request), two
/// connections reset without an answer, a request stalled a second, and one stalled far past
/// the attempt deadline.
fn transient_faults(proxy: &S3Fault) {
    proxy.push(Rule::next(6, Fault::Status(500)));
    proxy.push(Rule::next(2, Fault::Reset));
    proxy.push(Rule::next(1, Fault::Stall(Duration::from_secs(1))));
    proxy.push(Rule::next(1, Fault::Stall(Duration::from_secs(600))));
}

/// The pack objects of the bucket (every home's).
async fn packs(s3: &S3Server) -> Result<Vec<String>> {
    Ok(s3
        .keys("cas/")
        .await?
        .into_iter()
        .filter(|k| k.contains("/packs/"))
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn transient_store_failures_are_retried_and_checkpoints_and_restores_succeed() -> Result<()> {
    let s3 = S3Server::start().await?;
    let proxy = S3Fault::start(s3.port).await?;
    let mut w = world(&s3, &proxy, &[]).await?;
    let c = w.create_computer("ws-flaky-store").await?;
    let home = w.home_of(&c);
    std::fs::write(home.join("notes.txt"), b"one")?;
    std::fs::write(home.join("big.bin"), noise(3 << 20, 1))?;
    w.give_home(&c)?;
    assert_eq!(done(&w, &c, "checkpoint").await?["revision"], 1);

    std::fs::write(home.join("notes.txt"), b"two")?;
    let big = noise(3 << 20, 2);
    std::fs::write(home.join("big.bin"), &big)?;
    w.give_home(&c)?;
    transient_faults(&proxy);
    let t0 = tokio::time::Instant::now();
    let saved = done(&w, &c, "checkpoint").await?;
    eprintln!("checkpoint through the faults: {:?}", t0.elapsed());
    assert_eq!(saved["revision"], 2, "{saved}");
    assert!(
        proxy.spent(),
        "every fault hit the checkpoint: {:?}",
        proxy.recent(40)
    );

    // A restore through the same faults brings revision 2 back whole.
    std::fs::write(home.join("notes.txt"), b"scratch")?;
    std::fs::remove_file(home.join("big.bin"))?;
    transient_faults(&proxy);
    let t0 = tokio::time::Instant::now();
    let restored = done(&w, &c, "restore").await?;
    eprintln!("restore through the faults: {:?}", t0.elapsed());
    assert_eq!(restored["revision"], 2, "{restored}");
    wait_spent(&proxy, Duration::from_secs(1)).await?;
    assert_eq!(std::fs::read(home.join("notes.txt"))?, b"two");
    assert!(
        std::fs::read(home.join("big.bin"))? == big,
        "big.bin restored whole"
    );
    let (requests, injected) = proxy.counts();
    eprintln!("{requests} store requests, {injected} of them failed or stalled");
    w.check_log()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_store_that_keeps_failing_fails_clearly_and_keeps_the_previous_revision() -> Result<()> {
    let s3 = S3Server::start().await?;
    let proxy = S3Fault::start(s3.port).await?;
    let mut w = world(
        &s3,
        &proxy,
        &["home checkpoint failed", "home restore failed"],
    )
    .await?;
    let c = w.create_computer("ws-failing-store").await?;
    let home = w.home_of(&c);
    std::fs::write(home.join("notes.txt"), b"one")?;
    let big = noise(3 << 20, 3);
    std::fs::write(home.join("big.bin"), &big)?;
    w.give_home(&c)?;
    assert_eq!(done(&w, &c, "checkpoint").await?["revision"], 1);
    let before = packs(&s3).await?;

    // Every index upload fails: the packs go in, the checkpoint cannot be recorded.
    std::fs::write(home.join("notes.txt"), b"two")?;
    std::fs::write(home.join("big.bin"), noise(3 << 20, 4))?;
    w.give_home(&c)?;
    proxy.push(Rule::always(
        Some(Method::PUT),
        Some("/index/"),
        Fault::Status(500),
    ));
    let err = failed(&w, &c, "checkpoint").await?;
    eprintln!("checkpoint against a failing store: {err}");
    assert_eq!(err["code"], "home_store_failed", "{err}");
    let msg = err["message"].as_str().unwrap_or_default();
    assert!(msg.contains("index/") && msg.contains("failed"), "{msg}");
    assert_eq!(
        w.home_revision(&c).await?,
        Some(1),
        "the previous revision stays"
    );
    let left: Vec<String> = packs(&s3)
        .await?
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert!(!left.is_empty(), "the failed checkpoint left its packs");
    proxy.clear();

    // Every read fails: the restore is an error and the home is left as it was.
    proxy.push(Rule::always(Some(Method::GET), None, Fault::Status(500)));
    let err = failed(&w, &c, "restore").await?;
    eprintln!("restore against a failing store: {err}");
    assert_eq!(err["code"], "home_store_failed", "{err}");
    assert_eq!(std::fs::read(home.join("notes.txt"))?, b"two");
    proxy.clear();

    // The store is back: revision 1 restores whole.
    let restored = done(&w, &c, "restore").await?;
    assert_eq!(restored["revision"], 1, "{restored}");
    assert_eq!(std::fs::read(home.join("notes.txt"))?, b"one");
    assert!(
        std::fs::read(home.join("big.bin"))? == big,
        "big.bin restored whole"
    );

    // The next checkpoint that succeeds collects what the failed one left.
    std::fs::write(home.join("notes.txt"), b"three")?;
    w.give_home(&c)?;
    assert_eq!(done(&w, &c, "checkpoint").await?["revision"], 2);
    let now = packs(&s3).await?;
    let still: Vec<&String> = left.iter().filter(|p| now.contains(p)).collect();
    assert!(
        still.is_empty(),
        "packs of the failed checkpoint remain: {still:?}"
    );
    assert!(
        before.iter().all(|p| now.contains(p)),
        "revision 1's packs stay"
    );
    w.check_log()
}
