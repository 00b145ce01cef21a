//! Dropping root for good at start (`RAKAZO_RUN_AS`).
//!
//! A guest started as root reads its whole configuration first (the enrollment token file is
//! root's, mode 0600), then becomes the configured user for the rest of its life: the home
//! directory itself (not its contents) is given to that user when someone else owns it (a fresh
//! volume is root's), then supplementary groups, gid and uid are set (real, effective and saved,
//! so nothing can switch back), and the process is marked non-dumpable so commands of the same
//! uid can neither ptrace it nor read its `/proc/<pid>/environ` or memory. Everything the guest
//! starts afterwards (commands, terminals, Xvnc, Chrome) runs as that user, and the
//! runtime dir it creates afterwards is that user's.
//!
//! Resolving the user (passwd name or `uid:gid`) belongs to `config`; this module only acts.
//! Runs before the async runtime starts, while the guest has a single thread.

use nix::unistd::{Gid, Uid};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The user a root guest becomes (`RAKAZO_RUN_AS`), resolved by `config`. Never root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
    /// The passwd name; `None` for a `uid:gid` without a passwd entry (then the guest calls it
    /// `rakazo`, as terminals do).
    pub name: Option<String>,
    /// Supplementary groups: the named user's groups from the group database, else just `gid`.
    pub groups: Vec<u32>,
}

impl RunAs {
    /// The name commands see in `USER` and `LOGNAME`.
    pub fn user_name(&self) -> &str {
        self.name
            .as_deref()
            .unwrap_or(crate::gateway::terminal::user::NAMELESS_USER)
    }
}

/// Why the guest could not become its configured user.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error("RAKAZO_RUN_AS names uid {want}, but the guest runs as uid {euid} (real {ruid}, saved {suid}) and is not root, so it cannot switch")]
    WrongUser {
        want: u32,
        ruid: u32,
        euid: u32,
        suid: u32,
    },
    #[error("cannot give the home {home} to uid {uid}")]
    ChownHome {
        home: String,
        uid: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot drop to uid {uid} gid {gid}: {step} failed")]
    Drop {
        uid: u32,
        gid: u32,
        step: &'static str,
        #[source]
        source: nix::Error,
    },
    #[error("the drop to uid {uid} did not hold: {what}")]
    NotDropped { uid: u32, what: String },
}

/// Becomes `run_as` for good (root guest) or checks that the guest already is it (non-root).
/// Either way the process ends non-dumpable.
pub fn drop_to(run_as: &RunAs, home: &Path) -> Result<(), PrivilegeError> {
    let ids = nix::unistd::getresuid().map_err(|source| PrivilegeError::Drop {
        uid: run_as.uid,
        gid: run_as.gid,
        step: "getresuid",
        source,
    })?;
    let (ruid, euid, suid) = (
        ids.real.as_raw(),
        ids.effective.as_raw(),
        ids.saved.as_raw(),
    );
    if euid != 0 {
        if (ruid, euid, suid) != (run_as.uid, run_as.uid, run_as.uid) {
            return Err(PrivilegeError::WrongUser {
                want: run_as.uid,
                ruid,
                euid,
                suid,
            });
        }
        return make_undumpable(run_as);
    }
    give_home(home, run_as)?;
    let step = |step: &'static str| {
        move |source| PrivilegeError::Drop {
            uid: run_as.uid,
            gid: run_as.gid,
            step,
            source,
        }
    };
    let groups: Vec<Gid> = run_as.groups.iter().map(|g| Gid::from_raw(*g)).collect();
    nix::unistd::setgroups(&groups).map_err(step("setgroups"))?;
    let gid = Gid::from_raw(run_as.gid);
    nix::unistd::setresgid(gid, gid, gid).map_err(step("setresgid"))?;
    let uid = Uid::from_raw(run_as.uid);
    nix::unistd::setresuid(uid, uid, uid).map_err(step("setresuid"))?;
    verify(run_as)?;
    make_undumpable(run_as)
}

/// Gives the home directory itself to the user when someone else owns it. Never follows a
/// symlink and never recurses: the contents are the user's own business (a restored home is
/// written by the guest, so already the user's).
fn give_home(home: &Path, run_as: &RunAs) -> Result<(), PrivilegeError> {
    let failed = |source| PrivilegeError::ChownHome {
        home: home.display().to_string(),
        uid: run_as.uid,
        source,
    };
    let meta = std::fs::symlink_metadata(home).map_err(failed)?;
    if !meta.is_dir() {
        return Err(failed(std::io::Error::other("not a directory")));
    }
    if meta.uid() == run_as.uid {
        return Ok(());
    }
    std::os::unix::fs::lchown(home, Some(run_as.uid), Some(run_as.gid)).map_err(failed)
}

/// Checks every id took, and that root cannot be regained.
fn verify(run_as: &RunAs) -> Result<(), PrivilegeError> {
    let not = |what: String| PrivilegeError::NotDropped {
        uid: run_as.uid,
        what,
    };
    let u = nix::unistd::getresuid().map_err(|e| not(format!("getresuid: {e}")))?;
    let g = nix::unistd::getresgid().map_err(|e| not(format!("getresgid: {e}")))?;
    let uids = [u.real, u.effective, u.saved].map(Uid::as_raw);
    let gids = [g.real, g.effective, g.saved].map(Gid::as_raw);
    if uids != [run_as.uid; 3] || gids != [run_as.gid; 3] {
        return Err(not(format!("uids {uids:?}, gids {gids:?}")));
    }
    if nix::unistd::setresuid(Uid::from_raw(0), Uid::from_raw(0), Uid::from_raw(0)).is_ok() {
        return Err(not("setresuid(0) still succeeds".into()));
    }
    Ok(())
}

/// Makes a guest that runs without `RAKAZO_RUN_AS` (already its own user, e.g. a local
/// computer of a non-root control plane) non-dumpable as well: its commands share its uid, and
/// `/proc/<guest pid>/environ`, `mem` and ptrace must stay closed to them.
pub fn make_private() -> Result<(), PrivilegeError> {
    set_undumpable(
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw(),
    )
}

/// Commands run as the same uid as the guest: without this they could ptrace it or read its
/// memory and `/proc/<pid>/environ`. The kernel already clears the flag on a credential
/// change; setting it explicitly also covers a guest started as the user, and is checked.
fn make_undumpable(run_as: &RunAs) -> Result<(), PrivilegeError> {
    set_undumpable(run_as.uid, run_as.gid)
}

/// Clears the dumpable flag and checks that it stayed clear; `uid`/`gid` only name the user in
/// the error.
fn set_undumpable(uid: u32, gid: u32) -> Result<(), PrivilegeError> {
    nix::sys::prctl::set_dumpable(false).map_err(|source| PrivilegeError::Drop {
        uid,
        gid,
        step: "prctl(PR_SET_DUMPABLE)",
        source,
    })?;
    match nix::sys::prctl::get_dumpable() {
        Ok(false) => Ok(()),
        Ok(true) => Err(PrivilegeError::NotDropped {
            uid,
            what: "the process is still dumpable".into(),
        }),
        Err(e) => Err(PrivilegeError::NotDropped {
            uid,
            what: format!("prctl(PR_GET_DUMPABLE): {e}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::terminal::user::{plan_shell, WorkspaceUser};

    #[test]
    fn a_non_root_guest_must_already_be_the_user() {
        let me = nix::unistd::geteuid().as_raw();
        if me == 0 {
            // As root, drop_to would really drop this test process; the integration test
            // (tests/privilege.rs) runs the real binary for that.
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let other = RunAs {
            uid: me + 1,
            gid: me + 1,
            name: None,
            groups: vec![me + 1],
        };
        let err = drop_to(&other, dir.path()).unwrap_err().to_string();
        assert!(err.contains("is not root"), "{err}");
    }

    #[test]
    fn after_the_drop_shells_start_as_the_guest_itself_without_setpriv() {
        // A dropped guest's euid is the user's, so terminals take its own ids and never setpriv,
        // whatever RAKAZO_WORKSPACE_UID said.
        let dir = tempfile::tempdir().unwrap();
        let plan = plan_shell(
            crate::gateway::terminal::user::ShellPlace {
                home: dir.path(),
                start: dir.path(),
                private_session_dir: &dir.path().join("session"),
            },
            4242,
            Some(WorkspaceUser {
                uid: 5000,
                gid: 5000,
            }),
        )
        .unwrap();
        assert_eq!(plan.user.uid, 4242);
        assert!(
            !plan
                .argv
                .iter()
                .any(|a| a.to_string_lossy().contains("setpriv")),
            "{:?}",
            plan.argv
        );
    }

    #[test]
    fn a_nameless_user_is_called_rakazo() {
        let r = RunAs {
            uid: 4242,
            gid: 4242,
            name: None,
            groups: vec![4242],
        };
        assert_eq!(r.user_name(), "rakazo");
    }
}
