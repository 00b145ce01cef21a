//! Part 4 of `bench_desktop`: the built `rakazo serve` and `rakazo-guest` it runs, and
//! computer_observe and the acts measured through their API.

use super::*;

/// One running `rakazo serve` in its own data dir, with one local computer.
pub(super) struct Server {
    data_dir: tempfile::TempDir,
    pub(super) child: Child,
    pub(super) client: Client,
    nodelay: NoDelayClient,
    pub(super) computer: String,
    /// Desktop processes seen (pid, command line), killed at the end if they outlive the stop.
    seen: Vec<(i32, String)>,
    /// Every execution lease taken, `(bot, lease)`: released before the stop, which refuses to
    /// checkpoint a home under held leases.
    leases: std::sync::Mutex<Vec<(String, String)>>,
}

impl Server {
    pub(super) async fn start(bin_dir: &Path) -> Result<Self> {
        let rakazo = bin_dir.join("rakazo");
        let guest = bin_dir.join("rakazo-guest");
        for b in [&rakazo, &guest] {
            ensure!(
                b.exists(),
                "{} is missing: cargo build --release -p control-plane -p guest-agent -p tests --bins",
                b.display()
            );
        }
        let data_dir = tempfile::Builder::new()
            .prefix("rakazo-bench-desk-")
            .tempdir()?;
        // The bench's dir: `data/` (the server's, 0700) and `computers/` (local computers' root,
        // which their users pass through).
        std::fs::set_permissions(
            data_dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o711),
        )?;
        let log = std::fs::File::create(data_dir.path().join("server.log"))?;
        let child = Command::new(&rakazo)
            .arg("serve")
            .env_clear()
            .env("PATH", PATH)
            .env("RAKAZO_DATA_DIR", data_dir.path().join("data"))
            // Local computers run as users of their own, outside the (0700) data dir.
            .env("RAKAZO_LOCAL_ROOT", data_dir.path().join("computers"))
            .env("RAKAZO_HTTP_ADDR", "127.0.0.1:0")
            .env("RAKAZO_TUNNEL_ADDR", "127.0.0.1:0")
            .env("RAKAZO_GUEST_BIN", &guest)
            // Jailed, on this host's network (as the system tests): the bench's pages and
            // anchors are on its loopback.
            .env("RAKAZO_LOCAL_CONTAINMENT", "host-network")
            .env("RAKAZO_LOG", "info")
            .env("RAKAZO_GUEST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("start rakazo serve")?;
        // From here on, Drop cleans up whatever happens next.
        let mut server = Server {
            data_dir,
            child,
            client: Client::new("http://127.0.0.1:1", Secret::new("")),
            nodelay: NoDelayClient::new("http://127.0.0.1:1", ""),
            computer: String::new(),
            seen: Vec::new(),
            leases: std::sync::Mutex::new(Vec::new()),
        };
        let addresses = server.data_dir.path().join("data/addresses.json");
        let text = wait_for(Duration::from_secs(30), "addresses.json", || {
            std::fs::read_to_string(&addresses).ok()
        })
        .await?;
        let v: serde_json::Value = serde_json::from_str(&text)?;
        let http = v["http"]
            .as_str()
            .ok_or_else(|| anyhow!("no http address in {text}"))?;
        let token = std::fs::read_to_string(server.data_dir.path().join("data/api-token"))?;
        let token = token.trim();
        server.client = Client::new(http, Secret::new(token.to_string()));
        server.nodelay = NoDelayClient::new(http, token);
        // Creating a computer returns once its guest has dialed in.
        let created = server
            .client
            .json(
                Method::POST,
                "/v1/computers",
                Some(&serde_json::json!({ "workspace": "bench-desktops" })),
            )
            .await?;
        server.computer = created["id"]
            .as_str()
            .ok_or_else(|| anyhow!("no id in {created}"))?
            .to_string();
        Ok(server)
    }

    fn home(&self) -> PathBuf {
        self.data_dir
            .path()
            .join("computers")
            .join(&self.computer)
            .join("home")
    }

    pub(super) fn guest_pid(&self) -> Result<i32> {
        // The X server inherits the guest's environment, so RAKAZO_HOME alone is not enough.
        let pids: Vec<i32> = pids_with_env("RAKAZO_HOME", &self.home().display().to_string())
            .into_iter()
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == "rakazo-guest")
            })
            .collect();
        match pids.as_slice() {
            [pid] => Ok(*pid),
            other => bail!("expected one guest process, found {other:?}"),
        }
    }

    async fn post(&self, path: &str, body: serde_json::Value) -> Result<serde_json::Value> {
        Ok(self.client.json(Method::POST, path, Some(&body)).await?)
    }

    async fn lease(&self, bot: &str) -> Result<String> {
        let v = self
            .post(
                &format!("/v1/computers/{}/leases/{bot}/acquire", self.computer),
                serde_json::json!({ "owner": format!("bench-{bot}"), "ttl_ms": LEASE_TTL_MS }),
            )
            .await?;
        let lease = v["lease"]
            .as_str()
            .ok_or_else(|| anyhow!("no lease in {v}"))?
            .to_string();
        self.leases
            .lock()
            .map_err(|_| anyhow!("lease list poisoned"))?
            .push((bot.to_string(), lease.clone()));
        Ok(lease)
    }

    /// Releases every lease [`Server::lease`] took (the runs are over).
    async fn release_leases(&self) -> Result<()> {
        let leases = std::mem::take(
            &mut *self
                .leases
                .lock()
                .map_err(|_| anyhow!("lease list poisoned"))?,
        );
        for (bot, lease) in leases {
            self.post(
                &format!("/v1/computers/{}/leases/{bot}/release", self.computer),
                serde_json::json!({ "lease": lease, "outcome": "success" }),
            )
            .await
            .with_context(|| format!("release the lease of {bot}"))?;
        }
        Ok(())
    }

    fn screen_path(&self, bot: &str, action: &str) -> String {
        format!("/v1/computers/{}/screens/{bot}/{action}", self.computer)
    }

    /// The computer's desktop processes: the guest's descendants, and processes whose command
    /// line names the data dir (Chrome helpers that re-parented themselves).
    pub(super) fn desktop_processes(&mut self) -> Result<Vec<Proc>> {
        let guest = self.guest_pid()?;
        let data = self.data_dir.path().display().to_string();
        let table = proc_table();
        let mut ids = BTreeSet::new();
        let mut frontier = vec![guest];
        while let Some(p) = frontier.pop() {
            for c in table.iter().filter(|c| c.ppid == p) {
                if ids.insert(c.pid) {
                    frontier.push(c.pid);
                }
            }
        }
        let procs: Vec<Proc> = table
            .into_iter()
            .filter(|p| {
                p.pid != guest
                    && p.pid != self.child.id() as i32
                    && (ids.contains(&p.pid) || p.cmdline.contains(&data))
            })
            .collect();
        for p in &procs {
            if !self.seen.iter().any(|(pid, _)| *pid == p.pid) {
                self.seen.push((p.pid, p.cmdline.clone()));
            }
        }
        Ok(procs)
    }

    /// Kills desktop processes that are still the ones seen; returns how many there were.
    fn kill_leftovers(&self) -> usize {
        let mut n = 0;
        for (pid, cmdline) in &self.seen {
            if read_cmdline(*pid).as_deref() == Some(cmdline.as_str()) {
                n += 1;
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(*pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        n
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // The server first, so that nothing restarts a guest; then the guest and its desktops.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let home = self.home().display().to_string();
        for pid in pids_with_env("RAKAZO_HOME", &home) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        self.kill_leftovers();
        // The guest's default runtime directory (X cookies, logs) lives outside the data dir.
        if !self.computer.is_empty() {
            let _ = std::fs::remove_dir_all(
                std::env::temp_dir().join(format!("rakazo-guest-{}", self.computer)),
            );
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Via {
    Shipped,
    NoDelay,
}

impl Via {
    pub(super) fn name(self) -> &'static str {
        match self {
            Via::Shipped => "shipped `Client` (keep-alive)",
            Via::NoDelay => "keep-alive + `TCP_NODELAY`",
        }
    }
}

/// One bot with a lease on the bench computer.
struct Bot {
    name: String,
    lease: String,
}

impl Bot {
    pub(super) async fn new(server: &Server, name: &str) -> Result<Self> {
        Ok(Self {
            name: name.to_string(),
            lease: server.lease(name).await?,
        })
    }

    async fn call(
        &self,
        server: &Server,
        action: &str,
        mut body: serde_json::Value,
        via: Via,
    ) -> Result<serde_json::Value> {
        body["lease"] = self.lease.clone().into();
        let path = server.screen_path(&self.name, action);
        match via {
            Via::Shipped => server.post(&path, body).await,
            Via::NoDelay => server.nodelay.post_json(&path, &body).await,
        }
        .with_context(|| format!("{action} of bot {}", self.name))
    }

    pub(super) async fn act(
        &self,
        server: &Server,
        actions: serde_json::Value,
    ) -> Result<serde_json::Value> {
        self.call(
            server,
            "act",
            serde_json::json!({ "actions": actions }),
            Via::Shipped,
        )
        .await
    }

    /// A timed observe; returns the time, the response and the decoded PNG's size (0 when the
    /// image was omitted).
    pub(super) async fn observe(
        &self,
        server: &Server,
        via: Via,
    ) -> Result<(Duration, serde_json::Value, usize)> {
        let t = now();
        let v = self
            .call(server, "observe", serde_json::json!({}), via)
            .await?;
        let d = now() - t;
        let png = match v["image"].as_str() {
            Some(b64) => {
                let png = base64::engine::general_purpose::STANDARD.decode(b64)?;
                ensure!(png.starts_with(PNG_MAGIC), "observe image is not a PNG");
                png.len()
            }
            None => 0,
        };
        Ok((d, v, png))
    }

    /// Opens the bench page for this bot and waits until it loaded and the screen is still.
    async fn open_page(&self, server: &Server, fx: &Fixture) -> Result<()> {
        let url = fx.page(&self.name, &page_html(&self.name));
        self.act(server, serde_json::json!([{ "type": "open", "url": url }]))
            .await?;
        wait_loaded(fx, &self.name).await
    }
}

#[derive(Default)]
pub(super) struct ApiRuns {
    pub(super) changed: [Vec<Duration>; 2],
    pub(super) changed_png: Vec<usize>,
    pub(super) changed_but_unchanged: usize,
    pub(super) unchanged: [Vec<Duration>; 2],
    pub(super) unchanged_but_changed: usize,
    pub(super) act: Vec<Duration>,
    /// Acts of [`BATCH`] actions: moves over a blank spot, then a click on the counter.
    pub(super) act_batch: Vec<Duration>,
    /// The observe after a batch act showed no change.
    pub(super) batch_before_draw: usize,
    /// Acts of one click on a blank spot (nothing draws: the settle waits out its bound).
    pub(super) act_blank: Vec<Duration>,
    /// `settledMs` of those.
    pub(super) act_blank_settled: Vec<u64>,
    pub(super) ensure_first: Duration,
    pub(super) ensure_new: Vec<Duration>,
    /// Chrome's spawn-to-CDP time of each desktop, from the guest log's `chrome ready` lines.
    pub(super) guest_chrome: Vec<Duration>,
    pub(super) mem: Vec<Memory>,
    pub(super) stop: Duration,
    pub(super) leftovers: usize,
    pub(super) locks_left: Vec<String>,
}

pub(super) fn via_index(via: Via) -> usize {
    match via {
        Via::Shipped => 0,
        Via::NoDelay => 1,
    }
}

/// Parts 4 and 5: observe through the API, then memory with live desktops.
pub(super) async fn measure_api(fx: &Fixture, opts: &Options) -> Result<ApiRuns> {
    let mut server = Server::start(&opts.bin_dir).await?;
    let result = measure_api_on(&mut server, fx, opts).await;
    // The runs are over: their leases go first (a stop checkpoints the home, which it refuses
    // under held leases). Then stop the computer through the API, so the guest closes every
    // Chrome through CDP.
    let released = server.release_leases().await;
    let t = now();
    let stopped = server
        .post(
            &format!("/v1/computers/{}/stop", server.computer),
            serde_json::json!({}),
        )
        .await;
    let stop = now() - t;
    // Give the processes a moment to be reaped before looking for leftovers.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let leftovers = server.kill_leftovers();
    let mut r = result?;
    released?;
    stopped.context("stop the computer")?;
    r.stop = stop;
    r.leftovers = leftovers;
    drop(server);
    for display in r.mem.iter().flat_map(|m| m.displays.iter()) {
        for p in [
            format!("/tmp/.X{display}-lock"),
            format!("/tmp/.X11-unix/X{display}"),
        ] {
            if Path::new(&p).exists() {
                r.locks_left.push(p);
            }
        }
    }
    r.locks_left.sort();
    r.locks_left.dedup();
    Ok(r)
}

async fn measure_api_on(server: &mut Server, fx: &Fixture, opts: &Options) -> Result<ApiRuns> {
    let mut r = ApiRuns::default();
    r.mem.push(memory(server, 0, Vec::new())?);

    let first = Bot::new(server, "bot-00").await?;
    let t = now();
    let info = first
        .call(server, "ensure", serde_json::json!({}), Via::Shipped)
        .await?;
    r.ensure_first = now() - t;
    ensure!(info["started"] == true, "ensure did not start: {info}");
    let mut displays = vec![info["display"].as_u64().unwrap_or_default()];
    first.open_page(server, fx).await?;
    eprintln!("observe through the API (bot-00 on :{})", displays[0]);

    // Until the screen is still: an observation that omits its image.
    let mut still = false;
    for _ in 0..60 {
        let (_, v, _) = first.observe(server, Via::Shipped).await?;
        if v["unchanged"] == true {
            still = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ensure!(still, "the screen of bot-00 never became still");
    // Warm-up of both clients and of both paths.
    for via in [Via::Shipped, Via::NoDelay] {
        for _ in 0..3 {
            first.observe(server, via).await?;
        }
    }

    // Rounds of: an act that clicks the counter bar (timed apart; it settles on damage), an
    // observe of the changed frame, then an observe of the same frame (the image is omitted).
    // The two clients take turns by round.
    let (x, y) = BUMP_POINT;
    for _ in 0..opts.api_runs {
        for via in [Via::Shipped, Via::NoDelay] {
            let t = now();
            let act = first
                .act(
                    server,
                    serde_json::json!([{ "type": "click", "x": x, "y": y }]),
                )
                .await?;
            r.act.push(now() - t);
            ensure!(act["completed"] == 1, "act: {act}");
            let (d, v, png) = first.observe(server, via).await?;
            if v["unchanged"] == false && png > 0 {
                r.changed[via_index(via)].push(d);
                r.changed_png.push(png);
            } else {
                r.changed_but_unchanged += 1;
            }
            let (d, v, png) = first.observe(server, via).await?;
            if v["unchanged"] == true && png == 0 {
                r.unchanged[via_index(via)].push(d);
            } else {
                r.unchanged_but_changed += 1;
            }
        }
    }
    // Acts of a batch: moves over the blank spot, then a click on the counter; the observe
    // after each must show the change. And, fewer, acts that change nothing.
    let (bx, by) = BLANK_POINT;
    let mut batch: Vec<serde_json::Value> = (0..BATCH - 1)
        .map(|i| serde_json::json!({ "type": "move", "x": bx, "y": by + i as i64 }))
        .collect();
    batch.push(serde_json::json!({ "type": "click", "x": x, "y": y }));
    let batch = serde_json::Value::Array(batch);
    for round in 0..opts.api_runs {
        let t = now();
        let act = first.act(server, batch.clone()).await?;
        r.act_batch.push(now() - t);
        ensure!(act["completed"] == BATCH, "act: {act}");
        let (_, v, png) = first.observe(server, Via::Shipped).await?;
        if v["unchanged"] == true || png == 0 {
            r.batch_before_draw += 1;
        }
        if round % 5 == 0 {
            let t = now();
            let act = first
                .act(
                    server,
                    serde_json::json!([{ "type": "click", "x": bx, "y": by }]),
                )
                .await?;
            r.act_blank.push(now() - t);
            r.act_blank_settled
                .push(act["settledMs"].as_u64().unwrap_or_default());
        }
    }
    r.mem.push(memory(server, 1, displays.clone())?);

    // More desktops, one at a time (each a cold start through the API on a fresh profile),
    // each with the page open and observed once, as a working bot would have it.
    eprintln!("starting {} more desktops", opts.desktops.saturating_sub(1));
    for i in 1..opts.desktops {
        let bot = Bot::new(server, &format!("bot-{i:02}")).await?;
        let t = now();
        let info = bot
            .call(server, "ensure", serde_json::json!({}), Via::Shipped)
            .await?;
        r.ensure_new.push(now() - t);
        ensure!(info["started"] == true, "ensure did not start: {info}");
        displays.push(info["display"].as_u64().unwrap_or_default());
        bot.open_page(server, fx).await?;
        bot.observe(server, Via::Shipped).await?;
    }
    // Let the last pages finish painting before reading memory.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = std::fs::read_to_string(
        server
            .data_dir
            .path()
            .join("computers")
            .join(&server.computer)
            .join("guest.log"),
    )
    .unwrap_or_default();
    // Skip bot-00's: the rows it goes with are the new bots' ensures.
    r.guest_chrome = chrome_startups(&log).into_iter().skip(1).collect();
    r.mem.push(memory(server, opts.desktops, displays)?);
    Ok(r)
}

/// The `startup_ms` of every `chrome ready` line of a guest log, in order.
fn chrome_startups(log: &str) -> Vec<Duration> {
    log.lines()
        .filter(|l| l.contains("chrome ready"))
        .filter_map(|l| {
            let rest = &l[l.find("startup_ms")? + "startup_ms".len()..];
            let digits: String = rest
                .trim_start_matches(['=', '"', ':', ' '])
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok().map(Duration::from_millis)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Processes and memory.
