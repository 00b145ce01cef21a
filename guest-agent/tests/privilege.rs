//! The real `rakazo-guest` binary started as root with `RAKAZO_RUN_AS`: it drops for good.
//!
//! A fake control plane (real QUIC on loopback, as in `tunnel.rs`) accepts the guest and runs
//! commands through it, so both sides of the drop are checked: from outside through `/proc`
//! (uids, gids, groups, the home's new owner, `/proc/<guest>/environ` refused to another
//! process of the same uid) and from inside (what a command runs as and what environment it
//! gets).
//!
//! What is provable about the guest's own `RAKAZO_*` variables: the kernel's copy of the
//! initial environment (`/proc/<pid>/environ`) is never rewritten by `unsetenv`, so root still
//! sees `RAKAZO_HOME` there (the system-test harness relies on it to find guests). What the
//! test proves instead: only root can read that file (the guest is non-dumpable, so the file
//! is root's and a same-uid reader is refused), and commands, which inherit the guest's live
//! environment, get no `RAKAZO_*` variable but the exec id marker.
//!
//! Needs root; as another user each test says so and passes without checking anything.

mod common;

use anyhow::{anyhow, bail, ensure, Context, Result};
use common::{identity, server};
use gateway_proto::{
    encode, ControlHandshake, ExecEvent, ExecRequest, FrameDecoder, HandshakeEvent, Request,
};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

fn is_root() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    eprintln!("not root: the privilege drop cannot be exercised");
    false
}

/// A uid (and gid) that no passwd entry and no process uses.
fn free_id() -> u32 {
    loop {
        let id = 3_000_000 + rand::random::<u32>() % 1_000_000;
        let taken = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(id))
            .ok()
            .flatten()
            .is_some();
        if !taken {
            return id;
        }
    }
}

/// A guest process and the files it was started with; killed and cleaned up on drop.
struct Guest {
    child: Child,
    runtime_dir: PathBuf,
    home: PathBuf,
    _dir: tempfile::TempDir,
}

impl Guest {
    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.runtime_dir);
    }
}

/// Starts the real guest with `run_as`, a root-owned 0600 token file and a root-owned home
/// below a directory others may traverse (0711), as the local provider lays them out.
/// `as_uid` starts it as that uid instead (through setpriv), owning its token and home.
fn start_guest(addr: &str, fingerprint: &str, run_as: &str, as_uid: Option<u32>) -> Result<Guest> {
    let dir = tempfile::tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))?;
    let home = dir.path().join("home");
    std::fs::create_dir(&home)?;
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700))?;
    let token = dir.path().join("token");
    std::fs::write(&token, "the-enrollment-token")?;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600))?;
    let mut wrap: Vec<String> = Vec::new();
    if let Some(uid) = as_uid {
        for p in [&token, &home] {
            std::os::unix::fs::chown(p, Some(uid), Some(uid))?;
        }
        wrap = vec![
            "setpriv".into(),
            format!("--reuid={uid}"),
            format!("--regid={uid}"),
            "--clear-groups".into(),
        ];
    }
    let id = format!("c-priv-{}", hex::encode(rand::random::<[u8; 6]>()));
    let runtime_dir = std::env::temp_dir().join(format!("rakazo-guest-{id}"));
    let bin = env!("CARGO_BIN_EXE_rakazo-guest");
    let (program, args): (&str, Vec<String>) = match wrap.split_first() {
        Some((p, rest)) => (p, rest.iter().cloned().chain([bin.into()]).collect()),
        None => (bin, Vec::new()),
    };
    let child = Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("RAKAZO_CONTROL_ADDR", addr)
        .env("RAKAZO_CONTROL_CERT_SHA256", fingerprint)
        .env("RAKAZO_COMPUTER_ID", &id)
        .env("RAKAZO_ENROLL_TOKEN_FILE", &token)
        .env("RAKAZO_HOME", &home)
        .env("RAKAZO_RUNTIME_DIR", &runtime_dir)
        .env("RAKAZO_RUN_AS", run_as)
        .env("RAKAZO_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("start rakazo-guest")?;
    Ok(Guest {
        child,
        runtime_dir,
        home,
        _dir: dir,
    })
}

/// Accepts the guest's connection and completes the hello.
async fn accept(endpoint: &quinn::Endpoint) -> Result<quinn::Connection> {
    let incoming = tokio::time::timeout(WAIT, endpoint.accept())
        .await
        .context("the guest never dialed")?
        .ok_or_else(|| anyhow!("endpoint closed"))?;
    let conn = tokio::time::timeout(WAIT, incoming).await??;
    let (mut send, mut recv) = tokio::time::timeout(WAIT, conn.accept_bi()).await??;
    let mut hs = ControlHandshake::new();
    loop {
        let chunk = tokio::time::timeout(WAIT, recv.read_chunk(4096, true))
            .await??
            .ok_or_else(|| anyhow!("control stream ended before the hello"))?;
        match hs.handle_bytes(&chunk.bytes) {
            Some(HandshakeEvent::Authenticate { token, .. }) => {
                ensure!(token.expose() == "the-enrollment-token", "wrong token");
                break;
            }
            Some(HandshakeEvent::Failed(reason)) => bail!("hello failed: {reason}"),
            None => {}
        }
    }
    hs.accept();
    while let Some(frame) = hs.poll_transmit() {
        send.write_all(&frame).await?;
    }
    // The control stream must stay open for the session's life.
    std::mem::forget((send, recv));
    Ok(conn)
}

/// Runs `sh -c script` through the guest with `env`; returns (exit code, stdout, stderr).
async fn exec(
    conn: &quinn::Connection,
    script: &str,
    env: Vec<(String, String)>,
) -> Result<(i32, String, String)> {
    let req = Request::Exec(ExecRequest {
        argv: vec!["sh".into(), "-c".into(), script.into()],
        cwd: None,
        env,
        timeout_ms: Some(WAIT.as_millis() as u64),
        stdin: false,
        lease: None,
        start: Default::default(),
    });
    let (mut send, mut recv) = tokio::time::timeout(WAIT, conn.open_bi()).await??;
    send.write_all(&encode(&req)?).await?;
    send.finish()?;
    let bytes = tokio::time::timeout(WAIT, recv.read_to_end(1 << 20)).await??;
    let mut decoder = FrameDecoder::new();
    decoder.push(&bytes);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    while let Some(ev) = decoder.next_message::<ExecEvent>()? {
        match ev {
            ExecEvent::Started { .. } => {}
            ExecEvent::Stdout(b) => out.extend_from_slice(&b),
            ExecEvent::Stderr(b) => err.extend_from_slice(&b),
            ExecEvent::Exit { code, .. } => {
                return Ok((
                    code,
                    String::from_utf8_lossy(&out).into(),
                    String::from_utf8_lossy(&err).into(),
                ))
            }
            ExecEvent::Failed(e) => bail!("exec failed: {e:?}"),
        }
    }
    bail!("exec ended without an exit event")
}

/// `Name:\t<values>` of `/proc/<pid>/status`.
fn status_field(pid: u32, name: &str) -> Result<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .ok_or_else(|| anyhow!("no {name} in /proc/{pid}/status"))?;
    Ok(line
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect())
}

/// Reads `/proc/<pid>/environ` as `uid:uid` with no groups, like a command of that user would.
fn read_environ_as(uid: u32, pid: u32) -> Result<std::process::Output> {
    Ok(Command::new("setpriv")
        .args([
            format!("--reuid={uid}"),
            format!("--regid={uid}"),
            "--clear-groups".into(),
            "cat".into(),
            format!("/proc/{pid}/environ"),
        ])
        .output()?)
}

#[tokio::test]
async fn a_root_guest_drops_to_the_run_as_user_for_good() -> Result<()> {
    if !is_root() {
        return Ok(());
    }
    let (cert, key, fingerprint) = identity()?;
    let endpoint = server(cert, key)?;
    let addr = endpoint.local_addr()?.to_string();
    let id = free_id();
    let guest = start_guest(&addr, &fingerprint, &format!("{id}:{id}"), None)?;
    let pid = guest.pid();
    let conn = accept(&endpoint).await?;

    // From outside: every uid and gid is the user's, no supplementary group but its own.
    assert_eq!(status_field(pid, "Uid")?, vec![id; 4]);
    assert_eq!(status_field(pid, "Gid")?, vec![id; 4]);
    assert_eq!(status_field(pid, "Groups")?, vec![id]);
    // The home (created root's) was given to the user; its mode is untouched.
    let home = std::fs::metadata(&guest.home)?;
    assert_eq!(
        (home.uid(), home.gid(), home.mode() & 0o777),
        (id, id, 0o700)
    );
    // The runtime dir was created after the drop.
    assert_eq!(std::fs::metadata(&guest.runtime_dir)?.uid(), id);

    // Non-dumpable: the kernel makes its /proc files root's, and a same-uid reader is refused.
    assert_eq!(std::fs::metadata(format!("/proc/{pid}/environ"))?.uid(), 0);
    let as_user = read_environ_as(id, pid)?;
    assert!(
        !as_user.status.success() && as_user.stdout.is_empty(),
        "uid {id} read the guest's environ: {as_user:?}"
    );
    // Root still sees the initial environment block: unsetenv never rewrites it.
    let environ = std::fs::read(format!("/proc/{pid}/environ"))?;
    assert!(environ
        .split(|b| *b == 0)
        .any(|kv| kv.starts_with(b"RAKAZO_HOME=")));

    // From inside: a command runs as the user, with USER/LOGNAME/HOME set and no RAKAZO_*
    // variable but the exec marker, and cannot read the guest's memory or environment either.
    let (code, out, err) = exec(
        &conn,
        "id -u; id -g; id -G; echo \"$USER $LOGNAME $HOME\"; \
         env | grep ^RAKAZO_ | cut -d= -f1 | grep -v ^RAKAZO_EXEC_ID$ | tr '\\n' ' '; echo; \
         cat /proc/$GUEST_PID/environ >/dev/null 2>&1 && echo environ-readable || echo environ-refused; \
         head -c1 /proc/$GUEST_PID/mem >/dev/null 2>&1 && echo mem-readable || echo mem-refused; \
         touch made-by-command && stat -c %u made-by-command",
        vec![("GUEST_PID".into(), pid.to_string())],
    )
    .await?;
    assert_eq!(code, 0, "stdout {out}\nstderr {err}");
    let canonical_home = std::fs::canonicalize(&guest.home)?;
    let expected = format!(
        "{id}\n{id}\n{id}\nrakazo rakazo {}\n\nenviron-refused\nmem-refused\n{id}\n",
        canonical_home.display()
    );
    assert_eq!(out, expected, "stderr {err}");
    Ok(())
}

#[tokio::test]
async fn root_and_a_foreign_user_are_refused_with_a_clear_error() -> Result<()> {
    if !is_root() {
        return Ok(());
    }
    // Nothing listens there: the guest exits on its configuration before dialing.
    let addr = "127.0.0.1:9";
    let fingerprint = "ab".repeat(32);
    for root in ["root", "0:0"] {
        let guest = start_guest(addr, &fingerprint, root, None)?;
        let out = wait_exit(guest).await?;
        assert_eq!(out.0, Some(2), "{root}: {}", out.1);
        assert!(
            out.1.contains("RAKAZO_RUN_AS is invalid") && out.1.contains("uid 0"),
            "{root}: {}",
            out.1
        );
    }
    // A non-root guest cannot switch: started as uid A, asked to be B, it exits.
    let (a, b) = (free_id(), free_id());
    let guest = start_guest(addr, &fingerprint, &format!("{b}:{b}"), Some(a))?;
    let out = wait_exit(guest).await?;
    assert_eq!(out.0, Some(2), "{}", out.1);
    assert!(
        out.1.contains(&format!("RAKAZO_RUN_AS names uid {b}"))
            && out.1.contains(&format!("runs as uid {a}"))
            && out.1.contains("is not root"),
        "{}",
        out.1
    );
    // Started as the user it names, it keeps running (dialing), non-dumpable.
    let guest = start_guest(addr, &fingerprint, &format!("{a}:{a}"), Some(a))?;
    let pid = guest.pid();
    let deadline = tokio::time::Instant::now() + WAIT;
    while std::fs::metadata(&guest.runtime_dir).is_err() {
        ensure!(tokio::time::Instant::now() < deadline, "no runtime dir");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status_field(pid, "Uid")?, vec![a; 4]);
    assert_eq!(std::fs::metadata(format!("/proc/{pid}/environ"))?.uid(), 0);
    assert!(!read_environ_as(a, pid)?.status.success());
    Ok(())
}

/// Waits (bounded) for a guest that should exit; returns its exit code and stderr.
async fn wait_exit(mut guest: Guest) -> Result<(Option<i32>, String)> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(status) = guest.child.try_wait()? {
            let mut err = String::new();
            if let Some(mut e) = guest.child.stderr.take() {
                std::io::Read::read_to_string(&mut e, &mut err)?;
            }
            return Ok((status.code(), err));
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the guest did not exit");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
