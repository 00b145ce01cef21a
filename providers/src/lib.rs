//! Where computers run: the [`SandboxProvider`] trait and its backends.
//!
//! A provider owns a machine's lifecycle only: provision (or reconnect through an opaque
//! [`ProviderRef`]), prepare, stop, destroy. Everything that happens *inside* a computer (exec,
//! files, screens) is served by the guest agent over its tunnel, the same for every provider, so
//! adapters stay thin: they translate, with no retries, polling or policy of their own.
//!
//! This crate knows nothing of the control plane's internals: it receives a [`SandboxSpec`]
//! (what to start and how the guest reaches home) and returns references and states.

#![forbid(unsafe_code)]

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;

pub mod local;

pub use local::LocalProvider;

/// Opaque provider-specific reference to a machine. An acceleration path, not durable data: a
/// reference that no longer resolves means a replacement machine.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ProviderRef(pub String);

impl fmt::Debug for ProviderRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProviderRef({})", self.0)
    }
}

impl fmt::Display for ProviderRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A secret whose `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// What a provider needs to start a computer's guest.
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    /// The control plane's id for the computer.
    pub computer_id: String,
    /// The computer's home key (`team-<workspace>` or a bot id).
    pub home_key: String,
    /// How the guest dials home.
    pub guest: GuestEnrollment,
}

/// The guest's enrollment: where to dial, which certificate to pin, which token to present.
#[derive(Debug, Clone)]
pub struct GuestEnrollment {
    pub control_addr: SocketAddr,
    pub cert_sha256: String,
    pub token: Secret,
}

/// A provider's view of a machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MachineState {
    Running,
    Stopped,
    /// The machine no longer exists: provision a replacement.
    Gone,
}

/// Why a provider operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("machine {0} not found")]
    NotFound(ProviderRef),
    #[error("provider reference {0:?} is malformed")]
    BadRef(String),
    #[error("invalid sandbox spec: {0}")]
    BadSpec(String),
    #[error("provider i/o failed: {context}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl ProviderError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

/// A place computers run. Small, async, idempotent.
pub trait SandboxProvider: Send + Sync {
    /// The provider kind stored beside references (`local`, `docker`, ...).
    fn kind(&self) -> &'static str;

    /// Whether a running machine costs money while it runs (a metered cloud sandbox). The
    /// control plane's idle policy reads it: a takeover request keeps a non-billing machine
    /// awake for a fixed window, while on a billed one it only restarts the idle timer
    /// (contracts.md §8).
    fn bills_while_running(&self) -> bool;

    /// Creates a machine for `spec` and starts its guest, which dials home on its own.
    fn provision(
        &self,
        spec: &SandboxSpec,
    ) -> impl Future<Output = Result<ProviderRef, ProviderError>> + Send;

    /// Makes sure the machine behind `r` runs its guest (starting it again if stopped).
    /// Idempotent. Returns the (possibly new) reference; `NotFound` means provision anew.
    fn prepare(
        &self,
        r: &ProviderRef,
        spec: &SandboxSpec,
    ) -> impl Future<Output = Result<ProviderRef, ProviderError>> + Send;

    /// The machine's state as the provider sees it.
    fn state(
        &self,
        r: &ProviderRef,
    ) -> impl Future<Output = Result<MachineState, ProviderError>> + Send;

    /// Stops the machine, keeping its home. Stopping a stopped machine succeeds.
    fn stop(&self, r: &ProviderRef) -> impl Future<Output = Result<(), ProviderError>> + Send;

    /// Destroys the machine. Idempotent: destroying a machine that is already gone succeeds.
    fn destroy(&self, r: &ProviderRef) -> impl Future<Output = Result<(), ProviderError>> + Send;
}

/// The backends, picked at run time.
pub enum AnyProvider {
    Local(LocalProvider),
}

macro_rules! dispatch {
    ($self:ident, $p:ident => $e:expr) => {
        match $self {
            AnyProvider::Local($p) => $e,
        }
    };
}

impl SandboxProvider for AnyProvider {
    fn kind(&self) -> &'static str {
        dispatch!(self, p => p.kind())
    }

    fn bills_while_running(&self) -> bool {
        dispatch!(self, p => p.bills_while_running())
    }

    async fn provision(&self, spec: &SandboxSpec) -> Result<ProviderRef, ProviderError> {
        dispatch!(self, p => p.provision(spec).await)
    }

    async fn prepare(
        &self,
        r: &ProviderRef,
        spec: &SandboxSpec,
    ) -> Result<ProviderRef, ProviderError> {
        dispatch!(self, p => p.prepare(r, spec).await)
    }

    async fn state(&self, r: &ProviderRef) -> Result<MachineState, ProviderError> {
        dispatch!(self, p => p.state(r).await)
    }

    async fn stop(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        dispatch!(self, p => p.stop(r).await)
    }

    async fn destroy(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        dispatch!(self, p => p.destroy(r).await)
    }
}
