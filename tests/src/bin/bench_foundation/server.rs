//! The built `rakazo serve` that `bench_foundation` runs, with its local computer, and the
//! UDP and CPU counters read around each part.

use super::*;

/// One running control plane in its own data dir, with one local computer.
pub(super) struct Server {
    pub(super) data_dir: tempfile::TempDir,
    child: Child,
    pub(super) client: Client,
    /// Base URL and API token, for the bench's own hyper clients (see [`Http`]).
    pub(super) http: String,
    pub(super) token: String,
    pub(super) computer: String,
}

impl Server {
    pub(super) async fn start(bin_dir: &Path, parent: &Path) -> Result<Self> {
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
            .prefix("rakazo-bench-")
            .tempdir_in(parent)
            .with_context(|| format!("data dir under {}", parent.display()))?;
        // The bench's dir: `data/` (the server's, 0700) and `computers/` (local computers' root,
        // which their users pass through).
        std::fs::set_permissions(
            data_dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o711),
        )?;
        let log = std::fs::File::create(data_dir.path().join("server.log"))?;
        // The server logs at its default level (info), as it would in production.
        let child = Command::new(&rakazo)
            .arg("serve")
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
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
            http: String::new(),
            token: String::new(),
            computer: String::new(),
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
        server.http = http.to_string();
        server.token = token.trim().to_string();
        server.client = Client::new(http, Secret::new(server.token.clone()));
        // Creating a computer returns once its guest has dialed in.
        let created = server
            .client
            .json(
                Method::POST,
                "/v1/computers",
                Some(&serde_json::json!({ "workspace": "bench" })),
            )
            .await?;
        server.computer = created["id"]
            .as_str()
            .ok_or_else(|| anyhow!("no id in {created}"))?
            .to_string();
        Ok(server)
    }

    pub(super) fn home(&self) -> PathBuf {
        self.data_dir
            .path()
            .join("computers")
            .join(&self.computer)
            .join("home")
    }

    fn guest_pids(&self) -> Vec<i32> {
        pids_with_env("RAKAZO_HOME", &self.home().display().to_string())
    }

    pub(super) fn cpu(&self) -> Cpu {
        Cpu {
            server: cpu_ticks(&self.child.id().to_string()),
            guest: self
                .guest_pids()
                .iter()
                .map(|p| cpu_ticks(&p.to_string()))
                .sum(),
            bench: cpu_ticks("self"),
            udp: udp_counters(),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // The server first, so that nothing restarts a guest; then every guest of this data dir.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Ok(entries) = std::fs::read_dir(self.data_dir.path().join("computers")) {
            for e in entries.flatten() {
                let home = e.path().join("home").display().to_string();
                for pid in pids_with_env("RAKAZO_HOME", &home) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
    }
}

/// The host's UDP counters from `/proc/net/snmp`: datagrams received, and datagrams dropped
/// because a socket's receive buffer was full. They count every UDP socket of the host, but
/// the tunnel is by far the busiest while a transfer runs.
#[derive(Clone, Copy, Default)]
pub(super) struct Udp {
    pub(super) in_datagrams: u64,
    pub(super) rcvbuf_errors: u64,
}

pub(super) fn udp_counters() -> Udp {
    let text = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut lines = text.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return Udp::default();
    };
    let field = |name: &str| {
        names
            .split_whitespace()
            .position(|n| n == name)
            .and_then(|i| values.split_whitespace().nth(i))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Udp {
        in_datagrams: field("InDatagrams"),
        rcvbuf_errors: field("RcvbufErrors"),
    }
}

/// CPU ticks of the three processes involved in a transfer, and the host's UDP counters.
#[derive(Clone, Copy, Default)]
pub(super) struct Cpu {
    pub(super) server: u64,
    pub(super) guest: u64,
    pub(super) bench: u64,
    pub(super) udp: Udp,
}

impl Cpu {
    pub(super) fn since(self, before: Cpu) -> Cpu {
        Cpu {
            server: self.server.saturating_sub(before.server),
            guest: self.guest.saturating_sub(before.guest),
            bench: self.bench.saturating_sub(before.bench),
            udp: Udp {
                in_datagrams: self
                    .udp
                    .in_datagrams
                    .saturating_sub(before.udp.in_datagrams),
                rcvbuf_errors: self
                    .udp
                    .rcvbuf_errors
                    .saturating_sub(before.udp.rcvbuf_errors),
            },
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Exec round trip.
