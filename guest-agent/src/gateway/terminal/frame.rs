//! The client→guest terminal frames of contracts.md §7, sans-IO: `[kind u8][len u32 BE][payload]`,
//! kind 0 = input bytes, kind 1 = resize (`cols u16be, rows u16be`), at most [`MAX_PAYLOAD`]
//! bytes of payload. The guest→client direction is raw PTY output and needs no framing.
//!
//! [`FrameDecoder`] takes bytes as they arrive (a frame may be split anywhere) and never holds
//! more than one frame; the encoders are for clients (tests, benchmarks, the control plane's
//! own tests).

/// Largest payload of one frame; a larger frame ends the connection.
pub const MAX_PAYLOAD: u32 = 1024 * 1024;
/// Frame kind: input bytes for the shell.
pub const KIND_INPUT: u8 = 0;
/// Frame kind: a new terminal size.
pub const KIND_RESIZE: u8 = 1;
const HEADER: usize = 5;

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TermFrame {
    Input(Vec<u8>),
    Resize { cols: u16, rows: u16 },
}

/// Why the client's frames cannot be followed any further.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("terminal frame of {0} bytes is over the limit of {MAX_PAYLOAD}")]
    TooLarge(u32),
    #[error("unknown terminal frame kind {0}")]
    UnknownKind(u8),
    #[error("terminal resize frame has {0} bytes of payload, not 4")]
    BadResize(u32),
}

/// Splits the client's byte stream into frames.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    /// Where the next frame starts in `buf` (consumed bytes are dropped on the next push).
    pos: usize,
    error: Option<FrameError>,
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
    pub fn next_frame(&mut self) -> Result<Option<TermFrame>, FrameError> {
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

    fn parse(&mut self) -> Result<Option<TermFrame>, FrameError> {
        let buf = &self.buf[self.pos..];
        if buf.len() < HEADER {
            return Ok(None);
        }
        let kind = buf[0];
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
        if len > MAX_PAYLOAD {
            return Err(FrameError::TooLarge(len));
        }
        match kind {
            KIND_INPUT => {}
            KIND_RESIZE if len != 4 => return Err(FrameError::BadResize(len)),
            KIND_RESIZE => {}
            other => return Err(FrameError::UnknownKind(other)),
        }
        let end = HEADER + len as usize;
        if buf.len() < end {
            return Ok(None);
        }
        let payload = &buf[HEADER..end];
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

/// An input frame carrying `bytes` (at most [`MAX_PAYLOAD`]; callers split longer input).
pub fn encode_input(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + bytes.len());
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

    fn drain(d: &mut FrameDecoder) -> Result<Vec<TermFrame>, FrameError> {
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
        assert_eq!(d.next_frame(), Err(FrameError::TooLarge(MAX_PAYLOAD + 1)));
        d.push(&encode_input(b"later"));
        assert!(d.next_frame().is_err(), "errors are sticky");
    }

    #[test]
    fn bad_kinds_and_resizes_are_errors() {
        let mut d = FrameDecoder::new();
        d.push(&[2, 0, 0, 0, 0]);
        assert_eq!(d.next_frame(), Err(FrameError::UnknownKind(2)));
        let mut d = FrameDecoder::new();
        d.push(&[KIND_RESIZE, 0, 0, 0, 3, 0, 1, 0]);
        assert_eq!(d.next_frame(), Err(FrameError::BadResize(3)));
        let mut d = FrameDecoder::new();
        d.push(&[KIND_INPUT, 0, 0]);
        assert_eq!(d.next_frame(), Ok(None));
    }
}
