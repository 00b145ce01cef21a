//! Terminals on real PTYs: resizes, the workspace user, ending with control, and a team bot's
//! terminal starting in its directory as a named user with a profile.

use super::*;

/// Reads the shell's answer to `echo MARK-$(stty size)-$(id -u)-$$`.
async fn probe_shell(term: &mut Stream) -> Result<(String, u32, u32, String)> {
    let mut seen = Vec::new();
    let cmd = encode_input(b"echo MARK-$(stty size)-$(id -u)-$$\r");
    // Split the frame across writes, inside its header and inside its payload.
    for piece in [&cmd[..2], &cmd[2..9], &cmd[9..]] {
        term.send.write_all(piece).await?;
        term.send.flush().await?;
    }
    // The first complete line `MARK-<rows> <cols>-<uid>-<pid>` (the echoed command line also
    // starts with MARK-, but does not parse).
    let re = |t: &str| -> Option<(String, u32, u32)> {
        t.match_indices("MARK-").find_map(|(at, _)| {
            let (line, _) = t[at + 5..].split_once('\n')?;
            let mut parts = line.trim_end().rsplitn(3, '-');
            let pid = parts.next()?.parse().ok()?;
            let uid = parts.next()?.parse().ok()?;
            let size = parts.next()?.to_string();
            Some((size, uid, pid))
        })
    };
    let text = match read_until(term, &mut seen, |t| re(t).is_some()).await {
        Ok(t) => t,
        Err(e) => bail!("{e:#}; output: {:?}", String::from_utf8_lossy(&seen)),
    };
    let (size, uid, pid) = re(&text).ok_or_else(|| anyhow!("no probe line in {text:?}"))?;
    Ok((size, uid, pid, text))
}

fn process_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminals_resize_run_as_the_workspace_user_and_end_with_control() -> Result<()> {
    let guest = Guest::start(None).await?;
    guest.ensure_screen("bot-term").await?;
    let mut first = guest
        .open("bot-term", CapabilityKind::Terminal, Some("lease-1"))
        .await?;
    let resize = encode_resize(123, 45);
    first.send.write_all(&resize[..3]).await?;
    first.send.flush().await?;
    first.send.write_all(&resize[3..]).await?;
    let (size, uid, pid_1, text) = probe_shell(&mut first).await?;
    assert!(!text.contains("cannot enter the home"), "{text:?}");
    assert_eq!(size, "45 123");
    assert_ne!(uid, 0, "the shell runs as root");
    assert!(process_alive(pid_1));

    // A second connection under the same lease is a fresh shell of its own.
    let mut second = guest
        .open("bot-term", CapabilityKind::Terminal, Some("lease-1"))
        .await?;
    let (size, _, pid_2, _) = probe_shell(&mut second).await?;
    assert_eq!(size, "24 80", "a new shell starts at the default size");
    assert_ne!(pid_1, pid_2);

    // A frame over 1 MiB closes its connection (and only that one).
    let mut big = guest
        .open("bot-term", CapabilityKind::Terminal, Some("lease-1"))
        .await?;
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(2u32 * 1024 * 1024).to_be_bytes());
    frame.extend_from_slice(&vec![b'x'; 64 * 1024]);
    big.send.write_all(&frame).await?;
    let reset = stream_end(&mut big).await?;
    assert_eq!(
        reset, None,
        "the guest finishes the stream when the terminal closes"
    );
    let bot = BotId::new("bot-term")?;
    let sockets = |g: &Guest| -> Vec<String> {
        g.gateway_files()
            .into_iter()
            .filter(|f| f.ends_with("-terminal.sock"))
            .collect()
    };
    eventually("the oversized session's socket to go", || {
        Ok(sockets(&guest).len() == 2)
    })
    .await?;
    assert_eq!(guest.ops.gateway().capability_count(&bot).await, 2);

    // Revoking control ends every shell, its processes and its socket.
    guest.revoke("bot-term", RevokeScope::Control).await?;
    for mut term in [first, second] {
        let reset = stream_end(&mut term).await?;
        assert_eq!(reset, Some(RESET_REVOKED.into()));
    }
    assert!(
        !process_alive(pid_1),
        "shell {pid_1} survived the revocation"
    );
    assert!(
        !process_alive(pid_2),
        "shell {pid_2} survived the revocation"
    );
    assert!(sockets(&guest).is_empty(), "{:?}", guest.gateway_files());
    assert_eq!(guest.ops.gateway().capability_count(&bot).await, 0);

    // A dropped connection ends its shell; the next one is fresh.
    // (Its home is now closed to the workspace user: the shell still starts, in /, and says so.)
    std::fs::set_permissions(guest.home.path(), std::fs::Permissions::from_mode(0o700))?;
    let mut third = guest
        .open("bot-term", CapabilityKind::Terminal, Some("lease-2"))
        .await?;
    let (_, _, pid_3, text) = probe_shell(&mut third).await?;
    assert!(text.starts_with("rakazo: uid "), "{text:?}");
    assert!(text.contains("cannot enter the home"), "{text:?}");
    third.send.reset(0u32.into())?;
    drop(third);
    eventually("the dropped terminal's shell to end", || {
        Ok(!process_alive(pid_3))
    })
    .await?;
    eventually("the dropped terminal's socket to go", || {
        Ok(sockets(&guest).is_empty())
    })
    .await?;

    // A client that finishes its stream ends its shell too, and the guest finishes its side.
    let mut fourth = guest
        .open("bot-term", CapabilityKind::Terminal, Some("lease-2"))
        .await?;
    let (_, _, pid_4, _) = probe_shell(&mut fourth).await?;
    fourth.send.finish()?;
    assert_eq!(stream_end(&mut fourth).await?, None);
    eventually("the finished terminal's shell to end", || {
        Ok(!process_alive(pid_4))
    })
    .await?;
    guest.shutdown().await;
    Ok(())
}

/// The terminal session directories in the temporary directory owned by `uid`.
fn terminal_session_dirs(uid: u32) -> Vec<std::path::PathBuf> {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(std::env::temp_dir())
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("rakazo-terminal-"))
                        && std::fs::metadata(p).is_ok_and(|m| m.uid() == uid)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A Team bot's terminal, as a root guest drops to a workspace uid that has no passwd entry:
/// the shell starts in the bot's own `bots/<bot>/` (created for that user, 0700), reads a
/// profile, and is called `rakazo` by `whoami` (nss_wrapper), `$USER` and its prompt; the
/// session's files go when it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_bots_terminal_starts_in_its_directory_as_a_named_user_with_a_profile() -> Result<()>
{
    use std::os::unix::fs::MetadataExt;
    const UID: u32 = 4242;
    const GID: u32 = 4343;
    if !nix::unistd::geteuid().is_root() {
        bail!("this test drops a root guest to uid {UID}: run it as root");
    }
    let user = guest_agent::gateway::terminal::user::WorkspaceUser { uid: UID, gid: GID };
    let guest = Guest::start_with(None, |cfg| cfg.workspace_user = Some(user)).await?;
    // The workspace user's home, as a provider sets it up.
    std::os::unix::fs::chown(guest.home.path(), Some(UID), Some(GID))?;
    guest.ensure_screen("bot-team").await?;
    let before = terminal_session_dirs(UID);
    let mut term = match guest
        .try_connect_in(
            "bot-team",
            CapabilityKind::Terminal,
            Some("lease-1"),
            StartDir::BotDir,
        )
        .await?
    {
        (Reply::Opened, s) => s,
        (other, _) => bail!("terminal answered {other:?}"),
    };
    let home = guest.home.path().canonicalize()?;
    let bot_dir = home.join("bots/bot-team");
    let meta = std::fs::metadata(&bot_dir)?;
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (UID, GID, 0o700)
    );

    let mut seen = Vec::new();
    // The prompt, before anything is typed: `\u@\h:\w` with the user named.
    let text = read_until(&mut term, &mut seen, |t| t.contains(":~/bots/bot-team$ ")).await?;
    assert!(text.contains("rakazo@"), "{text:?}");
    assert!(!text.contains("I have no name"), "{text:?}");
    term.send
        .write_all(&encode_input(
            b"printf 'P=%s\\n' \"$(pwd)\"; printf 'W=%s\\n' \"$(whoami)\"; \
              printf 'E=%s:%s:%s\\n' \"$HOME\" \"$USER\" \"$(id -u)\"\r",
        ))
        .await?;
    let expected_env = format!("E={}:rakazo:{UID}", guest.home.path().display());
    let text = read_until(&mut term, &mut seen, |t| t.contains(&expected_env)).await?;
    assert!(
        text.contains(&format!("P={}\r\n", bot_dir.display())),
        "{text:?}"
    );
    assert!(text.contains("W=rakazo\r\n"), "{text:?}");

    // The session's directory (profile, passwd) is the user's while it runs and goes with it.
    let sessions = || -> Vec<std::path::PathBuf> {
        let mut now = terminal_session_dirs(UID);
        now.retain(|p| !before.contains(p));
        now
    };
    assert_eq!(sessions().len(), 1, "{:?}", sessions());
    guest.revoke("bot-team", RevokeScope::Control).await?;
    stream_end(&mut term).await?;
    eventually("the session directory to go", || Ok(sessions().is_empty())).await?;
    guest.shutdown().await;
    Ok(())
}

/// Terminals opened with a session key (docs/screens.md#reconnecting): a dropped connection
/// leaves the shell waiting; the same bot, lease and key get it back with its output replayed
/// after a reset; another bot, another lease or no key never do. A client reset as revoked ends
/// the shell at once; a shell nobody comes back to ends when its grace period is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_terminal_returns_only_to_its_key_and_ends_after_its_grace() -> Result<()> {
    let grace = Duration::from_secs(10);
    let guest = Guest::start_with(None, |c| c.terminal_grace = grace).await?;
    guest.ensure_screen("bot-k").await?;
    guest.ensure_screen("bot-other").await?;
    let mut first = guest.open_keyed("bot-k", "lease-1", "key-1", false).await?;
    let (_, _, pid, _) = probe_shell(&mut first).await?;
    let mut seen = Vec::new();
    first
        .send
        .write_all(&encode_input(b"KEPT=x$((6*7)); echo KEEP-$((3+4))\r"))
        .await?;
    read_until(&mut first, &mut seen, |t| t.contains("KEEP-7")).await?;
    first.send.reset(0u32.into())?;
    drop(first);

    let mut again = guest.open_keyed("bot-k", "lease-1", "key-1", true).await?;
    let mut redraw = Vec::new();
    let text = read_until(&mut again, &mut redraw, |t| t.contains("KEEP-7")).await?;
    assert!(text.starts_with("\x1bc"), "{text:?}");
    assert!(
        text.contains("MARK-"),
        "the earlier output is replayed: {text:?}"
    );
    let (_, _, same, _) = probe_shell(&mut again).await?;
    assert_eq!(same, pid, "the same shell");

    // Never another bot's, another lease's, or a keyless connection's.
    let mut strangers = Vec::new();
    for (bot, lease, key) in [
        ("bot-other", "lease-1", Some("key-1")),
        ("bot-k", "lease-2", Some("key-1")),
        ("bot-k", "lease-1", Some("key-2")),
        ("bot-k", "lease-1", None),
    ] {
        let mut term = match key {
            Some(k) => guest.open_keyed(bot, lease, k, true).await?,
            None => {
                guest
                    .open(bot, CapabilityKind::Terminal, Some(lease))
                    .await?
            }
        };
        let (_, _, theirs, text) = probe_shell(&mut term).await?;
        assert_ne!(theirs, pid, "{bot} {lease} {key:?} reached the kept shell");
        if key.is_some() {
            assert!(text.contains("the previous shell is gone"), "{text:?}");
        }
        strangers.push((theirs, term));
    }
    let mut probe = Vec::new();
    again
        .send
        .write_all(&encode_input(b"echo V-$KEPT-V\r"))
        .await?;
    read_until(&mut again, &mut probe, |t| t.contains("V-x42-V")).await?;

    // Reset as revoked by the control plane: the shell ends now, not after the grace period.
    let started = tokio::time::Instant::now();
    again.send.reset(RESET_REVOKED.into())?;
    eventually("the revoked shell to end", || Ok(!process_alive(pid))).await?;
    assert!(
        started.elapsed() < grace,
        "ended only after {:?}",
        started.elapsed()
    );

    // The strangers' kept shells wait while nobody comes, then end; the keyless one ends with
    // its connection.
    let dropped = tokio::time::Instant::now();
    let pids: Vec<u32> = strangers.iter().map(|(p, _)| *p).collect();
    for (_, mut term) in strangers {
        term.send.reset(0u32.into())?;
    }
    eventually("the keyless shell to end", || Ok(!process_alive(pids[3]))).await?;
    assert!(
        pids[..3].iter().all(|p| process_alive(*p)),
        "kept shells wait"
    );
    within("the grace period to end the kept shells", async {
        while pids[..3].iter().any(|p| process_alive(*p)) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await?;
    assert!(dropped.elapsed() >= grace - Duration::from_secs(1));
    let bot = BotId::new("bot-k")?;
    assert_eq!(guest.ops.gateway().capability_count(&bot).await, 0);
    guest.shutdown().await;
    Ok(())
}

/// At most `MAX_DETACHED_PER_BOT` shells of a bot wait for their pages: the one that has waited
/// longest is stopped for the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_keeps_a_bounded_number_of_waiting_shells() -> Result<()> {
    use guest_agent::gateway::MAX_DETACHED_PER_BOT;
    let guest = Guest::start_with(None, |c| c.terminal_grace = Duration::from_secs(120)).await?;
    guest.ensure_screen("bot-w").await?;
    let mut pids = Vec::new();
    let mut terms = Vec::new();
    for i in 0..=MAX_DETACHED_PER_BOT {
        let mut term = guest
            .open_keyed("bot-w", "lease-1", &format!("key-{i}"), false)
            .await?;
        let (_, _, pid, _) = probe_shell(&mut term).await?;
        pids.push(pid);
        terms.push(term);
    }
    // Dropped in order; each detachment is in before the next drop.
    for mut term in terms {
        term.send.reset(0u32.into())?;
        drop(term);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    eventually("the longest waiting shell to end", || {
        Ok(!process_alive(pids[0]))
    })
    .await?;
    assert!(pids[1..].iter().all(|p| process_alive(*p)), "{pids:?}");
    let bot = BotId::new("bot-w")?;
    assert_eq!(
        guest.ops.gateway().capability_count(&bot).await,
        MAX_DETACHED_PER_BOT
    );
    guest.shutdown().await;
    Ok(())
}
