//! The `daytona` provider: one Daytona sandbox per computer, driven through Daytona's public
//! REST API (`libs/api-client-go/api/openapi.yaml` of daytonaio/daytona v0.190.0, API version
//! 1.0) and each sandbox's toolbox (`apps/daemon/pkg/toolbox/docs/swagger.yaml`, same tag),
//! reached at `<toolboxProxyUrl>/<sandbox id>`.
//!
//! - provision: `POST /sandbox` (snapshot, non-secret env, labels naming the computer, CPU and
//!   memory from the computer's limits, the network allow-list, auto-stop off: the control
//!   plane's idle policy stops computers); Daytona creates asynchronously, so the adapter waits
//!   (bounded) until the sandbox is `started`, then installs and starts the guest. A sandbox
//!   whose guest cannot be started is deleted at once: it bills.
//! - the guest: under the toolbox user's home (`GET /user-home-dir`): the static binary at
//!   `.rakazo/rakazo-guest` (0700) and the enrollment token at `.rakazo/enroll-token` (0600 in a
//!   0700 directory; never in the environment or argv), uploaded through `/files/upload`; the
//!   computer's home is `rakazo-home`. The guest runs as the toolbox's user in the session
//!   [`GUEST_SESSION`] (`/process/session` and its `exec` with `runAsync`), whose last command
//!   says whether it still runs.
//! - prepare: `POST /sandbox/{id}/start` for a stopped, paused or archived sandbox,
//!   `POST /sandbox/{id}/recover` for a recoverable error, then the guest unless it runs.
//! - stop: `POST /sandbox/{id}/stop` (processes end, the filesystem stays); destroy:
//!   `DELETE /sandbox/{id}`.
//!
//! A sandbox Daytona does not know (404), destroyed, whose build failed or in an error it
//! cannot recover from is gone: the control plane provisions a replacement and restores its
//! home from the last checkpoint. The reference is the sandbox id. The API key goes in
//! `Authorization: Bearer` only; it is never logged (`Secret`).

use crate::remote::http::{multipart_file, query, sh_quote, unavailable, BaseUrl, Call, Http};
use crate::remote::{guest_env, sandbox_id};
use crate::{MachineState, ProviderError, ProviderRef, SandboxProvider, SandboxSpec, Secret};
use hyper::header::AUTHORIZATION;
use hyper::Method;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use tracing::{info, warn};

/// The toolbox session the guest runs in.
pub const GUEST_SESSION: &str = "rakazo-guest";
/// Label naming the computer a sandbox belongs to.
pub const LABEL_COMPUTER: &str = "rakazo.computer";
/// Label naming the home key of the computer.
pub const LABEL_HOME_KEY: &str = "rakazo.home-key";
/// How often a sandbox in transition is looked at again.
const SETTLE_STEP: Duration = Duration::from_millis(500);

/// How the daytona provider reaches Daytona and what it runs there.
#[derive(Debug, Clone)]
pub struct DaytonaConfig {
    /// The API, `https://app.daytona.io/api` by default.
    pub api_url: BaseUrl,
    /// Sent as `Authorization: Bearer`, to the API and the toolbox.
    pub api_key: Secret,
    /// The snapshot every sandbox starts from (it must carry what the guest needs).
    pub snapshot: String,
    /// The region (`target`), or Daytona's default.
    pub target: Option<String>,
    /// CIDRs the sandbox may reach (`networkAllowList`); the control plane's address is added.
    /// Empty: Daytona's default network.
    pub network_allow: Vec<String>,
    /// Disk in GB, or the snapshot's default.
    pub disk_gb: Option<u32>,
    /// The static guest uploaded into every sandbox.
    pub guest_bin: PathBuf,
    /// Extra environment for guests (log filter and the like); never secrets.
    pub guest_env: Vec<(String, String)>,
    /// How long a sandbox may take to reach `started` or `stopped`.
    pub settle_timeout: Duration,
    /// Deadline of one API or toolbox call.
    pub call_timeout: Duration,
    /// Deadline of the guest binary's upload.
    pub upload_timeout: Duration,
}

impl DaytonaConfig {
    /// The defaults for `snapshot` with `api_key`: Daytona's public API, its default network,
    /// region and disk, 5 minutes to settle, 60 s calls and 5-minute uploads.
    pub fn new(
        api_key: Secret,
        snapshot: impl Into<String>,
        guest_bin: impl Into<PathBuf>,
    ) -> Self {
        Self {
            api_url: BaseUrl::parse("https://app.daytona.io/api").expect("a valid URL"),
            api_key,
            snapshot: snapshot.into(),
            target: None,
            network_allow: Vec::new(),
            disk_gb: None,
            guest_bin: guest_bin.into(),
            guest_env: Vec::new(),
            settle_timeout: Duration::from_secs(300),
            call_timeout: Duration::from_secs(60),
            upload_timeout: Duration::from_secs(300),
        }
    }
}

/// Runs computers as Daytona sandboxes.
pub struct DaytonaProvider {
    config: DaytonaConfig,
    http: Http,
}

/// What the API says of a sandbox (`Sandbox`).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Sandbox {
    id: String,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    error_reason: Option<String>,
    #[serde(default)]
    recoverable: Option<bool>,
    toolbox_proxy_url: String,
}

/// Where a sandbox's state leaves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Up,
    Down,
    /// On its way somewhere (creating, starting, stopping, archiving, …).
    Moving,
    /// In error; `recover` may bring it back.
    Recoverable,
    Gone,
}

impl Sandbox {
    fn phase(&self) -> Phase {
        match self.state.as_deref().unwrap_or("unknown") {
            "started" => Phase::Up,
            "stopped" | "archived" | "paused" => Phase::Down,
            "destroyed" | "destroying" | "build_failed" => Phase::Gone,
            "error" if self.recoverable == Some(true) => Phase::Recoverable,
            "error" => Phase::Gone,
            _ => Phase::Moving,
        }
    }

    fn describe(&self) -> String {
        match &self.error_reason {
            Some(reason) => format!(
                "{} ({})",
                self.state.as_deref().unwrap_or("unknown"),
                crate::remote::http::message_of(reason.as_bytes())
            ),
            None => self.state.clone().unwrap_or_else(|| "unknown".into()),
        }
    }
}

/// The guest's files under the toolbox user's home.
struct Paths {
    dir: String,
    guest: String,
    token: String,
    home: String,
}

impl Paths {
    fn under(user_home: &str) -> Self {
        let base = user_home.trim_end_matches('/');
        let dir = format!("{base}/.rakazo");
        Self {
            guest: format!("{dir}/rakazo-guest"),
            token: format!("{dir}/enroll-token"),
            home: format!("{base}/rakazo-home"),
            dir,
        }
    }
}

impl DaytonaProvider {
    /// An adapter with `config`; fails if an https URL has no system CA certificates to
    /// check it against.
    pub fn new(config: DaytonaConfig) -> Result<Self, ProviderError> {
        Ok(Self {
            http: Http::new(config.api_url.is_https())?,
            config,
        })
    }

    /// The provider's configuration.
    pub fn config(&self) -> &DaytonaConfig {
        &self.config
    }

    fn call(&self, method: Method, url: String, context: String) -> Result<Call, ProviderError> {
        Call::new(method, url, self.config.call_timeout, context)
            .secret_header(AUTHORIZATION, &format!("Bearer {}", self.config.api_key.0))
    }

    /// `GET /sandbox/{id}`; a sandbox Daytona does not know is `NotFound`.
    async fn get(&self, r: &ProviderRef) -> Result<Sandbox, ProviderError> {
        let id = sandbox_id(r)?;
        let call = self.call(
            Method::GET,
            self.config.api_url.join(&format!("/sandbox/{id}")),
            format!("look up Daytona sandbox {id}"),
        )?;
        self.http.ok_json(call, Some(r)).await
    }

    /// `POST /sandbox/{id}/<action>` (start, stop, recover).
    async fn act(&self, r: &ProviderRef, action: &str) -> Result<(), ProviderError> {
        let id = sandbox_id(r)?;
        let call = self.call(
            Method::POST,
            self.config.api_url.join(&format!("/sandbox/{id}/{action}")),
            format!("{action} Daytona sandbox {id}"),
        )?;
        self.http.ok(call, Some(r)).await?;
        Ok(())
    }

    /// Waits (bounded) until the sandbox is no longer in transition. Daytona changes states
    /// asynchronously: a created or started sandbox answers before it runs.
    async fn settle(&self, r: &ProviderRef) -> Result<Sandbox, ProviderError> {
        let deadline = tokio::time::Instant::now() + self.config.settle_timeout;
        loop {
            let sb = self.get(r).await?;
            if sb.phase() != Phase::Moving {
                return Ok(sb);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(unavailable(
                    &format!("wait for Daytona sandbox {}", r.0),
                    format!(
                        "still {} after {:?}",
                        sb.describe(),
                        self.config.settle_timeout
                    ),
                ));
            }
            tokio::time::sleep(SETTLE_STEP).await;
        }
    }

    /// The sandbox's toolbox.
    fn toolbox(&self, sb: &Sandbox) -> Result<BaseUrl, ProviderError> {
        BaseUrl::parse(&format!(
            "{}/{}",
            sb.toolbox_proxy_url.trim_end_matches('/'),
            sb.id
        ))
        .map_err(|e| ProviderError::Unavailable {
            context: format!("reach the toolbox of Daytona sandbox {}", sb.id),
            message: e,
        })
    }

    /// One toolbox call; its answer must be a success.
    async fn toolbox_call(
        &self,
        tb: &BaseUrl,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
        context: String,
    ) -> Result<crate::remote::http::Answer, ProviderError> {
        let mut call = self.call(method, tb.join(path), context)?;
        if let Some(body) = body {
            call = call.json(&body);
        }
        self.http.ok(call, None).await
    }

    async fn upload(
        &self,
        tb: &BaseUrl,
        path: &str,
        content: &[u8],
        mode: &str,
        deadline: Duration,
    ) -> Result<(), ProviderError> {
        let name = path.rsplit('/').next().unwrap_or("file");
        let (content_type, body) = multipart_file("file", name, content);
        let mut call = self
            .call(
                Method::POST,
                tb.join(&format!("/files/upload{}", query(&[("path", path)]))),
                format!("upload {path} into Daytona sandbox"),
            )?
            .body(&content_type, body)?;
        call.deadline = deadline;
        self.http.ok(call, None).await?;
        self.toolbox_call(
            tb,
            Method::POST,
            &format!(
                "/files/permissions{}",
                query(&[("path", path), ("mode", mode)])
            ),
            None,
            format!("set the mode of {path} in Daytona sandbox"),
        )
        .await?;
        Ok(())
    }

    /// Whether the guest's session has a command still running.
    async fn guest_running(&self, sb: &Sandbox) -> Result<bool, ProviderError> {
        let tb = self.toolbox(sb)?;
        let context = format!("look up the guest session of Daytona sandbox {}", sb.id);
        let call = self.call(
            Method::GET,
            tb.join(&format!("/process/session/{GUEST_SESSION}")),
            context.clone(),
        )?;
        let answer = self.http.send(call).await?;
        if answer.status == hyper::StatusCode::NOT_FOUND {
            return Ok(false);
        }
        let session: serde_json::Value = answer.success(&context, None)?.json(&context)?;
        Ok(session["commands"]
            .as_array()
            .and_then(|c| c.last())
            .is_some_and(|c| c["exitCode"].is_null()))
    }

    /// Installs the guest and its token and starts it.
    async fn boot_guest(&self, sb: &Sandbox, spec: &SandboxSpec) -> Result<(), ProviderError> {
        let c = &self.config;
        let tb = self.toolbox(sb)?;
        let context = format!("find the user's home in Daytona sandbox {}", sb.id);
        let dir: serde_json::Value = self
            .toolbox_call(&tb, Method::GET, "/user-home-dir", None, context.clone())
            .await?
            .json(&context)?;
        let user_home = dir["dir"]
            .as_str()
            .filter(|d| d.starts_with('/'))
            .ok_or_else(|| {
                unavailable(
                    &context,
                    format!("the toolbox answered no absolute home: {dir}"),
                )
            })?;
        let paths = Paths::under(user_home);
        for folder in [&paths.dir, &paths.home] {
            self.toolbox_call(
                &tb,
                Method::POST,
                &format!(
                    "/files/folder{}",
                    query(&[("path", folder), ("mode", "0700")])
                ),
                None,
                format!("create {folder} in Daytona sandbox {}", sb.id),
            )
            .await?;
        }
        let guest = tokio::fs::read(&c.guest_bin).await.map_err(|e| {
            ProviderError::io(format!("read the guest {}", c.guest_bin.display()), e)
        })?;
        self.upload(&tb, &paths.guest, &guest, "0700", c.upload_timeout)
            .await?;
        self.upload(
            &tb,
            &paths.token,
            spec.guest.token.0.as_bytes(),
            "0600",
            c.call_timeout,
        )
        .await?;
        // A session left by an earlier guest goes first; none is fine.
        let session = format!("/process/session/{GUEST_SESSION}");
        let context = format!("delete the guest session of Daytona sandbox {}", sb.id);
        let call = self.call(Method::DELETE, tb.join(&session), context)?;
        let _ = self.http.send(call).await?;
        self.toolbox_call(
            &tb,
            Method::POST,
            "/process/session",
            Some(serde_json::json!({ "sessionId": GUEST_SESSION })),
            format!("create the guest session of Daytona sandbox {}", sb.id),
        )
        .await?;
        let env = guest_env(spec, &paths.home, &paths.token, &c.guest_env);
        let mut command = String::from("env");
        for (k, v) in &env {
            if !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(ProviderError::BadSpec(format!(
                    "guest environment variable {k:?} is not a shell name"
                )));
            }
            command.push_str(&format!(" {k}={}", sh_quote(v)));
        }
        command.push_str(&format!(" {}", sh_quote(&paths.guest)));
        let context = format!("start the guest in Daytona sandbox {}", sb.id);
        let answer = self
            .toolbox_call(
                &tb,
                Method::POST,
                &format!("{session}/exec"),
                Some(serde_json::json!({ "command": command, "runAsync": true })),
                context.clone(),
            )
            .await?;
        let started: serde_json::Value = answer.json(&context)?;
        info!(computer_id = %spec.computer_id, sandbox = %sb.id, command = %started["cmdId"].as_str().unwrap_or(""), "Daytona guest started");
        Ok(())
    }

    /// A sandbox Daytona cannot bring back: one that still exists (in error, its build failed)
    /// is deleted, best effort, so it does not linger; the computer gets a replacement.
    async fn lost(&self, r: &ProviderRef, sb: &Sandbox) -> ProviderError {
        if matches!(sb.state.as_deref(), Some("error" | "build_failed")) {
            if let Err(e) = self.delete(r).await {
                warn!(sandbox = %r, error = %e, "could not delete a Daytona sandbox it cannot recover");
            }
        }
        info!(sandbox = %r, state = %sb.describe(), "Daytona sandbox is gone");
        ProviderError::NotFound(r.clone())
    }

    /// `DELETE /sandbox/{id}`; one already gone is fine.
    async fn delete(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        let id = sandbox_id(r)?;
        let call = self.call(
            Method::DELETE,
            self.config.api_url.join(&format!("/sandbox/{id}")),
            format!("delete Daytona sandbox {id}"),
        )?;
        match self.http.ok(call, Some(r)).await {
            Ok(_) | Err(ProviderError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The create request for `spec`.
    fn create_body(&self, spec: &SandboxSpec) -> serde_json::Value {
        let c = &self.config;
        let env: BTreeMap<&str, &str> = c
            .guest_env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut body = serde_json::json!({
            "snapshot": c.snapshot,
            "env": env,
            "labels": {
                LABEL_COMPUTER: spec.computer_id,
                LABEL_HOME_KEY: spec.home_key,
            },
            "public": false,
            // The control plane's idle policy stops computers, after a checkpoint.
            "autoStopInterval": 0,
        });
        // The computer's own region wins over the configured one.
        if let Some(t) = spec.placement.as_ref().or(c.target.as_ref()) {
            body["target"] = t.as_str().into();
        }
        if let Some(m) = spec.limits.cpu_millis {
            body["cpu"] = m.div_ceil(1000).into();
        }
        if let Some(mb) = spec.limits.memory_mb {
            body["memory"] = mb.div_ceil(1024).into();
        }
        if let Some(gb) = c.disk_gb {
            body["disk"] = gb.into();
        }
        if !c.network_allow.is_empty() {
            // The guest must reach home (over UDP or TCP, this replica or another) whatever else
            // is allowed.
            let mut list = c.network_allow.clone();
            let g = &spec.guest;
            let replicas = g.other_replicas.iter().map(|a| a.ip());
            for ip in [g.control_addr.ip(), g.tcp_addr().ip()]
                .into_iter()
                .chain(replicas)
            {
                let home = if ip.is_ipv4() {
                    format!("{ip}/32")
                } else {
                    format!("{ip}/128")
                };
                if !list.contains(&home) {
                    list.push(home);
                }
            }
            body["networkAllowList"] = list.join(",").into();
        }
        body
    }
}

impl SandboxProvider for DaytonaProvider {
    fn kind(&self) -> &'static str {
        "daytona"
    }

    /// Daytona meters running sandboxes.
    fn bills_while_running(&self) -> bool {
        true
    }

    /// A placement is a Daytona region (`target`); Daytona itself refuses one it lacks.
    fn check_placement(&self, _placement: &str) -> Result<(), ProviderError> {
        Ok(())
    }

    async fn provision(&self, spec: &SandboxSpec) -> Result<ProviderRef, ProviderError> {
        spec.limits.validate().map_err(ProviderError::BadSpec)?;
        let context = format!("create a Daytona sandbox for computer {}", spec.computer_id);
        let call = self
            .call(
                Method::POST,
                self.config.api_url.join("/sandbox"),
                context.clone(),
            )?
            .json(&self.create_body(spec));
        let created: Sandbox = self.http.ok_json(call, None).await?;
        let r = ProviderRef(created.id.clone());
        if sandbox_id(&r).is_err() {
            return Err(unavailable(
                &context,
                format!("Daytona answered a malformed sandbox id {:?}", created.id),
            ));
        }
        let booted = async {
            let sb = self.settle(&r).await?;
            if sb.phase() != Phase::Up {
                return Err(ProviderError::BadSpec(format!(
                    "{context}: the sandbox ended {}",
                    sb.describe()
                )));
            }
            self.boot_guest(&sb, spec).await
        }
        .await;
        if let Err(e) = booted {
            // A sandbox without its guest is of no use and bills: it goes at once.
            if let Err(d) = self.delete(&r).await {
                warn!(sandbox = %r, error = %d, "could not delete a Daytona sandbox whose guest did not start");
            }
            return Err(e);
        }
        info!(computer_id = %spec.computer_id, sandbox = %r, "Daytona computer provisioned");
        Ok(r)
    }

    async fn prepare(
        &self,
        r: &ProviderRef,
        spec: &SandboxSpec,
    ) -> Result<ProviderRef, ProviderError> {
        let mut sb = self.settle(r).await?;
        match sb.phase() {
            Phase::Gone => return Err(self.lost(r, &sb).await),
            Phase::Up => {}
            Phase::Down | Phase::Moving => {
                self.act(r, "start").await?;
                sb = self.settle(r).await?;
            }
            Phase::Recoverable => {
                self.act(r, "recover").await?;
                sb = self.settle(r).await?;
            }
        }
        match sb.phase() {
            Phase::Up => {}
            Phase::Gone => return Err(self.lost(r, &sb).await),
            _ => {
                return Err(unavailable(
                    &format!("start Daytona sandbox {}", r.0),
                    format!("the sandbox is {}", sb.describe()),
                ))
            }
        }
        if !self.guest_running(&sb).await? {
            self.boot_guest(&sb, spec).await?;
        }
        Ok(r.clone())
    }

    async fn state(&self, r: &ProviderRef) -> Result<MachineState, ProviderError> {
        let sb = match self.get(r).await {
            Ok(sb) => sb,
            Err(ProviderError::NotFound(_)) => return Ok(MachineState::Gone),
            Err(e) => return Err(e),
        };
        Ok(match sb.phase() {
            Phase::Gone => MachineState::Gone,
            Phase::Up if self.guest_running(&sb).await? => MachineState::Running,
            _ => MachineState::Stopped,
        })
    }

    async fn stop(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        let sb = match self.settle(r).await {
            Ok(sb) => sb,
            Err(ProviderError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        // A sandbox in error runs nothing: it is as stopped as it gets until a start recovers it.
        if matches!(sb.phase(), Phase::Gone | Phase::Down | Phase::Recoverable) {
            return Ok(());
        }
        self.act(r, "stop").await?;
        match self.settle(r).await {
            Ok(_) | Err(ProviderError::NotFound(_)) => {
                info!(sandbox = %r, "Daytona computer stopped");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    async fn destroy(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        self.delete(r).await?;
        info!(sandbox = %r, "Daytona computer destroyed");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GuestEnrollment, MachineLimits};

    fn sandbox(state: &str, recoverable: Option<bool>) -> Sandbox {
        Sandbox {
            id: "sb".into(),
            state: Some(state.into()),
            error_reason: None,
            recoverable,
            toolbox_proxy_url: "https://proxy.app.daytona.io/toolbox".into(),
        }
    }

    #[test]
    fn states_the_service_cannot_recover_are_gone() {
        assert_eq!(sandbox("started", None).phase(), Phase::Up);
        for s in ["stopped", "archived", "paused"] {
            assert_eq!(sandbox(s, None).phase(), Phase::Down, "{s}");
        }
        for s in ["destroyed", "destroying", "build_failed"] {
            assert_eq!(sandbox(s, None).phase(), Phase::Gone, "{s}");
        }
        assert_eq!(sandbox("error", Some(true)).phase(), Phase::Recoverable);
        assert_eq!(sandbox("error", Some(false)).phase(), Phase::Gone);
        assert_eq!(sandbox("error", None).phase(), Phase::Gone);
        for s in [
            "creating",
            "starting",
            "stopping",
            "pulling_snapshot",
            "unknown",
            "new",
        ] {
            assert_eq!(sandbox(s, None).phase(), Phase::Moving, "{s}");
        }
    }

    #[test]
    fn create_asks_for_the_limits_and_lets_the_guest_reach_home() {
        let mut c = DaytonaConfig::new(Secret("dtn_secret".into()), "rakazo-snap", "/g");
        c.network_allow = vec!["10.0.0.0/8".into()];
        c.target = Some("us".into());
        let p = DaytonaProvider::new(c).unwrap();
        let mut spec = SandboxSpec {
            computer_id: "c-1".into(),
            home_key: "team-w".into(),
            guest: GuestEnrollment {
                control_addr: "192.0.2.7:7443".parse().unwrap(),
                control_ws: None,
                control_tcp_addr: Some("198.51.100.9:443".parse().unwrap()),
                other_replicas: vec![
                    "203.0.113.4:7443".parse().unwrap(),
                    "192.0.2.7:7444".parse().unwrap(),
                    "[2001:db8::5]:7443".parse().unwrap(),
                ],
                cert_sha256: "ab".into(),
                token: Secret("t0ken".into()),
            },
            limits: MachineLimits {
                memory_mb: Some(1500),
                cpu_millis: Some(1500),
                ..Default::default()
            },
            placement: None,
            network: None,
        };
        let body = p.create_body(&spec);
        assert_eq!(body["snapshot"], "rakazo-snap");
        assert_eq!(body["target"], "us", "the configured region");
        assert_eq!(
            (body["cpu"].as_u64(), body["memory"].as_u64()),
            (Some(2), Some(2))
        );
        assert_eq!(
            body["networkAllowList"],
            "10.0.0.0/8,192.0.2.7/32,198.51.100.9/32,203.0.113.4/32,2001:db8::5/128",
            "every replica's address, each once"
        );
        assert_eq!(body["labels"][LABEL_COMPUTER], "c-1");
        assert!(!body.to_string().contains("t0ken"));
        assert!(!format!("{:?}", p.config()).contains("dtn_secret"));
        // A computer's placement is its region.
        spec.placement = Some("eu".into());
        assert_eq!(p.create_body(&spec)["target"], "eu");
        assert!(p.check_placement("eu").is_ok());
    }

    #[test]
    fn guest_files_live_under_the_users_home() {
        let p = Paths::under("/home/daytona/");
        assert_eq!(p.guest, "/home/daytona/.rakazo/rakazo-guest");
        assert_eq!(p.token, "/home/daytona/.rakazo/enroll-token");
        assert_eq!(p.home, "/home/daytona/rakazo-home");
    }
}
