//! The `docker` provider: one container per computer on a Docker Engine API (podman's
//! Docker-compatible service in tests). Being written; see issue 10.

use crate::{MachineState, ProviderError, ProviderRef, SandboxProvider, SandboxSpec};

/// Runs computers as containers on a Docker engine.
pub struct DockerProvider {
    _private: (),
}

impl SandboxProvider for DockerProvider {
    fn kind(&self) -> &'static str {
        "docker"
    }

    fn bills_while_running(&self) -> bool {
        false
    }

    async fn provision(&self, _spec: &SandboxSpec) -> Result<ProviderRef, ProviderError> {
        Err(ProviderError::BadSpec("docker provider not implemented".into()))
    }

    async fn prepare(
        &self,
        r: &ProviderRef,
        _spec: &SandboxSpec,
    ) -> Result<ProviderRef, ProviderError> {
        Err(ProviderError::NotFound(r.clone()))
    }

    async fn state(&self, _r: &ProviderRef) -> Result<MachineState, ProviderError> {
        Ok(MachineState::Gone)
    }

    async fn stop(&self, _r: &ProviderRef) -> Result<(), ProviderError> {
        Ok(())
    }

    async fn destroy(&self, _r: &ProviderRef) -> Result<(), ProviderError> {
        Ok(())
    }
}
