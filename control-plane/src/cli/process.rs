//! Detached processes (docs/api.md#processes): `rakazo exec --detach` starts one
//! (`POST …/processes`), `rakazo ps`, `rakazo logs [--follow] [--since OFFSET]`,
//! `rakazo attach` (stdin to the process, its output back; closing stdin or Ctrl-] detaches) and
//! `rakazo kill [--signal NAME]`.

use super::Global;
use crate::client::full_body;
use crate::route::{ComputerId, ProcessId, Route};
use crate::schema::exec::ExecSpec;
use crate::schema::process::{KillRequest, LogLine, Process, ProcessList, ProcessState};
use anyhow::{anyhow, Result};
use bytes::Bytes;
use clap::Args;
use hyper::body::Incoming;
use hyper::Method;
use std::io::Write;

#[derive(Args)]
pub struct PsArgs {
    pub computer: String,
}

#[derive(Args)]
pub struct LogsArgs {
    pub computer: String,
    /// The process's id (from `exec --detach` or `ps`).
    pub process: u32,
    /// Keep printing output as it comes, until the process exits.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Start at this byte offset of its output (default: the oldest kept).
    #[arg(long, value_name = "OFFSET")]
    pub since: Option<u64>,
}

/// The byte that detaches `attach`: Ctrl-] (as telnet's escape), at the start of a line on a
/// terminal.
pub const DETACH_KEY: u8 = 0x1d;

#[derive(Args)]
pub struct AttachArgs {
    pub computer: String,
    pub process: u32,
    /// Start at this byte offset of its output (default: from now on).
    #[arg(long, value_name = "OFFSET")]
    pub since: Option<u64>,
}

#[derive(Args)]
pub struct KillArgs {
    pub computer: String,
    pub process: u32,
    /// TERM (default), KILL, INT, HUP, QUIT, USR1, USR2, STOP or CONT.
    #[arg(long, short = 's')]
    pub signal: Option<String>,
    /// Act for this bot under `--lease`: refused if the lease is no longer current.
    #[arg(long, requires = "lease")]
    pub bot: Option<String>,
    /// The bot's lease, `<owner>:<fence>`.
    #[arg(long, requires = "bot")]
    pub lease: Option<String>,
}

/// `rakazo exec --detach`: starts `spec` and prints the process's id.
pub(super) async fn start(g: &Global, computer: String, spec: ExecSpec) -> Result<i32> {
    let c = g.client()?;
    let path = Route::StartProcess {
        computer: ComputerId::new(computer),
    }
    .path();
    let p: Process = c.call(Method::POST, &path, &spec).await?;
    if g.json {
        println!("{}", serde_json::to_string(&p)?);
    } else {
        println!("{}", p.id);
    }
    Ok(0)
}

/// One line of `ps` (and of `computer show`): id, pid, started (UTC), state (with its exit
/// code), output size, bot, command.
pub fn process_line(p: &Process) -> String {
    let state = match (p.state, p.exit_code) {
        (ProcessState::Running, _) => "running".to_string(),
        (ProcessState::Exited, Some(code)) => format!("exited {code}"),
        (ProcessState::Exited, None) => "exited".to_string(),
    };
    format!(
        "{}\t{}\t{}\t{}\t{} B\t{}\t{}",
        p.id,
        p.pid,
        super::activity::clock(i64::try_from(p.started_at_ms).unwrap_or(i64::MAX)),
        state,
        p.output_bytes,
        p.bot.as_deref().unwrap_or("-"),
        crate::activity::shell_line(&p.argv),
    )
}

pub(super) async fn ps(g: &Global, a: PsArgs) -> Result<i32> {
    let c = g.client()?;
    let path = Route::ListProcesses {
        computer: ComputerId::new(a.computer),
    }
    .path();
    let list: ProcessList = c.fetch(Method::GET, &path).await?;
    if g.json {
        println!("{}", serde_json::to_string(&list)?);
        return Ok(0);
    }
    println!("ID\tPID\tSTARTED\tSTATE\tOUTPUT\tBOT\tCOMMAND");
    for p in &list.processes {
        println!("{}", process_line(p));
    }
    Ok(0)
}

pub(super) async fn logs(g: &Global, a: LogsArgs) -> Result<i32> {
    let c = g.client()?;
    let route = Route::ProcessLogs {
        computer: ComputerId::new(a.computer),
        process: ProcessId::new(a.process),
    };
    let since = a.since.map(|s| s.to_string());
    let mut query = Vec::new();
    if let Some(s) = &since {
        query.push(("offset", s.as_str()));
    }
    if a.follow {
        query.push(("follow", "true"));
    }
    let resp = c
        .send(
            Method::GET,
            &route.path_with_query(query),
            None,
            None,
            full_body(Bytes::new()),
        )
        .await?;
    print_lines(g, resp).await
}

pub(super) async fn attach(g: &Global, a: AttachArgs) -> Result<i32> {
    let c = g.client()?;
    let route = Route::AttachProcess {
        computer: ComputerId::new(a.computer),
        process: ProcessId::new(a.process),
    };
    let since = a.since.map(|s| s.to_string());
    let query: Vec<(&str, &str)> = since.iter().map(|s| ("offset", s.as_str())).collect();
    let resp = c
        .send(
            Method::POST,
            &route.path_with_query(query),
            Some("application/octet-stream"),
            None,
            super::stdin_body(Vec::new(), Some(DETACH_KEY)),
        )
        .await?;
    print_lines(g, resp).await
}

pub(super) async fn kill(g: &Global, a: KillArgs) -> Result<i32> {
    let c = g.client()?;
    let path = Route::KillProcess {
        computer: ComputerId::new(a.computer),
        process: ProcessId::new(a.process),
    }
    .path();
    let body = KillRequest {
        signal: a.signal,
        bot: a.bot,
        lease: a.lease,
    };
    let p: Process = c.call(Method::POST, &path, &body).await?;
    if g.json {
        println!("{}", serde_json::to_string(&p)?);
    }
    Ok(0)
}

/// Prints an output stream's NDJSON: the bytes as they come (`--json`: the lines), a note on
/// stderr when output asked for was dropped, the exit on stderr. Exits 0 once the stream ends.
async fn print_lines(g: &Global, resp: hyper::Response<Incoming>) -> Result<i32> {
    let mut lines = super::NdjsonLines::new(resp);
    let mut out = std::io::stdout();
    while let Some(line) = lines.next().await? {
        if g.json {
            out.write_all(&line)?;
            out.flush()?;
            continue;
        }
        match serde_json::from_slice(&line)? {
            LogLine::Opened { offset, dropped } if dropped > 0 => {
                eprintln!(
                    "rakazo: {dropped} bytes of output were dropped; showing from offset \
                         {offset}"
                );
            }
            LogLine::Opened { .. } => {}
            LogLine::Output { chunk, .. } => {
                out.write_all(&chunk.bytes()?)?;
                out.flush()?;
            }
            LogLine::Exit { code, message } => {
                let why = message.map(|m| format!(" ({m})")).unwrap_or_default();
                eprintln!("rakazo: the process exited with {code}{why}");
            }
            LogLine::Error(e) => return Err(anyhow!("{}", e.message)),
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_line_says_when_it_started_how_it_ended_and_what_it_runs() {
        let mut p = Process {
            id: 3,
            pid: 41,
            argv: vec!["sh".into(), "-c".into(), "echo hi".into()],
            bot: Some("bot-1".into()),
            state: ProcessState::Running,
            started_at_ms: 3_723_000,
            exited_at_ms: None,
            exit_code: None,
            exit_message: None,
            output_bytes: 3,
            kept_from: 0,
        };
        assert_eq!(
            process_line(&p),
            "3\t41\t01:02:03\trunning\t3 B\tbot-1\tsh -c 'echo hi'"
        );
        (p.state, p.exit_code, p.bot) = (ProcessState::Exited, Some(130), None);
        assert_eq!(
            process_line(&p),
            "3\t41\t01:02:03\texited 130\t3 B\t-\tsh -c 'echo hi'"
        );
    }
}
