//! System-test harness: real `rakazo serve` and real `rakazo-guest` processes on loopback.
//!
//! [`World`] starts the control plane on ports chosen by the kernel (port 0), in a temporary
//! data dir, waits for it to write its addresses (readiness, not a sleep), and hands out an API
//! [`Client`]. At teardown it checks the server's log: no ERROR line, no WARN line that the test
//! did not allow, and no secret (API token, enrollment token) anywhere in it.

use anyhow::{anyhow, bail, Context, Result};
use control_plane::client::Client;
use gateway_proto::Secret;
use hyper::Method;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub mod anchor;
pub mod bench;
pub mod bot;
pub mod bystander;
mod calls;
pub mod engine;
pub mod fake_daytona;
pub mod fake_e2b;
pub mod fake_kube;
pub mod fake_service;
pub mod fixture;
pub mod garage;
pub mod impair;
pub mod live;
pub mod netlab;
pub mod pgcluster;
pub mod probes;
mod procs;
pub mod procstat;
pub mod readme;
pub mod replicas;
pub mod rogue;
pub mod s3;
pub mod s3fault;
pub mod soak;
pub mod tunnel;

pub use calls::{exec_via, home_revisions, post_ndjson, ExecOutput};
pub use procs::{guest_pid_of, pids_with_cmdline, pids_with_env, term_then_kill};
use procs::{kill_guest_of, remove_computer_network, remove_computer_user};

/// Directory holding the workspace's built binaries (`rakazo`, `rakazo-guest`).
pub fn bin_dir() -> PathBuf {
    // Test executables live in <target>/<profile>/deps, binaries one level up; a bench binary
    // (tests/src/bin) lives beside them.
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().expect("executable dir");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().expect("profile dir").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// Path of a built binary, with a clear message when it was not built.
pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: build the binaries first (cargo build --workspace --bins)",
        p.display()
    );
    p
}

/// The statically linked guest (`x86_64-unknown-linux-musl`), built beside the workspace's
/// binaries by the test command.
pub fn static_guest() -> PathBuf {
    let dir = bin_dir();
    let profile = dir
        .file_name()
        .map(|p| p.to_os_string())
        .unwrap_or_default();
    let p = dir
        .parent()
        .expect("target dir")
        .join("x86_64-unknown-linux-musl")
        .join(profile)
        .join("rakazo-guest");
    assert!(
        p.exists(),
        "{} is missing: cargo build --target x86_64-unknown-linux-musl -p guest-agent",
        p.display()
    );
    p
}

/// The files every replica of one cluster shares (the control plane refuses to start without
/// the same ones as the others).
pub const REPLICA_SECRETS: [&str; 4] = [
    "api-token",
    "capability-key",
    "tunnel-cert.pem",
    "tunnel-key.pem",
];

/// Options for a [`World`].
#[derive(Default, Clone)]
pub struct WorldOptions {
    /// `postgres://...` to run on PostgreSQL instead of SQLite.
    pub database_url: Option<String>,
    /// WARN lines (substrings) this test expects in the server log.
    pub allow_warn: Vec<String>,
    /// The guest binary local computers run (default: the workspace's debug build).
    pub guest_bin: Option<PathBuf>,
    /// `SANDBOX_TEAM_SCREEN_LIMIT` for the computers of this world.
    pub screen_limit: Option<u32>,
    /// Keep homes in this S3 bucket instead of the local store.
    pub object_store: Option<ObjectStoreOptions>,
    /// `RAKAZO_HOME_FORMAT` (unset: the server's default, `incremental`).
    pub home_format: Option<&'static str>,
    /// Idle suspension: `RAKAZO_IDLE_TIMEOUT_SECS` (unset: the server's default, 15 minutes).
    pub idle_timeout_secs: Option<u64>,
    /// `RAKAZO_TAKEOVER_KEEP_AWAKE_SECS` (unset: the server's default, 30 minutes).
    pub takeover_keep_awake_secs: Option<u64>,
    /// `RAKAZO_CONTROL_LEASE_TTL_SECS` (unset: the server's default, 15 minutes).
    pub control_lease_ttl_secs: Option<u64>,
    /// `RAKAZO_PROVIDERS`, e.g. `local,docker,fake` (unset: the server's default, `local`).
    /// With `docker`, the world points the server at the test engine, the test image and host
    /// networking.
    pub providers: Option<String>,
    /// `RAKAZO_DEFAULT_PROVIDER`.
    pub default_provider: Option<String>,
    /// More `rakazo serve` environment (the HTTP listener's settings, TLS files).
    pub env: Vec<(String, String)>,
    /// More environment for the guests of local computers, set by the test's guest wrapper
    /// (e.g. `RAKAZO_TERMINAL_GRACE_SECS`).
    pub guest_env: Vec<(String, String)>,
    /// Another replica's data dir: its shared secrets (API token, capability key, tunnel
    /// certificate and key) are copied into this world's before its server starts, as an
    /// operator does for a second replica on the same PostgreSQL.
    pub secrets_from: Option<PathBuf>,
    /// A restart asks for tunnel port 0 again, as a deployment with `RAKAZO_TUNNEL_ADDR` on
    /// port 0 does, instead of the previous address.
    pub tunnel_port_0_on_restart: bool,
}

/// How a [`World`] reaches its object store (an [`s3::S3Server`]).
#[derive(Clone)]
pub struct ObjectStoreOptions {
    pub endpoint: String,
    pub bucket: String,
    pub access_key_id: String,
    /// Handed over by environment, never argv.
    pub secret_access_key: String,
    /// `RAKAZO_S3_PARTS_IN_FLIGHT` (unset: the server's default).
    pub parts_in_flight: Option<usize>,
    /// The space's content key, 64 hex characters; handed over by environment, never argv.
    pub content_key_hex: String,
}

impl ObjectStoreOptions {
    /// The server's bucket with a fresh random content key.
    pub fn for_server(server: &s3::S3Server) -> Self {
        Self {
            endpoint: server.endpoint.clone(),
            bucket: s3::BUCKET.to_string(),
            access_key_id: "test".into(),
            secret_access_key: "test".into(),
            parts_in_flight: None,
            content_key_hex: hex::encode(rand::random::<[u8; 32]>()),
        }
    }
}

/// One running control plane.
pub struct World {
    pub data_dir: tempfile::TempDir,
    /// Where machines live: `local/` (local computers) and `fake/` (the fake provider's).
    pub machines_dir: tempfile::TempDir,
    server: Option<Child>,
    pub client: Client,
    pub http: String,
    pub tunnel: String,
    pub cert_sha256: String,
    api_token: String,
    opts: WorldOptions,
    log_path: PathBuf,
    /// Enrollment tokens seen by the test (from local computers' token files), checked at drop.
    secrets: Vec<String>,
    checked: bool,
    /// Docker computers created through [`World::create_computer_on`], removed at drop.
    docker_computers: Vec<String>,
    /// 0700, root's: `guest.sh` (the guest the server starts: it copies each enrollment token
    /// here, then runs the real guest, which removes its token file) and `<computer id>`, the
    /// newest token of each computer. Out of every computer's reach.
    tokens_dir: tempfile::TempDir,
}

/// With `RAKAZO_TEST_TUNNEL=tcp`, the UDP address every [`World`] advertises as its tunnel so
/// that its guests fall back to the TCP carrier: see [`udp_black_hole`].
pub fn tcp_only_tunnel() -> Option<std::net::SocketAddr> {
    let tcp = std::env::var_os("RAKAZO_TEST_TUNNEL").is_some_and(|v| v == "tcp");
    tcp.then(udp_black_hole).flatten()
}

/// With `RAKAZO_TEST_TUNNEL=ws`, the UDP and TCP addresses every [`World`] advertises as its
/// tunnel so that its guests fall back to the websocket on the HTTP API: a UDP address that
/// never answers and a TCP one that refuses ([`udp_black_hole`], [`tcp_refusing`]).
pub fn ws_only_tunnel() -> Option<(std::net::SocketAddr, std::net::SocketAddr)> {
    let ws = std::env::var_os("RAKAZO_TEST_TUNNEL").is_some_and(|v| v == "ws");
    ws.then(|| udp_black_hole().zip(tcp_refusing())).flatten()
}

/// A loopback TCP address where nothing listens (connections are refused): a port this
/// process bound and closed again (one for the whole process).
pub fn tcp_refusing() -> Option<std::net::SocketAddr> {
    static PORT: std::sync::OnceLock<Option<std::net::SocketAddr>> = std::sync::OnceLock::new();
    *PORT.get_or_init(|| {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .ok()
    })
}

/// A loopback UDP address where nothing ever answers, as where a network drops UDP: a socket
/// of this test process that is never read (one for the whole process).
pub fn udp_black_hole() -> Option<std::net::SocketAddr> {
    static BLACK_HOLE: std::sync::OnceLock<Option<std::net::UdpSocket>> =
        std::sync::OnceLock::new();
    BLACK_HOLE
        .get_or_init(|| std::net::UdpSocket::bind("127.0.0.1:0").ok())
        .as_ref()
        .and_then(|s| s.local_addr().ok())
}

/// Waits for `f` to return `Some`, checking every 10 ms, up to `timeout`.
pub async fn wait_for<T>(
    timeout: Duration,
    what: &str,
    mut f: impl FnMut() -> Option<T>,
) -> Result<T> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

impl World {
    pub async fn start() -> Result<Self> {
        Self::start_with(WorldOptions::default()).await
    }

    pub async fn start_with(opts: WorldOptions) -> Result<Self> {
        let data_dir = tempfile::Builder::new().prefix("rakazo-world-").tempdir()?;
        let log_path = data_dir.path().join("server.log");
        // Local computers run as their own users, who must be able to pass through to their
        // homes (but not list anything): 0711, as the default root outside the data dir is.
        let machines_dir = tempfile::Builder::new()
            .prefix("rakazo-machines-")
            .tempdir()?;
        std::fs::set_permissions(
            machines_dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o711),
        )?;
        let mut w = World {
            data_dir,
            machines_dir,
            server: None,
            client: Client::new("http://127.0.0.1:1", Secret::new("")),
            http: String::new(),
            tunnel: String::new(),
            cert_sha256: String::new(),
            api_token: String::new(),
            opts,
            log_path,
            secrets: Vec::new(),
            checked: false,
            docker_computers: Vec::new(),
            tokens_dir: tempfile::Builder::new()
                .prefix("rakazo-tokens-")
                .tempdir()?,
        };
        if let Some(from) = &w.opts.secrets_from {
            for name in REPLICA_SECRETS {
                let to = w.data_dir.path().join(name);
                std::fs::copy(from.join(name), &to)
                    .with_context(|| format!("copy {name} from {}", from.display()))?;
                std::fs::set_permissions(&to, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
            }
        }
        w.spawn_server().await?;
        Ok(w)
    }

    /// Starts (or restarts) the server on the same data dir.
    pub async fn spawn_server(&mut self) -> Result<()> {
        let addresses = self.data_dir.path().join("addresses.json");
        let _ = std::fs::remove_file(&addresses);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)?;
        // A restart keeps the addresses, as a real deployment does: guests dial the same one.
        let http_addr = self
            .http
            .split_once("://")
            .map_or("127.0.0.1:0", |(_, addr)| addr)
            .to_string();
        let tunnel_addr = if self.tunnel.is_empty() || self.opts.tunnel_port_0_on_restart {
            "127.0.0.1:0".to_string()
        } else {
            self.tunnel.clone()
        };
        let http_addr = if http_addr.is_empty() {
            "127.0.0.1:0".to_string()
        } else {
            http_addr
        };
        let mut cmd = Command::new(bin("rakazo"));
        cmd.arg("serve")
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("RAKAZO_DATA_DIR", self.data_dir.path())
            .env("RAKAZO_HTTP_ADDR", http_addr)
            .env("RAKAZO_TUNNEL_ADDR", tunnel_addr)
            .env("RAKAZO_GUEST_BIN", self.guest_wrapper()?)
            .env("RAKAZO_LOG", "info")
            .env("RAKAZO_GUEST_LOG", "info")
            .env("RAKAZO_LOCAL_ROOT", self.machines_dir.path().join("local"))
            // Jailed computers, on this host's network: the tests' pages are served on its
            // loopback (tests/system/containment.rs runs `full`). The guest wrapper and the
            // guest it starts are visible in the jail, read-only.
            .env("RAKAZO_LOCAL_CONTAINMENT", "host-network")
            .env("RAKAZO_LOCAL_JAIL_RO_BIND", self.jail_ro_binds())
            .env("RAKAZO_FAKE_ROOT", self.machines_dir.path().join("fake"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(url) = &self.opts.database_url {
            cmd.env("DATABASE_URL", url);
        }
        if let Some(p) = &self.opts.providers {
            cmd.env("RAKAZO_PROVIDERS", p);
            if p.split(',').any(|k| k.trim() == "docker") {
                // On this host's network, as local computers here: the tests' pages are on its
                // loopback (tests/system/containment.rs and the CLI's docker test run `full`).
                cmd.env("RAKAZO_DOCKER_SOCKET", engine::socket())
                    .env("RAKAZO_DOCKER_IMAGE", engine::image()?)
                    .env("RAKAZO_DOCKER_CONTAINMENT", "host-network");
            }
        }
        if let Some(p) = &self.opts.default_provider {
            cmd.env("RAKAZO_DEFAULT_PROVIDER", p);
        }
        if let Some(black_hole) = tcp_only_tunnel() {
            // Guests dial a UDP address that never answers, so each falls back to the tunnel's
            // TCP carrier (port 0: the tunnel's bound port). A test's own env comes after.
            cmd.env("RAKAZO_ADVERTISE_ADDR", black_hole.to_string())
                .env("RAKAZO_ADVERTISE_TCP_ADDR", "127.0.0.1:0");
        }
        if let Some((black_hole, refusing)) = ws_only_tunnel() {
            // Neither UDP nor TCP reaches the tunnel: guests fall back to its websocket on the
            // HTTP API (`GET /v1/tunnel`).
            cmd.env("RAKAZO_ADVERTISE_ADDR", black_hole.to_string())
                .env("RAKAZO_ADVERTISE_TCP_ADDR", refusing.to_string());
        }
        cmd.envs(self.opts.env.iter().map(|(k, v)| (k, v)));
        if let Some(limit) = self.opts.screen_limit {
            cmd.env("SANDBOX_TEAM_SCREEN_LIMIT", limit.to_string());
        }
        if let Some(secs) = self.opts.idle_timeout_secs {
            cmd.env("RAKAZO_IDLE_TIMEOUT_SECS", secs.to_string());
        }
        if let Some(secs) = self.opts.takeover_keep_awake_secs {
            cmd.env("RAKAZO_TAKEOVER_KEEP_AWAKE_SECS", secs.to_string());
        }
        if let Some(secs) = self.opts.control_lease_ttl_secs {
            cmd.env("RAKAZO_CONTROL_LEASE_TTL_SECS", secs.to_string());
        }
        if let Some(f) = self.opts.home_format {
            cmd.env("RAKAZO_HOME_FORMAT", f);
        }
        if let Some(o) = &self.opts.object_store {
            cmd.env("RAKAZO_HOME_STORE", "object")
                .env("RAKAZO_S3_ENDPOINT", &o.endpoint)
                .env("RAKAZO_S3_BUCKET", &o.bucket)
                .env("RAKAZO_S3_ACCESS_KEY_ID", &o.access_key_id)
                .env("RAKAZO_S3_SECRET_ACCESS_KEY", &o.secret_access_key)
                .env("RAKAZO_S3_PATH_STYLE", "true")
                .env("RAKAZO_HOME_CONTENT_KEY", &o.content_key_hex);
            if let Some(n) = o.parts_in_flight {
                cmd.env("RAKAZO_S3_PARTS_IN_FLIGHT", n.to_string());
            }
            for secret in [&o.content_key_hex, &o.secret_access_key] {
                if !self.secrets.contains(secret) {
                    self.secrets.push(secret.clone());
                }
            }
        }
        let child = cmd.spawn().context("start rakazo serve")?;
        self.server = Some(child);
        let text = wait_for(Duration::from_secs(30), "addresses.json", || {
            std::fs::read_to_string(&addresses).ok()
        })
        .await?;
        let v: serde_json::Value = serde_json::from_str(&text)?;
        self.http = v["http"]
            .as_str()
            .ok_or_else(|| anyhow!("no http address"))?
            .to_string();
        self.tunnel = v["tunnel"]
            .as_str()
            .ok_or_else(|| anyhow!("no tunnel address"))?
            .to_string();
        self.cert_sha256 = v["tunnel_cert_sha256"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.api_token = std::fs::read_to_string(self.data_dir.path().join("api-token"))?
            .trim()
            .to_string();
        // An https server's certificate is pinned from the data dir, as the CLI does.
        let token = Secret::new(self.api_token.clone());
        self.client = Client::for_cli(self.http.clone(), token, None, self.data_dir.path())?;
        Ok(())
    }

    /// Kills the server with SIGKILL (a crash), leaving its guests running.
    pub fn kill_server(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends the server SIGTERM (a shutdown, as a deployment's rollout does) and waits up to
    /// `within` for it to exit; returns how it exited.
    pub async fn terminate_server(&mut self, within: Duration) -> Result<std::process::ExitStatus> {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        let mut child = self
            .server
            .take()
            .ok_or_else(|| anyhow!("the server is not running"))?;
        let pid = i32::try_from(child.id())?;
        kill(Pid::from_raw(pid), Signal::SIGTERM)?;
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            if tokio::time::Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("the server was still running {within:?} after SIGTERM");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The running server's process id (benchmarks sample its memory).
    pub fn server_pid(&self) -> Option<u32> {
        self.server.as_ref().map(Child::id)
    }

    pub fn api_token(&self) -> &str {
        &self.api_token
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The transport of each connection `computer`'s guests made, in order, from the log's
    /// `guest connected … transport=quic|tcp` lines.
    pub fn transports(&self, computer: &str) -> Vec<String> {
        let id = format!("computer_id={computer} ");
        self.log()
            .lines()
            .filter(|l| l.contains("guest connected") && l.contains(&id))
            .filter_map(|l| l.split(" transport=").nth(1))
            .filter_map(|rest| rest.split_whitespace().next())
            .map(str::to_string)
            .collect()
    }

    /// The home directory of a local computer.
    pub fn home_of(&self, computer: &str) -> PathBuf {
        self.local_dir_of(computer).join("home")
    }

    /// Gives everything under a local computer's home to the home's owner (the computer's own
    /// user, when the control plane is root): for files a test wrote there from outside, as
    /// root, that the computer must be able to change.
    pub fn give_home(&self, computer: &str) -> Result<()> {
        let home = self.home_of(computer);
        let status = Command::new("chown")
            .arg("-R")
            .arg(format!("--reference={}", home.display()))
            .arg(&home)
            .status()
            .context("run chown")?;
        if !status.success() {
            bail!("chown -R {} failed: {status}", home.display());
        }
        Ok(())
    }

    /// The directory of a local computer (its home, token and guest log).
    pub fn local_dir_of(&self, computer: &str) -> PathBuf {
        self.machines_dir.path().join("local").join(computer)
    }

    /// The guest wrapper's directory and the guest binary it starts.
    fn jail_ro_binds(&self) -> String {
        let guest = self
            .opts
            .guest_bin
            .clone()
            .unwrap_or_else(|| bin("rakazo-guest"));
        format!("{},{}", self.tokens_dir.path().display(), guest.display())
    }

    /// Writes the guest the server runs: a script that keeps a copy of the enrollment token
    /// for the test (the real guest removes its file at start), then becomes the real guest.
    fn guest_wrapper(&self) -> Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let guest = self
            .opts
            .guest_bin
            .clone()
            .unwrap_or_else(|| bin("rakazo-guest"));
        let dir = self.tokens_dir.path();
        let script = dir.join("guest.sh");
        let quote = |v: &str| format!("'{}'", v.replace('\'', "'\\''"));
        let exports: String = self
            .opts
            .guest_env
            .iter()
            .map(|(k, v)| format!("export {k}={}\n", quote(v)))
            .collect();
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\n{exports}\
                 if [ -n \"$RAKAZO_ENROLL_TOKEN_FILE\" ]; then\n\
                 \x20 cp \"$RAKAZO_ENROLL_TOKEN_FILE\" '{}'/\"$RAKAZO_COMPUTER_ID\" 2>/dev/null \
                 || cp \"$RAKAZO_ENROLL_TOKEN_FILE\" \"$RAKAZO_ENROLL_TOKEN_FILE.copy\" 2>/dev/null\n\
                 fi\n\
                 exec '{}' \"$@\"\n",
                dir.display(),
                guest.display()
            ),
        )?;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700))?;
        Ok(script)
    }

    /// The newest enrollment token of a local or fake computer (copied by the test's guest
    /// wrapper before the guest removed its file).
    pub fn enrollment_token(&self, computer: &str) -> Result<String> {
        // A jailed guest's wrapper sees the tokens dir read-only: its copy is in the computer's
        // directory, root's 0600 (the newer of the two is this boot's).
        let mut path = self.tokens_dir.path().join(computer);
        let jailed = self.local_dir_of(computer).join("token.copy");
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        if modified(&jailed) > modified(&path) {
            path = jailed;
        }
        Ok(std::fs::read_to_string(&path)
            .with_context(|| format!("no enrollment token of {computer} at {}", path.display()))?
            .trim()
            .to_string())
    }

    /// Creates a Team computer and returns its id.
    pub async fn create_computer(&mut self, workspace: &str) -> Result<String> {
        self.create_computer_on(workspace, None).await
    }

    /// Has the world remove a Docker computer created some other way (the CLI) at its end.
    pub fn track_docker(&mut self, id: &str) {
        self.docker_computers.push(id.to_string());
    }

    /// Creates a Team computer on `provider` (default: the server's) and returns its id.
    pub async fn create_computer_on(
        &mut self,
        workspace: &str,
        provider: Option<&str>,
    ) -> Result<String> {
        let mut body = serde_json::json!({ "workspace": workspace });
        if let Some(p) = provider {
            body["provider"] = p.into();
        }
        let v = self
            .client
            .json(Method::POST, "/v1/computers", Some(&body))
            .await?;
        let id = v["id"]
            .as_str()
            .ok_or_else(|| anyhow!("no id in {v}"))?
            .to_string();
        if v["provider"] == "docker" {
            self.docker_computers.push(id.clone());
        }
        if let Ok(t) = self.enrollment_token(&id) {
            self.secrets.push(t);
        }
        Ok(id)
    }

    /// Checks the server log: no ERROR, only allowed WARNs, no secrets. Call at the end of a test.
    pub fn check_log(&mut self) -> Result<()> {
        self.checked = true;
        let log = self.log();
        for line in log.lines() {
            let level = log_level(line);
            if level == Some("ERROR") {
                bail!("server logged an error: {line}");
            }
            // The world's own choice (its pages are on this host's loopback) is said at start.
            let ours = line.contains("--local-containment host-network")
                || line.contains("--docker-containment host-network");
            if level == Some("WARN")
                && !ours
                && !self
                    .opts
                    .allow_warn
                    .iter()
                    .any(|a| line.contains(a.as_str()))
            {
                bail!("server logged an unexpected warning: {line}");
            }
        }
        let mut secrets = self.secrets.clone();
        secrets.push(self.api_token.clone());
        for s in secrets.iter().filter(|s| s.len() >= 16) {
            if log.contains(s.trim()) {
                bail!("a secret appears in the server log");
            }
        }
        Ok(())
    }

    /// Adds a secret the log must never contain (e.g. a capability URL's sealed token).
    pub fn add_secret(&mut self, s: &str) {
        self.secrets.push(s.to_string());
    }

    /// Allows WARN lines containing `s`.
    pub fn allow_warn(&mut self, s: &str) {
        self.opts.allow_warn.push(s.to_string());
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // A test that ended before its log check failed: show the end of the server's log.
        if !self.checked {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!("--- server log (last 40 lines) ---");
            for l in &lines[lines.len().saturating_sub(40)..] {
                eprintln!("{l}");
            }
        }
        // Stop every local and fake guest this world started, then the server, then the
        // containers of its Docker computers.
        for kind in ["local", "fake"] {
            if let Ok(entries) = std::fs::read_dir(self.machines_dir.path().join(kind)) {
                for e in entries.flatten() {
                    kill_guest_of(&e.path());
                    if kind == "local" {
                        remove_computer_user(&e.path());
                        if let Some(id) = e.file_name().to_str() {
                            remove_computer_network(id);
                        }
                    }
                }
            }
        }
        self.kill_server();
        for id in &self.docker_computers {
            let _ = engine::podman(&["rm", "-f", "-t", "0", &engine::container_of(id)]);
            let _ = engine::podman(&["volume", "rm", "-f", &format!("rakazo-home-{id}")]);
            remove_computer_network(id);
        }
    }
}

/// The level of one server log line, text (`… WARN …`) or JSON (`RAKAZO_LOG_FORMAT=json`:
/// `{"level":"WARN",…}`); `None` for a line that is neither (a panic message, say).
pub fn log_level(line: &str) -> Option<&'static str> {
    let levels = ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"];
    if line.starts_with('{') {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
            return levels.into_iter().find(|l| v["level"] == *l);
        }
    }
    levels
        .into_iter()
        .find(|l| line.contains(&format!(" {l} ")))
}
