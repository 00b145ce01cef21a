//! Checks shared by the properties and the deterministic tests: decoding a payload, a model of
//! the framing to hold the stream decoder to, round trips, and the valid samples and mutations
//! the fuzzers start from.

use super::*;

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
    pub(super) frames: Vec<Vec<u8>>,
    pub(super) too_large: Option<FrameError>,
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
pub(super) struct Codec {
    pub(super) name: &'static str,
    pub(super) check: fn(&[u8]) -> bool,
    pub(super) stream: fn(&[u8], &[u32], Option<usize>),
}

pub(super) fn codec<T: Wire>() -> Codec {
    Codec {
        name: std::any::type_name::<T>(),
        check: check_payload::<T>,
        stream: check_stream::<T>,
    }
}

/// Every message type that is the first thing decoded from a frame.
pub(super) fn codecs() -> [Codec; 7] {
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
pub(super) struct Sample {
    pub(super) codec: Codec,
    pub(super) payload: Vec<u8>,
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
pub(super) static SAMPLES: LazyLock<Vec<Sample>> = LazyLock::new(|| {
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
            terminal: Some(TerminalResume {
                key: "k-1".into(),
                resume: false,
            }),
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
            process_output_ago_ms: Some(90_000),
        })),
        sample(Request::ProcList(ProcList)),
        sample(Request::ProcLogs(ProcLogs {
            id: 3,
            offset: Some(1 << 20),
            follow: true,
        })),
        sample(Reply::Processes(vec![])),
    ]
});

/// One edit of a payload. Positions are taken modulo the length at the time of the edit.
#[derive(Debug, Clone)]
pub(super) enum Mutation {
    FlipBit(u32, u8),
    Set(u32, u8),
    Insert(u32, u8),
    Delete(u32),
    Truncate(u32),
    /// Repeats `len` bytes starting at the position right after them.
    Duplicate(u32, u8),
}

pub(super) fn apply(mutation: &Mutation, buf: &mut Vec<u8>) {
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
pub(super) fn framed(payload: &[u8], prefix: Option<u32>) -> Vec<u8> {
    let len = prefix.unwrap_or(payload.len() as u32);
    let mut frame = len.to_be_bytes().to_vec();
    frame.extend_from_slice(payload);
    frame
}

/// Encodes each message, checks each frame on its own, then decodes them all back from one
/// stream cut at `cuts`.
pub(super) fn check_round_trip<T: Wire>(messages: &[T], cuts: &[u32]) {
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
