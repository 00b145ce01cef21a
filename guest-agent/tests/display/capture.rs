//! MIT-SHM capture: a 1280x800 PNG with a stable frame id, the GetImage fallback, and a drawn
//! window changing the frame id.

use super::*;

#[tokio::test]
async fn capture_is_a_1280x800_png_with_a_stable_frame_id() -> Result<()> {
    let desktop = Desktop::start().await?;
    let mut capturer = Capturer::new(desktop.access())?;
    ensure!(capturer.uses_shm(), "MIT-SHM not used");

    let first = capturer.observe()?;
    let decoder = png::Decoder::new(std::io::Cursor::new(&first.png));
    let reader = decoder.read_info()?;
    let info = reader.info();
    assert_eq!((info.width, info.height), (1280, 800));
    assert_eq!((first.width, first.height), (1280, 800));
    assert_eq!(first.frame_id, frame_id(&first.png));
    assert_eq!(first.active_window, None);

    let second = capturer.observe()?;
    assert_eq!(
        first.frame_id, second.frame_id,
        "unchanged screen, new frame id"
    );
    assert_eq!(second.png, first.png);
    assert_eq!(
        capturer.encodes(),
        1,
        "an unchanged screen was encoded again"
    );

    // Timings (debug build): capture alone, encode alone, the whole observation.
    const N: u32 = 10;
    let t = now();
    for _ in 0..N {
        capturer.capture()?;
    }
    let capture = t.elapsed() / N;
    let frame = capturer.capture()?;
    let t = now();
    for _ in 0..N {
        encode_png(&frame)?;
    }
    let encode = t.elapsed() / N;
    let t = now();
    for _ in 0..N {
        capturer.observe()?;
    }
    let observe = t.elapsed() / N;
    eprintln!("1280x800 blank desktop: capture {capture:?}, png {encode:?}, observe {observe:?}");
    drop(capturer);
    desktop.stop().await
}

#[tokio::test]
async fn the_getimage_fallback_sees_the_same_pixels() -> Result<()> {
    let desktop = Desktop::start().await?;
    let conn = desktop.access().connect()?;
    create_window(
        &conn,
        (10, 20, 200, 100),
        0x0012_3456,
        EventMask::NO_EVENT,
        "fallback",
        "Fallback",
    )?;
    let mut shm = Capturer::new(desktop.access())?;
    let mut plain = Capturer::without_shm(desktop.access())?;
    ensure!(shm.uses_shm() && !plain.uses_shm());
    let (a, b) = (shm.capture()?, plain.capture()?);
    assert_eq!((b.width, b.height), (1280, 800));
    ensure!(a == b, "shm and getimage frames differ");
    assert_eq!(shm.observe()?.frame_id, plain.observe()?.frame_id);
    drop((shm, plain, conn));
    desktop.stop().await
}

#[tokio::test]
async fn a_drawn_window_changes_the_frame_id() -> Result<()> {
    let desktop = Desktop::start().await?;
    let mut capturer = Capturer::new(desktop.access())?;
    let before = capturer.observe()?;

    let conn = desktop.access().connect()?;
    create_window(
        &conn,
        (100, 50, 300, 200),
        0x00c0_2030,
        EventMask::NO_EVENT,
        "painter",
        "Painter",
    )?;
    let after = capturer.observe()?;
    assert_ne!(before.frame_id, after.frame_id);
    assert_eq!(capturer.encodes(), 2, "a changed screen is encoded");
    assert_eq!(after.frame_id, frame_id(&after.png));

    let frame = capturer.capture()?;
    let pixel = |x: usize, y: usize| {
        let i = (y * 1280 + x) * 3;
        (frame.rgb[i], frame.rgb[i + 1], frame.rgb[i + 2])
    };
    assert_eq!(pixel(250, 150), (0xc0, 0x20, 0x30), "inside the window");
    assert_eq!(pixel(50, 20), (0, 0, 0), "outside the window");
    drop((capturer, conn));
    desktop.stop().await
}
