//! Clients of live screens for tests and benchmarks: capability URLs from the API, plain HTTP
//! GETs without the API token, websockets, a minimal RFB 3.8 client, and terminal frames.

use anyhow::{anyhow, bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Longest a framebuffer update that has started may take to arrive whole (x11vnc, the
/// benchmarks' anchor, has been seen to pause a few seconds mid-stream; far longer means the
/// stream is stuck or out of sync).
pub const UPDATE_STALL: Duration = Duration::from_secs(30);

/// A websocket to a capability.
pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A response to a plain GET.
#[derive(Debug)]
pub struct Got {
    pub status: u16,
    /// Header lines, lowercased names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Got {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `host:port` of an `http://host:port` base.
pub fn authority(http: &str) -> &str {
    http.trim_start_matches("http://").trim_end_matches('/')
}

/// A GET with no API token (a browser opening a capability URL).
pub async fn get(http: &str, path: &str) -> Result<Got> {
    let host = authority(http);
    let mut s = TcpStream::connect(host).await?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut raw))
        .await
        .context("GET timed out")??;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("no header end"))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow!("bad status line"))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Ok(Got {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    })
}

/// The websocket URL of a capability path (`/cap/<sealed>`).
pub fn ws_url(http: &str, cap_path: &str) -> String {
    format!("ws://{}{}/ws", authority(http), cap_path)
}

/// Opens a capability's websocket; the error when the server refuses the upgrade.
pub async fn connect(http: &str, cap_path: &str) -> Result<Ws> {
    let (ws, resp) = tokio::time::timeout(
        Duration::from_secs(30),
        tokio_tungstenite::connect_async(ws_url(http, cap_path)),
    )
    .await
    .context("websocket connect timed out")??;
    if resp.status().as_u16() != 101 {
        bail!("no upgrade: {}", resp.status());
    }
    Ok(ws)
}

/// The status a refused upgrade got (None if it was upgraded).
pub async fn upgrade_status(http: &str, cap_path: &str) -> Result<Option<u16>> {
    match tokio_tungstenite::connect_async(ws_url(http, cap_path)).await {
        Ok(_) => Ok(None),
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Ok(Some(resp.status().as_u16())),
        Err(e) => Err(e.into()),
    }
}

/// Adapts a websocket to a byte stream (binary messages in order) for the RFB client.
pub struct WsBytes {
    pub ws: Ws,
    buf: Vec<u8>,
    pos: usize,
}

impl WsBytes {
    pub fn new(ws: Ws) -> Self {
        Self {
            ws,
            buf: Vec::new(),
            pos: 0,
        }
    }

    /// Reads exactly `n` bytes.
    pub async fn read_exact(&mut self, n: usize) -> Result<Vec<u8>> {
        while self.buf.len() - self.pos < n {
            match self.ws.next().await {
                Some(Ok(Message::Binary(b))) => {
                    self.buf.drain(..self.pos);
                    self.pos = 0;
                    self.buf.extend_from_slice(&b);
                }
                Some(Ok(Message::Close(f))) => bail!("websocket closed: {f:?}"),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
                None => bail!("websocket ended"),
            }
        }
        let out = self.buf[self.pos..self.pos + n].to_vec();
        self.pos += n;
        Ok(out)
    }

    pub async fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.ws.send(Message::Binary(bytes.to_vec().into())).await?;
        Ok(())
    }
}

/// Something an RFB client can talk through.
#[allow(async_fn_in_trait)] // test code, used with concrete types only
pub trait RfbIo {
    async fn read_n(&mut self, n: usize) -> Result<Vec<u8>>;
    async fn write_all_bytes(&mut self, bytes: &[u8]) -> Result<()>;
}

impl RfbIo for WsBytes {
    async fn read_n(&mut self, n: usize) -> Result<Vec<u8>> {
        self.read_exact(n).await
    }
    async fn write_all_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        self.write(bytes).await
    }
}

/// A raw stream (an RFB server's socket reached directly, for benchmarks).
pub struct RawIo<S>(pub S);

impl<S: AsyncRead + AsyncWrite + Unpin> RfbIo for RawIo<S> {
    async fn read_n(&mut self, n: usize) -> Result<Vec<u8>> {
        let mut v = vec![0u8; n];
        self.0.read_exact(&mut v).await?;
        Ok(v)
    }
    async fn write_all_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        self.0.write_all(bytes).await?;
        Ok(())
    }
}

/// A minimal RFB 3.8 client: no authentication, raw encoding (ZRLE and CopyRect can be asked
/// for, and are then skipped over), 32-bit pixels.
pub struct Rfb<I> {
    pub io: I,
    pub width: u16,
    pub height: u16,
    /// Bytes of pixel data received in framebuffer updates (as encoded).
    pub pixel_bytes: u64,
    /// How many of those bytes were not zero (a black screen has none).
    pub nonzero_bytes: u64,
    /// When the first byte of the latest framebuffer update arrived.
    pub last_update_at: Option<tokio::time::Instant>,
    /// Every byte read from the server after the handshake (any message).
    pub received: u64,
}

impl<I: RfbIo> Rfb<I> {
    /// Handshake through ServerInit; then asks for raw encoding only.
    pub async fn handshake(mut io: I) -> Result<Self> {
        let version = io.read_n(12).await?;
        if !version.starts_with(b"RFB 003.") {
            bail!("not RFB: {:?}", String::from_utf8_lossy(&version));
        }
        io.write_all_bytes(b"RFB 003.008\n").await?;
        let n = io.read_n(1).await?[0] as usize;
        if n == 0 {
            let len = u32::from_be_bytes(io.read_n(4).await?.try_into().unwrap_or([0; 4]));
            let why = io.read_n(len.min(4096) as usize).await?;
            bail!("server refused: {}", String::from_utf8_lossy(&why));
        }
        let types = io.read_n(n).await?;
        if !types.contains(&1) {
            bail!("no None security type in {types:?}");
        }
        io.write_all_bytes(&[1]).await?;
        let result = io.read_n(4).await?;
        if result != [0, 0, 0, 0] {
            bail!("security failed");
        }
        io.write_all_bytes(&[1]).await?; // ClientInit: shared
        let init = io.read_n(24).await?;
        let width = u16::from_be_bytes([init[0], init[1]]);
        let height = u16::from_be_bytes([init[2], init[3]]);
        let name_len = u32::from_be_bytes([init[20], init[21], init[22], init[23]]);
        io.read_n(name_len.min(1 << 16) as usize).await?;
        // SetPixelFormat: 32 bpp, depth 24, little endian, true colour, 8 bits per channel.
        let mut spf = vec![0u8, 0, 0, 0];
        spf.extend_from_slice(&[32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0]);
        io.write_all_bytes(&spf).await?;
        // SetEncodings: raw only.
        io.write_all_bytes(&[2, 0, 0, 1, 0, 0, 0, 0]).await?;
        Ok(Self {
            io,
            width,
            height,
            pixel_bytes: 0,
            nonzero_bytes: 0,
            last_update_at: None,
            received: 0,
        })
    }

    /// Reads `n` bytes from the server, counted in [`Rfb::received`].
    async fn read(&mut self, n: usize) -> Result<Vec<u8>> {
        let bytes = self.io.read_n(n).await?;
        self.received += bytes.len() as u64;
        Ok(bytes)
    }

    pub async fn pointer(&mut self, x: u16, y: u16, buttons: u8) -> Result<()> {
        let mut m = vec![5, buttons];
        m.extend_from_slice(&x.to_be_bytes());
        m.extend_from_slice(&y.to_be_bytes());
        self.io.write_all_bytes(&m).await
    }

    pub async fn key(&mut self, keysym: u32, down: bool) -> Result<()> {
        let mut m = vec![4, u8::from(down), 0, 0];
        m.extend_from_slice(&keysym.to_be_bytes());
        self.io.write_all_bytes(&m).await
    }

    /// Asks for `encodings` (RFB numbers, preferred first) instead of raw alone; ZRLE (16) and
    /// CopyRect (1) are skipped over, not decoded (their bytes still count in
    /// [`Rfb::pixel_bytes`]), so only byte counts are meaningful after this.
    pub async fn set_encodings(&mut self, encodings: &[i32]) -> Result<()> {
        let mut m = vec![2, 0];
        m.extend_from_slice(&u16::try_from(encodings.len())?.to_be_bytes());
        for e in encodings {
            m.extend_from_slice(&e.to_be_bytes());
        }
        self.io.write_all_bytes(&m).await
    }

    pub async fn request_update(&mut self, incremental: bool) -> Result<()> {
        let mut m = vec![3, u8::from(incremental)];
        m.extend_from_slice(&[0, 0, 0, 0]);
        m.extend_from_slice(&self.width.to_be_bytes());
        m.extend_from_slice(&self.height.to_be_bytes());
        self.io.write_all_bytes(&m).await
    }

    /// Reads server messages until one framebuffer update has been read whole; returns the
    /// number of rectangles in it.
    pub async fn read_update(&mut self) -> Result<u16> {
        let first = self.read(1).await?[0];
        self.read_update_from(first).await
    }

    /// Like [`Rfb::read_update`], but gives up (`None`) if no message starts before `deadline`.
    /// Only the wait for a message's first byte is cut short, so the stream never loses sync;
    /// an update that has started but stalls for [`UPDATE_STALL`] is an error (the stream is then
    /// out of sync), not a hang.
    pub async fn read_update_until(
        &mut self,
        deadline: tokio::time::Instant,
    ) -> Result<Option<u16>> {
        match tokio::time::timeout_at(deadline, self.read(1)).await {
            Err(_) => Ok(None),
            Ok(first) => {
                let first = first?[0];
                match tokio::time::timeout(UPDATE_STALL, self.read_update_from(first)).await {
                    Ok(rects) => Ok(Some(rects?)),
                    Err(_) => bail!(
                        "a framebuffer update stopped mid-message for {} s",
                        UPDATE_STALL.as_secs()
                    ),
                }
            }
        }
    }

    async fn read_update_from(&mut self, first: u8) -> Result<u16> {
        let mut next = Some(first);
        loop {
            let kind = match next.take() {
                Some(k) => k,
                None => self.read(1).await?[0],
            };
            match kind {
                0 => {
                    self.last_update_at = Some(tokio::time::Instant::now());
                    let h = self.read(3).await?;
                    let rects = u16::from_be_bytes([h[1], h[2]]);
                    for _ in 0..rects {
                        let r = self.read(12).await?;
                        let w = u16::from_be_bytes([r[4], r[5]]) as usize;
                        let hh = u16::from_be_bytes([r[6], r[7]]) as usize;
                        let enc = i32::from_be_bytes([r[8], r[9], r[10], r[11]]);
                        match enc {
                            // CopyRect: the source position only.
                            1 => {
                                self.pixel_bytes += self.read(4).await?.len() as u64;
                            }
                            // ZRLE: a length, then zlib data (skipped, not decoded).
                            16 => {
                                let len = self.read(4).await?;
                                let mut left =
                                    u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
                                self.pixel_bytes += 4 + left as u64;
                                while left > 0 {
                                    let take = left.min(1 << 20);
                                    self.read(take).await?;
                                    left -= take;
                                }
                            }
                            0 => {
                                let n = w * hh * 4;
                                let mut left = n;
                                while left > 0 {
                                    let take = left.min(1 << 20);
                                    let px = self.read(take).await?;
                                    self.nonzero_bytes +=
                                        px.iter().filter(|b| **b != 0).count() as u64;
                                    left -= take;
                                }
                                self.pixel_bytes += n as u64;
                            }
                            // Pseudo-encodings carry no data we asked for.
                            _ => bail!("unexpected encoding {enc}"),
                        }
                    }
                    return Ok(rects);
                }
                1 => {
                    let h = self.read(5).await?;
                    let n = u16::from_be_bytes([h[3], h[4]]) as usize;
                    self.read(n * 6).await?;
                }
                2 => {}
                3 => {
                    let h = self.read(7).await?;
                    let n = u32::from_be_bytes([h[3], h[4], h[5], h[6]]);
                    self.read(n.min(1 << 20) as usize).await?;
                }
                other => bail!("unknown server message {other}"),
            }
        }
    }

    /// A round trip: every message sent before it has been processed by the server.
    pub async fn sync(&mut self) -> Result<()> {
        self.request_update(false).await?;
        self.read_update().await?;
        Ok(())
    }
}

/// Reads terminal output until it contains `needle` (or the deadline passes).
pub async fn read_until(
    ws: &mut Ws,
    out: &mut Vec<u8>,
    needle: &str,
    within: Duration,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if String::from_utf8_lossy(out).contains(needle) {
            return Ok(());
        }
        let next = tokio::time::timeout_at(deadline, ws.next())
            .await
            .with_context(|| {
                format!(
                    "no {needle:?} in terminal output: {:?}",
                    String::from_utf8_lossy(out)
                )
            })?;
        match next {
            Some(Ok(Message::Binary(b))) => out.extend_from_slice(&b),
            Some(Ok(Message::Close(f))) => bail!("terminal closed: {f:?}"),
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e.into()),
            None => bail!("terminal ended"),
        }
    }
}

/// Waits until the websocket ends (close frame, error or end), up to `within`.
pub async fn wait_closed(ws: &mut Ws, within: Duration) -> Result<()> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, ws.next()).await {
            Err(_) => bail!("still open after {within:?}"),
            Ok(None | Some(Err(_)) | Some(Ok(Message::Close(_)))) => return Ok(()),
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// Reads a websocket until its close frame (up to `within`); returns the frame's reason. A
/// stream that ends without one (a reset, a bare TCP close) is an error.
pub async fn close_reason(ws: &mut Ws, within: Duration) -> Result<String> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, ws.next()).await {
            Err(_) => bail!("still open after {within:?}"),
            Ok(Some(Ok(Message::Close(frame)))) => {
                return Ok(frame.map(|f| f.reason.to_string()).unwrap_or_default())
            }
            Ok(None) => bail!("ended without a close frame"),
            Ok(Some(Err(e))) => bail!("ended with {e}"),
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// A unix socket in a private temporary directory whose every connection is carried over a new
/// websocket to a capability (each read becomes one binary message), for RFB clients that speak
/// plain sockets only (third-party clients). Dropping it closes the socket
/// and every connection.
pub struct WsBridge {
    pub socket: std::path::PathBuf,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl WsBridge {
    /// Listens at once; each accepted connection opens `cap_path`'s websocket on `http`.
    pub async fn start(http: &str, cap_path: &str) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("rakazo-ws-bridge-")
            .tempdir()?;
        let socket = dir.path().join("rfb.sock");
        let listener = tokio::net::UnixListener::bind(&socket)?;
        let (http, cap_path) = (http.to_string(), cap_path.to_string());
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((unix, _)) = listener.accept().await {
                let (http, cap_path) = (http.clone(), cap_path.clone());
                connections.spawn(async move {
                    if let Ok(ws) = connect(&http, &cap_path).await {
                        pump(unix, ws).await;
                    }
                });
            }
        });
        Ok(Self {
            socket,
            _dir: dir,
            task,
        })
    }
}

impl Drop for WsBridge {
    fn drop(&mut self) {
        // Aborting the task drops its JoinSet, which aborts every connection.
        self.task.abort();
    }
}

/// Copies between a unix stream and a websocket until either side ends.
async fn pump(unix: tokio::net::UnixStream, ws: Ws) {
    let (mut unix_rx, mut unix_tx) = unix.into_split();
    let (mut ws_tx, mut ws_rx) = ws.split();
    let up = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match unix_rx.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if ws_tx
                        .send(Message::Binary(buf[..n].to_vec().into()))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        let _ = ws_tx.close().await;
    };
    let down = async {
        while let Some(Ok(message)) = ws_rx.next().await {
            let written = match message {
                Message::Binary(b) => unix_tx.write_all(&b).await,
                Message::Close(_) => break,
                _ => Ok(()),
            };
            if written.is_err() {
                break;
            }
        }
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}
