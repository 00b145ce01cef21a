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

mod forms;
mod safety;
mod server;
mod tabs;
use server::{tls_config, Server};

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
