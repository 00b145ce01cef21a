//! A real S3-compatible server for system tests: `s3s-fs` (found through `scripts/s3s-fs.sh path`)
//! on a free loopback port over a fresh temp dir, with access key and secret `test`/`test`, plus a
//! small client to look into (and tamper with) the bucket through the S3 API.

use anyhow::{bail, Context, Result};
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::primitives::ByteStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The bucket every test server starts with.
pub const BUCKET: &str = "rakazo-homes";

/// A running s3s-fs, killed on drop.
pub struct S3Server {
    child: Option<Child>,
    pub port: u16,
    pub endpoint: String,
    dir: tempfile::TempDir,
    pub client: aws_sdk_s3::Client,
}

fn binary() -> Result<PathBuf> {
    homes::testing::s3s_fs_binary().map_err(anyhow::Error::msg)
}

/// A loopback TCP port that was free when asked; it may be taken before the caller binds it.
pub(crate) fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl S3Server {
    /// Starts a server with an empty [`BUCKET`].
    pub async fn start() -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("rakazo-s3-").tempdir()?;
        std::fs::create_dir(dir.path().join(BUCKET))?;
        // A port free when chosen may be taken before s3s-fs binds it: try a few.
        for _ in 0..5 {
            let port = free_port()?;
            if let Some(child) = spawn_on(port, dir.path()).await? {
                let endpoint = format!("http://127.0.0.1:{port}");
                return Ok(Self {
                    child: Some(child),
                    port,
                    client: client(&endpoint),
                    endpoint,
                    dir,
                });
            }
        }
        bail!("s3s-fs did not start")
    }

    /// Starts the server again on its port and directory (after [`kill`](Self::kill)).
    pub async fn restart(&mut self) -> Result<()> {
        self.kill();
        match spawn_on(self.port, self.dir.path()).await? {
            Some(child) => {
                self.child = Some(child);
                Ok(())
            }
            None => bail!("s3s-fs did not restart on port {}", self.port),
        }
    }

    /// The directory the server serves: a directory per bucket, and at its top the files of
    /// unfinished multipart uploads (`.upload-<id>.json`, `.upload_id-<id>.part-<n>`).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stops the server (the bucket's files stay).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Every object key under `prefix`, sorted.
    pub async fn keys(&self, prefix: &str) -> Result<Vec<String>> {
        let out = self
            .client
            .list_objects_v2()
            .bucket(BUCKET)
            .prefix(prefix)
            .send()
            .await
            .context("list objects")?;
        let mut keys: Vec<String> = out
            .contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_owned))
            .collect();
        keys.sort();
        Ok(keys)
    }

    pub async fn get(&self, key: &str) -> Result<Vec<u8>> {
        let out = self
            .client
            .get_object()
            .bucket(BUCKET)
            .key(key)
            .send()
            .await
            .with_context(|| format!("get {key}"))?;
        Ok(out.body.collect().await?.into_bytes().to_vec())
    }

    pub async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<()> {
        self.client
            .put_object()
            .bucket(BUCKET)
            .key(key)
            .body(ByteStream::from(bytes))
            .send()
            .await
            .with_context(|| format!("put {key}"))?;
        Ok(())
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts s3s-fs on `port` over `dir`; `None` if it did not come up.
async fn spawn_on(port: u16, dir: &std::path::Path) -> Result<Option<Child>> {
    let mut child = Command::new(binary()?)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--access-key", "test", "--secret-key", "test"])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("start s3s-fs")?;
    // Readiness, polled: up to 10 s.
    for _ in 0..500 {
        if child.try_wait()?.is_some() {
            return Ok(None);
        }
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(Some(child));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    Ok(None)
}

fn client(endpoint: &str) -> aws_sdk_s3::Client {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
        .force_path_style(true)
        .endpoint_url(endpoint)
        .http_client(http)
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}
