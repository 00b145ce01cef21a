//! The explicit HTTP proxy, for clients configured with one (`HTTPS_PROXY`, Chrome's
//! `--proxy-server`): `CONNECT host:port` tunnels and absolute-form `http://` requests.
//!
//! This module owns that front door. It makes the same decisions as the transparent proxy:
//! the computer is found by source address, a name must be allowed on the port by the policy,
//! and the gateway resolves it itself (through the same [`crate::Resolve`], dropping internal
//! and deny-listed addresses and recording the rest for the computer), so the client never
//! picks the address; an address literal is decided as a raw connection would be. A refusal is
//! an HTTP status with the reason in the body: 403 (policy), 429 (connection limit), 502
//! (destination unreachable or unresolvable), 400 (malformed).

use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, HOST};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};

use crate::events::{Event, EventKind, Target};
use crate::gateway::{accept, Shared};
use crate::meter::Metered;
use crate::policy::{normalize_name, Decision};
use crate::proxy::decide_connection;
use crate::registry::{record_lifetime, Computer, ConnectionSlot, Counters};
use crate::resolve::{Family, Resolved};
use crate::Reason;

type Body = BoxBody<Bytes, hyper::Error>;

/// Headers that concern one hop only and are not forwarded.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

pub(crate) async fn serve(shared: Arc<Shared>, listener: TcpListener) -> io::Result<()> {
    loop {
        let (stream, peer) = accept(&listener).await;
        let Some(computer) = shared.directory.computer_for(peer.ip()) else {
            Counters::add(&shared.unknown_peers, 1);
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let timeout = shared.config.http_header_timeout;
            let service = hyper::service::service_fn(move |req| {
                let (shared, computer) = (shared.clone(), computer.clone());
                async move { Ok::<_, Infallible>(handle(shared, computer, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(timeout)
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await;
        });
    }
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)).map_err(|n| match n {}).boxed());
    *response.status_mut() = status;
    response
}

fn refusal(reason: Reason) -> Response<Body> {
    let status = match reason {
        Reason::TooManyConnections => StatusCode::TOO_MANY_REQUESTS,
        Reason::ConnectFailed | Reason::ResolveFailed => StatusCode::BAD_GATEWAY,
        _ => StatusCode::FORBIDDEN,
    };
    text(status, format!("rakazo egress: refused: {reason}\n"))
}

async fn handle(
    shared: Arc<Shared>,
    computer: Arc<Computer>,
    req: Request<Incoming>,
) -> Response<Body> {
    let connect = req.method() == Method::CONNECT;
    let default_port = if connect { 443 } else { 80 };
    let uri = req.uri();
    if !connect && uri.scheme_str() != Some("http") {
        return text(
            StatusCode::BAD_REQUEST,
            "rakazo egress: only CONNECT and http:// requests\n".into(),
        );
    }
    let Some(authority) = uri.authority() else {
        return text(
            StatusCode::BAD_REQUEST,
            "rakazo egress: no host in the request\n".into(),
        );
    };
    let authority = authority.as_str().to_string();
    let host = crate::sniff::host_of(&authority);
    let port = match authority.rsplit_once(':') {
        Some((_, port)) if !port.contains(']') => port.parse().unwrap_or(0),
        _ => default_port,
    };
    if port == 0 {
        return text(StatusCode::BAD_REQUEST, "rakazo egress: bad port\n".into());
    }
    let kind = EventKind::HttpProxy;
    let target = match host.parse::<IpAddr>() {
        Ok(ip) => Target::Ip(crate::policy::canonical(ip)),
        Err(_) => Target::Domain(host.clone()),
    };
    let started = crate::clock::now();
    let deny = |reason: Reason| {
        Counters::add(&computer.counters().connections_denied, 1);
        shared.events.record(Event::new(
            computer.id(),
            false,
            kind,
            target.clone(),
            port,
            reason,
        ));
        refusal(reason)
    };
    let Some(slot) = computer.connection_slot() else {
        Counters::add(&computer.counters().connections_limited, 1);
        return deny(Reason::TooManyConnections);
    };
    let addrs = match destinations(&shared, &computer, &host, port).await {
        Ok(addrs) => addrs,
        Err(reason) => return deny(reason),
    };
    let Some(upstream) = dial_first(&shared, &addrs).await else {
        return deny(Reason::ConnectFailed);
    };
    Counters::add(&computer.counters().connections_allowed, 1);
    let finish = {
        let (shared, computer, target) = (shared.clone(), computer.clone(), target.clone());
        move |up: u64, down: u64| {
            let mut event = Event::new(computer.id(), true, kind, target, port, Reason::Allowed);
            event.bytes_up = up;
            event.bytes_down = down;
            event.duration = crate::clock::now().saturating_duration_since(started);
            shared.events.record(event);
        }
    };
    if connect {
        let idle = shared.config.idle_timeout;
        let config = shared.config.clone();
        // A tunnel to a secret's domain is intercepted as a transparent TLS connection is.
        let intercept = computer.secrets().filter(|set| set.intercepts(&host));
        tokio::spawn(async move {
            let _slot: ConnectionSlot = slot;
            let upgraded = tokio::time::timeout(idle, hyper::upgrade::on(req)).await;
            let (up, down) = match (upgraded, intercept) {
                (Ok(Ok(upgraded)), Some(set)) => {
                    let client = TokioIo::new(upgraded);
                    let c = computer.clone();
                    crate::secrets::intercept(set, host, client, Vec::new(), upstream, c, &config)
                        .await
                        .unwrap_or((0, 0))
                }
                (Ok(Ok(upgraded)), None) => {
                    let mut client = TokioIo::new(upgraded);
                    crate::meter::splice(&mut client, upstream, &[], computer, idle).await
                }
                _ => (0, 0),
            };
            finish(up, down);
        });
        return Response::new(Full::new(Bytes::new()).map_err(|n| match n {}).boxed());
    }
    forward(&shared, computer, slot, upstream, req, authority, finish).await
}

/// The addresses to dial for `host:port`, or why not.
async fn destinations(
    shared: &Shared,
    computer: &Computer,
    host: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, Reason> {
    let policy = computer.policy();
    let now = crate::clock::now();
    if let Ok(ip) = host.parse::<IpAddr>() {
        return match decide_connection(computer, &policy, ip, port, None, now) {
            Decision::Allow => Ok(vec![SocketAddr::new(ip, port)]),
            Decision::Deny(reason) => Err(reason),
        };
    }
    let name = normalize_name(host).ok_or(Reason::InvalidName)?;
    if let Decision::Deny(reason) = policy.decide_name(&name, port) {
        return Err(reason);
    }
    let timeout = shared.config.dns_upstream_timeout;
    let mut resolved: Vec<Resolved> = Vec::new();
    for family in [Family::V4, Family::V6] {
        if let Ok(Ok(found)) =
            tokio::time::timeout(timeout, shared.resolver.resolve(&name, family)).await
        {
            resolved.extend(found);
        }
    }
    let mut addrs = Vec::new();
    for r in resolved {
        if let Decision::Deny(Reason::Internal | Reason::DenyListed) =
            policy.decide_addr(r.ip, port)
        {
            continue;
        }
        let lifetime = record_lifetime(r.ttl, shared.config.min_record_lifetime);
        computer.record(r.ip, &name, now + lifetime, now);
        addrs.push(SocketAddr::new(r.ip, port));
    }
    if addrs.is_empty() {
        return Err(Reason::ResolveFailed);
    }
    Ok(addrs)
}

/// The first of `addrs` that answers within the connect timeout (at most 4 are tried).
async fn dial_first(shared: &Shared, addrs: &[SocketAddr]) -> Option<TcpStream> {
    for addr in addrs.iter().take(4) {
        let dialed =
            tokio::time::timeout(shared.config.connect_timeout, shared.dial.dial(*addr)).await;
        if let Ok(Ok(stream)) = dialed {
            return Some(stream);
        }
    }
    None
}

/// Sends an absolute-form request on its own upstream connection and relays the response.
async fn forward(
    shared: &Shared,
    computer: Arc<Computer>,
    slot: ConnectionSlot,
    upstream: TcpStream,
    req: Request<Incoming>,
    authority: String,
    finish: impl FnOnce(u64, u64) + Send + 'static,
) -> Response<Body> {
    let upstream = Metered::new(upstream, computer);
    let transferred = upstream.transferred();
    let idle = shared.config.idle_timeout;
    let handshake = tokio::time::timeout(
        shared.config.connect_timeout,
        hyper::client::conn::http1::handshake(TokioIo::new(upstream)),
    )
    .await;
    let Ok(Ok((mut sender, connection))) = handshake else {
        finish(transferred.up(), transferred.down());
        return refusal(Reason::ConnectFailed);
    };
    let watch = transferred.clone();
    tokio::spawn(async move {
        let _slot = slot;
        tokio::select! {
            _ = connection => {}
            () = crate::meter::idle(watch.clone(), idle) => {}
        }
        finish(watch.up(), watch.down());
    });
    let (mut parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    parts.uri = path
        .parse::<Uri>()
        .unwrap_or_else(|_| Uri::from_static("/"));
    for name in HOP_BY_HOP {
        parts.headers.remove(name);
    }
    if let Ok(host) = HeaderValue::from_str(&authority) {
        parts.headers.insert(HOST, host);
    }
    let sent =
        tokio::time::timeout(idle, sender.send_request(Request::from_parts(parts, body))).await;
    match sent {
        Ok(Ok(response)) => response.map(|b| b.boxed()),
        _ => refusal(Reason::ConnectFailed),
    }
}
