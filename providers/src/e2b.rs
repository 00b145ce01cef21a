//! The `e2b` provider: one E2B sandbox per computer, driven through E2B's public REST API
//! (`spec/openapi.yml` of e2b-dev/E2B, version 0.1.0) and the in-sandbox daemon (`envd`).
//!
//! - provision: `POST /sandboxes` (template, time to live, `autoPause` with a filesystem-only
//!   snapshot, metadata naming the computer, non-secret env vars); then the guest is installed
//!   and started through envd. A sandbox whose guest cannot be started is killed at once: it
//!   bills.
//! - the guest: the static binary is uploaded to [`GUEST_PATH`] and the enrollment token to
//!   [`TOKEN_PATH`] (0600 in a 0700 directory, root's; never in the environment or argv), then
//!   the guest starts as root with the control address and the token's path and drops to the
//!   sandbox's user (`run_as`) for good. Its home is [`E2bConfig::home`]
//!   (`/home/user/rakazo-home`). It is tagged [`GUEST_TAG`], so envd's process list says
//!   whether it runs.
//! - prepare: `POST /sandboxes/{id}/connect` (resumes a paused sandbox), then the guest is
//!   started unless it runs.
//! - stop: SIGTERM to the guest, up to the stop grace for it to end, then
//!   `POST /sandboxes/{id}/pause` with `memory: false`: the filesystem is kept, processes are
//!   not, so a start boots a fresh guest with a fresh token.
//! - destroy: `DELETE /sandboxes/{id}`.
//! - keepalive: while in use, the sandbox's timeout is set again every third of it
//!   (`keepalive`).
//!
//! A sandbox E2B no longer knows (404) is gone: the control plane provisions a replacement
//! and restores its home from the last checkpoint. The reference is the sandbox id. The API
//! key goes in `X-API-Key` only; it is never logged (`Secret`).

mod envd;
mod keepalive;

use crate::remote::http::{BaseUrl, Call, Http};
use crate::remote::{guest_env, sandbox_id};
use crate::{MachineState, ProviderError, ProviderRef, SandboxProvider, SandboxSpec, Secret};
use bytes::Bytes;
use envd::{Envd, Process, ENVD_PORT};
use hyper::header::HeaderName;
use hyper::{Method, StatusCode};
use keepalive::Keepalives;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use tracing::{info, warn};

/// Where the guest binary is installed in a sandbox.
pub const GUEST_PATH: &str = "/usr/local/bin/rakazo-guest";
/// The directory of the enrollment token (0700, root's).
pub const TOKEN_DIR: &str = "/etc/rakazo";
/// Where the enrollment token is uploaded before every start (0600, root's).
pub const TOKEN_PATH: &str = "/etc/rakazo/enroll-token";
/// The envd process tag of the guest.
pub const GUEST_TAG: &str = "rakazo-guest";
/// Metadata key naming the computer a sandbox belongs to.
pub const META_COMPUTER: &str = "rakazo.computer";
/// Metadata key naming the home key of the computer.
pub const META_HOME_KEY: &str = "rakazo.home-key";

/// How the e2b provider reaches E2B and what it runs there.
#[derive(Debug, Clone)]
pub struct E2bConfig {
    /// The API, `https://api.e2b.app` by default.
    pub api_url: BaseUrl,
    /// Sent as `X-API-Key`.
    pub api_key: Secret,
    /// The template every sandbox starts from (it must carry what the guest needs: Xvnc
    /// (tigervnc-standalone-server) and Chromium).
    pub template: String,
    /// The sandboxes' domain: envd of sandbox `<id>` is `https://49983-<id>.<domain>`, unless
    /// the API names another domain for it or `sandbox_url` is set.
    pub domain: String,
    /// One URL for every sandbox's envd, the request routed by its `E2b-Sandbox-Id` header
    /// (E2B's `E2B_SANDBOX_URL`).
    pub sandbox_url: Option<BaseUrl>,
    /// The static guest uploaded into every sandbox.
    pub guest_bin: PathBuf,
    /// Extra environment for guests (log filter and the like); never secrets.
    pub guest_env: Vec<(String, String)>,
    /// The envd user that installs and starts the guest: `root`, so the token can be root's.
    pub user: String,
    /// The user the guest drops to after reading its token (E2B's `user`); `None` keeps it
    /// the envd user.
    pub run_as: Option<String>,
    /// The computer's home in the sandbox.
    pub home: String,
    /// The sandbox's time to live, set again every third of it while the computer is in use.
    pub timeout: Duration,
    /// How long a stopping guest gets after SIGTERM before the sandbox is paused.
    pub stop_grace: Duration,
    /// Deadline of one API or envd call.
    pub call_timeout: Duration,
    /// Deadline of the guest binary's upload.
    pub upload_timeout: Duration,
}

impl E2bConfig {
    /// The defaults for `template` with `api_key`: E2B's public API and domain, the guest
    /// starting as root and dropping to `user`, home `/home/user/rakazo-home`, a 5-minute time
    /// to live, 20 s stop grace, 60 s calls and 5-minute uploads.
    pub fn new(
        api_key: Secret,
        template: impl Into<String>,
        guest_bin: impl Into<PathBuf>,
    ) -> Self {
        Self {
            api_url: BaseUrl::parse("https://api.e2b.app").expect("a valid URL"),
            api_key,
            template: template.into(),
            domain: "e2b.app".into(),
            sandbox_url: None,
            guest_bin: guest_bin.into(),
            guest_env: Vec::new(),
            user: "root".into(),
            run_as: Some("user".into()),
            home: "/home/user/rakazo-home".into(),
            timeout: Duration::from_secs(300),
            stop_grace: Duration::from_secs(20),
            call_timeout: Duration::from_secs(60),
            upload_timeout: Duration::from_secs(300),
        }
    }
}

/// Runs computers as E2B sandboxes.
pub struct E2bProvider {
    config: E2bConfig,
    http: Http,
    keepalives: Keepalives,
}

/// What the API says of a sandbox (`Sandbox` and `SandboxDetail`).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct SandboxInfo {
    #[serde(rename = "sandboxID")]
    sandbox_id: String,
    #[serde(default)]
    envd_access_token: Option<String>,
    #[serde(default)]
    domain: Option<String>,
    /// `running` or `paused`; only in `SandboxDetail`.
    #[serde(default)]
    state: Option<String>,
}

fn valid_domain(d: &str) -> bool {
    !d.is_empty()
        && d.len() <= 253
        && d.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.'))
}

impl E2bProvider {
    /// An adapter with `config`; fails if an https URL has no system CA certificates to
    /// check it against.
    pub fn new(config: E2bConfig) -> Result<Self, ProviderError> {
        if !valid_domain(&config.domain) {
            return Err(ProviderError::BadSpec(format!(
                "E2B domain {:?} is not a domain name",
                config.domain
            )));
        }
        let need_roots =
            config.api_url.is_https() || config.sandbox_url.as_ref().is_none_or(BaseUrl::is_https);
        Ok(Self {
            http: Http::new(need_roots)?,
            config,
            keepalives: Keepalives::default(),
        })
    }

    /// The provider's configuration.
    pub fn config(&self) -> &E2bConfig {
        &self.config
    }

    fn api_call(&self, method: Method, path: &str, context: String) -> Result<Call, ProviderError> {
        api_call(&self.config, method, path, context)
    }

    /// `GET /sandboxes/{id}`; a sandbox E2B does not know is `NotFound`.
    async fn detail(&self, r: &ProviderRef) -> Result<SandboxInfo, ProviderError> {
        let id = sandbox_id(r)?;
        let context = format!("look up E2B sandbox {id}");
        let call = self.api_call(Method::GET, &format!("/sandboxes/{id}"), context)?;
        self.http.ok_json(call, Some(r)).await
    }

    /// The envd of the sandbox `info` describes.
    fn envd<'a>(&'a self, info: &'a SandboxInfo) -> Result<Envd<'a>, ProviderError> {
        let base = match &self.config.sandbox_url {
            Some(url) => url.clone(),
            None => {
                let domain = info
                    .domain
                    .as_deref()
                    .filter(|d| valid_domain(d))
                    .unwrap_or(&self.config.domain);
                BaseUrl::parse(&format!("https://{ENVD_PORT}-{}.{domain}", info.sandbox_id))
                    .map_err(|e| ProviderError::Unavailable {
                        context: format!("reach E2B sandbox {}", info.sandbox_id),
                        message: e,
                    })?
            }
        };
        Ok(Envd {
            http: &self.http,
            base,
            sandbox_id: &info.sandbox_id,
            access_token: info.envd_access_token.clone().map(Secret),
            call_timeout: self.config.call_timeout,
        })
    }

    /// Installs the guest and its token and starts it.
    async fn boot_guest(&self, envd: &Envd<'_>, spec: &SandboxSpec) -> Result<(), ProviderError> {
        let c = &self.config;
        let root = c.user.as_str();
        let guest = tokio::fs::read(&c.guest_bin).await.map_err(|e| {
            ProviderError::io(format!("read the guest {}", c.guest_bin.display()), e)
        })?;
        envd.upload(root, GUEST_PATH, Bytes::from(guest), c.upload_timeout)
            .await?;
        envd.run(root, "chmod", &["0755", GUEST_PATH]).await?;
        let owner = c.run_as.as_deref().unwrap_or(root);
        envd.run(owner, "mkdir", &["-p", "-m", "0700", &c.home])
            .await?;
        // The directory first: the token is never readable by anyone else, even for a moment.
        envd.run(root, "mkdir", &["-p", "-m", "0700", TOKEN_DIR])
            .await?;
        envd.upload(
            root,
            TOKEN_PATH,
            Bytes::from(spec.guest.token.0.clone()),
            c.call_timeout,
        )
        .await?;
        envd.run(root, "chmod", &["0600", TOKEN_PATH]).await?;
        let mut envs = guest_env(spec, &c.home, TOKEN_PATH, &c.guest_env);
        if let Some(user) = &c.run_as {
            envs.insert("RAKAZO_RUN_AS".into(), user.clone());
        }
        let pid = envd
            .start(&Process {
                user: root,
                cmd: GUEST_PATH,
                args: Vec::new(),
                envs,
                cwd: Some(&c.home),
                tag: Some(GUEST_TAG),
            })
            .await?;
        info!(computer_id = %spec.computer_id, sandbox = %envd.sandbox_id, pid, "E2B guest started");
        Ok(())
    }

    /// Keeps the sandbox alive while its computer is in use.
    fn keep_alive(&self, id: &str) {
        let config = self.config.clone();
        let sandbox = id.to_string();
        let timeout = self.config.timeout;
        self.keepalives.start(
            id,
            self.http.clone(),
            (timeout / 3).max(Duration::from_secs(1)),
            move || {
                Ok(api_call(
                    &config,
                    Method::POST,
                    &format!("/sandboxes/{sandbox}/timeout"),
                    format!("refresh the timeout of E2B sandbox {sandbox}"),
                )?
                .json(&serde_json::json!({ "timeout": timeout.as_secs() })))
            },
        );
    }

    /// `DELETE /sandboxes/{id}`; one already gone is fine.
    async fn kill(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        let id = sandbox_id(r)?;
        self.keepalives.stop(id);
        let context = format!("kill E2B sandbox {id}");
        let call = self.api_call(Method::DELETE, &format!("/sandboxes/{id}"), context)?;
        match self.http.ok(call, Some(r)).await {
            Ok(_) | Err(ProviderError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Waits up to the stop grace for the guest to end after its SIGTERM.
    async fn wait_guest_gone(&self, envd: &Envd<'_>) -> Result<bool, ProviderError> {
        let deadline = tokio::time::Instant::now() + self.config.stop_grace;
        loop {
            if !envd.tagged_running(&self.config.user, GUEST_TAG).await? {
                return Ok(true);
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn api_call(
    config: &E2bConfig,
    method: Method,
    path: &str,
    context: String,
) -> Result<Call, ProviderError> {
    Call::new(
        method,
        config.api_url.join(path),
        config.call_timeout,
        context,
    )
    .secret_header(HeaderName::from_static("x-api-key"), &config.api_key.0)
}

impl SandboxProvider for E2bProvider {
    fn kind(&self) -> &'static str {
        "e2b"
    }

    /// E2B meters running sandboxes.
    fn bills_while_running(&self) -> bool {
        true
    }

    async fn provision(&self, spec: &SandboxSpec) -> Result<ProviderRef, ProviderError> {
        crate::check_spec_placement(self, spec)?;
        // A template fixes the machine's resources: limits are checked, not applied.
        spec.limits.validate().map_err(ProviderError::BadSpec)?;
        let c = &self.config;
        let context = format!("create an E2B sandbox for computer {}", spec.computer_id);
        let env: BTreeMap<&str, &str> = c
            .guest_env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let body = serde_json::json!({
            "templateID": c.template,
            "timeout": c.timeout.as_secs(),
            "autoPause": true,
            "autoPauseMemory": false,
            "secure": true,
            "metadata": {
                META_COMPUTER: spec.computer_id,
                META_HOME_KEY: spec.home_key,
            },
            "envVars": env,
        });
        let call = self
            .api_call(Method::POST, "/sandboxes", context.clone())?
            .json(&body);
        let info: SandboxInfo = self.http.ok_json(call, None).await?;
        let r = ProviderRef(info.sandbox_id.clone());
        if sandbox_id(&r).is_err() {
            return Err(ProviderError::Unavailable {
                context,
                message: format!("E2B answered a malformed sandbox id {:?}", info.sandbox_id),
            });
        }
        let booted = match self.envd(&info) {
            Ok(envd) => self.boot_guest(&envd, spec).await,
            Err(e) => Err(e),
        };
        if let Err(e) = booted {
            // A sandbox without its guest is of no use and bills: it goes at once.
            if let Err(k) = self.kill(&r).await {
                warn!(sandbox = %r, error = %k, "could not kill an E2B sandbox whose guest did not start");
            }
            return Err(e);
        }
        self.keep_alive(&r.0);
        info!(computer_id = %spec.computer_id, sandbox = %r, "E2B computer provisioned");
        Ok(r)
    }

    async fn prepare(
        &self,
        r: &ProviderRef,
        spec: &SandboxSpec,
    ) -> Result<ProviderRef, ProviderError> {
        let id = sandbox_id(r)?;
        let call = self
            .api_call(
                Method::POST,
                &format!("/sandboxes/{id}/connect"),
                format!("connect to E2B sandbox {id}"),
            )?
            .json(&serde_json::json!({ "timeout": self.config.timeout.as_secs() }));
        let info: SandboxInfo = self.http.ok_json(call, Some(r)).await?;
        let envd = self.envd(&info)?;
        if !envd.tagged_running(&self.config.user, GUEST_TAG).await? {
            self.boot_guest(&envd, spec).await?;
        }
        self.keep_alive(id);
        Ok(r.clone())
    }

    async fn state(&self, r: &ProviderRef) -> Result<MachineState, ProviderError> {
        let info = match self.detail(r).await {
            Ok(info) => info,
            Err(ProviderError::NotFound(_)) => return Ok(MachineState::Gone),
            Err(e) => return Err(e),
        };
        if info.state.as_deref() != Some("running") {
            return Ok(MachineState::Stopped);
        }
        // A running sandbox is a running computer only while its guest runs.
        if self
            .envd(&info)?
            .tagged_running(&self.config.user, GUEST_TAG)
            .await?
        {
            // In use (after a control-plane restart too): keep it alive.
            self.keep_alive(&r.0);
            Ok(MachineState::Running)
        } else {
            Ok(MachineState::Stopped)
        }
    }

    async fn stop(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        let id = sandbox_id(r)?;
        self.keepalives.stop(id);
        let info = match self.detail(r).await {
            Ok(info) => info,
            Err(ProviderError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        if info.state.as_deref() == Some("paused") {
            return Ok(());
        }
        // The guest first, so it closes its browsers; a pause without memory ends the rest.
        let envd = self.envd(&info)?;
        envd.signal(&self.config.user, GUEST_TAG, false).await?;
        if !self.wait_guest_gone(&envd).await? {
            envd.signal(&self.config.user, GUEST_TAG, true).await?;
        }
        let context = format!("pause E2B sandbox {id}");
        let call = self
            .api_call(
                Method::POST,
                &format!("/sandboxes/{id}/pause"),
                context.clone(),
            )?
            .json(&serde_json::json!({ "memory": false }));
        let answer = self.http.send(call).await?;
        // 409: already paused (or pausing).
        if answer.status == StatusCode::CONFLICT {
            return Ok(());
        }
        match answer.success(&context, Some(r)) {
            Ok(_) | Err(ProviderError::NotFound(_)) => {
                info!(sandbox = %id, "E2B computer stopped");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    async fn destroy(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        self.kill(r).await?;
        info!(sandbox = %r, "E2B computer destroyed");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_key_never_shows() {
        let c = E2bConfig::new(Secret("e2b_0123456789abcdef".into()), "tpl", "/g");
        let text = format!("{c:?}");
        assert!(!text.contains("0123456789abcdef"), "{text}");
        let call = api_call(&c, Method::GET, "/sandboxes/x", "op".into()).unwrap();
        assert!(call.headers.iter().all(|(_, v)| v.is_sensitive()));
    }

    #[test]
    fn envd_lives_on_the_sandbox_host_unless_a_sandbox_url_is_set() {
        let mut c = E2bConfig::new(Secret("k".into()), "tpl", "/g");
        let info = SandboxInfo {
            sandbox_id: "sb1".into(),
            envd_access_token: None,
            domain: None,
            state: None,
        };
        let p = E2bProvider::new(c.clone()).unwrap();
        assert_eq!(
            p.envd(&info).unwrap().base.as_str(),
            "https://49983-sb1.e2b.app"
        );
        let info = SandboxInfo {
            domain: Some("eu.e2b.dev".into()),
            ..info
        };
        assert_eq!(
            p.envd(&info).unwrap().base.as_str(),
            "https://49983-sb1.eu.e2b.dev"
        );
        c.sandbox_url = Some(BaseUrl::parse("http://127.0.0.1:9").unwrap());
        let p = E2bProvider::new(c).unwrap();
        assert_eq!(p.envd(&info).unwrap().base.as_str(), "http://127.0.0.1:9");
    }
}
