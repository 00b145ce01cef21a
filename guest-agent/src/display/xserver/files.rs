//! The files around an X server: the private runtime directory's check, `/tmp/.X<n>-lock`
//! (taken atomically in the X server's format before spawning, then pointed at the server's
//! pid), the cookie file, and their removal when the server stops.

use super::*;

pub(super) fn as_pid(pid: u32) -> Pid {
    Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX))
}

/// Refuses a runtime directory that is a symlink, not ours, or open to group or others.
pub(super) fn check_private_dir(display: DisplayNum, dir: &Path) -> Result<(), DisplayError> {
    let meta = fs::symlink_metadata(dir).map_err(|source| DisplayError::RuntimeDir {
        display,
        path: dir.to_path_buf(),
        source,
    })?;
    let uid = nix::unistd::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(DisplayError::RuntimeDirNotPrivate {
            display,
            path: dir.to_path_buf(),
            mode: meta.mode() & 0o7777,
            uid: meta.uid(),
        });
    }
    Ok(())
}

/// The pid a lock file names, `None` when there is no lock file; a lock file that does not parse
/// counts as naming no live process (`Some(0)`).
pub(super) fn read_lock_pid(path: &Path) -> io::Result<Option<i32>> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text.trim().parse().unwrap_or(0))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether `pid` names a process that exists (EPERM means it exists under another user).
pub(super) fn pid_alive(pid: i32) -> bool {
    pid > 0 && matches!(kill(Pid::from_raw(pid), None), Ok(()) | Err(Errno::EPERM))
}

/// Takes the display's X lock file the way X servers do (write a temporary file, hard-link it to
/// `/tmp/.X<n>-lock`, which fails if the lock exists), naming this process until
/// [`update_lock`] names the server. We do it ourselves because `-displayfd` makes the server skip locking
/// (it sets `nolock`), and without a lock two servers on one number silently steal each other's
/// socket. A lock naming a live pid refuses the display; one naming a dead pid is removed with
/// the socket. A socket without a lock that still accepts connections refuses the display too.
pub(super) fn acquire_lock(num: DisplayNum) -> Result<(), DisplayError> {
    let lock = num.lock_path();
    let lock_err = |path: PathBuf| {
        move |source| DisplayError::LockFiles {
            display: num,
            path,
            source,
        }
    };
    let mut attempts = 0;
    loop {
        attempts += 1;
        match write_lock(num, std::process::id(), false) {
            Ok(()) => break,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempts < 3 => {
                match read_lock_pid(&lock).map_err(lock_err(lock.clone()))? {
                    Some(pid) if pid_alive(pid) => {
                        return Err(DisplayError::InUse { display: num, pid })
                    }
                    pid => {
                        tracing::info!(display = %num, ?pid, "removing the stale x lock of a dead server");
                        remove_if_present(&lock).map_err(lock_err(lock.clone()))?;
                        let socket = num.socket_path();
                        remove_if_present(&socket).map_err(lock_err(socket))?;
                    }
                }
            }
            Err(e) => return Err(lock_err(lock)(e)),
        }
    }
    let socket = num.socket_path();
    if socket.exists() {
        if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
            remove_if_present(&lock).map_err(lock_err(lock))?;
            return Err(DisplayError::SocketInUse { display: num });
        }
        remove_if_present(&socket).map_err(lock_err(socket))?;
    }
    Ok(())
}

/// Writes `pid` in the X lock format (`%10d\n`, mode 0444) to a temporary file, then either
/// hard-links it to the lock path (`replace == false`: fails with `AlreadyExists` if a lock
/// exists) or renames it over the lock (`replace == true`). Either step is atomic.
fn write_lock(num: DisplayNum, pid: u32, replace: bool) -> io::Result<()> {
    let lock = num.lock_path();
    let temp = PathBuf::from(format!(
        "/tmp/.tX{}-lock.{}.{:08x}",
        num.get(),
        std::process::id(),
        rand::random::<u32>()
    ));
    let write = || -> io::Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o444)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temp)?;
        file.write_all(format!("{pid:>10}\n").as_bytes())?;
        if replace {
            fs::rename(&temp, &lock)
        } else {
            fs::hard_link(&temp, &lock)
        }
    };
    let result = write();
    let _ = remove_if_present(&temp);
    result
}

/// Points the lock at the running server.
pub(super) fn update_lock(num: DisplayNum, pid: u32) -> Result<(), DisplayError> {
    write_lock(num, pid, true).map_err(|source| DisplayError::LockFiles {
        display: num,
        path: num.lock_path(),
        source,
    })
}

/// Removes the lock file and socket of a server that has exited, unless the lock file names a
/// live process other than `ours` (then both belong to that process).
pub(super) fn remove_server_files(
    display: DisplayNum,
    ours: &[u32],
) -> Result<(), (PathBuf, io::Error)> {
    let lock = display.lock_path();
    let holder = read_lock_pid(&lock).map_err(|e| (lock.clone(), e))?;
    if let Some(pid) = holder {
        let is_ours = ours.iter().any(|&o| i32::try_from(o).ok() == Some(pid));
        if !is_ours && pid_alive(pid) {
            return Ok(());
        }
        remove_if_present(&lock).map_err(|e| (lock.clone(), e))?;
    }
    let socket = display.socket_path();
    remove_if_present(&socket).map_err(|e| (socket, e))
}

pub(super) fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Creates `path` afresh with mode 0600 (replacing a file left by an earlier server), never
/// following a symlink.
pub(super) fn create_private(path: &Path) -> io::Result<File> {
    remove_if_present(path)?;
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

pub(super) fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = create_private(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// One Xauthority record: FamilyWild (any address, so it matches however the client names the
/// local host), this display number, MIT-MAGIC-COOKIE-1 and the cookie. The server loads every record
/// of its `-auth` file regardless of address; libXau and libxcb pick it for `DISPLAY=:<n>`.
pub(super) fn xauth_entry(display: DisplayNum, cookie: &Cookie) -> Vec<u8> {
    const FAMILY_WILD: u16 = 0xffff;
    let number = display.get().to_string();
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&FAMILY_WILD.to_be_bytes());
    for field in [
        &b""[..],
        number.as_bytes(),
        crate::display::AUTH_NAME,
        cookie.as_bytes(),
    ] {
        let len = u16::try_from(field.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(field);
    }
    out
}
