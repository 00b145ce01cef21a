//! A sans-IO parser of the client→server half of an RFB (VNC) connection that enforces a
//! capability's policy: a `View` client's input (keys, pointer, clipboard, resize, power) is
//! dropped here, in the gateway, whatever the RFB server behind the socket would allow.
//!
//! The parser follows the handshake (ProtocolVersion, the 3.7+ security-type byte, ClientInit)
//! and then splits the stream into messages by their RFC 6143 layouts. Bytes may arrive split
//! anywhere; forwarded bytes are streamed out as they arrive (a long clipboard message is never
//! buffered whole), dropped bytes are skipped. A message type it does not know, or a length over
//! its bound, is an error: the length of what follows is then unknown, so the connection must end.
//!
//! The fuzz target `rfb_filter` compiles this file on its own (fuzz/src/lib.rs,
//! docs/fuzzing.md): it depends on std and thiserror only.

use std::fmt;

/// Longest `ClientCutText` accepted (bytes of text); a longer one ends the connection.
pub const MAX_CUT_TEXT: u32 = 1024 * 1024;
/// Most encodings one `SetEncodings` may list (noVNC sends about twenty).
pub const MAX_ENCODINGS: u16 = 1024;
/// Longest `ClientFence` payload (RFB community extension: at most 64).
pub const MAX_FENCE_PAYLOAD: u8 = 64;

/// What the client may do through this connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Watch only: every input message is dropped.
    View,
    /// Watch and drive: every known message is forwarded.
    Control,
}

/// Why the client's stream cannot be followed any further.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error("the client sent an invalid RFB protocol version {0:?}")]
    BadVersion(String),
    #[error("the client chose RFB security type {0}; only None (1) is served")]
    BadSecurityType(u8),
    #[error("the client sent an unknown RFB message type {0}")]
    UnknownMessage(u8),
    #[error("the client sent an unknown RFB QEMU sub-message {0}")]
    UnknownQemuMessage(u8),
    #[error("the client's RFB {what} length {len} is over the limit {max}")]
    TooLong {
        what: &'static str,
        len: u64,
        max: u64,
    },
}

/// How a message is treated under the connection's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Harmless for a viewer (pixel format, encodings, update requests, fences).
    Display,
    /// Input to the desktop: dropped for `View`.
    Input,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The 12-byte ProtocolVersion.
    Version,
    /// The 3.7+ security-type byte.
    Security,
    /// The 1-byte ClientInit (shared flag).
    ClientInit,
    /// Normal messages: collecting a header (type byte first).
    Header,
    /// Normal messages: the variable part of the current message.
    Body { left: u64, forward: bool },
    /// An error was reported; nothing more is accepted.
    Failed,
}

/// An input message a `Control` client sent, as a recording notes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    Key { down: bool, keysym: u32 },
    Pointer { mask: u8, x: u16, y: u16 },
}

/// The client→server filter of one connection. Feed it every byte the client sends, in order.
pub struct ClientFilter {
    policy: Policy,
    /// Forwarded key and pointer messages are noted in `inputs` (a recorded screen).
    note_inputs: bool,
    inputs: Vec<Input>,
    phase: Phase,
    /// The bytes of the fixed part (version or message header) gathered so far.
    head: Vec<u8>,
    error: Option<FilterError>,
    dropped: u64,
}

impl fmt::Debug for ClientFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientFilter")
            .field("policy", &self.policy)
            .field("phase", &self.phase)
            .field("dropped", &self.dropped)
            .finish()
    }
}

/// The 12 bytes of `RFB xxx.yyy\n` the gateway accepts, and whether the security-type byte
/// follows (3.7 and 3.8) or not (3.3, where the server picks).
fn parse_version(v: &[u8]) -> Result<bool, FilterError> {
    match v {
        b"RFB 003.003\n" => Ok(false),
        b"RFB 003.007\n" | b"RFB 003.008\n" => Ok(true),
        other => Err(FilterError::BadVersion(
            String::from_utf8_lossy(other).into_owned(),
        )),
    }
}

/// The size of a message's fixed part, from its type byte (and, for QEMU messages, the
/// sub-type that follows it: their fixed part is read in two steps).
fn header_len(head: &[u8]) -> Result<usize, FilterError> {
    Ok(match head[0] {
        0 => 20,   // SetPixelFormat: type, 3 padding, 16-byte pixel format
        2 => 4,    // SetEncodings: type, padding, u16 count; then 4 bytes each
        3 => 10,   // FramebufferUpdateRequest: type, incremental, x, y, w, h
        4 => 8,    // KeyEvent: type, down, 2 padding, u32 keysym
        5 => 6,    // PointerEvent: type, mask, x, y
        6 => 8,    // ClientCutText: type, 3 padding, u32 length; then the text
        150 => 10, // EnableContinuousUpdates: type, enable, x, y, w, h
        248 => 9,  // ClientFence: type, 3 padding, u32 flags, u8 length; then the payload
        250 => 4,  // xvp: type, padding, version, code
        251 => 8,  // SetDesktopSize: type, padding, w, h, u8 screens, padding; 16 bytes each
        255 => match head.get(1) {
            None => 2,
            Some(0) => 12, // QEMU extended key event: type, 0, u16 down, u32 keysym, u32 code
            Some(&sub) => return Err(FilterError::UnknownQemuMessage(sub)),
        },
        other => return Err(FilterError::UnknownMessage(other)),
    })
}

/// The class and the variable length of a message whose fixed part is complete.
fn classify(head: &[u8]) -> Result<(Class, u64), FilterError> {
    let be16 = |i: usize| u16::from_be_bytes([head[i], head[i + 1]]);
    let be32 = |i: usize| u32::from_be_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    Ok(match head[0] {
        0 | 3 | 150 => (Class::Display, 0),
        2 => {
            let n = be16(2);
            if n > MAX_ENCODINGS {
                return Err(FilterError::TooLong {
                    what: "SetEncodings",
                    len: n.into(),
                    max: MAX_ENCODINGS.into(),
                });
            }
            (Class::Display, u64::from(n) * 4)
        }
        248 => {
            let n = head[8];
            if n > MAX_FENCE_PAYLOAD {
                return Err(FilterError::TooLong {
                    what: "ClientFence",
                    len: n.into(),
                    max: MAX_FENCE_PAYLOAD.into(),
                });
            }
            (Class::Display, n.into())
        }
        4 | 5 | 250 | 255 => (Class::Input, 0),
        6 => {
            // The extended-clipboard extension sends a negative (two's complement) length.
            let raw = be32(4);
            let len = (raw as i32).unsigned_abs();
            if len > MAX_CUT_TEXT {
                return Err(FilterError::TooLong {
                    what: "ClientCutText",
                    len: len.into(),
                    max: MAX_CUT_TEXT.into(),
                });
            }
            (Class::Input, len.into())
        }
        251 => (Class::Input, u64::from(head[6]) * 16),
        other => return Err(FilterError::UnknownMessage(other)),
    })
}

impl ClientFilter {
    /// A filter at the start of a connection.
    pub fn new(policy: Policy) -> Self {
        Self {
            policy,
            note_inputs: false,
            inputs: Vec::new(),
            phase: Phase::Version,
            head: Vec::with_capacity(20),
            error: None,
            dropped: 0,
        }
    }

    /// Notes the key and pointer messages it forwards, for [`ClientFilter::take_inputs`].
    pub fn note_inputs(mut self) -> Self {
        self.note_inputs = true;
        self
    }

    /// The key and pointer messages forwarded since the last call (when noting them).
    pub fn take_inputs(&mut self) -> Vec<Input> {
        std::mem::take(&mut self.inputs)
    }

    /// Messages dropped so far (input from a viewer).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Takes the next bytes from the client and appends what may reach the server to `out`.
    /// After an error every later call returns it again.
    pub fn push(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), FilterError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        while !input.is_empty() {
            match self.step(input, out) {
                Ok(used) => input = &input[used..],
                Err(e) => {
                    self.phase = Phase::Failed;
                    self.error = Some(e.clone());
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Consumes a prefix of `input` (at least one byte) and returns its length.
    fn step(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, FilterError> {
        match self.phase {
            Phase::Version => {
                let used = self.gather(input, 12);
                if self.head.len() == 12 {
                    let security_byte = parse_version(&self.head)?;
                    out.extend_from_slice(&self.head);
                    self.head.clear();
                    self.phase = if security_byte {
                        Phase::Security
                    } else {
                        Phase::ClientInit
                    };
                }
                Ok(used)
            }
            Phase::Security => {
                if input[0] != 1 {
                    return Err(FilterError::BadSecurityType(input[0]));
                }
                out.push(input[0]);
                self.phase = Phase::ClientInit;
                Ok(1)
            }
            Phase::ClientInit => {
                out.push(input[0]);
                self.phase = Phase::Header;
                Ok(1)
            }
            Phase::Header => {
                let mut used = 0;
                if self.head.is_empty() {
                    self.head.push(input[0]);
                    used = 1;
                }
                // The fixed size is known from the type byte, except for QEMU messages, whose
                // size grows once their sub-type byte has arrived: recompute until it holds.
                loop {
                    let want = header_len(&self.head)?;
                    if self.head.len() >= want {
                        break;
                    }
                    if used == input.len() {
                        return Ok(used);
                    }
                    used += self.gather(&input[used..], want);
                }
                let (class, body) = classify(&self.head)?;
                let forward = class == Class::Display || self.policy == Policy::Control;
                if forward {
                    out.extend_from_slice(&self.head);
                    if self.note_inputs && class == Class::Input {
                        self.note(&self.head.clone());
                    }
                } else {
                    self.dropped += 1;
                }
                self.head.clear();
                self.phase = if body == 0 {
                    Phase::Header
                } else {
                    Phase::Body {
                        left: body,
                        forward,
                    }
                };
                Ok(used)
            }
            Phase::Body { left, forward } => {
                let n = usize::try_from(left).unwrap_or(usize::MAX).min(input.len());
                if forward {
                    out.extend_from_slice(&input[..n]);
                }
                let left = left - n as u64;
                self.phase = if left == 0 {
                    Phase::Header
                } else {
                    Phase::Body { left, forward }
                };
                Ok(n)
            }
            Phase::Failed => Err(self.error.clone().unwrap_or(FilterError::UnknownMessage(0))),
        }
    }

    /// Notes a forwarded key or pointer message (bounded: a flood keeps the newest 4096).
    fn note(&mut self, head: &[u8]) {
        let input = match head {
            [4, down, _, _, a, b, c, d] => Input::Key {
                down: *down != 0,
                keysym: u32::from_be_bytes([*a, *b, *c, *d]),
            },
            [255, 0, d1, d2, a, b, c, d, ..] => Input::Key {
                down: *d1 != 0 || *d2 != 0,
                keysym: u32::from_be_bytes([*a, *b, *c, *d]),
            },
            [5, mask, x1, x2, y1, y2] => Input::Pointer {
                mask: *mask,
                x: u16::from_be_bytes([*x1, *x2]),
                y: u16::from_be_bytes([*y1, *y2]),
            },
            _ => return,
        };
        if self.inputs.len() >= 4096 {
            self.inputs.remove(0);
        }
        self.inputs.push(input);
    }

    /// Moves bytes from `input` into `head` until it holds `want`; returns how many it took.
    fn gather(&mut self, input: &[u8], want: usize) -> usize {
        let n = want.saturating_sub(self.head.len()).min(input.len());
        self.head.extend_from_slice(&input[..n]);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HANDSHAKE_38: &[u8] = b"RFB 003.008\n\x01\x01";

    fn set_pixel_format() -> Vec<u8> {
        let mut m = vec![0, 0, 0, 0];
        m.extend_from_slice(&[32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0]);
        m
    }
    fn set_encodings(list: &[i32]) -> Vec<u8> {
        let mut m = vec![2, 0];
        m.extend_from_slice(&(list.len() as u16).to_be_bytes());
        for e in list {
            m.extend_from_slice(&e.to_be_bytes());
        }
        m
    }
    fn update_request() -> Vec<u8> {
        vec![3, 1, 0, 0, 0, 0, 5, 0, 3, 32]
    }
    fn key() -> Vec<u8> {
        vec![4, 1, 0, 0, 0, 0, 0, 0x61]
    }
    fn pointer() -> Vec<u8> {
        vec![5, 1, 0, 10, 0, 20]
    }
    fn cut_text(text: &[u8]) -> Vec<u8> {
        let mut m = vec![6, 0, 0, 0];
        m.extend_from_slice(&(text.len() as u32).to_be_bytes());
        m.extend_from_slice(text);
        m
    }
    fn continuous() -> Vec<u8> {
        vec![150, 1, 0, 0, 0, 0, 5, 0, 3, 32]
    }
    fn fence(payload: &[u8]) -> Vec<u8> {
        let mut m = vec![248, 0, 0, 0, 0, 0, 0, 3, payload.len() as u8];
        m.extend_from_slice(payload);
        m
    }
    fn xvp() -> Vec<u8> {
        vec![250, 0, 1, 2]
    }
    fn desktop_size(screens: u8) -> Vec<u8> {
        let mut m = vec![251, 0, 4, 0, 3, 0, screens, 0];
        for i in 0..screens {
            m.extend_from_slice(&[i; 16]);
        }
        m
    }
    fn qemu_key() -> Vec<u8> {
        vec![255, 0, 0, 1, 0, 0, 0, 0x61, 0, 0, 0, 30]
    }

    /// Every message of the vocabulary once, and whether a viewer may send it.
    fn vocabulary() -> Vec<(Vec<u8>, bool)> {
        vec![
            (set_pixel_format(), true),
            (set_encodings(&[0, 1, 7, -223, -224]), true),
            (update_request(), true),
            (key(), false),
            (pointer(), false),
            (cut_text(b"secret clipboard"), false),
            (continuous(), true),
            (fence(b"abc"), true),
            (fence(b""), true),
            (xvp(), false),
            (desktop_size(2), false),
            (qemu_key(), false),
            (set_encodings(&[]), true),
            (cut_text(b""), false),
        ]
    }

    /// The whole client stream and what each policy must let through.
    fn session(handshake: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let mut all = handshake.to_vec();
        let mut viewable = handshake.to_vec();
        for (msg, harmless) in vocabulary() {
            all.extend_from_slice(&msg);
            if harmless {
                viewable.extend_from_slice(&msg);
            }
        }
        (all, viewable)
    }

    fn run(policy: Policy, pieces: &[&[u8]]) -> Result<Vec<u8>, FilterError> {
        let mut f = ClientFilter::new(policy);
        let mut out = Vec::new();
        for p in pieces {
            f.push(p, &mut out)?;
        }
        Ok(out)
    }

    #[test]
    fn view_drops_every_input_message_and_keeps_the_rest() {
        let (all, viewable) = session(HANDSHAKE_38);
        assert_eq!(run(Policy::View, &[&all]).unwrap(), viewable);
        assert_eq!(run(Policy::Control, &[&all]).unwrap(), all);
        let mut f = ClientFilter::new(Policy::View);
        f.push(&all, &mut Vec::new()).unwrap();
        assert_eq!(f.dropped(), 7);
    }

    #[test]
    fn a_split_at_every_byte_gives_the_same_output() {
        for handshake in [HANDSHAKE_38, b"RFB 003.007\n\x01\x00", b"RFB 003.003\n\x01"] {
            let (all, viewable) = session(handshake);
            for (policy, want) in [(Policy::View, &viewable), (Policy::Control, &all)] {
                for i in 0..=all.len() {
                    let out = run(policy, &[&all[..i], &all[i..]]).unwrap();
                    assert_eq!(&out, want, "split at {i} ({policy:?})");
                }
                for i in 0..all.len() {
                    for j in i..=all.len() {
                        let out = run(policy, &[&all[..i], &all[i..j], &all[j..]]).unwrap();
                        assert_eq!(&out, want, "split at {i} and {j} ({policy:?})");
                    }
                }
                let bytes: Vec<&[u8]> = all.chunks(1).collect();
                assert_eq!(&run(policy, &bytes).unwrap(), want, "byte by byte");
            }
        }
    }

    #[test]
    fn each_message_alone_is_forwarded_or_dropped() {
        for (msg, harmless) in vocabulary() {
            let input = [HANDSHAKE_38, &msg].concat();
            let view = run(Policy::View, &[&input]).unwrap();
            let want = if harmless {
                input.clone()
            } else {
                HANDSHAKE_38.to_vec()
            };
            assert_eq!(view, want, "message type {}", msg[0]);
            assert_eq!(run(Policy::Control, &[&input]).unwrap(), input);
        }
    }

    #[test]
    fn bad_versions_and_security_types_end_the_connection() {
        for bad in [
            &b"RFB 003.889\n"[..],
            b"RFB 004.000\n",
            b"GET / HTTP/1.1",
            b"\0\0\0\0\0\0\0\0\0\0\0\0",
        ] {
            assert!(matches!(
                run(Policy::View, &[bad]),
                Err(FilterError::BadVersion(_))
            ));
        }
        assert_eq!(
            run(Policy::View, &[b"RFB 003.008\n\x02"]),
            Err(FilterError::BadSecurityType(2))
        );
        // Before its twelfth byte a version is only incomplete.
        assert_eq!(run(Policy::View, &[b"RFB 003.00"]).unwrap(), b"");
    }

    #[test]
    fn unknown_and_oversized_messages_end_the_connection() {
        for t in [1u8, 7, 100, 149, 151, 249, 252, 253, 254] {
            let input = [HANDSHAKE_38, &[t, 0, 0, 0]].concat();
            assert_eq!(
                run(Policy::Control, &[&input]),
                Err(FilterError::UnknownMessage(t)),
                "type {t}"
            );
        }
        let qemu_audio = [HANDSHAKE_38, &[255, 1, 0, 0]].concat();
        assert_eq!(
            run(Policy::View, &[&qemu_audio]),
            Err(FilterError::UnknownQemuMessage(1))
        );
        let mut huge_cut = HANDSHAKE_38.to_vec();
        huge_cut.extend_from_slice(&[6, 0, 0, 0]);
        huge_cut.extend_from_slice(&(MAX_CUT_TEXT + 1).to_be_bytes());
        assert!(matches!(
            run(Policy::Control, &[&huge_cut]),
            Err(FilterError::TooLong {
                what: "ClientCutText",
                ..
            })
        ));
        let mut negative = HANDSHAKE_38.to_vec();
        negative.extend_from_slice(&[6, 0, 0, 0]);
        negative.extend_from_slice(&(-(MAX_CUT_TEXT as i32) - 1).to_be_bytes());
        assert!(run(Policy::View, &[&negative]).is_err());
        let mut many = HANDSHAKE_38.to_vec();
        many.extend_from_slice(&[2, 0]);
        many.extend_from_slice(&(MAX_ENCODINGS + 1).to_be_bytes());
        assert!(run(Policy::View, &[&many]).is_err());
        let mut big_fence = HANDSHAKE_38.to_vec();
        big_fence.extend_from_slice(&[248, 0, 0, 0, 0, 0, 0, 0, MAX_FENCE_PAYLOAD + 1]);
        assert!(run(Policy::View, &[&big_fence]).is_err());
    }

    #[test]
    fn an_error_is_sticky_and_nothing_after_it_is_forwarded() {
        let mut f = ClientFilter::new(Policy::Control);
        let mut out = Vec::new();
        let input = [HANDSHAKE_38, &[7], &update_request()].concat();
        assert!(f.push(&input, &mut out).is_err());
        assert_eq!(out, HANDSHAKE_38);
        assert!(f.push(&update_request(), &mut out).is_err());
        assert_eq!(out, HANDSHAKE_38);
    }

    #[test]
    fn a_negative_extended_clipboard_length_is_skipped_by_its_size() {
        let mut input = HANDSHAKE_38.to_vec();
        input.extend_from_slice(&[6, 0, 0, 0]);
        input.extend_from_slice(&(-4i32).to_be_bytes());
        input.extend_from_slice(&[1, 2, 3, 4]);
        input.extend_from_slice(&update_request());
        let want = [HANDSHAKE_38, &update_request()].concat();
        assert_eq!(run(Policy::View, &[&input]).unwrap(), want);
    }

    #[test]
    fn a_control_filter_notes_keys_and_pointers_and_a_view_filter_nothing() {
        let mut bytes = b"RFB 003.008\n\x01\x01".to_vec();
        bytes.extend_from_slice(&[4, 1, 0, 0, 0, 0, 0, 0x61]);
        bytes.extend_from_slice(&[5, 1, 0, 10, 0, 20]);
        bytes.extend_from_slice(&[255, 0, 0, 0, 0, 0, 0xff, 0x0d, 0, 0, 0, 28]);
        let mut out = Vec::new();
        let mut f = ClientFilter::new(Policy::Control).note_inputs();
        f.push(&bytes, &mut out).unwrap();
        assert_eq!(
            f.take_inputs(),
            vec![
                Input::Key {
                    down: true,
                    keysym: 0x61
                },
                Input::Pointer {
                    mask: 1,
                    x: 10,
                    y: 20
                },
                Input::Key {
                    down: false,
                    keysym: 0xff0d
                },
            ]
        );
        assert!(f.take_inputs().is_empty());
        let mut view = ClientFilter::new(Policy::View).note_inputs();
        view.push(&bytes, &mut out).unwrap();
        assert!(
            view.take_inputs().is_empty(),
            "a viewer's input is dropped, not noted"
        );
    }

    #[test]
    fn garbage_never_panics() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..2000 {
            let len = (seed % 200) as usize;
            let mut bytes = HANDSHAKE_38.to_vec();
            for _ in 0..len {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                bytes.push(seed as u8);
            }
            for policy in [Policy::View, Policy::Control] {
                let mut f = ClientFilter::new(policy);
                let mut out = Vec::new();
                let _ = f.push(&bytes, &mut out);
                assert!(out.len() <= bytes.len());
            }
        }
    }
}
