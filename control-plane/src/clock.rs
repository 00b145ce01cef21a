//! The control plane's one reader of wall-clock time.
//!
//! Logic takes `now_ms` as a parameter (leases, expiry); only the edges call [`now_ms`].

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    #[allow(clippy::disallowed_methods)] // the one place that reads the wall clock
    let now = std::time::SystemTime::now();
    now.duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The monotonic clock, for measuring how long something took (metrics).
pub fn monotonic() -> std::time::Instant {
    #[allow(clippy::disallowed_methods)] // the one place that reads the monotonic clock
    let now = std::time::Instant::now();
    now
}
