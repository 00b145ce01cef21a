//! The tunnel's QUIC settings, written once for both ends: the control plane (the server) and the
//! guest (the client) build their transport, endpoint and UDP socket here, so the two cannot
//! drift apart, and `bench_foundation` measures its bare-QUIC anchor with exactly these.
//!
//! What differs from quinn's defaults, and why (measured in BENCHMARKS.md, "Performance (issue
//! 17)"):
//!
//! - **Packets as large as the path carries.** quinn searches the path MTU only up to 1452 bytes
//!   by default, and accepts no larger datagram ([`MAX_UDP_PAYLOAD`]). Every packet costs the same
//!   sealing, header protection, acknowledgement and bookkeeping whatever its size, so on loopback
//!   (the local provider, a guest on the control plane's host) 64 KiB packets move a stream for
//!   about 40 % of the CPU that 1452-byte ones take. Path MTU discovery finds what a path carries:
//!   probes too large for it are lost (or refused by the kernel at once, `IP_PMTUDISC_PROBE`) and
//!   never hold data, so an ordinary 1500-byte path ends where it did before, a little later.
//! - **GSO batches the kernel accepts.** quinn hands over up to ten packets per send as one GSO
//!   batch; past 1452-byte packets that is more than the 64 KiB a UDP send takes, and the kernel
//!   refuses it (`EMSGSIZE`, which quinn drops silently: every batch would be lost). [`UdpSocket`]
//!   sends such a batch in pieces of at most [`MAX_GSO_BYTES`].
//! - **Socket buffers** of [`SOCKET_BUFFER`] each way (the kernel caps them at
//!   `net.core.{r,w}mem_max`): at the kernel's default (208 KiB) three 64 KiB packets fill a
//!   receive buffer, and a full buffer is loss to QUIC.
//! - **Flow-control windows** of 16 MiB per stream and 64 MiB per connection, each way: enough
//!   for one bulk stream on a fast link with real latency (quinn's 1.25 MB per stream assumes
//!   100 Mbit/s at 100 ms).
//!
//! The TCP and websocket carriers take the same transport with their own packet size on top
//! ([`crate::tune_transport`], [`crate::tune_endpoint`]).

use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// The largest UDP payload either end accepts and probes for: quinn's (and IPv6's) maximum. An
/// IPv4 path tops out at 65,507; discovery finds that.
pub const MAX_UDP_PAYLOAD: u16 = 65_527;
/// The most bytes one UDP send carries (a GSO batch included): 65,535 less the IPv6 and UDP
/// headers, which also fits IPv4.
pub const MAX_GSO_BYTES: usize = 65_535 - 40 - 8;
/// The send and receive buffer asked of the kernel for the tunnel's UDP socket.
pub const SOCKET_BUFFER: usize = 4 << 20;
/// Flow-control windows: per stream, and per connection, each way.
const STREAM_WINDOW: u32 = 16 << 20;
const CONNECTION_WINDOW: u32 = 64 << 20;
/// Both ends notice a vanished peer within this; keepalives keep a quiet tunnel well inside it
/// (the guest's end sends them; the control plane's turns its own off, `control_plane::tls`).
const IDLE_TIMEOUT_MS: u32 = 6_000;
const KEEP_ALIVE: Duration = Duration::from_secs(2);

/// The tunnel's transport for one end: `incoming_bidi` is how many streams the peer may open at
/// once (the control plane takes one from a guest, its control stream; a guest takes the
/// control plane's operation streams).
pub fn transport_config(incoming_bidi: u32) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.max_idle_timeout(Some(quinn::IdleTimeout::from(quinn::VarInt::from_u32(
        IDLE_TIMEOUT_MS,
    ))));
    t.keep_alive_interval(Some(KEEP_ALIVE));
    t.max_concurrent_bidi_streams(incoming_bidi.into());
    t.max_concurrent_uni_streams(0u32.into());
    t.stream_receive_window(STREAM_WINDOW.into());
    t.receive_window(CONNECTION_WINDOW.into());
    t.send_window(CONNECTION_WINDOW.into());
    let mut mtu = quinn::MtuDiscoveryConfig::default();
    mtu.upper_bound(MAX_UDP_PAYLOAD);
    t.mtu_discovery_config(Some(mtu));
    t
}

/// The tunnel's endpoint settings: datagrams up to [`MAX_UDP_PAYLOAD`] accepted (and announced to
/// the peer, which bounds its path MTU discovery). `reset_key` signs stateless resets (the
/// control plane keeps one across restarts); `None` takes quinn's random one.
pub fn endpoint_config(
    reset_key: Option<Arc<dyn quinn::crypto::HmacKey>>,
) -> quinn::EndpointConfig {
    let mut config = match reset_key {
        Some(key) => quinn::EndpointConfig::new(key),
        None => quinn::EndpointConfig::default(),
    };
    // In range by construction (quinn accepts 1200..=65527); a unit test checks it.
    let _ = config.max_udp_payload_size(MAX_UDP_PAYLOAD);
    config
}

/// A UDP socket bound to `addr`; a wildcard IPv6 address takes IPv4 too (dual-stack), as
/// quinn's own `Endpoint::client` does.
pub fn bind(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        // Best effort: a host without IPv4 keeps an IPv6-only socket.
        let _ = socket.set_only_v6(false);
    }
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// A quinn endpoint on `socket` with the tunnel's socket settings: buffers of
/// [`SOCKET_BUFFER`] (as far as the kernel allows) and GSO batches cut to [`MAX_GSO_BYTES`].
/// `server` makes it a server endpoint; a client sets its own default client config.
pub fn udp_endpoint(
    socket: std::net::UdpSocket,
    config: quinn::EndpointConfig,
    server: Option<quinn::ServerConfig>,
) -> io::Result<quinn::Endpoint> {
    let runtime =
        quinn::default_runtime().ok_or_else(|| io::Error::other("no async runtime for quic"))?;
    let socket = UdpSocket::wrap(socket, &config, &*runtime)?;
    quinn::Endpoint::new_with_abstract_socket(config, server, socket, runtime)
}

/// The tunnel's UDP socket: quinn's own, with larger buffers, GSO batches split where the
/// kernel would refuse them, and receive buffers sized for one datagram of at most 64 KiB.
pub struct UdpSocket {
    inner: Arc<dyn quinn::AsyncUdpSocket>,
    /// Segments per received datagram quinn sizes its buffers for.
    receive_segments: usize,
}

impl fmt::Debug for UdpSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdpSocket")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl UdpSocket {
    /// Sets `socket`'s buffers and hands it to quinn's runtime. A buffer the kernel refuses to
    /// raise is left as it is (the tunnel works, with more loss under bursts).
    pub fn wrap(
        socket: std::net::UdpSocket,
        config: &quinn::EndpointConfig,
        runtime: &dyn quinn::Runtime,
    ) -> io::Result<Arc<Self>> {
        let state = quinn::udp::UdpSocketState::new((&socket).into())?;
        let _ = state.set_recv_buffer_size((&socket).into(), SOCKET_BUFFER);
        let _ = state.set_send_buffer_size((&socket).into(), SOCKET_BUFFER);
        let inner = runtime.wrap_udp_socket(socket)?;
        // quinn sizes each of its 32 receive buffers as payload x segments; GRO never hands
        // over more than one 64 KiB datagram, so past that the buffer is only address space.
        let payload = usize::try_from(config.get_max_udp_payload_size())
            .unwrap_or(usize::MAX)
            .max(1);
        let receive_segments = inner
            .max_receive_segments()
            .min((u16::MAX as usize).div_ceil(payload))
            .max(1);
        Ok(Arc::new(Self {
            inner,
            receive_segments,
        }))
    }
}

/// The pieces one transmit is sent in: all of it, or for a GSO batch over [`MAX_GSO_BYTES`],
/// runs of whole segments that fit.
fn pieces<'a>(
    transmit: &'a quinn::udp::Transmit<'a>,
) -> impl Iterator<Item = quinn::udp::Transmit<'a>> + 'a {
    let per = match transmit.segment_size {
        Some(size) if transmit.contents.len() > MAX_GSO_BYTES && size > 0 => {
            (MAX_GSO_BYTES / size).max(1) * size
        }
        _ => transmit.contents.len().max(1),
    };
    transmit
        .contents
        .chunks(per)
        .map(move |contents| quinn::udp::Transmit {
            destination: transmit.destination,
            ecn: transmit.ecn,
            contents,
            // A piece of one segment is a plain datagram.
            segment_size: transmit.segment_size.filter(|&s| contents.len() > s),
            src_ip: transmit.src_ip,
        })
}

impl quinn::AsyncUdpSocket for UdpSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn quinn::UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &quinn::udp::Transmit<'_>) -> io::Result<()> {
        for (i, piece) in pieces(transmit).enumerate() {
            match self.inner.try_send(&piece) {
                Ok(()) => {}
                // Nothing went out: quinn waits until the socket is writable and tries again.
                Err(e) if i == 0 => return Err(e),
                // Part went out: the rest is lost, as datagrams are when a socket's buffer is
                // full, and QUIC's recovery resends it; trying the whole batch again would send
                // what went out twice.
                Err(_) => return Ok(()),
            }
        }
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [quinn::udp::RecvMeta],
    ) -> Poll<io::Result<usize>> {
        self.inner.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.receive_segments
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transmit(contents: &[u8], segment_size: Option<usize>) -> quinn::udp::Transmit<'_> {
        quinn::udp::Transmit {
            destination: "127.0.0.1:9".parse().expect("an address"),
            ecn: None,
            contents,
            segment_size,
            src_ip: None,
        }
    }

    #[test]
    fn endpoint_accepts_the_largest_payload() {
        assert_eq!(
            endpoint_config(None).get_max_udp_payload_size(),
            u64::from(MAX_UDP_PAYLOAD)
        );
    }

    #[test]
    fn a_batch_the_kernel_takes_goes_whole() {
        let data = vec![0u8; 10 * 1452];
        let t = transmit(&data, Some(1452));
        let p: Vec<_> = pieces(&t).collect();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].contents.len(), data.len());
        assert_eq!(p[0].segment_size, Some(1452));
    }

    #[test]
    fn a_larger_batch_goes_in_whole_segments_that_fit() {
        // Ten 9000-byte packets, the last one short: 7 + 3 segments.
        let data = vec![0u8; 9 * 9000 + 100];
        let t = transmit(&data, Some(9000));
        let p: Vec<_> = pieces(&t).collect();
        assert_eq!(
            p.iter().map(|p| p.contents.len()).collect::<Vec<_>>(),
            [7 * 9000, 2 * 9000 + 100]
        );
        assert!(p.iter().all(|p| p.contents.len() <= MAX_GSO_BYTES));
        assert!(p.iter().all(|p| p.segment_size == Some(9000)));
        // 64 KiB packets: one per send, each a plain datagram.
        let data = vec![0u8; 3 * 65_000];
        let t = transmit(&data, Some(65_000));
        let p: Vec<_> = pieces(&t).collect();
        assert_eq!(p.len(), 3);
        assert!(p.iter().all(|p| p.segment_size.is_none()));
    }

    #[test]
    fn a_plain_datagram_goes_as_it_is() {
        let data = vec![0u8; 1200];
        let t = transmit(&data, None);
        let p: Vec<_> = pieces(&t).collect();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].segment_size, None);
    }
}
