//! computer_act on a real desktop (Xvfb and Chromium started by `Screens`): the settle after
//! input waits for a draw that comes after the quiet period, and a batch of input costs one
//! sync of the input client and one arm of the settler, however many actions it has.
//!
//! An X client of the test's own (`painter`) covers the whole screen (so nothing Chromium draws
//! reaches the root window's damage) and answers button presses by painting itself, as an
//! application answering a click would. Nothing sleeps to wait for readiness; the painter's delay is the
//! late draw under test.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use gateway_proto::desktop::{Action, MouseButton, ScrollDirection};
use gateway_proto::BotId;
use guest_agent::display::Capturer;
use guest_agent::screens::{Screens, ScreensConfig};

mod painter;
use painter::{painter, pixel, BACKGROUND};

const WIDTH: u16 = 1280;
const HEIGHT: u16 = 800;
/// The quiet period of `act`'s settle.
const QUIET: Duration = Duration::from_millis(100);

#[allow(
    clippy::disallowed_methods,
    reason = "a deadline for the painter's window to cover the screen"
)]
fn now() -> Instant {
    Instant::now()
}

/// The RGB pixel at (`x`, `y`) of a PNG.
fn png_pixel(png: &[u8], x: u32, y: u32) -> Result<u32> {
    let decoder = png::Decoder::new(std::io::Cursor::new(png));
    let mut reader = decoder.read_info()?;
    let mut buf = vec![0; reader.output_buffer_size().context("png size")?];
    let info = reader.next_frame(&mut buf)?;
    ensure!(info.color_type == png::ColorType::Rgb, "{info:?}");
    let at = usize::try_from((y * info.width + x) * 3)?;
    Ok(u32::from_be_bytes([0, buf[at], buf[at + 1], buf[at + 2]]))
}

fn click(x: i64, y: i64, double: bool) -> Action {
    Action::Click {
        x,
        y,
        button: MouseButton::Left,
        double,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_act_sees_a_late_draw_and_a_batch_of_input_costs_one_sync() -> Result<()> {
    let home = tempfile::tempdir()?;
    let runtime = tempfile::tempdir()?;
    std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o700))?;
    let screens = Screens::new(
        ScreensConfig {
            home: home.path().to_path_buf(),
            runtime_dir: runtime.path().to_path_buf(),
            limit: None,
            chromium: "/usr/bin/chromium".into(),
            device_scale: None,
        },
        guest_agent::clock::monotonic(),
    );
    let bot = BotId::new("settle-bot")?;
    let result = async {
        screens.ensure(&bot).await?;
        let access = screens
            .live(&bot)
            .await
            .context("no live desktop")?
            .access();
        let (late, early) = (0x00ff_0000, 0x0000_ff00);
        // The first press is answered three quiet periods late, the next one at once.
        let painter = painter(
            &access,
            (0, 0, WIDTH, HEIGHT),
            vec![(3 * QUIET, late), (Duration::ZERO, early)],
        )?;
        // Until the painter's window covers the screen and nothing else draws.
        let mut capturer = Capturer::new(&access)?;
        let deadline = now() + Duration::from_secs(30);
        let mut last = None;
        loop {
            let frame = capturer.capture()?;
            let covered = [(0, 0), (640, 400), (1279, 799)]
                .iter()
                .all(|&(x, y)| pixel(&frame, x, y) == BACKGROUND);
            if covered && last.as_ref() == Some(&frame) {
                break;
            }
            ensure!(
                now() < deadline,
                "the painter's window never covered the screen"
            );
            last = Some(frame);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        let (outcome, observation) = screens
            .act(
                &bot,
                &[click(640, 400, false)],
                Some(Default::default()),
                None,
                None,
                || 0,
            )
            .await?;
        let (meta, png) = observation.context("no observation")?;
        ensure!(!meta.unchanged && !png.is_empty(), "{meta:?}");
        assert_eq!(
            png_pixel(&png, 640, 400)?,
            late,
            "the act returned before the late draw ({outcome:?})"
        );

        // Six input actions (seven presses and releases of keys and buttons, typing of text in
        // the keymap): one sync of the input client, one arm of the settler.
        let before = screens.live(&bot).await.context("live")?.act_round_trips();
        let batch = [
            Action::Move { x: 10, y: 10 },
            click(20, 20, false),
            Action::Key {
                key: "a".into(),
                modifiers: vec!["shift".into()],
            },
            Action::Type { text: "hi".into() },
            Action::Scroll {
                direction: ScrollDirection::Down,
                amount: 2,
            },
            click(30, 30, true),
        ];
        let (outcome, _) = screens.act(&bot, &batch, None, None, None, || 0).await?;
        assert_eq!(outcome.completed, 7, "{outcome:?}");
        let after = screens.live(&bot).await.context("live")?.act_round_trips();
        assert_eq!(
            (after.0 - before.0, after.1 - before.1),
            (1, 1),
            "(input syncs, settler arms) of one batch"
        );
        let conn = painter.join().expect("painter")?;
        drop(conn);
        anyhow::Ok(())
    }
    .await;
    screens.shutdown().await;
    result
}
