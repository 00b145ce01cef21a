//! A network lab for containment tests and benches: a "world" network namespace with no route
//! off this machine, and a test-host namespace behind it that holds a private address
//! (10.99.0.2), the cloud metadata address (169.254.169.254) and two public ones (203.0.113.10
//! and .11, TEST-NET-3, standing for the internet), each serving HTTP on port 80. Code run
//! [`Lab::inside`] the world (a thread that entered it, with its own runtime) starts servers,
//! computers and commands there; everything they send stays in these namespaces.

use anyhow::{bail, Context, Result};
use std::future::Future;
use std::pin::Pin;
use std::process::Command;

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// Runs a command and fails with its stderr.
pub fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("{cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ip(args: &[&str]) -> Result<String> {
    run(Command::new("ip").args(args))
}

/// The namespaces; removed on drop.
pub struct Lab {
    pub world: String,
    pub host: String,
    servers: Vec<std::process::Child>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for s in &mut self.servers {
            let _ = s.kill();
            let _ = s.wait();
        }
        let _ = ip(&["netns", "del", &self.host]);
        let _ = ip(&["netns", "del", &self.world]);
    }
}

impl Lab {
    pub fn new() -> Result<Self> {
        let tag = format!("{:08x}", rand::random::<u32>());
        let mut lab = Lab {
            world: format!("rkzt-w{tag}"),
            host: format!("rkzt-h{tag}"),
            servers: Vec::new(),
        };
        let (w, h) = (lab.world.clone(), lab.host.clone());
        ip(&["netns", "add", &w])?;
        ip(&["netns", "add", &h])?;
        ip(&["-n", &w, "link", "set", "lo", "up"])?;
        ip(&["-n", &h, "link", "set", "lo", "up"])?;
        ip(&[
            "-n", &w, "link", "add", "th0", "type", "veth", "peer", "name", "eth0", "netns", &h,
        ])?;
        ip(&["-n", &w, "addr", "add", "192.0.2.1/24", "dev", "th0"])?;
        ip(&["-n", &w, "link", "set", "th0", "up"])?;
        for a in [
            "192.0.2.2/24",
            "10.99.0.2/32",
            "169.254.169.254/32",
            "203.0.113.10/32",
            "203.0.113.11/32",
        ] {
            ip(&["-n", &h, "addr", "add", a, "dev", "eth0"])?;
        }
        ip(&["-n", &h, "link", "set", "eth0", "up"])?;
        ip(&["-n", &h, "route", "add", "default", "via", "192.0.2.1"])?;
        for to in [
            "10.99.0.2/32",
            "169.254.169.254/32",
            "203.0.113.10/32",
            "203.0.113.11/32",
        ] {
            ip(&["-n", &w, "route", "add", to, "via", "192.0.2.2"])?;
        }
        // No default route in the world: nothing can leave this machine.
        let www = tempfile::tempdir()?;
        std::fs::write(
            www.path().join("index.html"),
            "<!doctype html><title>test host</title><p>test host</p>\n",
        )?;
        lab.servers.push(
            Command::new("ip")
                .args(["netns", "exec", &h, "python3", "-m", "http.server", "80"])
                .arg("--directory")
                .arg(www.keep())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()?,
        );
        Ok(lab)
    }

    /// Runs `f` on a thread inside the world namespace, on a runtime of its own: whatever it
    /// starts (servers, computers, commands) lives there.
    pub fn inside<T: Send>(
        &mut self,
        f: impl for<'a> FnOnce(&'a mut Lab) -> Pin<Box<dyn Future<Output = Result<T>> + 'a>> + Send,
    ) -> Result<T> {
        let world = std::fs::File::open(format!("/run/netns/{}", self.world))?;
        std::thread::scope(|s| {
            s.spawn(|| {
                nix::sched::setns(&world, nix::sched::CloneFlags::CLONE_NEWNET)?;
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?
                    .block_on(f(self))
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the code run inside the lab panicked"))?
        })
    }

    /// Runs `argv` in the test host's namespace in the background until the lab is dropped.
    pub fn serve_on_host(&mut self, argv: &[&str]) -> Result<()> {
        self.servers.push(
            Command::new("ip")
                .args(["netns", "exec", &self.host])
                .args(argv)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()?,
        );
        Ok(())
    }

    /// A throw-away PostgreSQL on the world's 127.0.0.1:5432, as the control plane's database.
    pub fn postgres(&mut self, dir: &std::path::Path) -> Result<String> {
        run(Command::new("chown").arg("postgres").arg(dir))?;
        run(Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .args([
                &format!("{PG_BIN}/initdb"),
                "-D",
                &dir.display().to_string(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ]))?;
        let opts = format!(
            "-p 5432 -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            dir.display()
        );
        run(Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.world,
                "runuser",
                "-u",
                "postgres",
                "--",
            ])
            .arg(format!("{PG_BIN}/pg_ctl"))
            .args(["-D", &dir.display().to_string(), "-o", &opts, "-w", "-l"])
            .arg(dir.join("log"))
            .arg("start"))?;
        Ok("postgres://postgres@127.0.0.1:5432/postgres".into())
    }

    pub fn stop_postgres(&self, dir: &std::path::Path) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(format!("{PG_BIN}/pg_ctl"))
            .args(["-D", &dir.display().to_string(), "-m", "immediate", "stop"])
            .output();
    }
}
