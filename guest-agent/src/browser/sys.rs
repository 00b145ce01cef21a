//! The browser module's only unsafe code, behind a safe, minimal interface: handing Chrome its
//! DevTools pipes as fds 3 and 4 ([`DevToolsPipes`]).
//!
//! It leaves the process lifecycle and the CDP client to [`super`] and [`super::cdp`].
#![allow(
    unsafe_code,
    reason = "pre_exec has no safe std wrapper; each block says why it is sound"
)]

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::unistd::pipe2;

/// The fd Chrome reads DevTools commands from (`--remote-debugging-pipe`).
pub(crate) const CHROME_READ_FD: RawFd = 3;
/// The fd Chrome writes DevTools answers and events to.
pub(crate) const CHROME_WRITE_FD: RawFd = 4;

/// Both DevTools pipes. Every fd is close-on-exec, so no other child of the guest ever inherits
/// one; only Chrome gets its two ends, as fds 3 and 4, through [`DevToolsPipes::hand_to`].
#[derive(Debug)]
pub(crate) struct DevToolsPipes {
    /// Chrome's ends, numbered 10 or higher so that moving them onto 3 and 4 can never
    /// overwrite one with the other.
    chrome_reads: OwnedFd,
    chrome_writes: OwnedFd,
    /// Ours.
    pub(crate) to_chrome: OwnedFd,
    pub(crate) from_chrome: OwnedFd,
}

impl DevToolsPipes {
    pub(crate) fn new() -> io::Result<Self> {
        let (chrome_reads, to_chrome) = pipe2(OFlag::O_CLOEXEC)?;
        let (from_chrome, chrome_writes) = pipe2(OFlag::O_CLOEXEC)?;
        Ok(Self {
            chrome_reads: high_fd(&chrome_reads)?,
            chrome_writes: high_fd(&chrome_writes)?,
            to_chrome,
            from_chrome,
        })
    }

    /// Makes the child spawned by `command` find Chrome's read end on fd 3 and its write end on
    /// fd 4 (not close-on-exec there). Returns our ends; Chrome's ends are closed in this
    /// process when `command` is dropped after the spawn.
    pub(crate) fn hand_to(self, command: &mut tokio::process::Command) -> (OwnedFd, OwnedFd) {
        let (reads, writes) = (self.chrome_reads, self.chrome_writes);
        let (r, w) = (reads.as_raw_fd(), writes.as_raw_fd());
        let move_fds = move || {
            // SAFETY (of the calls): dup2 on fd numbers is async-signal-safe and touches no
            // memory of ours. `r` and `w` are >= 10, so neither dup2 overwrites the other's
            // source, and dup2 leaves the new fd without FD_CLOEXEC.
            if unsafe { libc::dup2(r, CHROME_READ_FD) } == -1
                || unsafe { libc::dup2(w, CHROME_WRITE_FD) } == -1
            {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        };
        // SAFETY: the closure runs in the forked child before exec; it only calls dup2 and builds
        // an `io::Error` from errno (no allocation, no locks), which is allowed after fork. The
        // fds it names stay open in the parent until the command (which owns them) is dropped.
        unsafe {
            command.pre_exec(move || {
                let _keep = (&reads, &writes);
                move_fds()
            });
        }
        (self.to_chrome, self.from_chrome)
    }
}

/// A close-on-exec duplicate of `fd` numbered 10 or higher.
fn high_fd(fd: &OwnedFd) -> io::Result<OwnedFd> {
    let raw = fcntl(fd, FcntlArg::F_DUPFD_CLOEXEC(10))?;
    // SAFETY: fcntl just returned this fd; nothing else owns it.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chrome_ends_are_high_and_every_end_is_close_on_exec() {
        let pipes = DevToolsPipes::new().unwrap();
        for fd in [&pipes.chrome_reads, &pipes.chrome_writes] {
            assert!(fd.as_raw_fd() >= 10);
        }
        for fd in [
            &pipes.chrome_reads,
            &pipes.chrome_writes,
            &pipes.to_chrome,
            &pipes.from_chrome,
        ] {
            let flags = fcntl(fd, FcntlArg::F_GETFD).unwrap();
            assert_ne!(flags & libc::FD_CLOEXEC, 0);
        }
    }
}
