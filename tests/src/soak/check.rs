//! The soak's checks: the failures the bots saw against the disruption windows, then, once the
//! bots stopped, the checkpoints, the leases, the desktop's acts and the replicas' logs.

use super::bots::Tally;
use super::{Plan, Report, Stage, EXPECTED_IN_WINDOW};
use bytes::Bytes;
use control_plane::client::{full_body, q};
use http_body_util::BodyExt;
use hyper::Method;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Sorts every failure: inside a window and of an expected class; outside every window but
/// explained (an acquire refused while the bot's own walked-away lease had not lapsed); or a
/// violation.
pub fn tally(_plan: &Plan, tallies: &[Tally], report: &mut Report) {
    for t in tallies {
        for (op, n) in &t.ops {
            *report.ops.entry(op.to_string()).or_default() += n;
        }
        report.leases_walked_away += t.walked_away.len();
        report.checkpoints_ok += t.checkpoints.len();
        report.acts_ok += t.typed.len();
        for v in &t.violations {
            report.violations.push(format!("{}: {v}", t.bot));
        }
        for f in &t.failures {
            report.error_times.push(f.at);
            let in_window = report
                .windows
                .iter()
                .any(|w| f.end >= w.from && f.at <= w.to);
            if in_window && EXPECTED_IN_WINDOW.contains(&f.class.as_str()) {
                *report.errors_in_windows.entry(f.class.clone()).or_default() += 1;
            } else if !in_window && f.explained {
                *report
                    .errors_explained_outside
                    .entry(f.class.clone())
                    .or_default() += 1;
            } else {
                let detail: String = f.detail.chars().take(300).collect();
                report.violations.push(format!(
                    "{}: {} failed with `{}` at {:.1}–{:.1} s, {} every disruption window: {detail}",
                    t.bot,
                    f.op,
                    f.class,
                    f.at,
                    f.end,
                    if in_window { "inside" } else { "outside" }
                ));
            }
        }
    }
}

/// The checks after the bots stopped.
pub async fn after(
    plan: &Plan,
    st: &mut Stage,
    tallies: &[Tally],
    report: &mut Report,
    say: &(dyn Fn(&str) + Sync),
) {
    leases(st, tallies, report, say).await;
    checkpoints(plan, st, tallies, report).await;
    acts(st, tallies, report);
    for (i, w) in st.r.worlds.iter_mut().enumerate() {
        if let Err(e) = w.check_log() {
            report.violations.push(format!("replica {i}'s log: {e:#}"));
        }
    }
}

/// Zero stuck leases: once every walked-away lease's TTL has passed, each bot's lease is taken
/// by a new owner at the first try (and released).
async fn leases(st: &Stage, tallies: &[Tally], report: &mut Report, say: &(dyn Fn(&str) + Sync)) {
    let t0 = crate::bench::now();
    let lapsed_by = tallies
        .iter()
        .filter_map(|t| t.walked_away.last().map(|_| t.ttl_ms))
        .max()
        .unwrap_or(0);
    // Every walk-away happened before the bots stopped, that is before now.
    tokio::time::sleep(Duration::from_millis(lapsed_by) + Duration::from_secs(2)).await;
    say(&format!(
        "waited {:.1} s for walked-away leases to lapse",
        t0.elapsed().as_secs_f64()
    ));
    let w = &st.r.worlds[0];
    for t in tallies {
        let base = format!("/v1/computers/{}/leases/{}", q(&t.computer), q(&t.bot));
        let body = json!({ "owner": "soak-final-check", "ttl_ms": 30_000 });
        match w
            .client
            .json(Method::POST, &format!("{base}/acquire"), Some(&body))
            .await
        {
            Ok(v) => {
                report.leases_verified += 1;
                let release = json!({ "lease": v["lease"], "outcome": "success" });
                if let Err(e) = w
                    .client
                    .json(Method::POST, &format!("{base}/release"), Some(&release))
                    .await
                {
                    report
                        .violations
                        .push(format!("{}: the final release failed: {e}", t.bot));
                }
            }
            Err(e) => report.violations.push(format!(
                "{}'s lease on {} is stuck: a new owner was refused after every TTL: {e}",
                t.bot, t.computer
            )),
        }
    }
}

async fn get(st: &Stage, path: &str) -> anyhow::Result<Bytes> {
    let resp = st.r.worlds[0]
        .client
        .send(Method::GET, path, None, None, full_body(Bytes::new()))
        .await?;
    Ok(resp.into_body().collect().await?.to_bytes())
}

/// Zero lost checkpoints: every revision answered OK is in the home's list and its file reads
/// back from it; the first one of each computer is restored for real and its file read from
/// the guest.
async fn checkpoints(plan: &Plan, st: &Stage, tallies: &[Tally], report: &mut Report) {
    let mut by_computer: BTreeMap<&str, Vec<&super::bots::Checkpoint>> = BTreeMap::new();
    for t in tallies {
        for c in &t.checkpoints {
            by_computer.entry(c.computer.as_str()).or_default().push(c);
        }
    }
    let w = &st.r.worlds[0];
    for (computer, cps) in by_computer {
        let listed: BTreeSet<u64> = match w.revisions(computer).await {
            Ok(v) => v.iter().map(|r| r.revision).collect(),
            Err(e) => {
                report
                    .violations
                    .push(format!("{computer}: revisions not listed: {e}"));
                continue;
            }
        };
        for c in &cps {
            if listed.contains(&c.revision) {
                report.checkpoints_listed += 1;
            } else {
                report.violations.push(format!(
                    "{computer}: revision {} ({}) was answered OK and is not listed",
                    c.revision, c.cause
                ));
            }
        }
        let ats: Vec<f64> = cps.iter().map(|c| c.at).collect();
        let chosen = read_back(plan, &report.windows, &ats);
        for (i, c) in cps.iter().enumerate() {
            if !chosen.contains(&i) {
                continue;
            }
            let path = format!(
                "/v1/computers/{}/home/content?path={}&revision={}",
                q(computer),
                q(&c.path),
                c.revision
            );
            match get(st, &path).await {
                Ok(b) if b == c.content.as_bytes() => report.checkpoints_verified += 1,
                Ok(b) => report.violations.push(format!(
                    "{computer}: revision {} has {} as {:?}, not {:?}",
                    c.revision,
                    c.path,
                    String::from_utf8_lossy(&b),
                    c.content
                )),
                Err(e) => report.violations.push(format!(
                    "{computer}: revision {} unreadable: {e:#}",
                    c.revision
                )),
            }
        }
        // The first one, restored for real (it goes back: later files are gone from the home).
        let Some(first) = cps.first() else { continue };
        let path = format!(
            "/v1/computers/{}/home/restore?revision={}",
            q(computer),
            first.revision
        );
        let done = match crate::post_ndjson(&w.client, &path).await {
            Ok(lines) => lines.last().is_some_and(|l| l["type"] == "done"),
            Err(_) => false,
        };
        let cat = w
            .sh(computer, &format!("cat {}", first.path))
            .await
            .unwrap_or_default();
        if done && cat == first.content {
            report.restores_verified += 1;
        } else {
            report.violations.push(format!(
                "{computer}: restoring revision {} gave {cat:?} for {} (done: {done})",
                first.revision, first.path
            ));
        }
    }
}

/// Which checkpoints of a computer (answered at `ats`, in order) are read back: the first, the
/// last, up to `plan.read_back` spread evenly over those answered inside a disruption window,
/// and as many spread evenly over all.
fn read_back(plan: &Plan, windows: &[super::Window], ats: &[f64]) -> BTreeSet<usize> {
    let spread = |idx: Vec<usize>| -> Vec<usize> {
        let step = idx.len().div_ceil(plan.read_back.max(1)).max(1);
        idx.into_iter().step_by(step).collect()
    };
    let in_window: Vec<usize> = (0..ats.len())
        .filter(|&i| windows.iter().any(|w| ats[i] >= w.from && ats[i] <= w.to))
        .collect();
    let mut out: BTreeSet<usize> = spread(in_window).into_iter().collect();
    out.extend(spread((0..ats.len()).collect()));
    out.extend([0, ats.len().saturating_sub(1)]);
    out
}

/// The page saw the text of the desktop acts answered OK (reported, not required: an act
/// answered OK put the input on the screen, and a page reopened after a run-end checkpoint may
/// not have had the focus yet); at least one must have reached it.
fn acts(st: &Stage, tallies: &[Tally], report: &mut Report) {
    let values: Vec<String> = st
        .fixture
        .events()
        .into_iter()
        .filter_map(|e| e.get("value").cloned())
        .collect();
    let mut typed = 0;
    for t in tallies {
        typed += t.typed.len();
        for text in &t.typed {
            if values.iter().any(|v| v.contains(text.as_str())) {
                report.acts_seen_by_page += 1;
            }
        }
    }
    if typed > 0 && report.acts_seen_by_page == 0 {
        report.violations.push(format!(
            "none of the {typed} acts answered OK reached the page"
        ));
    }
}
