//! The `rakazo` CLI as people use it: the real binary, run as a process against a real World.
//!
//! The CLI finds the server through `RAKAZO_URL` and the API token through `RAKAZO_TOKEN`; the
//! environment is cleared first so nothing from the test runner (or a local data dir) leaks in.

use anyhow::{anyhow, Context, Result};
use std::os::unix::fs::PermissionsExt;
use std::process::{Output, Stdio};
use std::time::Duration;
use tests::World;
use tokio::io::AsyncWriteExt;

/// Bound on one CLI invocation.
const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `rakazo <args>` against `w` with `token`, feeding `stdin` if given (else /dev/null).
async fn rakazo_with(
    w: &World,
    token: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> Result<Output> {
    let mut cmd = tokio::process::Command::new(tests::bin("rakazo"));
    cmd.args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("RAKAZO_URL", &w.http)
        .env("RAKAZO_TOKEN", token)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().context("start rakazo")?;
    let feeder = match (stdin, child.stdin.take()) {
        (Some(bytes), Some(mut pipe)) => {
            let bytes = bytes.to_vec();
            Some(tokio::spawn(async move {
                pipe.write_all(&bytes).await?;
                // Dropping the pipe closes it: end of input.
                drop(pipe);
                Ok::<_, std::io::Error>(())
            }))
        }
        _ => None,
    };
    let out = tokio::time::timeout(CLI_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| anyhow!("rakazo {args:?} did not finish within {CLI_TIMEOUT:?}"))??;
    if let Some(f) = feeder {
        f.await??;
    }
    Ok(out)
}

/// Runs `rakazo <args>` with the world's API token.
async fn rakazo(w: &World, args: &[&str]) -> Result<Output> {
    rakazo_with(w, w.api_token(), args, None).await
}

/// Like [`rakazo`], but the command must succeed; returns its stdout.
async fn rakazo_ok(w: &World, args: &[&str]) -> Result<Vec<u8>> {
    let out = rakazo(w, args).await?;
    anyhow::ensure!(
        out.status.success(),
        "rakazo {args:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out.stdout)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `rakazo computer create --workspace <ws> --json`; returns the new computer's id.
async fn create(w: &World, workspace: &str) -> Result<String> {
    let out = rakazo_ok(
        w,
        &["computer", "create", "--workspace", workspace, "--json"],
    )
    .await?;
    let v: serde_json::Value =
        serde_json::from_slice(&out).with_context(|| format!("not JSON: {}", text(&out)))?;
    assert_eq!(v["workspace"], workspace, "{v}");
    v["id"]
        .as_str()
        .map(String::from)
        .ok_or_else(|| anyhow!("no id in {v}"))
}

#[tokio::test]
async fn cli_creates_lists_and_shows_computers() -> Result<()> {
    let mut w = World::start().await?;
    let id = create(&w, "w").await?;
    let list = text(&rakazo_ok(&w, &["computer", "list"]).await?);
    let line = list
        .lines()
        .find(|l| l.starts_with(&format!("{id}\t")))
        .ok_or_else(|| anyhow!("{id} not in the list:\n{list}"))?;
    assert!(line.contains("workspace w"), "{line}");
    let listed: serde_json::Value =
        serde_json::from_slice(&rakazo_ok(&w, &["computer", "list", "--json"]).await?)?;
    let ids: Vec<&str> = listed["computers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(ids, vec![id.as_str()]);
    let shown: serde_json::Value =
        serde_json::from_slice(&rakazo_ok(&w, &["computer", "show", &id, "--json"]).await?)?;
    assert_eq!(shown["id"], id.as_str());
    w.check_log()
}

#[tokio::test]
async fn cli_exec_streams_both_outputs_and_exits_with_the_commands_code() -> Result<()> {
    let mut w = World::start().await?;
    let id = create(&w, "w-exec").await?;
    let out = rakazo(
        &w,
        &[
            "exec",
            &id,
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
    )
    .await?;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(out.stdout, b"out\n");
    assert!(text(&out.stderr).contains("err"), "{}", text(&out.stderr));

    // Stdin is streamed with -i and closed at end of input.
    let out = rakazo_with(
        &w,
        w.api_token(),
        &["exec", "-i", &id, "--", "tr", "a-z", "A-Z"],
        Some(b"abc\n"),
    )
    .await?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(out.stdout, b"ABC\n");

    // Without -i the command's stdin is empty, and success is exit 0.
    let out = rakazo(&w, &["exec", &id, "--", "cat"]).await?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    w.check_log()
}

#[tokio::test]
async fn cli_files_round_trip_binary_bytes_and_the_exec_bit() -> Result<()> {
    let mut w = World::start().await?;
    let id = create(&w, "w-files").await?;
    let local_dir = tempfile::tempdir()?;
    let local = local_dir.path().join("f.bin");
    let mut content: Vec<u8> = (0..=255u8).cycle().take(1 << 20).collect();
    content.extend_from_slice(&rand::random::<[u8; 64]>());
    content.extend_from_slice(b"\r\n\0\xff");
    std::fs::write(&local, &content)?;
    let local_str = local.display().to_string();

    let put = text(&rakazo_ok(&w, &["files", "put", &id, &local_str, "dir/f.bin", "-x"]).await?);
    assert!(put.contains(&content.len().to_string()), "{put}");
    let cat = rakazo_ok(&w, &["files", "cat", &id, "dir/f.bin"]).await?;
    assert_eq!(cat.len(), content.len());
    assert!(cat == content, "cat returned different bytes");

    let ls = text(&rakazo_ok(&w, &["files", "ls", &id, "dir"]).await?);
    let line = ls
        .lines()
        .find(|l| l.ends_with(" dir/f.bin"))
        .ok_or_else(|| anyhow!("dir/f.bin not listed:\n{ls}"))?;
    assert!(line.starts_with("x "), "not shown as executable: {line}");
    assert!(line.contains(&content.len().to_string()), "{line}");
    let mode = std::fs::metadata(w.home_of(&id).join("dir/f.bin"))?
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    w.check_log()
}

/// `rakazo exec <id> --bot bot1 --lease r1:1 -- touch <marker>`.
async fn touch_under_lease(w: &World, id: &str, marker: &str) -> Result<Output> {
    let argv = [
        "exec", id, "--bot", "bot1", "--lease", "r1:1", "--", "touch", marker,
    ];
    rakazo(w, &argv).await
}

#[tokio::test]
async fn cli_acquires_uses_and_releases_a_lease() -> Result<()> {
    let mut w = World::start().await?;
    let id = create(&w, "w-lease").await?;
    let acquired: serde_json::Value = serde_json::from_slice(
        &rakazo_ok(
            &w,
            &["lease", "acquire", &id, "bot1", "--owner", "r1", "--json"],
        )
        .await?,
    )?;
    assert_eq!(acquired["lease"], "r1:1", "{acquired}");
    let out = touch_under_lease(&w, &id, "ran-r1").await?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(w.home_of(&id).join("ran-r1").exists());

    let released = text(&rakazo_ok(&w, &["lease", "release", &id, "bot1", "r1:1"]).await?);
    assert!(released.contains("released"), "{released}");

    // The released lease no longer runs anything.
    let out = touch_under_lease(&w, &id, "ran-after-release").await?;
    assert!(!out.status.success(), "a released lease ran a command");
    assert!(out.stdout.is_empty());
    assert!(
        text(&out.stderr).contains("stale_lease"),
        "{}",
        text(&out.stderr)
    );
    assert!(!w.home_of(&id).join("ran-after-release").exists());
    w.check_log()
}

#[tokio::test]
async fn cli_with_a_wrong_token_fails_without_output() -> Result<()> {
    let mut w = World::start().await?;
    let id = create(&w, "w-auth").await?;
    for args in [
        vec!["computer", "list"],
        vec!["computer", "create", "--workspace", "w2", "--json"],
        vec!["exec", &id, "--", "touch", "unauthorized-ran"],
        vec!["files", "cat", &id, "anything"],
        vec!["lease", "acquire", &id, "bot1", "--owner", "r1"],
    ] {
        let out = rakazo_with(&w, "bad", &args, None).await?;
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded with a bad token");
        assert!(
            stderr.contains("unauthorized") || stderr.contains("API token"),
            "{args:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?} printed {:?}", out.stdout);
    }
    assert!(!w.home_of(&id).join("unauthorized-ran").exists());
    // Nothing was created by the refused create.
    let listed: serde_json::Value =
        serde_json::from_slice(&rakazo_ok(&w, &["computer", "list", "--json"]).await?)?;
    assert_eq!(listed["computers"].as_array().map(Vec::len), Some(1));
    w.check_log()
}
