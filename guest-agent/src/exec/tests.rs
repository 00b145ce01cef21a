use super::*;

struct Outcome {
    events: Vec<ExecEvent>,
}

impl Outcome {
    fn stdout(&self) -> Vec<u8> {
        self.events
            .iter()
            .filter_map(|e| match e {
                ExecEvent::Stdout(b) => Some(b.as_slice()),
                _ => None,
            })
            .flatten()
            .copied()
            .collect()
    }

    fn stdout_str(&self) -> String {
        String::from_utf8(self.stdout()).expect("utf8 stdout")
    }

    fn stderr_str(&self) -> String {
        let bytes: Vec<u8> = self
            .events
            .iter()
            .filter_map(|e| match e {
                ExecEvent::Stderr(b) => Some(b.as_slice()),
                _ => None,
            })
            .flatten()
            .copied()
            .collect();
        String::from_utf8(bytes).expect("utf8 stderr")
    }

    /// The final event, after checking the event order: `Started` first (unless the
    /// command never ran), exactly one final event, last.
    fn last(&self) -> &ExecEvent {
        let finals = self
            .events
            .iter()
            .filter(|e| matches!(e, ExecEvent::Exit { .. } | ExecEvent::Failed(_)))
            .count();
        assert_eq!(finals, 1, "{:?}", self.events);
        let last = self.events.last().expect("events");
        assert!(matches!(
            last,
            ExecEvent::Exit { .. } | ExecEvent::Failed(_)
        ));
        if self.events.len() > 1 {
            assert!(
                matches!(self.events[0], ExecEvent::Started { .. }),
                "{:?}",
                self.events
            );
        }
        last
    }

    fn exit(&self) -> (i32, Option<String>) {
        match self.last() {
            ExecEvent::Exit { code, message } => (*code, message.clone()),
            other => panic!("expected an exit, got {other:?}"),
        }
    }
}

fn home() -> (tempfile::TempDir, Home) {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = Home::new(dir.path()).expect("home");
    (dir, home)
}

fn req(argv: &[&str]) -> ExecRequest {
    ExecRequest {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: None,
        env: Vec::new(),
        timeout_ms: None,
        stdin: false,
        lease: None,
        start: StartDir::Home,
    }
}

fn sh(script: &str) -> ExecRequest {
    req(&["sh", "-c", script])
}

fn test_env() -> Vec<(OsString, OsString)> {
    vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("RAKAZO_SECRET".into(), "hunter2".into()),
        ("RAKAZO_TOKEN".into(), "t".into()),
        ("KEEP_ME".into(), "kept".into()),
    ]
}

/// Runs `req` with `inputs` queued up front; the input channel stays open until the end.
async fn exec(home: &Home, req: ExecRequest, inputs: Vec<ExecInput>) -> Outcome {
    let (in_tx, in_rx) = mpsc::channel(inputs.len().max(1));
    for i in inputs {
        in_tx.send(i).await.expect("queue input");
    }
    let (ev_tx, mut ev_rx) = mpsc::channel(64);
    let collect = async {
        let mut events = Vec::new();
        while let Some(e) = ev_rx.recv().await {
            events.push(e);
        }
        events
    };
    let running = registry();
    let ((), events) = tokio::join!(
        run_with_env(home, &running, req, test_env(), in_rx, ev_tx),
        collect
    );
    drop(in_tx);
    Outcome { events }
}

/// A unique number of seconds for `sleep`, to find a test's processes in /proc.
/// A fresh registry of running commands.
fn registry() -> Arc<Running> {
    Arc::default()
}

fn unique_secs() -> u32 {
    100_000 + rand::random::<u32>() % 800_000
}

/// Live (non-zombie) processes whose argv is exactly `sleep <secs>`.
fn sleepers(secs: u32) -> Vec<i32> {
    let want = format!("sleep\0{secs}\0");
    scan_proc()
        .into_iter()
        .filter(|p| p.state != 'Z')
        .filter(|p| {
            std::fs::read(format!("/proc/{}/cmdline", p.pid)).is_ok_and(|c| c == want.as_bytes())
        })
        .map(|p| p.pid)
        .collect()
}

/// Starts sleepers that escape in every way we can catch: same group, new session, orphaned
/// in the group, orphaned in a new session, new session without the marker. Prints `ready`
/// once all are launched.
fn escaping_tree(secs: u32) -> ExecRequest {
    sh(&format!(
        "sleep {secs} & setsid sleep {secs} & (sleep {secs} &); (setsid sleep {secs} &); \
         env -i /usr/bin/setsid sleep {secs} & echo ready; wait"
    ))
}

#[tokio::test]
async fn streams_both_outputs_and_exit_code() {
    let (_t, home) = home();
    let out = exec(&home, sh("echo out; echo err >&2; exit 3"), vec![]).await;
    assert_eq!(out.stdout_str(), "out\n");
    assert_eq!(out.stderr_str(), "err\n");
    assert_eq!(out.exit(), (3, None));
}

#[tokio::test]
async fn signal_gives_128_plus_signal() {
    let (_t, home) = home();
    let out = exec(&home, sh("kill -TERM $$"), vec![]).await;
    assert_eq!(out.exit(), (143, Some("terminated by SIGTERM".into())));
}

#[tokio::test]
async fn stdin_is_streamed_through_cat() {
    let (_t, home) = home();
    let mut r = req(&["cat"]);
    r.stdin = true;
    let inputs = vec![
        ExecInput::Stdin(ByteBuf::from(b"hello ".to_vec())),
        ExecInput::Stdin(ByteBuf::from(b"world".to_vec())),
        ExecInput::CloseStdin,
    ];
    let out = exec(&home, r, inputs).await;
    assert_eq!(out.stdout_str(), "hello world");
    assert_eq!(out.exit(), (0, None));
}

#[tokio::test]
async fn large_stdin_and_stdout_do_not_deadlock() {
    let (_t, home) = home();
    let mut r = req(&["cat"]);
    r.stdin = true;
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let (in_tx, in_rx) = mpsc::channel(4);
    let (ev_tx, mut ev_rx) = mpsc::channel(4);
    let send = async {
        for chunk in data.chunks(MAX_CHUNK) {
            in_tx
                .send(ExecInput::Stdin(ByteBuf::from(chunk.to_vec())))
                .await
                .expect("send");
        }
        in_tx.send(ExecInput::CloseStdin).await.expect("close");
        in_tx
    };
    let collect = async {
        let mut events = Vec::new();
        while let Some(e) = ev_rx.recv().await {
            events.push(e);
        }
        events
    };
    let running = registry();
    let ((), in_tx, events) = tokio::join!(
        run_with_env(&home, &running, r, test_env(), in_rx, ev_tx),
        send,
        collect
    );
    drop(in_tx);
    let out = Outcome { events };
    assert_eq!(out.exit(), (0, None));
    assert!(out.stdout() == data, "stdout differs from stdin");
}

#[tokio::test]
async fn without_stdin_the_command_reads_dev_null() {
    let (_t, home) = home();
    let out = exec(&home, sh("cat; echo end"), vec![]).await;
    assert_eq!(out.stdout_str(), "end\n");
}

#[tokio::test]
async fn large_output_arrives_complete_in_bounded_chunks() {
    let (_t, home) = home();
    let out = exec(&home, req(&["seq", "1", "700000"]), vec![]).await;
    assert_eq!(out.exit(), (0, None));
    let expected: String = (1..=700_000).map(|i| format!("{i}\n")).collect();
    assert!(expected.len() > 4_000_000);
    assert!(out.stdout_str() == expected, "stdout differs");
    for e in &out.events {
        if let ExecEvent::Stdout(b) | ExecEvent::Stderr(b) = e {
            assert!(
                !b.is_empty() && b.len() <= MAX_CHUNK,
                "chunk of {}",
                b.len()
            );
        }
    }
}

#[tokio::test]
async fn environment_drops_guest_secrets() {
    let (_t, home) = home();
    let mut r = req(&["env"]);
    r.env = vec![("EXTRA".into(), "x=1".into())];
    let out = exec(&home, r, vec![]).await;
    let env = out.stdout_str();
    let lines: Vec<&str> = env.lines().collect();
    assert!(lines.contains(&"KEEP_ME=kept"), "{env}");
    assert!(lines.contains(&"EXTRA=x=1"), "{env}");
    assert!(
        lines.contains(&format!("HOME={}", home.root().display()).as_str()),
        "{env}"
    );
    assert!(!env.contains("hunter2"), "{env}");
    let rakazo: Vec<_> = lines.iter().filter(|l| l.starts_with("RAKAZO_")).collect();
    assert_eq!(rakazo.len(), 1, "{rakazo:?}");
    assert!(rakazo[0].starts_with("RAKAZO_EXEC_ID="));
}

#[tokio::test]
async fn real_environment_has_no_guest_variables() {
    let (_t, home) = home();
    let (_in_tx, in_rx) = mpsc::channel(1);
    let (ev_tx, mut ev_rx) = mpsc::channel(64);
    let collect = async {
        let mut out = Vec::new();
        while let Some(e) = ev_rx.recv().await {
            if let ExecEvent::Stdout(b) = e {
                out.extend_from_slice(&b);
            }
        }
        String::from_utf8(out).expect("utf8")
    };
    let running = registry();
    let ((), env) = tokio::join!(run(&home, &running, req(&["env"]), in_rx, ev_tx), collect);
    for line in env.lines().filter(|l| l.starts_with(GUEST_ENV_PREFIX)) {
        assert!(line.starts_with("RAKAZO_EXEC_ID="), "{line}");
    }
}

#[tokio::test]
async fn cwd_is_resolved_in_the_home() {
    let (_t, home) = home();
    std::fs::create_dir_all(home.root().join("w/x")).expect("mkdir");
    let mut r = req(&["pwd"]);
    r.cwd = Some("w/x".into());
    let out = exec(&home, r.clone(), vec![]).await;
    assert_eq!(
        out.stdout_str().trim_end(),
        home.root().join("w/x").to_str().expect("utf8")
    );
    r.cwd = Some(home.root().join("w").display().to_string());
    let out = exec(&home, r, vec![]).await;
    assert_eq!(
        out.stdout_str().trim_end(),
        home.root().join("w").to_str().expect("utf8")
    );
    let out = exec(&home, req(&["pwd"]), vec![]).await;
    assert_eq!(
        out.stdout_str().trim_end(),
        home.root().to_str().expect("utf8")
    );
}

#[tokio::test]
async fn cwd_outside_or_missing_exits_1_and_runs_nothing() {
    let (t, home) = home();
    std::os::unix::fs::symlink("/", home.root().join("root-link")).expect("symlink");
    std::fs::write(home.root().join("file"), b"").expect("write");
    let cases = [
        ("../x", "cwd \"../x\" is outside the home"),
        ("a/../../x", "cwd \"a/../../x\" is outside the home"),
        ("/etc", "cwd \"/etc\" is outside the home"),
        ("missing", "cwd \"missing\" does not exist"),
        ("root-link", "cwd \"root-link\" goes through a symlink"),
        ("file", "cwd \"file\" is not a directory"),
    ];
    for (cwd, message) in cases {
        let mut r = sh("touch ran");
        r.cwd = Some(cwd.into());
        let out = exec(&home, r, vec![]).await;
        assert_eq!(out.events.len(), 1, "{:?}", out.events);
        assert_eq!(out.exit(), (1, Some(message.into())), "{cwd}");
    }
    assert!(!home.root().join("ran").exists());
    assert!(!t.path().join("ran").exists());
}

fn under_lease(mut r: ExecRequest, bot: &str) -> ExecRequest {
    r.lease = Some(gateway_proto::BotLease {
        bot: BotId::new(bot).expect("bot"),
        token: gateway_proto::LeaseToken::parse("run:1").expect("token"),
    });
    r.start = StartDir::BotDir;
    r
}

#[tokio::test]
async fn a_bot_starts_in_its_own_directory_created_0700_and_an_explicit_cwd_wins() {
    use std::os::unix::fs::PermissionsExt;
    let (_t, home) = home();
    let out = exec(&home, under_lease(req(&["pwd"]), "bot-a"), vec![]).await;
    let dir = home.root().join("bots/bot-a");
    assert_eq!(out.stdout_str().trim_end(), dir.to_str().expect("utf8"));
    for d in [home.root().join("bots"), dir.clone()] {
        let mode = std::fs::metadata(&d).expect("created").permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{}", d.display());
    }
    // Used again as it is; an explicit cwd keeps its meaning; no lease, no bot directory.
    let out = exec(&home, under_lease(sh("pwd; ls"), "bot-a"), vec![]).await;
    assert_eq!(out.exit(), (0, None));
    let mut r = under_lease(req(&["pwd"]), "bot-a");
    r.cwd = Some("bots".into());
    let out = exec(&home, r, vec![]).await;
    assert_eq!(
        out.stdout_str().trim_end(),
        home.root().join("bots").to_str().expect("utf8")
    );
    let mut r = req(&["pwd"]);
    r.start = StartDir::BotDir;
    let out = exec(&home, r, vec![]).await;
    assert_eq!(out.exit().0, 1, "{:?}", out.events);
}

#[tokio::test]
async fn a_bot_directory_through_a_symlink_is_refused_and_nothing_runs() {
    let (t, home) = home();
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(home.root().join("bots")).expect("mkdir");
    std::os::unix::fs::symlink(outside.path(), home.root().join("bots/bot-b")).expect("symlink");
    let out = exec(&home, under_lease(sh("touch ran"), "bot-b"), vec![]).await;
    assert_eq!(
        out.exit(),
        (
            1,
            Some("the bot directory \"bots/bot-b\" goes through a symlink".into())
        )
    );
    assert!(!outside.path().join("ran").exists());
    assert!(!t.path().join("ran").exists());
    assert!(std::fs::read_dir(outside.path())
        .expect("ls")
        .next()
        .is_none());
}

#[tokio::test]
async fn missing_program_exits_127() {
    let (_t, home) = home();
    let out = exec(&home, req(&["rakazo-no-such-command"]), vec![]).await;
    assert_eq!(out.events.len(), 1);
    assert_eq!(
        out.exit(),
        (
            127,
            Some("command not found: rakazo-no-such-command".into())
        )
    );
}

#[tokio::test]
async fn invalid_requests_fail_before_running() {
    let (_t, home) = home();
    let mut bad_env = req(&["true"]);
    bad_env.env = vec![("A=B".into(), "x".into())];
    let mut empty_key = req(&["true"]);
    empty_key.env = vec![(String::new(), "x".into())];
    let long_arg = "x".repeat(MAX_ARG_LEN + 1);
    let big_argv: Vec<String> = vec!["y".repeat(MAX_ARG_LEN - 1); 9];
    let mut big = req(&["echo"]);
    big.argv.extend(big_argv);
    let cases = [
        req(&[]),
        req(&[""]),
        req(&["echo", &long_arg]),
        req(&["echo", "a\0b"]),
        big,
        bad_env,
        empty_key,
    ];
    for r in cases {
        let out = exec(&home, r, vec![]).await;
        assert_eq!(out.events.len(), 1, "{:?}", out.events);
        match out.last() {
            ExecEvent::Failed(e) => assert_eq!(e.code, ErrorCode::BadRequest, "{e}"),
            other => panic!("expected a failure, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn timeout_kills_the_whole_tree() {
    let (_t, home) = home();
    let secs = unique_secs();
    let mut r = escaping_tree(secs);
    r.timeout_ms = Some(300);
    let out = exec(&home, r, vec![]).await;
    assert_eq!(out.stdout_str(), "ready\n");
    assert_eq!(
        out.exit(),
        (124, Some("command timed out after 300 ms".into()))
    );
    assert_eq!(sleepers(secs), Vec::<i32>::new());
}

#[tokio::test]
async fn timeout_applies_when_a_background_process_holds_the_output() {
    let (_t, home) = home();
    let secs = unique_secs();
    let mut r = sh(&format!("sleep {secs} & echo started"));
    r.timeout_ms = Some(300);
    let out = exec(&home, r, vec![]).await;
    assert_eq!(out.stdout_str(), "started\n");
    assert_eq!(out.exit().0, 124);
    assert_eq!(sleepers(secs), Vec::<i32>::new());
}

#[tokio::test]
async fn detached_background_process_does_not_hold_the_command() {
    let (_t, home) = home();
    let secs = unique_secs();
    let out = exec(
        &home,
        sh(&format!("sleep {secs} >/dev/null 2>&1 & echo ok")),
        vec![],
    )
    .await;
    assert_eq!(out.exit(), (0, None));
    // A normal exit leaves deliberately detached processes alone; clean up here.
    let left = sleepers(secs);
    assert_eq!(left.len(), 1);
    for pid in left {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// Waits until all five sleepers of [`escaping_tree`] run, so a kill test is not vacuous.
fn await_sleepers(secs: u32) {
    for _ in 0..400 {
        if sleepers(secs).len() == 5 {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("the sleepers did not start: {:?}", sleepers(secs));
}

/// Runs the escaping tree until it prints `ready` and all its sleepers run, then calls
/// `interrupt`.
async fn interrupted(
    home: &Home,
    secs: u32,
    interrupt: impl FnOnce(&mut Option<mpsc::Sender<ExecInput>>),
) -> Outcome {
    let (in_tx, in_rx) = mpsc::channel(4);
    let (ev_tx, mut ev_rx) = mpsc::channel(64);
    let mut in_tx = Some(in_tx);
    let collect = async {
        let mut events = Vec::new();
        let mut interrupt = Some(interrupt);
        while let Some(e) = ev_rx.recv().await {
            let ready = matches!(&e, ExecEvent::Stdout(b) if b.as_slice() == b"ready\n");
            events.push(e);
            if ready {
                if let Some(f) = interrupt.take() {
                    await_sleepers(secs);
                    f(&mut in_tx);
                }
            }
        }
        events
    };
    let running = registry();
    let ((), events) = tokio::join!(
        run_with_env(
            home,
            &running,
            escaping_tree(secs),
            test_env(),
            in_rx,
            ev_tx
        ),
        collect
    );
    Outcome { events }
}

#[tokio::test]
async fn abort_kills_the_whole_tree() {
    let (_t, home) = home();
    let secs = unique_secs();
    let out = interrupted(&home, secs, |tx| {
        tx.as_ref()
            .expect("sender")
            .try_send(ExecInput::Abort)
            .expect("abort");
    })
    .await;
    assert_eq!(out.exit(), (130, Some("command aborted".into())));
    assert_eq!(sleepers(secs), Vec::<i32>::new());
}

#[tokio::test]
async fn abort_is_seen_behind_a_blocked_stdin_write() {
    let (_t, home) = home();
    let secs = unique_secs();
    let mut r = sh(&format!("exec sleep {secs}"));
    r.stdin = true;
    // The pipe takes one chunk; the second blocks; the rest wait in the read-ahead queue,
    // and the abort behind them must still be seen.
    let mut inputs: Vec<ExecInput> = (0..5)
        .map(|_| ExecInput::Stdin(ByteBuf::from(vec![b'x'; MAX_CHUNK])))
        .collect();
    inputs.push(ExecInput::Abort);
    let out = tokio::time::timeout(Duration::from_secs(20), exec(&home, r, inputs))
        .await
        .expect("abort was not seen");
    assert_eq!(out.exit(), (130, Some("command aborted".into())));
    assert_eq!(sleepers(secs), Vec::<i32>::new());
}

#[tokio::test]
async fn closed_input_aborts() {
    let (_t, home) = home();
    let secs = unique_secs();
    let out = interrupted(&home, secs, |tx| drop(tx.take())).await;
    assert_eq!(out.exit(), (130, Some("command aborted".into())));
    assert_eq!(sleepers(secs), Vec::<i32>::new());
}

#[tokio::test]
async fn dropped_event_receiver_aborts() {
    let (_t, home) = home();
    let secs = unique_secs();
    let (_in_tx, in_rx) = mpsc::channel(4);
    let (ev_tx, mut ev_rx) = mpsc::channel(64);
    let watch = async move {
        while let Some(e) = ev_rx.recv().await {
            if matches!(&e, ExecEvent::Stdout(b) if b.as_slice() == b"ready\n") {
                await_sleepers(secs);
                return; // drops the receiver
            }
        }
    };
    let running = registry();
    tokio::join!(
        run_with_env(
            &home,
            &running,
            escaping_tree(secs),
            test_env(),
            in_rx,
            ev_tx
        ),
        watch
    );
    // run returned although the command would sleep for days: it was aborted, and the tree
    // kill waited for its processes to be gone.
    assert_eq!(sleepers(secs), Vec::<i32>::new());
}

#[tokio::test]
async fn dropping_the_future_kills_the_tree() {
    let (_t, home) = home();
    let secs = unique_secs();
    let (_in_tx, in_rx) = mpsc::channel(4);
    let (ev_tx, mut ev_rx) = mpsc::channel(64);
    // Boxed rather than pinned on the stack, so that `drop` below really drops it.
    let registry = Default::default();
    let mut running = Box::pin(run_with_env(
        &home,
        &registry,
        escaping_tree(secs),
        test_env(),
        in_rx,
        ev_tx,
    ));
    loop {
        tokio::select! {
            () = &mut running => panic!("the command ended on its own"),
            Some(e) = ev_rx.recv() => {
                if matches!(&e, ExecEvent::Stdout(b) if b.as_slice() == b"ready\n") {
                    await_sleepers(secs);
                    break;
                }
            }
        }
    }
    drop(running);
    let mut left = sleepers(secs);
    for _ in 0..200 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
        left = sleepers(secs);
    }
    assert_eq!(left, Vec::<i32>::new());
}

#[test]
fn parses_proc_stat_with_odd_names() {
    let s = "1234 (a) b (c) S 1 1234 1234 0 -1 4194560";
    assert_eq!(
        parse_stat(s),
        Some(ProcStat {
            pid: 1234,
            state: 'S',
            ppid: 1,
            pgrp: 1234
        })
    );
    assert_eq!(parse_stat("garbage"), None);
    assert_eq!(parse_stat("12 (x) S"), None);
}

/// Runs `req` registering its exec id in `running`.
async fn exec_in(home: &Home, running: &Arc<Running>, req: ExecRequest) -> Outcome {
    let (_in_tx, in_rx) = mpsc::channel(1);
    let (ev_tx, mut ev_rx) = mpsc::channel(64);
    let collect = async {
        let mut events = Vec::new();
        while let Some(e) = ev_rx.recv().await {
            events.push(e);
        }
        events
    };
    let ((), events) = tokio::join!(
        run_with_env(home, running, req, test_env(), in_rx, ev_tx),
        collect
    );
    Outcome { events }
}

/// The guest's activity report: a running command counts as a command while it runs; what a
/// finished command left running (`nohup … &`) counts as background until it ends; the
/// markers of another home's commands are not this home's.
#[tokio::test]
async fn activity_counts_running_commands_and_what_finished_ones_left() {
    use crate::activity::{Activity, LastOutput};
    let (_t, home) = home();
    let activity = Arc::new(Activity::new(home.root(), LastOutput::default()));
    let secs = unique_secs();
    let out = exec_in(
        &home,
        &activity.running,
        sh(&format!("nohup sleep {secs} >/dev/null 2>&1 & echo $!")),
    )
    .await;
    assert_eq!(out.exit().0, 0);
    let pid: i32 = out.stdout_str().trim().parse().expect("pid");
    let look = {
        let a = activity.clone();
        move || {
            let a = a.clone();
            async move { tokio::task::spawn_blocking(move || a.look()).await.unwrap() }
        }
    };
    let seen = look().await;
    assert_eq!((seen.commands, seen.background), (0, 1), "{seen:?}");
    // Another computer's guest (another home) does not count this one's work.
    let (_t2, other) = self::home();
    let stranger = Activity::new(other.root(), LastOutput::default());
    let theirs = tokio::task::spawn_blocking(move || stranger.look())
        .await
        .unwrap();
    assert_eq!(theirs.background, 0, "{theirs:?}");

    // A command running now is a command, not background.
    let running = activity.running.clone();
    let home2 = Home::new(home.root()).expect("home");
    let busy =
        tokio::spawn(async move { exec_in(&home2, &running, sh("sleep 3; echo done")).await });
    let mut seen = look().await;
    for _ in 0..100 {
        if seen.commands == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        seen = look().await;
    }
    assert_eq!((seen.commands, seen.background), (1, 1), "{seen:?}");

    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    assert_eq!(busy.await.unwrap().stdout_str(), "done\n");
    let mut seen = look().await;
    for _ in 0..100 {
        if seen.background == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        seen = look().await;
    }
    assert_eq!((seen.commands, seen.background), (0, 0), "{seen:?}");
}

#[tokio::test]
async fn a_program_found_in_path_keeps_its_name_as_argv0() {
    let (_t, home) = home();
    // Started by the path found in PATH (/usr/bin/sh or /bin/sh), yet $0 is what was asked.
    let out = exec(&home, sh("echo $0"), vec![]).await;
    assert_eq!(out.exit(), (0, None));
    assert_eq!(out.stdout_str(), "sh\n");
}

#[test]
fn programs_are_found_in_path_as_execvp_finds_them() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().expect("tempdir");
    let (a, b) = (t.path().join("a"), t.path().join("b"));
    for d in [&a, &b] {
        std::fs::create_dir(d).expect("mkdir");
    }
    let write = |path: &Path, mode: u32| {
        std::fs::write(path, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    // In `a` not executable, and a directory of the same name; in `b` the real one.
    write(&a.join("tool"), 0o644);
    std::fs::create_dir(a.join("dir-tool")).expect("mkdir");
    write(&b.join("tool"), 0o755);
    write(&b.join("dir-tool"), 0o755);
    let path = std::env::join_paths([&a, &b]).expect("join");
    assert_eq!(
        resolve_program("tool", Some(&path)),
        Some(b.join("tool")),
        "the first executable regular file wins"
    );
    assert_eq!(
        resolve_program("dir-tool", Some(&path)),
        Some(b.join("dir-tool"))
    );
    assert_eq!(resolve_program("missing", Some(&path)), None);
    // No search where execvp would do something we cannot know here, or nothing at all.
    assert_eq!(resolve_program("./tool", Some(&path)), None);
    assert_eq!(resolve_program("tool", None), None);
    let relative = std::env::join_paths([Path::new("rel"), b.as_path()]).expect("join");
    assert_eq!(resolve_program("tool", Some(&relative)), None);
}
