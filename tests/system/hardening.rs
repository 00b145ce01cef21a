//! What a new user hit, and what a command inside a computer could reach (issue 11): each test
//! names the behaviour and fails without its mechanism.

use anyhow::{bail, Context, Result};
use control_plane::client::ClientError;
use hyper::{Method, StatusCode};
use std::path::PathBuf;
use std::time::Duration;
use tests::World;

#[tokio::test]
async fn a_second_computer_for_a_workspace_is_a_conflict_naming_the_first() -> Result<()> {
    let mut w = World::start().await?;
    let first = w.create_computer("ws-twice").await?;
    let err = w
        .post(
            "/v1/computers",
            serde_json::json!({ "workspace": "ws-twice" }),
        )
        .await
        .expect_err("a second live computer for one home");
    let ClientError::Api {
        status,
        code,
        message,
        ..
    } = &err
    else {
        bail!("not an API error: {err}");
    };
    assert_eq!(*status, StatusCode::CONFLICT, "{err}");
    assert_eq!(code, "home_in_use", "{err}");
    assert!(
        message.contains(&first) && message.contains("team-ws-twice"),
        "the refusal names the computer holding the home: {message}"
    );
    // Nothing was left half-made: one computer, still running.
    let list = w.client.json(Method::GET, "/v1/computers", None).await?;
    let n = list["computers"].as_array().map(Vec::len).unwrap_or(0);
    assert_eq!(n, 1, "{list}");
    w.sh(&first, "true").await?;
    w.check_log()
}

#[tokio::test]
async fn releasing_a_released_lease_changes_nothing() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-release").await?;
    let lease = w.lease(&c, "bot-1", "run-1").await?;
    w.sh(&c, "echo work > notes.txt").await?;
    let path = format!("/v1/computers/{c}/leases/bot-1/release");
    let body = serde_json::json!({ "lease": lease, "outcome": "success" });
    let first = w.post(&path, body.clone()).await?;
    assert_eq!(first["checkpoint"]["status"], "saved", "{first}");
    let saved = w.home_revision(&c).await?.context("a revision")?;
    for _ in 0..2 {
        let again = w.post(&path, body.clone()).await?;
        assert_eq!(again["released"], true, "{again}");
        assert_eq!(again["checkpoint"]["status"], "skipped", "{again}");
        assert_eq!(again["checkpoint"]["reason"], "already released", "{again}");
    }
    assert_eq!(
        w.home_revision(&c).await?.context("a revision")?,
        saved,
        "a repeated release checkpointed the home again"
    );
    w.check_log()
}

#[tokio::test]
async fn a_stopped_computer_is_not_connected_and_leaves_no_runtime_dir() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-stop").await?;
    // A desktop puts X cookies and sockets in the guest's runtime dir, in the computer's own
    // /tmp (seen from here through the guest's root).
    let guest = tests::guest_pid_of(&c).context("no guest process")?;
    let runtime = PathBuf::from(format!("/proc/{guest}/root"))
        .join(std::env::temp_dir().strip_prefix("/")?)
        .join(format!("rakazo-guest-{c}"));
    assert!(runtime.is_dir(), "{} missing", runtime.display());
    let on_host = std::env::temp_dir().join(format!("rakazo-guest-{c}"));
    assert_eq!(w.show(&c).await?["connected"], true);

    w.post(&format!("/v1/computers/{c}/stop"), serde_json::json!({}))
        .await?;
    // At once, not after some timeout: the control plane closed the connection itself.
    let v = w.show(&c).await?;
    assert_eq!(v["state"], "stopped", "{v}");
    assert_eq!(
        v["connected"], false,
        "a stopped computer reads connected: {v}"
    );
    let list = w.client.json(Method::GET, "/v1/computers", None).await?;
    assert_eq!(list["computers"][0]["connected"], false, "{list}");
    assert!(!runtime.exists(), "stop left {} behind", runtime.display());
    assert!(
        tests::pids_with_env("RAKAZO_COMPUTER_ID", &c).is_empty(),
        "a process of {c} outlived its stop"
    );
    assert!(!on_host.exists(), "stop left {} behind", on_host.display());

    w.post(&format!("/v1/computers/{c}/start"), serde_json::json!({}))
        .await?;
    assert_eq!(w.show(&c).await?["connected"], true);
    w.sh(&c, "true").await?;
    w.client
        .json(Method::DELETE, &format!("/v1/computers/{c}"), None)
        .await?;
    assert!(
        !runtime.exists(),
        "destroy left {} behind",
        runtime.display()
    );
    w.check_log()
}

/// Everything a command can read that might hold the token: every process's environment and
/// arguments, the guest's memory and environment, the token file and the usual places.
const FIND_TOKEN: &str = r#"
t="$1"
hits=""
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do
  # A hit in /proc names the process's first arguments: pids inside a jail are its own.
  if grep -qaF -- "$t" "$f" 2>/dev/null; then
    hits="$hits $f=$(head -c 16 "${f%/*}/cmdline" 2>/dev/null | tr -c 'a-zA-Z0-9_./-' ',')"
  fi
done
for f in $(find "$HOME/.." /tmp /run /dev/shm /etc /home -xdev -type f -readable -size -1M 2>/dev/null); do
  if grep -qaF -- "$t" "$f" 2>/dev/null; then hits="$hits $f"; fi
done
echo "hits:$hits"
"#;

#[tokio::test]
async fn a_command_cannot_find_its_computers_enrollment_token() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-token").await?;
    let token = w.enrollment_token(&c)?;
    assert!(token.len() >= 32, "a real token: {} chars", token.len());
    // The token file the provider wrote is gone once the guest read it.
    let file = w.local_dir_of(&c).join("token");
    assert!(!file.exists(), "{} is still there", file.display());

    let out = w
        .exec(
            &c,
            serde_json::json!({ "argv": ["sh", "-c", FIND_TOKEN, "find-token", token] }),
        )
        .await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.code,
        Some(0),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The search itself holds the token in its own argv: only those processes may match.
    let hits: Vec<&str> = stdout
        .trim()
        .strip_prefix("hits:")
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let guest = tests::pids_with_env("RAKAZO_COMPUTER_ID", &c);
    assert!(!guest.is_empty(), "no guest process of {c}");
    for hit in &hits {
        // `/proc/<pid>/<file>=<its first arguments>`: the search's own shell and greps only
        // (or a process gone before its arguments were read).
        let ours = match hit.strip_prefix("/proc/").and_then(|r| r.split_once('=')) {
            Some((_, args)) => {
                args.is_empty() || args.starts_with("sh,-c,") || args.starts_with("grep,")
            }
            None => false,
        };
        assert!(ours, "the token is readable at {hit} (all hits: {hits:?})");
    }
    // The guest's own /proc entries are closed to its commands (it is non-dumpable).
    let pid = guest[0];
    let probe = w
        .exec(
            &c,
            serde_json::json!({ "argv": ["sh", "-c",
                format!("p=$(pgrep -x rakazo-guest || echo {pid}); \
                         cat /proc/$p/environ >/dev/null 2>&1 && echo environ-open; \
                         head -c1 /proc/$p/mem >/dev/null 2>&1 && echo mem-open; echo done")] }),
        )
        .await?;
    assert_eq!(String::from_utf8_lossy(&probe.stdout), "done\n");
    w.check_log()
}

#[tokio::test]
async fn a_restarted_computer_gets_a_fresh_token_and_works() -> Result<()> {
    // The guest needs its token again only after a boot, which brings a fresh one: a stop and
    // start works although the first boot's file is gone.
    let mut w = World::start().await?;
    let c = w.create_computer("ws-reboot").await?;
    let first = w.enrollment_token(&c)?;
    w.post(&format!("/v1/computers/{c}/stop"), serde_json::json!({}))
        .await?;
    w.post(&format!("/v1/computers/{c}/start"), serde_json::json!({}))
        .await?;
    tokio::time::timeout(Duration::from_secs(60), w.sh(&c, "true")).await??;
    assert_ne!(
        w.enrollment_token(&c)?,
        first,
        "the token rotates with every boot"
    );
    w.check_log()
}
