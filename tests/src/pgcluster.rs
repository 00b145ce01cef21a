//! A private PostgreSQL cluster for tests that stop and start their database: its own data
//! directory and socket directory in a temp dir, its own loopback port, run as the `postgres`
//! user from `/usr/lib/postgresql/15/bin` (the shared cluster on 5432, which other tests use, is
//! never touched). Stopped with `-m immediate` on drop.

use crate::netlab::run;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// What a replica warns of while its database is down: each answer of 503, and its background
/// work (heartbeats, activity, idle checks, pools, recordings, secrets, jobs, claims, forwarding
/// look-ups) failing until it returns; and, sqlx's, a pooled connection found broken.
pub const OUTAGE_WARNS: [&str; 19] = [
    "database unavailable",
    "replica heartbeat failed",
    "could not list the other replicas",
    "could not look up the guest's replica",
    "could not record an activity event",
    "recording a computer's last use failed",
    "pool refiller could not list the pools",
    "recordings: cannot list the recorded computers",
    "recordings: expiry failed",
    "could not list computers to apply secrets to",
    "could not read the computer's secrets",
    "could not look for interrupted jobs",
    "could not look for queued jobs",
    "idle check failed",
    "idle job could not list computers",
    "claim renewal failed; retrying",
    "releasing a claim failed; it expires by itself",
    "error occurred while testing the connection",
    "could not give back a lease granted",
];

/// One running (or stopped) cluster.
pub struct PgCluster {
    dir: tempfile::TempDir,
    pub port: u16,
}

impl PgCluster {
    /// `initdb` (trust, user `postgres`) and a first start.
    pub fn start() -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("rakazo-pg-").tempdir()?;
        run(Command::new("chown").arg("postgres").arg(dir.path()))?;
        let mut pg = PgCluster { dir, port: 0 };
        pg.pg(
            &format!("{PG_BIN}/initdb"),
            &["-A", "trust", "-U", "postgres", "--no-sync"],
        )
        .context("initdb")?;
        // A port free when chosen may be taken before PostgreSQL binds it: try a few.
        for _ in 0..5 {
            pg.port = crate::s3::free_port()?;
            if pg.start_again().is_ok() {
                return Ok(pg);
            }
        }
        bail!("the private PostgreSQL did not start")
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Runs `bin -D <data> args…` as the `postgres` user.
    fn pg(&self, bin: &str, args: &[&str]) -> Result<String> {
        run(Command::new("runuser")
            .args(["-u", "postgres", "--", bin, "-D"])
            .arg(self.data())
            .args(args))
    }

    /// `postgres://…` of its `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// `pg_ctl start -w`: returns once the server accepts connections.
    pub fn start_again(&self) -> Result<()> {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log").display().to_string();
        self.pg(
            &format!("{PG_BIN}/pg_ctl"),
            &["-o", &opts, "-w", "-t", "60", "-l", &log, "start"],
        )?;
        Ok(())
    }

    /// `pg_ctl stop -m fast -w`: sessions are ended, committed work is kept (a shutdown
    /// checkpoint), and it returns once the server is down.
    pub fn stop(&self) -> Result<()> {
        self.pg(
            &format!("{PG_BIN}/pg_ctl"),
            &["-m", "fast", "-w", "-t", "60", "stop"],
        )?;
        Ok(())
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self.pg(&format!("{PG_BIN}/pg_ctl"), &["-m", "immediate", "stop"]);
    }
}
