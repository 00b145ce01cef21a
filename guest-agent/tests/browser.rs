//! The browser module against real X servers (Xvnc) and Debian's real Chromium: CDP readiness over
//! the DevTools pipe (and no DevTools port anywhere), the command line of docs/screens.md#chrome
//! with ours, the sandbox decision, a dead Chrome failing pending calls at once, clean stops,
//! cookies that survive a restart, profile isolation, stale and live `SingletonLock`s, crash
//! detection, session restore, and a stop that escalates to SIGKILL when Chrome answers nothing.
//!
//! Every test starts its own X server (Xvnc) (a random display number base, 21000 and up) and its own home,
//! and stops everything it started; a panicking test still kills Chrome's process group (Drop).
//! Pages come from a tiny HTTP/1.1 fixture server on 127.0.0.1:0 that records the `Cookie`
//! header of every request. Nothing sleeps to wait for readiness: Chrome's start is awaited by
//! `Browser::start`, everything else is polled in short intervals up to a deadline. Chrome's
//! start time prints with `--nocapture`.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use gateway_proto::BotId;
use guest_agent::browser::{
    profile_dir, Browser, BrowserError, BrowserOptions, CdpError, Sandbox, StopOutcome,
    DEVTOOLS_ACTIVE_PORT, SINGLETON_COOKIE, SINGLETON_LOCK, SINGLETON_SOCKET,
};
use guest_agent::display::{DisplayError, DisplayNum, XServer, XServerOptions};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Display numbers for this test process: a random base away from the display tests' range, then
/// sequential so the tests of one run never meet.
fn next_display() -> DisplayNum {
    static NEXT: OnceLock<AtomicU16> = OnceLock::new();
    let next = NEXT.get_or_init(|| AtomicU16::new(21_000 + rand::random::<u16>() % 10_000));
    DisplayNum::new(next.fetch_add(1, Ordering::Relaxed)).expect("display number in range")
}

/// An X server with its private runtime directory (which also holds Chrome's log).
struct Desktop {
    xserver: XServer,
    runtime: tempfile::TempDir,
}

impl Desktop {
    async fn start() -> Result<Self> {
        let runtime = tempfile::tempdir()?;
        fs::set_permissions(runtime.path(), fs::Permissions::from_mode(0o700))?;
        for _ in 0..20 {
            match XServer::start(next_display(), runtime.path(), &XServerOptions::default()).await {
                Ok(xserver) => return Ok(Self { xserver, runtime }),
                // Another process holds that number; take the next one.
                Err(DisplayError::InUse { .. } | DisplayError::ExitedEarly { .. }) => continue,
                Err(error) => return Err(error).context("starting the x server"),
            }
        }
        bail!("no free display number in 20 tries")
    }

    /// Options for `bot`'s Chrome on this display, with its profile in `home`.
    fn options(&self, home: &Path, bot: &str) -> BrowserOptions {
        let bot = BotId::new(bot).expect("valid bot id");
        BrowserOptions::new(
            profile_dir(home, &bot),
            home.to_path_buf(),
            self.xserver.display_env(),
            self.xserver.xauthority().to_path_buf(),
            self.runtime.path().to_path_buf(),
        )
    }

    async fn stop(mut self) -> Result<()> {
        self.xserver.stop().await?;
        Ok(())
    }
}

/// One request the fixture server saw.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    cookie: Option<String>,
}

/// Local pages: `/set/<v>` sets the persistent cookie `bot=<v>`, `/echo/<tag>` echoes the
/// `Cookie` header into the page, `/page/<name>` is a plain page titled `<name>`.
struct Fixture {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

impl Fixture {
    async fn start() -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, Arc::clone(&log)));
            }
        });
        Ok(Self { port, seen, task })
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The `Cookie` headers of every request for `path`, in order.
    fn cookies_for(&self, path: &str) -> Vec<Option<String>> {
        self.seen
            .lock()
            .expect("fixture log")
            .iter()
            .filter(|s| s.path == path)
            .map(|s| s.cookie.clone())
            .collect()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut stream: TcpStream, seen: Arc<Mutex<Vec<Seen>>>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.len() > 64 * 1024 {
            return;
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or("/")
        .to_owned();
    let cookie = lines.find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("cookie")
            .then(|| value.trim().to_owned())
    });
    seen.lock().expect("fixture log").push(Seen {
        path: path.clone(),
        cookie: cookie.clone(),
    });
    let (status, extra, body) = if let Some(value) = path.strip_prefix("/set/") {
        (
            "200 OK",
            format!("Set-Cookie: bot={value}; Max-Age=86400; Path=/\r\n"),
            format!("<title>set {value}</title>cookie set"),
        )
    } else if path.starts_with("/echo/") {
        let cookie = cookie.unwrap_or_default().replace('<', "&lt;");
        (
            "200 OK",
            String::new(),
            format!("<title>echo</title><pre id=cookie>{cookie}</pre>"),
        )
    } else if let Some(name) = path.strip_prefix("/page/") {
        (
            "200 OK",
            String::new(),
            format!("<title>{name}</title>{name}"),
        )
    } else {
        ("404 Not Found", String::new(), "not found".to_owned())
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\n\
         Content-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n{extra}\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// The URLs of the browser's page targets, asked over its CDP pipe.
async fn tab_urls(browser: &Browser) -> Result<Vec<String>> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Targets {
        target_infos: Vec<Target>,
    }
    #[derive(serde::Deserialize)]
    struct Target {
        #[serde(rename = "type")]
        kind: String,
        url: String,
    }
    let targets: Targets = browser
        .cdp()
        .call(
            "Target.getTargets",
            None,
            &serde_json::json!({}),
            Duration::from_secs(10),
        )
        .await?;
    Ok(targets
        .target_infos
        .into_iter()
        .filter(|t| t.kind == "page")
        .map(|t| t.url)
        .collect())
}

/// The inodes of the TCP sockets listening on this machine (`/proc/net/tcp` and `tcp6`).
fn listening_socket_inodes() -> Result<Vec<String>> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        for line in fs::read_to_string(table)?.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(3) == Some(&"0A") {
                if let Some(inode) = fields.get(9) {
                    inodes.push((*inode).to_owned());
                }
            }
        }
    }
    Ok(inodes)
}

/// What the fds of `pid` point to (`pipe:[123]`, `socket:[456]`, paths).
fn fd_targets(pid: i32) -> Vec<(i32, String)> {
    let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| {
            let e = e.ok()?;
            let fd = e.file_name().to_str()?.parse().ok()?;
            let target = fs::read_link(e.path()).ok()?;
            Some((fd, target.to_string_lossy().into_owned()))
        })
        .collect()
}

/// Pids of every process whose command line mentions `profile` (Chrome passes
/// `--user-data-dir` to all its children).
fn processes_of(profile: &Path) -> Vec<i32> {
    let needle = profile.to_string_lossy().into_owned();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let zombie = fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .map(|(_, r)| r.trim_start().starts_with('Z'))
                })
                .unwrap_or(true);
            !zombie && String::from_utf8_lossy(&cmdline).contains(&needle)
        })
        .collect()
}

fn singletons_in(profile: &Path) -> Vec<String> {
    [SINGLETON_LOCK, SINGLETON_COOKIE, SINGLETON_SOCKET]
        .into_iter()
        .filter(|name| fs::symlink_metadata(profile.join(name)).is_ok())
        .map(str::to_owned)
        .collect()
}

/// Asserts that nothing of `profile`'s Chrome runs and its lock files are gone.
fn assert_gone(profile: &Path) {
    assert_eq!(
        processes_of(profile),
        Vec::<i32>::new(),
        "chrome processes left"
    );
    assert_eq!(
        singletons_in(profile),
        Vec::<String>::new(),
        "singleton files left"
    );
}

/// Polls `check` every 20 ms until it returns `Some` or `timeout` passes.
async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            bail!("{what}: not within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts Chrome and checks that CDP answers, printing how long both took.
async fn start_checked(opts: &BrowserOptions, label: &str) -> Result<Browser> {
    let started = Instant::now();
    let browser = Browser::start(opts).await.context("starting chrome")?;
    let product = browser.cdp().version(Duration::from_secs(10)).await?;
    ensure!(product.starts_with("Chrome/"), "{product}");
    eprintln!(
        "{label}: chrome pid {} until cdp answered: {:?} (start() returned after {:?})",
        browser.pid(),
        browser.startup_time(),
        started.elapsed()
    );
    Ok(browser)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_with_the_contract_flags_and_stops_through_browser_close() -> Result<()> {
    let desktop = Desktop::start().await?;
    let home = tempfile::tempdir()?;
    let opts = desktop.options(home.path(), "flags-bot");
    let mut browser = start_checked(&opts, "cold start").await?;
    let pid = browser.pid();

    // The exact flags of docs/screens.md#chrome, each as one argument.
    let cmdline = fs::read(format!("/proc/{pid}/cmdline"))?;
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let user_data_dir = format!("--user-data-dir={}", opts.profile.to_string_lossy());
    let mut expected = vec![
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-session-crashed-bubble",
        "--hide-crash-restore-bubble",
        "--password-store=basic",
        "--restore-last-session",
        &user_data_dir,
        "--remote-debugging-pipe",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-features=Translate,MediaRouter",
        "--no-pings",
        "--window-position=0,0",
        "--window-size=1280,800",
        "--start-maximized",
    ];
    // As root (where these tests run) Chrome cannot use its sandbox; as another user it does
    // wherever user namespaces work. Without it, `--test-type` keeps the warning bar away.
    let sandboxed = *browser.sandbox() == Sandbox::On;
    assert_eq!(sandboxed, opts.sandbox == Sandbox::On);
    if nix::unistd::geteuid().is_root() {
        assert!(!sandboxed, "chrome refuses its sandbox as root");
    }
    if !sandboxed {
        expected.extend(["--no-sandbox", "--test-type"]);
    }
    let expected: Vec<String> = expected.into_iter().map(str::to_owned).collect();
    for flag in &expected {
        assert!(
            args.iter().any(|a| a == flag),
            "{flag} missing from {args:?}"
        );
    }
    assert_eq!(
        args.iter().any(|a| a == "--no-sandbox"),
        !sandboxed,
        "{args:?}"
    );
    assert!(
        !args.iter().any(|a| a.starts_with("--remote-debugging-port")
            || a.starts_with("--remote-debugging-address")),
        "no devtools port: {args:?}"
    );
    let profile_mode = fs::metadata(&opts.profile)?.permissions().mode() & 0o777;
    assert_eq!(profile_mode, 0o700);

    // DevTools is a pipe: Chrome's fds 3 and 4 are pipes, no process of its group listens on
    // any TCP port, and no DevToolsActivePort announces one.
    let fds = fd_targets(pid);
    for n in [3, 4] {
        let target = fds.iter().find(|(fd, _)| *fd == n).map(|(_, t)| t.as_str());
        assert!(
            target.is_some_and(|t| t.starts_with("pipe:")),
            "fd {n}: {target:?}"
        );
    }
    let listening = listening_socket_inodes()?;
    for member in processes_of(&opts.profile) {
        for (fd, target) in fd_targets(member) {
            let inode = target
                .strip_prefix("socket:[")
                .and_then(|t| t.strip_suffix(']'));
            assert!(
                !inode.is_some_and(|i| listening.iter().any(|l| l == i)),
                "pid {member} fd {fd} listens on tcp"
            );
        }
    }
    assert!(!opts.profile.join(DEVTOOLS_ACTIVE_PORT).exists());

    // The environment is ours alone: display, cookie file and home, nothing of the agent's.
    let environ = fs::read(format!("/proc/{pid}/environ"))?;
    let env: Vec<String> = environ
        .split(|&b| b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect();
    let has = |kv: String| env.contains(&kv);
    assert!(
        has(format!("DISPLAY={}", desktop.xserver.display_env())),
        "{env:?}"
    );
    assert!(has(format!(
        "XAUTHORITY={}",
        desktop.xserver.xauthority().display()
    )));
    assert!(has(format!("HOME={}", home.path().display())));
    assert!(
        !env.iter()
            .any(|kv| kv.starts_with("RAKAZO_") || kv.starts_with("CARGO")),
        "{env:?}"
    );

    assert!(browser.is_alive());
    assert!(!processes_of(&opts.profile).is_empty());
    let stopping = Instant::now();
    let outcome = browser.stop().await?;
    eprintln!("stop through Browser.close took {:?}", stopping.elapsed());
    assert_eq!(outcome, StopOutcome::BrowserClose);
    assert!(!browser.is_alive());
    assert_gone(&opts.profile);
    assert!(opts.profile.join("Default").is_dir(), "the profile is kept");
    // Chrome's crash handlers leave the process group (they daemonize) but name the home in
    // their crash database path; they follow the browser out on their own.
    eventually("crash handlers exit", Duration::from_secs(10), || {
        let left = processes_of(home.path());
        async move { left.is_empty().then_some(()) }
    })
    .await?;
    assert_eq!(
        browser.stop().await?,
        StopOutcome::BrowserClose,
        "idempotent"
    );
    desktop.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookies_survive_a_clean_restart() -> Result<()> {
    let fixture = Fixture::start().await?;
    let desktop = Desktop::start().await?;
    let home = tempfile::tempdir()?;
    let opts = desktop.options(home.path(), "cookie-bot");

    let mut browser = start_checked(&opts, "cold start").await?;
    browser.cdp().open_tab(&fixture.url("/set/alpha")).await?;
    assert_eq!(browser.stop().await?, StopOutcome::BrowserClose);
    assert_gone(&opts.profile);

    let mut browser = start_checked(&opts, "warm start").await?;
    browser
        .cdp()
        .open_tab(&fixture.url("/echo/after-restart"))
        .await?;
    assert_eq!(
        fixture.cookies_for("/echo/after-restart"),
        [Some("bot=alpha".to_owned())]
    );
    assert_eq!(browser.stop().await?, StopOutcome::BrowserClose);
    assert_gone(&opts.profile);
    desktop.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_bots_profiles_are_independent() -> Result<()> {
    let fixture = Fixture::start().await?;
    let (desktop_a, desktop_b) = tokio::try_join!(Desktop::start(), Desktop::start())?;
    let home = tempfile::tempdir()?;
    let opts_a = desktop_a.options(home.path(), "bot-a");
    let opts_b = desktop_b.options(home.path(), "bot-b");
    assert_ne!(opts_a.profile, opts_b.profile);

    let (mut a, mut b) = tokio::try_join!(
        start_checked(&opts_a, "bot a"),
        start_checked(&opts_b, "bot b")
    )?;
    let (cdp_a, cdp_b) = (a.cdp(), b.cdp());
    assert!(!cdp_a.same_connection(&cdp_b));
    cdp_a.open_tab(&fixture.url("/set/alpha")).await?;
    cdp_b.open_tab(&fixture.url("/echo/b-before")).await?;
    cdp_b.open_tab(&fixture.url("/set/beta")).await?;
    cdp_a.open_tab(&fixture.url("/echo/a")).await?;
    cdp_b.open_tab(&fixture.url("/echo/b")).await?;
    drop((cdp_a, cdp_b));
    assert_eq!(fixture.cookies_for("/echo/b-before"), [None]);
    assert_eq!(
        fixture.cookies_for("/echo/a"),
        [Some("bot=alpha".to_owned())]
    );
    assert_eq!(
        fixture.cookies_for("/echo/b"),
        [Some("bot=beta".to_owned())]
    );

    let (outcome_a, outcome_b) = tokio::try_join!(a.stop(), b.stop())?;
    assert_eq!(
        (outcome_a, outcome_b),
        (StopOutcome::BrowserClose, StopOutcome::BrowserClose)
    );
    assert_gone(&opts_a.profile);
    assert_gone(&opts_b.profile);
    tokio::try_join!(desktop_a.stop(), desktop_b.stop())?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_singleton_lock_is_removed_and_a_live_one_refuses() -> Result<()> {
    let desktop = Desktop::start().await?;
    let home = tempfile::tempdir()?;
    let opts = desktop.options(home.path(), "lock-bot");
    let profile = opts.profile.clone();
    fs::create_dir_all(&profile)?;
    let host = fs::read_to_string("/proc/sys/kernel/hostname")?
        .trim()
        .to_owned();
    let lock = profile.join(SINGLETON_LOCK);

    // A lock naming a live process on this host (ours) refuses, and is left alone.
    let me = i32::try_from(std::process::id())?;
    symlink(format!("{host}-{me}"), &lock)?;
    let err = Browser::start(&opts)
        .await
        .expect_err("a live lock must refuse");
    assert!(
        matches!(err, BrowserError::ProfileInUse { pid, .. } if pid == me),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        format!("profile {} is in use by pid {me}", profile.display())
    );
    assert_eq!(fs::read_link(&lock)?, PathBuf::from(format!("{host}-{me}")));
    assert_eq!(processes_of(&profile), Vec::<i32>::new());

    // A lock naming a dead pid is stale: removed with its cookie and socket links.
    let dead = 999_999;
    assert!(
        kill(Pid::from_raw(dead), None).is_err(),
        "pid {dead} must be free"
    );
    fs::remove_file(&lock)?;
    symlink(format!("{host}-{dead}"), &lock)?;
    symlink("4242424242", profile.join(SINGLETON_COOKIE))?;
    symlink(
        "/tmp/org.chromium.Chromium.gone/SingletonSocket",
        profile.join(SINGLETON_SOCKET),
    )?;
    let mut browser = start_checked(&opts, "after a stale lock").await?;
    let holder = fs::read_link(&lock)?;
    assert_eq!(holder, PathBuf::from(format!("{host}-{}", browser.pid())));
    assert_eq!(browser.stop().await?, StopOutcome::BrowserClose);
    assert_gone(&profile);

    // A live pid on another host is stale too: the home moved here.
    symlink(format!("another-host-{me}"), &lock)?;
    let mut browser = start_checked(&opts, "after a foreign host's lock").await?;
    assert_eq!(browser.stop().await?, StopOutcome::BrowserClose);
    assert_gone(&profile);

    // A live pid that started long after the lock was written is a reused pid (a restarted
    // container hands out the same pids): stale.
    symlink(format!("{host}-{me}"), &lock)?;
    let long_ago = nix::sys::time::TimeVal::new(1_000_000_000, 0);
    nix::sys::stat::lutimes(&lock, &long_ago, &long_ago)?;
    let mut browser = start_checked(&opts, "after a reused pid's lock").await?;
    assert_eq!(browser.stop().await?, StopOutcome::BrowserClose);
    assert_gone(&profile);
    desktop.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_chrome_is_noticed_and_cleaned_up() -> Result<()> {
    let desktop = Desktop::start().await?;
    let home = tempfile::tempdir()?;
    let opts = desktop.options(home.path(), "crash-bot");
    let mut browser = start_checked(&opts, "cold start").await?;
    assert!(browser.is_alive());

    // A call that Chrome will never answer, pending when it dies, fails at once with the
    // closed connection (not at its ten-minute timeout), and so does every later call.
    let cdp = browser.cdp();
    let pending = tokio::spawn(async move {
        cdp.call::<_, serde_json::Value>(
            "Runtime.evaluate",
            None,
            &serde_json::json!({}),
            Duration::from_secs(600),
        )
        .await
    });
    kill(Pid::from_raw(browser.pid()), Signal::SIGSTOP)?;
    kill(Pid::from_raw(browser.pid()), Signal::SIGKILL)?;
    let error = tokio::time::timeout(Duration::from_secs(30), pending)
        .await
        .context("the pending call did not end with chrome")??
        .expect_err("a dead chrome answers nothing");
    assert!(matches!(error, CdpError::Closed), "{error:?}");
    assert_eq!(
        error.to_string(),
        "the devtools connection to the browser is closed"
    );
    let later = browser.cdp().version(Duration::from_secs(600)).await;
    assert!(matches!(later, Err(CdpError::Closed)), "{later:?}");
    eventually("is_alive turns false", Duration::from_secs(10), || {
        let alive = browser.is_alive();
        async move { (!alive).then_some(()) }
    })
    .await?;
    assert_eq!(browser.stop().await?, StopOutcome::AlreadyExited);
    assert_gone(&opts.profile);

    // The profile starts again after the crash, keeping the crashed run's log.
    let mut browser = start_checked(&opts, "after a crash").await?;
    let mut previous_log = opts.log_path().into_os_string();
    previous_log.push(".1");
    assert!(Path::new(&previous_log).is_file(), "{previous_log:?}");
    assert_eq!(browser.stop().await?, StopOutcome::BrowserClose);
    assert_gone(&opts.profile);
    desktop.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_browser_restores_its_tabs() -> Result<()> {
    let fixture = Fixture::start().await?;
    let desktop = Desktop::start().await?;
    let home = tempfile::tempdir()?;
    let opts = desktop.options(home.path(), "session-bot");
    let (one, two) = (fixture.url("/page/one"), fixture.url("/page/two"));

    let mut browser = start_checked(&opts, "cold start").await?;
    let cdp = browser.cdp();
    cdp.open_tab(&one).await?;
    cdp.open_tab(&two).await?;
    drop(cdp);
    assert_eq!(browser.stop().await?, StopOutcome::BrowserClose);
    assert_gone(&opts.profile);

    // Restart with a first URL: it opens beside the restored tabs.
    let three = fixture.url("/page/three");
    let mut reopen = opts.clone();
    reopen.first_url = Some(three.clone());
    let mut browser = start_checked(&reopen, "restart").await?;
    let restored = eventually("both tabs restored", Duration::from_secs(15), || async {
        let urls = tab_urls(&browser).await.ok()?;
        let has = |url: &str| urls.iter().any(|u| u == url);
        (has(&one) && has(&two) && has(&three)).then_some(urls)
    })
    .await;
    let stopped = browser.stop().await;
    restored?;
    assert_eq!(stopped?, StopOutcome::BrowserClose);
    assert_gone(&opts.profile);
    desktop.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unresponsive_chrome_is_escalated_to_sigkill() -> Result<()> {
    let desktop = Desktop::start().await?;
    let home = tempfile::tempdir()?;
    let mut opts = desktop.options(home.path(), "frozen-bot");
    opts.stop_grace = Duration::from_secs(1);
    let mut browser = start_checked(&opts, "cold start").await?;

    // A stopped browser process answers neither CDP nor SIGTERM; only SIGKILL ends it.
    kill(Pid::from_raw(browser.pid()), Signal::SIGSTOP)?;
    let stopping = Instant::now();
    let outcome = browser.stop().await;
    eprintln!("escalated stop took {:?}", stopping.elapsed());
    assert_eq!(outcome?, StopOutcome::Killed);
    assert!(!browser.is_alive());
    assert_gone(&opts.profile);
    desktop.stop().await
}
