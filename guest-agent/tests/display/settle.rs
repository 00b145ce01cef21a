//! DAMAGE-based settling on a still screen, a busy one, and after input.

use super::*;

#[tokio::test]
async fn settle_returns_after_the_quiet_period_on_a_still_screen() -> Result<()> {
    let desktop = Desktop::start().await?;
    let mut settler = Settler::new(desktop.access(), clock())?;
    let quiet = Duration::from_millis(100);
    let started = now();
    let outcome = settler.wait(quiet, Duration::from_secs(2))?;
    let elapsed = started.elapsed();
    eprintln!("still screen: {outcome:?}, wall {elapsed:?}");
    ensure!(outcome.settled);
    assert_eq!(outcome.damage_events, 0);
    ensure!(outcome.waited >= quiet && outcome.waited < quiet + Duration::from_millis(150));
    ensure!(elapsed >= quiet && elapsed < Duration::from_secs(1));
    drop(settler);
    desktop.stop().await
}

/// What a painter thread did.
struct Painted {
    pub(super) frames: u32,
    /// The longest pause between two repaints: a loaded machine can stall the painter longer
    /// than the quiet period, and then the screen really was quiet.
    max_gap: Duration,
}

/// Repaints a window every 20 ms for `duration` from its own connection.
fn keep_busy(
    access: &DisplayAccess,
    duration: Duration,
) -> Result<std::thread::JoinHandle<Result<Painted>>> {
    let conn = access.connect()?;
    let window = create_window(
        &conn,
        (0, 0, 400, 400),
        0,
        EventMask::NO_EVENT,
        "busy",
        "Busy",
    )?;
    let gc = conn.generate_id()?;
    conn.create_gc(gc, window, &CreateGCAux::new().foreground(0x00ff_ffff))?;
    conn.sync()?;
    Ok(std::thread::spawn(move || -> Result<Painted> {
        let end = now() + duration;
        let mut frames = 0u32;
        let mut max_gap = Duration::ZERO;
        let mut last: Option<Instant> = None;
        while now() < end {
            let color = if frames.is_multiple_of(2) {
                0x00ff_0000
            } else {
                0x0000_ff00
            };
            conn.change_gc(
                gc,
                &x11rb::protocol::xproto::ChangeGCAux::new().foreground(color),
            )?;
            conn.poly_fill_rectangle(
                window,
                gc,
                &[Rectangle {
                    x: 0,
                    y: 0,
                    width: 400,
                    height: 400,
                }],
            )?;
            conn.sync()?;
            frames += 1;
            let painted = now();
            if let Some(last) = last {
                max_gap = max_gap.max(painted - last);
            }
            last = Some(painted);
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Painted { frames, max_gap })
    }))
}

#[tokio::test]
async fn settle_waits_out_a_busy_screen_and_stops_at_the_cap() -> Result<()> {
    let desktop = Desktop::start().await?;
    let mut settler = Settler::new(desktop.access(), clock())?;
    let quiet = Duration::from_millis(100);

    // The strict bounds hold only if the painter never paused for most of a quiet period.
    let steady = |p: &Painted| p.max_gap < quiet - Duration::from_millis(30);

    let busy_for = Duration::from_millis(400);
    let started = now();
    let painter = keep_busy(desktop.access(), busy_for)?;
    let outcome = settler.wait(quiet, Duration::from_secs(2))?;
    let painted = painter.join().expect("painter")?;
    eprintln!(
        "busy screen: {outcome:?} after {} repaints (longest gap {:?}), wall {:?}",
        painted.frames,
        painted.max_gap,
        started.elapsed()
    );
    ensure!(outcome.settled);
    ensure!(outcome.damage_events >= 1, "{outcome:?}");
    if steady(&painted) {
        ensure!(outcome.damage_events >= 3, "{outcome:?}");
        ensure!(
            outcome.waited >= busy_for - Duration::from_millis(50),
            "{outcome:?}"
        );
    }

    let cap = Duration::from_millis(200);
    let painter = keep_busy(desktop.access(), Duration::from_millis(800))?;
    let outcome = settler.wait(quiet, cap)?;
    let painted = painter.join().expect("painter")?;
    eprintln!("capped: {outcome:?} (longest gap {:?})", painted.max_gap);
    ensure!(outcome.waited <= cap);
    if steady(&painted) {
        ensure!(!outcome.settled);
        assert_eq!(outcome.waited, cap);
    }
    drop(settler);
    desktop.stop().await
}

#[tokio::test]
async fn after_input_the_settle_waits_for_a_late_draw_and_sees_an_early_one() -> Result<()> {
    let desktop = Desktop::start().await?;
    let quiet = Duration::from_millis(100);
    // Generous bounds: the test is about what the frame shows, not how long it took.
    let (first_within, cap) = (Duration::from_secs(5), Duration::from_secs(10));
    let mut settler = Settler::new(desktop.access(), clock())?;
    let mut input = Input::new(desktop.access(), clock())?;
    let mut capturer = Capturer::new(desktop.access())?;
    // Draws three times the quiet period after the click, then at once after the next click.
    let (late, early) = (0x00ff_0000, 0x0000_ff00);
    let painter = painter(
        desktop.access(),
        (0, 0, 400, 400),
        vec![(3 * quiet, late), (Duration::ZERO, early)],
    )?;

    // Armed before the click, as `act` does; the draw comes well after the quiet period.
    settler.arm()?;
    input.click(100, 100, Button::Left, false)?;
    input.finish()?;
    let outcome = settler.wait_after_input(first_within, quiet, cap)?;
    eprintln!("late draw: {outcome:?}");
    assert_eq!(
        pixel(&capturer.capture()?, 100, 100),
        late,
        "the settle returned before the late draw ({outcome:?})"
    );
    ensure!(
        outcome.settled && outcome.first_damage.is_some(),
        "{outcome:?}"
    );

    // A draw at once, possibly before the wait begins: it is seen (the arm came first), so the
    // wait does not run to its bound.
    settler.arm()?;
    input.click(100, 100, Button::Left, false)?;
    input.finish()?;
    let outcome = settler.wait_after_input(first_within, quiet, cap)?;
    eprintln!("early draw: {outcome:?}");
    let painter = painter.join().expect("painter")?;
    assert_eq!(pixel(&capturer.capture()?, 100, 100), early);
    ensure!(outcome.first_damage.is_some(), "{outcome:?}");

    // A click where no client draws: no damage, and the wait ends settled at its bound.
    settler.arm()?;
    input.click(1000, 700, Button::Left, false)?;
    input.finish()?;
    let short = Duration::from_millis(300);
    let outcome = settler.wait_after_input(short, quiet, cap)?;
    eprintln!("no draw: {outcome:?}");
    ensure!(
        outcome.settled && outcome.damage_events == 0 && outcome.first_damage.is_none(),
        "{outcome:?}"
    );
    assert_eq!(outcome.waited, short);
    drop((settler, input, capturer, painter));
    desktop.stop().await
}
