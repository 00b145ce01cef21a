//! Preview URLs and services (docs/previews.md, docs/api.md#services) through the real `rakazo`
//! binary: a dev server inside a contained local computer (`tests/scripts/preview_app.py`, run
//! as a service) opens in real Chromium through its link, public and session previews, with its
//! websocket and event stream working (`tests/console/previews.test.mjs`); cookies of two
//! previews stay apart, expired and revoked URLs and a session preview without a session are
//! refused; a preview never reaches the control plane's ports or PostgreSQL on the host; a
//! client's forwarding headers are replaced; a visit to a stopped computer starts it and is
//! served by the service started with it; the server log holds no preview label or token.

use crate::cli::{rakazo_json, rakazo_ok, refused, text};
use anyhow::{anyhow, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tests::{World, WorldOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const APP_PORT: &str = "8000";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// `rakazo preview url <c> <port> <more…>`: the URL (printed alone on stdout).
pub(crate) async fn preview(w: &mut World, c: &str, port: &str, more: &[&str]) -> Result<String> {
    let mut args = vec!["preview", "url", c, port];
    args.extend_from_slice(more);
    let url = text(&rakazo_ok(w, &args).await?).trim().to_string();
    anyhow::ensure!(url.starts_with("http://"), "not a URL: {url}");
    keep_secret(w, &url);
    Ok(url)
}

/// A preview URL's label and token are credentials: the world fails the test if its log holds
/// either.
fn keep_secret(w: &mut World, url: &str) {
    let host = url.split("://").nth(1).unwrap_or(url);
    w.add_secret(host.split(['.', ':', '/']).next().unwrap_or_default());
    if let Some((_, t)) = url.split_once("t=") {
        w.add_secret(t);
    }
}

/// One HTTP/1.1 request to the control plane for `url`'s host (Node and the test's resolver know
/// no `*.localhost`): the status and the body.
pub(crate) async fn get(w: &World, url: &str, extra: &[(&str, &str)]) -> Result<(u16, String)> {
    let rest = url.trim_start_matches("http://");
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let addr = w.http.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let mut head = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).await?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut out))
        .await
        .map_err(|_| anyhow!("no answer from {url}"))??;
    let out = text(&out);
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("no status line: {out}"))?;
    let body = out
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((status, body))
}

/// Puts the test app in the home and runs it as service `web` on `port`, greeting as `name`;
/// waits until it answers through a public preview (returned).
pub(crate) async fn serve_app(w: &mut World, c: &str, port: &str, name: &str) -> Result<String> {
    let app = repo().join("tests/scripts/preview_app.py");
    let app = app.to_str().context("utf-8 path")?;
    rakazo_ok(w, &["files", "put", c, app, "app.py"]).await?;
    let set = rakazo_ok(
        w,
        &[
            "--json", "service", "set", c, "web", "--", "python3", "app.py", port, name,
        ],
    )
    .await?;
    let set: serde_json::Value = serde_json::from_slice(&set)?;
    anyhow::ensure!(
        set["process"]["state"] == "running",
        "the service runs: {set}"
    );
    let public = preview(w, c, port, &["--access", "public"]).await?;
    let url = format!("{public}headers");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !matches!(get(w, &url, &[]).await, Ok((200, _))) {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the app never answered through its preview"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(public)
}

/// Runs `tests/console/previews.test.mjs` with `env`; fails unless every step passed.
pub(crate) async fn browse(env: &[(&str, String)]) -> Result<String> {
    let vars: Vec<(&str, OsString)> = env.iter().map(|(k, v)| (*k, OsString::from(v))).collect();
    crate::console::browser_run("previews.test.mjs", &vars).await
}

/// Where screenshots go: `RAKAZO_PREVIEW_SCREENSHOTS` (relative to the repository) or a
/// temporary directory.
pub(crate) fn shots() -> Result<(PathBuf, Option<tempfile::TempDir>)> {
    crate::console::screenshots_in("RAKAZO_PREVIEW_SCREENSHOTS")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dev_server_inside_opens_in_chromium_through_its_previews_and_wakes_its_computer(
) -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        env: vec![("RAKAZO_LOCAL_CONTAINMENT".into(), "full".into())],
        ..WorldOptions::default()
    })
    .await?;
    let c = crate::cli::create(&w, "ws-preview").await?;
    let public = serve_app(&mut w, &c, APP_PORT, "alpha").await?;
    let link = preview(&mut w, &c, APP_PORT, &[]).await?;
    let session = preview(&mut w, &c, APP_PORT, &["--access", "session"]).await?;
    let expired = preview(
        &mut w,
        &c,
        APP_PORT,
        &["--access", "public", "--expires", "1s"],
    )
    .await?;
    let operator = text(
        &rakazo_ok(
            &w,
            &[
                "token",
                "create",
                "--role",
                "operator",
                "--workspace",
                "ws-preview",
                "--name",
                "previewer",
            ],
        )
        .await?,
    )
    .trim()
    .to_string();
    w.add_secret(&operator);
    let listed = rakazo_json(&w, &["preview", "list", &c]).await?;
    let previews = listed["previews"].as_array().cloned().unwrap_or_default();
    let link_id = previews
        .iter()
        .find(|p| p["access"] == "link")
        .and_then(|p| p["id"].as_str())
        .ok_or_else(|| anyhow!("no link preview listed: {listed}"))?
        .to_string();
    assert!(
        !listed.to_string().contains("preview.localhost"),
        "a listing carries no URL: {listed}"
    );

    // The control plane's own port and the host's PostgreSQL are not the computer's: a preview
    // of them reaches nothing (the guest connects inside the computer's network namespace).
    let api_port = w.http.rsplit(':').next().unwrap_or_default().to_string();
    for port in [api_port.as_str(), "5432"] {
        let attack = preview(&mut w, &c, port, &["--access", "public"]).await?;
        let (status, body) = get(&w, &format!("{attack}v1/health"), &[]).await?;
        assert_eq!(
            status, 502,
            "port {port} of the host through a preview: {body}"
        );
        assert!(body.contains("Nothing listens on port"), "{body}");
    }
    // A client's forwarding headers are replaced; the app never sees the preview's host.
    let (status, body) = get(
        &w,
        &format!("{public}headers"),
        &[
            ("X-Forwarded-For", "6.6.6.6"),
            ("Forwarded", "for=6.6.6.6"),
            ("X-Real-IP", "6.6.6.6"),
        ],
    )
    .await?;
    assert_eq!(status, 200, "{body}");
    let seen: serde_json::Value = serde_json::from_str(&body)?;
    assert_eq!(seen["x-forwarded-for"], "127.0.0.1", "{seen}");
    assert_eq!(seen["forwarded"], "for=127.0.0.1;proto=http", "{seen}");
    assert!(seen.get("x-real-ip").is_none(), "{seen}");
    assert_eq!(seen["host"], format!("localhost:{APP_PORT}"), "{seen}");
    // A path reserved for the proxy is never the app's.
    assert_eq!(
        get(&w, &format!("{public}__rakazo/anything"), &[]).await?.0,
        404
    );
    assert_eq!(
        get(
            &w,
            "http://0123456789abcdef0123456789abcdef.preview.localhost/",
            &[]
        )
        .await?
        .0,
        404,
        "an unknown preview"
    );

    tokio::time::sleep(Duration::from_millis(1200)).await; // `expired` is past its second
    let port = api_port.clone();
    let shots = shots()?;
    let rakazo = tests::bin("rakazo");
    // The CLI reads its server and token from the environment node passes on: never argv.
    let revoke = format!("{} preview revoke {c} {link_id}", rakazo.display());
    browse(&[
        ("RAKAZO_PREVIEW_LINK", link.clone()),
        ("RAKAZO_PREVIEW_PUBLIC", public.clone()),
        ("RAKAZO_PREVIEW_SESSION", session),
        ("RAKAZO_PREVIEW_EXPIRED", expired),
        ("RAKAZO_PREVIEW_CONSOLE", format!("http://localhost:{port}")),
        ("RAKAZO_PREVIEW_OPERATOR", operator),
        ("RAKAZO_PREVIEW_REVOKE", revoke),
        (
            "RAKAZO_PREVIEW_STOP",
            format!("{} computer stop {c}", rakazo.display()),
        ),
        ("RAKAZO_URL", w.http.clone()),
        ("RAKAZO_TOKEN", w.api_token().to_string()),
        ("RAKAZO_PREVIEW_SHOTS", shots.0.display().to_string()),
        ("RAKAZO_PREVIEW_NAME", "alpha".into()),
    ])
    .await?;
    println!("preview screenshots: {}", shots.0.display());
    let after = rakazo_json(&w, &["preview", "list", &c, "--all"]).await?;
    let revoked = after["previews"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["id"] == link_id.as_str()))
        .cloned()
        .unwrap_or_default();
    assert_eq!(revoked["state"], "revoked", "{after}");

    // Stopped (as idle suspension stops it), the computer is woken by a visit, and the request
    // is served by the service that started with it.
    rakazo_ok(&w, &["computer", "stop", &c]).await?;
    let (status, body) = get(&w, &format!("{public}headers"), &[]).await?;
    assert_eq!(status, 200, "the visit to the stopped computer: {body}");
    assert!(body.contains("localhost:8000"), "served by the app: {body}");
    let (status, _) = get(&w, &format!("{public}headers"), &[("Accept", "text/html")]).await?;
    assert_eq!(status, 200, "and again, from a browser");
    let feed = text(&rakazo_ok(&w, &["activity", &c]).await?);
    assert!(
        feed.contains("started (preview_visit)"),
        "the activity feed says a visit started it: {feed}"
    );
    assert!(
        feed.matches("process_start").count() >= 2,
        "the service started again with it: {feed}"
    );
    let services = rakazo_json(&w, &["service", "list", &c]).await?;
    assert_eq!(
        services["services"][0]["process"]["state"], "running",
        "{services}"
    );
    rakazo_ok(&w, &["service", "rm", &c, "web"]).await?;
    w.check_log()?;
    Ok(())
}

/// A computer on this host's network has no loopback of its own: a preview of it would reach
/// the host's services, so none is made.
#[tokio::test(flavor = "multi_thread")]
async fn no_preview_for_a_computer_on_the_hosts_network() -> Result<()> {
    let w = World::start().await?;
    let c = crate::cli::create(&w, "ws-preview-host").await?;
    let said = refused(&w, &["preview", "url", &c, "5432"], "preview_unavailable").await?;
    assert!(said.contains("this host's"), "{said}");
    refused(&w, &["preview", "url", &c, "0"], "port").await?;
    refused(
        &w,
        &["service", "set", &c, "Bad Name", "--", "true"],
        "service name",
    )
    .await?;
    Ok(())
}

/// README.md's "Services and preview URLs" block as written: the page it puts in the home is
/// served through each preview URL it makes, the listing carries no URL, a revoked one is
/// refused.
#[tokio::test(flavor = "multi_thread")]
async fn the_readme_services_and_previews_block_runs_as_written() -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        env: vec![("RAKAZO_LOCAL_CONTAINMENT".into(), "full".into())],
        ..WorldOptions::default()
    })
    .await?;
    let c = crate::cli::create(&w, "ws-readme-previews").await?;
    let dir = tempfile::tempdir()?;
    let page = dir.path().join("index.html");
    std::fs::write(&page, "<h1>served from the README</h1>\n")?;
    let steps = tests::readme::commands("## Services and preview URLs")?;
    assert_eq!(steps.len(), 9, "the README's block changed");
    let mut urls = Vec::new();
    let mut first_id = String::new();
    for step in &steps {
        let args: Vec<String> = step
            .args
            .iter()
            .map(|a| match a.as_str() {
                "c-..." => c.clone(),
                "index.html" => page.display().to_string(),
                "pv_..." => first_id.clone(),
                other => other.to_string(),
            })
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = crate::cli::rakazo(&w, &args).await?;
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success(),
            "README line `rakazo {}`:\nstdout: {stdout}\nstderr: {stderr}",
            step.args.join(" ")
        );
        match args[..] {
            ["service", "list", ..] => assert!(stdout.starts_with("web\t1:running\t"), "{stdout}"),
            ["preview", "url", ..] => {
                let url = stdout.trim().to_string();
                keep_secret(&mut w, &url);
                urls.push(url);
            }
            ["preview", "list", ..] => {
                assert_eq!(stdout.lines().count(), 3, "{stdout}");
                assert!(
                    !stdout.contains("localhost"),
                    "a listing carries no URL: {stdout}"
                );
                // The oldest, the link preview, is the one the block revokes.
                first_id = stdout
                    .lines()
                    .last()
                    .and_then(|l| l.split('\t').next())
                    .unwrap_or_default()
                    .to_string();
                // The public preview serves the page (the server started with `service set`).
                let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
                loop {
                    let (status, body) = get(&w, &urls[1], &[]).await?;
                    if status == 200 {
                        assert!(body.contains("served from the README"), "{body}");
                        break;
                    }
                    anyhow::ensure!(tokio::time::Instant::now() < deadline, "{status}: {body}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                // The link's URL opens it (its token for the cookie); its origin alone does not.
                let origin = format!(
                    "{}/",
                    urls[0].split("/__rakazo/").next().unwrap_or_default()
                );
                assert_eq!(get(&w, &urls[0], &[]).await?.0, 303, "the link's way in");
                assert_eq!(
                    get(&w, &origin, &[]).await?.0,
                    403,
                    "the link's origin alone"
                );
                // The session preview sends a browser to sign in.
                assert_eq!(
                    get(&w, &urls[2], &[]).await?.0,
                    302,
                    "to the console's sign-in"
                );
            }
            ["preview", "revoke", ..] => {
                assert_eq!(get(&w, &urls[0], &[]).await?.0, 410, "the revoked link");
            }
            _ => {}
        }
    }
    w.check_log()
}

/// Over TLS, a browser gets a preview over HTTP/2 (ALPN `h2`), its websocket and event stream
/// still working (the websocket on its own HTTP/1.1 connection); the certificate names
/// `*.preview.localhost`.
#[tokio::test(flavor = "multi_thread")]
async fn a_browser_gets_a_preview_over_http2_with_tls() -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let certs = tempfile::tempdir()?;
    let (cert_pem, key_pem) =
        control_plane::tls::self_signed(&["127.0.0.1", "localhost", "*.preview.localhost"])?;
    let (cert, key) = (
        certs.path().join("api.pem"),
        certs.path().join("api-key.pem"),
    );
    std::fs::write(&cert, cert_pem)?;
    std::fs::write(&key, key_pem)?;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))?;
    let mut w = World::start_with(WorldOptions {
        env: vec![
            ("RAKAZO_LOCAL_CONTAINMENT".into(), "full".into()),
            ("RAKAZO_TLS_CERT".into(), cert.display().to_string()),
            ("RAKAZO_TLS_KEY".into(), key.display().to_string()),
        ],
        ..WorldOptions::default()
    })
    .await?;
    anyhow::ensure!(w.http.starts_with("https://"), "{}", w.http);
    let c = w.create_computer("ws-preview-h2").await?;
    let app = std::fs::read(repo().join("tests/scripts/preview_app.py"))?;
    w.put_file(&c, "app.py", app, false).await?;
    w.client
        .json(
            hyper::Method::PUT,
            &format!("/v1/computers/{c}/services/web"),
            Some(&serde_json::json!({ "argv": ["python3", "app.py", APP_PORT, "h2"] })),
        )
        .await?;
    let mut urls = Vec::new();
    for access in ["link", "public"] {
        let made = w
            .post(
                &format!("/v1/computers/{c}/previews"),
                serde_json::json!({ "port": 8000, "access": access }),
            )
            .await?;
        let url = made["url"].as_str().context("url")?.to_string();
        anyhow::ensure!(url.starts_with("https://"), "{url}");
        keep_secret(&mut w, &url);
        urls.push(url);
    }
    let shots = shots()?;
    browse(&[
        ("RAKAZO_PREVIEW_LINK", urls[0].clone()),
        ("RAKAZO_PREVIEW_PUBLIC", urls[1].clone()),
        ("RAKAZO_PREVIEW_SHOTS", shots.0.display().to_string()),
        ("RAKAZO_PREVIEW_NAME", "h2".into()),
        ("RAKAZO_PREVIEW_EXPECT_H2", "1".into()),
    ])
    .await?;
    w.check_log()
}

/// A detached process counts as work while it prints (or uses CPU), not for being alive: a
/// chatty one keeps an idle computer up; a quiet service (a dev server nobody visits) lets it
/// suspend, and a visit then wakes it and the service, started with it, answers.
#[tokio::test(flavor = "multi_thread")]
async fn a_quiet_service_lets_its_computer_suspend_and_a_visit_wakes_it() -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        idle_timeout_secs: Some(2),
        env: vec![("RAKAZO_LOCAL_CONTAINMENT".into(), "full".into())],
        ..WorldOptions::default()
    })
    .await?;
    let c = crate::cli::create(&w, "ws-preview-idle").await?;
    let public = serve_app(&mut w, &c, APP_PORT, "idle").await?;
    let chatty = rakazo_ok(
        &w,
        &[
            "exec",
            "--detach",
            &c,
            "--",
            "sh",
            "-c",
            "while true; do echo tick; sleep 0.3; done",
        ],
    )
    .await?;
    let chatty = text(&chatty).trim().to_string();
    let view = |what: &'static str, pred: fn(&serde_json::Value) -> bool| {
        let (w, c) = (&w, &c);
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            loop {
                let v = w.show(c).await?;
                if pred(&v) {
                    return Ok::<_, anyhow::Error>(v);
                }
                anyhow::ensure!(
                    tokio::time::Instant::now() < deadline,
                    "timed out waiting for {what}: {v}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    view("the chatty process to keep it busy", |v| {
        v["idle"]["decision"] == "busy"
            && v["idle"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("detached process output"))
    })
    .await?;
    rakazo_ok(&w, &["kill", &c, &chatty]).await?;
    // Quiet now (the service alive, printing nothing): it suspends.
    view("the computer to suspend", |v| {
        v["state"] == "stopped" && v["idle"]["decision"] == "suspended"
    })
    .await?;
    let (status, body) = get(&w, &format!("{public}headers"), &[]).await?;
    assert_eq!(status, 200, "the visit to the suspended computer: {body}");
    let feed = text(&rakazo_ok(&w, &["activity", &c]).await?);
    assert!(feed.contains("stopped (idle)"), "{feed}");
    assert!(feed.contains("started (preview_visit)"), "{feed}");
    w.check_log()
}
