//! `rakazo home …`: checkpoint, restore, show, ls and cat of a computer's stored home, and the
//! operator's reconcile and purge. Checkpoints and restores show a progress bar on a terminal
//! (stderr) and plain progress lines otherwise.

use super::print_json;
use crate::client::{full_body, Client};
use crate::route::{ComputerId, Route};
use crate::schema::home::{
    HomeDiff, HomeEntries, HomeInfo, HomeLine, HomeRevisions, Purged, Reconciled,
};
use anyhow::{anyhow, bail, Result};
use bytes::Bytes;
use clap::Subcommand;
use http_body_util::BodyExt;
use hyper::Method;
use std::io::{IsTerminal, Write};

#[derive(Subcommand)]
pub enum HomeCmd {
    /// Save the computer's home now (waits up to --wait-ms for other bots' leases).
    Checkpoint {
        computer: String,
        #[arg(long)]
        wait_ms: Option<u64>,
    },
    /// Import the latest stored home into the computer (replacing its home); with --revision,
    /// go back to that revision (the home as it is now is saved first).
    Restore {
        computer: String,
        #[arg(long)]
        revision: Option<u64>,
    },
    /// The home's revisions: when, why, size and what each added.
    Revisions { computer: String },
    /// Paths added, removed and changed from revision FROM to revision TO.
    Diff {
        computer: String,
        from: u64,
        to: u64,
        #[arg(long)]
        limit: Option<usize>,
    },
    /// The store, revision and pending-restore state of the computer's home.
    Show { computer: String },
    /// List the entries of the latest checkpoint (no guest needed: works on a stopped computer).
    Ls {
        computer: String,
        /// Only entries at or under this path.
        prefix: Option<String>,
        #[arg(long)]
        limit: Option<usize>,
        /// Of this revision instead of the latest.
        #[arg(long)]
        revision: Option<u64>,
    },
    /// Write one file of the latest checkpoint (or of --revision N) to stdout.
    Cat {
        computer: String,
        path: String,
        #[arg(long)]
        revision: Option<u64>,
    },
    /// Delete checkpoint objects no computer owns (object store), or the stale temporary files
    /// of writes a killed control plane never finished (local store).
    Reconcile,
    /// Forget and delete the stored home of a destroyed computer (by home key).
    Purge { home_key: String },
}

/// Runs one `rakazo home` command; returns the exit code.
pub async fn run(c: Client, json: bool, cmd: HomeCmd) -> Result<i32> {
    match cmd {
        HomeCmd::Checkpoint { computer, wait_ms } => {
            let wait_ms = wait_ms.map(|ms| ms.to_string());
            let path = Route::CheckpointHome {
                computer: ComputerId::new(computer),
            }
            .path_with_query(wait_ms.as_deref().map(|ms| ("wait_ms", ms)));
            flow(&c, json, &path).await
        }
        HomeCmd::Restore { computer, revision } => {
            let revision = revision.map(|r| r.to_string());
            let path = Route::RestoreHome {
                computer: ComputerId::new(computer),
            }
            .path_with_query(revision.as_deref().map(|r| ("revision", r)));
            flow(&c, json, &path).await
        }
        HomeCmd::Revisions { computer } => {
            let route = Route::HomeRevisions {
                computer: ComputerId::new(computer),
            };
            let listed: HomeRevisions = c.fetch(route.method(), &route.path()).await?;
            if json {
                print_json(&listed);
                return Ok(0);
            }
            println!(
                "{:>8}  {:<24}  {:<11}  {:>7}  {:>10}  {:>10}",
                "REVISION", "TIME (UTC)", "CAUSE", "FILES", "SIZE", "ADDED"
            );
            for r in &listed.revisions {
                println!(
                    "{:>8}  {:<24}  {:<11}  {:>7}  {:>10}  {:>10}",
                    r.revision,
                    utc(r.at_ms),
                    r.cause,
                    r.files,
                    human(r.size),
                    human(r.stored_bytes)
                );
            }
            Ok(0)
        }
        HomeCmd::Diff {
            computer,
            from,
            to,
            limit,
        } => {
            let (from, to, limit) = (
                from.to_string(),
                to.to_string(),
                limit.map(|l| l.to_string()),
            );
            let mut query = vec![("from", from.as_str()), ("to", to.as_str())];
            query.extend(limit.as_deref().map(|l| ("limit", l)));
            let path = Route::HomeDiff {
                computer: ComputerId::new(computer),
            }
            .path_with_query(query);
            let d: HomeDiff = c.fetch(Method::GET, &path).await?;
            if json {
                print_json(&d);
                return Ok(0);
            }
            for ch in &d.changes {
                let mark = match ch.change.as_str() {
                    "added" => '+',
                    "removed" => '-',
                    _ => 'M',
                };
                let slash = if ch.dir { "/" } else { "" };
                println!("{mark} {}{slash}", ch.path);
            }
            if d.truncated {
                eprintln!("rakazo: diff truncated; use --limit");
            }
            Ok(0)
        }
        HomeCmd::Show { computer } => {
            let route = Route::GetHome {
                computer: ComputerId::new(computer),
            };
            let info: HomeInfo = c.fetch(route.method(), &route.path()).await?;
            if json {
                print_json(&info);
            } else {
                println!(
                    "{} home {} in the {} store: revision {}{}",
                    info.computer,
                    info.home_key,
                    info.store,
                    info.revision.map_or("none".to_string(), |r| r.to_string()),
                    if info.pending_restore {
                        " (restore pending)"
                    } else {
                        ""
                    }
                );
            }
            Ok(0)
        }
        HomeCmd::Ls {
            computer,
            prefix,
            limit,
            revision,
        } => {
            let limit = limit.map(|l| l.to_string());
            let revision = revision.map(|r| r.to_string());
            let mut query = Vec::new();
            query.extend(prefix.as_deref().map(|p| ("prefix", p)));
            query.extend(limit.as_deref().map(|l| ("limit", l)));
            query.extend(revision.as_deref().map(|r| ("revision", r)));
            let path = Route::HomeEntries {
                computer: ComputerId::new(computer),
            }
            .path_with_query(query);
            let listed: HomeEntries = c.fetch(Method::GET, &path).await?;
            if json {
                print_json(&listed);
                return Ok(0);
            }
            super::print_entries(&listed.entries);
            if listed.truncated {
                eprintln!("rakazo: listing truncated; use --limit or a prefix");
            }
            Ok(0)
        }
        HomeCmd::Cat {
            computer,
            path,
            revision,
        } => {
            let revision = revision.map(|r| r.to_string());
            let mut query = vec![("path", path.as_str())];
            query.extend(revision.as_deref().map(|r| ("revision", r)));
            let resp = c
                .send(
                    Method::GET,
                    &Route::HomeContent {
                        computer: ComputerId::new(computer),
                    }
                    .path_with_query(query),
                    None,
                    None,
                    full_body(Bytes::new()),
                )
                .await?;
            let mut body = resp.into_body();
            let mut out = std::io::stdout().lock();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| anyhow!("reading {path:?} broke off: {e}"))?;
                if let Ok(data) = frame.into_data() {
                    out.write_all(&data)?;
                }
            }
            out.flush()?;
            Ok(0)
        }
        HomeCmd::Reconcile => {
            let route = Route::ReconcileHomes {};
            let done: Reconciled = c.fetch(route.method(), &route.path()).await?;
            match done {
                _ if json => print_json(&done),
                Reconciled::Local {
                    temporaries_removed,
                    temporaries_young,
                    temporaries_failed,
                } => {
                    println!(
                        "removed {temporaries_removed} stale temporary files, left \
                         {temporaries_young} recent ones"
                    );
                    if temporaries_failed > 0 {
                        println!(
                            "{temporaries_failed} could not be removed (see the server's log)"
                        );
                    }
                }
                Reconciled::Object {
                    kept,
                    deleted,
                    foreign,
                    ..
                } => println!("kept {kept}, deleted {deleted}, left {foreign} foreign objects"),
            }
            Ok(0)
        }
        HomeCmd::Purge { home_key } => {
            let route = Route::PurgeHome {
                home_key: home_key.clone(),
            };
            let purged: Purged = c.fetch(route.method(), &route.path()).await?;
            if json {
                print_json(&purged);
            } else {
                println!("purged home {home_key}");
            }
            Ok(0)
        }
    }
}

/// Follows an NDJSON checkpoint or restore: a bar on a terminal, lines otherwise.
async fn flow(c: &Client, json: bool, path: &str) -> Result<i32> {
    let resp = c
        .send(Method::POST, path, None, None, full_body(Bytes::new()))
        .await?;
    let tty = !json && std::io::stderr().is_terminal();
    let mut body = resp.into_body();
    let mut buf: Vec<u8> = Vec::new();
    let mut shown_phase = String::new();
    let mut last_tenth = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| anyhow!("progress stream broke: {e}"))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buf.extend_from_slice(&data);
        while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            if json {
                std::io::stdout().write_all(&line)?;
                std::io::stdout().flush()?;
            }
            match serde_json::from_slice(&line)? {
                HomeLine::Progress { phase, done, total } if !json => {
                    if tty {
                        eprint!("\r\x1b[2K{}", bar(&phase, done, total));
                    } else {
                        // Plain lines: each phase, then every tenth of the total.
                        let tenth = (total > 0).then(|| done.min(total) * 10 / total);
                        if phase != shown_phase || tenth != last_tenth {
                            eprintln!("{phase}: {} of {}", mib(done), mib(total));
                        }
                        last_tenth = tenth;
                    }
                    shown_phase = phase;
                }
                HomeLine::Progress { .. } => {}
                HomeLine::Done(done) => {
                    if tty {
                        eprintln!();
                    }
                    if !json {
                        match done.revision {
                            Some(r) => {
                                println!("revision {r} ({})", mib(done.bytes.unwrap_or(0)))
                            }
                            None => println!("no stored home: nothing to restore"),
                        }
                    }
                    return Ok(0);
                }
                HomeLine::Error(e) => {
                    if tty {
                        eprintln!();
                    }
                    if !json {
                        eprintln!("rakazo: {} ({})", e.message, e.code);
                    }
                    return Ok(1);
                }
            }
        }
    }
    bail!("the control plane ended the stream without an outcome; check `rakazo home show`")
}

/// `2026-12-07 05:40:12`, UTC, from milliseconds since the epoch (days to a civil date by
/// Howard Hinnant's algorithm).
fn utc(at_ms: i64) -> String {
    let secs = at_ms.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// Bytes in the unit that reads best.
fn human(bytes: u64) -> String {
    match bytes {
        b if b < 1 << 10 => format!("{b} B"),
        b if b < 1 << 20 => format!("{:.1} KiB", b as f64 / 1024.0),
        b if b < 1 << 30 => mib(b),
        b => format!("{:.2} GiB", b as f64 / f64::from(1u32 << 30)),
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

/// `exporting [#########-----------]  45%  123.0 MiB of 273.0 MiB`
fn bar(phase: &str, done: u64, total: u64) -> String {
    const WIDTH: u64 = 30;
    if total == 0 {
        return format!("{phase}: {}", mib(done));
    }
    let done_c = done.min(total);
    let filled = (done_c * WIDTH / total) as usize;
    format!(
        "{phase:<10} [{}{}] {:>3}%  {} of {}",
        "#".repeat(filled),
        "-".repeat(WIDTH as usize - filled),
        done_c * 100 / total,
        mib(done),
        mib(total)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_is_bounded_when_done_passes_the_estimate() {
        let b = bar("exporting", 150, 100);
        assert!(b.contains("100%"), "{b}");
        assert!(b.contains(&"#".repeat(30)), "{b}");
        assert_eq!(bar("verifying", 1 << 20, 0), "verifying: 1.0 MiB");
    }
}
