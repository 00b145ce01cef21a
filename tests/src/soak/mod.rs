//! The soak (issue 36, "Scale"): a mix of bots acting, observing and executing on several
//! computers through several replicas on a private PostgreSQL cluster, while a replica is killed
//! (SIGKILL) and restarted on a schedule and PostgreSQL is restarted once. One driver, used by
//! the system test `faults::soak` (about 3 minutes) and by `bench_soak` (30 minutes).
//!
//! - **Bots** ([`bots`]): on each exec computer one bot runs in a loop: take its execution lease
//!   (a new run, a new owner, a short TTL), run a command under it, write a file and read it
//!   back, release it (the release's run-end checkpoint) and now and then checkpoint the home
//!   itself. Now and then a run walks away from its lease without releasing it, as a crashed
//!   run does, and so does a run that saw an error while it held its lease: its lease must lapse
//!   by its TTL. A desktop bot on its own computer acts (a click and typed text on a page) and
//!   observes in runs of about 30 s.
//! - **Disruptions**: the replicas other than replica 0 are killed in turn and started again on
//!   the same data dir and address; PostgreSQL is stopped (`pg_ctl stop -m fast`) and started.
//!   Each makes a window (from the event to some seconds after recovery) in which clients may see
//!   the expected failures ([`EXPECTED_IN_WINDOW`]).
//! - **Memory**: replica 0 is never killed; its RSS is sampled on a period.
//! - **Checks** ([`check`]): every checkpoint answered OK is listed in the home's revisions, the
//!   file written before it reads back from it for a sample ([`Plan::read_back`]), and one per
//!   computer is restored for real; after the TTLs
//!   every bot's lease can be taken by a new owner; no client error outside the windows (but the
//!   refusals of a bot's own walked-away lease, until its TTL) and none of an unexpected class
//!   inside them; each replica's log has no ERROR and only allowed WARNs.

mod bots;
mod check;

use crate::fixture::Fixture;
use crate::pgcluster::{PgCluster, OUTAGE_WARNS};
use crate::replicas::Replicas;
use anyhow::{Context, Result};
use bots::{Bots, Tally};
use control_plane::client::{Client, ClientError};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Failure classes a client may see inside a disruption window: a killed replica's connections
/// refused or reset, requests relayed to it or to its guests failing while they reconnect, the
/// database's 503, the lease refusals that follow a run cut off mid-way, and a run-end or user
/// checkpoint that failed (the previous revision stays current).
pub const EXPECTED_IN_WINDOW: [&str; 14] = [
    "connect",
    "broken_response",
    "timeout",
    "tunnel_lost",
    "computer_unavailable",
    "guest_timeout",
    "database_unavailable",
    "lease_held",
    "lease_mismatch",
    "stale_lease",
    "home_leases_held",
    "home_store_failed",
    "checkpoint_failed",
    "checkpoint_skipped",
];

/// What a soak does and for how long.
#[derive(Debug, Clone)]
pub struct Plan {
    /// How long the bots run.
    pub secs: u64,
    pub replicas: usize,
    /// Computers with an exec bot each.
    pub computers: usize,
    /// Computers with a desktop bot each (0 or 1 on a 2-core machine).
    pub desktops: usize,
    /// First replica kill, seconds after the start; then every `kill_every` (0: once).
    pub kill_first_at: u64,
    pub kill_every: u64,
    /// How long a killed replica stays down.
    pub kill_down_secs: u64,
    /// When PostgreSQL is stopped, if at all, and for how long.
    pub pg_restart_at: Option<u64>,
    pub pg_down_secs: u64,
    /// RSS sampling period of replica 0.
    pub sample_every: Duration,
    /// The exec bots' lease TTL.
    pub ttl_ms: u64,
    /// An exec bot walks away from its lease on every `abandon_every`-th run.
    pub abandon_every: u32,
    /// An exec bot checkpoints its home itself after every `checkpoint_every`-th run.
    pub checkpoint_every: u32,
    /// A bot's pause between runs.
    pub pause: Duration,
    /// How long after a disruption ends its window lasts (guests redial, claims lapse).
    pub grace: Duration,
    /// Checkpoints read back per computer at most, besides those answered inside a window
    /// (each read opens its revision in the store: about a second in a debug build).
    pub read_back: usize,
}

impl Plan {
    /// The CI test's: about 3 minutes, one kill at ~1 min, PostgreSQL restarted at ~2 min.
    pub fn ci() -> Self {
        Self {
            secs: 140,
            replicas: 3,
            computers: 3,
            desktops: 1,
            kill_first_at: 50,
            kill_every: 0,
            kill_down_secs: 5,
            pg_restart_at: Some(100),
            pg_down_secs: 10,
            sample_every: Duration::from_secs(5),
            ttl_ms: 8_000,
            abandon_every: 7,
            checkpoint_every: 3,
            pause: Duration::from_millis(500),
            grace: Duration::from_secs(30),
            read_back: 4,
        }
    }

    /// Seconds after the start of each replica kill, and the replica (never 0).
    pub fn kills(&self) -> Vec<(u64, usize)> {
        let mut out = Vec::new();
        let mut at = self.kill_first_at;
        let mut victim = 1;
        while at > 0 && at + self.kill_down_secs < self.secs {
            out.push((at, victim));
            victim = if victim + 1 >= self.replicas {
                1
            } else {
                victim + 1
            };
            if self.kill_every == 0 {
                break;
            }
            at += self.kill_every;
        }
        out
    }
}

/// A disruption as it happened, in seconds since the bots started.
#[derive(Debug, Clone)]
pub struct Mark {
    pub at: f64,
    pub what: String,
}

/// A time span in which clients may fail in the expected ways.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub from: f64,
    pub to: f64,
}

/// What the soak did and saw.
#[derive(Debug, Default)]
pub struct Report {
    pub plan_secs: u64,
    /// Successful operations by kind.
    pub ops: BTreeMap<String, u64>,
    /// Failed operations by class, split in and outside the windows.
    pub errors_in_windows: BTreeMap<String, u64>,
    pub errors_explained_outside: BTreeMap<String, u64>,
    /// Seconds since the start of every failure (for the plot).
    pub error_times: Vec<f64>,
    pub marks: Vec<Mark>,
    pub windows: Vec<Window>,
    /// (seconds, RSS kB) of replica 0.
    pub rss: Vec<(f64, u64)>,
    /// (seconds, kB) of replica 0's anonymous memory (`RssAnon`: its heap and stacks; the rest
    /// of its RSS is pages of its binary and libraries, shared with the other replicas).
    pub anon: Vec<(f64, u64)>,
    pub checkpoints_ok: usize,
    /// Listed in their home's revisions at the end.
    pub checkpoints_listed: usize,
    /// Their file read back from the revision.
    pub checkpoints_verified: usize,
    pub restores_verified: usize,
    pub leases_verified: usize,
    pub leases_walked_away: usize,
    pub acts_seen_by_page: usize,
    pub acts_ok: usize,
    /// Everything that went wrong; empty means the soak passed.
    pub violations: Vec<String>,
}

/// A cluster, its computers and what the bots need.
struct Stage {
    /// Dropped before the cluster it runs on (fields drop in order).
    r: Replicas,
    computers: Vec<String>,
    desktops: Vec<String>,
    fixture: Fixture,
    pg: PgCluster,
}

/// WARNs a replica may log in a soak: the database outage's, a killed peer's, and two cores
/// running it all.
fn tune(o: &mut crate::WorldOptions) {
    o.allow_warn
        .extend(OUTAGE_WARNS.iter().map(|w| w.to_string()));
    for w in [
        // sqlx flags statements over 1 s: two cores running three replicas, guests, a desktop.
        "slow statement",
        // sqlx flags a pool acquire over 2 s: the same, as the database comes back.
        "time to acquire exceeded slow threshold",
        // A killed replica: the others see its peer links and relayed streams go.
        "peer connection refused",
        // A user's or a run-end checkpoint in flight through a killed replica or while the
        // database is down.
        "home checkpoint failed; the previous revision stays current",
        "checkpoint after the run failed; the previous revision stays current",
    ] {
        o.allow_warn.push(w.into());
    }
    // Every checkpoint answered OK must still be listed at the end.
    o.env.push(("RAKAZO_HOME_KEEP_LAST".into(), "10000".into()));
    o.idle_timeout_secs = Some(0);
}

async fn stage(plan: &Plan) -> Result<Stage> {
    let pg = tokio::task::block_in_place(PgCluster::start)?;
    let mut r = Replicas::start_on(&pg.url(), plan.replicas, |_, o| tune(o)).await?;
    // Created through every replica in turn, so guests are spread over them and a kill has
    // guests to move.
    let mut computers = Vec::new();
    for i in 0..plan.computers {
        let k = (i + 1) % plan.replicas;
        let id = r.worlds[k]
            .create_computer(&format!("ws-soak-{i}"))
            .await
            .with_context(|| format!("create computer {i} through replica {k}"))?;
        computers.push(id);
    }
    let mut desktops = Vec::new();
    for i in 0..plan.desktops {
        let id = r.worlds[0]
            .create_computer(&format!("ws-soak-desk-{i}"))
            .await?;
        desktops.push(id);
    }
    let fixture = Fixture::start().await?;
    Ok(Stage {
        pg,
        r,
        computers,
        desktops,
        fixture,
    })
}

/// The class of a failed call: the API's code, or what the connection did.
pub fn class_of(e: &ClientError) -> String {
    match e {
        ClientError::Api { code, .. } => code.clone(),
        ClientError::Connect { .. } => "connect".into(),
        ClientError::BadResponse(_) => "broken_response".into(),
        _ => "client".into(),
    }
}

/// (seconds, kB) samples of RSS and of its anonymous part.
type Samples = Arc<Mutex<(Vec<(f64, u64)>, Vec<(f64, u64)>)>>;

/// Samples replica 0's RSS and anonymous memory every `every` until `stop`.
fn sampler(
    pid: u32,
    t0: Instant,
    every: Duration,
    stop: Arc<AtomicBool>,
    out: Samples,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            let kb = crate::procstat::proc_kb(pid as i32, "status", "VmRSS:");
            let anon = crate::procstat::proc_kb(pid as i32, "status", "RssAnon:");
            let at = t0.elapsed().as_secs_f64();
            if let Ok(mut v) = out.lock() {
                v.0.push((at, kb));
                v.1.push((at, anon));
            }
        }
    })
}

/// Sleeps until `secs` after `t0`, or returns at once if that is past.
async fn until(t0: Instant, secs: f64) {
    let at = t0 + Duration::from_secs_f64(secs);
    tokio::time::sleep_until(at.into()).await;
}

/// Runs the disruptions of `plan` in order; returns their marks and windows.
async fn disrupt(
    plan: &Plan,
    st: &mut Stage,
    t0: Instant,
    marks: &mut Vec<Mark>,
    windows: &mut Vec<Window>,
    say: &(dyn Fn(&str) + Sync),
) -> Result<()> {
    enum Ev {
        Kill(usize),
        Pg,
    }
    let mut events: Vec<(u64, Ev)> = plan
        .kills()
        .into_iter()
        .map(|(at, v)| (at, Ev::Kill(v)))
        .collect();
    if let Some(at) = plan.pg_restart_at {
        events.push((at, Ev::Pg));
    }
    events.sort_by_key(|(at, _)| *at);
    let grace = plan.grace.as_secs_f64();
    for (at, ev) in events {
        until(t0, at as f64).await;
        let from = t0.elapsed().as_secs_f64();
        match ev {
            Ev::Kill(v) => {
                st.r.worlds[v].kill_server();
                say(&format!("{from:.1} s: replica {v} killed (SIGKILL)"));
                marks.push(Mark {
                    at: from,
                    what: format!("kill r{v}"),
                });
                tokio::time::sleep(Duration::from_secs(plan.kill_down_secs)).await;
                st.r.worlds[v]
                    .spawn_server()
                    .await
                    .with_context(|| format!("restart replica {v}"))?;
                let back = t0.elapsed().as_secs_f64();
                say(&format!("{back:.1} s: replica {v} started again"));
                marks.push(Mark {
                    at: back,
                    what: format!("start r{v}"),
                });
                windows.push(Window {
                    from: from - 1.0,
                    to: back + grace,
                });
            }
            Ev::Pg => {
                tokio::task::block_in_place(|| st.pg.stop())?;
                say(&format!("{from:.1} s: PostgreSQL stopped"));
                marks.push(Mark {
                    at: from,
                    what: "PG stop".into(),
                });
                tokio::time::sleep(Duration::from_secs(plan.pg_down_secs)).await;
                tokio::task::block_in_place(|| st.pg.start_again())?;
                let back = t0.elapsed().as_secs_f64();
                say(&format!("{back:.1} s: PostgreSQL started"));
                marks.push(Mark {
                    at: back,
                    what: "PG start".into(),
                });
                windows.push(Window {
                    from: from - 1.0,
                    to: back + grace,
                });
            }
        }
    }
    Ok(())
}

/// Runs the soak of `plan`; `say` gets progress lines. Violations are in the report; an `Err`
/// is a soak that could not run (setup failed).
pub async fn run(plan: &Plan, say: &(dyn Fn(&str) + Sync)) -> Result<Report> {
    let setup = crate::bench::now();
    let mut st = stage(plan).await?;
    say(&format!(
        "{} replicas on a private PostgreSQL (port {}), {} exec computers, {} desktop computers, set up in {:.1} s",
        plan.replicas,
        st.pg.port,
        st.computers.len(),
        st.desktops.len(),
        setup.elapsed().as_secs_f64()
    ));
    let clients: Vec<Client> = st.r.worlds.iter().map(|w| w.client.clone()).collect();
    let pid = st.r.worlds[0]
        .server_pid()
        .context("replica 0 is not running")?;
    let t0 = crate::bench::now();
    let stop = Arc::new(AtomicBool::new(false));
    let rss: Samples = Arc::default();
    let sampling = sampler(pid, t0, plan.sample_every, stop.clone(), rss.clone());
    let bots = Bots::start(
        plan,
        clients,
        &st.computers,
        &st.desktops,
        &st.fixture,
        t0,
        stop.clone(),
    );
    let mut marks = Vec::new();
    let mut windows = Vec::new();
    let disrupted = disrupt(plan, &mut st, t0, &mut marks, &mut windows, say).await;
    until(t0, plan.secs as f64).await;
    stop.store(true, Ordering::Relaxed);
    let tallies: Vec<Tally> = bots.join().await?;
    sampling.abort();
    let _ = sampling.await;
    say(&format!(
        "{:.1} s: the bots stopped",
        t0.elapsed().as_secs_f64()
    ));
    let mut report = Report {
        plan_secs: plan.secs,
        marks,
        windows,
        rss: rss.lock().map(|v| v.0.clone()).unwrap_or_default(),
        anon: rss.lock().map(|v| v.1.clone()).unwrap_or_default(),
        ..Default::default()
    };
    if let Err(e) = disrupted {
        report
            .violations
            .push(format!("a disruption failed: {e:#}"));
    }
    check::tally(plan, &tallies, &mut report);
    let checks = crate::bench::now();
    check::after(plan, &mut st, &tallies, &mut report, say).await;
    say(&format!(
        "checked in {:.1} s",
        checks.elapsed().as_secs_f64()
    ));
    Ok(report)
}

/// The first sample at or after `secs`.
fn at(samples: &[(f64, u64)], secs: f64) -> Option<u64> {
    samples.iter().find(|(t, _)| *t >= secs).map(|(_, kb)| *kb)
}

impl Report {
    /// RSS (kB) of replica 0 at the first sample at or after `secs`, and at the end.
    pub fn rss_at(&self, secs: f64) -> Option<u64> {
        at(&self.rss, secs)
    }

    /// Anonymous memory (kB) of replica 0 at the first sample at or after `secs`.
    pub fn anon_at(&self, secs: f64) -> Option<u64> {
        at(&self.anon, secs)
    }

    /// Prints the figures as Markdown lines.
    pub fn print(&self, warm_up: f64) {
        let join = |m: &BTreeMap<String, u64>| {
            if m.is_empty() {
                return "none".to_string();
            }
            m.iter()
                .map(|(k, v)| format!("`{k}` ×{v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!("- operations that succeeded: {}", join(&self.ops));
        println!(
            "- failures inside the disruption windows: {}",
            join(&self.errors_in_windows)
        );
        println!(
            "- failures outside them, explained (a walked-away lease still held, before its TTL): {}",
            join(&self.errors_explained_outside)
        );
        for m in &self.marks {
            println!("- {:.1} s: {}", m.at, m.what);
        }
        println!(
            "- checkpoints answered OK: {}; listed in the revisions at the end: {}; read back from their revision: {} (each computer's first and last, and samples of those answered in a window and of all); restored for real: {}",
            self.checkpoints_ok, self.checkpoints_listed, self.checkpoints_verified, self.restores_verified
        );
        println!(
            "- leases walked away from: {}; every bot's lease taken by a new owner at the end: {}",
            self.leases_walked_away, self.leases_verified
        );
        println!(
            "- desktop acts answered OK: {}; of them seen by the page: {}",
            self.acts_ok, self.acts_seen_by_page
        );
        if let (Some(first), Some(warm), Some(last)) = (
            self.rss.first(),
            self.rss_at(warm_up),
            self.rss.last().map(|(_, kb)| *kb),
        ) {
            let max_after = self
                .rss
                .iter()
                .filter(|(t, _)| *t >= warm_up)
                .map(|(_, kb)| *kb)
                .max()
                .unwrap_or(last);
            println!(
                "- replica 0 RSS: {:.1} MiB at the start, {:.1} MiB after warm-up ({warm_up:.0} s), {:.1} MiB at the end ({:+.1} % since warm-up), max after warm-up {:.1} MiB ({:+.1} %); {} samples",
                first.1 as f64 / 1024.0,
                warm as f64 / 1024.0,
                last as f64 / 1024.0,
                (last as f64 / warm as f64 - 1.0) * 100.0,
                max_after as f64 / 1024.0,
                (max_after as f64 / warm as f64 - 1.0) * 100.0,
                self.rss.len()
            );
        }
        if let (Some(first), Some(warm), Some(last)) = (
            self.anon.first(),
            self.anon_at(warm_up),
            self.anon.last().map(|(_, kb)| *kb),
        ) {
            println!(
                "- replica 0 anonymous memory (`RssAnon`: heap and stacks): {:.1} MiB at the start, {:.1} MiB after warm-up, {:.1} MiB at the end ({:+.1} % since warm-up)",
                first.1 as f64 / 1024.0,
                warm as f64 / 1024.0,
                last as f64 / 1024.0,
                (last as f64 / warm as f64 - 1.0) * 100.0,
            );
        }
        if self.violations.is_empty() {
            println!("- violations: none");
        } else {
            println!("- violations ({}):", self.violations.len());
            for v in self.violations.iter().take(40) {
                println!("  - {v}");
            }
        }
    }
}
