//! The API's listener: accepting connections, what each may hold and for how long, and TLS.
//!
//! HTTP/1.1 (hyper's `http1`): the CLI, scripts and browsers speak it, and websockets are
//! HTTP/1.1 upgrades. Over TLS a client that offers `h2` in ALPN (a browser) gets HTTP/2
//! (hyper's `http2`: header list bounded by `max_header_bytes`, at most 100 streams, a ping every
//! `header_timeout` and closed when unanswered for as long); browsers open websockets on a
//! separate HTTP/1.1 connection, as no extended CONNECT is offered. Per HTTP/1.1 connection:
//! - a request head must arrive whole within `header_timeout`, counted from when the connection
//!   is ready for one: at connect (after the TLS handshake, which has the same bound) and after
//!   each response. A silent, slowloris or idle keep-alive connection is closed after it.
//! - a head larger than `max_header_bytes` is answered 431 and the connection closed (hyper
//!   checks the bound between reads, so a head may overshoot it by one read, at most as much).
//! - a JSON body has its own deadline (`body::JSON_BODY_DEADLINE`, 408).
//!
//! At most `max_connections` connections are open, upgraded websockets included ([`Slots`]).
//! At the cap a new connection displaces the open one that has waited longest for a request
//! head, preferring one that never completed a request: connections that send nothing cannot
//! crowd out clients that do, and a connection in the middle of a request is never displaced.
//! When every connection is mid-request the new one is refused at once (503 when the socket
//! takes it, plain HTTP only). Displacements and refusals are logged as one WARN per 10 s.
//!
//! A client address holds at most `max_connections_per_address` of them, and at that cap competes
//! only with itself (`slots`): one client cannot take every connection from the others. Its
//! connections over that cap are refused with 429 (plain HTTP only) when every one of its own is
//! mid-request.
//!
//! Routing is `super::handle`'s; this module never looks at a request beyond its status.

mod slots;

use super::{handle, Api, RespBody};
use crate::schema::code::ApiCode;
use crate::schema::error::{ErrorBody, ErrorInfo};
use anyhow::{bail, Result};
use clap::Args;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use hyper::StatusCode;
use hyper_util::rt::{TokioIo, TokioTimer};
use slots::{Peer, Refused, SlotGuard, SlotMark, Slots};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// Default of `--http-header-timeout-secs`.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(15);
/// Default of `--http-max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default of `--http-max-connections-per-address`: a quarter of the server's.
pub const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: usize = 256;
/// Default of `--http-max-header-bytes`: far above any head the API needs (a bearer token, a
/// few short headers), far below hyper's default of about 400 KiB.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 64 << 10;
/// hyper's floor for its read buffer, hence for a head.
const MIN_HEADER_BYTES: usize = 8 << 10;
/// How often displacements, refusals and accept failures are reported, at most.
const WARN_EVERY: Duration = Duration::from_secs(10);
/// Pause after a failed accept (out of file descriptors, say), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// `rakazo serve` flags of the HTTP listener.
#[derive(Debug, Clone, Args)]
pub struct HttpArgs {
    /// Seconds a client has to send a request's head (request line and headers), counted from
    /// connecting and from the end of the previous response: it also closes idle keep-alive
    /// connections, and bounds a TLS handshake.
    #[arg(long, env = "RAKAZO_HTTP_HEADER_TIMEOUT_SECS",
          default_value_t = DEFAULT_HEADER_TIMEOUT.as_secs())]
    pub http_header_timeout_secs: u64,
    /// Most HTTP connections open at once (live websockets included). At the cap, the
    /// connection waiting longest for a request is closed for the new one.
    #[arg(long, env = "RAKAZO_HTTP_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub http_max_connections: usize,
    /// Most HTTP connections one client address (an IPv4 address, an IPv6 /64) holds at once.
    /// At this cap a new one displaces the address's own connection waiting longest for a
    /// request, and is refused (429) when all of them are mid-request.
    /// Unset: 256, or the connection cap when that is lower.
    #[arg(long, env = "RAKAZO_HTTP_MAX_CONNECTIONS_PER_ADDRESS")]
    pub http_max_connections_per_address: Option<usize>,
    /// Largest request head in bytes (checked between reads: one read's worth of slack); a
    /// larger one is answered 431.
    #[arg(long, env = "RAKAZO_HTTP_MAX_HEADER_BYTES", default_value_t = DEFAULT_MAX_HEADER_BYTES)]
    pub http_max_header_bytes: usize,
    /// PEM certificate chain: serve the API (and capability URLs) over https. Needs --tls-key.
    #[arg(long, env = "RAKAZO_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert; it must be private (mode 0600, ours).
    #[arg(long, env = "RAKAZO_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

impl HttpArgs {
    /// Range-checks the flags.
    pub fn resolve(&self) -> Result<HttpConfig> {
        if !(1..=3600).contains(&self.http_header_timeout_secs) {
            bail!(
                "the HTTP header timeout must be 1..=3600 seconds, got {}",
                self.http_header_timeout_secs
            );
        }
        if !(1..=1_000_000).contains(&self.http_max_connections) {
            bail!(
                "the HTTP connection cap must be 1..=1000000, got {}",
                self.http_max_connections
            );
        }
        let per_address = match self.http_max_connections_per_address {
            None => DEFAULT_MAX_CONNECTIONS_PER_ADDRESS.min(self.http_max_connections),
            Some(n) if (1..=self.http_max_connections).contains(&n) => n,
            Some(n) => bail!(
                "the HTTP connections per address must be 1..={} (the connection cap), got {n}",
                self.http_max_connections
            ),
        };
        if !(MIN_HEADER_BYTES..=16 << 20).contains(&self.http_max_header_bytes) {
            bail!(
                "the largest HTTP head must be {MIN_HEADER_BYTES}..={} bytes, got {}",
                16 << 20,
                self.http_max_header_bytes
            );
        }
        Ok(HttpConfig {
            header_timeout: Duration::from_secs(self.http_header_timeout_secs),
            max_connections: self.http_max_connections,
            max_connections_per_address: per_address,
            max_header_bytes: self.http_max_header_bytes,
            tls: match (&self.tls_cert, &self.tls_key) {
                (Some(cert), Some(key)) => Some(TlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                }),
                (None, None) => None,
                _ => bail!("--tls-cert and --tls-key go together"),
            },
        })
    }
}

/// The listener's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    pub header_timeout: Duration,
    pub max_connections: usize,
    pub max_connections_per_address: usize,
    pub max_header_bytes: usize,
    /// Serve https with these files (loaded and checked by `serve`).
    pub tls: Option<TlsFiles>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_address: DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            tls: None,
        }
    }
}

/// The API's certificate chain and key, PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What every connection task needs.
struct Server {
    api: Arc<Api>,
    header_timeout: Duration,
    max_header_bytes: usize,
    tls: Option<TlsAcceptor>,
}

/// Serves the API on `listener` until the process ends; `tls` makes it https.
pub async fn serve(
    listener: TcpListener,
    api: Arc<Api>,
    config: &HttpConfig,
    tls: Option<Arc<rustls::ServerConfig>>,
) {
    let slots = Arc::new(Slots::new(
        config.max_connections,
        config.max_connections_per_address,
    ));
    tokio::spawn(slots::report(slots.clone()));
    let server = Arc::new(Server {
        api,
        header_timeout: config.header_timeout,
        max_header_bytes: config.max_header_bytes,
        tls: tls.map(TlsAcceptor::from),
    });
    loop {
        let (stream, remote) = match listener.accept().await {
            Ok(v) => v,
            Err(e) => {
                debug!(error = %e, "accept failed");
                slots.accept_failed(&e);
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let (slot, cancel) = match slots.admit(Peer::of(remote.ip())) {
            Ok(v) => v,
            Err(why) => {
                refuse(&stream, server.tls.is_some(), why);
                continue;
            }
        };
        // Small NDJSON lines (an exec's `exit`) must not wait for the client's delayed ACK:
        // with Nagle on, each one stalled about 40 ms (BENCHMARKS.md).
        if let Err(e) = stream.set_nodelay(true) {
            debug!(%remote, error = %e, "cannot set TCP_NODELAY");
        }
        tokio::spawn(connection(server.clone(), stream, remote, slot, cancel));
    }
}

/// A whole HTTP/1.1 response with a JSON error body, for answers written before (or instead
/// of) hyper: a connection over the cap, plain HTTP on the https port.
fn raw_error(code: ApiCode, message: &str) -> Vec<u8> {
    let status = hyper::StatusCode::from_u16(code.status())
        .map(|s| {
            format!(
                "{} {}",
                s.as_u16(),
                s.canonical_reason().unwrap_or_default()
            )
        })
        .unwrap_or_default();
    let body = ErrorBody {
        error: ErrorInfo {
            code: code.as_str().to_string(),
            message: message.to_string(),
            uncertain: false,
        },
    };
    // Strings only: serializing cannot fail.
    let body = serde_json::to_string(&body).unwrap_or_default();
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\nconnection: close\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Closes a connection over a cap, answering first on plain HTTP when the socket takes it at
/// once (never waiting: the point is to spend nothing on it): 503 at the server's cap, 429 at
/// the address's.
fn refuse(stream: &TcpStream, tls: bool, why: Refused) {
    if tls {
        return;
    }
    let answer = match why {
        Refused::Full => raw_error(
            ApiCode::ServerBusy,
            "every HTTP connection of the control plane is in use; try again shortly",
        ),
        Refused::PeerFull => raw_error(
            ApiCode::TooManyConnections,
            "this address holds the most HTTP connections one address may, every one \
             mid-request; finish or close some first",
        ),
    };
    let _ = stream.try_write(&answer);
}

/// One connection, from the TLS handshake to its end; dropped at once when displaced.
async fn connection(
    server: Arc<Server>,
    stream: TcpStream,
    remote: SocketAddr,
    slot: SlotGuard,
    displaced: CancellationToken,
) {
    let mark = slot.mark();
    let work = async {
        let mut h2 = false;
        let stream = match &server.tls {
            None => Stream::Plain(stream),
            Some(acceptor) => {
                match tokio::time::timeout(server.header_timeout, tls_accept(acceptor, stream))
                    .await
                {
                    Ok(Ok(s)) => {
                        h2 = s.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
                        Stream::Tls(Box::new(s))
                    }
                    Ok(Err(e)) => {
                        debug!(%remote, error = %e, "tls handshake failed");
                        return;
                    }
                    Err(_) => {
                        debug!(%remote, "tls handshake timed out");
                        return;
                    }
                }
            }
        };
        // The slot travels with the socket: an upgraded websocket keeps it until it closes.
        let io = TokioIo::new(Admitted {
            stream,
            _slot: slot,
        });
        let api = server.api.clone();
        let svc = hyper::service::service_fn(move |mut req: hyper::Request<_>| {
            let api = api.clone();
            let mark = mark.clone();
            req.extensions_mut()
                .insert(super::tunnel_ws::Remote(remote));
            async move {
                mark.busy();
                let resp = handle(api, req).await;
                // A websocket stays busy for good, and so does an HTTP/2 connection (its
                // streams overlap); any other response makes the connection wait for its next
                // request once the body is sent (or dropped).
                Ok::<_, Infallible>(if resp.status() == StatusCode::SWITCHING_PROTOCOLS || h2 {
                    resp
                } else {
                    resp.map(|body| BodyExt::boxed(Answering { body, mark }))
                })
            }
        });
        if h2 {
            let mut builder =
                hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
            builder
                .timer(TokioTimer::new())
                .max_header_list_size(u32::try_from(server.max_header_bytes).unwrap_or(u32::MAX))
                .max_concurrent_streams(100)
                .keep_alive_interval(Some(server.header_timeout))
                .keep_alive_timeout(server.header_timeout);
            if let Err(e) = builder.serve_connection(io, svc).await {
                debug!(%remote, error = %e, "http/2 connection ended with an error");
            }
            return;
        }
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(server.header_timeout)
            .max_buf_size(server.max_header_bytes);
        if let Err(e) = builder.serve_connection(io, svc).with_upgrades().await {
            debug!(%remote, error = %e, "http connection ended with an error");
        }
    };
    tokio::select! {
        () = work => {}
        () = displaced.cancelled() => {
            debug!(%remote, "http connection closed for a new one (connection cap)");
        }
    }
}

/// A TLS handshake; plain HTTP (anything but a TLS handshake record first) is told to use
/// https, then closed.
async fn tls_accept(
    acceptor: &TlsAcceptor,
    mut stream: TcpStream,
) -> std::io::Result<TlsStream<TcpStream>> {
    // A TLS connection opens with a handshake record (content type 22).
    let mut first = [0u8; 1];
    if stream.peek(&mut first).await? == 1 && first[0] != 0x16 {
        // Read the request before answering and drain after: closing a socket with unread
        // input resets it, and the client could lose the answer.
        let mut head = vec![0u8; 16 << 10];
        let _ = stream.read(&mut head).await?;
        let answer = raw_error(
            ApiCode::HttpsRequired,
            "this API is served over TLS: use an https:// URL",
        );
        stream.write_all(&answer).await?;
        stream.shutdown().await?;
        let mut drained = 0usize;
        while drained < 1 << 20 {
            match stream.read(&mut head).await? {
                0 => break,
                n => drained += n,
            }
        }
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "plain HTTP on the https port",
        ));
    }
    acceptor.accept(stream).await
}

/// The socket under hyper: plain or TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// An admitted connection's socket, holding its slot until it is dropped.
struct Admitted {
    stream: Stream,
    _slot: SlotGuard,
}

impl AsyncRead for Admitted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Admitted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// A response body that, once sent or dropped, marks its connection as waiting for a request.
struct Answering {
    body: RespBody,
    mark: SlotMark,
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.mark.waiting();
    }
}

impl Body for Answering {
    type Data = bytes::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_range_checked() {
        let args = HttpArgs {
            http_header_timeout_secs: 15,
            http_max_connections: 1024,
            http_max_connections_per_address: None,
            http_max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            tls_cert: None,
            tls_key: None,
        };
        assert_eq!(args.resolve().unwrap(), HttpConfig::default());
        let zero_timeout = HttpArgs {
            http_header_timeout_secs: 0,
            ..args.clone()
        };
        assert!(zero_timeout.resolve().is_err());
        let tiny_head = HttpArgs {
            http_max_header_bytes: 4096,
            ..args.clone()
        };
        let err = tiny_head.resolve().unwrap_err().to_string();
        assert!(err.contains("8192"), "{err}");
        let no_cap = HttpArgs {
            http_max_connections: 0,
            ..args.clone()
        };
        assert!(no_cap.resolve().is_err());
        let over = HttpArgs {
            http_max_connections: 8,
            http_max_connections_per_address: Some(9),
            ..args.clone()
        };
        assert!(over.resolve().is_err());
        let small = HttpArgs {
            http_max_connections: 8,
            ..args.clone()
        };
        assert_eq!(
            small.resolve().unwrap().max_connections_per_address,
            8,
            "unset, the share follows a lower connection cap"
        );
    }
}
