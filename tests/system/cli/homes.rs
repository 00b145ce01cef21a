//! Homes through the CLI: checkpoint, browse, restore, purge.

use super::*;

#[tokio::test]
async fn cli_checkpoints_browses_restores_and_purges_a_home() -> Result<()> {
    let mut w = World::start().await?;
    let c = create(&w, "acme").await?;
    sh(
        &w,
        &c,
        "echo v1 > notes.txt; mkdir -p bots/bot-1; echo mine > bots/bot-1/a.txt",
    )
    .await?;
    let shown = text(&rakazo_ok(&w, &["home", "show", &c]).await?);
    assert_eq!(
        shown.trim_end(),
        format!("{c} home team-acme in the local store: revision none")
    );

    // Not a terminal: the outcome on stdout, progress as plain lines on stderr.
    let out = rakazo(&w, &["home", "checkpoint", &c]).await?;
    let stdout = text(&succeeded(&["home", "checkpoint"], out.clone())?);
    assert!(stdout.starts_with("revision 1 ("), "{stdout}");
    assert!(
        text(&out.stderr).contains(" MiB of "),
        "{}",
        text(&out.stderr)
    );
    let shown = text(&rakazo_ok(&w, &["home", "show", &c]).await?);
    assert_eq!(
        shown.trim_end(),
        format!("{c} home team-acme in the local store: revision 1")
    );

    let ls = text(&rakazo_ok(&w, &["home", "ls", &c, "bots/"]).await?);
    assert!(
        ls.lines()
            .any(|l| l == format!("- {:>12} bots/bot-1/a.txt", 5)),
        "{ls}"
    );
    assert!(
        ls.lines()
            .all(|l| l.ends_with(" bots") || l.contains(" bots/")),
        "only entries at or under bots/: {ls}"
    );
    let all = rakazo_json(&w, &["home", "ls", &c]).await?;
    let paths: Vec<&str> = all["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["path"].as_str())
        .collect();
    assert!(
        paths.contains(&"notes.txt") && paths.contains(&"bots/bot-1/a.txt"),
        "{all}"
    );
    let out = rakazo(&w, &["home", "ls", &c, "--limit", "1"]).await?;
    assert_eq!(
        text(&succeeded(&["home", "ls", "--limit"], out.clone())?)
            .lines()
            .count(),
        1
    );
    assert!(
        text(&out.stderr).contains("truncated"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        rakazo_ok(&w, &["home", "cat", &c, "notes.txt"]).await?,
        b"v1\n"
    );
    refused(&w, &["home", "cat", &c, "nope.txt"], "nope.txt").await?;

    // Restore: the home is the checkpoint again, later changes gone.
    sh(&w, &c, "echo v2 > notes.txt; touch later.txt").await?;
    let restored = text(&rakazo_ok(&w, &["home", "restore", &c]).await?);
    assert!(restored.starts_with("revision 1 ("), "{restored}");
    assert_eq!(
        rakazo_ok(&w, &["files", "cat", &c, "notes.txt"]).await?,
        b"v1\n"
    );
    refused(&w, &["files", "cat", &c, "later.txt"], "later.txt").await?;

    // --json: the checkpoint's progress as NDJSON, ending in `done`.
    let out = rakazo_ok(
        &w,
        &["home", "checkpoint", &c, "--wait-ms", "1000", "--json"],
    )
    .await?;
    let events: Vec<serde_json::Value> = text(&out)
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .with_context(|| format!("not NDJSON: {}", text(&out)))?;
    let done = events.last().cloned().unwrap_or_default();
    assert_eq!(
        (&done["type"], &done["revision"]),
        (&"done".into(), &2.into()),
        "{done}"
    );
    assert_eq!(revision(&w, &c).await?, Some(2));
    let out = rakazo_ok(&w, &["home", "restore", &c, "--json"]).await?;
    let last = text(&out)
        .lines()
        .last()
        .map(serde_json::from_str::<serde_json::Value>);
    let done = last.context("no output")??;
    assert_eq!(
        (&done["type"], &done["revision"]),
        (&"done".into(), &2.into()),
        "{done}"
    );

    // The operator's commands: reconcile (no killed write's temporary files on this local
    // store); purge refuses a live computer's home, then forgets a destroyed one's.
    let v = rakazo_json(&w, &["home", "reconcile"]).await?;
    assert_eq!(
        (&v["store"], &v["temporaries_removed"]),
        (&"local".into(), &0.into()),
        "{v}"
    );
    let out = text(&rakazo_ok(&w, &["home", "reconcile"]).await?);
    assert_eq!(out, "removed 0 stale temporary files, left 0 recent ones\n");
    // The refusal names the computer holding the home.
    refused(
        &w,
        &["home", "purge", "team-acme"],
        &format!("still belongs to live computer {c}; destroy it first"),
    )
    .await?;
    // A destroyed computer's home stays stored: the next computer of the workspace gets it.
    rakazo_ok(&w, &["computer", "destroy", &c]).await?;
    let next = create(&w, "acme").await?;
    assert_eq!(
        rakazo_ok(&w, &["files", "cat", &next, "notes.txt"]).await?,
        b"v1\n"
    );
    rakazo_ok(&w, &["computer", "destroy", &next]).await?;
    let purged = text(&rakazo_ok(&w, &["home", "purge", "team-acme"]).await?);
    assert_eq!(purged.trim_end(), "purged home team-acme");
    let fresh = create(&w, "acme").await?;
    assert_eq!(revision(&w, &fresh).await?, None);
    refused(&w, &["files", "cat", &fresh, "notes.txt"], "notes.txt").await?;
    w.check_log()
}

/// The causes of `c`'s home revisions, oldest first.
async fn causes(w: &World, c: &str) -> Result<Vec<String>> {
    let revs = rakazo_json(w, &["home", "revisions", c]).await?;
    Ok(revs["revisions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["cause"].as_str().map(str::to_owned))
        .collect())
}

#[tokio::test]
async fn cli_keeps_revisions_diffs_them_and_goes_back() -> Result<()> {
    let mut w = World::start().await?;
    let c = create(&w, "hist").await?;
    sh(
        &w,
        &c,
        "echo v1 > notes.txt; mkdir -p docs; echo keep > docs/a.txt",
    )
    .await?;
    rakazo_ok(&w, &["home", "checkpoint", &c]).await?;
    sh(
        &w,
        &c,
        "echo v2 > notes.txt; rm -r docs; echo new > added.txt",
    )
    .await?;
    rakazo_ok(&w, &["home", "checkpoint", &c]).await?;

    let revs = rakazo_json(&w, &["home", "revisions", &c]).await?;
    let list = revs["revisions"].as_array().cloned().unwrap_or_default();
    let shape: Vec<(u64, String, Option<u64>)> = list
        .iter()
        .map(|r| {
            (
                r["revision"].as_u64().unwrap_or(0),
                r["cause"].as_str().unwrap_or("").to_owned(),
                r["parent"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![(1, "manual".into(), None), (2, "manual".into(), Some(1))],
        "{revs}"
    );
    let table = text(&rakazo_ok(&w, &["home", "revisions", &c]).await?);
    assert!(table.starts_with("REVISION"), "{table}");
    assert_eq!(table.lines().count(), 3, "{table}");

    // Any revision reads back, and the differences are named.
    assert_eq!(
        rakazo_ok(&w, &["home", "cat", &c, "notes.txt", "--revision", "1"]).await?,
        b"v1\n"
    );
    assert_eq!(
        rakazo_ok(&w, &["home", "cat", &c, "notes.txt"]).await?,
        b"v2\n"
    );
    let old = text(&rakazo_ok(&w, &["home", "ls", &c, "--revision", "1"]).await?);
    assert!(
        old.contains("docs/a.txt") && !old.contains("added.txt"),
        "{old}"
    );
    let diff = text(&rakazo_ok(&w, &["home", "diff", &c, "1", "2"]).await?);
    assert_eq!(diff, "+ added.txt\n- docs/\n- docs/a.txt\nM notes.txt\n");

    // Going back saves the present first, so nothing is lost.
    sh(&w, &c, "echo v3 > notes.txt").await?;
    let back = text(&rakazo_ok(&w, &["home", "restore", &c, "--revision", "1"]).await?);
    assert!(back.starts_with("revision 4 ("), "{back}");
    assert_eq!(
        rakazo_ok(&w, &["files", "cat", &c, "notes.txt"]).await?,
        b"v1\n"
    );
    assert_eq!(
        rakazo_ok(&w, &["files", "cat", &c, "docs/a.txt"]).await?,
        b"keep\n"
    );
    refused(&w, &["files", "cat", &c, "added.txt"], "added.txt").await?;
    assert_eq!(
        rakazo_ok(&w, &["home", "cat", &c, "notes.txt", "--revision", "3"]).await?,
        b"v3\n"
    );
    assert_eq!(
        causes(&w, &c).await?,
        ["manual", "manual", "manual", "restore"]
    );

    // Bad revisions get a clear refusal and change nothing.
    refused(
        &w,
        &["home", "cat", &c, "notes.txt", "--revision", "9"],
        "no revision 9",
    )
    .await?;
    refused(&w, &["home", "diff", &c, "1", "99"], "no revision 99").await?;
    refused(
        &w,
        &["home", "restore", &c, "--revision", "42"],
        "no revision 42",
    )
    .await?;
    assert_eq!(revision(&w, &c).await?, Some(4));
    w.check_log()
}

#[tokio::test]
async fn cli_forks_a_computer_from_any_revision() -> Result<()> {
    let mut w = World::start().await?;
    let a = create(&w, "fork-a").await?;
    sh(
        &w,
        &a,
        "echo one > notes.txt; mkdir -p src; echo code > src/main.rs",
    )
    .await?;
    rakazo_ok(&w, &["home", "checkpoint", &a]).await?;
    // Unsaved work: the fork of a running computer checkpoints it first.
    sh(&w, &a, "echo two > notes.txt").await?;
    let v = rakazo_json(&w, &["computer", "fork", &a, "--workspace", "fork-b"]).await?;
    let b = v["id"].as_str().context("fork id")?.to_owned();
    assert_eq!(
        (&v["workspace"], &v["state"]),
        (&"fork-b".into(), &"running".into()),
        "{v}"
    );
    assert_eq!(
        rakazo_ok(&w, &["files", "cat", &b, "notes.txt"]).await?,
        b"two\n"
    );
    assert_eq!(
        rakazo_ok(&w, &["files", "cat", &b, "src/main.rs"]).await?,
        b"code\n"
    );

    // Each side goes on alone.
    sh(&w, &b, "echo fork > notes.txt; touch only-b").await?;
    sh(&w, &a, "touch only-a").await?;
    assert_eq!(
        rakazo_ok(&w, &["files", "cat", &a, "notes.txt"]).await?,
        b"two\n"
    );
    refused(&w, &["files", "cat", &a, "only-b"], "only-b").await?;
    refused(&w, &["files", "cat", &b, "only-a"], "only-a").await?;
    rakazo_ok(&w, &["home", "checkpoint", &b]).await?;
    assert_eq!(causes(&w, &b).await?, ["fork", "manual"]);

    // An older revision, into a private computer.
    let v = rakazo_json(
        &w,
        &[
            "computer",
            "fork",
            &a,
            "--revision",
            "1",
            "--private-bot",
            "bot-f",
        ],
    )
    .await?;
    let p = v["id"].as_str().context("fork id")?.to_owned();
    assert_eq!(
        rakazo_ok(&w, &["files", "cat", &p, "notes.txt"]).await?,
        b"one\n"
    );

    // The source's feed names the forks; a target that has a home is refused.
    let feed = text(&rakazo_ok(&w, &["activity", &a]).await?);
    assert!(
        feed.contains(&format!("forked into computer {b}")),
        "{feed}"
    );
    rakazo_ok(&w, &["computer", "destroy", &p]).await?;
    refused(
        &w,
        &["computer", "fork", &a, "--private-bot", "bot-f"],
        "already has checkpoints",
    )
    .await?;
    refused(
        &w,
        &[
            "computer",
            "fork",
            &a,
            "--workspace",
            "fork-c",
            "--revision",
            "9",
        ],
        "no revision 9",
    )
    .await?;
    w.check_log()
}
