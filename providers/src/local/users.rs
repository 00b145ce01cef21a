//! The unprivileged system user of each local computer, when the control plane runs as root.
//!
//! A computer's user is named from its id (`rkz-<the id's 16 hex digits>` for the control
//! plane's `c-<16 hex>` ids, else `rkz-<last 16 characters>-<8 hex of a hash>`), so a restarted
//! control plane finds it again; its home directory in the passwd database is the computer's
//! home, which is how a user is recognised as ours (a same-named user with another home is
//! someone else's and is never used or deleted). The uid is picked from a dedicated range
//! ([`UID_BASE`] + a hash of the id, probing upwards past any uid or gid already taken), created
//! with `useradd` (own group, no password, no home creation, no lastlog entry) and removed with
//! `userdel`. `useradd` and `userdel` lock the passwd files themselves; creations by this process
//! are serialised so two computers never race for the same free uid.

use crate::ProviderError;
use nix::unistd::{Gid, Group, Uid, User};
use std::path::Path;
use tokio::process::Command;

/// Start of the uids of local computers: far above login users (1000..60000) and the usual
/// container sub-uid ranges' start (100000).
pub(crate) const UID_BASE: u32 = 2_000_000;
/// Width of the range the hash picks a starting uid in.
const UID_SPAN: u32 = 1_000_000;
/// How many uids are probed past the preferred one before giving up.
const UID_PROBES: u32 = 4096;

/// A computer's user as the passwd database has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ComputerUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// 64-bit FNV-1a: a stable hash (the name and uid must not change between releases).
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The user name of a computer: at most 29 characters, lowercase, starting with a letter.
pub(crate) fn user_name(computer: &str) -> String {
    let canonical = computer.strip_prefix("c-").filter(|hex| {
        hex.len() == 16
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if let Some(hex) = canonical {
        return format!("rkz-{hex}");
    }
    let chars: Vec<char> = computer.chars().collect();
    let tail: String = chars[chars.len().saturating_sub(16)..]
        .iter()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-' | '_') => c,
            _ => '_',
        })
        .collect();
    format!("rkz-{tail}-{:08x}", fnv1a(computer) as u32)
}

/// The first uid tried for a computer.
pub(crate) fn preferred_uid(computer: &str) -> u32 {
    UID_BASE + (fnv1a(computer) % u64::from(UID_SPAN)) as u32
}

/// The first uid from the preferred one up that `taken` does not claim.
pub(crate) fn choose_uid(computer: &str, taken: impl Fn(u32) -> bool) -> Option<u32> {
    let start = preferred_uid(computer);
    (0..UID_PROBES)
        .map(|i| UID_BASE + (start - UID_BASE + i) % UID_SPAN)
        .find(|uid| !taken(*uid))
}

/// Whether a uid (or the same-numbered gid, which its own group gets) is in use.
fn id_taken(id: u32) -> bool {
    User::from_uid(Uid::from_raw(id)).ok().flatten().is_some()
        || Group::from_gid(Gid::from_raw(id)).ok().flatten().is_some()
}

/// The computer's user, if it exists and is ours (its passwd home is `home`).
pub(crate) fn lookup(computer: &str, home: &Path) -> Result<Option<ComputerUser>, ProviderError> {
    let name = user_name(computer);
    let user = User::from_name(&name)
        .map_err(|e| ProviderError::io(format!("look up user {name}"), std::io::Error::from(e)))?;
    match user {
        None => Ok(None),
        Some(u) if u.dir == home => Ok(Some(ComputerUser {
            name: u.name,
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
        })),
        Some(u) => Err(ProviderError::BadSpec(format!(
            "user {name} exists with home {} instead of {}: it is not computer {computer}'s",
            u.dir.display(),
            home.display()
        ))),
    }
}

/// Serialises this process's `useradd`s (the free uid is decided before the call).
static CREATE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The computer's user, created if missing.
pub(crate) async fn ensure(computer: &str, home: &Path) -> Result<ComputerUser, ProviderError> {
    if let Some(u) = lookup(computer, home)? {
        return Ok(u);
    }
    let _one_at_a_time = CREATE.lock().await;
    let name = user_name(computer);
    let mut tried = Vec::new();
    loop {
        if let Some(u) = lookup(computer, home)? {
            return Ok(u);
        }
        let Some(uid) = choose_uid(computer, |id| tried.contains(&id) || id_taken(id)) else {
            return Err(ProviderError::Capacity(format!(
                "no free uid for computer {computer} near {}",
                preferred_uid(computer)
            )));
        };
        tried.push(uid);
        let out = Command::new("useradd")
            .args(["--uid", &uid.to_string()])
            // Its own group, numbered as the uid (login.defs would pick a login-range gid).
            .arg("--user-group")
            .args([
                "-K",
                &format!("GID_MIN={uid}"),
                "-K",
                &format!("GID_MAX={uid}"),
            ])
            // The uid is deliberately outside login.defs' range; say so, so useradd needn't.
            .args([
                "-K",
                &format!("UID_MIN={uid}"),
                "-K",
                &format!("UID_MAX={uid}"),
            ])
            .args(["--no-create-home", "--no-log-init", "--shell", "/bin/bash"])
            .arg("--home-dir")
            .arg(home)
            .args(["--comment", &format!("rakazo computer {computer}")])
            .arg(&name)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .output()
            .await
            .map_err(|e| ProviderError::io("run useradd", e))?;
        match out.status.code() {
            Some(0) => {}
            // 4: the uid or gid was taken meanwhile (another control plane); try the next one.
            Some(4) if tried.len() < 16 => continue,
            // 9: the name exists: created meanwhile; the lookup above decides whose it is.
            Some(9) => {}
            _ => {
                return Err(ProviderError::Unavailable {
                    context: format!("useradd {name} (uid {uid})"),
                    message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
                })
            }
        }
        return lookup(computer, home)?.ok_or_else(|| ProviderError::Unavailable {
            context: format!("useradd {name}"),
            message: "the user is missing right after its creation".into(),
        });
    }
}

/// Removes the computer's user (and its own group); a user already gone is fine, and a
/// same-named user that is not this computer's is left alone.
pub(crate) async fn remove(computer: &str, home: &Path) -> Result<(), ProviderError> {
    let Some(user) = lookup(computer, home)? else {
        return Ok(());
    };
    // userdel refuses while the user has processes: kill whatever escaped the guest's tree,
    // and give the kernel a moment to let them go.
    kill_all(user.uid);
    for _ in 0..100 {
        if processes_of(user.uid).is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let out = Command::new("userdel")
        .arg(&user.name)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .await
        .map_err(|e| ProviderError::io("run userdel", e))?;
    match out.status.code() {
        // 6: no such user (removed meanwhile).
        Some(0 | 6) => Ok(()),
        _ => Err(ProviderError::Unavailable {
            context: format!("userdel {}", user.name),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        }),
    }
}

/// SIGKILLs every process whose real or effective uid is `uid` (commands that left the
/// guest's process tree, e.g. daemonised ones). Never called for uids outside our range.
pub(crate) fn kill_all(uid: u32) {
    if uid < UID_BASE {
        return;
    }
    for pid in processes_of(uid) {
        crate::process::signal(pid, libc::SIGKILL);
    }
}

/// Processes whose real or effective uid is `uid` (the `Uid:` line of `/proc/<pid>/status`).
pub(crate) fn processes_of(uid: u32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
                return false;
            };
            status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .is_some_and(|ids| ids.split_whitespace().take(2).any(|v| v.parse() == Ok(uid)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_deterministic_short_and_valid() {
        assert_eq!(user_name("c-0123456789abcdef"), "rkz-0123456789abcdef");
        let odd = user_name("My.Computer_With-A-Very-Long-Name-2024");
        assert_eq!(odd, user_name("My.Computer_With-A-Very-Long-Name-2024"));
        assert!(odd.starts_with("rkz-y-long-name-2024-"), "{odd}");
        // Ids that share their last 16 characters, or differ only in case, get other names.
        assert_ne!(user_name("a-ong-name-2024"), user_name("b-ong-name-2024"));
        assert_ne!(
            user_name("c-ABCDEF0123456789"),
            user_name("c-abcdef0123456789")
        );
        for id in [
            "c-0123456789abcdef",
            "x",
            "A.B",
            &"z".repeat(128),
            "c-0123456789ABCDEF",
        ] {
            let n = user_name(id);
            assert!(n.len() <= 32, "{n}");
            assert!(n
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_'));
        }
    }

    #[test]
    fn the_uid_is_the_preferred_one_unless_taken_and_stays_in_range() {
        let id = "c-0123456789abcdef";
        let first = preferred_uid(id);
        assert!((UID_BASE..UID_BASE + UID_SPAN).contains(&first));
        assert_eq!(preferred_uid(id), first, "stable");
        assert_eq!(choose_uid(id, |_| false), Some(first));
        let next = |u: u32| UID_BASE + (u + 1 - UID_BASE) % UID_SPAN;
        assert_eq!(
            choose_uid(id, |u| u == first || u == next(first)),
            Some(next(next(first)))
        );
        // Probing wraps around the range's end and never leaves the range.
        let last = UID_BASE + UID_SPAN - 1;
        let wraps = (0..u32::MAX)
            .map(|i| format!("c-{i:016x}"))
            .find(|id| preferred_uid(id) > last - 8)
            .unwrap();
        let got = choose_uid(&wraps, |u| u >= preferred_uid(&wraps)).unwrap();
        assert_eq!(got, UID_BASE);
        assert_eq!(choose_uid(id, |_| true), None);
        assert!(!id_taken(UID_BASE + UID_SPAN + 12345));
        assert!(id_taken(0), "root");
    }
}
