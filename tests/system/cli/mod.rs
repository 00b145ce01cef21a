//! The `rakazo` CLI as people use it: the real binary, run as a process against a real World.
//! Every command and subcommand runs here at least once (`image build`: below), and each test
//! checks the command's effect through another command, not only its exit code.
//!
//! The CLI finds the server through `RAKAZO_URL` and the API token through `RAKAZO_TOKEN`; the
//! environment is cleared first so nothing from the test runner (or a local data dir) leaks in.
//!
//! README.md's tour runs as written, in order, in `cli_runs_the_readme_tour_in_order` (it reads the
//! README, so the two cannot drift apart); each line's effects are checked in the test beside it:
//!
//! | README line                                                    | effects checked in                      |
//! |----------------------------------------------------------------|-----------------------------------------|
//! | `bash scripts/demo.sh`                                         | none: it installs packages and keeps a server running (run by hand) |
//! | `bash scripts/test.sh`                                         | `.ci/run` runs it                       |
//! | `rakazo serve` (prints the API token once)                     | `cli_serve_prints_the_token_once_and_the_cli_finds_a_local_server`; every World runs `rakazo serve` |
//! | `rakazo computer create --workspace acme`                      | `cli_manages_the_lifecycle_of_computers` |
//! | `rakazo computer create --private-bot bot-7`                   | `cli_manages_the_lifecycle_of_computers` |
//! | `rakazo computer list`                                         | `cli_manages_the_lifecycle_of_computers` |
//! | `rakazo computer network set c-… allow github.com '*.pythonhosted.org:443'` | `cli_sets_network_policies` (enforced: `containment::a_contained_computer_reaches_nothing_of_the_host_or_its_neighbours`) |
//! | `rakazo workspace network set acme open ; rakazo computer network show c-…` | `cli_sets_network_policies` |
//! | `rakazo exec c-… -- sh -c 'echo out; echo err >&2; exit 3'`    | `cli_exec_streams_output_stdin_and_exit_codes` |
//! | `echo hi \| rakazo exec -i c-… -- tr a-z A-Z`                  | `cli_exec_streams_output_stdin_and_exit_codes` |
//! | `rakazo exec --timeout-ms 1000 c-… -- sleep 10`                | `cli_exec_streams_output_stdin_and_exit_codes` |
//! | `rakazo files put c-… ./tool.sh bin/tool.sh --executable`      | `cli_files_round_trip_binary_bytes_and_the_exec_bit` |
//! | `rakazo files ls c-… bin`                                      | `cli_files_round_trip_binary_bytes_and_the_exec_bit` |
//! | `rakazo files cat c-… bin/tool.sh`                             | `cli_files_round_trip_binary_bytes_and_the_exec_bit` |
//! | `rakazo lease acquire c-… bot-1 --owner run-42`                | `cli_acquires_uses_renews_and_releases_a_lease` |
//! | `rakazo exec --bot bot-1 --lease run-42:1 c-… -- pwd`          | `cli_acquires_uses_renews_and_releases_a_lease` |
//! | `rakazo screen ensure c-… bot-1 --lease run-42:1`              | `cli_drives_a_desktop`                  |
//! | `rakazo act c-… bot-1 --lease run-42:1 --actions '[{"type":"open",…}]'` | `cli_drives_a_desktop`         |
//! | `rakazo act c-… bot-1 --lease run-42:1 --observe --out after.png --actions '[…]'` | `cli_drives_a_desktop` |
//! | `rakazo observe c-… bot-1 --lease run-42:1 --out shot.png`     | `cli_drives_a_desktop`                  |
//! | `rakazo browser navigate c-… bot-1 http://…/ --lease run-42:1` | `cli_drives_the_page_browser`           |
//! | `rakazo browser snapshot c-… bot-1 --lease run-42:1`           | `cli_drives_the_page_browser`           |
//! | `rakazo browser act c-… bot-1 --lease run-42:1 --steps '[…]'`  | `cli_drives_the_page_browser`           |
//! | `rakazo screen url c-… bot-1`                                  | `cli_hands_out_live_urls_and_control`   |
//! | `rakazo screen takeover c-… bot-1` (refused while it runs)     | `cli_hands_out_live_urls_and_control`   |
//! | `rakazo lease release c-… bot-1 run-42:1`                      | `cli_acquires_uses_renews_and_releases_a_lease` |
//! | `rakazo screen takeover c-… bot-1`                             | `cli_hands_out_live_urls_and_control`   |
//! | `rakazo screen url c-… bot-1 --control ; rakazo terminal url c-… bot-1` | `cli_hands_out_live_urls_and_control` |
//! | `rakazo screen release c-… bot-1`                              | `cli_hands_out_live_urls_and_control`   |
//! | `rakazo screen stop c-… bot-1`                                 | `cli_drives_a_desktop`                  |
//! | `rakazo home checkpoint c-…`                                   | `cli_checkpoints_browses_restores_and_purges_a_home` |
//! | `rakazo home ls c-… bin ; rakazo home cat c-… bin/tool.sh`     | `cli_checkpoints_browses_restores_and_purges_a_home` |
//! | `rakazo home restore c-… ; rakazo home show c-…`               | `cli_checkpoints_browses_restores_and_purges_a_home` |
//! | `rakazo activity c-… --limit 50`                               | `activity::lifecycle_events_say_why_and_following_does_not_keep_a_computer_awake` (`--follow`: `activity::a_follower_sees_commands_live_with_every_secret_redacted`) |
//! | `rakazo computer stop c-… ; … start c-… ; … destroy c-…`       | `cli_manages_the_lifecycle_of_computers` |
//! | `rakazo home purge team-acme`                                  | `cli_checkpoints_browses_restores_and_purges_a_home` |
//!
//! The README's file hand-overs after the tour (`files upload … --control`, `files attach …
//! --bot --lease`) run in `cli_uploads_for_the_user_and_attaches_for_the_bot`; its MCP line
//! (`mcp token … --ttl-secs`), as written, in `mcp::a_session_token_opens_only_its_own_computer_and_bot`;
//! its Secrets lines (`secret set|list|rotate|delete`, the `exec` lines using them), as written, in
//! `secrets::the_real_value_reaches_its_domain_and_nothing_inside_the_computer`.
//!
//! Beyond the tour: `screen list`, `lease show`/`renew`/`release --outcome`, `home reconcile`,
//! `files cat --max-bytes`, `exec --cwd/--env/--json`, the global `--url`/`--token-file`/
//! `--data-dir`/`--json`, and the refusals users meet (wrong lease, unknown computer, bad token).
//! `rakazo image build` runs through the binary in `tests::engine::image`, which the Docker tests
//! use (`image::the_image_holds_a_static_guest_and_the_agents_tools` inspects what it built);
//! `computer create --provider docker --memory-mb …` in
//! `docker::the_cli_creates_a_docker_computer_with_limits`, whose server runs as the README's
//! Docker `rakazo serve` does as root: contained by default (no `RAKAZO_DOCKER_CONTAINMENT`).

mod desktops;
mod exec_files;
mod homes;
mod leases;
mod policies_lifecycle;
mod serve_tour;
mod uploads;

use anyhow::{anyhow, bail, Context, Result};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;
use tests::fixture::Fixture;
use tests::{wait_for, World};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bound on one CLI invocation.
pub(crate) const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// A computer id that no world has.
pub(crate) const UNKNOWN: &str = "c-0000000000000000";

/// `rakazo` with a cleared environment plus `envs`.
pub(crate) fn command(envs: &[(&str, &str)], args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(tests::bin("rakazo"));
    cmd.args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Runs `rakazo <args>` with `envs`, feeding `stdin` if given (else /dev/null).
pub(crate) async fn run(
    envs: &[(&str, &str)],
    args: &[&str],
    stdin: Option<&[u8]>,
) -> Result<Output> {
    run_within(envs, args, stdin, CLI_TIMEOUT).await
}

/// [`run`], bounded by `limit` instead of [`CLI_TIMEOUT`] (a command whose work grows with
/// its input, such as a video export).
pub(crate) async fn run_within(
    envs: &[(&str, &str)],
    args: &[&str],
    stdin: Option<&[u8]>,
    limit: Duration,
) -> Result<Output> {
    let mut cmd = command(envs, args);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
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
    let out = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .map_err(|_| anyhow!("rakazo {args:?} did not finish within {limit:?}"))??;
    if let Some(f) = feeder {
        f.await??;
    }
    Ok(out)
}

/// Runs `rakazo <args>` against `w` with `token`, feeding `stdin` if given (else /dev/null).
pub(crate) async fn rakazo_with(
    w: &World,
    token: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> Result<Output> {
    run(
        &[("RAKAZO_URL", &w.http), ("RAKAZO_TOKEN", token)],
        args,
        stdin,
    )
    .await
}

/// [`rakazo`] bounded by `limit` instead of [`CLI_TIMEOUT`].
pub(crate) async fn rakazo_within(w: &World, args: &[&str], limit: Duration) -> Result<Output> {
    run_within(
        &[("RAKAZO_URL", &w.http), ("RAKAZO_TOKEN", w.api_token())],
        args,
        None,
        limit,
    )
    .await
}

/// Runs `rakazo <args>` with the world's API token.
pub(crate) async fn rakazo(w: &World, args: &[&str]) -> Result<Output> {
    rakazo_with(w, w.api_token(), args, None).await
}

pub(crate) fn succeeded(args: &[&str], out: Output) -> Result<Vec<u8>> {
    anyhow::ensure!(
        out.status.success(),
        "rakazo {args:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    Ok(out.stdout)
}

/// Like [`rakazo`], but the command must succeed; returns its stdout.
pub(crate) async fn rakazo_ok(w: &World, args: &[&str]) -> Result<Vec<u8>> {
    succeeded(args, rakazo(w, args).await?)
}

/// `rakazo <args> --json`, which must succeed and print one JSON document.
pub(crate) async fn rakazo_json(w: &World, args: &[&str]) -> Result<serde_json::Value> {
    let mut all = args.to_vec();
    all.push("--json");
    let out = rakazo_ok(w, &all).await?;
    serde_json::from_slice(&out).with_context(|| format!("{all:?} printed no JSON: {}", text(&out)))
}

/// `rakazo exec <c> -- sh -c <script>`, which must succeed; returns its stdout.
pub(crate) async fn sh(w: &World, c: &str, script: &str) -> Result<Vec<u8>> {
    rakazo_ok(w, &["exec", c, "--", "sh", "-c", script]).await
}

/// Checks a failure as a person meets it: a non-zero exit, nothing on stdout, and one
/// `rakazo: …` line on stderr that contains `needle` and is never a server error or a panic.
/// Returns stderr.
pub(crate) fn assert_refused(args: &[&str], out: &Output, needle: &str) -> String {
    let stderr = text(&out.stderr);
    assert!(
        !out.status.success(),
        "{args:?} succeeded: {}",
        text(&out.stdout)
    );
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "{args:?} printed {:?}",
        text(&out.stdout)
    );
    assert!(stderr.starts_with("rakazo: "), "{args:?}: {stderr}");
    assert!(
        stderr.contains(needle),
        "{args:?}: {needle:?} not in {stderr}"
    );
    for bad in ["HTTP 5", "internal error", "panicked"] {
        assert!(!stderr.contains(bad), "{args:?}: {stderr}");
    }
    stderr
}

/// Runs `rakazo <args>`, which must fail as [`assert_refused`] says; returns stderr.
pub(crate) async fn refused(w: &World, args: &[&str], needle: &str) -> Result<String> {
    let out = rakazo(w, args).await?;
    Ok(assert_refused(args, &out, needle))
}

/// Reads a child's output until it ends with `needle` (within [`CLI_TIMEOUT`]); returns all
/// read. Fails if the output ends first.
pub(crate) async fn read_until(
    out: &mut (impl tokio::io::AsyncRead + Unpin),
    needle: &[u8],
) -> Result<Vec<u8>> {
    let mut seen = Vec::new();
    tokio::time::timeout(CLI_TIMEOUT, async {
        let mut buf = [0u8; 256];
        while !seen.ends_with(needle) {
            let n = out.read(&mut buf).await?;
            anyhow::ensure!(n > 0, "the output ended: {}", text(&seen));
            seen.extend_from_slice(&buf[..n]);
        }
        Ok(())
    })
    .await
    .with_context(|| format!("{} never came", text(needle)))??;
    Ok(seen)
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `rakazo computer create --workspace <ws> --json`; returns the new computer's id.
pub(crate) async fn create(w: &World, workspace: &str) -> Result<String> {
    let v = rakazo_json(w, &["computer", "create", "--workspace", workspace]).await?;
    assert_eq!(v["workspace"], workspace, "{v}");
    v["id"]
        .as_str()
        .map(String::from)
        .ok_or_else(|| anyhow!("no id in {v}"))
}

/// The line of `rakazo computer list` for `id`, if listed.
pub(crate) async fn listed(w: &World, id: &str) -> Result<Option<String>> {
    let list = text(&rakazo_ok(w, &["computer", "list"]).await?);
    Ok(list
        .lines()
        .find(|l| l.starts_with(&format!("{id}\t")))
        .map(String::from))
}

/// The stored home's revision, through `rakazo home show --json`.
pub(crate) async fn revision(w: &World, c: &str) -> Result<Option<u64>> {
    Ok(rakazo_json(w, &["home", "show", c]).await?["revision"].as_u64())
}

/// Width and height from a PNG's IHDR, after checking the signature.
pub(crate) fn png_size(path: &Path) -> Result<(u32, u32)> {
    let png = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    if png.len() < 24 || &png[..8] != b"\x89PNG\r\n\x1a\n" || &png[12..16] != b"IHDR" {
        bail!("{} is not a PNG", path.display());
    }
    // The whole image decodes, not only its header.
    let mut reader = png::Decoder::new(std::io::Cursor::new(&png)).read_info()?;
    let mut buf = vec![0; reader.output_buffer_size().unwrap_or(0)];
    reader.next_frame(&mut buf)?;
    Ok((
        u32::from_be_bytes(png[16..20].try_into()?),
        u32::from_be_bytes(png[20..24].try_into()?),
    ))
}
