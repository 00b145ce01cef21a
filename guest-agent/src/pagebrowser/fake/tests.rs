//! The fake provider's document model on markup alone (the page-tool suite, tests/system/page_tools.rs,
//! runs it end to end against the real browser's behaviour).

use super::dom::Dom;

const FORM: &str = r#"<!doctype html><html><head><title> Sign
  in </title></head><body>
<h1>Welcome</h1><p hidden>secret text</p><p style="display: none">also hidden</p>
<form action="/login" method="post">
<label for="u">User</label><input id="u" name="user" value="ada">
<label>Password <input type="password" name="pw" value="hunter2"></label>
<select name="plan"><option value="f">Free</option><option value="p" selected>Pro</option></select>
<input type="checkbox" name="keep" checked><input type="hidden" name="csrf" value="t">
<button name="go" value="1">Sign in</button><button type="button">Help</button>
</form><a href="/next">Next page</a></body></html>"#;

#[test]
fn roles_names_values_and_text_follow_the_helper() {
    let dom = Dom::parse(FORM);
    assert_eq!(dom.title(), "Sign in");
    let text = dom.page_text();
    assert!(text.starts_with("Welcome\n"), "{text}");
    assert!(
        !text.contains("secret") && !text.contains("also hidden"),
        "{text}"
    );
    let listed: Vec<(String, String, String)> = dom
        .interactive()
        .into_iter()
        .map(|i| (dom.role(i), dom.name(i), dom.value_shown(i)))
        .collect();
    let want = [
        ("textbox", "User", "ada"),
        ("textbox", "Password", ""),
        ("combobox", "", "Pro"),
        ("checkbox", "", "checked"),
        ("button", "Sign in", ""),
        ("button", "Help", ""),
        ("link", "Next page", ""),
    ];
    let want: Vec<(String, String, String)> = want
        .iter()
        .map(|(r, n, v)| ((*r).into(), (*n).into(), (*v).into()))
        .collect();
    assert_eq!(listed, want);
}

#[test]
fn form_data_is_the_successful_controls_and_the_submitter() {
    let mut dom = Dom::parse(FORM);
    let all = dom.interactive();
    let (user, keep, go) = (all[0], all[3], all[4]);
    let form = dom.form_of(go).unwrap();
    assert_eq!(dom.default_button(form), Some(go));
    dom.set_value(user, "grace\nhopper");
    dom.set_checked(keep, false);
    let data = dom.form_data(form, Some(go));
    let pairs: Vec<(&str, &str)> = data.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(
        pairs,
        [
            ("user", "gracehopper"),
            ("pw", "hunter2"),
            ("plan", "p"),
            ("csrf", "t"),
            ("go", "1")
        ]
    );
}
