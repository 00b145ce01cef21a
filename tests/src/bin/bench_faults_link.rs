//! `bench_faults_link`: the guest↔control-plane link through a degraded path (issue 36,
//! docs/faults.md#the-link) against the clean link, in one run.
//!
//! One `rakazo serve` with one contained local computer (`--local-containment full`) whose
//! guest reaches the tunnel only through the relays of `tests::impair::Link`. Each round
//! measures every operation on the clean link (the relays forwarding at once, no `tbf`), then
//! switches the same link to the degraded path (100 ms round trip, 1% of UDP datagrams dropped,
//! seeded; 20 Mbit/s each way by `tbf` on the computer's veth) and measures again, so load that
//! comes and goes hits both alike:
//!
//! - exec round trip of `true` through the API;
//! - observe (a whole PNG frame of the bot's 1280x800 desktop);
//! - a live-view frame: a whole framebuffer update (ZRLE) asked of an open RFB viewer on the
//!   capability websocket;
//! - a 1 MiB file put, until the reply.
//!
//! Then the reconnection after a cut: the link drops everything for `--cut-secs` (longer than
//! the tunnel's 6 s idle timeout, so both ends give the connection up), is restored, and the
//! time from the restore to the first successful exec is measured (the guest's backoff decides
//! most of it). Timings are printed, never asserted; only wrong results fail the run.
//!
//! `cargo build -p control-plane --bin rakazo -p guest-agent --bin rakazo-guest -p tests --bins
//!  && $CARGO_TARGET_DIR/debug/bench_faults_link [--rounds N] [--cuts N] [--cut-secs N]`
//!
//! `--smoke`: a few rounds and one short cut, for CI (`scripts/bench-smoke.sh`).

use anyhow::{anyhow, ensure, Result};
use std::time::Duration;
use tests::bench::{arg, loadavg, ms, now, percentile, size, NoDelayClient};
use tests::impair::{self, Impairment, Link};
use tests::live::{connect, Rfb, WsBytes};
use tests::WorldOptions;

const OPS: [&str; 4] = [
    "exec `true`",
    "observe",
    "live-view frame",
    "1 MiB file put",
];
const ZRLE: i32 = 16;

#[tokio::main]
async fn main() -> Result<()> {
    tests::bench::Usage::new("the guest link through a degraded path against the clean link")
        .flag(
            "--rounds",
            "N",
            "measured rounds per path (default 20; smoke 3)",
        )
        .flag("--cuts", "N", "link cuts (default 3; smoke 1)")
        .flag(
            "--cut-secs",
            "N",
            "seconds each cut lasts (default 30; smoke 8)",
        )
        .check();
    let rounds = arg("--rounds", size(20, 3));
    let cuts = arg("--cuts", size(3, 1));
    let cut_secs = arg("--cut-secs", size(30, 8)) as u64;
    ensure!(rounds > 0 && cuts > 0, "counts must be positive");
    let link = Link::start(Impairment::CLEAN, 36).await?;
    let mut w = impair::world(&link, WorldOptions::default()).await?;
    let c = w.create_computer("ws-bench-link").await?;
    let api = NoDelayClient::new(&w.http, w.api_token());
    let lease = w.lease(&c, "bot-b", "run-bench").await?;
    let screen = |action: &str| format!("/v1/computers/{c}/screens/bot-b/{action}");
    api.post_json(&screen("ensure"), &serde_json::json!({ "lease": lease }))
        .await?;
    let view = w.screen_url(&c, "bot-b", "view").await?;
    w.add_secret(view.trim_start_matches("/cap/"));
    let mut rfb = Rfb::handshake(WsBytes::new(connect(&w.http, &view).await?)).await?;
    rfb.set_encodings(&[ZRLE]).await?;
    let file: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    let exec = format!("/v1/computers/{c}/exec");
    let put = format!("/v1/computers/{c}/files/content?path=bench.bin");

    // samples[link][op]
    let mut samples = vec![vec![Vec::new(); OPS.len()]; 2];
    for round in 0..=rounds {
        for (k, imp) in [Impairment::CLEAN, Impairment::DEGRADED].iter().enumerate() {
            impair::apply(&link, &c, *imp)?;
            // Round 0 warms both settings up (the congestion controller, the desktop).
            let keep = round > 0;
            let t = now();
            exec_true(&api, &exec).await?;
            let d = t.elapsed();
            if keep {
                samples[k][0].push(d);
            }
            let t = now();
            let seen = api
                .post_json(
                    &screen("observe"),
                    &serde_json::json!({ "lease": lease, "full": true }),
                )
                .await?;
            let d = t.elapsed();
            ensure!(
                seen["image"].is_string(),
                "observe without an image: {seen}"
            );
            if keep {
                samples[k][1].push(d);
            }
            let t = now();
            rfb.request_update(false).await?;
            let rects = rfb
                .read_update_until(tokio::time::Instant::now() + Duration::from_secs(60))
                .await?
                .ok_or_else(|| anyhow!("no live-view frame within 60 s"))?;
            let d = t.elapsed();
            ensure!(rects > 0, "an empty live-view frame");
            if keep {
                samples[k][2].push(d);
            }
            let t = now();
            let (status, _, body) = api
                .send(
                    hyper::Method::PUT,
                    &put,
                    &[("content-type", "application/octet-stream")],
                    file.clone().into(),
                )
                .await?;
            let d = t.elapsed();
            ensure!(
                status.is_success(),
                "put failed: {status} {}",
                String::from_utf8_lossy(&body)
            );
            if keep {
                samples[k][3].push(d);
            }
        }
    }
    let (forwarded, dropped) = link.datagrams();
    let transports = w.transports(&c);
    ensure!(
        transports == ["quic"],
        "the guest should have run over QUIC through the relay: {transports:?}"
    );

    println!("## Faults: the link (issue 36): run of `bench_faults_link`\n");
    println!(
        "- {rounds} rounds, each measuring every operation on the clean link then on the degraded \
         one (100 ms RTT, 1% UDP loss seeded, 20 Mbit/s tbf), one computer, QUIC through the relay"
    );
    println!(
        "- relay: {forwarded} datagrams forwarded, {dropped} dropped ({:.2}%; the degraded rounds \
         drop 1%, the clean none, datagrams over {} bytes are dropped on both as on a 1,500-byte \
         path)",
        100.0 * dropped as f64 / (forwarded + dropped).max(1) as f64,
        impair::PATH_MTU_PAYLOAD
    );
    println!("- load average: {}\n", loadavg());
    println!("| operation | clean p50 ms | clean p99 ms | degraded p50 ms | degraded p99 ms | p50 degraded / clean |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (i, op) in OPS.iter().enumerate() {
        let v = |k: usize| -> Vec<f64> { samples[k][i].iter().map(|d| ms(*d)).collect() };
        let (clean, degraded) = (v(0), v(1));
        let (c50, d50) = (percentile(&clean, 0.5), percentile(&degraded, 0.5));
        println!(
            "| {op} | {c50:.1} | {:.1} | {d50:.1} | {:.1} | {:.1} |",
            percentile(&clean, 0.99),
            percentile(&degraded, 0.99),
            d50 / c50
        );
    }
    println!();

    // Reconnection after cuts, on the degraded path.
    impair::apply(&link, &c, Impairment::DEGRADED)?;
    drop(rfb);
    let mut reconnects = Vec::new();
    for n in 0..cuts {
        link.cut(true);
        tokio::time::sleep(Duration::from_secs(cut_secs)).await;
        link.cut(false);
        let restored = now();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while let Err(e) = exec_true(&api, &exec).await {
            ensure!(
                tokio::time::Instant::now() < deadline,
                "cut {n}: no exec succeeded within 120 s of the restore: {e}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        reconnects.push(ms(restored.elapsed()));
    }
    let connections = w.transports(&c).len();
    ensure!(
        connections == 1 + cuts,
        "expected a new connection per cut, the log has {connections}"
    );
    println!("### Reconnection after a cut of {cut_secs} s ({cuts} cuts, degraded path)\n");
    println!("Time from the link's restore to the first successful exec; the anchor is the degraded exec round trip's p50.\n");
    let anchor = percentile(
        &samples[1][0].iter().map(|d| ms(*d)).collect::<Vec<_>>(),
        0.5,
    );
    println!("| p50 ms | max ms | p50 / degraded exec p50 |");
    println!("|---:|---:|---:|");
    let max = reconnects.iter().copied().fold(0.0, f64::max);
    let p50 = percentile(&reconnects, 0.5);
    println!("| {p50:.0} | {max:.0} | {:.0} |", p50 / anchor);
    println!();
    w.check_log()
}

/// Runs `true` through the API; an error unless it exited 0.
async fn exec_true(api: &NoDelayClient, exec: &str) -> Result<()> {
    let (status, _, body) = api
        .send(
            hyper::Method::POST,
            exec,
            &[("content-type", "application/json")],
            serde_json::to_vec(&serde_json::json!({ "argv": ["true"] }))?.into(),
        )
        .await?;
    let out = tests::ExecOutput::parse(&body);
    ensure!(
        status.is_success() && out.code == Some(0),
        "exec failed: {status} {:?}",
        out.events
    );
    Ok(())
}
