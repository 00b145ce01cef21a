//! Live terminals: frames, resizes and limits, output order, releasing control, and where a team
//! bot's commands and terminal start.

use super::*;
use tests::live::Ws;

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

/// Opens a terminal's websocket as the page does (docs/screens.md#reconnecting): with its own
/// session id, and `resume` when it lost its connection.
async fn connect_page(w: &World, term: &str, session: &str, resume: bool) -> Result<Ws> {
    let url = format!(
        "{}?session={session}{}",
        tests::live::ws_url(&w.http, term),
        if resume { "&resume=1" } else { "" }
    );
    let (ws, resp) = tokio::time::timeout(LONG, tokio_tungstenite::connect_async(url))
        .await
        .context("websocket connect timed out")??;
    if resp.status().as_u16() != 101 {
        bail!("no upgrade: {}", resp.status());
    }
    Ok(ws)
}

/// Runs `echo $$` and reads the shell's pid, appending what it read to `seen`. The answer is
/// `<tag>-<pid>-<tag>42`: the echoed command line holds `$$` and `$((7*6))` instead, and `tag`
/// tells this answer from earlier ones in a redraw.
async fn shell_pid(ws: &mut Ws, seen: &mut Vec<u8>, tag: &str) -> Result<u32> {
    let cmd = format!("echo {tag}-$$-{tag}$((7*6))\r");
    ws.send(Message::Binary(encode_input(cmd.as_bytes()).into()))
        .await?;
    let end_mark = format!("-{tag}42");
    read_until(ws, seen, &end_mark, LONG).await?;
    let text = String::from_utf8_lossy(seen).to_string();
    let end = text.find(&end_mark).context("read_until found it")?;
    let start = text[..end]
        .rfind(&format!("{tag}-"))
        .with_context(|| format!("no {tag} answer in {text:?}"))?;
    text[start + tag.len() + 1..end]
        .parse()
        .with_context(|| format!("no pid in {:?}", &text[start..end]))
}

/// Whether process `pid` runs in computer `c`.
async fn runs(w: &World, c: &str, pid: u32) -> Result<bool> {
    let out = w
        .sh(
            c,
            &format!("if [ -d /proc/{pid} ]; then echo yes; else echo no; fi"),
        )
        .await?;
    Ok(out.trim() == "yes")
}

/// Waits up to `within` for process `pid` of computer `c` to be gone.
async fn until_gone(w: &World, c: &str, pid: u32, within: Duration) -> Result<()> {
    let deadline = tokio::time::Instant::now() + within;
    while runs(w, c, pid).await? {
        if tokio::time::Instant::now() >= deadline {
            bail!("shell {pid} still runs after {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// A dropped terminal connection (docs/screens.md#reconnecting): the page reconnects through the
/// same URL with its session id and gets the same shell (same pid, its variables), its screen
/// redrawn after a reset. Nobody else gets that shell: not another URL of the same bot, not
/// another bot, not another page of the same URL; a second connection of the same page takes
/// it over. Releasing control ends it, and the shells that were waiting, at once.
#[tokio::test]
async fn a_dropped_terminal_reattaches_to_its_own_shell_and_nobody_elses() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-live-reattach").await?;
    let a = Bot::new(&c, "bot-a");
    let b = Bot::new(&c, "bot-b");
    for bot in [&a, &b] {
        bot.desktop(&w).await?;
        bot.takeover(&w).await?;
    }
    let term = a.terminal_url(&mut w).await?;
    let page = "page-0123456789abcdef";

    let mut first = connect_page(&w, &term, page, false).await?;
    let mut seen = Vec::new();
    first
        .send(Message::Binary(encode_resize(100, 30).into()))
        .await?;
    first
        .send(Message::Binary(
            encode_input(b"KEPT=kept-$((6*7)); echo BEFORE-$((2+3))-DROP\r").into(),
        ))
        .await?;
    read_until(&mut first, &mut seen, "BEFORE-5-DROP", LONG).await?;
    let pid = shell_pid(&mut first, &mut seen, "P1").await?;
    // Dropped without a close handshake.
    drop(first);

    let mut again = connect_page(&w, &term, page, true).await?;
    let mut redraw = Vec::new();
    read_until(&mut again, &mut redraw, "BEFORE-5-DROP", LONG).await?;
    assert!(
        redraw.starts_with(b"\x1bc"),
        "a redraw starts with a reset: {:?}",
        String::from_utf8_lossy(&redraw)
    );
    let same = shell_pid(&mut again, &mut redraw, "P2").await?;
    assert_eq!(same, pid, "the same shell");
    again
        .send(Message::Binary(
            encode_input(b"echo VAR-$KEPT-END; stty size\r").into(),
        ))
        .await?;
    read_until(&mut again, &mut redraw, "VAR-kept-42-END", LONG).await?;
    read_until(&mut again, &mut redraw, "30 100", LONG).await?;

    // Nobody else's connection finds that shell, whatever it claims.
    let other_url = a.terminal_url(&mut w).await?;
    let b_url = b.terminal_url(&mut w).await?;
    let mut strangers = Vec::new();
    for (url, session) in [
        (&other_url, page),                    // another URL of the same bot
        (&b_url, page),                        // another bot
        (&term, "page-another-0123456789abc"), // another page of the same URL
    ] {
        let mut ws = connect_page(&w, url, session, true).await?;
        let mut out = Vec::new();
        read_until(&mut ws, &mut out, "the previous shell is gone", LONG).await?;
        let theirs = shell_pid(&mut ws, &mut out, "P3").await?;
        assert_ne!(
            theirs, pid,
            "a stranger reached the shell through {session}"
        );
        ws.send(Message::Binary(
            encode_input(b"echo VAR-${KEPT:-none}-END\r").into(),
        ))
        .await?;
        read_until(&mut ws, &mut out, "VAR-none-END", LONG).await?;
        strangers.push(theirs);
        drop(ws);
    }
    // The page's shell is still attached and untouched.
    again
        .send(Message::Binary(encode_input(b"echo STILL-$KEPT\r").into()))
        .await?;
    read_until(&mut again, &mut redraw, "STILL-kept-42", LONG).await?;

    // A second connection of the same page takes the shell over; the first one is closed.
    let mut third = connect_page(&w, &term, page, true).await?;
    wait_closed(&mut again, Duration::from_secs(10)).await?;
    let mut out = Vec::new();
    assert_eq!(shell_pid(&mut third, &mut out, "P4").await?, pid);

    // Releasing control ends the attached shell and the ones waiting for their pages.
    for p in &strangers {
        assert!(runs(&w, &c, *p).await?, "shell {p} waits for its page");
    }
    a.release_control(&w).await?;
    wait_closed(&mut third, Duration::from_secs(10)).await?;
    for p in [pid, strangers[0], strangers[2]] {
        until_gone(&w, &c, p, Duration::from_secs(10)).await?;
    }
    // Bot b's control stays, and so does its waiting shell.
    assert!(runs(&w, &c, strangers[1]).await?);
    w.check_log()?;
    Ok(())
}

/// A shell nobody reattaches to ends when the grace period is over, and the page that comes back
/// later gets a fresh shell that says so.
#[tokio::test]
async fn a_detached_shell_ends_after_the_grace_period() -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        guest_env: vec![("RAKAZO_TERMINAL_GRACE_SECS".into(), "3".into())],
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("ws-live-grace").await?;
    let a = Bot::new(&c, "bot-a");
    a.desktop(&w).await?;
    a.takeover(&w).await?;
    let term = a.terminal_url(&mut w).await?;
    let page = "page-grace-0123456789";
    let mut ws = connect_page(&w, &term, page, false).await?;
    let mut seen = Vec::new();
    let pid = shell_pid(&mut ws, &mut seen, "G1").await?;
    drop(ws);
    assert!(runs(&w, &c, pid).await?, "the shell waits for its page");
    until_gone(&w, &c, pid, Duration::from_secs(20)).await?;
    let mut ws = connect_page(&w, &term, page, true).await?;
    let mut out = Vec::new();
    read_until(&mut ws, &mut out, "the previous shell is gone", LONG).await?;
    assert_ne!(shell_pid(&mut ws, &mut out, "G2").await?, pid);

    // Without a session id a shell ends with its connection, as before.
    let mut plain = connect(&w.http, &term).await?;
    let mut out = Vec::new();
    let plain_pid = shell_pid(&mut plain, &mut out, "G3").await?;
    drop(plain);
    until_gone(&w, &c, plain_pid, Duration::from_secs(10)).await?;
    w.check_log()?;
    Ok(())
}

/// A URL that expires closes its terminal's websocket, and the shell ends then, without waiting
/// for a reattachment that could never come (the control plane resets the guest's stream as
/// revoked).
#[tokio::test]
async fn an_expired_terminal_url_ends_its_shell_at_once() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-live-term-expiry").await?;
    let a = Bot::new(&c, "bot-a");
    a.desktop(&w).await?;
    a.takeover(&w).await?;
    let v = w
        .post(
            &format!("/v1/computers/{c}/terminals/bot-a/url"),
            serde_json::json!({ "ttl_secs": 3 }),
        )
        .await?;
    let term = v["path"]
        .as_str()
        .ok_or_else(|| anyhow!("no path in {v}"))?
        .to_string();
    w.add_secret(term.trim_start_matches("/cap/"));
    let mut ws = connect_page(&w, &term, "page-expiry-0123456789", false).await?;
    let mut seen = Vec::new();
    let pid = shell_pid(&mut ws, &mut seen, "E1").await?;
    assert_eq!(
        close_reason(&mut ws, Duration::from_secs(10)).await?,
        "expired"
    );
    // Well within the 60 s grace period a dropped connection would have.
    until_gone(&w, &c, pid, Duration::from_secs(10)).await?;
    w.check_log()?;
    Ok(())
}
