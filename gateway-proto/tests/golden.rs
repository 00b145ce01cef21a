//! Golden bytes for every message on the tunnel.
//!
//! WIRE CHANGE WARNING: changing any byte in this file is a wire change. It needs a
//! `PROTOCOL_VERSION` bump with a history line in `gateway-proto/src/op.rs`, and new goldens for
//! the new version. Never "fix" a golden to match new output without that bump.
//!
//! Each golden is the whole frame as produced by [`gateway_proto::encode`]: the 4-byte big-endian
//! length prefix, then the postcard payload. Whitespace in the hex literals is ignored; it
//! separates fields. Postcard reminders for reading them: enum variant index and all lengths and
//! unsigned integers are LEB128 varints (7 bits per byte, low group first, high bit = more),
//! signed integers are zigzag varints, `bool` is one byte 00/01, `Option` is a 00/01 tag then the
//! value, strings and byte buffers are a varint length then the bytes, structs are their fields in
//! declaration order with no names and no tags.

use gateway_proto::desktop::{
    ActRequest, Action, FrameKind, FrameSize, Mark, Marks, MouseButton, ObservationMeta,
    ObserveOptions, ObserveRequest, Region, ScreenInfo, SendMode,
};
use gateway_proto::home::{
    ExportStart, HomeAuthority, HomeExportRequest, HomeImportRequest, Imported, LeaseFence,
};
use gateway_proto::lease::{MAX_BOT_ID_LEN, MAX_OWNER_LEN};
use gateway_proto::live::{
    CapabilityKind, ConnectRequest, PortConnect, RevokeRequest, RevokeScope, TerminalResume,
};
use gateway_proto::op::{GuestActivity, MachineStatus};
use gateway_proto::process::{
    ProcAttach, ProcEvent, ProcExit, ProcInfo, ProcKill, ProcList, ProcLogs, ProcStart,
};
use gateway_proto::recording::{RecordingChunk, RecordingPull};
use gateway_proto::{
    decode, encode, BotId, BotLease, ControlMsg, ErrorCode, ExecEvent, ExecInput, ExecRequest,
    FileEntry, FileKind, FrameDecoder, FrameError, Hello, HelloReply, LeaseToken, ListFiles,
    OpError, ReadFile, RefuseReason, Refused, Reply, Request, Secret, StartDir, Welcome, WriteFile,
    MIN_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use serde::{de::DeserializeOwned, Serialize};
use serde_bytes::ByteBuf;
use std::fmt::Debug;

/// Asserts that `value` encodes to exactly the frame `expected` (hex, whitespace ignored, length
/// prefix included), and that the golden bytes decode back to `value`, both as a bare payload and
/// through the stream decoder.
#[track_caller]
fn golden<T>(value: &T, expected: &str)
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let expected: String = expected.split_whitespace().collect();
    let frame = encode(value).expect("golden value encodes");
    assert_eq!(
        hex::encode(&frame),
        expected,
        "wire encoding of {value:?} changed: that needs a PROTOCOL_VERSION bump"
    );

    let bytes = hex::decode(&expected).expect("golden is valid hex");
    let (prefix, payload) = bytes.split_at(4);
    let prefix = u32::from_be_bytes(prefix.try_into().expect("4-byte prefix"));
    assert_eq!(prefix as usize, payload.len(), "length prefix of {value:?}");
    assert_eq!(&decode::<T>(payload).expect("golden decodes"), value);

    let mut decoder = FrameDecoder::new();
    decoder.push(&bytes);
    let streamed = decoder.next_message::<T>().expect("stream decodes");
    assert_eq!(streamed.as_ref(), Some(value));
    assert_eq!(decoder.next_message::<T>(), Ok(None));
    decoder.finish().expect("nothing left over");
}

/// Asserts that a payload (no length prefix) is refused as `T`.
#[track_caller]
fn rejected<T: DeserializeOwned + Debug>(payload_hex: &str) {
    let payload: String = payload_hex.split_whitespace().collect();
    let payload = hex::decode(payload).expect("valid hex");
    let got = decode::<T>(&payload);
    assert!(
        matches!(got, Err(FrameError::Malformed(_))),
        "{payload_hex} decoded as {} to {got:?}",
        std::any::type_name::<T>()
    );
}

fn bot() -> BotId {
    BotId::new("bot-1").unwrap()
}

/// An owner with a colon (owners are run ids and may contain them) and a two-byte varint fence.
fn token() -> LeaseToken {
    LeaseToken::new("run:42", 300).unwrap()
}

fn bot_lease() -> BotLease {
    BotLease {
        bot: bot(),
        token: token(),
    }
}

#[test]
fn protocol_version_is_the_one_these_goldens_pin() {
    // Bumping the version means revisiting every golden below (and keeping the old ones if the
    // old version is still accepted, see MIN_PROTOCOL_VERSION).
    assert_eq!(PROTOCOL_VERSION, 16);
    assert_eq!(MIN_PROTOCOL_VERSION, 1);
}

#[test]
fn hello() {
    golden(
        &Hello {
            version: 1,
            min_version: 1,
            computer_id: "c1".into(),
            token: Secret::new("tok"),
            agent: "guest/0.1".into(),
        },
        concat!(
            "00000013",              // frame length: 19
            "01",                    // version: 1
            "01",                    // min_version: 1
            "02 6331",               // computer_id: "c1"
            "03 746f6b",             // token: "tok" (Secret is transparent)
            "09 67756573742f302e31"  // agent: "guest/0.1"
        ),
    );
}

#[test]
fn welcome_and_refused_structs() {
    golden(&Welcome { version: 1 }, "00000001 01");
    golden(
        &Refused {
            reason: RefuseReason::BadCredentials,
        },
        "00000001 00",
    );
}

#[test]
fn hello_reply_welcome() {
    golden(
        &HelloReply::Welcome(Welcome { version: 1 }),
        "00000002 00 01", // variant 0 Welcome, version 1
    );
}

#[test]
fn hello_reply_refused_with_each_reason() {
    // variant 1 Refused, then the RefuseReason variant index and its fields.
    let refused = |reason| HelloReply::Refused(Refused { reason });
    golden(&refused(RefuseReason::BadCredentials), "00000002 01 00");
    golden(
        &refused(RefuseReason::UnsupportedVersion { min: 1, max: 2 }),
        "00000004 01 01 01 02", // UnsupportedVersion, min 1, max 2
    );
    golden(
        &refused(RefuseReason::UnsupportedVersion {
            min: 200,
            max: u16::MAX,
        }),
        "00000007 01 01 c801 ffff03", // u16 varints: 200 and 65535
    );
    golden(&refused(RefuseReason::Malformed), "00000002 01 02");
    golden(&refused(RefuseReason::Superseded), "00000002 01 03");
}

#[test]
fn control_msg_lease_some() {
    golden(
        &ControlMsg::Lease {
            bot: bot(),
            lease: Some(token()),
        },
        concat!(
            "00000011",        // frame length: 17
            "00",              // variant 0 Lease
            "05 626f742d31",   // bot: "bot-1"
            "01",              // lease: Some
            "06 72756e3a3432", // owner: "run:42"
            "ac02"             // fence: 300
        ),
    );
}

#[test]
fn control_msg_lease_none() {
    golden(
        &ControlMsg::Lease {
            bot: bot(),
            lease: None,
        },
        "00000008 00 05626f742d31 00", // Lease, bot "bot-1", lease None
    );
}

#[test]
fn control_msg_ping_and_pong() {
    golden(&ControlMsg::Ping { seq: 1 }, "00000002 01 01");
    golden(&ControlMsg::Ping { seq: 0 }, "00000002 01 00");
    golden(
        &ControlMsg::Pong { seq: u64::MAX },
        "0000000b 02 ffffffffffffffffff01", // ten-byte varint
    );
}

#[test]
fn request_exec_with_every_field_set() {
    golden(
        &Request::Exec(ExecRequest {
            argv: vec!["sh".into(), "-c".into(), "echo hi".into()],
            cwd: Some("work".into()),
            env: vec![("A".into(), "1".into())],
            timeout_ms: Some(30_000),
            stdin: true,
            lease: Some(bot_lease()),
            start: StartDir::BotDir,
        }),
        concat!(
            "00000031",                             // frame length: 49
            "00",                                   // variant 0 Exec
            "03 02 7368 02 2d63 07 6563686f206869", // argv: ["sh", "-c", "echo hi"]
            "01 04 776f726b",                       // cwd: Some("work")
            "01 01 41 01 31",                       // env: [("A", "1")]
            "01 b0ea01",                            // timeout_ms: Some(30000)
            "01",                                   // stdin: true
            "01",                                   // lease: Some
            "05 626f742d31",                        //   bot: "bot-1"
            "06 72756e3a3432 ac02",                 //   token: "run:42", fence 300
            "01"                                    // start: BotDir
        ),
    );
}

#[test]
fn request_exec_minimal() {
    golden(
        &Request::Exec(ExecRequest {
            argv: vec!["true".into()],
            cwd: None,
            env: vec![],
            timeout_ms: None,
            stdin: false,
            lease: None,
            start: StartDir::Home,
        }),
        concat!(
            "0000000d",      // frame length: 13
            "00",            // variant 0 Exec
            "01 0474727565", // argv: ["true"]
            "00",            // cwd: None
            "00",            // env: []
            "00",            // timeout_ms: None
            "00",            // stdin: false
            "00",            // lease: None
            "00"             // start: Home
        ),
    );
}

#[test]
fn request_list_files() {
    golden(
        &Request::ListFiles(ListFiles {
            path: "src".into(),
            lease: None,
        }),
        "00000006 01 03737263 00", // variant 1, path "src", lease None
    );
    golden(
        &Request::ListFiles(ListFiles {
            path: "src".into(),
            lease: Some(bot_lease()),
        }),
        "00000015 01 03737263 01 05626f742d31 0672756e3a3432 ac02",
    );
}

#[test]
fn request_read_file() {
    golden(
        &Request::ReadFile(ReadFile {
            path: "a.txt".into(),
            max_bytes: 1 << 20,
            lease: Some(bot_lease()),
        }),
        concat!(
            "0000001a",                            // frame length: 26
            "02",                                  // variant 2 ReadFile
            "05 612e747874",                       // path: "a.txt"
            "808040",                              // max_bytes: 1048576
            "01 05626f742d31 0672756e3a3432 ac02"  // lease: Some(bot-1, run:42:300)
        ),
    );
}

#[test]
fn request_write_file() {
    golden(
        &Request::WriteFile(WriteFile {
            path: "bin/run".into(),
            executable: true,
            size: 5,
            lease: None,
            no_replace: false,
        }),
        // variant 3, path, executable, size, no lease, no_replace
        "0000000d 03 0762696e2f72756e 01 05 00 00",
    );
    golden(
        &Request::WriteFile(WriteFile {
            path: "a".into(),
            executable: false,
            size: 0,
            lease: Some(bot_lease()),
            no_replace: true,
        }),
        "00000016 03 0161 00 00 01 05626f742d31 0672756e3a3432 ac02 01",
    );
}

#[test]
fn request_ping() {
    golden(&Request::Ping, "00000001 04");
}

#[test]
fn exec_input_each_variant() {
    golden(
        &ExecInput::Stdin(ByteBuf::from(b"hi\n".to_vec())),
        "00000005 00 03 68690a",
    );
    golden(&ExecInput::Stdin(ByteBuf::new()), "00000002 00 00");
    golden(&ExecInput::CloseStdin, "00000001 01");
    golden(&ExecInput::Abort, "00000001 02");
}

#[test]
fn exec_event_started_stdout_stderr() {
    golden(&ExecEvent::Started { pid: 4242 }, "00000003 00 9221");
    golden(
        &ExecEvent::Stdout(ByteBuf::from(b"out\n".to_vec())),
        "00000006 01 04 6f75740a",
    );
    golden(
        &ExecEvent::Stderr(ByteBuf::from(b"\x00\xff".to_vec())),
        "00000004 02 02 00ff",
    );
}

#[test]
fn exec_event_exit() {
    golden(
        &ExecEvent::Exit {
            code: 0,
            message: None,
        },
        "00000003 03 00 00",
    );
    golden(
        &ExecEvent::Exit {
            code: -1,
            message: Some("killed".into()),
        },
        "0000000a 03 01 01 066b696c6c6564", // code -1 is zigzag 01
    );
    golden(
        &ExecEvent::Exit {
            code: 124,
            message: Some("timed out".into()),
        },
        "0000000e 03 f801 01 0974696d6564206f7574", // code 124 is zigzag 248
    );
}

#[test]
fn exec_event_failed() {
    golden(
        &ExecEvent::Failed(OpError::new(ErrorCode::Failed, "spawn: no such file")),
        concat!(
            "00000016",                                  // frame length: 22
            "04",                                        // variant 4 Failed
            "05",                                        // code: Failed
            "13 737061776e3a206e6f20737563682066696c65"  // message (19 bytes)
        ),
    );
}

#[test]
fn reply_files() {
    golden(
        &Reply::Files(vec![
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
        ]),
        concat!(
            "00000012",               // frame length: 18
            "00",                     // variant 0 Files
            "02",                     // two entries
            "05 612e747874 00 05 00", // "a.txt", File, size 5, not executable
            "03 62696e 01 00 01"      // "bin", Dir, size 0, executable
        ),
    );
    golden(&Reply::Files(vec![]), "00000002 00 00");
}

#[test]
fn request_port_connect() {
    // variant 24, port 8080 (varint 90 3f)
    golden(
        &Request::PortConnect(PortConnect { port: 8080 }),
        "00000003 18 903f",
    );
}

#[test]
fn request_screen_prewarm() {
    // variant 26, no fields
    golden(
        &Request::ScreenPrewarm(gateway_proto::desktop::ScreenPrewarm {}),
        "00000001 1a",
    );
}

#[test]
fn recording_pull_and_its_chunk() {
    golden(
        &Request::RecordingPull(RecordingPull {
            bot: bot(),
            session: Some("s1".into()),
            after: 5,
            max_bytes: 1000,
        }),
        // variant 25, bot, Some("s1"), after 5, max_bytes 1000 (varint e8 07)
        "0000000e 19 05626f742d31 01 027331 05 e807",
    );
    golden(
        &Reply::Recording(RecordingChunk {
            session: "s1".into(),
            first: 1,
            next: 3,
            lost: 0,
            len: 300,
            width: 1280,
            height: 800,
        }),
        // variant 20, "s1", first 1, next 3, lost 0, len 300, 1280 x 800 (varints)
        "0000000d 14 027331 01 03 00 ac02 800a a006",
    );
}

#[test]
fn request_connect_and_revoke() {
    golden(
        &Request::Connect(ConnectRequest {
            bot: bot(),
            kind: CapabilityKind::Control,
            control_lease: Some("cl-1".into()),
            start: StartDir::Home,
            terminal: None,
        }),
        // variant 13, bot, Control, Some("cl-1"), start Home, no terminal session
        "00000010 0d 05626f742d31 01 01 04636c2d31 00 00",
    );
    golden(
        &Request::Connect(ConnectRequest {
            bot: bot(),
            kind: CapabilityKind::View,
            control_lease: None,
            start: StartDir::Home,
            terminal: None,
        }),
        "0000000b 0d 05626f742d31 00 00 00 00",
    );
    golden(
        &Request::Connect(ConnectRequest {
            bot: bot(),
            kind: CapabilityKind::Terminal,
            control_lease: None,
            start: StartDir::BotDir,
            terminal: None,
        }),
        "0000000b 0d 05626f742d31 02 00 01 00", // a terminal in bots/<bot>/
    );
    golden(
        &Request::Connect(ConnectRequest {
            bot: bot(),
            kind: CapabilityKind::Terminal,
            control_lease: Some("cl-1".into()),
            start: StartDir::Home,
            terminal: Some(TerminalResume {
                key: "k-1".into(),
                resume: true,
            }),
        }),
        // ..., Some(TerminalResume { key "k-1", resume true })
        "00000015 0d 05626f742d31 02 01 04636c2d31 00 01 036b2d31 01",
    );
    golden(
        &Request::Revoke(RevokeRequest {
            bot: bot(),
            scope: RevokeScope::All,
        }),
        "00000008 0e 05626f742d31 01",
    );
    golden(
        &Request::Revoke(RevokeRequest {
            bot: bot(),
            scope: RevokeScope::Control,
        }),
        "00000008 0e 05626f742d31 00",
    );
    rejected::<CapabilityKind>("03");
    rejected::<RevokeScope>("02");
}

#[test]
fn request_home_export_and_import() {
    let authority = HomeAuthority::new(vec![
        LeaseFence {
            bot: bot(),
            fence: 300,
        },
        LeaseFence {
            bot: BotId::new("b2").unwrap(),
            fence: 1,
        },
    ])
    .unwrap();
    golden(
        &Request::HomeExport(HomeExportRequest {
            quiesce_browsers: true,
            authority: authority.clone(),
            token: [7; 16],
            since: Some([9; 16]),
        }),
        concat!(
            "00000030 0f 01",                      // HomeExport, quiesce_browsers
            "02",                                  // authority: 2 fences
            "05626f742d31 ac02",                   // bot-1, fence 300
            "026232 01",                           // b2, fence 1
            "07070707070707070707070707070707",    // token
            "01 09090909090909090909090909090909", // since: Some
        ),
    );
    golden(
        &Request::HomeImport(HomeImportRequest {
            size: 300,
            authority: HomeAuthority::default(),
        }),
        "00000004 10 ac02 00", // HomeImport, size 300, no fences
    );
    golden(
        &Request::HomeImport(HomeImportRequest {
            size: 300,
            authority,
        }),
        "00000010 10 ac02 02 05626f742d31ac02 02623201",
    );
    // A bot named twice is refused on decode.
    rejected::<HomeAuthority>("02 05626f742d31 01 05626f742d31 02");
}

#[test]
fn reply_opened_revoked_export_start_imported() {
    golden(&Reply::Opened, "00000001 0c");
    golden(&Reply::Revoked, "00000001 0d");
    golden(
        &Reply::ExportStart(ExportStart {
            content_bytes: 5,
            entries: 2,
        }),
        "00000003 0e 05 02",
    );
    golden(
        &Reply::Imported(Imported {
            content_bytes: 1,
            entries: 1,
        }),
        "00000003 0f 01 01",
    );
}

#[test]
fn status_request_and_reply() {
    golden(&Request::Status, "00000001 11");
    golden(
        &Reply::Status(MachineStatus {
            uptime_secs: 300,
            load_milli: [120, 1, 0],
            cpus: 2,
            home_total_bytes: 1 << 20,
            home_free_bytes: 5,
            memory_total_bytes: 1 << 30,
            memory_available_bytes: 1 << 29,
            memory_limited: true,
            home_used_bytes: 4096,
            home_used_partial: false,
            desktops: 2,
        }),
        // Status, uptime 300, load 120 1 0, 2 CPUs, 1 MiB, 5, 1 GiB, 512 MiB, limited,
        // 4096 used, complete, 2 desktops
        "0000001a 10 ac02 7801 00 02 80804005 8080808004 8080808002 01 8020 00 02",
    );
}

#[test]
fn activity_request_and_reply() {
    golden(&Request::Activity, "00000001 12");
    golden(
        &Reply::Activity(GuestActivity {
            commands: 1,
            background: 2,
            terminal_output_ago_ms: Some(300),
            cpu_milli: 1000,
            cpu_interval_ms: 5,
            process_output_ago_ms: Some(70),
        }),
        // Activity, 1 command, 2 background, output 300 ms ago, 1000 milli-CPU over 5 ms, a
        // detached process's output 70 ms ago
        "0000000b 11 01 02 01ac02 e807 05 0146",
    );
    golden(
        &Reply::Activity(GuestActivity::default()),
        "00000007 11 00 00 00 00 00 00",
    );
}

#[test]
fn detached_process_requests_replies_and_events() {
    golden(
        &Request::ProcStart(ProcStart {
            command: ExecRequest {
                argv: vec!["sleep".into()],
                cwd: None,
                env: vec![],
                timeout_ms: None,
                stdin: true,
                lease: None,
                start: StartDir::Home,
            },
        }),
        // ProcStart, argv ["sleep"], no cwd, no env, no timeout, stdin, no lease, home
        "0000000e 13 01 05736c656570 00 00 00 01 00 00",
    );
    golden(&Request::ProcList(ProcList), "00000001 14");
    golden(
        &Request::ProcLogs(ProcLogs {
            id: 7,
            offset: Some(300),
            follow: true,
        }),
        // ProcLogs, id 7, from 300, follow
        "00000006 15 07 01ac02 01",
    );
    golden(
        &Request::ProcAttach(ProcAttach {
            id: 2,
            offset: None,
            lease: None,
        }),
        "00000004 16 02 00 00",
    );
    golden(
        &Request::ProcKill(ProcKill {
            id: 7,
            signal: 15,
            lease: None,
        }),
        // ProcKill, id 7, SIGTERM (zigzag 30), no lease
        "00000004 17 07 1e 00",
    );
    golden(
        &Reply::Process(ProcInfo {
            id: 1,
            pid: 300,
            argv: vec!["a".into()],
            bot: None,
            started_ms: 5,
            exited_ms: Some(6),
            exit: Some(ProcExit {
                code: -1,
                message: None,
            }),
            output_bytes: 2,
            kept_from: 0,
        }),
        // Process, id 1, pid 300, ["a"], no bot, started 5, exited 6, code -1, no message,
        // 2 bytes of output, all kept
        "00000010 12 01 ac02 01 0161 00 05 0106 01 01 00 02 00",
    );
    golden(&Reply::Processes(vec![]), "00000002 13 00");
    golden(
        &ProcEvent::Opened {
            offset: 5,
            dropped: 0,
        },
        "00000003 00 05 00",
    );
    golden(
        &ProcEvent::Output {
            offset: 1,
            data: ByteBuf::from(b"hi".to_vec()),
        },
        "00000005 01 01 02 6869",
    );
    golden(
        &ProcEvent::Exit(ProcExit {
            code: 0,
            message: Some("x".into()),
        }),
        "00000005 02 00 0101 78",
    );
    golden(
        &ProcEvent::Failed(OpError::new(ErrorCode::TooManyProcesses, "m")),
        "00000004 03 0b 016d",
    );
}

#[test]
fn screen_info_carries_its_idle_time() {
    golden(
        &Reply::Screen(ScreenInfo {
            bot: BotId::new("b").unwrap(),
            slot: 1,
            display: 11,
            width: 1280,
            height: 800,
            browser_pid: None,
            started: false,
            idle_ms: 200,
        }),
        // Screen, bot "b", slot 1, display 11, 1280x800, no pid, not started, idle 200 ms
        "0000000d 05 0162 01 0b 800a a006 00 00 c801",
    );
}

#[test]
fn observe_asks_for_a_scaled_marked_frame_by_changes() {
    golden(
        &Request::Observe(ObserveRequest {
            bot: bot(),
            lease: token(),
            options: ObserveOptions {
                width: Some(640),
                marks: true,
                send: SendMode::Changes,
                budget: Some(50_000),
            },
        }),
        concat!(
            "00000019 08",             // Observe
            "05626f742d31",            // bot-1
            "0672756e3a3432 ac02",     // run:42, fence 300
            "01 8005 01 01 01 d08603", // width Some(640), marks, Changes, budget Some(50000)
        ),
    );
    rejected::<SendMode>("03");
    rejected::<FrameKind>("03");
}

#[test]
fn observation_with_regions_and_marks() {
    golden(
        &Reply::Observation(ObservationMeta {
            frame_id: "ab".into(),
            captured_at_ms: 5,
            width: 640,
            height: 400,
            cursor: (1, 2),
            active_window: None,
            unchanged: false,
            png_len: 7,
            screen_width: 1280,
            screen_height: 800,
            kind: FrameKind::Regions,
            base_frame_id: Some("cd".into()),
            regions: vec![Region {
                x: 32,
                y: 0,
                width: 64,
                height: 32,
                png_len: 7,
            }],
            marks: Some(Marks {
                items: vec![Mark {
                    element: "e1".into(),
                    role: "button".into(),
                    name: "OK".into(),
                    x: 3,
                    y: 4,
                    width: 50,
                    height: 20,
                }],
                note: None,
            }),
        }),
        concat!(
            "00000031 08",                 // Observation
            "026162 0a 8005 9003",         // frame id "ab", at 5 ms, 640x400
            "0204 00 00 07",               // cursor (1, 2), no window, changed, 7 bytes follow
            "800a a006 01",                // screen 1280x800, Regions
            "01026364",                    // base frame "cd"
            "01 20 00 40 20 07",           // one region: 64x32 at 32,0, 7 bytes
            "01 01 026531 06627574746f6e", // marks: one, e1, button,
            "024f4b 03 04 32 14 00",       //   "OK" 50x20 at 3,4; no note
        ),
    );
}

#[test]
fn act_in_a_frame_with_a_click_on_a_ref() {
    golden(
        &Request::Act(ActRequest {
            bot: bot(),
            lease: token(),
            actions: vec![Action::ClickRef {
                element: "e15".into(),
                button: MouseButton::Right,
                double: true,
            }],
            observe: true,
            settle_ms: None,
            frame: Some(FrameSize {
                width: 640,
                height: 400,
            }),
            observe_options: ObserveOptions::default(),
        }),
        concat!(
            "00000023 09",                      // Act
            "05626f742d31 0672756e3a3432 ac02", // bot-1, run:42 fence 300
            "01 0b 03653135 01 01",             // one action: ClickRef e15, right, double
            "01 00",                            // observe, no settle_ms
            "01 8005 9003",                     // frame 640x400
            "00 00 00 00",                      // default observe options
        ),
    );
}

#[test]
fn reply_read_start_written_pong() {
    golden(&Reply::ReadStart { size: 5 }, "00000002 01 05");
    golden(&Reply::Written { size: 200 }, "00000003 02 c801");
    golden(&Reply::Pong, "00000001 03");
}

#[test]
fn reply_error() {
    golden(
        &Reply::Error(OpError::new(ErrorCode::NotFound, "nope")),
        "00000007 04 02 046e6f7065", // variant 4, NotFound, "nope"
    );
}

#[test]
fn op_error_with_each_error_code() {
    let cases = [
        (ErrorCode::BadRequest, "00000003 00 0178"),
        (ErrorCode::PathRejected, "00000003 01 0178"),
        (ErrorCode::NotFound, "00000003 02 0178"),
        (ErrorCode::TooLarge, "00000003 03 0178"),
        (ErrorCode::StaleLease, "00000003 04 0178"),
        (ErrorCode::Failed, "00000003 05 0178"),
        (ErrorCode::Unsupported, "00000003 06 0178"),
        (ErrorCode::ScreenUnavailable, "00000003 07 0178"),
        (ErrorCode::ScreenReleasing, "00000003 08 0178"),
        (ErrorCode::ActionRefused, "00000003 09 0178"),
        (ErrorCode::Exists, "00000003 0a 0178"),
        (ErrorCode::TooManyProcesses, "00000003 0b 0178"),
    ];
    for (code, expected) in cases {
        golden(&OpError::new(code, "x"), expected);
    }
}

#[test]
fn file_entry_and_file_kind() {
    golden(&FileKind::File, "00000001 00");
    golden(&FileKind::Dir, "00000001 01");
    golden(
        &FileEntry {
            path: "a.txt".into(),
            kind: FileKind::File,
            size: 5,
            executable: false,
        },
        "00000009 05612e747874 00 05 00",
    );
}

#[test]
fn bot_lease_lease_token_bot_id_secret() {
    golden(
        &bot_lease(),
        "0000000f 05626f742d31 0672756e3a3432 ac02", // bot, owner, fence
    );
    golden(&token(), "00000009 0672756e3a3432 ac02");
    golden(
        &LeaseToken::new("r", u64::MAX).unwrap(),
        "0000000c 0172 ffffffffffffffffff01",
    );
    golden(&bot(), "00000006 05626f742d31");
    golden(&Secret::new("tok"), "00000004 03746f6b");
}

#[test]
fn variant_index_past_the_last_is_rejected() {
    // New variants are appended at the end with a version bump; until then these are garbage.
    rejected::<HelloReply>("02");
    rejected::<HelloReply>("01 04"); // RefuseReason index 4
    rejected::<ControlMsg>("03");
    rejected::<Request>("1b");
    rejected::<ExecInput>("03");
    rejected::<ExecEvent>("05");
    rejected::<Reply>("15");
    rejected::<OpError>("0c 00"); // ErrorCode index 12
    rejected::<FileKind>("02");
}

#[test]
fn invalid_ids_are_rejected_on_decode() {
    // Bot ids and lease owners are validated when decoded, not only when built.
    rejected::<BotId>("00"); // empty
    rejected::<BotId>("02 2e2e"); // ".."
    rejected::<BotId>("03 612f62"); // "a/b"
    rejected::<ControlMsg>("00 01 2e 00"); // Lease for bot "."
    rejected::<LeaseToken>("00 01"); // empty owner
    rejected::<LeaseToken>("03 722075 01"); // owner "r u"
    rejected::<BotLease>("05626f742d31 03 722f75 01"); // owner "r/u"
    rejected::<Request>("01 0161 01 05626f742d31 0672756e3a3432 ac"); // fence varint cut short

    // Length limits, encoded as plain strings and decoded as the validated types.
    let longest = "b".repeat(MAX_BOT_ID_LEN);
    let frame = encode(&longest).unwrap();
    assert_eq!(
        decode::<BotId>(&frame[4..]),
        Ok(BotId::new(longest).unwrap())
    );
    let frame = encode(&"b".repeat(MAX_BOT_ID_LEN + 1)).unwrap();
    assert!(matches!(
        decode::<BotId>(&frame[4..]),
        Err(FrameError::Malformed(_))
    ));
    let frame = encode(&("o".repeat(MAX_OWNER_LEN), 1u64)).unwrap();
    assert!(decode::<LeaseToken>(&frame[4..]).is_ok());
    let frame = encode(&("o".repeat(MAX_OWNER_LEN + 1), 1u64)).unwrap();
    assert!(matches!(
        decode::<LeaseToken>(&frame[4..]),
        Err(FrameError::Malformed(_))
    ));
}

#[test]
fn stream_reset_codes() {
    // QUIC application error codes of reset or stopped operation streams: both ends and deployed
    // guests agree on these numbers, so they are wire values like the bytes above.
    use gateway_proto::wire::{RESET_ABORTED, RESET_PROTOCOL, RESET_REVOKED};
    assert_eq!(RESET_PROTOCOL, 3);
    assert_eq!(RESET_ABORTED, 4);
    assert_eq!(RESET_REVOKED, 5);
}
