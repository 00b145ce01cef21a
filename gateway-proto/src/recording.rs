//! Screen recordings (docs/recordings.md): the pull operation by which the control plane takes a
//! bot's recording from its guest, and the record format both ends (and the console's player)
//! read.
//!
//! # Record format
//!
//! A recording is a sequence of records, back to back:
//!
//! ```text
//! record := header_len u32 LE | header (JSON, <= MAX_HEADER) | body_len u32 LE | body (<= MAX_BODY)
//! ```
//!
//! The header is a [`RecordHeader`] (JSON, tagged by `k`); the body is empty except for a
//! `frame`, whose body is a PNG (8-bit RGB) of the rectangle it covers. A `frame` with `full`
//! covers the whole screen and stands alone (a player seeks to the last full frame before a
//! time); any other frame is pasted over the picture so far. Times are milliseconds since the
//! Unix epoch on the guest's clock. JSON keeps the header readable to a player in a browser
//! without a decoder of ours; PNG is the frames' codec.

use crate::lease::BotId;
use serde::{Deserialize, Serialize};

/// Largest record header.
pub const MAX_HEADER: u32 = 4096;
/// Largest record body (a full 4K frame as PNG fits well below this).
pub const MAX_BODY: u32 = 32 << 20;
/// Largest pull reply the guest sends.
pub const MAX_PULL_BYTES: u32 = 16 << 20;
/// Longest `what` of an input record.
pub const MAX_WHAT: usize = 200;

/// Take what a bot's recorder has recorded since `after` (the last sequence number taken in
/// `session`). The first pull starts the recorder on the bot's live desktop; a recorder nobody
/// pulls from for a while stops by itself, so the control plane stops recording by no longer
/// pulling. Answer: [`RecordingChunk`], then `len` raw bytes of whole records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordingPull {
    pub bot: BotId,
    /// The recorder session the caller's `after` belongs to; another (or none) takes from the
    /// oldest record kept.
    pub session: Option<String>,
    pub after: u64,
    /// Most bytes to send (at least one whole record is sent whatever this says).
    pub max_bytes: u32,
}

/// What a pull returns: the records numbered `first..next` of recorder `session` follow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordingChunk {
    /// A fresh random id per recorder start (a restarted desktop or guest starts another).
    pub session: String,
    pub first: u64,
    pub next: u64,
    /// Records the recorder dropped (its buffer was full) between `after` and `first`.
    pub lost: u64,
    /// Length of the raw records that follow.
    pub len: u64,
    /// Screen size.
    pub width: u16,
    pub height: u16,
}

/// Who gave an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputSource {
    /// The bot, through `act`.
    Agent,
    /// A person, through a control capability (a takeover).
    Person,
}

/// A record's header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "k", rename_all = "lowercase", deny_unknown_fields)]
pub enum RecordHeader {
    /// The recorder started: the screen's size.
    Start { t: i64, w: u16, h: u16 },
    /// A PNG of the rectangle `x,y,w,h` follows; `cx,cy` is the pointer.
    Frame {
        t: i64,
        x: u16,
        y: u16,
        w: u16,
        h: u16,
        full: bool,
        cx: i32,
        cy: i32,
    },
    /// An input. Typed text is never recorded, only how many characters were typed.
    Input {
        t: i64,
        by: InputSource,
        /// The person's control lease (takeovers).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lease: Option<String>,
        what: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        x: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        y: Option<i32>,
    },
    /// `lost` records were dropped here (the recorder's buffer was full).
    Gap { t: i64, lost: u64 },
}

impl RecordHeader {
    pub fn time_ms(&self) -> i64 {
        match self {
            Self::Start { t, .. }
            | Self::Frame { t, .. }
            | Self::Input { t, .. }
            | Self::Gap { t, .. } => *t,
        }
    }
}

/// A record that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("a record is cut short at byte {0}")]
    Truncated(usize),
    #[error("a record header of {0} bytes is over the limit")]
    HeaderTooLong(u32),
    #[error("a record body of {0} bytes is over the limit")]
    BodyTooLong(u32),
    #[error("a record header at byte {at} is not valid: {why}")]
    BadHeader { at: usize, why: String },
    #[error("a {kind} record at byte {at} has a body it should not, or lacks one")]
    BadBody { kind: &'static str, at: usize },
}

/// Appends one record to `out`.
pub fn encode_record(header: &RecordHeader, body: &[u8], out: &mut Vec<u8>) {
    let head = serde_json::to_vec(header).expect("a record header serializes");
    out.extend_from_slice(&(head.len() as u32).to_le_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
}

/// Reads the records of `bytes` one by one; stops at the first error (after which the iterator
/// ends).
pub fn records(bytes: &[u8]) -> Records<'_> {
    Records {
        bytes,
        at: 0,
        failed: false,
    }
}

pub struct Records<'a> {
    bytes: &'a [u8],
    at: usize,
    failed: bool,
}

impl Records<'_> {
    /// Where the next record starts.
    pub fn offset(&self) -> usize {
        self.at
    }

    fn u32_at(&self, at: usize) -> Result<u32, RecordError> {
        let b = self
            .bytes
            .get(at..at + 4)
            .ok_or(RecordError::Truncated(at))?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The next record: its header and where its body is in `bytes`.
    fn next_record(&mut self) -> Result<(RecordHeader, std::ops::Range<usize>), RecordError> {
        let start = self.at;
        let head_len = self.u32_at(start)?;
        if head_len > MAX_HEADER {
            return Err(RecordError::HeaderTooLong(head_len));
        }
        let head_end = start + 4 + head_len as usize;
        let head = self
            .bytes
            .get(start + 4..head_end)
            .ok_or(RecordError::Truncated(start))?;
        let header: RecordHeader =
            serde_json::from_slice(head).map_err(|e| RecordError::BadHeader {
                at: start,
                why: e.to_string(),
            })?;
        let body_len = self.u32_at(head_end)?;
        if body_len > MAX_BODY {
            return Err(RecordError::BodyTooLong(body_len));
        }
        let body_end = head_end + 4 + body_len as usize;
        let body = self
            .bytes
            .get(head_end + 4..body_end)
            .ok_or(RecordError::Truncated(start))?;
        let (kind, wants_body) = match &header {
            RecordHeader::Frame { .. } => ("frame", true),
            RecordHeader::Start { .. } => ("start", false),
            RecordHeader::Input { .. } => ("input", false),
            RecordHeader::Gap { .. } => ("gap", false),
        };
        if wants_body == body.is_empty() {
            return Err(RecordError::BadBody { kind, at: start });
        }
        if let RecordHeader::Input { what, .. } = &header {
            if what.len() > MAX_WHAT {
                return Err(RecordError::BadHeader {
                    at: start,
                    why: format!("an input's text is over {MAX_WHAT} bytes"),
                });
            }
        }
        self.at = body_end;
        Ok((header, head_end + 4..body_end))
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<(RecordHeader, &'a [u8]), RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.at >= self.bytes.len() {
            return None;
        }
        let bytes: &'a [u8] = self.bytes;
        let r = self.next_record().map(|(h, body)| (h, &bytes[body]));
        self.failed = r.is_err();
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(t: i64) -> RecordHeader {
        RecordHeader::Frame {
            t,
            x: 1,
            y: 2,
            w: 3,
            h: 4,
            full: false,
            cx: 5,
            cy: 6,
        }
    }

    #[test]
    fn records_round_trip() {
        let mut out = Vec::new();
        encode_record(&RecordHeader::Start { t: 1, w: 8, h: 9 }, &[], &mut out);
        encode_record(&frame(2), b"png", &mut out);
        let input = RecordHeader::Input {
            t: 3,
            by: InputSource::Person,
            lease: Some("ctl-1".into()),
            what: "click".into(),
            x: Some(4),
            y: None,
        };
        encode_record(&input, &[], &mut out);
        let all: Vec<_> = records(&out).collect::<Result<_, _>>().unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[1], (frame(2), &b"png"[..]));
        assert_eq!(all[2].0, input);
        let json = String::from_utf8(out[4..4 + out[0] as usize].to_vec()).unwrap();
        assert_eq!(json, r#"{"k":"start","t":1,"w":8,"h":9}"#);
    }

    #[test]
    fn bad_records_are_refused_and_end_the_reading() {
        let mut out = Vec::new();
        encode_record(&frame(1), b"x", &mut out);
        let cut = &out[..out.len() - 1];
        let r: Vec<_> = records(cut).collect();
        assert_eq!(r, vec![Err(RecordError::Truncated(0))]);
        let mut empty_frame = Vec::new();
        encode_record(&frame(1), &[], &mut empty_frame);
        assert!(matches!(
            records(&empty_frame).next(),
            Some(Err(RecordError::BadBody { kind: "frame", .. }))
        ));
        let mut huge = (MAX_HEADER + 1).to_le_bytes().to_vec();
        huge.extend_from_slice(&[0; 16]);
        assert_eq!(
            records(&huge).next(),
            Some(Err(RecordError::HeaderTooLong(MAX_HEADER + 1)))
        );
        let mut junk = 2u32.to_le_bytes().to_vec();
        junk.extend_from_slice(b"{}");
        junk.extend_from_slice(&0u32.to_le_bytes());
        assert!(matches!(
            records(&junk).next(),
            Some(Err(RecordError::BadHeader { .. }))
        ));
        // Arbitrary bytes never panic.
        for n in 0..64u8 {
            let bytes: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37)).collect();
            let _ = records(&bytes).count();
        }
    }
}
