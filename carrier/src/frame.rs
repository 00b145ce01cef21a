//! The carrier's wire format, sans-IO: the dialer's [`PREAMBLE`] once, then frames
//! `[len u16 BE][datagram]` in both directions, `1 <= len <= MAX_DATAGRAM`.
//!
//! [`Decoder`] checks bytes as they arrive: a wrong preamble byte, an empty frame or a length over
//! [`MAX_DATAGRAM`] is a [`FrameError`], and the caller closes that connection (nothing else).

use bytes::{Buf, Bytes, BytesMut};
use std::fmt;

/// What a dialer sends first: which carrier, which version. A peer that sends anything else (an
/// HTTP client, a port scanner) is not a carrier and is cut off at its first wrong byte.
pub const PREAMBLE: &[u8; 8] = b"RKZQTCP1";
/// The largest datagram a frame carries: quinn's largest UDP payload (`max_udp_payload_size`).
pub const MAX_DATAGRAM: usize = 65_527;
/// Bytes of a frame's length prefix.
pub const HEADER: usize = 2;

/// Why a byte stream is not carrier frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// The connection did not open with [`PREAMBLE`].
    Preamble,
    /// A frame of length 0 (no datagram is empty).
    Empty,
    /// A frame longer than [`MAX_DATAGRAM`].
    Oversized(usize),
    /// A websocket message that is not binary (text, or a raw frame).
    NotBinary,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Preamble => f.write_str("not a carrier: wrong preamble"),
            Self::Empty => f.write_str("empty frame"),
            Self::Oversized(n) => write!(f, "frame of {n} bytes exceeds {MAX_DATAGRAM}"),
            Self::NotBinary => f.write_str("websocket message is not binary"),
        }
    }
}

impl std::error::Error for FrameError {}

/// Appends the frame carrying `datagram` to `out`. Returns `false`, appending nothing, for a
/// datagram no frame can carry (empty or over [`MAX_DATAGRAM`]).
pub fn encode(datagram: &[u8], out: &mut Vec<u8>) -> bool {
    let Ok(len) = u16::try_from(datagram.len()) else {
        return false;
    };
    if datagram.is_empty() || datagram.len() > MAX_DATAGRAM {
        return false;
    }
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(datagram);
    true
}

/// Splits a received byte stream into datagrams.
#[derive(Debug)]
pub struct Decoder {
    /// How much of [`PREAMBLE`] has been seen (the full length once it has, or for a dialer).
    preamble_seen: usize,
}

impl Decoder {
    /// The accepting end: the stream must open with [`PREAMBLE`].
    pub fn accepting() -> Self {
        Self { preamble_seen: 0 }
    }

    /// The dialing end: frames from the first byte.
    pub fn dialing() -> Self {
        Self {
            preamble_seen: PREAMBLE.len(),
        }
    }

    /// Whether the whole preamble has arrived (always, for a dialer).
    pub fn preamble_done(&self) -> bool {
        self.preamble_seen == PREAMBLE.len()
    }

    /// The next whole datagram at the front of `buf` (removed from it), `None` when more bytes
    /// are needed. After an error the stream is unusable.
    pub fn next(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        if !self.preamble_done() {
            let want = &PREAMBLE[self.preamble_seen..];
            let n = want.len().min(buf.len());
            if buf[..n] != want[..n] {
                return Err(FrameError::Preamble);
            }
            buf.advance(n);
            self.preamble_seen += n;
            if !self.preamble_done() {
                return Ok(None);
            }
        }
        if buf.len() < HEADER {
            return Ok(None);
        }
        let len = usize::from(u16::from_be_bytes([buf[0], buf[1]]));
        if len == 0 {
            return Err(FrameError::Empty);
        }
        if len > MAX_DATAGRAM {
            return Err(FrameError::Oversized(len));
        }
        if buf.len() < HEADER + len {
            return Ok(None);
        }
        buf.advance(HEADER);
        Ok(Some(buf.split_to(len).freeze()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(decoder: &mut Decoder, buf: &mut BytesMut) -> Result<Vec<Bytes>, FrameError> {
        let mut out = Vec::new();
        while let Some(d) = decoder.next(buf)? {
            out.push(d);
        }
        Ok(out)
    }

    #[test]
    fn frames_round_trip_byte_by_byte() {
        let datagrams: Vec<Vec<u8>> = vec![vec![1], vec![7; 1200], vec![9; MAX_DATAGRAM]];
        let mut wire = PREAMBLE.to_vec();
        for d in &datagrams {
            assert!(encode(d, &mut wire));
        }
        // Every split point: the decoder never needs a whole frame in one read.
        let mut decoder = Decoder::accepting();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for byte in wire {
            buf.extend_from_slice(&[byte]);
            got.extend(all(&mut decoder, &mut buf).unwrap());
        }
        assert_eq!(got, datagrams);
        assert!(buf.is_empty());
    }

    #[test]
    fn a_dialer_expects_no_preamble() {
        let mut wire = Vec::new();
        assert!(encode(b"abc", &mut wire));
        let mut buf = BytesMut::from(&wire[..]);
        assert_eq!(
            all(&mut Decoder::dialing(), &mut buf).unwrap(),
            vec![&b"abc"[..]]
        );
    }

    #[test]
    fn unencodable_datagrams_are_refused() {
        let mut out = Vec::new();
        assert!(!encode(&[], &mut out));
        assert!(!encode(&vec![0; MAX_DATAGRAM + 1], &mut out));
        assert!(out.is_empty());
    }

    #[test]
    fn garbage_is_an_error_at_the_first_wrong_byte() {
        // An HTTP request is refused by its first byte, before a whole preamble arrived.
        let mut buf = BytesMut::from(&b"G"[..]);
        assert_eq!(
            Decoder::accepting().next(&mut buf),
            Err(FrameError::Preamble)
        );
        let mut decoder = Decoder::accepting();
        let mut buf = BytesMut::from(&PREAMBLE[..5]);
        assert_eq!(decoder.next(&mut buf), Ok(None));
        buf.extend_from_slice(b"X");
        assert_eq!(decoder.next(&mut buf), Err(FrameError::Preamble));

        let mut buf = BytesMut::from(&[0u8, 0][..]);
        assert_eq!(Decoder::dialing().next(&mut buf), Err(FrameError::Empty));
        // Known from the header alone: no waiting for 65 535 bytes that will never be valid.
        let mut buf = BytesMut::from(&[0xff, 0xff][..]);
        assert_eq!(
            Decoder::dialing().next(&mut buf),
            Err(FrameError::Oversized(65_535))
        );
    }
}
