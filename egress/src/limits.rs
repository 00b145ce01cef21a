//! Per-computer limits and the token bucket that enforces the rates.
//!
//! This module owns [`Limits`] (connections, bandwidth each way, DNS queries per second) and
//! [`Bucket`], a token bucket whose rate and burst are passed on every call, so a change of
//! limits applies at once without rebuilding state.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// What one computer may use. Zero means unlimited for the rates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Concurrent proxied connections (transparent and explicit together).
    pub max_connections: u32,
    /// Bytes per second from the computer to the internet (0: unlimited).
    pub up_bytes_per_sec: u64,
    /// Bytes per second from the internet to the computer (0: unlimited).
    pub down_bytes_per_sec: u64,
    /// DNS queries per second, sustained (0: unlimited).
    pub dns_queries_per_sec: u32,
    /// DNS queries allowed in a burst above the sustained rate.
    pub dns_burst: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 512,
            up_bytes_per_sec: 0,
            down_bytes_per_sec: 0,
            dns_queries_per_sec: 50,
            dns_burst: 100,
        }
    }
}

/// A token bucket. Rates are tokens per second; the bucket holds at most `burst` tokens and may
/// go into debt (a large read is taken whole, the next one waits until the debt is paid).
#[derive(Debug)]
pub struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// A full bucket (`burst` tokens are filled in lazily on the first call).
    pub fn new(now: Instant) -> Bucket {
        Bucket {
            tokens: f64::INFINITY,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant, rate: f64, burst: f64) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * rate).min(burst);
    }

    /// Takes `n` tokens if there are that many; `false` (and nothing taken) otherwise.
    pub fn try_take(&mut self, now: Instant, n: f64, rate: f64, burst: f64) -> bool {
        self.refill(now, rate, burst.max(rate).max(1.0));
        if self.tokens >= n {
            self.tokens -= n;
            true
        } else {
            false
        }
    }

    /// Takes `n` tokens, going into debt if needed, and says how long to wait before the bucket
    /// is out of debt (zero if it is not in debt). The burst is one second of the rate.
    pub fn debit(&mut self, now: Instant, n: u64, rate: u64) -> Duration {
        if rate == 0 {
            return Duration::ZERO;
        }
        let rate = rate as f64;
        self.refill(now, rate, rate);
        self.tokens -= n as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((-self.tokens / rate).min(60.0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn try_take_refuses_beyond_the_burst_then_refills_at_the_rate() {
        let t0 = crate::clock::now();
        let mut bucket = Bucket::new(t0);
        let took = (0..20)
            .filter(|_| bucket.try_take(t0, 1.0, 5.0, 10.0))
            .count();
        assert_eq!(took, 10);
        assert!(!bucket.try_take(t0, 1.0, 5.0, 10.0));
        let t1 = t0 + Duration::from_millis(400); // 2 tokens at 5/s
        assert!(bucket.try_take(t1, 1.0, 5.0, 10.0));
        assert!(bucket.try_take(t1, 1.0, 5.0, 10.0));
        assert!(!bucket.try_take(t1, 1.0, 5.0, 10.0));
    }

    #[test]
    fn debit_waits_for_the_debt() {
        let t0 = crate::clock::now();
        let mut bucket = Bucket::new(t0);
        assert_eq!(bucket.debit(t0, 1000, 1000), Duration::ZERO);
        let wait = bucket.debit(t0, 500, 1000);
        assert_eq!(wait, Duration::from_millis(500));
        assert_eq!(bucket.debit(t0, 1, 0), Duration::ZERO, "0 is unlimited");
    }
}
