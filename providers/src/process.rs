//! Child processes of this host: starting guests' bookkeeping, telling a live process from a
//! recycled pid, and killing a whole tree. Shared by the `local` and `fake` providers.

use crate::{ProviderError, SandboxSpec};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Removes a machine's directory; one that is already gone is fine.
pub(crate) fn remove_dir(dir: &Path) -> Result<(), ProviderError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ProviderError::io(format!("remove {}", dir.display()), e)),
    }
}

/// The runtime dir (X cookies, sockets, gateway sockets) of a host-process guest: outside the
/// home and the machine's dir, removed when the machine stops or is destroyed.
pub(crate) fn runtime_dir(computer: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rakazo-guest-{computer}"))
}

/// What a host-process guest is started with.
pub(crate) struct GuestLaunch<'a> {
    pub bin: &'a Path,
    /// The whole command line when the guest is started through a wrapper (a jail), `bin`
    /// among it; `None`: `bin` itself.
    pub argv: Option<Vec<std::ffi::OsString>>,
    pub spec: &'a SandboxSpec,
    /// The machine's directory: holds `token` (0600) and `guest.log`.
    pub dir: &'a Path,
    pub home: &'a Path,
    /// Extra environment (log filter, screen limit, the workspace user); never secrets.
    pub extra_env: &'a [(String, String)],
}

/// Starts a guest as a child of this host in its own process group (so it outlives a
/// control-plane restart and dials back), with a cleared environment and the enrollment token
/// in a 0600 file, never in argv or the environment. Returns its pid and start time.
pub(crate) fn spawn_guest(l: &GuestLaunch<'_>) -> Result<(i32, u64), ProviderError> {
    let token_path = l.dir.join("token");
    write_token(&token_path, &l.spec.guest.token.0)?;
    let log_path = l.dir.join("guest.log");
    let log = open_log(&log_path)?;
    let log_err = log
        .try_clone()
        .map_err(|e| ProviderError::io("duplicate guest log handle", e))?;
    let mut cmd = match l.argv.as_deref() {
        Some([program, args @ ..]) => {
            let mut cmd = std::process::Command::new(program);
            cmd.args(args);
            cmd
        }
        _ => std::process::Command::new(l.bin),
    };
    cmd.env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("LANG", "C.UTF-8")
        .env("RAKAZO_CONTROL_ADDR", l.spec.guest.control_addr.to_string())
        .env(
            "RAKAZO_CONTROL_TCP_ADDR",
            l.spec.guest.tcp_addr().to_string(),
        )
        .env("RAKAZO_CONTROL_CERT_SHA256", &l.spec.guest.cert_sha256)
        .envs(l.spec.guest.ws_env())
        .envs(l.spec.guest.replicas_env())
        .env("RAKAZO_COMPUTER_ID", &l.spec.computer_id)
        .env("RAKAZO_ENROLL_TOKEN_FILE", &token_path)
        .env("RAKAZO_HOME", l.home)
        .env("RAKAZO_RUNTIME_DIR", runtime_dir(&l.spec.computer_id))
        .envs(l.extra_env.iter().map(|(k, v)| (k, v)))
        .current_dir(l.home)
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .process_group(0);
    let child = cmd
        .spawn()
        .map_err(|e| ProviderError::io(format!("start guest {}", l.bin.display()), e))?;
    let pid =
        i32::try_from(child.id()).map_err(|_| ProviderError::BadSpec("pid out of range".into()))?;
    // The child is reaped by a thread so it never lingers as a zombie while we run.
    std::thread::spawn(move || {
        let mut child = child;
        let _ = child.wait();
    });
    let start = start_time(pid).ok_or_else(|| {
        ProviderError::io(
            "read guest start time",
            std::io::Error::other("guest exited at once"),
        )
    })?;
    Ok((pid, start))
}

/// The name (`comm`, at most 15 bytes) the guest's process has, started from `bin`.
pub(crate) fn guest_comm(bin: &Path) -> Option<String> {
    let name = bin.file_name()?.to_string_lossy();
    Some(name.chars().take(15).collect())
}

/// Kills `pid` (if it is still the process that started at `start`) and every descendant:
/// SIGTERM first so the guest can end its commands and browsers itself, SIGKILL after `grace`.
/// When `pid` is a wrapper (a jail), the SIGTERM goes to its descendants named `guest` instead,
/// and the wrapper ends with them.
pub(crate) async fn kill_tree(pid: i32, start: u64, grace: Duration, guest: Option<String>) {
    if start_time(pid) != Some(start) {
        return;
    }
    let mut tree = descendants(pid);
    let guests: Vec<i32> = match &guest {
        Some(name) => tree
            .iter()
            .copied()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.trim_end() == name)
            })
            .collect(),
        None => Vec::new(),
    };
    if guests.is_empty() {
        signal(pid, libc::SIGTERM);
    } else {
        for g in &guests {
            signal(*g, libc::SIGTERM);
        }
    }
    let deadline = tokio::time::Instant::now() + grace;
    while start_time(pid) == Some(start) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tree.extend(descendants(pid));
    if start_time(pid) == Some(start) {
        signal(pid, libc::SIGKILL);
    }
    for p in tree {
        signal(p, libc::SIGKILL);
    }
}

/// Opens the guest log for appending (0600), never through a symlink and never a fifo or
/// device: the machine's directory may belong to the computer's user, who could plant one.
/// Anything but a regular file of ours is removed and the log started afresh.
fn open_log(path: &Path) -> Result<std::fs::File, ProviderError> {
    use std::os::unix::fs::MetadataExt;
    let err = |e| ProviderError::io(format!("open {}", path.display()), e);
    let open = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
    };
    if let Ok(file) = open() {
        let meta = file.metadata().map_err(err)?;
        if meta.is_file() && meta.uid() == nix::unistd::geteuid().as_raw() && meta.nlink() == 1 {
            return Ok(file);
        }
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    std::fs::OpenOptions::new()
        .create_new(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(err)
}

pub(crate) fn write_token(path: &Path, token: &str) -> Result<(), ProviderError> {
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| ProviderError::io(format!("create {}", path.display()), e))?;
    f.write_all(token.as_bytes())
        .map_err(|e| ProviderError::io(format!("write {}", path.display()), e))
}

pub(crate) fn signal(pid: i32, sig: i32) {
    let Ok(sig) = nix::sys::signal::Signal::try_from(sig) else {
        return;
    };
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
}

/// The start time of a process in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
pub(crate) fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // After the comm field: state is field 3, so start time (22) is index 19 here.
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// All descendants of `root`, found through the parent links in `/proc`.
pub(crate) fn descendants(root: i32) -> Vec<i32> {
    let mut parents = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let ppid = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(1)?
                        .parse::<i32>()
                        .ok()
                });
            if let Some(ppid) = ppid {
                parents.push((pid, ppid));
            }
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(child, parent) in &parents {
            if parent == p && !out.contains(&child) {
                out.push(child);
                frontier.push(child);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_is_never_opened_through_a_planted_link() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"precious").unwrap();
        let log = dir.path().join("guest.log");
        std::os::unix::fs::symlink(&target, &log).unwrap();
        let mut f = open_log(&log).unwrap();
        f.write_all(b"line\n").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        assert!(!std::fs::symlink_metadata(&log).unwrap().is_symlink());
        // A hard link to someone else's file is replaced too.
        std::fs::remove_file(&log).unwrap();
        std::fs::hard_link(&target, &log).unwrap();
        open_log(&log).unwrap().write_all(b"x").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        // A fifo never blocks the opener.
        std::fs::remove_file(&log).unwrap();
        nix::unistd::mkfifo(&log, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        open_log(&log).unwrap().write_all(b"y").unwrap();
        assert_eq!(std::fs::read(&log).unwrap(), b"y");
    }

    #[test]
    fn start_time_identifies_this_process() {
        let me = std::process::id() as i32;
        assert!(start_time(me).is_some());
        assert_eq!(start_time(me), start_time(me));
        assert!(start_time(i32::MAX).is_none());
    }
}
