//! Stops what a previous run of this guest left behind.
//!
//! The X servers (Xvnc) and Chrome run in their own process groups so a signal to one desktop
//! never reaches another; the price is that a guest killed with SIGKILL (OOM killer, a crashed
//! host agent) leaves them running, holding X displays, profile locks and memory. A guest starting
//! for the same computer finds them by what their command lines must contain (its runtime dir:
//! Xvnc's `-auth` file and RFB socket; its home's browser profiles: Chrome's `--user-data-dir`)
//! and kills them before it serves anything. Other processes in the home (a user's commands)
//! are left alone. The emulator browser provider's temporary profiles in the runtime directory
//! go too.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::Path;
use std::time::Duration;
use tracing::{info, warn};

/// How long leftovers get to exit after SIGTERM: an X server removes its sockets and lock file
/// only when it exits cleanly.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// Stops processes of an earlier run of this guest (SIGTERM, then SIGKILL after
/// [`TERM_GRACE`]); returns how many were found.
pub fn reap(runtime_dir: &Path, home: &Path) -> usize {
    let needles = [
        format!("{}/", runtime_dir.display()),
        format!("{}/.browser-profiles/", home.display()),
    ];
    let found = leftovers(&needles);
    if found.is_empty() {
        remove_emulator_profiles(runtime_dir);
        return 0;
    }
    for &pid in &found {
        if let Err(e) = kill(Pid::from_raw(pid), Signal::SIGTERM) {
            warn!(pid, error = %e, "cannot stop a leftover process");
        }
    }
    let step = Duration::from_millis(50);
    let mut waited = Duration::ZERO;
    while waited < TERM_GRACE && found.iter().any(|&p| alive(p)) {
        std::thread::sleep(step);
        waited += step;
    }
    for &pid in found.iter().filter(|&&p| alive(p)) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    info!(
        found = found.len(),
        "stopped processes left by an earlier run of this guest"
    );
    remove_emulator_profiles(runtime_dir);
    found.len()
}

/// Removes the temporary profiles (and their browsers' logs) of the emulator browser provider's
/// sessions (`screens::sessions`) an earlier run left in the runtime directory.
fn remove_emulator_profiles(runtime_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(runtime_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !name.starts_with("emulator-") && !name.starts_with("chromium-emulator-") {
            continue;
        }
        // The entry's own type: a symlink is removed, never followed.
        let removed = match entry.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(entry.path()),
            _ => std::fs::remove_file(entry.path()),
        };
        if let Err(e) = removed {
            warn!(path = %entry.path().display(), error = %e, "cannot remove a leftover profile");
        }
    }
}

/// Pids (other than ours) whose command line has an argument containing one of `needles`.
fn leftovers(needles: &[String]) -> Vec<i32> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| matches(&c, needles))
        })
        .filter_map(|pid| i32::try_from(pid).ok())
        .collect()
}

/// Whether `pid` still runs (a zombie has exited).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // The state follows the parenthesised command name, which may itself hold ") ".
        stat.rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X')
    })
}

/// Whether a NUL-separated command line has an argument containing one of `needles`.
fn matches(cmdline: &[u8], needles: &[String]) -> bool {
    cmdline.split(|b| *b == 0).any(|arg| {
        let arg = String::from_utf8_lossy(arg);
        needles.iter().any(|n| arg.contains(n.as_str()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_only_arguments_naming_the_runtime_dir_or_profiles() {
        let needles = [
            "/tmp/rakazo-guest-c1/".to_string(),
            "/h/.browser-profiles/".to_string(),
        ];
        let xvnc = b"Xvnc\0:1\0-auth\0/tmp/rakazo-guest-c1/xauth-1\0";
        let chrome = b"chromium\0--user-data-dir=/h/.browser-profiles/abc\0";
        let other_guest = b"Xvnc\0-auth\0/tmp/rakazo-guest-c10/xauth-1\0";
        let user_cmd = b"python3\0/h/script.py\0";
        assert!(matches(xvnc, &needles));
        assert!(matches(chrome, &needles));
        assert!(!matches(other_guest, &needles));
        assert!(!matches(user_cmd, &needles));
    }

    #[test]
    fn reaps_a_leftover_process_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = dir.path().join("rt");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&runtime).unwrap();
        let marker = runtime.join("xauth-9");
        std::fs::write(&marker, b"").unwrap();
        // `tail -f` on a file of the runtime dir stands in for a leftover Xvnc: it runs until
        // killed, with the runtime dir in its arguments.
        let mut leftover = std::process::Command::new("tail")
            .arg("-f")
            .arg(&marker)
            .spawn()
            .unwrap();
        let mut bystander = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .unwrap();
        let deadline = std::time::Duration::from_secs(10);
        let mut waited = std::time::Duration::ZERO;
        while !std::fs::read(format!("/proc/{}/cmdline", leftover.id()))
            .map(|c| matches(&c, &[format!("{}/", runtime.display())]))
            .unwrap_or(false)
        {
            assert!(waited < deadline, "the stand-in never started");
            std::thread::sleep(std::time::Duration::from_millis(20));
            waited += std::time::Duration::from_millis(20);
        }
        assert_eq!(reap(&runtime, &home), 1);
        let status = leftover.wait().unwrap();
        assert!(!status.success(), "the leftover was killed");
        assert!(
            bystander.try_wait().unwrap().is_none(),
            "the bystander still runs"
        );
        bystander.kill().unwrap();
        bystander.wait().unwrap();
    }

    #[test]
    fn removes_the_emulators_leftover_profiles_only() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = dir.path().join("rt");
        let profile = runtime.join("emulator-00000000000000ab");
        std::fs::create_dir_all(profile.join("Default")).unwrap();
        std::fs::write(runtime.join("chromium-emulator-00000000000000ab.log"), b"x").unwrap();
        std::fs::write(runtime.join("xauth-9"), b"").unwrap();
        let elsewhere = dir.path().join("kept");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, runtime.join("emulator-link")).unwrap();
        assert_eq!(reap(&runtime, &dir.path().join("home")), 0);
        let mut left: Vec<String> = std::fs::read_dir(&runtime)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["xauth-9"]);
        assert!(elsewhere.is_dir(), "a symlink is removed, not followed");
    }
}
