//! A bot on a computer, as system tests drive it: its execution lease and its desktop through
//! the HTTP API (`/v1/computers/{c}/screens/{bot}/...`).

use crate::World;
use anyhow::{anyhow, Result};
use control_plane::client::ClientError;

/// A bot holding its execution lease (`run-<bot>`).
pub struct Bot<'a> {
    pub w: &'a World,
    pub computer: String,
    pub bot: String,
    pub lease: String,
}

impl<'a> Bot<'a> {
    /// Acquires the bot's lease for the run `run-<bot>`.
    pub async fn new(w: &'a World, computer: &str, bot: &str) -> Result<Self> {
        let lease = w.lease(computer, bot, &format!("run-{bot}")).await?;
        Ok(Self {
            w,
            computer: computer.into(),
            bot: bot.into(),
            lease,
        })
    }

    /// `/v1/computers/{c}/screens/{bot}/{action}`.
    pub fn path(&self, action: &str) -> String {
        format!(
            "/v1/computers/{}/screens/{}/{action}",
            self.computer, self.bot
        )
    }

    /// A screen action under the bot's lease (`ensure`, `release`, `observe`, ...).
    pub async fn screen(&self, action: &str) -> Result<serde_json::Value, ClientError> {
        self.w
            .post(
                &self.path(action),
                serde_json::json!({ "lease": self.lease }),
            )
            .await
    }

    /// Starts (or keeps) the bot's desktop.
    pub async fn ensure(&self) -> Result<serde_json::Value, ClientError> {
        self.screen("ensure").await
    }

    /// Tears the bot's desktop down.
    pub async fn release(&self) -> Result<serde_json::Value, ClientError> {
        self.screen("release").await
    }

    /// Screenshots the desktop.
    pub async fn observe(&self) -> Result<serde_json::Value, ClientError> {
        self.screen("observe").await
    }

    /// Runs a batch of actions.
    pub async fn act(&self, actions: serde_json::Value) -> Result<serde_json::Value, ClientError> {
        self.w
            .post(
                &self.path("act"),
                serde_json::json!({ "lease": self.lease, "actions": actions }),
            )
            .await
    }

    /// Opens `url` in the bot's browser.
    pub async fn open(&self, url: &str) -> Result<serde_json::Value, ClientError> {
        self.act(serde_json::json!([{ "type": "open", "url": url }]))
            .await
    }

    /// browser_navigate in the bot's visible tab.
    pub async fn navigate(&self, url: &str) -> Result<serde_json::Value, ClientError> {
        self.w
            .post(
                &format!(
                    "/v1/computers/{}/browser/{}/navigate",
                    self.computer, self.bot
                ),
                serde_json::json!({ "lease": self.lease, "url": url }),
            )
            .await
    }

    /// Ends the run successfully: control revoked, the desktop kept (docs/screens.md#teardown).
    pub async fn end_run(&self) -> Result<()> {
        self.w
            .post(
                &format!(
                    "/v1/computers/{}/leases/{}/release",
                    self.computer, self.bot
                ),
                serde_json::json!({ "lease": self.lease, "outcome": "success" }),
            )
            .await?;
        Ok(())
    }

    /// A capability URL's path (`/cap/<sealed>`) for `policy`; the caller records it as a
    /// secret.
    pub async fn url(&self, policy: &str) -> Result<String> {
        self.w.screen_url(&self.computer, &self.bot, policy).await
    }
}

/// The ref of the element named `name` in a page snapshot (`browser/.../snapshot`).
pub fn ref_of(snapshot: &serde_json::Value, name: &str) -> Result<String> {
    snapshot["elements"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"].as_str() == Some(name))
        .and_then(|e| e["ref"].as_str())
        .map(String::from)
        .ok_or_else(|| anyhow!("no element named {name:?} in {snapshot}"))
}
