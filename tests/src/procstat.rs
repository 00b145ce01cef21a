//! What the benches read about a process from /proc.

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

#[cfg(test)]
mod tests {
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
