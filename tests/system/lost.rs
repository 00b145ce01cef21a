//! A running computer whose guest goes away without Rakazo asking
//! (docs/lifecycle.md#lost-machines: "why did my computer stop?"): the activity feed records it
//! crashed or gone, with what the provider says became of the machine. On the docker provider
//! over a real engine (podman): a container killed outside Rakazo is `crashed` with its exit code,
//! one removed is `gone`; a stop of our own records only the stop.

use anyhow::{Context, Result};
use std::time::Duration;
use tests::{engine, World, WorldOptions};

/// The tunnel notices a dead guest within 6 s, and a loss is recorded 10 s later.
const LOSS: Duration = Duration::from_secs(60);

fn docker_world() -> WorldOptions {
    WorldOptions {
        providers: Some("docker,local".into()),
        ..Default::default()
    }
}

/// Waits for the lifecycle event number `n` (0-based) to be `event` with `cause`; returns it.
async fn wait_event(
    w: &World,
    c: &str,
    n: usize,
    event: &str,
    cause: &str,
) -> Result<serde_json::Value> {
    let deadline = tokio::time::Instant::now() + LOSS;
    loop {
        let all = w.lifecycle(c).await?;
        if let Some(e) = all.get(n) {
            anyhow::ensure!(
                e["event"] == event && e["cause"] == cause,
                "event {n} should be {event} ({cause}): {e}\nall: {all:#?}"
            );
            return Ok(e.clone());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "no event {n} ({event}, {cause}) within {LOSS:?}: {all:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `podman kill` of a computer's container: `crashed`, cause `machine_stopped`, with the exit
/// code the engine reports (137, SIGKILL). Started again, then `podman rm -f`: `gone`, cause
/// `machine_gone`. A stop of our own afterwards records the stop and nothing else.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_or_removed_container_is_recorded_with_its_cause() -> Result<()> {
    let mut w = World::start_with(docker_world()).await?;
    let c = w.create_computer_on("ws-lost", Some("docker")).await?;
    let container = engine::container_of(&c);
    let before = w.lifecycle(&c).await?.len();
    assert_eq!(before, 2, "created, started");

    engine::podman(&["kill", &container])?;
    let crashed = wait_event(&w, &c, before, "crashed", "machine_stopped").await?;
    let reason = crashed["reason"].as_str().context("reason")?;
    assert!(
        reason.contains("stopped outside Rakazo, exit code 137 (SIGKILL)"),
        "{reason}"
    );
    assert!(reason.contains("did not come back within 10 s"), "{reason}");
    assert_eq!(w.show(&c).await?["connected"], false);

    // Started again (its start says what it found), then removed outside Rakazo.
    w.post(&format!("/v1/computers/{c}/start"), serde_json::json!({}))
        .await?;
    assert_eq!(w.sh(&c, "echo back").await?, "back\n");
    let n = w.lifecycle(&c).await?.len();
    engine::podman(&["rm", "-f", &container])?;
    let gone = wait_event(&w, &c, n, "gone", "machine_gone").await?;
    let reason = gone["reason"].as_str().context("reason")?;
    assert!(reason.contains("no longer has the machine"), "{reason}");

    // A start replaces it; our own stop records the stop alone, even after the grace.
    w.post(&format!("/v1/computers/{c}/start"), serde_json::json!({}))
        .await?;
    w.post(&format!("/v1/computers/{c}/stop"), serde_json::json!({}))
        .await?;
    let n = w.lifecycle(&c).await?.len();
    tokio::time::sleep(control_plane::core::GUEST_LOSS_GRACE + Duration::from_secs(8)).await;
    let after = w.lifecycle(&c).await?;
    assert_eq!(after.len(), n, "nothing after our stop: {after:#?}");
    assert_eq!(after[n - 1]["event"], "stopped");
    assert_eq!(after[n - 1]["cause"], "user");
    w.check_log()
}

/// A guest whose connection dies but which dials in again within the grace records nothing: the
/// container is frozen (`podman pause`) past the tunnel's 6 s idle timeout, so the control plane
/// sees the connection end by itself, then thawed; the guest redials, the check finds it back,
/// and the feed is unchanged.
#[tokio::test(flavor = "multi_thread")]
async fn a_guest_back_within_the_grace_records_nothing() -> Result<()> {
    let mut w = World::start_with(docker_world()).await?;
    let c = w.create_computer_on("ws-blip", Some("docker")).await?;
    let container = engine::container_of(&c);
    let before = w.lifecycle(&c).await?.len();
    engine::podman(&["pause", &container])?;
    // Waits for the control plane to drop the silent connection (its own idle timeout).
    tests::wait_for(LOSS, "the frozen guest's connection to end", || {
        w.log()
            .lines()
            .any(|l| l.contains(&c) && l.contains("guest disconnected"))
            .then_some(())
    })
    .await?;
    engine::podman(&["unpause", &container])?;
    let quiet = tests::wait_for(LOSS, "the loss check's verdict", || {
        w.log()
            .lines()
            .find(|l| l.contains(&c) && l.contains("nothing to record"))
            .map(str::to_string)
    })
    .await?;
    assert!(quiet.contains("Reconnected"), "{quiet}");
    assert_eq!(w.lifecycle(&c).await?.len(), before, "nothing recorded");
    assert_eq!(w.sh(&c, "echo back").await?, "back\n");
    w.check_log()
}
