//! Warm pools (issue 35, docs/pools.md) through the real binaries, with README.md's "Warm pools"
//! commands as written: a pool of local computers hands one out at once with the returning
//! workspace's stored home already imported, refills, replaces a member whose guest is killed,
//! and goes cold when empty; a pool of desktops gives a bot a screen from the spare desktop
//! (whose profile becomes the bot's); a pool on Docker hands out, refills and replaces a
//! member whose container is killed.

use crate::cli::rakazo_ok;
use anyhow::{bail, Context, Result};
use hyper::Method;
use serde_json::{json, Value};
use std::time::Duration;
use tests::bot::Bot;
use tests::{engine, pids_with_env, World, WorldOptions};

const LONG: Duration = Duration::from_secs(90);

/// `rakazo <args> --json`, parsed.
async fn cli_json(w: &World, args: &[&str]) -> Result<Value> {
    let mut all = args.to_vec();
    all.push("--json");
    let out = rakazo_ok(w, &all).await?;
    serde_json::from_slice(&out).with_context(|| format!("rakazo {args:?} printed no JSON"))
}

/// The pool as `rakazo pool show` prints it.
async fn pool(w: &World, name: &str) -> Result<Value> {
    cli_json(w, &["pool", "show", name]).await
}

/// Waits until pool `name` has `ready` ready members and no others; returns their ids.
async fn wait_ready(w: &World, name: &str, ready: u64) -> Result<Vec<String>> {
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let p = pool(w, name).await?;
        let members = p["members"].as_array().cloned().unwrap_or_default();
        if p["ready"] == ready && members.len() as u64 == ready {
            return Ok(members
                .iter()
                .filter_map(|m| m["id"].as_str().map(str::to_string))
                .collect());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("pool {name} never had {ready} ready members: {p}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The newest `computer.lifecycle` reasons of computer `c`.
async fn reasons(w: &World, c: &str) -> Result<Vec<String>> {
    Ok(w.lifecycle(c)
        .await?
        .iter()
        .filter_map(|e| e["reason"].as_str().map(str::to_string))
        .collect())
}

async fn destroy(w: &World, c: &str) -> Result<()> {
    w.client
        .json(Method::DELETE, &format!("/v1/computers/{c}"), None)
        .await?;
    Ok(())
}

async fn metric(w: &World, name: &str, pool: &str) -> Result<f64> {
    use http_body_util::BodyExt;
    let resp = w
        .client
        .send(
            Method::GET,
            "/metrics",
            None,
            None,
            control_plane::client::full_body(bytes::Bytes::new()),
        )
        .await?;
    let body = resp.into_body().collect().await?.to_bytes();
    let text = String::from_utf8_lossy(&body);
    let prefix = format!("{name}{{pool=\"{pool}\"}} ");
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0))
}

#[tokio::test]
async fn a_local_pool_hands_out_with_the_home_imported_refills_and_replaces_a_lost_member(
) -> Result<()> {
    let mut w = World::start().await?;
    // A workspace that had a computer before: its home is stored, the computer destroyed.
    let old = w.create_computer("ws-pool-return").await?;
    w.sh(&old, "echo kept > note.txt").await?;
    w.home_ok(&old, "checkpoint").await?;
    destroy(&w, &old).await?;

    let steps = tests::readme::commands("## Warm pools")?;
    assert_eq!(steps.len(), 5, "the README's block changed");
    let readme = |i: usize| -> Vec<String> {
        steps[i]
            .args
            .iter()
            .map(|a| match a.as_str() {
                "ws-1" => "ws-pool-return".to_string(),
                other => other.to_string(),
            })
            .collect()
    };
    let wr = &w;
    let run = |i: usize| {
        let v = readme(i);
        async move {
            let refs: Vec<&str> = v.iter().map(String::as_str).collect();
            cli_json(wr, &refs).await
        }
    };
    run(0).await?;
    let members = wait_ready(&w, "warm", 2).await?;
    // A member is nobody's: operations on it are refused with what to do instead.
    let refused = w
        .exec(&members[0], json!({ "argv": ["true"] }))
        .await
        .expect_err("exec on an unassigned member");
    assert!(
        refused.to_string().contains("computer create --pool warm"),
        "{refused}"
    );

    let shown = run(1).await?;
    assert_eq!(shown["size"], 2, "{shown}");
    let made = run(2).await?;
    let c = made["id"].as_str().context("no id")?.to_string();
    assert_eq!(made["from_pool"]["handed_out"], true, "{made}");
    assert!(members.contains(&c), "{c} is not one of {members:?}");
    assert_eq!(made["kind"], "team");
    assert_eq!(made["home_key"], "team-ws-pool-return");
    // The stored home was imported before the create answered.
    assert_eq!(
        w.get_file(&c, "note.txt").await?.as_ref(),
        b"kept\n",
        "the returning workspace's home"
    );
    let why = reasons(&w, &c).await?;
    assert!(
        why.iter().any(|r| r.contains("from warm pool warm")),
        "{why:?}"
    );
    assert!(
        why.iter()
            .any(|r| r.contains("restored into a machine from a warm pool")),
        "{why:?}"
    );
    // It is an ordinary computer now: commands run, checkpoints save its home.
    assert_eq!(w.sh(&c, "cat note.txt").await?, "kept\n");
    w.home_ok(&c, "checkpoint").await?;

    // The pool refills.
    let refilled = wait_ready(&w, "warm", 2).await?;
    assert!(!refilled.contains(&c));

    // A member whose guest is killed is replaced.
    let victim = refilled[0].clone();
    let home = w.home_of(&victim).display().to_string();
    let pids = pids_with_env("RAKAZO_HOME", &home);
    assert!(!pids.is_empty(), "no guest of member {victim}");
    for pid in pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let now = wait_ready(&w, "warm", 2).await?;
        if !now.contains(&victim) {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            bail!("member {victim} was never replaced");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    assert_eq!(metric(&w, "rakazo_pool_handouts_total", "warm").await?, 1.0);
    // An empty pool goes cold: the create still succeeds, and says so.
    run(3).await?;
    wait_ready(&w, "warm", 0).await?;
    let cold = cli_json(
        &w,
        &[
            "computer",
            "create",
            "--private-bot",
            "bot-cold",
            "--pool",
            "warm",
        ],
    )
    .await?;
    assert_eq!(cold["from_pool"]["handed_out"], false, "{cold}");
    assert_eq!(metric(&w, "rakazo_pool_misses_total", "warm").await?, 1.0);
    let deleted = run(4).await?;
    assert_eq!(deleted["destroyed"], 0);
    w.check_log()
}

#[tokio::test]
async fn a_pool_of_desktops_gives_a_bot_the_spare_screen_and_its_profile() -> Result<()> {
    let mut w = World::start().await?;
    rakazo_ok(&w, &["pool", "create", "desks", "--size", "1", "--desktop"]).await?;
    let member = wait_ready(&w, "desks", 1).await?.remove(0);
    let profiles = w.home_of(&member).join(".browser-profiles");
    let spare = |dir: &std::path::Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(".spare-"))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(spare(&profiles).len(), 1, "the member's spare profile");

    let made = cli_json(
        &w,
        &[
            "computer",
            "create",
            "--workspace",
            "ws-desks",
            "--pool",
            "desks",
        ],
    )
    .await?;
    let c = made["id"].as_str().context("no id")?.to_string();
    assert_eq!(c, member);
    let bot = Bot::new(&w, &c, "bot-desk").await?;
    let frame = bot.observe().await?;
    assert!(frame["width"].as_u64().unwrap_or(0) > 0, "{frame}");
    // Its Chrome is the spare's: the page tools work on it at once.
    let snap = w
        .post(
            &format!("/v1/computers/{c}/browser/bot-desk/snapshot"),
            json!({ "lease": bot.lease }),
        )
        .await?;
    assert_eq!(snap["ok"], true, "{snap}");
    // The run's end checkpoints the home, which closes Chrome: the spare profile becomes the
    // bot's, so what the bot did is saved as its own.
    bot.end_run().await?;
    let deadline = tokio::time::Instant::now() + LONG;
    while !spare(&profiles).is_empty() {
        if tokio::time::Instant::now() > deadline {
            bail!("the spare profile never became the bot's");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    use sha2::Digest;
    let own = &hex::encode(sha2::Sha256::digest(b"bot-desk"))[..32];
    assert!(profiles.join(own).is_dir(), "the bot's profile");
    rakazo_ok(&w, &["pool", "delete", "desks"]).await?;
    w.check_log()
}

#[tokio::test]
async fn a_docker_pool_hands_out_refills_and_replaces_a_killed_member() -> Result<()> {
    engine::require_engine()?;
    let mut w = World::start_with(WorldOptions {
        providers: Some("docker,local".into()),
        ..Default::default()
    })
    .await?;
    rakazo_ok(
        &w,
        &[
            "pool",
            "create",
            "dock",
            "--provider",
            "docker",
            "--size",
            "1",
        ],
    )
    .await?;
    let first = wait_ready(&w, "dock", 1).await?.remove(0);
    let made = cli_json(
        &w,
        &[
            "computer",
            "create",
            "--workspace",
            "ws-dock",
            "--pool",
            "dock",
        ],
    )
    .await?;
    let c = made["id"].as_str().context("no id")?.to_string();
    w.track_docker(&c);
    assert_eq!(c, first);
    assert_eq!(made["provider"], "docker");
    assert_eq!(w.sh(&c, "echo from-the-pool").await?, "from-the-pool\n");
    let second = wait_ready(&w, "dock", 1).await?.remove(0);
    engine::podman(&["kill", &engine::container_of(&second)])?;
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let now = wait_ready(&w, "dock", 1).await?;
        if now[0] != second {
            w.track_docker(&now[0]);
            break;
        }
        if tokio::time::Instant::now() > deadline {
            bail!("member {second} was never replaced");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(!engine::container_exists(&second)?);
    rakazo_ok(&w, &["pool", "delete", "dock"]).await?;
    destroy(&w, &c).await?;
    w.check_log()
}
