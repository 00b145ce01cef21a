//! A bystander: a computer whose commands must keep working while a test attacks or stalls
//! another part of the control plane.

use anyhow::{anyhow, bail, Context, Result};
use control_plane::client::Client;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// An exec loop on a computer that must keep working while something else is attacked or
/// stalled: each `echo alive <n>` must answer exactly, within 30 s.
pub struct Bystander {
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<u64>>,
}

impl Bystander {
    pub fn start(client: Client, computer: String) -> Self {
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut n = 0u64;
            while !*stopped.borrow() {
                n += 1;
                let path = format!("/v1/computers/{computer}/exec");
                let want = format!("alive {n}\n");
                let body = serde_json::json!({ "argv": ["echo", "alive", n.to_string()] });
                let out = tokio::time::timeout(
                    Duration::from_secs(30),
                    crate::exec_via(&client, &path, &body),
                )
                .await
                .map_err(|_| anyhow!("bystander exec {n} took over 30 s"))?
                .with_context(|| format!("bystander exec {n}"))?;
                if out.stdout != want.as_bytes() || out.code != Some(0) {
                    bail!("bystander exec {n} answered {out:?}");
                }
                tokio::select! {
                    _ = stopped.changed() => {}
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
            Ok(n)
        });
        Self { stop, task }
    }

    /// Stops the loop; an error if any exec failed. Returns how many ran.
    pub async fn finish(self) -> Result<u64> {
        let _ = self.stop.send(true);
        let n = self.task.await??;
        assert!(n >= 3, "the bystander ran only {n} commands");
        Ok(n)
    }
}
