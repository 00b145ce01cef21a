//! The page browser against real X servers (Xvnc) and Debian's real Chromium (issue 4, "Must show"
//! 1): a signup form filled, selected, ticked and submitted, with the values checked on the
//! server; a password that never shows in a snapshot, a result or a log line (the whole trace
//! log, CDP traffic included, and Chrome's own log); saved-login fills over real HTTPS; a
//! replaced button whose old ref is stale while the server proves nothing was clicked; a
//! covered target refused by name; a 5,000-element page within bounds; the frames note; a
//! page that tampers with globals and prototypes and cannot change a snapshot; URLs refused
//! before any CDP call; stable refs, disabled elements, typing, key presses, navigation and tab
//! selection.
//!
//! Every test starts its own X server (Xvnc) (a random display number base between 31000 and 32500), home and
//! Chrome, and stops them; a panicking test still kills Chrome's process group (Drop). Pages
//! come from a small HTTP/1.1 server (plain, or TLS with a throw-away certificate) on
//! 127.0.0.1:0 that records every request with its body; pages report clicks with synchronous
//! XHRs, so a click's record is on the server before the click's input event is acknowledged.
//! Nothing sleeps to wait for readiness; waits poll with a deadline.

use std::fs;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use gateway_proto::page::{
    PageActFailure, PageStep, Snapshot, DISABLED, FRAMES_NOTE, MAX_ELEMENTS, MAX_TEXT_CHARS,
    NOT_SETTLED, NO_TAB, STALE_REF,
};
use gateway_proto::{BotId, ErrorCode};
use guest_agent::browser::cdp::SessionId;
use guest_agent::browser::{profile_dir, Browser, BrowserOptions, CdpClient};
use guest_agent::display::{DisplayError, DisplayNum, XServer, XServerOptions};
use guest_agent::pagebrowser::PageBrowser;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::time::Instant;

// ---------------------------------------------------------------- logs

/// Every log line of this test process, at trace level for every target (the CDP client traces
/// each message it sends and receives).
#[derive(Clone)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuffer {
    type Writer = LogBuffer;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Installs the capturing subscriber once for the process and returns its buffer.
fn logs() -> &'static LogBuffer {
    static LOGS: OnceLock<LogBuffer> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = LogBuffer(Arc::new(Mutex::new(Vec::new())));
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(buffer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one subscriber per process");
        buffer
    })
}

impl LogBuffer {
    fn contains(&self, needle: &str) -> bool {
        let bytes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

// ---------------------------------------------------------------- fixture server

/// One request the fixture server saw.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    body: String,
}

/// Local pages over HTTP/1.1, plain or TLS; see [`route`].
struct Server {
    port: u16,
    tls: bool,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    fn start(tls: Option<Arc<rustls::ServerConfig>>) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let is_tls = tls.is_some();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let log = Arc::clone(&log);
                let tls = tls.clone();
                std::thread::spawn(move || {
                    let _ = match tls {
                        None => serve(stream, &log),
                        Some(config) => serve_tls(stream, config, &log),
                    };
                });
            }
        });
        Ok(Self {
            port,
            tls: is_tls,
            seen,
        })
    }

    fn origin(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.origin())
    }

    /// Requests whose path starts with `prefix`, in order.
    fn seen(&self, prefix: &str) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|s| s.path.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// The paths of the click reports (`/log?click=...`) so far.
    fn clicks(&self) -> Vec<String> {
        self.seen("/log?").into_iter().map(|s| s.path).collect()
    }
}

fn tls_config() -> Result<Arc<rustls::ServerConfig>> {
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])?;
    let cert = ck.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(vec![cert], key)?;
    Ok(Arc::new(config))
}

fn serve_tls(
    tcp: TcpStream,
    config: Arc<rustls::ServerConfig>,
    seen: &Mutex<Vec<Seen>>,
) -> io::Result<()> {
    let conn = rustls::ServerConnection::new(config).map_err(io::Error::other)?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    handle(&mut tls, seen)?;
    tls.conn.send_close_notify();
    tls.flush()
}

fn serve(mut tcp: TcpStream, seen: &Mutex<Vec<Seen>>) -> io::Result<()> {
    handle(&mut tcp, seen)?;
    tcp.flush()
}

fn handle<S: Read + Write>(stream: &mut S, seen: &Mutex<Vec<Seen>>) -> io::Result<()> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 64 * 1024 {
            return Ok(());
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut first = head.split("\r\n").next().unwrap_or("").split(' ');
    let method = first.next().unwrap_or("GET").to_owned();
    let path = first.next().unwrap_or("/").to_owned();
    let length: usize = head
        .split("\r\n")
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
        .min(1 << 20);
    let mut body = buf.split_off(head_end);
    while body.len() < length {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let body = String::from_utf8_lossy(&body).into_owned();
    seen.lock().unwrap_or_else(|e| e.into_inner()).push(Seen {
        method: method.clone(),
        path: path.clone(),
        body,
    });
    if path == "/stall" {
        // A document that stays "loading": half the body, then a long pause.
        let head = "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\
                    Cache-Control: no-store\r\nConnection: close\r\n\r\n\
                    <title>stall</title><p>partial";
        stream.write_all(head.as_bytes())?;
        stream.flush()?;
        std::thread::sleep(Duration::from_secs(14));
        return stream.write_all(b" and the rest</p>");
    }
    if let Some(ms) = path.strip_prefix("/slow/") {
        let ms: u64 = ms.parse().unwrap_or(0).min(10_000);
        std::thread::sleep(Duration::from_millis(ms));
    }
    let (status, page) = route(&method, &path);
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\n\
         Content-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{page}",
        page.len()
    );
    stream.write_all(response.as_bytes())
}

/// Reports a click to the server with a synchronous XHR: the record is on the server before
/// the click handler returns.
const LOG_SCRIPT: &str = "<script>function log(w){const x=new XMLHttpRequest();\
    x.open('GET','/log?'+w,false);x.send();}</script>";

const SIGNUP: &str = r#"<!doctype html><meta charset="utf-8"><title>Sign up</title>
<h1>Create your account</h1>
<form method="post" action="/signup">
<p><label>Full name <input name="name"></label></p>
<p><label>Email <input name="email" type="email"></label></p>
<p><label>Password <input name="password" type="password"></label></p>
<p><label>Country <select name="country"><option value="">Choose one</option>
<option value="fr">France</option><option value="de">Germany</option>
<option value="jp">Japan</option></select></label></p>
<p><label><input type="checkbox" name="terms" value="yes"> I accept the terms</label></p>
<p><button type="submit">Create account</button></p>
</form>"#;

const LOGIN: &str = r#"<!doctype html><meta charset="utf-8"><title>Log in</title>
<h1>Log in</h1>
<form method="post" action="/login">
<p><label>Username <input name="username"></label></p>
<p><label>Password <input name="password" type="password"></label></p>
<p><button type="submit">Log in</button></p>
</form>"#;

const OFFERS: &str = r#"<!doctype html><meta charset="utf-8"><title>Offers</title>
<h1>Today's offer</h1>
<div id="slot"><button onclick="log('click=old-buy')">Buy</button></div>
<p><button onclick="refresh()">Refresh offers</button>
<button onclick="this.style.display='none'">Hide me</button></p>
<p><button disabled onclick="log('click=pay')">Pay</button>
<span role="button" tabindex="0" aria-disabled="true" onclick="log('click=archive')">Archive</span></p>
<p><a href="/page/next">Next page</a></p>
<script>function refresh(){const b=document.createElement('button');b.textContent='Buy';
b.onclick=()=>log('click=new-buy');document.getElementById('slot').replaceChildren(b);}</script>"#;

const OVERLAY: &str = r#"<!doctype html><meta charset="utf-8"><title>Account</title>
<h1>Account</h1>
<p><button onclick="log('click=delete')">Delete account</button></p>
<div id="consent" class="modal cookie" onclick="log('click=overlay')"
 style="position:fixed;inset:0;background:rgba(0,0,0,.4)">
<div style="background:#fff;margin:200px auto;width:320px;padding:20px">We value your privacy
<button onclick="event.stopPropagation();document.getElementById('consent').remove()">Accept</button>
</div></div>"#;

const FRAMES: &str = r#"<!doctype html><meta charset="utf-8"><title>Frames</title>
<p>Outer text</p><iframe src="/page/inner" width="400" height="200"></iframe>"#;

const HIDDEN_FRAME: &str = r#"<!doctype html><meta charset="utf-8"><title>Hidden frame</title>
<p>Outer text</p><iframe src="/page/inner" style="display:none"></iframe>"#;

const SEARCH: &str = r#"<!doctype html><meta charset="utf-8"><title>Search</title>
<form onsubmit="event.preventDefault();document.getElementById('out').textContent=
'searched: '+document.getElementById('q').value+' keys: '+keys">
<input id="q" aria-label="Query" onkeydown="keys++"></form>
<p id="out">nothing yet</p><script>let keys=0;</script>"#;

const SETTINGS_BODY: &str = r#"<h1>Settings</h1><p>Profile details for <b>Ada</b></p>
<p><label>Nickname <input name="nick" value="ada"></label></p>
<p><label>Secret <input name="pin" type="password" value="4321"></label></p>
<p style="display:none"><button>Invisible</button></p>
<p><a href="/page/help">Help</a> <button>Save</button></p>"#;

const WIDGETS: &str = r#"<!doctype html><meta charset="utf-8"><title>Widgets</title>
<p>Light text</p>
<fancy-card><span slot="title">Slotted title</span></fancy-card>
<div contenteditable="true" aria-label="Notes">old note</div>
<p><label>Code <input oninput="this.value=this.value.toUpperCase()"></label></p>
<script>customElements.define('fancy-card', class extends HTMLElement {
  constructor() { super(); const r = this.attachShadow({mode: 'open'});
    r.innerHTML = '<h2><slot name="title"></slot></h2><p>Shadow text</p><button>Shadow button</button>';
    r.querySelector('button').onclick = () => log('click=shadow'); } });</script>"#;

/// A page script that redefines globals named like the helper's methods and patches every
/// prototype the helper uses, in the page's own world.
const TAMPER_SCRIPT: &str = r#"<script>
for (const n of ['probe','snapshot','prepareClick','fill','sealBegin','sealFill','select',
  'focusForTyping','waitReady','helper','rakazo','__rakazo']) window[n] = () => ({hacked: true});
const zero = () => ({x:0,y:0,width:0,height:0,top:0,left:0,right:0,bottom:0});
Element.prototype.getBoundingClientRect = zero;
Element.prototype.getClientRects = () => [];
Element.prototype.checkVisibility = () => false;
Element.prototype.closest = () => document.body;
Element.prototype.matches = () => true;
Element.prototype.getAttribute = () => 'HACKED';
Document.prototype.querySelectorAll = Element.prototype.querySelectorAll = () => [];
Object.defineProperty(HTMLElement.prototype, 'innerText', {get() { return 'HACKED'; }});
Object.defineProperty(Document.prototype, 'title', {get() { return 'HACKED'; }});
Object.defineProperty(Document.prototype, 'visibilityState', {get() { return 'hidden'; }});
Object.defineProperty(HTMLInputElement.prototype, 'value', {get() { return 'HACKED'; }, set(v) {}});
Document.prototype.hasFocus = () => false;
JSON.stringify = () => '"HACKED"';
Array.prototype.map = function () { return ['HACKED']; };
Array.from = () => ['HACKED'];
String.prototype.replace = function () { return 'HACKED'; };
String.prototype.trim = function () { return 'HACKED'; };
window.WeakMap = function () { throw new Error('no'); };
window.WeakRef = function () { throw new Error('no'); };
Map.prototype.get = () => undefined;
</script>"#;

/// A catalog with `n` interactive elements: `n / 2` rows of a link and a button.
fn catalog(n: usize) -> String {
    let mut page = String::from(
        "<!doctype html><meta charset=\"utf-8\"><title>Catalog</title><h1>Catalog</h1><ul>",
    );
    for i in 1..=n / 2 {
        page.push_str(&format!(
            "<li><a href=\"/item/{i}\">Item {i} details</a> <span>In stock, ships in {d} days</span> \
             <button>Add {i} to cart</button></li>",
            d = i % 7 + 1
        ));
    }
    page.push_str("</ul>");
    page
}

fn route(method: &str, path: &str) -> (&'static str, String) {
    let ok = |body: String| ("200 OK", body);
    let (path_only, query) = path.split_once('?').unwrap_or((path, ""));
    match (method, path_only) {
        ("GET", "/signup") => ok(SIGNUP.to_owned()),
        ("POST", "/signup") => ok("<title>Welcome</title><p>Account created</p>".to_owned()),
        ("GET", "/login") => ok(LOGIN.to_owned()),
        ("POST", "/login") => ok("<title>Logged in</title><p>Hello again</p>".to_owned()),
        ("GET", "/offers") => ok(format!("{LOG_SCRIPT}{OFFERS}")),
        ("GET", "/overlay") => ok(format!("{LOG_SCRIPT}{OVERLAY}")),
        ("GET", "/frames") => ok(FRAMES.to_owned()),
        ("GET", "/hidden-frame") => ok(HIDDEN_FRAME.to_owned()),
        ("GET", "/search") => ok(SEARCH.to_owned()),
        ("GET", "/widgets") => ok(format!("{LOG_SCRIPT}{WIDGETS}")),
        ("GET", "/hang") => ok(format!(
            "{LOG_SCRIPT}<title>Hang</title><button onclick=\"log('click=freeze');for(;;){{}}\">\
             Freeze</button> <button onclick=\"log('click=after')\">After</button>"
        )),
        ("GET", "/slow-image") => ok(
            "<title>Slow image</title><p>Text first</p><img src=\"/slow/8000\" alt=\"late\">"
                .to_owned(),
        ),
        ("GET", "/settings") => {
            let script = if query == "clean" { "" } else { TAMPER_SCRIPT };
            ok(format!(
                "<!doctype html><meta charset=\"utf-8\"><title>Settings</title>{script}{SETTINGS_BODY}"
            ))
        }
        ("GET", "/catalog") => ok(catalog(query.parse().unwrap_or(5000).min(20_000))),
        ("GET", "/log") => ok(String::new()),
        ("GET", "/opener") => ok(
            "<title>Opener</title><button onclick=\"window.open('/popup')\">Open popup</button>"
                .to_owned(),
        ),
        ("GET", "/popup") => ok(
            "<title>Popup</title><button onclick=\"window.close()\">Close me</button>".to_owned(),
        ),
        ("GET", p) if p.starts_with("/page/") || p.starts_with("/slow/") => {
            let name = p.rsplit('/').next().unwrap_or("page");
            ok(format!("<title>{name}</title><p>This is {name}</p>"))
        }
        _ => ("404 Not Found", "not found".to_owned()),
    }
}

// ---------------------------------------------------------------- desktop

/// Display numbers for this test process: a random base away from the other suites' ranges.
fn next_display() -> DisplayNum {
    static NEXT: OnceLock<AtomicU16> = OnceLock::new();
    let next = NEXT.get_or_init(|| AtomicU16::new(31_000 + rand::random::<u16>() % 1_500));
    DisplayNum::new(next.fetch_add(1, Ordering::Relaxed)).expect("display number in range")
}

/// An X server, a home, a Chrome showing `first_url`, and a page browser for it.
struct Env {
    xserver: XServer,
    runtime: tempfile::TempDir,
    _home: tempfile::TempDir,
    browser: Browser,
    pages: PageBrowser,
}

impl Env {
    async fn start(first_url: &str) -> Result<Self> {
        Self::start_with(first_url, &[]).await
    }

    /// Starts Chrome with `extra_flags` added (through a wrapper script, since the browser
    /// module's command line is fixed).
    async fn start_with(first_url: &str, extra_flags: &[&str]) -> Result<Self> {
        logs();
        let runtime = tempfile::tempdir()?;
        fs::set_permissions(runtime.path(), fs::Permissions::from_mode(0o700))?;
        let mut xserver = None;
        for _ in 0..20 {
            match XServer::start(next_display(), runtime.path(), &XServerOptions::default()).await {
                Ok(x) => {
                    xserver = Some(x);
                    break;
                }
                Err(DisplayError::InUse { .. } | DisplayError::ExitedEarly { .. }) => continue,
                Err(error) => return Err(error).context("starting the x server"),
            }
        }
        let xserver = xserver.context("no free display number in 20 tries")?;
        let home = tempfile::tempdir()?;
        let bot = BotId::new("page-bot").expect("valid bot id");
        let mut opts = BrowserOptions::new(
            profile_dir(home.path(), &bot),
            home.path().to_path_buf(),
            xserver.display_env(),
            xserver.xauthority().to_path_buf(),
            runtime.path().to_path_buf(),
        );
        opts.first_url = Some(first_url.to_owned());
        if !extra_flags.is_empty() {
            opts.chromium = wrapper(runtime.path(), extra_flags)?;
        }
        let browser = Browser::start(&opts).await.context("starting chrome")?;
        Ok(Self {
            xserver,
            runtime,
            _home: home,
            browser,
            pages: PageBrowser::new(),
        })
    }

    fn ws(&self) -> CdpClient {
        self.browser.cdp()
    }

    async fn navigate(&mut self, url: &str) -> Result<Snapshot> {
        let ws = self.ws();
        self.pages
            .navigate(&ws, url)
            .await
            .map_err(|e| anyhow::anyhow!("navigate {url}: {e:?}"))
    }

    async fn snapshot(&mut self) -> Result<Snapshot> {
        let ws = self.ws();
        self.pages
            .snapshot(&ws)
            .await
            .map_err(|e| anyhow::anyhow!("snapshot: {e:?}"))
    }

    async fn act(&mut self, steps: &[PageStep]) -> Result<Result<Snapshot, PageActFailure>> {
        let ws = self.ws();
        self.pages
            .act(&ws, steps)
            .await
            .map_err(|e| anyhow::anyhow!("act: {e:?}"))
    }

    async fn act_ok(&mut self, steps: &[PageStep]) -> Result<Snapshot> {
        match self.act(steps).await? {
            Ok(s) => Ok(s),
            Err(f) => bail!("act {steps:?} failed: {f:?}"),
        }
    }

    /// Chrome's own log so far.
    fn chrome_log(&self) -> String {
        fs::read_to_string(self.browser.log_path()).unwrap_or_default()
    }

    async fn stop(mut self) -> Result<()> {
        drop(self.pages);
        self.browser.stop().await?;
        self.xserver.stop().await?;
        drop(self.runtime);
        Ok(())
    }
}

/// A script that runs Debian's Chromium with extra flags; `exec` keeps the pid.
fn wrapper(dir: &Path, flags: &[&str]) -> Result<PathBuf> {
    let path = dir.join("chromium-wrapper");
    let script = format!(
        "#!/bin/sh\nexec /usr/bin/chromium {} \"$@\"\n",
        flags.join(" ")
    );
    fs::write(&path, script)?;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o700))?;
    Ok(path)
}

// ---------------------------------------------------------------- snapshot helpers

/// The ref of the element with `role` and `name`.
fn find(s: &Snapshot, role: &str, name: &str) -> Result<String> {
    s.elements
        .iter()
        .find(|e| e.role == role && e.name == name)
        .map(|e| e.element.clone())
        .with_context(|| format!("no {role} {name:?} in {:#?}", s.elements))
}

fn value_of<'a>(s: &'a Snapshot, element: &str) -> Result<&'a str> {
    s.elements
        .iter()
        .find(|e| e.element == element)
        .map(|e| e.value.as_str())
        .with_context(|| format!("{element} not in the snapshot"))
}

fn ref_number(element: &str) -> u64 {
    element[1..].parse().expect("refs are e<N>")
}

fn click(element: &str) -> PageStep {
    PageStep::Click {
        element: element.to_owned(),
    }
}

fn fill(element: &str, text: &str) -> PageStep {
    PageStep::Fill {
        element: element.to_owned(),
        text: text.to_owned(),
        origin: None,
    }
}

fn failure(result: Result<Snapshot, PageActFailure>) -> Result<PageActFailure> {
    match result {
        Ok(s) => bail!("the act succeeded: {}", s.tree),
        Err(f) => Ok(f),
    }
}

// ---------------------------------------------------------------- tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn urls_and_batches_are_refused_before_any_cdp_call() -> Result<()> {
    // A connection whose browser end is already closed: any CDP call fails.
    let (_, to_browser) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (from_browser, _) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let closed = CdpClient::from_pipes(to_browser, from_browser)?;
    let ws = &closed;
    let mut pages = PageBrowser::new();
    for (url, message) in [
        (
            "file:///etc/passwd",
            "only http and https URLs can be opened",
        ),
        (
            "javascript:alert(1)",
            "only http and https URLs can be opened",
        ),
        ("http://user:pw@host/", "URLs with credentials are refused"),
        ("https://u@host/", "URLs with credentials are refused"),
    ] {
        let err = pages.navigate(ws, url).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::BadRequest, "{url}: {err:?}");
        assert_eq!(err.message, message, "{url}");
    }
    for (steps, message) in [
        (vec![], "browser_act takes 1..=24 steps"),
        (vec![click("e1"), click("button")], "step 2: \"button\" is not an element ref like e12"),
        (
            vec![click("e1"), PageStep::Press { key: "Hyper+x".into() }],
            "step 2: unknown key \"Hyper+x\"; use a key name like Enter, Tab, ArrowDown or one character",
        ),
        (
            vec![PageStep::Fill {
                element: "e1".into(),
                text: "pw".into(),
                origin: Some("https://a.test/login".into()),
            }],
            "step 1: \"https://a.test/login\" is not an https origin",
        ),
    ] {
        let err = pages.act(ws, &steps).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::BadRequest, "{steps:?}: {err:?}");
        assert_eq!(err.message, message);
    }
    // The control: a valid request does reach for the closed connection.
    let err = pages.navigate(ws, "http://127.0.0.1:9/").await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Failed);
    assert!(
        err.message
            .contains("the devtools connection to the browser is closed"),
        "{err:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signup_form_is_filled_and_submitted_and_the_password_never_shows() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/start")).await?;
    const PASSWORD: &str = "Zq8-unique-signup-secret";
    let logged_before = logs().len();

    let form = env.navigate(&server.url("/signup")).await?;
    assert_eq!(form.title, "Sign up");
    let name = find(&form, "textbox", "Full name")?;
    let email = find(&form, "textbox", "Email")?;
    let password = find(&form, "textbox", "Password")?;
    let country = find(&form, "combobox", "Country")?;
    let terms = find(&form, "checkbox", "I accept the terms")?;
    let submit = find(&form, "button", "Create account")?;
    assert_eq!(value_of(&form, &country)?, "Choose one");
    assert_eq!(value_of(&form, &terms)?, "unchecked");

    let filled = env
        .act_ok(&[
            fill(&name, "Ada Lovelace"),
            fill(&email, "ada@example.test"),
            fill(&password, PASSWORD),
            PageStep::Select {
                element: country.clone(),
                value: "Germany".into(),
            },
            click(&terms),
        ])
        .await?;
    assert_eq!(value_of(&filled, &name)?, "Ada Lovelace");
    assert_eq!(value_of(&filled, &email)?, "ada@example.test");
    assert_eq!(value_of(&filled, &password)?, "", "a password never shows");
    assert_eq!(value_of(&filled, &country)?, "Germany");
    assert_eq!(value_of(&filled, &terms)?, "checked");
    assert!(filled.tree.contains(&format!(
        "- textbox \"Full name\" [{name}] value=\"Ada Lovelace\""
    )));
    assert!(filled
        .tree
        .contains(&format!("- textbox \"Password\" [{password}]\n")));

    let submitted = env.act(&[click(&submit)]).await?;
    let welcome = submitted.as_ref().map_err(|f| anyhow::anyhow!("{f:?}"))?;
    assert_eq!(welcome.title, "Welcome");
    assert!(welcome.tree.contains("Account created"));
    let posts = server.seen("/signup");
    let post = posts
        .iter()
        .find(|s| s.method == "POST")
        .context("the form was posted")?;
    assert_eq!(
        post.body,
        format!(
            "name=Ada+Lovelace&email=ada%40example.test&password={PASSWORD}&country=de&terms=yes"
        )
    );

    // The password is nowhere but on the server: not in any snapshot or result (Debug shows
    // every field), not in any log line of this process (CDP traffic included), not in
    // Chrome's log.
    let shown = format!("{form:?}{filled:?}{submitted:?}");
    assert!(!shown.contains(PASSWORD));
    assert!(logs().len() > logged_before, "the trace log is captured");
    assert!(!logs().contains(PASSWORD), "the password is in a log line");
    assert!(!env.chrome_log().contains(PASSWORD));
    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saved_login_fill_needs_https_and_the_exact_origin() -> Result<()> {
    let https = Server::start(Some(tls_config()?))?;
    let http = Server::start(None)?;
    // The certificate is self-signed; only this test's Chrome is told to accept it.
    let mut env =
        Env::start_with(&https.url("/page/start"), &["--ignore-certificate-errors"]).await?;
    const USER: &str = "ada-unique-user-7731";
    const SECRET: &str = "pw-unique-saved-login-9902";
    let saved = |element: &str, text: &str, origin: &str| PageStep::Fill {
        element: element.to_owned(),
        text: text.to_owned(),
        origin: Some(origin.to_owned()),
    };

    // An HTTP page is refused, even for its own origin spelled as https.
    let plain = env.navigate(&http.url("/login")).await?;
    let user = find(&plain, "textbox", "Username")?;
    let http_as_https = http.origin().replace("http://", "https://");
    let refused = failure(env.act(&[saved(&user, USER, &http_as_https)]).await?)?;
    assert_eq!((refused.completed, refused.uncertain), (0, false));
    assert!(
        refused.error.starts_with("Saved login refused"),
        "{refused:?}"
    );

    let form = env.navigate(&https.url("/login")).await?;
    let user = find(&form, "textbox", "Username")?;
    let password = find(&form, "textbox", "Password")?;
    let submit = find(&form, "button", "Log in")?;
    // Another origin is refused before anything is filled.
    let refused = failure(
        env.act(&[saved(&user, USER, "https://example.test")])
            .await?,
    )?;
    assert_eq!((refused.completed, refused.uncertain), (0, false));
    assert_eq!(
        refused.error,
        "Saved login refused: the page is not an HTTPS page of https://example.test"
    );
    assert_eq!(value_of(&env.snapshot().await?, &user)?, "");

    // The exact origin (spelled with a trailing slash and capitals) is accepted; the filled
    // username is masked like a password from then on.
    let origin = format!(
        "{}/",
        https.origin().to_uppercase().replace("HTTPS", "https")
    );
    let filled = env
        .act_ok(&[
            saved(&user, USER, &origin),
            saved(&password, SECRET, &origin),
        ])
        .await?;
    assert_eq!(value_of(&filled, &user)?, "");
    assert_eq!(value_of(&filled, &password)?, "");
    let done = env.act_ok(&[click(&submit)]).await?;
    assert_eq!(done.title, "Logged in");
    let post = https
        .seen("/login")
        .into_iter()
        .find(|s| s.method == "POST")
        .context("the login was posted")?;
    assert_eq!(post.body, format!("username={USER}&password={SECRET}"));
    let shown = format!("{plain:?}{form:?}{filled:?}{done:?}");
    for secret in [USER, SECRET] {
        assert!(!shown.contains(secret));
        assert!(!logs().contains(secret), "{secret} is in a log line");
        assert!(!env.chrome_log().contains(secret));
    }
    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refs_are_stable_and_never_retarget_a_replaced_button() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/start")).await?;
    let first = env.navigate(&server.url("/offers")).await?;
    let buy = find(&first, "button", "Buy")?;
    let refresh = find(&first, "button", "Refresh offers")?;
    let hide = find(&first, "button", "Hide me")?;
    let pay = find(&first, "button", "Pay")?;
    let archive = find(&first, "button", "Archive")?;
    let next = find(&first, "link", "Next page")?;

    // The same live elements keep their refs.
    let again = env.snapshot().await?;
    assert_eq!(again.elements, first.elements);

    // The page replaces the button with an identical one: the old ref is stale, nothing is
    // clicked (neither the old button nor its look-alike), even after a step that succeeded.
    let replaced = env.act_ok(&[click(&refresh)]).await?;
    let new_buy = find(&replaced, "button", "Buy")?;
    assert_ne!(new_buy, buy);
    let first_highest = first.elements.iter().map(|e| ref_number(&e.element)).max();
    assert!(
        Some(ref_number(&new_buy)) > first_highest,
        "new elements get new numbers"
    );
    let stale = failure(env.act(&[click(&buy)]).await?)?;
    assert_eq!(
        (stale.completed, stale.uncertain, stale.error.as_str()),
        (0, false, STALE_REF)
    );
    let stale = failure(env.act(&[click(&refresh), click(&buy)]).await?)?;
    assert_eq!(
        (stale.completed, stale.uncertain, stale.error.as_str()),
        (1, false, STALE_REF)
    );
    assert_eq!(server.clicks(), Vec::<String>::new(), "nothing was clicked");
    // That refresh replaced the look-alike too.
    let stale = failure(env.act(&[click(&new_buy)]).await?)?;
    assert_eq!(stale.error, STALE_REF);
    let new_buy = find(&env.snapshot().await?, "button", "Buy")?;

    // Unknown refs are stale too; disabled elements say so and are not clicked.
    let unknown = failure(env.act(&[click("e999999")]).await?)?;
    assert_eq!(unknown.error, STALE_REF);
    for element in [&pay, &archive] {
        let disabled = failure(env.act(&[click(element)]).await?)?;
        assert_eq!(
            (
                disabled.completed,
                disabled.uncertain,
                disabled.error.as_str()
            ),
            (0, false, DISABLED)
        );
    }
    assert_eq!(server.clicks(), Vec::<String>::new());

    // A hidden element's ref is stale.
    env.act_ok(&[click(&hide)]).await?;
    let hidden = failure(env.act(&[click(&hide)]).await?)?;
    assert_eq!(hidden.error, STALE_REF);

    // The look-alike is clickable through its own ref (the positive control).
    env.act_ok(&[click(&new_buy)]).await?;
    assert_eq!(server.clicks(), ["/log?click=new-buy"]);

    // A click that navigates returns the new page; refs of the old document are stale, and
    // the new page's refs are new numbers.
    let highest = ref_number(&new_buy);
    let landed = env.act_ok(&[click(&next)]).await?;
    assert_eq!(landed.title, "next");
    let stale = failure(env.act(&[click(&new_buy)]).await?)?;
    assert_eq!(stale.error, STALE_REF);
    let back = env.navigate(&server.url("/offers")).await?;
    for e in &back.elements {
        assert!(ref_number(&e.element) > highest, "{} reused", e.element);
    }
    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_covered_target_is_refused_naming_the_overlay() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/start")).await?;
    let page = env.navigate(&server.url("/overlay")).await?;
    let delete = find(&page, "button", "Delete account")?;
    let accept = find(&page, "button", "Accept")?;

    let covered = failure(env.act(&[click(&delete)]).await?)?;
    assert_eq!((covered.completed, covered.uncertain), (0, false));
    assert_eq!(
        covered.error,
        "Element is covered by div#consent.modal.cookie \"We value your privacy Accept\"; \
         the click was not sent"
    );
    assert_eq!(
        server.clicks(),
        Vec::<String>::new(),
        "neither the target nor the overlay was clicked"
    );

    // Once the overlay is gone, the same ref clicks.
    env.act_ok(&[click(&accept), click(&delete)]).await?;
    assert_eq!(server.clicks(), ["/log?click=delete"]);
    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5000_element_page_stays_within_bounds() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/start")).await?;
    let big = env.navigate(&server.url("/catalog?5000")).await?;
    assert_eq!(big.elements.len(), MAX_ELEMENTS);
    // Elements on screen come first: the catalog's first rows.
    assert_eq!(big.elements[0].name, "Item 1 details");
    assert_eq!(big.elements[1].name, "Add 1 to cart");
    let text = big
        .tree
        .split("\n- ")
        .next()
        .context("the tree starts with text")?;
    // The text is cut (at a line break, marked) to keep the whole snapshot within its budget.
    assert!(text.chars().count() <= MAX_TEXT_CHARS);
    assert!(text.chars().count() > 4_000, "the text is cut, not dropped");
    assert!(text.ends_with("to cart…"), "{}", &text[text.len() - 80..]);
    assert!(text.starts_with("Catalog\nItem 1 details In stock"));
    let lines = big.tree.lines().filter(|l| l.starts_with("- ")).count();
    assert_eq!(lines, MAX_ELEMENTS);
    assert!(
        big.tree.len() <= 16 * 1024,
        "tree is {} bytes",
        big.tree.len()
    );

    let mut times = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        let s = env.snapshot().await?;
        times.push(started.elapsed());
        assert_eq!(s.elements, big.elements, "refs are stable");
    }
    times.sort();
    eprintln!(
        "5,000-element snapshot (debug build): median {:?}, tree {} bytes",
        times[times.len() / 2],
        big.tree.len()
    );
    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn visible_frames_add_the_note() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/start")).await?;
    let framed = env.navigate(&server.url("/frames")).await?;
    assert_eq!(framed.tree, format!("Outer text\n{FRAMES_NOTE}"));
    // A frame that is not rendered shows nothing and gets no note.
    let hidden = env.navigate(&server.url("/hidden-frame")).await?;
    assert_eq!(hidden.tree, "Outer text");
    let plain = env.navigate(&server.url("/page/plain")).await?;
    assert!(!plain.tree.contains(FRAMES_NOTE));
    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_globals_and_prototype_tampering_do_not_change_a_snapshot() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/start")).await?;
    let clean = env.navigate(&server.url("/settings?clean")).await?;
    let tampered = env.navigate(&server.url("/settings")).await?;
    assert_eq!(tampered.title, clean.title);
    assert_eq!(tampered.title, "Settings");
    // Same elements with new refs: compare everything but the refs.
    let strip = |s: &Snapshot| {
        let mut tree = s.tree.clone();
        for e in &s.elements {
            tree = tree.replace(&format!("[{}]", e.element), "[ref]");
        }
        let elements: Vec<_> = s
            .elements
            .iter()
            .map(|e| {
                (
                    e.role.clone(),
                    e.name.clone(),
                    e.value.clone(),
                    e.tag.clone(),
                )
            })
            .collect();
        (tree, elements)
    };
    assert_eq!(strip(&tampered), strip(&clean));
    assert_eq!(
        strip(&clean).0,
        "Settings\nProfile details for Ada\nNickname\nSecret\nHelp Save\n\
         - textbox \"Nickname\" [ref] value=\"ada\"\n- textbox \"Secret\" [ref]\n\
         - link \"Help\" [ref]\n- button \"Save\" [ref]"
    );
    // Acting works through the patched prototypes too (the page's value setter is a no-op).
    let nick = find(&tampered, "textbox", "Nickname")?;
    let after = env.act_ok(&[fill(&nick, "grace")]).await?;
    assert_eq!(value_of(&after, &nick)?, "grace");
    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_click_that_hangs_the_page_is_uncertain_and_the_page_can_be_left() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/start")).await?;
    let page = env.navigate(&server.url("/hang")).await?;
    let freeze = find(&page, "button", "Freeze")?;
    let after = find(&page, "button", "After")?;
    // The click reaches the page (its handler reports, then spins forever), but its input event
    // is never acknowledged: sent, not confirmed, so uncertain; the next step never runs.
    let hung = failure(env.act(&[click(&freeze), click(&after)]).await?)?;
    assert_eq!((hung.completed, hung.uncertain), (0, true), "{hung:?}");
    assert!(
        hung.error
            .starts_with("The click was sent but not confirmed"),
        "{hung:?}"
    );
    assert_eq!(server.clicks(), ["/log?click=freeze"]);
    // The hung tab cannot answer the visibility probe, but it is the only tab: navigating to
    // another site (a new renderer process) gets the agent out.
    let away = format!("http://localhost:{}/page/away", server.port);
    let left = env.navigate(&away).await?;
    assert_eq!(left.title, "away");
    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_roots_editables_and_unconfirmed_fills() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/start")).await?;
    let page = env.navigate(&server.url("/widgets")).await?;
    // Open shadow roots are part of the text (slotted content in place) and of the elements.
    assert!(
        page.tree
            .starts_with("Light text\nSlotted title\nShadow text\nShadow button\n"),
        "{}",
        page.tree
    );
    let shadow = find(&page, "button", "Shadow button")?;
    let notes = find(&page, "textbox", "Notes")?;
    let code = find(&page, "textbox", "Code")?;
    assert_eq!(value_of(&page, &notes)?, "old note");

    // A fill the page rewrites (upper case) is not confirmed: the page saw the events, so the
    // failure is uncertain, and the rest of the batch does not run.
    let rewritten = failure(env.act(&[fill(&code, "abc"), click(&shadow)]).await?)?;
    assert_eq!(
        (rewritten.completed, rewritten.uncertain),
        (0, true),
        "{rewritten:?}"
    );
    assert_eq!(
        rewritten.error,
        "The field did not keep the filled value; take a fresh snapshot"
    );
    assert_eq!(server.clicks(), Vec::<String>::new(), "nothing replayed");

    let after = env
        .act_ok(&[fill(&notes, "new note"), click(&shadow)])
        .await?;
    assert_eq!(value_of(&after, &notes)?, "new note");
    assert_eq!(value_of(&after, &code)?, "ABC");
    assert_eq!(server.clicks(), ["/log?click=shadow"]);
    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_and_key_presses_are_real_key_events() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/start")).await?;
    let page = env.navigate(&server.url("/search")).await?;
    let query = find(&page, "textbox", "Query")?;
    let done = env
        .act_ok(&[
            PageStep::Type {
                element: query.clone(),
                text: "héllo wörld".into(),
            },
            PageStep::Press {
                key: "Enter".into(),
            },
        ])
        .await?;
    // 11 characters and Enter: 12 keydown events, and Enter submitted the form.
    assert!(
        done.tree.contains("searched: héllo wörld keys: 12"),
        "{}",
        done.tree
    );
    // Selecting all and typing over it replaces the text.
    let replaced = env
        .act_ok(&[
            PageStep::Press {
                key: "Control+a".into(),
            },
            PageStep::Type {
                element: query.clone(),
                text: "x".into(),
            },
        ])
        .await?;
    assert_eq!(
        value_of(&replaced, &query)?,
        "héllo wörldx",
        "typing puts the caret at the end"
    );
    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn navigate_waits_for_the_new_document_and_reports_failures() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/start")).await?;
    // A slow server: the snapshot is of the new document, never the old one.
    let slow = env.navigate(&server.url("/slow/700")).await?;
    assert_eq!(slow.title, "700");
    assert_eq!(slow.url, server.url("/slow/700"));
    // Interactive is enough: an image that loads for 8 s does not hold the navigation up.
    let started = Instant::now();
    let early = env.navigate(&server.url("/slow-image")).await?;
    assert_eq!(early.tree, "Text first");
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    // A document still loading after 10 s has not settled.
    let started = Instant::now();
    let err = env.navigate(&server.url("/stall")).await.unwrap_err();
    let waited = started.elapsed();
    assert!(format!("{err:#}").contains(NOT_SETTLED), "{err:#}");
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_secs(14),
        "{waited:?}"
    );
    // A same-document navigation keeps the document, so its refs.
    let search = env.navigate(&server.url("/search")).await?;
    let moved = env.navigate(&server.url("/search#results")).await?;
    assert_eq!(moved.url, server.url("/search#results"));
    assert_eq!(moved.elements, search.elements);
    let closed = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let err = env
        .navigate(&format!("http://127.0.0.1:{closed}/"))
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("net::ERR_CONNECTION_REFUSED"),
        "{err:#}"
    );

    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tab_selection_follows_visibility_and_focus() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/one")).await?;
    env.navigate(&server.url("/page/one")).await?;

    // A second tab in the window becomes the visible one (the first is hidden) and is chosen.
    let cdp = env.browser.cdp();
    cdp.open_tab(&server.url("/page/second")).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = env.snapshot().await;
        if s.as_ref().is_ok_and(|s| s.title == "second") {
            break;
        }
        if Instant::now() >= deadline {
            bail!("the new tab was not chosen: {s:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A second window: two visible tabs. The test's own sessions pin which of them has focus
    // (focus emulation lasts as long as the session that set it).
    let t = Duration::from_secs(10);
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Created {
        target_id: String,
    }
    let created: Created = cdp
        .call(
            "Target.createTarget",
            None,
            &serde_json::json!({ "url": server.url("/page/third"), "newWindow": true }),
            t,
        )
        .await?;
    let third = cdp.attach(&created.target_id).await?;
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Targets {
        target_infos: Vec<Target>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Target {
        target_id: String,
        url: String,
    }
    let targets: Targets = cdp
        .call("Target.getTargets", None, &serde_json::json!({}), t)
        .await?;
    let second = targets
        .target_infos
        .iter()
        .find(|target| target.url.ends_with("/page/second"))
        .map(|target| target.target_id.clone());
    let second = cdp.attach(&second.context("the second tab")?).await?;
    let focus = |session: SessionId, enabled: bool| {
        let cdp = cdp.clone();
        async move {
            cdp.call::<_, serde_json::Value>(
                "Emulation.setFocusEmulationEnabled",
                Some(&session),
                &serde_json::json!({ "enabled": enabled }),
                Duration::from_secs(10),
            )
            .await
        }
    };
    // The new window has the focus: the single focused visible tab is chosen (once it loaded).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = env.snapshot().await;
        if s.as_ref().is_ok_and(|s| s.title == "third") {
            break;
        }
        if Instant::now() >= deadline {
            bail!("the new window's tab was not chosen: {s:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Both visible tabs focused: ambiguous, so refused.
    focus(second.clone(), true).await?;
    let err = env.pages.snapshot(&env.ws()).await.unwrap_err();
    assert_eq!(
        (err.code, err.message.as_str()),
        (ErrorCode::Failed, NO_TAB)
    );
    let steps = [PageStep::Press { key: "Tab".into() }];
    let err = env.pages.act(&env.ws(), &steps).await.unwrap_err();
    assert_eq!(err.message, NO_TAB, "act refuses before any step");
    let err = env
        .pages
        .navigate(&env.ws(), &server.url("/page/x"))
        .await
        .unwrap_err();
    assert_eq!(err.message, NO_TAB);
    // Focus back on the third tab alone: chosen again.
    focus(second.clone(), false).await?;
    focus(third.clone(), true).await?;
    assert_eq!(env.snapshot().await?.title, "third");
    cdp.detach(&second);
    cdp.detach(&third);
    env.stop().await
}

/// Snapshots until one shows the tab titled `title`, up to 10 s (a tab the page just opened or
/// closed becomes the visible one a moment later).
async fn snapshot_of(env: &mut Env, title: &str) -> Result<Snapshot> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = env.snapshot().await;
        match s {
            Ok(s) if s.title == title => return Ok(s),
            _ if Instant::now() >= deadline => bail!("no snapshot of {title:?}: {s:?}"),
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_follow_tabs_the_page_opens_and_closes_from_target_events() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/opener")).await?;
    env.navigate(&server.url("/opener")).await?;
    let cdp = env.ws();

    // One tab, its world in place: a snapshot is one CDP command (the tab comes from the target
    // events, its visibility back with the snapshot).
    let sent = cdp.commands_sent();
    let opener = env.snapshot().await?;
    assert_eq!(opener.title, "Opener");
    assert_eq!(cdp.commands_sent() - sent, 1, "commands of a warm snapshot");

    // The page opens a tab, which becomes the visible one: the snapshot follows it.
    env.act_ok(&[click(&find(&opener, "button", "Open popup")?)])
        .await?;
    let popup = snapshot_of(&mut env, "Popup").await?;

    // The popup closes itself: the snapshot is the opener's again. The act may fail or not
    // (its tab went away under it); what counts is what the next snapshots see.
    let _ = env
        .act(&[click(&find(&popup, "button", "Close me")?)])
        .await;
    snapshot_of(&mut env, "Opener").await?;
    // And the closed tab is forgotten: one tab again, one command per snapshot.
    let sent = cdp.commands_sent();
    assert_eq!(env.snapshot().await?.title, "Opener");
    assert_eq!(
        cdp.commands_sent() - sent,
        1,
        "commands of a warm snapshot after the popup closed"
    );
    env.stop().await
}
