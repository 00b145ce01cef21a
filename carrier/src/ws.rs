//! The websocket carrier: the same datagrams, one per binary websocket message, for networks
//! where only the control plane's HTTP API is reachable (443 behind TLS, HTTPS-only proxies).
//!
//! The caller brings the byte stream (the control plane's upgraded HTTP connection, the guest's
//! dialed TCP or TLS connection); this module runs the websocket protocol on it. A message that
//! is not binary, is empty or exceeds [`MAX_DATAGRAM`] closes that websocket alone; pings are
//! answered by the websocket layer and count as traffic.

use crate::frame::{FrameError, HEADER, MAX_DATAGRAM};
use crate::link::{Datagram, LinkEnd, Outbox};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::{Message, WebSocketConfig};
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::WebSocketStream;

/// A byte stream a websocket runs on.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// A websocket carrier connection.
pub(crate) type Ws = WebSocketStream<Box<dyn Io>>;

/// Both ends' websocket bounds: no message or frame larger than a datagram.
pub fn config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(MAX_DATAGRAM))
        .max_frame_size(Some(MAX_DATAGRAM))
}

/// Runs one websocket connection until either direction ends.
pub(crate) async fn run(
    ws: Ws,
    from: SocketAddr,
    outbox: &Outbox,
    inbound: &mpsc::Sender<Datagram>,
    idle: Duration,
) -> LinkEnd {
    let (sink, stream) = ws.split();
    tokio::select! {
        end = read_loop(stream, from, inbound, idle) => end,
        end = write_loop(sink, outbox, idle) => end,
    }
}

async fn read_loop(
    mut stream: futures_util::stream::SplitStream<Ws>,
    from: SocketAddr,
    inbound: &mpsc::Sender<Datagram>,
    idle: Duration,
) -> LinkEnd {
    loop {
        let msg = match tokio::time::timeout(idle, stream.next()).await {
            Err(_) => return LinkEnd::Idle,
            Ok(None) => return LinkEnd::Closed,
            Ok(Some(Err(e))) => return ws_error(e),
            Ok(Some(Ok(msg))) => msg,
        };
        let bytes = match msg {
            Message::Binary(b) if b.is_empty() => return LinkEnd::Frame(FrameError::Empty),
            Message::Binary(b) if b.len() > MAX_DATAGRAM => {
                return LinkEnd::Frame(FrameError::Oversized(b.len()))
            }
            Message::Binary(b) => b,
            Message::Ping(_) | Message::Pong(_) => continue,
            Message::Close(_) => return LinkEnd::Closed,
            Message::Text(_) | Message::Frame(_) => return LinkEnd::Frame(FrameError::NotBinary),
        };
        if inbound.send(Datagram { from, bytes }).await.is_err() {
            return LinkEnd::Closed;
        }
    }
}

fn ws_error(e: WsError) -> LinkEnd {
    match e {
        WsError::ConnectionClosed | WsError::AlreadyClosed => LinkEnd::Closed,
        WsError::Io(e) => LinkEnd::Io(e),
        WsError::Capacity(_) => LinkEnd::Frame(FrameError::Oversized(MAX_DATAGRAM + 1)),
        e => LinkEnd::Io(std::io::Error::other(e)),
    }
}

async fn write_loop(
    mut sink: futures_util::stream::SplitSink<Ws, Message>,
    outbox: &Outbox,
    idle: Duration,
) -> LinkEnd {
    let mut out = Vec::new();
    while outbox.next_batch(&mut out).await {
        let send = async {
            // The outbox holds encoded frames (`[len][datagram]`); each goes as one message.
            let mut rest = &out[..];
            while rest.len() >= HEADER {
                let len = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
                let datagram = Bytes::copy_from_slice(&rest[HEADER..HEADER + len]);
                rest = &rest[HEADER + len..];
                sink.feed(Message::Binary(datagram)).await?;
            }
            sink.flush().await
        };
        match tokio::time::timeout(idle, send).await {
            Err(_) => return LinkEnd::Idle,
            Ok(Err(e)) => return ws_error(e),
            Ok(Ok(())) => {}
        }
    }
    let _ = tokio::time::timeout(idle, sink.close()).await;
    LinkEnd::Closed
}

/// A bare websocket upgrader for tests and tools without an HTTP server: answers every
/// connection's upgrade request on `listener` (any path; a request over 8 KiB or without a
/// `Sec-WebSocket-Key` is dropped) and hands the stream to `carrier`. The control plane
/// upgrades on its HTTP API instead.
pub async fn serve_upgrades(listener: tokio::net::TcpListener, carrier: crate::Carrier) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    while let Ok((mut stream, peer)) = listener.accept().await {
        let carrier = carrier.clone();
        tokio::spawn(async move {
            // Byte by byte, so nothing after the request (the first message) is consumed.
            let mut req = Vec::new();
            while !req.ends_with(b"\r\n\r\n") && req.len() < 8192 {
                match stream.read_u8().await {
                    Ok(b) => req.push(b),
                    Err(_) => return,
                }
            }
            let req = String::from_utf8_lossy(&req).into_owned();
            let Some(reservation) = carrier.reserve_websocket() else {
                return;
            };
            let Some(key) = req.lines().find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("sec-websocket-key")
                    .then(|| value.trim().to_string())
            }) else {
                return;
            };
            let accept =
                tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
            let resp = format!(
                "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\
                 Upgrade: websocket\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
            );
            if stream.write_all(resp.as_bytes()).await.is_ok() {
                carrier.admit_websocket(stream, peer, reservation).await;
            }
        });
    }
}
