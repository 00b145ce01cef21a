//! Decoding never panics, whatever the input, fuzzed inside `cargo test`.
//!
//! Every property runs a fixed number of cases from a fixed seed and writes no regression files,
//! so a run is reproducible and leaves the tree clean. The xorshift tests at the bottom cover
//! the same ground without proptest, so coverage does not depend on its configuration.
//!
//! What is checked, for every top-level message type:
//! - a payload either decodes or fails with `Malformed`/`Trailing`; it never panics;
//! - anything that decodes re-encodes to a canonical frame no longer than the input and decodes
//!   back to an equal value;
//! - [`FrameDecoder`] fed any byte stream in any split yields exactly the frames a simple model
//!   of the framing finds, never buffers a whole frame beyond the limit, and refuses an oversized
//!   length prefix as soon as the prefix is complete;
//! - generated messages round-trip through `encode`, the stream decoder and `decode`.

use gateway_proto::home::{
    ExportStart, HomeAuthority, HomeExportRequest, HomeImportRequest, Imported, LeaseFence,
};
use gateway_proto::lease::{MAX_BOT_ID_LEN, MAX_OWNER_LEN};
use gateway_proto::live::{CapabilityKind, ConnectRequest, RevokeRequest, RevokeScope};
use gateway_proto::op::{GuestActivity, MachineStatus};
use gateway_proto::{
    decode, encode, BotId, BotLease, ControlMsg, ErrorCode, ExecEvent, ExecInput, ExecRequest,
    FileEntry, FileKind, FrameDecoder, FrameError, Hello, HelloReply, LeaseToken, ListFiles,
    OpError, ReadFile, RefuseReason, Refused, Reply, Request, Secret, StartDir, Welcome, WriteFile,
    MAX_CHUNK, MAX_FRAME_LEN,
};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::test_runner::{Config, RngSeed};
use serde::{de::DeserializeOwned, Serialize};
use serde_bytes::ByteBuf;
use std::fmt::Debug;
use std::sync::LazyLock;

const CASES: u32 = 2000;

fn config() -> Config {
    Config {
        cases: CASES,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(0x7a6b_a20f_0000_0001),
        ..Config::default()
    }
}

trait Wire: Serialize + DeserializeOwned + PartialEq + Debug {}
impl<T: Serialize + DeserializeOwned + PartialEq + Debug> Wire for T {}

// ---------------------------------------------------------------------------------------------
// Checks shared by the properties and the deterministic tests.

/// Decodes `payload` as `T`: it must not panic and may only fail as a bad payload. Whatever
/// decodes must round-trip. Returns whether it decoded.
fn check_payload<T: Wire>(payload: &[u8]) -> bool {
    match decode::<T>(payload) {
        Ok(value) => {
            let frame =
                encode(&value).unwrap_or_else(|e| panic!("{value:?} does not re-encode: {e}"));
            assert!(
                frame.len() - 4 <= payload.len(),
                "re-encoding {value:?} is longer than the {} bytes it was decoded from",
                payload.len()
            );
            assert_eq!(
                decode::<T>(&frame[4..]).as_ref(),
                Ok(&value),
                "re-encoded {value:?} does not decode to itself"
            );
            true
        }
        Err(FrameError::Malformed(_) | FrameError::Trailing(_)) => false,
        Err(other) => panic!("decoding a payload failed with a stream error: {other:?}"),
    }
}

/// What a correct frame decoder makes of a whole stream: the complete frames, then either an
/// oversized prefix or some leftover bytes of an incomplete frame.
#[derive(Debug)]
struct Framing {
    frames: Vec<Vec<u8>>,
    too_large: Option<FrameError>,
    leftover: usize,
}

fn model_framing(stream: &[u8], limit: usize) -> Framing {
    let mut frames = Vec::new();
    let mut rest = stream;
    while let Some(prefix) = rest.first_chunk::<4>() {
        let len = u32::from_be_bytes(*prefix) as usize;
        if len > limit {
            return Framing {
                frames,
                too_large: Some(FrameError::TooLarge { len, max: limit }),
                leftover: rest.len(),
            };
        }
        if rest.len() < 4 + len {
            break;
        }
        frames.push(rest[4..4 + len].to_vec());
        rest = &rest[4 + len..];
    }
    Framing {
        frames,
        too_large: None,
        leftover: rest.len(),
    }
}

/// Cuts `stream` at the given points (taken modulo its length, in any order).
fn chunks<'a>(stream: &'a [u8], cuts: &[u32]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts
        .iter()
        .map(|&c| c as usize % (stream.len() + 1))
        .collect();
    points.push(0);
    points.push(stream.len());
    points.sort_unstable();
    points.windows(2).map(|w| &stream[w[0]..w[1]]).collect()
}

/// Feeds `stream` to a [`FrameDecoder`] (limit `max`, `None` for the default) in the pieces
/// `cuts` makes, taking out messages of type `T` after every piece, and checks the outcome
/// against [`model_framing`].
fn check_stream<T: Wire>(stream: &[u8], cuts: &[u32], max: Option<usize>) {
    let (mut decoder, limit) = match max {
        Some(max) => (FrameDecoder::with_max(max), max.min(MAX_FRAME_LEN)),
        None => (FrameDecoder::new(), MAX_FRAME_LEN),
    };
    let expected = model_framing(stream, limit);

    let mut got: Vec<Result<T, FrameError>> = Vec::new();
    let mut too_large = None;
    'feed: for chunk in chunks(stream, cuts) {
        decoder.push(chunk);
        loop {
            match decoder.next_message::<T>() {
                Ok(None) => break,
                Ok(Some(msg)) => got.push(Ok(msg)),
                Err(e @ FrameError::TooLarge { .. }) => {
                    too_large = Some(e);
                    break 'feed;
                }
                Err(e) => got.push(Err(e)),
            }
        }
        // Only ever an incomplete frame is left over, and never one over the limit.
        assert!(
            decoder.buffered() < 4 + limit,
            "{} bytes buffered with a limit of {limit}",
            decoder.buffered()
        );
    }

    let want: Vec<Result<T, FrameError>> = expected.frames.iter().map(|p| decode(p)).collect();
    assert_eq!(got, want, "messages taken out of the stream");
    for frame in &expected.frames {
        check_payload::<T>(frame);
    }
    assert_eq!(too_large, expected.too_large, "oversized prefix");
    match too_large {
        Some(err) => {
            // The error sticks: the decoder cannot resynchronise after a bad prefix.
            assert_eq!(decoder.next_frame(), Err(err));
        }
        None => {
            assert_eq!(decoder.buffered(), expected.leftover);
            assert_eq!(decoder.finish().is_ok(), expected.leftover == 0);
        }
    }
}

/// The checks, type-erased so that a list of samples can carry one per message type.
#[derive(Clone, Copy)]
struct Codec {
    name: &'static str,
    check: fn(&[u8]) -> bool,
    stream: fn(&[u8], &[u32], Option<usize>),
}

fn codec<T: Wire>() -> Codec {
    Codec {
        name: std::any::type_name::<T>(),
        check: check_payload::<T>,
        stream: check_stream::<T>,
    }
}

/// Every message type that is the first thing decoded from a frame.
fn codecs() -> [Codec; 7] {
    [
        codec::<Hello>(),
        codec::<HelloReply>(),
        codec::<ControlMsg>(),
        codec::<Request>(),
        codec::<ExecInput>(),
        codec::<ExecEvent>(),
        codec::<Reply>(),
    ]
}

/// A valid payload (no prefix) and the codec of its type.
struct Sample {
    codec: Codec,
    payload: Vec<u8>,
}

fn sample<T: Wire>(value: T) -> Sample {
    let frame = encode(&value).expect("sample encodes");
    Sample {
        codec: codec::<T>(),
        payload: frame[4..].to_vec(),
    }
}

fn bot_lease() -> BotLease {
    BotLease {
        bot: BotId::new("bot-1").unwrap(),
        token: LeaseToken::new("run:42", 300).unwrap(),
    }
}

/// Valid encodings of every variant of every top-level message, with fields set so that the
/// mutations have strings, options, varints and sequences to break.
static SAMPLES: LazyLock<Vec<Sample>> = LazyLock::new(|| {
    let err = OpError::new(ErrorCode::StaleLease, "lease run:41:3 is stale");
    vec![
        sample(Hello {
            version: 1,
            min_version: 1,
            computer_id: "cmp-0123".into(),
            token: Secret::new("enroll-token-xyz"),
            agent: "rakazo-guest/0.1.0".into(),
        }),
        sample(HelloReply::Welcome(Welcome { version: 1 })),
        sample(HelloReply::Refused(Refused {
            reason: RefuseReason::UnsupportedVersion { min: 1, max: 300 },
        })),
        sample(HelloReply::Refused(Refused {
            reason: RefuseReason::Superseded,
        })),
        sample(ControlMsg::Lease {
            bot: BotId::new("bot-1").unwrap(),
            lease: Some(LeaseToken::new("run:42", 1 << 40).unwrap()),
        }),
        sample(ControlMsg::Lease {
            bot: BotId::new("b").unwrap(),
            lease: None,
        }),
        sample(ControlMsg::Ping { seq: 7 }),
        sample(ControlMsg::Pong { seq: u64::MAX }),
        sample(Request::Exec(ExecRequest {
            argv: vec!["sh".into(), "-c".into(), "echo héllo".into()],
            cwd: Some("work/dir".into()),
            env: vec![("A".into(), "1".into()), ("PATH".into(), "/bin".into())],
            timeout_ms: Some(30_000),
            stdin: true,
            lease: Some(bot_lease()),
            start: StartDir::BotDir,
        })),
        sample(Request::ListFiles(ListFiles {
            path: "src".into(),
            lease: Some(bot_lease()),
        })),
        sample(Request::ReadFile(ReadFile {
            path: "a.txt".into(),
            max_bytes: 1 << 20,
            lease: None,
        })),
        sample(Request::WriteFile(WriteFile {
            path: "bin/run".into(),
            executable: true,
            size: 5,
            lease: Some(bot_lease()),
            no_replace: true,
        })),
        sample(Request::Ping),
        sample(ExecInput::Stdin(ByteBuf::from(
            b"line one\nline two\n".to_vec(),
        ))),
        sample(ExecInput::CloseStdin),
        sample(ExecInput::Abort),
        sample(ExecEvent::Started { pid: 4242 }),
        sample(ExecEvent::Stdout(ByteBuf::from(vec![0x80; 200]))),
        sample(ExecEvent::Stderr(ByteBuf::from(b"warning\n".to_vec()))),
        sample(ExecEvent::Exit {
            code: -9,
            message: Some("killed".into()),
        }),
        sample(ExecEvent::Failed(err.clone())),
        sample(Reply::Files(vec![
            FileEntry {
                path: "a.txt".into(),
                kind: FileKind::File,
                size: 5,
                executable: false,
            },
            FileEntry {
                path: "bin".into(),
                kind: FileKind::Dir,
                size: 0,
                executable: true,
            },
        ])),
        sample(Reply::ReadStart { size: 1 << 33 }),
        sample(Reply::Written { size: 200 }),
        sample(Reply::Pong),
        sample(Reply::Error(err)),
        sample(Request::Connect(ConnectRequest {
            bot: BotId::new("bot-1").unwrap(),
            kind: CapabilityKind::Terminal,
            control_lease: Some("cl-1".into()),
            start: StartDir::BotDir,
        })),
        sample(Request::HomeImport(HomeImportRequest {
            size: 1 << 30,
            authority: HomeAuthority::new(vec![LeaseFence {
                bot: BotId::new("bot-1").unwrap(),
                fence: 1 << 40,
            }])
            .unwrap(),
        })),
        sample(Reply::ExportStart(ExportStart {
            content_bytes: 1 << 30,
            entries: 12,
        })),
        sample(Request::Status),
        sample(Reply::Status(MachineStatus {
            uptime_secs: 86_400,
            load_milli: [1500, 900, 400],
            cpus: 2,
            home_total_bytes: 1 << 36,
            home_free_bytes: 1 << 34,
            memory_total_bytes: 1 << 33,
            memory_available_bytes: 1 << 32,
            memory_limited: false,
            home_used_bytes: 1 << 20,
            home_used_partial: true,
            desktops: 3,
        })),
        sample(Request::Activity),
        sample(Reply::Activity(GuestActivity {
            commands: 2,
            background: 1,
            terminal_output_ago_ms: Some(1500),
            cpu_milli: 250,
            cpu_interval_ms: 30_000,
        })),
    ]
});

/// One edit of a payload. Positions are taken modulo the length at the time of the edit.
#[derive(Debug, Clone)]
enum Mutation {
    FlipBit(u32, u8),
    Set(u32, u8),
    Insert(u32, u8),
    Delete(u32),
    Truncate(u32),
    /// Repeats `len` bytes starting at the position right after them.
    Duplicate(u32, u8),
}

fn apply(mutation: &Mutation, buf: &mut Vec<u8>) {
    let at = |pos: u32, n: usize| pos as usize % n;
    match *mutation {
        Mutation::FlipBit(pos, bit) if !buf.is_empty() => {
            let i = at(pos, buf.len());
            buf[i] ^= 1 << (bit % 8);
        }
        Mutation::Set(pos, byte) if !buf.is_empty() => {
            let i = at(pos, buf.len());
            buf[i] = byte;
        }
        Mutation::Insert(pos, byte) => buf.insert(at(pos, buf.len() + 1), byte),
        Mutation::Delete(pos) if !buf.is_empty() => {
            buf.remove(at(pos, buf.len()));
        }
        Mutation::Truncate(pos) => buf.truncate(at(pos, buf.len() + 1)),
        Mutation::Duplicate(pos, len) if !buf.is_empty() => {
            let start = at(pos, buf.len());
            let end = (start + usize::from(len)).min(buf.len());
            let copy = buf[start..end].to_vec();
            buf.splice(end..end, copy);
        }
        _ => {}
    }
}

/// The frame for a payload, with its true length or another one.
fn framed(payload: &[u8], prefix: Option<u32>) -> Vec<u8> {
    let len = prefix.unwrap_or(payload.len() as u32);
    let mut frame = len.to_be_bytes().to_vec();
    frame.extend_from_slice(payload);
    frame
}

// ---------------------------------------------------------------------------------------------
// Strategies.

/// Bytes postcard gives meaning to: small variant indices, option and bool tags, varint edges.
const INTERESTING: [u8; 9] = [0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x7f, 0x80, 0xff];

/// `[A-Za-z0-9._-]`: the characters of a bot id.
const ID_CHARS: &[char] = &[
    'A', 'B', 'C', 'D', 'E', 'F', 'G', 'H', 'I', 'J', 'K', 'L', 'M', 'N', 'O', 'P', 'Q', 'R', 'S',
    'T', 'U', 'V', 'W', 'X', 'Y', 'Z', 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k', 'l',
    'm', 'n', 'o', 'p', 'q', 'r', 's', 't', 'u', 'v', 'w', 'x', 'y', 'z', '0', '1', '2', '3', '4',
    '5', '6', '7', '8', '9', '.', '_', '-',
];

/// `[A-Za-z0-9._:-]`: the characters of a lease owner.
const OWNER_CHARS: &[char] = &[
    'A', 'B', 'C', 'D', 'E', 'F', 'G', 'H', 'I', 'J', 'K', 'L', 'M', 'N', 'O', 'P', 'Q', 'R', 'S',
    'T', 'U', 'V', 'W', 'X', 'Y', 'Z', 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k', 'l',
    'm', 'n', 'o', 'p', 'q', 'r', 's', 't', 'u', 'v', 'w', 'x', 'y', 'z', '0', '1', '2', '3', '4',
    '5', '6', '7', '8', '9', '.', '_', '-', ':',
];

/// Bytes that postcard gives meaning to (variant indices, option tags, bools, varint edges) as
/// often as any other byte, so random payloads get past the first field.
fn interesting_byte() -> impl Strategy<Value = u8> {
    // Mapped from one plain integer: much cheaper to generate than a union of strategies.
    any::<u16>().prop_map(|x| {
        if x & 1 == 0 {
            INTERESTING[usize::from(x >> 1) % INTERESTING.len()]
        } else {
            (x >> 8) as u8
        }
    })
}

/// A frame limit: the default, a tiny one, or one above the maximum (clamped by the decoder).
fn frame_limit() -> impl Strategy<Value = Option<usize>> {
    prop_oneof![
        3 => Just(None),
        1 => (0usize..80).prop_map(Some),
        1 => Just(Some(MAX_FRAME_LEN + 7)),
    ]
}

/// A stream of frames with mostly true length prefixes, some made-up ones (small or random) and
/// a few trailing bytes of an unfinished frame.
fn framed_stream() -> impl Strategy<Value = Vec<u8>> {
    let prefix = option::weighted(0.05, prop_oneof![0u32..100, any::<u32>()]);
    (
        vec((vec(interesting_byte(), 0..48), prefix), 0..40),
        vec(any::<u8>(), 0..8),
    )
        .prop_map(|(frames, tail)| {
            let mut stream = Vec::new();
            for (payload, prefix) in frames {
                stream.extend(framed(&payload, prefix));
            }
            stream.extend(tail);
            stream
        })
}

/// 0..4096 random bytes, generated eight at a time: shrinkable, and cheap in a debug build.
fn random_bytes() -> impl Strategy<Value = Vec<u8>> {
    (vec(any::<u64>(), 0..=512), 0usize..8).prop_map(|(words, cut)| {
        let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        bytes.truncate(bytes.len().saturating_sub(cut));
        bytes
    })
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<u32>(), any::<u8>()).prop_map(|(p, b)| Mutation::FlipBit(p, b)),
        (any::<u32>(), interesting_byte()).prop_map(|(p, b)| Mutation::Set(p, b)),
        (any::<u32>(), interesting_byte()).prop_map(|(p, b)| Mutation::Insert(p, b)),
        any::<u32>().prop_map(Mutation::Delete),
        any::<u32>().prop_map(Mutation::Truncate),
        (any::<u32>(), 1u8..16).prop_map(|(p, n)| Mutation::Duplicate(p, n)),
    ]
}

/// Any text, including control characters, newlines and multi-byte characters.
fn text() -> impl Strategy<Value = String> {
    vec(any::<char>(), 0..24).prop_map(String::from_iter)
}

fn bytes() -> impl Strategy<Value = ByteBuf> {
    prop_oneof![
        4 => vec(any::<u8>(), 0..256),
        // Up to a full chunk, filled cheaply from a seed.
        1 => (0..=MAX_CHUNK, any::<u64>()).prop_map(|(len, seed)| XorShift::new(seed).fill(len)),
    ]
    .prop_map(ByteBuf::from)
}

fn bot_id() -> impl Strategy<Value = BotId> {
    vec(select(ID_CHARS), 1..=MAX_BOT_ID_LEN)
        .prop_map(String::from_iter)
        .prop_filter("`.` and `..` are not bot ids", |s| s != "." && s != "..")
        .prop_map(|s| BotId::new(s).expect("the pattern yields valid bot ids"))
}

fn lease_token() -> impl Strategy<Value = LeaseToken> {
    let owner = vec(select(OWNER_CHARS), 1..=MAX_OWNER_LEN).prop_map(String::from_iter);
    (owner, any::<u64>()).prop_map(|(owner, fence)| {
        LeaseToken::new(owner, fence).expect("the pattern yields valid owners")
    })
}

/// Up to 8 distinct bots with any fences.
fn home_authority() -> impl Strategy<Value = HomeAuthority> {
    vec((bot_id(), any::<u64>()), 0..8).prop_map(|fences| {
        let mut seen = std::collections::HashSet::new();
        let fences = fences
            .into_iter()
            .filter(|(bot, _)| seen.insert(bot.clone()))
            .map(|(bot, fence)| LeaseFence { bot, fence })
            .collect();
        HomeAuthority::new(fences).expect("distinct bots, few of them")
    })
}

fn opt_bot_lease() -> impl Strategy<Value = Option<BotLease>> {
    option::of((bot_id(), lease_token()).prop_map(|(bot, token)| BotLease { bot, token }))
}

fn error_code() -> impl Strategy<Value = ErrorCode> {
    select(vec![
        ErrorCode::BadRequest,
        ErrorCode::PathRejected,
        ErrorCode::NotFound,
        ErrorCode::TooLarge,
        ErrorCode::StaleLease,
        ErrorCode::Failed,
        ErrorCode::Unsupported,
        ErrorCode::ScreenUnavailable,
        ErrorCode::ScreenReleasing,
        ErrorCode::ActionRefused,
        ErrorCode::Exists,
    ])
}

fn op_error() -> impl Strategy<Value = OpError> {
    (error_code(), text()).prop_map(|(code, message)| OpError { code, message })
}

fn request() -> impl Strategy<Value = Request> {
    let exec = (
        vec(text(), 0..6),
        option::of(text()),
        vec((text(), text()), 0..6),
        option::of(any::<u64>()),
        any::<bool>(),
        opt_bot_lease(),
        any::<bool>(),
    )
        .prop_map(|(argv, cwd, env, timeout_ms, stdin, lease, bot_dir)| {
            Request::Exec(ExecRequest {
                argv,
                cwd,
                env,
                timeout_ms,
                stdin,
                lease,
                start: if bot_dir {
                    StartDir::BotDir
                } else {
                    StartDir::Home
                },
            })
        });
    prop_oneof![
        exec,
        (text(), opt_bot_lease())
            .prop_map(|(path, lease)| Request::ListFiles(ListFiles { path, lease })),
        (text(), any::<u64>(), opt_bot_lease()).prop_map(|(path, max_bytes, lease)| {
            Request::ReadFile(ReadFile {
                path,
                max_bytes,
                lease,
            })
        }),
        (
            text(),
            any::<bool>(),
            any::<u64>(),
            opt_bot_lease(),
            any::<bool>()
        )
            .prop_map(|(path, executable, size, lease, no_replace)| {
                Request::WriteFile(WriteFile {
                    path,
                    executable,
                    size,
                    lease,
                    no_replace,
                })
            }),
        Just(Request::Ping),
        (bot_id(), 0u8..3, option::of(text()), any::<bool>()).prop_map(
            |(bot, kind, control_lease, bot_dir)| {
                Request::Connect(ConnectRequest {
                    bot,
                    kind: [
                        CapabilityKind::View,
                        CapabilityKind::Control,
                        CapabilityKind::Terminal,
                    ][usize::from(kind)],
                    control_lease,
                    start: if bot_dir {
                        StartDir::BotDir
                    } else {
                        StartDir::Home
                    },
                })
            }
        ),
        (bot_id(), any::<bool>()).prop_map(|(bot, all)| {
            Request::Revoke(RevokeRequest {
                bot,
                scope: if all {
                    RevokeScope::All
                } else {
                    RevokeScope::Control
                },
            })
        }),
        (any::<bool>(), home_authority()).prop_map(|(quiesce_browsers, authority)| {
            Request::HomeExport(HomeExportRequest {
                quiesce_browsers,
                authority,
            })
        }),
        (any::<u64>(), home_authority()).prop_map(|(size, authority)| Request::HomeImport(
            HomeImportRequest { size, authority }
        )),
        Just(Request::Status),
        Just(Request::Activity),
    ]
}

fn exec_event() -> impl Strategy<Value = ExecEvent> {
    prop_oneof![
        any::<u32>().prop_map(|pid| ExecEvent::Started { pid }),
        bytes().prop_map(ExecEvent::Stdout),
        bytes().prop_map(ExecEvent::Stderr),
        (any::<i32>(), option::of(text()))
            .prop_map(|(code, message)| ExecEvent::Exit { code, message }),
        op_error().prop_map(ExecEvent::Failed),
    ]
}

fn control_msg() -> impl Strategy<Value = ControlMsg> {
    prop_oneof![
        (bot_id(), option::of(lease_token()))
            .prop_map(|(bot, lease)| ControlMsg::Lease { bot, lease }),
        any::<u64>().prop_map(|seq| ControlMsg::Ping { seq }),
        any::<u64>().prop_map(|seq| ControlMsg::Pong { seq }),
    ]
}

fn exec_input() -> impl Strategy<Value = ExecInput> {
    prop_oneof![
        bytes().prop_map(ExecInput::Stdin),
        Just(ExecInput::CloseStdin),
        Just(ExecInput::Abort),
    ]
}

fn reply() -> impl Strategy<Value = Reply> {
    let entry = (text(), any::<bool>(), any::<u64>(), any::<bool>()).prop_map(
        |(path, dir, size, executable)| FileEntry {
            path,
            kind: if dir { FileKind::Dir } else { FileKind::File },
            size,
            executable,
        },
    );
    prop_oneof![
        vec(entry, 0..8).prop_map(Reply::Files),
        any::<u64>().prop_map(|size| Reply::ReadStart { size }),
        any::<u64>().prop_map(|size| Reply::Written { size }),
        Just(Reply::Pong),
        op_error().prop_map(Reply::Error),
        Just(Reply::Opened),
        Just(Reply::Revoked),
        (any::<u64>(), any::<u64>()).prop_map(|(content_bytes, entries)| {
            Reply::ExportStart(ExportStart {
                content_bytes,
                entries,
            })
        }),
        (any::<u64>(), any::<u64>()).prop_map(|(content_bytes, entries)| {
            Reply::Imported(Imported {
                content_bytes,
                entries,
            })
        }),
        (
            (
                any::<u64>(),
                any::<[u32; 3]>(),
                any::<u32>(),
                any::<u64>(),
                any::<u64>()
            ),
            (
                any::<u64>(),
                any::<u64>(),
                any::<bool>(),
                any::<u64>(),
                any::<bool>(),
                any::<u32>()
            )
        )
            .prop_map(
                |(
                    (uptime_secs, load_milli, cpus, home_total_bytes, home_free_bytes),
                    (
                        memory_total_bytes,
                        memory_available_bytes,
                        memory_limited,
                        home_used_bytes,
                        home_used_partial,
                        desktops,
                    ),
                )| {
                    Reply::Status(MachineStatus {
                        uptime_secs,
                        load_milli,
                        cpus,
                        home_total_bytes,
                        home_free_bytes,
                        memory_total_bytes,
                        memory_available_bytes,
                        memory_limited,
                        home_used_bytes,
                        home_used_partial,
                        desktops,
                    })
                }
            ),
        (
            any::<u32>(),
            any::<u32>(),
            proptest::option::of(any::<u64>()),
            any::<u32>(),
            any::<u64>()
        )
            .prop_map(
                |(commands, background, terminal_output_ago_ms, cpu_milli, cpu_interval_ms)| {
                    Reply::Activity(GuestActivity {
                        commands,
                        background,
                        terminal_output_ago_ms,
                        cpu_milli,
                        cpu_interval_ms,
                    })
                }
            ),
    ]
}

fn hello() -> impl Strategy<Value = Hello> {
    (any::<u16>(), any::<u16>(), text(), text(), text()).prop_map(
        |(version, min_version, computer_id, token, agent)| Hello {
            version,
            min_version,
            computer_id,
            token: Secret::new(token),
            agent,
        },
    )
}

fn hello_reply() -> impl Strategy<Value = HelloReply> {
    prop_oneof![
        any::<u16>().prop_map(|version| HelloReply::Welcome(Welcome { version })),
        select(vec![
            RefuseReason::BadCredentials,
            RefuseReason::Malformed,
            RefuseReason::Superseded
        ])
        .prop_map(|reason| HelloReply::Refused(Refused { reason })),
        (any::<u16>(), any::<u16>()).prop_map(|(min, max)| HelloReply::Refused(Refused {
            reason: RefuseReason::UnsupportedVersion { min, max }
        })),
    ]
}

/// Encodes each message, checks each frame on its own, then decodes them all back from one
/// stream cut at `cuts`.
fn check_round_trip<T: Wire>(messages: &[T], cuts: &[u32]) {
    let mut stream = Vec::new();
    for msg in messages {
        let frame = encode(msg).unwrap_or_else(|e| panic!("{msg:?} does not encode: {e}"));
        let len = u32::from_be_bytes(*frame.first_chunk::<4>().unwrap()) as usize;
        assert_eq!(len, frame.len() - 4, "length prefix");
        assert!(len <= MAX_FRAME_LEN);
        assert_eq!(decode::<T>(&frame[4..]).as_ref(), Ok(msg));
        stream.extend(frame);
    }
    let mut decoder = FrameDecoder::new();
    let mut got = Vec::new();
    for chunk in chunks(&stream, cuts) {
        decoder.push(chunk);
        while let Some(msg) = decoder.next_message::<T>().expect("valid stream decodes") {
            got.push(msg);
        }
    }
    decoder.finish().expect("nothing left over");
    assert_eq!(got.as_slice(), messages);
}

// ---------------------------------------------------------------------------------------------
// Properties.

proptest! {
    #![proptest_config(config())]

    /// (a) Random bytes as a stream, in random pieces, as every message type.
    #[test]
    fn random_stream_never_panics(
        stream in random_bytes(),
        cuts in vec(any::<u32>(), 0..16),
        max in frame_limit(),
    ) {
        for codec in codecs() {
            (codec.stream)(&stream, &cuts, max);
            (codec.check)(&stream);
        }
    }

    /// (a) Random payloads in mostly well-formed frames, so the payloads reach the decoder.
    #[test]
    fn random_framed_payloads_never_panic(
        stream in framed_stream(),
        cuts in vec(any::<u32>(), 0..16),
        max in frame_limit(),
    ) {
        for codec in codecs() {
            (codec.stream)(&stream, &cuts, max);
        }
    }

    /// (b) Valid encodings with bytes flipped, set, inserted, deleted, duplicated or cut off.
    #[test]
    fn mutated_messages_never_panic_and_round_trip(
        which in any::<Index>(),
        mutations in vec(mutation(), 1..6),
        keep_stale_prefix in any::<bool>(),
        cut in any::<u32>(),
    ) {
        let sample = which.get(SAMPLES.as_slice());
        let mut payload = sample.payload.clone();
        for m in &mutations {
            apply(m, &mut payload);
        }
        (sample.codec.check)(&payload);
        // Also through the stream decoder, with the true length or the original one.
        let prefix = keep_stale_prefix.then_some(sample.payload.len() as u32);
        (sample.codec.stream)(&framed(&payload, prefix), &[cut], None);
    }

    /// (c) A prefix over the limit is refused as soon as its fourth byte arrives, whatever
    /// follows, and the decoder never waits for (or needs) the payload.
    #[test]
    fn oversized_prefix_is_refused_before_the_payload(
        len in (MAX_FRAME_LEN as u32 + 1)..=u32::MAX,
        tail in vec(any::<u8>(), 0..64),
    ) {
        let too_large = || FrameError::TooLarge { len: len as usize, max: MAX_FRAME_LEN };
        let prefix = len.to_be_bytes();
        let mut decoder = FrameDecoder::new();
        for byte in &prefix[..3] {
            decoder.push(&[*byte]);
            prop_assert_eq!(decoder.next_frame(), Ok(None));
        }
        decoder.push(&prefix[3..]);
        prop_assert_eq!(decoder.buffered(), 4);
        prop_assert_eq!(decoder.next_message::<Request>(), Err(too_large()));
        decoder.push(&tail);
        prop_assert_eq!(decoder.next_frame(), Err(too_large()));
        prop_assert_eq!(decoder.buffered(), 4 + tail.len());
        prop_assert_eq!(decoder.finish(), Err(FrameError::Truncated(4 + tail.len())));
    }

    /// (c) The same with a smaller limit; a prefix within the limit waits for its payload.
    #[test]
    fn prefix_over_a_custom_limit_is_refused(
        max in 0..=MAX_FRAME_LEN,
        over in 1u64..=(1 << 33),
        under in any::<u32>(),
    ) {
        let len = (max as u64 + over).min(u64::from(u32::MAX)) as u32;
        prop_assume!(len as usize > max);
        let mut decoder = FrameDecoder::with_max(max);
        decoder.push(&len.to_be_bytes());
        prop_assert_eq!(
            decoder.next_frame(),
            Err(FrameError::TooLarge { len: len as usize, max })
        );

        let ok_len = under as usize % (max + 1);
        let mut decoder = FrameDecoder::with_max(max);
        decoder.push(&(ok_len as u32).to_be_bytes());
        decoder.push(&vec![0; ok_len.min(64).saturating_sub(1)]);
        if ok_len == 0 {
            prop_assert_eq!(decoder.next_frame(), Ok(Some(Vec::new())));
        } else {
            prop_assert_eq!(decoder.next_frame(), Ok(None));
        }
    }

    /// (d) Requests round-trip.
    #[test]
    fn requests_round_trip(
        messages in vec(request(), 1..6),
        cuts in vec(any::<u32>(), 0..8),
    ) {
        check_round_trip(&messages, &cuts);
    }

    /// (d) Exec events round-trip, including chunks up to MAX_CHUNK.
    #[test]
    fn exec_events_round_trip(
        messages in vec(exec_event(), 1..6),
        cuts in vec(any::<u32>(), 0..8),
    ) {
        check_round_trip(&messages, &cuts);
    }

    /// (d) The other message types round-trip too.
    #[test]
    fn other_messages_round_trip(
        hellos in vec(hello(), 1..3),
        replies in vec(hello_reply(), 1..3),
        control in vec(control_msg(), 1..4),
        input in vec(exec_input(), 1..3),
        answers in vec(reply(), 1..3),
        cuts in vec(any::<u32>(), 0..8),
    ) {
        check_round_trip(&hellos, &cuts);
        check_round_trip(&replies, &cuts);
        check_round_trip(&control, &cuts);
        check_round_trip(&input, &cuts);
        check_round_trip(&answers, &cuts);
    }
}

// ---------------------------------------------------------------------------------------------
// Deterministic tests, independent of proptest.

/// xorshift64 (Marsaglia): tiny, seedable, good enough to spray bytes.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// `len` bytes, eight at a time (debug builds are slow at byte-by-byte loops).
    fn fill(&mut self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            out.extend_from_slice(&self.next().to_le_bytes());
        }
        out.truncate(len);
        out
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Half the time a byte postcard gives meaning to, otherwise any byte.
    fn byte(&mut self) -> u8 {
        if self.next() & 1 == 0 {
            INTERESTING[self.below(INTERESTING.len())]
        } else {
            self.next() as u8
        }
    }

    fn bytes(&mut self, max_len: usize) -> Vec<u8> {
        let len = self.below(max_len + 1);
        (0..len).map(|_| self.byte()).collect()
    }

    fn mutation(&mut self) -> Mutation {
        let pos = self.next() as u32;
        match self.below(6) {
            0 => Mutation::FlipBit(pos, self.next() as u8),
            1 => Mutation::Set(pos, self.byte()),
            2 => Mutation::Insert(pos, self.byte()),
            3 => Mutation::Delete(pos),
            4 => Mutation::Truncate(pos),
            _ => Mutation::Duplicate(pos, 1 + self.below(15) as u8),
        }
    }
}

#[test]
fn xorshift_random_payloads_never_panic() {
    let mut rng = XorShift::new(0x2545_f491_4f6c_dd1d);
    let mut decoded = 0;
    for codec in codecs() {
        for _ in 0..4000 {
            // Mostly short: a payload must be consumed exactly to decode.
            let max_len = [8, 16, 64][rng.below(3)];
            let payload = rng.bytes(max_len);
            decoded += usize::from((codec.check)(&payload));
        }
        for _ in 0..300 {
            let mut stream = Vec::new();
            for _ in 0..rng.below(12) {
                let payload = rng.bytes(40);
                let prefix = match rng.below(20) {
                    0 => Some(rng.next() as u32),
                    1 => Some(rng.below(64) as u32),
                    _ => None,
                };
                stream.extend(framed(&payload, prefix));
            }
            let cuts: Vec<u32> = (0..rng.below(8)).map(|_| rng.next() as u32).collect();
            let max = [None, Some(rng.below(64))][rng.below(2)];
            (codec.stream)(&stream, &cuts, max);
        }
    }
    // Sanity: the generator gets some payloads through, or this would only test the first byte.
    assert!(decoded > 100, "only {decoded} random payloads decoded");
}

#[test]
fn xorshift_mutated_samples_never_panic_and_round_trip() {
    let mut rng = XorShift::new(0x9e37_79b9_7f4a_7c15);
    for codec in codecs() {
        let samples: Vec<&Sample> = SAMPLES
            .iter()
            .filter(|s| s.codec.name == codec.name)
            .collect();
        assert!(!samples.is_empty(), "no samples of {}", codec.name);
        let mut decoded = 0;
        for _ in 0..3000 {
            let sample = samples[rng.below(samples.len())];
            let mut payload = sample.payload.clone();
            for _ in 0..1 + rng.below(4) {
                apply(&rng.mutation(), &mut payload);
            }
            if (codec.check)(&payload) {
                decoded += 1;
            }
            let cuts = [rng.next() as u32];
            (codec.stream)(&framed(&payload, None), &cuts, None);
        }
        // Sanity: some mutants still decode, so the round-trip check is exercised.
        assert!(decoded > 0, "no mutant of {} decoded", codec.name);
    }
}

#[test]
fn every_sample_round_trips() {
    for sample in SAMPLES.iter() {
        assert!(
            (sample.codec.check)(&sample.payload),
            "sample of {} does not decode",
            sample.codec.name
        );
    }
}

#[test]
fn frame_of_exactly_the_limit_is_accepted_and_one_more_byte_is_not() {
    // Stdout: variant byte, 3-byte varint length, data.
    let data = vec![0xa5; MAX_FRAME_LEN - 4];
    let event = ExecEvent::Stdout(ByteBuf::from(data));
    let frame = encode(&event).expect("a frame of exactly the limit encodes");
    assert_eq!(frame.len(), 4 + MAX_FRAME_LEN);
    assert_eq!(&frame[..4], &(MAX_FRAME_LEN as u32).to_be_bytes());

    let mut decoder = FrameDecoder::new();
    decoder.push(&frame[..frame.len() - 1]);
    assert_eq!(decoder.next_message::<ExecEvent>(), Ok(None));
    decoder.push(&frame[frame.len() - 1..]);
    assert_eq!(decoder.next_message::<ExecEvent>(), Ok(Some(event)));
    decoder.finish().expect("nothing left over");

    let too_big = ExecEvent::Stdout(ByteBuf::from(vec![0xa5; MAX_FRAME_LEN - 3]));
    assert_eq!(
        encode(&too_big),
        Err(FrameError::TooLarge {
            len: MAX_FRAME_LEN + 1,
            max: MAX_FRAME_LEN
        })
    );
    let mut decoder = FrameDecoder::new();
    decoder.push(&(MAX_FRAME_LEN as u32 + 1).to_be_bytes());
    assert_eq!(
        decoder.next_message::<ExecEvent>(),
        Err(FrameError::TooLarge {
            len: MAX_FRAME_LEN + 1,
            max: MAX_FRAME_LEN
        })
    );
}

#[test]
fn huge_announced_lengths_inside_a_small_payload_fail_cleanly() {
    // A sequence, string or byte buffer announcing far more elements than the payload holds
    // must fail as malformed, without allocating for the announced length or panicking.
    for len in [
        "ffffffffffffffffff01", // u64::MAX
        "ffffffff0f",           // u32::MAX
        "8080808010",           // 2^32
    ] {
        let cases = [
            ("Reply::Files", codec::<Reply>(), format!("00 {len} 0161")),
            ("Exec argv", codec::<Request>(), format!("00 {len} 0161")),
            (
                "Exec env",
                codec::<Request>(),
                format!("00 00 00 {len} 0161 0162"),
            ),
            ("Stdout", codec::<ExecEvent>(), format!("01 {len} 00")),
            ("Stdin", codec::<ExecInput>(), format!("00 {len} 00")),
            (
                "Hello computer_id",
                codec::<Hello>(),
                format!("01 01 {len} 61"),
            ),
            ("Lease bot", codec::<ControlMsg>(), format!("00 {len} 61")),
        ];
        for (what, codec, payload) in cases {
            let payload: String = payload.split_whitespace().collect();
            let payload = hex::decode(payload).unwrap();
            assert!(!(codec.check)(&payload), "{what} with length {len} decoded");
        }
    }
}
