//! `bench_replicas`: control-plane replicas on PostgreSQL (issue 14), in one run.
//!
//! Three real `rakazo serve` replicas on a fresh PostgreSQL schema and one S3 server
//! (`tests::replicas::Replicas`), local computers created round-robin through them. Each
//! computer's guest is connected to one replica (its "owner", read from the replicas' logs); any
//! other replica serves the computer's requests by relaying the operation's stream through the
//! owner over the peer link ("forwarding").
//!
//! - **Forwarding vs owning** ("Must show" 3): the exec round trip of `true` through the owning
//!   replica's HTTP API (the anchor) and through each of the two others, interleaved (one of each
//!   per round, the order rotating), after warm-ups; then a file upload and download
//!   (`PUT`/`GET …/files/content`) through each.
//! - **Load** ("Must show" 2): `--bots` bots spread over `--computers` computers, each sending
//!   `--rate` execs of `true` per second through replica (bot % 3), for `--secs`, to computers
//!   chosen so that each replica serves both computers it owns and computers it forwards to
//!   ([`computer_of`]). Per replica: requests, successes, errors by API code (and how many
//!   said `uncertain: true`), latency. With `--kill-at S`, the replica holding the most guests is
//!   killed with SIGKILL at second S; its bots then send to the next replica (as a load balancer
//!   that took it out would), and the errors are split by phase, with those of requests sent to
//!   the dead replica itself counted apart.
//!
//! Timings are printed, never asserted; only wrong results (an exec of `true` that
//! does not exit 0 outside the load test, a file that comes back different) fail the run. The
//! replicas' logs are copied to a directory printed at the end, since their data dirs go with
//! the run.
//!
//! `cargo build -p control-plane -p guest-agent -p tests --bins &&
//!  target/debug/bench_replicas [--runs N] [--warmups N] [--file-mib N] [--file-runs N]
//!  [--computers C] [--bots N] [--rate M] [--secs S] [--kill-at S] [--smoke]`
//! (`--smoke`: everything tiny, for CI; explicit options still win). PostgreSQL at
//! `RAKAZO_TEST_PG_URL` (default: the test suite's).

use anyhow::{ensure, Context, Result};
use control_plane::client::{q, Client, ClientError};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tests::bench::{arg, ms, now};
use tests::replicas::Replicas;
use tests::{exec_via, wait_for, ExecOutput};
use tokio::time::MissedTickBehavior;

/// Replicas in the cluster.
const REPLICAS: usize = 3;
/// An exec of the load test that has not answered in this long counts as a `timeout` error.
const OP_TIMEOUT: Duration = Duration::from_secs(30);
/// No replica is dead.
const NONE: usize = usize::MAX;

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

/// Percentiles (nearest rank) and mean of samples, in ms.
struct Summary {
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
    mean: f64,
}

impl Summary {
    fn of(samples: &[Duration]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let mut v: Vec<f64> = samples.iter().map(|d| ms(*d)).collect();
        v.sort_by(f64::total_cmp);
        let rank = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Some(Self {
            p50: rank(0.5),
            p90: rank(0.9),
            p99: rank(0.99),
            max: v[v.len() - 1],
            mean: v.iter().sum::<f64>() / v.len() as f64,
        })
    }
}

fn exec_path(computer: &str) -> String {
    format!("/v1/computers/{}/exec", q(computer))
}

fn true_spec() -> serde_json::Value {
    serde_json::json!({ "argv": ["true"] })
}

/// The replica (among the live ones) whose log says `computer`'s guest connected to it last and
/// not since disconnected, as `Replicas::holder_of` reads it, leaving out replica `dead` (whose
/// log stops at its death with the guest still "connected").
fn holder(r: &Replicas, computer: &str, dead: usize) -> Option<usize> {
    let id = format!("computer_id={computer}");
    let mut found = None;
    for (i, w) in r.worlds.iter().enumerate() {
        if i == dead {
            continue;
        }
        let log = w.log();
        let count = |what: &str| {
            log.lines()
                .filter(|l| l.contains(what) && l.contains(&id))
                .count()
        };
        if count("guest connected") > count("guest disconnected") {
            found = Some(i);
        }
    }
    found
}

// ---------------------------------------------------------------------------------------------
// Forwarding vs owning.

async fn exec_true(client: &Client, path: &str) -> Result<Duration> {
    let t = now();
    let out = exec_via(client, path, &true_spec()).await?;
    let d = t.elapsed();
    ensure!(out.code == Some(0), "exec true: {:?}", out.events);
    Ok(d)
}

/// Replica names of the three rows: the owner first, then the two forwarders.
fn row_names(order: &[usize; REPLICAS]) -> [String; REPLICAS] {
    [
        format!("owning replica {} (anchor)", order[0]),
        format!("forwarding replica {}", order[1]),
        format!("forwarding replica {}", order[2]),
    ]
}

async fn forwarding_vs_owning(
    r: &Replicas,
    computer: &str,
    owner: usize,
    o: &Options,
) -> Result<()> {
    let order = [owner, (owner + 1) % REPLICAS, (owner + 2) % REPLICAS];
    let names = row_names(&order);
    let path = exec_path(computer);
    let mut samples: [Vec<Duration>; REPLICAS] = Default::default();
    for i in 0..o.warmups + o.runs {
        // One exec through each replica per round, starting from a different one each round.
        for k in 0..REPLICAS {
            let row = (i + k) % REPLICAS;
            let d = exec_true(&r.worlds[order[row]].client, &path)
                .await
                .with_context(|| format!("exec through replica {}", order[row]))?;
            if i >= o.warmups {
                samples[row].push(d);
            }
        }
    }
    println!(
        "### Exec round trip of `true`: owning vs forwarding replica ({} runs per row after {} warm-ups, interleaved)\n",
        o.runs, o.warmups
    );
    println!("`POST /v1/computers/{{id}}/exec` of `argv: [\"true\"]` through the shipped client (keep-alive) to the HTTP API of each replica, read to the exit code. The guest is connected to the owning replica; the others relay the operation's stream to it over the peer link.\n");
    println!("| through | p50 ms | p90 ms | p99 ms | mean ms | p50 / owner | added ms at p50 | added ms at p99 |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let rows: Vec<Summary> = samples
        .iter()
        .map(|s| Summary::of(s).context("no samples"))
        .collect::<Result<_>>()?;
    let anchor = &rows[0];
    for (name, s) in names.iter().zip(&rows) {
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2}× | {:+.2} | {:+.2} |",
            s.p50,
            s.p90,
            s.p99,
            s.mean,
            s.p50 / anchor.p50,
            s.p50 - anchor.p50,
            s.p99 - anchor.p99
        );
    }
    println!();

    // A file up and down through each replica.
    let data = pattern(o.file_mib << 20);
    let mut up: [Vec<Duration>; REPLICAS] = Default::default();
    let mut down: [Vec<Duration>; REPLICAS] = Default::default();
    for i in 0..o.file_runs {
        for k in 0..REPLICAS {
            let row = (i + k) % REPLICAS;
            let w = &r.worlds[order[row]];
            let name = format!("bench-{row}.bin");
            let t = now();
            w.put_file(computer, &name, data.clone(), false)
                .await
                .with_context(|| format!("upload through replica {}", order[row]))?;
            up[row].push(t.elapsed());
            let t = now();
            let got = w
                .get_file(computer, &name)
                .await
                .with_context(|| format!("download through replica {}", order[row]))?;
            down[row].push(t.elapsed());
            ensure!(
                got == data,
                "the file came back different through replica {} ({} of {} bytes)",
                order[row],
                got.len(),
                data.len()
            );
        }
    }
    println!(
        "### A {} MiB file through the owning vs a forwarding replica ({} runs per row, interleaved; MB/s = 10^6 bytes/s)\n",
        o.file_mib, o.file_runs
    );
    println!("Upload is `PUT …/files/content` until the reply (the guest fsyncs before it answers); download is `GET` of the same file, checked byte for byte.\n");
    println!("| through | direction | best MB/s | median MB/s | median / owner |");
    println!("|---|---|---:|---:|---:|");
    for (dir, copies) in [("upload", &up), ("download", &down)] {
        let anchor = rates(data.len(), &copies[0]).1;
        for (name, c) in names.iter().zip(copies.iter()) {
            let (best, med) = rates(data.len(), c);
            println!(
                "| {name} | {dir} | {best:.1} | {med:.1} | {:.2}× |",
                med / anchor
            );
        }
    }
    println!();
    Ok(())
}

/// Best and median rate of copies of `bytes` each, MB/s (10^6).
fn rates(bytes: usize, samples: &[Duration]) -> (f64, f64) {
    let mut r: Vec<f64> = samples
        .iter()
        .map(|d| bytes as f64 / 1e6 / d.as_secs_f64())
        .collect();
    r.sort_by(f64::total_cmp);
    (r[r.len() - 1], r[r.len() / 2])
}

/// Bytes that do not compress.
fn pattern(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Load.

/// How one exec of the load test ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Ok,
    /// The API's error code (or `connect`, `broken_response`, `timeout`, `exit_N` for what is
    /// not one), and whether it said `uncertain: true`.
    Err {
        code: String,
        uncertain: bool,
    },
}

fn outcome(r: Result<Result<ExecOutput, ClientError>, tokio::time::error::Elapsed>) -> Outcome {
    let err = |code: &str, uncertain: bool| Outcome::Err {
        code: code.to_string(),
        uncertain,
    };
    match r {
        Err(_) => err("timeout", false),
        Ok(Ok(out)) if out.code == Some(0) => Outcome::Ok,
        Ok(Ok(out)) => match &out.error {
            Some(e) => err(
                e["code"].as_str().unwrap_or("error_event"),
                e["uncertain"] == true,
            ),
            None => err(&format!("exit_{:?}", out.code), false),
        },
        Ok(Err(ClientError::Api {
            code, uncertain, ..
        })) => err(&code, uncertain),
        Ok(Err(ClientError::Connect { .. })) => err("connect", false),
        Ok(Err(ClientError::BadResponse(_))) => err("broken_response", false),
        Ok(Err(_)) => err("client", false),
    }
}

/// One exec of the load test.
struct Op {
    /// The replica it was sent to.
    replica: usize,
    computer: usize,
    /// Since the load started.
    start: Duration,
    end: Duration,
    outcome: Outcome,
}

impl Op {
    fn latency(&self) -> Duration {
        self.end - self.start
    }
}

/// The killed replica and when (since the load started; and UTC, to read the logs by).
struct Kill {
    replica: usize,
    at: Duration,
    utc: String,
}

/// The time of day now, UTC, as the replicas' logs write it (`HH:MM:SS.mmm`).
#[allow(clippy::disallowed_methods)] // reason: to find the kill in the replicas' logs
fn utc_now() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let s = t.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        t.subsec_millis()
    )
}

/// What every bot of the load test shares.
struct Fleet {
    /// Each replica's API client.
    clients: Vec<Client>,
    /// Each computer's exec path.
    paths: Vec<String>,
    /// Execs per second per bot.
    rate: usize,
    t0: Instant,
    until: Duration,
    /// The killed replica, or [`NONE`].
    dead: AtomicUsize,
}

/// The computer of bot `b` (`owners`: each computer's replica): one its replica holds for bots
/// 0–2, 6–8, …, one another replica holds for bots 3–5, 9–11, …, so that every replica serves
/// both (when there is such a computer); spread over the candidates.
fn computer_of(b: usize, owners: &[usize]) -> usize {
    let replica = b % REPLICAS;
    let round = b / REPLICAS;
    let owned = round.is_multiple_of(2);
    let candidates: Vec<usize> = (0..owners.len())
        .filter(|&i| (owners[i] == replica) == owned)
        .collect();
    if candidates.is_empty() {
        return b % owners.len();
    }
    candidates[(round / 2 + replica) % candidates.len()]
}

/// One bot: execs of `true` on `computer` through replica `home` (the next one once `home` is
/// dead), paced at the fleet's rate until its end.
async fn bot(fleet: Arc<Fleet>, home: usize, computer: usize) -> Vec<Op> {
    let mut ops = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / fleet.rate as f64));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if fleet.t0.elapsed() >= fleet.until {
            return ops;
        }
        // After the kill, as a load balancer that took the dead replica out: the next one.
        let replica = if fleet.dead.load(Ordering::SeqCst) == home {
            (home + 1) % REPLICAS
        } else {
            home
        };
        let start = fleet.t0.elapsed();
        let r = tokio::time::timeout(
            OP_TIMEOUT,
            exec_via(
                &fleet.clients[replica],
                &fleet.paths[computer],
                &true_spec(),
            ),
        )
        .await;
        ops.push(Op {
            replica,
            computer,
            start,
            end: fleet.t0.elapsed(),
            outcome: outcome(r),
        });
    }
}

/// `"code ×n (u uncertain), …"` of the failed ops, or `-`.
fn error_codes<'a>(ops: impl Iterator<Item = &'a Op>) -> String {
    let mut by: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for op in ops {
        if let Outcome::Err { code, uncertain } = &op.outcome {
            let e = by.entry(code.as_str()).or_default();
            e.0 += 1;
            e.1 += usize::from(*uncertain);
        }
    }
    if by.is_empty() {
        return "-".into();
    }
    by.iter()
        .map(|(code, (n, u))| format!("`{code}` ×{n} ({u} uncertain)"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn is_err(op: &Op) -> bool {
    op.outcome != Outcome::Ok
}

fn uncertain(op: &Op) -> bool {
    matches!(
        op.outcome,
        Outcome::Err {
            uncertain: true,
            ..
        }
    )
}

/// One table row: requests, ok, errors (codes), uncertain, latency of the successes.
fn print_row(name: &str, ops: &[&Op]) {
    let ok: Vec<Duration> = ops
        .iter()
        .filter(|o| !is_err(o))
        .map(|o| o.latency())
        .collect();
    let errors = ops.iter().filter(|o| is_err(o)).count();
    let unc = ops.iter().filter(|o| uncertain(o)).count();
    let lat = match Summary::of(&ok) {
        Some(s) => format!("{:.2} | {:.2} | {:.2}", s.p50, s.p99, s.max),
        None => "- | - | -".into(),
    };
    println!(
        "| {name} | {} | {} | {errors} | {unc} | {} | {lat} |",
        ops.len(),
        ok.len(),
        error_codes(ops.iter().copied())
    );
}

fn table_head(first: &str) {
    println!(
        "| {first} | requests | ok | errors | uncertain | error codes | p50 ms | p99 ms | max ms |"
    );
    println!("|---|---:|---:|---:|---:|---|---:|---:|---:|");
}

async fn load(r: &mut Replicas, computers: &[String], o: &Options) -> Result<()> {
    let c = computers.len();
    let owners: Vec<usize> = computers
        .iter()
        .map(|id| holder(r, id, NONE).context("a computer's guest is connected nowhere"))
        .collect::<Result<_>>()?;
    let t0 = now();
    let fleet = Arc::new(Fleet {
        clients: r.worlds.iter().map(|w| w.client.clone()).collect(),
        paths: computers.iter().map(|id| exec_path(id)).collect(),
        rate: o.rate,
        t0,
        until: Duration::from_secs(o.secs as u64),
        dead: AtomicUsize::new(NONE),
    });
    let mut bots = Vec::new();
    for b in 0..o.bots {
        bots.push(tokio::spawn(bot(
            fleet.clone(),
            b % REPLICAS,
            computer_of(b, &owners),
        )));
    }
    let mut kill = None;
    if o.kill_at > 0 {
        tokio::time::sleep_until((t0 + Duration::from_secs(o.kill_at as u64)).into()).await;
        // The replica holding the most guests now (the lowest index on a tie).
        let mut held = [0usize; REPLICAS];
        for id in computers {
            if let Some(h) = holder(r, id, NONE) {
                held[h] += 1;
            }
        }
        let victim = (0..REPLICAS)
            .max_by_key(|&i| (held[i], std::cmp::Reverse(i)))
            .unwrap_or(0);
        let at = t0.elapsed();
        let utc = utc_now();
        fleet.dead.store(victim, Ordering::SeqCst);
        r.worlds[victim].kill_server();
        kill = Some(Kill {
            replica: victim,
            at,
            utc,
        });
    }
    let mut ops: Vec<Op> = Vec::new();
    for b in bots {
        ops.extend(b.await?);
    }
    let wall = t0.elapsed();
    let dead_now = kill.as_ref().map_or(NONE, |k| k.replica);
    let owners_after: Vec<Option<usize>> =
        computers.iter().map(|id| holder(r, id, dead_now)).collect();

    println!(
        "### Load: {} bots × {} execs of `true`/s for {} s over {c} computers and {REPLICAS} replicas\n",
        o.bots, o.rate, o.secs
    );
    println!("Each bot sends one exec at a time, paced by a `tokio` interval (`MissedTickBehavior::Delay`: a late answer delays the bot's next request, so the offered rate drops when latency passes the period), through replica (bot % 3), to a computer that replica holds for bots 0–2, 6–8, … and to one another replica holds for bots 3–5, 9–11, … (when there is one); a request that has not answered in {} s counts as `timeout`. Latency columns are of the successful requests.\n", OP_TIMEOUT.as_secs());
    println!(
        "- guests' replicas at the start: {}",
        (0..c)
            .map(|i| format!("computer {i} → replica {}", owners[i]))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for b in 0..o.bots {
        let (home, comp) = (b % REPLICAS, computer_of(b, &owners));
        let how = if owners[comp] == home {
            "owned"
        } else {
            "forwarded"
        };
        println!("- bot {b}: replica {home}, computer {comp} ({how})");
    }
    println!(
        "- requests: {} in {:.1} s = {:.1}/s (offered {}/s)\n",
        ops.len(),
        wall.as_secs_f64(),
        ops.len() as f64 / wall.as_secs_f64(),
        o.bots * o.rate
    );

    let owned = |op: &Op| {
        let h = if kill.as_ref().is_some_and(|k| op.start >= k.at) {
            owners_after[op.computer]
        } else {
            Some(owners[op.computer])
        };
        h == Some(op.replica)
    };
    table_head("sent to");
    for i in 0..REPLICAS {
        let mine: Vec<&Op> = ops.iter().filter(|op| op.replica == i).collect();
        print_row(&format!("replica {i}"), &mine);
        let own: Vec<&Op> = mine.iter().copied().filter(|op| owned(op)).collect();
        let fwd: Vec<&Op> = mine.iter().copied().filter(|op| !owned(op)).collect();
        print_row(&format!("&nbsp;&nbsp;replica {i}, owned"), &own);
        print_row(&format!("&nbsp;&nbsp;replica {i}, forwarded"), &fwd);
    }
    let all: Vec<&Op> = ops.iter().collect();
    print_row("**all**", &all);
    println!();

    if let Some(k) = &kill {
        let victim = k.replica;
        println!(
            "### Load: replica {victim} killed with SIGKILL at {:.3} s ({} UTC; it held {} of the {c} guests)\n",
            k.at.as_secs_f64(),
            k.utc,
            owners.iter().filter(|&&h| h == victim).count()
        );
        println!("Phases by each request's send and answer times: before (answered before the kill), in flight (sent before, answered after), after (sent after). \"Sent to the dead replica\" are the requests whose HTTP connection was to the killed replica itself (a load balancer would take it out); its bots send to replica {} after the kill.\n", (victim + 1) % REPLICAS);
        table_head("phase");
        // 0: answered before the kill, 1: in flight at it, 2: sent after it.
        let phase = |op: &Op| {
            if op.end < k.at {
                0
            } else if op.start < k.at {
                1
            } else {
                2
            }
        };
        let phases = ["before the kill", "in flight at the kill", "after the kill"];
        for (p, name) in phases.iter().enumerate() {
            let live: Vec<&Op> = ops
                .iter()
                .filter(|op| phase(op) == p && op.replica != victim)
                .collect();
            let to_dead: Vec<&Op> = ops
                .iter()
                .filter(|op| phase(op) == p && op.replica == victim)
                .collect();
            print_row(&format!("{name}, sent to live replicas"), &live);
            if !to_dead.is_empty() {
                print_row(&format!("{name}, sent to the dead replica"), &to_dead);
            }
        }
        println!();
        println!(
            "After the kill, per computer (the guests of the dead replica reconnect to another):\n"
        );
        println!("| computer | replica before → after | first success sent after the kill, s after it | slowest success sent after the kill, ms | errors sent after the kill |");
        println!("|---|---|---:|---:|---:|");
        for (i, after) in owners_after.iter().enumerate() {
            let mine: Vec<&Op> = ops
                .iter()
                .filter(|op| op.computer == i && op.start >= k.at)
                .collect();
            let first = mine
                .iter()
                .filter(|op| !is_err(op))
                .map(|op| op.end)
                .min()
                .map_or("-".into(), |e| format!("{:.3}", (e - k.at).as_secs_f64()));
            let slowest = mine
                .iter()
                .filter(|op| !is_err(op))
                .map(|op| op.latency())
                .max()
                .map_or("-".into(), |d| format!("{:.1}", ms(d)));
            let errors = mine.iter().filter(|op| is_err(op)).count();
            let after = after.map_or("none".into(), |a| a.to_string());
            println!(
                "| {i} | {} → {after} | {first} | {slowest} | {errors} |",
                owners[i]
            );
        }
        println!();
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------

struct Options {
    runs: usize,
    warmups: usize,
    file_mib: usize,
    file_runs: usize,
    computers: usize,
    bots: usize,
    rate: usize,
    secs: usize,
    kill_at: usize,
}

/// The WARN and ERROR lines of each replica's log (counted, the distinct messages shown), and a
/// copy of the replicas' and guests' logs that outlives the run.
fn logs(r: &Replicas, computers: &[String]) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("bench_replicas-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // Each computer's guest log, in the machines dir of the replica that created it.
    for (i, id) in computers.iter().enumerate() {
        let from = r.worlds[i % REPLICAS].local_dir_of(id).join("guest.log");
        let _ = std::fs::copy(from, dir.join(format!("computer-{i}-guest.log")));
    }
    println!("### The replicas' logs\n");
    for (i, w) in r.worlds.iter().enumerate() {
        let log = w.log();
        std::fs::write(dir.join(format!("replica-{i}.log")), &log)?;
        let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
        for line in log.lines() {
            for level in [" WARN ", " ERROR "] {
                if let Some((_, rest)) = line.split_once(level) {
                    // The message without the timestamp and the fields that vary (addresses).
                    let msg: String = rest.chars().take(90).collect();
                    *kinds.entry(format!("{} {msg}", level.trim())).or_default() += 1;
                }
            }
        }
        let total: usize = kinds.values().sum();
        println!("- replica {i}: {total} WARN/ERROR lines");
        for (k, n) in kinds.iter().take(8) {
            println!("  - ×{n} `{}`", k.replace('`', "'"));
        }
    }
    println!();
    Ok(dir)
}

#[tokio::main]
async fn main() -> Result<()> {
    tests::bench::Usage::new("control-plane replicas on PostgreSQL")
        .flag("--runs", "N", "measured execs (default 300; smoke 20)")
        .flag(
            "--warmups",
            "N",
            "execs before measuring (default runs/10, at least 5)",
        )
        .flag(
            "--file-mib",
            "N",
            "MiB of each file transfer (default 16; smoke 4)",
        )
        .flag("--file-runs", "N", "file transfers (default 5; smoke 1)")
        .flag("--computers", "N", "computers (default 3; smoke 2)")
        .flag("--bots", "N", "bots of the load test (default 6)")
        .flag("--rate", "N", "execs per second per bot (default 5)")
        .flag(
            "--secs",
            "N",
            "seconds of the load test (default 60; smoke 5)",
        )
        .flag(
            "--kill-at",
            "N",
            "second of the load test a replica is killed at (default 0: none)",
        )
        .check();
    let smoke = flag("--smoke");
    let pick = |name: &str, full: usize, tiny: usize| arg(name, if smoke { tiny } else { full });
    let runs = pick("--runs", 300, 20);
    let o = Options {
        runs,
        warmups: pick("--warmups", (runs / 10).max(5), 5),
        file_mib: pick("--file-mib", 16, 4),
        file_runs: pick("--file-runs", 5, 1),
        computers: pick("--computers", 3, 2),
        bots: pick("--bots", 6, 6),
        rate: pick("--rate", 5, 5),
        secs: pick("--secs", 60, 5),
        kill_at: arg("--kill-at", 0),
    };
    ensure!(
        o.runs > 0
            && o.file_mib > 0
            && o.file_runs > 0
            && o.computers > 0
            && o.bots > 0
            && o.rate > 0
            && o.secs > 0,
        "counts must be positive"
    );
    ensure!(o.kill_at < o.secs, "--kill-at must come before --secs ends");
    let profile = tests::bin_dir();
    println!("## Replicas on PostgreSQL (issue 14): run of `bench_replicas`\n");
    println!(
        "- binaries: `{}`; {REPLICAS} replicas, one PostgreSQL schema, one S3 server (s3s-fs), local computers, loopback{}\n",
        profile.display(),
        if smoke { "; **smoke run**" } else { "" }
    );

    let setup = now();
    let mut r = Replicas::start(REPLICAS, |_, opts| {
        opts.idle_timeout_secs = Some(0);
        // A killed replica: the others see its peer links and relayed streams go.
        opts.allow_warn.push("peer connection refused".into());
    })
    .await?;
    let mut computers = Vec::new();
    for i in 0..o.computers {
        let id = r.worlds[i % REPLICAS]
            .create_computer(&format!("bench-replicas-{i}"))
            .await
            .with_context(|| format!("create computer {i} through replica {}", i % REPLICAS))?;
        computers.push(id);
    }
    for id in &computers {
        wait_for(Duration::from_secs(30), "the guest's replica", || {
            holder(&r, id, NONE)
        })
        .await?;
    }
    println!(
        "- setup (replicas started, {} computers created and connected): {:.1} s\n",
        o.computers,
        setup.elapsed().as_secs_f64()
    );

    let owner = holder(&r, &computers[0], NONE).context("computer 0 connected nowhere")?;
    if owner != 0 {
        println!("- computer 0 was created through replica 0, but its guest is connected to replica {owner}: that one is the owner\n");
    }
    let result = async {
        forwarding_vs_owning(&r, &computers[0], owner, &o).await?;
        load(&mut r, &computers, &o).await
    }
    .await;
    let dir = logs(&r, &computers)?;
    println!("- logs copied to `{}`", dir.display());
    result
}
