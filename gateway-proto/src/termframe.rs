//! The client→guest terminal frames of docs/screens.md#terminal-frames, sans-IO:
//! `[kind u8][len u32 BE][payload]`, kind 0 = input bytes, kind 1 = resize
//! (`cols u16be, rows u16be`), at most [`MAX_PAYLOAD`] bytes of payload. The guest→client
//! direction is raw PTY output and needs no framing.
//!
//! A frame may be split anywhere across reads or websocket messages, and one read may hold
//! several frames. Two consumers share one header check ([`check_header`]):
//! - [`FrameDecoder`] (the guest's terminal session) buffers at most one frame and yields it;
//! - [`FrameCheck`] (the control plane's relay) buffers nothing but a partial header and only
//!   follows frame boundaries, so an oversized or malformed frame closes the browser's connection
//!   at the control plane, before a byte of it crosses the tunnel; bytes are forwarded unchanged.
//!
//! The encoders are for clients (tests, benchmarks).
//!
//! These frames are not the tunnel's `[len][postcard]` frames of [`crate::frame`].

/// Largest payload of one frame (docs/screens.md#terminal-frames: 1 MiB); a larger frame ends the
/// connection.
pub const MAX_PAYLOAD: u32 = 1024 * 1024;
/// Frame kind: input bytes for the shell.
pub const KIND_INPUT: u8 = 0;
/// Frame kind: a new terminal size.
pub const KIND_RESIZE: u8 = 1;
/// Bytes of a frame header: kind and payload length.
pub const HEADER_LEN: usize = 5;

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TermFrame {
    Input(Vec<u8>),
    Resize { cols: u16, rows: u16 },
}

/// Why the client's frames cannot be followed any further.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TermFrameError {
    #[error("terminal frame of {0} bytes is over the limit of {MAX_PAYLOAD}")]
    TooLarge(u32),
    #[error("unknown terminal frame kind {0}")]
    UnknownKind(u8),
    #[error("terminal resize frame has {0} bytes of payload, not 4")]
    BadResize(u32),
}

/// Checks a complete header and returns its kind and payload length. The header alone decides:
/// nothing of the payload needs to arrive for a bad frame to be refused.
pub fn check_header(header: &[u8; HEADER_LEN]) -> Result<(u8, u32), TermFrameError> {
    let kind = header[0];
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
    if len > MAX_PAYLOAD {
        return Err(TermFrameError::TooLarge(len));
    }
    match kind {
        KIND_INPUT => {}
        KIND_RESIZE if len != 4 => return Err(TermFrameError::BadResize(len)),
        KIND_RESIZE => {}
        other => return Err(TermFrameError::UnknownKind(other)),
    }
    Ok((kind, len))
}

/// Splits the client's byte stream into frames.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    /// Where the next frame starts in `buf` (consumed bytes are dropped on the next push).
    pos: usize,
    error: Option<TermFrameError>,
}

impl FrameDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds bytes from the client. Only the current frame is buffered: the caller drains
    /// [`FrameDecoder::next_frame`] after each push.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.drain(..self.pos);
        self.pos = 0;
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame, `Ok(None)` when more bytes are needed. Errors are sticky: the
    /// length of what follows a bad header is unknown.
    pub fn next_frame(&mut self) -> Result<Option<TermFrame>, TermFrameError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        match self.parse() {
            Err(e) => {
                self.buf = Vec::new();
                self.pos = 0;
                self.error = Some(e.clone());
                Err(e)
            }
            ok => ok,
        }
    }

    fn parse(&mut self) -> Result<Option<TermFrame>, TermFrameError> {
        let buf = &self.buf[self.pos..];
        let Some(header) = buf.first_chunk::<HEADER_LEN>() else {
            return Ok(None);
        };
        let (kind, len) = check_header(header)?;
        let end = HEADER_LEN + len as usize;
        if buf.len() < end {
            return Ok(None);
        }
        let payload = &buf[HEADER_LEN..end];
        let frame = if kind == KIND_INPUT {
            TermFrame::Input(payload.to_vec())
        } else {
            TermFrame::Resize {
                cols: u16::from_be_bytes([payload[0], payload[1]]),
                rows: u16::from_be_bytes([payload[2], payload[3]]),
            }
        };
        self.pos += end;
        Ok(Some(frame))
    }
}

/// Follows frame boundaries as bytes pass through, without buffering payload.
#[derive(Debug, Default)]
pub struct FrameCheck {
    header: [u8; HEADER_LEN],
    have: usize,
    /// Payload bytes still to come of the current frame.
    remaining: u32,
}

impl FrameCheck {
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks the next bytes of the stream. After an error the stream must be closed.
    pub fn push(&mut self, mut bytes: &[u8]) -> Result<(), TermFrameError> {
        while !bytes.is_empty() {
            if self.remaining > 0 {
                let take = bytes.len().min(self.remaining as usize);
                // `take` is at most `remaining`, a u32.
                self.remaining -= take as u32;
                bytes = &bytes[take..];
                continue;
            }
            let take = bytes.len().min(HEADER_LEN - self.have);
            self.header[self.have..self.have + take].copy_from_slice(&bytes[..take]);
            self.have += take;
            bytes = &bytes[take..];
            if self.have == HEADER_LEN {
                self.have = 0;
                let (_, len) = check_header(&self.header)?;
                self.remaining = len;
            }
        }
        Ok(())
    }
}

/// An input frame carrying `bytes` (at most [`MAX_PAYLOAD`]; callers split longer input).
pub fn encode_input(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + bytes.len());
    out.push(KIND_INPUT);
    out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(bytes);
    out
}

/// A resize frame.
pub fn encode_resize(cols: u16, rows: u16) -> Vec<u8> {
    let mut out = vec![KIND_RESIZE, 0, 0, 0, 4];
    out.extend_from_slice(&cols.to_be_bytes());
    out.extend_from_slice(&rows.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(d: &mut FrameDecoder) -> Result<Vec<TermFrame>, TermFrameError> {
        let mut out = Vec::new();
        while let Some(f) = d.next_frame()? {
            out.push(f);
        }
        Ok(out)
    }

    fn stream() -> (Vec<u8>, Vec<TermFrame>) {
        let frames = vec![
            TermFrame::Input(b"echo hi\r".to_vec()),
            TermFrame::Resize {
                cols: 123,
                rows: 45,
            },
            TermFrame::Input(Vec::new()),
            TermFrame::Input(vec![0xff; 300]),
            TermFrame::Resize {
                cols: u16::MAX,
                rows: 1,
            },
        ];
        let mut bytes = Vec::new();
        for f in &frames {
            bytes.extend_from_slice(&match f {
                TermFrame::Input(b) => encode_input(b),
                TermFrame::Resize { cols, rows } => encode_resize(*cols, *rows),
            });
        }
        (bytes, frames)
    }

    /// A frame of any kind, well-formed or not.
    fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![kind];
        f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn the_encoders_write_the_contract_bytes() {
        assert_eq!(encode_input(b"hi"), frame(KIND_INPUT, b"hi"));
        assert_eq!(encode_input(b"hi"), [0, 0, 0, 0, 2, b'h', b'i']);
        assert_eq!(encode_resize(123, 45), frame(KIND_RESIZE, &[0, 123, 0, 45]));
    }

    #[test]
    fn frames_split_at_every_byte_decode_the_same() {
        let (bytes, want) = stream();
        for i in 0..=bytes.len() {
            let mut d = FrameDecoder::new();
            d.push(&bytes[..i]);
            let mut got = drain(&mut d).unwrap();
            d.push(&bytes[i..]);
            got.extend(drain(&mut d).unwrap());
            assert_eq!(got, want, "split at {i}");
        }
        let mut d = FrameDecoder::new();
        let mut got = Vec::new();
        for b in &bytes {
            d.push(std::slice::from_ref(b));
            got.extend(drain(&mut d).unwrap());
        }
        assert_eq!(got, want);
    }

    #[test]
    fn the_largest_frame_passes_and_one_byte_more_is_refused_from_its_header() {
        let max = vec![b'x'; MAX_PAYLOAD as usize];
        let mut d = FrameDecoder::new();
        d.push(&encode_input(&max));
        assert_eq!(drain(&mut d).unwrap(), vec![TermFrame::Input(max)]);
        let mut d = FrameDecoder::new();
        // The header alone is enough to refuse: nothing of the payload needs to arrive.
        d.push(&[KIND_INPUT, 0, 0x10, 0, 1]);
        assert_eq!(
            d.next_frame(),
            Err(TermFrameError::TooLarge(MAX_PAYLOAD + 1))
        );
        d.push(&encode_input(b"later"));
        assert!(d.next_frame().is_err(), "errors are sticky");
    }

    #[test]
    fn bad_kinds_and_resizes_are_errors() {
        let mut d = FrameDecoder::new();
        d.push(&[2, 0, 0, 0, 0]);
        assert_eq!(d.next_frame(), Err(TermFrameError::UnknownKind(2)));
        let mut d = FrameDecoder::new();
        d.push(&[KIND_RESIZE, 0, 0, 0, 3, 0, 1, 0]);
        assert_eq!(d.next_frame(), Err(TermFrameError::BadResize(3)));
        let mut d = FrameDecoder::new();
        d.push(&[KIND_INPUT, 0, 0]);
        assert_eq!(d.next_frame(), Ok(None));
    }

    #[test]
    fn checked_frames_split_anywhere_pass() {
        let mut stream = frame(0, b"echo hi\r");
        stream.extend(frame(1, &[0, 123, 0, 45]));
        stream.extend(frame(0, b""));
        stream.extend(frame(0, &vec![b'x'; 70_000]));
        for chunk in [1, 2, 3, 5, 7, 4096] {
            let mut c = FrameCheck::new();
            for part in stream.chunks(chunk) {
                c.push(part).unwrap();
            }
        }
        FrameCheck::new().push(&stream).unwrap();
    }

    #[test]
    fn the_check_limit_is_one_mebibyte() {
        let mut ok = vec![0u8];
        ok.extend_from_slice(&MAX_PAYLOAD.to_be_bytes());
        FrameCheck::new().push(&ok).unwrap();
        let mut big = vec![0u8];
        big.extend_from_slice(&(2u32 << 20).to_be_bytes());
        let mut c = FrameCheck::new();
        // Refused as soon as the header is complete, whatever the split.
        c.push(&big[..3]).unwrap();
        assert_eq!(c.push(&big[3..]), Err(TermFrameError::TooLarge(2 << 20)));
    }

    #[test]
    fn the_check_refuses_bad_kinds_and_resizes() {
        assert_eq!(
            FrameCheck::new().push(&frame(2, b"x")),
            Err(TermFrameError::UnknownKind(2))
        );
        assert_eq!(
            FrameCheck::new().push(&frame(1, &[0, 1, 0])),
            Err(TermFrameError::BadResize(3))
        );
    }
}
