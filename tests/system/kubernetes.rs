//! The kubernetes provider against the fake API server (issue 35; the conformance cases are in
//! `providers.rs`): a pod lost with its node is seen from the watch's events and the computer
//! replaced with its home restored from the last checkpoint, in both modes; and a loss that
//! happened while the watch was cut (its resourceVersion expired: 410 Gone) is seen from the
//! list the watcher makes again.

use anyhow::{ensure, Result};
use std::time::Duration;
use tests::fake_kube::{FakeKube, Res};
use tests::fake_service::Fake;
use tests::{World, WorldOptions};

/// Waits up to 10 s (in 50 ms steps) for `done`.
pub(crate) async fn settled(done: impl Fn() -> bool) -> bool {
    for _ in 0..200 {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done()
}

/// The tunnel notices a dead guest within 6 s, and a loss is recorded 10 s later.
const LOSS: Duration = Duration::from_secs(60);

async fn world(fake: &FakeKube, mode: &str) -> Result<World> {
    let mut w = World::start_with(WorldOptions {
        providers: Some("kubernetes,local".into()),
        default_provider: Some("kubernetes".into()),
        env: fake.world_env(mode),
        ..Default::default()
    })
    .await?;
    w.allow_warn("machine gone");
    w.add_secret(&fake.token);
    Ok(w)
}

/// The one pod of computer `c`.
fn pod_of(fake: &FakeKube, c: &str) -> Result<String> {
    let pods = fake.objects_of(Res::Pods, c);
    ensure!(pods.len() == 1, "computer {c} has pods {pods:?}");
    Ok(pods[0].clone())
}

/// Waits for the last lifecycle event of `c` to be `event` with `cause`.
async fn wait_last_event(w: &World, c: &str, event: &str, cause: &str) -> Result<()> {
    let deadline = tokio::time::Instant::now() + LOSS;
    loop {
        let all = w.lifecycle(c).await?;
        if let Some(e) = all.last() {
            if e["event"] == event && e["cause"] == cause {
                return Ok(());
            }
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "no {event} ({cause}) within {LOSS:?}: {all:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Checkpoints a file, writes another, loses the pod (through `lose`), and checks the
/// computer is recorded gone, replaced on start by a new instance with the checkpointed home,
/// and what the lost instance left is swept away.
async fn loss_replaced(mode: &str, unwatched: bool) -> Result<()> {
    let fake = FakeKube::start(&tests::bin("rakazo-guest")).await?;
    let w = world(&fake, mode).await?;
    let mut w = w;
    let c = w.create_computer(&format!("ws-kube-loss-{mode}")).await?;
    w.put_file(&c, "kept/home.txt", b"checkpointed".to_vec(), false)
        .await?;
    w.post(&format!("/v1/computers/{c}/stop"), serde_json::json!({}))
        .await?;
    w.post(&format!("/v1/computers/{c}/start"), serde_json::json!({}))
        .await?;
    w.put_file(&c, "kept/later.txt", b"never checkpointed".to_vec(), false)
        .await?;
    let lost = pod_of(&fake, &c)?;
    let lists = fake.pod_lists();
    if unwatched {
        fake.lose_node_unwatched(&lost).await;
    } else {
        fake.lose_node(&lost).await;
    }
    // Its claim is still there: only the watch tells a loss from a stop of ours.
    ensure!(
        !fake.objects_of(Res::Claims, &c).is_empty(),
        "the home claim outlives the node"
    );
    wait_last_event(&w, &c, "gone", "machine_gone").await?;
    if unwatched {
        ensure!(
            fake.pod_lists() > lists,
            "the expired watch was not followed by a list"
        );
        let log = w.log();
        ensure!(
            log.contains("kubernetes pod watch expired (410 Gone)"),
            "no expiry in the log"
        );
    }
    let v = w
        .post(&format!("/v1/computers/{c}/start"), serde_json::json!({}))
        .await?;
    ensure!(v["state"] == "running", "{v}");
    assert_eq!(
        w.get_file(&c, "kept/home.txt").await?.as_ref(),
        b"checkpointed"
    );
    w.get_file(&c, "kept/later.txt")
        .await
        .expect_err("what was never checkpointed went with the node");
    let now = pod_of(&fake, &c)?;
    ensure!(now != lost, "a new instance replaces the lost one");
    // The lost instance's claim, Secret and policy are swept.
    let swept = settled(|| {
        fake.all_of(&c)
            .iter()
            .all(|o| !o.contains(&lost) || o.contains(&now))
    })
    .await;
    ensure!(swept, "the lost instance left {:?}", fake.all_of(&c));
    w.check_log()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_lost_with_its_node_is_replaced_with_the_home_restored() -> Result<()> {
    loss_replaced("pod", false).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_pod_lost_with_its_node_is_replaced_with_the_home_restored() -> Result<()> {
    loss_replaced("sandbox", false).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_loss_during_an_expired_watch_is_seen_by_listing_again() -> Result<()> {
    loss_replaced("pod", true).await
}

/// The fake API server answers as the real one: Status objects with the codes the adapter
/// sorts into classes, and a create refused by validation leaves nothing half-made.
#[tokio::test(flavor = "multi_thread")]
async fn api_failures_reach_the_user_by_class() -> Result<()> {
    let fake = FakeKube::start(&tests::bin("rakazo-guest")).await?;
    let mut w = world(&fake, "pod").await?;
    w.allow_warn("injected");
    let path = "/api/v1/namespaces/rakazo/persistentvolumeclaims";
    fake.fail_next("POST", path, 503, "injected: etcd is unavailable");
    let e = w
        .client
        .json(
            hyper::Method::POST,
            "/v1/computers",
            Some(&serde_json::json!({ "workspace": "ws-kube-503" })),
        )
        .await
        .expect_err("the API is unavailable");
    crate::providers::expect(
        e,
        hyper::StatusCode::SERVICE_UNAVAILABLE,
        "provider_unavailable",
    )?;
    fake.fail_next(
        "POST",
        "/api/v1/namespaces/rakazo/pods",
        403,
        "injected: exceeded quota: computers, requested: pods=1",
    );
    let e = w
        .client
        .json(
            hyper::Method::POST,
            "/v1/computers",
            Some(&serde_json::json!({ "workspace": "ws-kube-quota" })),
        )
        .await
        .expect_err("out of quota");
    crate::providers::expect(
        e,
        hyper::StatusCode::SERVICE_UNAVAILABLE,
        "provider_capacity",
    )?;
    // Nothing of either attempt is left: the claim took what it owned along.
    let left = settled(|| {
        [Res::Pods, Res::Claims, Res::Secrets, Res::Policies]
            .iter()
            .all(|r| fake.all_of_kind(*r).is_empty())
    })
    .await;
    ensure!(left, "half-made objects left");
    let c = w.create_computer("ws-kube-ok").await?;
    assert_eq!(w.sh(&c, "echo up").await?, "up\n");
    w.check_log()
}

/// A pod-mode computer's objects are as docs/kubernetes.md#modes says: the token only in its
/// Secret, mounted read-only with mode 0400; everything owned by the home claim; labels; a
/// NetworkPolicy with no ingress whose first way out is the tunnel.
#[tokio::test(flavor = "multi_thread")]
async fn a_computer_s_objects_are_as_documented() -> Result<()> {
    use base64::Engine;
    let fake = FakeKube::start(&tests::bin("rakazo-guest")).await?;
    let mut w = world(&fake, "pod").await?;
    let c = w.create_computer("ws-kube-objects").await?;
    let pod = pod_of(&fake, &c)?;
    let get = |r: Res, n: &str| {
        fake.object(r, n)
            .ok_or_else(|| anyhow::anyhow!("no {r:?} {n}"))
    };
    let (p, claim, secret, policy) = (
        get(Res::Pods, &pod)?,
        get(Res::Claims, &format!("{pod}-home"))?,
        get(Res::Secrets, &format!("{pod}-token"))?,
        get(Res::Policies, &pod)?,
    );
    let token = base64::engine::general_purpose::STANDARD
        .decode(secret["data"]["enroll-token"].as_str().unwrap_or(""))?;
    let token = String::from_utf8(token)?;
    ensure!(token.len() > 16, "a token in the Secret");
    w.add_secret(&token);
    ensure!(
        !p.to_string().contains(&token),
        "the token is in the pod's spec"
    );
    let spec = &p["spec"];
    let vol = spec["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "enroll"))
        .ok_or_else(|| anyhow::anyhow!("no token volume"))?;
    ensure!(vol["secret"]["defaultMode"] == 0o400 && vol["secret"]["items"][0]["mode"] == 0o400);
    let mount = spec["containers"][0]["volumeMounts"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["name"] == "enroll"))
        .ok_or_else(|| anyhow::anyhow!("no token mount"))?;
    ensure!(mount["readOnly"] == true && mount["mountPath"] == "/etc/rakazo");
    ensure!(spec["automountServiceAccountToken"] == false && spec["restartPolicy"] == "Never");
    let uid = &claim["metadata"]["uid"];
    for o in [&p, &secret, &policy] {
        ensure!(
            o["metadata"]["ownerReferences"][0]["uid"] == *uid,
            "not owned by the claim: {o}"
        );
        ensure!(o["metadata"]["labels"]["rakazo.dev/computer"] == c.as_str());
    }
    ensure!(policy["spec"]["ingress"] == serde_json::json!([]));
    let tunnel = &policy["spec"]["egress"][0];
    ensure!(
        tunnel["to"][0]["ipBlock"]["cidr"] == "127.0.0.1/32",
        "{tunnel}"
    );
    ensure!(tunnel["ports"][0]["protocol"] == "UDP", "{tunnel}");
    w.check_log()
}
