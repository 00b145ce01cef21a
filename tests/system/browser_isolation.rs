//! The bots' browsers and displays inside a computer (issue 11), seen from `exec` in a local and
//! a Docker computer with two live desktops: no listening socket answers DevTools (Chrome's
//! DevTools is a pipe only the guest holds), each display refuses an X client without its
//! cookie, the desktop's processes (Xvnc, Chrome) do not run as root, and Chrome lays no
//! warning bar ("unsupported command-line flag: --no-sandbox") over the top of the page.
//!
//! The probes run as a Python script inside the computer (the image ships python3, not curl or
//! xdpyinfo). Listeners are those of the computer's user (`/proc/net/tcp*` owner uid): local
//! computers share the host's network and Docker test computers use host networking, so other
//! users' listeners (the host's, other tests') are not this computer's. The probe proves it can
//! see a DevTools answer by starting a fake `/json/version` endpoint of its own first. A second
//! local computer (another user on the same host) cannot open the bot's DevTools pipe through
//! `/proc/<chrome>/fd` either. Known limit, not asserted: a process of the computer's own user
//! can (Chrome runs as that user and is dumpable), as it can read the profiles in its home.

use anyhow::{ensure, Context, Result};
use base64::Engine;
use hyper::Method;
use std::time::Duration;
use tests::bot::Bot;
use tests::fixture::Fixture;
use tests::live::{connect, Rfb, WsBytes};
use tests::{World, WorldOptions};

const LONG: Duration = Duration::from_secs(30);

/// Run inside the computer: `python3 -c PROBE <display>...`. Prints one JSON object:
/// `{uid, control, checked, devtools, displays: {<n>: [status, reason]}}`.
const PROBE: &str = r#"
import http.server, json, os, socket, sys, threading

class FakeDevTools(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"Browser": "Fake/1", "webSocketDebuggerUrl": "ws://x/devtools/browser/y"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass

control = http.server.HTTPServer(("127.0.0.1", 0), FakeDevTools)
threading.Thread(target=control.serve_forever, daemon=True).start()

def addr_of(hex_addr, v6):
    raw = bytes.fromhex(hex_addr)
    if not v6:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)

def loopback_target(ip, v6):
    if ip in ("0.0.0.0", "::"):
        return "::1" if v6 else "127.0.0.1"
    if ip.startswith("127.") or ip == "::1":
        return ip
    if ip.startswith("::ffff:127."):
        return ip[len("::ffff:"):]
    return None

def devtools_answer(host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect((host, port))
        s.sendall(b"GET /json/version HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        data = b""
        while len(data) < 65536:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
            if b"webSocketDebuggerUrl" in data:
                break
    except OSError:
        return False
    finally:
        s.close()
    return b"webSocketDebuggerUrl" in data

uid = os.getuid()
checked, devtools = [], []
for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
    for line in open(table).read().splitlines()[1:]:
        f = line.split()
        if f[3] != "0A" or int(f[7]) != uid:
            continue
        hex_addr, hex_port = f[1].split(":")
        host = loopback_target(addr_of(hex_addr, v6), v6)
        if host is None:
            continue
        port = int(hex_port, 16)
        checked.append([host, port])
        if devtools_answer(host, port):
            devtools.append(port)

def x_setup(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect("/tmp/.X11-unix/X%d" % n)
        # Little-endian setup request, protocol 11.0, no authorization at all.
        s.sendall(b"l\0" + (11).to_bytes(2, "little") + (0).to_bytes(2, "little") + b"\0\0\0\0\0\0")
        head = b""
        while len(head) < 8:
            chunk = s.recv(8 - len(head))
            if not chunk:
                return ["closed", ""]
            head += chunk
        status, reason_len = head[0], head[1]
        reason = s.recv(reason_len).decode("latin-1") if reason_len else ""
        return [{0: "refused", 1: "accepted", 2: "authenticate"}.get(status, "?"), reason]
    except OSError as e:
        return ["error", str(e)]
    finally:
        s.close()

displays = {a: x_setup(int(a)) for a in sys.argv[1:]}
print(json.dumps({"uid": uid, "control": control.server_address[1], "checked": checked,
                  "devtools": devtools, "displays": displays}))
"#;

/// A page whose whole viewport is one colour.
const GREEN_PAGE: &str = "<!doctype html><html><head><title>green</title></head>\
    <body style=\"margin:0;background:rgb(0,200,0)\"></body></html>";
const GREEN: [u8; 3] = [0, 200, 0];

/// How far down the first page row may be. Chromium's tab strip and toolbar end at row 87 on a
/// 1280x800 desktop; the "--no-sandbox" infobar would push the page down to row 144.
const MAX_PAGE_TOP: usize = 120;

/// Opens a view of `bot`'s screen (through the desktop's Xvnc) and completes the RFB handshake.
async fn view(bot: &Bot<'_>) -> Result<Rfb<WsBytes>> {
    let path = bot.url("view").await?;
    let ws = connect(&bot.w.http, &path).await?;
    Rfb::handshake(WsBytes::new(ws)).await
}

/// The observation's pixels as RGB rows.
fn observed_rgb(obs: &serde_json::Value) -> Result<(usize, usize, Vec<u8>)> {
    let b64 = obs["image"].as_str().context("an observation image")?;
    let png = base64::engine::general_purpose::STANDARD.decode(b64)?;
    let mut reader = png::Decoder::new(std::io::Cursor::new(png)).read_info()?;
    let mut buf = vec![0; reader.output_buffer_size().context("png size")?];
    let info = reader.next_frame(&mut buf)?;
    let channels = info.color_type.samples();
    ensure!(channels >= 3, "an RGB image, got {:?}", info.color_type);
    let (w, h) = (info.width as usize, info.height as usize);
    let rgb = buf[..info.buffer_size()]
        .chunks(channels)
        .flat_map(|p| [p[0], p[1], p[2]])
        .collect();
    Ok((w, h, rgb))
}

/// Whether row `y` is the page colour across the middle 90% of the screen (the window edges
/// may carry a border or a scrollbar).
fn row_is(rgb: &[u8], width: usize, y: usize, colour: [u8; 3]) -> bool {
    let (from, to) = (width / 20, width - width / 20);
    (from..to).all(|x| {
        let i = (y * width + x) * 3;
        rgb[i..i + 3]
            .iter()
            .zip(colour)
            .all(|(&a, b)| a.abs_diff(b) <= 8)
    })
}

/// The first row from the top where the page shows, once the bottom of the screen shows it
/// (so the page has been painted).
async fn page_top(bot: &Bot<'_>) -> Result<(usize, String)> {
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let obs = bot.screen("observe").await?;
        let (w, h, rgb) = observed_rgb(&obs)?;
        if row_is(&rgb, w, h - 10, GREEN) {
            if let Some(top) = (0..h).find(|&y| row_is(&rgb, w, y, GREEN)) {
                let other = (top..h).find(|&y| !row_is(&rgb, w, y, GREEN));
                return Ok((
                    top,
                    format!("{w}x{h}, page from row {top}, first other row below: {other:?}"),
                ));
            }
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the green page was not painted within {LONG:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the probe found inside computer `c` with the desktops on `displays`.
async fn probe(w: &World, c: &str, displays: &[u64]) -> Result<serde_json::Value> {
    let mut argv = vec!["python3".to_string(), "-c".to_string(), PROBE.to_string()];
    argv.extend(displays.iter().map(u64::to_string));
    let out = w.exec(c, serde_json::json!({ "argv": argv })).await?;
    ensure!(
        out.code == Some(0),
        "probe exited {:?}: {}",
        out.code,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// Everything this module checks, on computer `c` (whose provider is `kind`).
async fn check_computer(w: &World, c: &str, kind: &str, fx: &Fixture) -> Result<()> {
    let a = Bot::new(w, c, "bot-a").await?;
    let b = Bot::new(w, c, "bot-b").await?;
    let sa = a.screen("ensure").await?;
    let sb = b.screen("ensure").await?;
    let displays: Vec<u64> = [&sa, &sb]
        .iter()
        .map(|s| s["display"].as_u64().context("a display number"))
        .collect::<Result<_>>()?;
    ensure!(
        sa["browser_pid"].is_u64() && sb["browser_pid"].is_u64(),
        "both browsers run: {sa} {sb}"
    );

    // Which mode Chrome runs in here depends on the machine (user namespaces); report it.
    let pid = sa["browser_pid"].as_u64().unwrap_or_default();
    let cmdline = w
        .sh(c, &format!("tr '\\0' ' ' < /proc/{pid}/cmdline"))
        .await?;
    eprintln!(
        "{kind}: chrome's sandbox is {}",
        if cmdline.contains("--no-sandbox") {
            "off (--no-sandbox --test-type)"
        } else {
            "on"
        }
    );

    // No warning bar: right under the toolbar, the page. A fresh desktop of a fresh bot.
    let green = fx.page("green", GREEN_PAGE);
    a.navigate(&green).await?;
    let (top, seen) = page_top(&a).await?;
    eprintln!("{kind}: {seen}");
    ensure!(
        top <= MAX_PAGE_TOP,
        "{kind}: the page starts at row {top}: something (the --no-sandbox bar?) lies between \
         the toolbar and the page ({seen})"
    );

    // (a) No DevTools on any listening socket of the computer's user; the probe's own fake
    // endpoint shows that it would see one.
    let found = probe(w, c, &displays).await?;
    eprintln!("{kind}: probe {found}");
    let control = found["control"].as_u64().context("control port")?;
    assert_eq!(
        found["devtools"],
        serde_json::json!([control]),
        "{kind}: only the probe's own fake endpoint answers as DevTools: {found}"
    );

    // (b) Every display refuses a client without its cookie: the X server answers, and says no.
    for d in &displays {
        let answer = &found["displays"][d.to_string()];
        assert_eq!(
            answer[0], "refused",
            "{kind}: display :{d} answered {answer}"
        );
    }

    // (c) With a viewer connected, the desktop's processes run as the user, and no x11vnc runs
    // for it (Xvnc serves the view itself).
    let _viewer = view(&a).await?;
    let ps = w.sh(c, "ps -eo user:32=,comm=").await?;
    eprintln!("{kind}: ps\n{ps}");
    let user = w.sh(c, "id -un").await?.trim().to_string();
    assert!(
        !ps.lines()
            .any(|l| l.split_whitespace().next() == Some(user.as_str()) && l.contains("x11vnc")),
        "{kind}: an x11vnc of {user} runs:\n{ps}"
    );
    for (comm, label) in [("Xvnc", "Xvnc"), ("chromium", "Chrome")] {
        let owners: Vec<&str> = ps
            .lines()
            .filter(|l| l.split_whitespace().nth(1) == Some(comm))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        ensure!(!owners.is_empty(), "{kind}: no {label} process in\n{ps}");
        if kind == "docker" {
            // The container's processes are all the computer's.
            assert!(
                owners.iter().all(|o| *o != "root"),
                "{kind}: {label} runs as root:\n{ps}"
            );
        }
        // Local computers share the host's process list with the tests' own processes, so
        // only this computer's user's are asserted to exist.
        assert!(
            owners.contains(&user.as_str()),
            "{kind}: no {label} of {user}:\n{ps}"
        );
    }
    a.screen("release").await?;
    b.screen("release").await?;
    Ok(())
}

/// Run in another computer: `python3 -c PIPE_PROBE <pid>`: tries to open Chrome's DevTools
/// pipe ends through `/proc/<pid>/fd/{3,4}`; prints one JSON object `{"3": .., "4": ..}`.
const PIPE_PROBE: &str = r#"
import errno, json, os, sys
pid = sys.argv[1]
out = {"proc": os.path.isdir("/proc/" + pid)}
for fd, mode in (("3", os.O_WRONLY), ("4", os.O_RDONLY)):
    try:
        os.close(os.open("/proc/%s/fd/%s" % (pid, fd), mode | os.O_NONBLOCK))
        out[fd] = "opened"
    except OSError as e:
        out[fd] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_local_computer_has_no_devtools_port_private_displays_and_no_warning_bar() -> Result<()> {
    let fx = Fixture::start().await?;
    let mut w = World::start().await?;
    let c = w.create_computer("ws-isolation-local").await?;
    check_computer(&w, &c, "local", &fx).await?;

    // Another computer (its own user, its own PID namespace when jailed) cannot reach the bot's
    // DevTools pipe through /proc: jailed, it does not see the process (the pid is the bot's
    // computer's own); unjailed, it sees it and is refused its fds.
    let other = w.create_computer("ws-isolation-neighbour").await?;
    let (uid, other_uid) = (w.sh(&c, "id -u").await?, w.sh(&other, "id -u").await?);
    ensure!(
        uid != other_uid,
        "local computers run as users of their own only under a root control plane"
    );
    let a = Bot::new(&w, &c, "bot-a").await?;
    let pid = a.screen("ensure").await?["browser_pid"]
        .as_u64()
        .context("bot-a's browser pid")?;
    let out = w
        .exec(
            &other,
            serde_json::json!({ "argv": ["python3", "-c", PIPE_PROBE, pid.to_string()] }),
        )
        .await?;
    let seen: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| String::from_utf8_lossy(&out.stderr).into_owned())?;
    eprintln!("local: chrome's pipes from another computer: {seen}");
    for fd in ["3", "4"] {
        assert!(
            matches!(seen[fd].as_str(), Some("EACCES" | "ENOENT")),
            "another computer reached chrome pid {pid}'s devtools pipe: {seen}"
        );
    }
    a.screen("release").await?;
    let shown = w
        .client
        .json(Method::GET, &format!("/v1/computers/{c}"), None)
        .await?;
    assert_eq!(shown["provider"], "local");
    w.check_log()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_docker_computer_has_no_devtools_port_private_displays_and_no_warning_bar() -> Result<()>
{
    let fx = Fixture::start().await?;
    let mut w = World::start_with(WorldOptions {
        providers: Some("docker,local".into()),
        ..Default::default()
    })
    .await?;
    let c = w
        .create_computer_on("ws-isolation-docker", Some("docker"))
        .await?;
    check_computer(&w, &c, "docker", &fx).await?;
    w.check_log()
}
