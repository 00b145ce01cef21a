//! A repository's revisions in and out of the home archive format (`FORMAT.md`, "Archive"), the
//! format the guest exports and imports: [`Repo::ingest`] turns an archive stream into the next
//! revision, storing only the chunks the repository lacks; [`Repo::write_archive`] streams a
//! revision back out, and [`Repo::archive_size`] says how long that stream will be before a byte
//! of it is read (the guest's import wants the size first).
//!
//! The archive comes from an untrusted guest. Every byte passes through the archive's own
//! checker ([`crate::archive::ArchiveParser`]: paths, flags, limits, the end record, nothing
//! after it) as it is read, and the entries must arrive in the order the guest's writer produces
//! them (depth first, a directory before its contents, names in byte order), which is what lets
//! a directory's tree be written as soon as the walk leaves it: memory is bounded by the depth of
//! the home, not its size. An archive out of that order is refused, never reordered.
//!
//! The archive format keeps directories and regular files with an executable flag, and no times;
//! trees made from it say mode 0700 (directories, executables) or 0600 and mtime 0, which is what
//! an import of the same archive restores. Symlinks of trees made from a directory walk are not
//! written out, as the archive writer skips them too.

use super::blobs::BlobStore;
use super::repo::{Cause, Repo, RevisionInfo, Writing};
use super::tree::{Entry, Node, Tree};
use super::{chunk, BlobId, BlobKind, CasError};
use crate::archive::{
    ArchiveError, ArchiveParser, Limits, FLAG_EXEC, MAGIC, MAX_PATH_LEN, TAG_DIR, TAG_END,
    TAG_FILE, TAG_SAME, VERSION,
};
use std::collections::HashMap;
use std::io::{self, BufWriter, Read, Write};

/// An archive reader that checks every byte it passes on, keeping the checker's verdict.
struct Checked<R> {
    inner: R,
    parser: ArchiveParser,
    fault: Option<ArchiveError>,
}

impl<R: Read> Read for Checked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Err(e) = self.parser.feed(&buf[..n]) {
            let msg = e.to_string();
            self.fault = Some(e);
            return Err(io::Error::new(io::ErrorKind::InvalidData, msg));
        }
        Ok(n)
    }
}

impl<R> Checked<R> {
    /// The error to report for `e`, met while reading: the checker's, if it refused the bytes.
    fn explain(&mut self, e: CasError) -> CasError {
        if let Some(fault) = self.fault.take() {
            return CasError::Archive(fault);
        }
        match e {
            CasError::Io(io) if io.kind() == io::ErrorKind::UnexpectedEof => {
                CasError::Archive(ArchiveError::Truncated)
            }
            e => e,
        }
    }

    fn exact(&mut self, buf: &mut [u8]) -> Result<(), CasError>
    where
        R: Read,
    {
        self.read_exact(buf).map_err(|e| self.explain(e.into()))
    }

    fn u8(&mut self) -> Result<u8, CasError>
    where
        R: Read,
    {
        let mut b = [0; 1];
        self.exact(&mut b)?;
        Ok(b[0])
    }

    fn u16(&mut self) -> Result<u16, CasError>
    where
        R: Read,
    {
        let mut b = [0; 2];
        self.exact(&mut b)?;
        Ok(u16::from_be_bytes(b))
    }

    fn u64(&mut self) -> Result<u64, CasError>
    where
        R: Read,
    {
        let mut b = [0; 8];
        self.exact(&mut b)?;
        Ok(u64::from_be_bytes(b))
    }

    fn bytes(&mut self, len: u16) -> Result<Vec<u8>, CasError>
    where
        R: Read,
    {
        let mut v = vec![0; usize::from(len)];
        self.exact(&mut v)?;
        Ok(v)
    }
}

/// A directory whose entries are still arriving, and its entries in the base revision (a delta
/// archive's unchanged files are found there), by name.
struct Open {
    path: Vec<u8>,
    name: (String, Option<String>),
    entries: Vec<Entry>,
    base: HashMap<Vec<u8>, Entry>,
}

/// How [`Repo::ingest_with`] stores an archive.
#[derive(Debug, Clone)]
pub struct Ingest {
    pub limits: Limits,
    pub cause: Cause,
    pub at_ms: i64,
    /// The number of the first revision of an empty repository.
    pub first: u64,
    /// For a delta archive: the revision its unchanged files ([`TAG_SAME`]) are taken from.
    pub base: Option<u64>,
    /// The export's token, recorded in the revision.
    pub token: Option<String>,
}

/// The entries of tree `id`, by name.
fn by_name<S: BlobStore>(repo: &Repo<S>, id: BlobId) -> Result<HashMap<Vec<u8>, Entry>, CasError> {
    let mut out = HashMap::new();
    for e in repo.tree(id)?.entries {
        out.insert(e.name_bytes()?.into_owned(), e);
    }
    Ok(out)
}

fn show(path: &[u8]) -> String {
    String::from_utf8_lossy(path).chars().take(200).collect()
}

/// The archive's mode for a directory or an executable, and for any other file.
const MODE_EXEC: u32 = 0o700;
const MODE_PLAIN: u32 = 0o600;

impl<S: BlobStore> Repo<S> {
    /// Stores the archive read from `archive` as the next revision (numbered after the latest,
    /// or `first` in an empty repository), made for `cause` at `at_ms`. `limits` bound what
    /// the archive may hold. On any error, a refused archive included, no revision is written.
    pub fn ingest<R: Read>(
        &mut self,
        archive: R,
        limits: Limits,
        cause: Cause,
        at_ms: i64,
        first: u64,
    ) -> Result<RevisionInfo, CasError> {
        let how = Ingest {
            limits,
            cause,
            at_ms,
            first,
            base: None,
            token: None,
        };
        self.ingest_with(archive, how)
    }

    /// [`Repo::ingest`] as `how` says: a delta archive's unchanged files keep their entries of
    /// revision `how.base`, which must hold each of them as a file of the same size (else the
    /// archive is refused: a guest's word that a file is unchanged never reaches further than
    /// this home's own past).
    pub fn ingest_with<R: Read>(
        &mut self,
        archive: R,
        how: Ingest,
    ) -> Result<RevisionInfo, CasError> {
        let latest = self.latest()?;
        let base_root = match how.base {
            Some(n) => Some(BlobId::from_hex(&self.revision(n)?.root)?),
            None => None,
        };
        let parser = match how.base {
            Some(_) => ArchiveParser::delta(how.limits),
            None => ArchiveParser::new(how.limits),
        };
        let mut r = Checked {
            inner: archive,
            parser,
            fault: None,
        };
        let mut w = self.begin(latest.as_ref(), how.cause, how.at_ms, how.first);
        w.info.export = how.token;
        let root = build(&mut w, &mut r, base_root);
        w.finish(root)
    }
}

fn build<S: BlobStore, R: Read>(
    w: &mut Writing<'_, S>,
    r: &mut Checked<R>,
    base_root: Option<BlobId>,
) -> Result<BlobId, CasError> {
    let mut head = [0u8; 10];
    r.exact(&mut head)?;
    let base = match base_root {
        Some(id) => by_name(w.repo(), id)?,
        None => HashMap::new(),
    };
    let mut stack = vec![Open {
        path: Vec::new(),
        name: (String::new(), None),
        entries: Vec::new(),
        base,
    }];
    loop {
        match r.u8()? {
            TAG_DIR => {
                let len = r.u16()?;
                let path = r.bytes(len)?;
                let name = place(w, &mut stack, &path)?;
                let top = stack.last().expect("the root");
                let base = match top.base.get(last_name(&path)).map(|e| &e.node) {
                    Some(Node::Dir { tree }) => by_name(w.repo(), BlobId::from_hex(tree)?)?,
                    _ => HashMap::new(),
                };
                stack.push(Open {
                    path,
                    name,
                    entries: Vec::new(),
                    base,
                });
            }
            TAG_FILE => {
                let flags = r.u8()?;
                let len = r.u16()?;
                let path = r.bytes(len)?;
                let size = r.u64()?;
                let (name, raw) = place(w, &mut stack, &path)?;
                w.info.files += 1;
                w.info.size += size;
                w.info.files_read += 1;
                let mut chunks = Vec::new();
                let mut got = 0u64;
                let cut = chunk::chunks((&mut *r).take(size), |c| {
                    got += c.len() as u64;
                    chunks.push(w.blob(BlobKind::Data, c)?.to_hex());
                    Ok(())
                });
                cut.map_err(|e| r.explain(e))?;
                if got != size {
                    return Err(CasError::Archive(ArchiveError::Truncated));
                }
                let top = stack.last_mut().expect("the root is never popped here");
                top.entries
                    .push(file_entry((name, raw), flags, size, chunks));
            }
            TAG_SAME => {
                let flags = r.u8()?;
                let len = r.u16()?;
                let path = r.bytes(len)?;
                let size = r.u64()?;
                let (name, raw) = place(w, &mut stack, &path)?;
                let top = stack.last_mut().expect("the root");
                let chunks = match top.base.remove(last_name(&path)).map(|e| e.node) {
                    Some(Node::File { size: had, chunks }) if had == size => chunks,
                    _ => {
                        return Err(CasError::Corrupt(format!(
                            "archive entry {}: said unchanged, but the base revision has no \
                             file of {size} bytes there",
                            show(&path)
                        )))
                    }
                };
                w.info.files += 1;
                w.info.size += size;
                top.entries
                    .push(file_entry((name, raw), flags, size, chunks));
            }
            TAG_END => {
                let mut end = [0u8; 16];
                r.exact(&mut end)?;
                let mut more = [0u8; 1];
                let n = r.read(&mut more).map_err(|e| r.explain(e.into()))?;
                if n != 0 {
                    return Err(CasError::Archive(ArchiveError::TrailingData));
                }
                r.parser.finish()?;
                while stack.len() > 1 {
                    close(w, &mut stack)?;
                }
                let root = stack.pop().expect("the root");
                return w.blob(
                    BlobKind::Tree,
                    &Tree {
                        entries: root.entries,
                    }
                    .encode(),
                );
            }
            // The checker refuses any other tag before it is returned.
            tag => return Err(CasError::Corrupt(format!("archive tag {tag}"))),
        }
    }
}

/// A file's tree entry from its archive header.
fn file_entry(
    (name, raw): (String, Option<String>),
    flags: u8,
    size: u64,
    chunks: Vec<String>,
) -> Entry {
    Entry {
        name,
        raw,
        mode: if flags & FLAG_EXEC != 0 {
            MODE_EXEC
        } else {
            MODE_PLAIN
        },
        mtime_ns: 0,
        node: Node::File { size, chunks },
    }
}

/// The last component of an archive path.
fn last_name(path: &[u8]) -> &[u8] {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => &path[i + 1..],
        None => path,
    }
}

/// Makes `path` the next entry of its directory: closes the directories the walk has left, and
/// refuses an entry whose directory is not open or that is out of byte order. Answers its name.
fn place<S: BlobStore>(
    w: &mut Writing<'_, S>,
    stack: &mut Vec<Open>,
    path: &[u8],
) -> Result<(String, Option<String>), CasError> {
    let (parent, name) = match path.iter().rposition(|&b| b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&[][..], path),
    };
    while stack.last().expect("the root").path != parent {
        if stack.len() == 1 {
            return Err(CasError::Corrupt(format!(
                "archive entry {}: its directory is not listed before it",
                show(path)
            )));
        }
        close(w, stack)?;
    }
    let top = stack.last().expect("the root");
    if let Some(last) = top.entries.last() {
        if &*last.name_bytes()? >= name {
            return Err(CasError::Corrupt(format!(
                "archive entry {}: out of order",
                show(path)
            )));
        }
    }
    Ok(Entry::names(name))
}

/// Writes the innermost open directory's tree and makes it an entry of its parent.
fn close<S: BlobStore>(w: &mut Writing<'_, S>, stack: &mut Vec<Open>) -> Result<(), CasError> {
    let dir = stack.pop().expect("a directory to close");
    let tree = w.blob(
        BlobKind::Tree,
        &Tree {
            entries: dir.entries,
        }
        .encode(),
    )?;
    let (name, raw) = dir.name;
    stack.last_mut().expect("the root").entries.push(Entry {
        name,
        raw,
        mode: MODE_EXEC,
        mtime_ns: 0,
        node: Node::Dir {
            tree: tree.to_hex(),
        },
    });
    Ok(())
}

/// The shape of a revision's archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ArchiveSize {
    /// Directories plus files.
    pub entries: u64,
    /// Bytes of file content.
    pub bytes: u64,
    /// The archive stream's length.
    pub len: u64,
}

/// One entry met by [`Repo::walk`]: its path from the home's root, and the entry.
pub struct Visit<'a> {
    pub path: &'a [u8],
    pub entry: &'a Entry,
}

impl<S: BlobStore> Repo<S> {
    /// Calls `each` for every entry of revision `n`, depth first, each directory before its
    /// contents, names in byte order (the archive's order).
    pub fn walk(
        &self,
        n: u64,
        mut each: impl FnMut(Visit<'_>) -> Result<(), CasError>,
    ) -> Result<(), CasError> {
        let root = BlobId::from_hex(&self.revision(n)?.root)?;
        let mut path = Vec::new();
        self.walk_tree(root, &mut path, &mut each)
    }

    pub(super) fn walk_tree(
        &self,
        tree: BlobId,
        path: &mut Vec<u8>,
        each: &mut impl FnMut(Visit<'_>) -> Result<(), CasError>,
    ) -> Result<(), CasError> {
        for e in self.tree(tree)?.entries {
            let len = path.len();
            if len > 0 {
                path.push(b'/');
            }
            path.extend_from_slice(&e.name_bytes()?);
            each(Visit { path, entry: &e })?;
            if let Node::Dir { tree } = &e.node {
                self.walk_tree(BlobId::from_hex(tree)?, path, each)?;
            }
            path.truncate(len);
        }
        Ok(())
    }

    /// How long revision `n`'s archive is, from its trees alone.
    pub fn archive_size(&self, n: u64) -> Result<ArchiveSize, CasError> {
        let mut s = ArchiveSize {
            len: 10 + 17,
            ..Default::default()
        };
        self.walk(n, |v| {
            if v.path.len() > MAX_PATH_LEN {
                return Err(CasError::BadPath(show(v.path)));
            }
            match &v.entry.node {
                Node::Dir { .. } => {
                    s.entries += 1;
                    s.len += 3 + v.path.len() as u64;
                }
                Node::File { size, .. } => {
                    s.entries += 1;
                    s.bytes += size;
                    s.len += 12 + v.path.len() as u64 + size;
                }
                Node::Symlink { .. } => {}
            }
            Ok(())
        })?;
        Ok(s)
    }

    /// Writes revision `n` as an archive to `out`: exactly [`Repo::archive_size`]'s length, every
    /// chunk checked as it is read.
    pub fn write_archive<W: Write>(&self, n: u64, out: W) -> Result<ArchiveSize, CasError> {
        let mut out = BufWriter::with_capacity(256 << 10, out);
        out.write_all(&MAGIC)?;
        out.write_all(&VERSION.to_be_bytes())?;
        let mut s = ArchiveSize {
            len: 10 + 17,
            ..Default::default()
        };
        self.walk(n, |v| {
            let len = u16::try_from(v.path.len())
                .ok()
                .filter(|l| usize::from(*l) <= MAX_PATH_LEN)
                .ok_or_else(|| CasError::BadPath(show(v.path)))?;
            match &v.entry.node {
                Node::Dir { .. } => {
                    out.write_all(&[TAG_DIR])?;
                    out.write_all(&len.to_be_bytes())?;
                    out.write_all(v.path)?;
                    s.entries += 1;
                    s.len += 3 + u64::from(len);
                }
                Node::File { size, chunks } => {
                    let flags = if v.entry.mode & 0o100 != 0 {
                        FLAG_EXEC
                    } else {
                        0
                    };
                    out.write_all(&[TAG_FILE, flags])?;
                    out.write_all(&len.to_be_bytes())?;
                    out.write_all(v.path)?;
                    out.write_all(&size.to_be_bytes())?;
                    let mut written = 0u64;
                    for c in chunks {
                        let data = self.blob(BlobId::from_hex(c)?)?;
                        written += data.len() as u64;
                        if written > *size {
                            break;
                        }
                        out.write_all(&data)?;
                    }
                    if written != *size {
                        return Err(CasError::Corrupt(format!(
                            "{}: chunks of {written} bytes for a file of {size}",
                            show(v.path)
                        )));
                    }
                    s.entries += 1;
                    s.bytes += size;
                    s.len += 12 + u64::from(len) + size;
                }
                Node::Symlink { .. } => {}
            }
            Ok(())
        })?;
        out.write_all(&[TAG_END])?;
        out.write_all(&s.entries.to_be_bytes())?;
        out.write_all(&s.bytes.to_be_bytes())?;
        out.flush()?;
        Ok(s)
    }

    /// The entry at `path` (`/`-separated, relative) in revision `n`, if there is one. The empty
    /// path is the root directory.
    pub fn find(&self, n: u64, path: &[u8]) -> Result<Option<Entry>, CasError> {
        let mut tree = BlobId::from_hex(&self.revision(n)?.root)?;
        if path.is_empty() {
            return Ok(Some(Entry {
                name: String::new(),
                raw: None,
                mode: MODE_EXEC,
                mtime_ns: 0,
                node: Node::Dir {
                    tree: tree.to_hex(),
                },
            }));
        }
        let mut parts = path.split(|&b| b == b'/').peekable();
        while let Some(part) = parts.next() {
            let t = self.tree(tree)?;
            let mut found = None;
            for e in t.entries {
                if &*e.name_bytes()? == part {
                    found = Some(e);
                    break;
                }
            }
            let Some(e) = found else { return Ok(None) };
            if parts.peek().is_none() {
                return Ok(Some(e));
            }
            match &e.node {
                Node::Dir { tree: t } => tree = BlobId::from_hex(t)?,
                _ => return Ok(None),
            }
        }
        Ok(None)
    }

    /// Writes the content of the file `entry` (from [`Repo::find`]) to `out`.
    pub fn read_file<W: Write>(&self, entry: &Entry, mut out: W) -> Result<u64, CasError> {
        let Node::File { size, chunks } = &entry.node else {
            return Err(CasError::Corrupt(format!("{} is not a file", entry.name)));
        };
        let mut written = 0u64;
        for c in chunks {
            let data = self.blob(BlobId::from_hex(c)?)?;
            written += data.len() as u64;
            out.write_all(&data)?;
        }
        if written != *size {
            return Err(CasError::Corrupt(format!(
                "{}: chunks of {written} bytes for a file of {size}",
                entry.name
            )));
        }
        Ok(written)
    }
}

/// How a path differs between two revisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Added,
    Removed,
    Changed,
}

/// One difference: the path, whether it is a directory, and how it changed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Difference {
    pub path: String,
    pub dir: bool,
    pub change: Change,
}

impl<S: BlobStore> Repo<S> {
    /// What changed from revision `a` to revision `b`, in path order, at most `limit` entries
    /// (the second value says whether more were left out). A directory's own entry is listed
    /// when it appears or disappears, and so is everything under it. Subtrees with the same
    /// id are equal and not read.
    pub fn diff(&self, a: u64, b: u64, limit: usize) -> Result<(Vec<Difference>, bool), CasError> {
        let ta = BlobId::from_hex(&self.revision(a)?.root)?;
        let tb = BlobId::from_hex(&self.revision(b)?.root)?;
        let mut d = Differ {
            repo: self,
            out: Vec::new(),
            limit,
            more: false,
        };
        d.trees(Some(ta), Some(tb), &mut Vec::new())?;
        Ok((d.out, d.more))
    }
}

struct Differ<'r, S: BlobStore> {
    repo: &'r Repo<S>,
    out: Vec<Difference>,
    limit: usize,
    more: bool,
}

impl<S: BlobStore> Differ<'_, S> {
    fn push(&mut self, path: &[u8], dir: bool, change: Change) {
        if self.out.len() == self.limit {
            self.more = true;
            return;
        }
        self.out.push(Difference {
            path: String::from_utf8_lossy(path).into_owned(),
            dir,
            change,
        });
    }

    fn entries(&self, t: Option<BlobId>) -> Result<Vec<Entry>, CasError> {
        Ok(match t {
            Some(t) => self.repo.tree(t)?.entries,
            None => Vec::new(),
        })
    }

    fn trees(
        &mut self,
        a: Option<BlobId>,
        b: Option<BlobId>,
        path: &mut Vec<u8>,
    ) -> Result<(), CasError> {
        if a == b || self.more {
            return Ok(());
        }
        let (ea, eb) = (self.entries(a)?, self.entries(b)?);
        let (mut i, mut j) = (0, 0);
        while i < ea.len() || j < eb.len() {
            let na = ea.get(i).map(|e| e.name_bytes()).transpose()?;
            let nb = eb.get(j).map(|e| e.name_bytes()).transpose()?;
            let order = match (&na, &nb) {
                (Some(x), Some(y)) => x.cmp(y),
                (Some(_), None) => std::cmp::Ordering::Less,
                _ => std::cmp::Ordering::Greater,
            };
            let len = path.len();
            if len > 0 {
                path.push(b'/');
            }
            match order {
                std::cmp::Ordering::Less => {
                    path.extend_from_slice(na.as_deref().unwrap_or_default());
                    self.side(&ea[i], path, Change::Removed)?;
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    path.extend_from_slice(nb.as_deref().unwrap_or_default());
                    self.side(&eb[j], path, Change::Added)?;
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    path.extend_from_slice(na.as_deref().unwrap_or_default());
                    self.both(&ea[i], &eb[j], path)?;
                    i += 1;
                    j += 1;
                }
            }
            path.truncate(len);
        }
        Ok(())
    }

    /// An entry on one side only, and everything under it.
    fn side(&mut self, e: &Entry, path: &mut Vec<u8>, change: Change) -> Result<(), CasError> {
        match &e.node {
            Node::Dir { tree } => {
                self.push(path, true, change);
                let t = Some(BlobId::from_hex(tree)?);
                match change {
                    Change::Added => self.trees(None, t, path),
                    _ => self.trees(t, None, path),
                }
            }
            _ => {
                self.push(path, false, change);
                Ok(())
            }
        }
    }

    fn both(&mut self, a: &Entry, b: &Entry, path: &mut Vec<u8>) -> Result<(), CasError> {
        match (&a.node, &b.node) {
            (Node::Dir { tree: x }, Node::Dir { tree: y }) => {
                if a.mode != b.mode {
                    self.push(path, true, Change::Changed);
                }
                self.trees(Some(BlobId::from_hex(x)?), Some(BlobId::from_hex(y)?), path)
            }
            (Node::Dir { .. }, _) | (_, Node::Dir { .. }) => {
                self.side(a, path, Change::Removed)?;
                self.side(b, path, Change::Added)
            }
            _ => {
                if a.node != b.node || a.mode != b.mode {
                    self.push(path, false, Change::Changed);
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
#[path = "archive_tests.rs"]
mod tests;
