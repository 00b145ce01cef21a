//! The link between replicas: a replica reaches a guest connected to another one through it.
//!
//! QUIC on its own UDP port (`--peer-addr`), ALPN `rakazo-peer`, the cluster's shared tunnel
//! certificate pinned by the dialler. A connection starts with a [`PeerHello`] carrying the
//! peer key ([`super::peer_key`]), compared in constant time; anything else closes it. Then
//! each request is its own bidirectional stream: one [`PeerRequest`] frame, one [`PeerAnswer`]
//! frame, and for [`PeerRequest::Open`] the operation's bytes both ways, spliced onto a new
//! stream to the guest: data, finishes, resets and stops (with their codes) pass through, so
//! neither end can tell a relayed stream from a direct one, except that the relay's own loss
//! resets with [`RESET_RELAY_LOST`] (the requester sees a lost stream: `uncertain`).
//!
//! The answer comes before any byte of the operation: `NotHere` (the guest is not, or no
//! longer, connected here) and `Suspending` (idle suspension claimed the computer) are given
//! before the request is sent, so the requester may look again or refuse, and never wonders
//! whether the guest acted. A relayed stream counts as an operation in flight in this
//! replica's idle gate for as long as it is open, so idle suspension, decided where the guest
//! is connected, sees every replica's operations.

use crate::idle::gate::Gate;
use crate::tunnel::{OpStream, Registry, TunnelError};
use carrier::pin::PinnedCert;
use gateway_proto::{encode, BotId, FrameDecoder, LeaseToken, Request};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{debug, info, warn};

pub const ALPN: &[u8] = b"rakazo-peer";
/// How often a requester looks again for a guest that is connected nowhere reachable.
pub const RESOLVE_POLL: Duration = Duration::from_millis(200);
/// Dialling another replica, and its hello, within this.
const DIAL_TIMEOUT: Duration = Duration::from_secs(2);
/// A peer's answer to a request within this (the owner's open of a guest stream is bounded by
/// the guest timeout; a replica that does not answer at all is taken for unreachable).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// The reset code of a relayed stream whose other half failed (not a guest's code).
pub const RESET_RELAY_LOST: u32 = 6;
const CLOSE_BAD_PEER: u32 = 1;
const MAX_PEER_FRAME: usize = 64 * 1024;

#[derive(Debug, Serialize, Deserialize)]
pub enum PeerHello {
    V1 { key: [u8; 32], from: String },
}

#[derive(Debug, Serialize, Deserialize)]
pub enum PeerRequest {
    /// Splice this stream onto a new operation stream to `computer`'s guest. `refusable`: the
    /// operation is refused while idle suspension claims the computer.
    Open { computer: String, refusable: bool },
    /// Push a lease to `computer`'s guest (granted, or released).
    PushLease {
        computer: String,
        bot: BotId,
        token: LeaseToken,
        released: bool,
    },
    /// Close `computer`'s guest connection (its computer stopped or was destroyed).
    Disconnect { computer: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerAnswer {
    Ready,
    NotHere,
    Suspending,
    Done,
}

/// Why a stream through another replica could not be opened. Nothing reached the guest.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("replica {0} is unreachable")]
    Unreachable(String),
    #[error("the guest is not connected to replica {0}")]
    NotHere(String),
    #[error("the computer is being suspended")]
    Suspending,
}

fn transport() -> quinn::TransportConfig {
    let mut t = crate::tls::transport_config(4096);
    // A dead replica is noticed within 3 s; its relayed operations are lost, not hung.
    t.max_idle_timeout(Some(quinn::IdleTimeout::from(quinn::VarInt::from_u32(
        3_000,
    ))));
    t.keep_alive_interval(Some(Duration::from_millis(750)));
    t
}

/// The peer endpoint's server configuration: the shared tunnel identity, our ALPN.
fn server_config(identity: &crate::tls::TunnelIdentity) -> anyhow::Result<quinn::ServerConfig> {
    let mut config = identity.server_config_with(ALPN)?;
    config.transport_config(Arc::new(transport()));
    Ok(config)
}

/// The peer link's listening endpoint on `addr`: the tunnel's endpoint and UDP socket
/// (`carrier::quic`), since it carries the tunnel's streams relayed.
pub fn server_endpoint(
    identity: &crate::tls::TunnelIdentity,
    addr: SocketAddr,
) -> anyhow::Result<quinn::Endpoint> {
    let socket = carrier::quic::bind(addr)?;
    let config = carrier::quic::endpoint_config(None);
    Ok(carrier::quic::udp_endpoint(
        socket,
        config,
        Some(server_config(identity)?),
    )?)
}

fn client_config(cert_sha256: &str) -> anyhow::Result<quinn::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(
            PinnedCert::from_hex(cert_sha256, provider, crate::tls::PIN_MISMATCH).ok_or_else(
                || anyhow::anyhow!("the peer certificate fingerprint is not 64 hex digits"),
            )?,
        ))
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)?;
    let mut config = quinn::ClientConfig::new(Arc::new(quic));
    config.transport_config(Arc::new(transport()));
    Ok(config)
}

async fn write_frame<T: Serialize>(send: &mut quinn::SendStream, msg: &T) -> Result<(), String> {
    let frame = encode(msg).map_err(|e| e.to_string())?;
    send.write_all(&frame).await.map_err(|e| e.to_string())
}

/// Reads one frame, leaving whatever followed it in the stream's place: returns it and the
/// bytes read past it.
async fn read_frame<T: serde::de::DeserializeOwned>(
    recv: &mut quinn::RecvStream,
) -> Result<(T, Vec<u8>), String> {
    let mut decoder = FrameDecoder::with_max(MAX_PEER_FRAME);
    loop {
        if let Some(msg) = decoder.next_message::<T>().map_err(|e| e.to_string())? {
            return Ok((msg, decoder.into_remainder()));
        }
        match recv.read_chunk(MAX_PEER_FRAME, true).await {
            Ok(Some(c)) => decoder.push(&c.bytes),
            Ok(None) => return Err("stream ended before a whole frame".into()),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Keeps `entry` for replica `id`, and forgets every connection that has ended: a replica
/// started again comes back under a new id, so its old entry would otherwise stay for good
/// (the soak restarts replicas for half an hour: docs/faults.md#soak).
fn remember<C>(
    conns: &mut HashMap<String, (SocketAddr, C)>,
    id: &str,
    entry: (SocketAddr, C),
    open: impl Fn(&C) -> bool,
) {
    conns.retain(|_, (_, c)| open(c));
    conns.insert(id.to_owned(), entry);
}

/// The dialling side: one connection per other replica, made on first use.
pub struct Peers {
    endpoint: quinn::Endpoint,
    key: [u8; 32],
    me: String,
    conns: Mutex<HashMap<String, (SocketAddr, quinn::Connection)>>,
    /// The base deadline of waits on guests (a relayed stream has the same deadlines).
    guest_timeout: Duration,
}

impl Peers {
    pub fn new(
        key: [u8; 32],
        me: String,
        cert_sha256: &str,
        guest_timeout: Duration,
    ) -> anyhow::Result<Self> {
        let socket = carrier::quic::bind("0.0.0.0:0".parse()?)?;
        let mut endpoint =
            carrier::quic::udp_endpoint(socket, carrier::quic::endpoint_config(None), None)?;
        endpoint.set_default_client_config(client_config(cert_sha256)?);
        Ok(Self {
            endpoint,
            key,
            me,
            conns: Mutex::default(),
            guest_timeout,
        })
    }

    async fn connection(&self, r: &super::Replica) -> Result<quinn::Connection, PeerError> {
        let cached = self
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&r.id)
            .filter(|(addr, c)| *addr == r.peer_addr && c.close_reason().is_none())
            .map(|(_, c)| c.clone());
        if let Some(c) = cached {
            return Ok(c);
        }
        let unreachable = || PeerError::Unreachable(r.id.clone());
        let dial = async {
            let conn = self
                .endpoint
                .connect(r.peer_addr, "rakazo-control-plane")
                .map_err(|_| unreachable())?
                .await
                .map_err(|_| unreachable())?;
            let (mut send, _recv) = conn.open_bi().await.map_err(|_| unreachable())?;
            let hello = PeerHello::V1 {
                key: self.key,
                from: self.me.clone(),
            };
            write_frame(&mut send, &hello)
                .await
                .map_err(|_| unreachable())?;
            let _ = send.finish();
            Ok::<_, PeerError>(conn)
        };
        let conn = tokio::time::timeout(DIAL_TIMEOUT, dial)
            .await
            .map_err(|_| unreachable())??;
        remember(
            &mut self.conns.lock().unwrap_or_else(|e| e.into_inner()),
            &r.id,
            (r.peer_addr, conn.clone()),
            |c| c.close_reason().is_none(),
        );
        Ok(conn)
    }

    /// Sends `req` to replica `r`; its answer, and the stream for what follows.
    async fn request(
        &self,
        r: &super::Replica,
        req: &PeerRequest,
    ) -> Result<(PeerAnswer, quinn::SendStream, quinn::RecvStream), PeerError> {
        let conn = self.connection(r).await?;
        let unreachable = || PeerError::Unreachable(r.id.clone());
        let exchange = async {
            let (mut send, mut recv) = conn.open_bi().await.map_err(|_| unreachable())?;
            write_frame(&mut send, req)
                .await
                .map_err(|_| unreachable())?;
            let (answer, rest) = read_frame::<PeerAnswer>(&mut recv)
                .await
                .map_err(|_| unreachable())?;
            if !rest.is_empty() {
                // The guest speaks only after our request, which is not sent yet.
                return Err(unreachable());
            }
            Ok((answer, send, recv))
        };
        tokio::time::timeout(ANSWER_TIMEOUT + self.guest_timeout, exchange)
            .await
            .map_err(|_| unreachable())?
    }

    /// Opens an operation stream to `computer`'s guest through replica `r` and sends `op`.
    pub async fn open(
        &self,
        r: &super::Replica,
        computer: &str,
        refusable: bool,
        op: &Request,
    ) -> Result<Result<OpStream, TunnelError>, PeerError> {
        let req = PeerRequest::Open {
            computer: computer.to_owned(),
            refusable,
        };
        match self.request(r, &req).await? {
            (PeerAnswer::Ready, send, recv) => {
                Ok(OpStream::start(computer.to_owned(), send, recv, op, self.guest_timeout).await)
            }
            (PeerAnswer::Suspending, ..) => Err(PeerError::Suspending),
            (PeerAnswer::NotHere | PeerAnswer::Done, ..) => Err(PeerError::NotHere(r.id.clone())),
        }
    }

    /// Pushes a lease to `computer`'s guest through replica `r`.
    pub async fn push_lease(
        &self,
        r: &super::Replica,
        computer: &str,
        bot: &BotId,
        token: &LeaseToken,
        released: bool,
    ) -> Result<(), PeerError> {
        let req = PeerRequest::PushLease {
            computer: computer.to_owned(),
            bot: bot.clone(),
            token: token.clone(),
            released,
        };
        match self.request(r, &req).await? {
            (PeerAnswer::Done, ..) => Ok(()),
            _ => Err(PeerError::NotHere(r.id.clone())),
        }
    }

    /// Asks replica `r` to close `computer`'s guest connection.
    pub async fn disconnect(&self, r: &super::Replica, computer: &str) -> Result<(), PeerError> {
        let req = PeerRequest::Disconnect {
            computer: computer.to_owned(),
        };
        self.request(r, &req).await.map(|_| ())
    }
}

/// Serves other replicas' requests on `endpoint` until it closes.
pub async fn serve(
    endpoint: quinn::Endpoint,
    key: [u8; 32],
    registry: Arc<Registry>,
    gate: Arc<Gate>,
) {
    while let Some(incoming) = endpoint.accept().await {
        let (registry, gate) = (registry.clone(), gate.clone());
        tokio::spawn(async move {
            let Ok(Ok(conn)) = tokio::time::timeout(DIAL_TIMEOUT, incoming).await else {
                return;
            };
            let remote = conn.remote_address();
            match tokio::time::timeout(DIAL_TIMEOUT, hello(&conn, &key)).await {
                Ok(Ok(from)) => {
                    debug!(%remote, replica = %from, "peer replica connected");
                    serve_peer(conn, registry, gate).await;
                }
                Ok(Err(reason)) => {
                    warn!(%remote, %reason, "peer connection refused");
                    conn.close(CLOSE_BAD_PEER.into(), b"refused");
                }
                Err(_) => {
                    warn!(%remote, "peer connection refused: no hello within 2 s");
                    conn.close(CLOSE_BAD_PEER.into(), b"refused");
                }
            }
        });
    }
}

async fn hello(conn: &quinn::Connection, key: &[u8; 32]) -> Result<String, String> {
    let (_send, mut recv) = conn.accept_bi().await.map_err(|e| e.to_string())?;
    let (PeerHello::V1 { key: theirs, from }, _) = read_frame::<PeerHello>(&mut recv).await?;
    use subtle::ConstantTimeEq;
    if bool::from(theirs.ct_eq(key)) {
        Ok(from.chars().take(64).collect())
    } else {
        Err("wrong peer key (is this replica's capability-key the cluster's?)".into())
    }
}

async fn serve_peer(conn: quinn::Connection, registry: Arc<Registry>, gate: Arc<Gate>) {
    while let Ok((send, recv)) = conn.accept_bi().await {
        let (registry, gate) = (registry.clone(), gate.clone());
        tokio::spawn(async move {
            if let Err(e) = serve_request(send, recv, &registry, &gate).await {
                debug!(error = %e, "peer request ended");
            }
        });
    }
}

async fn serve_request(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    registry: &Registry,
    gate: &Arc<Gate>,
) -> Result<(), String> {
    let (req, rest) = tokio::time::timeout(DIAL_TIMEOUT, read_frame::<PeerRequest>(&mut recv))
        .await
        .map_err(|_| "no request within 2 s".to_string())??;
    match req {
        PeerRequest::Open {
            computer,
            refusable,
        } => {
            let Some(guest) = registry.get(&computer) else {
                return write_frame(&mut send, &PeerAnswer::NotHere).await;
            };
            let Ok(entered) = gate.enter(&computer, refusable, crate::clock::now_ms()) else {
                return write_frame(&mut send, &PeerAnswer::Suspending).await;
            };
            let (gsend, grecv) = match guest.open_raw().await {
                Ok(s) => s,
                Err(_) => return write_frame(&mut send, &PeerAnswer::NotHere).await,
            };
            write_frame(&mut send, &PeerAnswer::Ready).await?;
            let mut gsend = gsend;
            if !rest.is_empty() {
                gsend.write_all(&rest).await.map_err(|e| e.to_string())?;
            }
            tokio::join!(pipe(recv, gsend), pipe(grecv, send));
            drop(entered);
            Ok(())
        }
        PeerRequest::PushLease {
            computer,
            bot,
            token,
            released,
        } => {
            let answer = match registry.get(&computer) {
                Some(guest) => {
                    guest.push_lease(&bot, &token, released);
                    PeerAnswer::Done
                }
                None => PeerAnswer::NotHere,
            };
            write_frame(&mut send, &answer).await
        }
        PeerRequest::Disconnect { computer } => {
            if registry.get(&computer).is_some() {
                info!(computer_id = %computer, "guest disconnected at another replica's request");
                registry.disconnect(&computer);
            }
            write_frame(&mut send, &PeerAnswer::Done).await
        }
    }
}

/// Copies `from` into `to` until `from` finishes (then `to` finishes), is reset (then `to` is
/// reset with the same code) or `to` is stopped (then `from` is stopped with the same code).
async fn pipe(mut from: quinn::RecvStream, mut to: quinn::SendStream) {
    use quinn::{ReadError, WriteError};
    loop {
        let chunk = tokio::select! {
            c = from.read_chunk(256 * 1024, true) => c,
            stopped = to.stopped() => {
                let code = match stopped {
                    Ok(Some(code)) => code,
                    _ => RESET_RELAY_LOST.into(),
                };
                let _ = from.stop(code);
                return;
            }
        };
        match chunk {
            Ok(Some(c)) => match to.write_chunk(c.bytes).await {
                Ok(()) => {}
                Err(WriteError::Stopped(code)) => {
                    let _ = from.stop(code);
                    return;
                }
                Err(_) => {
                    let _ = from.stop(RESET_RELAY_LOST.into());
                    return;
                }
            },
            Ok(None) => {
                let _ = to.finish();
                // Stay until the other end has everything (or stops us), so the data is not
                // cut off when the relay's streams drop.
                let _ = to.stopped().await;
                return;
            }
            Err(ReadError::Reset(code)) => {
                let _ = to.reset(code);
                return;
            }
            Err(_) => {
                let _ = to.reset(RESET_RELAY_LOST.into());
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::remember;
    use std::collections::HashMap;

    #[test]
    fn ended_connections_of_replicas_gone_for_good_are_forgotten() {
        let addr = "127.0.0.1:1".parse().unwrap();
        // (connection number, still open)
        let mut conns = HashMap::new();
        for restart in 0..50 {
            // Each restart of the other replica: a new id, the old connection ended.
            if let Some((_, c)) = conns.values_mut().next() {
                *c = (restart - 1, false);
            }
            remember(
                &mut conns,
                &format!("r-{restart}"),
                (addr, (restart, true)),
                |c| c.1,
            );
            assert_eq!(conns.len(), 1, "after restart {restart}: {conns:?}");
        }
        // A live connection to another replica stays.
        remember(&mut conns, "other", (addr, (99, true)), |c| c.1);
        assert_eq!(conns.len(), 2);
    }
}
