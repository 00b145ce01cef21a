//! Forms: a signup form filled and submitted with a password that never shows, saved-login
//! fills over real HTTPS, shadow roots and editables, and typing and key presses.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signup_form_is_filled_and_submitted_and_the_password_never_shows() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/start")).await?;
    const PASSWORD: &str = "Zq8-unique-signup-secret";
    let logged_before = logs().len();

    let form = env.navigate(&server.url("/signup")).await?;
    assert_eq!(form.title, "Sign up");
    let name = find(&form, "textbox", "Full name")?;
    let email = find(&form, "textbox", "Email")?;
    let password = find(&form, "textbox", "Password")?;
    let country = find(&form, "combobox", "Country")?;
    let terms = find(&form, "checkbox", "I accept the terms")?;
    let submit = find(&form, "button", "Create account")?;
    assert_eq!(value_of(&form, &country)?, "Choose one");
    assert_eq!(value_of(&form, &terms)?, "unchecked");

    let filled = env
        .act_ok(&[
            fill(&name, "Ada Lovelace"),
            fill(&email, "ada@example.test"),
            fill(&password, PASSWORD),
            PageStep::Select {
                element: country.clone(),
                value: "Germany".into(),
            },
            click(&terms),
        ])
        .await?;
    assert_eq!(value_of(&filled, &name)?, "Ada Lovelace");
    assert_eq!(value_of(&filled, &email)?, "ada@example.test");
    assert_eq!(value_of(&filled, &password)?, "", "a password never shows");
    assert_eq!(value_of(&filled, &country)?, "Germany");
    assert_eq!(value_of(&filled, &terms)?, "checked");
    assert!(filled.tree.contains(&format!(
        "- textbox \"Full name\" [{name}] value=\"Ada Lovelace\""
    )));
    assert!(filled
        .tree
        .contains(&format!("- textbox \"Password\" [{password}]\n")));

    let submitted = env.act(&[click(&submit)]).await?;
    let welcome = submitted.as_ref().map_err(|f| anyhow::anyhow!("{f:?}"))?;
    assert_eq!(welcome.title, "Welcome");
    assert!(welcome.tree.contains("Account created"));
    let posts = server.seen("/signup");
    let post = posts
        .iter()
        .find(|s| s.method == "POST")
        .context("the form was posted")?;
    assert_eq!(
        post.body,
        format!(
            "name=Ada+Lovelace&email=ada%40example.test&password={PASSWORD}&country=de&terms=yes"
        )
    );

    // The password is nowhere but on the server: not in any snapshot or result (Debug shows
    // every field), not in any log line of this process (CDP traffic included), not in
    // Chrome's log.
    let shown = format!("{form:?}{filled:?}{submitted:?}");
    assert!(!shown.contains(PASSWORD));
    assert!(logs().len() > logged_before, "the trace log is captured");
    assert!(!logs().contains(PASSWORD), "the password is in a log line");
    assert!(!env.chrome_log().contains(PASSWORD));
    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saved_login_fill_needs_https_and_the_exact_origin() -> Result<()> {
    let https = Server::start(Some(tls_config()?))?;
    let http = Server::start(None)?;
    // The certificate is self-signed; only this test's Chrome is told to accept it.
    let mut env =
        Env::start_with(&https.url("/page/start"), &["--ignore-certificate-errors"]).await?;
    const USER: &str = "ada-unique-user-7731";
    const SECRET: &str = "pw-unique-saved-login-9902";
    let saved = |element: &str, text: &str, origin: &str| PageStep::Fill {
        element: element.to_owned(),
        text: text.to_owned(),
        origin: Some(origin.to_owned()),
    };

    // An HTTP page is refused, even for its own origin spelled as https.
    let plain = env.navigate(&http.url("/login")).await?;
    let user = find(&plain, "textbox", "Username")?;
    let http_as_https = http.origin().replace("http://", "https://");
    let refused = failure(env.act(&[saved(&user, USER, &http_as_https)]).await?)?;
    assert_eq!((refused.completed, refused.uncertain), (0, false));
    assert!(
        refused.error.starts_with("Saved login refused"),
        "{refused:?}"
    );

    let form = env.navigate(&https.url("/login")).await?;
    let user = find(&form, "textbox", "Username")?;
    let password = find(&form, "textbox", "Password")?;
    let submit = find(&form, "button", "Log in")?;
    // Another origin is refused before anything is filled.
    let refused = failure(
        env.act(&[saved(&user, USER, "https://example.test")])
            .await?,
    )?;
    assert_eq!((refused.completed, refused.uncertain), (0, false));
    assert_eq!(
        refused.error,
        "Saved login refused: the page is not an HTTPS page of https://example.test"
    );
    assert_eq!(value_of(&env.snapshot().await?, &user)?, "");

    // The exact origin (spelled with a trailing slash and capitals) is accepted; the filled
    // username is masked like a password from then on.
    let origin = format!(
        "{}/",
        https.origin().to_uppercase().replace("HTTPS", "https")
    );
    let filled = env
        .act_ok(&[
            saved(&user, USER, &origin),
            saved(&password, SECRET, &origin),
        ])
        .await?;
    assert_eq!(value_of(&filled, &user)?, "");
    assert_eq!(value_of(&filled, &password)?, "");
    let done = env.act_ok(&[click(&submit)]).await?;
    assert_eq!(done.title, "Logged in");
    let post = https
        .seen("/login")
        .into_iter()
        .find(|s| s.method == "POST")
        .context("the login was posted")?;
    assert_eq!(post.body, format!("username={USER}&password={SECRET}"));
    let shown = format!("{plain:?}{form:?}{filled:?}{done:?}");
    for secret in [USER, SECRET] {
        assert!(!shown.contains(secret));
        assert!(!logs().contains(secret), "{secret} is in a log line");
        assert!(!env.chrome_log().contains(secret));
    }
    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_roots_editables_and_unconfirmed_fills() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/start")).await?;
    let page = env.navigate(&server.url("/widgets")).await?;
    // Open shadow roots are part of the text (slotted content in place) and of the elements.
    assert!(
        page.tree
            .starts_with("Light text\nSlotted title\nShadow text\nShadow button\n"),
        "{}",
        page.tree
    );
    let shadow = find(&page, "button", "Shadow button")?;
    let notes = find(&page, "textbox", "Notes")?;
    let code = find(&page, "textbox", "Code")?;
    assert_eq!(value_of(&page, &notes)?, "old note");

    // A fill the page rewrites (upper case) is not confirmed: the page saw the events, so the
    // failure is uncertain, and the rest of the batch does not run.
    let rewritten = failure(env.act(&[fill(&code, "abc"), click(&shadow)]).await?)?;
    assert_eq!(
        (rewritten.completed, rewritten.uncertain),
        (0, true),
        "{rewritten:?}"
    );
    assert_eq!(
        rewritten.error,
        "The field did not keep the filled value; take a fresh snapshot"
    );
    assert_eq!(server.clicks(), Vec::<String>::new(), "nothing replayed");

    let after = env
        .act_ok(&[fill(&notes, "new note"), click(&shadow)])
        .await?;
    assert_eq!(value_of(&after, &notes)?, "new note");
    assert_eq!(value_of(&after, &code)?, "ABC");
    assert_eq!(server.clicks(), ["/log?click=shadow"]);
    env.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_and_key_presses_are_real_key_events() -> Result<()> {
    let server = Server::start(None)?;
    let mut env = Env::start(&server.url("/page/start")).await?;
    let page = env.navigate(&server.url("/search")).await?;
    let query = find(&page, "textbox", "Query")?;
    let done = env
        .act_ok(&[
            PageStep::Type {
                element: query.clone(),
                text: "héllo wörld".into(),
            },
            PageStep::Press {
                key: "Enter".into(),
            },
        ])
        .await?;
    // 11 characters and Enter: 12 keydown events, and Enter submitted the form.
    assert!(
        done.tree.contains("searched: héllo wörld keys: 12"),
        "{}",
        done.tree
    );
    // Selecting all and typing over it replaces the text.
    let replaced = env
        .act_ok(&[
            PageStep::Press {
                key: "Control+a".into(),
            },
            PageStep::Type {
                element: query.clone(),
                text: "x".into(),
            },
        ])
        .await?;
    assert_eq!(
        value_of(&replaced, &query)?,
        "héllo wörldx",
        "typing puts the caret at the end"
    );
    env.stop().await
}
