//! `rakazo activity <id> [--follow]`: a computer's activity feed
//! (`GET /v1/computers/{id}/activity`, then `…/activity/stream` to follow).
//!
//! Prints the newest `--limit` events oldest first, then, with `--follow`, every new event as it
//! is recorded until interrupted. `--json` prints one event per line as the API spells it.

use super::Global;
use crate::client::{full_body, Client};
use crate::route::{ComputerId, Route};
use crate::schema::activity::{ActivityBody, ActivityEvent, ActivityPage};
use crate::schema::wire_name;
use anyhow::{anyhow, Result};
use bytes::Bytes;
use clap::Args;
use http_body_util::BodyExt;
use hyper::Method;
use std::io::Write;

#[derive(Args)]
pub struct ActivityArgs {
    pub computer: String,
    /// Keep printing events as they are recorded.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// How many of the newest events to print first (0: none).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(0..=500))]
    pub limit: u32,
}

pub(super) async fn run(g: &Global, a: ActivityArgs) -> Result<i32> {
    let c = g.client()?;
    let id = ComputerId::new(a.computer);
    // The newest events, oldest first; `last_seq` is where following starts, so nothing
    // recorded between the two requests is missed.
    let limit = a.limit.max(1);
    let page: ActivityPage = c
        .fetch(
            Method::GET,
            &Route::Activity {
                computer: id.clone(),
            }
            .path_with_query([("order", "desc"), ("limit", &limit.to_string())]),
        )
        .await?;
    if a.limit > 0 {
        for e in page.events.iter().rev() {
            print_event(g.json, e)?;
        }
    }
    if a.follow {
        follow(&c, &id, page.last_seq, g.json).await?;
    }
    Ok(0)
}

async fn follow(c: &Client, id: &ComputerId, after: u64, json: bool) -> Result<()> {
    let resp = c
        .send(
            Method::GET,
            &Route::ActivityStream {
                computer: id.clone(),
            }
            .path_with_query([("after", after.to_string().as_str())]),
            None,
            None,
            full_body(Bytes::new()),
        )
        .await?;
    // On stderr, so `--json` output stays one event per line: the stream is open, and every
    // event recorded from now on is printed.
    eprintln!("rakazo: following the activity of {id} (Ctrl-C to stop)");
    let mut body = resp.into_body();
    let mut buf: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| anyhow!("the activity stream broke: {e}"))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buf.extend_from_slice(&data);
        while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            let Some(payload) = line.strip_prefix(b"data: ") else {
                continue;
            };
            let event: ActivityEvent = serde_json::from_slice(payload)
                .map_err(|e| anyhow!("the activity stream sent an unreadable event: {e}"))?;
            print_event(json, &event)?;
        }
    }
    Err(anyhow!("the control plane ended the activity stream"))
}

/// `HH:MM:SS` (UTC) of a time in milliseconds since the epoch.
pub(super) fn clock(at_ms: i64) -> String {
    let secs = at_ms.div_euclid(1000).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

fn print_event(json: bool, e: &ActivityEvent) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string(e)?)?;
        out.flush()?;
        return Ok(());
    }
    let head = format!("#{} {}", e.seq, clock(e.at_ms));
    match &e.body {
        ActivityBody::Command(c) => {
            let mut what = wire_name(&c.action);
            if let Some(bot) = &c.bot {
                what = format!("{what} [{bot}]");
            }
            let mut result = match (c.exit_code, c.bytes, &c.error) {
                (Some(code), _, _) => format!("exit {code}"),
                (None, _, Some(err)) => format!("failed: {err}"),
                (None, Some(bytes), None) => format!("{bytes} bytes"),
                (None, None, None) => "ok".to_string(),
            };
            if c.uncertain {
                result.push_str(" (uncertain)");
            }
            writeln!(
                out,
                "{head} {what} {}: {result} ({} ms)",
                c.line, c.duration_ms
            )?;
            if let Some(tail) = &c.output_tail {
                if c.output_truncated {
                    writeln!(out, "    | …")?;
                }
                for l in tail.trim_end_matches('\n').lines() {
                    writeln!(out, "    | {l}")?;
                }
            }
        }
        ActivityBody::NetworkAllowed(n) | ActivityBody::NetworkDenied(n) => {
            let verdict = match &e.body {
                ActivityBody::NetworkAllowed(_) => "allowed",
                _ => "denied",
            };
            let target = n.domain.as_deref().or(n.ip.as_deref()).unwrap_or("?");
            writeln!(
                out,
                "{head} network {verdict} {} {target}:{} x{} ({}; {} bytes up, {} down)",
                n.via, n.port, n.count, n.reason, n.bytes_up, n.bytes_down
            )?;
        }
        ActivityBody::Lifecycle(l) => {
            let mut extra = String::new();
            if let Some(r) = l.revision {
                extra.push_str(&format!(" revision {r}"));
            }
            if let Some(b) = l.bytes {
                extra.push_str(&format!(" {b} bytes"));
            }
            writeln!(
                out,
                "{head} {} ({}){extra}: {}",
                wire_name(&l.event),
                wire_name(&l.cause),
                l.reason
            )?;
        }
    }
    out.flush()?;
    Ok(())
}
