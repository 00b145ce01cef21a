//! Terminal sessions (docs/screens.md#terminal): a shell on its own PTY, served in-process on
//! the session's own unix socket so the gateway relays it like the RFB sockets.
//!
//! A session serves one connection at a time on its socket. Bytes from it are terminal frames
//! ([`gateway_proto::termframe`]): input goes to the PTY, resizes to the PTY's window size; the
//! PTY's output goes back raw. A bad or oversized frame ends that connection. The shell does not
//! end with its connection: the PTY's output is read all along and its newest
//! [`ring::RING_CAPACITY`] bytes kept ([`ring`]), and the next connection to the socket takes
//! the session over (the previous one, if still there, is closed): it gets the kept output first,
//! after a full terminal reset when it is not the first, and the PTY's foreground process group
//! gets a SIGWINCH so that full-screen programs repaint. How long a shell waits for a connection,
//! and which connection may have it, is the gateway's business (docs/screens.md#reconnecting).
//! The session ends when the shell's PTY closes or the gateway stops it: stopping hangs up the
//! shell's process group, kills it, kills anything else still holding the PTY, and removes the
//! socket. Who the shell runs as is decided by [`user`].

pub mod ring;
pub mod user;

use gateway_proto::termframe::{FrameDecoder, TermFrame};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use portable_pty::{CommandBuilder, MasterPty, PtySize};
use ring::OutputRing;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use user::ShellPlan;

/// Size of a new terminal until the client's first resize.
const INITIAL_SIZE: PtySize = PtySize {
    rows: 24,
    cols: 80,
    pixel_width: 0,
    pixel_height: 0,
};
/// How long a shell has to exit after SIGHUP before its group is killed.
const HANGUP_GRACE: Duration = Duration::from_secs(1);
/// Largest read from the client or the PTY.
const CHUNK: usize = 64 * 1024;
/// Largest write of PTY output to the connection: what the PTY reader already queued is written
/// together (a PTY read returns at most about 4 KiB), never waiting for more.
const OUT_BATCH: usize = 256 * 1024;
/// How long the last output of a shell that exited may take to reach its connection.
const FLUSH_LIMIT: Duration = Duration::from_secs(5);
/// How long a failing accept waits before the next try (a full descriptor table).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Why a terminal session could not start.
#[derive(Debug, thiserror::Error)]
pub enum TerminalError {
    #[error(transparent)]
    Shell(#[from] user::ShellError),
    #[error("cannot open a pty: {0}")]
    Pty(String),
    #[error("cannot start the shell: {0}")]
    Spawn(String),
    #[error("cannot listen on the terminal socket {}", path.display())]
    Socket {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot prepare the terminal's session directory {}", path.display())]
    SessionDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One shell and the server task that connects it to its socket, one connection at a time.
pub struct TerminalSession {
    pid: Option<u32>,
    tty: Option<PathBuf>,
    child: Option<Box<dyn portable_pty::Child + Send + Sync>>,
    server: JoinHandle<()>,
    socket: PathBuf,
    /// The session's profile and nss_wrapper files ([`ShellPlan::session_dir`]).
    session_dir: PathBuf,
    /// A duplicate of the PTY's master, held until the session is stopped: while it is open the
    /// kernel cannot give `tty` to another PTY, so the holders [`Self::kill_now`] finds by its
    /// path are this session's, never a newer terminal's that got the same number.
    master_hold: Option<Mutex<Box<dyn Read + Send>>>,
    stopped: bool,
}

impl std::fmt::Debug for TerminalSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalSession")
            .field("pid", &self.pid)
            .field("socket", &self.socket)
            .finish()
    }
}

impl TerminalSession {
    /// Starts the shell of `plan` on a new PTY and listens on `socket` (mode 0600) for the
    /// connections that drive it, one at a time, stamping `output` whenever the shell prints.
    /// Must run inside the tokio runtime.
    pub fn start(
        plan: ShellPlan,
        socket: &Path,
        output: crate::activity::LastOutput,
    ) -> Result<Self, TerminalError> {
        write_session_dir(&plan).map_err(|source| {
            let _ = std::fs::remove_dir_all(&plan.session_dir);
            TerminalError::SessionDir {
                path: plan.session_dir.clone(),
                source,
            }
        })?;
        let session_dir = plan.session_dir.clone();
        let pair = match portable_pty::native_pty_system().openpty(INITIAL_SIZE) {
            Ok(p) => p,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&session_dir);
                return Err(TerminalError::Pty(format!("{e:#}")));
            }
        };
        let tty = pair.master.tty_name();
        if let Some(tty) = &tty {
            // Programs that reopen /dev/tty (ssh, sudo prompts) need the PTY to be the user's,
            // as login and sshd make it.
            if let Err(e) = std::os::unix::fs::chown(tty, Some(plan.user.uid), None) {
                tracing::debug!(error = %e, "cannot give the pty to the workspace user");
            }
        }
        let mut cmd = CommandBuilder::from_argv(plan.argv.clone());
        cmd.env_clear();
        for (k, v) in &plan.env {
            cmd.env(k, v);
        }
        cmd.cwd(&plan.cwd);
        let child = match pair.slave.spawn_command(cmd) {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&session_dir);
                return Err(TerminalError::Spawn(format!("{e:#}")));
            }
        };
        drop(pair.slave);
        let pid = child.process_id();
        // A reader never read: only its duplicate of the master's fd matters.
        let master_hold = pair.master.try_clone_reader().ok().map(Mutex::new);
        let mut session = Self {
            pid,
            tty,
            child: Some(child),
            server: tokio::spawn(async {}),
            socket: socket.to_path_buf(),
            session_dir,
            master_hold,
            stopped: false,
        };
        let io = (|| -> Result<_, TerminalError> {
            let pty = |e: anyhow::Error| TerminalError::Pty(format!("{e:#}"));
            let reader = pair.master.try_clone_reader().map_err(pty)?;
            let writer = pair.master.take_writer().map_err(pty)?;
            let socket_err = |source| TerminalError::Socket {
                path: socket.to_path_buf(),
                source,
            };
            let _ = std::fs::remove_file(socket);
            let listener = UnixListener::bind(socket).map_err(socket_err)?;
            std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
                .map_err(socket_err)?;
            Ok((reader, writer, listener))
        })();
        match io {
            Ok((reader, writer, listener)) => {
                // The PTY is blocking: a thread each way, with bounded channels for backpressure.
                let (out_tx, out_rx) = mpsc::channel::<Vec<u8>>(8);
                std::thread::spawn(move || pump_output(reader, &out_tx));
                let (in_tx, in_rx) = mpsc::channel::<Vec<u8>>(8);
                std::thread::spawn(move || pump_input(writer, in_rx));
                let mut ring = OutputRing::default();
                if let Some(n) = &plan.notice {
                    ring.push(n.as_bytes());
                }
                session.server = tokio::spawn(serve(Hub {
                    listener,
                    master: Arc::new(Mutex::new(pair.master)),
                    out_rx,
                    in_tx,
                    ring,
                    printed: output,
                }));
                Ok(session)
            }
            Err(e) => {
                // Nothing serves the shell: do not leave it behind.
                session.kill_now();
                Err(e)
            }
        }
    }

    /// The shell's pid.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Whether the shell still runs. Looked up without reaping it: until [`Self::stop`] waits
    /// for it, its pid (and so its process group's id) cannot be given to another process, so
    /// the group signals of `stop` reach this shell's group only.
    pub fn is_alive(&mut self) -> bool {
        !self.stopped && self.child.is_some() && self.pid.is_some_and(running_unreaped)
    }

    /// Hangs up and kills the shell's process group and everything still holding its PTY, then
    /// removes the socket. Idempotent.
    pub async fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.server.abort();
        if let Some(pid) = self.pid {
            super::procs::signal_group(pid, Signal::SIGHUP);
            let deadline = tokio::time::sleep(HANGUP_GRACE);
            tokio::pin!(deadline);
            loop {
                if !self.is_alive() {
                    break;
                }
                tokio::select! {
                    () = &mut deadline => break,
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
            }
        }
        self.kill_now();
        if let Some(mut child) = self.child.take() {
            // Killed above: the wait is immediate.
            let _ = tokio::task::spawn_blocking(move || child.wait()).await;
        }
        // Only now may the PTY's number go to another terminal.
        self.master_hold = None;
        self.stopped = true;
    }

    /// SIGKILL to the shell's group and to every process with the PTY open; removes the socket
    /// and the session directory.
    fn kill_now(&mut self) {
        if let Some(pid) = self.pid {
            super::procs::signal_group(pid, Signal::SIGKILL);
        }
        if let Some(tty) = &self.tty {
            for pid in holders_of(tty) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_dir_all(&self.session_dir);
    }
}

/// Whether `pid` (a child of ours not yet waited for) still runs: its `/proc` entry exists
/// and it is not a zombie.
fn running_unreaped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| !matches!(state, 'Z' | 'X' | 'x'))
    })
}

/// Creates the session directory fresh (0700, failing if anything is already there, so nothing
/// planted is reused), writes the plan's files into it (0600, never through a link), and gives
/// both to the shell's user when the guest drops to it.
fn write_session_dir(plan: &ShellPlan) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&plan.session_dir)?;
    let owner = plan.give_to_user.then_some(plan.user);
    for (name, content) in &plan.files {
        let path = plan.session_dir.join(name);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)?;
        f.write_all(content.as_bytes())?;
        if let Some(u) = owner {
            std::os::unix::fs::fchown(&f, Some(u.uid), Some(u.gid))?;
        }
    }
    if let Some(u) = owner {
        std::os::unix::fs::chown(&plan.session_dir, Some(u.uid), Some(u.gid))?;
    }
    Ok(())
}

impl Drop for TerminalSession {
    fn drop(&mut self) {
        if !self.stopped {
            self.server.abort();
            self.kill_now();
        }
    }
}

/// Processes (other than this one) that have `tty` open: a job that left the shell's process
/// group still keeps the PTY, and the session is not over until it is gone.
fn holders_of(tty: &Path) -> Vec<i32> {
    let me = std::process::id();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let holds = fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == tty));
        if holds {
            if let Ok(pid) = i32::try_from(pid) {
                out.push(pid);
            }
        }
    }
    out
}

/// What serves a session's socket: the PTY's two channels, its recent output, and the socket.
struct Hub {
    listener: UnixListener,
    master: Arc<Mutex<Box<dyn MasterPty + Send>>>,
    out_rx: mpsc::Receiver<Vec<u8>>,
    in_tx: mpsc::Sender<Vec<u8>>,
    ring: OutputRing,
    printed: crate::activity::LastOutput,
}

/// The connection a session serves now: a task each way. Dropping it closes the connection.
struct Attached {
    out: mpsc::Sender<Vec<u8>>,
    writer: JoinHandle<()>,
    reader: JoinHandle<()>,
}

impl Attached {
    /// Starts serving `conn`: `replay` first, then the output the hub sends.
    fn start(conn: UnixStream, replay: Vec<u8>, hub: &Hub) -> Self {
        let (conn_rx, conn_tx) = conn.into_split();
        let (out, out_rx) = mpsc::channel::<Vec<u8>>(8);
        Self {
            out,
            writer: tokio::spawn(write_output(conn_tx, replay, out_rx)),
            reader: tokio::spawn(read_frames(conn_rx, hub.master.clone(), hub.in_tx.clone())),
        }
    }

    /// Resolves when either direction ended (the client went, or broke a frame).
    async fn ended(&mut self) {
        tokio::select! {
            _ = &mut self.writer => {}
            _ = &mut self.reader => {}
        }
    }

    /// The shell is gone: delivers what is queued (bounded by [`FLUSH_LIMIT`]) and closes.
    async fn finish(mut self) {
        // The writer ends once it has written everything and its channel is closed.
        drop(std::mem::replace(&mut self.out, mpsc::channel(1).0));
        let _ = tokio::time::timeout(FLUSH_LIMIT, &mut self.writer).await;
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.writer.abort();
        self.reader.abort();
    }
}

/// Serves the session until its PTY closes: keeps the PTY's output in the ring and passes it to
/// the attached connection; a new connection takes over from the previous one.
async fn serve(mut hub: Hub) {
    let mut attached: Option<Attached> = None;
    // Output read from the PTY and kept, not yet handed to the attached connection.
    let mut pending: Option<Vec<u8>> = None;
    let mut attachments = 0u64;
    loop {
        // The attached connection's channel, apart: the select below also waits for its end.
        let out = attached.as_ref().map(|a| a.out.clone());
        tokio::select! {
            accepted = hub.listener.accept() => {
                let conn = match accepted {
                    Ok((conn, _)) => conn,
                    Err(e) => {
                        tracing::debug!(error = %e, "terminal accept failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                        continue;
                    }
                };
                // The previous connection, if any, is closed: its output is in the ring.
                drop(attached.take());
                pending = None;
                let again = attachments > 0;
                attachments += 1;
                attached = Some(Attached::start(conn, hub.ring.replay(again), &hub));
                if again {
                    hub.repaint();
                }
            }
            () = async { attached.as_mut().expect("guarded").ended().await }, if attached.is_some() => {
                // The shell stays, for the gateway to keep or stop.
                attached = None;
                pending = None;
            }
            chunk = hub.out_rx.recv(), if pending.is_none() => {
                let Some(mut bytes) = chunk else {
                    // The PTY closed: every holder of its other end (the shell first) is gone.
                    drop(out);
                    if let Some(a) = attached.take() {
                        a.finish().await;
                    }
                    return;
                };
                while bytes.len() < OUT_BATCH {
                    match hub.out_rx.try_recv() {
                        Ok(more) => bytes.extend_from_slice(&more),
                        Err(_) => break,
                    }
                }
                hub.printed.stamp();
                hub.ring.push(&bytes);
                if attached.is_some() {
                    pending = Some(bytes);
                }
            }
            permit = async { out.clone().expect("guarded").reserve_owned().await },
                if pending.is_some() && out.is_some() =>
            {
                match permit {
                    Ok(p) => {
                        p.send(pending.take().expect("guarded"));
                    }
                    Err(_) => {
                        attached = None;
                        pending = None;
                    }
                }
            }
        }
    }
}

impl Hub {
    /// A SIGWINCH to the PTY's foreground process group, so that a full-screen program redraws
    /// its screen for the connection that just attached (the size it reports next may be the
    /// same, and an unchanged size signals nothing).
    fn repaint(&self) {
        let group = self
            .master
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .process_group_leader();
        if let Some(pgid) = group.filter(|&p| p > 1) {
            if let Err(e) = nix::sys::signal::killpg(Pid::from_raw(pgid), Signal::SIGWINCH) {
                tracing::debug!(error = %e, "cannot signal the terminal's foreground group");
            }
        }
    }
}

/// Writes `replay`, then the output the hub sends, to the connection.
async fn write_output(mut conn: OwnedWriteHalf, replay: Vec<u8>, mut out: mpsc::Receiver<Vec<u8>>) {
    if !replay.is_empty() && conn.write_all(&replay).await.is_err() {
        return;
    }
    while let Some(mut bytes) = out.recv().await {
        while bytes.len() < OUT_BATCH {
            match out.try_recv() {
                Ok(more) => bytes.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        if conn.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

/// Decodes the connection's frames: input to the PTY, resizes to its window size; returns when
/// the connection ends or breaks a frame.
async fn read_frames(
    mut conn: OwnedReadHalf,
    master: Arc<Mutex<Box<dyn MasterPty + Send>>>,
    input: mpsc::Sender<Vec<u8>>,
) {
    let mut decoder = FrameDecoder::new();
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        decoder.push(&buf[..n]);
        loop {
            match decoder.next_frame() {
                Ok(Some(TermFrame::Input(bytes))) => {
                    if input.send(bytes).await.is_err() {
                        return;
                    }
                }
                Ok(Some(TermFrame::Resize { cols, rows })) => {
                    // A hidden terminal may report 0; a PTY cannot be that small.
                    if cols > 0 && rows > 0 {
                        let size = PtySize {
                            rows,
                            cols,
                            pixel_width: 0,
                            pixel_height: 0,
                        };
                        let master = master.lock().unwrap_or_else(PoisonError::into_inner);
                        if let Err(e) = master.resize(size) {
                            tracing::debug!(error = %e, "terminal resize failed");
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::info!(error = %e, "closing a terminal connection on a bad frame");
                    return;
                }
            }
        }
    }
}

fn pump_output(mut reader: Box<dyn Read + Send>, out: &mpsc::Sender<Vec<u8>>) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        match reader.read(&mut buf) {
            // EIO once every holder of the PTY's other end is gone.
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if out.blocking_send(buf[..n].to_vec()).is_err() {
                    return;
                }
            }
        }
    }
}

fn pump_input(mut writer: Box<dyn Write + Send>, mut input: mpsc::Receiver<Vec<u8>>) {
    while let Some(bytes) = input.blocking_recv() {
        if writer
            .write_all(&bytes)
            .and_then(|()| writer.flush())
            .is_err()
        {
            return;
        }
    }
}
