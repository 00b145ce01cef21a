//! `GET /v1/tunnel`: the guest tunnel's third carrier, QUIC datagrams in websocket binary
//! messages over the HTTP API's own listener, for guests whose network reaches only the API (443
//! behind TLS, HTTPS-only proxies).
//!
//! No API token: the QUIC handshake inside authenticates the guest with its enrollment token,
//! as over UDP and TCP. The upgraded connection goes to the tunnel's carrier
//! ([`carrier::Carrier::admit_websocket`]), whose connection cap and deadlines apply; it keeps
//! its HTTP connection slot until it closes, like any upgraded connection. Upgrades not yet
//! logged in are capped (`carrier::Limits::max_pending_websockets`, 64; past it 503
//! `tunnel_busy`), so strangers cannot fill the API's connection slots with tunnels.

use super::live::{switching_protocols, websocket_key};
use super::{ApiError, RespBody};
use crate::schema::code::ApiCode;
use hyper::body::Incoming;
use hyper::{Request, Response};
use std::net::SocketAddr;
use tracing::debug;

/// The TCP peer of the HTTP connection a request came on (set by the listener).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Remote(pub SocketAddr);

/// Answers a tunnel websocket upgrade and hands the connection to `carrier` once upgraded.
pub(super) fn upgrade(
    carrier: Option<&carrier::Carrier>,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, ApiError> {
    let Some(carrier) = carrier.cloned() else {
        return Err(ApiError::new(
            ApiCode::TunnelUnavailable,
            "this API does not carry the guest tunnel",
        ));
    };
    let key = websocket_key(&req);
    let Some(key) = key else {
        return Err(ApiError::new(
            ApiCode::BadRequest,
            "GET /v1/tunnel is the guest tunnel's websocket: it needs a websocket upgrade",
        ));
    };
    // Before the 101: a stranger's upgrades that never log in hold HTTP connection slots, so
    // only so many may wait at once (`carrier::Limits::max_pending_websockets`).
    let Some(reservation) = carrier.reserve_websocket() else {
        return Err(ApiError::new(
            ApiCode::TunnelBusy,
            "too many guest tunnels are logging in through the API at once; try again shortly",
        ));
    };
    let peer = req
        .extensions()
        .get::<Remote>()
        .map_or(SocketAddr::from(([0, 0, 0, 0], 0)), |r| r.0);
    tokio::spawn(async move {
        match hyper::upgrade::on(req).await {
            Ok(upgraded) => {
                carrier
                    .admit_websocket(hyper_util::rt::TokioIo::new(upgraded), peer, reservation)
                    .await;
            }
            Err(e) => debug!(%peer, error = %e, "tunnel websocket upgrade failed"),
        }
    });
    Ok(switching_protocols(&key))
}
