//! The tunnel's transports: QUIC on UDP, configured once for both ends ([`quic`]), and the same
//! QUIC over TCP, for networks that drop UDP: quinn's datagrams carried as length-prefixed frames
//! on TCP connections.
//!
//! Only the socket under quinn changes: both ends run the same QUIC connection as over UDP (the
//! same TLS 1.3 handshake and pinned certificate, the same streams and reset codes), so nothing
//! above the transport knows which carrier it runs on. [`ClientSocket`] (the guest) carries one
//! QUIC connection over one TCP connection; [`ServerSocket`] (the control plane) accepts many,
//! gives each a synthetic peer address and routes outgoing datagrams by destination. This crate
//! knows nothing of the tunnel protocol above it; [`frame`] is the wire format, sans-IO.
//!
//! The same sockets also carry datagrams one per websocket binary message ([`ws`]), for networks
//! where only the control plane's HTTP API is reachable: [`Carrier::admit_websocket`] takes an
//! upgraded HTTP connection beside the TCP listener's, [`ClientSocket::connect_websocket`] dials.
//!
//! Every queue is bounded ([`Limits`]): a connection's outbox drops datagrams when full (QUIC
//! recovers, as from a full UDP buffer) and its reader waits for quinn rather than buffer more.
//! Packets are [`PACKET_SIZE`] bytes ([`tune_transport`], [`tune_endpoint`]): TCP has no path MTU
//! to discover, and fewer, larger packets cost QUIC less per byte.

#![forbid(unsafe_code)]

/// Implements quinn's socket for a carrier socket type with fields `local: SocketAddr` and
/// `inbound: Mutex<mpsc::Receiver<Datagram>>` and a method `route(&self, &Transmit)`: the client
/// and the server differ only in where a datagram goes.
macro_rules! carrier_socket {
    ($ty:ty) => {
        impl quinn::AsyncUdpSocket for $ty {
            fn create_io_poller(
                self: std::sync::Arc<Self>,
            ) -> std::pin::Pin<Box<dyn quinn::UdpPoller>> {
                Box::pin($crate::Writable)
            }

            fn try_send(&self, transmit: &quinn::udp::Transmit<'_>) -> std::io::Result<()> {
                self.route(transmit);
                Ok(())
            }

            fn poll_recv(
                &self,
                cx: &mut std::task::Context<'_>,
                bufs: &mut [std::io::IoSliceMut<'_>],
                meta: &mut [quinn::udp::RecvMeta],
            ) -> std::task::Poll<std::io::Result<usize>> {
                $crate::link::poll_inbound(&self.inbound, cx, bufs, meta)
            }

            fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
                Ok(self.local)
            }

            fn max_transmit_segments(&self) -> usize {
                $crate::TRANSMIT_SEGMENTS
            }

            fn may_fragment(&self) -> bool {
                false
            }
        }
    };
}

mod client;
pub mod frame;
mod link;
pub mod pin;
pub mod quic;
mod server;
pub mod ws;

pub use client::{client_endpoint, ClientSocket};
pub use link::LinkEnd;
pub use server::{listen, Carrier, ServerSocket, WebsocketReservation};

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// The QUIC packet size on a carrier (both ends' initial and minimum MTU, path MTU discovery
/// off). Measured with `bench_tunnel_tcp` (BENCHMARKS.md, "Tunnel over TCP"): one stream moves
/// about twice QUIC-on-UDP's rate with it, and about as much as UDP with 1452-byte packets. It is
/// also the most quinn takes: handshake packets are padded to the minimum MTU, and quinn encodes
/// a long-header packet's length in two bytes (it asserts `len < 2^14`).
pub const PACKET_SIZE: u16 = 16 * 1024;
// Checked when compiling: a frame carries a packet, and quinn takes no larger handshake packet.
const _: () = assert!(PACKET_SIZE as usize <= frame::MAX_DATAGRAM && PACKET_SIZE <= 1 << 14);
/// Datagrams quinn may hand over in one transmit (each still its own frame): one call and one
/// wake-up of the writer per batch instead of per packet.
const TRANSMIT_SEGMENTS: usize = 10;
/// Received datagrams waiting for quinn, per socket (a server's connections share it; a
/// connection whose datagram does not fit waits, which stops reading that connection alone).
const INBOUND_QUEUE: usize = 256;

/// The bounds of a carrier.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Encoded bytes queued for one connection's writer before datagrams are dropped.
    pub queue_bytes: usize,
    /// Connections a server carries at once; more are closed when accepted.
    pub max_connections: usize,
    /// How long a new server connection has to send its preamble.
    pub preamble_within: Duration,
    /// How long a server connection has to be confirmed ([`Carrier::confirm`]).
    pub confirm_within: Duration,
    /// A connection that receives nothing, or cannot write, for this long is closed. QUIC
    /// keepalives (every 2 s in the tunnel) keep a healthy one well inside it.
    pub idle: Duration,
    /// Websockets not yet confirmed at once ([`Carrier::reserve_websocket`]). They arrive
    /// through the HTTP API, whose connection slots they hold, before anything authenticated
    /// them: this keeps strangers from filling those slots with tunnels that never log in.
    pub max_pending_websockets: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            queue_bytes: 2 << 20,
            max_connections: 4096,
            preamble_within: Duration::from_secs(10),
            confirm_within: Duration::from_secs(30),
            idle: Duration::from_secs(30),
            max_pending_websockets: 64,
        }
    }
}

/// Sets a QUIC transport for a carrier: [`PACKET_SIZE`] packets from the first, no path MTU
/// discovery, and no black-hole fallback to small packets (a dropped datagram here is a full
/// queue, not a path that loses large packets). The congestion controller (quinn's default,
/// Cubic) starts with ten such packets: its default initial window (14 720 bytes) is smaller
/// than one, and would never let the first leave.
pub fn tune_transport(transport: &mut quinn::TransportConfig) {
    let mut cubic = quinn::congestion::CubicConfig::default();
    cubic.initial_window(10 * u64::from(PACKET_SIZE));
    transport
        .initial_mtu(PACKET_SIZE)
        .min_mtu(PACKET_SIZE)
        .mtu_discovery_config(None)
        .congestion_controller_factory(std::sync::Arc::new(cubic));
}

/// Sets an endpoint for a carrier: it accepts datagrams up to [`frame::MAX_DATAGRAM`] (which
/// also sizes quinn's receive buffers).
pub fn tune_endpoint(config: &mut quinn::EndpointConfig) {
    // In range by construction (quinn accepts 1200..=65527); `endpoint_accepts_max_datagram`
    // checks it.
    let _ = config.max_udp_payload_size(frame::MAX_DATAGRAM as u16);
}

/// A carrier socket is always writable: a datagram that does not fit is dropped, never
/// refused with `WouldBlock`.
#[derive(Debug)]
struct Writable;

impl quinn::UdpPoller for Writable {
    fn poll_writable(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_accepts_max_datagram() {
        let mut config = quinn::EndpointConfig::default();
        tune_endpoint(&mut config);
        assert_eq!(
            config.get_max_udp_payload_size(),
            frame::MAX_DATAGRAM as u64
        );
    }
}
