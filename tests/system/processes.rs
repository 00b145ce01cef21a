//! Detached processes (README "Background processes", docs/api.md#processes) through the real
//! `rakazo` binary: they outlive their client, are followed by two clients at once, attached to
//! and killed; a computer's stop ends them and the activity feed shows their start and exit; the
//! guest's output ring marks what it dropped; bad ids and signals are refused clearly.

use crate::cli::{
    command, create, rakazo, rakazo_ok, rakazo_with, read_until, refused, text, CLI_TIMEOUT,
};
use anyhow::{bail, Context, Result};
use control_plane::client::ClientError;
use hyper::Method;
use std::process::Stdio;
use std::time::Duration;
use tests::{World, WorldOptions};
use tokio::io::AsyncWriteExt;

/// A TCP port free on this host now (the local computers share its network in tests).
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// `rakazo --json ps <c>`: the processes.
async fn ps(w: &World, c: &str) -> Result<Vec<serde_json::Value>> {
    let out = rakazo_ok(w, &["--json", "ps", c]).await?;
    let v: serde_json::Value = serde_json::from_slice(&out)?;
    Ok(v["processes"].as_array().cloned().unwrap_or_default())
}

/// `rakazo attach <c> <id>` with its stdin piped: the child and its stdin.
fn attach(
    w: &World,
    c: &str,
    id: &str,
) -> Result<(tokio::process::Child, tokio::process::ChildStdin)> {
    let mut child = command(
        &[("RAKAZO_URL", &w.http), ("RAKAZO_TOKEN", w.api_token())],
        &["attach", c, id],
    )
    .stdin(Stdio::piped())
    .spawn()?;
    let stdin = child.stdin.take().context("stdin")?;
    Ok((child, stdin))
}

/// Waits until the `nth` process `rakazo ps` lists has exited; that process.
async fn exited(w: &World, c: &str, nth: usize) -> Result<serde_json::Value> {
    let deadline = tokio::time::Instant::now() + CLI_TIMEOUT;
    loop {
        let p = ps(w, c).await?.get(nth).cloned().unwrap_or_default();
        if p["state"] == "exited" {
            return Ok(p);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "it never exited: {p}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `rakazo logs <c> <id> --since 0` prints something containing `needle`.
async fn wait_output(w: &World, c: &str, id: &str, needle: &str) -> Result<String> {
    let deadline = tokio::time::Instant::now() + CLI_TIMEOUT;
    loop {
        let out = text(&rakazo_ok(w, &["logs", c, id, "--since", "0"]).await?);
        if out.contains(needle) {
            return Ok(out);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("{needle:?} never appeared in process {id}'s output: {out}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The computer's activity feed as JSON text.
async fn feed(w: &World, c: &str) -> Result<String> {
    Ok(w.client
        .json(
            Method::GET,
            &format!("/v1/computers/{c}/activity?limit=100"),
            None,
        )
        .await?
        .to_string())
}

/// The README's block as written (the server's port aside): a detached `python3 -m
/// http.server` outlives `exec --detach`, serves, is followed by two clients at once until it
/// is killed, and its output stays readable after it exited; `attach` writes to another's stdin.
#[tokio::test(flavor = "multi_thread")]
async fn a_detached_server_outlives_its_client_and_is_followed_by_two_clients() -> Result<()> {
    let mut w = World::start().await?;
    let c = create(&w, "w-procs").await?;
    let port = free_port()?.to_string();
    let steps = tests::readme::commands("## Background processes")?;
    assert_eq!(steps.len(), 8, "the README's processes block changed");
    let mut followers = Vec::new();
    for step in &steps {
        let args: Vec<String> = step
            .args
            .iter()
            .map(|a| match a.as_str() {
                "c-..." => c.clone(),
                "8000" => port.clone(),
                other => other.replace(":8000/", &format!(":{port}/")),
            })
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match args[..] {
            // Followed by two clients at once, until the process exits.
            ["logs", _, _, "--follow"] => {
                for _ in 0..2 {
                    let child = command(
                        &[("RAKAZO_URL", &w.http), ("RAKAZO_TOKEN", w.api_token())],
                        &args,
                    )
                    .stdin(Stdio::null())
                    .spawn()?;
                    followers.push(child);
                }
                continue;
            }
            ["exec", _, "--", "curl", ..] => {
                // The server answers once it listens: the line waits for its banner.
                wait_output(&w, &c, "1", "Serving HTTP").await?;
            }
            _ => {}
        }
        let out = rakazo_with(
            &w,
            w.api_token(),
            &args,
            step.stdin.as_deref().map(str::as_bytes),
        )
        .await?;
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success(),
            "README line `rakazo {}`:\nstdout: {stdout}\nstderr: {stderr}",
            step.args.join(" ")
        );
        match args[..] {
            ["exec", "--detach", ..] => {
                let n = ps(&w, &c).await?.len();
                assert_eq!(stdout.trim(), n.to_string(), "the id it printed");
            }
            ["ps", ..] => {
                let line = stdout.lines().nth(1).context("no process listed")?;
                assert!(line.starts_with("1\t"), "{stdout}");
                assert!(line.contains("\trunning\t"), "{stdout}");
                assert!(line.contains("python3 -u -m http.server"), "{stdout}");
                // `computer show` lists it too.
                let show = text(&rakazo_ok(&w, &["computer", "show", &c]).await?);
                assert!(show.contains("process 1\t"), "{show}");
            }
            ["kill", ..] => {
                // Both followers saw the request the curl made and end with the process.
                for f in followers.drain(..) {
                    let out = tokio::time::timeout(CLI_TIMEOUT, f.wait_with_output())
                        .await
                        .context("a follower did not end with the process")??;
                    let (o, e) = (text(&out.stdout), text(&out.stderr));
                    assert!(out.status.success(), "{o}\n{e}");
                    assert!(o.contains("Serving HTTP"), "{o}");
                    assert!(o.contains("\"HEAD / HTTP/1.1\" 200"), "{o}");
                    assert!(e.contains("the process exited with"), "{e}");
                }
            }
            ["logs", _, "1", "--since", "0"] => {
                assert!(stdout.contains("Serving HTTP"), "{stdout}");
                let p = ps(&w, &c).await?;
                assert_eq!(p[0]["state"], "exited", "{p:?}");
            }
            _ => {}
        }
    }
    // The attached line reached process 2's stdin.
    wait_output(&w, &c, "2", "got hi").await?;
    let p = ps(&w, &c).await?;
    assert_eq!(p[1]["state"], "running", "detaching left it running: {p:?}");
    w.check_log()
}

/// `attach` streams both ways while stdin is open; closing it, or Ctrl-], detaches and leaves the
/// process running; `kill --signal KILL` ends it (exit 137) and a killed process cannot be killed again.
#[tokio::test(flavor = "multi_thread")]
async fn attach_streams_both_ways_and_kill_ends_the_process() -> Result<()> {
    let mut w = World::start().await?;
    let c = create(&w, "w-attach").await?;
    let script = "while read l; do echo \"got $l\"; done";
    let id = text(&rakazo_ok(&w, &["exec", "--detach", &c, "--", "sh", "-c", script]).await?);
    let id = id.trim().to_string();
    let (mut child, mut stdin) = attach(&w, &c, &id)?;
    let mut stdout = child.stdout.take().context("stdout")?;
    stdin.write_all(b"one\n").await?;
    stdin.flush().await?;
    read_until(&mut stdout, b"got one\n")
        .await
        .context("no answer through attach")?;
    drop(stdin);
    let status = tokio::time::timeout(CLI_TIMEOUT, child.wait()).await??;
    assert!(status.success(), "{status}");
    let p = ps(&w, &c).await?;
    assert_eq!(p[0]["state"], "running", "{p:?}");

    // Ctrl-] detaches while stdin stays open; what came before it still goes to the process.
    let (child, mut stdin) = attach(&w, &c, &id)?;
    stdin.write_all(b"two\n\x1dthree\n").await?;
    stdin.flush().await?;
    let out = tokio::time::timeout(CLI_TIMEOUT, child.wait_with_output())
        .await
        .context("Ctrl-] did not detach")??;
    assert!(out.status.success(), "{}", text(&out.stderr));
    drop(stdin);
    let logs = wait_output(&w, &c, &id, "got two\n").await?;
    assert!(!logs.contains("three"), "{logs}");
    assert_eq!(ps(&w, &c).await?[0]["state"], "running");

    rakazo_ok(&w, &["kill", &c, &id, "--signal", "KILL"]).await?;
    let p = exited(&w, &c, 0).await?;
    assert_eq!(p["exit_code"], 137, "{p}");
    refused(&w, &["kill", &c, &id], "has exited").await?;
    w.check_log()
}

/// A computer's stop ends its processes, and the feed shows each start and exit.
#[tokio::test(flavor = "multi_thread")]
async fn stopping_the_computer_ends_its_processes_and_the_feed_says_so() -> Result<()> {
    let mut w = World::start().await?;
    let c = create(&w, "w-stop").await?;
    // A duration no other test uses names this one's process among the host's.
    let out = rakazo_ok(&w, &["exec", "--detach", &c, "--", "sleep", "987.654"]).await?;
    assert_eq!(text(&out).trim(), "1");
    let done = rakazo_ok(
        &w,
        &[
            "exec",
            "--detach",
            &c,
            "--",
            "sh",
            "-c",
            "echo done; exit 4",
        ],
    )
    .await?;
    assert_eq!(text(&done).trim(), "2");
    let alive = || {
        let out = std::process::Command::new("pgrep")
            .args(["-f", "^sleep 987.654"])
            .output();
        out.map(|o| o.status.success()).unwrap_or(false)
    };
    assert!(alive(), "the detached sleep is not running");
    // The finished one's exit is in the feed with its code and output.
    let deadline = tokio::time::Instant::now() + CLI_TIMEOUT;
    while !feed(&w, &c).await?.contains("[2] sh -c") || !feed(&w, &c).await?.contains("done") {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "no exit event for 2"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    rakazo_ok(&w, &["computer", "stop", &c]).await?;
    tests::wait_for(CLI_TIMEOUT, "the sleep to end with its computer", || {
        (!alive()).then_some(())
    })
    .await?;
    let deadline = tokio::time::Instant::now() + CLI_TIMEOUT;
    let events = loop {
        let page = w
            .client
            .json(
                Method::GET,
                &format!("/v1/computers/{c}/activity?limit=100"),
                None,
            )
            .await?;
        let events: Vec<serde_json::Value> = page["events"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e.to_string().contains("process_"))
            .collect();
        if events.len() >= 4 || tokio::time::Instant::now() >= deadline {
            break events;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let all = serde_json::Value::Array(events.clone()).to_string();
    let has = |action: &str, line: &str| {
        events.iter().any(|e| {
            let s = e.to_string();
            s.contains(&format!("\"action\":\"{action}\"")) && s.contains(line)
        })
    };
    assert!(has("process_start", "[1] sleep 987.654"), "{all}");
    assert!(has("process_start", "[2] sh -c"), "{all}");
    assert!(has("process_exit", "[2] sh -c"), "{all}");
    assert!(all.contains("\"exit_code\":4"), "{all}");
    let stopped = events
        .iter()
        .find(|e| {
            let s = e.to_string();
            s.contains("process_exit") && s.contains("[1] sleep")
        })
        .with_context(|| format!("no exit event for the sleep: {all}"))?;
    assert!(
        stopped.to_string().contains("its processes ended with it"),
        "{stopped}"
    );
    w.check_log()
}

/// The guest keeps the last `RAKAZO_PROCESS_LOG_BYTES` of output: a reader asking for older
/// output is told how much was dropped.
#[tokio::test(flavor = "multi_thread")]
async fn the_output_ring_marks_what_it_dropped() -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        guest_env: vec![("RAKAZO_PROCESS_LOG_BYTES".into(), "4096".into())],
        ..Default::default()
    })
    .await?;
    let c = create(&w, "w-ring").await?;
    let script = "head -c 10000 /dev/zero | tr '\\0' a; echo; echo END";
    let id = text(&rakazo_ok(&w, &["exec", "--detach", &c, "--", "sh", "-c", script]).await?);
    let id = id.trim().to_string();
    exited(&w, &c, 0).await?;
    // Follow from the start: it exited, so the answer ends at once.
    let out = rakazo(&w, &["logs", &c, &id, "--follow", "--since", "0"]).await?;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.ends_with("a\nEND\n"), "{stdout}");
    assert_eq!(stdout.len(), 4096, "the ring's size");
    assert!(
        stderr.contains("5909 bytes of output were dropped; showing from offset 5909"),
        "{stderr}"
    );
    let json = text(&rakazo_ok(&w, &["--json", "logs", &c, &id, "--since", "6000"]).await?);
    let first: serde_json::Value = serde_json::from_str(json.lines().next().unwrap_or(""))?;
    assert_eq!(first["type"], "opened", "{json}");
    assert_eq!(first["offset"], 6000, "{json}");
    assert_eq!(first["dropped"], 0, "{json}");
    w.check_log()
}

/// Unknown processes are 404 naming them, a bad id or signal 400; the CLI says so on one line.
#[tokio::test(flavor = "multi_thread")]
async fn bad_process_ids_and_signals_are_refused_clearly() -> Result<()> {
    let mut w = World::start().await?;
    let c = create(&w, "w-badproc").await?;
    let needle = format!("no process 99 on computer {c}");
    refused(&w, &["logs", &c, "99"], &needle).await?;
    refused(&w, &["kill", &c, "99"], &needle).await?;
    refused(&w, &["attach", &c, "99"], &needle).await?;
    let status = |r: Result<serde_json::Value, ClientError>| match r {
        Err(ClientError::Api { status, code, .. }) => (status.as_u16(), code),
        other => (0, format!("{other:?}")),
    };
    let get = |p: String| {
        let w = &w;
        async move { w.client.json(Method::GET, &p, None).await }
    };
    assert_eq!(
        status(get(format!("/v1/computers/{c}/processes/99")).await),
        (404, "not_found".into())
    );
    assert_eq!(
        status(get(format!("/v1/computers/{c}/processes/abc")).await),
        (400, "bad_request".into())
    );
    assert_eq!(
        status(get(format!("/v1/computers/{c}/processes/1/logs?offset=x")).await),
        (400, "bad_request".into())
    );
    let id = text(&rakazo_ok(&w, &["exec", "--detach", &c, "--", "sleep", "30"]).await?);
    let id = id.trim().to_string();
    let out = refused(
        &w,
        &["kill", &c, &id, "--signal", "BOGUS"],
        "no signal \"BOGUS\"",
    )
    .await?;
    assert!(out.contains("use TERM, KILL"), "{out}");
    let bad = w
        .post(
            &format!("/v1/computers/{c}/processes/{id}/kill"),
            serde_json::json!({ "signal": "SIGNOPE" }),
        )
        .await;
    assert_eq!(status(bad), (400, "bad_request".into()));
    // A detached process takes its stdin through attach.
    let bad = w
        .post(
            &format!("/v1/computers/{c}/processes"),
            serde_json::json!({ "argv": ["cat"], "stdin": "x" }),
        )
        .await;
    assert_eq!(status(bad), (400, "bad_request".into()));
    // A program that is not there is refused at start.
    refused(
        &w,
        &["exec", "--detach", &c, "--", "no-such-program-here"],
        "command not found",
    )
    .await?;
    rakazo_ok(&w, &["kill", &c, &id]).await?;

    // Fenced like an exec: under the bot's live lease it starts for the bot (and, on a Team
    // computer, in its directory); under another it is refused before anything runs.
    let lease = w.lease(&c, "bot-1", "run-1").await?;
    let fenced = ["--bot", "bot-1", "--lease", &lease];
    let argv = [&["exec", "--detach"][..], &fenced, &[&c, "--", "pwd"]].concat();
    let id = text(&rakazo_ok(&w, &argv).await?).trim().to_string();
    let out = wait_output(&w, &c, &id, "/bots/bot-1").await?;
    assert!(out.ends_with("/bots/bot-1\n"), "{out}");
    let p = ps(&w, &c).await?;
    let started = p
        .iter()
        .find(|p| p["id"].as_u64() == id.parse().ok())
        .context("not listed")?;
    assert_eq!(started["bot"], "bot-1", "{p:?}");
    let stale = ["--bot", "bot-1", "--lease", "run-0:9"];
    let argv = [&["exec", "--detach"][..], &stale, &[&c, "--", "true"]].concat();
    refused(&w, &argv, "lease").await?;

    // A kill is fenced the same way: once run-2 holds the bot's lease, run-1's kill is refused
    // and signals nothing; run-2's kills.
    let argv = [
        &["exec", "--detach"][..],
        &fenced,
        &[&c, "--", "sleep", "60"],
    ]
    .concat();
    let sleeper = text(&rakazo_ok(&w, &argv).await?).trim().to_string();
    w.post(
        &format!("/v1/computers/{c}/leases/bot-1/release"),
        serde_json::json!({ "lease": lease }),
    )
    .await?;
    let newer = w.lease(&c, "bot-1", "run-2").await?;
    let kill = |lease: &'_ str| {
        ["kill", &c, &sleeper, "--bot", "bot-1", "--lease", lease].map(String::from)
    };
    let argv = kill(&lease);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let out = refused(&w, &argv, "lease").await?;
    assert!(out.contains("stale_lease"), "{out}");
    let state = |p: Vec<serde_json::Value>| {
        p.into_iter()
            .find(|p| p["id"].as_u64() == sleeper.parse().ok())
            .map(|p| p["state"].clone())
    };
    assert_eq!(state(ps(&w, &c).await?), Some("running".into()));
    let argv = kill(&newer);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    rakazo_ok(&w, &argv).await?;
    let deadline = tokio::time::Instant::now() + CLI_TIMEOUT;
    while state(ps(&w, &c).await?) != Some("exited".into()) {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "run-2's kill did not end it"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    w.check_log()
}

/// The same on a Docker computer: a detached process runs as the workspace user inside its
/// container, outlives its client, and is killed.
#[tokio::test(flavor = "multi_thread")]
async fn a_docker_computers_detached_process_runs_as_its_user_and_is_killed() -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        providers: Some("docker,local".into()),
        ..Default::default()
    })
    .await?;
    let c = w
        .create_computer_on("ws-docker-procs", Some("docker"))
        .await?;
    let script = "id -un; pwd; exec sleep 600";
    let id = text(&rakazo_ok(&w, &["exec", "--detach", &c, "--", "sh", "-c", script]).await?);
    let id = id.trim().to_string();
    let out = wait_output(&w, &c, &id, "/home/rakazo\n").await?;
    assert_eq!(out, "rakazo\n/home/rakazo\n");
    let ps_in = w.sh(&c, "ps -eo user=,args= | grep '[s]leep 600'").await?;
    assert!(ps_in.trim_start().starts_with("rakazo "), "{ps_in}");
    rakazo_ok(&w, &["kill", &c, &id]).await?;
    assert_eq!(exited(&w, &c, 0).await?["exit_code"], 143);
    w.check_log()
}
