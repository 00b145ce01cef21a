//! How the guest connects: reconnecting after a drop, refusing a wrong certificate, falling back
//! to TCP and to the websocket, and moving to another replica.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guest_reconnects_after_the_connection_drops() -> Result<()> {
    let h = Harness::start().await?;
    let mut s = h.accept().await?;
    s.ping().await?;
    s.control.push_lease("b1", Some("run-b:2")).await?;
    s.conn.close(0u32.into(), b"control plane going away");

    // The guest redials (with backoff) and says hello again on a fresh connection.
    let s2 = h.accept().await?;
    assert_ne!(s2.conn.stable_id(), s.conn.stable_id());
    s2.ping().await?;
    // Its fence table outlives the connection.
    assert_stale(
        &s2.exec(&["touch", "stale"], Some(("b1", "run-a:1")))
            .await?,
    );
    assert_ran(&s2.exec(&["true"], Some(("b1", "run-b:2"))).await?);
    assert!(!h.guest.is_finished(), "the guest's tunnel loop ended");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_certificate_is_refused_by_the_guest() -> Result<()> {
    let h = Harness::start_pinning(Some("ab".repeat(32))).await?;
    let mut failed = 0u32;
    let established = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            let Some(incoming) = h.endpoint.accept().await else {
                return Err(anyhow!("server endpoint closed"));
            };
            match incoming.await {
                Ok(conn) => return Ok(conn),
                Err(_) => failed += 1,
            }
        }
    })
    .await;
    match established {
        Err(_elapsed) => {}
        Ok(Ok(conn)) => bail!(
            "a connection to an unpinned certificate was established ({:?})",
            conn.remote_address()
        ),
        Ok(Err(e)) => return Err(e).context("accepting connections"),
    }
    // The guest did try (and keeps trying with backoff); every attempt failed the TLS handshake.
    assert!(failed >= 1, "the guest never dialed");
    assert!(!h.guest.is_finished(), "the guest's tunnel loop ended");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_whose_udp_gets_no_answer_runs_the_tunnel_over_tcp() -> Result<()> {
    let h = Harness::start_over_tcp().await?;
    let carrier = h.carrier.as_ref().context("tcp harness")?;
    // The QUIC handshake waits for the UDP attempt to time out, then goes over TCP.
    let s = h.accept().await?;
    let peer = carrier.tcp_peer(&s.conn.remote_address());
    assert!(
        peer.is_some_and(|p| p.ip().is_loopback()),
        "the connection is not the carrier's: {peer:?}"
    );
    assert!(h.udp_datagrams()? > 0, "the guest never tried UDP first");

    // Everything above the transport is unchanged: exec, streamed file bytes, fences.
    s.ping().await?;
    let events = s.exec(&["sh", "-c", "echo over-tcp"], None).await?;
    assert_ran(&events);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ExecEvent::Stdout(b) if b.as_slice() == b"over-tcp\n")),
        "{events:?}"
    );
    let big: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(h.home.join("big.bin"), &big)?;
    let end = s
        .request(&Request::ReadFile(ReadFile {
            path: "big.bin".into(),
            max_bytes: 8 << 20,
            lease: None,
        }))
        .await?;
    let mut decoder = FrameDecoder::new();
    decoder.push(&end.bytes);
    assert_eq!(
        decoder.next_message::<Reply>()?,
        Some(Reply::ReadStart {
            size: big.len() as u64
        })
    );
    assert!(
        decoder.into_remainder() == big,
        "the file came back different"
    );

    // After a disconnect the guest redials what worked, TCP, without waiting on UDP again.
    let mut s = s;
    s.control.push_lease("b1", Some("run-b:2")).await?;
    s.conn.close(0u32.into(), b"control plane going away");
    let s2 = h.accept().await?;
    assert!(carrier.tcp_peer(&s2.conn.remote_address()).is_some());
    assert_eq!(
        h.udp_datagrams()?,
        0,
        "the guest tried UDP before TCP again"
    );
    assert_stale(
        &s2.exec(&["touch", "stale"], Some(("b1", "run-a:1")))
            .await?,
    );
    assert_ran(&s2.exec(&["true"], Some(("b1", "run-b:2"))).await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_that_reaches_neither_udp_nor_tcp_runs_the_tunnel_over_the_websocket() -> Result<()>
{
    let h = Harness::start_over_ws().await?;
    let carrier = h.carrier.as_ref().context("ws harness")?;
    // UDP times out, TCP is refused, the websocket carries the QUIC connection.
    let s = h.accept().await?;
    assert!(
        carrier.is_websocket(&s.conn.remote_address()),
        "the connection is not the websocket carrier's"
    );
    assert!(h.udp_datagrams()? > 0, "the guest never tried UDP first");
    s.ping().await?;
    let events = s.exec(&["sh", "-c", "echo over-ws"], None).await?;
    assert_ran(&events);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ExecEvent::Stdout(b) if b.as_slice() == b"over-ws\n")),
        "{events:?}"
    );
    // After a disconnect the guest redials the websocket first.
    s.conn.close(0u32.into(), b"control plane going away");
    let s2 = h.accept().await?;
    assert!(carrier.is_websocket(&s2.conn.remote_address()));
    assert_eq!(
        h.udp_datagrams()?,
        0,
        "the guest tried UDP before the websocket again"
    );
    assert_ran(&s2.exec(&["true"], None).await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_whose_control_plane_is_gone_connects_to_another_replica() -> Result<()> {
    let h = Harness::start_with(None, Over::DeadPrimary, 0).await?;
    // UDP to the primary gets no answer, its TCP is refused; the same dial goes on to the replica
    // named in RAKAZO_CONTROL_ADDRS.
    let mut s = h.accept().await?;
    assert!(
        h.udp_datagrams()? > 0,
        "the guest never tried its primary first"
    );
    s.ping().await?;
    s.control.push_lease("b1", Some("run-b:2")).await?;
    assert_ran(&s.exec(&["true"], Some(("b1", "run-b:2"))).await?);

    // Its session ends: the next dial starts with the next target (the dead primary) and comes
    // back to the live replica.
    s.conn.close(0u32.into(), b"control plane going away");
    let s2 = h.accept().await?;
    assert!(
        h.udp_datagrams()? > 0,
        "the guest did not try its primary again"
    );
    assert_stale(
        &s2.exec(&["touch", "stale"], Some(("b1", "run-a:1")))
            .await?,
    );
    assert!(!h.guest.is_finished(), "the guest's tunnel loop ended");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_replica_sends_the_guest_to_the_next_one_at_once() -> Result<()> {
    let h = Harness::start_with(None, Over::Udp, 1).await?;
    let (a, b) = (&h.endpoint, &h.replicas[0]);
    // Every session that ends doubles the backoff: after six it is at its maximum (10 s), so a
    // redial that waited for it would come after 5 s at least. Each ended session sends the
    // guest to its next target: A, B, A, ...
    for i in 0..6 {
        let s = h.accept_on([a, b][i % 2]).await?;
        s.conn.close(0u32.into(), b"control plane going away");
    }
    let mut s = h.accept_on(a).await?;
    s.control.push_lease("b1", Some("run-b:2")).await?;
    s.conn.close(
        guest_agent::tunnel::CLOSE_DRAINING.into(),
        b"this replica is draining",
    );
    let closed = tokio::time::Instant::now();
    let s2 = h.accept_on(b).await?;
    let took = closed.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "the guest redialled {took:?} after the drain, as after a backoff"
    );
    s2.ping().await?;
    // Its fence table outlives the move.
    assert_stale(
        &s2.exec(&["touch", "stale"], Some(("b1", "run-a:1")))
            .await?,
    );
    assert_ran(&s2.exec(&["true"], Some(("b1", "run-b:2"))).await?);
    Ok(())
}
