//! Desktops, the page browser and live URLs through the CLI.

use super::*;

/// The page the desktop test types into: one input over the whole viewport, so a click lands
/// in it wherever the browser's bars end; Enter submits it, and the page reports what it got.
const FORM_PAGE: &str = r#"<!doctype html><html><head><meta charset="utf-8"><title>cli form</title>
<style>html,body{margin:0;height:100%} #t{position:fixed;left:0;top:0;width:100%;height:100%;font-size:40px}</style></head>
<body><form id="f"><input id="t" autocomplete="off"></form>
<script>
const f = document.getElementById('f'), t = document.getElementById('t');
f.addEventListener('submit', (e) => { e.preventDefault(); fetch('/event?submitted=' + encodeURIComponent(t.value)); });
fetch('/event?loaded=1');
</script></body></html>"#;

/// Waits for the fixture to see an event with `key`; returns its value.
pub(super) async fn event(fx: &Fixture, key: &str) -> Result<String> {
    wait_for(Duration::from_secs(20), key, || {
        fx.events().iter().find_map(|e| e.get(key).cloned())
    })
    .await
}

/// `<cmd…> <c> bot-1 --lease <lease> <extra…>`: the README run's shape of a bot's command.
fn bot1<'a>(cmd: &[&'a str], c: &'a str, lease: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    [cmd, &[c, "bot-1", "--lease", lease], extra].concat()
}

#[tokio::test(flavor = "multi_thread")]
async fn cli_drives_a_desktop() -> Result<()> {
    let fx = Fixture::start().await?;
    let page = fx.page("form", FORM_PAGE);
    let mut w = World::start().await?;
    let c = create(&w, "acme").await?;
    rakazo_ok(&w, &["lease", "acquire", &c, "bot-1", "--owner", "run-42"]).await?;
    let ensured = text(&rakazo_ok(&w, &bot1(&["screen", "ensure"], &c, "run-42:1", &[])).await?);
    assert!(ensured.starts_with("bot-1\tslot 0\tdisplay :"), "{ensured}");
    let screens = rakazo_json(&w, &["screen", "list", &c]).await?;
    let desktop = &screens["screens"][0];
    assert_eq!(desktop["bot"], "bot-1", "{screens}");
    let size = (desktop["width"].as_u64(), desktop["height"].as_u64());
    assert_eq!(size, (Some(1280), Some(800)), "the default geometry");
    let listed = text(&rakazo_ok(&w, &["screen", "list", &c]).await?);
    assert_eq!(listed.trim_end(), ensured.trim_end());

    // The README's two act lines: open the page, then click, type and press Enter, with an
    // observation written to a PNG.
    let open = format!(r#"[{{"type":"open","url":"{page}"}}]"#);
    let out = text(&rakazo_ok(&w, &bot1(&["act"], &c, "run-42:1", &["--actions", &open])).await?);
    assert_eq!(out, "completed 1 actions\n");
    event(&fx, "loaded").await?;
    let dir = tempfile::tempdir()?;
    let after = dir.path().join("after.png");
    let after_str = after.display().to_string();
    let typed = r#"[{"type":"click","x":640,"y":300},{"type":"type","text":"héllo 中文"},{"type":"key","key":"enter"}]"#;
    let extra = ["--observe", "--out", &after_str, "--actions", typed];
    let out = text(&rakazo_ok(&w, &bot1(&["act"], &c, "run-42:1", &extra)).await?);
    assert!(
        out.starts_with("completed 3 actions (settled after "),
        "{out}"
    );
    assert!(out.contains(" 1280x800 cursor 640,300 "), "{out}");
    assert!(
        out.trim_end().ends_with(&format!("-> {after_str}")),
        "{out}"
    );
    assert_eq!(event(&fx, "submitted").await?, "héllo 中文");
    assert_eq!(png_size(&after)?, (1280, 800));

    // observe --out after a change: a PNG of the desktop's size.
    let typed = ["--actions", r#"[{"type":"type","text":"!"}]"#];
    rakazo_ok(&w, &bot1(&["act"], &c, "run-42:1", &typed)).await?;
    let shot = dir.path().join("shot.png");
    let shot_str = shot.display().to_string();
    let observe = bot1(&["observe"], &c, "run-42:1", &["--out", &shot_str]);
    let out = text(&rakazo_ok(&w, &observe).await?);
    assert!(out.starts_with("frame "), "{out}");
    assert!(out.contains(" 1280x800 cursor "), "{out}");
    assert_eq!(png_size(&shot)?, (1280, 800));
    // --json prints the metadata, never the image.
    let meta = rakazo_json(&w, &bot1(&["observe"], &c, "run-42:1", &[])).await?;
    assert_eq!(meta["image"], serde_json::Value::Null, "{meta}");
    assert_eq!(meta["frameId"].as_str().map(str::len), Some(64), "{meta}");
    // act --json with an observation: the metadata parses, the PNG lands in --out.
    let json_png = dir.path().join("json.png");
    let json_png_str = json_png.display().to_string();
    let moved = r#"[{"type":"move","x":10,"y":10},{"type":"type","text":"?"}]"#;
    let extra = ["--observe", "--out", &json_png_str, "--actions", moved];
    let v = rakazo_json(&w, &bot1(&["act"], &c, "run-42:1", &extra)).await?;
    assert_eq!(v["completed"], 2, "{v}");
    assert_eq!(v["observation"]["image"], serde_json::Value::Null, "{v}");
    let cursor = &v["observation"]["cursor"];
    assert_eq!(*cursor, serde_json::json!({ "x": 10, "y": 10 }), "{v}");
    assert_eq!(png_size(&json_png)?, (1280, 800));
    // A scaled-down, marked frame: its size and the screen's, then one line per mark; a click
    // in the frame's coordinates with --frame.
    let small = dir.path().join("small.png");
    let small_str = small.display().to_string();
    let args = ["--width", "640", "--marks", "--full", "--out", &small_str];
    let out = text(&rakazo_ok(&w, &bot1(&["observe"], &c, "run-42:1", &args)).await?);
    assert!(out.contains(" 640x400 (screen 1280x800) cursor "), "{out}");
    assert!(out.lines().skip(1).any(|l| l.starts_with('e')), "{out}");
    assert_eq!(png_size(&small)?, (640, 400));
    let framed = [
        "--frame",
        "640x400",
        "--actions",
        r#"[{"type":"move","x":5,"y":5}]"#,
    ];
    rakazo_ok(&w, &bot1(&["act"], &c, "run-42:1", &framed)).await?;
    let v = rakazo_json(&w, &bot1(&["observe"], &c, "run-42:1", &["--full"])).await?;
    assert_eq!(v["cursor"], serde_json::json!({ "x": 11, "y": 11 }), "{v}");
    // Actions from stdin.
    let act = bot1(&["act"], &c, "run-42:1", &["--actions", "-"]);
    let waited = Some(&br#"[{"type":"wait","ms":1}]"#[..]);
    let out = rakazo_with(&w, w.api_token(), &act, waited).await?;
    assert_eq!(text(&succeeded(&act, out)?), "completed 1 actions\n");

    // What users get wrong: a lease that is not the bot's, actions that are not JSON or not
    // valid, --out without --observe.
    let wait = ["--actions", r#"[{"type":"wait"}]"#];
    for (cmd, extra) in [
        (&["observe"][..], &[][..]),
        (&["screen", "ensure"], &[]),
        (&["act"], &wait),
    ] {
        refused(&w, &bot1(cmd, &c, "run-9:1", extra), "run-9:1").await?;
    }
    let act = bot1(&["act"], &c, "run-42:1", &["--actions", "click"]);
    refused(&w, &act, "--actions must be a JSON array").await?;
    let act = bot1(
        &["act"],
        &c,
        "run-42:1",
        &["--actions", r#"[{"type":"fly"}]"#],
    );
    refused(&w, &act, "fly").await?;
    let act = bot1(
        &["act"],
        &c,
        "run-42:1",
        &["--out", "x.png", "--actions", "[]"],
    );
    let code = rakazo(&w, &act).await?.status.code();
    assert_eq!(code, Some(2), "--out needs --observe");

    // screen stop: the desktop is gone from the list; the bot's profile stays in the home.
    assert_eq!(
        text(&rakazo_ok(&w, &bot1(&["screen", "stop"], &c, "run-42:1", &[])).await?),
        "released\n"
    );
    let screens = rakazo_json(&w, &["screen", "list", &c]).await?;
    assert_eq!(screens["screens"], serde_json::json!([]), "{screens}");
    let profiles = text(&rakazo_ok(&w, &["files", "ls", &c, ".browser-profiles"]).await?);
    assert!(profiles.starts_with("d "), "{profiles}");
    // A run that ends with --outcome failed tears its desktop down.
    let again = rakazo_json(&w, &bot1(&["screen", "ensure"], &c, "run-42:1", &[])).await?;
    let shown = (&again["bot"], &again["width"]);
    assert_eq!(shown, (&"bot-1".into(), &1280.into()), "{again}");
    let release = [
        "lease",
        "release",
        &c,
        "bot-1",
        "run-42:1",
        "--outcome",
        "failed",
    ];
    let released = rakazo_json(&w, &release).await?;
    assert_eq!(released["released"], true, "{released}");
    let screens = rakazo_json(&w, &["screen", "list", &c]).await?;
    assert_eq!(screens["screens"], serde_json::json!([]), "{screens}");
    w.check_log()
}

pub(super) const BROWSER_PAGE: &str = r#"<!doctype html><html><head><meta charset="utf-8"><title>CLI page</title></head>
<body><p id="p">Hello from the fixture</p><button id="b">Press me</button>
<script>
document.getElementById('b').onclick = () => {
  document.getElementById('p').textContent = 'Pressed through the CLI';
  fetch('/event?pressed=1');
};
</script></body></html>"#;

#[tokio::test(flavor = "multi_thread")]
async fn cli_drives_the_page_browser() -> Result<()> {
    let fx = Fixture::start().await?;
    let page = fx.page("cli", BROWSER_PAGE);
    let mut w = World::start().await?;
    let c = create(&w, "acme").await?;
    rakazo_ok(&w, &["lease", "acquire", &c, "bot-1", "--owner", "run-42"]).await?;
    let (snapshot, act) = (["browser", "snapshot"], ["browser", "act"]);

    // Exactly the README's order: the page URL is positional, the lease after it. The request
    // must reach the control plane, not the page's server (the bug: one argument for both).
    let readme = [
        "browser", "navigate", &c, "bot-1", &page, "--lease", "run-42:1",
    ];
    let out = text(&rakazo_ok(&w, &readme).await?);
    let title = format!("CLI page — {page}");
    assert_eq!(out.lines().next(), Some(title.as_str()), "{out}");
    assert!(out.contains("Hello from the fixture"), "{out}");
    // With the control plane's address given as --url too, after the page's.
    let v = rakazo_json(&w, &[&readme[..], &["--url", &w.http]].concat()).await?;
    let shown = (&v["ok"], &v["snapshot"]["title"]);
    assert_eq!(shown, (&true.into(), &"CLI page".into()), "{v}");

    let snap = text(&rakazo_ok(&w, &bot1(&snapshot, &c, "run-42:1", &[])).await?);
    assert!(snap.contains("Hello from the fixture"), "{snap}");
    let v = rakazo_json(&w, &bot1(&snapshot, &c, "run-42:1", &[])).await?;
    let button = v["snapshot"]["elements"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "Press me")
        .and_then(|e| e["ref"].as_str())
        .ok_or_else(|| anyhow!("no button in {v}"))?
        .to_string();
    let line = format!("- button \"Press me\" [{button}]");
    assert!(snap.contains(&line), "{snap}");

    let steps = format!(r#"[{{"type":"click","ref":"{button}"}}]"#);
    let out = text(&rakazo_ok(&w, &bot1(&act, &c, "run-42:1", &["--steps", &steps])).await?);
    assert!(out.contains("Pressed through the CLI"), "{out}");
    assert_eq!(event(&fx, "pressed").await?, "1");
    // Steps from stdin, and --json.
    let args = bot1(&act, &c, "run-42:1", &["--steps", "-", "--json"]);
    let out = rakazo_with(&w, w.api_token(), &args, Some(steps.as_bytes())).await?;
    let v: serde_json::Value = serde_json::from_slice(&succeeded(&args, out)?)?;
    assert_eq!(
        (&v["ok"], &v["completed"]),
        (&true.into(), &1.into()),
        "{v}"
    );

    // A stale ref fails the command (exit 1) with the contract's words and the fallback, in
    // both output modes.
    let stale = r#"[{"type":"click","ref":"e999"}]"#;
    let args = bot1(&act, &c, "run-42:1", &["--steps", stale]);
    let out = rakazo(&w, &args).await?;
    let stderr = assert_refused(&args, &out, "Stale element ref. Take a fresh snapshot.");
    assert!(stderr.contains("fall back to computer_act"), "{stderr}");
    let out = rakazo(&w, &[&args[..], &["--json"]].concat()).await?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(
        (&v["ok"], &v["completed"]),
        (&false.into(), &0.into()),
        "{v}"
    );

    // Refused before the browser: a file URL, a lease that is not the bot's, steps not JSON.
    let file = [
        "browser",
        "navigate",
        &c,
        "bot-1",
        "file:///etc/passwd",
        "--lease",
        "run-42:1",
    ];
    refused(&w, &file, "http").await?;
    let wrong = [
        "browser", "navigate", &c, "bot-1", &page, "--lease", "run-9:1",
    ];
    refused(&w, &wrong, "run-9:1").await?;
    refused(&w, &bot1(&snapshot, &c, "run-9:1", &[]), "run-9:1").await?;
    let args = bot1(&act, &c, "run-42:1", &["--steps", "click"]);
    refused(&w, &args, "--steps must be a JSON array").await?;
    refused(&w, &bot1(&act, &c, "run-42:1", &["--steps", "[]"]), "step").await?;
    rakazo_ok(&w, &bot1(&["screen", "stop"], &c, "run-42:1", &[])).await?;
    w.check_log()
}

/// The capability path (`/cap/<sealed>`) of a URL the CLI printed, recorded as a secret.
pub(super) fn cap_path(w: &mut World, url: &[u8]) -> Result<String> {
    let url = text(url);
    let (_, sealed) = url
        .trim()
        .split_once("/cap/")
        .ok_or_else(|| anyhow!("no capability URL in {url:?}"))?;
    w.add_secret(sealed);
    Ok(format!("/cap/{sealed}"))
}

#[tokio::test]
async fn cli_hands_out_live_urls_and_control() -> Result<()> {
    let mut w = World::start().await?;
    let c = create(&w, "acme").await?;
    let view = rakazo_ok(&w, &["screen", "url", &c, "bot-1"]).await?;
    assert!(
        text(&view).starts_with(&format!("{}/cap/", w.http)),
        "{}",
        text(&view)
    );
    let view = cap_path(&mut w, &view)?;
    assert_eq!(tests::live::get(&w.http, &view).await?.status, 200);
    let v = rakazo_json(&w, &["screen", "url", &c, "bot-1"]).await?;
    cap_path(&mut w, v["url"].as_str().unwrap_or_default().as_bytes())?;

    // Control and terminals need the takeover, and a running bot refuses it.
    refused(
        &w,
        &["screen", "url", &c, "bot-1", "--control"],
        "take control",
    )
    .await?;
    refused(&w, &["terminal", "url", &c, "bot-1"], "take control").await?;
    rakazo_ok(&w, &["lease", "acquire", &c, "bot-1", "--owner", "run-42"]).await?;
    refused(
        &w,
        &["screen", "takeover", &c, "bot-1"],
        "Stop the bot first",
    )
    .await?;
    rakazo_ok(&w, &["lease", "release", &c, "bot-1", "run-42:1"]).await?;

    let taken = text(&rakazo_ok(&w, &["screen", "takeover", &c, "bot-1"]).await?);
    assert!(
        taken.starts_with("control of bot-1 taken (lease "),
        "{taken}"
    );
    let control = rakazo_ok(&w, &["screen", "url", &c, "bot-1", "--control"]).await?;
    let control = cap_path(&mut w, &control)?;
    let terminal = rakazo_ok(&w, &["terminal", "url", &c, "bot-1"]).await?;
    let terminal = cap_path(&mut w, &terminal)?;
    for path in [&control, &terminal] {
        assert_eq!(tests::live::get(&w.http, path).await?.status, 200, "{path}");
    }
    let v = rakazo_json(&w, &["terminal", "url", &c, "bot-1"]).await?;
    cap_path(&mut w, v["url"].as_str().unwrap_or_default().as_bytes())?;

    // Release: the control and terminal URLs stop opening; the view URL still does.
    let released = text(&rakazo_ok(&w, &["screen", "release", &c, "bot-1"]).await?);
    assert_eq!(released.trim_end(), "control of bot-1 released");
    for path in [&control, &terminal] {
        let status = tests::live::get(&w.http, path).await?.status;
        assert_ne!(status, 200, "{path} still opens after the release");
    }
    assert_eq!(tests::live::get(&w.http, &view).await?.status, 200);
    refused(&w, &["terminal", "url", &c, "bot-1"], "take control").await?;
    // The same through --json.
    let taken = rakazo_json(&w, &["screen", "takeover", &c, "bot-1"]).await?;
    assert!(taken["control_lease"].is_string(), "{taken}");
    rakazo_json(&w, &["screen", "release", &c, "bot-1"]).await?;
    refused(
        &w,
        &["screen", "url", &c, "bot-1", "--control"],
        "take control",
    )
    .await?;
    w.check_log()
}
