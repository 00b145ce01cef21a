//! Marks and ref points for the desktop tools: the page's visible interactive elements with
//! their refs and boxes, and the click point of one ref, both mapped from CSS pixels of the
//! viewport to screen pixels.
//!
//! The mapping ([`View::to_screen`]) uses what the page reports about its window: its position
//! and outer size in DIPs (`screenX`, `outerHeight`, ...), the viewport in CSS pixels
//! (`innerWidth`, `innerHeight`), and `devicePixelRatio`, which is the device scale factor
//! times the page zoom. The device scale factor is the screen's width in pixels over its width
//! in DIPs (`screen.width`); the zoom is the rest of the ratio. The browser's top UI (tabs,
//! toolbar) is the outer height less the viewport's, less a bottom border as wide as a side one.
//!
//! Refs come from the same counter and maps as the snapshot's, so a mark's ref works with
//! browser_act and a snapshot's ref with a desktop `click`.

use std::time::Duration;

use gateway_proto::desktop::MAX_MARK_NAME_CHARS;
use gateway_proto::page::NO_TAB;
use gateway_proto::{ErrorCode, OpError};
use serde::{Deserialize, Serialize};

use super::cdp::CdpError;
use super::steps::Reply;
use super::{not_settled, PageBrowser};
use crate::browser::CdpClient;

/// Longest wait for the marks evaluation.
const MARKS_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for a ref's point.
const LOCATE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest role kept from the page.
const MAX_ROLE_CHARS: usize = 40;

/// Where the page's viewport sits on the screen (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct View {
    pub dpr: f64,
    pub screen_x: f64,
    pub screen_y: f64,
    pub outer_width: f64,
    pub outer_height: f64,
    pub inner_width: f64,
    pub inner_height: f64,
    /// The screen's width in DIPs.
    pub screen_width: f64,
}

impl View {
    /// The screen pixel of viewport point `(x, y)` (CSS pixels), on a screen `screen_px` pixels
    /// wide.
    pub fn to_screen(&self, x: f64, y: f64, screen_px: u16) -> (f64, f64) {
        let finite = |v: f64, or: f64| if v.is_finite() { v } else { or };
        let dpr = finite(self.dpr, 1.0).clamp(0.1, 16.0);
        let dsf = if self.screen_width.is_finite() && self.screen_width > 0.0 {
            (f64::from(screen_px) / self.screen_width).clamp(0.1, 16.0)
        } else {
            dpr
        };
        let zoom = dpr / dsf;
        let border =
            ((finite(self.outer_width, 0.0) - finite(self.inner_width, 0.0) * zoom) / 2.0).max(0.0);
        let top = (finite(self.outer_height, 0.0) - finite(self.inner_height, 0.0) * zoom - border)
            .max(0.0);
        let left = (finite(self.screen_x, 0.0) + border) * dsf;
        let top = (finite(self.screen_y, 0.0) + top) * dsf;
        (left + x * dpr, top + y * dpr)
    }
}

/// One element's mark: its ref, role, name and box in screen pixels (fractional, unclipped).
#[derive(Debug, Clone, PartialEq)]
pub struct ScreenMark {
    pub element: String,
    pub role: String,
    pub name: String,
    pub left: f64,
    pub top: f64,
    pub right: f64,
    pub bottom: f64,
}

/// The page's marks.
#[derive(Debug, Clone, PartialEq)]
pub struct PageMarks {
    pub marks: Vec<ScreenMark>,
    /// More elements were visible than `max`.
    pub more: bool,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct MarksArgs {
    next: u64,
    max: usize,
    max_name: usize,
}

#[derive(Debug, Deserialize)]
struct RawMarks {
    marks: Vec<RawMark>,
    more: bool,
    next: u64,
    vw: f64,
    vh: f64,
    view: View,
    visible: bool,
    #[serde(default)]
    ms: f64,
}

#[derive(Debug, Deserialize)]
struct RawMark {
    #[serde(rename = "ref")]
    element: String,
    role: String,
    name: String,
    x: f64,
    y: f64,
    w: f64,
    h: f64,
}

#[derive(Debug, Clone, Serialize)]
struct RefArgs {
    #[serde(rename = "ref")]
    element: String,
}

#[derive(Debug, Deserialize)]
struct Located {
    #[serde(flatten)]
    reply: Reply,
    view: Option<View>,
}

fn cut(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

impl PageBrowser {
    /// The visible interactive elements of the chosen tab (up to `max`, in document order), their
    /// boxes mapped to a screen `screen_px` pixels wide and clipped to the viewport.
    pub async fn marks(
        &mut self,
        browser: &CdpClient,
        max: usize,
        screen_px: u16,
    ) -> Result<PageMarks, OpError> {
        let (target, probed) = self.select_tab(browser, true).await?;
        let args = MarksArgs {
            next: self.next_ref,
            max,
            max_name: MAX_MARK_NAME_CHARS,
        };
        let raw: RawMarks = match self.call(&target, "marks", args, MARKS_TIMEOUT, true).await {
            Ok(raw) => raw,
            Err(CdpError::WorldGone | CdpError::Interrupted) => return Err(not_settled()),
            Err(error) => return Err(self.failed("marks", error)),
        };
        if !probed && !raw.visible {
            return Err(OpError::new(ErrorCode::Failed, NO_TAB));
        }
        let max_next = self.next_ref.saturating_add(max as u64);
        if raw.next < self.next_ref || raw.next > max_next || raw.marks.len() > max {
            return Err(OpError::new(
                ErrorCode::Failed,
                "the page helper minted refs out of order",
            ));
        }
        self.next_ref = raw.next;
        tracing::debug!(marks = raw.marks.len(), helper_ms = raw.ms, "page marks");
        let clip = |v: f64, hi: f64| if v.is_finite() { v.clamp(0.0, hi) } else { 0.0 };
        let marks = raw
            .marks
            .into_iter()
            .filter(|m| m.element.starts_with('e') && m.element.len() <= 24)
            .map(|m| {
                let (x0, y0) = (clip(m.x, raw.vw), clip(m.y, raw.vh));
                let (x1, y1) = (clip(m.x + m.w, raw.vw), clip(m.y + m.h, raw.vh));
                let (left, top) = raw.view.to_screen(x0, y0, screen_px);
                let (right, bottom) = raw.view.to_screen(x1, y1, screen_px);
                ScreenMark {
                    element: m.element,
                    role: cut(&m.role, MAX_ROLE_CHARS),
                    name: cut(&m.name, MAX_MARK_NAME_CHARS),
                    left,
                    top,
                    right,
                    bottom,
                }
            })
            .collect();
        Ok(PageMarks {
            marks,
            more: raw.more,
        })
    }

    /// The screen point (on a screen `screen_px` pixels wide) at which a click reaches the
    /// element `element` names, read now: scrolled into view and hit-tested as browser_act's
    /// click is. A ref that names nothing live, a disabled or covered element, are
    /// [`ErrorCode::BadRequest`] naming the ref.
    pub async fn locate(
        &mut self,
        browser: &CdpClient,
        element: &str,
        screen_px: u16,
    ) -> Result<(f64, f64), OpError> {
        let (target, _) = self.select_tab(browser, false).await?;
        let args = RefArgs {
            element: element.to_owned(),
        };
        let located: Located = match self
            .call(&target, "locate", args, LOCATE_TIMEOUT, false)
            .await
        {
            Ok(l) => l,
            // A new document: its refs are gone.
            Err(CdpError::WorldGone) => Located {
                reply: Reply {
                    error: Some("stale".into()),
                    ..Reply::default()
                },
                view: None,
            },
            Err(error) => return Err(self.failed("locate", error)),
        };
        if let Err(failure) = super::steps::check(&located.reply, None) {
            return Err(OpError::new(
                ErrorCode::BadRequest,
                format!("element {element}: {}", failure.error),
            ));
        }
        match (located.reply.x, located.reply.y, located.view) {
            (Some(x), Some(y), Some(view)) if x.is_finite() && y.is_finite() => {
                Ok(view.to_screen(x, y, screen_px))
            }
            _ => Err(OpError::new(
                ErrorCode::Failed,
                "the page helper gave no click point",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::View;

    fn view(dpr: f64, screen_width: f64, outer: (f64, f64), inner: (f64, f64)) -> View {
        View {
            dpr,
            screen_x: 0.0,
            screen_y: 0.0,
            outer_width: outer.0,
            outer_height: outer.1,
            inner_width: inner.0,
            inner_height: inner.1,
            screen_width,
        }
    }

    #[test]
    fn viewport_points_map_past_the_browser_ui() {
        // A maximized window on a 1280-pixel screen, 87 pixels of tabs and toolbar.
        let v = view(1.0, 1280.0, (1280.0, 800.0), (1280.0, 713.0));
        assert_eq!(v.to_screen(10.0, 20.0, 1280), (10.0, 107.0));
        // Device scale factor 2: DIPs are two pixels, the UI 43.5 DIPs, CSS pixels two pixels.
        let v = view(2.0, 640.0, (640.0, 400.0), (640.0, 356.5));
        assert_eq!(v.to_screen(10.0, 20.0, 1280), (20.0, 127.0));
        // Page zoom 150% at scale 1: CSS pixels are 1.5 pixels, the viewport 1.5 times fewer
        // CSS pixels.
        let v = view(1.5, 1280.0, (1280.0, 800.0), (1280.0 / 1.5, 713.0 / 1.5));
        let (x, y) = v.to_screen(10.0, 20.0, 1280);
        assert!(
            (x - 15.0).abs() < 1e-9 && (y - 117.0).abs() < 1e-9,
            "{x} {y}"
        );
        // A window that is not at the origin, with 4-DIP borders.
        let mut v = view(1.0, 1280.0, (808.0, 600.0), (800.0, 500.0));
        v.screen_x = 100.0;
        v.screen_y = 50.0;
        assert_eq!(v.to_screen(0.0, 0.0, 1280), (104.0, 146.0));
    }
}
