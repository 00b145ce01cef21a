//! The engines one docker provider runs computers on: each engine's name, client (its API
//! version agreed on first use) and whether it answers; which engine a reference names; and
//! where a new computer goes (the engine a caller names, else the one with the fewest Rakazo
//! computers among those that answer).
//!
//! An engine that stops answering is not written off at once: a call on one of its computers is
//! `Unavailable` (a restart, a network blip) until it has not answered for `gone_after`, then
//! its computers count as gone, so the core replaces them elsewhere from their checkpoints. An
//! engine that is no longer configured has no computers at all.

use super::engine::{client, negotiate, unanswered, within, Endpoint, Failure, TlsFiles};
use super::{LABEL_COMPUTER, LABEL_MANAGED};
use crate::{ProviderError, ProviderRef};
use bollard::errors::Error as EngineError;
use bollard::query_parameters::ListVolumesOptionsBuilder;
use bollard::Docker;
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::OnceCell;
use tokio::time::Instant;
use tracing::warn;

/// The engine `--docker-socket` configures, and the one a reference without an engine (written
/// before there were several) means.
pub const DEFAULT_ENGINE: &str = "default";

/// One engine of the provider: a name (in references and `--docker-engine NAME=…`) and where
/// it listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    pub name: String,
    pub endpoint: Endpoint,
}

impl EngineConfig {
    /// The engine on the unix socket `socket`.
    pub fn unix(name: impl Into<String>, socket: impl Into<PathBuf>) -> Self {
        Self {
            name: name.into(),
            endpoint: Endpoint::Unix(socket.into()),
        }
    }

    /// Parses `NAME=unix:///path` or `NAME=tcp://host:port`; `tls` finds the TLS files of a
    /// name. The message says what is wrong.
    pub fn parse(spec: &str, tls: impl Fn(&str) -> Option<TlsFiles>) -> Result<Self, String> {
        let Some((name, url)) = spec.trim().split_once('=') else {
            return Err(format!(
                "{spec:?}: expected NAME=unix:///path or NAME=tcp://host:port"
            ));
        };
        if !valid_engine_name(name) {
            return Err(format!(
                "engine name {name:?}: use 1 to 63 of a-z, 0-9, '-', '_', '.', starting with a \
                 letter or digit"
            ));
        }
        Ok(Self {
            name: name.to_string(),
            endpoint: Endpoint::parse(url, tls(name))?,
        })
    }
}

/// An engine name: `[a-z0-9][a-z0-9_.-]*`, at most 63 characters (it is part of a reference).
pub fn valid_engine_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'))
}

/// The reference of container `id` on engine `engine`: `<engine>/<container id>`.
pub fn engine_ref(engine: &str, id: &str) -> ProviderRef {
    ProviderRef(format!("{engine}/{id}"))
}

/// The engine name and container id in a reference; a bare container id is on
/// [`DEFAULT_ENGINE`]. The id is 12 to 64 lowercase hex digits.
pub(crate) fn split_ref(r: &ProviderRef) -> Result<(&str, &str), ProviderError> {
    let (engine, id) = r.0.split_once('/').unwrap_or((DEFAULT_ENGINE, &r.0));
    if is_container_id(id) && valid_engine_name(engine) {
        Ok((engine, id))
    } else {
        Err(ProviderError::BadRef(r.0.clone()))
    }
}

/// A container id: 12 to 64 lowercase hex digits.
pub(crate) fn is_container_id(id: &str) -> bool {
    (12..=64).contains(&id.len()) && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// One engine at run time.
pub(crate) struct Engine {
    pub name: String,
    pub endpoint: Endpoint,
    /// The client before its API version is agreed; `client` after.
    raw: Docker,
    client: OnceCell<Docker>,
    /// Since when no call has been answered (`None`: the last call was).
    silent_since: Mutex<Option<Instant>>,
    /// Whether the loss of this engine was logged in this outage.
    loss_logged: AtomicBool,
    /// Provisions placed here that may not be counted by the engine yet.
    placing: AtomicUsize,
    /// Serialises loading the image onto this engine.
    pub image_load: tokio::sync::Mutex<()>,
}

impl Engine {
    fn new(config: &EngineConfig, connect_timeout: Duration) -> Result<Self, ProviderError> {
        Ok(Self {
            name: config.name.clone(),
            raw: client(&config.endpoint, connect_timeout)?,
            endpoint: config.endpoint.clone(),
            client: OnceCell::new(),
            silent_since: Mutex::new(None),
            loss_logged: AtomicBool::new(false),
            placing: AtomicUsize::new(0),
            image_load: tokio::sync::Mutex::new(()),
        })
    }

    /// The client, with the API version agreed on first use (within `deadline`).
    pub async fn docker(&self, deadline: Duration) -> Result<&Docker, ProviderError> {
        self.client
            .get_or_try_init(|| async {
                let context = format!(
                    "connect to docker engine {} at {}",
                    self.name, self.endpoint
                );
                let agreed = negotiate(self.raw.clone(), deadline, &context).await;
                self.heard(agreed.is_ok());
                agreed
            })
            .await
    }

    /// The client as it is now (for tests and image tools): agreed if it has been.
    pub fn client_now(&self) -> &Docker {
        self.client.get().unwrap_or(&self.raw)
    }

    /// Runs one call `f` on this engine under `deadline`, noting whether the engine answered.
    /// `Err` is the engine not answering in time (or not at all when connecting); the engine's
    /// own answer, success or refusal, is the inner result.
    pub async fn call<'a, T, F>(
        &'a self,
        deadline: Duration,
        context: &str,
        f: impl FnOnce(&'a Docker) -> F,
    ) -> Result<Result<T, EngineError>, ProviderError>
    where
        F: Future<Output = Result<T, EngineError>> + 'a,
    {
        let docker = self.docker(deadline).await?;
        let result = within(deadline, context, f(docker)).await;
        self.heard(match &result {
            Ok(Err(e)) => !unanswered(e),
            Ok(Ok(_)) => true,
            Err(_) => false,
        });
        result
    }

    fn heard(&self, answered: bool) {
        let mut since = self
            .silent_since
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if answered {
            *since = None;
            self.loss_logged.store(false, Ordering::Relaxed);
        } else if since.is_none() {
            *since = Some(Instant::now());
        }
    }

    /// Whether the last call got no answer.
    pub fn silent(&self) -> bool {
        self.silent_since
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .is_some()
    }

    /// Whether the engine has answered nothing for `gone_after` or longer: its computers are
    /// gone. Logged once an outage.
    pub fn lost(&self, gone_after: Duration) -> bool {
        let since = *self
            .silent_since
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(since) = since else {
            return false;
        };
        let silent = since.elapsed();
        let lost = silent >= gone_after;
        if lost && !self.loss_logged.swap(true, Ordering::Relaxed) {
            warn!(
                engine = %self.name,
                endpoint = %self.endpoint,
                silent_ms = silent.as_millis() as u64,
                "docker engine lost: it has not answered, its computers count as gone"
            );
        }
        lost
    }

    /// The names of Rakazo home volumes on the engine, those of `computer` only if named.
    pub async fn homes(
        &self,
        deadline: Duration,
        computer: Option<&str>,
    ) -> Result<Vec<String>, ProviderError> {
        let context = format!("list the rakazo volumes on docker engine {}", self.name);
        // One label in the filter: podman ORs several where Docker ANDs them.
        let filters = HashMap::from([("label", vec![format!("{LABEL_MANAGED}=true")])]);
        let options = ListVolumesOptionsBuilder::default()
            .filters(&filters)
            .build();
        let listed = self
            .call(deadline, &context, |d| d.list_volumes(Some(options)))
            .await?
            .map_err(|e| Failure::of(&e).into_error(&context))?;
        Ok(listed
            .volumes
            .unwrap_or_default()
            .into_iter()
            .filter(|v| v.labels.get(LABEL_MANAGED).map(String::as_str) == Some("true"))
            .filter(|v| {
                computer.is_none_or(|c| v.labels.get(LABEL_COMPUTER).map(String::as_str) == Some(c))
            })
            .map(|v| v.name)
            .collect())
    }

    /// The number of Rakazo computers on the engine, counted by their home volumes (one per
    /// computer whatever its container's state: a stopped computer comes back where it is; and
    /// podman's container list has states bollard cannot read), plus provisions placed here and
    /// not yet counted.
    async fn computers(&self, deadline: Duration) -> Result<usize, ProviderError> {
        let homes = self.homes(deadline, None).await?;
        Ok(homes.len() + self.placing.load(Ordering::Relaxed))
    }
}

/// A placement in progress: counted on its engine until dropped.
pub(crate) struct Placed<'a>(pub &'a Engine);

impl Drop for Placed<'_> {
    fn drop(&mut self) {
        self.0.placing.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Every engine of a provider, in configured order.
pub(crate) struct Fleet {
    engines: Vec<Engine>,
    gone_after: Duration,
}

impl Fleet {
    /// Clients for every engine; nothing is dialled. Duplicate names and unreadable TLS files
    /// are `BadSpec`.
    pub fn new(
        configs: &[EngineConfig],
        connect_timeout: Duration,
        gone_after: Duration,
    ) -> Result<Self, ProviderError> {
        if configs.is_empty() {
            return Err(ProviderError::BadSpec(
                "no docker engine is configured".into(),
            ));
        }
        let mut engines: Vec<Engine> = Vec::with_capacity(configs.len());
        for c in configs {
            if !valid_engine_name(&c.name) {
                return Err(ProviderError::BadSpec(format!(
                    "docker engine name {:?} is not usable in a reference",
                    c.name
                )));
            }
            if engines.iter().any(|e| e.name == c.name) {
                return Err(ProviderError::BadSpec(format!(
                    "two docker engines are named {}",
                    c.name
                )));
            }
            engines.push(Engine::new(c, connect_timeout)?);
        }
        Ok(Self {
            engines,
            gone_after,
        })
    }

    pub fn engines(&self) -> impl Iterator<Item = &Engine> {
        self.engines.iter()
    }

    pub fn len(&self) -> usize {
        self.engines.len()
    }

    pub fn first(&self) -> &Engine {
        &self.engines[0]
    }

    pub fn get(&self, name: &str) -> Option<&Engine> {
        self.engines.iter().find(|e| e.name == name)
    }

    /// The refusal of an engine name that is not configured; it lists the names that are.
    pub fn unknown(&self, name: &str) -> ProviderError {
        let names: Vec<&str> = self.engines.iter().map(|e| e.name.as_str()).collect();
        ProviderError::BadSpec(format!(
            "there is no docker engine named {name} (configured: {})",
            names.join(", ")
        ))
    }

    /// Whether `engine` has gone silent for long enough that its computers are gone.
    pub fn lost(&self, engine: &Engine) -> bool {
        engine.lost(self.gone_after)
    }

    /// Agrees on API versions with every engine at once. Fails only if no engine answers (with
    /// the first engine's error); the silent ones are logged and tried again on use.
    pub async fn connect(&self, deadline: Duration) -> Result<(), ProviderError> {
        let results =
            futures_util::future::join_all(self.engines.iter().map(|e| e.docker(deadline))).await;
        if results.iter().any(Result::is_ok) {
            for (e, r) in self.engines.iter().zip(&results) {
                if let Err(err) = r {
                    warn!(engine = %e.name, endpoint = %e.endpoint, error = %err,
                          "docker engine did not answer: computers go to the others until it does");
                }
            }
            return Ok(());
        }
        match results.into_iter().next() {
            Some(Err(e)) => Err(e),
            _ => Ok(()),
        }
    }

    /// The engine a new computer goes to: `wanted` if named (it must answer), else the one
    /// with the fewest Rakazo computers among those that answer (ties: the first configured).
    pub async fn place(
        &self,
        wanted: Option<&str>,
        deadline: Duration,
    ) -> Result<Placed<'_>, ProviderError> {
        let chosen = match wanted {
            Some(name) => {
                let e = self.get(name).ok_or_else(|| self.unknown(name))?;
                e.computers(deadline).await?;
                e
            }
            None => {
                let counts = futures_util::future::join_all(
                    self.engines.iter().map(|e| e.computers(deadline)),
                )
                .await;
                let mut best: Option<(usize, &Engine)> = None;
                let mut silent = Vec::new();
                for (e, count) in self.engines.iter().zip(counts) {
                    match count {
                        Ok(n) if best.is_none_or(|(m, _)| n < m) => best = Some((n, e)),
                        Ok(_) => {}
                        Err(err) => silent.push(format!("{}: {err}", e.name)),
                    }
                }
                match best {
                    Some((_, e)) => e,
                    None => {
                        return Err(ProviderError::Unavailable {
                            context: "place a computer on a docker engine".into(),
                            message: format!("no engine answered ({})", silent.join("; ")),
                        })
                    }
                }
            }
        };
        chosen.placing.fetch_add(1, Ordering::Relaxed);
        Ok(Placed(chosen))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_name_their_engine_and_bare_ids_the_default_one() {
        let id = "ab".repeat(32);
        assert_eq!(engine_ref("b", &id).0, format!("b/{id}"));
        assert_eq!(
            split_ref(&ProviderRef(format!("b/{id}"))).unwrap(),
            ("b", id.as_str())
        );
        assert_eq!(
            split_ref(&ProviderRef(id.clone())).unwrap(),
            (DEFAULT_ENGINE, id.as_str())
        );
        for bad in [
            format!("B/{id}"),
            format!("/{id}"),
            format!("b/c/{id}"),
            "b/0123".to_string(),
            format!("../{id}"),
        ] {
            assert!(
                matches!(
                    split_ref(&ProviderRef(bad.clone())),
                    Err(ProviderError::BadRef(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn engines_are_named_unix_sockets_or_tls_addresses() {
        let tls = |name: &str| {
            (name == "remote").then(|| TlsFiles {
                ca: "/c/ca.pem".into(),
                cert: "/c/cert.pem".into(),
                key: "/c/key.pem".into(),
            })
        };
        assert_eq!(
            EngineConfig::parse("a=unix:///run/a.sock", tls).unwrap(),
            EngineConfig::unix("a", "/run/a.sock")
        );
        let remote = EngineConfig::parse("remote=tcp://10.0.0.5:2376", tls).unwrap();
        assert_eq!(remote.endpoint.to_string(), "tcp://10.0.0.5:2376");
        assert!(
            matches!(remote.endpoint, Endpoint::Tls { ref addr, .. } if addr == "10.0.0.5:2376")
        );
        for (bad, says) in [
            ("a", "expected NAME="),
            ("A=unix:///x", "engine name"),
            ("a/b=unix:///x", "engine name"),
            ("a=unix://relative", "absolute"),
            ("a=tcp://10.0.0.5:2376", "needs TLS files"),
            ("remote=tcp://10.0.0.5", "host:port"),
            ("remote=http://10.0.0.5:2375", "expected unix"),
            ("remote=unix:///x", "no TLS files"),
        ] {
            let e = EngineConfig::parse(bad, tls).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
