//! The proptest strategies: byte streams and frames, mutations, and generated messages of every
//! top-level type.

use super::*;

/// Bytes postcard gives meaning to: small variant indices, option and bool tags, varint edges.
pub(super) const INTERESTING: [u8; 9] = [0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x7f, 0x80, 0xff];

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
pub(super) fn frame_limit() -> impl Strategy<Value = Option<usize>> {
    prop_oneof![
        3 => Just(None),
        1 => (0usize..80).prop_map(Some),
        1 => Just(Some(MAX_FRAME_LEN + 7)),
    ]
}

/// A stream of frames with mostly true length prefixes, some made-up ones (small or random) and
/// a few trailing bytes of an unfinished frame.
pub(super) fn framed_stream() -> impl Strategy<Value = Vec<u8>> {
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
pub(super) fn random_bytes() -> impl Strategy<Value = Vec<u8>> {
    (vec(any::<u64>(), 0..=512), 0usize..8).prop_map(|(words, cut)| {
        let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        bytes.truncate(bytes.len().saturating_sub(cut));
        bytes
    })
}

pub(super) fn mutation() -> impl Strategy<Value = Mutation> {
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

pub(super) fn request() -> impl Strategy<Value = Request> {
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
        (
            bot_id(),
            0u8..3,
            option::of(text()),
            any::<bool>(),
            option::of((text(), any::<bool>())),
        )
            .prop_map(|(bot, kind, control_lease, bot_dir, terminal)| {
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
                    terminal: terminal.map(|(key, resume)| TerminalResume { key, resume }),
                })
            }),
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
        (
            any::<bool>(),
            home_authority(),
            any::<[u8; 16]>(),
            proptest::option::of(any::<[u8; 16]>())
        )
            .prop_map(|(quiesce_browsers, authority, token, since)| {
                Request::HomeExport(HomeExportRequest {
                    quiesce_browsers,
                    authority,
                    token,
                    since,
                })
            }),
        (any::<u64>(), home_authority()).prop_map(|(size, authority)| Request::HomeImport(
            HomeImportRequest { size, authority }
        )),
        Just(Request::Status),
        Just(Request::Activity),
        Just(Request::ProcList(ProcList)),
        (any::<u32>(), option::of(any::<u64>()), any::<bool>())
            .prop_map(|(id, offset, follow)| Request::ProcLogs(ProcLogs { id, offset, follow })),
        (any::<u32>(), option::of(any::<u64>())).prop_map(|(id, offset)| Request::ProcAttach(
            ProcAttach {
                id,
                offset,
                lease: None
            }
        )),
        (any::<u32>(), any::<i32>()).prop_map(|(id, signal)| Request::ProcKill(ProcKill {
            id,
            signal,
            lease: None
        })),
        any::<u16>().prop_map(|port| Request::PortConnect(PortConnect { port })),
        (
            bot_id(),
            lease_token(),
            option::of(any::<u16>()),
            any::<bool>(),
            0..3u8,
            option::of(any::<u32>())
        )
            .prop_map(|(bot, lease, width, marks, send, budget)| {
                use gateway_proto::desktop::{ObserveOptions, ObserveRequest, SendMode};
                let send = match send {
                    0 => SendMode::Auto,
                    1 => SendMode::Changes,
                    _ => SendMode::Full,
                };
                Request::Observe(ObserveRequest {
                    bot,
                    lease,
                    options: ObserveOptions {
                        width,
                        marks,
                        send,
                        budget,
                    },
                })
            }),
    ]
}

pub(super) fn exec_event() -> impl Strategy<Value = ExecEvent> {
    prop_oneof![
        any::<u32>().prop_map(|pid| ExecEvent::Started { pid }),
        bytes().prop_map(ExecEvent::Stdout),
        bytes().prop_map(ExecEvent::Stderr),
        (any::<i32>(), option::of(text()))
            .prop_map(|(code, message)| ExecEvent::Exit { code, message }),
        op_error().prop_map(ExecEvent::Failed),
    ]
}

pub(super) fn control_msg() -> impl Strategy<Value = ControlMsg> {
    prop_oneof![
        (bot_id(), option::of(lease_token()))
            .prop_map(|(bot, lease)| ControlMsg::Lease { bot, lease }),
        any::<u64>().prop_map(|seq| ControlMsg::Ping { seq }),
        any::<u64>().prop_map(|seq| ControlMsg::Pong { seq }),
    ]
}

pub(super) fn exec_input() -> impl Strategy<Value = ExecInput> {
    prop_oneof![
        bytes().prop_map(ExecInput::Stdin),
        Just(ExecInput::CloseStdin),
        Just(ExecInput::Abort),
    ]
}

pub(super) fn reply() -> impl Strategy<Value = Reply> {
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
            any::<u64>(),
            proptest::option::of(any::<u64>()),
        )
            .prop_map(
                |(
                    commands,
                    background,
                    terminal_output_ago_ms,
                    cpu_milli,
                    cpu_interval_ms,
                    process_output_ago_ms,
                )| {
                    Reply::Activity(GuestActivity {
                        commands,
                        background,
                        terminal_output_ago_ms,
                        cpu_milli,
                        cpu_interval_ms,
                        process_output_ago_ms,
                    })
                }
            ),
    ]
}

pub(super) fn hello() -> impl Strategy<Value = Hello> {
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

pub(super) fn hello_reply() -> impl Strategy<Value = HelloReply> {
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
