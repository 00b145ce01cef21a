//! Streaming seal and open: `AsyncRead` adapters that hold one segment (plus one byte of
//! lookahead, which is how the last segment is recognised) at a time.
//!
//! [`SealReader`] turns a plaintext stream into a sealed one; [`OpenReader`] turns a sealed
//! stream into plaintext, releasing each segment only after it authenticated, and failing with a
//! [`SealError`] (inside an `io::Error`) on tampering, truncation, reordering, the wrong key, home
//! or revision.

use super::{
    DataKey, Header, SealError, SegmentOpener, SegmentSealer, HEADER_FIXED_LEN, SEGMENT_SIZE,
    TAG_LEN,
};
use crate::{HomeKey, Revision, MAX_KEY_LEN};
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};

/// Reads into `buf[*filled..]` until it is full or `inner` ends; returns whether it ended.
fn poll_fill<R: AsyncRead + Unpin>(
    inner: &mut R,
    cx: &mut Context<'_>,
    buf: &mut [u8],
    filled: &mut usize,
) -> Poll<io::Result<bool>> {
    while *filled < buf.len() {
        let mut rb = ReadBuf::new(&mut buf[*filled..]);
        ready!(Pin::new(&mut *inner).poll_read(cx, &mut rb))?;
        let n = rb.filled().len();
        if n == 0 {
            return Poll::Ready(Ok(true));
        }
        *filled += n;
    }
    Poll::Ready(Ok(false))
}

/// Copies pending output into `buf`; true if anything was copied.
fn drain(out: &[u8], pos: &mut usize, buf: &mut ReadBuf<'_>) -> bool {
    if *pos >= out.len() {
        return false;
    }
    let n = (out.len() - *pos).min(buf.remaining());
    buf.put_slice(&out[*pos..*pos + n]);
    *pos += n;
    true
}

/// An `AsyncRead` of the sealed form of the plaintext `inner`.
pub struct SealReader<R> {
    inner: R,
    sealer: SegmentSealer,
    /// One segment of plaintext plus one byte of lookahead.
    plain: Vec<u8>,
    filled: usize,
    out: Vec<u8>,
    out_pos: usize,
    done: bool,
}

impl<R: AsyncRead + Unpin> SealReader<R> {
    /// Seals `inner` as revision `revision` of home `home`.
    pub fn new(inner: R, data_key: &DataKey, home: &HomeKey, revision: Revision) -> Self {
        let sealer = SegmentSealer::new(data_key, home, revision);
        let out = sealer.header().to_vec();
        Self {
            inner,
            sealer,
            plain: vec![0; SEGMENT_SIZE + 1],
            filled: 0,
            out,
            out_pos: 0,
            done: false,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for SealReader<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if drain(&this.out, &mut this.out_pos, buf) || this.done {
                return Poll::Ready(Ok(()));
            }
            let ended = ready!(poll_fill(
                &mut this.inner,
                cx,
                &mut this.plain,
                &mut this.filled
            ))?;
            let n = if ended { this.filled } else { SEGMENT_SIZE };
            this.out.clear();
            this.out.extend_from_slice(&this.plain[..n]);
            this.out_pos = 0;
            this.sealer.seal(&mut this.out, ended)?;
            if ended {
                this.done = true;
            } else {
                // Keep the lookahead byte: it starts the next segment.
                this.plain[0] = this.plain[SEGMENT_SIZE];
                this.filled = 1;
            }
        }
    }
}

enum OpenState {
    Header { buf: Vec<u8>, filled: usize },
    Body(Box<SegmentOpener>),
    Done,
    Failed,
}

/// An `AsyncRead` of the plaintext of the sealed stream `inner`, which must be revision
/// `revision` of home `home` sealed with `data_key`.
pub struct OpenReader<R> {
    inner: R,
    data_key: DataKey,
    home: HomeKey,
    revision: Revision,
    state: OpenState,
    /// One sealed segment plus one byte of lookahead.
    sealed: Vec<u8>,
    filled: usize,
    out: Vec<u8>,
    out_pos: usize,
}

impl<R: AsyncRead + Unpin> OpenReader<R> {
    pub fn new(inner: R, data_key: &DataKey, home: &HomeKey, revision: Revision) -> Self {
        Self {
            inner,
            data_key: data_key.clone(),
            home: home.clone(),
            revision,
            state: OpenState::Header {
                buf: vec![0; HEADER_FIXED_LEN],
                filled: 0,
            },
            sealed: vec![0; SEGMENT_SIZE + TAG_LEN + 1],
            filled: 0,
            out: Vec::with_capacity(SEGMENT_SIZE),
            out_pos: 0,
        }
    }

    fn truncated(&self, segments: u64) -> SealError {
        SealError::Truncated {
            home: self.home.clone(),
            revision: self.revision,
            segments,
        }
    }

    fn step(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), SealError>> {
        match &mut self.state {
            OpenState::Header { buf, filled } => {
                let ended =
                    ready!(poll_fill(&mut self.inner, cx, buf, filled)).map_err(SealError::Read)?;
                if ended {
                    // A short header is either a truncated object or not a sealed archive at
                    // all; the magic tells which when there is enough of it.
                    if *filled >= 8 && buf[..8] != super::MAGIC {
                        return Poll::Ready(Err(SealError::BadMagic));
                    }
                    return Poll::Ready(Err(self.truncated(0)));
                }
                if buf.len() == HEADER_FIXED_LEN {
                    let fixed =
                        <&[u8; HEADER_FIXED_LEN]>::try_from(buf.as_slice()).map_err(|_| {
                            SealError::Truncated {
                                home: self.home.clone(),
                                revision: self.revision,
                                segments: 0,
                            }
                        })?;
                    let (id_len, _, _) = Header::parse_fixed(fixed)?;
                    if id_len == 0 || id_len > MAX_KEY_LEN {
                        return Poll::Ready(Err(SealError::WrongHome {
                            expected: self.home.clone(),
                            found: format!("<{id_len}-byte id>"),
                        }));
                    }
                    buf.resize(HEADER_FIXED_LEN + id_len, 0);
                    return Poll::Ready(Ok(()));
                }
                let opener = SegmentOpener::new(&self.data_key, &self.home, self.revision, buf)?;
                self.state = OpenState::Body(Box::new(opener));
                Poll::Ready(Ok(()))
            }
            OpenState::Body(opener) => {
                let ended = ready!(poll_fill(
                    &mut self.inner,
                    cx,
                    &mut self.sealed,
                    &mut self.filled
                ))
                .map_err(SealError::Read)?;
                self.out_pos = 0;
                if !ended {
                    let seg = SEGMENT_SIZE + TAG_LEN;
                    if opener
                        .open(&self.sealed[..seg], false, &mut self.out)
                        .is_err()
                    {
                        return Poll::Ready(Err(opener.diagnose(&self.sealed[..seg], false)));
                    }
                    self.sealed[0] = self.sealed[seg];
                    self.filled = 1;
                    return Poll::Ready(Ok(()));
                }
                let segments = opener.opened();
                if self.filled < TAG_LEN {
                    return Poll::Ready(Err(SealError::Truncated {
                        home: self.home.clone(),
                        revision: self.revision,
                        segments,
                    }));
                }
                let seg = &self.sealed[..self.filled];
                if opener.open(seg, true, &mut self.out).is_err() {
                    return Poll::Ready(Err(opener.diagnose(seg, true)));
                }
                self.state = OpenState::Done;
                Poll::Ready(Ok(()))
            }
            OpenState::Done | OpenState::Failed => Poll::Ready(Ok(())),
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for OpenReader<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if drain(&this.out, &mut this.out_pos, buf) {
                return Poll::Ready(Ok(()));
            }
            match this.state {
                OpenState::Done => return Poll::Ready(Ok(())),
                OpenState::Failed => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "sealed archive of home {} revision {} already failed",
                            this.home, this.revision
                        ),
                    )))
                }
                _ => {}
            }
            if let Err(e) = ready!(this.step(cx)) {
                this.state = OpenState::Failed;
                this.out.clear();
                return Poll::Ready(Err(e.into()));
            }
        }
    }
}
