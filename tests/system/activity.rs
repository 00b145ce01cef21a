//! The activity feed (docs/api.md#activity) through the real
//! control plane, guest and `rakazo` CLI:
//!
//! - a follower (`rakazo activity <id> --follow`, a real process) that connected before a bot's
//!   commands ran shows them live, with exit codes and output tails, and every planted secret
//!   (command line, environment, output, URL credentials, a file name) is redacted in the CLI's
//!   output, the API's history, the control plane's log and the database file;
//! - lifecycle events carry their cause and reason (create, a user's checkpoint, stop and start,
//!   an idle suspension), and following the feed does not keep the computer awake;
//! - on PostgreSQL with two replicas, a follower of one sees what the other recorded, and
//!   `--activity-retention` bounds each computer's feed; the history pages both ways.

use anyhow::{anyhow, bail, Context, Result};
use control_plane::client::{full_body, Client};
use http_body_util::BodyExt;
use hyper::Method;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tests::replicas::Replicas;
use tests::{World, WorldOptions};
use tokio::io::AsyncReadExt;

/// Upper bound on anything the feed or the idle job is expected to do.
const WAIT: Duration = Duration::from_secs(90);

/// What a background reader has collected so far.
type Collected = Arc<Mutex<String>>;

fn text(c: &Collected) -> String {
    c.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Waits until `c` holds `needle`.
async fn wait_text(c: &Collected, needle: &str, what: &str) -> Result<String> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let t = text(c);
        if t.contains(needle) {
            return Ok(t);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("timed out waiting for {what} ({needle:?}); got:\n{t}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Copies everything `r` yields into a [`Collected`].
fn collect(mut r: impl tokio::io::AsyncRead + Unpin + Send + 'static) -> Collected {
    let out: Collected = Arc::default();
    let into = out.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 8192];
        while let Ok(n) = r.read(&mut buf).await {
            if n == 0 {
                break;
            }
            into.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    out
}

/// `rakazo activity <args>` against the server at `url`, stdout and stderr collected.
fn spawn_cli(
    url: &str,
    token: &str,
    args: &[&str],
) -> Result<(tokio::process::Child, Collected, Collected)> {
    let mut child = tokio::process::Command::new(tests::bin("rakazo"))
        .arg("activity")
        .args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("RAKAZO_URL", url)
        .env("RAKAZO_TOKEN", token)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("start rakazo activity")?;
    let stdout = collect(child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?);
    let stderr = collect(child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?);
    Ok((child, stdout, stderr))
}

/// `rakazo activity <args>` run to its end; its stdout.
async fn cli_once(url: &str, token: &str, args: &[&str]) -> Result<String> {
    let out = tokio::time::timeout(
        WAIT,
        tokio::process::Command::new(tests::bin("rakazo"))
            .arg("activity")
            .args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("RAKAZO_URL", url)
            .env("RAKAZO_TOKEN", token)
            .output(),
    )
    .await??;
    if !out.status.success() {
        bail!(
            "rakazo activity {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// Follows `…/activity/stream` through the API; the raw server-sent events as they come.
async fn follow_api(client: &Client, c: &str) -> Result<Collected> {
    let resp = client
        .send(
            Method::GET,
            &format!("/v1/computers/{c}/activity/stream"),
            None,
            None,
            full_body(bytes::Bytes::new()),
        )
        .await?;
    assert_eq!(
        resp.headers()["content-type"],
        "text/event-stream",
        "a server-sent event stream"
    );
    let out: Collected = Arc::default();
    let into = out.clone();
    let mut body = resp.into_body();
    tokio::spawn(async move {
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                into.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push_str(&String::from_utf8_lossy(&data));
            }
        }
    });
    // The stream is open once its first comment arrived.
    wait_text(&out, ": following", "the stream to open").await?;
    Ok(out)
}

async fn history(w: &World, c: &str, query: &str) -> Result<serde_json::Value> {
    Ok(w.client
        .json(
            Method::GET,
            &format!("/v1/computers/{c}/activity{query}"),
            None,
        )
        .await?)
}

/// Random key characters of length `n`.
fn random_key(n: usize) -> String {
    let mut s = String::new();
    while s.len() < n {
        s.push_str(&hex::encode(rand::random::<[u8; 16]>()));
    }
    s.truncate(n);
    s
}

#[tokio::test]
async fn a_follower_sees_commands_live_with_every_secret_redacted() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-activity").await?;

    // The follower connects before anything runs: it prints the history (created, started),
    // then says on stderr that it follows.
    let (mut cli, cli_out, cli_err) = spawn_cli(&w.http, w.api_token(), &[&c, "--follow"])?;
    wait_text(&cli_err, "following the activity", "the CLI to follow").await?;
    let history_part = text(&cli_out);
    assert!(
        history_part.contains("created (user)") && history_part.contains("started (user)"),
        "{history_part}"
    );

    // One secret of each shape, random so nothing else can contain it by chance.
    let bearer = format!("eyJ{}", random_key(29));
    let openai = format!("sk-proj-{}", random_key(32));
    let github = format!("ghp_{}", random_key(36));
    let aws = format!("AKIA{}", random_key(16).to_uppercase());
    let slack = format!("xoxb-{}-{}", random_key(10), random_key(24));
    let password = format!("pw{}", random_key(20));
    let token = format!("tk{}", random_key(20));
    let mysql = format!("my{}", random_key(20));
    let named = format!("nv{}", random_key(24));
    let url_pass = format!("up{}", random_key(20));
    let env_value = format!("ev{}", random_key(24));
    let file_key = format!("ghp_{}", random_key(30));
    let secrets = [
        &bearer, &openai, &github, &aws, &slack, &password, &token, &mysql, &named, &url_pass,
        &env_value, &file_key,
    ];
    for s in secrets {
        w.add_secret(s);
    }

    // Secrets on the command line, echoed into the output too.
    let script = format!(
        "echo 'Authorization: Bearer {bearer}'; echo key {openai} {github} {aws} {slack}; \
         echo API_SECRET={named}; echo https://deploy:{url_pass}@git.example.com/r.git; \
         echo done-1"
    );
    let out = w
        .exec(&c, serde_json::json!({ "argv": ["sh", "-c", script] }))
        .await?;
    assert_eq!(out.code, Some(0), "{out:?}");
    // Each command shows up live before the next runs.
    wait_text(&cli_out, "| done-1", "the first command in the CLI").await?;
    // Flags with secrets (the command ignores its arguments), then the environment.
    let flags = serde_json::json!({ "argv": [
        "sh", "-c", "echo flags-ok", "tool", format!("--password={password}"), "--token", token,
        format!("-p{mysql}"),
    ] });
    assert_eq!(w.exec(&c, flags).await?.code, Some(0));
    wait_text(&cli_out, "| flags-ok", "the second command in the CLI").await?;
    let env = serde_json::json!({
        "argv": ["sh", "-c", "echo \"deploying with $DEPLOY_CRED\"; echo oops >&2; exit 3"],
        "env": { "DEPLOY_CRED": env_value },
    });
    assert_eq!(w.exec(&c, env).await?.code, Some(3));
    wait_text(&cli_out, "exit 3", "the failed command in the CLI").await?;
    // A file whose name is a key.
    w.put_file(
        &c,
        &format!("notes/{file_key}.txt"),
        b"twelve bytes".to_vec(),
        false,
    )
    .await?;

    // Live: the follower prints them as they end, with exit codes and output tails.
    let live = wait_text(&cli_out, "write_file", "the file write in the CLI").await?;
    kill(&mut cli).await;
    for want in [
        "exit 0",
        "| done-1",
        "| flags-ok",
        "exit 3",
        "| deploying with ***",
        "| oops",
        "--password=***",
        "--token ***",
        "-p***",
        "Bearer ***",
        "https://***@git.example.com/r.git",
        "API_SECRET=***",
        "notes/***.txt: 12 bytes",
    ] {
        assert!(live.contains(want), "the CLI shows {want:?}:\n{live}");
    }

    // The API's history says the same, structured.
    let page = history(&w, &c, "").await?;
    let commands: Vec<&serde_json::Value> = page["events"]
        .as_array()
        .ok_or_else(|| anyhow!("no events: {page}"))?
        .iter()
        .filter(|e| e["type"] == "computer.command")
        .collect();
    let codes: Vec<_> = commands.iter().map(|e| e["exit_code"].as_i64()).collect();
    assert_eq!(codes, [Some(0), Some(0), Some(3), None], "{page}");
    assert!(commands[0]["output_tail"]
        .as_str()
        .is_some_and(|t| t.contains("done-1")));
    assert_eq!(commands[3]["action"], "write_file");
    assert_eq!(commands[3]["bytes"], 12);

    // No planted secret anywhere: the CLI, the API, the log, the database file.
    let api_text = page.to_string();
    let mut db = Vec::new();
    for f in ["rakazo.db", "rakazo.db-wal"] {
        if let Ok(bytes) = std::fs::read(w.data_dir.path().join(f)) {
            db.extend(bytes);
        }
    }
    let db = String::from_utf8_lossy(&db).into_owned();
    assert!(db.contains("done-1"), "the feed is in the database file");
    let log = w.log();
    for s in secrets {
        for (place, t) in [
            ("CLI", &live),
            ("API", &api_text),
            ("database", &db),
            ("log", &log),
        ] {
            assert!(
                !t.contains(s.as_str()),
                "a planted secret ({}…) is in the {place}",
                &s[..6]
            );
        }
    }
    w.check_log()
}

async fn kill(child: &mut tokio::process::Child) {
    let _ = child.kill().await;
    let _ = child.wait().await;
}

/// `(event, cause)` of every lifecycle event of a page.
fn lifecycle(page: &serde_json::Value) -> Vec<(String, String)> {
    page["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["type"] == "computer.lifecycle")
        .map(|e| {
            (
                e["event"].as_str().unwrap_or("").to_string(),
                e["cause"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn lifecycle_events_say_why_and_following_does_not_keep_a_computer_awake() -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        idle_timeout_secs: Some(3),
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("ws-lifecycle").await?;
    // A command in flight holds the computer up while the test works on it (a lease would
    // hold up the checkpoint too); it is aborted, by going away, just before the stop.
    let client = w.client.clone();
    let path = format!("/v1/computers/{c}/exec");
    let hold = tokio::spawn(async move {
        tests::exec_via(
            &client,
            &path,
            &serde_json::json!({ "argv": ["sleep", "600"] }),
        )
        .await
    });
    w.put_file(&c, "notes/a.txt", b"saved".to_vec(), false)
        .await?;
    let done = w.home_ok(&c, "checkpoint").await?;
    let revision = done["revision"].as_u64().ok_or_else(|| anyhow!("{done}"))?;
    hold.abort();
    w.post(&format!("/v1/computers/{c}/stop"), serde_json::json!({}))
        .await?;
    w.post(&format!("/v1/computers/{c}/start"), serde_json::json!({}))
        .await?;

    // Follow: the started computer, unused, suspends while followed.
    let followed = follow_api(&w.client, &c).await?;
    let live = wait_text(
        &followed,
        r#""cause":"idle","reason":"idle suspension"#,
        "the idle stop, live",
    )
    .await?;
    assert_eq!(w.show(&c).await?["state"], "stopped");
    assert!(
        live.contains(r#""event":"checkpointed","cause":"idle""#),
        "{live}"
    );

    let page = history(&w, &c, "").await?;
    let got = lifecycle(&page);
    let want = [
        ("created", "user"),
        ("started", "user"),
        ("checkpointed", "user"),
        ("checkpointed", "before_stop"),
        ("stopped", "user"),
        ("started", "user"),
        ("checkpointed", "idle"),
        ("stopped", "idle"),
    ];
    let got_pairs: Vec<(&str, &str)> = got.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(got_pairs, want, "{page}");
    let events = page["events"].as_array().ok_or_else(|| anyhow!("{page}"))?;
    let user_checkpoint = events
        .iter()
        .find(|e| e["event"] == "checkpointed")
        .ok_or_else(|| anyhow!("{page}"))?;
    assert_eq!(user_checkpoint["revision"], revision);
    assert!(user_checkpoint["bytes"].as_u64().is_some_and(|b| b > 0));
    let stopped_idle = events.last().ok_or_else(|| anyhow!("{page}"))?;
    assert!(
        stopped_idle["reason"]
            .as_str()
            .is_some_and(|r| r.contains("unused for 3 s")),
        "{stopped_idle}"
    );
    // The CLI tells the same story, one line each.
    let printed = cli_once(&w.http, w.api_token(), &[&c, "--limit", "50"]).await?;
    assert!(
        printed.contains("stopped (idle): idle suspension"),
        "{printed}"
    );
    assert!(
        printed.contains(&format!("checkpointed (user) revision {revision}")),
        "{printed}"
    );
    w.check_log()
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_share_the_feed_and_retention_bounds_it() -> Result<()> {
    let mut r = Replicas::start(2, |_, o| {
        o.env.push(("RAKAZO_ACTIVITY_RETENTION".into(), "5".into()));
        o.allow_warn.push("slow statement".into());
        o.allow_warn.push("peer connection refused".into());
    })
    .await?;
    let c = r.worlds[0].create_computer("ws-replicas").await?;
    // Followed on replica 0 (API and CLI), run on replica 1.
    let followed = follow_api(&r.worlds[0].client, &c).await?;
    let (mut cli, cli_out, cli_err) = spawn_cli(
        &r.worlds[0].http,
        r.worlds[0].api_token(),
        &[&c, "--follow", "--limit", "0"],
    )?;
    wait_text(&cli_err, "following the activity", "the CLI to follow").await?;
    for n in 1..=6 {
        let out = r.worlds[1]
            .exec(
                &c,
                serde_json::json!({ "argv": ["sh", "-c", format!("echo run-{n}")] }),
            )
            .await?;
        assert_eq!(out.code, Some(0));
        // Seen on replica 0's stream before the next command runs.
        wait_text(
            &followed,
            &format!("run-{n}"),
            "replica 1's command on replica 0's stream",
        )
        .await?;
    }
    let live = wait_text(&cli_out, "| run-6", "replica 1's command in the CLI").await?;
    kill(&mut cli).await;
    for n in 1..=6 {
        assert!(live.contains(&format!("| run-{n}")), "{live}");
    }

    // Retention 5: the newest five events are kept, on either replica.
    let w = &r.worlds[1];
    let page = history(w, &c, "").await?;
    let events = page["events"].as_array().ok_or_else(|| anyhow!("{page}"))?;
    assert_eq!(events.len(), 5, "{page}");
    let last = page["last_seq"].as_u64().ok_or_else(|| anyhow!("{page}"))?;
    let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert_eq!(seqs, ((last - 4)..=last).collect::<Vec<_>>());
    assert!(events[4]["output_tail"]
        .as_str()
        .is_some_and(|t| t.contains("run-6")));
    // Paging back from the newest: two at a time.
    let newest = history(w, &c, "?order=desc&limit=2").await?;
    let seqs: Vec<u64> = newest["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["seq"].as_u64())
        .collect();
    assert_eq!(seqs, [last, last - 1]);
    let older = history(w, &c, &format!("?order=desc&limit=2&before={}", last - 1)).await?;
    let seqs: Vec<u64> = older["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["seq"].as_u64())
        .collect();
    assert_eq!(seqs, [last - 2, last - 3]);
    // A bad query is the user's mistake.
    match w
        .client
        .json(
            Method::GET,
            &format!("/v1/computers/{c}/activity?limit=0"),
            None,
        )
        .await
    {
        Err(control_plane::client::ClientError::Api { status, .. }) => {
            assert_eq!(status, hyper::StatusCode::BAD_REQUEST)
        }
        other => bail!("limit=0 answered {other:?}"),
    }
    for w in &mut r.worlds {
        w.check_log()?;
    }
    Ok(())
}
