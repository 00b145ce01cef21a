//! Hand-overs: a user's upload into a bot's directory, a bot's attachment.

use super::*;

/// The README's file hand-overs: `files upload` (a person's, under their control of the bot)
/// and `files attach` (a bot's, under its lease), through the real binary; the attachment URL
/// fetched with no API token, as a browser does.
#[tokio::test]
async fn cli_uploads_for_the_user_and_attaches_for_the_bot() -> Result<()> {
    let mut w = World::start_with(tests::WorldOptions {
        env: vec![
            ("RAKAZO_ATTACHMENT_MAX_BYTES".into(), "1000".into()),
            ("RAKAZO_ATTACHMENT_URL_TTL_SECS".into(), "4".into()),
        ],
        ..Default::default()
    })
    .await?;
    let c = create(&w, "acme").await?;
    let dir = tempfile::tempdir()?;
    let brief = dir.path().join("brief.txt");
    std::fs::write(&brief, b"the brief")?;
    let brief = brief.to_str().context("utf-8 path")?;
    let upload = |control: &str, extra: &[&str]| -> Vec<String> {
        ["files", "upload", &c, "bot-1", brief, "--control", control]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect()
    };
    fn strs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    // Without the user's control of the bot: refused, nothing written.
    let a = upload("cl-none", &[]);
    refused(&w, &strs(&a), "needs the user's control of the bot").await?;
    let taken = rakazo_json(&w, &["screen", "takeover", &c, "bot-1"]).await?;
    let control = taken["control_lease"]
        .as_str()
        .context("control lease")?
        .to_string();
    let a = upload("cl-wrong", &[]);
    refused(&w, &strs(&a), "is not the live control of bot bot-1").await?;

    // The bot already has a file of that name: it is kept and the upload lands beside it.
    w.put_file(
        &c,
        "bots/bot-1/uploads/brief.txt",
        b"the bot's own".to_vec(),
        false,
    )
    .await?;
    let a = upload(&control, &[]);
    let out = text(&rakazo_ok(&w, &strs(&a)).await?);
    assert_eq!(
        out.trim_end(),
        "uploaded 9 bytes to bots/bot-1/uploads/brief (2).txt"
    );
    assert_eq!(
        &w.get_file(&c, "bots/bot-1/uploads/brief.txt").await?[..],
        b"the bot's own"
    );
    assert_eq!(
        &w.get_file(&c, "bots/bot-1/uploads/brief (2).txt").await?[..],
        b"the brief"
    );
    let a = upload(&control, &["--name", "notes.md", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&rakazo_ok(&w, &strs(&a)).await?)?;
    assert_eq!(v["path"], "bots/bot-1/uploads/notes.md", "{v}");
    assert_eq!(v["size"], 9, "{v}");
    let a = upload(&control, &["--name", "../../escape"]);
    refused(&w, &strs(&a), "must be a file name, not a path").await?;
    // Over the attachment limit: 413 before a byte reaches the computer.
    let big = dir.path().join("big.bin");
    std::fs::write(&big, vec![7u8; 1001])?;
    let big = big.to_str().context("utf-8 path")?;
    refused(
        &w,
        &["files", "upload", &c, "bot-1", big, "--control", &control],
        "the attachment limit is 1000 bytes",
    )
    .await?;
    let listed = text(&rakazo_ok(&w, &["files", "ls", &c, "bots/bot-1/uploads"]).await?);
    assert!(!listed.contains("big.bin"), "{listed}");
    // Control released: refused again.
    rakazo_ok(&w, &["screen", "release", &c, "bot-1"]).await?;
    let a = upload(&control, &[]);
    refused(&w, &strs(&a), "needs the user's control of the bot").await?;

    // attach_file: the bot's file as a URL that works without the API token.
    rakazo_ok(&w, &["lease", "acquire", &c, "bot-1", "--owner", "run-1"]).await?;
    w.put_file(&c, "bots/bot-1/report.csv", b"a,b\n1,2\n".to_vec(), false)
        .await?;
    let attach = [
        "files",
        "attach",
        &c,
        "bots/bot-1/report.csv",
        "--bot",
        "bot-1",
        "--lease",
        "run-1:1",
    ];
    let url = text(&rakazo_ok(&w, &attach).await?);
    let (base, token) = url
        .trim()
        .split_once("/att/")
        .with_context(|| format!("no attachment URL in {url:?}"))?;
    assert_eq!(base, w.http);
    w.add_secret(token);
    let path = format!("/att/{token}");
    let got = tests::live::get(&w.http, &path).await?;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, b"a,b\n1,2\n");
    let disposition = got
        .headers
        .iter()
        .find(|(n, _)| n == "content-disposition")
        .map(|(_, v)| v.as_str())
        .unwrap_or_default();
    assert!(
        disposition.starts_with("attachment; filename=\"report.csv\""),
        "{disposition}"
    );
    // A token with one character changed opens nothing, the same 404 as an unknown one.
    let mut forged = token.as_bytes().to_vec();
    let i = forged.len() / 2;
    forged[i] = if forged[i] == b'A' { b'B' } else { b'A' };
    let forged = format!("/att/{}", String::from_utf8(forged)?);
    assert_eq!(tests::live::get(&w.http, &forged).await?.status, 404);
    // Not the bot's lease: refused; a file over the limit: 413; a missing one: 404.
    let mut wrong = attach;
    wrong[7] = "run-0:1";
    refused(&w, &wrong, "lease").await?;
    w.put_file(&c, "bots/bot-1/big.bin", vec![1u8; 1001], false)
        .await?;
    let mut over = attach;
    over[3] = "bots/bot-1/big.bin";
    refused(&w, &over, "HTTP 413").await?;
    let mut missing = attach;
    missing[3] = "bots/bot-1/nothing.csv";
    refused(&w, &missing, "HTTP 404").await?;
    // A file that changed size since it was attached is refused, never served half-way.
    let v = rakazo_json(&w, &attach).await?;
    let changed = v["path"].as_str().context("path")?.to_string();
    w.add_secret(changed.trim_start_matches("/att/"));
    w.put_file(
        &c,
        "bots/bot-1/report.csv",
        b"a,b\n1,2\n3,4\n".to_vec(),
        false,
    )
    .await?;
    assert_eq!(tests::live::get(&w.http, &changed).await?.status, 409);
    // Past its lifetime the URL is the same 404.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(tests::live::get(&w.http, &path).await?.status, 404);
    w.check_log()
}
