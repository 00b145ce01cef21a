//! Who a terminal's shell runs as, where it starts and with what environment (contracts.md §7:
//! the workspace user, never root).
//!
//! A guest running as an ordinary user starts shells as itself. A guest running as root drops
//! to the workspace user: the configured uid/gid (`RAKAZO_WORKSPACE_UID`/`GID`), else the home's
//! owner if that is not root, else 1000:1000. The drop is done by util-linux `setpriv`
//! (`--reuid --regid --clear-groups`), which execs the shell: portable-pty spawns the child
//! itself and has no hook to change its ids. Without `setpriv` a root guest refuses to open a
//! terminal rather than give out a root shell.
//!
//! A uid without a passwd entry is called `rakazo` (`USER`, `LOGNAME`) for its own session only;
//! nothing is written to `/etc/passwd`.
//!
//! The home: `HOME` is always the computer's home. When the workspace user cannot enter it
//! (e.g. a root guest with a root-owned 0700 home, as in the tests), the shell still starts, in
//! `/`, and the session's first output line says why. The home's ownership is left alone: it
//! belongs to the provider's setup, and exec tools run as the guest's own user.

use nix::unistd::{Gid, Uid, User};
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The uid and gid shells run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkspaceUser {
    pub uid: u32,
    pub gid: u32,
}

/// The fallback workspace user of a root guest whose home is owned by root.
pub const DEFAULT_WORKSPACE_USER: WorkspaceUser = WorkspaceUser {
    uid: 1000,
    gid: 1000,
};

/// Name for a uid without a passwd entry.
pub const NAMELESS_USER: &str = "rakazo";

/// Where setpriv is looked for.
const SETPRIV: [&str; 3] = ["/usr/bin/setpriv", "/bin/setpriv", "/usr/sbin/setpriv"];

/// Why a shell cannot be prepared.
#[derive(Debug, thiserror::Error)]
pub enum ShellError {
    #[error("the guest runs as root and setpriv is not installed, so it cannot drop to uid {uid} for a terminal")]
    NoSetpriv { uid: u32 },
    #[error("refusing to run a terminal as root (workspace uid 0)")]
    Root,
}

/// A prepared shell command: program, arguments, environment and working directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellPlan {
    pub argv: Vec<OsString>,
    pub env: Vec<(String, OsString)>,
    pub cwd: PathBuf,
    pub user: WorkspaceUser,
    /// Printed to the terminal before the shell's output (why the cwd is not the home).
    pub notice: Option<String>,
}

/// Decides the user, command and environment of a new shell.
///
/// `euid` is the guest's effective uid; `configured` the workspace user from the config.
pub fn plan_shell(
    home: &Path,
    euid: u32,
    configured: Option<WorkspaceUser>,
) -> Result<ShellPlan, ShellError> {
    let (user, drop_privileges) = if euid == 0 {
        let user = configured.unwrap_or_else(|| home_owner(home));
        (user, true)
    } else {
        let gid = nix::unistd::getegid().as_raw();
        (WorkspaceUser { uid: euid, gid }, false)
    };
    if user.uid == 0 {
        return Err(ShellError::Root);
    }
    let entry = User::from_uid(Uid::from_raw(user.uid)).ok().flatten();
    let name = entry
        .as_ref()
        .map_or_else(|| NAMELESS_USER.to_string(), |u| u.name.clone());
    let shell = ["/bin/bash", "/usr/bin/bash", "/bin/sh"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("/bin/sh"));
    let mut argv: Vec<OsString> = Vec::new();
    if drop_privileges {
        let setpriv = SETPRIV
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .ok_or(ShellError::NoSetpriv { uid: user.uid })?;
        argv.push(setpriv.into());
        argv.push(format!("--reuid={}", user.uid).into());
        argv.push(format!("--regid={}", user.gid).into());
        argv.push("--clear-groups".into());
        argv.push("--".into());
    }
    argv.push(shell.clone().into());
    let (cwd, notice) = if can_enter(home, user) {
        (home.to_path_buf(), None)
    } else {
        (
            PathBuf::from("/"),
            Some(format!(
                "rakazo: uid {} cannot enter the home {}; starting in /\r\n",
                user.uid,
                home.display()
            )),
        )
    };
    let env = vec![
        ("PATH".to_string(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("HOME".to_string(), home.as_os_str().to_owned()),
        ("USER".to_string(), name.clone().into()),
        ("LOGNAME".to_string(), name.into()),
        ("SHELL".to_string(), shell.into()),
        ("TERM".to_string(), "xterm-256color".into()),
        ("LANG".to_string(), "C.UTF-8".into()),
    ];
    Ok(ShellPlan {
        argv,
        env,
        cwd,
        user,
        notice,
    })
}

/// The home's owner, unless that is root (then [`DEFAULT_WORKSPACE_USER`]).
fn home_owner(home: &Path) -> WorkspaceUser {
    match std::fs::metadata(home) {
        Ok(m) if m.uid() != 0 => WorkspaceUser {
            uid: m.uid(),
            gid: m.gid(),
        },
        _ => DEFAULT_WORKSPACE_USER,
    }
}

/// Whether `user` (with no supplementary groups) can search every directory down to `dir` and
/// list and enter `dir` itself.
pub fn can_enter(dir: &Path, user: WorkspaceUser) -> bool {
    if user.uid == 0 {
        return true;
    }
    let allowed = |path: &Path, need: u32| -> bool {
        let Ok(m) = std::fs::metadata(path) else {
            return false;
        };
        let mode = m.mode();
        let bits = if m.uid() == user.uid {
            (mode >> 6) & 7
        } else if m.gid() == user.gid {
            (mode >> 3) & 7
        } else {
            mode & 7
        };
        bits & need == need
    };
    const X: u32 = 1;
    const R: u32 = 4;
    dir.ancestors().skip(1).all(|a| allowed(a, X)) && allowed(dir, R | X)
}

/// The gid of a uid's passwd entry, for a configured uid without a gid.
pub fn primary_gid(uid: u32) -> Option<u32> {
    User::from_uid(Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.gid)
        .map(Gid::as_raw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_root_guest_drops_to_the_configured_user_and_never_to_root() {
        let dir = tempfile::tempdir().unwrap();
        let user = WorkspaceUser {
            uid: 4242,
            gid: 4343,
        };
        let plan = plan_shell(dir.path(), 0, Some(user)).unwrap();
        assert_eq!(plan.user, user);
        let argv: Vec<_> = plan.argv.iter().map(|a| a.to_string_lossy()).collect();
        assert!(argv[0].ends_with("setpriv"), "{argv:?}");
        assert!(argv.contains(&"--reuid=4242".into()));
        assert!(argv.contains(&"--regid=4343".into()));
        assert!(argv.contains(&"--clear-groups".into()));
        let env: std::collections::HashMap<_, _> = plan.env.iter().cloned().collect();
        assert_eq!(env["USER"], "rakazo", "4242 has no passwd entry");
        assert_eq!(env["LOGNAME"], "rakazo");
        assert_eq!(env["TERM"], "xterm-256color");
        assert_eq!(env["HOME"], dir.path().as_os_str());
        assert!(matches!(
            plan_shell(dir.path(), 0, Some(WorkspaceUser { uid: 0, gid: 0 })),
            Err(ShellError::Root)
        ));
    }

    #[test]
    fn an_unreachable_home_starts_the_shell_in_the_root_with_a_notice() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let stranger = WorkspaceUser {
            uid: 4242,
            gid: 4242,
        };
        let owner = nix::unistd::geteuid().as_raw();
        if owner != stranger.uid {
            assert!(!can_enter(dir.path(), stranger));
            let plan = plan_shell(dir.path(), 0, Some(stranger)).unwrap();
            assert_eq!(plan.cwd, Path::new("/"));
            assert!(plan.notice.unwrap().contains("cannot enter the home"));
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(can_enter(dir.path(), stranger));
    }
}
