//! A check of the terminal's client frames (contracts.md §7) as they pass through, sans-IO.
//!
//! Client to server: `[kind u8][len u32 big-endian][payload]`, kind 0 = input bytes, kind 1 =
//! resize (`cols u16be, rows u16be`), at most 1 MiB of payload; a frame may be split across
//! websocket messages and a message may hold several frames. The guest parses the frames again;
//! checking here means an oversized or malformed frame closes the browser's connection at the
//! control plane, before a byte of it crosses the tunnel. Bytes are forwarded unchanged.

/// Largest terminal frame payload (contracts.md §7: 1 MiB).
pub const MAX_TERMINAL_FRAME: u32 = 1 << 20;

const HEADER_LEN: usize = 5;

/// Why a client's terminal stream was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TermFrameError {
    #[error("terminal frame of {0} bytes exceeds the 1 MiB limit")]
    TooLarge(u32),
    #[error("unknown terminal frame kind {0}")]
    BadKind(u8),
    #[error("a resize frame carries 4 bytes, not {0}")]
    BadResize(u32),
}

/// Tracks frame boundaries across messages.
#[derive(Debug, Default)]
pub struct TermFrameCheck {
    header: [u8; HEADER_LEN],
    have: usize,
    /// Payload bytes still to come of the current frame.
    remaining: u32,
}

impl TermFrameCheck {
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
                let kind = self.header[0];
                let len = u32::from_be_bytes([
                    self.header[1],
                    self.header[2],
                    self.header[3],
                    self.header[4],
                ]);
                if len > MAX_TERMINAL_FRAME {
                    return Err(TermFrameError::TooLarge(len));
                }
                match kind {
                    0 => {}
                    1 if len == 4 => {}
                    1 => return Err(TermFrameError::BadResize(len)),
                    other => return Err(TermFrameError::BadKind(other)),
                }
                self.remaining = len;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![kind];
        f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn frames_split_anywhere_pass() {
        let mut stream = frame(0, b"echo hi\r");
        stream.extend(frame(1, &[0, 123, 0, 45]));
        stream.extend(frame(0, b""));
        stream.extend(frame(0, &vec![b'x'; 70_000]));
        for chunk in [1, 2, 3, 5, 7, 4096] {
            let mut c = TermFrameCheck::new();
            for part in stream.chunks(chunk) {
                c.push(part).unwrap();
            }
        }
        TermFrameCheck::new().push(&stream).unwrap();
    }

    #[test]
    fn the_limit_is_one_mebibyte() {
        let mut ok = vec![0u8];
        ok.extend_from_slice(&MAX_TERMINAL_FRAME.to_be_bytes());
        TermFrameCheck::new().push(&ok).unwrap();
        let mut big = vec![0u8];
        big.extend_from_slice(&(2u32 << 20).to_be_bytes());
        let mut c = TermFrameCheck::new();
        // Refused as soon as the header is complete, whatever the split.
        c.push(&big[..3]).unwrap();
        assert_eq!(c.push(&big[3..]), Err(TermFrameError::TooLarge(2 << 20)));
    }

    #[test]
    fn bad_kinds_and_resizes_are_refused() {
        assert_eq!(
            TermFrameCheck::new().push(&frame(2, b"x")),
            Err(TermFrameError::BadKind(2))
        );
        assert_eq!(
            TermFrameCheck::new().push(&frame(1, &[0, 1, 0])),
            Err(TermFrameError::BadResize(3))
        );
    }
}
