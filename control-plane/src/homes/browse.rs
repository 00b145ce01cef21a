//! Browsing a stored home without a guest: list the entries of the latest checkpoint and read one
//! file from it, streaming through the archive (`homes` `FORMAT.md`, "Archive") as it is opened
//! and checked, so neither the archive nor the file is ever held whole.
//!
//! The stream passes through `homes::archive::ArchiveChecker` first, so paths, entry types and
//! limits are validated exactly as on restore; this module only walks the records.

use super::HomeError;
use homes::archive::{
    ArchiveChecker, Limits, FLAG_EXEC, MAGIC, TAG_DIR, TAG_END, TAG_FILE, VERSION,
};
use std::io;
use tokio::io::{AsyncRead, AsyncReadExt};

/// One entry of a stored home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEntry {
    pub path: String,
    pub dir: bool,
    pub size: u64,
    pub executable: bool,
}

/// A record header read from the archive.
enum Record {
    Entry(StoredEntry),
    End,
}

/// Walks the records of an archive stream.
pub struct Walker<R> {
    r: ArchiveChecker<R>,
    /// Content bytes of the current file not consumed yet.
    left: u64,
}

fn read_err(e: io::Error) -> HomeError {
    HomeError::Read(e)
}

impl<R: AsyncRead + Unpin> Walker<R> {
    /// Checks the header; the stream is validated as it is read.
    pub async fn new(r: R) -> Result<Self, HomeError> {
        let mut w = Self {
            r: ArchiveChecker::new(r, Limits::default()),
            left: 0,
        };
        let mut head = [0u8; 10];
        w.r.read_exact(&mut head).await.map_err(read_err)?;
        // The checker has already refused a bad magic or version; this is belt and braces.
        if head[..8] != MAGIC || u16::from_be_bytes([head[8], head[9]]) != VERSION {
            return Err(HomeError::Archive(homes::archive::ArchiveError::BadMagic));
        }
        Ok(w)
    }

    /// The next entry, skipping the unread content of the previous file; `None` after the end
    /// record (and the checker's confirmation that nothing follows it).
    pub async fn next(&mut self) -> Result<Option<StoredEntry>, HomeError> {
        self.skip_content().await?;
        match self.record().await? {
            Record::Entry(e) => {
                self.left = e.size;
                Ok(Some(e))
            }
            Record::End => {
                let mut rest = [0u8; 1];
                // End of stream is where the checker verifies there is no trailing data.
                if self.r.read(&mut rest).await.map_err(read_err)? != 0 {
                    return Err(HomeError::Archive(
                        homes::archive::ArchiveError::TrailingData,
                    ));
                }
                Ok(None)
            }
        }
    }

    /// Reads up to `buf.len()` bytes of the current file's content; 0 at its end.
    pub async fn read_content(&mut self, buf: &mut [u8]) -> Result<usize, HomeError> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = usize::try_from(self.left)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = self.r.read(&mut buf[..want]).await.map_err(read_err)?;
        if n == 0 {
            return Err(HomeError::Archive(homes::archive::ArchiveError::Truncated));
        }
        self.left -= n as u64;
        Ok(n)
    }

    async fn skip_content(&mut self) -> Result<(), HomeError> {
        let mut buf = vec![0u8; 64 << 10];
        while self.left > 0 {
            self.read_content(&mut buf).await?;
        }
        Ok(())
    }

    async fn record(&mut self) -> Result<Record, HomeError> {
        let tag = self.r.read_u8().await.map_err(read_err)?;
        match tag {
            TAG_DIR => {
                let len = self.r.read_u16().await.map_err(read_err)?;
                let path = self.path(len).await?;
                Ok(Record::Entry(StoredEntry {
                    path,
                    dir: true,
                    size: 0,
                    executable: false,
                }))
            }
            TAG_FILE => {
                let flags = self.r.read_u8().await.map_err(read_err)?;
                let len = self.r.read_u16().await.map_err(read_err)?;
                let path = self.path(len).await?;
                let size = self.r.read_u64().await.map_err(read_err)?;
                Ok(Record::Entry(StoredEntry {
                    path,
                    dir: false,
                    size,
                    executable: flags & FLAG_EXEC != 0,
                }))
            }
            TAG_END => {
                let mut end = [0u8; 16];
                self.r.read_exact(&mut end).await.map_err(read_err)?;
                Ok(Record::End)
            }
            // Unreachable behind the checker, which refuses other tags first.
            tag => Err(HomeError::Archive(
                homes::archive::ArchiveError::UnsupportedEntry { index: 0, tag },
            )),
        }
    }

    async fn path(&mut self, len: u16) -> Result<String, HomeError> {
        let mut raw = vec![0u8; usize::from(len)];
        self.r.read_exact(&mut raw).await.map_err(read_err)?;
        Ok(String::from_utf8_lossy(&raw).into_owned())
    }
}

/// Normalises a path asked for by a client: no leading or trailing `/`.
pub fn clean_path(path: &str) -> String {
    path.trim_matches('/').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn walks_entries_and_reads_one_file() {
        let archive = homes::testing::RawArchive::new()
            .dir(b"a")
            .file(b"a/x.bin", false, &[1, 2, 3])
            .file(b"a/run", true, b"#!/bin/sh\n")
            .dir(b"b")
            .end();
        let mut w = Walker::new(&archive[..]).await.unwrap();
        let mut seen = Vec::new();
        while let Some(e) = w.next().await.unwrap() {
            if e.path == "a/run" {
                let mut buf = [0u8; 4];
                let mut got = Vec::new();
                loop {
                    let n = w.read_content(&mut buf).await.unwrap();
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                assert_eq!(got, b"#!/bin/sh\n");
            }
            seen.push((e.path, e.dir, e.size, e.executable));
        }
        assert_eq!(
            seen,
            vec![
                ("a".into(), true, 0, false),
                ("a/x.bin".into(), false, 3, false),
                ("a/run".into(), false, 10, true),
                ("b".into(), true, 0, false),
            ]
        );
    }

    #[tokio::test]
    async fn a_truncated_archive_is_an_error() {
        let archive = homes::testing::RawArchive::new()
            .file(b"f", false, &[0; 100])
            .unfinished();
        let mut w = Walker::new(&archive[..]).await.unwrap();
        let mut failed = false;
        loop {
            match w.next().await {
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        assert!(failed);
    }
}
