//! What is still working inside the computer, for the control plane's idle job (the `Activity`
//! operation): commands running, background processes that finished commands left behind,
//! terminal output, and CPU.
//!
//! - **Commands**: every exec registers its exec id ([`crate::exec::EXEC_ID_VAR`]) in
//!   [`Running`] (kept in [`crate::exec`]) for as long as it runs (its stream is open).
//! - **Background**: live processes (zombies aside) whose environment carries the marker of an
//!   exec id that is *not* running: a `nohup … &` that outlived its command. A process that
//!   dropped the marker from its environment (`env -i`) is not seen; its CPU still is, below.
//! - **Terminal output**: the time the last byte a terminal's shell printed was read from its
//!   PTY ([`LastOutput`], stamped by the terminal's output pump).
//! - **Detached processes** (`crate::procs`) are neither commands nor background: alive and
//!   quiet, a dev server is no work. What counts is the time one last printed
//!   ([`Activity::process_output`], stamped as its output reaches its ring) and its CPU.
//! - **CPU**: the CPU time (`utime + stime` of `/proc/<pid>/stat`) the computer's processes used
//!   between two looks, per process and keyed by pid and start time, so an exited process drops
//!   out and a reused pid is not a negative delta. Whose counts: the guest's descendants (shells,
//!   commands, Xvnc, Chrome) and every process carrying an exec marker (also those
//!   reparented away from the guest); never the guest itself, whose own work is answering the
//!   control plane, nor processes of the host that the guest merely sees (local computers share
//!   the host's `/proc`). The system-wide `/proc/stat` is not used: in a container it is the
//!   host's. An idle Xvnc or Chrome uses little CPU and stays under the control plane's threshold;
//!   a busy one (a page still loading) counts, and the control plane's maximum lifetime of
//!   background work bounds even that.
//!
//! A look reports the CPU used since the previous look, when that was between
//! [`MIN_INTERVAL_MS`] and [`MAX_INTERVAL_MS`] ago (a burst of looks sees the same interval's
//! figure); the first look, or one after a long pause, measures over [`SHORT_WINDOW`] instead,
//! so it answers a second later.

use crate::clock::now_ms;
use crate::exec::{Running, EXEC_ID_VAR};
use gateway_proto::op::GuestActivity;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

/// Shortest interval a CPU figure is measured over.
pub const MIN_INTERVAL_MS: i64 = 1_000;
/// A look more than this after the previous one (or the first) does not measure since then, which
/// could average an old burst in: it measures over [`SHORT_WINDOW`] instead. The idle job asks
/// every period (at most 30 s) while a computer is idle through the API.
pub const MAX_INTERVAL_MS: i64 = 60_000;
/// The window a look without a recent previous one measures CPU over.
pub const SHORT_WINDOW: std::time::Duration = std::time::Duration::from_secs(1);
/// Most processes looked at in one look: a machine with more is judged on the first ones.
const MAX_PROCS: usize = 65_536;

/// When a terminal, or a detached process, last printed (milliseconds since the epoch; 0:
/// never).
#[derive(Debug, Clone, Default)]
pub struct LastOutput(Arc<AtomicI64>);

impl LastOutput {
    pub fn stamp(&self) {
        self.0.fetch_max(now_ms(), Ordering::Relaxed);
    }

    pub fn at_ms(&self) -> Option<i64> {
        Some(self.0.load(Ordering::Relaxed)).filter(|&t| t > 0)
    }
}

/// One process as the look needs it, from `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub state: char,
    /// utime + stime, clock ticks.
    pub ticks: u64,
    /// Start time after boot, clock ticks (with `pid`, names the process).
    pub start: u64,
}

/// Parses `/proc/<pid>/stat` (fields after the last `)`, since the command name may hold
/// anything).
pub fn parse_stat(s: &str) -> Option<Proc> {
    let open = s.find(" (")?;
    let close = s.rfind(')')?;
    let pid = s.get(..open)?.trim().parse().ok()?;
    let f: Vec<&str> = s.get(close + 1..)?.split_ascii_whitespace().collect();
    // f[0] = state (field 3), f[1] = ppid (4), f[11] = utime (14), f[12] = stime (15),
    // f[19] = starttime (22).
    let num = |i: usize| f.get(i)?.parse::<u64>().ok();
    Some(Proc {
        pid,
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        ticks: num(11)?.saturating_add(num(12)?),
        start: num(19)?,
    })
}

/// The exec id in a process's environment (`/proc/<pid>/environ`), if any.
pub fn exec_id_of(environ: &[u8]) -> Option<&str> {
    let prefix = format!("{EXEC_ID_VAR}=");
    environ
        .split(|&b| b == 0)
        .find_map(|var| var.strip_prefix(prefix.as_bytes()))
        .and_then(|id| std::str::from_utf8(id).ok())
}

/// What one look at the process table found, pure: the processes, each one's exec marker, the
/// guest's pid and which exec ids run now in; counts and CPU ticks out.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// Live processes left by commands that have ended.
    pub background: u32,
    /// CPU ticks of the computer's processes by (pid, start).
    pub ticks: HashMap<(i32, u64), u64>,
}

/// Judges `procs` (see the module doc for whose CPU counts).
pub fn judge(
    procs: &[Proc],
    markers: &HashMap<i32, String>,
    me: i32,
    running: impl Fn(&str) -> bool,
) -> Scan {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut ours: HashSet<i32> = markers.keys().copied().collect();
    let mut todo: Vec<i32> = children.get(&me).cloned().unwrap_or_default();
    todo.extend(markers.keys().copied());
    while let Some(pid) = todo.pop() {
        ours.insert(pid);
        for &c in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
            if !ours.contains(&c) {
                todo.push(c);
            }
        }
    }
    let mut scan = Scan::default();
    for p in procs {
        if p.pid == me || !ours.contains(&p.pid) {
            continue;
        }
        scan.ticks.insert((p.pid, p.start), p.ticks);
        let zombie = matches!(p.state, 'Z' | 'X' | 'x');
        if !zombie && markers.get(&p.pid).is_some_and(|id| !running(id)) {
            scan.background += 1;
        }
    }
    scan
}

/// CPU ticks used between two looks: each process's growth; a process new since the earlier
/// look counts whole (it started within the interval).
pub fn ticks_between(before: &HashMap<(i32, u64), u64>, now: &HashMap<(i32, u64), u64>) -> u64 {
    now.iter()
        .map(|(k, t)| t.saturating_sub(before.get(k).copied().unwrap_or(0)))
        .fold(0u64, u64::saturating_add)
}

/// The previous look's CPU sample and the figure measured then.
#[derive(Debug, Default)]
struct Sample {
    at_ms: i64,
    ticks: HashMap<(i32, u64), u64>,
    /// The last measured figure and its interval.
    cpu_milli: u32,
    interval_ms: u64,
}

/// The guest's activity tracker.
#[derive(Debug)]
pub struct Activity {
    pub running: Arc<Running>,
    pub terminal: LastOutput,
    /// The detached processes' exec ids (`crate::procs` registers them).
    pub detached: Arc<Running>,
    /// When a detached process last printed.
    pub process_output: LastOutput,
    /// This home's exec-id prefix ([`crate::exec::home_tag`]): markers of other computers on the
    /// same host (local computers share `/proc`) are not ours.
    tag: String,
    sample: Mutex<Option<Sample>>,
}

impl Activity {
    pub fn new(home: &std::path::Path, terminal: LastOutput) -> Self {
        Self {
            running: Arc::default(),
            terminal,
            detached: Arc::default(),
            process_output: LastOutput::default(),
            tag: crate::exec::home_tag(home),
            sample: Mutex::default(),
        }
    }

    /// Looks now (reads `/proc`; may sleep [`SHORT_WINDOW`]: call off the async threads).
    pub fn look(&self) -> GuestActivity {
        let mut scan = self.scan();
        let mut now = now_ms();
        let stale = self
            .lock_sample()
            .as_ref()
            .is_none_or(|p| now.saturating_sub(p.at_ms) > MAX_INTERVAL_MS);
        if stale {
            // No recent look to measure from: measure over a short window now.
            *self.lock_sample() = Some(Sample {
                at_ms: now,
                ticks: std::mem::take(&mut scan.ticks),
                ..Sample::default()
            });
            std::thread::sleep(SHORT_WINDOW);
            scan = self.scan();
            now = now_ms();
        }
        let (cpu_milli, cpu_interval_ms) = self.cpu(now, scan.ticks);
        GuestActivity {
            commands: u32::try_from(self.running.count()).unwrap_or(u32::MAX),
            background: scan.background,
            terminal_output_ago_ms: self
                .terminal
                .at_ms()
                .map(|at| u64::try_from(now.saturating_sub(at)).unwrap_or(0)),
            cpu_milli,
            cpu_interval_ms,
            process_output_ago_ms: self
                .process_output
                .at_ms()
                .map(|at| u64::try_from(now.saturating_sub(at)).unwrap_or(0)),
        }
    }

    fn scan(&self) -> Scan {
        let me = i32::try_from(std::process::id()).unwrap_or(0);
        let (procs, markers) = read_procs(&self.tag);
        // A detached process's marker is not a left-behind command's: never background.
        judge(&procs, &markers, me, |id| {
            self.running.contains(id) || self.detached.contains(id)
        })
    }

    fn lock_sample(&self) -> std::sync::MutexGuard<'_, Option<Sample>> {
        self.sample.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn cpu(&self, now: i64, ticks: HashMap<(i32, u64), u64>) -> (u32, u64) {
        let mut sample = self.lock_sample();
        let Some(prev) = sample.as_mut() else {
            *sample = Some(Sample {
                at_ms: now,
                ticks,
                ..Sample::default()
            });
            return (0, 0);
        };
        let elapsed = now.saturating_sub(prev.at_ms);
        if elapsed >= MIN_INTERVAL_MS {
            let used = ticks_between(&prev.ticks, &ticks);
            // used / USER_HZ seconds over elapsed ms, in thousandths of a CPU.
            let elapsed_u = u128::try_from(elapsed).unwrap_or(1);
            let milli = u128::from(used) * 1_000_000 / (u128::from(USER_HZ) * elapsed_u).max(1);
            prev.cpu_milli = u32::try_from(milli).unwrap_or(u32::MAX);
            prev.interval_ms = u64::try_from(elapsed).unwrap_or(0);
            prev.at_ms = now;
            prev.ticks = ticks;
        }
        (prev.cpu_milli, prev.interval_ms)
    }
}

/// Clock ticks per second of `/proc`'s CPU times: `USER_HZ`, which Linux fixes at 100 on every
/// architecture it exports these fields on.
const USER_HZ: u64 = 100;

/// Every process in `/proc` (at most [`MAX_PROCS`]) and the exec marker of those whose
/// environment we may read and that carry one of this home's (`tag`).
fn read_procs(tag: &str) -> (Vec<Proc>, HashMap<i32, String>) {
    let mut procs = Vec::new();
    let mut markers = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return (procs, markers);
    };
    for entry in dir.flatten().take(MAX_PROCS) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Some(p) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .as_deref()
            .and_then(parse_stat)
        else {
            continue;
        };
        if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) {
            if let Some(id) = exec_id_of(&env).filter(|id| id.starts_with(tag)) {
                markers.insert(pid, id.to_owned());
            }
        }
        procs.push(p);
    }
    (procs, markers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: i32, ppid: i32, ticks: u64) -> Proc {
        Proc {
            pid,
            ppid,
            state: 'S',
            ticks,
            start: 7,
        }
    }

    #[test]
    fn stat_fields_come_after_the_last_parenthesis() {
        let line = "42 (a) b) c) R 7 42 42 0 -1 4194560 100 0 0 0 30 12 0 0 20 0 1 0 555 0 0";
        let got = parse_stat(line).unwrap();
        assert_eq!(
            got,
            Proc {
                pid: 42,
                ppid: 7,
                state: 'R',
                ticks: 42,
                start: 555
            }
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn the_marker_is_read_from_the_environment() {
        let env = b"PATH=/bin\0RAKAZO_EXEC_ID=abc123\0HOME=/h\0";
        assert_eq!(exec_id_of(env), Some("abc123"));
        assert_eq!(exec_id_of(b"PATH=/bin\0"), None);
    }

    /// Background = marker of an ended command; a running command's processes are not
    /// background; zombies are not; CPU counts the guest's descendants and marked processes
    /// but never the guest or strangers.
    #[test]
    fn background_and_whose_cpu_counts() {
        let me = 10;
        let mut zombie = p(23, 1, 0);
        zombie.state = 'Z';
        let procs = vec![
            p(1, 0, 1000),  // init: a stranger
            p(10, 1, 500),  // the guest itself
            p(11, 10, 5),   // Xvnc, a child of the guest
            p(12, 11, 3),   // its child
            p(20, 10, 9),   // a running command
            p(21, 1, 40),   // nohup'd work of an ended command, reparented to init
            p(22, 21, 2),   // its child (inherits the marker)
            zombie,         // an ended command's zombie
            p(30, 1, 7000), // a host process with no marker
        ];
        let markers: HashMap<i32, String> = [
            (20, "run".to_string()),
            (21, "done".to_string()),
            (22, "done".to_string()),
            (23, "done".to_string()),
        ]
        .into();
        let scan = judge(&procs, &markers, me, |id| id == "run");
        assert_eq!(scan.background, 2);
        let mut pids: Vec<i32> = scan.ticks.keys().map(|k| k.0).collect();
        pids.sort();
        assert_eq!(pids, vec![11, 12, 20, 21, 22, 23]);
    }

    #[test]
    fn cpu_is_the_growth_of_each_process() {
        let before: HashMap<_, _> = [((1, 7), 100), ((2, 7), 50), ((3, 7), 10)].into();
        // 1 grew by 20, 2 exited, 3's pid was reused (new start): counted whole, 4 is new.
        let now: HashMap<_, _> = [((1, 7), 120), ((3, 9), 5), ((4, 7), 8)].into();
        assert_eq!(ticks_between(&before, &now), 20 + 5 + 8);
    }

    #[test]
    fn a_finished_command_leaves_its_registration() {
        let running = Arc::new(Running::default());
        let g = running.enter("x");
        assert!(running.contains("x"));
        assert_eq!(running.count(), 1);
        drop(g);
        assert_eq!(running.count(), 0);
    }
}
