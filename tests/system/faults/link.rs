//! The guest↔control-plane link through an impaired path (issue 36, docs/faults.md#the-link).
//!
//! Each computer is contained (`--local-containment full`), so its guest reaches the tunnel only
//! through its veth; the control plane advertises the relays of a [`Link`] (tests/src/impair.rs)
//! as its tunnel, which add 50 ms each way and drop 1% of UDP datagrams (seeded), and a `tbf` on
//! both ends of the veth holds it to 20 Mbit/s. Each test checks that the path really was
//! impaired (datagrams dropped, bytes through the `tbf`, the transport the guest used), so none
//! can pass over a clean loopback by mistake.

use anyhow::{anyhow, bail, ensure, Context, Result};
use base64::Engine;
use control_plane::client::{full_body, q, Client, ClientError};
use futures_util::SinkExt;
use gateway_proto::termframe::encode_input;
use http_body_util::BodyExt;
use hyper::Method;
use std::time::Duration;
use tests::bot::Bot;
use tests::impair::{self, Impairment, Link};
use tests::live::{connect, read_until, wait_closed, Rfb, WsBytes};
use tests::{wait_for, World, WorldOptions};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

/// The seed of every link's loss here: the same datagrams are dropped in every run.
const SEED: u64 = 36;
/// The cut: longer than the tunnel's 6 s idle timeout and the control plane's 10 s grace
/// before it records a lost guest.
const CUT: Duration = Duration::from_secs(30);
/// The longest any one step here may take on the degraded path.
const STEP: Duration = Duration::from_secs(90);

/// A world whose one computer's guest runs over `link`, shaped as `impairment` says.
async fn impaired(link: &Link, workspace: &str, impairment: Impairment) -> Result<(World, String)> {
    let mut w = impair::world(link, WorldOptions::default()).await?;
    let c = w.create_computer(workspace).await?;
    impair::apply(link, &c, impairment)?;
    Ok((w, c))
}

/// Waits until `computer`'s guests connected `n` times; returns their transports.
async fn connections(w: &World, c: &str, n: usize) -> Result<Vec<String>> {
    wait_for(STEP, &format!("{n} connections of {c}"), || {
        let t = w.transports(c);
        (t.len() >= n).then_some(t)
    })
    .await
}

/// The loss really happened, and the traffic really crossed the shaped veth.
fn path_was_impaired(link: &Link, c: &str, at_least: u64) -> Result<()> {
    let (forwarded, dropped) = link.datagrams();
    ensure!(
        forwarded > 100 && dropped > 0,
        "the relay forwarded {forwarded} and dropped {dropped} datagrams"
    );
    let shaped = impair::shaped_bytes(c)?;
    ensure!(
        shaped >= at_least,
        "only {shaped} bytes crossed the tbf toward the guest"
    );
    Ok(())
}

/// Opens `cap` as an RFB viewer and waits for a whole frame with pixels in it.
async fn viewer_frame(w: &World, cap: &str) -> Result<Rfb<WsBytes>> {
    let mut rfb = Rfb::handshake(WsBytes::new(connect(&w.http, cap).await?)).await?;
    rfb.request_update(false).await?;
    let rects = rfb
        .read_update_until(tokio::time::Instant::now() + STEP)
        .await?
        .ok_or_else(|| anyhow!("no frame within {STEP:?}"))?;
    ensure!(rects > 0 && rfb.pixel_bytes > 0, "an empty frame");
    Ok(rfb)
}

/// A terminal on `bot`'s desktop answers a command (the user took control first).
async fn terminal_answers(w: &mut World, c: &str, bot: &str) -> Result<()> {
    let path = w.terminal_url(c, bot).await?;
    let mut ws = connect(&w.http, &path).await?;
    ws.send(Message::Binary(
        encode_input(b"echo TERM-$((6*7))-OK\r").into(),
    ))
    .await?;
    let mut out = Vec::new();
    read_until(&mut ws, &mut out, "TERM-42-OK", STEP).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_degraded_path_every_capability_keeps_working() -> Result<()> {
    let link = Link::start(Impairment::DEGRADED, SEED).await?;
    let (mut w, c) = impaired(&link, "ws-degraded", Impairment::DEGRADED).await?;

    let out = w
        .exec(&c, serde_json::json!({ "argv": ["echo", "over-the-path"] }))
        .await?;
    assert_eq!(out.stdout, b"over-the-path\n", "{:?}", out.events);

    // A few MB each way.
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    w.put_file(&c, "big.bin", data.clone(), false).await?;
    ensure!(
        w.get_file(&c, "big.bin").await? == data,
        "the file came back different"
    );

    // Observe and act on a desktop.
    let bot = Bot::new(&w, &c, "bot-d").await?;
    bot.ensure().await?;
    let seen = bot.observe().await?;
    let png = base64::engine::general_purpose::STANDARD
        .decode(seen["image"].as_str().ok_or_else(|| anyhow!("no image"))?)?;
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let acted = bot
        .act(serde_json::json!([
            { "type": "move", "x": 200, "y": 150 },
            { "type": "wait", "ms": 10 },
        ]))
        .await?;
    assert_eq!(acted["completed"], 2, "{acted}");
    let after = bot.observe().await?;
    assert_eq!(
        (after["cursor"]["x"].as_i64(), after["cursor"]["y"].as_i64()),
        (Some(200), Some(150)),
        "{}",
        after["cursor"]
    );

    // The live view: a websocket viewer gets a whole frame.
    let view = bot.url("view").await?;
    drop(viewer_frame(&w, &view).await?);

    // The terminal: the run ends, the user takes control, a shell answers.
    bot.end_run().await?;
    w.post(&bot.path("takeover"), serde_json::json!({})).await?;
    terminal_answers(&mut w, &c, "bot-d").await?;

    assert_eq!(connections(&w, &c, 1).await?, ["quic"]);
    path_was_impaired(&link, &c, data.len() as u64)?;
    w.add_secret(view.trim_start_matches("/cap/"));
    w.check_log()
}

/// The NDJSON events of an exec as they arrive; the channel closes when the body ends (or
/// fails: its error is the last item).
fn exec_events(
    client: &Client,
    c: &str,
    spec: serde_json::Value,
) -> mpsc::Receiver<Result<serde_json::Value>> {
    let (tx, rx) = mpsc::channel(64);
    let (client, path) = (client.clone(), format!("/v1/computers/{}/exec", q(c)));
    tokio::spawn(async move {
        let body = serde_json::to_vec(&spec).unwrap_or_default();
        let resp = match client
            .send(
                Method::POST,
                &path,
                Some("application/json"),
                None,
                full_body(body),
            )
            .await
        {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(Err(e.into())).await;
                return;
            }
        };
        let mut body = resp.into_body();
        let mut buf = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = match frame {
                Ok(f) => f.into_data().unwrap_or_default(),
                Err(e) => {
                    let _ = tx.send(Err(anyhow!("the body failed: {e}"))).await;
                    return;
                }
            };
            buf.extend_from_slice(&data);
            while let Some(end) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=end).collect();
                let v = serde_json::from_slice(&line).map_err(anyhow::Error::from);
                if tx.send(v).await.is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// The next event of an exec, within `within`.
async fn next_event(
    rx: &mut mpsc::Receiver<Result<serde_json::Value>>,
    within: Duration,
) -> Result<serde_json::Value> {
    tokio::time::timeout(within, rx.recv())
        .await
        .with_context(|| format!("no exec event within {within:?}"))?
        .ok_or_else(|| anyhow!("the exec ended without another event"))?
}

fn api_code(e: &ClientError) -> Option<(u16, String)> {
    match e {
        ClientError::Api { status, code, .. } => Some((status.as_u16(), code.clone())),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_30_second_cut_the_guest_comes_back_and_nothing_runs_twice() -> Result<()> {
    let link = Link::start(Impairment::DEGRADED, SEED).await?;
    let (mut w, c) = impaired(&link, "ws-cut", Impairment::DEGRADED).await?;
    // A stale lease (released, then the bot leased again: a higher fence), and the live one.
    let stale = w.lease(&c, "bot-c", "run-1").await?;
    w.post(
        &format!("/v1/computers/{c}/leases/bot-c/release"),
        serde_json::json!({ "lease": stale }),
    )
    .await?;
    let bot = Bot::new(&w, &c, "bot-c").await?;
    bot.ensure().await?;
    let view = bot.url("view").await?;
    let mut viewer = viewer_frame(&w, &view).await?;

    // An exec in flight under the bot's lease: it appends one line, says so, then waits.
    let mut inflight = exec_events(
        &w.client,
        &c,
        serde_json::json!({
            "argv": ["sh", "-c", "echo run >> ran.txt; echo appended; sleep 20"],
            "bot": "bot-c",
            "lease": bot.lease,
        }),
    );
    loop {
        let ev = next_event(&mut inflight, STEP).await?;
        if ev["type"] == "stdout" {
            break;
        }
        ensure!(ev["type"] == "started", "before its output: {ev}");
    }

    link.cut(true);
    let cut_at = tokio::time::Instant::now();
    // The command's stream fails with an error that says the outcome is uncertain: no hang.
    let failed = next_event(&mut inflight, STEP).await?;
    eprintln!("the exec in flight during the cut: {failed}");
    assert_eq!(failed["type"], "error", "{failed}");
    assert_eq!(failed["uncertain"], true, "{failed}");
    ensure!(
        failed["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{failed}"
    );
    // The open viewer ends too.
    wait_closed(&mut viewer.io.ws, STEP).await?;
    // A new operation during the cut fails within its deadline with a clear error.
    let during = w
        .exec(&c, serde_json::json!({ "argv": ["true"] }))
        .await
        .expect_err("an exec while the link is cut");
    eprintln!("an exec during the cut: {during}");
    assert_eq!(
        api_code(&during),
        Some((503, "computer_unavailable".into())),
        "{during}"
    );

    tokio::time::sleep_until(cut_at + CUT).await;
    link.cut(false);

    // The guest dials again by itself (over whichever transport answers first: a TCP dial
    // held by the cut may complete when it ends); the same lease works, and the command ran
    // once.
    let again = connections(&w, &c, 2).await?;
    assert_eq!(again.len(), 2, "{again:?}");
    let out = w
        .exec(
            &c,
            serde_json::json!({
                "argv": ["cat", "ran.txt"], "bot": "bot-c", "lease": bot.lease,
            }),
        )
        .await?;
    assert_eq!(out.code, Some(0), "{:?}", out.events);
    assert_eq!(out.stdout, b"run\n", "the command ran more than once");
    bot.observe().await?;
    let refused = w
        .exec(
            &c,
            serde_json::json!({ "argv": ["true"], "bot": "bot-c", "lease": stale }),
        )
        .await
        .expect_err("a stale lease after the cut");
    assert_eq!(
        api_code(&refused).map(|(_, code)| code),
        Some("stale_lease".into()),
        "{refused}"
    );
    // The live view opens again and shows frames.
    drop(viewer_frame(&w, &view).await?);
    let shown = w.show(&c).await?;
    assert_eq!(
        (&shown["state"], &shown["connected"]),
        (&"running".into(), &true.into()),
        "{shown}"
    );
    // The cut outlasted the grace before a lost guest is recorded: the feed says so (the
    // machine still runs, the guest may come back by itself), and nothing was stopped.
    let lost: Vec<_> = w
        .lifecycle(&c)
        .await?
        .into_iter()
        .filter(|e| e["event"] == "crashed")
        .collect();
    ensure!(
        lost.len() == 1
            && lost[0]["cause"] == "guest_lost"
            && lost[0]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("dials in again by itself")),
        "{lost:#?}"
    );
    w.add_secret(view.trim_start_matches("/cap/"));
    w.check_log()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_udp_is_blocked_mid_session_the_tcp_carrier_takes_over() -> Result<()> {
    let link = Link::start(Impairment::DEGRADED, SEED).await?;
    let (mut w, c) = impaired(&link, "ws-udp-blocked", Impairment::DEGRADED).await?;
    w.sh(&c, "echo before > before.txt").await?;
    assert_eq!(connections(&w, &c, 1).await?, ["quic"]);
    let guest = tests::guest_pid_of(&c).context("no guest process")?;
    let server = w.server_pid();

    link.block_udp(true);
    // The guest notices within its idle timeout and dials again: UDP gets no answer, TCP does.
    let both = connections(&w, &c, 2).await?;
    assert_eq!(both, ["quic", "tcp"]);
    let out = wait_until_exec_works(&w, &c).await?;
    assert_eq!(out, "before\n");
    let data: Vec<u8> = (0..2u32 << 20).map(|i| (i % 241) as u8).collect();
    w.put_file(&c, "after.bin", data.clone(), false).await?;
    ensure!(
        w.get_file(&c, "after.bin").await? == data,
        "the file came back different"
    );
    // Nothing was restarted: the same guest and the same server.
    assert_eq!(tests::guest_pid_of(&c), Some(guest));
    assert_eq!(w.server_pid(), server);
    w.check_log()
}

/// Runs `cat before.txt` until it succeeds (the guest may still be dialling), within [`STEP`].
async fn wait_until_exec_works(w: &World, c: &str) -> Result<String> {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        match w
            .exec(c, serde_json::json!({ "argv": ["cat", "before.txt"] }))
            .await
        {
            Ok(out) if out.code == Some(0) => {
                return Ok(String::from_utf8_lossy(&out.stdout).into_owned())
            }
            Ok(out) => eprintln!("exec while the guest redials: {:?}", out.events),
            Err(e) => eprintln!("exec while the guest redials: {e}"),
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("no exec succeeded within {STEP:?} of UDP being blocked");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
