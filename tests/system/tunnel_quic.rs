//! The tunnel's QUIC settings on both ends (`carrier::quic`): the control plane's real listener
//! (`control_plane::tunnel::bind` with its server configuration) and the guest's real endpoint
//! and client configuration, on loopback.
//!
//! Both ends must raise the packet size: each announces the largest datagram it accepts and
//! searches the path with its own probes, and each needs the socket that cuts GSO batches the
//! kernel would refuse. A side left on quinn's defaults stays at 1452-byte packets (or falls
//! back to 1200 after every large batch is lost), which this test sees.

use anyhow::{ensure, Context, Result};
use std::time::Duration;

/// Bulk data moves in packets far larger than quinn's default 1452 bytes once discovery ran.
const LARGE_MTU: u16 = 16 * 1024;
/// The most data echoed while waiting for both ends' path MTU discovery.
const MAX_ROUNDS: usize = 64;
const ROUND: usize = 1 << 20;
const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_ends_send_large_packets_on_loopback() -> Result<()> {
    let tunnel = tests::tunnel::Tunnel::bind()?;
    let server = tunnel.quic().clone();
    let accept = tokio::spawn(async move {
        let incoming = server.accept().await.context("endpoint closed")?;
        Ok::<_, anyhow::Error>(incoming.await?)
    });
    let guest_endpoint = guest_agent::tunnel::udp_endpoint("127.0.0.1:0".parse()?, tunnel.pin)?;
    let guest = tokio::time::timeout(
        WAIT,
        guest_endpoint.connect(tunnel.listening.local_addr()?, "rakazo-control-plane")?,
    )
    .await??;
    let control = accept.await??;

    // The guest echoes every stream; the control plane sends a round at a time, so both ends
    // send bulk data (each end discovers the path MTU of its own direction).
    let echo = guest.clone();
    tokio::spawn(async move {
        while let Ok((mut send, mut recv)) = echo.accept_bi().await {
            tokio::spawn(async move {
                if let Ok(data) = recv.read_to_end(ROUND).await {
                    let _ = send.write_all(&data).await;
                    let _ = send.finish();
                }
            });
        }
    });
    let data: Vec<u8> = (0..ROUND).map(|i| (i % 251) as u8).collect();
    let mut rounds = 0;
    loop {
        let (mut send, mut recv) = control.open_bi().await?;
        send.write_all(&data).await?;
        send.finish()?;
        let back = tokio::time::timeout(WAIT, recv.read_to_end(ROUND)).await??;
        ensure!(back == data, "round {rounds} came back different");
        rounds += 1;
        let (to_guest, to_control) = (
            control.stats().path.current_mtu,
            guest.stats().path.current_mtu,
        );
        if to_guest >= LARGE_MTU && to_control >= LARGE_MTU {
            break;
        }
        ensure!(
            rounds < MAX_ROUNDS,
            "after {rounds} MiB each way the packets are still small: control plane → guest \
             {to_guest} bytes, guest → control plane {to_control} bytes"
        );
    }
    guest.close(0u32.into(), b"done");
    guest_endpoint.wait_idle().await;
    Ok(())
}
