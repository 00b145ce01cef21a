//! A streaming format check: [`ArchiveChecker`] passes an archive through unchanged while parsing
//! it, and fails the stream at the first byte that makes it invalid, so a store that keeps
//! archives as opaque bytes (the object store) still refuses a bad checkpoint at commit time.
//!
//! It checks what can be checked without a filesystem: magic and version, entry types, flags,
//! path syntax, the entry and byte limits, the end record and that nothing follows it. Parent
//! order and duplicates are checked only by the reader that restores, which sees the tree.

use super::{
    validate_path, ArchiveError, Limits, FLAG_EXEC, MAGIC, TAG_DIR, TAG_END, TAG_FILE, TAG_SAME,
    VERSION,
};
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    Header,
    Tag,
    DirHead,
    /// A file's head; `same`: an unchanged file (no content follows its size).
    FileHead {
        same: bool,
    },
    Path {
        file: bool,
        flags: u8,
        same: bool,
    },
    Size {
        flags: u8,
        same: bool,
    },
    Content {
        left: u64,
    },
    End,
    Done,
}

/// The push parser behind [`ArchiveChecker`].
#[derive(Debug)]
pub struct Parser {
    limits: Limits,
    want: Want,
    need: usize,
    pending: Vec<u8>,
    path: Vec<u8>,
    entries: u64,
    bytes: u64,
    /// Whether [`TAG_SAME`] entries are accepted.
    delta: bool,
}

impl Parser {
    pub fn new(limits: Limits) -> Self {
        Self {
            delta: false,
            limits,
            want: Want::Header,
            need: MAGIC.len() + 2,
            pending: Vec::new(),
            path: Vec::new(),
            entries: 0,
            bytes: 0,
        }
    }

    /// A parser of a delta archive, which may also hold [`TAG_SAME`] entries (an unchanged
    /// file's size counts towards the byte limit as a sent one's does).
    pub fn delta(limits: Limits) -> Self {
        Self {
            delta: true,
            ..Self::new(limits)
        }
    }

    /// Consumes the next bytes of the archive.
    pub fn feed(&mut self, mut data: &[u8]) -> Result<(), ArchiveError> {
        loop {
            if let Want::Content { left } = self.want {
                let n = usize::try_from(left).unwrap_or(usize::MAX).min(data.len());
                data = &data[n..];
                let left = left - n as u64;
                if left > 0 {
                    self.want = Want::Content { left };
                    return Ok(());
                }
                self.expect(Want::Tag, 1);
                continue;
            }
            if self.want == Want::Done {
                return if data.is_empty() {
                    Ok(())
                } else {
                    Err(ArchiveError::TrailingData)
                };
            }
            let take = (self.need - self.pending.len()).min(data.len());
            self.pending.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.pending.len() < self.need {
                return Ok(());
            }
            self.step()?;
        }
    }

    /// The archive ended: fine only after its end record.
    pub fn finish(&self) -> Result<(), ArchiveError> {
        if self.want == Want::Done {
            Ok(())
        } else {
            Err(ArchiveError::Truncated)
        }
    }

    fn expect(&mut self, want: Want, need: usize) {
        self.want = want;
        self.need = need;
        self.pending.clear();
    }

    fn step(&mut self) -> Result<(), ArchiveError> {
        let p = &self.pending;
        match self.want {
            Want::Header => {
                if p[..MAGIC.len()] != MAGIC {
                    return Err(ArchiveError::BadMagic);
                }
                let version = u16::from_be_bytes([p[8], p[9]]);
                if version != VERSION {
                    return Err(ArchiveError::UnsupportedVersion(version));
                }
                self.expect(Want::Tag, 1);
            }
            Want::Tag => match p[0] {
                TAG_DIR => self.expect(Want::DirHead, 2),
                TAG_FILE => self.expect(Want::FileHead { same: false }, 3),
                TAG_SAME if self.delta => self.expect(Want::FileHead { same: true }, 3),
                TAG_END => self.expect(Want::End, 16),
                tag => {
                    return Err(ArchiveError::UnsupportedEntry {
                        index: self.entries,
                        tag,
                    })
                }
            },
            Want::DirHead => {
                let len = usize::from(u16::from_be_bytes([p[0], p[1]]));
                self.expect(
                    Want::Path {
                        file: false,
                        flags: 0,
                        same: false,
                    },
                    len,
                );
                self.path_ready_if_empty()?;
            }
            Want::FileHead { same } => {
                let flags = p[0];
                let len = usize::from(u16::from_be_bytes([p[1], p[2]]));
                self.expect(
                    Want::Path {
                        file: true,
                        flags,
                        same,
                    },
                    len,
                );
                self.path_ready_if_empty()?;
            }
            Want::Path { file, flags, same } => self.path_done(file, flags, same)?,
            Want::Size { same, .. } => {
                let mut b = [0; 8];
                b.copy_from_slice(p);
                let size = u64::from_be_bytes(b);
                let limit = self.limits.max_bytes;
                match self.bytes.checked_add(size) {
                    Some(total) if total <= limit => self.bytes = total,
                    _ => return Err(ArchiveError::TooManyBytes { limit }),
                }
                if size == 0 || same {
                    self.expect(Want::Tag, 1);
                } else {
                    self.expect(Want::Content { left: size }, 0);
                }
            }
            Want::End => {
                let mut e = [0; 8];
                let mut b = [0; 8];
                e.copy_from_slice(&p[..8]);
                b.copy_from_slice(&p[8..]);
                let (claimed_entries, claimed_bytes) =
                    (u64::from_be_bytes(e), u64::from_be_bytes(b));
                if claimed_entries != self.entries || claimed_bytes != self.bytes {
                    return Err(ArchiveError::EndMismatch {
                        claimed_entries,
                        claimed_bytes,
                        entries: self.entries,
                        bytes: self.bytes,
                    });
                }
                self.expect(Want::Done, 0);
            }
            Want::Content { .. } | Want::Done => {}
        }
        Ok(())
    }

    /// A zero-length path is complete as soon as its length is read (and is rejected).
    fn path_ready_if_empty(&mut self) -> Result<(), ArchiveError> {
        match self.want {
            Want::Path { file, flags, same } if self.need == 0 => self.path_done(file, flags, same),
            _ => Ok(()),
        }
    }

    fn path_done(&mut self, file: bool, flags: u8, same: bool) -> Result<(), ArchiveError> {
        self.path.clear();
        self.path.extend_from_slice(&self.pending);
        validate_path(&self.path)?;
        if flags & !FLAG_EXEC != 0 {
            return Err(ArchiveError::BadFlags {
                path: String::from_utf8_lossy(&self.path).into_owned(),
                flags,
            });
        }
        let limit = self.limits.max_entries;
        if self.entries >= limit {
            return Err(ArchiveError::TooManyEntries { limit });
        }
        self.entries += 1;
        if file {
            self.expect(Want::Size { flags, same }, 8);
        } else {
            self.expect(Want::Tag, 1);
        }
        Ok(())
    }
}

/// Passes an archive stream through unchanged, failing it (with an `io::Error` of kind
/// `InvalidData` wrapping the [`ArchiveError`]) as soon as it is invalid or ends early.
pub struct ArchiveChecker<R> {
    inner: R,
    parser: Parser,
    failed: bool,
}

impl<R> ArchiveChecker<R> {
    pub fn new(inner: R, limits: Limits) -> Self {
        Self::with(inner, Parser::new(limits))
    }

    /// A checker with the parser `parser` ([`Parser::delta`] for a delta archive).
    pub fn with(inner: R, parser: Parser) -> Self {
        Self {
            inner,
            parser,
            failed: false,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for ArchiveChecker<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.failed {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "archive already failed its check",
            )));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let new = &buf.filled()[before..];
        let result = if new.is_empty() && buf.remaining() > 0 {
            this.parser.finish()
        } else {
            this.parser.feed(new)
        };
        if let Err(e) = result {
            this.failed = true;
            // Hand nothing of an invalid archive onwards.
            buf.set_filled(before);
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
        }
        Poll::Ready(Ok(()))
    }
}
