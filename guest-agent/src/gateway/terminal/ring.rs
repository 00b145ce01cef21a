//! The recent output of a terminal session, kept so that a connection that attaches again gets
//! its screen redrawn (docs/screens.md#reconnecting).
//!
//! At most [`RING_CAPACITY`] bytes, the newest; older bytes are dropped as new ones come. A
//! replay after a reattachment starts with a full terminal reset (`ESC c`), then the kept bytes
//! from the first line start: a ring that has dropped bytes may begin in the middle of a line,
//! an escape sequence or a UTF-8 character, and a line start is the nearest place none of those
//! is cut. The first connection gets what the shell printed before it came, without a reset.

use std::collections::VecDeque;

/// Most bytes of output kept for a redraw (256 KiB: well over a full screen of any size with
/// its colours, and a few screens of a plain shell).
pub const RING_CAPACITY: usize = 256 * 1024;

/// The full reset that starts a redraw: clears the screen, the scrollback and every mode.
pub const RESET: &[u8] = b"\x1bc";

/// The newest output of a terminal, bounded.
#[derive(Debug)]
pub struct OutputRing {
    bytes: VecDeque<u8>,
    capacity: usize,
    /// Whether any byte was dropped (the kept bytes may start mid-line).
    cut: bool,
}

impl Default for OutputRing {
    fn default() -> Self {
        Self::new(RING_CAPACITY)
    }
}

impl OutputRing {
    /// A ring keeping at most `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        Self {
            bytes: VecDeque::new(),
            capacity,
            cut: false,
        }
    }

    /// Adds output, dropping the oldest bytes beyond the capacity.
    pub fn push(&mut self, bytes: &[u8]) {
        let bytes = if bytes.len() > self.capacity {
            self.cut = true;
            self.bytes.clear();
            &bytes[bytes.len() - self.capacity..]
        } else {
            bytes
        };
        let over = (self.bytes.len() + bytes.len()).saturating_sub(self.capacity);
        if over > 0 {
            self.cut = true;
            self.bytes.drain(..over);
        }
        self.bytes.extend(bytes);
    }

    /// How many bytes are kept.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// What a connection gets first: the kept output, from the first line start if bytes were
    /// dropped, after [`RESET`] when `reset` (a reattachment, whose terminal shows an older
    /// screen).
    pub fn replay(&self, reset: bool) -> Vec<u8> {
        let skip = if self.cut {
            // Past the first newline; nothing at all if the kept bytes hold none (one line longer
            // than the ring shows only from its next line on).
            self.bytes
                .iter()
                .position(|&b| b == b'\n')
                .map_or(self.bytes.len(), |at| at + 1)
        } else {
            0
        };
        let mut out = Vec::with_capacity(RESET.len() + self.bytes.len() - skip);
        if reset {
            out.extend_from_slice(RESET);
        }
        out.extend(self.bytes.range(skip..));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_connection_gets_everything_printed_before_it_without_a_reset() {
        let mut r = OutputRing::new(64);
        assert!(r.is_empty());
        assert_eq!(r.replay(false), b"");
        r.push(b"notice\r\n");
        r.push(b"$ ");
        assert_eq!(r.replay(false), b"notice\r\n$ ");
        assert_eq!(r.replay(true), b"\x1bcnotice\r\n$ ");
    }

    #[test]
    fn the_ring_keeps_the_newest_bytes_and_replays_from_a_line_start() {
        let mut r = OutputRing::new(16);
        r.push(b"line-1\r\nline-2\r\n");
        assert_eq!(r.len(), 16);
        assert_eq!(
            r.replay(false),
            b"line-1\r\nline-2\r\n",
            "nothing dropped yet"
        );
        // Three bytes more drop "lin": the replay starts at "line-2", never mid-line.
        r.push(b"$ x");
        assert_eq!(r.len(), 16);
        assert_eq!(r.replay(true), b"\x1bcline-2\r\n$ x");
        // A chunk larger than the ring keeps only its tail.
        let mut big = vec![b'a'; 40];
        big.extend_from_slice(b"\ntail");
        r.push(&big);
        assert_eq!(r.len(), 16);
        assert_eq!(r.replay(false), b"tail");
        // A cut ring without a newline replays nothing rather than half a sequence.
        r.push(&[b'x'; 16]);
        assert_eq!(r.replay(true), RESET);
    }

    #[test]
    fn the_ring_never_grows_past_its_capacity() {
        let mut r = OutputRing::default();
        let chunk = vec![b'y'; 4096 + 7];
        for _ in 0..200 {
            r.push(&chunk);
            assert!(r.len() <= RING_CAPACITY);
        }
        assert_eq!(r.len(), RING_CAPACITY);
        assert!(r.replay(true).len() <= RING_CAPACITY + RESET.len());
    }
}
