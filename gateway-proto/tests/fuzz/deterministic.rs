//! Deterministic tests, independent of proptest: xorshift-driven payloads and mutations, every
//! sample's round trip, and the frame limit's edges.

use super::*;

/// xorshift64 (Marsaglia): tiny, seedable, good enough to spray bytes.
pub(super) struct XorShift(u64);

impl XorShift {
    pub(super) fn new(seed: u64) -> Self {
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
    pub(super) fn fill(&mut self, len: usize) -> Vec<u8> {
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
