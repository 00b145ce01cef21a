//! The fake control plane: a `Harness` running the real guest tunnel against a quinn endpoint
//! (over UDP, the TCP carrier or the websocket), its control stream, and operation sessions.

use super::*;

/// What the fake control plane listens on.
#[derive(Clone, Copy)]
pub(super) enum Over {
    Udp,
    /// The TCP carrier only (UDP never answers).
    Tcp,
    /// The websocket carrier only (UDP never answers, TCP refuses).
    Ws,
    /// Nothing at the guest's primary address (UDP never answers, TCP refuses): the endpoint
    /// is the first other replica (`RAKAZO_CONTROL_ADDRS`).
    DeadPrimary,
}

/// A fake control plane and the real guest dialing it.
pub(super) struct Harness {
    pub(super) endpoint: quinn::Endpoint,
    /// Over TCP or the websocket: the carrier under `endpoint`.
    pub(super) carrier: Option<carrier::Carrier>,
    /// The UDP socket the guest is told to dial when that never answers (as where a network
    /// drops UDP, or the control plane is gone).
    black_hole: Option<std::net::UdpSocket>,
    /// More control-plane replicas (QUIC on UDP, same certificate), named in
    /// `RAKAZO_CONTROL_ADDRS` in this order, after `endpoint` when that is a replica too.
    pub(super) replicas: Vec<quinn::Endpoint>,
    pub(super) home: PathBuf,
    pub(super) token: String,
    pub(super) guest: tokio::task::JoinHandle<Result<()>>,
    _home_dir: tempfile::TempDir,
}

impl Harness {
    /// Starts a fake control plane and a guest that pins its certificate.
    pub(super) async fn start() -> Result<Self> {
        Self::start_pinning(None).await
    }

    /// Starts a fake control plane and a guest pinning `fingerprint` (default: the server's).
    pub(super) async fn start_pinning(fingerprint: Option<String>) -> Result<Self> {
        Self::start_with(fingerprint, Over::Udp, 0).await
    }

    /// Starts a fake control plane on the TCP carrier only, and a guest whose UDP address
    /// never answers.
    pub(super) async fn start_over_tcp() -> Result<Self> {
        Self::start_with(None, Over::Tcp, 0).await
    }

    /// Starts a fake control plane taking websockets only, and a guest whose UDP address never
    /// answers and whose TCP address refuses.
    pub(super) async fn start_over_ws() -> Result<Self> {
        Self::start_with(None, Over::Ws, 0).await
    }

    /// Starts a fake control plane as `over` says, `replicas` more on UDP, and the guest.
    pub(super) async fn start_with(
        fingerprint: Option<String>,
        over: Over,
        replicas: usize,
    ) -> Result<Self> {
        init_logging();
        let (cert, key, real_fingerprint) = identity()?;
        let black_hole = || -> Result<_> {
            let black_hole = std::net::UdpSocket::bind("127.0.0.1:0")?;
            black_hole.set_nonblocking(true)?;
            Ok((black_hole.local_addr()?, black_hole))
        };
        // A port nothing listens on: the TCP carrier is refused.
        let dead_tcp = || -> Result<SocketAddr> {
            Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
        };
        let mut other_addrs = Vec::new();
        let (endpoint, carrier, black_hole, udp_addr, tcp_addr, ws_addr) = match over {
            Over::Tcp => {
                let (endpoint, carrier) = tcp_server(cert.clone(), key.clone_key()).await?;
                let (udp_addr, black_hole) = black_hole()?;
                let tcp_addr = endpoint.local_addr()?;
                (
                    endpoint,
                    Some(carrier),
                    Some(black_hole),
                    udp_addr,
                    tcp_addr,
                    None,
                )
            }
            Over::Ws => {
                let (endpoint, carrier, ws_addr) = ws_server(cert.clone(), key.clone_key()).await?;
                let (udp_addr, black_hole) = black_hole()?;
                (
                    endpoint,
                    Some(carrier),
                    Some(black_hole),
                    udp_addr,
                    dead_tcp()?,
                    Some(ws_addr),
                )
            }
            Over::Udp => {
                let endpoint = server(cert.clone(), key.clone_key())?;
                let addr: SocketAddr = endpoint.local_addr()?;
                (endpoint, None, None, addr, addr, None)
            }
            Over::DeadPrimary => {
                let endpoint = server(cert.clone(), key.clone_key())?;
                other_addrs.push(endpoint.local_addr()?);
                let (udp_addr, black_hole) = black_hole()?;
                (
                    endpoint,
                    None,
                    Some(black_hole),
                    udp_addr,
                    dead_tcp()?,
                    None,
                )
            }
        };
        let replicas = (0..replicas)
            .map(|_| server(cert.clone(), key.clone_key()))
            .collect::<Result<Vec<_>>>()?;
        for r in &replicas {
            other_addrs.push(r.local_addr()?);
        }
        let home_dir = tempfile::tempdir()?;
        let token = hex::encode(rand::random::<[u8; 16]>());
        let mut env: HashMap<String, String> = HashMap::from([
            ("RAKAZO_CONTROL_ADDR".into(), udp_addr.to_string()),
            ("RAKAZO_CONTROL_TCP_ADDR".into(), tcp_addr.to_string()),
            (
                "RAKAZO_CONTROL_CERT_SHA256".into(),
                fingerprint.unwrap_or(real_fingerprint),
            ),
            ("RAKAZO_COMPUTER_ID".into(), COMPUTER_ID.into()),
            ("RAKAZO_ENROLL_TOKEN".into(), token.clone()),
            ("RAKAZO_HOME".into(), home_dir.path().display().to_string()),
        ]);
        if !other_addrs.is_empty() {
            let list: Vec<String> = other_addrs.iter().map(|a| a.to_string()).collect();
            env.insert("RAKAZO_CONTROL_ADDRS".into(), list.join(","));
        }
        if let Some(ws_addr) = ws_addr {
            env.insert(
                "RAKAZO_CONTROL_WS_URL".into(),
                format!("http://{ws_addr}/v1/tunnel"),
            );
        }
        let config = Config::from_source(&env)?;
        // No desktop is started by these tests; the screens manager only needs its settings.
        let screens = Arc::new(guest_agent::screens::Screens::new(
            guest_agent::screens::ScreensConfig {
                home: home_dir.path().to_path_buf(),
                runtime_dir: config.runtime_dir.clone(),
                limit: None,
                chromium: config.chromium.clone(),
                device_scale: None,
            },
            guest_agent::clock::monotonic(),
        ));
        let ops = Arc::new(Ops::new(Home::new(home_dir.path())?, screens));
        let guest = tokio::spawn(guest_agent::tunnel::run(config, ops));
        Ok(Self {
            endpoint,
            carrier,
            black_hole,
            replicas,
            home: std::fs::canonicalize(home_dir.path())?,
            token,
            guest,
            _home_dir: home_dir,
        })
    }

    /// Accepts the guest's next connection and completes the hello, accepting its credentials.
    pub(super) async fn accept(&self) -> Result<Session> {
        self.accept_on(&self.endpoint).await
    }

    /// [`Harness::accept`] on `endpoint` (one of the replicas).
    pub(super) async fn accept_on(&self, endpoint: &quinn::Endpoint) -> Result<Session> {
        let incoming = within("the guest to dial", endpoint.accept())
            .await?
            .ok_or_else(|| anyhow!("server endpoint closed"))?;
        let conn = within("the QUIC handshake", incoming).await??;
        let (mut send, mut recv) = within("the control stream", conn.accept_bi()).await??;
        let mut hs = ControlHandshake::new();
        let event = loop {
            let chunk = within("the hello", recv.read_chunk(4096, true))
                .await??
                .ok_or_else(|| anyhow!("control stream ended before the hello"))?;
            if let Some(event) = hs.handle_bytes(&chunk.bytes) {
                break event;
            }
        };
        match event {
            HandshakeEvent::Authenticate {
                computer_id, token, ..
            } => {
                ensure!(computer_id == COMPUTER_ID, "hello from {computer_id}");
                ensure!(token.expose() == self.token, "hello with the wrong token");
            }
            HandshakeEvent::Failed(reason) => bail!("the guest's hello failed: {reason}"),
        }
        hs.accept();
        while let Some(frame) = hs.poll_transmit() {
            send.write_all(&frame).await?;
        }
        let mut decoder = FrameDecoder::with_max(64 * 1024);
        decoder.push(&hs.into_remainder());
        Ok(Session {
            conn,
            control: Control {
                send,
                recv,
                decoder,
                seq: 0,
            },
        })
    }
}

impl Harness {
    /// Datagrams the guest sent to its (never answering) UDP address since the last call.
    pub(super) fn udp_datagrams(&self) -> Result<usize> {
        let black_hole = self.black_hole.as_ref().context("no black hole")?;
        let mut buf = [0u8; 2048];
        let mut n = 0;
        loop {
            match black_hole.recv_from(&mut buf) {
                Ok(_) => n += 1,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(n),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.guest.abort();
    }
}

/// The control plane's end of the control stream.
pub(super) struct Control {
    pub(super) send: quinn::SendStream,
    pub(super) recv: quinn::RecvStream,
    pub(super) decoder: FrameDecoder,
    seq: u64,
}

impl Control {
    async fn send(&mut self, msg: &ControlMsg) -> Result<()> {
        self.send.write_all(&encode(msg)?).await?;
        Ok(())
    }

    /// Pings the guest on the control stream and waits for its pong: everything sent before
    /// has been handled.
    pub(super) async fn sync(&mut self) -> Result<()> {
        self.seq += 1;
        let seq = self.seq;
        self.send(&ControlMsg::Ping { seq }).await?;
        loop {
            match self.decoder.next_message::<ControlMsg>()? {
                Some(ControlMsg::Pong { seq: got }) if got == seq => return Ok(()),
                Some(_) => continue,
                None => {}
            }
            let chunk = within("the control pong", self.recv.read_chunk(64 * 1024, true))
                .await??
                .ok_or_else(|| anyhow!("control stream ended"))?;
            self.decoder.push(&chunk.bytes);
        }
    }

    /// Pushes a lease grant (`Some`) or release (`None`) and waits until the guest applied it.
    pub(super) async fn push_lease(&mut self, bot: &str, lease: Option<&str>) -> Result<()> {
        let lease = lease.map(LeaseToken::parse).transpose()?;
        self.send(&ControlMsg::Lease {
            bot: BotId::new(bot)?,
            lease,
        })
        .await?;
        self.sync().await
    }
}

/// One accepted guest connection.
pub(super) struct Session {
    pub(super) conn: quinn::Connection,
    pub(super) control: Control,
}

/// The outcome of reading an operation stream to its end.
pub(super) struct StreamEnd {
    pub(super) bytes: Vec<u8>,
    /// The reset code, if the guest reset the stream instead of finishing it.
    pub(super) reset: Option<u64>,
}

pub(super) async fn read_to_end(recv: &mut quinn::RecvStream) -> Result<StreamEnd> {
    let mut bytes = Vec::new();
    loop {
        match within("the guest's answer", recv.read_chunk(64 * 1024, true)).await? {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk.bytes),
            Ok(None) => return Ok(StreamEnd { bytes, reset: None }),
            Err(quinn::ReadError::Reset(code)) => {
                return Ok(StreamEnd {
                    bytes,
                    reset: Some(code.into_inner()),
                })
            }
            Err(e) => bail!("reading an operation stream: {e}"),
        }
    }
}

/// Every frame of `bytes`, which must be whole frames of `T`.
pub(super) fn frames<T: DeserializeOwned>(bytes: &[u8]) -> Result<Vec<T>> {
    let mut decoder = FrameDecoder::new();
    decoder.push(bytes);
    let mut out = Vec::new();
    while let Some(msg) = decoder.next_message::<T>()? {
        out.push(msg);
    }
    decoder.finish()?;
    Ok(out)
}

impl Session {
    /// Opens an operation stream and sends `req` as its first frame, then finishes our side.
    pub(super) async fn request(&self, req: &Request) -> Result<StreamEnd> {
        let (mut send, mut recv) = within("an operation stream", self.conn.open_bi()).await??;
        send.write_all(&encode(req)?).await?;
        send.finish()?;
        read_to_end(&mut recv).await
    }

    /// Runs `argv` in the home, acting for `bot` under `lease` if given; returns the events.
    pub(super) async fn exec(
        &self,
        argv: &[&str],
        lease: Option<(&str, &str)>,
    ) -> Result<Vec<ExecEvent>> {
        let req = Request::Exec(ExecRequest {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            cwd: None,
            env: Vec::new(),
            timeout_ms: Some(WAIT.as_millis() as u64),
            stdin: false,
            lease: bot_lease(lease)?,
            start: Default::default(),
        });
        let end = self.request(&req).await?;
        ensure!(end.reset.is_none(), "exec stream reset: {:?}", end.reset);
        frames(&end.bytes)
    }

    pub(super) async fn ping(&self) -> Result<()> {
        let end = self.request(&Request::Ping).await?;
        let replies: Vec<Reply> = frames(&end.bytes)?;
        ensure!(
            replies == vec![Reply::Pong] && end.reset.is_none(),
            "ping answered {replies:?} (reset {:?})",
            end.reset
        );
        Ok(())
    }
}
