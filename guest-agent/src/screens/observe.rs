//! computer_observe on a locked desktop (docs/screens.md#observe-and-act): the frame scaled to
//! the asked width, the marks of the bot's page drawn on it from one consistent moment, and what
//! is sent: the whole frame, the regions that changed since the bot's previous frame, or nothing
//! when it is unchanged.
//!
//! **Consistency of marks.** The screen is captured, the page's marks read, and the screen
//! captured again; when the two captures differ (the page moved in between) it is done again,
//! up to [`MARK_TRIES`] times, and past that the marks go out with a note saying they may be off.
//!
//! **Regions.** The desktop keeps the last frame it sent the bot (after scaling and marks, so
//! exactly what the model holds). With [`SendMode::Changes`] the changed tiles
//! ([`frames::changed_regions`]) are sent as one PNG each when they cost no more than the budget
//! (by default the whole frame's PNG) and number at most [`MAX_REGIONS`]; otherwise, or with no
//! previous frame or one of another size, the whole frame goes. The frame id is always the
//! whole frame's PNG's, so the next observation (or a full one) can be checked against it.

use super::frames::{self, MarkBox, Rect};
use super::{capture_now, failed, Desktop, Screens};
use crate::display::{self, Frame};
use crate::pagebrowser::ScreenMark;
use gateway_proto::desktop::{
    scaled_size, FrameKind, FrameSize, Mark, Marks, ObservationMeta, ObserveOptions, Region,
    SendMode, WindowInfo, MAX_MARKS, MAX_REGIONS,
};
use gateway_proto::{ErrorCode, OpError};

/// Captures around the marks' page read before giving up on a still screen.
pub const MARK_TRIES: usize = 3;

/// The frame last sent to the bot: the base of its next regions.
pub(super) struct Sent {
    pub frame_id: String,
    pub frame: Frame,
    pub png: Vec<u8>,
}

/// An observation: its metadata and the bytes that follow it.
pub type Taken = (ObservationMeta, Vec<u8>);

/// The screen's size as a frame size.
fn size_of(frame: &Frame) -> FrameSize {
    FrameSize {
        width: u16::try_from(frame.width).unwrap_or(u16::MAX),
        height: u16::try_from(frame.height).unwrap_or(u16::MAX),
    }
}

/// The frame size `options` asks for on this screen, or why not.
pub fn frame_size(screen: FrameSize, options: &ObserveOptions) -> Result<FrameSize, OpError> {
    if let Some(w) = options.width {
        if w > screen.width {
            return Err(OpError::new(
                ErrorCode::BadRequest,
                format!(
                    "width {w} is wider than the screen ({}x{}); frames are only scaled down",
                    screen.width, screen.height
                ),
            ));
        }
    }
    Ok(scaled_size(screen, options.width))
}

/// A mark's box (screen pixels) in frame pixels: the frame pixels it touches, inside the frame;
/// `None` when nothing of it is.
pub fn to_frame(
    (left, top, right, bottom): (f64, f64, f64, f64),
    frame: FrameSize,
    screen: FrameSize,
) -> Option<Rect> {
    let sx = f64::from(frame.width) / f64::from(screen.width.max(1));
    let sy = f64::from(frame.height) / f64::from(screen.height.max(1));
    let x0 = (left * sx).floor().clamp(0.0, f64::from(frame.width));
    let y0 = (top * sy).floor().clamp(0.0, f64::from(frame.height));
    let x1 = (right * sx).ceil().clamp(0.0, f64::from(frame.width));
    let y1 = (bottom * sy).ceil().clamp(0.0, f64::from(frame.height));
    (x1 - x0 >= 1.0 && y1 - y0 >= 1.0).then_some(Rect {
        x: x0 as u32,
        y: y0 as u32,
        width: (x1 - x0) as u32,
        height: (y1 - y0) as u32,
    })
}

impl Screens {
    /// computer_observe: see the module documentation.
    pub async fn observe(
        &self,
        bot: &gateway_proto::BotId,
        options: ObserveOptions,
        now_ms: i64,
    ) -> Result<Taken, OpError> {
        gateway_proto::desktop::validate_observe(&options)?;
        let (desktop, _) = self.desktop(bot).await?;
        let mut d = desktop.lock().await;
        let frame = capture_now(&mut d)?;
        observe_frame(&mut d, frame, &options, now_ms).await
    }
}

/// The page's marks on the screen as `frame` shows it, captured again until a capture after the
/// read equals the one before it; the frame they belong to, and the marks or why there are none.
async fn marked(
    d: &mut Desktop,
    mut frame: Frame,
) -> Result<(Frame, Marks, Vec<ScreenMark>), OpError> {
    let screen = size_of(&frame);
    let Ok(cdp) = Screens::cdp_of(d) else {
        let note = "no marks: the bot's browser is not running".to_string();
        return Ok((frame, marks_note(note), Vec::new()));
    };
    for _ in 0..MARK_TRIES {
        let page = match d.page.marks(&cdp, MAX_MARKS, screen.width).await {
            Ok(p) => p,
            Err(e) => {
                let note = format!("no marks: {}", e.message);
                return Ok((frame, marks_note(note), Vec::new()));
            }
        };
        let after = capture_now(d)?;
        if after == frame {
            let note = page
                .more
                .then(|| format!("only the first {MAX_MARKS} elements on screen are marked"));
            return Ok((
                frame,
                Marks {
                    items: Vec::new(),
                    note,
                },
                page.marks,
            ));
        }
        frame = after;
    }
    // The screen kept changing: the last read goes out, said to be unreliable.
    let page = d
        .page
        .marks(&cdp, MAX_MARKS, screen.width)
        .await
        .map_err(|e| OpError::new(e.code, format!("marks: {}", e.message)))?;
    let frame = capture_now(d)?;
    let note = format!(
        "the screen kept changing while the marks were read ({MARK_TRIES} tries): they may be off"
    );
    Ok((frame, marks_note(note), page.marks))
}

fn marks_note(note: String) -> Marks {
    Marks {
        items: Vec::new(),
        note: Some(note),
    }
}

/// The observation of `frame` (captured just now) as `options` ask: scaled, marked, and sent in
/// full, as regions, or as unchanged.
pub(super) async fn observe_frame(
    d: &mut Desktop,
    frame: Frame,
    options: &ObserveOptions,
    now_ms: i64,
) -> Result<Taken, OpError> {
    let screen = size_of(&frame);
    let size = frame_size(screen, options)?;
    let (frame, marks, boxes) = if options.marks {
        let (frame, marks, boxes) = marked(d, frame).await?;
        (frame, Some(marks), boxes)
    } else {
        (frame, None, Vec::new())
    };
    let plain = !options.marks && size == screen;
    let (cursor, active_window, mut image, png) =
        tokio::task::block_in_place(|| -> Result<_, display::DisplayError> {
            if plain {
                // The capturer keeps the last PNG: an unchanged screen is not encoded again.
                let obs = d.capturer.observe_frame(frame.clone())?;
                return Ok((obs.cursor, obs.active_window, frame, obs.png));
            }
            let cursor = d.capturer.cursor()?;
            let active = d.capturer.active_window()?;
            Ok((cursor, active, frames::scale(&frame, size), Vec::new()))
        })
        .map_err(failed)?;
    let marks = marks.map(|mut m| {
        let mut drawn = Vec::with_capacity(boxes.len());
        for b in boxes {
            if let Some(rect) = to_frame((b.left, b.top, b.right, b.bottom), size, screen) {
                m.items.push(Mark {
                    element: b.element.clone(),
                    role: b.role,
                    name: b.name,
                    x: rect.x as u16,
                    y: rect.y as u16,
                    width: rect.width as u16,
                    height: rect.height as u16,
                });
                drawn.push(MarkBox {
                    rect,
                    label: b.element,
                });
            }
        }
        frames::draw_marks(&mut image, &drawn);
        m
    });
    let (png, frame_id) = if png.is_empty() {
        encode(d, &image)?
    } else {
        let id = display::capture::frame_id(&png);
        (png, id)
    };
    let previous = d.last_sent.as_ref().map(|s| s.frame_id.clone());
    let unchanged = previous.as_deref() == Some(frame_id.as_str());
    if !unchanged {
        // A new frame resets the repeated-action streak.
        d.streak.reset();
    }
    let mut kind = FrameKind::Full;
    let mut regions = Vec::new();
    let mut bytes = png.clone();
    if unchanged && options.send != SendMode::Full {
        kind = FrameKind::Unchanged;
        bytes = Vec::new();
    } else if options.send == SendMode::Changes {
        if let Some(base) = d.last_sent.as_ref() {
            let budget = options
                .budget
                .map_or(png.len(), |b| (b as usize).min(png.len()));
            if let Some((r, b)) = regions_of(&base.frame, &image, budget)? {
                kind = FrameKind::Regions;
                regions = r;
                bytes = b;
            }
        }
    }
    let base_frame_id = (kind == FrameKind::Regions).then(|| previous.unwrap_or_default());
    let meta = ObservationMeta {
        frame_id: frame_id.clone(),
        captured_at_ms: now_ms,
        width: size.width,
        height: size.height,
        cursor,
        active_window: active_window.map(|(id, title)| WindowInfo { id, title }),
        unchanged: kind == FrameKind::Unchanged,
        png_len: bytes.len() as u64,
        screen_width: screen.width,
        screen_height: screen.height,
        kind,
        base_frame_id,
        regions,
        marks,
    };
    d.last_sent = Some(Sent {
        frame_id,
        frame: image,
        png,
    });
    Ok((meta, bytes))
}

/// Encodes a frame, reusing the last sent PNG when the pixels are the same.
fn encode(d: &Desktop, image: &Frame) -> Result<(Vec<u8>, String), OpError> {
    if let Some(s) = d.last_sent.as_ref().filter(|s| &s.frame == image) {
        return Ok((s.png.clone(), s.frame_id.clone()));
    }
    let png =
        tokio::task::block_in_place(|| display::capture::encode_png(image)).map_err(failed)?;
    let id = display::capture::frame_id(&png);
    Ok((png, id))
}

/// Changed regions and their PNGs, one after another.
type Regions = (Vec<Region>, Vec<u8>);

/// The regions of `image` changed since `base`, encoded, when there are some, at most
/// [`MAX_REGIONS`], costing at most `budget` bytes together.
fn regions_of(base: &Frame, image: &Frame, budget: usize) -> Result<Option<Regions>, OpError> {
    let Some(rects) = frames::changed_regions(base, image) else {
        return Ok(None);
    };
    if rects.is_empty() || rects.len() > MAX_REGIONS {
        return Ok(None);
    }
    let mut regions = Vec::with_capacity(rects.len());
    let mut bytes = Vec::new();
    for r in rects {
        let png =
            tokio::task::block_in_place(|| display::capture::encode_png(&frames::crop(image, r)))
                .map_err(failed)?;
        if bytes.len() + png.len() > budget {
            return Ok(None);
        }
        regions.push(Region {
            x: r.x as u16,
            y: r.y as u16,
            width: r.width as u16,
            height: r.height as u16,
            png_len: png.len() as u64,
        });
        bytes.extend_from_slice(&png);
    }
    Ok(Some((regions, bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn screen_boxes_map_to_the_frame_pixels_they_touch() {
        let screen = FrameSize {
            width: 1280,
            height: 800,
        };
        let half = FrameSize {
            width: 640,
            height: 400,
        };
        assert_eq!(
            to_frame((100.0, 200.0, 301.0, 241.0), half, screen),
            Some(Rect {
                x: 50,
                y: 100,
                width: 101,
                height: 21
            })
        );
        assert_eq!(
            to_frame((100.0, 200.0, 301.0, 241.0), screen, screen),
            Some(Rect {
                x: 100,
                y: 200,
                width: 201,
                height: 41
            })
        );
        // Off the screen: nothing.
        assert_eq!(to_frame((1300.0, 10.0, 1400.0, 20.0), half, screen), None);
        let options = ObserveOptions {
            width: Some(1281),
            ..ObserveOptions::default()
        };
        let err = frame_size(screen, &options).unwrap_err();
        assert!(err.message.contains("wider than the screen"), "{err}");
    }
}
