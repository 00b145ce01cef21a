//! Process facts the browser lifecycle needs, read without side effects: whether a pid is alive,
//! whether our child has exited (without reaping it), and which processes of a process group
//! still run.
//!
//! Chrome's browser process leads its own process group. While the leader is an unreaped zombie
//! its pid, and so the group id, cannot be reused; that is why exits are observed with
//! `WNOWAIT` and the leader is reaped only once the whole group is gone, making every `killpg`
//! safe. It leaves signalling and reaping to [`super::Browser`].

use std::fs;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// Whether `pid` names a running process: it exists (EPERM means it exists under another user)
/// and is not a zombie.
pub(crate) fn pid_alive(pid: i32) -> bool {
    if pid <= 0 || !matches!(kill(Pid::from_raw(pid), None), Ok(()) | Err(Errno::EPERM)) {
        return false;
    }
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => parse_stat(&stat).is_none_or(|s| !s.is_dead()),
        // It existed a moment ago; without /proc, trust kill(2).
        Err(_) => true,
    }
}

/// Whether process `pid` started later than `time`, so it cannot have written anything at
/// `time`: the pid was reused. `false` when unknown. Resolution: the boot time in `/proc/stat` is
/// whole seconds and start times are clock ticks, so callers leave a margin of seconds.
pub(crate) fn started_after(pid: i32, time: SystemTime) -> bool {
    let start = || -> Option<SystemTime> {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let ticks: u64 = parse_stat(&stat)?.start_ticks;
        let boot: u64 = fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse()
            .ok()?;
        let since_boot = Duration::from_millis(ticks.checked_mul(1000)? / USER_HZ);
        UNIX_EPOCH
            .checked_add(Duration::from_secs(boot))?
            .checked_add(since_boot)
    };
    start().is_some_and(|start| start > time)
}

/// The unit of start times in `/proc/<pid>/stat`: fixed at 100 by the kernel ABI on the
/// architectures we run on, whatever the kernel's internal HZ.
const USER_HZ: u64 = 100;

/// Whether our child `pid` has exited, leaving it unreaped. A child that is already reaped
/// (ECHILD) counts as exited.
pub(crate) fn child_exited(pid: i32) -> bool {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    match waitid(Id::Pid(Pid::from_raw(pid)), flags) {
        Ok(WaitStatus::StillAlive) => false,
        Ok(_) => true,
        Err(Errno::EINTR) => false,
        Err(_) => true,
    }
}

/// The running (not zombie) members of process group `pgid`.
pub(crate) fn live_group_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| parse_stat(&stat))
                .is_some_and(|s| s.pgrp == pgid && !s.is_dead())
        })
        .collect()
}

#[derive(Debug, PartialEq, Eq)]
struct Stat {
    state: char,
    pgrp: i32,
    /// Field 22, `starttime`: clock ticks after boot.
    start_ticks: u64,
}

impl Stat {
    fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// `/proc/<pid>/stat`: `pid (comm) state ppid pgrp ...`; `comm` may hold spaces and parentheses,
/// so fields are counted from the last `)`.
fn parse_stat(stat: &str) -> Option<Stat> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    // Fields 6..=21 lie between pgrp (5) and starttime (22).
    let start_ticks = fields.nth(16)?.parse().ok()?;
    Some(Stat {
        state,
        pgrp,
        start_ticks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_past_odd_command_names() {
        let tail = "0 -1 4194560 1 0 0 0 5 3 0 0 20 0 1 0 777 100 200";
        assert_eq!(
            parse_stat(&format!("42 (a (b) c) S 1 42 42 {tail}")),
            Some(Stat {
                state: 'S',
                pgrp: 42,
                start_ticks: 777
            })
        );
        assert_eq!(
            parse_stat(&format!("7 (x) Z 1 9 9 {tail}")),
            Some(Stat {
                state: 'Z',
                pgrp: 9,
                start_ticks: 777
            })
        );
        assert_eq!(parse_stat("7 (x) Z 1 9 9 0"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn start_times_tell_a_reused_pid() {
        let me = i32::try_from(std::process::id()).unwrap();
        let hour = Duration::from_secs(3600);
        assert!(started_after(me, UNIX_EPOCH + hour));
        let modified = fs::metadata("/proc/self/exe").unwrap().modified().unwrap();
        assert!(!started_after(me, modified + hour * 24 * 365 * 100));
        assert!(!started_after(0, UNIX_EPOCH));
    }

    #[test]
    fn this_process_is_alive_and_in_its_group() {
        let me = i32::try_from(std::process::id()).unwrap();
        assert!(pid_alive(me));
        assert!(!pid_alive(0));
        assert!(!pid_alive(-1));
        let pgid = nix::unistd::getpgrp().as_raw();
        assert!(live_group_members(pgid).contains(&me));
    }
}
