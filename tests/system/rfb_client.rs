//! A real third-party RFB client on capability URLs (issue 17, "Must show" 1): vncdotool (PyPI,
//! installed by `scripts/vncdotool.sh` outside the checkout), driven by
//! `tests/scripts/vnc_client.py`, reaches the bot's desktop through the control plane's websocket
//! relay (bridged to a unix socket here, since vncdotool speaks plain sockets), the guest's
//! gateway and its filter, and the desktop's Xvnc. On a view URL it sees the screen change that
//! the bot makes, and its pointer, clicks and keys reach nothing; on a control URL the same
//! client's input reaches the page, so the test can tell the difference.

use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tests::fixture::Fixture;
use tests::live::WsBridge;
use tests::{wait_for, World};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Bound on every wait.
const LONG: Duration = Duration::from_secs(60);

/// The page: red until the bot presses `g` (then green); every key and mouse press is reported
/// to the fixture site with the pointer's screen position.
const PAGE: &str = "<html><body style='margin:0;height:100vh;background:rgb(200,0,0)'><script>\
    document.addEventListener('keydown', e => {\
      if (e.key === 'g') document.body.style.background = 'rgb(0,160,0)';\
      fetch('/event?key=' + encodeURIComponent(e.key));\
    });\
    document.addEventListener('mousedown', e => fetch('/event?click=' + e.screenX + ',' + e.screenY));\
    </script></body></html>";

/// A region of the page, away from the pointer's resting place and from Chrome's toolbar.
const REGION: (u32, u32, u32, u32) = (900, 500, 120, 120);

/// Where the clients click: inside the page, away from [`REGION`] and from the pointer's
/// resting place.
const CLICK: (i64, i64) = (333, 444);

/// The venv's Python holding vncdotool (`scripts/vncdotool.sh install` puts it there).
fn vncdotool_python() -> Result<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/vncdotool.sh");
    let status = std::process::Command::new("bash")
        .arg(&script)
        .arg("install")
        .status()?;
    if !status.success() {
        bail!("scripts/vncdotool.sh install failed");
    }
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg("path")
        .output()?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(PathBuf::from(String::from_utf8(out.stdout)?.trim()))
}

/// One vncdotool session on one capability URL, commanded line by line.
struct VncClient {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    _bridge: WsBridge,
}

impl VncClient {
    async fn connect(python: &Path, w: &World, cap_path: &str) -> Result<Self> {
        let bridge = WsBridge::start(&w.http, cap_path).await?;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/vnc_client.py");
        let mut child = tokio::process::Command::new(python)
            .arg(&script)
            .arg(&bridge.socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("start vnc_client.py")?;
        let stdin = child.stdin.take().ok_or_else(|| anyhow!("no stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        Ok(Self {
            child,
            stdin,
            stdout: BufReader::new(stdout).lines(),
            _bridge: bridge,
        })
    }

    /// Sends one command and waits for its `ok`.
    async fn run(&mut self, command: &str) -> Result<()> {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await?;
        self.stdin.flush().await?;
        let answer = tokio::time::timeout(LONG, self.stdout.next_line())
            .await
            .with_context(|| format!("vncdotool did not answer {command:?}"))??
            .ok_or_else(|| anyhow!("vncdotool ended during {command:?}"))?;
        let verb = command.split_whitespace().next().unwrap_or_default();
        if answer != format!("ok {verb}") {
            bail!("vncdotool answered {command:?} with {answer:?}");
        }
        Ok(())
    }

    /// Waits until the client's framebuffer shows `rgb` in [`REGION`].
    async fn expect(&mut self, rgb: [u8; 3]) -> Result<()> {
        let (x, y, w, h) = REGION;
        self.run(&format!(
            "expect {} {} {} {x} {y} {w} {h}",
            rgb[0], rgb[1], rgb[2]
        ))
        .await
    }

    /// Moves to [`CLICK`], clicks and types `keys`, then a round trip.
    async fn input(&mut self, keys: &str) -> Result<()> {
        let (x, y) = CLICK;
        self.run(&format!("input {x} {y} {keys}")).await
    }

    async fn quit(mut self) -> Result<()> {
        self.stdin.write_all(b"quit\n").await?;
        let status = tokio::time::timeout(LONG, self.child.wait()).await??;
        if !status.success() {
            bail!("vncdotool exited with {status}");
        }
        Ok(())
    }
}

/// What the page reported: keys and clicks, in order.
fn reported(site: &Fixture) -> Vec<String> {
    site.events()
        .iter()
        .filter_map(|e| {
            e.get("key")
                .map(|k| format!("key {k}"))
                .or_else(|| e.get("click").map(|c| format!("click {c}")))
        })
        .collect()
}

/// The X pointer position, from an observation under the bot's lease.
async fn cursor(w: &World, c: &str, lease: &str) -> Result<(i64, i64)> {
    let v = w
        .post(
            &format!("/v1/computers/{c}/screens/bot-a/observe"),
            serde_json::json!({ "lease": lease }),
        )
        .await?;
    Ok((
        v["cursor"]["x"].as_i64().unwrap_or(-1),
        v["cursor"]["y"].as_i64().unwrap_or(-1),
    ))
}

/// Saves what the desktop shows (an observation) for a failure message; says where.
async fn keep_screen(w: &World, c: &str, lease: &str) -> String {
    use base64::Engine as _;
    let shot = async {
        let v = w
            .post(
                &format!("/v1/computers/{c}/screens/bot-a/observe"),
                serde_json::json!({ "lease": lease }),
            )
            .await?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v["image"].as_str().unwrap_or_default())?;
        let keep = std::env::temp_dir().join("rakazo-rfb-client-failure.png");
        std::fs::write(&keep, png)?;
        anyhow::Ok(keep)
    };
    match shot.await {
        Ok(path) => format!("the desktop then: {}", path.display()),
        Err(e) => format!("no screenshot: {e}"),
    }
}

/// The bot presses `key` on its own desktop (XTEST, through the API).
async fn bot_key(w: &World, c: &str, lease: &str, key: &str) -> Result<()> {
    w.post(
        &format!("/v1/computers/{c}/screens/bot-a/act"),
        serde_json::json!({ "lease": lease, "actions": [{ "type": "key", "key": key }] }),
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn vncdotool_on_a_view_url_sees_the_screen_and_cannot_inject_and_on_control_it_can(
) -> Result<()> {
    let python = vncdotool_python()?;
    let mut w = World::start().await?;
    let site = Fixture::start().await?;
    let c = w.create_computer("ws-rfb-client").await?;
    let lease = w.lease(&c, "bot-a", "run-page").await?;
    w.post(
        &format!("/v1/computers/{c}/screens/bot-a/ensure"),
        serde_json::json!({ "lease": lease }),
    )
    .await?;
    w.post(
        &format!("/v1/computers/{c}/browser/bot-a/navigate"),
        serde_json::json!({ "lease": lease, "url": site.page("input", PAGE) }),
    )
    .await?;
    // The page takes the keyboard focus; the pointer rests in a corner.
    w.post(
        &format!("/v1/computers/{c}/screens/bot-a/act"),
        serde_json::json!({ "lease": lease, "actions": [
            { "type": "click", "x": 640, "y": 300 }, { "type": "move", "x": 10, "y": 10 }
        ]}),
    )
    .await?;
    wait_for(LONG, "the page's focus click", || {
        (!reported(&site).is_empty()).then_some(())
    })
    .await?;

    // View: the client sees the red page, then the change the bot makes.
    let view = w.screen_url(&c, "bot-a", "view").await?;
    w.add_secret(view.trim_start_matches("/cap/"));
    let mut viewer = VncClient::connect(&python, &w, &view).await?;
    viewer.expect([200, 0, 0]).await?;
    bot_key(&w, &c, &lease, "g").await?;
    if let Err(e) = viewer.expect([0, 160, 0]).await {
        let keep = keep_screen(&w, &c, &lease).await;
        return Err(e.context(format!("the viewer never saw the bot's change ({keep})")));
    }

    // Its pointer, click and keys reach nothing. The bot's own key afterwards is the marker: X
    // delivers input in order, so once the page reported it, anything the viewer's input had
    // caused would have been reported before it.
    viewer.input("vw").await?;
    bot_key(&w, &c, &lease, "m").await?;
    wait_for(LONG, "the bot's marker key", || {
        reported(&site).contains(&"key m".to_string()).then_some(())
    })
    .await?;
    let seen = reported(&site);
    assert_eq!(
        seen[1..],
        ["key g".to_string(), "key m".to_string()],
        "the page saw the viewer's input: {seen:?}"
    );
    assert_eq!(
        cursor(&w, &c, &lease).await?,
        (10, 10),
        "the viewer moved the X pointer"
    );
    viewer.quit().await?;

    // Control: the run asks for a takeover (so the page stays as it is), the user takes it, and
    // the same client's input reaches the page.
    w.take_over_waiting_run(&c, "bot-a", &lease).await?;
    let control = w.screen_url(&c, "bot-a", "control").await?;
    w.add_secret(control.trim_start_matches("/cap/"));
    let mut driver = VncClient::connect(&python, &w, &control).await?;
    if let Err(e) = driver.expect([0, 160, 0]).await {
        let keep = keep_screen(&w, &c, &lease).await;
        return Err(e.context(format!("the controller never saw the page ({keep})")));
    }
    driver.input("cd").await?;
    let (x, y) = CLICK;
    let want = [
        format!("click {x},{y}"),
        "key c".to_string(),
        "key d".to_string(),
    ];
    wait_for(LONG, "the controller's input on the page", || {
        reported(&site).ends_with(&want).then_some(())
    })
    .await
    .with_context(|| format!("the page reported {:?}", reported(&site)))?;
    assert_eq!(cursor(&w, &c, &lease).await?, CLICK);
    driver.quit().await?;
    w.end_takeover(&c, "bot-a", &lease, "success").await?;
    w.check_log()?;
    Ok(())
}
