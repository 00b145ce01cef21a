//! MCP (issue 16): the official MCP Python client (PyPI `mcp`, in a venv outside the checkout,
//! `scripts/setup-debian.sh`) drives a local computer's real desktop and browser through
//! `/v1/mcp/{computer}/{bot}` with a session token minted by the real `rakazo mcp token`; the
//! session holds the bot's lease and gives it back when it ends (deleted, or idle). A session
//! token opens its own computer and bot only.

use crate::cli::{rakazo_json, rakazo_ok};
use anyhow::{anyhow, bail, Context, Result};
use control_plane::client::{Client, ClientError};
use gateway_proto::Secret;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tests::fixture::Fixture;
use tests::World;
use tokio::io::AsyncWriteExt;

const DOWNLOAD_PAGE: &str = r#"<!doctype html><html><head><meta charset="utf-8"><title>Reports</title></head>
<body><h1>Quarterly report</h1><p>Revenue went up.</p>
<a id="dl" href="/page/report.csv" download="report.csv">Download CSV</a>
</body></html>"#;

const CSV: &str = "quarter,revenue\nQ1,10\nQ2,12\n";

const TOOLS: [&str; 16] = [
    "browser_act",
    "browser_navigate",
    "browser_snapshot",
    "computer_act",
    "computer_observe",
    "home_diff",
    "home_revisions",
    "list_files",
    "process_kill",
    "process_list",
    "process_logs",
    "process_start",
    "read_file",
    "request_takeover",
    "shell",
    "write_file",
];

/// The venv's Python holding the `mcp` package (`RAKAZO_MCP_PYTHON`, else where
/// `scripts/setup-debian.sh` puts it).
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("RAKAZO_MCP_PYTHON") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache/rakazo/mcp-venv/bin/python")
}

/// Runs `tests/scripts/mcp_client.py` with `plan` on stdin (it holds tokens: never argv);
/// returns its JSON report, with what the client logged on stderr as `stderr`.
async fn client(plan: serde_json::Value) -> Result<serde_json::Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/mcp_client.py");
    let mut child = tokio::process::Command::new(python())
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("run the MCP client's venv Python (scripts/setup-debian.sh makes it)")?;
    let mut stdin = child.stdin.take().ok_or_else(|| anyhow!("no stdin"))?;
    stdin.write_all(plan.to_string().as_bytes()).await?;
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(360), child.wait_with_output())
        .await
        .context("the MCP client did not finish within 360 s")??;
    if !out.status.success() {
        bail!(
            "the MCP client failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut report: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "the MCP client printed no JSON: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })?;
    report["stderr"] = String::from_utf8_lossy(&out.stderr).into();
    Ok(report)
}

/// The bot's live lease, or `None` (404).
async fn lease(w: &World, c: &str, bot: &str) -> Result<Option<serde_json::Value>> {
    match w
        .client
        .json(
            hyper::Method::GET,
            &format!("/v1/computers/{c}/leases/{bot}"),
            None,
        )
        .await
    {
        Ok(v) => Ok(Some(v)),
        Err(ClientError::Api { status, .. }) if status == hyper::StatusCode::NOT_FOUND => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Waits (at most `within`) until the bot holds no live lease.
async fn lease_released(w: &World, c: &str, bot: &str, within: Duration) -> Result<()> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match lease(w, c, bot).await? {
            None => return Ok(()),
            Some(l) if tokio::time::Instant::now() >= deadline => {
                bail!("the lease is still held after {within:?}: {l}")
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Waits for the server's line saying a session's lease was released with `outcome` (the
/// release's checkpoint comes before it).
async fn released_with(w: &World, outcome: &str) -> Result<()> {
    tests::wait_for(Duration::from_secs(20), "the session's release", || {
        w.log()
            .lines()
            .any(|l| {
                l.contains("mcp session ended; its lease was released")
                    && l.contains(&format!("outcome={outcome}"))
            })
            .then_some(())
    })
    .await
}

fn text(v: &serde_json::Value) -> String {
    v["text"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_mcp_client_drives_a_computer_under_the_sessions_lease() -> Result<()> {
    let fx = Fixture::start().await?;
    let page = fx.page("reports", DOWNLOAD_PAGE);
    fx.page("report.csv", CSV);
    let mut w = World::start().await?;
    let c = w.create_computer("ws-mcp").await?;
    // Two revisions of the home for the home tools: the second adds one file.
    w.home_ok(&c, "checkpoint").await?;
    w.sh(&c, "echo kept > saved.txt").await?;
    w.home_ok(&c, "checkpoint").await?;
    let minted = rakazo_json(&w, &["mcp", "token", &c, "bot-m"]).await?;
    let token = minted["token"]
        .as_str()
        .ok_or_else(|| anyhow!("no token in {minted}"))?
        .to_string();
    w.add_secret(&token);
    assert_eq!(minted["path"], format!("/v1/mcp/{c}/bot-m"));
    assert!(lease(&w, &c, "bot-m").await?.is_none(), "no lease before");

    let report = client(serde_json::json!({
        "endpoint": format!("{}{}", w.http, minted["path"].as_str().unwrap_or_default()),
        "other_endpoint": format!("{}/v1/mcp/{c}/bot-other", w.http),
        "token": token,
        "page": page,
        "csv": "report.csv",
        "api": w.http,
        "api_token": w.api_token(),
        "computer": c,
        "bot": "bot-m",
    }))
    .await?;

    // The handshake era (sessions), the ten tools, each described.
    assert_eq!(report["protocol"], "2025-11-25", "{report}");
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str())
        .collect();
    assert_eq!(tools, TOOLS);
    for t in TOOLS {
        let d = report["descriptions"][t].as_str().unwrap_or_default();
        assert!((20..=320).contains(&d.len()), "{t}: {d:?}");
    }
    // The session held the bot's lease while it lived.
    let during = &report["lease_during"];
    assert!(
        during["owner"]
            .as_str()
            .is_some_and(|o| o.starts_with("mcp-")),
        "{during}"
    );

    // shell: output, the Team bot's own directory, and the contract's timeout.
    let shell = text(&report["shell"]);
    assert_eq!(report["shell"]["error"], false, "{shell}");
    assert!(shell.contains("exit code: 0"), "{shell}");
    assert!(shell.contains("hello from mcp"), "{shell}");
    assert!(shell.contains("/bots/bot-m"), "{shell}");
    // The process tools: started for the session's bot, listed, read, killed; an unknown id
    // is the API's 404.
    for tool in [
        "process_start",
        "process_list",
        "process_logs",
        "process_kill",
    ] {
        assert_eq!(
            report[tool]["error"],
            false,
            "{tool}: {}",
            text(&report[tool])
        );
    }
    let started: serde_json::Value = serde_json::from_str(&text(&report["process_start"]))?;
    assert_eq!(started["bot"], "bot-m", "{started}");
    assert!(
        text(&report["process_list"]).contains("detached from mcp"),
        "{report}"
    );
    assert!(
        text(&report["process_logs"]).contains("detached from mcp\\n"),
        "{report}"
    );
    assert_eq!(report["process_unknown"]["error"], true, "{report}");
    assert!(
        text(&report["process_unknown"]).starts_with("not_found: no process 9999"),
        "{report}"
    );
    // The home tools: the revisions, and what changed between them.
    let revs: serde_json::Value = serde_json::from_str(&text(&report["home_revisions"]))?;
    assert_eq!(
        revs["revisions"].as_array().map(Vec::len),
        Some(2),
        "{revs}"
    );
    let diff: serde_json::Value = serde_json::from_str(&text(&report["home_diff"]))?;
    assert_eq!(
        diff["changes"],
        serde_json::json!([{"path": "saved.txt", "dir": false, "change": "added"}]),
        "{diff}"
    );
    assert!(
        text(&report["home_diff_unknown"]).starts_with("not_found:"),
        "{report}"
    );
    let timed_out = text(&report["shell_timeout"]);
    assert!(timed_out.contains("exit code: 124"), "{timed_out}");
    assert!(
        timed_out.contains("command timed out after 300 ms"),
        "{timed_out}"
    );

    // The page tools: navigate, snapshot, click by ref; a stale ref in the contract's words.
    assert_eq!(report["navigate"]["error"], false, "{report}");
    assert_eq!(report["snapshot"]["title"], "Reports");
    assert!(report["snapshot"]["tree"]
        .as_str()
        .unwrap_or_default()
        .contains("Revenue went up."));
    assert_eq!(report["click"]["error"], false, "{}", report["click"]);
    assert_eq!(report["stale"]["ok"], false);
    assert_eq!(
        report["stale"]["error"],
        "Stale element ref. Take a fresh snapshot."
    );
    assert_eq!(report["stale"]["fallback"], "computer_act");

    // computer_observe: image content (a PNG), then an identical frame without the image.
    let obs = report["observations"]
        .as_array()
        .ok_or_else(|| anyhow!("no observations"))?;
    let first = &obs[0];
    assert_eq!(
        first["kinds"],
        serde_json::json!(["text", "image"]),
        "{first}"
    );
    assert_eq!(first["mime"], "image/png");
    assert_eq!(
        first["png_magic"], "iVBORw0K",
        "base64 of the PNG signature"
    );
    assert_eq!(first["width"], 1280);
    let last = obs.last().ok_or_else(|| anyhow!("no observation"))?;
    assert!(obs.len() >= 2, "{obs:?}");
    assert_eq!(last["unchanged"], true, "{obs:?}");
    assert_eq!(last["kinds"], serde_json::json!(["text"]), "no image bytes");
    assert_eq!(last["frame_id"], obs[obs.len() - 2]["frame_id"]);
    assert!(last["note"]
        .as_str()
        .unwrap_or_default()
        .contains("the previous screenshot remains valid"));

    // computer_observe scaled and marked: a 640-wide image with the page's refs; computer_act
    // in that frame's coordinates, observed at 320 wide.
    let marked = &report["marked"];
    assert_eq!(
        marked["kinds"],
        serde_json::json!(["text", "image"]),
        "{marked}"
    );
    assert_eq!(
        marked["size"],
        serde_json::json!([640, 400, 1280]),
        "{marked}"
    );
    assert!(
        marked["marks"].as_array().is_some_and(|m| !m.is_empty()),
        "{marked}"
    );
    let moved = &report["moved"];
    assert_eq!(moved["error"], false, "{moved}");
    assert_eq!(
        moved["cursor"],
        serde_json::json!({ "x": 11, "y": 11 }),
        "{moved}"
    );
    assert_eq!(moved["width"], 320, "{moved}");

    // The page's download, read back through read_file.
    assert_eq!(report["read"]["error"], false, "{}", report["read"]);
    assert_eq!(text(&report["read"]), CSV);
    // A refusal is the API's own text: the same read through HTTP says the same.
    let too_big = text(&report["read_too_big"]);
    assert_eq!(report["read_too_big"]["error"], true);
    let http = w
        .client
        .json(
            hyper::Method::GET,
            &format!("/v1/computers/{c}/files/content?path=Downloads/report.csv&max_bytes=3"),
            None,
        )
        .await;
    match http {
        Err(ClientError::Api { code, message, .. }) => {
            assert_eq!(too_big, format!("{code}: {message}"));
            assert!(message.contains("exceeds 3 bytes"), "{message}");
        }
        other => bail!("the HTTP read was not refused: {other:?}"),
    }
    assert_eq!(report["write"]["error"], false, "{}", report["write"]);
    let written = std::fs::read_to_string(w.home_of(&c).join("notes/mcp.txt"))?;
    assert_eq!(written, "written over mcp\n");
    // The live session's id at another bot's endpoint (with the API token) is an unknown
    // session there: nothing ran, nothing was leased for that bot.
    assert_eq!(report["session_ids"], 1, "{report}");
    assert_eq!(report["hijack"]["status"], 404, "{}", report["hijack"]);
    assert!(lease(&w, &c, "bot-other").await?.is_none());

    // The session ended (the client's DELETE, which it saw succeed): the lease is released,
    // with outcome success.
    let stderr = report["stderr"].as_str().unwrap_or_default();
    assert!(!stderr.contains("termination failed"), "{stderr}");
    lease_released(&w, &c, "bot-m", Duration::from_secs(10)).await?;
    released_with(&w, "Success").await?;
    // The bot's actions are in the activity feed, as through the HTTP API.
    let feed = w
        .client
        .json(
            hyper::Method::GET,
            &format!("/v1/computers/{c}/activity?limit=100"),
            None,
        )
        .await?
        .to_string();
    assert!(feed.contains("hello from mcp"), "{feed}");
    assert!(feed.contains("notes/mcp.txt"), "{feed}");
    assert!(!feed.contains("hijacked"), "{feed}");
    // Each tool call is one operation in the metrics under its own name; the transport's
    // requests are none.
    let metrics = scrape_text(&w).await?;
    for tool in [
        "shell",
        "browser_navigate",
        "write_file",
        "read_file",
        "computer_observe",
    ] {
        let ok = format!("rakazo_operations_total{{op=\"mcp.{tool}\",outcome=\"ok\"}}");
        assert!(metrics.contains(&ok), "{ok} in {metrics}");
    }
    assert!(!metrics.contains("op=\"mcp\""), "{metrics}");
    w.check_log()
}

/// `GET /metrics` with the API token: the text.
async fn scrape_text(w: &World) -> Result<String> {
    use http_body_util::BodyExt;
    let resp = w
        .client
        .send(
            hyper::Method::GET,
            "/metrics",
            None,
            None,
            control_plane::client::full_body(bytes::Bytes::new()),
        )
        .await?;
    let body = resp.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8(body.to_vec())?)
}

/// An MCP `initialize` request at `path` with `token`: the HTTP error, if refused.
async fn initialize(w: &World, path: &str, token: &str) -> Option<(hyper::StatusCode, String)> {
    let client = Client::new(w.http.clone(), Secret::new(token.to_string()));
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "attack", "version": "0"}}
    });
    match client.json(hyper::Method::POST, path, Some(&body)).await {
        Ok(_) => None,
        Err(ClientError::Api { status, code, .. }) => Some((status, code)),
        Err(e) => Some((hyper::StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
    }
}

/// The README's MCP command (`## Connecting an MCP client`), as written: its arguments after
/// `rakazo`, with `c-...` standing for the computer.
fn readme_mcp_command() -> Result<Vec<String>> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))?;
    let line = readme
        .split_once("## Connecting an MCP client")
        .and_then(|(_, rest)| rest.split_once("```sh\n"))
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(block, _)| block.trim())
        .context("README.md has no MCP block")?;
    let code = line.split_once(" #").map_or(line, |(c, _)| c).trim();
    let args = code
        .strip_prefix("rakazo ")
        .context("the README's MCP line is no rakazo command")?;
    Ok(args.split_whitespace().map(String::from).collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_token_opens_only_its_own_computer_and_bot() -> Result<()> {
    let mut w = World::start().await?;
    let a = w.create_computer("ws-mcp-a").await?;
    let b = w.create_computer("ws-mcp-b").await?;
    // The README's line, through the real binary: the endpoint URL, then the token.
    let args: Vec<String> = readme_mcp_command()?
        .into_iter()
        .map(|arg| if arg == "c-..." { a.clone() } else { arg })
        .collect();
    assert_eq!(args[..4], ["mcp", "token", a.as_str(), "bot-1"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let stdout = String::from_utf8(rakazo_ok(&w, &args).await?)?;
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert_eq!(lines[0], format!("{}/v1/mcp/{a}/bot-1", w.http));
    let token = lines[1].to_string();
    w.add_secret(&token);
    let forbidden = Some((hyper::StatusCode::FORBIDDEN, "forbidden".to_string()));
    assert_eq!(
        initialize(&w, &format!("/v1/mcp/{b}/bot-1"), &token).await,
        forbidden,
        "computer B"
    );
    assert_eq!(
        initialize(&w, &format!("/v1/mcp/{a}/bot-2"), &token).await,
        forbidden,
        "bot 2"
    );
    // Nothing was leased on B or for y.
    assert!(lease(&w, &b, "bot-1").await?.is_none());
    assert!(lease(&w, &a, "bot-2").await?.is_none());
    // The session token is no API token, and no other sealed token is a session token.
    let as_api = Client::new(w.http.clone(), Secret::new(token.clone()));
    match as_api.json(hyper::Method::GET, "/v1/computers", None).await {
        Err(ClientError::Api { status, .. }) => assert_eq!(status, hyper::StatusCode::UNAUTHORIZED),
        other => bail!("a session token listed computers: {other:?}"),
    }
    let view = w
        .post(
            &format!("/v1/computers/{a}/screens/bot-1/url"),
            serde_json::json!({}),
        )
        .await?;
    let cap = view["path"]
        .as_str()
        .and_then(|p| p.strip_prefix("/cap/"))
        .unwrap_or_default()
        .to_string();
    w.add_secret(&cap);
    let unauthorized = Some((hyper::StatusCode::UNAUTHORIZED, "unauthorized".to_string()));
    assert_eq!(
        initialize(&w, &format!("/v1/mcp/{a}/bot-1"), &cap).await,
        unauthorized
    );
    let mut tampered = token.clone().into_bytes();
    let last = tampered.len() - 1;
    tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
    assert_eq!(
        initialize(
            &w,
            &format!("/v1/mcp/{a}/bot-1"),
            &String::from_utf8(tampered)?
        )
        .await,
        unauthorized
    );
    // At its own endpoint the token passes authentication: the answer is rmcp's (this bare
    // request does not accept an event stream), not a refusal of the token.
    let own = initialize(&w, &format!("/v1/mcp/{a}/bot-1"), &token).await;
    assert!(
        !matches!(own, Some((s, _)) if s == hyper::StatusCode::UNAUTHORIZED || s == hyper::StatusCode::FORBIDDEN),
        "{own:?}"
    );
    w.check_log()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_session_gives_back_the_lease_it_was_given() -> Result<()> {
    let mut w = World::start_with(tests::WorldOptions {
        env: vec![("RAKAZO_MCP_SESSION_IDLE_SECS".into(), "2".into())],
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("ws-mcp-idle").await?;
    let given = w.lease(&c, "bot-i", "run-i").await?;
    let report = client(serde_json::json!({
        "mode": "brief",
        "endpoint": format!("{}/v1/mcp/{c}/bot-i", w.http),
        "token": w.api_token(),
        "lease": given,
        "api": w.http,
        "api_token": w.api_token(),
        "computer": c,
        "bot": "bot-i",
    }))
    .await?;
    assert!(text(&report["shell"]).contains("brief"), "{report}");
    // The session used the lease it was given (the same owner and fence).
    assert_eq!(report["lease_during"]["lease"], given.as_str());
    // The client left without a DELETE: the session idles out and releases the lease.
    lease_released(&w, &c, "bot-i", Duration::from_secs(20)).await?;
    released_with(&w, "Cancelled").await?;
    w.check_log()
}
