//! The archive reader: restores an untrusted archive into a fresh directory, and [`restore`]
//! swaps that directory in place of a target only once the whole archive has been verified.
//!
//! Every entry is created relative to a directory fd with `O_NOFOLLOW`/`O_EXCL`, walking from the
//! staging root one component at a time, so even a staging tree that someone else tampers with
//! cannot redirect a write outside it. An entry must come after its parent directory, may appear
//! only once, and may only be a directory or a regular file. Limits are checked before the entry
//! that would exceed them is created. On any error the staging directory is removed and the target
//! is left as it was.

use super::{
    show, validate_path, ArchiveError, Limits, FLAG_EXEC, MAGIC, TAG_DIR, TAG_END, TAG_FILE,
    VERSION,
};
use nix::errno::Errno;
use nix::fcntl::{open, openat, OFlag};
use nix::sys::stat::{fchmod, mkdirat, Mode};
use nix::unistd::syncfs;
use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// How a reader restores.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnpackOptions {
    pub limits: Limits,
    /// Flush the restored tree to disk (`syncfs`) before it is swapped in. Stores set this so a
    /// crash right after a commit cannot leave a revision marker pointing at unwritten files.
    pub sync: bool,
}

/// What a reader restored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnpackStats {
    pub dirs: u64,
    pub files: u64,
    pub bytes: u64,
}

const BUF: usize = 64 << 10;

/// Restores the archive read from `input` into the new directory `dir`, which must not exist
/// (its parent must). On error `dir` is removed again.
pub fn unpack_new<R: Read>(
    input: R,
    dir: &Path,
    opts: &UnpackOptions,
) -> Result<UnpackStats, ArchiveError> {
    check_no_symlinks(dir)?;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(|e| ArchiveError::io("create directory", dir, e))?;
    let result = open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| ArchiveError::io("open", dir, e))
    .and_then(|root| {
        let stats = Unpacker::new(root.as_fd(), opts, dir).run(input)?;
        if opts.sync {
            syncfs(&root).map_err(|e| ArchiveError::io("sync", dir, e))?;
        }
        Ok(stats)
    });
    if result.is_err() {
        if let Err(e) = std::fs::remove_dir_all(dir) {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a failed restore");
        }
    }
    result
}

/// Restores the archive read from `input` as `target`: into a staging directory beside it first,
/// then, once the whole archive has been verified, swapped in (with glibc, one atomic
/// `renameat2` exchange if `target` exists; without, two renames) and the old contents removed.
/// A bad archive leaves `target` untouched. No existing component of `target` may be a symlink.
pub fn restore<R: Read>(
    input: R,
    target: &Path,
    opts: &UnpackOptions,
) -> Result<UnpackStats, ArchiveError> {
    let bad = |reason| ArchiveError::Target {
        path: target.display().to_string(),
        reason,
    };
    let name = target
        .file_name()
        .ok_or_else(|| bad("it has no final name"))?;
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    check_no_symlinks(target)?;
    let exists = match std::fs::symlink_metadata(target) {
        Ok(m) if m.is_dir() => true,
        Ok(_) => return Err(bad("it exists and is not a directory")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(ArchiveError::io("inspect", target, e)),
    };
    if exists && !can_swap_beside(target, &parent) {
        return restore_in_place(input, target, opts);
    }
    let mut staging_name = std::ffi::OsString::from(".");
    staging_name.push(name);
    staging_name.push(format!(
        ".rakazo-restore-{}",
        hex::encode(rand::random::<[u8; 8]>())
    ));
    let staging = parent.join(staging_name);
    let stats = unpack_new(input, &staging, opts)?;
    let replaced = match swap_in(&staging, target, exists) {
        Ok(replaced) => replaced,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(ArchiveError::io("swap in", target, e));
        }
    };
    if let Some(old) = replaced {
        if let Err(e) = std::fs::remove_dir_all(&old) {
            tracing::warn!(dir = %old.display(), error = %e, "cannot remove a replaced home");
        }
    }
    Ok(stats)
}

/// Whether `target` can be replaced by renaming a sibling over it: its parent is writable by
/// this process and `target` is not a mount point. A container's home (a volume mounted at
/// `/home/rakazo`, parent root-owned) is neither: it is restored in place.
fn can_swap_beside(target: &Path, parent: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let writable = nix::unistd::access(parent, nix::unistd::AccessFlags::W_OK).is_ok();
    let same_fs = match (std::fs::metadata(target), std::fs::metadata(parent)) {
        (Ok(t), Ok(p)) => t.dev() == p.dev(),
        _ => false,
    };
    writable && same_fs
}

/// Top-level names [`restore_in_place`] uses inside the home.
const IN_PLACE_STAGING: &str = ".rakazo-restore-";
const IN_PLACE_REPLACED: &str = ".rakazo-replaced-";

/// Restores into an existing directory that cannot itself be swapped (a mount point, or one
/// whose parent is not ours): the archive is unpacked and verified into a staging directory
/// inside it, then the current entries are moved aside into another directory inside it and the
/// staged ones moved in, each a rename within one filesystem; the old entries are removed last.
/// A bad archive leaves `target` as it was. The swap is not one atomic step: if a rename fails
/// half-way, what was moved is moved back. Leftovers of an interrupted restore (staging or
/// replaced directories) are removed by the next one.
pub fn restore_in_place<R: Read>(
    input: R,
    target: &Path,
    opts: &UnpackOptions,
) -> Result<UnpackStats, ArchiveError> {
    check_no_symlinks(target)?;
    let io = |what: &'static str, p: &Path, e: io::Error| ArchiveError::io(what, p, e);
    // Leftovers of an interrupted restore.
    for e in std::fs::read_dir(target).map_err(|e| io("list", target, e))? {
        let e = e.map_err(|e| io("list", target, e))?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(IN_PLACE_STAGING) || name.starts_with(IN_PLACE_REPLACED) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
    let tag = hex::encode(rand::random::<[u8; 8]>());
    let staging = target.join(format!("{IN_PLACE_STAGING}{tag}"));
    let replaced = target.join(format!("{IN_PLACE_REPLACED}{tag}"));
    let stats = unpack_new(input, &staging, opts)?;
    let fail = |e: ArchiveError| {
        let _ = std::fs::remove_dir_all(&staging);
        e
    };
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&replaced)
        .map_err(|e| fail(io("create", &replaced, e)))?;
    let entries = |dir: &Path, skip: &[&Path]| -> Result<Vec<std::ffi::OsString>, ArchiveError> {
        let mut names = Vec::new();
        for e in std::fs::read_dir(dir).map_err(|e| io("list", dir, e))? {
            let e = e.map_err(|e| io("list", dir, e))?;
            if !skip
                .iter()
                .any(|s| s.file_name() == Some(e.file_name().as_os_str()))
            {
                names.push(e.file_name());
            }
        }
        Ok(names)
    };
    // Move `names` from `from` to `to`; on failure move back what moved and report.
    let move_all =
        |names: &[std::ffi::OsString], from: &Path, to: &Path| -> Result<(), io::Error> {
            for (i, n) in names.iter().enumerate() {
                if let Err(e) = std::fs::rename(from.join(n), to.join(n)) {
                    for back in &names[..i] {
                        let _ = std::fs::rename(to.join(back), from.join(back));
                    }
                    return Err(e);
                }
            }
            Ok(())
        };
    let old = entries(target, &[&staging, &replaced]).map_err(fail)?;
    if let Err(e) = move_all(&old, target, &replaced) {
        let _ = std::fs::remove_dir(&replaced);
        return Err(fail(io("move aside", target, e)));
    }
    let new = entries(&staging, &[]).map_err(fail)?;
    if let Err(e) = move_all(&new, &staging, target) {
        let _ = move_all(&old, &replaced, target);
        let _ = std::fs::remove_dir(&replaced);
        return Err(fail(io("swap in", target, e)));
    }
    let _ = std::fs::remove_dir(&staging);
    if let Err(e) = std::fs::remove_dir_all(&replaced) {
        tracing::warn!(dir = %replaced.display(), error = %e, "cannot remove a replaced home");
    }
    Ok(stats)
}

/// Moves the verified `staging` tree to `target`; returns where the previous tree went.
/// With glibc: one atomic `renameat2` (`RENAME_EXCHANGE`, or `RENAME_NOREPLACE` for a new
/// target), after which `staging` names the previous tree.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn swap_in(staging: &Path, target: &Path, exists: bool) -> nix::Result<Option<PathBuf>> {
    use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
    let flags = if exists {
        RenameFlags::RENAME_EXCHANGE
    } else {
        RenameFlags::RENAME_NOREPLACE
    };
    renameat2(AT_FDCWD, staging, AT_FDCWD, target, flags)?;
    Ok(exists.then(|| staging.to_path_buf()))
}

/// Without glibc (the static musl guest), nix offers no `renameat2`: the previous tree is moved
/// aside first (to `<staging>.old`), then the new one in; if the second rename fails the
/// previous tree is moved back. Between the two renames the target is briefly absent.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn swap_in(staging: &Path, target: &Path, exists: bool) -> nix::Result<Option<PathBuf>> {
    let io = |e: io::Error| {
        let eio = nix::errno::Errno::EIO as i32;
        nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(eio))
    };
    if !exists {
        std::fs::rename(staging, target).map_err(io)?;
        return Ok(None);
    }
    let mut old = staging.as_os_str().to_owned();
    old.push(".old");
    let old = PathBuf::from(old);
    std::fs::rename(target, &old).map_err(io)?;
    if let Err(e) = std::fs::rename(staging, target) {
        let _ = std::fs::rename(&old, target);
        return Err(io(e));
    }
    Ok(Some(old))
}

/// Refuses a path any existing component of which is a symlink.
fn check_no_symlinks(path: &Path) -> Result<(), ArchiveError> {
    let mut prefix = PathBuf::new();
    for component in path.components() {
        prefix.push(component);
        match std::fs::symlink_metadata(&prefix) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(ArchiveError::Target {
                    path: path.display().to_string(),
                    reason: "a component is a symlink",
                })
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(ArchiveError::io("inspect", &prefix, e)),
        }
    }
    Ok(())
}

struct Unpacker<'a> {
    root: std::os::fd::BorrowedFd<'a>,
    opts: &'a UnpackOptions,
    dir: &'a Path,
    stats: UnpackStats,
    /// The parent directory of the previous entry: consecutive entries of one directory (the
    /// writer's order) reuse its fd instead of walking from the root again.
    cached_parent: Option<(Vec<u8>, OwnedFd)>,
    buf: Vec<u8>,
}

/// `read_exact` that reports a short stream as [`ArchiveError::Truncated`].
fn read_exact<R: Read>(input: &mut R, buf: &mut [u8]) -> Result<(), ArchiveError> {
    input.read_exact(buf).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => ArchiveError::Truncated,
        _ => ArchiveError::Read(e),
    })
}

fn read_u8<R: Read>(input: &mut R) -> Result<u8, ArchiveError> {
    let mut b = [0; 1];
    read_exact(input, &mut b)?;
    Ok(b[0])
}

fn read_u16<R: Read>(input: &mut R) -> Result<u16, ArchiveError> {
    let mut b = [0; 2];
    read_exact(input, &mut b)?;
    Ok(u16::from_be_bytes(b))
}

fn read_u64<R: Read>(input: &mut R) -> Result<u64, ArchiveError> {
    let mut b = [0; 8];
    read_exact(input, &mut b)?;
    Ok(u64::from_be_bytes(b))
}

impl<'a> Unpacker<'a> {
    fn new(root: std::os::fd::BorrowedFd<'a>, opts: &'a UnpackOptions, dir: &'a Path) -> Self {
        Self {
            root,
            opts,
            dir,
            stats: UnpackStats::default(),
            cached_parent: None,
            buf: vec![0; BUF],
        }
    }

    fn run<R: Read>(mut self, input: R) -> Result<UnpackStats, ArchiveError> {
        let mut input = BufReader::with_capacity(BUF, input);
        let mut magic = [0; 8];
        read_exact(&mut input, &mut magic)?;
        if magic != MAGIC {
            return Err(ArchiveError::BadMagic);
        }
        let version = read_u16(&mut input)?;
        if version != VERSION {
            return Err(ArchiveError::UnsupportedVersion(version));
        }
        loop {
            let index = self.stats.dirs + self.stats.files;
            match read_u8(&mut input)? {
                TAG_DIR => {
                    let path = self.read_path(&mut input)?;
                    self.count_entry()?;
                    let (parent, name) = self.parent_of(&path)?;
                    match mkdirat(&parent, name, Mode::from_bits_truncate(0o700)) {
                        Ok(()) => {}
                        Err(Errno::EEXIST) => {
                            return Err(ArchiveError::Duplicate { path: show(&path) })
                        }
                        Err(e) => return Err(ArchiveError::io("create", self.shown(&path), e)),
                    }
                    self.cache(&path, parent);
                    self.stats.dirs += 1;
                }
                TAG_FILE => {
                    let flags = read_u8(&mut input)?;
                    let path = self.read_path(&mut input)?;
                    if flags & !FLAG_EXEC != 0 {
                        return Err(ArchiveError::BadFlags {
                            path: show(&path),
                            flags,
                        });
                    }
                    let size = read_u64(&mut input)?;
                    self.count_entry()?;
                    let limit = self.opts.limits.max_bytes;
                    match self.stats.bytes.checked_add(size) {
                        Some(total) if total <= limit => {}
                        _ => return Err(ArchiveError::TooManyBytes { limit }),
                    }
                    let (parent, name) = self.parent_of(&path)?;
                    let mode = if flags & FLAG_EXEC != 0 { 0o700 } else { 0o600 };
                    let oflags = OFlag::O_WRONLY
                        | OFlag::O_CREAT
                        | OFlag::O_EXCL
                        | OFlag::O_NOFOLLOW
                        | OFlag::O_CLOEXEC;
                    let fd = match openat(&parent, name, oflags, Mode::from_bits_truncate(mode)) {
                        Ok(fd) => fd,
                        Err(Errno::EEXIST) => {
                            return Err(ArchiveError::Duplicate { path: show(&path) })
                        }
                        Err(e) => return Err(ArchiveError::io("create", self.shown(&path), e)),
                    };
                    // The umask may have cleared bits of `mode`.
                    fchmod(&fd, Mode::from_bits_truncate(mode))
                        .map_err(|e| ArchiveError::io("chmod", self.shown(&path), e))?;
                    self.cache(&path, parent);
                    self.copy(&mut input, File::from(fd), size, &path)?;
                    self.stats.files += 1;
                    self.stats.bytes += size;
                }
                TAG_END => {
                    let claimed_entries = read_u64(&mut input)?;
                    let claimed_bytes = read_u64(&mut input)?;
                    let entries = self.stats.dirs + self.stats.files;
                    if claimed_entries != entries || claimed_bytes != self.stats.bytes {
                        return Err(ArchiveError::EndMismatch {
                            claimed_entries,
                            claimed_bytes,
                            entries,
                            bytes: self.stats.bytes,
                        });
                    }
                    let mut extra = [0; 1];
                    loop {
                        match input.read(&mut extra) {
                            Ok(0) => return Ok(self.stats),
                            Ok(_) => return Err(ArchiveError::TrailingData),
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                            Err(e) => return Err(ArchiveError::Read(e)),
                        }
                    }
                }
                tag => return Err(ArchiveError::UnsupportedEntry { index, tag }),
            }
        }
    }

    fn shown(&self, path: &[u8]) -> String {
        self.dir.join(show(path)).display().to_string()
    }

    fn count_entry(&self) -> Result<(), ArchiveError> {
        let limit = self.opts.limits.max_entries;
        if self.stats.dirs + self.stats.files >= limit {
            return Err(ArchiveError::TooManyEntries { limit });
        }
        Ok(())
    }

    fn read_path<R: Read>(&mut self, input: &mut R) -> Result<Vec<u8>, ArchiveError> {
        let len = usize::from(read_u16(input)?);
        let mut path = vec![0; len];
        read_exact(input, &mut path)?;
        validate_path(&path)?;
        Ok(path)
    }

    /// Opens the parent directory of `path` (walking from the root, never following a symlink)
    /// and returns it with the last component.
    fn parent_of<'p>(&mut self, path: &'p [u8]) -> Result<(OwnedFd, &'p [u8]), ArchiveError> {
        let parts = validate_path(path)?;
        let (name, parents) = parts.split_last().ok_or(ArchiveError::BadPath {
            path: show(path),
            reason: "empty path",
        })?;
        let parent_path = &path[..path.len() - name.len()];
        if let Some((cached, fd)) = self.cached_parent.take() {
            if cached == parent_path {
                return Ok((fd, name));
            }
        }
        let dup = |fd: std::os::fd::BorrowedFd<'_>| {
            fd.try_clone_to_owned()
                .map_err(|e| ArchiveError::io("open", self.dir, e))
        };
        let mut dir = dup(self.root)?;
        for part in parents {
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            dir = match openat(&dir, *part, flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::ENOENT) => return Err(ArchiveError::MissingParent { path: show(path) }),
                // Only this reader creates entries here, so a parent that is not a directory was
                // a file entry: the archive puts a child under a file.
                Err(Errno::ENOTDIR | Errno::ELOOP) => {
                    return Err(ArchiveError::BadPath {
                        path: show(path),
                        reason: "a parent is not a directory",
                    })
                }
                Err(e) => return Err(ArchiveError::io("open", self.shown(path), e)),
            };
        }
        Ok((dir, name))
    }

    fn cache(&mut self, path: &[u8], parent: OwnedFd) {
        let name_len = path.rsplit(|&b| b == b'/').next().map_or(0, <[u8]>::len);
        self.cached_parent = Some((path[..path.len() - name_len].to_vec(), parent));
    }

    fn copy<R: Read>(
        &mut self,
        input: &mut R,
        mut file: File,
        size: u64,
        path: &[u8],
    ) -> Result<(), ArchiveError> {
        let mut left = size;
        while left > 0 {
            let n = usize::try_from(left)
                .unwrap_or(usize::MAX)
                .min(self.buf.len());
            read_exact(input, &mut self.buf[..n])?;
            file.write_all(&self.buf[..n])
                .map_err(|e| ArchiveError::io("write", self.shown(path), e))?;
            left -= n as u64;
        }
        Ok(())
    }
}
