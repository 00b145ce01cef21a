//! `control_plane::heap` (docs/faults.md#soak): the allocator gives freed memory back.
//!
//! A process of its own (this test binary), so no other test's allocations move its RSS.

#![cfg(all(target_os = "linux", target_env = "gnu"))]

/// This process's anonymous resident memory, in KiB.
fn anon_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("RssAnon in /proc/self/status")
}

/// What the soak saw: a thread's arena once held a lot, nearly all of it freed, but a few live
/// blocks spread over it (a connection's buffers, a map's entries) keep its top from shrinking,
/// so `free` alone gives nothing back. [`control_plane::heap::trim`] must.
#[test]
fn trim_gives_an_arenas_freed_pages_back() {
    const BLOCK: usize = 1024;
    const BLOCKS: usize = 64 * 1024; // 64 MiB
    const KEEP_EVERY: usize = 256; // one live block per 256 KiB
    let (freed, trimmed) = std::thread::spawn(|| {
        let mut blocks: Vec<Option<Vec<u8>>> =
            (0..BLOCKS).map(|i| Some(vec![i as u8; BLOCK])).collect();
        for (i, b) in blocks.iter_mut().enumerate() {
            if i % KEEP_EVERY != KEEP_EVERY - 1 {
                *b = None;
            }
        }
        let freed = anon_kib();
        let gave_back = control_plane::heap::trim();
        let trimmed = anon_kib();
        // The live blocks are still there.
        let live = blocks.iter().flatten().count();
        assert_eq!(live, BLOCKS / KEEP_EVERY);
        assert!(gave_back, "malloc_trim gave nothing back");
        (freed, trimmed)
    })
    .join()
    .expect("the allocating thread");
    let released_kib = freed.saturating_sub(trimmed);
    // 63.75 MiB were freed; at least half of it must leave the process.
    assert!(
        released_kib >= 32 * 1024,
        "trim released {released_kib} KiB (anonymous memory {freed} KiB after the frees, {trimmed} KiB after the trim)"
    );
}

/// Without the operator's variables, both bounds are applied.
#[test]
fn configure_bounds_arenas_and_the_mmap_threshold() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some()
        || std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some()
    {
        return;
    }
    let applied = control_plane::heap::configure();
    assert_eq!(
        applied,
        vec![
            ("M_ARENA_MAX", control_plane::heap::ARENAS),
            ("M_MMAP_THRESHOLD", control_plane::heap::MMAP_THRESHOLD)
        ]
    );
}
