//! The fixture server the page browser tests load pages from: HTTP/1.1, plain or TLS with a
//! throw-away certificate, on 127.0.0.1:0, recording every request with its body; and the pages
//! it serves.

use super::*;

/// One request the fixture server saw.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub(super) method: String,
    pub(super) path: String,
    pub(super) body: String,
}

/// Local pages over HTTP/1.1, plain or TLS; see [`route`].
pub(super) struct Server {
    pub(super) port: u16,
    tls: bool,
    pub(super) seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    pub(super) fn start(tls: Option<Arc<rustls::ServerConfig>>) -> Result<Self> {
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

    pub(super) fn origin(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    pub(super) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.origin())
    }

    /// Requests whose path starts with `prefix`, in order.
    pub(super) fn seen(&self, prefix: &str) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|s| s.path.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// The paths of the click reports (`/log?click=...`) so far.
    pub(super) fn clicks(&self) -> Vec<String> {
        self.seen("/log?").into_iter().map(|s| s.path).collect()
    }
}

pub(super) fn tls_config() -> Result<Arc<rustls::ServerConfig>> {
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
