//! The process heap under glibc's allocator: bounded retention (docs/faults.md#soak).
//!
//! A long-running `rakazo serve` holds a few megabytes of live heap, but glibc's `malloc`, left
//! to its defaults, keeps what it once needed: one arena per thread that allocated under
//! contention (up to 8 per core), each keeping its own high-water mark; a large buffer's
//! `mmap` threshold that rises after each big free (so later big buffers are carved from an arena
//! and stay there); and free pages inside an arena that are only given back when they sit at its
//! top. The soak (issue 36) saw RSS grow by a quarter over 25 minutes with a flat live heap
//! (BENCHMARKS.md, "Soak"). So, at start ([`configure`]) and on a period ([`trim_every`]):
//!
//! - at most [`ARENAS`] arenas (`M_ARENA_MAX`), unless the operator set `MALLOC_ARENA_MAX`;
//! - a fixed `mmap` threshold of [`MMAP_THRESHOLD`] (`M_MMAP_THRESHOLD`, which also fixes the
//!   trim threshold), unless the operator set `MALLOC_MMAP_THRESHOLD_`: buffers at least that
//!   large are mapped and unmapped whole, never left in an arena;
//! - every [`TRIM_EVERY`], `malloc_trim(0)`: the free pages of every arena are given back.
//!
//! Elsewhere (musl, other systems) all of this does nothing.
#![allow(
    unsafe_code,
    reason = "mallopt and malloc_trim have no safe wrapper; each block says why it is sound"
)]

use std::time::Duration;

/// Most malloc arenas ([`configure`]).
pub const ARENAS: i32 = 2;
/// Allocations of at least this many bytes are mapped on their own ([`configure`]).
pub const MMAP_THRESHOLD: i32 = 128 * 1024;
/// Period of [`trim_every`] in `rakazo serve`.
pub const TRIM_EVERY: Duration = Duration::from_secs(30);

/// What [`configure`] set: `(name, value)` of each setting applied.
pub type Applied = Vec<(&'static str, i32)>;

/// Bounds the allocator's retention: call once, before any thread is started. A setting the
/// operator made through glibc's own variable is left alone. Returns what was applied.
pub fn configure() -> Applied {
    let mut applied = Vec::new();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    for (env, name, param, value) in [
        ("MALLOC_ARENA_MAX", "M_ARENA_MAX", libc::M_ARENA_MAX, ARENAS),
        (
            "MALLOC_MMAP_THRESHOLD_",
            "M_MMAP_THRESHOLD",
            libc::M_MMAP_THRESHOLD,
            MMAP_THRESHOLD,
        ),
    ] {
        if std::env::var_os(env).is_some() {
            continue;
        }
        // SAFETY: mallopt only changes malloc's parameters; it takes no pointer.
        if unsafe { libc::mallopt(param, value) } == 1 {
            applied.push((name, value));
        }
    }
    applied
}

/// Gives the free pages of every arena back to the system; whether any was given back.
pub fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes the allocator's locks itself and no pointer.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Runs [`trim`] every `period`, forever (a task of `rakazo serve`).
pub async fn trim_every(period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        // A walk of each arena's free lists under its lock: well under a millisecond for the
        // few megabytes a control plane holds, so on this worker.
        trim();
    }
}
