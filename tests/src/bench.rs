//! What the bench binaries (tests/src/bin/bench_*.rs) share: their one clock read, milliseconds
//! as a float, and `--name N` options.

use std::time::{Duration, Instant};

/// The benchmark's one clock read.
#[allow(clippy::disallowed_methods)] // reason: a benchmark measures wall-clock time
pub fn now() -> Instant {
    Instant::now()
}

/// `d` in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The value of `--name N` on the command line, or `default` when absent or not a number.
pub fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether `--smoke` was given: a few runs of everything, seconds to a minute in all, so that CI
/// runs every bench (its timings printed, never asserted) and none can rot unnoticed.
pub fn smoke() -> bool {
    std::env::args().any(|a| a == "--smoke")
}

/// `full`, or `tiny` in a smoke run.
pub fn size<T>(full: T, tiny: T) -> T {
    if smoke() {
        tiny
    } else {
        full
    }
}

/// The command line after the program's name, without `--smoke`.
pub fn args() -> impl Iterator<Item = String> {
    std::env::args().skip(1).filter(|a| a != "--smoke")
}
