//! A recording as video frames (docs/recordings.md#export): the records replayed onto a canvas,
//! sampled at a fixed rate, as raw RGB frames for an encoder (`rakazo recording export` hands
//! them to ffmpeg). The records come from a guest: every frame is decoded with its size checked
//! against the rectangle it claims and the canvas, and a bad one is an error, never a panic.

use gateway_proto::recording::{records, RecordHeader};

/// Largest canvas accepted (8K).
const MAX_SIDE: u16 = 8192;

#[derive(Debug, thiserror::Error)]
pub enum VideoError {
    #[error("the recording is damaged: {0}")]
    Records(#[from] gateway_proto::recording::RecordError),
    #[error("the recording has no frames")]
    NoFrames,
    #[error("a frame at {t} ms does not fit the screen: {why}")]
    BadFrame { t: i64, why: String },
}

/// A decoded frame record: where it goes and its pixels (RGB).
struct Paste {
    t: i64,
    x: usize,
    y: usize,
    w: usize,
    h: usize,
    rgb: Vec<u8>,
}

/// The recording, decoded: its screen size, time span and frame records in order.
pub struct Replay {
    pub width: usize,
    pub height: usize,
    pub start_ms: i64,
    pub end_ms: i64,
    pastes: Vec<Paste>,
    /// Inputs (time, who, what), for a caption track or a log.
    pub inputs: Vec<(i64, String, String)>,
}

fn decode_png(t: i64, bytes: &[u8], w: u16, h: u16) -> Result<Vec<u8>, VideoError> {
    let bad = |why: String| VideoError::BadFrame { t, why };
    let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().map_err(|e| bad(e.to_string()))?;
    let info = reader.info();
    if info.width != u32::from(w) || info.height != u32::from(h) {
        return Err(bad(format!(
            "its image is {}x{}, its rectangle {w}x{h}",
            info.width, info.height
        )));
    }
    let mut buf = vec![
        0;
        reader
            .output_buffer_size()
            .ok_or_else(|| bad("too large".into()))?
    ];
    let out = reader
        .next_frame(&mut buf)
        .map_err(|e| bad(e.to_string()))?;
    buf.truncate(out.buffer_size());
    let rgb = match out.color_type {
        png::ColorType::Rgb => buf,
        png::ColorType::Rgba => buf
            .chunks_exact(4)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect(),
        other => return Err(bad(format!("color type {other:?}"))),
    };
    Ok(rgb)
}

impl Replay {
    /// Decodes `bytes` (records in time order, as `GET …/recordings/{bot}` answers them).
    pub fn decode(bytes: &[u8]) -> Result<Replay, VideoError> {
        let (mut width, mut height) = (0usize, 0usize);
        let mut pastes = Vec::new();
        let mut inputs = Vec::new();
        let (mut start, mut end) = (i64::MAX, i64::MIN);
        for r in records(bytes) {
            let (header, body) = r?;
            let t = header.time_ms();
            start = start.min(t);
            end = end.max(t);
            match header {
                RecordHeader::Start { w, h, .. } => {
                    if w == 0 || h == 0 || w > MAX_SIDE || h > MAX_SIDE {
                        return Err(VideoError::BadFrame {
                            t,
                            why: format!("a screen of {w}x{h}"),
                        });
                    }
                    (width, height) = (usize::from(w), usize::from(h));
                }
                RecordHeader::Frame {
                    x, y, w, h, full, ..
                } => {
                    if full && (width, height) != (usize::from(w), usize::from(h)) {
                        if w == 0 || h == 0 || w > MAX_SIDE || h > MAX_SIDE {
                            return Err(VideoError::BadFrame {
                                t,
                                why: format!("a screen of {w}x{h}"),
                            });
                        }
                        (width, height) = (usize::from(w), usize::from(h));
                    }
                    let (x, y, w2, h2) = (
                        usize::from(x),
                        usize::from(y),
                        usize::from(w),
                        usize::from(h),
                    );
                    if width == 0 || x + w2 > width || y + h2 > height {
                        return Err(VideoError::BadFrame {
                            t,
                            why: format!("{w2}x{h2} at {x},{y} on a {width}x{height} screen"),
                        });
                    }
                    let rgb = decode_png(t, body, w, h)?;
                    pastes.push(Paste {
                        t,
                        x,
                        y,
                        w: w2,
                        h: h2,
                        rgb,
                    });
                }
                RecordHeader::Input { by, what, .. } => {
                    let by = serde_json::to_value(by)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default();
                    inputs.push((t, by, what));
                }
                RecordHeader::Gap { .. } => {}
            }
        }
        if pastes.is_empty() {
            return Err(VideoError::NoFrames);
        }
        Ok(Replay {
            width,
            height,
            start_ms: start,
            end_ms: end,
            pastes,
            inputs,
        })
    }

    /// How many frames `fps` gives: one at the start and one per period until one at or after
    /// the last record (so the video lasts the recording's span, rounded up to a frame).
    pub fn frame_count(&self, fps: u32) -> u64 {
        let span = u64::try_from(self.end_ms - self.start_ms).unwrap_or(0);
        (span * u64::from(fps)).div_ceil(1000) + 1
    }

    /// Calls `out` with each frame (RGB, `width * height * 3` bytes) sampled at `fps`: frame
    /// `k` shows every record up to `start + k / fps`. A frame of a resized screen is fitted to
    /// the first size (cut or padded black).
    pub fn frames(
        &self,
        fps: u32,
        mut out: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let (w, h) = (self.width, self.height);
        let mut canvas = vec![0u8; w * h * 3];
        let mut next = 0;
        for k in 0..self.frame_count(fps) {
            let at = self.start_ms + i64::try_from(k * 1000 / u64::from(fps)).unwrap_or(i64::MAX);
            while next < self.pastes.len() && self.pastes[next].t <= at {
                let p = &self.pastes[next];
                for row in 0..p.h.min(h.saturating_sub(p.y)) {
                    let cols = p.w.min(w.saturating_sub(p.x));
                    let d = ((p.y + row) * w + p.x) * 3;
                    let s = row * p.w * 3;
                    canvas[d..d + cols * 3].copy_from_slice(&p.rgb[s..s + cols * 3]);
                }
                next += 1;
            }
            out(&canvas)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_proto::recording::encode_record;

    fn png_of(w: u32, h: u32, rgb: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut e = png::Encoder::new(&mut out, w, h);
        e.set_color(png::ColorType::Rgb);
        e.set_depth(png::BitDepth::Eight);
        let mut wr = e.write_header().unwrap();
        wr.write_image_data(rgb).unwrap();
        wr.finish().unwrap();
        out
    }

    fn frame(t: i64, x: u16, y: u16, w: u16, h: u16, full: bool, value: u8) -> Vec<u8> {
        let rgb = vec![value; usize::from(w) * usize::from(h) * 3];
        let mut out = Vec::new();
        encode_record(
            &RecordHeader::Frame {
                t,
                x,
                y,
                w,
                h,
                full,
                cx: 0,
                cy: 0,
            },
            &png_of(u32::from(w), u32::from(h), &rgb),
            &mut out,
        );
        out
    }

    #[test]
    fn records_replay_onto_frames_at_the_rate_asked() {
        let mut bytes = Vec::new();
        encode_record(
            &RecordHeader::Start {
                t: 1000,
                w: 4,
                h: 2,
            },
            &[],
            &mut bytes,
        );
        bytes.extend(frame(1000, 0, 0, 4, 2, true, 10));
        bytes.extend(frame(1250, 2, 1, 2, 1, false, 99));
        let r = Replay::decode(&bytes).unwrap();
        assert_eq!(
            (r.width, r.height, r.start_ms, r.end_ms),
            (4, 2, 1000, 1250)
        );
        assert_eq!(r.frame_count(10), 4, "0, 100, 200 and 300 ms");
        let mut got = Vec::new();
        r.frames(10, |f| {
            got.push(f.to_vec());
            Ok(())
        })
        .unwrap();
        assert_eq!(got.len(), 4);
        assert!(got[0].iter().all(|&b| b == 10));
        assert!(got[2].iter().all(|&b| b == 10), "the crop is at 250 ms");
        assert_eq!(&got[3][(4 + 2) * 3..], &[99; 6], "pasted at 2,1");
        assert_eq!(&got[3][..(4 + 2) * 3], &[10; 18]);
    }

    #[test]
    fn frames_that_do_not_fit_are_refused() {
        let mut bytes = Vec::new();
        encode_record(&RecordHeader::Start { t: 0, w: 4, h: 2 }, &[], &mut bytes);
        bytes.extend(frame(0, 3, 0, 2, 1, false, 1));
        assert!(matches!(
            Replay::decode(&bytes),
            Err(VideoError::BadFrame { .. })
        ));
        // A PNG whose size is not its rectangle's.
        let mut lying = Vec::new();
        encode_record(&RecordHeader::Start { t: 0, w: 4, h: 2 }, &[], &mut lying);
        encode_record(
            &RecordHeader::Frame {
                t: 0,
                x: 0,
                y: 0,
                w: 1,
                h: 1,
                full: false,
                cx: 0,
                cy: 0,
            },
            &png_of(2, 2, &[0; 12]),
            &mut lying,
        );
        assert!(matches!(
            Replay::decode(&lying),
            Err(VideoError::BadFrame { .. })
        ));
        assert!(matches!(Replay::decode(&[]), Err(VideoError::NoFrames)));
    }
}
