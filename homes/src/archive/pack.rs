//! The archive writer: walks a home with directory fds and `O_NOFOLLOW`, depth first in byte
//! order of names, and writes each directory before its contents.
//!
//! It never follows a symlink (not the root, not a component, not a leaf): symlinks, sockets,
//! FIFOs and devices are counted and skipped, and so are the browser-profile exclusions. A file
//! whose size changes while it is read is written at the size it had when opened (cut or padded
//! with zeros, like `tar`) and counted in [`PackStats::changed_files`], so a busy home still
//! yields a well-formed archive.

use super::{
    excluded_dir, excluded_file, show, ArchiveError, BROWSER_PROFILES_DIR, FLAG_EXEC, MAGIC,
    MAX_COMPONENT_LEN, MAX_PATH_LEN, TAG_DIR, TAG_END, TAG_FILE, TAG_SAME, VERSION,
};
use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{open, openat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, Mode, SFlag};
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;

/// What [`pack`] wrote and skipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PackStats {
    pub dirs: u64,
    pub files: u64,
    /// Sum of the file sizes written.
    pub bytes: u64,
    pub skipped_symlinks: u64,
    /// Sockets, FIFOs and devices.
    pub skipped_special: u64,
    /// Browser-profile caches and lock files left out (each excluded directory counts once).
    pub excluded: u64,
    /// Files whose size changed while they were read.
    pub changed_files: u64,
    /// Entries that disappeared between listing and opening.
    pub vanished: u64,
    /// Files written as unchanged ([`TAG_SAME`]: their stamp equals the base's).
    pub unchanged: u64,
}

/// What says a regular file has not changed: its size, inode, mode and modification and change
/// times (a write moves mtime and ctime; a chmod or a `touch -m` back moves ctime).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub size: u64,
    pub ino: u64,
    pub mode: u32,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

impl Stamp {
    fn of(st: &nix::sys::stat::FileStat) -> Self {
        Self {
            size: u64::try_from(st.st_size).unwrap_or(0),
            ino: st.st_ino,
            mode: st.st_mode,
            mtime_ns: st.st_mtime.saturating_mul(1_000_000_000) + st.st_mtime_nsec,
            ctime_ns: st.st_ctime.saturating_mul(1_000_000_000) + st.st_ctime_nsec,
        }
    }
}

/// The stamp of every regular file of an export, by archive path.
pub type Stamps = HashMap<Vec<u8>, Stamp>;

const COPY_BUF: usize = 64 << 10;

/// Writes the archive of the directory `root` to `out`. `root` itself must be a directory, not a
/// symlink to one.
pub fn pack<W: Write>(root: &Path, out: W) -> Result<PackStats, ArchiveError> {
    pack_delta(root, out, None).map(|(stats, _)| stats)
}

/// [`pack`], as a delta of the export whose stamps are `base`: a file whose stamp equals its
/// stamp there is written as [`TAG_SAME`] (no content), so it is neither read nor sent. Answers
/// this export's stamps too, the base of the next.
pub fn pack_delta<W: Write>(
    root: &Path,
    out: W,
    base: Option<&Stamps>,
) -> Result<(PackStats, Stamps), ArchiveError> {
    let fd = open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| ArchiveError::io("open home directory", root, e))?;
    let dir = Dir::from_fd(fd).map_err(|e| ArchiveError::io("list", root, e))?;
    let mut packer = Packer {
        root,
        out: BufWriter::with_capacity(COPY_BUF, out),
        stats: PackStats::default(),
        buf: vec![0; COPY_BUF],
        base,
        stamps: Stamps::new(),
    };
    packer.put(&MAGIC)?;
    packer.put(&VERSION.to_be_bytes())?;
    let mut path = Vec::new();
    packer.walk(dir, &mut path, false)?;
    let entries = packer.stats.dirs + packer.stats.files;
    let bytes = packer.stats.bytes;
    packer.put(&[TAG_END])?;
    packer.put(&entries.to_be_bytes())?;
    packer.put(&bytes.to_be_bytes())?;
    packer.out.flush().map_err(ArchiveError::Write)?;
    Ok((packer.stats, packer.stamps))
}

pub(super) struct Packer<'a, W: Write> {
    root: &'a Path,
    out: BufWriter<W>,
    stats: PackStats,
    buf: Vec<u8>,
    base: Option<&'a Stamps>,
    stamps: Stamps,
}

impl<W: Write> Packer<'_, W> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), ArchiveError> {
        self.out.write_all(bytes).map_err(ArchiveError::Write)
    }

    fn shown(&self, path: &[u8]) -> String {
        self.root.join(show(path)).display().to_string()
    }

    fn put_path(&mut self, path: &[u8]) -> Result<(), ArchiveError> {
        if path.len() > MAX_PATH_LEN {
            return Err(ArchiveError::PathTooLong {
                path: self.shown(path),
            });
        }
        // Lossless: checked against MAX_PATH_LEN (4096) just above.
        let len = path.len() as u16;
        self.put(&len.to_be_bytes())?;
        self.put(path)
    }

    /// Archives the contents of `dir`, whose archive path is `path` (empty for the root).
    fn walk(
        &mut self,
        mut dir: Dir,
        path: &mut Vec<u8>,
        in_profiles: bool,
    ) -> Result<(), ArchiveError> {
        let mut names: Vec<Vec<u8>> = Vec::new();
        for entry in dir.iter() {
            let entry = entry.map_err(|e| ArchiveError::io("list", self.shown(path), e))?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(name.to_vec());
            }
        }
        names.sort_unstable();
        for name in names {
            if name.len() > MAX_COMPONENT_LEN {
                return Err(ArchiveError::PathTooLong {
                    path: self.shown(path),
                });
            }
            let parent_len = path.len();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(&name);
            let result = self.entry(&dir, &name, path, in_profiles);
            path.truncate(parent_len);
            result?;
        }
        Ok(())
    }

    fn entry(
        &mut self,
        dir: &Dir,
        name: &[u8],
        path: &mut Vec<u8>,
        in_profiles: bool,
    ) -> Result<(), ArchiveError> {
        let st = match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => {
                self.stats.vanished += 1;
                return Ok(());
            }
            Err(e) => return Err(ArchiveError::io("stat", self.shown(path), e)),
        };
        let kind = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
        if kind == SFlag::S_IFDIR {
            if in_profiles && excluded_dir(name) {
                self.stats.excluded += 1;
                return Ok(());
            }
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let child = match Dir::openat(dir, name, flags, Mode::empty()) {
                Ok(child) => child,
                Err(Errno::ENOENT) => {
                    self.stats.vanished += 1;
                    return Ok(());
                }
                // Replaced by a symlink or something else since the stat.
                Err(Errno::ELOOP | Errno::ENOTDIR) => {
                    self.stats.skipped_special += 1;
                    return Ok(());
                }
                Err(e) => return Err(ArchiveError::io("open directory", self.shown(path), e)),
            };
            self.put(&[TAG_DIR])?;
            self.put_path(path)?;
            self.stats.dirs += 1;
            let profiles = in_profiles || path.as_slice() == BROWSER_PROFILES_DIR.as_bytes();
            self.walk(child, path, profiles)
        } else if kind == SFlag::S_IFREG {
            if in_profiles && excluded_file(name) {
                self.stats.excluded += 1;
                return Ok(());
            }
            // O_NONBLOCK: if the entry became a FIFO since the stat, opening must not hang.
            let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
            let fd = match openat(dir, name, flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::ENOENT) => {
                    self.stats.vanished += 1;
                    return Ok(());
                }
                Err(Errno::ELOOP) => {
                    self.stats.skipped_symlinks += 1;
                    return Ok(());
                }
                Err(e) => return Err(ArchiveError::io("open", self.shown(path), e)),
            };
            let st = fstat(&fd).map_err(|e| ArchiveError::io("stat", self.shown(path), e))?;
            if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFREG {
                self.stats.skipped_special += 1;
                return Ok(());
            }
            let size = u64::try_from(st.st_size).unwrap_or(0);
            let flags = if st.st_mode & 0o111 != 0 {
                FLAG_EXEC
            } else {
                0
            };
            let stamp = Stamp::of(&st);
            let same = self
                .base
                .is_some_and(|b| b.get(path.as_slice()) == Some(&stamp));
            self.stamps.insert(path.clone(), stamp);
            if same {
                self.put(&[TAG_SAME, flags])?;
                self.put_path(path)?;
                self.put(&size.to_be_bytes())?;
                self.stats.unchanged += 1;
                self.stats.files += 1;
                self.stats.bytes += size;
                return Ok(());
            }
            self.put(&[TAG_FILE, flags])?;
            self.put_path(path)?;
            self.put(&size.to_be_bytes())?;
            let copied = self.copy(File::from(fd), size, path)?;
            if copied != size {
                self.stats.changed_files += 1;
            }
            self.stats.files += 1;
            self.stats.bytes += size;
            Ok(())
        } else if kind == SFlag::S_IFLNK {
            self.stats.skipped_symlinks += 1;
            Ok(())
        } else {
            self.stats.skipped_special += 1;
            Ok(())
        }
    }

    /// Copies up to `size` bytes of `file`, pads with zeros if it shrank, and returns how many
    /// bytes the file really had (`size + 1` means it grew).
    fn copy(&mut self, mut file: File, size: u64, path: &[u8]) -> Result<u64, ArchiveError> {
        let mut left = size;
        while left > 0 {
            let want = usize::try_from(left)
                .unwrap_or(usize::MAX)
                .min(self.buf.len());
            let n = match file.read(&mut self.buf[..want]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ArchiveError::io("read", self.shown(path), e)),
            };
            if n == 0 {
                break;
            }
            self.out
                .write_all(&self.buf[..n])
                .map_err(ArchiveError::Write)?;
            left -= n as u64;
        }
        if left > 0 {
            let copied = size - left;
            self.buf.fill(0);
            while left > 0 {
                let n = usize::try_from(left)
                    .unwrap_or(usize::MAX)
                    .min(self.buf.len());
                self.out
                    .write_all(&self.buf[..n])
                    .map_err(ArchiveError::Write)?;
                left -= n as u64;
            }
            return Ok(copied);
        }
        // One more byte means the file grew after the stat; what was written is still a valid
        // (if torn) snapshot of it.
        match file.read(&mut self.buf[..1]) {
            Ok(0) => Ok(size),
            Ok(_) => Ok(size + 1),
            Err(e) => Err(ArchiveError::io("read", self.shown(path), e)),
        }
    }
}

#[cfg(test)]
pub(super) mod tests_support {
    use super::*;

    pub(in crate::archive) fn packer<'a, W: Write>(root: &'a Path, out: W) -> Packer<'a, W> {
        Packer {
            root,
            out: BufWriter::with_capacity(COPY_BUF, out),
            stats: PackStats::default(),
            buf: vec![0; COPY_BUF],
            base: None,
            stamps: Stamps::new(),
        }
    }

    impl<W: Write> Packer<'_, W> {
        pub(in crate::archive) fn copy_for_test(&mut self, file: File, size: u64) -> u64 {
            self.copy(file, size, b"f").unwrap()
        }
    }
}
