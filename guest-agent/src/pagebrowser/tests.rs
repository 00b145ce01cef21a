use gateway_proto::page::{
    PageElement, PageStep, DISABLED, FRAMES_NOTE, MAX_TEXT_CHARS, MAX_TITLE_CHARS, STALE_REF,
};

use super::snapshot::*;
use super::steps::*;
use super::*;

fn raw(elements: Vec<RawElement>, next: u64) -> RawSnapshot {
    RawSnapshot {
        url: "http://x/".into(),
        title: "t".repeat(500),
        text: "a".repeat(20_000),
        text_cut: true,
        elements,
        frames: true,
        next,
        visible: true,
        candidates: 0,
        ms: 0.0,
    }
}

fn el(r: &str, value: &str) -> RawElement {
    RawElement {
        element: r.into(),
        role: "textbox".into(),
        name: "Say \"hi\"\n".into(),
        value: value.into(),
        tag: "input".into(),
    }
}

#[test]
fn snapshots_are_bounded_and_rendered() {
    let (s, next) = build_snapshot(
        raw(vec![el("e3", "x"), el("e4", "")], 5),
        3,
        &HashSet::new(),
    )
    .unwrap();
    assert_eq!(next, 5);
    assert_eq!(s.title.chars().count(), MAX_TITLE_CHARS);
    let (text, lines) = s.tree.split_once('\n').unwrap();
    assert_eq!(text.chars().count(), MAX_TEXT_CHARS);
    assert!(text.ends_with("a…"));
    assert_eq!(
        lines,
        "- textbox \"Say \\\"hi\\\"\\n\" [e3] value=\"x\"\n- textbox \"Say \\\"hi\\\"\\n\" [e4]\n\
         Embedded frames require desktop tools."
    );
}

#[test]
fn the_text_gives_way_to_keep_a_snapshot_within_its_byte_budget() {
    let many: Vec<RawElement> = (1..=80)
        .map(|i| RawElement {
            element: format!("e{i}"),
            role: "button".into(),
            name: format!("Add item number {i} to the shopping cart"),
            value: String::new(),
            tag: "button".into(),
        })
        .collect();
    let mut r = raw(many, 81);
    r.text = "Line of catalog text\n".repeat(1000);
    let (s, _) = build_snapshot(r, 1, &HashSet::new()).unwrap();
    let size = snapshot_json_len(&s.url, &s.title, &s.elements, &s.tree);
    assert!(size <= MAX_SNAPSHOT_BYTES, "{size}");
    assert!(
        size > MAX_SNAPSHOT_BYTES - 400,
        "{size}: the budget is used"
    );
    let text = s.tree.split("\n- ").next().unwrap();
    assert!(
        text.ends_with("Line of catalog text…"),
        "cut at a line break"
    );
    // A short text is kept whole.
    let mut r = raw(vec![], 1);
    r.text = "Hello \"world\"".into();
    r.text_cut = false;
    let (s, _) = build_snapshot(r, 1, &HashSet::new()).unwrap();
    assert_eq!(s.tree, format!("Hello \"world\"\n{FRAMES_NOTE}"));
    // Cut by the helper: marked.
    let mut r = raw(vec![], 1);
    r.text = "First lines".into();
    let (s, _) = build_snapshot(r, 1, &HashSet::new()).unwrap();
    assert_eq!(s.tree, format!("First lines…\n{FRAMES_NOTE}"));
}

#[test]
fn json_lengths_match_serde() {
    assert_eq!(
        json_len("a\"b\\c\n\u{1}é"),
        2 + 1 + 2 + 1 + 2 + 1 + 2 + 6 + 2
    );
    let e = PageElement {
        element: "e1".into(),
        role: "link".into(),
        name: "Home".into(),
        value: String::new(),
        tag: "a".into(),
    };
    let expected = r#"{"url":"u","title":"t","elements":[{"element":"e1","role":"link","name":"Home","value":"","tag":"a"},{"element":"e1","role":"link","name":"Home","value":"","tag":"a"}],"tree":"x"}"#;
    assert_eq!(
        snapshot_json_len("u", "t", &[e.clone(), e], "x"),
        expected.len()
    );
}

#[test]
fn saved_login_values_are_masked_and_bad_refs_refused() {
    let saved: HashSet<String> = ["e3".to_owned()].into();
    let (s, _) = build_snapshot(raw(vec![el("e3", "secret")], 4), 3, &saved).unwrap();
    assert_eq!(s.elements[0].value, "");
    assert!(!s.tree.contains("secret"));
    for bad in ["x3", "e", "e-1", "e99", "e0"] {
        assert!(
            build_snapshot(raw(vec![el(bad, "")], 4), 3, &saved).is_err(),
            "{bad}"
        );
    }
    assert!(build_snapshot(raw(vec![el("e3", ""), el("e3", "")], 5), 3, &saved).is_err());
    // The counter never goes back, nor jumps further than one snapshot's worth.
    assert!(build_snapshot(raw(vec![], 2), 3, &saved).is_err());
    assert!(build_snapshot(raw(vec![], 3 + 81), 3, &saved).is_err());
}

#[test]
fn roles_and_tags_from_the_page_are_tokens() {
    assert_eq!(token("button", "generic"), "button");
    assert_eq!(token("my-widget2", "element"), "my-widget2");
    assert_eq!(token("Button", "generic"), "generic");
    assert_eq!(token("a\" [e1]", "generic"), "generic");
    assert_eq!(token("", "generic"), "generic");
}

#[test]
fn origins_are_normalized() {
    assert_eq!(
        normalize_origin("https://Example.com/").unwrap(),
        "https://example.com"
    );
    assert_eq!(
        normalize_origin("https://a.test:8443").unwrap(),
        "https://a.test:8443"
    );
    for bad in ["https://", "https://a/b", "https://u@a", "http://a"] {
        assert!(normalize_origin(bad).is_err(), "{bad}");
    }
}

#[tokio::test]
async fn the_api_can_be_used_from_spawned_tasks() {
    fn send<T: Send>(_: T) {}
    let (_, to) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let (from, _) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let browser = CdpClient::from_pipes(to, from).unwrap();
    let mut pages = PageBrowser::new();
    send(pages.snapshot(&browser));
    send(pages.navigate(&browser, "http://x/"));
    send(pages.act(&browser, &[]));
    send(pages);
}

#[test]
fn key_names_are_checked_with_the_batch() {
    let steps = [
        PageStep::Click {
            element: "e1".into(),
        },
        PageStep::Press {
            key: "Hyperdrive".into(),
        },
    ];
    let err = plan(&steps).err().unwrap();
    assert_eq!(err.code, ErrorCode::BadRequest);
    assert!(err.message.starts_with("step 2:"), "{}", err.message);
}

#[test]
fn helper_errors_map_to_the_contract_texts() {
    let reply = |code: &str, dispatched| Reply {
        error: Some(code.into()),
        dispatched,
        ..Reply::default()
    };
    let f = check(&reply("stale", false), None).unwrap_err();
    assert_eq!((f.error.as_str(), f.uncertain), (STALE_REF, false));
    let f = check(&reply("disabled", false), None).unwrap_err();
    assert_eq!(f.error, DISABLED);
    let f = check(&reply("verify", true), None).unwrap_err();
    assert!(f.uncertain);
    assert!(check(&Reply::default(), None).is_ok());
}
