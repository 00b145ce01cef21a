//! Screen recordings (docs/recordings.md), on the guest's side.
//!
//! A recorder records one bot's desktop: a thread with an X connection of its own captures the
//! screen [`INTERVAL`] apart (over MIT-SHM, as observations do) and appends what changed since
//! the last capture as PNGs of the changed rectangles, with a full frame at the start, every
//! [`FULL_EVERY_MS`] and whenever most of the screen changed; inputs are appended as they happen
//! (the bot's actions from `act`, a person's from a control capability), typed text only as a
//! count of characters. Records wait in a buffer of at most [`BUFFER_BYTES`] until the control
//! plane pulls them (the oldest are dropped first, and the next frame is then a full one).
//!
//! Recording is the control plane's choice: its first pull starts a recorder, and a recorder
//! nobody pulls from for [`UNPULLED_STOP`] stops. A screen that changes everywhere (a scroll) is
//! captured less often, within [`BYTES_PER_SEC`]. The recorder never takes the desktop's lock,
//! so the bot's own observations and actions never wait for it.

use super::frames::{changed_regions, crop, Rect};
use crate::display::capture::encode_png_with;
use crate::display::{self, DisplayAccess, Frame};
use gateway_proto::desktop::{Action, MouseButton, ScrollDirection};
use gateway_proto::error::{ErrorCode, OpError};
use gateway_proto::recording::{
    encode_record, InputSource, RecordHeader, RecordingChunk, RecordingPull, MAX_PULL_BYTES,
    MAX_WHAT,
};
use gateway_proto::BotId;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// Time between captures (5 per second) while little changes.
pub const INTERVAL: Duration = Duration::from_millis(200);
/// Bytes of frames per second a recorder writes on average at most: after a capture that wrote
/// more than `INTERVAL` allows (a scrolled or redrawn screen is a full frame), the next one
/// waits in proportion, so a screen that changes everywhere is recorded at about one frame a
/// second rather than five.
pub const BYTES_PER_SEC: u64 = 128 << 10;
/// A full frame at least this often, so a player seeks without replaying from the start.
pub const FULL_EVERY_MS: i64 = 30_000;
/// Records kept for the control plane at most.
pub const BUFFER_BYTES: usize = 64 << 20;
/// A recorder nobody has pulled from for this long stops (the control plane pulls every 2 s;
/// turning recording off stops it this long after).
pub const UNPULLED_STOP: Duration = Duration::from_secs(10);
/// Typed characters closer together than this are one input record.
const TEXT_MERGE_MS: i64 = 1500;

fn now_ms() -> i64 {
    crate::clock::now_ms()
}

/// Typed characters not yet written as a record.
struct PendingText {
    first_ms: i64,
    last_ms: i64,
    count: u32,
    by: InputSource,
    lease: Option<String>,
}

/// What a recorder keeps until it is pulled.
struct Buffer {
    records: VecDeque<(u64, Vec<u8>)>,
    bytes: usize,
    /// The number the next record gets (the first is 1).
    next: u64,
    /// Records were dropped: the next frame must be a full one.
    need_full: bool,
    pending: Option<PendingText>,
    width: u16,
    height: u16,
}

impl Buffer {
    fn push(&mut self, header: &RecordHeader, body: &[u8]) {
        let mut rec = Vec::with_capacity(body.len() + 128);
        encode_record(header, body, &mut rec);
        self.bytes += rec.len();
        self.records.push_back((self.next, rec));
        self.next += 1;
        while self.bytes > BUFFER_BYTES && self.records.len() > 1 {
            if let Some((_, old)) = self.records.pop_front() {
                self.bytes -= old.len();
                self.need_full = true;
            }
        }
    }

    fn flush_text(&mut self, now: i64, force: bool) {
        let due = self
            .pending
            .as_ref()
            .is_some_and(|p| force || now - p.last_ms > TEXT_MERGE_MS);
        if !due {
            return;
        }
        if let Some(p) = self.pending.take() {
            let what = match p.count {
                1 => "typed 1 character".to_string(),
                n => format!("typed {n} characters"),
            };
            self.push(
                &RecordHeader::Input {
                    t: p.first_ms,
                    by: p.by,
                    lease: p.lease,
                    what,
                    x: None,
                    y: None,
                },
                &[],
            );
        }
    }
}

/// One bot's recorder.
pub struct Recorder {
    session: String,
    /// The desktop start it records (a restarted desktop gets a new recorder).
    epoch: u64,
    buffer: Mutex<Buffer>,
    pulled: Mutex<Instant>,
    stop: AtomicBool,
}

impl Recorder {
    fn buffer(&self) -> std::sync::MutexGuard<'_, Buffer> {
        self.buffer.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Appends an input (typed text as a count only).
    fn input(&self, input: Input) {
        let now = now_ms();
        let mut b = self.buffer();
        match input {
            Input::Text { by, lease, chars } => {
                let same = b
                    .pending
                    .as_ref()
                    .is_some_and(|p| p.by == by && p.lease == lease);
                if !same {
                    b.flush_text(now, true);
                }
                match &mut b.pending {
                    Some(p) => {
                        p.count = p.count.saturating_add(chars);
                        p.last_ms = now;
                    }
                    None => {
                        b.pending = Some(PendingText {
                            first_ms: now,
                            last_ms: now,
                            count: chars,
                            by,
                            lease,
                        })
                    }
                }
            }
            Input::Other {
                by,
                lease,
                what,
                at,
            } => {
                b.flush_text(now, true);
                let mut what = what;
                if what.len() > MAX_WHAT {
                    let mut cut = MAX_WHAT - 3;
                    while !what.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    what.truncate(cut);
                    what.push_str("...");
                }
                b.push(
                    &RecordHeader::Input {
                        t: now,
                        by,
                        lease,
                        what,
                        x: at.map(|p| p.0),
                        y: at.map(|p| p.1),
                    },
                    &[],
                );
            }
        }
    }

    /// The records after `after` (of `session`), up to about `max` bytes. Records up to
    /// `after` of this session are known to have reached the control plane and are let go;
    /// the rest stay until a later pull says so, so a reply lost on its way is sent again.
    fn pull(&self, session: Option<&str>, after: u64, max: usize) -> (RecordingChunk, Vec<u8>) {
        *self.pulled.lock().unwrap_or_else(|e| e.into_inner()) = crate::clock::monotonic().now();
        let mut b = self.buffer();
        b.flush_text(now_ms(), false);
        let after = if session == Some(self.session.as_str()) {
            after
        } else {
            0
        };
        while b.records.front().is_some_and(|(seq, _)| *seq <= after) {
            if let Some((_, rec)) = b.records.pop_front() {
                b.bytes -= rec.len();
            }
        }
        let mut out = Vec::new();
        let first = b.records.front().map_or(b.next, |(seq, _)| *seq);
        let mut next = first;
        for (seq, rec) in b.records.iter() {
            if next > first && out.len() + rec.len() > max {
                break;
            }
            out.extend_from_slice(rec);
            next = seq + 1;
        }
        let chunk = RecordingChunk {
            session: self.session.clone(),
            first,
            next,
            lost: first.saturating_sub(after + 1),
            len: out.len() as u64,
            width: b.width,
            height: b.height,
        };
        (chunk, out)
    }
}

/// An input as a recorder takes it.
pub enum Input {
    Text {
        by: InputSource,
        lease: Option<String>,
        chars: u32,
    },
    Other {
        by: InputSource,
        lease: Option<String>,
        what: String,
        at: Option<(i32, i32)>,
    },
}

impl Input {
    /// The bot's action as a record says it (typed text as its length only), its points
    /// mapped to the screen by `screen` (an act may give them in a scaled frame's space).
    pub fn of_action(a: &Action, screen: impl Fn(i64, i64) -> (i64, i64)) -> Input {
        let by = InputSource::Agent;
        let other = |what: String, at: Option<(i64, i64)>| {
            let at = at.map(|(x, y)| screen(x, y));
            let what = match at {
                Some((x, y)) => what.replace("{at}", &format!("{x},{y}")),
                None => what,
            };
            Input::Other {
                by,
                lease: None,
                what,
                at: at.map(|(x, y)| {
                    (
                        i32::try_from(x).unwrap_or(i32::MAX),
                        i32::try_from(y).unwrap_or(i32::MAX),
                    )
                }),
            }
        };
        let button = |b: &MouseButton| match b {
            MouseButton::Left => "left",
            MouseButton::Right => "right",
        };
        match a {
            Action::Type { text } => Input::Text {
                by,
                lease: None,
                chars: u32::try_from(text.chars().count()).unwrap_or(u32::MAX),
            },
            Action::Click {
                x,
                y,
                button: b,
                double,
            } => {
                let kind = if *double { "double-click" } else { "click" };
                other(format!("{kind} {} at {{at}}", button(b)), Some((*x, *y)))
            }
            Action::Move { x, y } => other("move to {at}".into(), Some((*x, *y))),
            Action::Down { x, y, button: b } => {
                other(format!("press {} at {{at}}", button(b)), Some((*x, *y)))
            }
            Action::Up { x, y, button: b } => {
                other(format!("release {} at {{at}}", button(b)), Some((*x, *y)))
            }
            Action::Key { key, modifiers } => {
                let mut combo = modifiers.join("+");
                if !combo.is_empty() {
                    combo.push('+');
                }
                combo.push_str(key);
                other(format!("key {combo}"), None)
            }
            Action::Scroll { direction, amount } => {
                let d = match direction {
                    ScrollDirection::Up => "up",
                    ScrollDirection::Down => "down",
                };
                other(format!("scroll {d} {amount}"), None)
            }
            Action::Wait { ms } => other(format!("wait {ms} ms"), None),
            Action::Focus { application, .. } => other(format!("focus {application}"), None),
            Action::Launch { application, .. } => other(format!("launch {application}"), None),
            Action::ClickRef {
                element,
                button: b,
                double,
            } => {
                let kind = if *double { "double-click" } else { "click" };
                other(format!("{kind} {} on {element}", button(b)), None)
            }
            Action::Open { .. } => other("open a file or page".into(), None),
        }
    }
}

/// A person's RFB input, one connection's worth: pointer presses become clicks, printable keys
/// typed characters, other keys their names (with the modifiers held).
#[derive(Default)]
pub struct PersonInput {
    mask: u8,
    ctrl: bool,
    alt: bool,
    meta: bool,
}

impl PersonInput {
    /// What a pointer event adds: each button newly pressed.
    pub fn pointer(&mut self, mask: u8, x: u16, y: u16, lease: &Option<String>) -> Vec<Input> {
        let pressed = mask & !self.mask;
        self.mask = mask;
        let mut out = Vec::new();
        for (bit, name) in [
            (1u8, "click left"),
            (2, "click middle"),
            (4, "click right"),
            (8, "scroll up"),
            (16, "scroll down"),
        ] {
            if pressed & bit != 0 {
                let what = if bit < 8 {
                    format!("{name} at {x},{y}")
                } else {
                    name.to_string()
                };
                out.push(Input::Other {
                    by: InputSource::Person,
                    lease: lease.clone(),
                    what,
                    at: Some((i32::from(x), i32::from(y))),
                });
            }
        }
        out
    }

    /// What a key event adds (key presses only; modifiers alone add nothing).
    pub fn key(&mut self, down: bool, keysym: u32, lease: &Option<String>) -> Option<Input> {
        match keysym {
            0xffe3 | 0xffe4 => self.ctrl = down,
            0xffe9 | 0xffea => self.alt = down,
            0xffeb | 0xffec | 0xffe7 | 0xffe8 => self.meta = down,
            _ => {}
        }
        if !down || (0xffe1..=0xffee).contains(&keysym) {
            return None;
        }
        let printable = (0x20..=0x7e).contains(&keysym)
            || (0xa0..=0xff).contains(&keysym)
            || (0x0100_0000..=0x0110_ffff).contains(&keysym);
        let by = InputSource::Person;
        let lease = lease.clone();
        if printable && !self.ctrl && !self.alt && !self.meta {
            return Some(Input::Text {
                by,
                lease,
                chars: 1,
            });
        }
        let name = match keysym {
            0xff08 => "BackSpace".to_string(),
            0xff09 => "Tab".into(),
            0xff0d => "Return".into(),
            0xff1b => "Escape".into(),
            0xffff => "Delete".into(),
            0xff50 => "Home".into(),
            0xff51 => "Left".into(),
            0xff52 => "Up".into(),
            0xff53 => "Right".into(),
            0xff54 => "Down".into(),
            0xff55 => "Page_Up".into(),
            0xff56 => "Page_Down".into(),
            0xff57 => "End".into(),
            0xffbe..=0xffc9 => format!("F{}", keysym - 0xffbe + 1),
            k if (0x20..=0x7e).contains(&k) => {
                char::from(u8::try_from(k).unwrap_or(b'?')).to_string()
            }
            k => format!("0x{k:x}"),
        };
        let mut combo = String::new();
        for (held, m) in [
            (self.ctrl, "ctrl+"),
            (self.alt, "alt+"),
            (self.meta, "super+"),
        ] {
            if held {
                combo.push_str(m);
            }
        }
        Some(Input::Other {
            by,
            lease,
            what: format!("key {combo}{name}"),
            at: None,
        })
    }
}

/// The recorders of this guest, by bot.
#[derive(Default)]
pub struct Recorders {
    map: Mutex<HashMap<BotId, Arc<Recorder>>>,
}

impl Recorders {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<BotId, Arc<Recorder>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The bot's running recorder, if any.
    fn running(&self, bot: &BotId) -> Option<Arc<Recorder>> {
        self.map().get(bot).filter(|r| !r.stopped()).cloned()
    }

    /// Appends an input to the bot's recording, when it is being recorded.
    pub fn input(&self, bot: &BotId, input: Input) {
        if let Some(r) = self.running(bot) {
            r.input(input);
        }
    }

    /// Stops the bot's recorder (its desktop is being torn down).
    pub fn stop(&self, bot: &BotId) {
        if let Some(r) = self.map().remove(bot) {
            r.stop.store(true, Ordering::Relaxed);
        }
    }

    /// Serves a pull for a desktop `epoch` whose display is `access`: starts its recorder when
    /// none records this desktop start.
    pub fn pull(
        &self,
        req: &RecordingPull,
        access: DisplayAccess,
        epoch: u64,
    ) -> Result<(RecordingChunk, Vec<u8>), OpError> {
        let recorder = {
            let mut map = self.map();
            match map.get(&req.bot) {
                Some(r) if r.epoch == epoch && !r.stopped() => r.clone(),
                _ => {
                    let r = start(&req.bot, access, epoch)?;
                    if let Some(old) = map.insert(req.bot.clone(), r.clone()) {
                        old.stop.store(true, Ordering::Relaxed);
                    }
                    r
                }
            }
        };
        let max = usize::try_from(req.max_bytes.clamp(1, MAX_PULL_BYTES)).unwrap_or(1);
        Ok(recorder.pull(req.session.as_deref(), req.after, max))
    }
}

/// Starts a recorder on `access`'s display: its first capture is taken before this returns, so
/// a display that cannot be captured is an error now.
fn start(bot: &BotId, access: DisplayAccess, epoch: u64) -> Result<Arc<Recorder>, OpError> {
    let failed = |e: &dyn std::fmt::Display| {
        OpError::new(
            ErrorCode::Failed,
            format!("cannot record the screen of bot {bot}: {e}"),
        )
    };
    let mut capturer = display::Capturer::new(&access).map_err(|e| failed(&e))?;
    let first = capturer.capture().map_err(|e| failed(&e))?;
    let session = hex::encode(rand::random::<[u8; 8]>());
    let (w, h) = (
        u16::try_from(first.width).unwrap_or(u16::MAX),
        u16::try_from(first.height).unwrap_or(u16::MAX),
    );
    let recorder = Arc::new(Recorder {
        session,
        epoch,
        buffer: Mutex::new(Buffer {
            records: VecDeque::new(),
            bytes: 0,
            next: 1,
            need_full: true,
            pending: None,
            width: w,
            height: h,
        }),
        pulled: Mutex::new(crate::clock::monotonic().now()),
        stop: AtomicBool::new(false),
    });
    recorder
        .buffer()
        .push(&RecordHeader::Start { t: now_ms(), w, h }, &[]);
    let r = recorder.clone();
    let bot = bot.clone();
    std::thread::Builder::new()
        .name(format!("rec-{bot}"))
        .spawn(move || {
            info!(bot = %bot, session = %r.session, "recording the screen");
            let mut last = Recorded {
                frame: None,
                full_at: 0,
            };
            let mut wrote = match record_frame(&r, &mut capturer, first, &mut last) {
                Ok(n) => n,
                Err(e) => {
                    warn!(bot = %bot, error = %e, "recording stopped");
                    return;
                }
            };
            while !r.stopped() {
                std::thread::sleep(pause_after(wrote));
                let unpulled = r.pulled.lock().unwrap_or_else(|e| e.into_inner()).elapsed();
                if unpulled > UNPULLED_STOP {
                    info!(bot = %bot, "nobody pulls the recording: stopped");
                    break;
                }
                let step = capturer
                    .capture()
                    .map_err(|e| e.to_string())
                    .and_then(|f| record_frame(&r, &mut capturer, f, &mut last));
                match step {
                    Ok(n) => wrote = n,
                    Err(e) => {
                        // The display stopped (a teardown races this) or cannot be read.
                        info!(bot = %bot, error = %e, "recording stopped");
                        break;
                    }
                }
            }
            r.stop.store(true, Ordering::Relaxed);
        })
        .map_err(|e| failed(&e))?;
    Ok(recorder)
}

/// How long to wait before the next capture after one that wrote `bytes`: [`INTERVAL`], or
/// longer when it wrote more than [`BYTES_PER_SEC`] allows (at most 2 s).
fn pause_after(bytes: u64) -> Duration {
    let earned = Duration::from_millis(bytes.saturating_mul(1000) / BYTES_PER_SEC);
    earned.clamp(INTERVAL, Duration::from_secs(2))
}

/// What the recorder thread remembers between captures.
struct Recorded {
    frame: Option<Frame>,
    full_at: i64,
}

/// Appends `frame` as what changed since the last one (or as a full frame).
fn record_frame(
    r: &Recorder,
    capturer: &mut display::Capturer,
    frame: Frame,
    last: &mut Recorded,
) -> Result<u64, String> {
    let t = now_ms();
    let need_full = {
        let mut b = r.buffer();
        b.flush_text(t, false);
        std::mem::take(&mut b.need_full)
    };
    let (cx, cy) = capturer.cursor().unwrap_or((-1, -1));
    let rects = match &last.frame {
        Some(prev)
            if !need_full
                && prev.width == frame.width
                && prev.height == frame.height
                && t - last.full_at < FULL_EVERY_MS =>
        {
            changed_regions(prev, &frame)
        }
        _ => None,
    };
    let area: u64 = rects
        .iter()
        .flatten()
        .map(|r| u64::from(r.width) * u64::from(r.height))
        .sum();
    let full = match &rects {
        None => true,
        Some(_) => area * 2 > u64::from(frame.width) * u64::from(frame.height),
    };
    let mut encoded = Vec::new();
    if full {
        let png = encode(&frame)?;
        let whole = Rect {
            x: 0,
            y: 0,
            width: frame.width,
            height: frame.height,
        };
        encoded.push((whole, png));
        last.full_at = t;
    } else {
        for rect in rects.into_iter().flatten() {
            let png = encode(&crop(&frame, rect))?;
            encoded.push((rect, png));
        }
    }
    let wrote = encoded.iter().map(|(_, png)| png.len() as u64).sum();
    if !encoded.is_empty() {
        let mut b = r.buffer();
        if full {
            b.width = u16::try_from(frame.width).unwrap_or(u16::MAX);
            b.height = u16::try_from(frame.height).unwrap_or(u16::MAX);
        }
        for (rect, png) in encoded {
            let header = RecordHeader::Frame {
                t,
                x: rect.x as u16,
                y: rect.y as u16,
                w: rect.width as u16,
                h: rect.height as u16,
                full,
                cx,
                cy,
            };
            b.push(&header, &png);
        }
    }
    last.frame = Some(frame);
    Ok(wrote)
}

/// A recorded frame's PNG: the observations' fast settings with the Paeth filter, about a
/// quarter smaller for half a millisecond more per full frame (display::capture's measurements);
/// a recording is kept, an observation is sent once.
fn encode(frame: &Frame) -> Result<Vec<u8>, String> {
    encode_png_with(frame, png::Compression::Fast, png::Filter::Paeth).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(w: u32, h: u32, seed: u8) -> Frame {
        Frame {
            width: w,
            height: h,
            rgb: (0..w * h * 3)
                .map(|i| (i as u8).wrapping_add(seed))
                .collect(),
        }
    }

    #[test]
    fn changed_rectangles_pasted_on_the_old_frame_give_the_new_one() {
        let old = frame(100, 70, 0);
        let mut new = old.clone();
        // Two changes apart, one at the ragged right and bottom edges.
        for (x, y) in [(3u32, 4u32), (40, 5), (99, 69), (98, 50)] {
            new.rgb[(y * 100 + x) as usize * 3] ^= 0xff;
        }
        let rects = changed_regions(&old, &new).expect("frames of one size");
        assert_eq!(rects.len(), 2, "{rects:?}");
        let mut rebuilt = old.clone();
        for r in &rects {
            super::super::frames::paste(&mut rebuilt, &crop(&new, *r), r.x, r.y);
        }
        assert_eq!(rebuilt, new);
        assert!(changed_regions(&new, &new).expect("same size").is_empty());
    }

    #[test]
    fn pulls_take_records_once_and_count_what_was_lost() {
        let r = Recorder {
            session: "s".into(),
            epoch: 1,
            buffer: Mutex::new(Buffer {
                records: VecDeque::new(),
                bytes: 0,
                next: 1,
                need_full: false,
                pending: None,
                width: 4,
                height: 4,
            }),
            pulled: Mutex::new(crate::clock::monotonic().now()),
            stop: AtomicBool::new(false),
        };
        for i in 0..3 {
            r.input(Input::Other {
                by: InputSource::Agent,
                lease: None,
                what: format!("key {i}"),
                at: None,
            });
        }
        let (c, bytes) = r.pull(None, 0, 1);
        assert_eq!((c.first, c.next, c.lost), (1, 2, 0), "one record at least");
        assert_eq!(gateway_proto::recording::records(&bytes).count(), 1);
        let (again, _) = r.pull(Some("s"), 0, 1);
        assert_eq!(
            (again.first, again.next),
            (1, 2),
            "not acknowledged: sent again"
        );
        let (c, _) = r.pull(Some("s"), 1, 1 << 20);
        assert_eq!((c.first, c.next, c.lost), (2, 4, 0));
        // Text is counted, never kept.
        r.input(Input::Text {
            by: InputSource::Person,
            lease: Some("l".into()),
            chars: 5,
        });
        r.input(Input::Text {
            by: InputSource::Person,
            lease: Some("l".into()),
            chars: 2,
        });
        r.buffer().flush_text(now_ms(), true);
        let (c, bytes) = r.pull(Some("s"), 3, 1 << 20);
        assert_eq!((c.first, c.next), (4, 5));
        let (h, _) = gateway_proto::recording::records(&bytes)
            .next()
            .unwrap()
            .unwrap();
        assert!(matches!(h, RecordHeader::Input { ref what, .. } if what == "typed 7 characters"));
        // Another session's cursor starts from the oldest record kept.
        r.input(Input::Other {
            by: InputSource::Agent,
            lease: None,
            what: "x".into(),
            at: None,
        });
        let (c, _) = r.pull(Some("other"), 3, 1 << 20);
        assert_eq!(
            (c.first, c.next, c.lost),
            (4, 6, 3),
            "record 4 was never acknowledged"
        );
    }

    #[test]
    fn a_capture_that_wrote_much_delays_the_next() {
        assert_eq!(pause_after(0), INTERVAL);
        assert_eq!(pause_after(BYTES_PER_SEC), Duration::from_secs(1));
        assert_eq!(pause_after(u64::MAX), Duration::from_secs(2));
    }

    #[test]
    fn the_bots_clicks_are_recorded_at_their_screen_point_and_its_text_as_a_count() {
        let click = Action::Click {
            x: 10,
            y: 20,
            button: MouseButton::Left,
            double: false,
        };
        let Input::Other { what, at, .. } = Input::of_action(&click, |x, y| (x * 2, y * 2)) else {
            panic!("a click is not text");
        };
        assert_eq!((what.as_str(), at), ("click left at 20,40", Some((20, 40))));
        let typed = Action::Type {
            text: "hunter2".into(),
        };
        assert!(matches!(
            Input::of_action(&typed, |x, y| (x, y)),
            Input::Text { chars: 7, .. }
        ));
    }

    #[test]
    fn a_persons_keys_and_buttons_become_inputs_without_the_text() {
        let mut p = PersonInput::default();
        let lease = Some("ctl".to_string());
        assert!(matches!(
            p.key(true, u32::from(b'a'), &lease),
            Some(Input::Text { chars: 1, .. })
        ));
        assert!(p.key(false, u32::from(b'a'), &lease).is_none());
        assert!(p.key(true, 0xffe3, &lease).is_none());
        let Some(Input::Other { what, .. }) = p.key(true, u32::from(b'c'), &lease) else {
            panic!("ctrl+c is a key");
        };
        assert_eq!(what, "key ctrl+c");
        p.key(false, 0xffe3, &lease);
        let Some(Input::Other { what, .. }) = p.key(true, 0xff0d, &lease) else {
            panic!("Return is a key");
        };
        assert_eq!(what, "key Return");
        let clicks = p.pointer(1, 10, 20, &lease);
        assert_eq!(clicks.len(), 1);
        assert!(
            p.pointer(1, 11, 21, &lease).is_empty(),
            "held, not pressed again"
        );
        assert!(p.pointer(0, 11, 21, &lease).is_empty());
    }
}
