//! The display module's only unsafe code, each piece behind a safe, minimal interface: the
//! shared-memory mapping MIT-SHM captures land in ([`ShmMapping`]), `poll(2)` on an X
//! connection ([`wait_readable`]) and the one descriptor the X server inherits across exec
//! ([`inherit_fd_across_exec`]).
//!
//! It leaves the X protocol (attaching the segment, GetImage) to `capture` and the process
//! lifecycle to `xserver`.
#![allow(
    unsafe_code,
    reason = "mmap, poll and pre_exec have no safe std wrappers; each block says why it is sound"
)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::time::Duration;

use nix::sys::memfd::{memfd_create, MFdFlags};

/// A read-only, shared mapping of an anonymous memory file (memfd) of a fixed size. The X server
/// writes into the same file through a duplicate of [`ShmMapping::fd`] passed with MIT-SHM
/// AttachFd; no SysV segment exists, so nothing outlives this process.
#[derive(Debug)]
pub(crate) struct ShmMapping {
    ptr: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is exclusively owned by this value (no aliasing pointer escapes except
// through `&self` borrows), and neither the pointer nor the fd has thread affinity, so moving the
// owner to another thread is sound. It is deliberately not `Sync`.
unsafe impl Send for ShmMapping {}

impl ShmMapping {
    /// Creates a memfd of `len` bytes and maps it.
    pub(crate) fn new(len: usize) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "empty shm mapping",
            ));
        }
        let fd = memfd_create(c"rakazo-capture", MFdFlags::MFD_CLOEXEC)?;
        let size = libc::off_t::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "shm mapping too large"))?;
        nix::unistd::ftruncate(&fd, size)?;
        // SAFETY: a fresh shared read-only mapping of a file we own, at an address the kernel
        // picks; `len` equals the file size set just above, so every mapped byte is backed.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned a null pointer"))?;
        Ok(Self { ptr, len, fd })
    }

    /// The memory file, to duplicate and hand to the X server.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The mapped bytes. Callers read them only after the X server has replied to the request
    /// that filled them, and issue no new request that writes them while the borrow lives.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` points to `len` readable bytes mapped in `new` and unmapped only in
        // `drop`, which cannot run while this borrow of `self` lives. The only writer is the X
        // server, and it writes only while it processes a ShmGetImage the owner sent and waited
        // for; the owner needs `&mut self` to send the next one (see `Capturer::capture`). A
        // hostile client holding the display cookie could name our segment in its own
        // ShmGetImage; the bytes are plain `u8`, so the worst it can cause is a garbled frame.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for ShmMapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping created in `new`, unmapped only here, and
        // no borrow from `bytes` can outlive `self`.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// Waits until `fd` is readable or `timeout` passes. `Ok(false)` on timeout or when a signal
/// interrupted the wait (callers loop on their own deadline).
pub(crate) fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // Round up so a sub-millisecond remainder still waits instead of spinning.
    let millis = timeout.as_micros().div_ceil(1000);
    let millis = libc::c_int::try_from(millis).unwrap_or(libc::c_int::MAX);
    // SAFETY: `pfd` is a valid pollfd for the duration of the call and the count is 1.
    let rc = unsafe { libc::poll(&mut pfd, 1, millis) };
    match rc {
        -1 => {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(err)
            }
        }
        0 => Ok(false),
        _ => Ok(true),
    }
}

/// Makes the child spawned by `command` inherit `fd` (which is close-on-exec in this process, so
/// no other child ever gets it) by clearing `FD_CLOEXEC` between fork and exec.
pub(crate) fn inherit_fd_across_exec(command: &mut tokio::process::Command, fd: RawFd) {
    let clear_cloexec = move || {
        // SAFETY (of the call): fcntl on an fd number is async-signal-safe and touches no
        // memory of ours.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: the closure runs in the forked child before exec; it only calls fcntl and builds
    // an `io::Error` from errno (no allocation, no locks), which is allowed after fork.
    unsafe {
        command.pre_exec(clear_cloexec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn mapping_sees_writes_through_its_fd() {
        let map = ShmMapping::new(8192).unwrap();
        assert_eq!(map.bytes().len(), 8192);
        let mut file = std::fs::File::from(map.fd().try_clone_to_owned().unwrap());
        file.write_all(b"hello").unwrap();
        assert_eq!(&map.bytes()[..5], b"hello");
        assert!(map.bytes()[5..].iter().all(|&b| b == 0));
    }

    #[test]
    fn empty_mapping_is_refused() {
        assert!(ShmMapping::new(0).is_err());
    }

    #[test]
    fn wait_readable_times_out_then_sees_data() {
        let (rx, tx) = nix::unistd::pipe().unwrap();
        assert!(!wait_readable(rx.as_fd(), Duration::from_millis(1)).unwrap());
        nix::unistd::write(&tx, b"x").unwrap();
        assert!(wait_readable(rx.as_fd(), Duration::from_secs(5)).unwrap());
    }
}
