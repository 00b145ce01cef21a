//! What the benches read about a process from /proc.

/// CPU seconds (user + system) process `pid` has used so far; 0 if it is gone.
pub fn cpu_s(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|i| f.get(*i).and_then(|v| v.parse::<u64>().ok()))
        .sum();
    // USER_HZ is 100 on Linux.
    ticks as f64 / 100.0
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
        assert_eq!(super::cpu_s(u32::MAX), 0.0);
    }
}
