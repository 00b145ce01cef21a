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

    // The operator's commands: reconcile (nothing to do on the local store); purge refuses a
    // live computer's home, then forgets a destroyed one's.
    let v = rakazo_json(&w, &["home", "reconcile"]).await?;
    assert_eq!(v["store"], "local", "{v}");
    let out = text(&rakazo_ok(&w, &["home", "reconcile"]).await?);
    assert_eq!(out, "the local store has nothing to reconcile\n");
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
