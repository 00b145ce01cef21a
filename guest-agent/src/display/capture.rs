//! In-process screenshots: the root window over MIT-SHM into a memfd shared with the X server
//! (plain GetImage when the server cannot attach it), PNG encoding tuned for speed, the frame id,
//! the cursor position and the active window.
//!
//! MIT-SHM is used through AttachFd (MIT-SHM 1.2): the segment is a memfd we map read-only and
//! pass to the server, so no SysV segment can leak when the agent dies. When the extension is
//! missing, older than 1.2, or the attach fails (e.g. a server that cannot receive fds), the
//! capturer falls back to core GetImage, which copies the 4 MB image through the socket.
//!
//! It leaves to others: omitting identical frames (callers compare `frame_id`), the capture
//! timestamp (callers own the clock) and base64 or wire encoding.

use sha2::{Digest, Sha256};
use x11rb::connection::{Connection, RequestConnection as _};
use x11rb::protocol::shm::{self, ConnectionExt as _};
use x11rb::protocol::xproto::{ConnectionExt as _, ImageFormat, ImageOrder, Window};
use x11rb::rust_connection::RustConnection;

use super::sys::ShmMapping;
use super::wm::{self, Atoms};
use super::{x11_err, DisplayAccess, DisplayError, DisplayNum};

/// One screenshot: tightly packed 8-bit RGB rows, top to bottom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub width: u32,
    pub height: u32,
    /// `width * height * 3` bytes.
    pub rgb: Vec<u8>,
}

/// A screenshot as computer_observe reports it (docs/screens.md#observe-and-act), minus
/// `capturedAt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// Lowercase hex SHA-256 of `png`.
    pub frame_id: String,
    pub width: u32,
    pub height: u32,
    pub png: Vec<u8>,
    /// Pointer position in root coordinates.
    pub cursor: (i32, i32),
    /// Active window id and title, `None` when no window is active.
    pub active_window: Option<(u32, String)>,
}

/// The PNG settings chosen for desktop frames: `Fast` (png 0.18 maps it, like `Fastest`, to
/// fdeflate's ultra-fast mode) with the `Sub` filter. Measured on a 1280x800 Chromium desktop
/// (a documentation page), optimized build, p50 of 30: Sub 1.5-2.6 ms / 169 KB, Up 1.6-2.7 ms /
/// 230 KB, Paeth 1.8-3.1 ms / 129 KB, Adaptive 10-16 ms / 118 KB, no filter 8.6 ms / 1.6 MB;
/// `Balanced` zlib 22-38 ms / 70-86 KB. Sub is the quickest; Paeth would trade ~0.5 ms for 24%
/// fewer bytes if transfer size starts to matter more than encode time.
const PNG_COMPRESSION: png::Compression = png::Compression::Fast;
const PNG_FILTER: png::Filter = png::Filter::Sub;

/// Encodes a frame as an 8-bit RGB PNG with the module's fast settings.
pub fn encode_png(frame: &Frame) -> Result<Vec<u8>, DisplayError> {
    encode_png_with(frame, PNG_COMPRESSION, PNG_FILTER)
}

/// Encodes a frame as an 8-bit RGB PNG with explicit settings (for measurements).
pub fn encode_png_with(
    frame: &Frame,
    compression: png::Compression,
    filter: png::Filter,
) -> Result<Vec<u8>, DisplayError> {
    let (width, height) = (frame.width, frame.height);
    let png_err = |source| DisplayError::Png {
        width,
        height,
        source,
    };
    let mut out = Vec::with_capacity(frame.rgb.len() / 8);
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(compression);
    encoder.set_filter(filter);
    let mut writer = encoder.write_header().map_err(png_err)?;
    writer.write_image_data(&frame.rgb).map_err(png_err)?;
    writer.finish().map_err(png_err)?;
    Ok(out)
}

/// The frame id of an encoded image: lowercase hex SHA-256 of its bytes.
pub fn frame_id(image: &[u8]) -> String {
    hex::encode(Sha256::digest(image))
}

/// Where the pixels of the next capture come from.
#[derive(Debug)]
enum Source {
    /// A segment attached to the server, sized for `width` x `height`.
    Shm {
        seg: shm::Seg,
        mapping: ShmMapping,
        width: u16,
        height: u16,
    },
    /// Core GetImage; `why` says why SHM is not used.
    GetImage { why: &'static str },
}

/// An X client that captures one display. Owns its connection and, with MIT-SHM, a shared
/// segment sized for the root window (re-created if the root is resized).
#[derive(Debug)]
pub struct Capturer {
    conn: RustConnection,
    display: DisplayNum,
    root: Window,
    atoms: Atoms,
    source: Source,
    /// The last frame observed, with its PNG and id: a screen whose pixels have not changed is
    /// not encoded again (comparing 3 MB of pixels costs a fraction of encoding them).
    last: Option<Encoded>,
    /// How many frames [`Capturer::observe`] has PNG-encoded.
    encodes: u64,
}

/// A frame and its encoding.
#[derive(Debug)]
struct Encoded {
    frame: Frame,
    png: Vec<u8>,
    frame_id: String,
}

impl Capturer {
    /// Connects to the display and sets up MIT-SHM (or the GetImage fallback).
    pub fn new(access: &DisplayAccess) -> Result<Self, DisplayError> {
        Self::connect(access, true)
    }

    /// Connects without MIT-SHM: every capture copies the image through the socket. For servers
    /// whose shared memory is known not to work, and to test the fallback.
    pub fn without_shm(access: &DisplayAccess) -> Result<Self, DisplayError> {
        Self::connect(access, false)
    }

    fn connect(access: &DisplayAccess, try_shm: bool) -> Result<Self, DisplayError> {
        let display = access.display();
        let conn = access.connect()?;
        let setup = conn.setup();
        let screen = &setup.roots[0];
        let root = screen.root;
        check_pixel_format(setup, display, screen.root_depth)?;
        let atoms = wm::intern_atoms(&conn, display)?;
        let support = if try_shm {
            shm_support(&conn, display)?
        } else {
            Err("the caller asked for GetImage")
        };
        let source = match support {
            Ok(()) => {
                let (width, height) = (screen.width_in_pixels, screen.height_in_pixels);
                match attach_segment(&conn, display, width, height)? {
                    Ok(source) => source,
                    Err(why) => Source::GetImage { why },
                }
            }
            Err(why) => Source::GetImage { why },
        };
        let capturer = Self {
            conn,
            display,
            root,
            atoms,
            source,
            last: None,
            encodes: 0,
        };
        if let Source::GetImage { why } = &capturer.source {
            tracing::info!(display = %capturer.display, reason = why, "capturing without MIT-SHM");
        }
        Ok(capturer)
    }

    /// The display this captures.
    pub fn display(&self) -> DisplayNum {
        self.display
    }

    /// Whether captures go through MIT-SHM.
    pub fn uses_shm(&self) -> bool {
        matches!(self.source, Source::Shm { .. })
    }

    /// Captures the whole root window.
    pub fn capture(&mut self) -> Result<Frame, DisplayError> {
        let display = self.display;
        wm::drain_events(&self.conn, display)?;
        let geometry = self
            .conn
            .get_geometry(self.root)
            .map_err(x11_err(display))?
            .reply()
            .map_err(x11_err(display))?;
        let (width, height) = (geometry.width, geometry.height);
        if let Source::Shm {
            width: w,
            height: h,
            ..
        } = self.source
        {
            if (w, h) != (width, height) {
                self.reattach(width, height)?;
            }
        }
        match &self.source {
            Source::Shm { seg, mapping, .. } => {
                let reply = self
                    .conn
                    .shm_get_image(
                        self.root,
                        0,
                        0,
                        width,
                        height,
                        !0,
                        ImageFormat::Z_PIXMAP.into(),
                        *seg,
                        0,
                    )
                    .map_err(x11_err(display))?
                    .reply()
                    .map_err(x11_err(display))?;
                // The reply says how much the server wrote; a short image fails the conversion.
                let bytes = mapping.bytes();
                let len = usize::try_from(reply.size).map_or(bytes.len(), |n| n.min(bytes.len()));
                bgrx_to_frame(display, &bytes[..len], width, height, reply.depth)
            }
            Source::GetImage { .. } => {
                let reply = self
                    .conn
                    .get_image(ImageFormat::Z_PIXMAP, self.root, 0, 0, width, height, !0)
                    .map_err(x11_err(display))?
                    .reply()
                    .map_err(x11_err(display))?;
                bgrx_to_frame(display, &reply.data, width, height, reply.depth)
            }
        }
    }

    /// The pointer position in root coordinates.
    pub fn cursor(&mut self) -> Result<(i32, i32), DisplayError> {
        let display = self.display;
        let reply = self
            .conn
            .query_pointer(self.root)
            .map_err(x11_err(display))?
            .reply()
            .map_err(x11_err(display))?;
        Ok((i32::from(reply.root_x), i32::from(reply.root_y)))
    }

    /// The active window id and title (see [`wm::WindowControl::active_window`]).
    pub fn active_window(&mut self) -> Result<Option<(u32, String)>, DisplayError> {
        wm::active_window(&self.conn, self.display, self.root, &self.atoms)
    }

    /// Captures, encodes and identifies a frame, with the cursor and active window. Pixels
    /// identical to the last observation's reuse its PNG and id (the encoding is deterministic,
    /// so they are what encoding again would give).
    pub fn observe(&mut self) -> Result<Observation, DisplayError> {
        let frame = self.capture()?;
        self.observe_frame(frame)
    }

    /// [`Capturer::observe`] of a frame just captured (by [`Capturer::capture`]), so a caller
    /// that already holds the current frame does not capture it again.
    pub fn observe_frame(&mut self, frame: Frame) -> Result<Observation, DisplayError> {
        let (png, id) = match &self.last {
            Some(last) if last.frame == frame => (last.png.clone(), last.frame_id.clone()),
            _ => {
                let png = encode_png(&frame)?;
                self.encodes += 1;
                let id = frame_id(&png);
                self.last = Some(Encoded {
                    frame: frame.clone(),
                    png: png.clone(),
                    frame_id: id.clone(),
                });
                (png, id)
            }
        };
        Ok(Observation {
            frame_id: id,
            width: frame.width,
            height: frame.height,
            png,
            cursor: self.cursor()?,
            active_window: self.active_window()?,
        })
    }

    /// How many frames [`Capturer::observe`] has PNG-encoded: observing an unchanged screen
    /// encodes nothing.
    pub fn encodes(&self) -> u64 {
        self.encodes
    }

    /// Replaces the segment after the root window changed size.
    fn reattach(&mut self, width: u16, height: u16) -> Result<(), DisplayError> {
        let display = self.display;
        if let Source::Shm { seg, .. } = self.source {
            self.conn
                .shm_detach(seg)
                .map_err(x11_err(display))?
                .check()
                .map_err(x11_err(display))?;
        }
        self.source = match attach_segment(&self.conn, display, width, height)? {
            Ok(source) => source,
            Err(why) => Source::GetImage { why },
        };
        Ok(())
    }
}

impl Drop for Capturer {
    fn drop(&mut self) {
        if let Source::Shm { seg, .. } = self.source {
            // Closing the connection detaches too; this just frees the server's side sooner.
            if let Ok(cookie) = self.conn.shm_detach(seg) {
                cookie.ignore_error();
            }
            let _ = self.conn.flush();
        }
    }
}

/// `Ok(())` when MIT-SHM 1.2+ (AttachFd) is available, else why not.
fn shm_support(
    conn: &RustConnection,
    display: DisplayNum,
) -> Result<Result<(), &'static str>, DisplayError> {
    if conn
        .extension_information(shm::X11_EXTENSION_NAME)
        .map_err(x11_err(display))?
        .is_none()
    {
        return Ok(Err("the server lacks MIT-SHM"));
    }
    let version = conn
        .shm_query_version()
        .map_err(x11_err(display))?
        .reply()
        .map_err(x11_err(display))?;
    if (version.major_version, version.minor_version) < (1, 2) {
        return Ok(Err("the server's MIT-SHM predates AttachFd (1.2)"));
    }
    Ok(Ok(()))
}

/// Creates a memfd segment for a `width` x `height` 32-bit image and attaches it; the inner
/// `Err` says why SHM cannot be used, in which case nothing stays attached.
fn attach_segment(
    conn: &RustConnection,
    num: DisplayNum,
    width: u16,
    height: u16,
) -> Result<Result<Source, &'static str>, DisplayError> {
    let len = usize::from(width) * usize::from(height) * 4;
    let mapping = match ShmMapping::new(len) {
        Ok(mapping) => mapping,
        Err(error) => {
            tracing::warn!(display = %num, %error, "cannot create the capture memfd");
            return Ok(Err("creating the memfd failed"));
        }
    };
    let fd = match mapping.fd().try_clone_to_owned() {
        Ok(fd) => fd,
        Err(error) => {
            tracing::warn!(display = %num, %error, "cannot duplicate the capture memfd");
            return Ok(Err("duplicating the memfd failed"));
        }
    };
    let seg = conn.generate_id().map_err(x11_err(num))?;
    let attached = conn
        .shm_attach_fd(seg, fd, false)
        .map_err(x11_err(num))?
        .check();
    match attached {
        Ok(()) => Ok(Ok(Source::Shm {
            seg,
            mapping,
            width,
            height,
        })),
        Err(x11rb::errors::ReplyError::X11Error(error)) => {
            tracing::warn!(display = %num, ?error, "the server refused the capture memfd");
            Ok(Err("the server refused AttachFd"))
        }
        Err(e) => Err(x11_err(num)(e)),
    }
}

/// Only 24- or 32-bit depth in 32-bit little-endian pixels with 0xRRGGBB masks is supported:
/// what Xvnc `-depth 24` and Xvfb `-screen 0 WxHx24` serve.
fn check_pixel_format(
    setup: &x11rb::protocol::xproto::Setup,
    display: DisplayNum,
    depth: u8,
) -> Result<(), DisplayError> {
    let bits_per_pixel = setup
        .pixmap_formats
        .iter()
        .find(|f| f.depth == depth)
        .map_or(0, |f| f.bits_per_pixel);
    let screen = &setup.roots[0];
    let visual = screen
        .allowed_depths
        .iter()
        .flat_map(|d| d.visuals.iter())
        .find(|v| v.visual_id == screen.root_visual);
    let masks_ok = visual.is_some_and(|v| {
        (v.red_mask, v.green_mask, v.blue_mask) == (0x00ff_0000, 0x0000_ff00, 0x0000_00ff)
    });
    if !(matches!(depth, 24 | 32)
        && bits_per_pixel == 32
        && setup.image_byte_order == ImageOrder::LSB_FIRST
        && masks_ok)
    {
        return Err(DisplayError::UnsupportedPixelFormat {
            display,
            depth,
            bits_per_pixel,
        });
    }
    Ok(())
}

/// Converts little-endian 0xXXRRGGBB pixels (bytes B, G, R, X) to a packed RGB frame.
fn bgrx_to_frame(
    display: DisplayNum,
    bgrx: &[u8],
    width: u16,
    height: u16,
    depth: u8,
) -> Result<Frame, DisplayError> {
    let pixels = usize::from(width) * usize::from(height);
    let src = bgrx
        .get(..pixels * 4)
        .ok_or(DisplayError::UnsupportedPixelFormat {
            display,
            depth,
            bits_per_pixel: 32,
        })?;
    let mut rgb = vec![0u8; pixels * 3];
    for (dst, px) in rgb.chunks_exact_mut(3).zip(src.chunks_exact(4)) {
        dst[0] = px[2];
        dst[1] = px[1];
        dst[2] = px[0];
    }
    Ok(Frame {
        width: u32::from(width),
        height: u32::from(height),
        rgb,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(width: u32, height: u32, seed: u8) -> Frame {
        let rgb = (0..width * height * 3)
            .map(|i| (i as u8).wrapping_mul(seed))
            .collect();
        Frame { width, height, rgb }
    }

    #[test]
    fn bgrx_pixels_become_rgb() {
        let d = DisplayNum::new(1).unwrap();
        let bgrx = [3, 2, 1, 0, 30, 20, 10, 0xff];
        let f = bgrx_to_frame(d, &bgrx, 2, 1, 24).unwrap();
        assert_eq!(f.rgb, vec![1, 2, 3, 10, 20, 30]);
        assert!(bgrx_to_frame(d, &bgrx, 3, 1, 24).is_err());
    }

    #[test]
    fn png_round_trips_and_ids_follow_the_bytes() {
        let f = frame(17, 5, 7);
        let png = encode_png(&f).unwrap();
        let decoder = png::Decoder::new(std::io::Cursor::new(&png));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (17, 5));
        assert_eq!(info.color_type, png::ColorType::Rgb);
        assert_eq!(&buf[..info.buffer_size()], &f.rgb[..]);

        let id = frame_id(&png);
        assert_eq!(id.len(), 64);
        assert_eq!(id, frame_id(&encode_png(&f).unwrap()));
        assert_ne!(id, frame_id(&encode_png(&frame(17, 5, 9)).unwrap()));
    }

    #[test]
    fn frame_id_is_sha256_hex() {
        assert_eq!(
            frame_id(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
