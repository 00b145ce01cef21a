//! The RFB server behind a view or control socket: the desktop's own Xvnc, which serves RFB on a
//! unix socket of its own (see [`crate::display::XServerKind::Xvnc`]), reached through a
//! capability socket that the gateway serves in-process. The gateway uses only
//! [`RfbServer::start`], [`RfbServer::is_alive`], [`RfbServer::stop`] and [`RfbServer::socket`].
//!
//! Each capability keeps its own socket (0600, in the gateway's 0700 directory, named by the
//! table), so revoking it ends exactly its connections and a stale path reaches nothing; every
//! connection accepted there is joined byte for byte to a new connection to the display's Xvnc
//! socket. Nothing here parses RFB: the gateway's relay runs every client byte through the
//! capability's [`super::filter`] before it reaches this socket, and that filter is what makes a
//! view view-only (one Xvnc serves both policies, so there is no per-server view-only flag to add
//! as defence in depth). Xvnc never sends the bot's clipboard to anyone (`-SendCutText=0
//! -SendPrimary=0`), so the server→client stream needs no filter.

use crate::display::DisplayNum;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Why an RFB server could not start.
#[derive(Debug, thiserror::Error)]
pub enum RfbServerError {
    #[error("display {display} serves no rfb socket")]
    NoUpstream { display: DisplayNum },
    #[error("cannot listen on {} for display {display}", path.display())]
    Listen {
        display: DisplayNum,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What to serve and where.
#[derive(Debug, Clone)]
pub struct RfbServerSpec<'a> {
    /// The display served (for messages).
    pub display: DisplayNum,
    /// The display's own RFB socket (Xvnc's `-rfbunixpath`).
    pub upstream: &'a Path,
    /// The capability's socket to listen on (its directory must be private).
    pub socket: &'a Path,
}

/// A capability socket joined to the display's Xvnc. Stop it with [`RfbServer::stop`];
/// dropping a running one ends its connections and removes its socket.
#[derive(Debug)]
pub struct RfbServer {
    socket: PathBuf,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    stopped: bool,
}

impl RfbServer {
    /// Listens on the capability's socket (mode 0600) and returns at once: it accepts from now
    /// on. Refuses a display whose RFB socket is gone (its Xvnc died).
    pub async fn start(spec: &RfbServerSpec<'_>) -> Result<Self, RfbServerError> {
        let display = spec.display;
        if !spec.upstream.exists() {
            return Err(RfbServerError::NoUpstream { display });
        }
        let listen_err = |source| RfbServerError::Listen {
            display,
            path: spec.socket.to_path_buf(),
            source,
        };
        let _ = std::fs::remove_file(spec.socket);
        // The directory is 0700 and ours, so nobody else reaches the socket before the chmod.
        let listener = UnixListener::bind(spec.socket).map_err(listen_err)?;
        if let Err(e) =
            std::fs::set_permissions(spec.socket, std::fs::Permissions::from_mode(0o600))
        {
            let _ = std::fs::remove_file(spec.socket);
            return Err(listen_err(e));
        }
        let cancel = CancellationToken::new();
        let task = tokio::spawn(serve(listener, spec.upstream.to_path_buf(), cancel.clone()));
        // (`display` cannot appear inside tracing's macros: they import a function of that name.)
        let num = display.get();
        tracing::debug!(display = num, socket = %spec.socket.display(), "rfb capability socket listening");
        Ok(Self {
            socket: spec.socket.to_path_buf(),
            cancel,
            task,
            stopped: false,
        })
    }

    /// The socket it listens on.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Whether it still accepts.
    pub fn is_alive(&mut self) -> bool {
        !self.stopped && !self.task.is_finished()
    }

    /// Stops accepting, ends every connection it joined, and removes its socket. Idempotent.
    pub async fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.cancel.cancel();
        let _ = (&mut self.task).await;
        let _ = std::fs::remove_file(&self.socket);
        self.stopped = true;
    }
}

impl Drop for RfbServer {
    fn drop(&mut self) {
        if !self.stopped {
            tracing::warn!(socket = %self.socket.display(), "rfb server dropped without stop");
            self.cancel.cancel();
            self.task.abort();
            let _ = std::fs::remove_file(&self.socket);
        }
    }
}

/// Accepts until cancelled; each connection is joined to a fresh one to `upstream`. Dropping the
/// set on the way out ends every connection still open.
async fn serve(listener: UnixListener, upstream: PathBuf, cancel: CancellationToken) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            () = cancel.cancelled() => break,
            // Reap finished connections so the set does not grow with the server's age.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    connections.spawn(join(client, upstream.clone()));
                }
                Err(error) => {
                    tracing::warn!(%error, "rfb capability socket stopped accepting");
                    break;
                }
            },
        }
    }
    connections.shutdown().await;
}

/// Copies both ways between a client and a new connection to Xvnc until both directions end
/// (each side's end is passed on as a shutdown of the other's write half).
async fn join(mut client: UnixStream, upstream: PathBuf) {
    match UnixStream::connect(&upstream).await {
        Ok(mut server) => {
            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
        }
        Err(error) => {
            // The display went away: the client sees its connection close.
            tracing::debug!(%error, upstream = %upstream.display(), "cannot reach the display's rfb socket");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An echo server standing in for Xvnc.
    fn echo(listener: UnixListener) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        })
    }

    #[tokio::test]
    async fn joins_clients_to_the_display_and_stop_ends_them() {
        let dir = tempfile::tempdir().unwrap();
        let upstream = dir.path().join("xvnc.sock");
        let _echo = echo(UnixListener::bind(&upstream).unwrap());
        let socket = dir.path().join("1-view.sock");
        let display = DisplayNum::new(150).unwrap();
        let mut server = RfbServer::start(&RfbServerSpec {
            display,
            upstream: &upstream,
            socket: &socket,
        })
        .await
        .unwrap();
        assert_eq!(std::fs::metadata(&socket).unwrap().mode() & 0o777, 0o600);
        let mut client = UnixStream::connect(&socket).await.unwrap();
        client.write_all(b"RFB 003.008\n").await.unwrap();
        let mut back = [0u8; 12];
        client.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"RFB 003.008\n");
        assert!(server.is_alive());

        server.stop().await;
        assert!(!server.is_alive());
        assert!(!socket.exists());
        // The joined connection was ended with the server.
        let mut rest = Vec::new();
        assert_eq!(client.read_to_end(&mut rest).await.unwrap_or(0), 0);
    }

    #[tokio::test]
    async fn refuses_a_display_without_its_rfb_socket() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("1-view.sock");
        let err = RfbServer::start(&RfbServerSpec {
            display: DisplayNum::new(150).unwrap(),
            upstream: &dir.path().join("gone.sock"),
            socket: &socket,
        })
        .await
        .unwrap_err();
        assert!(matches!(err, RfbServerError::NoUpstream { .. }), "{err}");
        assert!(!socket.exists());
    }
}
