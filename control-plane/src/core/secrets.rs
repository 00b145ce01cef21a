//! Workspaces' secrets reaching their computers' egress gateways (docs/security.md#secrets):
//! set, rotated or deleted, a secret applies at once to every live team computer of its
//! workspace that runs fully contained on the local provider, and to each again when it boots
//! and when this control plane starts. Other computers get no secret, not even a placeholder:
//! nothing on their way out could substitute it.

use super::Core;
use crate::computers::{Computer, ComputerKind, ComputerState};
use crate::secrets::{SecretError, SecretRecord};
use providers::AnyProvider;
use tracing::warn;

impl Core {
    /// Sets (or rotates) a secret of `workspace` and applies it; whether it was new.
    pub async fn put_secret(
        &self,
        workspace: &str,
        name: &str,
        domains: &[String],
        header: Option<&str>,
        value: &str,
    ) -> Result<(SecretRecord, bool), SecretError> {
        let done = self
            .secrets
            .put(
                workspace,
                name,
                domains,
                header,
                value,
                crate::clock::now_ms(),
            )
            .await?;
        self.push_workspace_secrets(workspace).await;
        Ok(done)
    }

    /// Deletes a secret of `workspace`; its computers stop substituting it at once.
    pub async fn delete_secret(&self, workspace: &str, name: &str) -> Result<(), SecretError> {
        self.secrets.delete(workspace, name).await?;
        self.push_workspace_secrets(workspace).await;
        Ok(())
    }

    async fn push_workspace_secrets(&self, workspace: &str) {
        let computers = match self.computers.list().await {
            Ok(c) => c,
            Err(e) => {
                warn!(workspace, error = %e, "could not list computers to apply secrets to");
                return;
            }
        };
        for c in computers.iter().filter(
            |c| matches!(&c.kind, ComputerKind::Team { workspace: w } if w.as_str() == workspace),
        ) {
            self.push_secrets(c).await;
        }
    }

    /// Hands `c`'s workspace's secrets to its gateway (nothing for other computers). Whether it
    /// carries them.
    pub async fn push_secrets(&self, c: &Computer) -> bool {
        let ComputerKind::Team { workspace } = &c.kind else {
            return false;
        };
        if c.state == ComputerState::Destroyed {
            return false;
        }
        let Some(AnyProvider::Local(local)) = self.providers.get(&c.provider) else {
            return false;
        };
        match self.secrets.for_gateway(workspace.as_str()).await {
            Ok(secrets) => local.set_secrets(c.id.as_str(), secrets),
            Err(e) => {
                warn!(computer_id = %c.id.as_str(), error = %e, "could not read the computer's secrets");
                false
            }
        }
    }

    /// [`Core::push_secrets`] for every computer (at start: adopted computers get theirs back).
    pub async fn push_all_secrets(&self) {
        match self.computers.list().await {
            Ok(computers) => {
                for c in &computers {
                    self.push_secrets(c).await;
                }
            }
            Err(e) => warn!(error = %e, "could not list computers to apply secrets to"),
        }
    }
}
