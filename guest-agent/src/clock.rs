//! The guest's one reader of time: wall clock for timestamps, monotonic clock for waits.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (observation timestamps).
pub fn now_ms() -> i64 {
    #[allow(clippy::disallowed_methods)] // the one place that reads the wall clock
    let now = SystemTime::now();
    now.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The monotonic clock handed to the X clients that wait.
pub fn monotonic() -> crate::display::Clock {
    #[allow(clippy::disallowed_methods)] // the one place that reads the monotonic clock
    crate::display::Clock::new(Instant::now)
}
