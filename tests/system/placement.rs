//! Placement (issue 13) through the real `rakazo` binary: `computer create --placement NAME` puts
//! a docker computer on the engine it names (even where the fewest-computers rule would not),
//! and `computer show` says so; an unknown engine is a 422 that lists the configured ones, a
//! malformed name a 400, and a provider with no places (local) refuses one by name; no refusal
//! leaves a computer behind. What becomes of a placed computer whose engine is lost:
//! `providers::a_lost_engine_s_computers_are_replaced_on_the_other`.

use anyhow::{Context, Result};
use hyper::Method;
use std::process::Output;
use tests::engine::TwoEngines;
use tests::{World, WorldOptions};

/// `rakazo <args>` against `w`, with nothing but the world's address and token.
fn rakazo(w: &World, args: &[&str]) -> Result<Output> {
    Ok(std::process::Command::new(tests::bin("rakazo"))
        .args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("RAKAZO_URL", &w.http)
        .env("RAKAZO_TOKEN", w.api_token())
        .output()?)
}

/// `rakazo <args>`, which must succeed; its stdout.
fn rakazo_ok(w: &World, args: &[&str]) -> Result<String> {
    let out = rakazo(w, args)?;
    anyhow::ensure!(
        out.status.success(),
        "rakazo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// `rakazo computer create --workspace <ws> <more>`, which must fail with a message containing
/// every one of `needles`.
fn create_refused(w: &World, ws: &str, more: &[&str], needles: &[&str]) -> Result<()> {
    let args = [&["computer", "create", "--workspace", ws], more].concat();
    let out = rakazo(w, &args)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    anyhow::ensure!(!out.status.success(), "{args:?} succeeded");
    for needle in needles {
        anyhow::ensure!(
            stderr.contains(needle),
            "{args:?}: {needle:?} not in {stderr}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_places_a_computer_on_the_engine_it_names() -> Result<()> {
    let engines = TwoEngines::take().await?;
    let mut w = World::start_with(WorldOptions {
        providers: Some("docker,local".into()),
        default_provider: Some("docker".into()),
        env: engines.world_env(),
        ..Default::default()
    })
    .await?;

    // Both engines are empty: the fewest-computers rule would take b (`default`, the first).
    let out = rakazo_ok(
        &w,
        &[
            "computer",
            "create",
            "--workspace",
            "ws-placed",
            "--placement",
            "c",
            "--json",
        ],
    )?;
    let v: serde_json::Value = serde_json::from_str(&out)?;
    let c = v["id"].as_str().context("id")?.to_string();
    w.track_docker(&c);
    assert_eq!(v["placement"], "c");
    assert_eq!(engines.holder(&c)?, engines.c);
    let shown: serde_json::Value =
        serde_json::from_str(&rakazo_ok(&w, &["computer", "show", &c, "--json"])?)?;
    assert_eq!(shown["placement"], "c");
    let text = rakazo_ok(&w, &["computer", "show", &c])?;
    assert!(text.contains("\tplacement c\n"), "{text}");
    // A computer without one shows none.
    let plain = w.create_computer("ws-unplaced").await?;
    assert!(w.show(&plain).await?.get("placement").is_none());
    assert_eq!(engines.holder(&plain)?, engines.b);

    // An engine that is not configured: a 422 saying which are.
    create_refused(
        &w,
        "ws-nowhere",
        &["--placement", "nowhere"],
        &[
            "there is no docker engine named nowhere (configured: default, c)",
            "(provider_invalid, HTTP 422",
        ],
    )?;
    // Not an engine name at all: a 400 saying what one looks like.
    create_refused(
        &w,
        "ws-bad",
        &["--placement", "../c"],
        &[
            "placement \"../c\" must be 1..=63 characters of [a-z0-9._-]",
            "(bad_request, HTTP 400",
        ],
    )?;
    // A local computer has no places to go.
    create_refused(
        &w,
        "ws-local",
        &["--provider", "local", "--placement", "c"],
        &[
            "placement \"c\" cannot be honoured: the local provider has no places to choose from",
            "(provider_invalid, HTTP 422",
        ],
    )?;
    // Refusals come before the computer is made: only the two made above exist.
    let list = w.client.json(Method::GET, "/v1/computers", None).await?;
    let mut ids: Vec<&str> = list["computers"]
        .as_array()
        .context("computers")?
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    ids.sort_unstable();
    let mut want = vec![c.as_str(), plain.as_str()];
    want.sort_unstable();
    assert_eq!(ids, want);
    w.check_log()
}
