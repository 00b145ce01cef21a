//! Waiting for the screen to settle after an action (**ours**, issue 3): instead of a fixed
//! sleep, wait until the X server has reported no damage to the root window for a quiet period
//! (about 100 ms), capped (2 s by default), and report how long that took.
//!
//! After input (issue 17) the quiet period starts only with the first damage: a client that
//! draws its answer to a click later than the quiet period (Chromium on a loaded machine did, in
//! 2 of 100 acts) would otherwise be captured before it drew. So a caller [`Settler::arm`]s the
//! settler *before* it sends the input, and [`Settler::wait_after_input`] then waits (bounded)
//! for the first damage since the arm, then for the quiet period. When no damage comes within
//! the bound the screen is taken as unchanged (a click on a blank spot draws nothing).
//!
//! The decision is the pure [`QuietWindow`], driven by timestamps the caller supplies; the X side
//! ([`Settler`]) feeds it real DAMAGE events. The damage object reports at level NonEmpty and is
//! re-armed (DamageSubtract) after each notification, so a busy screen costs one event per
//! round trip, not one per drawing request. Arming costs one round trip: notifications the
//! server generated before it processed the arm's DamageSubtract carry an older sequence number
//! and are dropped; later ones count.
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
/// After input, the longest wait for the first damage; without one by then the screen is taken
/// as unchanged. Five quiet periods: a click on a blank spot costs this long. Measured on the
/// bench machine (`bench_desktop`, 2 cores, load about 2), Chromium's first damage after a click
/// came 5 ms into the wait at p50 and 18 ms at most in 100 runs; the bound leaves room for a
/// loaded machine (the old 100 ms quiet window missed 2 draws in 100 at load 21).
pub const DEFAULT_FIRST_DAMAGE: Duration = Duration::from_millis(500);

/// How a settle wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettleOutcome {
    /// From the start of the wait to its end.
    pub waited: Duration,
    /// `true` when the quiet period was reached, `false` when the cap cut the wait short.
    pub settled: bool,
    /// Damage notifications seen during the wait.
    pub damage_events: u32,
    /// From the start of the wait to the first damage seen (`None`: none came). A wait after
    /// input counts damage that came between the arm and the start as seen at the start.
    pub first_damage: Option<Duration>,
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
/// last damage, capped at `cap` after the start. After input ([`QuietWindow::after_input`]) the
/// start does not count as activity: the window opens with the first damage, which must come
/// within `first_within` of the start, else the wait ends there as settled (nothing changed).
/// Pure: time comes only from the arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuietWindow {
    start: Instant,
    /// The latest damage; `None` until the first one after input.
    last_damage: Option<Instant>,
    first_damage: Option<Instant>,
    /// After input: how long the first damage may take.
    first_within: Option<Duration>,
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
            last_damage: Some(start),
            first_damage: None,
            first_within: None,
            quiet,
            cap,
            damage_events: 0,
        }
    }

    /// A wait after input starting at `start`: the quiet period runs from the first damage,
    /// which must come within `first_within` (at most `cap`); without it the wait ends settled
    /// at `start + first_within`.
    pub fn after_input(
        start: Instant,
        first_within: Duration,
        quiet: Duration,
        cap: Duration,
    ) -> Self {
        Self {
            start,
            last_damage: None,
            first_damage: None,
            first_within: Some(first_within.min(cap)),
            quiet,
            cap,
            damage_events: 0,
        }
    }

    /// Damage was seen at `now`.
    pub fn handle_damage(&mut self, now: Instant) {
        let now = now.max(self.start);
        self.last_damage = Some(self.last_damage.map_or(now, |last| last.max(now)));
        self.first_damage.get_or_insert(now);
        self.damage_events += 1;
    }

    /// The decision at `now`.
    pub fn poll(&self, now: Instant) -> SettlePoll {
        let cap_at = self.start + self.cap;
        let Some(last_damage) = self.last_damage else {
            // After input, nothing drawn yet.
            let first_by = self.start + self.first_within.unwrap_or(Duration::ZERO);
            if now >= first_by {
                return SettlePoll::Done(self.outcome(first_by, true));
            }
            return SettlePoll::WaitUntil(first_by);
        };
        let quiet_at = last_damage + self.quiet;
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
            first_damage: self
                .first_damage
                .map(|at| at.saturating_duration_since(self.start)),
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
    /// Armed and not yet waited on.
    armed: bool,
    /// Damage reported since the arm that no wait has counted yet.
    damaged: bool,
    /// Requests that waited for the server's answer, for tests and benchmarks.
    round_trips: u64,
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
            armed: false,
            damaged: false,
            round_trips: 0,
        })
    }

    /// Waits until the screen has been quiet for `quiet` (at most `cap`). Damage from before the
    /// call is not counted (the start itself counts as activity).
    pub fn wait(&mut self, quiet: Duration, cap: Duration) -> Result<SettleOutcome, DisplayError> {
        self.arm()?;
        let window = QuietWindow::new(self.clock.now(), quiet, cap);
        self.run(window)
    }

    /// [`Settler::wait`] with [`DEFAULT_QUIET`] and [`DEFAULT_CAP`].
    pub fn wait_default(&mut self) -> Result<SettleOutcome, DisplayError> {
        self.wait(DEFAULT_QUIET, DEFAULT_CAP)
    }

    /// Starts counting damage: from now on (once the server has processed this call's
    /// DamageSubtract, which this waits for: one round trip) every damage is seen by the next
    /// [`Settler::wait_after_input`]. Call it before sending the input whose effect the wait
    /// is for, so that a client drawing at once is not missed.
    pub fn arm(&mut self) -> Result<(), DisplayError> {
        let display = self.display;
        let subtracted = self
            .conn
            .damage_subtract(self.damage, NONE, NONE)
            .map_err(x11_err(display))?
            .sequence_number();
        self.conn.sync().map_err(x11_err(display))?;
        self.round_trips += 1;
        self.damaged = false;
        // Everything the server sent before answering the sync is queued now. A notification
        // generated before it processed the subtract carries an older sequence number: that
        // damage is in the past (and the subtract emptied the region, so the next damage is
        // reported again). A later one is fresh.
        while let Some((event, seq)) = self
            .conn
            .poll_for_event_with_sequence()
            .map_err(x11_err(display))?
        {
            match event {
                Event::DamageNotify(n) if n.damage == self.damage => {
                    self.damaged |= seq >= subtracted;
                }
                Event::Error(error) => return Err(x11_err(display)(error)),
                _ => {}
            }
        }
        self.armed = true;
        Ok(())
    }

    /// After input sent since [`Settler::arm`]: waits up to `first_within` for the first damage
    /// since the arm, then until the screen has been quiet for `quiet`, all within `cap` of the
    /// call. Without damage by `first_within` it returns settled (the input changed nothing on
    /// screen). Not armed, it arms first (and then cannot see damage from before this call).
    pub fn wait_after_input(
        &mut self,
        first_within: Duration,
        quiet: Duration,
        cap: Duration,
    ) -> Result<SettleOutcome, DisplayError> {
        if !self.armed {
            self.arm()?;
        }
        let window = QuietWindow::after_input(self.clock.now(), first_within, quiet, cap);
        self.run(window)
    }

    /// How many times this settler waited for the server's answer (arms; setup not counted).
    pub fn round_trips(&self) -> u64 {
        self.round_trips
    }

    /// Feeds damage notifications to `window` until it decides; each wait on the socket is
    /// bounded by the window's next deadline.
    fn run(&mut self, mut window: QuietWindow) -> Result<SettleOutcome, DisplayError> {
        let display = self.display;
        let clock = self.clock.clone();
        let now = || clock.now();
        self.armed = false;
        let mut damaged = std::mem::take(&mut self.damaged);
        loop {
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
                damaged = false;
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
                damage_events: 0,
                first_damage: None,
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
        assert_eq!(out.first_damage, Some(ms(30)));
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

    #[test]
    fn after_input_the_quiet_period_waits_for_the_first_damage() {
        let t0 = origin();
        let first = Duration::from_secs(1);
        let mut w = QuietWindow::after_input(t0, first, Q, CAP);
        // The start is not activity: at 100 ms nothing has been drawn yet, so no decision.
        assert_eq!(w.poll(t0 + Q), SettlePoll::WaitUntil(t0 + first));
        // A late draw (300 ms after the input) opens the window.
        w.handle_damage(t0 + ms(300));
        assert_eq!(w.poll(t0 + ms(320)), SettlePoll::WaitUntil(t0 + ms(400)));
        let SettlePoll::Done(out) = w.poll(t0 + ms(400)) else {
            panic!("not settled")
        };
        assert_eq!(
            out,
            SettleOutcome {
                waited: ms(400),
                settled: true,
                damage_events: 1,
                first_damage: Some(ms(300)),
            }
        );
    }

    #[test]
    fn after_input_without_damage_the_wait_ends_settled_at_the_bound() {
        let t0 = origin();
        let w = QuietWindow::after_input(t0, ms(700), Q, CAP);
        assert_eq!(w.poll(t0 + ms(699)), SettlePoll::WaitUntil(t0 + ms(700)));
        let SettlePoll::Done(out) = w.poll(t0 + ms(900)) else {
            panic!("not done")
        };
        assert_eq!(
            out,
            SettleOutcome {
                waited: ms(700),
                settled: true,
                damage_events: 0,
                first_damage: None,
            }
        );
        // The bound never exceeds the cap.
        let w = QuietWindow::after_input(t0, Duration::from_secs(9), Q, ms(300));
        assert_eq!(w.poll(t0), SettlePoll::WaitUntil(t0 + ms(300)));
    }

    #[test]
    fn after_input_damage_keeps_the_cap() {
        let t0 = origin();
        let mut w = QuietWindow::after_input(t0, Duration::from_secs(1), Q, ms(500));
        w.handle_damage(t0 + ms(450));
        assert_eq!(w.poll(t0 + ms(460)), SettlePoll::WaitUntil(t0 + ms(500)));
        let SettlePoll::Done(out) = w.poll(t0 + ms(500)) else {
            panic!("not capped")
        };
        assert!(!out.settled);
        assert_eq!(out.waited, ms(500));
        // Damage seen before the start (between the arm and the wait) counts as at the start.
        let mut w = QuietWindow::after_input(t0, Duration::from_secs(1), Q, CAP);
        w.handle_damage(t0 - ms(50));
        assert_eq!(w.poll(t0), SettlePoll::WaitUntil(t0 + Q));
    }
}
