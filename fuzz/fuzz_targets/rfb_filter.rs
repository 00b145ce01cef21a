//! The screen gateway's client→server RFB filter (guest-agent/src/gateway/rfb/filter.rs).
//!
//! Input: one control byte (bit 0: the policy, View or Control; the rest seeds how the stream
//! is split), then the client's bytes. Asserts, for any input:
//! - it never panics, and every `push` returns (a hang is a libFuzzer timeout);
//! - the stream split anywhere gives the same output and the same error as the stream whole;
//! - it forwards no more than it was given;
//! - what it forwards is a well-formed client stream: a second Control filter takes it whole
//!   and forwards it unchanged (a prefix of a valid stream, never a cut header);
//! - under View, what it forwards holds no input message: a second View filter drops nothing,
//!   and nothing was noted as input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rakazo_fuzz::pieces;
use rakazo_fuzz::rfb_filter::{ClientFilter, FilterError, Policy};

fn run(policy: Policy, parts: &[&[u8]]) -> (Vec<u8>, Result<(), FilterError>, ClientFilter) {
    let mut f = ClientFilter::new(policy).note_inputs();
    let mut out = Vec::new();
    for p in parts {
        if let Err(e) = f.push(p, &mut out) {
            return (out, Err(e), f);
        }
    }
    (out, Ok(()), f)
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctrl, stream)) = data.split_first() else {
        return;
    };
    let policy = if ctrl & 1 == 0 {
        Policy::View
    } else {
        Policy::Control
    };
    let (whole, whole_result, mut filter) = run(policy, &[stream]);
    let (split, split_result, _) = run(policy, &pieces(ctrl >> 1, stream));
    assert_eq!(
        whole_result, split_result,
        "a split stream ends differently"
    );
    assert_eq!(whole, split, "a split stream is forwarded differently");
    assert!(
        whole.len() <= stream.len(),
        "forwarded more than it was given"
    );

    let (again, again_result, _) = run(Policy::Control, &[&whole]);
    assert_eq!(
        again_result,
        Ok(()),
        "the forwarded bytes are not a well-formed client stream"
    );
    assert_eq!(
        again, whole,
        "the forwarded bytes do not pass a second filter unchanged"
    );

    if policy == Policy::View {
        assert!(
            filter.take_inputs().is_empty(),
            "a viewer's input was noted"
        );
        let (viewed, viewed_result, second) = run(Policy::View, &[&whole]);
        assert_eq!(viewed_result, Ok(()));
        assert_eq!(
            second.dropped(),
            0,
            "a View filter forwarded an input message"
        );
        assert_eq!(viewed, whole);
    }
});
