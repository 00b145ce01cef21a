//! A home's repository: its revisions, and the snapshot and restore of a directory.
//!
//! A snapshot walks the directory without following symlinks. A regular file whose size, mtime
//! and mode equal its entry in the parent revision keeps that entry's chunks without being read
//! (the parent's tree is the metadata cache); any other file is chunked and each chunk whose id
//! the repository lacks is sealed into the pack being written. Trees are written bottom-up, so
//! an unchanged directory is its old tree blob again. Packs, then one index file of them, then
//! the revision: a snapshot that fails midway leaves every earlier revision whole.

use super::blobs::BlobStore;
use super::pack::{self, Loc, Pack, PackWriter};
use super::tree::{plain_name, Entry, Node, Tree};
use super::{chunk, BlobId, BlobKind, CasError, CasKeys};
use serde::{Deserialize, Serialize};
use sha2::Digest;
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// Why a revision was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    RunEnd,
    Stop,
    Idle,
    Manual,
    Fork,
    Restore,
    Maintenance,
}

/// A revision as stored in `revisions/<n>` (sealed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevisionInfo {
    pub revision: u64,
    pub parent: Option<u64>,
    /// The root directory's tree id (hex).
    pub root: String,
    pub at_ms: i64,
    pub cause: Cause,
    /// Regular files, and their bytes in all.
    pub files: u64,
    pub size: u64,
    /// New blobs this revision stored, their plaintext bytes, and the bytes of packs and
    /// index written for it (what it uploaded).
    pub new_blobs: u64,
    pub new_bytes: u64,
    pub stored_bytes: u64,
    /// Files whose content was read (not found unchanged in the parent).
    pub files_read: u64,
    /// The token of the guest export it was made from (hex): the next export names it to send
    /// only what changed since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export: Option<String>,
}

/// What a snapshot is asked to do.
pub struct Snapshot<'a> {
    pub dir: &'a Path,
    pub cause: Cause,
    pub at_ms: i64,
}

pub struct Repo<S: BlobStore> {
    store: S,
    keys: CasKeys,
    index: HashMap<BlobId, Loc>,
    /// The packs read last, newest first (at most [`PACKS_CACHED`]): a file's chunks are mostly
    /// in one pack, one after another, and the tree naming them in the same or the next one.
    last_pack: std::sync::Mutex<std::collections::VecDeque<CachedPack>>,
}

/// Packs a repository keeps in memory while it reads (about 16 MiB each).
pub const PACKS_CACHED: usize = 4;

/// A pack's name and bytes.
type CachedPack = ([u8; 32], std::sync::Arc<Vec<u8>>);

fn revision_name(n: u64) -> String {
    format!("revisions/{n:020}")
}

/// The id a revision's seal is bound to: its number.
fn revision_aad(n: u64) -> [u8; 32] {
    let mut id = [0; 32];
    id[24..].copy_from_slice(&n.to_be_bytes());
    id
}

fn mtime_ns(m: &std::fs::Metadata) -> i64 {
    m.mtime()
        .saturating_mul(1_000_000_000)
        .saturating_add(m.mtime_nsec())
}

fn at(path: &Path) -> impl FnOnce(std::io::Error) -> CasError + '_ {
    move |source| CasError::Path {
        path: path.display().to_string(),
        source,
    }
}

/// A snapshot in progress: the pack being filled and what it added.
pub(super) struct Writing<'r, S: BlobStore> {
    repo: &'r mut Repo<S>,
    packer: PackWriter,
    packs: Vec<Pack>,
    written: u64,
    pub(super) info: RevisionInfo,
}

impl<S: BlobStore> Writing<'_, S> {
    pub(super) fn repo(&self) -> &Repo<S> {
        self.repo
    }

    /// Ends the snapshot whose root tree is `root`: the last pack, one index file of the packs
    /// it wrote, then the revision (the commit point). On an error nothing names what it
    /// wrote, and every earlier revision stays whole.
    pub(super) fn finish(
        mut self,
        root: Result<BlobId, CasError>,
    ) -> Result<RevisionInfo, CasError> {
        let root = root.and_then(|root| {
            if let Some(p) = self.packer.finish() {
                self.flush(p)?;
            }
            Ok(root)
        });
        let root = match root {
            Ok(root) => root,
            Err(e) => {
                // What this snapshot only reserved in the index is forgotten.
                self.repo.index.retain(|_, l| l.pack != [0; 32]);
                return Err(e);
            }
        };
        let Writing {
            repo,
            packs,
            mut written,
            mut info,
            ..
        } = self;
        info.root = root.to_hex();
        if !packs.is_empty() {
            let (sealed, name) = pack::seal_index(&repo.keys.seal, &packs);
            repo.store
                .put(&format!("index/{}", hex::encode(name)), &sealed)?;
            written += sealed.len() as u64;
        }
        info.stored_bytes = written;
        let number = info.revision;
        let plain = serde_json::to_vec(&info).expect("a revision serializes");
        let sealed = pack::seal(&repo.keys.seal, 3, &revision_aad(number), &plain);
        repo.store.put(&revision_name(number), &sealed)?;
        Ok(info)
    }

    /// Stores `plain` as a blob unless the repository (or this snapshot) has it.
    pub(super) fn blob(&mut self, kind: BlobKind, plain: &[u8]) -> Result<BlobId, CasError> {
        let id = self.repo.keys.blob_id(plain);
        if self.repo.index.contains_key(&id) {
            return Ok(id);
        }
        self.info.new_blobs += 1;
        self.info.new_bytes += plain.len() as u64;
        if let Some(p) = self.packer.add(id, kind, plain) {
            self.flush(p)?;
        }
        // Known from now on, so a repeat within this snapshot is not stored twice; its
        // location is the pack's once the pack is cut.
        self.repo.index.entry(id).or_insert(Loc {
            pack: [0; 32],
            kind,
            offset: 0,
            len: 0,
        });
        Ok(id)
    }

    fn flush(&mut self, p: Pack) -> Result<(), CasError> {
        self.repo
            .store
            .put(&format!("packs/{}", hex::encode(p.name)), &p.bytes)?;
        self.written += p.bytes.len() as u64;
        for (id, loc) in &p.blobs {
            self.repo.index.insert(*id, *loc);
        }
        self.packs.push(Pack {
            name: p.name,
            bytes: Vec::new(),
            blobs: p.blobs,
        });
        Ok(())
    }

    /// The tree of `dir`, given its entry in the parent revision (the metadata cache). Under the
    /// browser profiles (`in_profiles`), the archive's skip lists apply: caches and locks are
    /// no part of a home.
    fn dir(
        &mut self,
        dir: &Path,
        parent: Option<&Tree>,
        root: bool,
        in_profiles: bool,
    ) -> Result<BlobId, CasError> {
        use crate::archive::{BROWSER_PROFILES_DIR, EXCLUDED_PROFILE_DIRS, EXCLUDED_PROFILE_FILES};
        let mut names = Vec::new();
        for e in std::fs::read_dir(dir).map_err(at(dir))? {
            let e = e.map_err(at(dir))?;
            let name = e.file_name().into_string().map_err(|n| {
                CasError::BadPath(format!(
                    "{}: a name that is not UTF-8: {n:?}",
                    dir.display()
                ))
            })?;
            names.push(name);
        }
        names.sort();
        let old: HashMap<&str, &Entry> = parent
            .map(|t| t.entries.iter().map(|e| (e.name.as_str(), e)).collect())
            .unwrap_or_default();
        let mut entries = Vec::with_capacity(names.len());
        for name in names {
            if !plain_name(&name) {
                return Err(CasError::BadPath(name));
            }
            let path = dir.join(&name);
            let m = std::fs::symlink_metadata(&path).map_err(at(&path))?;
            let mode = m.permissions().mode() & 0o7777;
            let mtime = mtime_ns(&m);
            let ft = m.file_type();
            if in_profiles
                && ((ft.is_dir() && EXCLUDED_PROFILE_DIRS.contains(&name.as_str()))
                    || (!ft.is_dir() && EXCLUDED_PROFILE_FILES.contains(&name.as_str())))
            {
                continue;
            }
            let node = if ft.is_dir() {
                let sub = match old.get(name.as_str()).map(|e| &e.node) {
                    Some(Node::Dir { tree }) => Some(self.repo.tree(BlobId::from_hex(tree)?)?),
                    _ => None,
                };
                let profiles = in_profiles || (root && name == BROWSER_PROFILES_DIR);
                Node::Dir {
                    tree: self.dir(&path, sub.as_ref(), false, profiles)?.to_hex(),
                }
            } else if ft.is_symlink() {
                let target = std::fs::read_link(&path).map_err(at(&path))?;
                let target = target.into_os_string().into_string().map_err(|t| {
                    CasError::BadPath(format!(
                        "{}: a target that is not UTF-8: {t:?}",
                        path.display()
                    ))
                })?;
                Node::Symlink { target }
            } else if ft.is_file() {
                self.info.files += 1;
                self.info.size += m.len();
                match old.get(name.as_str()) {
                    Some(Entry {
                        mode: om,
                        mtime_ns: ot,
                        node: Node::File { size, chunks },
                        ..
                    }) if *om == mode && *ot == mtime && *size == m.len() => Node::File {
                        size: *size,
                        chunks: chunks.clone(),
                    },
                    _ => self.file(&path, m.len())?,
                }
            } else {
                // Sockets, FIFOs and devices are not part of a home.
                continue;
            };
            entries.push(Entry {
                name,
                raw: None,
                mode,
                mtime_ns: mtime,
                node,
            });
        }
        let tree = Tree { entries }.encode();
        self.blob(BlobKind::Tree, &tree)
    }

    fn file(&mut self, path: &Path, expected: u64) -> Result<Node, CasError> {
        self.info.files_read += 1;
        let f = std::fs::File::open(path).map_err(at(path))?;
        let mut chunks = Vec::new();
        let mut size = 0u64;
        chunk::chunks(f.take(expected), |c| {
            size += c.len() as u64;
            chunks.push(self.blob(BlobKind::Data, c)?.to_hex());
            Ok(())
        })?;
        Ok(Node::File { size, chunks })
    }
}

impl<S: BlobStore> Repo<S> {
    /// Opens the repository in `store`: reads every index file.
    pub fn open(store: S, keys: CasKeys) -> Result<Self, CasError> {
        let mut index = HashMap::new();
        for name in store.list("index/")? {
            let hexname = name.trim_start_matches("index/");
            let id = BlobId::from_hex(hexname)?;
            let sealed = store.get(&name)?;
            for (blob, loc) in pack::open_index(&keys.seal, &id.0, &sealed)? {
                index.insert(blob, loc);
            }
        }
        Ok(Self {
            store,
            keys,
            index,
            last_pack: Default::default(),
        })
    }

    /// The repository's keys (a fork shares its parent's).
    pub fn keys(&self) -> &CasKeys {
        &self.keys
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    /// Every revision, oldest first.
    pub fn revisions(&self) -> Result<Vec<RevisionInfo>, CasError> {
        self.numbers()?
            .into_iter()
            .map(|n| self.revision(n))
            .collect()
    }

    /// The latest revision, reading only its own object.
    pub fn latest(&self) -> Result<Option<RevisionInfo>, CasError> {
        self.numbers()?.pop().map(|n| self.revision(n)).transpose()
    }

    /// The numbers of the stored revisions, in order.
    fn numbers(&self) -> Result<Vec<u64>, CasError> {
        let mut numbers = self
            .store
            .list("revisions/")?
            .iter()
            .map(|n| {
                n.trim_start_matches("revisions/")
                    .parse()
                    .map_err(|_| CasError::Corrupt(format!("a revision named {n:?}")))
            })
            .collect::<Result<Vec<u64>, _>>()?;
        numbers.sort_unstable();
        Ok(numbers)
    }

    pub fn revision(&self, n: u64) -> Result<RevisionInfo, CasError> {
        let sealed = match self.store.get(&revision_name(n)) {
            Ok(s) => s,
            Err(CasError::Path { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Err(CasError::NoRevision(n))
            }
            Err(e) => return Err(e),
        };
        let plain = pack::open(&self.keys.seal, 3, &revision_aad(n), &sealed)?;
        let info: RevisionInfo = serde_json::from_slice(&plain)
            .map_err(|e| CasError::Corrupt(format!("revision {n}: {e}")))?;
        if info.revision != n {
            return Err(CasError::Tampered(format!(
                "revision {n} says it is {}",
                info.revision
            )));
        }
        Ok(info)
    }

    /// The blob `id`, opened and checked.
    pub fn blob(&self, id: BlobId) -> Result<Vec<u8>, CasError> {
        let loc = self
            .index
            .get(&id)
            .ok_or_else(|| CasError::Corrupt(format!("no blob {}", id.to_hex())))?;
        let cached = self.last_pack.lock().ok().and_then(|c| {
            c.iter()
                .find(|(p, _)| *p == loc.pack)
                .map(|(_, b)| b.clone())
        });
        let bytes = match cached {
            Some(b) => b,
            None => {
                let b = self
                    .store
                    .get(&format!("packs/{}", hex::encode(loc.pack)))?;
                // A pack is named by its SHA-256: any change anywhere in it is refused, its
                // own index at the end included.
                let sum: [u8; 32] = sha2::Sha256::digest(&b).into();
                if sum != loc.pack {
                    return Err(CasError::Tampered(format!(
                        "pack {} does not hash to its name",
                        hex::encode(loc.pack)
                    )));
                }
                let b = std::sync::Arc::new(b);
                if let Ok(mut c) = self.last_pack.lock() {
                    c.push_front((loc.pack, b.clone()));
                    c.truncate(PACKS_CACHED);
                }
                b
            }
        };
        pack::read_blob(&self.keys, id, loc, &bytes)
    }

    pub fn tree(&self, id: BlobId) -> Result<Tree, CasError> {
        Tree::decode(&self.blob(id)?)
    }

    /// Takes a snapshot of `s.dir` as the next revision, its parent the latest one.
    pub fn snapshot(&mut self, s: Snapshot<'_>) -> Result<RevisionInfo, CasError> {
        let latest = self.latest()?;
        let parent_tree = match &latest {
            Some(r) => Some(self.tree(BlobId::from_hex(&r.root)?)?),
            None => None,
        };
        let mut w = self.begin(latest.as_ref(), s.cause, s.at_ms, 1);
        let root = w.dir(s.dir, parent_tree.as_ref(), true, false);
        w.finish(root)
    }

    /// Makes revision `n`'s content the next revision (for `cause`, at `at_ms`): a new revision
    /// naming the same root tree, which writes nothing but the revision itself.
    pub fn recommit(&mut self, n: u64, cause: Cause, at_ms: i64) -> Result<RevisionInfo, CasError> {
        let src = self.revision(n)?;
        self.commit_root(&src, cause, at_ms, 1)
    }

    /// Makes the content of `src` (a revision of this repository, or of the one it was forked
    /// from, whose blobs it shares) the next revision, numbered `first` in an empty repository.
    /// Every tree and chunk it names must be in this repository's index.
    pub fn commit_root(
        &mut self,
        src: &RevisionInfo,
        cause: Cause,
        at_ms: i64,
        first: u64,
    ) -> Result<RevisionInfo, CasError> {
        let root = BlobId::from_hex(&src.root)?;
        if !self.index.contains_key(&root) {
            return Err(CasError::Corrupt(format!(
                "the root tree of revision {} is not in this repository",
                src.revision
            )));
        }
        let latest = self.latest()?;
        let mut w = self.begin(latest.as_ref(), cause, at_ms, first);
        w.info.files = src.files;
        w.info.size = src.size;
        w.finish(Ok(root))
    }

    /// Starts writing the revision after `latest` (or `first` when there is none).
    pub(super) fn begin(
        &mut self,
        latest: Option<&RevisionInfo>,
        cause: Cause,
        at_ms: i64,
        first: u64,
    ) -> Writing<'_, S> {
        let number = latest.map_or(first.max(1), |r| r.revision + 1);
        let seal = self.keys.seal;
        Writing {
            repo: self,
            packer: PackWriter::new(seal),
            packs: Vec::new(),
            written: 0,
            info: RevisionInfo {
                revision: number,
                parent: latest.map(|r| r.revision),
                root: String::new(),
                at_ms,
                cause,
                files: 0,
                size: 0,
                new_blobs: 0,
                new_bytes: 0,
                stored_bytes: 0,
                files_read: 0,
                export: None,
            },
        }
    }

    /// Writes revision `n` into `dest` (an empty or missing directory): files byte-exact with
    /// their modes and mtimes, symlinks, empty directories, holes for all-zero chunks.
    pub fn restore(&self, n: u64, dest: &Path) -> Result<(), CasError> {
        let info = self.revision(n)?;
        std::fs::create_dir_all(dest).map_err(at(dest))?;
        self.restore_dir(BlobId::from_hex(&info.root)?, dest)
    }

    fn restore_dir(&self, tree: BlobId, dir: &Path) -> Result<(), CasError> {
        let tree = self.tree(tree)?;
        for e in &tree.entries {
            let path = dir.join(std::ffi::OsStr::from_bytes(&e.name_bytes()?));
            match &e.node {
                Node::Dir { tree } => {
                    std::fs::create_dir(&path).map_err(at(&path))?;
                    self.restore_dir(BlobId::from_hex(tree)?, &path)?;
                }
                Node::Symlink { target } => {
                    std::os::unix::fs::symlink(target, &path).map_err(at(&path))?;
                    continue;
                }
                Node::File { size, chunks } => {
                    let mut f = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&path)
                        .map_err(at(&path))?;
                    let mut written = 0u64;
                    for c in chunks {
                        let data = self.blob(BlobId::from_hex(c)?)?;
                        written += data.len() as u64;
                        if data.iter().all(|&b| b == 0) {
                            f.seek(SeekFrom::Current(data.len() as i64))
                                .map_err(at(&path))?;
                        } else {
                            f.write_all(&data).map_err(at(&path))?;
                        }
                    }
                    if written != *size {
                        return Err(CasError::Corrupt(format!(
                            "{}: chunks of {written} bytes for a file of {size}",
                            path.display()
                        )));
                    }
                    f.set_len(*size).map_err(at(&path))?;
                }
            }
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(e.mode))
                .map_err(at(&path))?;
            let t = nix::sys::time::TimeSpec::new(
                e.mtime_ns.div_euclid(1_000_000_000),
                e.mtime_ns.rem_euclid(1_000_000_000),
            );
            nix::sys::stat::utimensat(
                nix::fcntl::AT_FDCWD,
                &path,
                &t,
                &t,
                nix::sys::stat::UtimensatFlags::NoFollowSymlink,
            )
            .map_err(|e| at(&path)(std::io::Error::from(e)))?;
        }
        Ok(())
    }
}

/// Which revisions [`Repo::forget`] keeps: the `last` newest, and the newest of each of the
/// `hourly` newest hours and `daily` newest days that have one. The latest revision is always
/// kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Keep {
    pub last: usize,
    pub hourly: usize,
    pub daily: usize,
}

/// What [`Repo::prune`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PruneStats {
    pub packs_deleted: u64,
    pub packs_written: u64,
    pub blobs_kept: u64,
    pub blobs_dropped: u64,
    /// Bytes of the packs deleted, and of the packs written for the blobs they still held.
    pub bytes_deleted: u64,
    pub bytes_written: u64,
}

/// The revision numbers `keep` keeps of `revs` (any order).
pub fn kept(revs: &[RevisionInfo], keep: &Keep) -> std::collections::BTreeSet<u64> {
    let mut newest: Vec<&RevisionInfo> = revs.iter().collect();
    newest.sort_by_key(|r| std::cmp::Reverse((r.at_ms, r.revision)));
    let mut out = std::collections::BTreeSet::new();
    if let Some(latest) = revs.iter().map(|r| r.revision).max() {
        out.insert(latest);
    }
    out.extend(newest.iter().take(keep.last).map(|r| r.revision));
    for (period, count) in [(3_600_000i64, keep.hourly), (86_400_000, keep.daily)] {
        let mut seen = std::collections::HashSet::new();
        for r in &newest {
            if seen.len() == count {
                break;
            }
            if seen.insert(r.at_ms.div_euclid(period)) {
                out.insert(r.revision);
            }
        }
    }
    out
}

impl<S: BlobStore> Repo<S> {
    /// Deletes the revisions `keep` does not keep (their objects only: [`Repo::prune`] frees
    /// their data). Answers the revisions deleted.
    pub fn forget(&self, keep: &Keep) -> Result<Vec<u64>, CasError> {
        let revs = self.revisions()?;
        let kept = kept(&revs, keep);
        let mut gone = Vec::new();
        for r in revs.iter().filter(|r| !kept.contains(&r.revision)) {
            self.store.delete(&revision_name(r.revision))?;
            gone.push(r.revision);
        }
        Ok(gone)
    }

    /// Every blob the revisions reference: their trees and their files' chunks.
    fn reachable(&self) -> Result<std::collections::HashSet<BlobId>, CasError> {
        let mut seen = std::collections::HashSet::new();
        let mut todo: Vec<BlobId> = Vec::new();
        for r in self.revisions()? {
            todo.push(BlobId::from_hex(&r.root)?);
        }
        while let Some(t) = todo.pop() {
            if !seen.insert(t) {
                continue;
            }
            for e in self.tree(t)?.entries {
                match e.node {
                    Node::Dir { tree } => todo.push(BlobId::from_hex(&tree)?),
                    Node::File { chunks, .. } => {
                        for c in chunks {
                            seen.insert(BlobId::from_hex(&c)?);
                        }
                    }
                    Node::Symlink { .. } => {}
                }
            }
        }
        Ok(seen)
    }

    /// Frees what no revision references. Safe against a crash at any point, the order being:
    /// new packs with the still-referenced blobs of packs that also hold garbage; one new index
    /// of every pack that stays; then the old index files; then the old packs. A crash leaves
    /// either the old indexes (the new packs unreferenced, removed by the next prune) or the new
    /// one, and every referenced blob always in an indexed pack. A checkpoint must not run at
    /// the same time (the caller holds the home's lock): it could reuse a blob being dropped.
    pub fn prune(&mut self) -> Result<PruneStats, CasError> {
        let reachable = self.reachable()?;
        let mut stats = PruneStats::default();
        let mut by_pack: HashMap<[u8; 32], Vec<(BlobId, Loc)>> = HashMap::new();
        for (id, loc) in &self.index {
            by_pack.entry(loc.pack).or_default().push((*id, *loc));
        }
        let old_indexes = self.store.list("index/")?;
        let mut keep_packs: Vec<Pack> = Vec::new();
        let mut drop_packs: Vec<[u8; 32]> = Vec::new(); // emptied or rewritten
        let mut packer = PackWriter::new(self.keys.seal);
        let mut written: Vec<Pack> = Vec::new();
        for (pack_name, mut blobs) in by_pack {
            blobs.sort_by_key(|(_, l)| l.offset);
            let used = blobs
                .iter()
                .filter(|(id, _)| reachable.contains(id))
                .count();
            if used == blobs.len() {
                keep_packs.push(Pack {
                    name: pack_name,
                    bytes: Vec::new(),
                    blobs,
                });
                continue;
            }
            stats.blobs_dropped += (blobs.len() - used) as u64;
            for (id, loc) in blobs.iter().filter(|(id, _)| reachable.contains(id)) {
                let plain = self.blob(*id)?;
                if let Some(p) = packer.add(*id, loc.kind, &plain) {
                    self.put_pack(&p, &mut stats)?;
                    written.push(p);
                }
            }
            drop_packs.push(pack_name);
        }
        if let Some(p) = packer.finish() {
            self.put_pack(&p, &mut stats)?;
            written.push(p);
        }
        if !drop_packs.is_empty() {
            let all: Vec<Pack> = keep_packs.into_iter().chain(written).collect();
            let (sealed, name) = pack::seal_index(&self.keys.seal, &all);
            let new_index = format!("index/{}", hex::encode(name));
            self.store.put(&new_index, &sealed)?;
            for old in old_indexes.iter().filter(|o| **o != new_index) {
                self.store.delete(old)?;
            }
            self.index = all.iter().flat_map(|p| p.blobs.iter().copied()).collect();
        }
        // Last, every pack no index names: those just emptied or rewritten, and what a crashed
        // checkpoint or prune left (no checkpoint runs meanwhile: its packs are unindexed until
        // its end).
        let indexed: std::collections::HashSet<String> = self
            .index
            .values()
            .map(|l| format!("packs/{}", hex::encode(l.pack)))
            .collect();
        for name in self.store.list("packs/")? {
            if !indexed.contains(&name) {
                stats.bytes_deleted += self.store.get(&name).map(|b| b.len() as u64).unwrap_or(0);
                self.store.delete(&name)?;
                stats.packs_deleted += 1;
            }
        }
        stats.blobs_kept = self.index.len() as u64;
        Ok(stats)
    }

    fn put_pack(&self, p: &Pack, stats: &mut PruneStats) -> Result<(), CasError> {
        self.store
            .put(&format!("packs/{}", hex::encode(p.name)), &p.bytes)?;
        stats.packs_written += 1;
        stats.bytes_written += p.bytes.len() as u64;
        Ok(())
    }
}
