//! The E2B and Daytona adapters end to end (issue 13), each against the in-memory fake of its
//! service (`tests::fake_e2b`, `tests::fake_daytona`), which runs the real guest on this host:
//! the design document's acceptance flow on E2B (a desktop, a page observed and a button
//! clicked, a file written, the sandbox lost behind the control plane's back, a replacement
//! through the stale reference restored from the checkpoint), E2B's keepalive, and how each
//! service's failures reach the API.

use anyhow::{anyhow, bail, Result};
use control_plane::client::ClientError;
use hyper::{Method, StatusCode};
use std::time::Duration;
use tests::bot::{ref_of, Bot};
use tests::fake_daytona::FakeDaytona;
use tests::fake_e2b::FakeE2b;
use tests::fake_service::Fake;
use tests::fixture::Fixture;
use tests::{wait_for, World, WorldOptions};

use crate::providers::expect;

const PAGE: &str = r#"<!doctype html><html><head><meta charset="utf-8"><title>Acceptance</title></head>
<body><h1>Acceptance</h1><p id="status">waiting</p>
<button id="go">Create marker</button>
<script>
document.getElementById('go').onclick = () => {
  fetch('/event?marker=created').then(() => {
    document.getElementById('status').textContent = 'marker created';
  });
};
</script></body></html>"#;

async fn e2b_world(e2b: &FakeE2b, extra: &[(&str, &str)]) -> Result<World> {
    let mut env = e2b.world_env();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let mut w = World::start_with(WorldOptions {
        providers: Some("e2b".into()),
        env,
        ..Default::default()
    })
    .await?;
    w.add_secret(&e2b.api_key);
    w.allow_warn("machine gone");
    Ok(w)
}

async fn daytona_world(d: &FakeDaytona) -> Result<World> {
    let mut w = World::start_with(WorldOptions {
        providers: Some("daytona".into()),
        env: d.world_env(),
        ..Default::default()
    })
    .await?;
    w.add_secret(&d.api_key);
    w.allow_warn("machine gone");
    Ok(w)
}

fn one(sandboxes: Vec<String>, c: &str) -> Result<String> {
    match sandboxes.as_slice() {
        [one] => Ok(one.clone()),
        other => bail!("computer {c} has sandboxes {other:?}"),
    }
}

async fn lifecycle(w: &World, c: &str, action: &str) -> Result<serde_json::Value, ClientError> {
    w.post(
        &format!("/v1/computers/{c}/{action}"),
        serde_json::json!({}),
    )
    .await
}

/// The acceptance flow, end to end, on the E2B adapter: create; a desktop; a page observed and a
/// button clicked; a file written; the run ends (checkpoint); E2B loses the sandbox; `start`
/// through the stale reference boots a replacement that has the file.
#[tokio::test(flavor = "multi_thread")]
async fn acceptance_flow_on_e2b_replaces_a_lost_sandbox() -> Result<()> {
    let fx = Fixture::start().await?;
    let page = fx.page("acceptance", PAGE);
    let e2b = FakeE2b::start().await?;
    let mut w = e2b_world(&e2b, &[]).await?;
    let c = w.create_computer("ws-acceptance").await?;
    let v = w.show(&c).await?;
    assert_eq!(
        (v["provider"].as_str(), v["state"].as_str()),
        (Some("e2b"), Some("running"))
    );
    let first = one(e2b.sandboxes_of(&c), &c)?;

    // A desktop, a page observed, a button clicked.
    let bot = Bot::new(&w, &c, "bot-acceptance").await?;
    bot.ensure().await?;
    let nav = bot.navigate(&page).await?;
    assert_eq!(nav["snapshot"]["title"], "Acceptance");
    let browser = |action: &str| format!("/v1/computers/{c}/browser/bot-acceptance/{action}");
    let snap = w
        .post(
            &browser("snapshot"),
            serde_json::json!({ "lease": bot.lease }),
        )
        .await?;
    let button = ref_of(&snap["snapshot"], "Create marker")?;
    let clicked = w
        .post(
            &browser("act"),
            serde_json::json!({ "lease": bot.lease, "steps": [{ "type": "click", "ref": button }] }),
        )
        .await?;
    assert_eq!(clicked["ok"], true, "{clicked}");
    wait_for(Duration::from_secs(20), "the marker event", || {
        fx.events()
            .iter()
            .any(|e| e.get("marker").map(String::as_str) == Some("created"))
            .then_some(())
    })
    .await?;
    let obs = bot.observe().await?;
    assert_eq!(
        (obs["width"].as_u64(), obs["height"].as_u64()),
        (Some(1280), Some(800))
    );

    // A file written; the run ends, which checkpoints the home.
    w.put_file(&c, "notes/acceptance.txt", b"made on e2b".to_vec(), false)
        .await?;
    bot.end_run().await?;
    let revision = w.home_revision(&c).await?;
    assert!(revision.is_some(), "the run's end checkpointed the home");

    // E2B loses the sandbox behind the control plane's back.
    e2b.kill(&first).await;
    assert_eq!(e2b.state_of(&first), None);

    // Start through the stale reference: a replacement boots with the file.
    let started = lifecycle(&w, &c, "start").await?;
    assert_eq!(started["state"], "running");
    let second = one(e2b.sandboxes_of(&c), &c)?;
    assert_ne!(first, second, "a replacement sandbox");
    assert_eq!(
        w.get_file(&c, "notes/acceptance.txt").await?.as_ref(),
        b"made on e2b"
    );
    assert_eq!(w.sh(&c, "cat notes/acceptance.txt").await?, "made on e2b");
    w.check_log()
}

/// While a computer runs, its sandbox's time to live is set again and again (here 3 s, so
/// without refreshes it would have paused long before); after a control-plane restart the
/// refreshes go on; a stopped computer's sandbox is paused and left alone.
#[tokio::test(flavor = "multi_thread")]
async fn e2b_keeps_an_in_use_sandbox_alive() -> Result<()> {
    let e2b = FakeE2b::start().await?;
    let mut w = e2b_world(&e2b, &[("RAKAZO_E2B_TIMEOUT_SECS", "3")]).await?;
    let c = w.create_computer("ws-keepalive").await?;
    let sb = one(e2b.sandboxes_of(&c), &c)?;
    wait_for(Duration::from_secs(30), "three refreshes", || {
        (e2b.refreshes(&sb) >= 3).then_some(())
    })
    .await?;
    assert_eq!(e2b.state_of(&sb), Some("running"));
    assert_eq!(w.sh(&c, "echo alive").await?, "alive\n");

    // A restarted control plane finds the computer running and keeps refreshing.
    w.kill_server();
    w.spawn_server().await?;
    let before = e2b.refreshes(&sb);
    wait_for(
        Duration::from_secs(30),
        "refreshes after the restart",
        || (e2b.refreshes(&sb) >= before + 3).then_some(()),
    )
    .await?;
    assert_eq!(e2b.state_of(&sb), Some("running"));
    assert_eq!(w.sh(&c, "echo still").await?, "still\n");

    lifecycle(&w, &c, "stop").await?;
    assert_eq!(e2b.state_of(&sb), Some("paused"));
    let requests = e2b.requests();
    let pause = requests
        .iter()
        .position(|r| *r == format!("POST /sandboxes/{sb}/pause"))
        .ok_or_else(|| anyhow!("no pause in {requests:?}"))?;
    lifecycle(&w, &c, "start").await?;
    assert_eq!(e2b.state_of(&sb), Some("running"));
    assert!(
        e2b.requests()[pause..]
            .iter()
            .any(|r| *r == format!("POST /sandboxes/{sb}/connect")),
        "the paused sandbox was resumed"
    );
    w.check_log()
}

async fn create_fails(w: &World, workspace: &str) -> ClientError {
    match w
        .client
        .json(
            Method::POST,
            "/v1/computers",
            Some(&serde_json::json!({ "workspace": workspace })),
        )
        .await
    {
        Ok(v) => ClientError::BadResponse(format!("created {v}")),
        Err(e) => e,
    }
}

/// E2B's error answers reach the API by class, each after exactly one request (providers
/// never retry), and a sandbox whose guest could not start is not left running.
#[tokio::test(flavor = "multi_thread")]
async fn e2b_failures_reach_the_api_by_class() -> Result<()> {
    let e2b = FakeE2b::start().await?;
    let mut w = e2b_world(&e2b, &[]).await?;
    let creates = || {
        e2b.requests()
            .iter()
            .filter(|r| *r == "POST /sandboxes")
            .count()
    };

    e2b.fail_next("POST", "/sandboxes", 429, "rate limit exceeded (injected)");
    let msg = expect(
        create_fails(&w, "ws-429").await,
        StatusCode::SERVICE_UNAVAILABLE,
        "provider_capacity",
    )?;
    assert!(msg.contains("rate limit"), "{msg}");
    assert_eq!(creates(), 1, "no retry");

    e2b.fail_next("POST", "/sandboxes", 500, "internal error (injected)");
    expect(
        create_fails(&w, "ws-500").await,
        StatusCode::SERVICE_UNAVAILABLE,
        "provider_unavailable",
    )?;
    assert_eq!(creates(), 2, "no retry");

    e2b.fail_next("POST", "/sandboxes", 401, "Invalid API key (injected)");
    expect(
        create_fails(&w, "ws-401").await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "provider_invalid",
    )?;

    // The guest cannot start: the sandbox is killed, not left billing.
    e2b.fail_next(
        "POST",
        "/process.Process/Start",
        503,
        "envd overloaded (injected)",
    );
    expect(
        create_fails(&w, "ws-envd").await,
        StatusCode::SERVICE_UNAVAILABLE,
        "provider_unavailable",
    )?;
    let killed = e2b
        .requests()
        .iter()
        .filter(|r| r.starts_with("DELETE /sandboxes/"))
        .count();
    assert_eq!(killed, 1, "the sandbox without a guest was killed");

    // A computer whose sandbox E2B paused on its own is started again, not replaced.
    let c = w.create_computer("ws-ok").await?;
    let sb = one(e2b.sandboxes_of(&c), &c)?;
    w.put_file(&c, "kept.txt", b"kept".to_vec(), false).await?;
    e2b.pause(&sb).await;
    lifecycle(&w, &c, "start").await?;
    assert_eq!(e2b.sandboxes_of(&c), vec![sb]);
    assert_eq!(w.get_file(&c, "kept.txt").await?.as_ref(), b"kept");
    w.allow_warn("injected");
    w.check_log()
}

/// Daytona: the create request carries the computer's limits and labels; a recoverable error is
/// recovered in place (the home is the sandbox's own), an unrecoverable one is gone and
/// replaced, restored from the checkpoint.
#[tokio::test(flavor = "multi_thread")]
async fn daytona_recovers_what_it_can_and_replaces_what_it_cannot() -> Result<()> {
    let d = FakeDaytona::start().await?;
    let mut w = daytona_world(&d).await?;
    let v = w
        .client
        .json(
            Method::POST,
            "/v1/computers",
            Some(&serde_json::json!({
                "workspace": "ws-dtn",
                "limits": { "memory_mb": 1536, "cpu_millis": 1500 },
            })),
        )
        .await?;
    let c = v["id"]
        .as_str()
        .ok_or_else(|| anyhow!("no id in {v}"))?
        .to_string();
    let first = one(d.sandboxes_of(&c), &c)?;
    let req = d.request_of(&first).ok_or_else(|| anyhow!("no request"))?;
    assert_eq!(req["snapshot"], d.snapshot.as_str());
    assert_eq!(
        (req["cpu"].as_u64(), req["memory"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(req["labels"]["rakazo.computer"], c.as_str());
    assert_eq!(req["autoStopInterval"], 0);
    assert!(!req.to_string().contains(&d.api_key));

    w.put_file(&c, "kept.txt", b"checkpointed".to_vec(), false)
        .await?;
    lifecycle(&w, &c, "stop").await?;
    assert_eq!(d.state_of(&first), Some("stopped"));
    lifecycle(&w, &c, "start").await?;
    w.put_file(&c, "since.txt", b"on the sandbox only".to_vec(), false)
        .await?;

    // Recoverable: recovered in place, the sandbox's own files there.
    d.break_it(&first, true).await;
    lifecycle(&w, &c, "start").await?;
    assert!(d
        .requests()
        .contains(&format!("POST /sandbox/{first}/recover")));
    assert_eq!(d.sandboxes_of(&c), vec![first.clone()]);
    assert_eq!(
        w.get_file(&c, "since.txt").await?.as_ref(),
        b"on the sandbox only"
    );

    // Unrecoverable: gone; a replacement restored from the checkpoint.
    d.break_it(&first, false).await;
    lifecycle(&w, &c, "start").await?;
    let second = d
        .sandboxes_of(&c)
        .into_iter()
        .find(|s| *s != first)
        .ok_or_else(|| anyhow!("no replacement"))?;
    assert_eq!(d.state_of(&second), Some("started"));
    assert_eq!(w.get_file(&c, "kept.txt").await?.as_ref(), b"checkpointed");

    // Failures by class, one request each.
    d.fail_next("POST", "/sandbox", 429, "too many requests (injected)");
    let before = d.requests().len();
    expect(
        create_fails(&w, "ws-dtn-429").await,
        StatusCode::SERVICE_UNAVAILABLE,
        "provider_capacity",
    )?;
    assert_eq!(d.requests().len(), before + 1, "no retry");
    w.allow_warn("injected");
    w.check_log()
}
