//! Screen recordings (issue 34, docs/recordings.md) through the real binaries, README.md's
//! "Screen recordings" block as written: recording turned on with the CLI, an agent phase (the bot's clicks and typing through the API) and a takeover
//! phase (a person in the console, in real Chromium: `tests/console/recording.test.mjs`), then
//! the console's player replays both (screenshots checked there), `rakazo recording export`
//! writes WebM and MP4 files that ffprobe (Debian's ffmpeg) reads with the recording's duration,
//! and nothing anyone typed is in the stored recording.

use crate::cli::rakazo;
use crate::console::{browser_run, screenshots_in};
use anyhow::{anyhow, bail, Context, Result};
use std::ffi::OsString;
use std::time::Duration;
use tests::fixture::Fixture;
use tests::World;

const WORKSPACE: &str = "ws-recordings";
const BOT: &str = "bot-rec";
const LONG: Duration = Duration::from_secs(60);
/// Bound on one video export: ffmpeg encodes every frame of a recording about a minute long,
/// fed by a debug build, on two cores the rest of the suite shares.
const EXPORT: Duration = Duration::from_secs(240);
/// What the agent types: it must never be stored.
const TYPED: &str = "hunter2-typed";

/// A box that fills the page: grey, blue once clicked. (The run's end checkpoints the home,
/// which restarts Chrome: the person finds the page grey again.)
const PAGE: &str = "<html><body style='margin:0'><div id='box' \
    style='width:100vw;height:100vh;background:rgb(128,128,128)'></div><script>\
    document.getElementById('box').addEventListener('mousedown', () => {\
      document.getElementById('box').style.background = 'rgb(37,99,235)';\
    });</script></body></html>";

fn ok(out: &std::process::Output, what: &str) -> Result<String> {
    if !out.status.success() {
        bail!("{what} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// ffprobe's duration of `file`, in seconds.
fn probed_duration(file: &std::path::Path) -> Result<f64> {
    let out = std::process::Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-show_entries",
            "format=duration",
            "-of",
            "csv=p=0",
        ])
        .arg(file)
        .output()
        .context("run ffprobe (apt-get install ffmpeg)")?;
    ok(&out, "ffprobe")?
        .trim()
        .parse()
        .map_err(|e| anyhow!("ffprobe printed no duration: {e}"))
}

#[tokio::test]
async fn a_recorded_agent_and_takeover_replay_in_the_console_and_export_to_video() -> Result<()> {
    let mut w = World::start().await?;
    let site = Fixture::start().await?;
    let c = w.create_computer(WORKSPACE).await?;
    let dir = tempfile::tempdir()?;
    let steps = tests::readme::commands("## Screen recordings")?;
    assert_eq!(steps.len(), 5, "the README's block changed");
    let readme = |i: usize| -> Vec<String> {
        steps[i]
            .args
            .iter()
            .map(|a| match a.as_str() {
                "c-..." => c.clone(),
                "bot-1" => BOT.to_string(),
                "run.webm" | "run.rec" => dir.path().join(a).to_string_lossy().into_owned(),
                other => other.to_string(),
            })
            .collect()
    };
    let on = cli(&w, readme(0)).await?;
    assert!(on.contains("recording on"), "{on}");

    // The agent phase.
    let b = tests::bot::Bot::new(&w, &c, BOT).await?;
    b.ensure().await?;
    b.navigate(&site.page("box", PAGE)).await?;
    // The recorder starts at the server's first pull: wait for its first piece.
    let deadline = tokio::time::Instant::now() + LONG;
    while listed_bots(&w, &c).await? == 0 {
        if tokio::time::Instant::now() >= deadline {
            bail!("the recording did not start within {LONG:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    b.act(serde_json::json!([
        { "type": "click", "x": 640, "y": 300 },
        { "type": "type", "text": TYPED },
        { "type": "key", "key": "Return" },
        { "type": "wait", "ms": 800 }
    ]))
    .await?;
    b.end_run().await?;

    // The takeover phase and the player, in the console.
    let operator = crate::console::token(&mut w, "operator", &[WORKSPACE], "rec-operator")
        .await?
        .0;
    let shots = screenshots_in("RAKAZO_RECORDING_SCREENSHOTS")?;
    browser_run(
        "recording.test.mjs",
        &[
            ("RAKAZO_CONSOLE_URL", OsString::from(&w.http)),
            ("RAKAZO_CONSOLE_COMPUTER", OsString::from(&c)),
            ("RAKAZO_CONSOLE_BOT", OsString::from(BOT)),
            ("RAKAZO_CONSOLE_OPERATOR_TOKEN", OsString::from(&operator)),
            (
                "RAKAZO_CONSOLE_SCREENSHOTS",
                shots.0.clone().into_os_string(),
            ),
        ],
    )
    .await?;
    println!("recording screenshots: {}", shots.0.display());

    // The rest of the README's block: list, export, get, off.
    let listed = cli(&w, readme(1)).await?;
    assert!(
        listed.contains("recording on") && listed.contains(BOT),
        "{listed}"
    );
    // Still recording (the page's caret blinks): each export holds what was recorded up to
    // when it ran, so the README's export lasts at least the span listed before it and at most
    // the span listed after it; the MP4 export is cut `--until` the first listing's end.
    let (started, ended) = recorded(&w, &c).await?;
    let span_s = (ended - started) as f64 / 1000.0;
    assert!(span_s > 2.0, "the recording spans both phases: {span_s} s");
    let t = tests::bench::now();
    cli_within(&w, readme(2), EXPORT).await?;
    println!("webm export: {:.1} s", t.elapsed().as_secs_f64());
    let (_, ended_after) = recorded(&w, &c).await?;
    let span_after_s = (ended_after - started) as f64 / 1000.0;
    let webm = probed_duration(&dir.path().join("run.webm"))?;
    assert!(
        webm >= span_s - 0.25 && webm <= span_after_s + 0.25,
        "run.webm: ffprobe says {webm} s, the recording spanned {span_s} s before the export \
         and {span_after_s} s after it"
    );
    // Exported up to the listed end: ffprobe reads it as long as the span (to a frame, at
    // 10 fps).
    let mp4 = dir.path().join("run.mp4");
    let until = ended.to_string();
    let args = [
        "recording",
        "export",
        &c,
        "--bot",
        BOT,
        "--until",
        &until,
        "-o",
        &mp4.to_string_lossy(),
    ];
    let t = tests::bench::now();
    ok(
        &crate::cli::rakazo_within(&w, &args, EXPORT).await?,
        "recording export mp4",
    )?;
    println!("mp4 export: {:.1} s", t.elapsed().as_secs_f64());
    let d = probed_duration(&mp4)?;
    assert!(
        (d - span_s).abs() <= 0.25,
        "run.mp4: ffprobe says {d} s, the recording spans {span_s} s up to --until"
    );
    let bad = rakazo(&w, &["recording", "export", &c, "-o", "rec.avi"]).await?;
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains(".webm or .mp4"));

    // Nothing typed was stored: not in the raw records, not in the sealed pieces on disk.
    cli(&w, readme(3)).await?;
    let bytes = std::fs::read(dir.path().join("run.rec"))?;
    assert!(bytes.len() > 1000);
    for needle in [TYPED.as_bytes(), b"xyz"] {
        assert!(
            !bytes.windows(needle.len()).any(|win| win == needle),
            "typed text in the recording"
        );
    }
    let off = cli(&w, readme(4)).await?;
    assert!(off.contains("recording off"), "{off}");
    let stored = walk(&w.data_dir.path().join("recordings"))?;
    assert!(!stored.is_empty(), "pieces on disk");
    for f in stored {
        let b = std::fs::read(&f)?;
        assert!(!b.windows(TYPED.len()).any(|win| win == TYPED.as_bytes()));
        assert!(
            !b.windows(5).any(|win| win == b"\"k\":\""),
            "{} is not sealed",
            f.display()
        );
    }

    // Bad input: an unknown bot, a reversed range, a bad time.
    for (query, code) in [
        (format!("/v1/computers/{c}/recordings/nobody"), 404),
        (
            format!("/v1/computers/{c}/recordings/{BOT}?since=5&until=1"),
            400,
        ),
        (
            format!("/v1/computers/{c}/recordings/{BOT}?since=soon"),
            400,
        ),
    ] {
        match get(&w, &query).await {
            Err(control_plane::client::ClientError::Api { status, .. }) => {
                assert_eq!(status.as_u16(), code, "{query}")
            }
            other => bail!("{query}: {other:?}"),
        }
    }
    w.check_log()
}

/// A README line, run with the real CLI.
async fn cli(w: &World, args: Vec<String>) -> Result<String> {
    cli_within(w, args, crate::cli::CLI_TIMEOUT).await
}

/// [`cli`] bounded by `limit`.
async fn cli_within(w: &World, args: Vec<String>, limit: Duration) -> Result<String> {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = crate::cli::rakazo_within(w, &a, limit).await?;
    ok(&out, &format!("README line `rakazo {}`", args.join(" ")))
}

/// The bot's recording as listed now: (started, ended), ms since 1970.
async fn recorded(w: &World, c: &str) -> Result<(i64, i64)> {
    let v = get(w, &format!("/v1/computers/{c}/recordings")).await?;
    let rec = &v["bots"][0];
    match (rec["started_at_ms"].as_i64(), rec["ended_at_ms"].as_i64()) {
        (Some(s), Some(e)) => Ok((s, e)),
        _ => bail!("no recording listed: {v}"),
    }
}

async fn get(
    w: &World,
    path: &str,
) -> Result<serde_json::Value, control_plane::client::ClientError> {
    w.client.json(hyper::Method::GET, path, None).await
}

async fn listed_bots(w: &World, c: &str) -> Result<usize> {
    let v = get(w, &format!("/v1/computers/{c}/recordings")).await?;
    Ok(v["bots"].as_array().map_or(0, Vec::len))
}

fn walk(dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    if !dir.exists() {
        return Ok(out);
    }
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            out.extend(walk(&p)?);
        } else {
            out.push(p);
        }
    }
    Ok(out)
}

/// A workspace's default (an admin's): its computers without a setting of their own are
/// recorded; a computer's own `off` wins; other workspaces are untouched; a token limited to
/// another workspace does not see it, and an operator may not set it.
#[tokio::test]
async fn a_workspaces_default_records_its_computers_unless_they_say_otherwise() -> Result<()> {
    const WS: &str = "ws-rec-default";
    let mut w = World::start().await?;
    let set = ok(
        &rakazo(&w, &["recording", "on", "--workspace", WS]).await?,
        "recording on --workspace",
    )?;
    assert!(set.contains("recording on"), "{set}");
    let c = w.create_computer(WS).await?;
    let other = w.create_computer("ws-rec-other").await?;
    let listed = ok(&rakazo(&w, &["recording", "list", &c]).await?, "list")?;
    assert!(
        listed.contains("recording on by the workspace's default"),
        "{listed}"
    );
    let listed = ok(&rakazo(&w, &["recording", "list", &other]).await?, "list")?;
    assert!(listed.contains("recording off (never set)"), "{listed}");

    let b = tests::bot::Bot::new(&w, &c, BOT).await?;
    b.ensure().await?;
    let deadline = tokio::time::Instant::now() + LONG;
    while listed_bots(&w, &c).await? == 0 {
        if tokio::time::Instant::now() >= deadline {
            bail!("the workspace's default did not record its computer within {LONG:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ok(
        &rakazo(&w, &["recording", "off", &c]).await?,
        "recording off",
    )?;
    let listed = ok(&rakazo(&w, &["recording", "list", &c]).await?, "list")?;
    assert!(listed.starts_with("recording off (set by"), "{listed}");
    b.end_run().await?;
    drop(b);

    let operator = crate::console::token(&mut w, "operator", &[WS], "rec-ws-operator")
        .await?
        .0;
    let outsider = crate::console::token(&mut w, "admin", &["ws-rec-other"], "rec-ws-outsider")
        .await?
        .0;
    for (token, code) in [(&operator, "403"), (&outsider, "404")] {
        let out =
            crate::cli::rakazo_with(&w, token, &["recording", "off", "--workspace", WS], None)
                .await?;
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(code), "{code}: {err}");
    }
    w.check_log()
}
