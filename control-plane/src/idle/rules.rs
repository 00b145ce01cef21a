//! The idle rule (docs/lifecycle.md#idle-suspension), pure: what was observed about one running
//! computer and `now` in, a [`Decision`] out. The job in [`super`] gathers the observation and acts
//! on the decision; nothing here reads a clock, a database or a connection.

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
    /// What its guest reported still working inside it; `None` when not asked, or when the
    /// guest did not answer in time (no activity).
    pub guest: Option<GuestWork>,
}

/// What a guest reported still working inside its computer (the `Activity` operation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GuestWork {
    /// Commands running (exec streams open).
    pub commands: u32,
    /// Processes that finished commands left running.
    pub background: u32,
    /// Since a terminal last printed; `None`: never.
    pub terminal_output_ago_ms: Option<u64>,
    /// CPU of the computer's processes over the last interval, thousandths of one CPU.
    pub cpu_milli: u32,
    /// Since a detached process last printed; `None`: never.
    pub process_output_ago_ms: Option<u64>,
}

/// The settings the rule judges with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Unused this long: idle.
    pub timeout: Duration,
    /// Work the guest reports keeps the computer up at most this long after its last use.
    pub background_max: Duration,
    /// CPU above this (thousandths of one CPU) is work.
    pub cpu_threshold_milli: u32,
}

impl GuestWork {
    /// Why this counts as work, or `None`: a terminal counts if it printed within the idle
    /// timeout, the CPU if above the threshold.
    pub fn why(&self, p: &Policy) -> Option<String> {
        let mut why = Vec::new();
        if self.commands > 0 {
            why.push(format!("{} command(s) still running", self.commands));
        }
        if self.background > 0 {
            why.push(format!(
                "{} background process(es) left by commands",
                self.background
            ));
        }
        if let Some(ago) = self.terminal_output_ago_ms {
            if u128::from(ago) < p.timeout.as_millis() {
                why.push(format!("terminal output {} s ago", ago / 1000));
            }
        }
        if let Some(ago) = self.process_output_ago_ms {
            if u128::from(ago) < p.timeout.as_millis() {
                why.push(format!("detached process output {} s ago", ago / 1000));
            }
        }
        if self.cpu_milli > p.cpu_threshold_milli {
            why.push(format!(
                "CPU at {}% of one CPU",
                (u64::from(self.cpu_milli) + 5) / 10
            ));
        }
        (!why.is_empty()).then(|| why.join(", "))
    }
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
    /// whose keep-awake window is over), then stop it. `overdue`: the work its guest reported,
    /// which no longer counts past the background maximum.
    Suspend {
        except: Vec<BotId>,
        overdue: Option<String>,
    },
}

impl Decision {
    /// The job asks the guest what still works inside only when everything else says suspend.
    pub fn wants_guest(&self) -> bool {
        matches!(self, Decision::Suspend { .. })
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Decides for a computer idle for `p.timeout`. A run waiting for a takeover does not keep the
/// computer awake by its lease alone: its request opened a keep-awake window on a non-billing
/// provider (recorded in `awake_until_ms`) or restarted the idle timer on a billed one (recorded
/// in `active_at_ms`), and once that has passed the computer suspends while the run keeps
/// waiting (docs/lifecycle.md#takeover).
///
/// Work the guest reports ([`GuestWork::why`]) keeps an otherwise idle computer up until
/// `p.background_max` after its last use (`active_at_ms`), never longer: a stuck process cannot
/// keep a computer up forever. It is looked at last, after everything the control plane knows
/// itself, so the job asks the guest only about a computer it would otherwise suspend.
pub fn decide(o: &Observed, p: &Policy, now_ms: i64) -> Decision {
    let idle_at = o.active_at_ms.saturating_add(ms(p.timeout));
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
    let mut overdue = None;
    if let Some(why) = o.guest.as_ref().and_then(|g| g.why(p)) {
        let ends_at = o.active_at_ms.saturating_add(ms(p.background_max));
        if now_ms < ends_at {
            return Decision::Busy(format!("working inside: {why}"));
        }
        overdue = Some(why);
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
        overdue,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Policy = Policy {
        timeout: Duration::from_secs(60),
        background_max: Duration::from_secs(600),
        cpu_threshold_milli: 100,
    };

    fn suspend(except: Vec<BotId>) -> Decision {
        Decision::Suspend {
            except,
            overdue: None,
        }
    }

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
            decide(&o, &T, 60_999),
            Decision::Awake {
                until_ms: 61_000,
                keep_awake: false
            }
        );
        assert_eq!(decide(&o, &T, 61_000), suspend(vec![]));
    }

    #[test]
    fn leases_streams_and_operations_keep_it_up() {
        let now = 100_000;
        let mut o = idle();
        o.in_flight = 1;
        assert!(matches!(decide(&o, &T, now), Decision::Busy(r) if r.contains("operation")));
        let mut o = idle();
        o.runs = vec![Run {
            bot: bot("b1"),
            waiting_takeover: false,
        }];
        assert!(
            matches!(decide(&o, &T, now), Decision::Busy(r) if r.contains("execution lease held by b1"))
        );
        let mut o = idle();
        o.control = vec!["b2".into()];
        assert!(
            matches!(decide(&o, &T, now), Decision::Busy(r) if r.contains("control lease held on b2"))
        );
        let mut o = idle();
        o.streams = 2;
        assert!(matches!(decide(&o, &T, now), Decision::Busy(r) if r.contains("stream")));
    }

    #[test]
    fn nothing_stops_without_a_possible_checkpoint() {
        let now = 100_000;
        let mut o = idle();
        o.connected = false;
        assert!(matches!(decide(&o, &T, now), Decision::Blocked(_)));
        let mut o = idle();
        o.pending_restore = true;
        assert!(matches!(decide(&o, &T, now), Decision::Blocked(_)));
        let mut o = idle();
        let waiting = |b: &str| Run {
            bot: bot(b),
            waiting_takeover: true,
        };
        // Several runs waiting for a takeover do not keep it up: all are passed over.
        o.runs = vec![waiting("w1"), waiting("w2")];
        assert_eq!(decide(&o, &T, now), suspend(vec![bot("w1"), bot("w2")]));
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
            decide(&o, &T, 5 * 60_000),
            Decision::Awake {
                until_ms: o.awake_until_ms,
                keep_awake: true
            }
        );
        assert_eq!(decide(&o, &T, o.awake_until_ms), suspend(vec![bot("w")]));
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
            decide(&o, &T, 109_999),
            Decision::Awake {
                keep_awake: false,
                ..
            }
        ));
        assert_eq!(decide(&o, &T, 110_000), suspend(vec![bot("w")]));
    }

    /// Each kind of work the guest reports keeps an API-idle computer up; nothing at or below
    /// the CPU threshold does, nor terminal output older than the timeout.
    #[test]
    fn work_inside_keeps_it_up() {
        let now = 100_000;
        let with = |g: GuestWork| Observed {
            guest: Some(g),
            ..idle()
        };
        let busy = |g: GuestWork, what: &str| {
            let d = decide(&with(g), &T, now);
            assert!(
                matches!(&d, Decision::Busy(r) if r.starts_with("working inside") && r.contains(what)),
                "{d:?}"
            );
        };
        busy(
            GuestWork {
                commands: 1,
                ..Default::default()
            },
            "1 command(s) still running",
        );
        busy(
            GuestWork {
                background: 2,
                ..Default::default()
            },
            "2 background process(es)",
        );
        busy(
            GuestWork {
                terminal_output_ago_ms: Some(59_000),
                ..Default::default()
            },
            "terminal output 59 s ago",
        );
        busy(
            GuestWork {
                process_output_ago_ms: Some(30_000),
                ..Default::default()
            },
            "detached process output 30 s ago",
        );
        busy(
            GuestWork {
                cpu_milli: 101,
                ..Default::default()
            },
            "CPU at 10% of one CPU",
        );
        for quiet in [
            GuestWork::default(),
            GuestWork {
                cpu_milli: 100,
                terminal_output_ago_ms: Some(60_000),
                process_output_ago_ms: Some(60_000),
                ..Default::default()
            },
        ] {
            assert_eq!(decide(&with(quiet), &T, now), suspend(vec![]));
        }
        // Not asked, or no answer: no activity.
        assert_eq!(decide(&idle(), &T, now), suspend(vec![]));
    }

    /// Past the background maximum (from the last use), reported work no longer counts: the
    /// computer suspends and the decision names what was cut off.
    #[test]
    fn background_work_has_a_maximum_lifetime() {
        let mut o = idle();
        o.guest = Some(GuestWork {
            background: 1,
            cpu_milli: 1000,
            ..Default::default()
        });
        let ends = o.active_at_ms + 600_000;
        assert!(matches!(decide(&o, &T, ends - 1), Decision::Busy(_)));
        match decide(&o, &T, ends) {
            Decision::Suspend {
                except,
                overdue: Some(why),
            } => {
                assert!(except.is_empty());
                assert!(why.contains("1 background process(es)"), "{why}");
            }
            d => panic!("expected a suspension, got {d:?}"),
        }
        // Leases and streams still hold it past the maximum: only guest work is bounded.
        o.streams = 1;
        assert!(matches!(decide(&o, &T, ends + 1), Decision::Busy(r) if r.contains("stream")));
    }

    #[test]
    fn the_guest_is_asked_only_about_a_computer_to_suspend() {
        assert!(suspend(vec![]).wants_guest());
        assert!(!Decision::Busy("x".into()).wants_guest());
        assert!(!Decision::Blocked("x".into()).wants_guest());
    }
}
