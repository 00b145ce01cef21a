//! Running commands in the home for the tunnel.
//!
//! This module owns one command's life: validating the request, resolving its working directory,
//! building its environment, spawning it in its own process group, streaming stdin in and
//! stdout/stderr out, and ending it: a normal exit, a timeout (exit 124) or an abort (exit 130),
//! the last two killing the whole process tree. [`run`] knows nothing about QUIC or frames:
//! [`pump`] hands it two channels fed from and drained into the op stream. Lease checks are the
//! caller's job ([`crate::fence`]), done before [`run`] is called.
//!
//! Commands run with the agent user's full rights; the cwd check enforces the contract
//! ("a cwd outside the home fails"), it does not confine the command.

use crate::home::{self, Home};
use gateway_proto::{
    BotId, ErrorCode, ExecEvent, ExecInput, ExecRequest, OpError, StartDir, MAX_CHUNK,
};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use serde_bytes::ByteBuf;
use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{ChildStdin, Command};
use tokio::sync::mpsc;

/// Most arguments in argv, program included.
pub const MAX_ARGS: usize = 4096;
/// Longest single argument, in bytes (Linux `MAX_ARG_STRLEN`).
pub const MAX_ARG_LEN: usize = 128 * 1024;
/// Largest argv in total, in bytes (each argument plus its terminating NUL).
pub const MAX_ARGV_BYTES: usize = 1 << 20;
/// Most extra environment variables in a request.
pub const MAX_ENV_VARS: usize = 4096;
/// Largest extra environment in total, in bytes (`KEY=VALUE` plus a NUL each).
pub const MAX_ENV_BYTES: usize = 1 << 20;

/// Variables of the guest starting with this prefix are its own configuration and secrets:
/// they are never passed to commands.
pub const GUEST_ENV_PREFIX: &str = "RAKAZO_";
/// Set in every command's environment to a random id per exec. Descendants inherit it, which lets
/// the tree kill find processes that left both the process group and the parent chain.
pub const EXEC_ID_VAR: &str = "RAKAZO_EXEC_ID";

/// The prefix of every exec id of commands run in the home at `root`: the first 8 bytes of its
/// path's sha256 in hex, and a dot. Local computers share the host's `/proc`; the prefix tells
/// this computer's processes from another's ([`crate::activity`]).
pub fn home_tag(root: &Path) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(root.as_os_str().as_bytes());
    format!("{}.", hex::encode(&digest[..8]))
}

/// The exec ids of the commands running now.
#[derive(Debug, Default)]
pub struct Running {
    ids: Mutex<HashSet<String>>,
}

impl Running {
    /// Registers `exec_id` until the returned guard drops.
    pub fn enter(self: &Arc<Self>, exec_id: &str) -> RunningGuard {
        self.lock().insert(exec_id.to_owned());
        RunningGuard {
            running: self.clone(),
            id: exec_id.to_owned(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.ids.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn count(&self) -> usize {
        self.lock().len()
    }

    pub fn contains(&self, id: &str) -> bool {
        self.lock().contains(id)
    }
}

/// A running command's registration.
pub struct RunningGuard {
    running: Arc<Running>,
    id: String,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.running.lock().remove(&self.id);
    }
}

/// Exit code of a command killed by its timeout.
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit code of an aborted command.
pub const EXIT_ABORTED: i32 = 130;
/// Exit code of a command whose program was not found (as in a shell).
pub const EXIT_NOT_FOUND: i32 = 127;
/// Exit code of a command whose program could not be executed (as in a shell).
pub const EXIT_NOT_EXECUTABLE: i32 = 126;

/// After the tree is killed, how long output still in the pipes may take to arrive.
const DRAIN_AFTER_KILL: Duration = Duration::from_millis(500);
/// After the tree is killed, how long the main process may take to be reaped.
const REAP_AFTER_KILL: Duration = Duration::from_secs(5);
/// Stdin bytes read ahead of a blocked write, so an `Abort` behind them is still seen.
const STDIN_READ_AHEAD: usize = 4 * MAX_CHUNK;

/// Runs `req` in the home and reports on `events` until its last event.
///
/// Events: `Started { pid }` first, then `Stdout`/`Stderr` chunks (each at most [`MAX_CHUNK`]
/// bytes, each stream in order) as they are produced, then exactly one final event:
///
/// - `Failed(BadRequest)`: the request is invalid (argv or env out of bounds); nothing ran.
/// - `Exit { code: 1, message }`: the cwd is outside the home, missing, not a directory or
///   reached through a symlink; or, without a cwd under `StartDir::BotDir`, the bot's
///   `bots/<bot>/` cannot be created or used or no lease names the bot. The message names it
///   and nothing ran.
/// - `Exit { code: 127 | 126, message }`: the program was not found / not executable, as a shell
///   reports it. Other spawn failures (out of resources) are `Failed(Failed)`.
/// - `Exit { code, message: None }` for a normal exit; a signal gives `128 + signal` and a
///   message naming it. All output is drained first: the command ends when its process has
///   exited *and* both output pipes are closed, so a background process that keeps stdout open
///   keeps the command running (until its timeout), as in a shell's `$(...)`.
/// - `Exit { code: 124, "command timed out after N ms" }` after `timeout_ms`, and
///   `Exit { code: 130, "command aborted" }` on `ExecInput::Abort` or when `input` closes before
///   the command ended (the client went away). Both kill the whole process tree first.
///
/// If `events` can no longer be sent (its receiver dropped), the command is aborted and nothing
/// more is reported. Dropping the returned future also kills the tree.
///
/// The command runs in its own process group, in its cwd (without one: the home, or under
/// `StartDir::BotDir` its bot's `bots/<bot>/`, created on first use), with `HOME` set to the
/// home, stdin `/dev/null` unless `req.stdin`, and the guest's environment minus every
/// `RAKAZO_*` variable, plus `req.env` (which may override `HOME`), plus [`EXEC_ID_VAR`].
///
/// While it runs, its exec id is registered in `running` (the guest's activity report).
pub async fn run(
    home: &Home,
    running: &Arc<Running>,
    req: ExecRequest,
    input: mpsc::Receiver<ExecInput>,
    events: mpsc::Sender<ExecEvent>,
) {
    // The command inherits the agent's environment, minus its secrets; this is the one place the
    // agent reads its own environment outside config.rs, and only to pass it on.
    let env = std::env::vars_os().collect();
    run_with_env(home, running, req, env, input, events).await;
}

/// [`run`] with an explicit inherited environment (before `RAKAZO_*` variables are removed).
async fn run_with_env(
    home: &Home,
    running: &Arc<Running>,
    req: ExecRequest,
    inherited: Vec<(OsString, OsString)>,
    input: mpsc::Receiver<ExecInput>,
    events: mpsc::Sender<ExecEvent>,
) {
    if let Some(last) = execute(home, running, req, inherited, input, &events).await {
        // The receiver may be gone by now; there is nobody left to tell.
        let _ = events.send(last).await;
    }
}

/// Why a running command was stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Timeout,
    Abort,
    /// The events receiver is gone: abort, and report nothing.
    Gone,
}

/// How the main loop ended.
enum End {
    Exited(io::Result<ExitStatus>),
    Stopped(Stop),
}

/// The events receiver was dropped.
#[derive(Debug)]
struct Gone;

/// Runs the command and returns its final event, or `None` if events can no longer be sent.
async fn execute(
    home: &Home,
    running: &Arc<Running>,
    req: ExecRequest,
    inherited: Vec<(OsString, OsString)>,
    mut input: mpsc::Receiver<ExecInput>,
    events: &mpsc::Sender<ExecEvent>,
) -> Option<ExecEvent> {
    if let Err(e) = validate(&req) {
        return Some(ExecEvent::Failed(e));
    }
    let cwd = match working_dir(home, &req) {
        Ok(cwd) => cwd,
        Err(message) => {
            return Some(ExecEvent::Exit {
                code: 1,
                message: Some(message),
            })
        }
    };
    let exec_id = format!(
        "{}{}",
        home_tag(home.root()),
        hex::encode(rand::random::<[u8; 16]>())
    );
    // Counted as a running command until it ends ([`crate::activity`]).
    let _running = running.enter(&exec_id);
    let program = &req.argv[0];
    let inherited: Vec<_> = inherited
        .into_iter()
        .filter(|(k, _)| !is_guest_var(k))
        .collect();
    // The PATH the command gets: its request's, else the guest's.
    let path = req
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| OsStr::new(v))
        .or_else(|| {
            inherited
                .iter()
                .rev()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.as_os_str())
        });
    let mut cmd = match resolve_program(program, path) {
        Some(found) => {
            let mut cmd = Command::new(found);
            cmd.arg0(program);
            cmd
        }
        None => Command::new(program),
    };
    cmd.args(&req.argv[1..])
        .current_dir(&cwd)
        .env_clear()
        .envs(inherited)
        .env("HOME", home.root())
        // The secrets' placeholders, read afresh (`secret_env`).
        .envs(crate::secret_env::from_process())
        .envs(req.env.iter().map(|(k, v)| (k, v)))
        .env(EXEC_ID_VAR, &exec_id)
        .stdin(if req.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so the tree can be signalled at once, and so a terminal's
        // job control or a signal to the agent's group never reaches it by accident.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return Some(spawn_failure(program, &e)),
    };
    let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) else {
        return Some(ExecEvent::Failed(OpError::new(
            ErrorCode::Failed,
            format!("command {program:?} started without a process id"),
        )));
    };
    let mut tree = TreeGuard {
        root: pid,
        exec_id,
        root_reaped: false,
        armed: true,
    };
    tracing::debug!(pid, program = %program, "command started");
    // `pid` came from a u32, so it is not negative.
    if events
        .send(ExecEvent::Started {
            pid: pid.unsigned_abs(),
        })
        .await
        .is_err()
    {
        tree.kill(false).await;
        return None;
    }

    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let stdin = child.stdin.take();
    let pumps = async {
        tokio::try_join!(
            pump(stdout, events, ExecEvent::Stdout),
            pump(stderr, events, ExecEvent::Stderr)
        )
        .map(|_| ())
    };
    let feeder = feed(stdin, &mut input);
    let timeout = req.timeout_ms.map(Duration::from_millis);
    let deadline = async {
        match timeout {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    let wait = child.wait();
    tokio::pin!(pumps, feeder, deadline, wait);

    let mut status = None;
    let mut pumps_done = false;
    let end = loop {
        tokio::select! {
            st = &mut wait, if status.is_none() => {
                tree.root_reaped = true;
                status = Some(st);
            }
            r = &mut pumps, if !pumps_done => {
                pumps_done = true;
                if r.is_err() {
                    break End::Stopped(Stop::Gone);
                }
            }
            () = &mut feeder => break End::Stopped(Stop::Abort),
            () = &mut deadline => break End::Stopped(Stop::Timeout),
            () = events.closed() => break End::Stopped(Stop::Gone),
        }
        if pumps_done {
            if let Some(st) = status.take() {
                break End::Exited(st);
            }
        }
    };

    let stop = match end {
        End::Exited(Ok(st)) => {
            // A normal end: processes the command left running with their output redirected
            // elsewhere were deliberately detached, so they are left alone.
            tree.disarm();
            tracing::debug!(pid, status = %st, "command exited");
            return Some(exit_event(st));
        }
        End::Exited(Err(e)) => {
            tree.kill(true).await;
            return Some(ExecEvent::Failed(OpError::new(
                ErrorCode::Failed,
                format!("cannot wait for command {program:?} (pid {pid}): {e}"),
            )));
        }
        End::Stopped(stop) => stop,
    };

    tracing::debug!(pid, ?stop, "stopping command");
    tree.kill(true).await;
    if status.is_none() {
        // SIGKILL was sent; only a process stuck in uninterruptible sleep takes long here, and
        // kill_on_drop plus tokio's orphan reaping cover it if the bound runs out.
        let _ = tokio::time::timeout(REAP_AFTER_KILL, &mut wait).await;
    }
    if stop == Stop::Gone {
        return None;
    }
    // Everything that could write is dead, so the pipes reach EOF at once unless a process
    // escaped the kill; the bound keeps such an escapee from holding the command open.
    if !pumps_done {
        if let Ok(Err(Gone)) = tokio::time::timeout(DRAIN_AFTER_KILL, &mut pumps).await {
            return None;
        }
    }
    Some(match stop {
        Stop::Timeout => ExecEvent::Exit {
            code: EXIT_TIMEOUT,
            message: Some(format!(
                "command timed out after {} ms",
                req.timeout_ms.unwrap_or_default()
            )),
        },
        Stop::Abort | Stop::Gone => ExecEvent::Exit {
            code: EXIT_ABORTED,
            message: Some("command aborted".to_owned()),
        },
    })
}

fn bad_request(message: String) -> OpError {
    OpError::new(ErrorCode::BadRequest, message)
}

/// Checks argv and env bounds before anything runs.
fn validate(req: &ExecRequest) -> Result<(), OpError> {
    let Some(program) = req.argv.first() else {
        return Err(bad_request("argv is empty".to_owned()));
    };
    if program.is_empty() {
        return Err(bad_request("program name (argv[0]) is empty".to_owned()));
    }
    if req.argv.len() > MAX_ARGS {
        return Err(bad_request(format!(
            "argv has {} arguments; the limit is {MAX_ARGS}",
            req.argv.len()
        )));
    }
    let mut total = 0usize;
    for (i, arg) in req.argv.iter().enumerate() {
        if arg.len() > MAX_ARG_LEN {
            return Err(bad_request(format!(
                "argv[{i}] is {} bytes; the limit is {MAX_ARG_LEN}",
                arg.len()
            )));
        }
        if arg.contains('\0') {
            return Err(bad_request(format!("argv[{i}] contains a NUL byte")));
        }
        total += arg.len() + 1;
    }
    if total > MAX_ARGV_BYTES {
        return Err(bad_request(format!(
            "argv is {total} bytes; the limit is {MAX_ARGV_BYTES}"
        )));
    }
    if req.env.len() > MAX_ENV_VARS {
        return Err(bad_request(format!(
            "env has {} variables; the limit is {MAX_ENV_VARS}",
            req.env.len()
        )));
    }
    let mut total = 0usize;
    for (i, (key, value)) in req.env.iter().enumerate() {
        if key.is_empty() {
            return Err(bad_request(format!("env[{i}] has an empty name")));
        }
        if key.contains(['=', '\0']) {
            return Err(bad_request(format!(
                "env name {:?} contains '=' or a NUL byte",
                shorten(key)
            )));
        }
        if value.contains('\0') {
            return Err(bad_request(format!(
                "env {:?} contains a NUL byte",
                shorten(key)
            )));
        }
        if key.len() + value.len() + 1 > MAX_ARG_LEN {
            return Err(bad_request(format!(
                "env {:?} is {} bytes; the limit is {MAX_ARG_LEN}",
                shorten(key),
                key.len() + value.len() + 1
            )));
        }
        total += key.len() + value.len() + 2;
    }
    if total > MAX_ENV_BYTES {
        return Err(bad_request(format!(
            "env is {total} bytes; the limit is {MAX_ENV_BYTES}"
        )));
    }
    Ok(())
}

/// At most 100 bytes of `s`, cut at a character boundary, for messages.
fn shorten(s: &str) -> &str {
    let mut end = s.len().min(100);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn is_guest_var(key: &OsString) -> bool {
    key.as_bytes().starts_with(GUEST_ENV_PREFIX.as_bytes())
}

/// Resolves the request's cwd to an absolute directory in the home, or a message naming it.
/// Without a cwd: the home, or (`StartDir::BotDir`) the lease's bot's own directory.
///
/// Relative paths are relative to the home. An absolute path is accepted when it lies under the
/// home's root (clients often echo back absolute paths); any other absolute path is outside.
fn working_dir(home: &Home, req: &ExecRequest) -> Result<PathBuf, String> {
    let Some(raw) = req.cwd.as_deref() else {
        return match (req.start, &req.lease) {
            (StartDir::Home, _) => Ok(home.root().to_path_buf()),
            (StartDir::BotDir, Some(lease)) => bot_dir(home, &lease.bot, None),
            (StartDir::BotDir, None) => {
                Err("a command that starts in its bot's directory needs the bot's lease".into())
            }
        };
    };
    let shown = shorten(raw);
    let rel = if raw.starts_with('/') {
        match Path::new(raw).strip_prefix(home.root()) {
            Ok(rest) => match rest.to_str() {
                Some(rest) => rest,
                // Unreachable: what remains of a `&str` path is valid UTF-8.
                None => return Err(format!("cwd {shown:?} is rejected: not valid UTF-8")),
            },
            Err(_) => return Err(format!("cwd {shown:?} is outside the home")),
        }
    } else {
        raw
    };
    if let Err(e) = home::normalize(rel) {
        return Err(if rel.split('/').any(|c| c == "..") {
            format!("cwd {shown:?} is outside the home")
        } else {
            format!("cwd {shown:?} is rejected: {}", e.message)
        });
    }
    home.resolve_cwd(rel).map_err(|e| match e.code {
        ErrorCode::NotFound => format!("cwd {shown:?} does not exist"),
        ErrorCode::PathRejected => format!("cwd {shown:?} goes through a symlink"),
        ErrorCode::BadRequest => format!("cwd {shown:?} is not a directory"),
        _ => format!("cwd {shown:?} cannot be used: {}", e.message),
    })
}

/// `bots/<bot>/` in the home (docs/lifecycle.md#vocabulary), created (0700, never through a
/// symlink, given to `owner` if set) on first use; the error message names it.
pub fn bot_dir(home: &Home, bot: &BotId, owner: Option<(u32, u32)>) -> Result<PathBuf, String> {
    let rel = format!("{BOTS_DIR}/{bot}");
    home.ensure_dir(&rel, owner).map_err(|e| match e.code {
        ErrorCode::PathRejected => format!("the bot directory {rel:?} goes through a symlink"),
        ErrorCode::BadRequest => format!("the bot directory {rel:?} is not a directory"),
        _ => format!("the bot directory {rel:?} cannot be used: {}", e.message),
    })
}

/// Where a Team computer's bots have their own directories, inside the home.
pub const BOTS_DIR: &str = "bots";

/// Where `execvp` would find `program` in `path` (the command's own PATH): the first directory
/// holding an executable regular file of that name. Starting that file by its path lets the
/// standard library spawn with `posix_spawn` (the child shares the guest's memory until it
/// execs, `CLONE_VM | CLONE_VFORK`) rather than fork and `execvp`, which it falls back to whenever
/// the child's environment sets a PATH to search: a fork copies the guest's page tables (tens of
/// MB of them with desktops running) and tries every directory with a failed `execve`.
///
/// `None`, and the command is started as before (the fork path, whose `execvp` also reports not
/// found or not executable), when `program` names a path itself (no search: the standard library
/// already spawns it directly), when there is no PATH, when a directory in it is relative (that
/// is relative to the command's working directory, not ours), or when nothing matches.
fn resolve_program(program: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if program.contains('/') {
        return None;
    }
    for dir in std::env::split_paths(path?) {
        if !dir.is_absolute() {
            return None;
        }
        let candidate = dir.join(program);
        let Ok(meta) = std::fs::metadata(&candidate) else {
            continue;
        };
        // What execve would run: a regular file this user may execute (access() asks the
        // kernel, which also knows ACLs and a no-exec mount).
        if meta.is_file()
            && meta.permissions().mode() & 0o111 != 0
            && nix::unistd::access(&candidate, nix::unistd::AccessFlags::X_OK).is_ok()
        {
            return Some(candidate);
        }
    }
    None
}

/// The final event for a command that could not be spawned.
fn spawn_failure(program: &str, e: &io::Error) -> ExecEvent {
    if e.kind() == io::ErrorKind::NotFound {
        return ExecEvent::Exit {
            code: EXIT_NOT_FOUND,
            message: Some(format!("command not found: {program}")),
        };
    }
    if e.kind() == io::ErrorKind::PermissionDenied || e.raw_os_error() == Some(libc::ENOEXEC) {
        return ExecEvent::Exit {
            code: EXIT_NOT_EXECUTABLE,
            message: Some(format!("command not executable: {program}")),
        };
    }
    ExecEvent::Failed(OpError::new(
        ErrorCode::Failed,
        format!("cannot start {program:?}: {e}"),
    ))
}

fn exit_event(status: ExitStatus) -> ExecEvent {
    if let Some(code) = status.code() {
        return ExecEvent::Exit {
            code,
            message: None,
        };
    }
    match status.signal() {
        Some(sig) => {
            let name = Signal::try_from(sig)
                .map(Signal::as_str)
                .unwrap_or("an unknown signal");
            ExecEvent::Exit {
                code: 128 + sig,
                message: Some(format!("terminated by {name}")),
            }
        }
        // waitpid without WUNTRACED/WCONTINUED reports only exits and signals.
        None => ExecEvent::Exit {
            code: 128,
            message: Some(format!("ended with {status}")),
        },
    }
}

/// Copies one output pipe to `events` in chunks of at most [`MAX_CHUNK`], until EOF.
async fn pump<R: AsyncRead + Unpin>(
    reader: Option<R>,
    events: &mpsc::Sender<ExecEvent>,
    wrap: fn(ByteBuf) -> ExecEvent,
) -> Result<(), Gone> {
    let Some(mut reader) = reader else {
        return Ok(());
    };
    let mut buf = vec![0u8; MAX_CHUNK];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) => return Ok(()),
            Ok(n) => {
                let chunk = ByteBuf::from(buf.get(..n).unwrap_or_default().to_vec());
                events.send(wrap(chunk)).await.map_err(|_| Gone)?;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::debug!(error = %e, "reading command output failed; treating it as EOF");
                return Ok(());
            }
        }
    }
}

/// Feeds `input` to the command's stdin. Returns when the command must be aborted: on
/// `ExecInput::Abort` or when `input` closes. Never returns otherwise.
///
/// While a write blocks (the command is not reading stdin), up to [`STDIN_READ_AHEAD`] bytes of
/// further input are read ahead so that an `Abort` queued behind them is still seen. Input after
/// `CloseStdin`, after the command closed its stdin, or for a command without stdin is dropped.
async fn feed(mut stdin: Option<ChildStdin>, input: &mut mpsc::Receiver<ExecInput>) {
    // Input read ahead while a write was blocked, and the stdin bytes it holds.
    let mut queue: VecDeque<ExecInput> = VecDeque::new();
    let mut queued_bytes = 0usize;
    loop {
        let msg = match queue.pop_front() {
            Some(msg) => {
                if let ExecInput::Stdin(b) = &msg {
                    queued_bytes -= b.len();
                }
                msg
            }
            None => match input.recv().await {
                Some(msg) => msg,
                None => return,
            },
        };
        let bytes = match msg {
            ExecInput::Abort => return,
            ExecInput::CloseStdin => {
                stdin = None;
                continue;
            }
            ExecInput::Stdin(bytes) => bytes,
        };
        let Some(pipe) = stdin.as_mut() else {
            continue;
        };
        let mut written = 0;
        let mut broken = false;
        while written < bytes.len() {
            tokio::select! {
                r = pipe.write(bytes.get(written..).unwrap_or_default()) => match r {
                    Ok(0) | Err(_) => {
                        // The command closed its stdin (EPIPE): later input has nowhere to go.
                        broken = true;
                        break;
                    }
                    Ok(n) => written += n,
                },
                msg = input.recv(), if queued_bytes < STDIN_READ_AHEAD => match msg {
                    None | Some(ExecInput::Abort) => return,
                    Some(other) => {
                        if let ExecInput::Stdin(b) = &other {
                            queued_bytes += b.len();
                        }
                        queue.push_back(other);
                    }
                },
            }
        }
        if broken {
            stdin = None;
        }
    }
}

/// Kills a command's process tree unless disarmed, also when the exec future is dropped.
struct TreeGuard {
    root: i32,
    exec_id: String,
    /// Once the main process is reaped its pid may be reused, so it no longer seeds the search.
    root_reaped: bool,
    armed: bool,
}

impl TreeGuard {
    fn disarm(&mut self) {
        self.armed = false;
    }

    /// Kills the tree off the async threads; `wait` also waits (bounded) for the processes to
    /// be gone, so that "timed out" means "and nothing of it runs any more".
    async fn kill(&mut self, wait: bool) {
        if !self.armed {
            return;
        }
        self.armed = false;
        let (root, exec_id, root_alive) = (self.root, self.exec_id.clone(), !self.root_reaped);
        let job = tokio::task::spawn_blocking(move || kill_tree(root, root_alive, &exec_id, wait));
        if let Err(e) = job.await {
            tracing::warn!(pid = root, error = %e, "tree kill task failed; killing inline");
            kill_tree(self.root, !self.root_reaped, &self.exec_id, false);
        }
    }
}

impl Drop for TreeGuard {
    fn drop(&mut self) {
        if self.armed {
            kill_tree(self.root, !self.root_reaped, &self.exec_id, false);
        }
    }
}

/// One process as seen in `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProcStat {
    pid: i32,
    state: char,
    ppid: i32,
    pgrp: i32,
}

/// Parses `/proc/<pid>/stat`: `pid (comm) state ppid pgrp ...`, where comm may hold anything,
/// parentheses and spaces included, so fields are taken after its last `)`.
fn parse_stat(s: &str) -> Option<ProcStat> {
    let open = s.find(" (")?;
    let close = s.rfind(')')?;
    let pid = s.get(..open)?.trim().parse().ok()?;
    let mut fields = s.get(close + 1..)?.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some(ProcStat {
        pid,
        state,
        ppid,
        pgrp,
    })
}

fn read_stat(pid: i32) -> Option<ProcStat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Every process visible in `/proc`; processes that vanish mid-scan are skipped.
fn scan_proc() -> Vec<ProcStat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_stat)
        .collect()
}

fn has_marker(pid: i32, marker: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|env| env.split(|&b| b == 0).any(|var| var == marker))
        .unwrap_or(false)
}

/// Kills a command's whole process tree: its process group, every descendant of `root` by
/// parent links (also those that moved to another group or session), and every process carrying
/// the exec's [`EXEC_ID_VAR`] marker (also orphans of exited parents). Each is SIGSTOPped as soon
/// as it is found, so nothing can fork away, and the search repeats until it finds no new
/// process; then all of them get SIGKILL.
///
/// `root_alive` says the root is not reaped yet, so its pid and parent links are still its own.
/// With `wait`, waits up to a second for the killed processes to be gone (or zombies).
///
/// Limit: a descendant that left the group, was orphaned and dropped the marker from its
/// environment (`(env -i setsid cmd &)`) cannot be told apart from unrelated processes.
fn kill_tree(root: i32, root_alive: bool, exec_id: &str, wait: bool) {
    const MAX_ROUNDS: usize = 64;
    let me = i32::try_from(std::process::id()).unwrap_or(0);
    let marker = format!("{EXEC_ID_VAR}={exec_id}");
    let group = Pid::from_raw(root);
    // One signal freezes the usual tree at once; the search below catches the rest.
    let _ = killpg(group, Signal::SIGSTOP);
    let mut stopped: HashSet<i32> = HashSet::new();
    for _ in 0..MAX_ROUNDS {
        let procs = scan_proc();
        let mut found: HashSet<i32> = HashSet::new();
        if root_alive {
            found.insert(root);
        }
        for p in &procs {
            // The group id cannot be reused while the group has members, so these are ours.
            if p.pgrp == root || stopped.contains(&p.pid) || has_marker(p.pid, marker.as_bytes()) {
                found.insert(p.pid);
            }
        }
        let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
        for p in &procs {
            children.entry(p.ppid).or_default().push(p.pid);
        }
        let mut todo: Vec<i32> = found.iter().copied().collect();
        while let Some(pid) = todo.pop() {
            for &child in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
                if found.insert(child) {
                    todo.push(child);
                }
            }
        }
        let new: Vec<i32> = found
            .into_iter()
            .filter(|&p| p > 1 && p != me && !stopped.contains(&p))
            .collect();
        if new.is_empty() {
            break;
        }
        for pid in new {
            let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
            stopped.insert(pid);
        }
    }
    let _ = killpg(group, Signal::SIGKILL);
    for &pid in &stopped {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    tracing::debug!(pid = root, killed = stopped.len(), "killed command tree");
    if wait {
        for _ in 0..200 {
            let alive = stopped
                .iter()
                .any(|&pid| read_stat(pid).is_some_and(|s| s.state != 'Z'));
            if !alive {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

pub mod pump;

#[cfg(test)]
mod tests;
