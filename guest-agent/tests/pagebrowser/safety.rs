//! What the page browser refuses or keeps within bounds: URLs and batches refused before any
//! CDP call, stable refs that never retarget, covered targets, a 5,000-element page, the
//! frames note, a tampering page, and a click that hangs the page.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn urls_and_batches_are_refused_before_any_cdp_call() -> Result<()> {
    // A connection whose browser end is already closed: any CDP call fails.
    let (_, to_browser) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (from_browser, _) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let closed = CdpClient::from_pipes(to_browser, from_browser)?;
    let ws = &closed;
    let mut pages = PageBrowser::new();
    for (url, message) in [
        (
            "file:///etc/passwd",
            "only http and https URLs can be opened",
        ),
        (
            "javascript:alert(1)",
            "only http and https URLs can be opened",
        ),
        ("http://user:pw@host/", "URLs with credentials are refused"),
        ("https://u@host/", "URLs with credentials are refused"),
    ] {
        let err = pages.navigate(ws, url).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::BadRequest, "{url}: {err:?}");
        assert_eq!(err.message, message, "{url}");
    }
    for (steps, message) in [
        (vec![], "browser_act takes 1..=24 steps"),
        (vec![click("e1"), click("button")], "step 2: \"button\" is not an element ref like e12"),
        (
            vec![click("e1"), PageStep::Press { key: "Hyper+x".into() }],
            "step 2: unknown key \"Hyper+x\"; use a key name like Enter, Tab, ArrowDown or one character",
        ),
        (
            vec![PageStep::Fill {
                element: "e1".into(),
                text: "pw".into(),
                origin: Some("https://a.test/login".into()),
            }],
            "step 1: \"https://a.test/login\" is not an https origin",
        ),
    ] {
        let err = pages.act(ws, &steps).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::BadRequest, "{steps:?}: {err:?}");
        assert_eq!(err.message, message);
    }
    // The control: a valid request does reach for the closed connection.
    let err = pages.navigate(ws, "http://127.0.0.1:9/").await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Failed);
    assert!(
        err.message
            .contains("the devtools connection to the browser is closed"),
        "{err:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refs_are_stable_and_never_retarget_a_replaced_button() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/start")).await?;
    let first = env.navigate(&server.url("/offers")).await?;
    let buy = find(&first, "button", "Buy")?;
    let refresh = find(&first, "button", "Refresh offers")?;
    let hide = find(&first, "button", "Hide me")?;
    let pay = find(&first, "button", "Pay")?;
    let archive = find(&first, "button", "Archive")?;
    let next = find(&first, "link", "Next page")?;

    // The same live elements keep their refs.
    let again = env.snapshot().await?;
    assert_eq!(again.elements, first.elements);

    // The page replaces the button with an identical one: the old ref is stale, nothing is
    // clicked (neither the old button nor its look-alike), even after a step that succeeded.
    let replaced = env.act_ok(&[click(&refresh)]).await?;
    let new_buy = find(&replaced, "button", "Buy")?;
    assert_ne!(new_buy, buy);
    let first_highest = first.elements.iter().map(|e| ref_number(&e.element)).max();
    assert!(
        Some(ref_number(&new_buy)) > first_highest,
        "new elements get new numbers"
    );
    let stale = failure(env.act(&[click(&buy)]).await?)?;
    assert_eq!(
        (stale.completed, stale.uncertain, stale.error.as_str()),
        (0, false, STALE_REF)
    );
    let stale = failure(env.act(&[click(&refresh), click(&buy)]).await?)?;
    assert_eq!(
        (stale.completed, stale.uncertain, stale.error.as_str()),
        (1, false, STALE_REF)
    );
    assert_eq!(server.clicks(), Vec::<String>::new(), "nothing was clicked");
    // That refresh replaced the look-alike too.
    let stale = failure(env.act(&[click(&new_buy)]).await?)?;
    assert_eq!(stale.error, STALE_REF);
    let new_buy = find(&env.snapshot().await?, "button", "Buy")?;

    // Unknown refs are stale too; disabled elements say so and are not clicked.
    let unknown = failure(env.act(&[click("e999999")]).await?)?;
    assert_eq!(unknown.error, STALE_REF);
    for element in [&pay, &archive] {
        let disabled = failure(env.act(&[click(element)]).await?)?;
        assert_eq!(
            (
                disabled.completed,
                disabled.uncertain,
                disabled.error.as_str()
            ),
            (0, false, DISABLED)
        );
    }
    assert_eq!(server.clicks(), Vec::<String>::new());

    // A hidden element's ref is stale.
    env.act_ok(&[click(&hide)]).await?;
    let hidden = failure(env.act(&[click(&hide)]).await?)?;
    assert_eq!(hidden.error, STALE_REF);

    // The look-alike is clickable through its own ref (the positive control).
    env.act_ok(&[click(&new_buy)]).await?;
    assert_eq!(server.clicks(), ["/log?click=new-buy"]);

    // A click that navigates returns the new page; refs of the old document are stale, and
    // the new page's refs are new numbers.
    let highest = ref_number(&new_buy);
    let landed = env.act_ok(&[click(&next)]).await?;
    assert_eq!(landed.title, "next");
    let stale = failure(env.act(&[click(&new_buy)]).await?)?;
    assert_eq!(stale.error, STALE_REF);
    let back = env.navigate(&server.url("/offers")).await?;
    for e in &back.elements {
        assert!(ref_number(&e.element) > highest, "{} reused", e.element);
    }
    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_covered_target_is_refused_naming_the_overlay() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/start")).await?;
    let page = env.navigate(&server.url("/overlay")).await?;
    let delete = find(&page, "button", "Delete account")?;
    let accept = find(&page, "button", "Accept")?;

    let covered = failure(env.act(&[click(&delete)]).await?)?;
    assert_eq!((covered.completed, covered.uncertain), (0, false));
    assert_eq!(
        covered.error,
        "Element is covered by div#consent.modal.cookie \"We value your privacy Accept\"; \
         the click was not sent"
    );
    assert_eq!(
        server.clicks(),
        Vec::<String>::new(),
        "neither the target nor the overlay was clicked"
    );

    // Once the overlay is gone, the same ref clicks.
    env.act_ok(&[click(&accept), click(&delete)]).await?;
    assert_eq!(server.clicks(), ["/log?click=delete"]);
    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5000_element_page_stays_within_bounds() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/start")).await?;
    let big = env.navigate(&server.url("/catalog?5000")).await?;
    assert_eq!(big.elements.len(), MAX_ELEMENTS);
    // Elements on screen come first: the catalog's first rows.
    assert_eq!(big.elements[0].name, "Item 1 details");
    assert_eq!(big.elements[1].name, "Add 1 to cart");
    let text = big
        .tree
        .split("\n- ")
        .next()
        .context("the tree starts with text")?;
    // The text is cut (at a line break, marked) to keep the whole snapshot within its budget.
    assert!(text.chars().count() <= MAX_TEXT_CHARS);
    assert!(text.chars().count() > 4_000, "the text is cut, not dropped");
    assert!(text.ends_with("to cart…"), "{}", &text[text.len() - 80..]);
    assert!(text.starts_with("Catalog\nItem 1 details In stock"));
    let lines = big.tree.lines().filter(|l| l.starts_with("- ")).count();
    assert_eq!(lines, MAX_ELEMENTS);
    assert!(
        big.tree.len() <= 16 * 1024,
        "tree is {} bytes",
        big.tree.len()
    );

    let mut times = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        let s = env.snapshot().await?;
        times.push(started.elapsed());
        assert_eq!(s.elements, big.elements, "refs are stable");
    }
    times.sort();
    eprintln!(
        "5,000-element snapshot (debug build): median {:?}, tree {} bytes",
        times[times.len() / 2],
        big.tree.len()
    );
    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn visible_frames_add_the_note() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/start")).await?;
    let framed = env.navigate(&server.url("/frames")).await?;
    assert_eq!(framed.tree, format!("Outer text\n{FRAMES_NOTE}"));
    // A frame that is not rendered shows nothing and gets no note.
    let hidden = env.navigate(&server.url("/hidden-frame")).await?;
    assert_eq!(hidden.tree, "Outer text");
    let plain = env.navigate(&server.url("/page/plain")).await?;
    assert!(!plain.tree.contains(FRAMES_NOTE));
    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_globals_and_prototype_tampering_do_not_change_a_snapshot() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/start")).await?;
    let clean = env.navigate(&server.url("/settings?clean")).await?;
    let tampered = env.navigate(&server.url("/settings")).await?;
    assert_eq!(tampered.title, clean.title);
    assert_eq!(tampered.title, "Settings");
    // Same elements with new refs: compare everything but the refs.
    let strip = |s: &Snapshot| {
        let mut tree = s.tree.clone();
        for e in &s.elements {
            tree = tree.replace(&format!("[{}]", e.element), "[ref]");
        }
        let elements: Vec<_> = s
            .elements
            .iter()
            .map(|e| {
                (
                    e.role.clone(),
                    e.name.clone(),
                    e.value.clone(),
                    e.tag.clone(),
                )
            })
            .collect();
        (tree, elements)
    };
    assert_eq!(strip(&tampered), strip(&clean));
    assert_eq!(
        strip(&clean).0,
        "Settings\nProfile details for Ada\nNickname\nSecret\nHelp Save\n\
         - textbox \"Nickname\" [ref] value=\"ada\"\n- textbox \"Secret\" [ref]\n\
         - link \"Help\" [ref]\n- button \"Save\" [ref]"
    );
    // Acting works through the patched prototypes too (the page's value setter is a no-op).
    let nick = find(&tampered, "textbox", "Nickname")?;
    let after = env.act_ok(&[fill(&nick, "grace")]).await?;
    assert_eq!(value_of(&after, &nick)?, "grace");
    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_click_that_hangs_the_page_is_uncertain_and_the_page_can_be_left() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/start")).await?;
    let page = env.navigate(&server.url("/hang")).await?;
    let freeze = find(&page, "button", "Freeze")?;
    let after = find(&page, "button", "After")?;
    // The click reaches the page (its handler reports, then spins forever), but its input event
    // is never acknowledged: sent, not confirmed, so uncertain; the next step never runs.
    let hung = failure(env.act(&[click(&freeze), click(&after)]).await?)?;
    assert_eq!((hung.completed, hung.uncertain), (0, true), "{hung:?}");
    assert!(
        hung.error
            .starts_with("The click was sent but not confirmed"),
        "{hung:?}"
    );
    assert_eq!(server.clicks(), ["/log?click=freeze"]);
    // The hung tab cannot answer the visibility probe, but it is the only tab: navigating to
    // another site (a new renderer process) gets the agent out.
    let away = format!("http://localhost:{}/page/away", server.port);
    let left = env.navigate(&away).await?;
    assert_eq!(left.title, "away");
    env.stop().await
}
