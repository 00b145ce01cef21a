//! XTEST input received by real X clients: the pointer, clicks, scrolls and keys, and Unicode
//! typed through remapped keycodes.

use super::*;

/// Collects events until `done` says so or `timeout` passes.
fn collect_events(
    conn: &RustConnection,
    display: DisplayNum,
    timeout: Duration,
    mut done: impl FnMut(&[Event]) -> bool,
) -> Result<Vec<Event>> {
    let deadline = now() + timeout;
    let mut events = Vec::new();
    while !done(&events) {
        let left = deadline.saturating_duration_since(now());
        if left.is_zero() {
            break;
        }
        if let Some(event) = wait_for_event(conn, display, left)? {
            events.push(event);
        }
    }
    Ok(events)
}

/// A client-side keymap, decoded the way core X clients do.
struct ClientKeymap {
    min: u8,
    per: usize,
    syms: Vec<u32>,
}

impl ClientKeymap {
    fn fetch(conn: &RustConnection) -> Result<Self> {
        let setup = conn.setup();
        let (min, max) = (setup.min_keycode, setup.max_keycode);
        let reply = conn.get_keyboard_mapping(min, max - min + 1)?.reply()?;
        Ok(Self {
            min,
            per: usize::from(reply.keysyms_per_keycode),
            syms: reply.keysyms,
        })
    }

    /// The keysym of `keycode` with or without Shift (core protocol rules, no Caps Lock).
    fn keysym(&self, keycode: u8, shift: bool) -> u32 {
        let row = usize::from(keycode - self.min) * self.per;
        let first = self.syms[row];
        let second = self.syms[row + 1];
        match (shift, second) {
            (false, _) => first,
            (true, 0) => char::from_u32(first)
                .filter(|c| c.is_ascii_lowercase())
                .map_or(first, |c| u32::from(c.to_ascii_uppercase())),
            (true, s) => s,
        }
    }

    /// The text a key press types, if any.
    fn text(&self, keycode: u8, state: KeyButMask) -> Option<char> {
        keysym_char(self.keysym(keycode, state.contains(KeyButMask::SHIFT)))
    }
}

fn key_presses(events: &[Event]) -> impl Iterator<Item = (u8, KeyButMask)> + '_ {
    events.iter().filter_map(|e| match e {
        Event::KeyPress(k) => Some((k.detail, k.state)),
        _ => None,
    })
}

#[tokio::test]
async fn xtest_moves_the_pointer_where_query_pointer_finds_it() -> Result<()> {
    let desktop = Desktop::start().await?;
    let mut input = Input::new(desktop.access(), clock())?;
    let mut capturer = Capturer::new(desktop.access())?;
    assert_eq!(input.move_to(100, 200)?, (100, 200));
    input.finish()?;
    assert_eq!(capturer.cursor()?, (100, 200));
    assert_eq!(input.move_to(-5, 99_999)?, (0, 799));
    input.finish()?;
    assert_eq!(capturer.cursor()?, (0, 799));
    assert_eq!(input.move_to(i64::MAX, 3)?, (1279, 3));
    input.finish()?;
    assert_eq!(capturer.observe()?.cursor, (1279, 3));

    const N: u32 = 50;
    let t = now();
    for i in 0..N {
        input.click(i64::from(i), 10, Button::Left, false)?;
        input.finish()?;
    }
    eprintln!(
        "xtest click incl. move and sync (debug build): {:?}",
        t.elapsed() / N
    );
    let t = now();
    for i in 0..N {
        input.click(i64::from(i), 10, Button::Left, false)?;
    }
    input.finish()?;
    eprintln!(
        "xtest click incl. move, one sync per {N} (debug build): {:?}",
        t.elapsed() / N
    );
    drop((input, capturer));
    desktop.stop().await
}

#[tokio::test]
async fn clicks_scrolls_and_keys_reach_the_focused_window() -> Result<()> {
    let desktop = Desktop::start().await?;
    let display = desktop.display();
    let conn = desktop.access().connect()?;
    let window = create_window(
        &conn,
        (0, 0, 640, 480),
        0x0020_2020,
        EventMask::BUTTON_PRESS | EventMask::KEY_PRESS,
        "target",
        "Target",
    )?;
    let mut wm = WindowControl::new(desktop.access())?;
    assert_eq!(wm.activate(window)?, Activation::Direct);
    let mut input = Input::new(desktop.access(), clock())?;

    // One batch: six actions, one round trip (at `finish`), the events still in order.
    let trips = input.syncs();
    input.click(30, 40, Button::Left, false)?;
    input.click(31, 41, Button::Right, true)?;
    input.scroll(ScrollDirection::Down, 3)?;
    input.scroll(ScrollDirection::Up, 1)?;
    input.button_down(50, 60, Button::Left)?;
    input.button_up(70, 80, Button::Left)?;
    assert!(matches!(
        input.scroll(ScrollDirection::Up, 21),
        Err(DisplayError::ScrollAmount(21))
    ));
    assert_eq!(input.syncs(), trips, "no action waits for the server");
    input.finish()?;
    assert_eq!(input.syncs(), trips + 1, "one sync per batch");
    let events = collect_events(&conn, display, Duration::from_secs(5), |e| {
        e.iter()
            .filter(|e| matches!(e, Event::ButtonPress(_)))
            .count()
            >= 8
    })?;
    let presses: Vec<(u8, i16, i16)> = events
        .iter()
        .filter_map(|e| match e {
            Event::ButtonPress(b) => Some((b.detail, b.event_x, b.event_y)),
            _ => None,
        })
        .collect();
    assert_eq!(
        presses,
        vec![
            (1, 30, 40),
            (3, 31, 41),
            (3, 31, 41),
            (5, 31, 41),
            (5, 31, 41),
            (5, 31, 41),
            (4, 31, 41),
            (1, 50, 60),
        ]
    );

    let keymap = ClientKeymap::fetch(&conn)?;
    let trips = input.syncs();
    input.key(&KeyCombo::parse("ctrl+shift+t", &[] as &[&str])?)?;
    input.key(&KeyCombo::parse("Enter", &[] as &[&str])?)?;
    input.key(&KeyCombo::parse("f5", &["alt"])?)?;
    input.key(&KeyCombo::parse("!", &[] as &[&str])?)?;
    input.finish()?;
    assert_eq!(input.syncs(), trips + 1, "one sync per batch");
    let events = collect_events(&conn, display, Duration::from_secs(5), |e| {
        key_presses(e).count() >= 8
    })?;
    let keys: Vec<(u32, KeyButMask)> = key_presses(&events)
        .map(|(kc, state)| (keymap.keysym(kc, false), state))
        .collect();
    let control = KeyButMask::CONTROL;
    let shift = KeyButMask::SHIFT;
    let alt = KeyButMask::MOD1;
    assert_eq!(
        keys,
        vec![
            (0xffe3, KeyButMask::default()), // Control_L
            (0xffe1, control),               // Shift_L
            (u32::from('t'), control | shift),
            (0xff0d, KeyButMask::default()), // Return
            (0xffe9, KeyButMask::default()), // Alt_L
            (0xffc2, alt),                   // F5
            (0xffe1, KeyButMask::default()), // Shift for '!'
            (u32::from('1'), shift),         // the '!' key unshifted is '1'
        ]
    );
    let last = key_presses(&events).nth(7).context("no '!' press")?;
    assert_eq!(keymap.text(last.0, last.1), Some('!'));

    // Typing characters of the keymap changes no binding: no round trip before `finish`.
    let trips = input.syncs();
    input.move_to(5, 5)?;
    input.type_text("ok")?;
    input.click(6, 6, Button::Left, false)?;
    input.finish()?;
    assert_eq!(input.syncs(), trips + 1, "one sync per batch");
    let events = collect_events(&conn, display, Duration::from_secs(5), |e| {
        key_presses(e).count() >= 2
    })?;
    let typed: String = key_presses(&events)
        .filter_map(|(kc, state)| keymap.text(kc, state))
        .collect();
    assert_eq!(typed, "ok");
    drop((input, wm, conn));
    desktop.stop().await
}

#[tokio::test]
async fn typed_unicode_arrives_intact_including_characters_outside_the_keymap() -> Result<()> {
    let desktop = Desktop::start().await?;
    let display = desktop.display();
    let conn = desktop.access().connect()?;
    let window = create_window(
        &conn,
        (0, 0, 640, 480),
        0,
        EventMask::KEY_PRESS,
        "typing",
        "Typing",
    )?;
    WindowControl::new(desktop.access())?.activate(window)?;
    let before = ClientKeymap::fetch(&conn)?;
    let mut input = Input::new(desktop.access(), clock())?;

    let text = "héllo 🙂 Ωλ 中文 Hello, World! ~|\n\tok é🙂";
    let t = now();
    input.type_text(text)?;
    input.finish()?;
    eprintln!(
        "typed {} chars (debug build) in {:?}",
        text.chars().count(),
        t.elapsed()
    );
    let typed = text.chars().filter(|&c| char_keysym(c).is_some()).count();
    let events = collect_events(&conn, display, Duration::from_secs(5), |e| {
        key_presses(e)
            .filter(|(kc, _)| before.keysym(*kc, false) != 0xffe1)
            .count()
            >= typed
    })?;
    // Decode like a core client that re-reads the map after MappingNotify.
    ensure!(events.iter().any(|e| matches!(e, Event::MappingNotify(_))));
    let keymap = ClientKeymap::fetch(&conn)?;
    let received: String = key_presses(&events)
        .filter_map(|(kc, state)| keymap.text(kc, state))
        .collect();
    assert_eq!(received, text);

    // Control characters other than newline and tab are refused before anything is typed.
    let refused = input.type_text("ab\u{7}c");
    ensure!(matches!(
        refused,
        Err(DisplayError::UntypableChar { ch: '\u{7}' })
    ));

    // Bindings live until restored; restoring leaves the map as it was.
    input.restore_keymap()?;
    let after = ClientKeymap::fetch(&conn)?;
    assert_eq!(before.syms, after.syms, "keymap not restored");
    drop((input, conn));
    desktop.stop().await
}

#[tokio::test]
async fn typing_more_distinct_characters_than_spare_keycodes_recycles_them() -> Result<()> {
    let desktop = Desktop::start().await?;
    let display = desktop.display();
    let conn = desktop.access().connect()?;
    let window = create_window(
        &conn,
        (0, 0, 640, 480),
        0,
        EventMask::NO_EVENT,
        "typing",
        "Typing",
    )?;
    WindowControl::new(desktop.access())?.activate(window)?;
    let keymap = ClientKeymap::fetch(&conn)?;
    let spare = keymap
        .syms
        .chunks(keymap.per)
        .filter(|row| row.iter().all(|&s| s == 0))
        .count();
    // More distinct CJK characters than spare keycodes, so some are recycled mid-text.
    let text: String = (0..u32::try_from(spare)? + 12)
        .map(|i| char::from_u32(0x4e00 + i * 7).expect("cjk"))
        .collect();

    // The reader models a live client: it decodes each key press as it arrives and re-reads
    // the map as soon as it sees MappingNotify.
    let reader_conn = desktop.access().connect()?;
    reader_conn.change_window_attributes(
        window,
        &ChangeWindowAttributesAux::new().event_mask(EventMask::KEY_PRESS),
    )?;
    reader_conn.sync()?;
    let expected = text.chars().count();
    let reader = {
        let conn = reader_conn;
        std::thread::spawn(move || -> Result<String> {
            let mut keymap = ClientKeymap::fetch(&conn)?;
            let mut out = String::new();
            let deadline = now() + Duration::from_secs(20);
            while out.chars().count() < expected && now() < deadline {
                match wait_for_event(&conn, display, deadline.saturating_duration_since(now()))? {
                    Some(Event::MappingNotify(_)) => keymap = ClientKeymap::fetch(&conn)?,
                    Some(Event::KeyPress(k)) if k.event == window => {
                        out.extend(keymap.text(k.detail, k.state));
                    }
                    _ => {}
                }
            }
            Ok(out)
        })
    };
    let mut input = Input::new(desktop.access(), clock())?;
    input.type_text(&text)?;
    input.finish()?;
    let received = reader.join().expect("reader thread")?;
    assert_eq!(received, text);
    eprintln!("typed {expected} distinct characters over {spare} spare keycodes");
    drop((input, conn));
    desktop.stop().await
}
