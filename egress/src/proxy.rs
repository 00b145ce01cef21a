//! The transparent proxy: every TCP connection a computer opens arrives here, DNAT-redirected.
//!
//! This module owns the per-connection path. For one connection, in order:
//!
//! 1. the computer is found by the source address (none: closed);
//! 2. the original destination is read ([`crate::OriginalDst`]);
//! 3. a connection slot is taken (at [`crate::Limits::max_connections`]: refused);
//! 4. an internal or deny-listed destination address is refused before any byte is read;
//! 5. the first bytes are read, for at most `peek_timeout` and [`MAX_PEEK`] bytes, until they
//!    hold a TLS ClientHello or an HTTP request head, whose SNI or Host is the name;
//! 6. [`decide_connection`]: with a name, the name must be allowed on this port AND the address
//!    must be one the name resolved to for this computer through the gateway's DNS, or one the
//!    policy allows by itself (a CIDR rule, or any public address under `open`); without a
//!    name, the address must be allowed by itself or have been resolved from some name allowed
//!    on this port;
//! 7. the destination is dialed (with `connect_timeout`), the bytes read so far are sent, and the
//!    two sides are spliced, metered and bandwidth-limited ([`crate::meter`]) until both close or
//!    the connection idles for `idle_timeout`.
//!
//! A refused plain-HTTP connection gets a `403` naming the reason; others are closed.
//!
//! What the name check cannot do: the name is read once, from the first bytes. A client that
//! sends no SNI, or a second HTTP request with another Host on the same connection, is held to
//! the address check alone (an address an allowed name resolved to, or allowed by a rule), so
//! on an address shared by allowed and denied names (a CDN) it reaches what that address serves.
//! A silent client (a protocol where the server speaks first) waits `peek_timeout` and is then
//! decided by address.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::events::{Event, EventKind, Target};
use crate::gateway::{accept, Shared};
use crate::policy::{canonical, Decision, Policy};
use crate::registry::{Computer, Counters};
use crate::sniff::{sniff, Proto, Sniffed, MAX_PEEK};
use crate::Reason;

pub(crate) async fn serve(shared: Arc<Shared>, listener: TcpListener) -> io::Result<()> {
    loop {
        let (stream, peer) = accept(&listener).await;
        let shared = shared.clone();
        tokio::spawn(async move { handle(shared, stream, peer).await });
    }
}

/// What a connection is decided on: its name if one was seen, else its address.
pub fn decide_connection(
    computer: &Computer,
    policy: &Policy,
    ip: IpAddr,
    port: u16,
    name: Option<&str>,
    now: Instant,
) -> Decision {
    let ip = canonical(ip);
    let by_addr = policy.decide_addr(ip, port);
    if let Decision::Deny(reason @ (Reason::Internal | Reason::DenyListed)) = by_addr {
        return Decision::Deny(reason);
    }
    match name {
        Some(name) => match policy.decide_name(name, port) {
            Decision::Deny(reason) => Decision::Deny(reason),
            Decision::Allow if by_addr.is_allowed() => Decision::Allow,
            Decision::Allow => {
                let name = name.strip_suffix('.').unwrap_or(name);
                if computer
                    .names_for(ip, now)
                    .iter()
                    .any(|n| n.eq_ignore_ascii_case(name))
                {
                    Decision::Allow
                } else {
                    Decision::Deny(Reason::NotResolved)
                }
            }
        },
        None if by_addr.is_allowed() => Decision::Allow,
        None => {
            let names = computer.names_for(ip, now);
            if names
                .iter()
                .any(|n| policy.decide_name(n, port).is_allowed())
            {
                Decision::Allow
            } else if names.is_empty() {
                match by_addr {
                    Decision::Deny(Reason::NotAllowed) => Decision::Deny(Reason::NotResolved),
                    other => other,
                }
            } else {
                Decision::Deny(Reason::NotAllowed)
            }
        }
    }
}

async fn handle(shared: Arc<Shared>, mut stream: TcpStream, peer: SocketAddr) {
    let started = crate::clock::now();
    let Some(computer) = shared.directory.computer_for(peer.ip()) else {
        Counters::add(&shared.unknown_peers, 1);
        return;
    };
    let dst = match shared.original_dst.original_dst(&stream) {
        Ok(dst) => dst,
        Err(e) => {
            tracing::warn!(computer = %computer.id(), error = %e, "egress: no original destination");
            return;
        }
    };
    let (ip, port) = (canonical(dst.ip()), dst.port());
    let deny = |target: Target, reason: Reason| {
        Counters::add(&computer.counters().connections_denied, 1);
        let event = Event::new(
            computer.id(),
            false,
            EventKind::Connection,
            target,
            port,
            reason,
        );
        shared.events.record(event);
    };
    let Some(_slot) = computer.connection_slot() else {
        Counters::add(&computer.counters().connections_limited, 1);
        deny(Target::Ip(ip), Reason::TooManyConnections);
        return;
    };
    if let Decision::Deny(reason @ (Reason::Internal | Reason::DenyListed)) =
        computer.policy().decide_addr(ip, port)
    {
        deny(Target::Ip(ip), reason);
        return;
    }
    let (head, sniffed) = peek(&mut stream, &shared).await;
    let (proto, name) = match sniffed {
        Sniffed::Done { proto, name } => (proto, name),
        Sniffed::NeedMore => (Proto::Other, None),
        Sniffed::Conflict => {
            refuse_http(&mut stream, Reason::NotAllowed).await;
            deny(Target::Ip(ip), Reason::NotAllowed);
            return;
        }
    };
    let target = name.clone().map_or(Target::Ip(ip), Target::Domain);
    let policy = computer.policy();
    let now = crate::clock::now();
    if let Decision::Deny(reason) =
        decide_connection(&computer, &policy, ip, port, name.as_deref(), now)
    {
        if proto == Proto::Http {
            refuse_http(&mut stream, reason).await;
        }
        deny(target, reason);
        return;
    }
    let dialed = tokio::time::timeout(shared.config.connect_timeout, shared.dial.dial(dst)).await;
    let Ok(Ok(upstream)) = dialed else {
        if proto == Proto::Http {
            refuse_http(&mut stream, Reason::ConnectFailed).await;
        }
        deny(target, Reason::ConnectFailed);
        return;
    };
    Counters::add(&computer.counters().connections_allowed, 1);
    let idle = shared.config.idle_timeout;
    let secrets = computer.secrets();
    let intercepted = match (proto, &name, secrets) {
        (Proto::Tls, Some(name), Some(set)) if set.intercepts(name) => Some((name.clone(), set)),
        _ => None,
    };
    let (up, down) = match intercepted {
        Some((name, set)) => {
            let c = computer.clone();
            crate::secrets::intercept(set, name, stream, head, upstream, c, &shared.config)
                .await
                .unwrap_or_else(|e| {
                    tracing::info!(computer = %computer.id(), error = %e, "egress: interception failed");
                    (0, 0)
                })
        }
        None => crate::meter::splice(&mut stream, upstream, &head, computer.clone(), idle).await,
    };
    let mut event = Event::new(
        computer.id(),
        true,
        EventKind::Connection,
        target,
        port,
        Reason::Allowed,
    );
    event.bytes_up = up;
    event.bytes_down = down;
    event.duration = crate::clock::now().saturating_duration_since(started);
    shared.events.record(event);
}

/// Reads the connection's first bytes until they name a destination, [`MAX_PEEK`] bytes, the
/// end of the stream or `peek_timeout`, whichever comes first.
async fn peek(stream: &mut TcpStream, shared: &Shared) -> (Vec<u8>, Sniffed) {
    let deadline = tokio::time::Instant::now() + shared.config.peek_timeout;
    let mut buf = Vec::with_capacity(2048);
    loop {
        let read = tokio::time::timeout_at(deadline, stream.read_buf(&mut buf)).await;
        match read {
            Ok(Ok(n)) if n > 0 => {}
            _ => return (buf, Sniffed::NeedMore),
        }
        match sniff(&buf) {
            Sniffed::NeedMore if buf.len() < MAX_PEEK => continue,
            Sniffed::NeedMore => {
                return (
                    buf,
                    Sniffed::Done {
                        proto: Proto::Other,
                        name: None,
                    },
                )
            }
            done => return (buf, done),
        }
    }
}

async fn refuse_http(stream: &mut TcpStream, reason: Reason) {
    let body = format!("rakazo egress: refused: {reason}\n");
    let reply = format!(
        "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let deadline = std::time::Duration::from_secs(2);
    let _ = tokio::time::timeout(deadline, stream.write_all(reply.as_bytes())).await;
    let _ = tokio::time::timeout(deadline, stream.shutdown()).await;
}
