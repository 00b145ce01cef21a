//! Lease fences on the tunnel: stale fences refused, higher ones adopted, released leases
//! refused; and garbage on an operation stream resetting only that stream.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_fence_is_refused_by_the_guest_and_nothing_runs() -> Result<()> {
    let h = Harness::start().await?;
    let mut s = h.accept().await?;
    s.control.push_lease("b1", Some("run-b:2")).await?;

    let events = s
        .exec(&["touch", "stale-marker"], Some(("b1", "run-a:1")))
        .await?;
    assert_stale(&events);
    assert!(
        !h.home.join("stale-marker").exists(),
        "a command with a stale lease ran"
    );

    let events = s
        .exec(&["touch", "fresh-marker"], Some(("b1", "run-b:2")))
        .await?;
    assert_ran(&events);
    assert!(h.home.join("fresh-marker").exists());

    // Reads are fenced too: a stale lease gets an error, the current one gets the file.
    std::fs::write(h.home.join("note.txt"), b"fenced")?;
    let read = |lease: &str| {
        Ok::<_, anyhow::Error>(Request::ReadFile(ReadFile {
            path: "note.txt".into(),
            max_bytes: 1024,
            lease: bot_lease(Some(("b1", lease)))?,
        }))
    };
    let end = s.request(&read("run-a:1")?).await?;
    let replies: Vec<Reply> = frames(&end.bytes)?;
    assert!(
        matches!(
            replies.as_slice(),
            [Reply::Error(OpError {
                code: ErrorCode::StaleLease,
                ..
            })]
        ),
        "{replies:?}"
    );
    let end = s.request(&read("run-b:2")?).await?;
    let mut decoder = FrameDecoder::new();
    decoder.push(&end.bytes);
    assert_eq!(
        decoder.next_message::<Reply>()?,
        Some(Reply::ReadStart { size: 6 })
    );
    assert_eq!(decoder.into_remainder(), b"fenced");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_fence_presented_with_a_command_is_adopted() -> Result<()> {
    let h = Harness::start().await?;
    let s = h.accept().await?;
    // No push at all: the guest learns fences from the commands themselves.
    assert_ran(&s.exec(&["touch", "a1"], Some(("b1", "run-a:1"))).await?);
    assert_ran(&s.exec(&["touch", "b2"], Some(("b1", "run-b:2"))).await?);
    assert_stale(
        &s.exec(&["touch", "a1-again"], Some(("b1", "run-a:1")))
            .await?,
    );
    assert!(h.home.join("a1").exists() && h.home.join("b2").exists());
    assert!(!h.home.join("a1-again").exists());
    // Other bots are unaffected, and so are commands that act for no bot.
    assert_ran(&s.exec(&["true"], Some(("b2", "run-a:1"))).await?);
    assert_ran(&s.exec(&["true"], None).await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_lease_is_refused() -> Result<()> {
    let h = Harness::start().await?;
    let mut s = h.accept().await?;
    s.control.push_lease("b1", Some("run-a:1")).await?;
    assert_ran(&s.exec(&["true"], Some(("b1", "run-a:1"))).await?);
    s.control.push_lease("b1", None).await?;
    assert_stale(
        &s.exec(&["touch", "after-release"], Some(("b1", "run-a:1")))
            .await?,
    );
    assert!(!h.home.join("after-release").exists());
    // The next grant (a higher fence) works.
    s.control.push_lease("b1", Some("run-b:2")).await?;
    assert_ran(&s.exec(&["true"], Some(("b1", "run-b:2"))).await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_an_operation_stream_resets_only_that_stream() -> Result<()> {
    let h = Harness::start().await?;
    let mut s = h.accept().await?;

    // A whole frame whose payload is garbage: variant index 0x7f does not exist, then noise.
    let mut bad_payload = vec![0x7f];
    bad_payload.extend_from_slice(&rand::random::<[u8; 63]>());
    let mut garbage = (bad_payload.len() as u32).to_be_bytes().to_vec();
    garbage.extend_from_slice(&bad_payload);
    // A length prefix far over the frame limit.
    let oversized = 0xFFFF_FFFFu32.to_be_bytes().to_vec();

    for (what, bytes) in [
        ("garbage payload", garbage),
        ("oversized prefix", oversized),
    ] {
        let (mut send, mut recv) = within("an operation stream", s.conn.open_bi()).await??;
        // The guest may stop our side before we finish writing; that is part of the refusal.
        match send.write_all(&bytes).await {
            Ok(()) => {
                let _ = send.finish();
            }
            Err(quinn::WriteError::Stopped(code)) => assert_eq!(code.into_inner(), 3, "{what}"),
            Err(e) => bail!("{what}: writing failed: {e}"),
        }
        let end = read_to_end(&mut recv).await?;
        // The guest answers BadRequest and resets; the reset may overtake the answer.
        let replies: Vec<Reply> = if end.reset.is_some() {
            let mut d = FrameDecoder::new();
            d.push(&end.bytes);
            d.next_message()?.into_iter().collect()
        } else {
            frames(&end.bytes)?
        };
        assert!(
            end.reset.is_some() || !replies.is_empty(),
            "{what}: the guest neither answered nor reset"
        );
        if let Some(code) = end.reset {
            assert_eq!(code, 3, "{what}: reset code");
        }
        for reply in &replies {
            assert!(
                matches!(
                    reply,
                    Reply::Error(OpError {
                        code: ErrorCode::BadRequest,
                        ..
                    })
                ),
                "{what}: {reply:?}"
            );
        }
    }

    // The connection and the control stream are untouched; new streams are served.
    assert!(s.conn.close_reason().is_none());
    s.ping().await?;
    s.control.sync().await?;
    assert_ran(&s.exec(&["true"], None).await?);
    Ok(())
}
