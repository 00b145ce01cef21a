//! The sans-IO wire parsers of gateway-proto: the tunnel's length-prefixed postcard frames
//! ([`FrameDecoder`], [`decode`]), the control-plane side of the handshake, the screen
//! gateway's terminal frames (`termframe`: the guest's decoder and the control plane's relay
//! check) and the recording records a recorded screen is stored in.
//!
//! Input: one control byte (seeds how the stream is split; bit 7 picks a small frame limit),
//! then the stream. Asserts, for any input:
//! - nothing panics; a decoder never buffers more than one frame plus one read;
//! - every typed message that decodes from a frame encodes and decodes again to itself;
//! - the terminal relay check and the guest's terminal decoder agree on where a stream turns
//!   bad, and the decoder yields exactly the frames the stream holds;
//! - the handshake ends at most once, and answers at most one reply.
#![no_main]

use gateway_proto::live::{ConnectRequest, PortConnect, RevokeRequest, TerminalResume};
use gateway_proto::process::ProcEvent;
use gateway_proto::termframe::{self, FrameCheck, TermFrame};
use gateway_proto::{
    decode, encode, ControlHandshake, ControlMsg, ExecEvent, ExecInput, FrameDecoder, Hello,
    HelloReply, Reply, Request, MAX_FRAME_LEN,
};
use libfuzzer_sys::fuzz_target;
use rakazo_fuzz::pieces;
use serde::{de::DeserializeOwned, Serialize};
use std::fmt::Debug;

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(payload: &[u8]) {
    if let Ok(msg) = decode::<T>(payload) {
        let frame = encode(&msg).expect("a decoded message encodes");
        let again: T = decode(&frame[4..]).expect("a message's own frame decodes");
        assert_eq!(
            again,
            msg,
            "{} does not survive a round trip",
            std::any::type_name::<T>()
        );
    }
}

fn typed(payload: &[u8]) {
    round_trip::<Hello>(payload);
    round_trip::<HelloReply>(payload);
    round_trip::<ControlMsg>(payload);
    round_trip::<Request>(payload);
    round_trip::<Reply>(payload);
    round_trip::<ExecInput>(payload);
    round_trip::<ExecEvent>(payload);
    round_trip::<ProcEvent>(payload);
    round_trip::<ConnectRequest>(payload);
    round_trip::<TerminalResume>(payload);
    round_trip::<RevokeRequest>(payload);
    round_trip::<PortConnect>(payload);
}

fn tunnel_frames(ctrl: u8, stream: &[u8]) {
    let small = ctrl & 0x80 != 0;
    let max = if small { 256 } else { MAX_FRAME_LEN };
    let mut dec = if small {
        FrameDecoder::with_max(max)
    } else {
        FrameDecoder::new()
    };
    for piece in pieces(ctrl, stream) {
        dec.push(piece);
        assert!(
            dec.buffered() <= 4 + max + piece.len(),
            "the decoder holds too much"
        );
        loop {
            match dec.next_frame() {
                Ok(Some(payload)) => {
                    assert!(payload.len() <= max);
                    typed(&payload);
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
    let _ = dec.finish();
}

fn terminal_frames(ctrl: u8, stream: &[u8]) {
    let mut dec = termframe::FrameDecoder::new();
    let mut check = FrameCheck::new();
    let mut frames = Vec::new();
    let mut dec_failed = None;
    let mut check_failed = None;
    let mut fed = 0;
    for piece in pieces(ctrl, stream) {
        fed += piece.len();
        if check_failed.is_none() && check.push(piece).is_err() {
            check_failed = Some(fed);
        }
        if dec_failed.is_none() {
            dec.push(piece);
            loop {
                match dec.next_frame() {
                    Ok(Some(f)) => frames.push(f),
                    Ok(None) => break,
                    Err(_) => {
                        dec_failed = Some(fed);
                        break;
                    }
                }
            }
        }
    }
    assert_eq!(
        dec_failed, check_failed,
        "the relay check and the decoder disagree on where the stream turns bad"
    );
    if dec_failed.is_none() {
        // Re-encoding what was decoded gives back the stream's whole frames.
        let mut again = Vec::new();
        for f in &frames {
            match f {
                TermFrame::Input(b) => again.extend(termframe::encode_input(b)),
                TermFrame::Resize { cols, rows } => {
                    again.extend(termframe::encode_resize(*cols, *rows))
                }
            }
        }
        assert_eq!(
            &stream[..again.len()],
            &again[..],
            "decoded frames differ from the stream"
        );
    }
}

fn handshake(ctrl: u8, stream: &[u8]) {
    let mut hs = ControlHandshake::new();
    let mut events = 0;
    for piece in pieces(ctrl, stream) {
        events += usize::from(hs.handle_bytes(piece).is_some());
    }
    events += usize::from(hs.handle_eof().is_some());
    assert!(events <= 1, "the handshake ended {events} times");
    let mut replies = 0;
    while hs.poll_transmit().is_some() {
        replies += 1;
    }
    assert!(replies <= 1, "the handshake answered {replies} times");
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctrl, stream)) = data.split_first() else {
        return;
    };
    tunnel_frames(ctrl, stream);
    typed(stream);
    terminal_frames(ctrl, stream);
    handshake(ctrl, stream);
    for record in gateway_proto::recording::records(stream) {
        if record.is_err() {
            break;
        }
    }
});
