//! A local fixture web site for browser tests: pages, cookies, and a record of what the
//! browsers sent, so tests check behaviour through the site's own server.
//!
//! Routes: `/set?bot=X` sets a persistent `bot=X` cookie; `/whoami?from=T` records the `Cookie`
//! header under tag `T`; `/event?...` records its query (pages report their state there);
//! `/page/<name>` serves a page registered with [`Fixture::page`]; `/echo` records a form
//! submission (GET query or POST urlencoded body, see [`Fixture::forms`]) and answers a page
//! listing its fields (a field named `password` only as "password: received"). Everything else
//! is 404.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the site saw.
#[derive(Default)]
struct Seen {
    cookies: HashMap<String, Vec<String>>,
    events: Vec<HashMap<String, String>>,
    pages: HashMap<String, String>,
    forms: Vec<Form>,
}

/// A form submission `/echo` received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Form {
    pub method: String,
    pub fields: Vec<(String, String)>,
}

/// A running fixture site on 127.0.0.1.
#[derive(Clone)]
pub struct Fixture {
    pub base: String,
    seen: Arc<Mutex<Seen>>,
}

impl Fixture {
    pub async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let s = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, s.clone()));
            }
        });
        Ok(Self { base, seen })
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a page served at `/page/<name>`.
    pub fn page(&self, name: &str, html: &str) -> String {
        self.seen().pages.insert(name.to_string(), html.to_string());
        format!("{}/page/{name}", self.base)
    }

    /// The Cookie headers seen by `/whoami?from=<tag>`.
    pub fn cookies(&self, tag: &str) -> Option<Vec<String>> {
        self.seen().cookies.get(tag).cloned()
    }

    /// Every form submission `/echo` received, in order.
    pub fn forms(&self) -> Vec<Form> {
        self.seen().forms.clone()
    }

    /// Every `/event` query seen, in order.
    pub fn events(&self) -> Vec<HashMap<String, String>> {
        self.seen().events.clone()
    }
}

async fn serve(mut stream: tokio::net::TcpStream, seen: Arc<Mutex<Seen>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        // One request per connection (we answer Connection: close); headers only.
        let Ok(n) = stream.read(&mut chunk).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.len() > 64 * 1024 {
            break;
        }
    }
    // A body (a POST form): as long as Content-Length says, at most 64 KiB.
    let head_end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(buf.len(), |p| p + 4);
    let length = String::from_utf8_lossy(&buf[..head_end])
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0)
        .min(64 * 1024);
    while buf.len() < head_end + length {
        match tokio::time::timeout(std::time::Duration::from_secs(5), stream.read(&mut chunk)).await
        {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => break,
        }
    }
    let body = String::from_utf8_lossy(&buf[head_end.min(buf.len())..]).to_string();
    let text = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let method = text.split(' ').next().unwrap_or("GET").to_string();
    let mut lines = text.split("\r\n");
    let target = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or("/")
        .to_string();
    let cookie = lines
        .find_map(|l| {
            l.strip_prefix("Cookie: ")
                .or_else(|| l.strip_prefix("cookie: "))
        })
        .unwrap_or("")
        .to_string();
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let q: HashMap<String, String> = form_urlencoded(query);
    let mut headers = vec![
        "Content-Type: text/html; charset=utf-8".to_string(),
        "Cache-Control: no-store".into(),
    ];
    let (status, body) = {
        let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
        match path {
            "/set" => {
                let bot = q.get("bot").cloned().unwrap_or_default();
                headers.push(format!("Set-Cookie: bot={bot}; Max-Age=86400; Path=/"));
                ("200 OK", format!("<html><head><title>set {bot}</title></head><body>cookie set for {bot}</body></html>"))
            }
            "/whoami" => {
                let tag = q.get("from").cloned().unwrap_or_default();
                s.cookies
                    .entry(tag.clone())
                    .or_default()
                    .push(cookie.clone());
                ("200 OK", format!("<html><head><title>whoami {tag}</title></head><body>cookie: [{cookie}]</body></html>"))
            }
            "/echo" => {
                let raw = if method == "POST" {
                    body.as_str()
                } else {
                    query
                };
                let fields = form_pairs(raw);
                s.forms.push(Form {
                    method: method.clone(),
                    fields: fields.clone(),
                });
                ("200 OK", echo_page(&method, &fields))
            }
            "/event" => {
                s.events.push(q.clone());
                ("204 No Content", String::new())
            }
            p if p.starts_with("/page/") => match s.pages.get(&p["/page/".len()..]) {
                Some(html) => ("200 OK", html.clone()),
                None => ("404 Not Found", "no such page".into()),
            },
            "/favicon.ico" => ("404 Not Found", String::new()),
            _ => ("404 Not Found", "not found".into()),
        }
    };
    let mut resp = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for h in headers {
        resp.push_str(&h);
        resp.push_str("\r\n");
    }
    resp.push_str("\r\n");
    resp.push_str(&body);
    let _ = stream.write_all(resp.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// The fields of an urlencoded form, in order.
fn form_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// The page `/echo` answers: its method in the title, one line per field.
fn echo_page(method: &str, fields: &[(String, String)]) -> String {
    let escape = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let items: String = fields
        .iter()
        .map(|(k, v)| match k.as_str() {
            "password" if !v.is_empty() => "<li>password: received</li>".to_string(),
            _ => format!("<li>{}={}</li>", escape(k), escape(v)),
        })
        .collect();
    format!(
        "<!doctype html><html><head><title>Echo {method}</title></head><body>\
         <h1>Received {}</h1><ul>{items}</ul></body></html>",
        fields.len()
    )
}

pub(crate) fn form_urlencoded(q: &str) -> HashMap<String, String> {
    q.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match u8::from_str_radix(&s[i + 1..i + 3], 16) {
                Ok(b) => {
                    out.push(b);
                    i += 2;
                }
                Err(_) => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).to_string()
}
