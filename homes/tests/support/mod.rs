//! Test support: a real s3s-fs server per test (S3 API over a temp dir, SigV4 checked), found
//! through `scripts/s3s-fs.sh path`, plus small helpers.
//!
//! The binary is never optional: if it is missing the test fails and says how to install it.

#![allow(dead_code)] // reason: each test binary uses a different part of this module

use anyhow::{bail, Context};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Readiness polls of a starting server, `POLL` apart: 10 s in all.
const POLLS: u32 = 500;
const POLL: Duration = Duration::from_millis(20);

/// A running s3s-fs, killed on drop.
pub struct S3sFs {
    child: Child,
    pub endpoint: String,
    _dir: tempfile::TempDir,
}

/// The s3s-fs binary (`homes::testing::s3s_fs_binary`).
fn binary() -> anyhow::Result<PathBuf> {
    homes::testing::s3s_fs_binary().map_err(anyhow::Error::msg)
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl S3sFs {
    /// Starts a server on a free loopback port over a fresh directory and waits until it
    /// accepts connections.
    pub async fn start() -> anyhow::Result<Self> {
        let bin = binary()?;
        // The port is free when chosen but could be taken before s3s-fs binds it: retry.
        for _ in 0..5 {
            let dir = tempfile::tempdir()?;
            let port = free_port()?;
            let mut child = Command::new(&bin)
                .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                .args(["--access-key", "test", "--secret-key", "test"])
                .arg(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| format!("cannot start {}", bin.display()))?;
            let mut up = false;
            for _ in 0..POLLS {
                if child.try_wait()?.is_some() {
                    break;
                }
                if tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
                {
                    up = true;
                    break;
                }
                tokio::time::sleep(POLL).await;
            }
            if up {
                return Ok(Self {
                    child,
                    endpoint: format!("http://127.0.0.1:{port}"),
                    _dir: dir,
                });
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        bail!("s3s-fs did not start")
    }

    /// The directory the server serves: a directory per bucket, and at its top the files of
    /// unfinished multipart uploads (`.upload-<id>.json` and one `.upload_id-<id>.part-<n>` per
    /// uploaded part).
    pub fn dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    /// The names of the files unfinished multipart uploads keep in [`dir`](Self::dir), sorted.
    pub fn upload_files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir())
            .expect("read the s3s-fs dir")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with(".upload"))
            .collect();
        names.sort();
        names
    }

    /// Kills the server now (to test what the store does without it).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for S3sFs {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An error with its whole source chain, as a log line would show it.
#[allow(unused_imports)] // reason: each test binary uses a different part of this module
pub use homes::error_chain as chain;
