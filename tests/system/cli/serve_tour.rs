//! `rakazo serve` on its own data dir, and README.md's tour run as written.

use super::desktops::{cap_path, event, BROWSER_PAGE};
use super::*;

/// Starts `rakazo serve` on `data_dir`, on ports the kernel picks, with stdout piped and stderr
/// appended to `log`; returns once it has written its addresses.
async fn serve(data_dir: &Path, local_root: &Path, log: &Path) -> Result<tokio::process::Child> {
    let addresses = data_dir.join("addresses.json");
    let _ = std::fs::remove_file(&addresses);
    let (dir, root) = (
        data_dir.display().to_string(),
        local_root.display().to_string(),
    );
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let child = command(
        &[
            ("RAKAZO_DATA_DIR", &dir),
            ("RAKAZO_HTTP_ADDR", "127.0.0.1:0"),
            ("RAKAZO_TUNNEL_ADDR", "127.0.0.1:0"),
            ("RAKAZO_LOCAL_ROOT", &root),
        ],
        &["serve"],
    )
    .stdin(Stdio::null())
    .stderr(log)
    .spawn()?;
    wait_for(Duration::from_secs(30), "addresses.json", || {
        addresses.exists().then_some(())
    })
    .await?;
    Ok(child)
}

/// Stops a server from [`serve`]; returns what it printed on stdout.
async fn stop_serving(mut child: tokio::process::Child) -> Result<String> {
    child.kill().await?;
    let mut out = Vec::new();
    if let Some(mut s) = child.stdout.take() {
        s.read_to_end(&mut out).await?;
    }
    Ok(text(&out))
}

/// `rakazo serve` on a fresh data dir prints the API token once, on its first start only; the
/// CLI then finds the server and the token through the data dir alone, or through `--url` and
/// `--token-file`.
#[tokio::test]
async fn cli_serve_prints_the_token_once_and_the_cli_finds_a_local_server() -> Result<()> {
    let data = tempfile::Builder::new()
        .prefix("rakazo-cli-serve-")
        .tempdir()?;
    let other = tempfile::tempdir()?;
    let (root, log) = (other.path().join("local"), other.path().join("server.log"));
    let first = stop_serving(serve(data.path(), &root, &log).await?).await?;
    let token = std::fs::read_to_string(data.path().join("api-token"))?;
    let token = token.trim();
    assert!(token.len() >= 32, "a real token");
    assert_eq!(first.matches(token).count(), 1, "{first}");
    assert!(first.contains("shown once"), "{first}");
    let second = stop_serving(serve(data.path(), &root, &log).await?).await?;
    assert!(!second.contains(token), "printed again: {second}");

    let server = serve(data.path(), &root, &log).await?;
    let addresses: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        data.path().join("addresses.json"),
    )?)?;
    let http = addresses["http"].as_str().context("http")?.to_string();
    // No RAKAZO_URL, no RAKAZO_TOKEN: the data dir, from the environment or from --data-dir.
    let dir = data.path().display().to_string();
    let by_env = ["computer", "list", "--json"];
    let by_flag = ["--data-dir", &dir, "computer", "list", "--json"];
    for (envs, args) in [
        (vec![("RAKAZO_DATA_DIR", dir.as_str())], &by_env[..]),
        (vec![], &by_flag[..]),
    ] {
        let out = run(&envs, args, None).await?;
        let out = succeeded(args, out).with_context(|| {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            format!("server log:\n{log}")
        })?;
        let v: serde_json::Value = serde_json::from_slice(&out)?;
        assert_eq!(v["computers"], serde_json::json!([]), "{v}");
    }
    let token_file = other.path().join("token");
    std::fs::write(&token_file, format!("{token}\n"))?;
    let token_file = token_file.display().to_string();
    let args = [
        "--url",
        &http,
        "--token-file",
        &token_file,
        "computer",
        "list",
    ];
    succeeded(&args, run(&[], &args, None).await?)?;

    // A wrong token file, a data dir with no server, a dead address: each says so.
    let bad = other.path().join("bad-token");
    std::fs::write(&bad, "rk_wrong")?;
    let bad = bad.display().to_string();
    let args = ["--url", &http, "--token-file", &bad, "computer", "list"];
    assert_refused(&args, &run(&[], &args, None).await?, "unauthorized");
    let empty = tempfile::tempdir()?;
    let empty = empty.path().display().to_string();
    let args = ["--data-dir", &empty, "computer", "list"];
    assert_refused(
        &args,
        &run(&[], &args, None).await?,
        "no --url or RAKAZO_URL",
    );
    let args = [
        "--url",
        "http://127.0.0.1:1",
        "--token-file",
        &token_file,
        "computer",
        "list",
    ];
    let out = run(&[], &args, None).await?;
    assert_refused(
        &args,
        &out,
        "cannot reach the control plane at http://127.0.0.1:1",
    );
    stop_serving(server).await?;
    let log = std::fs::read_to_string(&log)?;
    assert!(!log.contains(token), "the token is in the server's log");
    assert!(!log.contains(" ERROR "), "{log}");
    Ok(())
}

/// The `rakazo …` commands of README.md's tour, in order.
fn readme_tour() -> Result<Vec<tests::readme::Command>> {
    tests::readme::commands("## A short tour")
}

/// The README's tour, every command as written and in its order, against a World: the
/// computer id, the page URL and the element ref are the only things filled in, as a reader
/// fills them in from what the commands before printed. Each command must end the way its
/// comment says (`exits 3`, `exit 124`, `409 …`), else succeed.
#[tokio::test(flavor = "multi_thread")]
async fn cli_runs_the_readme_tour_in_order() -> Result<()> {
    let fx = Fixture::start().await?;
    let page = fx.page("tour", BROWSER_PAGE);
    let mut w = World::start().await?;
    let cwd = tempfile::tempdir()?;
    std::fs::write(cwd.path().join("tool.sh"), "#!/bin/sh\necho tool ran\n")?;
    let tour = readme_tour()?;
    assert!(tour.len() >= 35, "only {} commands in the tour", tour.len());
    let (mut computer, mut element) = (None::<String>, None::<String>);
    let mut ran = 0;
    for step in &tour {
        if step.args.first().map(String::as_str) == Some("serve") {
            continue; // The World is the server.
        }
        let mut args = Vec::new();
        for a in &step.args {
            let a = match (a.as_str(), &computer) {
                ("c-..." | "c-0123456789abcdef", Some(id)) => id.clone(),
                ("c-..." | "c-0123456789abcdef", None) => bail!("{:?} before a create", step.args),
                _ => a.replace("http://127.0.0.1:8000/", &page),
            };
            let a = match &element {
                Some(e) => a.replace(r#""ref":"e3""#, &format!(r#""ref":"{e}""#)),
                None => a,
            };
            args.push(a);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut cmd = command(
            &[("RAKAZO_URL", &w.http), ("RAKAZO_TOKEN", w.api_token())],
            &args,
        );
        cmd.current_dir(cwd.path()).stdin(if step.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        let mut child = cmd.spawn()?;
        if let (Some(feed), Some(mut pipe)) = (&step.stdin, child.stdin.take()) {
            pipe.write_all(feed.as_bytes()).await?;
        }
        let out = tokio::time::timeout(CLI_TIMEOUT, child.wait_with_output())
            .await
            .with_context(|| format!("{args:?} did not finish"))??;
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        let want = if step.comment.contains("exits 3") {
            3
        } else if step.comment.contains("exit 124") {
            124
        } else if step.comment.starts_with("409") {
            1
        } else {
            0
        };
        assert_eq!(
            out.status.code(),
            Some(want),
            "README line `rakazo {}` (# {}):\nstdout: {stdout}\nstderr: {stderr}",
            step.args.join(" "),
            step.comment
        );
        assert!(!stderr.contains("HTTP 5"), "{args:?}: {stderr}");
        if want == 1 {
            assert!(stderr.contains("Stop the bot first"), "{stderr}");
        }
        match args[..] {
            ["computer", "create", "--workspace", ..] => {
                computer = stdout.split('\t').next().map(String::from);
            }
            ["browser", "snapshot", ..] => {
                element = stdout
                    .lines()
                    .find(|l| l.contains("button \"Press me\""))
                    .and_then(|l| l.rsplit_once('[')?.1.strip_suffix(']').map(String::from));
            }
            ["screen" | "terminal", "url", ..] => {
                cap_path(&mut w, &out.stdout)?;
            }
            _ => {}
        }
        ran += 1;
    }
    assert!(element.is_some(), "the snapshot showed the button's ref");
    assert_eq!(
        event(&fx, "pressed").await?,
        "1",
        "the tour's browser act clicked it"
    );
    assert!(ran >= 34, "{ran} commands ran");
    w.check_log()
}
