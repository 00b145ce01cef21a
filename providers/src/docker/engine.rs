//! Talking to a Docker engine: connecting, a deadline on every call, and the translation of an
//! engine's failures into [`ProviderError`] classes. What the calls are for lives in the provider
//! and the image module.

use crate::{ProviderError, ProviderRef};
use bollard::errors::Error as EngineError;
use bollard::{Docker, API_DEFAULT_VERSION};
use std::future::Future;
use std::path::Path;
use std::time::Duration;

/// bollard's own per-request timeout, in seconds. Every call is also bounded by a tighter
/// deadline of ours; this one only has to outlast the longest (an image import).
const CLIENT_TIMEOUT_SECS: u64 = 30 * 60;

/// Connects to the engine on the unix socket `socket` and agrees on an API version (podman 4.3
/// speaks 1.41), within `deadline`. An engine that is absent, refuses or hangs is `Unavailable`.
pub async fn connect_engine(socket: &Path, deadline: Duration) -> Result<Docker, ProviderError> {
    let context = format!("connect to the docker engine at {}", socket.display());
    let path = socket.to_str().ok_or_else(|| {
        ProviderError::BadSpec(format!("engine socket path {socket:?} is not utf-8"))
    })?;
    let docker = Docker::connect_with_unix(path, CLIENT_TIMEOUT_SECS, API_DEFAULT_VERSION)
        .map_err(|e| unavailable(&context, &e))?;
    within(deadline, &context, docker.negotiate_version())
        .await?
        .map_err(|e| unavailable(&context, &e))
}

/// Runs one engine call under `deadline`: an engine that does not answer in time is
/// `Unavailable`, like one that cannot be reached.
pub(crate) async fn within<T>(
    deadline: Duration,
    context: &str,
    call: impl Future<Output = T>,
) -> Result<T, ProviderError> {
    tokio::time::timeout(deadline, call)
        .await
        .map_err(|_| ProviderError::Unavailable {
            context: context.to_string(),
            message: format!("the engine did not answer within {deadline:?}"),
        })
}

/// An engine's failure, sorted into the classes the control plane acts on.
#[derive(Debug)]
pub(crate) enum Failure {
    /// 404 or "no such ...": the object asked for is not on the engine.
    Missing(String),
    /// 409: the object is in a state that refuses the call (name taken, removal in progress).
    Conflict(String),
    /// A refusal of the request itself (other 4xx).
    Refused(String),
    /// Out of disk, quota or memory.
    Capacity(String),
    /// Unreachable, timed out, failed on the engine's side (5xx), or answered nonsense.
    Unavailable(String),
}

impl Failure {
    /// Sorts a bollard error. Capacity is recognised from the message whatever the status,
    /// since engines report a full disk as a 500 and a memory refusal as a 400.
    pub fn of(e: &EngineError) -> Self {
        let text = e.to_string();
        if mentions_capacity(&text) {
            return Self::Capacity(text);
        }
        match e {
            EngineError::DockerResponseServerError {
                status_code,
                message,
            } => {
                let message = message.clone();
                let lower = message.to_ascii_lowercase();
                match *status_code {
                    404 => Self::Missing(message),
                    409 => Self::Conflict(message),
                    // Podman answers some lookups of a removed object with a 500.
                    _ if lower.contains("no such container")
                        || lower.contains("no such volume")
                        || lower.contains("no such image") =>
                    {
                        Self::Missing(message)
                    }
                    400..=499 => Self::Refused(message),
                    _ => Self::Unavailable(format!("status {status_code}: {message}")),
                }
            }
            _ => Self::Unavailable(text),
        }
    }

    /// The error for a call on the container behind `r`: a missing container is gone.
    pub fn for_container(self, context: &str, r: &ProviderRef) -> ProviderError {
        match self {
            Self::Missing(_) => ProviderError::NotFound(r.clone()),
            other => other.into_error(context),
        }
    }

    /// The error for a call where nothing in particular can be gone: a missing object means the
    /// request named something that does not exist.
    pub fn into_error(self, context: &str) -> ProviderError {
        match self {
            Self::Missing(m) | Self::Refused(m) => {
                ProviderError::BadSpec(format!("{context}: {m}"))
            }
            Self::Capacity(m) => ProviderError::Capacity(format!("{context}: {m}")),
            Self::Conflict(message) | Self::Unavailable(message) => ProviderError::Unavailable {
                context: context.to_string(),
                message,
            },
        }
    }
}

fn mentions_capacity(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    // Not a bare "quota": "invalid CPU quota" is a bad request, not a full machine.
    [
        "no space left",
        "quota exceeded",
        "disk quota",
        "insufficient memory",
        "not enough memory",
        "cannot allocate memory",
        "out of memory",
        "disk full",
    ]
    .iter()
    .any(|needle| lower.contains(needle))
}

/// An engine error that leaves nothing to branch on: the engine is not usable right now.
pub(crate) fn unavailable(context: &str, e: &EngineError) -> ProviderError {
    match Failure::of(e) {
        Failure::Capacity(m) => ProviderError::Capacity(format!("{context}: {m}")),
        _ => ProviderError::Unavailable {
            context: context.to_string(),
            message: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorClass;

    fn server(status_code: u16, message: &str) -> EngineError {
        EngineError::DockerResponseServerError {
            status_code,
            message: message.into(),
        }
    }

    #[test]
    fn engine_failures_map_to_classes() {
        let r = ProviderRef("ab".repeat(32));
        let class = |e: EngineError| Failure::of(&e).for_container("op", &r).class();
        assert_eq!(class(server(404, "no such container")), ErrorClass::Gone);
        assert_eq!(class(server(500, "No such container: x")), ErrorClass::Gone);
        assert_eq!(class(server(400, "bad ulimit")), ErrorClass::Invalid);
        assert_eq!(class(server(500, "boom")), ErrorClass::Transient);
        assert_eq!(
            class(server(409, "removal in progress")),
            ErrorClass::Transient
        );
        assert_eq!(
            class(server(500, "write /x: no space left on device")),
            ErrorClass::Capacity
        );
        assert_eq!(
            class(server(400, "Minimum memory limit ... insufficient memory")),
            ErrorClass::Capacity
        );
        assert_eq!(
            class(server(500, "write: disk quota exceeded")),
            ErrorClass::Capacity
        );
        assert_eq!(
            class(server(400, "invalid CPU quota 5")),
            ErrorClass::Invalid
        );
        assert_eq!(
            class(EngineError::RequestTimeoutError),
            ErrorClass::Transient
        );
        assert_eq!(
            class(EngineError::SocketNotFoundError("/x".into())),
            ErrorClass::Transient
        );
        // Without a container to be gone, a missing object is a bad request.
        assert_eq!(
            Failure::of(&server(404, "no such image"))
                .into_error("op")
                .class(),
            ErrorClass::Invalid
        );
    }
}
