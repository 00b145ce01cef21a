//! Detached processes: commands that outlive the stream that started them
//! (`gateway_proto::process`).
//!
//! Each one runs exactly as an exec does ([`crate::exec::run`]: its own process group, the
//! computer's user, the guest's environment minus its own variables, the home as its cwd), with
//! its events drained here instead of onto a stream: output goes to a bounded [`Ring`] (stdout
//! and stderr interleaved as they came), the exit into its record. Readers (`ProcLogs`,
//! `ProcAttach`) copy from the ring and wait on a watch channel for more. The input channel is
//! held by the record for the process's life (a closed channel would abort it), so attached
//! clients can write to its stdin and leaving never ends it.
//!
//! Bounded: at most [`ProcConfig::max_live`] live processes (a start beyond is refused with
//! `TooManyProcesses`) and the last [`ProcConfig::keep_exited`] exited ones; each ring holds at
//! most [`ProcConfig::log_bytes`]. Their exec ids are registered in the activity's `detached`
//! set, not as running commands: idle suspension judges them by their output (stamped in the
//! activity's `process_output`) and CPU, not by being alive (`crate::activity`).

use crate::clock::now_ms;
use crate::exec::{self, Running};
use crate::home::Home;
use crate::opstream::write_frame;
use gateway_proto::process::{ProcEvent, ProcExit, ProcInfo, ProcKill};
use gateway_proto::{
    BotId, ErrorCode, ExecEvent, ExecInput, ExecRequest, FrameDecoder, OpError, MAX_CHUNK,
};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, watch};

/// Default bytes of output kept per process: 1 MiB.
pub const DEFAULT_LOG_BYTES: usize = 1 << 20;
/// Default most live processes.
pub const DEFAULT_MAX_LIVE: usize = 64;
/// Default exited processes kept for `ps` and their logs.
pub const DEFAULT_KEEP_EXITED: usize = 16;

/// The limits of the detached processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcConfig {
    /// Bytes of output kept per process (`RAKAZO_PROCESS_LOG_BYTES`).
    pub log_bytes: usize,
    pub max_live: usize,
    pub keep_exited: usize,
}

impl Default for ProcConfig {
    fn default() -> Self {
        Self {
            log_bytes: DEFAULT_LOG_BYTES,
            max_live: DEFAULT_MAX_LIVE,
            keep_exited: DEFAULT_KEEP_EXITED,
        }
    }
}

/// The last `cap` bytes of a stream, addressed by their offset in the whole stream.
#[derive(Debug)]
pub struct Ring {
    buf: VecDeque<u8>,
    /// Offset of `buf[0]`.
    start: u64,
    cap: usize,
}

impl Ring {
    pub fn new(cap: usize) -> Self {
        Self {
            buf: VecDeque::new(),
            start: 0,
            cap: cap.max(1),
        }
    }

    /// Appends `bytes`, dropping the oldest beyond the cap.
    pub fn push(&mut self, bytes: &[u8]) {
        let bytes = if bytes.len() > self.cap {
            let skip = bytes.len() - self.cap;
            self.start += self.buf.len() as u64 + skip as u64;
            self.buf.clear();
            &bytes[skip..]
        } else {
            bytes
        };
        let over = (self.buf.len() + bytes.len()).saturating_sub(self.cap);
        self.buf.drain(..over);
        self.start += over as u64;
        self.buf.extend(bytes);
    }

    /// Offset of the oldest byte kept.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Offset of the next byte.
    pub fn end(&self) -> u64 {
        self.start + self.buf.len() as u64
    }

    /// Up to `max` bytes from `offset` (moved up to the oldest kept): their offset and bytes.
    pub fn read(&self, offset: u64, max: usize) -> (u64, Vec<u8>) {
        let from = offset.clamp(self.start, self.end());
        let skip = (from - self.start) as usize;
        let take = (self.buf.len() - skip).min(max);
        (from, self.buf.range(skip..skip + take).copied().collect())
    }
}

/// One process's changing state.
struct State {
    pid: u32,
    ring: Ring,
    exit: Option<ProcExit>,
    exited_ms: Option<u64>,
}

/// One detached process.
struct Proc {
    id: u32,
    argv: Vec<String>,
    bot: Option<BotId>,
    started_ms: u64,
    state: Mutex<State>,
    /// Bumped at every change of `state`.
    changed: watch::Sender<u64>,
    /// Its stdin; dropped when it exits.
    input: Mutex<Option<mpsc::Sender<ExecInput>>>,
}

impl Proc {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn info(&self) -> ProcInfo {
        let s = self.lock();
        ProcInfo {
            id: self.id,
            pid: s.pid,
            argv: self.argv.clone(),
            bot: self.bot.clone(),
            started_ms: self.started_ms,
            exited_ms: s.exited_ms,
            exit: s.exit.clone(),
            output_bytes: s.ring.end(),
            kept_from: s.ring.start(),
        }
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn input(&self) -> Option<mpsc::Sender<ExecInput>> {
        self.input.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The guest's detached processes.
pub struct Procs {
    home: Home,
    config: ProcConfig,
    /// The activity's `detached` set (not its running commands).
    running: Arc<Running>,
    /// Stamped at every output: the activity's `process_output`.
    output: crate::activity::LastOutput,
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    next: u32,
    all: BTreeMap<u32, Arc<Proc>>,
    /// Starts between their admission and their entry in `all` (counted as live).
    starting: usize,
}

/// A start admitted but not yet in the table.
struct Starting<'a>(&'a Procs);

impl Drop for Starting<'_> {
    fn drop(&mut self) {
        self.0.table().starting -= 1;
    }
}

fn no_process(id: u32) -> OpError {
    OpError::new(ErrorCode::NotFound, format!("no process {id}"))
}

impl Procs {
    pub fn new(home: Home, config: ProcConfig) -> Self {
        Self::linked(home, config, Arc::default(), Default::default())
    }

    /// Processes whose exec ids go into `running` and whose output stamps `output` (the
    /// activity's `detached` and `process_output`).
    pub fn linked(
        home: Home,
        config: ProcConfig,
        running: Arc<Running>,
        output: crate::activity::LastOutput,
    ) -> Self {
        Self {
            home,
            config,
            running,
            output,
            table: Mutex::new(Table::default()),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, id: u32) -> Result<Arc<Proc>, OpError> {
        self.table()
            .all
            .get(&id)
            .cloned()
            .ok_or_else(|| no_process(id))
    }

    /// Starts `command` detached: answers once it started (or why it could not).
    pub async fn start(&self, command: ExecRequest) -> Result<ProcInfo, OpError> {
        let id = {
            let mut t = self.table();
            let live = t.all.values().filter(|p| p.lock().exit.is_none()).count() + t.starting;
            if live >= self.config.max_live {
                return Err(OpError::new(
                    ErrorCode::TooManyProcesses,
                    format!(
                        "the computer runs {live} detached processes, the most it may; kill one \
                         first"
                    ),
                ));
            }
            t.next += 1;
            t.starting += 1;
            t.next
        };
        // Counted until it is in the table or failed, even when this future is dropped.
        let _starting = Starting(self);
        let proc = self.spawn(id, command).await?;
        self.table().all.insert(id, proc.clone());
        self.prune();
        Ok(proc.info())
    }

    /// Runs `command` as process `id`: its record once it started, its events drained into it.
    async fn spawn(&self, id: u32, mut command: ExecRequest) -> Result<Arc<Proc>, OpError> {
        command.stdin = true;
        let argv = command.argv.clone();
        let bot = command.lease.as_ref().map(|l| l.bot.clone());
        let (input_tx, input_rx) = mpsc::channel::<ExecInput>(16);
        let (event_tx, mut event_rx) = mpsc::channel::<ExecEvent>(64);
        let home = self.home.clone();
        let running = self.running.clone();
        tokio::spawn(async move { exec::run(&home, &running, command, input_rx, event_tx).await });
        let pid = match event_rx.recv().await {
            Some(ExecEvent::Started { pid }) => pid,
            Some(ExecEvent::Failed(e)) => return Err(e),
            Some(ExecEvent::Exit { code, message }) => {
                return Err(OpError::new(
                    ErrorCode::BadRequest,
                    message.unwrap_or_else(|| format!("the command exited with {code}")),
                ))
            }
            Some(_) | None => {
                return Err(OpError::new(
                    ErrorCode::Failed,
                    "the command ended before it started",
                ))
            }
        };
        let (changed, _) = watch::channel(0);
        let proc = Arc::new(Proc {
            id,
            argv,
            bot,
            started_ms: u64::try_from(now_ms()).unwrap_or(0),
            state: Mutex::new(State {
                pid,
                ring: Ring::new(self.config.log_bytes),
                exit: None,
                exited_ms: None,
            }),
            changed,
            input: Mutex::new(Some(input_tx)),
        });
        tracing::debug!(id, pid, "detached process started");
        tokio::spawn(drain(proc.clone(), event_rx, self.output.clone()));
        Ok(proc)
    }

    /// Forgets the oldest exited processes beyond the number kept.
    fn prune(&self) {
        let mut t = self.table();
        let exited: Vec<u32> = t
            .all
            .values()
            .filter(|p| p.lock().exit.is_some())
            .map(|p| p.id)
            .collect();
        let over = exited.len().saturating_sub(self.config.keep_exited);
        for id in exited.into_iter().take(over) {
            t.all.remove(&id);
        }
    }

    pub fn list(&self) -> Vec<ProcInfo> {
        self.prune();
        self.table().all.values().map(|p| p.info()).collect()
    }

    /// Sends the request's signal to the process's group.
    pub fn kill(&self, r: &ProcKill) -> Result<ProcInfo, OpError> {
        use nix::sys::signal::{killpg, Signal};
        let signal = Signal::try_from(r.signal)
            .map_err(|_| OpError::new(ErrorCode::BadRequest, format!("no signal {}", r.signal)))?;
        let proc = self.get(r.id)?;
        let (pid, exited) = {
            let s = proc.lock();
            (s.pid, s.exit.is_some())
        };
        if exited {
            return Err(OpError::new(
                ErrorCode::NotFound,
                format!("process {} has exited", r.id),
            ));
        }
        let pgid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX));
        killpg(pgid, signal).map_err(|e| {
            OpError::new(
                ErrorCode::Failed,
                format!("cannot signal process {}: {e}", r.id),
            )
        })?;
        Ok(proc.info())
    }

    /// Serves a logs (`follow`) or attach (`input`) stream: `Opened`, output from `offset`
    /// (`None`: the oldest kept, or for an attach, now), then as it comes until the process
    /// exits (`Exit`), unless `follow` is false (the stream ends at the current end).
    pub async fn serve_output(
        &self,
        id: u32,
        offset: Option<u64>,
        follow: bool,
        attach: Option<(quinn::RecvStream, Vec<u8>)>,
        send: &mut quinn::SendStream,
        refuse: impl FnOnce(OpError) -> ProcEvent,
    ) {
        let proc = match self.get(id) {
            Ok(p) => p,
            Err(e) => {
                let _ = write_frame(send, &refuse(e)).await;
                let _ = send.finish();
                return;
            }
        };
        let mut changes = proc.changed.subscribe();
        let (mut at, dropped) = {
            let s = proc.lock();
            let asked = match (offset, &attach) {
                (Some(o), _) => o,
                (None, Some(_)) => s.ring.end(),
                (None, None) => s.ring.start(),
            };
            let at = asked.clamp(s.ring.start(), s.ring.end());
            (at, at.saturating_sub(asked))
        };
        if write_frame(
            send,
            &ProcEvent::Opened {
                offset: at,
                dropped,
            },
        )
        .await
        .is_err()
        {
            return;
        }
        // An attach: its input frames go to the process's stdin until the control plane
        // finishes its side (detach).
        let (detached_tx, mut detached) = tokio::sync::oneshot::channel::<()>();
        let feeder = attach.map(|(recv, remainder)| {
            let input = proc.input();
            tokio::spawn(feed_input(recv, remainder, input, detached_tx))
        });
        loop {
            changes.mark_unchanged();
            let (from, bytes, exit) = {
                let s = proc.lock();
                let (from, bytes) = s.ring.read(at, MAX_CHUNK);
                (from, bytes, s.exit.clone())
            };
            if !bytes.is_empty() {
                at = from + bytes.len() as u64;
                let frame = ProcEvent::Output {
                    offset: from,
                    data: bytes.into(),
                };
                if write_frame(send, &frame).await.is_err() {
                    break;
                }
                continue;
            }
            if let Some(exit) = exit {
                let _ = write_frame(send, &ProcEvent::Exit(exit)).await;
                let _ = send.finish();
                break;
            }
            if !follow {
                let _ = send.finish();
                break;
            }
            tokio::select! {
                r = changes.changed() => if r.is_err() { break },
                _ = send.stopped() => break,
                _ = &mut detached, if feeder.is_some() => {
                    let _ = send.finish();
                    break;
                }
            }
        }
        if let Some(f) = feeder {
            f.abort();
        }
    }
}

/// Moves an attached client's stdin frames to the process; `detached` fires when the control
/// plane finishes or resets its side, or sends `Abort` (which detaches, never kills).
async fn feed_input(
    mut recv: quinn::RecvStream,
    remainder: Vec<u8>,
    input: Option<mpsc::Sender<ExecInput>>,
    detached: tokio::sync::oneshot::Sender<()>,
) {
    let mut decoder = FrameDecoder::with_max(MAX_CHUNK + 1024);
    decoder.push(&remainder);
    'read: loop {
        loop {
            match decoder.next_message::<ExecInput>() {
                Ok(Some(ExecInput::Abort)) | Err(_) => break 'read,
                Ok(Some(frame)) => {
                    if let Some(tx) = &input {
                        let _ = tx.send(frame).await;
                    }
                }
                Ok(None) => break,
            }
        }
        match recv.read_chunk(64 * 1024, true).await {
            Ok(Some(chunk)) => decoder.push(&chunk.bytes),
            Ok(None) | Err(_) => break,
        }
    }
    let _ = detached.send(());
}

/// Keeps a process's events: output into its ring, its exit into its record.
async fn drain(
    proc: Arc<Proc>,
    mut events: mpsc::Receiver<ExecEvent>,
    output: crate::activity::LastOutput,
) {
    while let Some(event) = events.recv().await {
        match event {
            ExecEvent::Stdout(b) | ExecEvent::Stderr(b) => {
                proc.lock().ring.push(&b);
                output.stamp();
            }
            ExecEvent::Exit { code, message } => {
                record_exit(&proc, ProcExit { code, message });
                return;
            }
            ExecEvent::Failed(e) => {
                record_exit(
                    &proc,
                    ProcExit {
                        code: 128,
                        message: Some(e.message),
                    },
                );
                return;
            }
            ExecEvent::Started { .. } => continue,
        }
        proc.bump();
    }
    record_exit(
        &proc,
        ProcExit {
            code: 128,
            message: Some("the command ended without an exit status".into()),
        },
    );
}

fn record_exit(proc: &Proc, exit: ProcExit) {
    tracing::debug!(id = proc.id, code = exit.code, "detached process exited");
    {
        let mut s = proc.lock();
        s.exit = Some(exit);
        s.exited_ms = Some(u64::try_from(now_ms()).unwrap_or(0));
    }
    proc.input.lock().unwrap_or_else(|e| e.into_inner()).take();
    proc.bump();
}

#[cfg(test)]
mod tests {
    use super::{ProcConfig, Procs, Ring};
    use crate::home::Home;
    use gateway_proto::process::ProcKill;
    use gateway_proto::{ErrorCode, ExecRequest, StartDir};

    fn sh(script: &str) -> ExecRequest {
        ExecRequest {
            argv: vec!["sh".into(), "-c".into(), script.into()],
            cwd: None,
            env: Vec::new(),
            timeout_ms: None,
            stdin: false,
            lease: None,
            start: StartDir::Home,
        }
    }

    /// Waits until process `id` exited; its exit code.
    async fn exited(procs: &Procs, id: u32) -> i32 {
        for _ in 0..1000 {
            let p = procs.list().into_iter().find(|p| p.id == id).expect("kept");
            if let Some(e) = p.exit {
                return e.code;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("process {id} never exited")
    }

    #[tokio::test]
    async fn live_processes_are_capped_and_exited_ones_kept_up_to_their_number() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Home::new(dir.path()).expect("home");
        let config = ProcConfig {
            log_bytes: 4096,
            max_live: 1,
            keep_exited: 1,
        };
        let procs = Procs::new(home, config);
        let first = procs.start(sh("sleep 30")).await.expect("first");
        let refused = procs.start(sh("true")).await.expect_err("over the cap");
        assert_eq!(refused.code, ErrorCode::TooManyProcesses);
        assert!(
            refused.message.contains("kill one first"),
            "{}",
            refused.message
        );
        let kill = |id, signal| ProcKill {
            id,
            signal,
            lease: None,
        };
        procs.kill(&kill(first.id, 9)).expect("killed");
        assert_eq!(exited(&procs, first.id).await, 137);
        assert_eq!(
            procs.kill(&kill(first.id, 9)).expect_err("exited").code,
            ErrorCode::NotFound
        );
        assert_eq!(
            procs.kill(&kill(99, 15)).expect_err("unknown").code,
            ErrorCode::NotFound
        );
        // Room again; the oldest exited is forgotten beyond the one kept.
        let second = procs.start(sh("exit 3")).await.expect("second");
        assert_eq!(exited(&procs, second.id).await, 3);
        let ids: Vec<u32> = procs.list().iter().map(|p| p.id).collect();
        assert_eq!(ids, vec![second.id]);
        assert_eq!(
            procs
                .kill(&kill(second.id, 1234))
                .expect_err("no signal")
                .code,
            ErrorCode::BadRequest
        );
    }

    #[test]
    fn a_ring_keeps_the_last_bytes_and_their_offsets() {
        let mut r = Ring::new(4);
        r.push(b"ab");
        assert_eq!((r.start(), r.end()), (0, 2));
        r.push(b"cde");
        assert_eq!((r.start(), r.end()), (1, 5));
        assert_eq!(r.read(0, 10), (1, b"bcde".to_vec()));
        assert_eq!(r.read(3, 1), (3, b"d".to_vec()));
        assert_eq!(r.read(9, 10), (5, Vec::new()));
        r.push(b"0123456789");
        assert_eq!((r.start(), r.end()), (11, 15));
        assert_eq!(r.read(0, 10), (11, b"6789".to_vec()));
    }
}
