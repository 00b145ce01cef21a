//! A local computer's own root and processes: the guest is started under bubblewrap (Debian's
//! `bwrap`) in new mount, PID and UTS namespaces, and, when its network is contained, inside
//! its network namespace (`ip netns exec`).
//!
//! What the computer sees:
//! - the system directories, read-only: `/usr` (with the merged-`/usr` links `/bin`, `/sbin`,
//!   `/lib`, `/lib64`), `/etc`, and fontconfig's cache;
//! - its own directory (`<root>/<id>`, the home inside it) at the same path, read-write;
//! - the guest's binary, read-only, at the same path, and the paths the operator lists
//!   (`--local-jail-ro-bind`, e.g. tools under `/opt`), read-only;
//! - a fresh `/proc` (its own processes only), a minimal `/dev`, and empty private `/tmp`,
//!   `/var/tmp`, `/run` and `/dev/shm` that vanish with the computer.
//!
//! Nothing else of the host: not `/work`, `/home`, `/root`, `/srv`, `/var/lib` (the data dir,
//! other computers' directories, PostgreSQL's files), not the container engine's socket in
//! `/run`. bubblewrap's PID 1 reaps orphans and, when the guest exits, takes every process of
//! the computer with it. The guest still starts as root inside (it reads its enrollment token
//! and drops for good to the computer's user, as outside a jail); being non-dumpable, its memory
//! and environment are not readable by that user.

use std::ffi::OsString;
use std::path::Path;

/// The program that builds the jail.
pub(crate) const BWRAP: &str = "bwrap";

/// The command line that runs `guest` jailed with `dir` (the computer's directory) its own,
/// inside network namespace `netns` when there is one. The guest binary comes last: the caller
/// appends nothing after it.
pub(crate) fn command(
    netns: Option<&str>,
    resolv_conf: Option<&Path>,
    ca_bundle: Option<&Path>,
    dir: &Path,
    home: &Path,
    guest: &Path,
    extra_ro: &[std::path::PathBuf],
) -> Vec<OsString> {
    let mut argv: Vec<OsString> = Vec::new();
    if let Some(ns) = netns {
        argv.push(super::net::tool("ip").into_os_string());
        argv.extend(["netns", "exec", ns].map(OsString::from));
    }
    argv.push(super::net::tool(BWRAP).into_os_string());
    let mut arg = |s: &str| argv.push(s.into());
    for a in [
        "--unshare-pid",
        "--unshare-uts",
        "--hostname",
        "computer",
        "--ro-bind",
        "/usr",
        "/usr",
        "--ro-bind",
        "/etc",
        "/etc",
        // bubblewrap makes missing parents 0700: /var is everyone's.
        "--perms",
        "0755",
        "--dir",
        "/var",
        "--perms",
        "0755",
        "--dir",
        "/var/cache",
        "--ro-bind-try",
        "/var/cache/fontconfig",
        "/var/cache/fontconfig",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--tmpfs",
        "/dev/shm",
        "--perms",
        "1777",
        "--tmpfs",
        "/tmp",
        "--perms",
        "1777",
        "--tmpfs",
        "/var/tmp",
        "--tmpfs",
        "/run",
    ] {
        arg(a);
    }
    // Merged /usr: /bin and friends are links into /usr; a host without it gets them bound.
    for top in ["bin", "sbin", "lib", "lib64"] {
        let host = Path::new("/").join(top);
        match std::fs::read_link(&host) {
            Ok(target) => {
                argv.push("--symlink".into());
                argv.push(target.into_os_string());
                argv.push(host.into_os_string());
            }
            Err(_) if host.is_dir() => {
                argv.push("--ro-bind".into());
                argv.push(host.clone().into_os_string());
                argv.push(host.into_os_string());
            }
            Err(_) => {}
        }
    }
    // bubblewrap makes a bind's missing parents 0700 root's; the computer's user must pass
    // through to its directory (0711, as on the host), so they are made first.
    const OURS: [&str; 7] = ["/", "/tmp", "/var", "/var/tmp", "/run", "/dev", "/dev/shm"];
    let mut parents: Vec<&Path> = dir.ancestors().skip(1).collect();
    parents.reverse();
    for p in parents
        .into_iter()
        .filter(|p| !OURS.iter().any(|o| Path::new(o) == *p))
    {
        argv.extend(["--perms", "0711", "--dir"].map(OsString::from));
        argv.push(p.as_os_str().to_owned());
    }
    if let Some(r) = resolv_conf {
        argv.extend([
            "--ro-bind".into(),
            r.as_os_str().to_owned(),
            "/etc/resolv.conf".into(),
        ]);
    }
    // The computer's CA bundle (the host's plus its egress CA: `trust`) over the system one.
    if let Some(b) = ca_bundle {
        argv.extend([
            "--ro-bind".into(),
            b.as_os_str().to_owned(),
            super::trust::SYSTEM_BUNDLE.into(),
        ]);
    }
    let extra = extra_ro.iter().map(|p| ("--ro-bind", p.as_path()));
    for (flag, path) in [("--bind", dir), ("--ro-bind", guest)]
        .into_iter()
        .chain(extra)
    {
        argv.push(flag.into());
        argv.push(path.as_os_str().to_owned());
        argv.push(path.as_os_str().to_owned());
    }
    argv.push("--chdir".into());
    argv.push(home.as_os_str().to_owned());
    argv.push("--".into());
    argv.push(guest.as_os_str().to_owned());
    argv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jail_binds_only_the_computer_and_system_directories_read_only() {
        let argv = command(
            Some("rkz-0123456789ab"),
            Some(Path::new("/run/rakazo-resolv/0123456789ab.conf")),
            Some(Path::new(
                "/var/lib/rakazo-computers/c-1/ca-certificates.crt",
            )),
            Path::new("/var/lib/rakazo-computers/c-1"),
            Path::new("/var/lib/rakazo-computers/c-1/home"),
            Path::new("/opt/rakazo/rakazo-guest"),
            &["/opt/tools".into()],
        );
        let s: Vec<String> = argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(s[0].ends_with("/ip"), "{s:?}");
        assert_eq!(&s[1..4], ["netns", "exec", "rkz-0123456789ab"]);
        assert!(s[4].ends_with("/bwrap"), "{s:?}");
        assert_eq!(s.last().unwrap(), "/opt/rakazo/rakazo-guest");
        let binds: Vec<&[String]> = s
            .windows(3)
            .filter(|w| w[0] == "--bind" || w[0] == "--bind-try")
            .collect();
        assert_eq!(binds.len(), 1, "{s:?}");
        assert_eq!(binds[0][1], "/var/lib/rakazo-computers/c-1");
        for private in ["/tmp", "/dev/shm", "/var/tmp", "/run"] {
            assert!(
                s.windows(2).any(|w| w[0] == "--tmpfs" && w[1] == private),
                "{private}"
            );
        }
        assert!(s.contains(&"--unshare-pid".to_string()));
        assert!(s.windows(3).any(|w| w[0] == "--ro-bind"
            && w[1] == "/var/lib/rakazo-computers/c-1/ca-certificates.crt"
            && w[2] == "/etc/ssl/certs/ca-certificates.crt"));
        assert!(s
            .windows(3)
            .any(|w| w[0] == "--ro-bind" && w[1] == "/opt/tools"));
        assert!(!s.iter().any(|a| a == "/" || a.starts_with("/work")));
    }
}
