//! Length-delimited frames: `[len u32 big-endian][payload]`, payload encoded with postcard.
//!
//! [`FrameDecoder`] is an incremental decoder for a byte stream: feed it whatever arrived, take
//! out whole frames. It never panics and never buffers more than one maximum frame plus one read.
//! Typed decoding of a payload is [`decode`]; both fail with a [`FrameError`] that says why.

use serde::{de::DeserializeOwned, Serialize};

/// Largest payload of a typed frame, in bytes. Bulk data never travels in typed frames larger
/// than this: it flows raw after a typed header, or in chunks of at most [`MAX_CHUNK`].
pub const MAX_FRAME_LEN: usize = 1 << 20;

/// Largest data chunk senders put in a single typed frame (stdout, stdin), leaving room for the
/// envelope inside [`MAX_FRAME_LEN`].
pub const MAX_CHUNK: usize = 64 * 1024;

/// Why a frame could not be decoded or encoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    /// The length prefix announces more than [`MAX_FRAME_LEN`] bytes.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
    /// The payload is not a valid encoding of the expected message.
    #[error("malformed frame payload: {0}")]
    Malformed(String),
    /// Trailing bytes after a complete message inside one payload.
    #[error("frame payload has {0} trailing bytes")]
    Trailing(usize),
    /// The stream ended in the middle of a frame.
    #[error("stream ended inside a frame ({0} bytes buffered)")]
    Truncated(usize),
}

/// Encodes `msg` as one frame (prefix plus payload).
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let mut out = Vec::new();
    encode_into(msg, &mut out)?;
    Ok(out)
}

/// Appends the frame for `msg` to `out`; on error `out` is left as it was.
pub fn encode_into<T: Serialize>(msg: &T, out: &mut Vec<u8>) -> Result<(), FrameError> {
    let payload = postcard::to_allocvec(msg).map_err(|e| FrameError::Malformed(e.to_string()))?;
    if payload.len() > MAX_FRAME_LEN {
        return Err(FrameError::TooLarge {
            len: payload.len(),
            max: MAX_FRAME_LEN,
        });
    }
    // The check above bounds the length to MAX_FRAME_LEN, which fits in u32.
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&payload);
    Ok(())
}

/// Decodes one payload (without its length prefix) as `T`, rejecting trailing bytes.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, FrameError> {
    let (msg, rest) = postcard::take_from_bytes::<T>(payload)
        .map_err(|e| FrameError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(FrameError::Trailing(rest.len()));
    }
    Ok(msg)
}

/// Incremental frame decoder over a byte stream.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    /// Bytes of `buf` already taken as frames; compacted on the next push, so taking many small
    /// frames from one read costs linear, not quadratic, time.
    start: usize,
    max: Option<usize>,
}

impl FrameDecoder {
    /// A decoder that accepts frames up to [`MAX_FRAME_LEN`].
    pub fn new() -> Self {
        Self::default()
    }

    /// A decoder with a smaller limit, for streams that only ever carry small messages.
    pub fn with_max(max: usize) -> Self {
        Self {
            buf: Vec::new(),
            start: 0,
            max: Some(max.min(MAX_FRAME_LEN)),
        }
    }

    fn max(&self) -> usize {
        self.max.unwrap_or(MAX_FRAME_LEN)
    }

    /// Appends received bytes. Call [`FrameDecoder::next_frame`] until it returns `Ok(None)`.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes buffered that do not yet form a frame.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Takes the next complete frame payload, if one is buffered.
    ///
    /// An oversized length prefix is an error as soon as the prefix arrives, before its payload
    /// is buffered, so a peer cannot make the decoder hold more than one frame.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        let rest = &self.buf[self.start..];
        let Some(prefix) = rest.first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(*prefix) as usize;
        if len > self.max() {
            return Err(FrameError::TooLarge {
                len,
                max: self.max(),
            });
        }
        if rest.len() < 4 + len {
            return Ok(None);
        }
        let payload = rest[4..4 + len].to_vec();
        self.start += 4 + len;
        Ok(Some(payload))
    }

    /// Takes the next frame and decodes it as `T`.
    pub fn next_message<T: DeserializeOwned>(&mut self) -> Result<Option<T>, FrameError> {
        match self.next_frame()? {
            Some(payload) => decode(&payload).map(Some),
            None => Ok(None),
        }
    }

    /// Called when the underlying stream ended: an error if a partial frame is left.
    pub fn finish(&self) -> Result<(), FrameError> {
        match self.buffered() {
            0 => Ok(()),
            n => Err(FrameError::Truncated(n)),
        }
    }

    /// Gives back bytes buffered past the last frame, for a stream that switches from typed
    /// frames to raw bulk bytes.
    pub fn into_remainder(mut self) -> Vec<u8> {
        self.buf.drain(..self.start);
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_frames_reassemble() {
        let a = encode(&(1u32, "hello".to_string())).unwrap();
        let b = encode(&(2u32, "world".to_string())).unwrap();
        let mut all = a.clone();
        all.extend_from_slice(&b);
        let mut d = FrameDecoder::new();
        let mut got = Vec::new();
        for byte in all {
            d.push(&[byte]);
            while let Some(m) = d.next_message::<(u32, String)>().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, vec![(1, "hello".into()), (2, "world".into())]);
        d.finish().unwrap();
    }

    #[test]
    fn oversized_prefix_is_refused_before_payload_arrives() {
        let mut d = FrameDecoder::new();
        d.push(&((MAX_FRAME_LEN as u32) + 1).to_be_bytes());
        assert_eq!(
            d.next_frame(),
            Err(FrameError::TooLarge {
                len: MAX_FRAME_LEN + 1,
                max: MAX_FRAME_LEN
            })
        );
    }

    #[test]
    fn encode_refuses_oversized_message() {
        let big = vec![7u8; MAX_FRAME_LEN + 1];
        assert!(matches!(
            encode(&serde_bytes::ByteBuf::from(big)),
            Err(FrameError::TooLarge { .. })
        ));
    }

    #[test]
    fn trailing_bytes_are_rejected() {
        let mut payload = postcard::to_allocvec(&5u32).unwrap();
        payload.push(0);
        assert_eq!(decode::<u32>(&payload), Err(FrameError::Trailing(1)));
    }

    #[test]
    fn truncated_stream_is_reported() {
        let f = encode(&"abc").unwrap();
        let mut d = FrameDecoder::new();
        d.push(&f[..f.len() - 1]);
        assert_eq!(d.next_frame(), Ok(None));
        assert_eq!(d.finish(), Err(FrameError::Truncated(f.len() - 1)));
    }
}
