//! Talking to a Docker engine: where it listens ([`Endpoint`]), connecting, a deadline on every
//! call, and the translation of an engine's failures into [`ProviderError`] classes. What the
//! calls are for lives in the provider and the image module; which engine is asked, in `fleet`.

pub use super::tls::TlsFiles;
use crate::{ProviderError, ProviderRef};
use bollard::errors::Error as EngineError;
use bollard::{Docker, API_DEFAULT_VERSION};
use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// bollard's own per-request timeout, in seconds. Every call is also bounded by a tighter
/// deadline of ours; this one only has to outlast the longest (an image import).
const CLIENT_TIMEOUT_SECS: u64 = 30 * 60;

/// Where an engine's API listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A unix socket on this host (`unix:///var/run/docker.sock`).
    Unix(PathBuf),
    /// `host:port` over TLS (`tcp://host:port`): the engine's certificate must chain to `tls.ca`
    /// (the system's roots are not trusted for engines) and we present `tls.cert`. Plain TCP is
    /// never spoken: the Engine API is root on the engine's host.
    Tls { addr: String, tls: TlsFiles },
}

impl Endpoint {
    /// Parses `unix:///absolute/path` or `tcp://host:port`; a `tcp` engine needs `tls`, a unix
    /// one takes none. The message says what is wrong.
    pub fn parse(url: &str, tls: Option<TlsFiles>) -> Result<Self, String> {
        if let Some(path) = url.strip_prefix("unix://") {
            if !path.starts_with('/') {
                return Err(format!("{url}: a unix socket path must be absolute"));
            }
            if tls.is_some() {
                return Err(format!("{url}: a unix socket takes no TLS files"));
            }
            return Ok(Self::Unix(PathBuf::from(path)));
        }
        let Some(addr) = url.strip_prefix("tcp://") else {
            return Err(format!("{url}: expected unix:///path or tcp://host:port"));
        };
        let addr = addr.trim_end_matches('/');
        let port_ok = addr.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !port_ok || addr.contains(['/', '@', '?', '#']) {
            return Err(format!("{url}: expected tcp://host:port"));
        }
        let Some(tls) = tls else {
            return Err(format!(
                "{url}: a tcp engine needs TLS files (a CA and a client certificate and key)"
            ));
        };
        Ok(Self::Tls {
            addr: addr.to_string(),
            tls,
        })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unix(path) => write!(f, "unix://{}", path.display()),
            Self::Tls { addr, .. } => write!(f, "tcp://{addr}"),
        }
    }
}

/// A client for `endpoint`, not yet connected (its API version is agreed by [`negotiate`]).
/// Unreadable or malformed TLS files are `BadSpec`.
pub(crate) fn client(
    endpoint: &Endpoint,
    connect_timeout: Duration,
) -> Result<Docker, ProviderError> {
    match endpoint {
        Endpoint::Unix(socket) => {
            let path = socket.to_str().ok_or_else(|| {
                ProviderError::BadSpec(format!("engine socket path {socket:?} is not utf-8"))
            })?;
            Docker::connect_with_unix(path, CLIENT_TIMEOUT_SECS, API_DEFAULT_VERSION).map_err(|e| {
                unavailable(&format!("connect to the docker engine at {endpoint}"), &e)
            })
        }
        Endpoint::Tls { addr, tls } => {
            super::tls::client(addr, tls, connect_timeout, CLIENT_TIMEOUT_SECS)
        }
    }
}

/// Agrees on an API version with the engine behind `docker` (podman 4.3 speaks 1.41) within
/// `deadline`. An engine that is absent, refuses or hangs is `Unavailable`.
pub(crate) async fn negotiate(
    docker: Docker,
    deadline: Duration,
    context: &str,
) -> Result<Docker, ProviderError> {
    within(deadline, context, docker.negotiate_version())
        .await?
        .map_err(|e| unavailable(context, &e))
}

/// Connects to the engine on the unix socket `socket` and agrees on an API version, within
/// `deadline`. An engine that is absent, refuses or hangs is `Unavailable`.
pub async fn connect_engine(socket: &Path, deadline: Duration) -> Result<Docker, ProviderError> {
    let endpoint = Endpoint::Unix(socket.to_path_buf());
    let context = format!("connect to the docker engine at {}", socket.display());
    negotiate(client(&endpoint, deadline)?, deadline, &context).await
}

/// Whether a failed call got no answer from the engine at all (unreachable, refused, cut off),
/// as opposed to an answer that refused the request.
pub(crate) fn unanswered(e: &EngineError) -> bool {
    matches!(
        e,
        EngineError::HyperLegacyError { .. }
            | EngineError::HyperResponseError { .. }
            | EngineError::IOError { .. }
            | EngineError::SocketNotFoundError(_)
            | EngineError::RequestTimeoutError
    )
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
        let text = with_causes(e);
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

/// `e` and what caused it (a TLS refusal is two or three levels down in hyper's errors).
fn with_causes(e: &EngineError) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let c_text = c.to_string();
        if !text.contains(&c_text) {
            text = format!("{text}: {c_text}");
        }
        cause = c.source();
    }
    text
}

/// An engine error that leaves nothing to branch on: the engine is not usable right now.
pub(crate) fn unavailable(context: &str, e: &EngineError) -> ProviderError {
    match Failure::of(e) {
        Failure::Capacity(m) => ProviderError::Capacity(format!("{context}: {m}")),
        _ => ProviderError::Unavailable {
            context: context.to_string(),
            message: with_causes(e),
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
