//! Raw sealing speed: AES-256-GCM over 256 MiB (or the MiB given as the first argument) in
//! 64 KiB segments, exactly as checkpoints are sealed, without I/O. Prints MB/s for sealing and
//! for opening. Run it in release: `cargo run --release -p homes --bin bench_seal`.

use homes::seal::{DataKey, SegmentOpener, SegmentSealer, SEGMENT_SIZE};
use homes::{HomeKey, Revision};
use std::time::{Duration, Instant};

#[allow(clippy::disallowed_methods)] // reason: a benchmark measures wall-clock time
fn now() -> Instant {
    Instant::now()
}

fn mb_per_s(bytes: usize, elapsed: Duration) -> f64 {
    bytes as f64 / 1e6 / elapsed.as_secs_f64()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mib: usize = match std::env::args().nth(1) {
        Some(a) => a.parse()?,
        None => 256,
    };
    let total = mib << 20;
    let segments = total.div_ceil(SEGMENT_SIZE);
    let key = DataKey::generate();
    let home = HomeKey::new("bench")?;
    let revision = Revision::FIRST;
    let plain: Vec<u8> = (0..SEGMENT_SIZE).map(|i| (i * 31 % 251) as u8).collect();

    let mut sealer = SegmentSealer::new(&key, &home, revision);
    let mut buf = Vec::with_capacity(SEGMENT_SIZE + 16);
    let start = now();
    for i in 0..segments {
        buf.clear();
        buf.extend_from_slice(&plain);
        sealer.seal(&mut buf, i + 1 == segments)?;
    }
    let sealed = start.elapsed();

    // Opening: a 4 MiB archive sealed once, opened over and over until as many bytes as were
    // sealed have been opened (the key derivation per archive is amortised as in a restore).
    const GROUP: usize = 64;
    let mut sealer = SegmentSealer::new(&key, &home, revision);
    let header = sealer.header().to_vec();
    let mut group = Vec::with_capacity(GROUP);
    for i in 0..GROUP {
        let mut seg = plain.clone();
        sealer.seal(&mut seg, i + 1 == GROUP)?;
        group.push(seg);
    }
    let mut out = Vec::with_capacity(SEGMENT_SIZE);
    let mut opened_bytes = 0;
    let start = now();
    while opened_bytes < total {
        let mut opener = SegmentOpener::new(&key, &home, revision, &header)?;
        for (i, seg) in group.iter().enumerate() {
            opener.open(seg, i + 1 == GROUP, &mut out)?;
            opened_bytes += out.len();
        }
    }
    let opened = start.elapsed();

    println!(
        "seal: {mib} MiB in {} segments of {} KiB: {:.0} MB/s ({:.2} s)",
        segments,
        SEGMENT_SIZE >> 10,
        mb_per_s(total, sealed),
        sealed.as_secs_f64()
    );
    println!(
        "open: {:.0} MB/s ({:.2} s)",
        mb_per_s(opened_bytes, opened),
        opened.as_secs_f64()
    );
    Ok(())
}
