//! Who a terminal's shell runs as, where it starts and with what environment
//! (docs/screens.md#terminal: the workspace user, never root).
//!
//! A guest running as an ordinary user starts shells as itself. A guest running as root drops
//! to the workspace user: the configured uid/gid (`RAKAZO_WORKSPACE_UID`/`GID`), else the home's
//! owner if that is not root, else 1000:1000. The drop is done by util-linux `setpriv`
//! (`--reuid --regid --clear-groups`), which execs the shell: portable-pty spawns the child
//! itself and has no hook to change its ids. Without `setpriv` a root guest refuses to open a
//! terminal rather than give out a root shell.
//!
//! A uid without a passwd entry is called `rakazo` for its own session only; nothing is written
//! to `/etc/passwd`. Where nss_wrapper (Debian's libnss-wrapper) is installed, the session
//! preloads it with a passwd file of its own (the system's entries plus `rakazo`), so `whoami`,
//! `id -un` and the prompt's `\u` all say `rakazo`; without it, `USER`, `LOGNAME` and the prompt
//! still do.
//!
//! The shell reads a profile as a login shell would ([`profile`]): `/etc/profile` (PATH, and
//! on Debian the prompt of `/etc/bash.bashrc`), then the home's `~/.bash_profile`,
//! `~/.bash_login` or `~/.profile`, or else `~/.bashrc`. The profile and nss_wrapper's files
//! live in the session's own directory ([`ShellPlan::session_dir`]), made when the session
//! starts and removed with it.
//!
//! The home: `HOME` is always the computer's home. The shell starts in the start directory
//! (the home, or a Team bot's `bots/<bot-id>/`, prepared by the caller); when the workspace user
//! cannot enter it, in the home, and failing that in `/` (e.g. a root guest with a root-owned
//! 0700 home, as in the tests); the session's first output line says why. The home's ownership
//! is left alone: it belongs to the provider's setup. With `RAKAZO_RUN_AS` (or a guest that is
//! not root) commands and shells both run as the guest's own user; only a root guest without it
//! (the fake provider under root) runs commands as root and shells as the workspace user.

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
/// Where nss_wrapper is looked for (Debian's libnss-wrapper, per architecture, and others').
const NSS_WRAPPER: [&str; 5] = [
    "/usr/lib/x86_64-linux-gnu/libnss_wrapper.so",
    "/usr/lib/aarch64-linux-gnu/libnss_wrapper.so",
    "/usr/lib64/libnss_wrapper.so",
    "/usr/lib/libnss_wrapper.so",
    "/usr/local/lib/libnss_wrapper.so",
];
/// The session's profile, in its session directory.
const PROFILE_FILE: &str = "profile";
const PASSWD_FILE: &str = "passwd";
const GROUP_FILE: &str = "group";

/// Why a shell cannot be prepared.
#[derive(Debug, thiserror::Error)]
pub enum ShellError {
    #[error("the guest runs as root and setpriv is not installed, so it cannot drop to uid {uid} for a terminal")]
    NoSetpriv { uid: u32 },
    #[error("refusing to run a terminal as root (workspace uid 0)")]
    Root,
}

/// A prepared shell command: program, arguments, environment, working directory, and the files
/// of its session directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellPlan {
    pub argv: Vec<OsString>,
    pub env: Vec<(String, OsString)>,
    pub cwd: PathBuf,
    pub user: WorkspaceUser,
    /// Printed to the terminal before the shell's output (why the cwd is not the start dir).
    pub notice: Option<String>,
    /// The session's own directory (mode 0700, created fresh, removed when the session ends):
    /// in the guest's gateway directory when the shell runs as the guest's own user, else (a
    /// root guest dropping to the workspace user, who cannot enter the guest's private
    /// directories) a fresh directory in the system's temporary directory given to that user.
    pub session_dir: PathBuf,
    /// Whether the session directory and its files are given to [`ShellPlan::user`].
    pub give_to_user: bool,
    /// Files to write into the session directory before the shell starts: (name, content).
    pub files: Vec<(&'static str, String)>,
}

/// Where a shell starts and keeps its session files.
#[derive(Debug, Clone, Copy)]
pub struct ShellPlace<'a> {
    /// The computer's home (`HOME`).
    pub home: &'a Path,
    /// Where the shell starts: the home or a bot's directory inside it.
    pub start: &'a Path,
    /// The session directory to use when the shell runs as the guest's own user (a path in
    /// the guest's private gateway directory, not yet existing).
    pub private_session_dir: &'a Path,
}

/// Decides the user, command and environment of a new shell.
///
/// `euid` is the guest's effective uid; `configured` the workspace user from the config.
pub fn plan_shell(
    place: ShellPlace<'_>,
    euid: u32,
    configured: Option<WorkspaceUser>,
) -> Result<ShellPlan, ShellError> {
    let home = place.home;
    let (user, drop_privileges) = shell_user(home, euid, configured);
    if user.uid == 0 {
        return Err(ShellError::Root);
    }
    let entry = User::from_uid(Uid::from_raw(user.uid)).ok().flatten();
    let nameless = entry.is_none();
    let name = entry
        .as_ref()
        .map_or_else(|| NAMELESS_USER.to_string(), |u| u.name.clone());
    let shell = ["/bin/bash", "/usr/bin/bash", "/bin/sh"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("/bin/sh"));
    let bash = shell.file_name().is_some_and(|n| n == "bash");
    let session_dir = if drop_privileges {
        std::env::temp_dir().join(format!(
            "rakazo-terminal-{}",
            hex::encode(rand::random::<[u8; 8]>())
        ))
    } else {
        place.private_session_dir.to_path_buf()
    };
    let nss_wrapper = if nameless {
        NSS_WRAPPER.iter().map(PathBuf::from).find(|p| p.exists())
    } else {
        None
    };
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
    let profile_path = session_dir.join(PROFILE_FILE);
    if bash {
        argv.push("--rcfile".into());
        argv.push(profile_path.clone().into());
    }
    argv.push("-i".into());
    let (cwd, notice) = if can_enter(place.start, user) {
        (place.start.to_path_buf(), None)
    } else if can_enter(home, user) {
        (
            home.to_path_buf(),
            Some(format!(
                "rakazo: uid {} cannot enter {}; starting in the home\r\n",
                user.uid,
                place.start.display()
            )),
        )
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
    let mut files = vec![(
        PROFILE_FILE,
        profile(bash, nameless && nss_wrapper.is_none()),
    )];
    let mut env = vec![
        ("PATH".to_string(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("HOME".to_string(), home.as_os_str().to_owned()),
        ("USER".to_string(), name.clone().into()),
        ("LOGNAME".to_string(), name.into()),
        ("SHELL".to_string(), shell.clone().into()),
        ("TERM".to_string(), "xterm-256color".into()),
        ("LANG".to_string(), "C.UTF-8".into()),
    ];
    // The secrets' placeholders and trust variables (`secret_env`), read afresh.
    env.extend(
        crate::secret_env::from_process()
            .into_iter()
            .map(|(k, v)| (k, v.into())),
    );
    if !bash {
        // A POSIX sh reads `$ENV` when interactive.
        env.push(("ENV".to_string(), profile_path.into()));
    }
    if let Some(lib) = nss_wrapper {
        files.push((PASSWD_FILE, passwd_with(user, home, &shell)));
        files.push((GROUP_FILE, group_with(user)));
        env.push(("LD_PRELOAD".to_string(), lib.into()));
        env.push((
            "NSS_WRAPPER_PASSWD".to_string(),
            session_dir.join(PASSWD_FILE).into(),
        ));
        env.push((
            "NSS_WRAPPER_GROUP".to_string(),
            session_dir.join(GROUP_FILE).into(),
        ));
    }
    Ok(ShellPlan {
        argv,
        env,
        cwd,
        user,
        notice,
        session_dir,
        give_to_user: drop_privileges,
        files,
    })
}

/// The session's profile: what a login shell reads, then (for a nameless uid without
/// nss_wrapper, whose `\u` would print "I have no name!") a prompt that names `rakazo`.
fn profile(bash: bool, name_the_prompt: bool) -> String {
    let mut p = String::from(
        "# The profile of this rakazo terminal session (removed when it ends).\n\
         if [ -r /etc/profile ]; then . /etc/profile; fi\n",
    );
    if bash {
        p.push_str(
            "if [ -r \"$HOME/.bash_profile\" ]; then . \"$HOME/.bash_profile\"\n\
             elif [ -r \"$HOME/.bash_login\" ]; then . \"$HOME/.bash_login\"\n\
             elif [ -r \"$HOME/.profile\" ]; then . \"$HOME/.profile\"\n\
             elif [ -r \"$HOME/.bashrc\" ]; then . \"$HOME/.bashrc\"\n\
             fi\n\
             # bash's own default prompt, if nothing above set one, says nothing useful.\n\
             if [ \"${PS1-}\" = '\\s-\\v\\$ ' ] || [ -z \"${PS1-}\" ]; then PS1='\\u@\\h:\\w\\$ '; fi\n",
        );
        if name_the_prompt {
            p.push_str("PS1='rakazo@\\h:\\w\\$ '\n");
        }
    } else {
        p.push_str("if [ -r \"$HOME/.profile\" ]; then . \"$HOME/.profile\"; fi\n");
        if name_the_prompt {
            p.push_str("PS1='rakazo$ '\n");
        }
    }
    p
}

/// The system's passwd entries plus `rakazo` for the nameless `user`.
fn passwd_with(user: WorkspaceUser, home: &Path, shell: &Path) -> String {
    let mut text = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&format!(
        "{NAMELESS_USER}:x:{}:{}:{NAMELESS_USER}:{}:{}\n",
        user.uid,
        user.gid,
        home.display(),
        shell.display()
    ));
    text
}

/// The system's groups plus `rakazo` for the user's gid when it has no group.
fn group_with(user: WorkspaceUser) -> String {
    let mut text = std::fs::read_to_string("/etc/group").unwrap_or_default();
    if nix::unistd::Group::from_gid(Gid::from_raw(user.gid))
        .ok()
        .flatten()
        .is_none()
    {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("{NAMELESS_USER}:x:{}:\n", user.gid));
    }
    text
}

/// Who a shell runs as, and whether the guest drops to that user to start it (a root guest):
/// the guest's own user, else the configured workspace user, else the home's owner.
pub fn shell_user(
    home: &Path,
    euid: u32,
    configured: Option<WorkspaceUser>,
) -> (WorkspaceUser, bool) {
    if euid == 0 {
        (configured.unwrap_or_else(|| home_owner(home)), true)
    } else {
        let gid = nix::unistd::getegid().as_raw();
        (WorkspaceUser { uid: euid, gid }, false)
    }
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

    fn place(home: &Path) -> ShellPlace<'_> {
        ShellPlace {
            home,
            start: home,
            private_session_dir: Path::new("/nonexistent/gateway/1-terminal.d"),
        }
    }

    #[test]
    fn a_root_guest_drops_to_the_configured_user_and_never_to_root() {
        let dir = tempfile::tempdir().unwrap();
        let user = WorkspaceUser {
            uid: 4242,
            gid: 4343,
        };
        let plan = plan_shell(place(dir.path()), 0, Some(user)).unwrap();
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
        // The dropped user cannot enter the guest's private directories: its session files
        // are in a fresh directory of its own.
        assert!(plan.give_to_user);
        assert!(plan.session_dir.starts_with(std::env::temp_dir()));
        assert!(argv.contains(&"--rcfile".into()) || env.contains_key("ENV"));
        assert!(matches!(
            plan_shell(place(dir.path()), 0, Some(WorkspaceUser { uid: 0, gid: 0 })),
            Err(ShellError::Root)
        ));
    }

    #[test]
    fn a_nameless_uid_gets_its_own_passwd_entry_or_at_least_a_prompt() {
        let dir = tempfile::tempdir().unwrap();
        let user = WorkspaceUser {
            uid: 4242,
            gid: 4343,
        };
        let plan = plan_shell(place(dir.path()), 0, Some(user)).unwrap();
        let env: std::collections::HashMap<_, _> = plan.env.iter().cloned().collect();
        let files: std::collections::HashMap<_, _> = plan.files.iter().cloned().collect();
        let profile = &files[PROFILE_FILE];
        assert!(profile.contains(". /etc/profile"), "{profile}");
        if NSS_WRAPPER.iter().any(|p| Path::new(p).exists()) {
            let passwd = &files[PASSWD_FILE];
            let line = format!("rakazo:x:4242:4343:rakazo:{}:", dir.path().display());
            assert!(passwd.contains(&line), "{passwd}");
            assert!(
                passwd.starts_with("root:"),
                "the system's entries stay: {passwd}"
            );
            assert!(files[GROUP_FILE].contains("rakazo:x:4343:"));
            assert!(env["LD_PRELOAD"]
                .to_string_lossy()
                .ends_with("libnss_wrapper.so"));
            assert_eq!(
                env["NSS_WRAPPER_PASSWD"],
                plan.session_dir.join(PASSWD_FILE).as_os_str()
            );
            assert!(!profile.contains("PS1='rakazo"), "{profile}");
        } else {
            assert!(!env.contains_key("LD_PRELOAD"));
            assert!(profile.contains("PS1='rakazo"), "{profile}");
        }
        // A named uid (this process's) needs neither.
        let me = nix::unistd::geteuid().as_raw();
        if me != 0 && User::from_uid(Uid::from_raw(me)).ok().flatten().is_some() {
            let plan = plan_shell(place(dir.path()), me, None).unwrap();
            assert!(plan.env.iter().all(|(k, _)| k != "LD_PRELOAD"));
            assert!(!plan.give_to_user);
            assert_eq!(plan.session_dir, place(dir.path()).private_session_dir);
        }
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
            let plan = plan_shell(place(dir.path()), 0, Some(stranger)).unwrap();
            assert_eq!(plan.cwd, Path::new("/"));
            assert!(plan.notice.unwrap().contains("cannot enter the home"));
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(can_enter(dir.path(), stranger));
    }
}
