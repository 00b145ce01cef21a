use super::*;

#[test]
fn key_names_ignore_case_and_have_aliases() {
    let k = |key: &str| KeyCombo::parse::<&str>(key, &[]).unwrap().keysym;
    assert_eq!(k("Enter"), ks::RETURN);
    assert_eq!(k("RETURN"), ks::RETURN);
    assert_eq!(k("esc"), ks::ESCAPE);
    assert_eq!(k("Escape"), ks::ESCAPE);
    assert_eq!(k("tab"), ks::TAB);
    assert_eq!(k("BackSpace"), ks::BACKSPACE);
    assert_eq!(k("delete"), ks::DELETE);
    assert_eq!(k("space"), 0x20);
    assert_eq!(k("up"), ks::UP);
    assert_eq!(k("Down"), ks::DOWN);
    assert_eq!(k("left"), ks::LEFT);
    assert_eq!(k("right"), ks::RIGHT);
    assert_eq!(k("home"), ks::HOME);
    assert_eq!(k("end"), ks::END);
    assert_eq!(k("PageUp"), ks::PAGE_UP);
    assert_eq!(k("pagedown"), ks::PAGE_DOWN);
    assert_eq!(k("F1"), 0xffbe);
    assert_eq!(k("f12"), 0xffc9);
    assert_eq!(k("ctrl"), ks::CONTROL_L);
    assert_eq!(k("Control"), ks::CONTROL_L);
    assert_eq!(k("alt"), ks::ALT_L);
    assert_eq!(k("shift"), ks::SHIFT_L);
    assert_eq!(k("meta"), ks::SUPER_L);
    assert_eq!(k("super"), ks::SUPER_L);
    assert_eq!(k("a"), u32::from('a'));
    assert_eq!(k("A"), u32::from('a'));
    assert_eq!(k("!"), u32::from('!'));
    assert_eq!(k("é"), 0xe9);
    assert_eq!(k("Ω"), 0x0100_03a9);
}

#[test]
fn unknown_keys_are_refused_by_name() {
    for bad in ["", "f0", "f13", "f01", "enterr", "ctrl+", "+a", "hyper+a"] {
        let err = KeyCombo::parse::<&str>(bad, &[]).unwrap_err();
        assert!(matches!(err, DisplayError::UnknownKey(_)), "{bad}: {err}");
    }
    let err = KeyCombo::parse("a", &["ctrl", "hyper"]).unwrap_err();
    assert_eq!(err.to_string(), "unknown key name \"hyper\"");
}

#[test]
fn modifiers_come_from_the_list_and_the_key_deduplicated() {
    let combo = KeyCombo::parse("ctrl+Shift+T", &["CONTROL", "alt"]).unwrap();
    assert_eq!(
        combo.modifiers,
        vec![Modifier::Ctrl, Modifier::Shift, Modifier::Alt]
    );
    assert_eq!(combo.keysym, u32::from('t'));
    assert_eq!(
        KeyCombo::parse::<&str>("+", &[]).unwrap().keysym,
        u32::from('+')
    );
    let plus = KeyCombo::parse::<&str>("ctrl++", &[]).unwrap();
    assert_eq!(plus.modifiers, vec![Modifier::Ctrl]);
    assert_eq!(plus.keysym, u32::from('+'));
}

#[test]
fn chars_and_keysyms_round_trip() {
    for ch in "héllo 🙂 Ωλ 中文 ÿ~\n\t".chars() {
        let keysym = char_keysym(ch).unwrap();
        assert_eq!(keysym_char(keysym), Some(ch), "{ch:?}");
    }
    assert_eq!(char_keysym('é'), Some(0xe9));
    assert_eq!(char_keysym('🙂'), Some(0x0101_f642));
    assert_eq!(char_keysym('\r'), Some(ks::RETURN));
    assert_eq!(char_keysym('\u{7}'), None);
    assert_eq!(char_keysym('\u{85}'), None);
    assert_eq!(keysym_char(ks::F1), None);
}

#[test]
fn points_clamp_to_the_range_then_the_screen() {
    assert_eq!(clamp_point(-5, 10, 1280, 800), (0, 10));
    assert_eq!(clamp_point(5000, 700, 1280, 800), (1279, 700));
    assert_eq!(clamp_point(i64::MAX, i64::MIN, 1280, 800), (1279, 0));
    assert_eq!(
        clamp_point(90_000, 90_000, u16::MAX, u16::MAX),
        (i16::MAX, i16::MAX)
    );
    assert_eq!(clamp_point(3, 3, 0, 0), (0, 0));
}

/// keycodes 8.. with 2 columns: 8 = a A, 9 = 1 exclam, 10 = (none), 11 = b (alone),
/// 12 = Shift_L, 13 = (none), 14 = exclam (alone).
fn sample_keymap(excluded: &[Keycode]) -> Keymap {
    let syms = vec![
        0x61,
        0x41,
        0x31,
        0x21,
        0,
        0,
        0x62,
        0,
        ks::SHIFT_L,
        0,
        0,
        0,
        0x21,
        0,
    ];
    Keymap::new(8, 2, syms, &excluded.iter().copied().collect())
}

#[test]
fn keymap_prefers_unshifted_and_derives_capitals() {
    let map = sample_keymap(&[]);
    assert_eq!(map.lookup(0x61), Some((8, false)));
    assert_eq!(map.lookup(0x41), Some((8, true)));
    assert_eq!(
        map.lookup(0x21),
        Some((14, false)),
        "unshifted position wins"
    );
    assert_eq!(
        map.lookup(0x42),
        Some((11, true)),
        "capital of a lone letter"
    );
    assert_eq!(map.lookup(ks::SHIFT_L), Some((12, false)));
    assert_eq!(map.lookup(0xe9), None);
    assert_eq!(map.spare_keycodes(), vec![10, 13]);
    assert_eq!(map.first_keysym(11), Some(0x62));
    assert_eq!(map.first_keysym(7), None);
    assert_eq!(sample_keymap(&[8]).lookup(0x61), None);
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
fn pool_reuses_bindings_and_recycles_least_recently_used() {
    let plan = |keycodes: Vec<Keycode>, changed: Vec<(Keycode, Keysym)>| BindPlan {
        keycodes,
        changed,
        not_before: None,
    };
    let mut pool = RemapPool::new(vec![10, 13, 11]);
    assert_eq!(pool.capacity(), 3);
    assert_eq!(
        pool.bind_all(&[0xe9, 0x3a9]),
        Some(plan(vec![13, 11], vec![(13, 0xe9), (11, 0x3a9)]))
    );
    // Reuse costs no change; the third keysym takes the last free keycode.
    assert_eq!(
        pool.bind_all(&[0x3a9, 0x1f642]),
        Some(plan(vec![11, 10], vec![(10, 0x1f642)]))
    );
    // Full: the least recently used binding outside the request (0xe9 on 13) is recycled,
    // never one the request itself needs (0x1f642 on 10 is older than 0x3a9 but requested).
    assert_eq!(
        pool.bind_all(&[0x1f642, 0x4e2d]),
        Some(plan(vec![10, 13], vec![(13, 0x4e2d)]))
    );
    assert!(
        pool.bind_all(&[1, 2, 3, 4]).is_none(),
        "more than the capacity"
    );
    assert_eq!(pool.bound_keycodes(), HashSet::from([10, 11, 13]));
    assert_eq!(pool.release_all(), vec![13, 11, 10]);
    assert_eq!(pool.bind_all(&[0xe9]).unwrap().keycodes, vec![13]);
    assert!(RemapPool::new(vec![]).bind_all(&[0xe9]).is_none());
    assert_eq!(
        RemapPool::new(vec![]).bind_all(&[]),
        Some(plan(vec![], vec![]))
    );
}

#[test]
fn recently_pressed_keycodes_are_recycled_only_after_the_rebind_delay() {
    let t0 = origin();
    let mut pool = RemapPool::new(vec![10, 11]);
    pool.bind_all(&[1, 2]).unwrap();
    assert_eq!(pool.all_rebindable_at(), None, "never pressed");
    pool.mark_pressed(11, t0);
    pool.mark_pressed(10, t0 + Duration::from_millis(40));
    pool.mark_pressed(99, t0); // not bound: ignored
    assert_eq!(
        pool.all_rebindable_at(),
        Some(t0 + Duration::from_millis(40) + REBIND_AFTER)
    );
    // Recycling 11 (keysym 1, least recently used) must wait for its press to age.
    let plan = pool.bind_all(&[3]).unwrap();
    assert_eq!(plan.changed, vec![(11, 3)]);
    assert_eq!(plan.not_before, Some(t0 + REBIND_AFTER));
    // A reused binding or a never-pressed victim needs no wait.
    assert_eq!(pool.bind_all(&[3]).unwrap().not_before, None);
    let mut fresh = RemapPool::new(vec![10]);
    fresh.bind_all(&[1]).unwrap();
    assert_eq!(fresh.bind_all(&[2]).unwrap().not_before, None);
}

#[test]
fn segments_hold_at_most_capacity_distinct_unmapped_keysyms() {
    let (a, b, c) = (Some(1), Some(2), Some(3));
    let text = [a, None, b, a, c, None, b, c, a];
    assert_eq!(plan_segments(&text, 3).unwrap(), vec![0..9]);
    assert_eq!(plan_segments(&text, 2).unwrap(), vec![0..4, 4..8, 8..9]);
    assert_eq!(
        plan_segments(&text, 1).unwrap(),
        vec![0..2, 2..3, 3..4, 4..6, 6..7, 7..8, 8..9]
    );
    assert_eq!(plan_segments(&[None, None], 0).unwrap(), vec![0..2]);
    assert_eq!(plan_segments(&[], 0).unwrap(), vec![0..0]);
    assert!(plan_segments(&[None, a], 0).is_none());
    assert_eq!(distinct_unmapped(&text[..5]), vec![1, 2, 3]);
}

#[test]
fn an_x_error_is_attributed_to_the_action_that_sent_the_request() {
    // The last request of each action of a batch; the third action sent nothing.
    let ended = [10, 12, 12, 20];
    assert_eq!(action_of(&ended, 3), 0);
    assert_eq!(action_of(&ended, 10), 0);
    assert_eq!(action_of(&ended, 11), 1);
    assert_eq!(action_of(&ended, 12), 1);
    assert_eq!(action_of(&ended, 13), 3);
    assert_eq!(action_of(&ended, 20), 3);
    // After the last ended action: the one still running.
    assert_eq!(action_of(&ended, 21), 4);
    assert_eq!(action_of(&[], 5), 0);
}
