//! The page-tool suite (issue 34): one set of cases run against every browser provider
//! (docs/screens.md#browser-providers), each case asserting the same observable results through
//! the API: `chrome` (the bot's desktop Chrome), `emulator` (headless Chromium, no desktop) and
//! `fake` (no browser: pages fetched and parsed in the guest). The pages are the fixture site's
//! and behave the same without JavaScript. One world per provider, chosen with
//! `rakazo serve`'s `BROWSER_PROVIDER`; the cases run in order in it.

use anyhow::{anyhow, ensure, Result};
use std::time::Duration;
use tests::bot::ref_of;
use tests::fixture::{Fixture, Form};
use tests::{World, WorldOptions};

const FORM_PAGE: &str = r#"<!doctype html><html><head><meta charset="utf-8"><title>Sign up</title></head>
<body><h1>Sign up</h1><p>Create your account.</p>
<form action="/echo" method="post">
<input type="hidden" name="token" value="t1">
<p><label for="name">Name</label> <input id="name" name="name" value="Ada"></p>
<p><label for="pw">Password</label> <input id="pw" type="password" name="password" value="preset-secret"></p>
<p><label for="plan">Plan</label> <select id="plan" name="plan"><option value="free">Free</option>
<option value="pro">Pro</option><option value="team" disabled>Team</option></select></p>
<p><label><input type="checkbox" name="news" value="yes"> Newsletter</label></p>
<p><label for="bio">Bio</label> <textarea id="bio" name="bio"></textarea></p>
<p><button type="submit" name="action" value="create">Create account</button>
<button hidden>Hidden button</button></p>
</form>
<form action="/echo" method="get"><p><label for="q">Search</label> <input id="q" type="search" name="q">
<button>Search</button></p></form>
<div style="display:none"><a href="/page/second">Hidden link</a></div>
<p><a href="/page/second">Second page</a></p>
</body></html>"#;

const SECOND_PAGE: &str = r#"<!doctype html><html><head><title>Second</title></head>
<body><h1>Second</h1><p>You made it.</p><a href="/page/form">Back to the form</a></body></html>"#;

/// (role, name, value, tag) of each element of the form page as it loads.
const FORM_ELEMENTS: [(&str, &str, &str, &str); 9] = [
    ("textbox", "Name", "Ada", "input"),
    ("textbox", "Password", "", "input"),
    ("combobox", "Plan", "Free", "select"),
    ("checkbox", "Newsletter", "unchecked", "input"),
    ("textbox", "Bio", "", "textarea"),
    ("button", "Create account", "", "button"),
    ("searchbox", "Search", "", "input"),
    ("button", "Search", "", "button"),
    ("link", "Second page", "", "a"),
];

const STALE: &str = "Stale element ref. Take a fresh snapshot.";

struct Tools<'a> {
    w: &'a World,
    c: String,
    bot: &'static str,
    lease: String,
}

impl Tools<'_> {
    async fn call(&self, action: &str, extra: serde_json::Value) -> Result<serde_json::Value> {
        let mut body = serde_json::json!({ "lease": self.lease });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let path = format!("/v1/computers/{}/browser/{}/{action}", self.c, self.bot);
        Ok(self.w.post(&path, body).await?)
    }

    async fn navigate(&self, url: &str) -> Result<serde_json::Value> {
        let v = self
            .call("navigate", serde_json::json!({ "url": url }))
            .await?;
        Ok(v["snapshot"].clone())
    }

    async fn snapshot(&self) -> Result<serde_json::Value> {
        let v = self.call("snapshot", serde_json::json!({})).await?;
        Ok(v["snapshot"].clone())
    }

    async fn act(&self, steps: serde_json::Value) -> Result<serde_json::Value> {
        self.call("act", serde_json::json!({ "steps": steps }))
            .await
    }

    /// A snapshot once the page's title is `title` (a navigation an act started may still be
    /// committing on a real browser), within 15 s.
    async fn settled(&self, title: &str) -> Result<serde_json::Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            // A snapshot taken mid-commit may fail; the next one is taken.
            let last = self.snapshot().await;
            match &last {
                Ok(s) if s["title"] == title => return Ok(s.clone()),
                _ if tokio::time::Instant::now() >= deadline => {
                    return Err(anyhow!("the page never became {title:?}: {last:?}"))
                }
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

/// (role, name, value, tag) of a snapshot's elements.
fn elements(s: &serde_json::Value) -> Vec<(String, String, String, String)> {
    s["elements"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let f = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (f("role"), f("name"), f("value"), f("tag"))
        })
        .collect()
}

fn value_of(s: &serde_json::Value, name: &str) -> Option<String> {
    s["elements"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str())
        .map(String::from)
}

fn tree(s: &serde_json::Value) -> &str {
    s["tree"].as_str().unwrap_or_default()
}

/// An act's failure: (completed, uncertain, error), checking the fallback.
fn failure(v: &serde_json::Value) -> Result<(u64, bool, String)> {
    ensure!(v["ok"] == false && v["fallback"] == "computer_act", "{v}");
    Ok((
        v["completed"].as_u64().ok_or_else(|| anyhow!("{v}"))?,
        v["uncertain"].as_bool().unwrap_or(true),
        v["error"].as_str().unwrap_or_default().to_string(),
    ))
}

/// The suite: the same cases and the same expected results on every provider.
async fn suite(provider: &str) -> Result<()> {
    let fx = Fixture::start().await?;
    let form = fx.page("form", FORM_PAGE);
    let second = fx.page("second", SECOND_PAGE);
    let mut w = World::start_with(WorldOptions {
        env: vec![("BROWSER_PROVIDER".into(), provider.into())],
        ..Default::default()
    })
    .await?;
    let c = w.create_computer(&format!("ws-pages-{provider}")).await?;
    let lease = w.lease(&c, "bot-p", "run-p").await?;
    let t = Tools {
        w: &w,
        c: c.clone(),
        bot: "bot-p",
        lease,
    };

    // Refused URLs never reach a browser.
    for url in [
        "file:///etc/passwd",
        "javascript:alert(1)",
        "http://user:pw@127.0.0.1/",
    ] {
        let err = t.navigate(url).await.expect_err(url).to_string();
        ensure!(err.contains("bad_request"), "{provider}: {url}: {err}");
    }

    // The form page: title, URL, text and exactly its visible controls, in document order;
    // hidden inputs and markup-hidden elements are not listed, a password never shows.
    let s = t.navigate(&form).await?;
    ensure!(
        s["title"] == "Sign up" && s["url"] == form.as_str(),
        "{provider}: {s}"
    );
    let want: Vec<_> = FORM_ELEMENTS
        .iter()
        .map(|(r, n, v, g)| (r.to_string(), n.to_string(), v.to_string(), g.to_string()))
        .collect();
    assert_eq!(elements(&s), want, "{provider}");
    ensure!(tree(&s).contains("Create your account."), "{provider}: {s}");
    ensure!(!s.to_string().contains("preset-secret"), "{provider}: {s}");
    ensure!(!tree(&s).contains("Hidden"), "{provider}: {s}");
    // Refs are stable while the document lives.
    let again = t.snapshot().await?;
    assert_eq!(ref_of(&again, "Name")?, ref_of(&s, "Name")?, "{provider}");

    // Fill, select (by text), click a checkbox, type: the snapshot after the act shows them;
    // the typed password does not.
    let ok = t
        .act(serde_json::json!([
            { "type": "fill", "ref": ref_of(&s, "Name")?, "text": "Grace" },
            { "type": "fill", "ref": ref_of(&s, "Password")?, "text": "hunter2-typed" },
            { "type": "select", "ref": ref_of(&s, "Plan")?, "value": "Pro" },
            { "type": "click", "ref": ref_of(&s, "Newsletter")? },
            { "type": "type", "ref": ref_of(&s, "Bio")?, "text": "Hello" },
        ]))
        .await?;
    ensure!(ok["ok"] == true, "{provider}: {ok}");
    let s = &ok["snapshot"];
    for (name, value) in [
        ("Name", "Grace"),
        ("Password", ""),
        ("Plan", "Pro"),
        ("Newsletter", "checked"),
        ("Bio", "Hello"),
    ] {
        assert_eq!(
            value_of(s, name).as_deref(),
            Some(value),
            "{provider}: {name}"
        );
    }
    ensure!(!s.to_string().contains("hunter2"), "{provider}: {s}");

    // Failures before anything acts: a disabled option, a missing one, filling a button.
    let plan = ref_of(s, "Plan")?;
    let v = t
        .act(serde_json::json!([{ "type": "select", "ref": plan, "value": "Team" }]))
        .await?;
    assert_eq!(
        failure(&v)?,
        (0, false, "That option is disabled".into()),
        "{provider}"
    );
    let v = t
        .act(serde_json::json!([
            { "type": "fill", "ref": ref_of(s, "Name")?, "text": "Alan" },
            { "type": "select", "ref": plan, "value": "Gold" },
        ]))
        .await?;
    let want = (
        1,
        false,
        r#"No option has the value or text "Gold""#.to_string(),
    );
    assert_eq!(failure(&v)?, want, "{provider}");
    let v = t
        .act(serde_json::json!([
            { "type": "fill", "ref": ref_of(s, "Create account")?, "text": "x" },
        ]))
        .await?;
    let want = "Element cannot be filled (it is a button); use click";
    assert_eq!(failure(&v)?, (0, false, want.into()), "{provider}");

    // A POST form: the submit button sends every successful control and its own name.
    let create = ref_of(s, "Create account")?;
    let v = t
        .act(serde_json::json!([{ "type": "click", "ref": create }]))
        .await?;
    ensure!(v["ok"] == true, "{provider}: {v}");
    let echo = t.settled("Echo POST").await?;
    for line in [
        "token=t1",
        "name=Alan",
        "password: received",
        "plan=pro",
        "news=yes",
        "bio=Hello",
        "action=create",
    ] {
        ensure!(tree(&echo).contains(line), "{provider}: {line} in {echo}");
    }
    let posted = fx
        .forms()
        .pop()
        .ok_or_else(|| anyhow!("no form reached the site"))?;
    let field = |f: &Form, k: &str| {
        f.fields
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(posted.method, "POST", "{provider}");
    assert_eq!(field(&posted, "password").as_deref(), Some("hunter2-typed"));

    // A ref of the document before the navigation is stale, and nothing is retargeted.
    let v = t
        .act(serde_json::json!([{ "type": "click", "ref": create }]))
        .await?;
    assert_eq!(failure(&v)?, (0, false, STALE.into()), "{provider}");
    assert_eq!(
        fx.forms().len(),
        1,
        "{provider}: the stale click submitted nothing"
    );

    // A GET form through Enter in its field (implicit submission).
    let s = t.navigate(&form).await?;
    let v = t
        .act(serde_json::json!([
            { "type": "fill", "ref": ref_of(&s, "Search")?, "text": "rust lang" },
            { "type": "press", "key": "Enter" },
        ]))
        .await?;
    ensure!(v["ok"] == true, "{provider}: {v}");
    let echo = t.settled("Echo GET").await?;
    ensure!(tree(&echo).contains("q=rust lang"), "{provider}: {echo}");
    let url = echo["url"].as_str().unwrap_or_default();
    ensure!(url.ends_with("/echo?q=rust+lang"), "{provider}: {url}");
    let got = fx.forms().pop().ok_or_else(|| anyhow!("no GET form"))?;
    assert_eq!(
        (got.method.as_str(), got.fields),
        ("GET", vec![("q".to_string(), "rust lang".to_string())]),
        "{provider}"
    );

    // A link navigates.
    let s = t.navigate(&form).await?;
    let v = t
        .act(serde_json::json!([{ "type": "click", "ref": ref_of(&s, "Second page")? }]))
        .await?;
    ensure!(v["ok"] == true, "{provider}: {v}");
    let s = t.settled("Second").await?;
    ensure!(s["url"] == second.as_str(), "{provider}: {s}");
    ensure!(tree(&s).contains("You made it."), "{provider}: {s}");
    assert_eq!(
        elements(&s),
        vec![(
            "link".to_string(),
            "Back to the form".to_string(),
            String::new(),
            "a".to_string()
        )],
        "{provider}"
    );

    // A page that cannot be reached (a port nothing listens on) fails the navigation, naming it.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        format!("http://{}/", l.local_addr()?)
    };
    let err = t
        .navigate(&closed)
        .await
        .expect_err("closed port")
        .to_string();
    ensure!(
        err.contains(&format!("navigation to {closed} failed")),
        "{provider}: {err}"
    );

    if provider == "emulator" {
        emulator_session(&t, &w, &c, &second).await?;
    }

    // The desktop tools: only a provider with a desktop has them.
    let observe = w
        .post(
            &format!("/v1/computers/{c}/screens/bot-p/observe"),
            serde_json::json!({ "lease": t.lease }),
        )
        .await;
    match (provider, observe) {
        ("chrome", Ok(obs)) => ensure!(obs["width"] == 1280, "{obs}"),
        ("chrome", Err(e)) => return Err(e.into()),
        (_, Ok(obs)) => return Err(anyhow!("{provider} observed a desktop: {obs}")),
        (_, Err(e)) => ensure!(e.to_string().contains("has no desktop"), "{provider}: {e}"),
    }
    w.post(
        &format!("/v1/computers/{c}/screens/bot-p/release"),
        serde_json::json!({ "lease": t.lease }),
    )
    .await?;
    // The release ended the session: no headless browser, no temporary profile left.
    let runtime = std::env::temp_dir().join(format!("rakazo-guest-{c}"));
    let headless = format!("{}/emulator-", runtime.display());
    tests::wait_for(
        Duration::from_secs(15),
        "the headless browser to exit",
        || tests::pids_with_cmdline(&headless).is_empty().then_some(()),
    )
    .await?;
    let left: Vec<_> = std::fs::read_dir(&runtime)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("emulator-"))
        .map(|e| e.file_name())
        .collect();
    ensure!(left.is_empty(), "{provider}: left behind {left:?}");
    w.check_log()
}

/// The emulator's session is a headless browser on a temporary profile outside the home; one
/// that dies is started again, the refs of the old one stale.
async fn emulator_session(t: &Tools<'_>, w: &World, c: &str, page: &str) -> Result<()> {
    let profile = format!("rakazo-guest-{c}/emulator-");
    let main: Vec<i32> = tests::pids_with_cmdline(&profile)
        .into_iter()
        .filter(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd);
            cmd.contains("--headless") && !cmd.contains("--type=")
        })
        .collect();
    ensure!(main.len() == 1, "one headless browser: {main:?}");
    ensure!(
        !w.home_of(c).join(".browser-profiles").exists(),
        "a profile in the home"
    );
    let s = t.navigate(page).await?;
    let link = ref_of(&s, "Back to the form")?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(main[0]),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    // Dead once a zombie (or reaped): its state after the command's ")".
    tests::wait_for(Duration::from_secs(10), "the browser to die", || {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", main[0])).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.trim_start().chars().next());
        matches!(state, None | Some('Z' | 'X')).then_some(())
    })
    .await?;
    // The next call starts a new browser.
    let s = t.snapshot().await?;
    ensure!(s["title"] != "Second", "a new browser: {s}");
    let v = t
        .act(serde_json::json!([{ "type": "click", "ref": link }]))
        .await?;
    assert_eq!(failure(&v)?, (0, false, STALE.into()));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn chrome_passes_the_page_tool_suite() -> Result<()> {
    suite("chrome").await
}

#[tokio::test(flavor = "multi_thread")]
async fn emulator_passes_the_page_tool_suite() -> Result<()> {
    suite("emulator").await
}

#[tokio::test(flavor = "multi_thread")]
async fn fake_passes_the_page_tool_suite() -> Result<()> {
    suite("fake").await
}
