//! A bot's Chrome profile on disk: where it lives, creating it, Chrome's `Singleton*` lock files
//! and the `DevToolsActivePort` an older guest's Chrome may have left (DevTools is a pipe now, so
//! nothing writes it any more; a stale one is only removed).
//!
//! The profile is keyed to the bot (`<home>/.browser-profiles/<sha256(bot id)[..32]>`,
//! docs/screens.md#chrome) and is never cloned, merged or deleted here: only the lock files and
//! the port file, which describe a Chrome process rather than the profile, are ever removed.
//!
//! It leaves to others: the Chrome process itself ([`super::Browser`]) and whether a pid is alive
//! ([`super::process`]).

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use gateway_proto::BotId;
use sha2::{Digest, Sha256};

use super::process;
use super::BrowserError;

/// The directory under the home that holds every bot's profile.
pub const PROFILES_DIR: &str = ".browser-profiles";

/// Chrome's profile lock: a symlink whose target is `<hostname>-<pid>`.
pub const SINGLETON_LOCK: &str = "SingletonLock";
/// Chrome's instance cookie: a symlink whose target is a random number.
pub const SINGLETON_COOKIE: &str = "SingletonCookie";
/// Chrome's "already running" socket: a symlink into a temporary directory.
pub const SINGLETON_SOCKET: &str = "SingletonSocket";
/// The file Chrome writes once a DevTools port listens. Ours never do (DevTools is a pipe); a
/// profile used by an older guest may still hold one, which is removed.
pub const DEVTOOLS_ACTIVE_PORT: &str = "DevToolsActivePort";

/// Chrome names the directory of its singleton socket `<tmp>/org.chromium.Chromium.XXXXXX`
/// (older builds put a dot in front).
const SOCKET_DIR_PREFIXES: [&str; 2] = ["org.chromium.Chromium.", ".org.chromium.Chromium."];

/// The profile directory of `bot` in `home_root`: `<home>/.browser-profiles/<first 32 hex chars
/// of sha256(bot id)>`. Pure: it neither reads nor creates anything (see [`ensure_profile_dir`]).
pub fn profile_dir(home_root: &Path, bot: &BotId) -> PathBuf {
    let digest = Sha256::digest(bot.as_str().as_bytes());
    let mut key = hex::encode(digest);
    key.truncate(32);
    home_root.join(PROFILES_DIR).join(key)
}

/// [`profile_dir`], created with mode 0700 (and `.browser-profiles` with it) when missing.
pub fn ensure_profile_dir(home_root: &Path, bot: &BotId) -> Result<PathBuf, BrowserError> {
    let profile = profile_dir(home_root, bot);
    create_profile(&profile)?;
    Ok(profile)
}

/// Creates `profile` and its parent with mode 0700 when missing. An existing profile is kept as
/// it is; one that is a symlink or not a directory is refused, so a profile can never be
/// redirected into another bot's.
pub(crate) fn create_profile(profile: &Path) -> Result<(), BrowserError> {
    let err = |source| BrowserError::ProfileDir {
        profile: profile.to_path_buf(),
        source,
    };
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true).mode(0o700);
    builder.create(profile).map_err(err)?;
    let meta = fs::symlink_metadata(profile).map_err(err)?;
    if !meta.is_dir() {
        return Err(err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the profile path is a symlink or not a directory",
        )));
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("the profile is owned by uid {}", meta.uid()),
        )));
    }
    Ok(())
}

/// Who holds a profile's `SingletonLock`, as Chrome wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LockHolder {
    /// No lock.
    None,
    /// `<hostname>-<pid>`.
    Process { host: String, pid: i32 },
    /// A lock we cannot read as Chrome's (not a symlink, or a target that does not parse).
    Unreadable,
}

pub(crate) fn read_lock(profile: &Path) -> io::Result<LockHolder> {
    match fs::read_link(profile.join(SINGLETON_LOCK)) {
        Ok(target) => Ok(parse_lock_target(&target.to_string_lossy())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(LockHolder::None),
        // EINVAL: it exists but is not a symlink.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(LockHolder::Unreadable),
        Err(e) => Err(e),
    }
}

fn parse_lock_target(target: &str) -> LockHolder {
    // Hostnames may contain '-', pids may not: split at the last one.
    match target.rsplit_once('-') {
        Some((host, pid)) if !host.is_empty() => match pid.parse::<i32>() {
            Ok(pid) if pid > 0 => LockHolder::Process {
                host: host.to_owned(),
                pid,
            },
            _ => LockHolder::Unreadable,
        },
        _ => LockHolder::Unreadable,
    }
}

/// Makes the profile startable: refuses it while the process named by its `SingletonLock` runs
/// on this host, and otherwise removes a stale lock (a dead pid, a pid reused by a process that
/// started after the lock was written, another host's lock, or one we cannot read) with the
/// other `Singleton*` files, and a stale `DevToolsActivePort`.
///
/// Another host's lock counts as stale because the home (and so the profile) moves between
/// machines with the bot, and only this agent starts Chrome on it here.
pub(crate) fn clear_stale_locks(profile: &Path, hostname: &str) -> Result<(), BrowserError> {
    let lock_err = |source| BrowserError::ProfileLock {
        profile: profile.to_path_buf(),
        source,
    };
    match read_lock(profile).map_err(lock_err)? {
        LockHolder::Process { host, pid } if host == hostname && holder_alive(profile, pid) => {
            return Err(BrowserError::ProfileInUse {
                profile: profile.to_path_buf(),
                pid,
            });
        }
        LockHolder::None => {}
        stale => {
            tracing::info!(profile = %profile.display(), holder = ?stale, "removing a stale chrome profile lock");
        }
    }
    remove_singletons(profile).map_err(lock_err)?;
    remove_if_present(&profile.join(DEVTOOLS_ACTIVE_PORT)).map_err(lock_err)
}

/// Whether the lock's `pid` may still be the process that wrote it: it runs, and it did not
/// start after the lock was written. Pids repeat after a container restart or a reboot with the
/// same hostname (in a container they even repeat in the same order), and a stranger holding
/// an old Chrome's pid must not lock the profile forever. Chrome writes the lock within a second
/// of starting; the margin covers the coarse clocks of `/proc`.
fn holder_alive(profile: &Path, pid: i32) -> bool {
    const MARGIN: Duration = Duration::from_secs(5);
    if !process::pid_alive(pid) {
        return false;
    }
    let written = fs::symlink_metadata(profile.join(SINGLETON_LOCK)).and_then(|m| m.modified());
    match written {
        Ok(written) => !process::started_after(pid, written + MARGIN),
        Err(_) => true,
    }
}

/// Removes `SingletonLock`, `SingletonCookie` and `SingletonSocket` from the profile, and the
/// temporary directory the socket link points into when it is Chrome's.
pub(crate) fn remove_singletons(profile: &Path) -> io::Result<()> {
    let socket_link = profile.join(SINGLETON_SOCKET);
    if let Ok(target) = fs::read_link(&socket_link) {
        remove_socket_dir(&target);
    }
    for name in [SINGLETON_LOCK, SINGLETON_COOKIE, SINGLETON_SOCKET] {
        remove_if_present(&profile.join(name))?;
    }
    Ok(())
}

/// Best effort: a crashed Chrome leaves `<tmp>/org.chromium.Chromium.XXXXXX/{SingletonSocket,
/// SingletonCookie}` behind. Only a directory with Chrome's name is touched, and only those two
/// entries and the then-empty directory are removed, so a link pointing elsewhere deletes
/// nothing of value.
fn remove_socket_dir(socket: &Path) {
    let Some(dir) = socket.parent() else { return };
    let is_chromes = dir
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| SOCKET_DIR_PREFIXES.iter().any(|p| n.starts_with(p)));
    if !is_chromes || socket.file_name().and_then(|n| n.to_str()) != Some(SINGLETON_SOCKET) {
        return;
    }
    for name in [SINGLETON_SOCKET, SINGLETON_COOKIE] {
        let _ = remove_if_present(&dir.join(name));
    }
    // Fails, harmlessly, when something else is inside.
    let _ = fs::remove_dir(dir);
}

pub(crate) fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    #[test]
    fn profile_dir_is_keyed_by_the_bot_id_hash() {
        let bot = BotId::new("alpha").unwrap();
        let dir = profile_dir(Path::new("/home/u"), &bot);
        // sha256("alpha") = 8ed3f6ad685b959ead7022518e1af76cd816f8e8ec7ccdda1ed4018e8f2223f8
        assert_eq!(
            dir,
            Path::new("/home/u/.browser-profiles/8ed3f6ad685b959ead7022518e1af76c")
        );
        let other = profile_dir(Path::new("/home/u"), &BotId::new("beta").unwrap());
        assert_ne!(dir, other);
    }

    #[test]
    fn profile_is_created_private_and_kept() {
        let home = tempfile::tempdir().unwrap();
        let bot = BotId::new("bot-1").unwrap();
        let profile = ensure_profile_dir(home.path(), &bot).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&profile), 0o700);
        assert_eq!(mode(&home.path().join(PROFILES_DIR)), 0o700);
        fs::write(profile.join("Cookies"), "x").unwrap();
        assert_eq!(ensure_profile_dir(home.path(), &bot).unwrap(), profile);
        assert_eq!(fs::read_to_string(profile.join("Cookies")).unwrap(), "x");
    }

    #[test]
    fn a_symlinked_profile_is_refused() {
        let home = tempfile::tempdir().unwrap();
        let bot = BotId::new("bot-1").unwrap();
        let elsewhere = home.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        let profile = profile_dir(home.path(), &bot);
        fs::create_dir_all(profile.parent().unwrap()).unwrap();
        symlink(&elsewhere, &profile).unwrap();
        let err = ensure_profile_dir(home.path(), &bot).unwrap_err();
        assert!(matches!(err, BrowserError::ProfileDir { .. }), "{err}");
    }

    #[test]
    fn lock_targets_parse_like_chrome_writes_them() {
        assert_eq!(
            parse_lock_target("my-host-1234"),
            LockHolder::Process {
                host: "my-host".into(),
                pid: 1234
            }
        );
        assert_eq!(parse_lock_target("host-"), LockHolder::Unreadable);
        assert_eq!(parse_lock_target("-12"), LockHolder::Unreadable);
        assert_eq!(parse_lock_target("host-x"), LockHolder::Unreadable);
        assert_eq!(parse_lock_target("host-0"), LockHolder::Unreadable);
        assert_eq!(parse_lock_target("nonsense"), LockHolder::Unreadable);
    }

    #[test]
    fn stale_locks_are_removed_and_live_ones_refuse() {
        let profile = tempfile::tempdir().unwrap();
        let p = profile.path();
        let me = std::process::id();
        // A live pid on this host refuses and leaves everything in place.
        symlink(format!("here-{me}"), p.join(SINGLETON_LOCK)).unwrap();
        symlink("123", p.join(SINGLETON_COOKIE)).unwrap();
        let err = clear_stale_locks(p, "here").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("profile {} is in use by pid {me}", p.display())
        );
        assert!(fs::symlink_metadata(p.join(SINGLETON_LOCK)).is_ok());
        // The same pid named by a lock written long before this process started: reused.
        let old = nix::sys::time::TimeVal::new(1_000_000_000, 0);
        nix::sys::stat::lutimes(&p.join(SINGLETON_LOCK), &old, &old).unwrap();
        clear_stale_locks(p, "here").unwrap();
        assert!(fs::symlink_metadata(p.join(SINGLETON_LOCK)).is_err());
        symlink(format!("here-{me}"), p.join(SINGLETON_LOCK)).unwrap();
        // The same pid on another host is stale.
        clear_stale_locks(p, "elsewhere").unwrap();
        assert!(fs::symlink_metadata(p.join(SINGLETON_LOCK)).is_err());
        assert!(fs::symlink_metadata(p.join(SINGLETON_COOKIE)).is_err());
        // A regular file is not Chrome's lock: stale.
        fs::write(p.join(SINGLETON_LOCK), "junk").unwrap();
        fs::write(p.join(DEVTOOLS_ACTIVE_PORT), "1\n/devtools/browser/x").unwrap();
        clear_stale_locks(p, "here").unwrap();
        assert!(fs::symlink_metadata(p.join(SINGLETON_LOCK)).is_err());
        assert!(fs::symlink_metadata(p.join(DEVTOOLS_ACTIVE_PORT)).is_err());
    }

    #[test]
    fn socket_dirs_of_chrome_are_removed_and_others_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let profile = tmp.path().join("profile");
        fs::create_dir(&profile).unwrap();
        let chrome_dir = tmp.path().join("org.chromium.Chromium.abc123");
        fs::create_dir(&chrome_dir).unwrap();
        fs::write(chrome_dir.join(SINGLETON_SOCKET), "").unwrap();
        symlink(
            chrome_dir.join(SINGLETON_SOCKET),
            profile.join(SINGLETON_SOCKET),
        )
        .unwrap();
        remove_singletons(&profile).unwrap();
        assert!(!chrome_dir.exists());

        let other = tmp.path().join("precious");
        fs::create_dir(&other).unwrap();
        fs::write(other.join(SINGLETON_SOCKET), "").unwrap();
        symlink(other.join(SINGLETON_SOCKET), profile.join(SINGLETON_SOCKET)).unwrap();
        remove_singletons(&profile).unwrap();
        assert!(other.join(SINGLETON_SOCKET).exists());
        assert!(fs::symlink_metadata(profile.join(SINGLETON_SOCKET)).is_err());
    }
}
