//! The processes of a test's computers: finding them through `/proc` and stopping them, and what
//! a [`crate::World`] removes at its end that its computers leave (users, network namespaces).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A fully contained computer has a network namespace (its own, or its container's named; its
/// veth goes with it), an nftables table and (local) a resolv.conf; a test's computers are not
/// all destroyed, so the world removes them.
pub(crate) fn remove_computer_network(id: &str) {
    let (netns, table) = providers::local::network_names(id);
    let _ = Command::new("ip")
        .args(["netns", "del", &netns])
        .stderr(Stdio::null())
        .status();
    let _ = Command::new("nft")
        .args(["delete", "table", "inet", &table])
        .stderr(Stdio::null())
        .status();
    if let Some(tag) = netns.strip_prefix("rkz-") {
        let _ = std::fs::remove_file(format!("/run/rakazo-resolv/{tag}.conf"));
    }
}

/// A local computer of a root control plane runs as a user of its own (`rkz-…`, uid ≥
/// 2,000,000), made for it and removed when it is destroyed. A test's computers are not all
/// destroyed, so the world removes their users itself: whatever still runs as one, then the
/// user (and its group).
pub(crate) fn remove_computer_user(dir: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(dir) else {
        return;
    };
    let uid = meta.uid();
    if uid < 2_000_000 {
        return;
    }
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if std::fs::metadata(e.path()).is_ok_and(|m| m.uid() == uid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    if let Ok(Some(user)) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        if user.name.starts_with("rkz-") {
            let _ = Command::new("userdel")
                .arg(&user.name)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Stops the guest whose home is under `dir` (found through /proc by its RAKAZO_HOME), then what
/// a dead guest leaves behind: its X servers (Xvnc: their `-auth` file and RFB socket are in the
/// guest's runtime dir, `/tmp/rakazo-guest-<computer id>`) and its Chromes (profiles in the
/// home), which run in their own process groups. SIGTERM first, so the guest tears its desktops
/// down and Chrome detaches its SysV shared-memory segments; SIGKILL for whatever is still there.
pub(crate) fn kill_guest_of(dir: &Path) {
    let home = dir.join("home");
    let guests = pids_with_env("RAKAZO_HOME", &home.display().to_string());
    term_then_kill(&guests, Duration::from_secs(10));
    let mut leftovers = pids_with_cmdline(&format!("{}/", home.display()));
    if let Some(id) = dir.file_name().and_then(|n| n.to_str()) {
        leftovers.extend(pids_with_cmdline(&format!("/rakazo-guest-{id}/")));
    }
    term_then_kill(&leftovers, Duration::from_secs(2));
}

/// SIGTERM to each of `pids`, up to `grace` for them to exit, then SIGKILL to the rest.
pub fn term_then_kill(pids: &[i32], grace: Duration) {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    if pids.is_empty() {
        return;
    }
    for &pid in pids {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    let alive = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next())
                .is_some_and(|state| state != 'Z' && state != 'X')
        })
    };
    let step = Duration::from_millis(50);
    let mut waited = Duration::ZERO;
    while waited < grace && pids.iter().any(|&p| alive(p)) {
        std::thread::sleep(step);
        waited += step;
    }
    for &pid in pids.iter().filter(|&&p| alive(p)) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// The guest process of `computer` (not the jail around it, which shares its environment),
/// by its host pid; its `/proc/<pid>/root` is the computer's root.
pub fn guest_pid_of(computer: &str) -> Option<i32> {
    pids_with_env("RAKAZO_COMPUTER_ID", computer)
        .into_iter()
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "rakazo-guest")
        })
}

/// Processes whose environment has `key=value`.
pub fn pids_with_env(key: &str, value: &str) -> Vec<i32> {
    let needle = format!("{key}={value}");
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) {
                if env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) {
                    out.push(pid);
                }
            }
        }
    }
    out
}

/// Processes whose command line contains `needle`.
pub fn pids_with_cmdline(needle: &str) -> Vec<i32> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) {
                let cmd: Vec<u8> = cmd
                    .iter()
                    .map(|b| if *b == 0 { b' ' } else { *b })
                    .collect();
                if String::from_utf8_lossy(&cmd).contains(needle) {
                    // Zombies have an empty cmdline, so a match is a live process.
                    out.push(pid);
                }
            }
        }
    }
    out
}
