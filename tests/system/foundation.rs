//! The foundation: exec and files through API → tunnel → guest, leases, auth, restarts.

use anyhow::Result;
use control_plane::client::{full_body, Client, ClientError};
use gateway_proto::Secret;
use hyper::{Method, StatusCode};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;
use tests::{pids_with_cmdline, pids_with_env, wait_for, World, WorldOptions};

fn status_of(e: &ClientError) -> Option<(StatusCode, String)> {
    match e {
        ClientError::Api { status, code, .. } => Some((*status, code.clone())),
        _ => None,
    }
}

#[tokio::test]
async fn exec_streams_both_outputs_and_the_exit_code() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws1").await?;
    let out = w
        .exec(
            &c,
            serde_json::json!({ "argv": ["sh", "-c", "echo out; echo err >&2; exit 3"] }),
        )
        .await?;
    assert_eq!(out.stdout, b"out\n");
    assert_eq!(out.stderr, b"err\n");
    assert_eq!(out.code, Some(3));
    assert_eq!(
        out.events.first().and_then(|e| e["type"].as_str()),
        Some("started")
    );
    assert_eq!(
        out.events.last().and_then(|e| e["type"].as_str()),
        Some("exit")
    );
    w.check_log()
}

#[tokio::test]
async fn timeout_kills_the_whole_process_tree() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-timeout").await?;
    let marker = format!("rk-tree-{}", hex::encode(rand::random::<[u8; 6]>()));
    let script = "sleep 1000 & sleep 1000 & setsid sleep 1000 & (sleep 1000 &) ; wait";
    let out = w
        .exec(
            &c,
            serde_json::json!({ "argv": ["sh", "-c", script], "timeout_ms": 700, "env": { "RK_MARKER": marker } }),
        )
        .await?;
    assert_eq!(out.code, Some(124));
    assert_eq!(
        out.message.as_deref(),
        Some("command timed out after 700 ms")
    );
    wait_for(
        Duration::from_secs(5),
        "no survivor of the process tree",
        || pids_with_env("RK_MARKER", &marker).is_empty().then_some(()),
    )
    .await?;
    w.check_log()
}

#[tokio::test]
async fn a_client_that_goes_away_aborts_the_command() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-abort").await?;
    let marker = format!("rk-abort-{}", hex::encode(rand::random::<[u8; 6]>()));
    let resp = w
        .client
        .send(
            Method::POST,
            &format!("/v1/computers/{c}/exec"),
            Some("application/json"),
            None,
            full_body(serde_json::to_vec(&serde_json::json!({
                "argv": ["sleep", "1000"], "env": { "RK_MARKER": marker }
            }))?),
        )
        .await?;
    wait_for(Duration::from_secs(5), "the command to run", || {
        (!pids_with_env("RK_MARKER", &marker).is_empty()).then_some(())
    })
    .await?;
    // Dropping the response closes the connection: the client went away.
    drop(resp);
    w.client = Client::new(w.http.clone(), Secret::new(w.api_token().to_string()));
    wait_for(Duration::from_secs(5), "the aborted command to die", || {
        pids_with_env("RK_MARKER", &marker).is_empty().then_some(())
    })
    .await?;
    w.check_log()
}

#[tokio::test]
async fn stdin_is_streamed_to_the_command() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-stdin").await?;
    let out = w
        .exec(&c, serde_json::json!({ "argv": ["sh", "-c", "tr a-z A-Z; echo done"], "stdin": "hello stdin\n" }))
        .await?;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "HELLO STDIN\ndone\n");
    assert_eq!(out.code, Some(0));
    w.check_log()
}

#[tokio::test]
async fn files_round_trip_binary_content_and_the_exec_bit() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-files").await?;
    let mut content: Vec<u8> = (0..=255u8).cycle().take(3 << 20).collect();
    content.extend_from_slice(&rand::random::<[u8; 32]>());
    let written = w
        .put_file(&c, "bin/tool.bin", content.clone(), true)
        .await?;
    assert_eq!(written["written"], content.len());
    w.put_file(&c, "bin/data.txt", b"plain".to_vec(), false)
        .await?;
    assert_eq!(
        w.get_file(&c, "bin/tool.bin").await?.as_ref(),
        content.as_slice()
    );
    let ls = w
        .client
        .json(
            Method::GET,
            &format!("/v1/computers/{c}/files?path=bin"),
            None,
        )
        .await?;
    let entries = ls["entries"].as_array().cloned().unwrap_or_default();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0]["path"], "bin/data.txt");
    assert_eq!(entries[0]["executable"], false);
    assert_eq!(entries[1]["path"], "bin/tool.bin");
    assert_eq!(entries[1]["executable"], true);
    assert_eq!(entries[1]["size"], content.len());
    let home = w.home_of(&c);
    let mode = |p: &str| std::fs::metadata(home.join(p)).map(|m| m.permissions().mode() & 0o777);
    assert_eq!(mode("bin/tool.bin")?, 0o700);
    assert_eq!(mode("bin/data.txt")?, 0o600);
    // The executable really runs.
    w.put_file(
        &c,
        "hello.sh",
        b"#!/bin/sh\necho hi from script\n".to_vec(),
        true,
    )
    .await?;
    let out = w
        .exec(&c, serde_json::json!({ "argv": ["./hello.sh"] }))
        .await?;
    assert_eq!(out.stdout, b"hi from script\n");
    // A read cap is enforced with the contract's message.
    let err = w
        .client
        .send(
            Method::GET,
            &format!("/v1/computers/{c}/files/content?path=bin/tool.bin&max_bytes=10"),
            None,
            None,
            full_body(Vec::new()),
        )
        .await
        .expect_err("over the cap");
    assert!(
        err.to_string().contains("computer file exceeds 10 bytes"),
        "{err}"
    );
    w.check_log()
}

#[tokio::test]
async fn path_escapes_are_refused() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-escape").await?;
    let out = w
        .exec(
            &c,
            serde_json::json!({ "argv": ["sh", "-c", "ln -s / root && ln -s /etc/passwd pw"] }),
        )
        .await?;
    assert_eq!(out.code, Some(0));
    for path in ["../x", "a/../../x", "/etc/passwd", "root/etc/passwd", "pw"] {
        let err = w.get_file(&c, path).await.expect_err(path);
        let (status, code) = status_of(&err).expect("api error");
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {err}");
        assert_eq!(code, "path_rejected", "{path}: {err}");
    }
    let err = w
        .put_file(&c, "pw", b"owned".to_vec(), false)
        .await
        .expect_err("write through symlink");
    assert_eq!(
        status_of(&err).map(|s| s.1),
        Some("path_rejected".into()),
        "{err}"
    );
    let err = w
        .put_file(&c, "root/tmp/owned", b"owned".to_vec(), false)
        .await
        .expect_err("dir symlink");
    assert_eq!(
        status_of(&err).map(|s| s.1),
        Some("path_rejected".into()),
        "{err}"
    );
    assert!(!std::path::Path::new("/tmp/owned").exists());
    // A cwd outside the home fails with exit 1 and names it.
    let out = w
        .exec(&c, serde_json::json!({ "argv": ["pwd"], "cwd": "../.." }))
        .await?;
    assert_eq!(out.code, Some(1));
    assert!(out.message.unwrap_or_default().contains("../.."));
    w.check_log()
}

#[tokio::test]
async fn every_protected_route_needs_the_token() -> Result<()> {
    let mut w = World::start().await?;
    let health = Client::new(w.http.clone(), Secret::new("nope"))
        .json(Method::GET, "/v1/health", None)
        .await?;
    assert_eq!(health["ok"], true);
    for token in ["", "wrong-token"] {
        let bad = Client::new(w.http.clone(), Secret::new(token));
        for (m, p) in [
            (Method::GET, "/v1/computers"),
            (Method::POST, "/v1/computers"),
            (Method::GET, "/v1/computers/c-1"),
            (Method::POST, "/v1/computers/c-1/exec"),
            (Method::GET, "/v1/computers/c-1/files?path="),
        ] {
            let err = bad
                .json(m.clone(), p, Some(&serde_json::json!({})))
                .await
                .expect_err(p);
            assert_eq!(
                status_of(&err).map(|s| s.0),
                Some(StatusCode::UNAUTHORIZED),
                "{m} {p}"
            );
        }
    }
    // Oversized JSON bodies are refused with 413.
    let big = serde_json::json!({ "workspace": "x".repeat(2 << 20) });
    let err = w
        .client
        .json(Method::POST, "/v1/computers", Some(&big))
        .await
        .expect_err("413");
    assert_eq!(
        status_of(&err).map(|s| s.0),
        Some(StatusCode::PAYLOAD_TOO_LARGE)
    );
    w.check_log()
}

#[tokio::test]
async fn stale_leases_are_refused_and_the_command_does_not_run() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-lease").await?;
    let path = |action: &str| format!("/v1/computers/{c}/leases/bot-1/{action}");
    let a = w
        .client
        .json(
            Method::POST,
            &path("acquire"),
            Some(&serde_json::json!({ "owner": "run-a" })),
        )
        .await?;
    assert_eq!(a["lease"], "run-a:1");
    let run = |lease: &str, file: &str| serde_json::json!({ "argv": ["touch", file], "bot": "bot-1", "lease": lease });
    assert_eq!(w.exec(&c, run("run-a:1", "ran-a")).await?.code, Some(0));
    // run-b cannot take a live lease; after release it gets fence 2.
    let held = w
        .client
        .json(
            Method::POST,
            &path("acquire"),
            Some(&serde_json::json!({ "owner": "run-b" })),
        )
        .await;
    assert_eq!(
        status_of(&held.expect_err("held")).map(|s| s.1),
        Some("lease_held".into())
    );
    w.client
        .json(
            Method::POST,
            &path("release"),
            Some(&serde_json::json!({ "lease": "run-a:1" })),
        )
        .await?;
    let b = w
        .client
        .json(
            Method::POST,
            &path("acquire"),
            Some(&serde_json::json!({ "owner": "run-b" })),
        )
        .await?;
    assert_eq!(b["lease"], "run-b:2");
    let err = w
        .exec(&c, run("run-a:1", "stale-ran"))
        .await
        .expect_err("stale");
    assert_eq!(
        status_of(&err).map(|s| s.1),
        Some("stale_lease".into()),
        "{err}"
    );
    assert!(
        !w.home_of(&c).join("stale-ran").exists()
            && !w.home_of(&c).join("bots/bot-1/stale-ran").exists(),
        "a stale command ran"
    );
    assert_eq!(w.exec(&c, run("run-b:2", "ran-b")).await?.code, Some(0));
    // A Team bot's command starts in its own directory (docs/api.md#exec).
    assert!(w.home_of(&c).join("bots/bot-1/ran-b").exists());
    w.check_log()
}

#[tokio::test]
async fn a_restarted_control_plane_gets_its_computers_back() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-restart").await?;
    w.kill_server();
    w.spawn_server().await?;
    // The old guest dials back to the new server (same certificate, same token).
    let out = w
        .exec(&c, serde_json::json!({ "argv": ["echo", "still here"] }))
        .await?;
    assert_eq!(out.stdout, b"still here\n");
    // A guest that died while the server was down is started again on the next start.
    let home = w.home_of(&c).display().to_string();
    w.kill_server();
    for pid in pids_with_env("RAKAZO_HOME", &home) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    wait_for(Duration::from_secs(5), "the guest to die", || {
        pids_with_env("RAKAZO_HOME", &home).is_empty().then_some(())
    })
    .await?;
    w.spawn_server().await?;
    let out = w
        .exec(&c, serde_json::json!({ "argv": ["echo", "replaced"] }))
        .await?;
    assert_eq!(out.stdout, b"replaced\n");
    w.check_log()
}

#[tokio::test]
async fn stop_start_and_idempotent_destroy() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-life").await?;
    w.put_file(&c, "keep.txt", b"kept".to_vec(), false).await?;
    let stopped = w
        .client
        .json(Method::POST, &format!("/v1/computers/{c}/stop"), None)
        .await?;
    assert_eq!(stopped["state"], "stopped");
    let err = w
        .exec(&c, serde_json::json!({ "argv": ["true"] }))
        .await
        .expect_err("stopped");
    assert_eq!(
        status_of(&err).map(|s| s.1),
        Some("computer_not_running".into())
    );
    let started = w
        .client
        .json(Method::POST, &format!("/v1/computers/{c}/start"), None)
        .await?;
    assert_eq!(started["state"], "running");
    assert_eq!(w.get_file(&c, "keep.txt").await?.as_ref(), b"kept");
    w.client
        .json(Method::DELETE, &format!("/v1/computers/{c}"), None)
        .await?;
    w.client
        .json(Method::DELETE, &format!("/v1/computers/{c}"), None)
        .await?;
    let err = w
        .client
        .json(Method::GET, &format!("/v1/computers/{c}"), None)
        .await
        .expect_err("gone");
    assert_eq!(status_of(&err).map(|s| s.0), Some(StatusCode::NOT_FOUND));
    assert!(pids_with_cmdline(&c).is_empty() || pids_with_env("RAKAZO_COMPUTER_ID", &c).is_empty());
    w.check_log()
}

#[tokio::test]
async fn the_control_plane_runs_on_postgres() -> Result<()> {
    let schema = tests::replicas::fresh_pg().await?;
    let url = schema.url().to_owned();
    let mut w = World::start_with(WorldOptions {
        database_url: Some(url),
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("ws-pg").await?;
    let out = w
        .exec(&c, serde_json::json!({ "argv": ["echo", "on postgres"] }))
        .await?;
    assert_eq!(out.stdout, b"on postgres\n");
    let l = w
        .client
        .json(
            Method::POST,
            &format!("/v1/computers/{c}/leases/b/acquire"),
            Some(&serde_json::json!({ "owner": "r" })),
        )
        .await?;
    assert_eq!(l["lease"], "r:1");
    w.check_log()?;
    // The server goes before its schema.
    drop(w);
    drop(schema);
    Ok(())
}
