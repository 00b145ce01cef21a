//! What an observation does to a captured frame before it is sent, all pure: scaling down to a
//! requested width (an area average, so text stays legible), drawing marks (an outline per
//! element and a label with its ref), and finding the regions that changed since the previous
//! frame (a tile diff whose dirty tiles are merged into rectangles).
//!
//! It leaves to others: capturing ([`crate::display::Capturer`]), where marks are (the page
//! browser), PNG encoding and the choice between regions and the whole frame
//! ([`super::observe`]).

use crate::display::Frame;
use gateway_proto::desktop::FrameSize;

/// Side of the square tiles the change diff compares.
pub const TILE: u32 = 32;

/// A rectangle in frame pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rect {
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
}

/// The frame scaled to `to` by averaging the block of source pixels each target pixel covers
/// (target pixel `x` covers source columns `x*sw/tw .. (x+1)*sw/tw`, at least one). The frame
/// itself when the sizes are equal.
pub fn scale(frame: &Frame, to: FrameSize) -> Frame {
    let (sw, sh) = (frame.width as usize, frame.height as usize);
    let (tw, th) = (usize::from(to.width), usize::from(to.height));
    if (sw, sh) == (tw, th) || sw == 0 || sh == 0 || tw == 0 || th == 0 {
        return frame.clone();
    }
    let span = |i: usize, s: usize, t: usize| {
        let a = i * s / t;
        let b = ((i + 1) * s / t).max(a + 1).min(s);
        (a, b)
    };
    let cols: Vec<(usize, usize)> = (0..tw).map(|x| span(x, sw, tw)).collect();
    let mut rgb = vec![0u8; tw * th * 3];
    let mut sums = vec![0u32; tw * 3];
    for (y, out_row) in rgb.chunks_exact_mut(tw * 3).enumerate() {
        let (y0, y1) = span(y, sh, th);
        sums.iter_mut().for_each(|s| *s = 0);
        for sy in y0..y1 {
            let row = &frame.rgb[sy * sw * 3..(sy + 1) * sw * 3];
            for (x, &(x0, x1)) in cols.iter().enumerate() {
                let (mut r, mut g, mut b) = (0u32, 0u32, 0u32);
                for px in row[x0 * 3..x1 * 3].chunks_exact(3) {
                    r += u32::from(px[0]);
                    g += u32::from(px[1]);
                    b += u32::from(px[2]);
                }
                sums[x * 3] += r;
                sums[x * 3 + 1] += g;
                sums[x * 3 + 2] += b;
            }
        }
        for (x, &(x0, x1)) in cols.iter().enumerate() {
            let n = ((x1 - x0) * (y1 - y0)) as u32;
            for c in 0..3 {
                out_row[x * 3 + c] = ((sums[x * 3 + c] + n / 2) / n) as u8;
            }
        }
    }
    Frame {
        width: to.width.into(),
        height: to.height.into(),
        rgb,
    }
}

/// One mark to draw: a box in frame pixels and its label (the element's ref).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkBox {
    pub rect: Rect,
    pub label: String,
}

/// Outline colours, taken in turn so neighbouring marks differ.
const COLOURS: [[u8; 3]; 6] = [
    [230, 25, 75],
    [0, 130, 200],
    [60, 160, 40],
    [245, 130, 48],
    [145, 30, 180],
    [0, 128, 128],
];

/// 5x7 glyphs of what labels hold (`e` and digits), one byte per row, high bit on the left.
fn glyph(c: char) -> Option<[u8; 7]> {
    Some(match c {
        '0' => [0x0e, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0e],
        '1' => [0x04, 0x0c, 0x04, 0x04, 0x04, 0x04, 0x0e],
        '2' => [0x0e, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1f],
        '3' => [0x1f, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0e],
        '4' => [0x02, 0x06, 0x0a, 0x12, 0x1f, 0x02, 0x02],
        '5' => [0x1f, 0x10, 0x1e, 0x01, 0x01, 0x11, 0x0e],
        '6' => [0x06, 0x08, 0x10, 0x1e, 0x11, 0x11, 0x0e],
        '7' => [0x1f, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08],
        '8' => [0x0e, 0x11, 0x11, 0x0e, 0x11, 0x11, 0x0e],
        '9' => [0x0e, 0x11, 0x11, 0x0f, 0x01, 0x02, 0x0c],
        'e' => [0x00, 0x00, 0x0e, 0x11, 0x1f, 0x10, 0x0e],
        _ => return None,
    })
}

fn put(frame: &mut Frame, x: i64, y: i64, colour: [u8; 3]) {
    if x < 0 || y < 0 || x >= i64::from(frame.width) || y >= i64::from(frame.height) {
        return;
    }
    let i = (y as usize * frame.width as usize + x as usize) * 3;
    frame.rgb[i..i + 3].copy_from_slice(&colour);
}

fn fill(frame: &mut Frame, x: i64, y: i64, w: i64, h: i64, colour: [u8; 3]) {
    for yy in y..y + h {
        for xx in x..x + w {
            put(frame, xx, yy, colour);
        }
    }
}

/// Draws each mark: a 2-pixel outline (1 on frames under 800 wide) and, at its top-left corner,
/// a filled label with the ref in white. A label that would leave the frame moves inside it.
pub fn draw_marks(frame: &mut Frame, marks: &[MarkBox]) {
    let scale: i64 = if frame.width >= 1000 { 2 } else { 1 };
    let line: i64 = if frame.width >= 800 { 2 } else { 1 };
    for (i, m) in marks.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let (x, y) = (i64::from(m.rect.x), i64::from(m.rect.y));
        let (w, h) = (i64::from(m.rect.width), i64::from(m.rect.height));
        fill(frame, x, y, w, line.min(h), colour);
        fill(frame, x, y + h - line.min(h), w, line.min(h), colour);
        fill(frame, x, y, line.min(w), h, colour);
        fill(frame, x + w - line.min(w), y, line.min(w), h, colour);
        let glyphs: Vec<[u8; 7]> = m.label.chars().filter_map(glyph).collect();
        let label_w = (glyphs.len() as i64 * 6 + 1) * scale;
        let label_h = 9 * scale;
        let lx = x.min(i64::from(frame.width) - label_w).max(0);
        let ly = y.min(i64::from(frame.height) - label_h).max(0);
        fill(frame, lx, ly, label_w, label_h, colour);
        for (g, rows) in glyphs.iter().enumerate() {
            let gx = lx + (1 + g as i64 * 6) * scale;
            for (r, bits) in rows.iter().enumerate() {
                for c in 0..5 {
                    if bits & (0x10 >> c) != 0 {
                        let px = gx + c * scale;
                        let py = ly + (1 + r as i64) * scale;
                        fill(frame, px, py, scale, scale, [255, 255, 255]);
                    }
                }
            }
        }
    }
}

/// The rectangles covering every pixel that differs between two frames of the same size: the
/// [`TILE`]-square tiles that differ, merged into runs along each row of tiles, and runs with
/// the same columns in consecutive rows merged into one rectangle; clipped to the frame. Empty
/// when the frames are equal; `None` when their sizes differ.
pub fn changed_regions(old: &Frame, new: &Frame) -> Option<Vec<Rect>> {
    if (old.width, old.height) != (new.width, new.height) || old.rgb.len() != new.rgb.len() {
        return None;
    }
    let (w, h) = (new.width, new.height);
    let cols = w.div_ceil(TILE);
    let rows = h.div_ceil(TILE);
    let stride = w as usize * 3;
    let mut dirty = vec![false; (cols * rows) as usize];
    for y in 0..h as usize {
        let ty = y / TILE as usize;
        let (a, b) = (
            &old.rgb[y * stride..(y + 1) * stride],
            &new.rgb[y * stride..(y + 1) * stride],
        );
        if a == b {
            continue;
        }
        for tx in 0..cols as usize {
            let idx = ty * cols as usize + tx;
            if dirty[idx] {
                continue;
            }
            let x0 = tx * TILE as usize * 3;
            let x1 = ((tx + 1) * TILE as usize).min(w as usize) * 3;
            if a[x0..x1] != b[x0..x1] {
                dirty[idx] = true;
            }
        }
    }
    // Runs of dirty tiles per row: (first column, last column + 1).
    let mut open: Vec<(u32, u32, u32, u32)> = Vec::new(); // (c0, c1, first row, rows)
    let mut done = Vec::new();
    for ty in 0..rows {
        let mut runs = Vec::new();
        let mut tx = 0;
        while tx < cols {
            if dirty[(ty * cols + tx) as usize] {
                let start = tx;
                while tx < cols && dirty[(ty * cols + tx) as usize] {
                    tx += 1;
                }
                runs.push((start, tx));
            } else {
                tx += 1;
            }
        }
        let mut next = Vec::new();
        for (c0, c1, r0, n) in open.drain(..) {
            if let Some(i) = runs.iter().position(|&(a, b)| (a, b) == (c0, c1)) {
                runs.remove(i);
                next.push((c0, c1, r0, n + 1));
            } else {
                done.push((c0, c1, r0, n));
            }
        }
        next.extend(runs.into_iter().map(|(a, b)| (a, b, ty, 1)));
        open = next;
    }
    done.extend(open);
    let mut rects: Vec<Rect> = done
        .into_iter()
        .map(|(c0, c1, r0, n)| {
            let x = c0 * TILE;
            let y = r0 * TILE;
            Rect {
                x,
                y,
                width: (c1 * TILE).min(w) - x,
                height: ((r0 + n) * TILE).min(h) - y,
            }
        })
        .collect();
    rects.sort_by_key(|r| (r.y, r.x));
    Some(rects)
}

/// The pixels of `rect` (inside the frame) as a frame of their own.
pub fn crop(frame: &Frame, rect: Rect) -> Frame {
    let stride = frame.width as usize * 3;
    let mut rgb = Vec::with_capacity(rect.width as usize * rect.height as usize * 3);
    for y in rect.y..rect.y + rect.height {
        let start = y as usize * stride + rect.x as usize * 3;
        rgb.extend_from_slice(&frame.rgb[start..start + rect.width as usize * 3]);
    }
    Frame {
        width: rect.width,
        height: rect.height,
        rgb,
    }
}

/// Copies `piece` onto `frame` at `(x, y)` (what a client does with a region).
#[cfg(test)]
pub fn paste(frame: &mut Frame, piece: &Frame, x: u32, y: u32) {
    let stride = frame.width as usize * 3;
    for row in 0..piece.height as usize {
        let start = (y as usize + row) * stride + x as usize * 3;
        let src = &piece.rgb[row * piece.width as usize * 3..(row + 1) * piece.width as usize * 3];
        frame.rgb[start..start + src.len()].copy_from_slice(src);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(width: u32, height: u32, seed: u32) -> Frame {
        let mut s = seed.wrapping_mul(2_654_435_761).max(1);
        let rgb = (0..width * height * 3)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                s as u8
            })
            .collect();
        Frame { width, height, rgb }
    }

    #[test]
    fn scaling_averages_each_block() {
        // 4x2 → 2x1: each target pixel is the mean of a 2x2 block.
        let f = Frame {
            width: 4,
            height: 2,
            rgb: vec![
                0, 0, 0, 10, 10, 10, 100, 0, 0, 100, 0, 0, //
                20, 20, 20, 30, 30, 30, 100, 0, 0, 101, 0, 0,
            ],
        };
        let s = scale(
            &f,
            FrameSize {
                width: 2,
                height: 1,
            },
        );
        assert_eq!(s.rgb, vec![15, 15, 15, 100, 0, 0]);
        let same = scale(
            &f,
            FrameSize {
                width: 4,
                height: 2,
            },
        );
        assert_eq!(same, f);
        // A size that does not divide: every pixel still gets a block of at least one.
        let odd = scale(
            &noise(1280, 800, 3),
            FrameSize {
                width: 333,
                height: 208,
            },
        );
        assert_eq!(
            (odd.width, odd.height, odd.rgb.len()),
            (333, 208, 333 * 208 * 3)
        );
    }

    #[test]
    fn regions_cover_every_change_and_rebuild_the_frame() {
        let old = noise(200, 130, 1);
        let mut new = old.clone();
        // A changed pixel, a changed band across two tile rows, a change in the last partial
        // tile.
        new.rgb[(5 * 200 + 7) * 3] ^= 0xff;
        for y in 40..70 {
            for x in 50..120 {
                new.rgb[(y * 200 + x) * 3 + 1] ^= 0x55;
            }
        }
        new.rgb[(129 * 200 + 199) * 3 + 2] ^= 1;
        let rects = changed_regions(&old, &new).unwrap();
        assert!(!rects.is_empty());
        let mut rebuilt = old.clone();
        for r in &rects {
            assert!(r.x + r.width <= 200 && r.y + r.height <= 130, "{r:?}");
            paste(&mut rebuilt, &crop(&new, *r), r.x, r.y);
        }
        assert_eq!(rebuilt, new);
        // The band's tiles (columns 1..4, rows 1..3) merged into one rectangle.
        assert!(rects.contains(&Rect {
            x: 32,
            y: 32,
            width: 96,
            height: 64
        }));
        // The last partial tile is clipped to the frame.
        assert!(rects.contains(&Rect {
            x: 192,
            y: 128,
            width: 8,
            height: 2
        }));
        assert_eq!(changed_regions(&new, &new), Some(vec![]));
        assert_eq!(changed_regions(&new, &noise(100, 130, 1)), None);
    }

    #[test]
    fn marks_outline_their_box_and_stay_inside_the_frame() {
        let mut f = Frame {
            width: 100,
            height: 60,
            rgb: vec![0; 100 * 60 * 3],
        };
        draw_marks(
            &mut f,
            &[
                MarkBox {
                    rect: Rect {
                        x: 10,
                        y: 20,
                        width: 30,
                        height: 20,
                    },
                    label: "e7".into(),
                },
                // A box at the bottom-right corner: its label moves inside the frame.
                MarkBox {
                    rect: Rect {
                        x: 95,
                        y: 55,
                        width: 5,
                        height: 5,
                    },
                    label: "e123".into(),
                },
            ],
        );
        let at = |x: usize, y: usize| &f.rgb[(y * 100 + x) * 3..(y * 100 + x) * 3 + 3];
        // The outline's bottom-right corner is drawn in the first colour; the inside is not.
        assert_eq!(at(39, 39), &COLOURS[0]);
        assert_eq!(at(25, 32), &[0, 0, 0]);
        // The label holds white glyph pixels.
        let white = (20..29)
            .flat_map(|y| (10..23).map(move |x| (x, y)))
            .filter(|&(x, y)| at(x, y) == [255, 255, 255])
            .count();
        assert!(white > 10, "{white}");
        assert_eq!(at(99, 59), &COLOURS[1]);
    }
}
