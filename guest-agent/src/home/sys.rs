//! The home module's only unsafe code, behind a safe, minimal interface: a rename that never
//! replaces its target ([`rename_noreplace`]).
#![allow(
    unsafe_code,
    reason = "renameat2 has no wrapper on musl in nix or std; the block says why it is sound"
)]

use nix::errno::Errno;
use std::os::fd::OwnedFd;

/// `renameat2(dir, from, dir, to, RENAME_NOREPLACE)` by its system call: nix offers the wrapper
/// on glibc only, and the guest is also built static on musl.
pub(super) fn rename_noreplace(dir: &OwnedFd, from: &str, to: &str) -> Result<(), Errno> {
    use std::os::fd::AsRawFd;
    const RENAME_NOREPLACE: libc::c_uint = 1;
    let from = std::ffi::CString::new(from).map_err(|_| Errno::EINVAL)?;
    let to = std::ffi::CString::new(to).map_err(|_| Errno::EINVAL)?;
    let fd = dir.as_raw_fd();
    // SAFETY: both names are NUL-terminated strings that outlive the call, and `fd` is an open
    // directory borrowed from `dir` for the call's duration; the kernel reads nothing else.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            fd,
            from.as_ptr(),
            fd,
            to.as_ptr(),
            RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}
