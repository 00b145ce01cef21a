//! The computers' DNS server: answers only what their policy allows, and remembers what it
//! answered so the proxy can check the addresses computers then connect to.
//!
//! This module owns the DNS front door, over UDP and TCP, for any number of computers (each
//! query's computer is found by its source address through the [`crate::Directory`]). For one
//! query, in order:
//!
//! 1. not a well-formed standard query with one question of class IN: FORMERR / NOTIMP;
//! 2. no computer at this source: REFUSED;
//! 3. over the computer's query rate ([`crate::Limits::dns_queries_per_sec`]): REFUSED, counted;
//! 4. a name the policy does not allow on any port: REFUSED, and nothing is sent upstream, so a
//!    TXT or long-label query under a denied domain carries no data anywhere (DNS tunnelling);
//! 5. an allowed name, A or AAAA: resolved upstream (with a deadline), internal and deny-listed
//!    addresses dropped from the answer, each remaining address recorded for the computer
//!    (`(ip, name)` until at least `max(TTL, min_record_lifetime)`), answered with the TTL
//!    capped at `max_answer_ttl`;
//! 6. an allowed name, any other type: an empty NOERROR answer, never forwarded.
//!
//! Every query produces an event (kind `dns`, port 53).

use std::io;
use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{DNSClass, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use crate::events::{Event, EventKind, Target};
use crate::gateway::{accept, accept_error_pause, Shared};
use crate::policy::{normalize_name, Decision};
use crate::registry::{record_lifetime, Computer, Counters};
use crate::resolve::{Family, ResolveError};
use crate::Reason;

/// The UDP payload size the server advertises and answers within (the DNS flag day value).
pub const EDNS_PAYLOAD: u16 = 1232;
/// DNS-over-TCP connections open at once, all computers together.
pub const MAX_TCP_CONNECTIONS: usize = 256;

pub(crate) async fn serve_udp(shared: Arc<Shared>, socket: UdpSocket) -> io::Result<()> {
    let socket = Arc::new(socket);
    let mut buf = vec![0u8; 4096];
    loop {
        let (n, peer) = match socket.recv_from(&mut buf).await {
            Ok(got) => got,
            Err(e) => {
                accept_error_pause(&e).await;
                continue;
            }
        };
        // Over the in-flight bound the query is dropped; the client retries.
        let Ok(permit) = shared.dns_in_flight.clone().try_acquire_owned() else {
            continue;
        };
        let query = buf[..n].to_vec();
        let (shared, socket) = (shared.clone(), socket.clone());
        tokio::spawn(async move {
            let max_len = udp_max_len(&query);
            if let Some(reply) = answer(&shared, peer.ip(), &query, max_len).await {
                let _ = socket.send_to(&reply, peer).await;
            }
            drop(permit);
        });
    }
}

pub(crate) async fn serve_tcp(shared: Arc<Shared>, listener: TcpListener) -> io::Result<()> {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_TCP_CONNECTIONS));
    loop {
        let (stream, peer) = accept(&listener).await;
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let _ = serve_tcp_connection(&shared, stream, peer.ip()).await;
            drop(permit);
        });
    }
}

async fn serve_tcp_connection(
    shared: &Shared,
    mut stream: TcpStream,
    peer: IpAddr,
) -> io::Result<()> {
    let timeout = shared.config.dns_tcp_timeout;
    let timed_out = || io::Error::new(io::ErrorKind::TimedOut, "DNS over TCP: no message in time");
    loop {
        let len = match tokio::time::timeout(timeout, stream.read_u16()).await {
            Ok(Ok(len)) => usize::from(len),
            Ok(Err(_)) => return Ok(()), // closed
            Err(_) => return Err(timed_out()),
        };
        let mut query = vec![0u8; len];
        tokio::time::timeout(timeout, stream.read_exact(&mut query))
            .await
            .map_err(|_| timed_out())??;
        let Some(reply) = answer(shared, peer, &query, usize::from(u16::MAX)).await else {
            return Ok(());
        };
        let mut framed = Vec::with_capacity(reply.len() + 2);
        framed.extend_from_slice(&(reply.len() as u16).to_be_bytes());
        framed.extend_from_slice(&reply);
        tokio::time::timeout(timeout, stream.write_all(&framed))
            .await
            .map_err(|_| timed_out())??;
    }
}

/// The largest UDP answer the query's sender takes: 512 bytes, or its EDNS payload size up to
/// [`EDNS_PAYLOAD`].
fn udp_max_len(query: &[u8]) -> usize {
    match Message::from_vec(query)
        .ok()
        .and_then(|m| m.edns.map(|e| e.max_payload()))
    {
        Some(payload) => usize::from(payload.clamp(512, EDNS_PAYLOAD)),
        None => 512,
    }
}

/// Answers one DNS message from `peer`; `None` when it is too short to answer at all.
pub(crate) async fn answer(
    shared: &Shared,
    peer: IpAddr,
    query: &[u8],
    max_len: usize,
) -> Option<Vec<u8>> {
    let request = match Message::from_vec(query) {
        Ok(request) => request,
        Err(_) if query.len() >= 2 => {
            let id = u16::from_be_bytes([query[0], query[1]]);
            let reply = Message::error_msg(id, OpCode::Query, ResponseCode::FormErr);
            return reply.to_vec().ok();
        }
        Err(_) => return None,
    };
    if request.metadata.message_type != MessageType::Query {
        return None; // never answer an answer
    }
    let mut reply = Message::response(request.metadata.id, request.metadata.op_code);
    reply.metadata.recursion_desired = request.metadata.recursion_desired;
    reply.metadata.recursion_available = true;
    if request.edns.is_some() {
        let mut edns = Edns::new();
        edns.set_max_payload(EDNS_PAYLOAD);
        reply.set_edns(edns);
    }
    reply.add_queries(request.queries.iter().cloned());
    reply.metadata.response_code = respond(shared, peer, &request, &mut reply).await;
    let bytes = reply.to_vec().ok()?;
    if bytes.len() <= max_len {
        return Some(bytes);
    }
    reply.truncate().to_vec().ok()
}

/// Fills `reply`'s answers and says its response code.
async fn respond(
    shared: &Shared,
    peer: IpAddr,
    request: &Message,
    reply: &mut Message,
) -> ResponseCode {
    if request.metadata.op_code != OpCode::Query {
        return ResponseCode::NotImp;
    }
    let [query] = request.queries.as_slice() else {
        return ResponseCode::FormErr;
    };
    if query.query_class() != DNSClass::IN {
        return ResponseCode::NotImp;
    }
    let Some(computer) = shared.directory.computer_for(peer) else {
        Counters::add(&shared.unknown_peers, 1);
        return ResponseCode::Refused;
    };
    let counters = computer.counters();
    let name = query.name().to_ascii();
    let Some(name) = normalize_name(&name) else {
        Counters::add(&counters.dns_refused, 1);
        let target = Target::Domain(name.chars().take(253).collect());
        event(shared, &computer, false, target, Reason::InvalidName);
        return ResponseCode::Refused;
    };
    let now = crate::clock::now();
    if !computer.take_dns_token(now) {
        Counters::add(&counters.dns_refused, 1);
        Counters::add(&counters.dns_rate_limited, 1);
        event(
            shared,
            &computer,
            false,
            Target::Domain(name),
            Reason::RateLimited,
        );
        return ResponseCode::Refused;
    }
    let policy = computer.policy();
    if let Decision::Deny(reason) = policy.decide_name_any_port(&name) {
        Counters::add(&counters.dns_refused, 1);
        event(shared, &computer, false, Target::Domain(name), reason);
        return ResponseCode::Refused;
    }
    let family = match query.query_type() {
        RecordType::A => Family::V4,
        RecordType::AAAA => Family::V6,
        // Allowed, but only addresses are ever looked up: nothing else goes upstream.
        _ => {
            Counters::add(&counters.dns_answered, 1);
            event(
                shared,
                &computer,
                true,
                Target::Domain(name),
                Reason::Allowed,
            );
            return ResponseCode::NoError;
        }
    };
    let resolved = tokio::time::timeout(
        shared.config.dns_upstream_timeout,
        shared.resolver.resolve(&name, family),
    )
    .await
    .unwrap_or_else(|_| Err(ResolveError::Failed("upstream timed out".into())));
    let resolved = match resolved {
        Ok(resolved) => resolved,
        Err(e) => {
            Counters::add(&counters.dns_answered, 1);
            event(
                shared,
                &computer,
                true,
                Target::Domain(name),
                Reason::ResolveFailed,
            );
            return match e {
                ResolveError::NxDomain => ResponseCode::NXDomain,
                ResolveError::Failed(_) => ResponseCode::ServFail,
            };
        }
    };
    let now = crate::clock::now();
    for r in resolved {
        // An allowed name that resolves inside (DNS rebinding) or to a deny-listed address
        // gives no answer for that address; any port decides here, the proxy checks the port.
        match policy.decide_addr(r.ip, 0) {
            Decision::Deny(Reason::Internal) | Decision::Deny(Reason::DenyListed) => continue,
            _ => {}
        }
        let lifetime = record_lifetime(r.ttl, shared.config.min_record_lifetime);
        computer.record(r.ip, &name, now + lifetime, now);
        let ttl = r.ttl.min(shared.config.max_answer_ttl);
        let rdata = match r.ip {
            IpAddr::V4(v4) => RData::A(A(v4)),
            IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
        };
        reply.add_answer(Record::from_rdata(query.name().clone(), ttl, rdata));
    }
    Counters::add(&counters.dns_answered, 1);
    event(
        shared,
        &computer,
        true,
        Target::Domain(name),
        Reason::Allowed,
    );
    ResponseCode::NoError
}

fn event(shared: &Shared, computer: &Computer, allowed: bool, target: Target, reason: Reason) {
    shared.events.record(Event::new(
        computer.id(),
        allowed,
        EventKind::Dns,
        target,
        53,
        reason,
    ));
}
