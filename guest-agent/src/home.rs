//! The computer's home directory and safe access to paths inside it.
//!
//! This module owns path validation ([`normalize`]) and every filesystem operation the tunnel
//! performs on the home for the control plane: listing a directory, reading and writing a file,
//! and resolving an exec working directory. Every access walks the path one component at a time
//! from a directory fd of the home with `openat(..., O_NOFOLLOW)`, so no symlink is ever followed,
//! not in the middle of a path and not at its end, and swapping a directory for a symlink
//! concurrently cannot redirect an operation outside the home.
//!
//! It leaves lease checks to [`crate::fence`], transport to the tunnel, and commands to
//! [`crate::exec`]. Commands run with the user's full rights: nothing here confines them.

use gateway_proto::home::ExportToken;
use gateway_proto::{ErrorCode, FileEntry, FileKind, OpError};
use homes::archive::Stamps;
use nix::errno::Errno;
use nix::fcntl::{fcntl, open, openat, renameat, AtFlags, FcntlArg, OFlag};
use nix::sys::stat::{fchmod, fstat, fstatat, mkdirat, FileStat, Mode};
use nix::unistd::{fsync, unlinkat, UnlinkatFlags};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Longest path accepted, in bytes (Linux `PATH_MAX`).
pub const MAX_PATH_LEN: usize = 4096;
/// Longest single path component accepted, in bytes (Linux `NAME_MAX`).
pub const MAX_COMPONENT_LEN: usize = 255;
/// Most entries [`Home::list`] returns for one directory.
pub const MAX_LIST_ENTRIES: usize = 10_000;
/// Name prefix of the temporary files [`Home::create_write`] writes before renaming them.
pub const TEMP_PREFIX: &str = ".rakazo-write-";

/// A validated path relative to the home: no empty, `.` or `..` components, no NUL bytes, no
/// component longer than [`MAX_COMPONENT_LEN`]. No components means the home itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RelPath(Vec<String>);

impl RelPath {
    /// The validated components, outermost first.
    pub fn components(&self) -> &[String] {
        &self.0
    }

    /// Whether this names the home directory itself.
    pub fn is_home(&self) -> bool {
        self.0.is_empty()
    }

    fn split_last(&self) -> Option<(&[String], &str)> {
        self.0
            .split_last()
            .map(|(last, parents)| (parents, last.as_str()))
    }

    /// The path quoted and escaped for messages, e.g. `"a/b"`.
    fn quoted(&self) -> String {
        format!("{:?}", self.to_string())
    }
}

impl fmt::Display for RelPath {
    /// `/`-joined components; the home itself prints as `.`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str(".")
        } else {
            f.write_str(&self.0.join("/"))
        }
    }
}

/// Quotes a raw, unvalidated path for a message, shortened so a 4 KiB path can't flood a log.
fn show_raw(path: &str) -> String {
    const MAX_SHOWN: usize = 200;
    if path.len() <= MAX_SHOWN {
        return format!("{path:?}");
    }
    let mut end = MAX_SHOWN;
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}...", &path[..end])
}

fn rejected(message: String) -> OpError {
    OpError::new(ErrorCode::PathRejected, message)
}

/// Validates a path relative to the home.
///
/// Accepts `a/b`, `./a//b/`, and `""` or `.` for the home itself. Rejects absolute paths, any
/// `..` segment, NUL bytes, paths over [`MAX_PATH_LEN`] bytes and components over
/// [`MAX_COMPONENT_LEN`] bytes, all with [`ErrorCode::PathRejected`].
pub fn normalize(path: &str) -> Result<RelPath, OpError> {
    if path.len() > MAX_PATH_LEN {
        return Err(rejected(format!(
            "path {} is longer than {MAX_PATH_LEN} bytes",
            show_raw(path)
        )));
    }
    if path.contains('\0') {
        return Err(rejected(format!(
            "path {} contains a NUL byte",
            show_raw(path)
        )));
    }
    if path.starts_with('/') {
        return Err(rejected(format!(
            "path {} is absolute; paths are relative to the home",
            show_raw(path)
        )));
    }
    let mut components = Vec::new();
    // How far below the home the `..`-free prefix reaches, to tell "leaves the home" apart from
    // a `..` that would stay inside (refused too: it is never needed and invites confusion).
    let mut depth: usize = 0;
    let mut leaves = false;
    let mut has_dotdot = false;
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                has_dotdot = true;
                match depth.checked_sub(1) {
                    Some(d) => depth = d,
                    None => leaves = true,
                }
            }
            _ => {
                if part.len() > MAX_COMPONENT_LEN {
                    return Err(rejected(format!(
                        "path {} has a component longer than {MAX_COMPONENT_LEN} bytes",
                        show_raw(path)
                    )));
                }
                depth += 1;
                components.push(part.to_owned());
            }
        }
    }
    if leaves {
        return Err(rejected(format!("path {} leaves the home", show_raw(path))));
    }
    if has_dotdot {
        return Err(rejected(format!(
            "path {} has a \"..\" segment; paths may not use \"..\"",
            show_raw(path)
        )));
    }
    Ok(RelPath(components))
}

/// The home directory of this computer.
///
/// Cheap to clone. The root is re-opened by path for each operation, so a home that is replaced
/// wholesale (an import) is picked up; every path inside it is resolved with `openat`.
#[derive(Debug, Clone)]
pub struct Home {
    root: PathBuf,
    exports: std::sync::Arc<ExportStamps>,
}

/// The file stamps of the last [`ExportStamps::KEPT`] home exports, by token: what a delta
/// export compares with (`crate::homeio`). Forgotten when the home is replaced by an import.
#[derive(Debug, Default)]
pub struct ExportStamps(std::sync::Mutex<Vec<(ExportToken, std::sync::Arc<Stamps>)>>);

impl ExportStamps {
    /// Exports remembered: the last, and the one before it (whose checkpoint is still the
    /// latest when the last one's commit failed).
    pub const KEPT: usize = 2;

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(ExportToken, std::sync::Arc<Stamps>)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, token: &ExportToken) -> Option<std::sync::Arc<Stamps>> {
        self.lock()
            .iter()
            .find(|(t, _)| t == token)
            .map(|(_, s)| s.clone())
    }

    pub fn put(&self, token: ExportToken, stamps: Stamps) {
        let mut kept = self.lock();
        kept.retain(|(t, _)| *t != token);
        kept.push((token, std::sync::Arc::new(stamps)));
        let over = kept.len().saturating_sub(Self::KEPT);
        kept.drain(..over);
    }

    pub fn clear(&self) {
        self.lock().clear();
    }
}

/// A file being written by [`Home::create_write`].
///
/// Data goes to a hidden temporary file in the target directory; [`PendingWrite::commit`] syncs
/// it and renames it over the final name. Dropping it without committing removes the temporary
/// file, so a half-written file is never visible under the final name.
#[derive(Debug)]
pub struct PendingWrite {
    file: File,
    dir: OwnedFd,
    temp_name: String,
    final_name: String,
    path: RelPath,
    committed: bool,
    /// Commit with `RENAME_NOREPLACE`: an entry that appeared at the final name wins.
    keep_existing: bool,
}

impl Home {
    /// Opens the home at `root`, which must exist and be a directory. The root is canonicalized.
    pub fn new(root: impl AsRef<Path>) -> io::Result<Home> {
        let root = std::fs::canonicalize(root.as_ref())?;
        if !std::fs::metadata(&root)?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("home {} is not a directory", root.display()),
            ));
        }
        Ok(Home {
            root,
            exports: Default::default(),
        })
    }

    /// The stamps of the last exports.
    pub fn exports(&self) -> &ExportStamps {
        &self.exports
    }

    /// The canonical absolute path of the home.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Lists one directory of the home: regular files and directories only (symlinks, sockets,
    /// fifos and devices are skipped, as are names that are not UTF-8), sorted by path.
    ///
    /// Directories report size 0. At most [`MAX_LIST_ENTRIES`] entries, else `TooLarge`.
    pub fn list(&self, path: &str) -> Result<Vec<FileEntry>, OpError> {
        let rel = normalize(path)?;
        let dir = self.walk(rel.components(), false, &rel)?;
        // `nix::dir` is not enabled in this build, and reading a directory by fd needs it or
        // unsafe `fdopendir`. The magic link /proc/self/fd/N opens exactly the directory this fd
        // refers to (no path lookup through the home), so it is as safe as `fdopendir`.
        let by_fd = format!("/proc/self/fd/{}", dir.as_raw_fd());
        let entries = std::fs::read_dir(&by_fd).map_err(|e| {
            OpError::new(
                ErrorCode::Failed,
                format!("cannot list {}: {e}", rel.quoted()),
            )
        })?;
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| {
                OpError::new(
                    ErrorCode::Failed,
                    format!("cannot list {}: {e}", rel.quoted()),
                )
            })?;
            let Ok(name) = entry.file_name().into_string() else {
                // A non-UTF-8 name cannot be addressed over the wire; listing it would only
                // produce a path nothing can open.
                continue;
            };
            let st = match fstatat(&dir, name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                // Removed between readdir and stat.
                Err(Errno::ENOENT) => continue,
                Err(e) => {
                    return Err(OpError::new(
                        ErrorCode::Failed,
                        format!("cannot stat {name:?} in {}: {}", rel.quoted(), desc(e)),
                    ))
                }
            };
            let (kind, size, executable) = match file_type(&st) {
                Type::File => (FileKind::File, size_of(&st), st.st_mode & 0o111 != 0),
                Type::Dir => (FileKind::Dir, 0, false),
                Type::Symlink | Type::Other => continue,
            };
            if out.len() == MAX_LIST_ENTRIES {
                return Err(OpError::new(
                    ErrorCode::TooLarge,
                    format!(
                        "directory {} has more than {MAX_LIST_ENTRIES} entries",
                        rel.quoted()
                    ),
                ));
            }
            let path = if rel.is_home() {
                name
            } else {
                format!("{rel}/{name}")
            };
            out.push(FileEntry {
                path,
                kind,
                size,
                executable,
            });
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// Opens a regular file of the home for reading and returns it with its size.
    ///
    /// A file larger than `max_bytes` fails with `TooLarge` and the message
    /// `computer file exceeds {max_bytes} bytes`. The file may change after this returns: read
    /// at most the returned size and treat a short read as an error.
    pub fn open_read(&self, path: &str, max_bytes: u64) -> Result<(File, u64), OpError> {
        let rel = normalize(path)?;
        let Some((parents, name)) = rel.split_last() else {
            return Err(is_a_directory(&rel));
        };
        let dir = self.walk(parents, false, &rel)?;
        // Check the type before opening: opening a fifo or a device can block or have effects.
        let st = fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(|e| final_error(&dir, name, e, &rel))?;
        require_regular(&st, &rel)?;
        let flags = OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_CLOEXEC
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY;
        let fd = openat(&dir, name, flags, Mode::empty())
            .map_err(|e| final_error(&dir, name, e, &rel))?;
        // The entry may have been swapped between the stat and the open.
        let st = fstat(&fd).map_err(|e| failed("stat", &rel, e))?;
        require_regular(&st, &rel)?;
        let size = size_of(&st);
        if size > max_bytes {
            return Err(OpError::new(
                ErrorCode::TooLarge,
                format!("computer file exceeds {max_bytes} bytes"),
            ));
        }
        fcntl(&fd, FcntlArg::F_SETFL(OFlag::empty())).map_err(|e| failed("open", &rel, e))?;
        Ok((File::from(fd), size))
    }

    /// Starts writing a file of the home, creating missing parent directories (mode 0700).
    ///
    /// The file gets mode 0700 if `executable`, else 0600, regardless of the umask. An existing
    /// symlink at the final name is refused (`PathRejected`), as is a directory or any other
    /// non-regular file (`BadRequest`); an existing regular file is replaced on commit.
    pub fn create_write(&self, path: &str, executable: bool) -> Result<PendingWrite, OpError> {
        let rel = normalize(path)?;
        let Some((parents, name)) = rel.split_last() else {
            return Err(is_a_directory(&rel));
        };
        let dir = self.walk(parents, true, &rel)?;
        check_replaceable(&dir, name, &rel)?;
        let mut attempts = 0;
        let (fd, temp_name) = loop {
            let temp_name = format!("{TEMP_PREFIX}{}", hex::encode(rand::random::<[u8; 8]>()));
            let flags = OFlag::O_WRONLY
                | OFlag::O_CREAT
                | OFlag::O_EXCL
                | OFlag::O_NOFOLLOW
                | OFlag::O_CLOEXEC;
            match openat(
                &dir,
                temp_name.as_str(),
                flags,
                Mode::from_bits_truncate(0o600),
            ) {
                Ok(fd) => break (fd, temp_name),
                Err(Errno::EEXIST) if attempts < 8 => attempts += 1,
                Err(e) => return Err(failed("create a temporary file for", &rel, e)),
            }
        };
        let pending = PendingWrite {
            file: File::from(fd),
            dir,
            temp_name,
            final_name: name.to_owned(),
            path: rel,
            committed: false,
            keep_existing: false,
        };
        let mode = if executable { 0o700 } else { 0o600 };
        // fchmod rather than the open mode, so the umask cannot take bits away.
        fchmod(&pending.file, Mode::from_bits_truncate(mode))
            .map_err(|e| failed("set the mode of", &pending.path, e))?;
        Ok(pending)
    }

    /// Resolves an exec working directory: it must exist and be a directory reached without
    /// symlinks. Returns its absolute path under the root.
    ///
    /// The returned path is only as good as the moment it was checked; commands are not confined
    /// to the home anyway, so this enforces the contract, not a security boundary.
    pub fn resolve_cwd(&self, path: &str) -> Result<PathBuf, OpError> {
        let rel = normalize(path)?;
        self.walk(rel.components(), false, &rel)?;
        Ok(rel
            .components()
            .iter()
            .fold(self.root.clone(), |p, c| p.join(c)))
    }

    /// Resolves a directory of the home like [`Home::resolve_cwd`], creating what is missing
    /// (mode 0700) on the way, never through a symlink; each directory it creates is given to
    /// `owner` (uid, gid) when set (a root guest preparing a directory for its workspace user).
    pub fn ensure_dir(&self, path: &str, owner: Option<(u32, u32)>) -> Result<PathBuf, OpError> {
        let rel = normalize(path)?;
        let mut dir = self.open_root()?;
        for (i, name) in rel.components().iter().enumerate() {
            let existed = fstatat(&dir, name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW).is_ok();
            dir = open_subdir(&dir, name, true, &rel.components()[..=i], &rel)?;
            if let (false, Some((uid, gid))) = (existed, owner) {
                nix::unistd::fchown(
                    &dir,
                    Some(nix::unistd::Uid::from_raw(uid)),
                    Some(nix::unistd::Gid::from_raw(gid)),
                )
                .map_err(|e| failed("give to its user", &rel, e))?;
            }
        }
        Ok(rel
            .components()
            .iter()
            .fold(self.root.clone(), |p, c| p.join(c)))
    }

    fn open_root(&self) -> Result<OwnedFd, OpError> {
        open(
            self.root.as_path(),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| {
            OpError::new(
                ErrorCode::Failed,
                format!("cannot open the home {}: {}", self.root.display(), desc(e)),
            )
        })
    }

    /// Opens the directory `components` (a prefix of `full`) one component at a time without
    /// following symlinks, creating missing ones (mode 0700) when `create` is set.
    fn walk(
        &self,
        components: &[String],
        create: bool,
        full: &RelPath,
    ) -> Result<OwnedFd, OpError> {
        let mut dir = self.open_root()?;
        for (i, name) in components.iter().enumerate() {
            dir = open_subdir(&dir, name, create, &components[..=i], full)?;
        }
        Ok(dir)
    }
}

fn open_subdir(
    dir: &OwnedFd,
    name: &str,
    create: bool,
    prefix: &[String],
    full: &RelPath,
) -> Result<OwnedFd, OpError> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut tried_create = false;
    let mut created = false;
    loop {
        match openat(dir, name, flags, Mode::empty()) {
            Ok(fd) => {
                if created {
                    // mkdirat's mode is filtered by the umask; make it exactly 0700.
                    fchmod(&fd, Mode::from_bits_truncate(0o700))
                        .map_err(|e| failed("set the mode of", full, e))?;
                }
                return Ok(fd);
            }
            Err(Errno::ENOENT) if create && !tried_create => {
                tried_create = true;
                match mkdirat(dir, name, Mode::from_bits_truncate(0o700)) {
                    Ok(()) => created = true,
                    // Created concurrently: open whatever is there now, without following it.
                    Err(Errno::EEXIST) => {}
                    Err(e) => return Err(failed("create directories for", full, e)),
                }
            }
            Err(e) => return Err(component_error(dir, name, e, prefix, full)),
        }
    }
}

/// Explains why opening the directory component `name` (the last of `prefix`) failed.
fn component_error(
    dir: &OwnedFd,
    name: &str,
    errno: Errno,
    prefix: &[String],
    full: &RelPath,
) -> OpError {
    let is_full = prefix.len() == full.components().len();
    match errno {
        Errno::ENOENT => not_found(full),
        Errno::ELOOP | Errno::ENOTDIR => {
            match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).map(|st| file_type(&st)) {
                Ok(Type::Dir) => failed("open", full, errno),
                Ok(Type::Symlink) => through_symlink(full),
                Ok(_) if is_full => OpError::new(
                    ErrorCode::BadRequest,
                    format!("path {} is not a directory", full.quoted()),
                ),
                Ok(_) => OpError::new(
                    ErrorCode::BadRequest,
                    format!(
                        "path {} goes through {:?}, which is not a directory",
                        full.quoted(),
                        prefix.join("/")
                    ),
                ),
                Err(Errno::ENOENT) => not_found(full),
                // ELOOP only comes from O_NOFOLLOW meeting a symlink, even if it is gone now.
                Err(_) if errno == Errno::ELOOP => through_symlink(full),
                Err(e) => failed("open", full, e),
            }
        }
        e => failed("open", full, e),
    }
}

/// Explains why stat-ing or opening the final component `name` of `full` failed.
fn final_error(dir: &OwnedFd, name: &str, errno: Errno, full: &RelPath) -> OpError {
    match errno {
        Errno::ENOENT => not_found(full),
        Errno::ELOOP => through_symlink(full),
        e => match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).map(|st| file_type(&st)) {
            Ok(Type::Symlink) => through_symlink(full),
            _ => failed("open", full, e),
        },
    }
}

/// Refuses to replace anything but a regular file (or nothing) at `name`.
fn exists(full: &RelPath) -> OpError {
    OpError::new(
        ErrorCode::Exists,
        format!("{} already exists; not replacing it", full.quoted()),
    )
}

fn check_replaceable(dir: &OwnedFd, name: &str, full: &RelPath) -> Result<(), OpError> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(failed("stat", full, e)),
        Ok(st) => match file_type(&st) {
            Type::File => Ok(()),
            Type::Dir => Err(is_a_directory(full)),
            Type::Symlink => Err(rejected(format!(
                "path {} is a symlink; refusing to replace it",
                full.quoted()
            ))),
            Type::Other => Err(not_regular(full)),
        },
    }
}

fn require_regular(st: &FileStat, full: &RelPath) -> Result<(), OpError> {
    match file_type(st) {
        Type::File => Ok(()),
        Type::Dir => Err(is_a_directory(full)),
        Type::Symlink => Err(through_symlink(full)),
        Type::Other => Err(not_regular(full)),
    }
}

impl PendingWrite {
    /// Makes this write never replace an entry at its final name: refused with `Exists` now if
    /// one is there, and at commit if one appeared meanwhile (the rename is `RENAME_NOREPLACE`).
    pub fn keep_existing(mut self) -> Result<Self, OpError> {
        match fstatat(
            &self.dir,
            self.final_name.as_str(),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Err(Errno::ENOENT) => {
                self.keep_existing = true;
                Ok(self)
            }
            Err(e) => Err(failed("stat", &self.path, e)),
            Ok(_) => Err(exists(&self.path)),
        }
    }

    /// The temporary file to write the content to.
    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// The validated path this write will land at.
    pub fn path(&self) -> &RelPath {
        &self.path
    }

    /// Syncs the content and renames it over the final name.
    ///
    /// Refused if the final name has meanwhile become a symlink, directory or other
    /// non-regular file. `renameat` never follows a symlink, so even a swap racing this check
    /// can only replace the link entry, never write through it.
    pub fn commit(mut self) -> Result<(), OpError> {
        self.file.sync_all().map_err(|e| {
            OpError::new(
                ErrorCode::Failed,
                format!("cannot sync {}: {e}", self.path.quoted()),
            )
        })?;
        if self.keep_existing {
            sys::rename_noreplace(&self.dir, &self.temp_name, &self.final_name).map_err(
                |e| match e {
                    Errno::EEXIST => exists(&self.path),
                    e => failed("rename into", &self.path, e),
                },
            )?;
        } else {
            check_replaceable(&self.dir, &self.final_name, &self.path)?;
            renameat(
                &self.dir,
                self.temp_name.as_str(),
                &self.dir,
                self.final_name.as_str(),
            )
            .map_err(|e| match e {
                Errno::EISDIR | Errno::ENOTEMPTY | Errno::EEXIST => is_a_directory(&self.path),
                e => failed("rename into", &self.path, e),
            })?;
        }
        self.committed = true;
        // Persist the rename itself. The new content is already in place and visible; a failed
        // directory sync only weakens durability across a crash, so it is logged, not returned.
        if let Err(e) = fsync(self.dir.as_fd()) {
            tracing::warn!(path = %self.path, error = %e, "cannot sync the directory after a write");
        }
        Ok(())
    }
}

impl io::Write for PendingWrite {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Drop for PendingWrite {
    fn drop(&mut self) {
        if !self.committed {
            // Best effort: the name is random and hidden, and nothing else refers to it.
            let _ = unlinkat(
                &self.dir,
                self.temp_name.as_str(),
                UnlinkatFlags::NoRemoveDir,
            );
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    File,
    Dir,
    Symlink,
    Other,
}

fn file_type(st: &FileStat) -> Type {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => Type::File,
        libc::S_IFDIR => Type::Dir,
        libc::S_IFLNK => Type::Symlink,
        _ => Type::Other,
    }
}

fn size_of(st: &FileStat) -> u64 {
    // st_size is never negative for a regular file.
    u64::try_from(st.st_size).unwrap_or(0)
}

/// The errno's description, lowercased to fit into our messages.
fn desc(e: Errno) -> String {
    let d = e.desc();
    let mut chars = d.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => d.to_owned(),
    }
}

fn failed(what: &str, path: &RelPath, e: Errno) -> OpError {
    OpError::new(
        ErrorCode::Failed,
        format!("cannot {what} {}: {}", path.quoted(), desc(e)),
    )
}

fn not_found(path: &RelPath) -> OpError {
    OpError::new(
        ErrorCode::NotFound,
        format!("path {} does not exist", path.quoted()),
    )
}

fn through_symlink(path: &RelPath) -> OpError {
    rejected(format!("path {} goes through a symlink", path.quoted()))
}

fn is_a_directory(path: &RelPath) -> OpError {
    OpError::new(
        ErrorCode::BadRequest,
        format!("path {} is a directory", path.quoted()),
    )
}

fn not_regular(path: &RelPath) -> OpError {
    OpError::new(
        ErrorCode::BadRequest,
        format!("path {} is not a regular file", path.quoted()),
    )
}

pub mod stream;
mod sys;

#[cfg(test)]
mod tests;
