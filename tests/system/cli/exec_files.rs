//! `rakazo exec` and `rakazo files`: streams, stdin, exit codes, bytes and modes.

use super::*;

#[tokio::test]
async fn cli_exec_streams_output_stdin_and_exit_codes() -> Result<()> {
    let mut w = World::start().await?;
    let id = create(&w, "w-exec").await?;
    let out = rakazo(
        &w,
        &[
            "exec",
            &id,
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
    )
    .await?;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(out.stdout, b"out\n");
    assert_eq!(text(&out.stderr), "err\n");

    // Stdin is streamed with -i and closed at end of input.
    let out = rakazo_with(
        &w,
        w.api_token(),
        &["exec", "-i", &id, "--", "tr", "a-z", "A-Z"],
        Some(b"hi\n"),
    )
    .await?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(out.stdout, b"HI\n");

    // Streamed both ways as it arrives: the answer to the first line comes back while stdin is
    // still open (a CLI that buffered its input until EOF would wait here forever).
    let argv = [
        "exec",
        "-i",
        &id,
        "--",
        "sh",
        "-c",
        "while read l; do echo \"got $l\"; done; echo bye",
    ];
    let mut child = command(
        &[("RAKAZO_URL", &w.http), ("RAKAZO_TOKEN", w.api_token())],
        &argv,
    )
    .stdin(Stdio::piped())
    .spawn()?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let mut stdout = child.stdout.take().context("stdout")?;
    stdin.write_all(b"one\n").await?;
    stdin.flush().await?;
    let seen = read_until(&mut stdout, b"got one\n")
        .await
        .context("no answer to the first line while stdin was open")?;
    stdin.write_all(b"two\n").await?;
    drop(stdin);
    let mut rest = Vec::new();
    tokio::time::timeout(CLI_TIMEOUT, stdout.read_to_end(&mut rest)).await??;
    let status = tokio::time::timeout(CLI_TIMEOUT, child.wait()).await??;
    assert!(status.success(), "{status}");
    assert_eq!(text(&[seen, rest].concat()), "got one\ngot two\nbye\n");

    // Without -i the command's stdin is empty, and success is exit 0.
    let out = rakazo(&w, &["exec", &id, "--", "cat"]).await?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());

    // The README's timeout: exit 124 and the message on stderr; with a tree, the whole tree
    // is killed.
    let out = rakazo(
        &w,
        &["exec", "--timeout-ms", "1000", &id, "--", "sleep", "10"],
    )
    .await?;
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    let out = rakazo(
        &w,
        &[
            "exec",
            "--timeout-ms",
            "1000",
            &id,
            "--",
            "sh",
            "-c",
            "sleep 9.87 & sleep 9.87",
        ],
    )
    .await?;
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("timed out after 1000 ms"),
        "{}",
        text(&out.stderr)
    );
    // `sleep 9.87` names this test's processes among the machine's.
    let ps = sh(&w, &id, "ps -eo args | grep -c '^sleep 9[.]87' || true").await?;
    assert_eq!(text(&ps).trim(), "0", "the sleeps outlived the timeout");

    // --cwd and --env reach the command; --json prints its events, one JSON object per line.
    rakazo_ok(&w, &["exec", &id, "--", "mkdir", "-p", "sub/dir"]).await?;
    let out = rakazo_ok(
        &w,
        &[
            "exec",
            &id,
            "--cwd",
            "sub/dir",
            "--env",
            "GREETING=hé llo",
            "--json",
            "--",
            "sh",
            "-c",
            "echo \"$GREETING from $(basename $PWD)\"",
        ],
    )
    .await?;
    let events: Vec<serde_json::Value> = text(&out)
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .with_context(|| format!("not NDJSON: {}", text(&out)))?;
    let stdout: String = events
        .iter()
        .filter(|e| e["type"] == "stdout")
        .filter_map(|e| e["data"].as_str())
        .collect();
    assert_eq!(stdout, "hé llo from dir\n");
    assert_eq!(
        events.last().map(|e| (&e["type"], &e["code"])),
        Some((&"exit".into(), &0.into()))
    );
    let out = rakazo(&w, &["exec", &id, "--env", "NOEQUALS", "--", "true"]).await?;
    assert_refused(&["exec", "--env", "NOEQUALS"], &out, "KEY=VALUE");
    // A cwd outside the home: exit 1 and a message naming it (docs/api.md#exec).
    let out = rakazo(&w, &["exec", &id, "--cwd", "../..", "--", "true"]).await?;
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains(".."), "{}", text(&out.stderr));
    w.check_log()
}

#[tokio::test]
async fn cli_files_round_trip_binary_bytes_and_the_exec_bit() -> Result<()> {
    let mut w = World::start().await?;
    let id = create(&w, "w-files").await?;
    let local_dir = tempfile::tempdir()?;
    let local = local_dir.path().join("f.bin");
    let mut content: Vec<u8> = (0..=255u8).cycle().take(1 << 20).collect();
    content.extend_from_slice(&rand::random::<[u8; 64]>());
    content.extend_from_slice(b"\r\n\0\xff");
    std::fs::write(&local, &content)?;
    let local_str = local.display().to_string();

    let put = text(&rakazo_ok(&w, &["files", "put", &id, &local_str, "dir/f.bin", "-x"]).await?);
    assert_eq!(
        put.trim_end(),
        format!("wrote {} bytes to dir/f.bin", content.len())
    );
    let cat = rakazo_ok(&w, &["files", "cat", &id, "dir/f.bin"]).await?;
    assert_eq!(cat.len(), content.len());
    assert!(cat == content, "cat returned different bytes");

    let ls = text(&rakazo_ok(&w, &["files", "ls", &id, "dir"]).await?);
    let line = ls
        .lines()
        .find(|l| l.ends_with(" dir/f.bin"))
        .ok_or_else(|| anyhow!("dir/f.bin not listed:\n{ls}"))?;
    assert!(line.starts_with("x "), "not shown as executable: {line}");
    assert!(line.contains(&content.len().to_string()), "{line}");
    let mode = std::fs::metadata(w.home_of(&id).join("dir/f.bin"))?
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);

    // The README's script: uploaded executable, listed, read back, and it runs.
    let tool = local_dir.path().join("tool.sh");
    std::fs::write(&tool, "#!/bin/sh\necho tool ran with $1\n")?;
    let tool_str = tool.display().to_string();
    let put = rakazo_json(
        &w,
        &[
            "files",
            "put",
            &id,
            &tool_str,
            "bin/tool.sh",
            "--executable",
        ],
    )
    .await?;
    assert_eq!(put["written"], 32, "{put}");
    let ls = text(&rakazo_ok(&w, &["files", "ls", &id, "bin"]).await?);
    assert_eq!(ls.trim_end(), format!("x {:>12} bin/tool.sh", 32));
    assert_eq!(
        rakazo_ok(&w, &["files", "cat", &id, "bin/tool.sh"]).await?,
        std::fs::read(&tool)?
    );
    assert_eq!(
        rakazo_ok(&w, &["exec", &id, "--", "bin/tool.sh", "x"]).await?,
        b"tool ran with x\n"
    );
    // Without -x a file is private and not executable; the root listing shows both dirs.
    rakazo_ok(&w, &["files", "put", &id, &tool_str, "notes.txt"]).await?;
    let mode = std::fs::metadata(w.home_of(&id).join("notes.txt"))?
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let root = rakazo_json(&w, &["files", "ls", &id]).await?;
    let entries: Vec<(&str, &str)> = root["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e["path"].as_str()?, e["kind"].as_str()?)))
        .collect();
    for want in [("bin", "dir"), ("dir", "dir"), ("notes.txt", "file")] {
        assert!(entries.contains(&want), "{want:?} not in {root}");
    }

    // What users get wrong: a cap below the size, a missing file, a missing local file.
    refused(
        &w,
        &["files", "cat", &id, "dir/f.bin", "--max-bytes", "10"],
        "exceeds 10 bytes",
    )
    .await?;
    refused(&w, &["files", "cat", &id, "no/such/file"], "no/such/file").await?;
    refused(&w, &["files", "ls", &id, "no-such-dir"], "no-such-dir").await?;
    let missing = local_dir.path().join("missing.bin").display().to_string();
    refused(&w, &["files", "put", &id, &missing, "m.bin"], &missing).await?;
    refused(&w, &["files", "put", &id, &tool_str, "../escape.sh"], "..").await?;
    w.check_log()
}
