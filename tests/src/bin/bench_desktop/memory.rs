//! Part 5 of `bench_desktop`: RSS and PSS of the guest, X server and Chromium processes with
//! desktops live.

use super::*;

pub(super) struct Proc {
    pub(super) pid: i32,
    pub(super) ppid: i32,
    pub(super) comm: String,
    pub(super) cmdline: String,
}

pub(super) fn read_cmdline(pid: i32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    // Zombies have an empty command line: they hold no memory and need no kill.
    (!raw.is_empty()).then(|| String::from_utf8_lossy(&raw).replace('\0', " "))
}

pub(super) fn proc_table() -> Vec<Proc> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        let ppid = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let Some(cmdline) = read_cmdline(pid) else {
            continue;
        };
        out.push(Proc {
            pid,
            ppid,
            comm,
            cmdline,
        });
    }
    out
}

/// A `kB` field of `/proc/<pid>/status` or `/proc/<pid>/smaps_rollup`.
#[derive(Default, Clone, Copy)]
pub(super) struct Group {
    pub(super) count: usize,
    pub(super) rss_kb: u64,
    pub(super) pss_kb: u64,
}

impl Group {
    fn add(&mut self, pid: i32) {
        self.count += 1;
        self.rss_kb += proc_kb(pid, "status", "VmRSS:");
        self.pss_kb += proc_kb(pid, "smaps_rollup", "Pss:");
    }
}

pub(super) struct Memory {
    pub(super) desktops: usize,
    pub(super) displays: Vec<u64>,
    pub(super) guest_rss_kb: u64,
    pub(super) guest_anon_kb: u64,
    pub(super) guest_file_kb: u64,
    pub(super) guest_shmem_kb: u64,
    pub(super) guest_pss_kb: u64,
    pub(super) xserver: Group,
    pub(super) chromium: Group,
    pub(super) other: Group,
}

pub(super) fn memory(server: &mut Server, desktops: usize, displays: Vec<u64>) -> Result<Memory> {
    let guest = server.guest_pid()?;
    let mut m = Memory {
        desktops,
        displays,
        guest_rss_kb: proc_kb(guest, "status", "VmRSS:"),
        guest_anon_kb: proc_kb(guest, "status", "RssAnon:"),
        guest_file_kb: proc_kb(guest, "status", "RssFile:"),
        guest_shmem_kb: proc_kb(guest, "status", "RssShmem:"),
        guest_pss_kb: proc_kb(guest, "smaps_rollup", "Pss:"),
        xserver: Group::default(),
        chromium: Group::default(),
        other: Group::default(),
    };
    for p in server.desktop_processes()? {
        if p.comm == "Xvnc" || p.comm == "Xvfb" {
            m.xserver.add(p.pid);
        } else if p.comm.starts_with("chrom") || p.cmdline.contains("chromium") {
            m.chromium.add(p.pid);
        } else {
            m.other.add(p.pid);
        }
    }
    Ok(m)
}

// ---------------------------------------------------------------------------------------------
// Machine facts.
