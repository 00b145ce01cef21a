//! A preview URL's connections (docs/previews.md): one operation stream per TCP connection to a
//! port on the computer's own loopback, bytes relayed both ways.
//!
//! The guest connects from where it runs: inside the computer's network namespace (a contained
//! local computer, a container), so `127.0.0.1` is the computer's loopback and nothing else's;
//! the control plane asks only for computers that have a network of their own. Each direction
//! ends on its own: the client finishing its side shuts the connection's write half (an HTTP/1.0
//! client waiting for the response still gets it), the server closing its side finishes the
//! stream. A reset on either side ends both.

use crate::opstream::{refuse, write_frame};
use gateway_proto::live::PortConnect;
use gateway_proto::{ErrorCode, Op, OpError};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::debug;

/// Most preview connections open at once in one computer: far above what a browser opens per
/// origin (6 for HTTP/1.1), and a bound on the sockets a flood of visits can hold.
pub const MAX_CONNECTIONS: usize = 512;
/// How long connecting to the port may take (loopback answers at once or refuses).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest read from the port.
const CHUNK: usize = 64 * 1024;

/// The preview connections of one guest.
#[derive(Clone, Default)]
pub struct Ports {
    open: Arc<AtomicUsize>,
}

/// A place among [`MAX_CONNECTIONS`]; given back on drop.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Ports {
    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    fn slot(&self) -> Option<Slot> {
        let taken = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_CONNECTIONS).then_some(n + 1)
            })
            .is_ok();
        taken.then(|| Slot(self.open.clone()))
    }

    /// Serves one `PortConnect` stream: connects, answers `Opened` and relays; or refuses.
    pub async fn connect(
        &self,
        mut send: quinn::SendStream,
        mut recv: quinn::RecvStream,
        remainder: Vec<u8>,
        r: PortConnect,
    ) {
        let refused = |code, msg: String| OpError::new(code, msg);
        let Some(slot) = self.slot() else {
            let _ = recv.stop(0u32.into());
            let msg = format!("{MAX_CONNECTIONS} preview connections are open in this computer");
            refuse(send, refused(ErrorCode::Failed, msg)).await;
            return;
        };
        let tcp = match dial(r.port).await {
            Ok(s) => s,
            Err(e) => {
                let _ = recv.stop(0u32.into());
                refuse(send, e).await;
                return;
            }
        };
        if write_frame(&mut send, &PortConnect::reply_frame(()))
            .await
            .is_err()
        {
            return;
        }
        let (mut rd, mut wr) = tcp.into_split();
        let up = async {
            if !remainder.is_empty() && wr.write_all(&remainder).await.is_err() {
                return false;
            }
            loop {
                match recv.read_chunk(CHUNK, true).await {
                    Ok(Some(chunk)) => {
                        if wr.write_all(&chunk.bytes).await.is_err() {
                            return false;
                        }
                    }
                    // The client finished: so does our write half; the response still comes.
                    Ok(None) => {
                        let _ = wr.shutdown().await;
                        return true;
                    }
                    Err(_) => return false,
                }
            }
        };
        let down = async {
            let mut buf = vec![0u8; CHUNK];
            loop {
                match rd.read(&mut buf).await {
                    Ok(0) => return send.finish().is_ok(),
                    Ok(n) => {
                        // Copied at its length: quinn holds a chunk until it is acknowledged.
                        let chunk = bytes::Bytes::copy_from_slice(&buf[..n]);
                        if send.write_chunk(chunk).await.is_err() {
                            return false;
                        }
                    }
                    Err(_) => return false,
                }
            }
        };
        // Both directions run to their ends; a failure on either ends both.
        let clean = {
            tokio::pin!(up, down);
            let (mut up_done, mut down_done) = (false, false);
            while !(up_done && down_done) {
                tokio::select! {
                    ok = &mut up, if !up_done => {
                        up_done = true;
                        if !ok { break; }
                    }
                    ok = &mut down, if !down_done => {
                        down_done = true;
                        if !ok { break; }
                    }
                }
            }
            up_done && down_done
        };
        if !clean {
            let _ = send.reset(0u32.into());
            let _ = recv.stop(0u32.into());
        }
        debug!(port = r.port, "preview connection closed");
        drop(slot);
    }
}

/// Connects to `port` on the loopback: IPv4 first, then IPv6 (a server bound to `::1` only).
async fn dial(port: u16) -> Result<TcpStream, OpError> {
    if port == 0 {
        return Err(OpError::new(
            ErrorCode::BadRequest,
            "port 0 is no port: give 1 to 65535",
        ));
    }
    let mut last = None;
    for ip in [Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()] {
        match tokio::time::timeout(
            CONNECT_TIMEOUT,
            TcpStream::connect(SocketAddr::new(ip, port)),
        )
        .await
        {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Ok(Err(e)) => last = Some(e.to_string()),
            Err(_) => last = Some("timed out".into()),
        }
    }
    Err(OpError::new(
        ErrorCode::NotFound,
        format!(
            "nothing listens on port {port} inside the computer ({})",
            last.unwrap_or_default()
        ),
    ))
}
