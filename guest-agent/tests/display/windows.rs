//! Windows found by class and title, and focused.

use super::*;

#[tokio::test]
async fn windows_are_found_by_class_and_title_and_focused() -> Result<()> {
    let desktop = Desktop::start().await?;
    let conn = desktop.access().connect()?;
    let title = "Ωλ Test 中文";
    let first = create_window(
        &conn,
        (0, 0, 300, 300),
        0x00ff_0000,
        EventMask::NO_EVENT,
        "alpha",
        title,
    )?;
    let second = create_window(
        &conn,
        (100, 100, 300, 300),
        0x0000_ff00,
        EventMask::NO_EVENT,
        "beta",
        "Beta window",
    )?;
    let mut wm = WindowControl::new(desktop.access())?;
    let all = wm.windows()?;
    let ids: Vec<u32> = all.iter().map(|w| w.id).collect();
    assert_eq!(ids, vec![second, first], "topmost first");
    let alpha = wm.find(WindowMatch::Class("ALPHA"))?;
    assert_eq!(alpha.len(), 1);
    assert_eq!(alpha[0].id, first);
    assert_eq!(alpha[0].class, "ALPHA");
    assert_eq!(alpha[0].title, title);
    ensure!(alpha[0].viewable);
    let by_title = wm.find(WindowMatch::Title("ωλ test"))?;
    assert_eq!(
        by_title.iter().map(|w| w.id).collect::<Vec<_>>(),
        vec![first]
    );
    ensure!(wm.find(WindowMatch::Class("gamma"))?.is_empty());

    let mut capturer = Capturer::new(desktop.access())?;
    assert_eq!(capturer.active_window()?, None);
    assert_eq!(wm.activate(first)?, Activation::Direct);
    assert_eq!(conn.get_input_focus()?.reply()?.focus, first);
    let stack = conn
        .query_tree(conn.setup().roots[0].root)?
        .reply()?
        .children;
    assert_eq!(stack.last(), Some(&first), "raised to the top");
    assert_eq!(capturer.active_window()?, Some((first, title.to_owned())));
    assert_eq!(wm.active_window()?, Some((first, title.to_owned())));
    // The raised window now covers the overlap.
    let frame = capturer.capture()?;
    let i = (150 * 1280 + 150) * 3;
    assert_eq!(&frame.rgb[i..i + 3], &[0xff, 0, 0]);

    // An unmapped window is mapped when activated; a destroyed one is reported gone.
    conn.unmap_window(second)?;
    conn.sync()?;
    wm.activate(second)?;
    assert_eq!(conn.get_input_focus()?.reply()?.focus, second);
    conn.destroy_window(first)?;
    conn.sync()?;
    ensure!(matches!(
        wm.activate(first),
        Err(DisplayError::WindowGone { .. })
    ));
    drop((capturer, wm, conn));
    desktop.stop().await
}
