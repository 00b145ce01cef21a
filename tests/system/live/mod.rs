//! Live screens and terminals (issue 5): sealed capability URLs, takeover, the websocket relay
//! to the guest's gateway, the noVNC viewer in a real headless Chromium, RFB view vs control,
//! and terminals, all through a real `rakazo serve` and a real guest.

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine;
use control_plane::client::ClientError;
use futures_util::{SinkExt, StreamExt};
use gateway_proto::termframe::{encode_input, encode_resize};
use std::time::Duration;
use tests::fixture::Fixture;
use tests::live::{
    close_reason, connect, get, read_until, upgrade_status, wait_closed, Rfb, WsBytes,
};
use tests::{wait_for, World, WorldOptions};
use tokio_tungstenite::tungstenite::Message;

mod control;
mod shm;
mod terminal;
mod urls;
mod viewer;

const LONG: Duration = Duration::from_secs(60);

fn api_status(e: &ClientError) -> Option<(u16, String, String)> {
    match e {
        ClientError::Api {
            status,
            code,
            message,
            ..
        } => Some((status.as_u16(), code.clone(), message.clone())),
        _ => None,
    }
}

/// A bot on a computer, seen from the test.
struct Bot {
    c: String,
    bot: String,
}

impl Bot {
    fn new(c: &str, bot: &str) -> Self {
        Self {
            c: c.into(),
            bot: bot.into(),
        }
    }

    fn path(&self, action: &str) -> String {
        format!("/v1/computers/{}/screens/{}/{action}", self.c, self.bot)
    }

    /// Starts the bot's desktop under a short run that ends successfully (the desktop stays).
    async fn desktop(&self, w: &World) -> Result<serde_json::Value> {
        let lease = w.lease(&self.c, &self.bot, "run-setup").await?;
        let v = w
            .post(&self.path("ensure"), serde_json::json!({ "lease": lease }))
            .await?;
        self.end_run(w, &lease).await?;
        Ok(v)
    }

    async fn end_run(&self, w: &World, lease: &str) -> Result<()> {
        w.post(
            &format!("/v1/computers/{}/leases/{}/release", self.c, self.bot),
            serde_json::json!({ "lease": lease, "outcome": "success" }),
        )
        .await?;
        Ok(())
    }

    /// Issues a capability URL; returns its path (`/cap/<sealed>`), recorded as a secret.
    async fn url(&self, w: &mut World, policy: &str) -> Result<String> {
        self.url_with(w, serde_json::json!({ "policy": policy }))
            .await
    }

    /// Issues a capability URL as `body` asks; returns its path, recorded as a secret.
    async fn url_with(&self, w: &mut World, body: serde_json::Value) -> Result<String> {
        let v = w.post(&self.path("url"), body).await?;
        let path = v["path"]
            .as_str()
            .ok_or_else(|| anyhow!("no path in {v}"))?
            .to_string();
        w.add_secret(path.trim_start_matches("/cap/"));
        Ok(path)
    }

    async fn takeover(&self, w: &World) -> Result<serde_json::Value, ClientError> {
        w.post(&self.path("takeover"), serde_json::json!({})).await
    }

    async fn release_control(&self, w: &World) -> Result<serde_json::Value, ClientError> {
        w.post(&self.path("release-control"), serde_json::json!({}))
            .await
    }

    async fn terminal_url(&self, w: &mut World) -> Result<String> {
        w.terminal_url(&self.c, &self.bot).await
    }

    /// The X pointer position, from an observation.
    async fn cursor(&self, w: &World) -> Result<(i64, i64)> {
        let lease = w.lease(&self.c, &self.bot, "run-observe").await?;
        let v = w
            .post(&self.path("observe"), serde_json::json!({ "lease": lease }))
            .await;
        self.end_run(w, &lease).await?;
        let v = v?;
        Ok((
            v["cursor"]["x"].as_i64().unwrap_or(-1),
            v["cursor"]["y"].as_i64().unwrap_or(-1),
        ))
    }
}
