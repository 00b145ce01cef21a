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
use gateway_proto::live::{
    CapabilityKind, ConnectRequest, PortConnect, RevokeRequest, RevokeScope, TerminalResume,
};
use gateway_proto::op::{GuestActivity, MachineStatus};
use gateway_proto::process::{ProcAttach, ProcKill, ProcList, ProcLogs};
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

mod checks;
mod deterministic;
mod strategies;
use checks::{apply, check_round_trip, codec, codecs, framed, Mutation, Sample, SAMPLES};
use deterministic::XorShift;
use strategies::{
    control_msg, exec_event, exec_input, frame_limit, framed_stream, hello, hello_reply, mutation,
    random_bytes, reply, request, INTERESTING,
};

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
