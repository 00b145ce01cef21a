//! The console (issue 31, docs/console.md) in real Chromium against a real `rakazo serve` with a
//! local computer whose bot has a desktop: `tests/console/console.test.mjs` (playwright-core
//! driving `/usr/bin/chromium`, axe-core) signs in with tokens made by the real CLI, watches the
//! screen, takes control, uses the Shell, uploads, follows Activity and Files, stops the computer
//! and browses its stored home, checks viewers, CSRF, cookie flags, CSP, sign-out and revocation.
//! Around it, this test checks what a browser cannot: another workspace's viewer gets 404 through
//! the CLI and MCP too, and the server log holds no token, session cookie or capability path.
//! A second test runs `tests/console/history.test.mjs` on a computer with two home revisions:
//! the History window, restoring a revision and forking one (issue 32).
//!
//! Screenshots go to a temporary directory, or to `RAKAZO_CONSOLE_SCREENSHOTS` when set (relative
//! to the repository: `RAKAZO_CONSOLE_SCREENSHOTS=docs/console` regenerates the docs' copies).

use anyhow::{anyhow, bail, Context, Result};
use control_plane::client::{Client, ClientError};
use gateway_proto::Secret;
use hyper::Method;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tests::{World, WorldOptions};

use crate::cli::rakazo_with;

/// Bound on the whole browser run.
const BROWSER_RUN: Duration = Duration::from_secs(600);

const WORKSPACE: &str = "ws-console-a";
const OTHER_WORKSPACE: &str = "ws-console-b";
const BOT: &str = "bot-1";
/// `--attachment-max-bytes`, small enough for the browser to meet a 413.
const UPLOAD_LIMIT: &str = "65536";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// A token of `workspaces` made with `rakazo token create --json`: (token, id).
pub(crate) async fn token(
    w: &mut World,
    role: &str,
    workspaces: &[&str],
    name: &str,
) -> Result<(String, String)> {
    let mut args = vec!["token", "create", "--role", role, "--name", name, "--json"];
    for ws in workspaces {
        args.extend(["--workspace", ws]);
    }
    let out = rakazo_with(w, w.api_token(), &args, None).await?;
    if !out.status.success() {
        bail!(
            "rakazo token create failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| "token create --json printed no JSON".to_string())?;
    let secret = v["token"]
        .as_str()
        .ok_or_else(|| anyhow!("no token in the answer"))?
        .to_string();
    let id = v["id"]
        .as_str()
        .ok_or_else(|| anyhow!("no id in the answer"))?
        .to_string();
    w.add_secret(&secret);
    Ok((secret, id))
}

/// Starts `bot`'s desktop under a short run that ends successfully (the desktop stays), its
/// browser showing `page`.
async fn desktop(w: &World, c: &str, bot: &str, page: &str) -> Result<()> {
    let b = tests::bot::Bot::new(w, c, bot).await?;
    b.ensure().await?;
    b.open(page).await?;
    b.end_run().await
}

/// What the bot's browser shows: a page with some colour and text, so the screenshots show a
/// working desktop.
const PAGE: &str = "<!doctype html><html><head><title>Quarterly report</title></head>\
<body style='font-family:sans-serif;margin:0;background:#f4f6fb'>\
<header style='background:#0f766e;color:#fff;padding:24px 40px;font-size:28px'>Quarterly report</header>\
<main style='padding:32px 40px;font-size:20px'><p>Revenue by region, drafted by bot-1.</p>\
<table style='border-collapse:collapse;font-size:20px'>\
<tr><th style='text-align:left;padding:8px 24px'>Region</th><th style='padding:8px 24px'>Q3</th></tr>\
<tr><td style='padding:8px 24px'>North</td><td style='padding:8px 24px'>1.2 M</td></tr>\
<tr><td style='padding:8px 24px'>South</td><td style='padding:8px 24px'>0.9 M</td></tr>\
</table></main></body></html>";

fn status_of(r: Result<serde_json::Value, ClientError>) -> Option<u16> {
    match r {
        Err(ClientError::Api { status, .. }) => Some(status.as_u16()),
        Ok(_) => Some(200),
        Err(_) => None,
    }
}

fn os(v: &str) -> OsString {
    v.into()
}

/// Where the screenshots go: `RAKAZO_CONSOLE_SCREENSHOTS` (relative to the repository), or a
/// temporary directory kept as long as the answer's second half.
fn screenshots() -> Result<(PathBuf, Option<tempfile::TempDir>)> {
    screenshots_in("RAKAZO_CONSOLE_SCREENSHOTS")
}

/// Where a browser test's screenshots go: the directory `var` names (relative to the
/// repository), or a temporary directory kept as long as the answer's second half.
pub(crate) fn screenshots_in(var: &str) -> Result<(PathBuf, Option<tempfile::TempDir>)> {
    Ok(match std::env::var_os(var) {
        Some(d) => (repo().join(d), None),
        None => {
            let t = tempfile::Builder::new()
                .prefix("rakazo-console-shots-")
                .tempdir()?;
            (t.path().to_path_buf(), Some(t))
        }
    })
}

/// Runs `tests/console/<script>` under node with only `vars` (and PATH, HOME) in its
/// environment, within [`BROWSER_RUN`]; prints its output and fails unless it exits 0.
pub(crate) async fn browser_run(script: &str, vars: &[(&str, OsString)]) -> Result<String> {
    let dir = repo().join("tests/console");
    if !dir.join("node_modules/playwright-core").exists()
        || !dir.join("node_modules/axe-core").exists()
    {
        bail!(
            "{} has no node_modules: run scripts/setup-debian.sh (npm ci there)",
            dir.display()
        );
    }
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(script)
        .current_dir(&dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env(
            "HOME",
            std::env::var_os("HOME").unwrap_or_else(|| "/root".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let node = cmd
        .spawn()
        .with_context(|| format!("start node (tests/console/{script})"))?;
    let out = tokio::time::timeout(BROWSER_RUN, node.wait_with_output())
        .await
        .map_err(|_| anyhow!("the browser run did not finish within {BROWSER_RUN:?}"))??;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{stdout}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "the browser run ({script}) failed: {}",
        out.status
    );
    Ok(stdout)
}

#[tokio::test]
async fn the_console_in_chromium_signs_in_watches_controls_and_keeps_secrets_out_of_logs(
) -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        env: vec![("RAKAZO_ATTACHMENT_MAX_BYTES".into(), UPLOAD_LIMIT.into())],
        ..WorldOptions::default()
    })
    .await?;
    let site = tests::fixture::Fixture::start().await?;
    let c = w.create_computer(WORKSPACE).await?;
    desktop(&w, &c, BOT, &site.page("report", PAGE)).await?;
    let (operator, _) = token(&mut w, "operator", &[WORKSPACE], "console-operator").await?;
    let (viewer, _) = token(&mut w, "viewer", &[WORKSPACE], "console-viewer").await?;
    let (other, _) = token(&mut w, "viewer", &[OTHER_WORKSPACE], "console-other").await?;
    let (revoked, revoked_id) = token(&mut w, "viewer", &[WORKSPACE], "console-revoked").await?;

    // Another workspace's viewer: 404 through the API, the CLI and MCP, as for a missing computer.
    let as_other = Client::new(w.http.clone(), Secret::new(other.clone()));
    let shown = as_other
        .json(Method::GET, &format!("/v1/computers/{c}"), None)
        .await;
    assert_eq!(status_of(shown), Some(404), "API show by another workspace");
    let mcp = as_other
        .json(
            Method::POST,
            &format!("/v1/mcp/{c}/{BOT}"),
            Some(&serde_json::json!({
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
            })),
        )
        .await;
    assert_eq!(status_of(mcp), Some(404), "MCP by another workspace");
    let cli = rakazo_with(&w, &other, &["computer", "show", &c], None).await?;
    assert!(
        !cli.status.success(),
        "the CLI shows another workspace's computer"
    );
    let said = String::from_utf8_lossy(&cli.stderr).to_lowercase();
    assert!(
        said.contains("404") || said.contains("not found") || said.contains("not_found"),
        "the CLI says not found: {said}"
    );

    let shots = screenshots()?;
    let secrets = tempfile::NamedTempFile::new()?;
    let url = w.http.clone();
    let bin = tests::bin("rakazo");
    let vars = [
        ("RAKAZO_CONSOLE_URL", os(&url)),
        ("RAKAZO_CONSOLE_COMPUTER", os(&c)),
        ("RAKAZO_CONSOLE_BOT", os(BOT)),
        ("RAKAZO_CONSOLE_OPERATOR_TOKEN", os(&operator)),
        ("RAKAZO_CONSOLE_VIEWER_TOKEN", os(&viewer)),
        ("RAKAZO_CONSOLE_OTHER_TOKEN", os(&other)),
        ("RAKAZO_CONSOLE_REVOKED_TOKEN", os(&revoked)),
        ("RAKAZO_CONSOLE_REVOKED_ID", os(&revoked_id)),
        ("RAKAZO_CONSOLE_ADMIN_TOKEN", os(w.api_token())),
        ("RAKAZO_BIN", bin.into_os_string()),
        ("RAKAZO_CONSOLE_UPLOAD_LIMIT", os(UPLOAD_LIMIT)),
        (
            "RAKAZO_CONSOLE_SCREENSHOTS",
            shots.0.clone().into_os_string(),
        ),
        (
            "RAKAZO_CONSOLE_SECRETS_OUT",
            secrets.path().as_os_str().to_owned(),
        ),
    ];
    browser_run("console.test.mjs", &vars).await?;
    println!("console screenshots: {}", shots.0.display());

    // Nothing secret reached the server's log: tokens (the world checks every added secret),
    // session cookies and capability tokens the browser saw; a capability path is logged
    // redacted only.
    let seen = std::fs::read_to_string(secrets.path())?;
    let seen: Vec<&str> = seen.lines().filter(|l| l.len() >= 16).collect();
    assert!(
        seen.len() >= 4,
        "the browser run reported its cookies and capability tokens"
    );
    for secret in &seen {
        w.add_secret(secret);
    }
    let log = w.log();
    let caps: Vec<&str> = log
        .match_indices("/cap/")
        .map(|(i, _)| &log[i..(i + 20).min(log.len())])
        .filter(|at| !at.starts_with("/cap/<redacted>"))
        .collect();
    assert!(caps.is_empty(), "capability paths in the server log");
    assert!(
        !log.contains("rakazo_session="),
        "a session cookie in the server log"
    );
    w.check_log()?;
    Ok(())
}

/// Issue 32 in the console (docs/console.md#history): `tests/console/history.test.mjs` lists a
/// computer's two revisions, shows one's changes and files, restores the older one (its file goes
/// back) and forks it into a new workspace; a viewer sees History without Restore or Fork.
#[tokio::test]
async fn the_console_shows_home_history_restores_a_revision_and_forks_it() -> Result<()> {
    const HISTORY_WORKSPACE: &str = "ws-console-history";
    const FORK_WORKSPACE: &str = "ws-console-fork";
    let mut w = World::start().await?;
    let c = w.create_computer(HISTORY_WORKSPACE).await?;
    w.put_file(&c, "notes.txt", b"v1\n".to_vec(), false).await?;
    w.home_ok(&c, "checkpoint").await?;
    w.put_file(&c, "notes.txt", b"v2\n".to_vec(), false).await?;
    w.put_file(&c, "added.txt", b"new\n".to_vec(), false)
        .await?;
    w.home_ok(&c, "checkpoint").await?;
    let (operator, _) = token(
        &mut w,
        "operator",
        &[HISTORY_WORKSPACE, FORK_WORKSPACE],
        "history-operator",
    )
    .await?;
    let (viewer, _) = token(&mut w, "viewer", &[HISTORY_WORKSPACE], "history-viewer").await?;

    let shots = screenshots()?;
    let out = browser_run(
        "history.test.mjs",
        &[
            ("RAKAZO_CONSOLE_URL", os(&w.http)),
            ("RAKAZO_CONSOLE_COMPUTER", os(&c)),
            ("RAKAZO_CONSOLE_OPERATOR_TOKEN", os(&operator)),
            ("RAKAZO_CONSOLE_VIEWER_TOKEN", os(&viewer)),
            ("RAKAZO_CONSOLE_FORK_WORKSPACE", os(FORK_WORKSPACE)),
            (
                "RAKAZO_CONSOLE_SCREENSHOTS",
                shots.0.clone().into_os_string(),
            ),
        ],
    )
    .await?;
    println!("console screenshots: {}", shots.0.display());

    // What the page did, as the API sees it: the restore saved the present first (revision 3)
    // and made revision 4, and the fork is a computer of the other workspace with a home.
    assert_eq!(w.home_revision(&c).await?, Some(4));
    assert_eq!(w.get_file(&c, "notes.txt").await?.as_ref(), b"v1\n");
    let fork = out
        .lines()
        .find_map(|l| l.strip_prefix("history-fork: "))
        .ok_or_else(|| anyhow!("the browser run named no fork"))?
        .trim()
        .to_owned();
    if let Ok(t) = w.enrollment_token(&fork) {
        w.add_secret(&t);
    }
    assert_eq!(w.show(&fork).await?["workspace"], FORK_WORKSPACE);
    assert_eq!(w.home_revision(&fork).await?, Some(1));
    w.check_log()
}
