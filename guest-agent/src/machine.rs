//! What `Status` reports beyond uptime and load: the machine's memory and the home's disk use.
//!
//! - **Memory**: `MemTotal` and `MemAvailable` of `/proc/meminfo`; in a container the cgroup
//!   (v2) limit is the machine's real size, so when this process's cgroup
//!   (`/proc/self/cgroup`, `0::<path>`) has a `memory.max` below `MemTotal`, the total is that
//!   limit and the available memory is the limit minus `memory.current` less its reclaimable
//!   page cache (`inactive_file` of `memory.stat`), as `docker stats` counts it.
//! - **Home use**: the allocated blocks of the home's own files, from a walk that never follows a
//!   symlink, never leaves the home's filesystem and stops after [`MAX_WALK_ENTRIES`] entries
//!   (then the figure is a lower bound, reported as partial); its result is kept for
//!   [`HOME_USE_TTL_MS`], so showing a computer often never walks a big home more than that
//!   often. `statvfs` is not used for it: the home shares its filesystem with the host on local
//!   computers and with every volume on docker.

use crate::clock::now_ms;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Most entries one walk of the home looks at.
pub const MAX_WALK_ENTRIES: u64 = 200_000;
/// How long a walk's result is reused.
pub const HOME_USE_TTL_MS: i64 = 10_000;

/// Memory as `Status` reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Memory {
    pub total: u64,
    pub available: u64,
    /// The total is a cgroup limit.
    pub limited: bool,
}

/// A `kB` field of `/proc/meminfo`, in bytes.
fn meminfo_field(meminfo: &str, name: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?.strip_prefix(':')?;
        let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kb.saturating_mul(1024))
    })
}

/// A field of a cgroup's `memory.stat` (bytes).
fn stat_field(stat: &str, name: &str) -> Option<u64> {
    stat.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok())?
    })
}

/// Memory from `/proc/meminfo` and, when there is one, the cgroup's `memory.max`,
/// `memory.current` and `memory.stat` (pure).
pub fn memory_of(
    meminfo: &str,
    max: Option<&str>,
    current: Option<&str>,
    stat: Option<&str>,
) -> Option<Memory> {
    let total = meminfo_field(meminfo, "MemTotal")?;
    let available = meminfo_field(meminfo, "MemAvailable")
        .or_else(|| meminfo_field(meminfo, "MemFree"))
        .unwrap_or(0)
        .min(total);
    let host = Memory {
        total,
        available,
        limited: false,
    };
    // "max" (no limit) does not parse: the host's figures stand.
    let Some(limit) = max.and_then(|m| m.trim().parse::<u64>().ok()) else {
        return Some(host);
    };
    if limit >= total {
        return Some(host);
    }
    let current: u64 = current.and_then(|c| c.trim().parse().ok()).unwrap_or(0);
    let cache = stat
        .and_then(|s| stat_field(s, "inactive_file"))
        .unwrap_or(0);
    let used = current.saturating_sub(cache);
    Some(Memory {
        total: limit,
        available: limit.saturating_sub(used).min(available),
        limited: true,
    })
}

/// This process's cgroup (v2) directory.
fn own_cgroup() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let rel = path.trim().trim_start_matches('/');
    Some(Path::new("/sys/fs/cgroup").join(rel))
}

/// The machine's memory now.
pub fn memory() -> Option<Memory> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let cg = own_cgroup();
    let read = |f: &str| {
        cg.as_ref()
            .and_then(|d| std::fs::read_to_string(d.join(f)).ok())
    };
    memory_of(
        &meminfo,
        read("memory.max").as_deref(),
        read("memory.current").as_deref(),
        read("memory.stat").as_deref(),
    )
}

/// What a walk of the home found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HomeUse {
    pub bytes: u64,
    /// Stopped at the bound: `bytes` is a lower bound.
    pub partial: bool,
}

/// Walks `root` (see the module doc), looking at most at `max_entries` entries.
pub fn walk(root: &Path, max_entries: u64) -> HomeUse {
    let Ok(top) = std::fs::symlink_metadata(root) else {
        return HomeUse::default();
    };
    let dev = top.dev();
    let mut used = HomeUse {
        bytes: top.blocks().saturating_mul(512),
        partial: false,
    };
    let mut seen = 1u64;
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if seen >= max_entries {
                used.partial = true;
                return used;
            }
            seen += 1;
            // `DirEntry::metadata` does not follow symlinks.
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.dev() != dev {
                continue;
            }
            used.bytes = used.bytes.saturating_add(meta.blocks().saturating_mul(512));
            if meta.is_dir() {
                dirs.push(entry.path());
            }
        }
    }
    used
}

/// The home's use, walked at most once per [`HOME_USE_TTL_MS`].
#[derive(Debug)]
pub struct HomeUseCache {
    root: PathBuf,
    last: Mutex<Option<(i64, HomeUse)>>,
}

impl HomeUseCache {
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            last: Mutex::new(None),
        }
    }

    /// The home's use (walks when the last walk is older than the TTL: call off the async
    /// threads).
    pub fn get(&self) -> HomeUse {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let now = now_ms();
        if let Some((at, u)) = *last {
            if now.saturating_sub(at) < HOME_USE_TTL_MS {
                return u;
            }
        }
        let u = walk(&self.root, MAX_WALK_ENTRIES);
        *last = Some((now_ms(), u));
        u
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str =
        "MemTotal:        8000000 kB\nMemFree:          100000 kB\nMemAvailable:    3000000 kB\n";

    #[test]
    fn host_memory_without_a_limit() {
        let m = memory_of(MEMINFO, Some("max\n"), Some("123"), None).unwrap();
        assert_eq!(
            m,
            Memory {
                total: 8_000_000 * 1024,
                available: 3_000_000 * 1024,
                limited: false
            }
        );
        assert_eq!(memory_of(MEMINFO, None, None, None), Some(m));
        assert_eq!(memory_of("nonsense", None, None, None), None);
    }

    #[test]
    fn a_cgroup_limit_is_the_machine_size() {
        let gib = 1u64 << 30;
        let stat = format!("anon 5\ninactive_file {}\nactive_file 9\n", gib / 4);
        let m = memory_of(
            MEMINFO,
            Some(&format!("{}\n", gib)),
            Some(&format!("{}\n", gib / 2)),
            Some(&stat),
        )
        .unwrap();
        // Half used, a quarter of it reclaimable cache: three quarters available.
        assert_eq!(
            m,
            Memory {
                total: gib,
                available: gib * 3 / 4,
                limited: true
            }
        );
    }

    #[test]
    fn the_walk_counts_files_skips_symlinks_and_stops_at_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/big"), vec![7u8; 1 << 20]).unwrap();
        std::os::unix::fs::symlink("/usr", root.join("link")).unwrap();
        let all = walk(root, MAX_WALK_ENTRIES);
        assert!(!all.partial);
        assert!(all.bytes >= 1 << 20, "{all:?}");
        // A symlink to /usr adds a symlink's size, not /usr's.
        assert!(all.bytes < (1 << 20) + (1 << 16), "{all:?}");
        let cut = walk(root, 2);
        assert!(cut.partial, "{cut:?}");
    }
}
