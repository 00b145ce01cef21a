//! The dialing end: one QUIC connection over one TCP connection.
//!
//! [`ClientSocket::connect`] dials, sends the preamble and runs the connection in a task;
//! [`client_endpoint`] puts a quinn client endpoint on it. Every datagram quinn sends goes to
//! the one server, and every datagram received is reported as coming from the address dialed,
//! which is the address the QUIC connection must be opened to.

use crate::frame::{Decoder, PREAMBLE};
use crate::link::{self, Datagram, LinkDeadlines, LinkEnd, Outbox, Stream};
use crate::{tune_endpoint, Limits, INBOUND_QUEUE};
use quinn::udp::Transmit;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

/// A quinn socket whose datagrams travel over one TCP connection to a carrier server.
#[derive(Debug)]
pub struct ClientSocket {
    local: SocketAddr,
    server: SocketAddr,
    outbox: Arc<Outbox>,
    inbound: Mutex<mpsc::Receiver<Datagram>>,
    /// Set once the connection has ended, with why.
    ended: watch::Receiver<Option<Arc<LinkEnd>>>,
    task: tokio::task::AbortHandle,
}

impl ClientSocket {
    /// Dials `server` and sends the preamble. The caller bounds the wait (a dropped SYN waits
    /// for the kernel's retries).
    pub async fn connect(server: SocketAddr, limits: &Limits) -> io::Result<Arc<Self>> {
        let mut stream = TcpStream::connect(server).await?;
        stream.set_nodelay(true)?;
        stream.write_all(PREAMBLE).await?;
        let local = stream.local_addr()?;
        Ok(Self::spawn(
            Stream::Tcp(stream, Decoder::dialing()),
            local,
            server,
            limits,
        ))
    }

    /// Opens a websocket to `url` (`ws://` or `wss://`: only the request's path and host
    /// matter, the scheme was the caller's to honour) over `stream`, a connection the caller
    /// dialed to `server` (and wrapped in TLS for `wss`), and carries datagrams on it. The
    /// caller bounds the wait.
    pub async fn connect_websocket(
        stream: impl crate::ws::Io,
        url: &str,
        server: SocketAddr,
        local: SocketAddr,
        limits: &Limits,
    ) -> io::Result<Arc<Self>> {
        let boxed: Box<dyn crate::ws::Io> = Box::new(stream);
        let (ws, _) =
            tokio_tungstenite::client_async_with_config(url, boxed, Some(crate::ws::config()))
                .await
                .map_err(io::Error::other)?;
        Ok(Self::spawn(Stream::Ws(Box::new(ws)), local, server, limits))
    }

    fn spawn(stream: Stream, local: SocketAddr, server: SocketAddr, limits: &Limits) -> Arc<Self> {
        let outbox = Arc::new(Outbox::new(limits.queue_bytes));
        let (tx, rx) = mpsc::channel(INBOUND_QUEUE);
        let (ended_tx, ended) = watch::channel(None);
        let deadlines = LinkDeadlines {
            preamble_by: None,
            idle: limits.idle,
        };
        let task = tokio::spawn({
            let outbox = outbox.clone();
            async move {
                let end = link::run_stream(stream, server, &outbox, &tx, deadlines).await;
                tracing::debug!(%server, %end, "carrier connection ended");
                let _ = ended_tx.send(Some(Arc::new(end)));
            }
        })
        .abort_handle();
        Arc::new(Self {
            local,
            server,
            outbox,
            inbound: Mutex::new(rx),
            ended,
            task,
        })
    }

    /// The address dialed: open the QUIC connection to this one.
    pub fn server(&self) -> SocketAddr {
        self.server
    }

    /// Resolves once the TCP connection has ended, with why (`None`: it was aborted by
    /// [`ClientSocket::close`]).
    pub async fn closed(&self) -> Option<Arc<LinkEnd>> {
        let mut ended = self.ended.clone();
        let end = match ended.wait_for(Option::is_some).await {
            Ok(end) => end.clone(),
            Err(_) => None,
        };
        end
    }

    /// Ends the TCP connection now.
    pub fn close(&self) {
        self.task.abort();
    }
}

impl Drop for ClientSocket {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ClientSocket {
    /// Queues a transmit's datagrams for their connection (see `carrier_socket!`).
    fn route(&self, transmit: &Transmit<'_>) {
        link::push_transmit(&self.outbox, transmit);
    }
}

carrier_socket!(ClientSocket);

/// A quinn client endpoint on `socket` (no server role), with the carrier's payload size.
pub fn client_endpoint(socket: Arc<ClientSocket>) -> io::Result<quinn::Endpoint> {
    let mut config = quinn::EndpointConfig::default();
    tune_endpoint(&mut config);
    let runtime = quinn::default_runtime()
        .ok_or_else(|| io::Error::other("no async runtime for the tcp carrier"))?;
    quinn::Endpoint::new_with_abstract_socket(config, None, socket, runtime)
}
