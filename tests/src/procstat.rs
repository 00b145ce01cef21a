//! What the benches and tests read from /proc: a process's CPU time, the SysV shared-memory
//! segments.

/// Clock ticks per second of /proc's CPU times (USER_HZ, 100 on Linux).
pub const TICKS_PER_SEC: f64 = 100.0;

/// User plus system CPU time of process `pid` (all threads; `"self"` for this one), in clock
/// ticks; 0 if it is gone.
pub fn cpu_ticks(pid: &str) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // Fields after `(comm)`, which may hold spaces: state is field 3, utime 14 and stime 15.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    get(11) + get(12)
}

/// [`cpu_ticks`] in seconds.
pub fn cpu_s(pid: u32) -> f64 {
    cpu_ticks(&pid.to_string()) as f64 / TICKS_PER_SEC
}

/// A `kB` value of a `/proc/<pid>/<file>` such as `status` (`VmRSS:`) or `smaps_rollup`
/// (`Pss:`); 0 when the process or the key is gone.
pub fn proc_kb(pid: i32, file: &str, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// One SysV shared-memory segment, as `/proc/sysvipc/shm` (what `ipcs -m` reads) lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShmSegment {
    pub shmid: u64,
    pub size: u64,
    /// The creator's pid.
    pub cpid: u32,
    /// How many processes have it attached.
    pub nattch: u64,
    /// Owner and creator uids.
    pub uid: u32,
    pub cuid: u32,
}

/// Every SysV shared-memory segment of this IPC namespace.
pub fn shm_segments() -> std::io::Result<Vec<ShmSegment>> {
    let text = std::fs::read_to_string("/proc/sysvipc/shm")?;
    Ok(text.lines().skip(1).filter_map(parse_shm_line).collect())
}

/// A line of `/proc/sysvipc/shm`: key shmid perms size cpid lpid nattch uid gid cuid ...
fn parse_shm_line(line: &str) -> Option<ShmSegment> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let get = |i: usize| f.get(i)?.parse::<u64>().ok();
    Some(ShmSegment {
        shmid: get(1)?,
        size: get(3)?,
        cpid: u32::try_from(get(4)?).ok()?,
        nattch: get(6)?,
        uid: u32::try_from(get(7)?).ok()?,
        cuid: u32::try_from(get(9)?).ok()?,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn shm_lines_parse_like_the_kernel_writes_them() {
        let line = "         0      32781  1600      4194304   123456   123460      2  2000017  2000017  2000017  2000017 1764670000 0 1764670000  4194304        0";
        let seg = super::parse_shm_line(line).unwrap();
        assert_eq!(
            seg,
            super::ShmSegment {
                shmid: 32781,
                size: 4_194_304,
                cpid: 123_456,
                nattch: 2,
                uid: 2_000_017,
                cuid: 2_000_017,
            }
        );
        assert!(super::parse_shm_line("garbage").is_none());
        // The header line never parses; this machine's table reads.
        assert!(super::shm_segments().is_ok());
    }

    #[test]
    fn this_process_has_used_some_cpu_and_a_gone_one_none() {
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        assert!(super::cpu_s(std::process::id()) > 0.0);
        assert!(super::cpu_ticks("self") > 0);
        assert_eq!(super::cpu_s(u32::MAX), 0.0);
    }
}
