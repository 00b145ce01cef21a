//! Garage (a production S3-compatible store, crates.io `garage`) as a single node on loopback, for
//! the homes benchmark: where s3s-fs, the test server, concatenates and hashes every part again
//! when a multipart upload completes, Garage completes it in metadata, as AWS S3 does. Not used
//! by the test suite (it takes tens of minutes to build here); the bench takes its binary path.

use crate::s3::free_port;
use anyhow::{bail, ensure, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running single-node Garage with one bucket and one key, killed on drop.
pub struct Garage {
    child: Child,
    pub endpoint: String,
    pub bucket: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    bin: PathBuf,
    config: PathBuf,
    _dir: tempfile::TempDir,
}

impl Garage {
    /// Starts `bin` over a fresh temp dir (under `parent`) with an empty `bucket`.
    pub async fn start(bin: &Path, parent: &Path, bucket: &str) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("rakazo-garage-")
            .tempdir_in(parent)?;
        let (s3, rpc, admin) = (free_port()?, free_port()?, free_port()?);
        let config = dir.path().join("garage.toml");
        // Blocks are stored as sent: sealed archives do not compress, so zstd would only burn
        // CPU. Region matches the control plane's default.
        std::fs::write(
            &config,
            format!(
                "metadata_dir = \"{meta}\"\ndata_dir = \"{data}\"\ndb_engine = \"sqlite\"\n\
                 replication_factor = 1\ncompression_level = \"none\"\n\
                 rpc_bind_addr = \"127.0.0.1:{rpc}\"\nrpc_public_addr = \"127.0.0.1:{rpc}\"\n\
                 rpc_secret = \"{secret}\"\n\n[s3_api]\ns3_region = \"us-east-1\"\n\
                 api_bind_addr = \"127.0.0.1:{s3}\"\nroot_domain = \".s3.localhost\"\n\n\
                 [admin]\napi_bind_addr = \"127.0.0.1:{admin}\"\n",
                meta = dir.path().join("meta").display(),
                data = dir.path().join("data").display(),
                secret = hex::encode(rand::random::<[u8; 32]>()),
            ),
        )?;
        let log = std::fs::File::create(dir.path().join("garage.log"))?;
        let child = Command::new(bin)
            .arg("-c")
            .arg(&config)
            .arg("server")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {}", bin.display()))?;
        let mut g = Self {
            child,
            endpoint: format!("http://127.0.0.1:{s3}"),
            bucket: bucket.to_string(),
            access_key_id: format!("GK{}", hex::encode(rand::random::<[u8; 12]>())),
            secret_access_key: hex::encode(rand::random::<[u8; 32]>()),
            bin: bin.to_path_buf(),
            config,
            _dir: dir,
        };
        g.setup().await?;
        Ok(g)
    }

    fn cli(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(&self.bin)
            .arg("-c")
            .arg(&self.config)
            .args(args)
            .stdin(Stdio::null())
            .output()?;
        ensure!(
            out.status.success(),
            "garage {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    async fn setup(&mut self) -> Result<()> {
        let mut node = None;
        for _ in 0..100 {
            if let Some(status) = self.child.try_wait()? {
                bail!("garage exited at start: {status}");
            }
            if let Ok(id) = self.cli(&["node", "id", "-q"]) {
                node = id.split('@').next().map(|s| s.trim().to_string());
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let node = node.context("garage did not answer `node id`")?;
        self.cli(&["layout", "assign", "-z", "dc1", "-c", "10G", &node])?;
        self.cli(&["layout", "apply", "--version", "1"])?;
        self.cli(&["bucket", "create", &self.bucket])?;
        self.cli(&[
            "key",
            "import",
            "--yes",
            "-n",
            "rakazo-bench",
            &self.access_key_id,
            &self.secret_access_key,
        ])?;
        self.cli(&[
            "bucket",
            "allow",
            "--read",
            "--write",
            "--owner",
            &self.bucket,
            "--key",
            &self.access_key_id,
        ])?;
        Ok(())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
