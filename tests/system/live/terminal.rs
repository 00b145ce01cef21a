//! Live terminals: frames, resizes and limits, output order, releasing control, and where a team
//! bot's commands and terminal start.

use super::*;

#[tokio::test]
async fn terminal_frames_resize_and_limits() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-live-6").await?;
    let a = Bot::new(&c, "bot-a");
    // Terminals live with the bot's desktop (its teardown stops them, docs/screens.md#terminal).
    a.desktop(&w).await?;
    a.takeover(&w).await?;
    let term = a.terminal_url(&mut w).await?;
    let page = get(&w.http, &term).await?;
    assert_eq!(page.status, 200);
    assert!(String::from_utf8_lossy(&page.body).contains("xterm.js"));

    let mut ws = connect(&w.http, &term).await?;
    let mut out = Vec::new();
    ws.send(Message::Binary(encode_resize(123, 45).into()))
        .await?;
    // One input frame split across three websocket messages.
    let f = encode_input(b"stty size; echo WHO-$(whoami)-AMI\r");
    for part in [&f[..2], &f[2..9], &f[9..]] {
        ws.send(Message::Binary(part.to_vec().into())).await?;
    }
    read_until(&mut ws, &mut out, "45 123", LONG).await?;
    read_until(&mut ws, &mut out, "-AMI", LONG).await?;
    let text = String::from_utf8_lossy(&out).to_string();
    assert!(!text.contains("WHO-root-AMI"), "{text}");

    // A 2 MiB frame closes the connection.
    let mut big = vec![0u8];
    big.extend_from_slice(&(2u32 << 20).to_be_bytes());
    big.extend(vec![b'x'; 64 * 1024]);
    ws.send(Message::Binary(big.into())).await?;
    wait_closed(&mut ws, LONG).await?;
    w.check_log()?;
    Ok(())
}

/// A burst of terminal output (many QUIC packets, gathered into fewer websocket messages)
/// arrives whole and in order, and output written just before the shell exits arrives before
/// the close.
#[tokio::test]
async fn terminal_output_arrives_whole_and_in_order() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-live-12").await?;
    let a = Bot::new(&c, "bot-a");
    a.desktop(&w).await?;
    a.takeover(&w).await?;
    let term = a.terminal_url(&mut w).await?;
    let mut ws = connect(&w.http, &term).await?;
    let mut out = Vec::new();
    ws.send(Message::Binary(
        encode_input(b"stty -echo; seq -f N%g 1 200000; echo END-$((1+1))\r").into(),
    ))
    .await?;
    read_until(&mut ws, &mut out, "END-2", LONG).await?;
    // Every line `N<k>` of seq's output, in order (the echoed command line has none).
    let text = String::from_utf8_lossy(&out).to_string();
    let numbers: Vec<&str> = text
        .split(['\r', '\n'])
        .filter(|l| l.len() > 1 && l.starts_with('N') && l[1..].bytes().all(|b| b.is_ascii_digit()))
        .collect();
    assert_eq!(numbers.len(), 200_000, "lines of seq");
    for (i, n) in numbers.iter().enumerate() {
        assert_eq!(n[1..], (i + 1).to_string(), "line {} of seq", i + 1);
    }
    // The last bytes before the shell exits come before the close.
    let mut last = Vec::new();
    ws.send(Message::Binary(
        encode_input(b"printf 'LAST-%s' $((3*3)); exit\r").into(),
    ))
    .await?;
    read_until(&mut ws, &mut last, "LAST-9", LONG).await?;
    wait_closed(&mut ws, LONG).await?;
    w.check_log()?;
    Ok(())
}

#[tokio::test]
async fn releasing_control_closes_every_shell() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-live-7").await?;
    let a = Bot::new(&c, "bot-a");
    a.desktop(&w).await?;
    a.takeover(&w).await?;
    let view = a.url(&mut w, "view").await?;
    let control = a.url(&mut w, "control").await?;
    let term = a.terminal_url(&mut w).await?;
    let mut shells = Vec::new();
    for i in 0..2 {
        let mut ws = connect(&w.http, &term).await?;
        let mut out = Vec::new();
        let marker = format!("shell-{i}-ready");
        ws.send(Message::Binary(
            encode_input(format!("echo {marker}\r").as_bytes()).into(),
        ))
        .await?;
        read_until(&mut ws, &mut out, &marker, LONG).await?;
        shells.push(ws);
    }
    let mut driver = Rfb::handshake(WsBytes::new(connect(&w.http, &control).await?)).await?;
    driver.sync().await?;
    let mut viewer = Rfb::handshake(WsBytes::new(connect(&w.http, &view).await?)).await?;
    viewer.sync().await?;

    a.release_control(&w).await?;
    for ws in shells.iter_mut() {
        wait_closed(ws, Duration::from_secs(10)).await?;
    }
    wait_closed(&mut driver.io.ws, Duration::from_secs(10)).await?;
    // The view stays.
    viewer.sync().await?;
    assert_eq!(get(&w.http, &term).await?.status, 403);
    assert_eq!(upgrade_status(&w.http, &control).await?, Some(403));
    drop(viewer.io.ws.next());
    w.check_log()?;
    Ok(())
}

/// A Team computer's bot (docs/lifecycle.md#vocabulary, docs/screens.md#terminal): a command under
/// its lease without a cwd starts in its own `bots/<bot-id>/` (created on first use), an explicit
/// cwd keeps its meaning, and a command without a lease starts in the home; its terminal runs as
/// the same user as its commands, starts in the same directory, and reads a profile: `whoami`,
/// `$HOME`, `$USER` and the prompt (`user@host:~/bots/<bot-id>$`) are right.
#[tokio::test]
async fn a_team_bots_commands_and_terminal_start_in_its_directory_as_one_user() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-live-bots").await?;
    let a = Bot::new(&c, "bot-a");
    a.desktop(&w).await?;
    let lease = w.lease(&c, "bot-a", "run-dirs").await?;
    let probe = "pwd; printf '%s\\n' \"$HOME\"; id -un; id -u";
    let leased = w
        .exec(
            &c,
            serde_json::json!({ "argv": ["sh", "-c", probe], "bot": "bot-a", "lease": lease }),
        )
        .await?;
    assert_eq!(leased.code, Some(0), "{:?}", leased.events);
    let out = String::from_utf8_lossy(&leased.stdout).to_string();
    let lines: Vec<&str> = out.lines().collect();
    let [pwd, home, user, uid] = lines[..] else {
        bail!("unexpected probe output {out:?}");
    };
    assert_eq!(pwd, format!("{home}/bots/bot-a"), "{out}");
    let explicit = w
        .exec(
            &c,
            serde_json::json!({ "argv": ["pwd"], "cwd": "bots", "bot": "bot-a", "lease": lease }),
        )
        .await?;
    assert_eq!(
        String::from_utf8_lossy(&explicit.stdout).trim_end(),
        format!("{home}/bots")
    );
    assert_eq!(
        w.sh(&c, "pwd").await?.trim_end(),
        home,
        "no lease: the home"
    );
    assert_eq!(
        w.sh(&c, "stat -c %a bots/bot-a").await?.trim_end(),
        "700",
        "the bot directory is private"
    );
    a.end_run(&w, &lease).await?;

    a.takeover(&w).await?;
    let term = a.terminal_url(&mut w).await?;
    let mut ws = connect(&w.http, &term).await?;
    let mut seen = Vec::new();
    // The prompt of the profile, before anything is typed.
    read_until(&mut ws, &mut seen, ":~/bots/bot-a$ ", LONG).await?;
    let prompt = String::from_utf8_lossy(&seen).to_string();
    assert!(prompt.contains(&format!("{user}@")), "{prompt:?}");
    ws.send(Message::Binary(
        encode_input(
            b"printf 'P=%s\\n' \"$(pwd)\"; printf 'W=%s\\n' \"$(whoami)\"; \
              printf 'E=%s:%s:%s\\n' \"$HOME\" \"$USER\" \"$(id -u)\"\r",
        )
        .into(),
    ))
    .await?;
    let expected = format!("E={home}:{user}:{uid}");
    read_until(&mut ws, &mut seen, &expected, LONG).await?;
    let text = String::from_utf8_lossy(&seen).to_string();
    assert!(text.contains(&format!("P={pwd}\r\n")), "{text:?}");
    assert!(text.contains(&format!("W={user}\r\n")), "{text:?}");
    w.check_log()?;
    Ok(())
}
