//! The page tools end to end through the API (issue 4): a scripted "contacts export" flow on a
//! local app, read back through the files API, and its failure modes.

use anyhow::Result;
use hyper::Method;
use std::time::Duration;
use tests::bot::ref_of;
use tests::fixture::Fixture;
use tests::{wait_for, World};

const CONTACTS_APP: &str = r#"<!doctype html><html><head><meta charset="utf-8"><title>Contacts</title></head>
<body><h1>Contacts</h1><p>Ada Lovelace, Alan Turing, Grace Hopper</p>
<button id="export">Export contacts</button>
<div id="dialog" hidden><p>Export 3 contacts as CSV?</p>
<a id="dl" href="/page/contacts.csv" download="contacts.csv">Download CSV</a>
<button id="cancel">Cancel</button></div>
<script>
const dialog = document.getElementById('dialog');
document.getElementById('export').onclick = () => { dialog.hidden = false; };
document.getElementById('cancel').onclick = () => { dialog.hidden = true; };
</script></body></html>"#;

const CSV: &str = "name,email\nAda Lovelace,ada@example.test\nAlan Turing,alan@example.test\nGrace Hopper,grace@example.test\n";

struct Tools<'a> {
    w: &'a World,
    c: String,
    bot: String,
    lease: String,
}

impl Tools<'_> {
    async fn call(&self, action: &str, extra: serde_json::Value) -> Result<serde_json::Value> {
        let mut body = serde_json::json!({ "lease": self.lease });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        Ok(self
            .w
            .post(
                &format!("/v1/computers/{}/browser/{}/{action}", self.c, self.bot),
                body,
            )
            .await?)
    }

    async fn snapshot(&self) -> Result<serde_json::Value> {
        let v = self.call("snapshot", serde_json::json!({})).await?;
        Ok(v["snapshot"].clone())
    }

    async fn click(&self, element: &str) -> Result<serde_json::Value> {
        self.call(
            "act",
            serde_json::json!({ "steps": [{ "type": "click", "ref": element }] }),
        )
        .await
    }

    fn csvs(&self, listing: &serde_json::Value) -> Vec<String> {
        listing["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["path"].as_str())
            .filter(|p| p.ends_with(".csv"))
            .map(String::from)
            .collect()
    }

    async fn downloads(&self) -> Result<Vec<String>> {
        match self
            .w
            .client
            .json(
                Method::GET,
                &format!("/v1/computers/{}/files?path=Downloads", self.c),
                None,
            )
            .await
        {
            Ok(v) => Ok(self.csvs(&v)),
            Err(e) if e.to_string().contains("not_found") => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn contacts_export_flow_downloads_exactly_one_csv() -> Result<()> {
    let fx = Fixture::start().await?;
    let app = fx.page("contacts", CONTACTS_APP);
    fx.page("contacts.csv", CSV);
    let mut w = World::start().await?;
    let c = w.create_computer("ws-contacts").await?;
    let lease = w.lease(&c, "bot-x", "run-x").await?;
    let t = Tools {
        w: &w,
        c: c.clone(),
        bot: "bot-x".into(),
        lease,
    };

    let nav = t
        .call("navigate", serde_json::json!({ "url": app }))
        .await?;
    assert_eq!(nav["snapshot"]["title"], "Contacts");
    let s1 = t.snapshot().await?;
    assert!(s1["tree"]
        .as_str()
        .unwrap_or_default()
        .contains("Grace Hopper"));

    // Failure 1: a stale ref (the page was reloaded, its elements replaced).
    let export = ref_of(&s1, "Export contacts")?;
    t.call("navigate", serde_json::json!({ "url": app }))
        .await?;
    let stale = t.click(&export).await?;
    assert_eq!(
        (stale["ok"].as_bool(), stale["completed"].as_u64()),
        (Some(false), Some(0)),
        "{stale}"
    );
    assert_eq!(stale["error"], "Stale element ref. Take a fresh snapshot.");
    assert_eq!(stale["fallback"], "computer_act");

    // Failure 2: a click on "Download CSV" after "Cancel" closed the dialog.
    let s = t.snapshot().await?;
    t.click(&ref_of(&s, "Export contacts")?).await?;
    let s = t.snapshot().await?;
    let download = ref_of(&s, "Download CSV")?;
    t.click(&ref_of(&s, "Cancel")?).await?;
    let after_cancel = t.click(&download).await?;
    assert_eq!(
        (
            after_cancel["ok"].as_bool(),
            after_cancel["completed"].as_u64()
        ),
        (Some(false), Some(0)),
        "{after_cancel}"
    );
    assert!(
        t.downloads().await?.is_empty(),
        "no file after the failures"
    );

    // The flow: snapshot, Export contacts, snapshot, Download CSV, observe, read the CSV.
    let s = t.snapshot().await?;
    let ok = t.click(&ref_of(&s, "Export contacts")?).await?;
    assert_eq!(ok["ok"], true, "{ok}");
    let s = t.snapshot().await?;
    let ok = t.click(&ref_of(&s, "Download CSV")?).await?;
    assert_eq!(ok["ok"], true, "{ok}");
    let obs = w
        .post(
            &format!("/v1/computers/{c}/screens/bot-x/observe"),
            serde_json::json!({ "lease": t.lease }),
        )
        .await?;
    assert_eq!(obs["width"], 1280);
    let csvs = wait_for(Duration::from_secs(20), "the download", || {
        let dir = w.home_of(&c).join("Downloads");
        let done = std::fs::read_dir(&dir)
            .ok()?
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".csv"));
        let partial = std::fs::read_dir(&dir)
            .ok()?
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".crdownload"));
        (done && !partial).then_some(())
    })
    .await;
    csvs?;
    let csvs = t.downloads().await?;
    assert_eq!(
        csvs,
        vec!["Downloads/contacts.csv".to_string()],
        "exactly one CSV"
    );
    let body = w.get_file(&c, &csvs[0]).await?;
    assert_eq!(String::from_utf8_lossy(&body), CSV);
    w.post(
        &format!("/v1/computers/{c}/screens/bot-x/release"),
        serde_json::json!({ "lease": t.lease }),
    )
    .await?;
    w.check_log()
}

#[tokio::test(flavor = "multi_thread")]
async fn refused_urls_never_reach_the_browser() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-urls").await?;
    let lease = w.lease(&c, "bot-u", "run-u").await?;
    let t = Tools {
        w: &w,
        c: c.clone(),
        bot: "bot-u".into(),
        lease,
    };
    for url in [
        "file:///etc/passwd",
        "javascript:alert(1)",
        "http://user:pw@127.0.0.1/",
    ] {
        let err = t
            .call("navigate", serde_json::json!({ "url": url }))
            .await
            .expect_err(url);
        assert!(err.to_string().contains("bad_request"), "{url}: {err}");
    }
    // Nothing was started for the bot: the refusals happened before any guest call.
    let list = w.screens(&c).await?;
    assert_eq!(list["screens"].as_array().map(Vec::len), Some(0));
    w.check_log()
}
