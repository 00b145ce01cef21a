//! Computers in containers (issue 10): the docker provider on a real engine (podman's
//! Docker-compatible service) running our own image, through the real `rakazo serve`.

use anyhow::{anyhow, Context, Result};
use base64::Engine;
use control_plane::client::ClientError;
use futures_util::SinkExt;
use gateway_proto::termframe::encode_input;
use hyper::{Method, StatusCode};
use sha2::{Digest, Sha256};
use std::time::Duration;
use tests::bot::Bot;
use tests::fixture::Fixture;
use tests::live::{connect, read_until, upgrade_status};
use tests::{engine, wait_for, World, WorldOptions};
use tokio_tungstenite::tungstenite::Message;

const LONG: Duration = Duration::from_secs(30);

fn docker_world(screen_limit: Option<u32>) -> WorldOptions {
    WorldOptions {
        providers: Some("docker,local".into()),
        screen_limit,
        ..Default::default()
    }
}

fn status_of(e: &ClientError) -> Option<(StatusCode, String, String)> {
    match e {
        ClientError::Api {
            status,
            code,
            message,
            ..
        } => Some((*status, code.clone(), message.clone())),
        _ => None,
    }
}

fn profile_of(bot: &str) -> String {
    format!(
        ".browser-profiles/{}",
        &hex::encode(Sha256::digest(bot.as_bytes()))[..32]
    )
}

async fn whoami(fx: &Fixture, tag: &str) -> Result<Vec<String>> {
    wait_for(LONG, &format!("whoami from {tag}"), || fx.cookies(tag)).await
}

/// Must show 1: a Docker computer is an isolated machine of our image, with every tool.
#[tokio::test(flavor = "multi_thread")]
async fn a_docker_computer_runs_as_the_workspace_user_and_survives_its_container() -> Result<()> {
    let fx = Fixture::start().await?;
    let mut w = World::start_with(docker_world(None)).await?;
    let c = w.create_computer_on("ws-docker", Some("docker")).await?;
    let shown = w
        .client
        .json(Method::GET, &format!("/v1/computers/{c}"), None)
        .await?;
    assert_eq!(shown["provider"], "docker");
    assert_eq!(shown["state"], "running");

    // Commands run as the workspace user, in the home, inside the container.
    assert_eq!(w.sh(&c, "id -un").await?.trim(), "rakazo");
    assert_eq!(w.sh(&c, "pwd").await?.trim(), "/home/rakazo");
    let inspect = engine::podman(&["inspect", "--format", "{{.Id}}", &engine::container_of(&c)])?;
    assert!(!inspect.trim().is_empty());
    // Nothing in the container runs as root but the init.
    let ps = w.sh(&c, "ps -eo pid=,user=,comm=").await?;
    let roots: Vec<&str> = ps
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some("root"))
        .collect();
    assert_eq!(roots.len(), 1, "only the init runs as root:\n{ps}");
    assert_eq!(roots[0].split_whitespace().next(), Some("1"), "{ps}");
    assert!(ps.contains("rakazo-guest"), "{ps}");

    // Files round-trip.
    let bytes: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    w.put_file(&c, "docs/blob.bin", bytes.clone(), false)
        .await?;
    assert_eq!(w.get_file(&c, "docs/blob.bin").await?.as_ref(), &bytes[..]);
    assert_eq!(
        w.sh(&c, "stat -c %U:%a docs/blob.bin").await?.trim(),
        "rakazo:600"
    );

    // A desktop comes up and observes a 1280x800 PNG; the page tools work on a local page.
    let a = Bot::new(&w, &c, "bot-a").await?;
    a.screen("ensure").await?;
    let obs = a.screen("observe").await?;
    assert_eq!(
        (obs["width"].as_u64(), obs["height"].as_u64()),
        (Some(1280), Some(800))
    );
    let png = base64::engine::general_purpose::STANDARD
        .decode(obs["image"].as_str().context("an image")?)?;
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let page = fx.page(
        "hello",
        "<title>Hi</title><button onclick=\"fetch('/event?kind=clicked')\">Press me</button>",
    );
    let nav = w
        .post(
            &format!("/v1/computers/{c}/browser/bot-a/navigate"),
            serde_json::json!({ "lease": a.lease, "url": page }),
        )
        .await?;
    assert_eq!(nav["ok"], true, "{nav}");
    let snap = w
        .post(
            &format!("/v1/computers/{c}/browser/bot-a/snapshot"),
            serde_json::json!({ "lease": a.lease }),
        )
        .await?;
    assert!(snap.to_string().contains("Press me"), "{snap}");

    // A terminal's whoami matches exec's.
    a.end_run().await?;
    w.post(&a.path("takeover"), serde_json::json!({})).await?;
    let v = w
        .post(
            &format!("/v1/computers/{c}/terminals/bot-a/url"),
            serde_json::json!({}),
        )
        .await?;
    let term = v["path"].as_str().context("terminal path")?.to_string();
    let mut ws = connect(&w.http, &term).await?;
    ws.send(Message::Binary(
        encode_input(b"echo WHO-$(whoami)-AMI\r").into(),
    ))
    .await?;
    let mut out = Vec::new();
    read_until(&mut ws, &mut out, "WHO-rakazo-AMI", LONG).await?;
    drop(ws);
    w.post(&a.path("release-control"), serde_json::json!({}))
        .await?;

    w.add_secret(term.trim_start_matches("/cap/"));

    // Stop and start keep the home (the container and its volume stay).
    w.post(&format!("/v1/computers/{c}/stop"), serde_json::json!({}))
        .await?;
    let state = engine::podman(&[
        "inspect",
        "--format",
        "{{.State.Status}}",
        &engine::container_of(&c),
    ])?;
    assert_ne!(state.trim(), "running");
    w.post(&format!("/v1/computers/{c}/start"), serde_json::json!({}))
        .await?;
    assert_eq!(w.get_file(&c, "docs/blob.bin").await?.as_ref(), &bytes[..]);

    // The container and its volume destroyed behind the control plane's back: start replaces
    // the machine and restores the home from the last checkpoint (taken by the stop).
    w.sh(&c, "echo after-checkpoint > late.txt").await?;
    engine::podman(&["rm", "-f", "-t", "0", &engine::container_of(&c)])?;
    engine::podman(&["volume", "rm", "-f", &format!("rakazo-home-{c}")])?;
    w.allow_warn("machine gone");
    w.post(&format!("/v1/computers/{c}/start"), serde_json::json!({}))
        .await?;
    assert_eq!(w.get_file(&c, "docs/blob.bin").await?.as_ref(), &bytes[..]);
    let late = w.get_file(&c, "late.txt").await;
    assert!(
        late.is_err(),
        "a file written after the last checkpoint cannot come back: {late:?}"
    );
    assert_eq!(w.sh(&c, "id -un").await?.trim(), "rakazo");

    // Destroy removes the container; again is fine.
    for _ in 0..2 {
        w.client
            .json(Method::DELETE, &format!("/v1/computers/{c}"), None)
            .await?;
    }
    assert!(
        !engine::container_exists(&c)?,
        "container left after destroy"
    );
    w.check_log()
}

/// Must show 2: the design document's Docker team-desktops regression.
#[tokio::test(flavor = "multi_thread")]
async fn docker_team_desktops_keep_bots_apart_and_old_urls_die_with_their_slot() -> Result<()> {
    let fx = Fixture::start().await?;
    let mut w = World::start_with(docker_world(Some(2))).await?;
    let c = w
        .create_computer_on("ws-docker-team", Some("docker"))
        .await?;
    let a = Bot::new(&w, &c, "bot-a").await?;
    let b = Bot::new(&w, &c, "bot-b").await?;
    // Two desktops at once, each with its own browser and cookies.
    let (sa, sb) = (a.screen("ensure").await?, b.screen("ensure").await?);
    assert_eq!(
        (sa["slot"].as_u64(), sb["slot"].as_u64()),
        (Some(0), Some(1))
    );
    assert_ne!(sa["display"], sb["display"]);
    a.open(&format!("{}/set?bot=a", fx.base)).await?;
    b.open(&format!("{}/set?bot=b", fx.base)).await?;
    a.open(&format!("{}/whoami?from=a1", fx.base)).await?;
    b.open(&format!("{}/whoami?from=b1", fx.base)).await?;
    assert_eq!(whoami(&fx, "a1").await?, vec!["bot=a".to_string()]);
    assert_eq!(whoami(&fx, "b1").await?, vec!["bot=b".to_string()]);

    // A third desktop is over the limit: refused, while exec keeps working.
    let cbot = Bot::new(&w, &c, "bot-c").await?;
    let err = cbot.screen("ensure").await.expect_err("over the limit");
    let (status, code, message) = status_of(&err).ok_or_else(|| anyhow!("{err}"))?;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(code, "COMPUTER_SCREEN_UNAVAILABLE");
    assert_eq!(
        message,
        "This computer cannot allocate another screen (limit 2)"
    );
    assert_eq!(w.sh(&c, "echo still works").await?, "still works\n");

    // bot-a's view and control URLs; then bot-a's desktop goes and bot-c takes slot 0.
    let view = a.url("view").await?;
    a.end_run().await?;
    w.post(&a.path("takeover"), serde_json::json!({})).await?;
    let control = a.url("control").await?;
    assert_eq!(
        upgrade_status(&w.http, &view).await?,
        None,
        "the view URL opens"
    );
    w.post(&a.path("release-control"), serde_json::json!({}))
        .await?;
    let a = Bot::new(&w, &c, "bot-a").await?;
    a.screen("release").await?;
    let sc = cbot.screen("ensure").await?;
    assert_eq!(sc["slot"].as_u64(), Some(0), "the freed slot is reused");
    assert_eq!(sc["display"], sa["display"], "the same display number");
    for (what, url) in [("view", &view), ("control", &control)] {
        let got = upgrade_status(&w.http, url).await?;
        assert_ne!(
            got,
            Some(101),
            "bot-a's old {what} URL reached slot 0 after reuse"
        );
    }
    cbot.open(&format!("{}/whoami?from=c1", fx.base)).await?;
    assert_eq!(
        whoami(&fx, "c1").await?,
        vec![String::new()],
        "bot-c sees no cookie"
    );

    // bot-a's profile persisted after release: back on another slot, its cookie is there.
    cbot.screen("release").await?;
    let a = Bot::new(&w, &c, "bot-a").await?;
    a.screen("ensure").await?;
    a.open(&format!("{}/whoami?from=a2", fx.base)).await?;
    assert_eq!(whoami(&fx, "a2").await?, vec!["bot=a".to_string()]);
    let profiles = w.sh(&c, "ls .browser-profiles").await?;
    for bot in ["bot-a", "bot-b", "bot-c"] {
        let p = profile_of(bot);
        let name = p.trim_start_matches(".browser-profiles/");
        assert!(profiles.contains(name), "{bot}'s profile kept: {profiles}");
    }
    for cap in [&view, &control] {
        w.add_secret(cap.trim_start_matches("/cap/"));
    }
    w.check_log()
}

/// The README's Docker commands through the real binary: `computer create --provider docker`
/// with limits, which the container really gets; a limit out of range is refused by name.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_creates_a_docker_computer_with_limits() -> Result<()> {
    // Contained as a root `rakazo serve` contains them when not told otherwise (the world's
    // other tests share this host's network for their pages; an empty setting is no setting):
    // the guest dials the tunnel through its gateway.
    let mut opts = docker_world(None);
    opts.env
        .push(("RAKAZO_DOCKER_CONTAINMENT".into(), String::new()));
    let mut w = World::start_with(opts).await?;
    assert!(
        w.log()
            .contains("docker computers are contained: no network but the egress gateway"),
        "a root control plane with an engine on this host contains Docker computers by default"
    );
    let (url, token) = (w.http.clone(), w.api_token().to_string());
    let run = |args: &[&str]| {
        std::process::Command::new(tests::bin("rakazo"))
            .args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("RAKAZO_URL", &url)
            .env("RAKAZO_TOKEN", &token)
            .output()
    };
    let out = run(&[
        "computer",
        "create",
        "--workspace",
        "ws-cli-docker",
        "--provider",
        "docker",
        "--memory-mb",
        "1024",
        "--cpu-millis",
        "1500",
        "--pids",
        "512",
        "--shm-mb",
        "128",
        "--json",
    ])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let c = v["id"].as_str().context("id")?.to_string();
    // Removed at the world's end like any Docker computer of it, should the test fail.
    w.track_docker(&c);
    assert_eq!(v["provider"], "docker");
    assert_eq!(
        v["limits"],
        serde_json::json!({ "memory_mb": 1024, "cpu_millis": 1500, "pids": 512, "shm_mb": 128 })
    );
    let got = engine::podman(&[
        "inspect",
        "--format",
        "{{.HostConfig.Memory}} {{.HostConfig.NanoCpus}} {{.HostConfig.PidsLimit}} {{.HostConfig.ShmSize}}",
        &engine::container_of(&c),
    ])?;
    assert_eq!(
        got.split_whitespace().collect::<Vec<_>>(),
        vec!["1073741824", "1500000000", "512", "134217728"]
    );
    let out = run(&["exec", &c, "--", "id", "-un"])?;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "rakazo");
    // Its network is a namespace of its own, named and plumbed by the control plane; the
    // container's only link is the one to this host.
    let (netns, table) = providers::local::network_names(&c);
    let ns_path = std::path::Path::new("/run/netns").join(&netns);
    assert!(ns_path.exists(), "{netns} missing");
    let links =
        tests::netlab::run(std::process::Command::new("ip").args(["-n", &netns, "-o", "link"]))?;
    assert_eq!(links.lines().count(), 2, "{links}");

    // A dev server inside the container opens in Chromium through its preview URLs, its
    // websocket and event stream working, its cookie on its own origin (docs/previews.md).
    let public = crate::previews::serve_app(&mut w, &c, "8000", "docker").await?;
    let link = crate::previews::preview(&mut w, &c, "8000", &[]).await?;
    let shots = crate::previews::shots()?;
    crate::previews::browse(&[
        ("RAKAZO_PREVIEW_LINK", link),
        ("RAKAZO_PREVIEW_PUBLIC", public),
        ("RAKAZO_PREVIEW_SHOTS", shots.0.display().to_string()),
        ("RAKAZO_PREVIEW_NAME", "docker".into()),
    ])
    .await?;

    // A fork of a running Docker computer: checkpointed first, then a new container whose home
    // starts from it; each side goes on alone.
    let sh = |c: &str, script: &str| run(&["exec", c, "--", "sh", "-c", script]);
    assert!(sh(&c, "echo docker-side > forked.txt")?.status.success());
    let out = run(&[
        "computer",
        "fork",
        &c,
        "--workspace",
        "ws-cli-docker-fork",
        "--provider",
        "docker",
        "--json",
    ])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let f = v["id"].as_str().context("fork id")?.to_string();
    w.track_docker(&f);
    assert_eq!(v["provider"], "docker");
    let out = sh(&f, "cat forked.txt; echo fork > only-fork")?;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "docker-side\n");
    let out = sh(&c, "ls")?;
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("only-fork"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(run(&["computer", "destroy", &f])?.status.success());

    let out = run(&["computer", "destroy", &c])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!ns_path.exists(), "{netns} outlived its computer");
    let tables = tests::netlab::run(std::process::Command::new("nft").args(["list", "tables"]))?;
    assert!(
        !tables.contains(&table),
        "{table} outlived its computer: {tables}"
    );
    let out = run(&[
        "computer",
        "create",
        "--workspace",
        "ws-cli-bad",
        "--provider",
        "docker",
        "--cpu-millis",
        "5",
    ])?;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cpu_millis must be between 100"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    w.check_log()
}
