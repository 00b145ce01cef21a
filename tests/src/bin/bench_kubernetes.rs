//! Kubernetes computers (issue 35): create → first exec on the `kubernetes` provider against
//! the fake API server (`tests::fake_kube`) with a simulated scheduling delay, in pod and
//! sandbox modes, and what the control plane adds over the API's own time.
//!
//! For each run: `POST /v1/computers` (it returns once the guest has dialled in and the home is
//! restored), then `exec true`; the total is measured by the client. The API's own time is the
//! fake's, from the moment the computer's Pod was created until its container was started
//! (the scheduling delay, then the kubelet mounting the Secret and claim); everything else is
//! the control plane's (its calls to the API before the Pod, the guest's start and dial-in,
//! enrollment, the home's restore, the exec's round trip). Goal: added ≤ 50 ms (median).
//!
//! The anchor, in the same run: create → first exec of a `fake`-provider computer (the same
//! guest binary, started by the control plane itself as a plain process: no API, no
//! scheduling, no jail). What the kubernetes
//! path adds beyond it is the adapter's own cost (its API calls before the pod is created, the
//! fake's answers, the kubelet's mounts).
//!
//! `cargo build -p control-plane -p guest-agent -p tests --bin rakazo --bin rakazo-guest --bin
//! bench_kubernetes && $CARGO_TARGET_DIR/debug/bench_kubernetes [--runs N] [--delay-ms N]`.
//!
//! `--smoke`: a few runs, for CI (`scripts/bench-smoke.sh`); explicit options win.

use anyhow::{Context, Result};
use hyper::Method;
use std::time::Duration;
use tests::bench::{arg, loadavg, ms, now, percentile, size};
use tests::fake_kube::{FakeKube, Res};
use tests::{World, WorldOptions};

struct Run {
    total: f64,
    api: f64,
}

/// create → first exec of fake-provider computers (ms), after a warm-up run.
async fn local_runs(n: usize) -> Result<Vec<f64>> {
    let mut w = World::start_with(WorldOptions {
        providers: Some("fake,local".into()),
        default_provider: Some("fake".into()),
        ..Default::default()
    })
    .await?;
    let mut out = Vec::new();
    for i in 0..=n {
        let t0 = now();
        let c = w.create_computer(&format!("ws-bench-local-{i}")).await?;
        w.exec(&c, serde_json::json!({ "argv": ["true"] })).await?;
        let total = t0.elapsed();
        w.client
            .json(Method::DELETE, &format!("/v1/computers/{c}"), None)
            .await?;
        if i > 0 {
            out.push(ms(total));
        }
    }
    Ok(out)
}

async fn runs(mode: &str, n: usize, delay: Duration) -> Result<Vec<Run>> {
    let fake = FakeKube::start(&tests::bin("rakazo-guest")).await?;
    fake.set_scheduling_delay(delay);
    let mut w = World::start_with(WorldOptions {
        providers: Some("kubernetes,local".into()),
        default_provider: Some("kubernetes".into()),
        env: fake.world_env(mode),
        ..Default::default()
    })
    .await?;
    let mut out = Vec::new();
    // One warm-up run first: the first computer pays for the server's first database writes.
    for i in 0..=n {
        let t0 = now();
        let c = w.create_computer(&format!("ws-bench-{mode}-{i}")).await?;
        let done = w
            .exec(&c, serde_json::json!({ "argv": ["true"] }))
            .await
            .context("first exec")?;
        let total = t0.elapsed();
        anyhow::ensure!(done.code == Some(0), "exec true: {:?}", done.code);
        let pods = fake.objects_of(Res::Pods, &c);
        let pod = pods.first().context("no pod")?;
        let t = fake.timeline(pod);
        let api = match (t.pod_create, t.started) {
            (Some(a), Some(b)) => b.duration_since(a),
            _ => anyhow::bail!("no timeline for pod {pod}"),
        };
        w.client
            .json(Method::DELETE, &format!("/v1/computers/{c}"), None)
            .await?;
        if i > 0 {
            out.push(Run {
                total: ms(total),
                api: ms(api),
            });
        }
    }
    Ok(out)
}

#[tokio::main]
async fn main() -> Result<()> {
    tests::bench::Usage::new(
        "Kubernetes computers: create to first exec against the fake API server",
    )
    .flag(
        "--runs",
        "N",
        "computers created per mode (default 10; smoke 2)",
    )
    .flag(
        "--delay-ms",
        "N",
        "simulated scheduling delay in ms (default 200)",
    )
    .check();
    let n = arg("--runs", size(10, 2));
    let delay = Duration::from_millis(arg("--delay-ms", 200) as u64);
    println!(
        "{n} runs per mode, scheduling delay {} ms, load average at start: {}",
        delay.as_millis(),
        loadavg()
    );
    let local = percentile(&local_runs(n).await?, 0.5);
    println!("\n## create -> first exec on the fake Kubernetes API (ms)");
    println!("| mode | total p50 | API's own p50 (pod created -> container started) | added by the control plane p50 | added max | fake-provider computer (anchor) p50 | added beyond the anchor p50 |");
    println!("|---|---|---|---|---|---|---|");
    for mode in ["pod", "sandbox"] {
        let r = runs(mode, n, delay).await?;
        let totals: Vec<f64> = r.iter().map(|r| r.total).collect();
        let apis: Vec<f64> = r.iter().map(|r| r.api).collect();
        let added: Vec<f64> = r.iter().map(|r| r.total - r.api).collect();
        println!(
            "| {mode} | {:.1} | {:.1} | {:.1} | {:.1} | {local:.1} | {:.1} |",
            percentile(&totals, 0.5),
            percentile(&apis, 0.5),
            percentile(&added, 0.5),
            percentile(&added, 1.0),
            percentile(&added, 0.5) - local,
        );
    }
    Ok(())
}
