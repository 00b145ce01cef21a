//! Test helpers shared by this crate's tests and its users' (the control plane's round-trip
//! tests): a sample home with every kind of entry the contract names, a hash manifest to compare
//! trees, and a builder for hand-made (hostile) archives.
//!
//! Not for production code: it panics freely and trusts its inputs.

use crate::archive::{
    BROWSER_PROFILES_DIR, EXCLUDED_PROFILE_DIRS, EXCLUDED_PROFILE_FILES, FLAG_EXEC, MAGIC, TAG_DIR,
    TAG_END, TAG_FILE, VERSION,
};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

/// One entry of a [`manifest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManifestEntry {
    Dir,
    File {
        exec: bool,
        sha256: String,
    },
    /// A symlink, socket, FIFO or device (never restored).
    Other,
}

/// Deterministic pseudo-random bytes (xorshift), so binary test files need no RNG state.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn write(root: &Path, rel: &str, content: &[u8], exec: bool) -> io::Result<()> {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::write(&path, content)?;
    let mode = if exec { 0o755 } else { 0o644 };
    fs::set_permissions(&path, fs::Permissions::from_mode(mode))
}

/// Fills `root` with a home that has nested directories, binary files (one spanning several
/// 64 KiB segments), executables, empty directories, a bot's browser profile with every excluded
/// cache and lock, look-alikes of excluded names outside the profiles (which are kept), a
/// symlink pointing out of the home, and a FIFO.
pub fn write_sample_home(root: &Path) -> io::Result<()> {
    fs::create_dir_all(root)?;
    write(root, "notes.txt", b"hello home\n", false)?;
    write(root, "bin/run.sh", b"#!/bin/sh\necho hi\n", true)?;
    write(root, "bots/b1/data/blob.bin", &noise(300_000, 1), false)?;
    write(root, "bots/b1/data/empty.bin", b"", false)?;
    write(root, "bots/b1/deep/a/b/c/d/leaf", &noise(777, 2), false)?;
    write(root, "shared/tool", &noise(5000, 3), true)?;
    write(root, "name with spaces/ünïcode.txt", b"names", false)?;
    fs::create_dir_all(root.join("empty"))?;
    fs::create_dir_all(root.join("bots/b2/empty/nested"))?;
    // Excluded names outside .browser-profiles are ordinary files and directories.
    write(root, "Cache/kept.txt", b"not a browser cache", false)?;
    write(root, "lock", b"not a browser lock", false)?;
    let profile = format!("{BROWSER_PROFILES_DIR}/0123456789abcdef");
    write(
        root,
        &format!("{profile}/Default/Cookies"),
        &noise(4096, 4),
        false,
    )?;
    write(
        root,
        &format!("{profile}/Default/Preferences"),
        b"{}",
        false,
    )?;
    write(root, &format!("{profile}/Local State"), b"{}", false)?;
    for dir in EXCLUDED_PROFILE_DIRS {
        write(
            root,
            &format!("{profile}/Default/{dir}/data_0"),
            &noise(1000, 5),
            false,
        )?;
        write(root, &format!("{profile}/{dir}/index"), b"x", false)?;
    }
    for file in EXCLUDED_PROFILE_FILES {
        write(root, &format!("{profile}/{file}"), b"x", false)?;
        write(root, &format!("{profile}/Default/{file}"), b"x", false)?;
    }
    symlink("/etc/passwd", root.join("escape-link"))?;
    symlink("../..", root.join("bots/b1/up-link"))?;
    nix::unistd::mkfifo(
        &root.join("bots/b1/pipe"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .map_err(io::Error::from)?;
    Ok(())
}

/// Every entry under `root` (not following symlinks), by `/`-joined relative path.
pub fn manifest(root: &Path) -> io::Result<BTreeMap<String, ManifestEntry>> {
    let mut out = BTreeMap::new();
    walk(root, "", &mut out)?;
    Ok(out)
}

fn walk(dir: &Path, prefix: &str, out: &mut BTreeMap<String, ManifestEntry>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let meta = fs::symlink_metadata(entry.path())?;
        if meta.is_dir() {
            out.insert(rel.clone(), ManifestEntry::Dir);
            walk(&entry.path(), &rel, out)?;
        } else if meta.is_file() {
            let sha256 = hex::encode(Sha256::digest(fs::read(entry.path())?));
            let exec = meta.permissions().mode() & 0o111 != 0;
            out.insert(rel, ManifestEntry::File { exec, sha256 });
        } else {
            out.insert(rel, ManifestEntry::Other);
        }
    }
    Ok(())
}

/// What a checkpoint of a home with manifest `m` restores to: directories and regular files
/// only, without the browser-profile exclusions and anything under an excluded directory.
pub fn expected_after_restore(
    m: &BTreeMap<String, ManifestEntry>,
) -> BTreeMap<String, ManifestEntry> {
    let profiles = format!("{BROWSER_PROFILES_DIR}/");
    m.iter()
        .filter(|(path, entry)| {
            if **entry == ManifestEntry::Other {
                return false;
            }
            let Some(inside) = path.strip_prefix(&profiles) else {
                return true;
            };
            let parts: Vec<&str> = inside.split('/').collect();
            let (last, parents) = parts.split_last().unwrap_or((&"", &[]));
            let excluded_parent = parents.iter().any(|p| EXCLUDED_PROFILE_DIRS.contains(p));
            let excluded_self = match entry {
                ManifestEntry::Dir => EXCLUDED_PROFILE_DIRS.contains(last),
                _ => EXCLUDED_PROFILE_FILES.contains(last),
            };
            !excluded_parent && !excluded_self
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Builds archives byte by byte, valid or not.
#[derive(Debug, Clone)]
pub struct RawArchive {
    bytes: Vec<u8>,
    entries: u64,
    total: u64,
}

impl Default for RawArchive {
    fn default() -> Self {
        Self::new()
    }
}

impl RawArchive {
    /// Magic and version, no entries yet.
    pub fn new() -> Self {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&VERSION.to_be_bytes());
        Self {
            bytes,
            entries: 0,
            total: 0,
        }
    }

    pub fn dir(mut self, path: &[u8]) -> Self {
        self.bytes.push(TAG_DIR);
        self.bytes
            .extend_from_slice(&(path.len() as u16).to_be_bytes());
        self.bytes.extend_from_slice(path);
        self.entries += 1;
        self
    }

    pub fn file(mut self, path: &[u8], exec: bool, content: &[u8]) -> Self {
        self.bytes.push(TAG_FILE);
        self.bytes.push(if exec { FLAG_EXEC } else { 0 });
        self.bytes
            .extend_from_slice(&(path.len() as u16).to_be_bytes());
        self.bytes.extend_from_slice(path);
        self.bytes
            .extend_from_slice(&(content.len() as u64).to_be_bytes());
        self.bytes.extend_from_slice(content);
        self.entries += 1;
        self.total += content.len() as u64;
        self
    }

    /// Appends arbitrary bytes (a forged entry).
    pub fn raw(mut self, bytes: &[u8]) -> Self {
        self.bytes.extend_from_slice(bytes);
        self
    }

    /// Appends a correct end record.
    pub fn end(mut self) -> Vec<u8> {
        self.bytes.push(TAG_END);
        self.bytes.extend_from_slice(&self.entries.to_be_bytes());
        self.bytes.extend_from_slice(&self.total.to_be_bytes());
        self.bytes
    }

    /// The bytes so far, without an end record (a truncated archive).
    pub fn unfinished(self) -> Vec<u8> {
        self.bytes
    }
}

/// The s3s-fs binary the object-store tests run against, as `scripts/s3s-fs.sh path` reports it
/// (that script honours `RAKAZO_S3S_FS`, so the environment is read there, not here). The error
/// says how to install it.
pub fn s3s_fs_binary() -> Result<std::path::PathBuf, String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/s3s-fs.sh");
    let out = std::process::Command::new("bash")
        .args([script, "path"])
        .output()
        .map_err(|e| format!("cannot run scripts/s3s-fs.sh: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "the object-store tests need a real s3s-fs: run `bash scripts/s3s-fs.sh install` \
             (about 3-4 minutes) or set RAKAZO_S3S_FS to its path ({})",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let path = String::from_utf8(out.stdout).map_err(|e| e.to_string())?;
    Ok(std::path::PathBuf::from(path.trim()))
}
