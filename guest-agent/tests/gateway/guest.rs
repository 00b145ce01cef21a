//! The guest the gateway tests drive: `Ops` with real desktops behind real QUIC on loopback, and
//! the control plane's side of the connection, which issues capability streams and revocations.

use super::*;

fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("guest_agent=debug"))
        .with_test_writer()
        .try_init();
}

/// A guest (`Ops` with real desktops) reachable over QUIC, and the control plane's connection.
pub(super) struct Guest {
    pub(super) ops: Arc<Ops>,
    conn: quinn::Connection,
    runtime: tempfile::TempDir,
    pub(super) home: tempfile::TempDir,
    _server: quinn::Endpoint,
    _client: quinn::Endpoint,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for Guest {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// A TLS 1.3 (ring) QUIC server whose every stream is served by `ops`, and a client trusting it.
async fn quic_pair(
    ops: Arc<Ops>,
) -> Result<(
    quinn::Endpoint,
    quinn::Endpoint,
    quinn::Connection,
    tokio::task::JoinHandle<()>,
)> {
    let ck = rcgen::generate_simple_self_signed(vec!["guest".into()])?;
    let cert: CertificateDer<'static> = ck.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server_tls = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)?;
    let server_cfg = quinn::ServerConfig::with_crypto(Arc::new(
        quinn::crypto::rustls::QuicServerConfig::try_from(server_tls)?,
    ));
    let server = quinn::Endpoint::server(server_cfg, "127.0.0.1:0".parse()?)?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert)?;
    let client_tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut client_cfg = quinn::ClientConfig::new(Arc::new(
        quinn::crypto::rustls::QuicClientConfig::try_from(client_tls)?,
    ));
    let mut transport = quinn::TransportConfig::default();
    transport.keep_alive_interval(Some(Duration::from_secs(2)));
    client_cfg.transport_config(Arc::new(transport));
    let mut client = quinn::Endpoint::client("127.0.0.1:0".parse()?)?;
    client.set_default_client_config(client_cfg);
    let accepting = server.clone();
    let accept = tokio::spawn(async move {
        let Some(incoming) = accepting.accept().await else {
            return;
        };
        let Ok(conn) = incoming.await else { return };
        while let Ok((send, recv)) = conn.accept_bi().await {
            let ops = ops.clone();
            tokio::spawn(async move { ops.serve_stream(send, recv).await });
        }
    });
    let conn = client.connect(server.local_addr()?, "guest")?.await?;
    Ok((server, client, conn, accept))
}

impl Guest {
    pub(super) async fn start(limit: Option<u32>) -> Result<Self> {
        Self::start_with(limit, |_| {}).await
    }

    /// [`Guest::start`] with the gateway's configuration adjusted by `adjust`.
    pub(super) async fn start_with(
        limit: Option<u32>,
        adjust: impl FnOnce(&mut GatewayConfig),
    ) -> Result<Self> {
        init_logging();
        let home = tempfile::tempdir()?;
        let runtime = tempfile::tempdir()?;
        std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o700))?;
        let screens = Arc::new(Screens::new(
            ScreensConfig {
                home: home.path().to_path_buf(),
                runtime_dir: runtime.path().to_path_buf(),
                limit,
                chromium: "/usr/bin/chromium".into(),
                device_scale: None,
            },
            guest_agent::clock::monotonic(),
        ));
        let mut cfg = GatewayConfig::new(runtime.path().to_path_buf(), home.path().to_path_buf());
        adjust(&mut cfg);
        let ops = Arc::new(Ops::with_gateway(Home::new(home.path())?, screens, cfg));
        let (server, client, conn, accept) = quic_pair(ops.clone()).await?;
        Ok(Self {
            ops,
            conn,
            runtime,
            home,
            _server: server,
            _client: client,
            accept,
        })
    }

    /// Tears every desktop down (revoking its capabilities first), as the guest does at exit.
    pub(super) async fn shutdown(self) {
        self.ops.screens().shutdown().await;
    }

    /// Sends `req` on a new stream; returns the first reply and the open stream.
    async fn request(&self, req: &Request) -> Result<(Reply, Stream)> {
        Ok(capstream::request(&self.conn, req, WAIT).await?)
    }

    pub(super) async fn ensure_screen(&self, bot: &str) -> Result<ScreenInfo> {
        let req = Request::ScreenEnsure(ScreenRequest {
            bot: BotId::new(bot)?,
            lease: LeaseToken::parse(&format!("run-{bot}:1"))?,
        });
        match self.request(&req).await?.0 {
            Reply::Screen(info) => Ok(info),
            other => bail!("screen ensure for {bot} answered {other:?}"),
        }
    }

    pub(super) async fn release_screen(&self, bot: &str) -> Result<()> {
        let req = Request::ScreenRelease(ScreenRelease {
            bot: BotId::new(bot)?,
            lease: None,
        });
        match self.request(&req).await?.0 {
            Reply::Released => Ok(()),
            other => bail!("screen release for {bot} answered {other:?}"),
        }
    }

    pub(super) async fn connect(
        &self,
        bot: &str,
        kind: CapabilityKind,
        lease: Option<&str>,
    ) -> Result<Reply> {
        Ok(self.try_connect(bot, kind, lease).await?.0)
    }

    async fn try_connect(
        &self,
        bot: &str,
        kind: CapabilityKind,
        lease: Option<&str>,
    ) -> Result<(Reply, Stream)> {
        self.try_connect_in(bot, kind, lease, StartDir::Home).await
    }

    pub(super) async fn try_connect_in(
        &self,
        bot: &str,
        kind: CapabilityKind,
        lease: Option<&str>,
        start: StartDir,
    ) -> Result<(Reply, Stream)> {
        let req = Request::Connect(ConnectRequest {
            bot: BotId::new(bot)?,
            kind,
            control_lease: lease.map(String::from),
            start,
            terminal: None,
        });
        self.request(&req).await
    }

    /// Opens a terminal kept under `key` (docs/screens.md#reconnecting), or found again by it
    /// when `resume`, and expects `Opened`.
    pub(super) async fn open_keyed(
        &self,
        bot: &str,
        lease: &str,
        key: &str,
        resume: bool,
    ) -> Result<Stream> {
        let req = Request::Connect(ConnectRequest {
            bot: BotId::new(bot)?,
            kind: CapabilityKind::Terminal,
            control_lease: Some(lease.into()),
            start: StartDir::Home,
            terminal: Some(TerminalResume {
                key: key.into(),
                resume,
            }),
        });
        match self.request(&req).await? {
            (Reply::Opened, stream) => Ok(stream),
            (other, _) => bail!("connect terminal {key} for {bot} answered {other:?}"),
        }
    }

    /// Opens a capability and expects `Opened`.
    pub(super) async fn open(
        &self,
        bot: &str,
        kind: CapabilityKind,
        lease: Option<&str>,
    ) -> Result<Stream> {
        match self.try_connect(bot, kind, lease).await? {
            (Reply::Opened, stream) => Ok(stream),
            (other, _) => bail!("connect {} for {bot} answered {other:?}", kind.as_str()),
        }
    }

    pub(super) async fn rfb(&self, bot: &str, kind: CapabilityKind) -> Result<RfbClient<Stream>> {
        let stream = self.open(bot, kind, Some("lease-1")).await?;
        within("the rfb handshake", RfbClient::connect(stream))
            .await?
            .context("rfb handshake through the gateway")
    }

    pub(super) async fn revoke(&self, bot: &str, scope: RevokeScope) -> Result<()> {
        let req = Request::Revoke(RevokeRequest {
            bot: BotId::new(bot)?,
            scope,
        });
        match self.request(&req).await?.0 {
            Reply::Revoked => Ok(()),
            other => bail!("revoke answered {other:?}"),
        }
    }

    /// The bot's live desktop (locked while held).
    pub(super) async fn live(&self, bot: &str) -> Result<guest_agent::screens::LiveScreen> {
        self.ops
            .screens()
            .live(&BotId::new(bot)?)
            .await
            .ok_or_else(|| anyhow!("bot {bot} has no live desktop"))
    }

    /// An X connection to the bot's display, with the cookie the display module wrote.
    pub(super) async fn x_connection(
        &self,
        bot: &str,
    ) -> Result<x11rb::rust_connection::RustConnection> {
        let access = self.live(bot).await?.access();
        Ok(access.connect()?)
    }

    /// The names in the gateway's socket directory.
    pub(super) fn gateway_files(&self) -> Vec<String> {
        let dir = self.runtime.path().join("gateway");
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }
}
