//! `bench_faults_store`: the database and the object store failing (issue 36), in one run.
//!
//! - **PostgreSQL restarted.** One `rakazo serve` on a private PostgreSQL cluster
//!   (`tests::pgcluster`), one local computer. The anchor is `GET /v1/computers/{id}` with the
//!   database up; then, per round, `pg_ctl stop -m fast`, the same request while it is down
//!   (what a failed request costs: answered 503 `database_unavailable`), `pg_ctl start -w`, and
//!   the time from that start returning to the first request that succeeds (polled every 10 ms),
//!   then to the first exec that succeeds.
//! - **Object store failing.** One `rakazo serve` keeping homes in s3s-fs through the test's
//!   fault-injecting proxy (`tests::s3fault`): a checkpoint of a home with `--mib` MiB of new
//!   content, clean (the anchor) and with `--fails` injected 500s on the next requests, the two
//!   kinds interleaved per round.
//!
//! Timings are printed, never asserted; only wrong results (a request that answers anything
//! but 503 while the database is down, a checkpoint that fails) fail the run.
//!
//! `cargo build -p control-plane -p guest-agent -p tests --bins &&
//!  $CARGO_TARGET_DIR/debug/bench_faults_store [--rounds N] [--down-requests N] [--mib N]
//!  [--fails N] [--smoke]` (`--smoke`: one round of each, tiny; explicit options win).

use anyhow::{bail, ensure, Context, Result};
use control_plane::client::ClientError;
use hyper::{Method, StatusCode};
use std::time::Duration;
use tests::bench::{arg, loadavg, ms, now, percentile, size};
use tests::pgcluster::PgCluster;
use tests::replicas::Replicas;
use tests::s3::S3Server;
use tests::s3fault::{Fault, Rule, S3Fault};
use tests::{ObjectStoreOptions, World, WorldOptions};

/// p50 and max of samples in ms, as a table's cells.
fn cells(v: &[f64]) -> String {
    format!(
        "{:.1} | {:.1}",
        percentile(v, 0.5),
        v.iter().copied().fold(f64::NAN, f64::max)
    )
}

async fn database(rounds: usize, down_requests: usize) -> Result<()> {
    let pg = PgCluster::start()?;
    let mut r = Replicas::start_on(&pg.url(), 1, |_, o| {
        o.allow_warn
            .extend(tests::pgcluster::OUTAGE_WARNS.iter().map(|w| w.to_string()));
    })
    .await?;
    let w_c = r.worlds[0].create_computer("bench-faults-db").await?;
    let w = &r.worlds[0];
    let show = format!("/v1/computers/{w_c}");
    let mut healthy = Vec::new();
    for _ in 0..size(50, 10) {
        let t = now();
        w.client.json(Method::GET, &show, None).await?;
        healthy.push(ms(t.elapsed()));
    }
    let (mut failed, mut recover, mut recover_exec, mut start) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        pg.stop()?;
        for _ in 0..down_requests {
            let t = now();
            let answer = tokio::time::timeout(
                Duration::from_secs(60),
                w.client.json(Method::GET, &show, None),
            )
            .await
            .context("no answer while the database is down")?;
            match answer {
                Err(ClientError::Api { status, code, .. })
                    if status == StatusCode::SERVICE_UNAVAILABLE
                        && code == "database_unavailable" =>
                {
                    failed.push(ms(t.elapsed()))
                }
                other => bail!("while the database is down: {other:?}"),
            }
        }
        let t = now();
        pg.start_again()?;
        start.push(ms(t.elapsed()));
        let t = now();
        loop {
            if w.client.json(Method::GET, &show, None).await.is_ok() {
                recover.push(ms(t.elapsed()));
                break;
            }
            ensure!(t.elapsed() < Duration::from_secs(60), "no recovery in 60 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        loop {
            if w.sh(&w_c, "true").await.is_ok() {
                recover_exec.push(ms(t.elapsed()));
                break;
            }
            ensure!(t.elapsed() < Duration::from_secs(60), "no exec in 60 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let anchor = percentile(&healthy, 0.5);
    println!("### PostgreSQL stopped and started ({rounds} rounds)\n");
    println!("| What | p50 ms | max ms | p50 ÷ healthy request |");
    println!("|---|---:|---:|---:|");
    println!(
        "| `GET /v1/computers/{{id}}`, database up (anchor) | {} | 1.00 |",
        cells(&healthy)
    );
    for (what, v) in [
        ("the same request while it is down (503)", &failed),
        ("`pg_ctl start -w` itself", &start),
        (
            "from the start returning to the first request answered",
            &recover,
        ),
        ("… to the first exec answered", &recover_exec),
    ] {
        println!(
            "| {what} | {} | {:.1} |",
            cells(v),
            percentile(v, 0.5) / anchor
        );
    }
    println!();
    r.worlds[0].check_log()?;
    drop(r);
    drop(pg);
    Ok(())
}

async fn store(rounds: usize, mib: usize, fails: u32) -> Result<()> {
    let s3 = S3Server::start().await?;
    let proxy = S3Fault::start(s3.port).await?;
    let mut opts = ObjectStoreOptions::for_server(&s3);
    opts.endpoint = proxy.endpoint.clone();
    let mut w = World::start_with(WorldOptions {
        object_store: Some(opts),
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("bench-faults-store").await?;
    let home = w.home_of(&c);
    std::fs::write(home.join("base.bin"), homes::testing::noise(mib << 20, 0))?;
    w.give_home(&c)?;
    w.home_ok(&c, "checkpoint").await?;
    let (mut clean, mut faulty) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for with_faults in [round % 2 == 1, round % 2 == 0] {
            let seed = (round * 2 + usize::from(with_faults) + 1) as u64;
            std::fs::write(home.join("new.bin"), homes::testing::noise(mib << 20, seed))?;
            w.give_home(&c)?;
            if with_faults {
                proxy.push(Rule::next(fails, Fault::Status(500)));
            }
            let t = now();
            w.home_ok(&c, "checkpoint").await?;
            let took = ms(t.elapsed());
            ensure!(
                proxy.spent(),
                "the faults were not all used: {:?}",
                proxy.recent(20)
            );
            if with_faults {
                faulty.push(took);
            } else {
                clean.push(took);
            }
        }
    }
    let anchor = percentile(&clean, 0.5);
    println!(
        "### Checkpoints through a failing object store ({rounds} rounds, {mib} MiB new each)\n"
    );
    println!("| Checkpoint | p50 ms | max ms | p50 ÷ clean |");
    println!("|---|---:|---:|---:|");
    println!("| clean store (anchor) | {} | 1.00 |", cells(&clean));
    println!(
        "| {fails} × 500 on the next requests | {} | {:.2} |",
        cells(&faulty),
        percentile(&faulty, 0.5) / anchor
    );
    let (requests, injected) = proxy.counts();
    println!(
        "\n- store requests through the proxy: {requests}, of them failed on purpose: {injected}\n"
    );
    w.check_log()
}

#[tokio::main]
async fn main() -> Result<()> {
    tests::bench::Usage::new("the database and the object store failing")
        .flag("--rounds", "N", "rounds of each part (default 5; smoke 1)")
        .flag(
            "--down-requests",
            "N",
            "requests while the database is down (default 5; smoke 2)",
        )
        .flag(
            "--mib",
            "N",
            "MiB of the home checkpointed (default 16; smoke 1)",
        )
        .flag(
            "--fails",
            "N",
            "500s in a row the store answers (default 6)",
        )
        .check();
    let rounds = arg("--rounds", size(5, 1));
    let down_requests = arg("--down-requests", size(5, 2));
    let mib = arg("--mib", size(16, 1));
    let fails = arg("--fails", 6) as u32;
    ensure!(
        rounds > 0 && down_requests > 0 && mib > 0,
        "counts must be positive"
    );
    println!("## Faults: database and object store (issue 36): run of `bench_faults_store`\n");
    println!(
        "- binaries: `{}`; load {}{}\n",
        tests::bin_dir().display(),
        loadavg(),
        if tests::bench::smoke() {
            "; **smoke run**"
        } else {
            ""
        }
    );
    database(rounds, down_requests).await?;
    store(rounds, mib, fails).await
}
