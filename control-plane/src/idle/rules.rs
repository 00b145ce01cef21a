//! The idle rule (contracts.md §8, §9), pure: what was observed about one running computer and
//! `now` in, a [`Decision`] out. The job in [`super`] gathers the observation and acts on the
//! decision; nothing here reads a clock, a database or a connection.

use gateway_proto::BotId;
use std::time::Duration;

/// A live execution lease on the computer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub bot: BotId,
    /// The run holding the lease marked itself `waiting_takeover` with that very lease.
    pub waiting_takeover: bool,
}

/// What the idle job saw of one running computer.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// Its guest is connected (a checkpoint needs it).
    pub connected: bool,
    /// Its machine has not imported the stored home yet: a checkpoint is refused meanwhile.
    pub pending_restore: bool,
    /// API operations on it in progress in this control plane.
    pub in_flight: u32,
    /// Live view, control or terminal streams open on it.
    pub streams: usize,
    /// Bots whose user control lease is live.
    pub control: Vec<String>,
    /// Live execution leases.
    pub runs: Vec<Run>,
    /// When it was last used, in milliseconds since the epoch.
    pub active_at_ms: i64,
    /// A takeover request keeps it awake until then (non-billing providers only; 0: none).
    pub awake_until_ms: i64,
}

/// What to do with the computer now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Used within the idle timeout, or inside a takeover's keep-awake window: not idle before
    /// `until_ms`.
    Awake { until_ms: i64, keep_awake: bool },
    /// Idle for the timeout, but in use: a lease, a stream or an operation holds it.
    Busy(String),
    /// Idle and unused, but a checkpoint is impossible now; nothing is stopped without one.
    Blocked(String),
    /// Claim it, checkpoint its home (passing over `except`, the runs waiting for a takeover
    /// whose keep-awake window is over), then stop it.
    Suspend { except: Vec<BotId> },
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Decides for a computer idle for `timeout`. A run waiting for a takeover does not keep the
/// computer awake by its lease alone: its request opened a keep-awake window on a non-billing
/// provider (recorded in `awake_until_ms`) or restarted the idle timer on a billed one (recorded
/// in `active_at_ms`), and once that has passed the computer suspends while the run keeps
/// waiting (§8).
pub fn decide(o: &Observed, timeout: Duration, now_ms: i64) -> Decision {
    let idle_at = o.active_at_ms.saturating_add(ms(timeout));
    if now_ms < idle_at || now_ms < o.awake_until_ms {
        return Decision::Awake {
            until_ms: idle_at.max(o.awake_until_ms),
            keep_awake: o.awake_until_ms > idle_at,
        };
    }
    if o.in_flight > 0 {
        return Decision::Busy(format!("{} API operation(s) in progress", o.in_flight));
    }
    let running: Vec<&str> = o
        .runs
        .iter()
        .filter(|r| !r.waiting_takeover)
        .map(|r| r.bot.as_str())
        .collect();
    if !running.is_empty() {
        return Decision::Busy(format!("execution lease held by {}", running.join(", ")));
    }
    if !o.control.is_empty() {
        return Decision::Busy(format!("control lease held on {}", o.control.join(", ")));
    }
    if o.streams > 0 {
        return Decision::Busy(format!("{} live stream(s) open", o.streams));
    }
    if !o.connected {
        return Decision::Blocked("its guest is not connected: no checkpoint possible".into());
    }
    if o.pending_restore {
        return Decision::Blocked("its stored home was not restored yet".into());
    }
    // Every run left is waiting for a takeover: the checkpoint passes over their leases.
    Decision::Suspend {
        except: o.runs.iter().map(|r| r.bot.clone()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(60);

    fn bot(s: &str) -> BotId {
        BotId::new(s).unwrap()
    }

    fn idle() -> Observed {
        Observed {
            connected: true,
            active_at_ms: 1_000,
            ..Default::default()
        }
    }

    #[test]
    fn suspends_only_after_the_timeout() {
        let o = idle();
        assert_eq!(
            decide(&o, T, 60_999),
            Decision::Awake {
                until_ms: 61_000,
                keep_awake: false
            }
        );
        assert_eq!(decide(&o, T, 61_000), Decision::Suspend { except: vec![] });
    }

    #[test]
    fn leases_streams_and_operations_keep_it_up() {
        let now = 100_000;
        let mut o = idle();
        o.in_flight = 1;
        assert!(matches!(decide(&o, T, now), Decision::Busy(r) if r.contains("operation")));
        let mut o = idle();
        o.runs = vec![Run {
            bot: bot("b1"),
            waiting_takeover: false,
        }];
        assert!(
            matches!(decide(&o, T, now), Decision::Busy(r) if r.contains("execution lease held by b1"))
        );
        let mut o = idle();
        o.control = vec!["b2".into()];
        assert!(
            matches!(decide(&o, T, now), Decision::Busy(r) if r.contains("control lease held on b2"))
        );
        let mut o = idle();
        o.streams = 2;
        assert!(matches!(decide(&o, T, now), Decision::Busy(r) if r.contains("stream")));
    }

    #[test]
    fn nothing_stops_without_a_possible_checkpoint() {
        let now = 100_000;
        let mut o = idle();
        o.connected = false;
        assert!(matches!(decide(&o, T, now), Decision::Blocked(_)));
        let mut o = idle();
        o.pending_restore = true;
        assert!(matches!(decide(&o, T, now), Decision::Blocked(_)));
        let mut o = idle();
        let waiting = |b: &str| Run {
            bot: bot(b),
            waiting_takeover: true,
        };
        // Several runs waiting for a takeover do not keep it up: all are passed over.
        o.runs = vec![waiting("w1"), waiting("w2")];
        assert_eq!(
            decide(&o, T, now),
            Decision::Suspend {
                except: vec![bot("w1"), bot("w2")]
            }
        );
    }

    /// Non-billing provider: the request opened a window longer than the idle timeout; the
    /// waiting run's lease alone does not keep the computer up once it is over.
    #[test]
    fn a_takeover_window_keeps_it_awake_then_it_suspends_while_the_run_waits() {
        let mut o = idle();
        o.runs = vec![Run {
            bot: bot("w"),
            waiting_takeover: true,
        }];
        o.awake_until_ms = 1_000 + 30 * 60_000;
        assert_eq!(
            decide(&o, T, 5 * 60_000),
            Decision::Awake {
                until_ms: o.awake_until_ms,
                keep_awake: true
            }
        );
        assert_eq!(
            decide(&o, T, o.awake_until_ms),
            Decision::Suspend {
                except: vec![bot("w")]
            }
        );
    }

    /// Billed provider: no window; the request only restarted the idle timer.
    #[test]
    fn a_billed_takeover_follows_the_idle_timer() {
        let mut o = idle();
        o.runs = vec![Run {
            bot: bot("w"),
            waiting_takeover: true,
        }];
        o.active_at_ms = 50_000;
        assert!(matches!(
            decide(&o, T, 109_999),
            Decision::Awake {
                keep_awake: false,
                ..
            }
        ));
        assert_eq!(
            decide(&o, T, 110_000),
            Decision::Suspend {
                except: vec![bot("w")]
            }
        );
    }
}
