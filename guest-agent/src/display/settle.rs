//! Waiting for the screen to settle after an action (**ours**, issue 3): instead of a fixed
//! sleep, wait until the X server has reported no damage to the root window for a quiet period
//! (about 100 ms), capped (2 s by default), and report how long that took.
//!
//! The decision is the pure [`QuietWindow`], driven by timestamps the caller supplies; the X side
//! ([`Settler`]) feeds it real DAMAGE events. The damage object reports at level NonEmpty and is
//! re-armed (DamageSubtract) after each notification, so a busy screen costs one event per
//! round trip, not one per drawing request.
//!
//! It leaves to others: the clock (injected as a [`Clock`]), and the `settle_ms` batch option, which
//! replaces this wait with a fixed one.

use std::os::fd::AsFd as _;
use std::time::{Duration, Instant};

use x11rb::connection::{Connection, RequestConnection as _};
use x11rb::protocol::damage::{self, ConnectionExt as _, ReportLevel};
use x11rb::protocol::xproto::Window;
use x11rb::protocol::Event;
use x11rb::rust_connection::RustConnection;
use x11rb::wrapper::ConnectionExt as _;
use x11rb::NONE;

use super::{sys, x11_err, Clock, DisplayAccess, DisplayError, DisplayNum};

/// Quiet period after the last damage that counts as settled.
pub const DEFAULT_QUIET: Duration = Duration::from_millis(100);
/// Longest settle wait.
pub const DEFAULT_CAP: Duration = Duration::from_secs(2);

/// How a settle wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettleOutcome {
    /// From the start of the wait to its end.
    pub waited: Duration,
    /// `true` when the quiet period was reached, `false` when the cap cut the wait short.
    pub settled: bool,
    /// Damage notifications seen during the wait.
    pub damage_events: u32,
}

/// What the quiet-window decision says at some instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettlePoll {
    /// The wait is over.
    Done(SettleOutcome),
    /// Nothing to decide before this instant (unless damage arrives first).
    WaitUntil(Instant),
}

/// The settle decision: quiet once `quiet` has passed since the later of the start and the
/// last damage, capped at `cap` after the start. Pure: time comes only from the arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuietWindow {
    start: Instant,
    last_damage: Instant,
    quiet: Duration,
    cap: Duration,
    damage_events: u32,
}

impl QuietWindow {
    /// A wait starting at `start`. The start counts as activity: the action that precedes a
    /// settle may repaint only after it began.
    pub fn new(start: Instant, quiet: Duration, cap: Duration) -> Self {
        Self {
            start,
            last_damage: start,
            quiet,
            cap,
            damage_events: 0,
        }
    }

    /// Damage was seen at `now`.
    pub fn handle_damage(&mut self, now: Instant) {
        self.last_damage = self.last_damage.max(now);
        self.damage_events += 1;
    }

    /// The decision at `now`.
    pub fn poll(&self, now: Instant) -> SettlePoll {
        let quiet_at = self.last_damage + self.quiet;
        let cap_at = self.start + self.cap;
        if now >= quiet_at && quiet_at <= cap_at {
            return SettlePoll::Done(self.outcome(quiet_at.max(self.start), true));
        }
        if now >= cap_at {
            return SettlePoll::Done(self.outcome(cap_at, false));
        }
        SettlePoll::WaitUntil(quiet_at.min(cap_at))
    }

    /// `waited` counts to the instant the decision became due, not to when it was polled, so a
    /// late poll does not inflate it; the caller's own elapsed time can only be larger.
    fn outcome(&self, due: Instant, settled: bool) -> SettleOutcome {
        SettleOutcome {
            waited: due.saturating_duration_since(self.start),
            settled,
            damage_events: self.damage_events,
        }
    }
}

/// An X client that watches the whole screen for damage. Owns its connection.
#[derive(Debug)]
pub struct Settler {
    conn: RustConnection,
    display: DisplayNum,
    damage: damage::Damage,
    clock: Clock,
}

impl Settler {
    /// Connects to the display and starts watching the root window, reading time from
    /// `clock`. Fails when DAMAGE is missing.
    pub fn new(access: &DisplayAccess, clock: Clock) -> Result<Self, DisplayError> {
        let display = access.display();
        let conn = access.connect()?;
        if conn
            .extension_information(damage::X11_EXTENSION_NAME)
            .map_err(x11_err(display))?
            .is_none()
        {
            return Err(DisplayError::MissingExtension {
                display,
                extension: "DAMAGE",
            });
        }
        conn.damage_query_version(1, 1)
            .map_err(x11_err(display))?
            .reply()
            .map_err(x11_err(display))?;
        let root: Window = conn.setup().roots[0].root;
        let damage = conn.generate_id().map_err(x11_err(display))?;
        conn.damage_create(damage, root, ReportLevel::NON_EMPTY)
            .map_err(x11_err(display))?
            .check()
            .map_err(x11_err(display))?;
        Ok(Self {
            conn,
            display,
            damage,
            clock,
        })
    }

    /// Waits until the screen has been quiet for `quiet` (at most `cap`). Damage from before the call is
    /// not counted (the start itself counts as activity).
    pub fn wait(&mut self, quiet: Duration, cap: Duration) -> Result<SettleOutcome, DisplayError> {
        let display = self.display;
        let clock = self.clock.clone();
        let now = || clock.now();
        self.arm()?;
        let mut window = QuietWindow::new(now(), quiet, cap);
        loop {
            let mut damaged = false;
            while let Some(event) = self.conn.poll_for_event().map_err(x11_err(display))? {
                match event {
                    Event::DamageNotify(n) if n.damage == self.damage => damaged = true,
                    Event::Error(error) => return Err(x11_err(display)(error)),
                    _ => {}
                }
            }
            if damaged {
                window.handle_damage(now());
                self.subtract()?;
            }
            match window.poll(now()) {
                SettlePoll::Done(outcome) => return Ok(outcome),
                SettlePoll::WaitUntil(deadline) => {
                    let timeout = deadline.saturating_duration_since(now());
                    sys::wait_readable(self.conn.stream().as_fd(), timeout)
                        .map_err(|source| DisplayError::Poll { display, source })?;
                }
            }
        }
    }

    /// [`Settler::wait`] with [`DEFAULT_QUIET`] and [`DEFAULT_CAP`].
    pub fn wait_default(&mut self) -> Result<SettleOutcome, DisplayError> {
        self.wait(DEFAULT_QUIET, DEFAULT_CAP)
    }

    /// Empties the damage region and discards notifications of damage from before the wait.
    /// NonEmpty reports only the first damage after the region was last emptied, so a
    /// notification that raced the subtract must be followed by another subtract: up to three
    /// subtract-and-round-trip passes, until one sees no notification. On a screen too busy for
    /// that, the last pass still re-arms and later notifications count during the wait.
    fn arm(&self) -> Result<(), DisplayError> {
        let display = self.display;
        for _ in 0..3 {
            self.subtract()?;
            self.conn.sync().map_err(x11_err(display))?;
            let mut seen = false;
            while let Some(event) = self.conn.poll_for_event().map_err(x11_err(display))? {
                match event {
                    Event::DamageNotify(n) if n.damage == self.damage => seen = true,
                    Event::Error(error) => return Err(x11_err(display)(error)),
                    _ => {}
                }
            }
            if !seen {
                return Ok(());
            }
        }
        self.subtract()
    }

    /// Empties the damage region so the next damage is reported.
    fn subtract(&self) -> Result<(), DisplayError> {
        self.conn
            .damage_subtract(self.damage, NONE, NONE)
            .map_err(x11_err(self.display))?;
        self.conn.flush().map_err(x11_err(self.display))
    }
}

impl Drop for Settler {
    fn drop(&mut self) {
        if let Ok(cookie) = self.conn.damage_destroy(self.damage) {
            cookie.ignore_error();
        }
        let _ = self.conn.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: Duration = Duration::from_millis(100);
    const CAP: Duration = Duration::from_secs(2);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A fixed origin; the logic only compares instants derived from it.
    fn origin() -> Instant {
        #[allow(
            clippy::disallowed_methods,
            reason = "one arbitrary origin for synthetic timestamps; no logic reads it"
        )]
        Instant::now()
    }

    #[test]
    fn a_quiet_screen_settles_after_the_quiet_period() {
        let t0 = origin();
        let w = QuietWindow::new(t0, Q, CAP);
        assert_eq!(w.poll(t0), SettlePoll::WaitUntil(t0 + Q));
        assert_eq!(w.poll(t0 + ms(99)), SettlePoll::WaitUntil(t0 + Q));
        let SettlePoll::Done(out) = w.poll(t0 + ms(100)) else {
            panic!("not settled at 100 ms")
        };
        assert_eq!(
            out,
            SettleOutcome {
                waited: Q,
                settled: true,
                damage_events: 0
            }
        );
    }

    #[test]
    fn damage_restarts_the_quiet_period() {
        let t0 = origin();
        let mut w = QuietWindow::new(t0, Q, CAP);
        w.handle_damage(t0 + ms(30));
        w.handle_damage(t0 + ms(80));
        assert_eq!(w.poll(t0 + ms(150)), SettlePoll::WaitUntil(t0 + ms(180)));
        let SettlePoll::Done(out) = w.poll(t0 + ms(400)) else {
            panic!("not settled")
        };
        // Reported at the instant it became due, not when polled late.
        assert_eq!(out.waited, ms(180));
        assert!(out.settled);
        assert_eq!(out.damage_events, 2);
    }

    #[test]
    fn out_of_order_timestamps_never_move_the_window_back() {
        let t0 = origin();
        let mut w = QuietWindow::new(t0, Q, CAP);
        w.handle_damage(t0 + ms(50));
        w.handle_damage(t0 + ms(10));
        assert_eq!(w.poll(t0 + ms(120)), SettlePoll::WaitUntil(t0 + ms(150)));
    }

    #[test]
    fn constant_damage_is_cut_at_the_cap() {
        let t0 = origin();
        let mut w = QuietWindow::new(t0, Q, CAP);
        let mut t = t0;
        while t < t0 + ms(1950) {
            t += ms(50);
            w.handle_damage(t);
            assert!(matches!(w.poll(t), SettlePoll::WaitUntil(_)));
        }
        assert_eq!(w.poll(t), SettlePoll::WaitUntil(t0 + CAP));
        let SettlePoll::Done(out) = w.poll(t0 + CAP) else {
            panic!("not capped")
        };
        assert_eq!(out.waited, CAP);
        assert!(!out.settled);
        assert_eq!(out.damage_events, 39);
    }

    #[test]
    fn quiet_reached_exactly_at_the_cap_counts_as_settled() {
        let t0 = origin();
        let mut w = QuietWindow::new(t0, Q, ms(300));
        w.handle_damage(t0 + ms(200));
        let SettlePoll::Done(out) = w.poll(t0 + ms(300)) else {
            panic!("not done")
        };
        assert!(out.settled);
        assert_eq!(out.waited, ms(300));
    }

    #[test]
    fn a_zero_quiet_period_settles_at_once() {
        let t0 = origin();
        let w = QuietWindow::new(t0, Duration::ZERO, CAP);
        assert!(matches!(
            w.poll(t0),
            SettlePoll::Done(SettleOutcome {
                settled: true,
                waited: Duration::ZERO,
                ..
            })
        ));
    }
}
