//! The crate's one reader of the monotonic clock (the workspace's clippy.toml forbids others).

use std::time::Instant;

/// Now, on the monotonic clock.
pub fn now() -> Instant {
    #[allow(clippy::disallowed_methods)] // the one place that reads the monotonic clock
    Instant::now()
}
