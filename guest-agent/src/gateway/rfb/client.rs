//! A small RFB 3.8 client for tests and benchmarks (ours and the control plane's): security
//! None, 32-bit true-colour pixels, Raw encoding only, so every server message has a length
//! known from its header. It is not used by the guest itself.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Why the client gave up.
#[derive(Debug, thiserror::Error)]
pub enum RfbClientError {
    #[error("rfb i/o")]
    Io(#[from] std::io::Error),
    #[error("rfb server said {0:?} where a 3.x version was expected")]
    Version(String),
    #[error("rfb server refused the connection: {0}")]
    Refused(String),
    #[error("rfb server offers no security type None (offered {0:?})")]
    NoNone(Vec<u8>),
    #[error("rfb server sent unknown message type {0}")]
    UnknownMessage(u8),
    #[error("rfb server sent a rectangle in encoding {0}, which was not asked for")]
    UnknownEncoding(i32),
    #[error("rfb server message too large ({0} bytes)")]
    TooLarge(u64),
}

/// The server's framebuffer, from ServerInit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInit {
    pub width: u16,
    pub height: u16,
    pub name: String,
}

/// One rectangle of a FramebufferUpdate (its pixels are skipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rect {
    pub x: u16,
    pub y: u16,
    pub width: u16,
    pub height: u16,
    pub encoding: i32,
}

/// A message from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerMsg {
    /// The rectangles and the total size of the message in bytes.
    FramebufferUpdate {
        rects: Vec<Rect>,
        bytes: u64,
    },
    ColourMap,
    Bell,
    CutText(Vec<u8>),
}

/// Pointer button mask bits.
pub const BUTTON_LEFT: u8 = 1;

const ENCODING_RAW: i32 = 0;
const PSEUDO_DESKTOP_SIZE: i32 = -223;
const PSEUDO_LAST_RECT: i32 = -224;
/// Bound on cut text and names read from the server.
const MAX_TEXT: u32 = 1024 * 1024;

/// A connected, initialised RFB client over any byte stream.
pub struct RfbClient<S> {
    stream: S,
    pub init: ServerInit,
}

impl<S: AsyncRead + AsyncWrite + Unpin> RfbClient<S> {
    /// Runs the 3.8 handshake with security None, shared session, then sets 32-bit pixels and
    /// the Raw encoding (plus the DesktopSize and LastRect pseudo-encodings).
    pub async fn connect(mut stream: S) -> Result<Self, RfbClientError> {
        let mut version = [0u8; 12];
        stream.read_exact(&mut version).await?;
        if !version.starts_with(b"RFB 003.") {
            return Err(RfbClientError::Version(
                String::from_utf8_lossy(&version).into_owned(),
            ));
        }
        stream.write_all(b"RFB 003.008\n").await?;
        let n = stream.read_u8().await?;
        if n == 0 {
            return Err(RfbClientError::Refused(read_text(&mut stream).await?));
        }
        let mut types = vec![0u8; n.into()];
        stream.read_exact(&mut types).await?;
        if !types.contains(&1) {
            return Err(RfbClientError::NoNone(types));
        }
        stream.write_all(&[1]).await?;
        if stream.read_u32().await? != 0 {
            return Err(RfbClientError::Refused(read_text(&mut stream).await?));
        }
        stream.write_all(&[1]).await?; // ClientInit: shared
        let width = stream.read_u16().await?;
        let height = stream.read_u16().await?;
        let mut pixel_format = [0u8; 16];
        stream.read_exact(&mut pixel_format).await?;
        let name = read_text(&mut stream).await?;
        let mut client = Self {
            stream,
            init: ServerInit {
                width,
                height,
                name,
            },
        };
        let mut msg = vec![0u8, 0, 0, 0];
        // 32 bpp, depth 24, little endian, true colour, 255/255/255 at shifts 16/8/0.
        msg.extend_from_slice(&[32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0]);
        client.stream.write_all(&msg).await?;
        client
            .send_encodings(&[ENCODING_RAW, PSEUDO_DESKTOP_SIZE, PSEUDO_LAST_RECT])
            .await?;
        Ok(client)
    }

    async fn send_encodings(&mut self, list: &[i32]) -> Result<(), RfbClientError> {
        let mut msg = vec![2u8, 0];
        msg.extend_from_slice(&u16::try_from(list.len()).unwrap_or(0).to_be_bytes());
        for e in list {
            msg.extend_from_slice(&e.to_be_bytes());
        }
        self.stream.write_all(&msg).await?;
        Ok(())
    }

    /// FramebufferUpdateRequest for the whole screen.
    pub async fn request_update(&mut self, incremental: bool) -> Result<(), RfbClientError> {
        let mut msg = vec![3u8, u8::from(incremental), 0, 0, 0, 0];
        msg.extend_from_slice(&self.init.width.to_be_bytes());
        msg.extend_from_slice(&self.init.height.to_be_bytes());
        self.stream.write_all(&msg).await?;
        Ok(())
    }

    /// PointerEvent.
    pub async fn pointer(&mut self, x: u16, y: u16, buttons: u8) -> Result<(), RfbClientError> {
        let mut msg = vec![5u8, buttons];
        msg.extend_from_slice(&x.to_be_bytes());
        msg.extend_from_slice(&y.to_be_bytes());
        self.stream.write_all(&msg).await?;
        Ok(())
    }

    /// KeyEvent for an X keysym.
    pub async fn key(&mut self, down: bool, keysym: u32) -> Result<(), RfbClientError> {
        let mut msg = vec![4u8, u8::from(down), 0, 0];
        msg.extend_from_slice(&keysym.to_be_bytes());
        self.stream.write_all(&msg).await?;
        Ok(())
    }

    /// ClientCutText.
    pub async fn cut_text(&mut self, text: &[u8]) -> Result<(), RfbClientError> {
        let mut msg = vec![6u8, 0, 0, 0];
        msg.extend_from_slice(&u32::try_from(text.len()).unwrap_or(u32::MAX).to_be_bytes());
        msg.extend_from_slice(text);
        self.stream.write_all(&msg).await?;
        Ok(())
    }

    /// Raw bytes, for tests of malformed input.
    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), RfbClientError> {
        self.stream.write_all(bytes).await?;
        Ok(())
    }

    /// Reads the next server message whole (pixels are read and discarded).
    pub async fn read_message(&mut self) -> Result<ServerMsg, RfbClientError> {
        let kind = self.stream.read_u8().await?;
        match kind {
            0 => {
                let _pad = self.stream.read_u8().await?;
                let n = self.stream.read_u16().await?;
                let mut rects = Vec::new();
                let mut bytes = 4u64;
                for _ in 0..n {
                    let mut head = [0u8; 12];
                    self.stream.read_exact(&mut head).await?;
                    bytes += 12;
                    let be16 = |i: usize| u16::from_be_bytes([head[i], head[i + 1]]);
                    let rect = Rect {
                        x: be16(0),
                        y: be16(2),
                        width: be16(4),
                        height: be16(6),
                        encoding: i32::from_be_bytes([head[8], head[9], head[10], head[11]]),
                    };
                    match rect.encoding {
                        ENCODING_RAW => {
                            let len = u64::from(rect.width) * u64::from(rect.height) * 4;
                            self.skip(len).await?;
                            bytes += len;
                        }
                        PSEUDO_DESKTOP_SIZE => {
                            self.init.width = rect.width;
                            self.init.height = rect.height;
                        }
                        PSEUDO_LAST_RECT => {
                            rects.push(rect);
                            break;
                        }
                        other => return Err(RfbClientError::UnknownEncoding(other)),
                    }
                    rects.push(rect);
                }
                Ok(ServerMsg::FramebufferUpdate { rects, bytes })
            }
            1 => {
                let mut head = [0u8; 5];
                self.stream.read_exact(&mut head).await?;
                let n = u16::from_be_bytes([head[3], head[4]]);
                self.skip(u64::from(n) * 6).await?;
                Ok(ServerMsg::ColourMap)
            }
            2 => Ok(ServerMsg::Bell),
            3 => {
                let mut pad = [0u8; 3];
                self.stream.read_exact(&mut pad).await?;
                let text = read_text(&mut self.stream).await?;
                Ok(ServerMsg::CutText(text.into_bytes()))
            }
            other => Err(RfbClientError::UnknownMessage(other)),
        }
    }

    /// Reads messages until a FramebufferUpdate; returns it and the bytes read in all.
    pub async fn next_update(&mut self) -> Result<(Vec<Rect>, u64), RfbClientError> {
        let mut total = 0;
        loop {
            if let ServerMsg::FramebufferUpdate { rects, bytes } = self.read_message().await? {
                total += bytes;
                return Ok((rects, total));
            }
        }
    }

    async fn skip(&mut self, mut len: u64) -> Result<(), RfbClientError> {
        let mut buf = vec![0u8; 64 * 1024];
        while len > 0 {
            let want = usize::try_from(len).unwrap_or(buf.len()).min(buf.len());
            self.stream.read_exact(&mut buf[..want]).await?;
            len -= want as u64;
        }
        Ok(())
    }

    /// The underlying stream.
    pub fn into_inner(self) -> S {
        self.stream
    }
}

async fn read_text<S: AsyncRead + Unpin>(stream: &mut S) -> Result<String, RfbClientError> {
    let len = stream.read_u32().await?;
    if len > MAX_TEXT {
        return Err(RfbClientError::TooLarge(len.into()));
    }
    let mut text = vec![0u8; len as usize];
    stream.read_exact(&mut text).await?;
    Ok(String::from_utf8_lossy(&text).into_owned())
}
