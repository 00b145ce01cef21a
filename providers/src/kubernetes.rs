//! The `kubernetes` provider: each computer a Pod from Rakazo's image in one namespace, spoken
//! to through kube-rs (rustls on ring), in one of two modes ([`KubeMode`]):
//!
//! - **pod**: computer instance `N` (`rakazo-<computer>-<6 hex>`, the reference) is the
//!   PersistentVolumeClaim `N-home` (its home, storage class configurable), the Secret
//!   `N-token` (this boot's enrollment token), the NetworkPolicy `N` and the Pod `N`, the last
//!   three owned by the claim (`ownerReferences`), so deleting the claim collects them all.
//!   Stop deletes the Pod and keeps the claim; prepare writes the new token and makes the Pod
//!   again; destroy deletes everything (what is gone already is fine).
//! - **sandbox**: through the agent-sandbox CRDs (`agents.x-k8s.io/v1beta1` Sandbox): the
//!   Sandbox `N` carries the pod template and the home's claim template (`home`, so the
//!   controller's claim is `home-N`); the Secret and the NetworkPolicy are owned by it. It is
//!   created `Suspended`, its Secret and policy made, then set `Running`; stop sets it
//!   `Suspended` (the controller deletes the Pod, keeps the claim); prepare sets it `Running`.
//!
//! The guest is the image's entry process as on Docker: `/usr/local/bin/rakazo-guest` as root,
//! its home `/home/rakazo` on the claim, dropping to `--kube-run-as` (`rakazo`) after reading
//! its token. The token is never in the environment or argv: the Secret is mounted read-only
//! at `/etc/rakazo`, the file mode 0400 (root's alone). Requests and limits come from the
//! computer's limits; `runtimeClassName` (gVisor, Kata), a node selector and tolerations from
//! the configuration. The guest dials out as everywhere: no Service or Ingress per computer.
//!
//! Every object carries `rakazo.dev/managed=true`, `rakazo.dev/computer=<id>` and
//! `rakazo.dev/instance=N` (the home key is an annotation). A watch on the managed pods
//! ([`watch`]) tells a pod lost with its node (deleted behind our back, or `NodeLost`) from one
//! we stopped; such a computer is gone, and a start provisions a new instance whose home is
//! restored from the last checkpoint (what the lost instance left is swept away).
//!
//! Egress: a NetworkPolicy per computer lets out only the tunnel's endpoints and the address
//! ranges of the computer's egress policy (names cannot be allowed in a NetworkPolicy); the
//! egress gateway does not run in the cluster (`AnyProvider::network_enforcement` says so).
//! Every API call has a deadline; failures are sorted into the crate's classes by HTTP status.

mod cluster;
mod config;
mod objects;
mod watch;

use crate::{MachineExit, MachineState, ProviderError, ProviderRef, SandboxProvider, SandboxSpec};
use cluster::{resource, Cluster, Kind, TokenPatch};
pub use config::{parse_toleration, KubeConfig, KubeMode};
use kube::api::{Api, DynamicObject};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::time::Instant;
use tracing::{info, warn};
use watch::Watch;

/// Label on every object this provider creates; nothing else is ever touched.
pub const LABEL_MANAGED: &str = "rakazo.dev/managed";
/// Label naming the computer an object belongs to.
pub const LABEL_COMPUTER: &str = "rakazo.dev/computer";
/// Label naming the instance (the reference) an object belongs to.
pub const LABEL_INSTANCE: &str = "rakazo.dev/instance";
/// Annotation naming the computer's home key.
pub const ANN_HOME_KEY: &str = "rakazo.dev/home-key";
/// Where the home claim is mounted, and the guest's `RAKAZO_HOME`.
pub const HOME_DIR: &str = "/home/rakazo";
/// Where the guest binary lives in the image.
pub const GUEST_PATH: &str = "/usr/local/bin/rakazo-guest";
/// Where the token's Secret is mounted.
pub const TOKEN_DIR: &str = "/etc/rakazo";
/// The token's key in its Secret, and its file under [`TOKEN_DIR`].
pub const TOKEN_KEY: &str = "enroll-token";
/// The token's file in the container.
pub const TOKEN_FILE: &str = "/etc/rakazo/enroll-token";
/// The home's volume name, and a Sandbox's claim template name.
const HOME_TEMPLATE: &str = "home";
/// How often a wait on the API looks again.
const POLL: Duration = Duration::from_millis(50);
/// Margin over the stop grace for a pod to be gone.
const STOP_MARGIN: Duration = Duration::from_secs(30);

/// Our labels on every object of instance `instance` of `computer`.
pub(crate) fn instance_labels(computer: &str, instance: &str) -> Value {
    json!({
        LABEL_MANAGED: "true",
        LABEL_COMPUTER: computer,
        LABEL_INSTANCE: instance,
    })
}

/// A computer id usable in object names and label values: `[a-z0-9-]`, starting and ending
/// alphanumeric, at most 40 characters (the instance name is then a DNS label).
fn valid_computer_id(id: &str) -> bool {
    (1..=40).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !id.starts_with('-')
        && !id.ends_with('-')
}

/// The instance name behind a reference, checked: `rakazo-<computer>-<6 hex>`.
fn instance_of(r: &ProviderRef) -> Result<(&str, &str), ProviderError> {
    let bad = || ProviderError::BadRef(r.0.clone());
    let rest = r.0.strip_prefix("rakazo-").ok_or_else(bad)?;
    let (computer, gen) = rest.rsplit_once('-').ok_or_else(bad)?;
    let gen_ok = gen.len() == 6 && gen.bytes().all(|b| b.is_ascii_hexdigit());
    if !gen_ok || !valid_computer_id(computer) || gen.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(bad());
    }
    Ok((r.0.as_str(), computer))
}

/// Runs computers as pods (or agent-sandbox Sandboxes) in a Kubernetes cluster.
pub struct KubernetesProvider {
    config: KubeConfig,
    cluster: Cluster,
    watch: Watch,
    watcher: tokio::task::JoinHandle<()>,
}

impl Drop for KubernetesProvider {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

impl KubernetesProvider {
    /// Loads the client configuration (the kubeconfig, or the in-cluster service account) and
    /// starts the watch on the computers' pods. Fails with `BadSpec` for a configuration that
    /// cannot work (no kubeconfig, a context it does not have, a bad namespace).
    pub async fn connect(config: KubeConfig) -> Result<Self, ProviderError> {
        if !valid_dns_label(&config.namespace) {
            return Err(ProviderError::BadSpec(format!(
                "kube namespace {:?} is not a DNS label",
                config.namespace
            )));
        }
        let kc = match &config.kubeconfig {
            Some(path) => {
                let file = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                    ProviderError::BadSpec(format!("read the kubeconfig {}: {e}", path.display()))
                })?;
                let options = kube::config::KubeConfigOptions {
                    context: config.context.clone(),
                    ..Default::default()
                };
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|e| {
                        ProviderError::BadSpec(format!(
                            "load the kubeconfig {}: {e}",
                            path.display()
                        ))
                    })?
            }
            None => kube::Config::infer().await.map_err(|e| {
                ProviderError::BadSpec(format!(
                    "no Kubernetes configuration (RAKAZO_KUBECONFIG, KUBECONFIG, ~/.kube/config \
                     or an in-cluster service account): {e}"
                ))
            })?,
        };
        let mut kc = kc;
        kc.read_timeout = Some(config.call_timeout.max(Duration::from_secs(300)));
        kc.connect_timeout = Some(config.call_timeout);
        // No retries of the client's own (it retries 429, 503 and 504 by default): the control
        // plane decides what a failure means.
        kc.default_retry = false;
        let client = kube::Client::try_from(kc)
            .map_err(|e| ProviderError::BadSpec(format!("make the Kubernetes client: {e}")))?;
        let watch = Watch::default();
        let pods = Api::namespaced_with(client.clone(), &config.namespace, &resource(Kind::Pod));
        let watcher = tokio::spawn(watch.clone().run(pods));
        info!(namespace = %config.namespace, mode = config.mode.name(), "kubernetes provider ready");
        let cluster = Cluster {
            client,
            namespace: config.namespace.clone(),
            call_timeout: config.call_timeout,
            mode: config.mode,
            watch: watch.clone(),
        };
        Ok(Self {
            config,
            cluster,
            watch,
            watcher,
        })
    }

    /// The provider's configuration.
    pub fn config(&self) -> &KubeConfig {
        &self.config
    }

    async fn create(&self, kind: Kind, body: Value) -> Result<DynamicObject, ProviderError> {
        self.cluster.create(kind, body).await
    }

    async fn get(&self, kind: Kind, name: &str) -> Result<Option<DynamicObject>, ProviderError> {
        self.cluster.get(kind, name).await
    }

    async fn delete(
        &self,
        kind: Kind,
        name: &str,
        grace: Option<u32>,
    ) -> Result<(), ProviderError> {
        self.cluster.delete(kind, name, grace).await
    }

    async fn merge(
        &self,
        kind: Kind,
        name: &str,
        patch: TokenPatch,
        r: &ProviderRef,
    ) -> Result<(), ProviderError> {
        self.cluster.merge(kind, name, patch, r).await
    }

    /// How many times the watch has listed the pods (the first list, then one per expired
    /// watch).
    pub fn watch_lists(&self) -> u64 {
        self.watch.lists()
    }

    /// Waits until pod `name` is gone, up to `limit`.
    async fn wait_pod_gone(&self, name: &str, limit: Duration) -> Result<(), ProviderError> {
        let deadline = Instant::now() + limit;
        loop {
            if self.get(Kind::Pod, name).await?.is_none() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(ProviderError::Unavailable {
                    context: format!("wait for pod {name} to end"),
                    message: format!("still there after {} s", limit.as_secs()),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The websocket's endpoint when its host is an address (a NetworkPolicy takes no names).
    fn ws_endpoint(spec: &SandboxSpec) -> Option<SocketAddr> {
        let url = &spec.guest.control_ws.as_ref()?.url;
        let (scheme, rest) = url.split_once("://")?;
        let host = rest.split('/').next()?;
        host.parse().ok().or_else(|| {
            let port = if scheme == "https" { 443 } else { 80 };
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .ok()
                .map(|ip| SocketAddr::new(ip, port))
        })
    }

    /// Writes this boot's token into the instance's Secret (made if missing), and its network
    /// policy as the spec has it now (made if missing).
    async fn refresh(
        &self,
        name: &str,
        spec: &SandboxSpec,
        owner: &Value,
        r: &ProviderRef,
    ) -> Result<(), ProviderError> {
        let secret = objects::token_secret(name);
        let patch =
            TokenPatch(json!({ "data": { TOKEN_KEY: objects::token_data(&spec.guest.token.0) } }));
        match self.merge(Kind::Secret, &secret, patch, r).await {
            Ok(()) => {}
            Err(ProviderError::NotFound(_)) => {
                self.create(
                    Kind::Secret,
                    objects::secret(spec, name, &secret, Some(owner)),
                )
                .await?;
            }
            Err(e) => return Err(e),
        }
        let policy = objects::network_policy(spec, name, Some(owner), Self::ws_endpoint(spec));
        let patch = TokenPatch(json!({ "spec": policy["spec"] }));
        match self.merge(Kind::Policy, name, patch, r).await {
            Ok(()) => Ok(()),
            Err(ProviderError::NotFound(_)) => self.create(Kind::Policy, policy).await.map(|_| ()),
            Err(e) => Err(e),
        }
    }

    fn owner_of(&self, kind: Kind, obj: &DynamicObject) -> Value {
        let ar = resource(kind);
        objects::owner_ref(
            &ar.api_version,
            &ar.kind,
            obj.metadata.name.as_deref().unwrap_or(""),
            obj.metadata.uid.as_deref().unwrap_or(""),
        )
    }

    async fn provision_pod(&self, spec: &SandboxSpec, name: &str) -> Result<(), ProviderError> {
        let claim = objects::home_claim(&self.config, name);
        let pvc = self
            .create(Kind::Claim, objects::pvc(&self.config, spec, name, &claim))
            .await?;
        let owner = self.owner_of(Kind::Claim, &pvc);
        let made = async {
            self.create_secret_and_policy(spec, name, &owner).await?;
            self.create(Kind::Pod, objects::pod(&self.config, spec, name, &owner))
                .await
        }
        .await;
        if let Err(e) = made {
            // Nothing half-made stays: the claim takes what it owns along.
            if let Err(d) = self.delete(Kind::Claim, &claim, Some(0)).await {
                warn!(claim = %claim, error = %d, "could not remove a half-made kubernetes computer");
            }
            return Err(e);
        }
        Ok(())
    }

    /// The computer's token Secret and NetworkPolicy, both owned by `owner` (its home claim in
    /// pod mode, its Sandbox in sandbox mode).
    async fn create_secret_and_policy(
        &self,
        spec: &SandboxSpec,
        name: &str,
        owner: &Value,
    ) -> Result<(), ProviderError> {
        let secret = objects::token_secret(name);
        self.create(
            Kind::Secret,
            objects::secret(spec, name, &secret, Some(owner)),
        )
        .await?;
        let policy = objects::network_policy(spec, name, Some(owner), Self::ws_endpoint(spec));
        self.create(Kind::Policy, policy).await?;
        Ok(())
    }

    async fn provision_sandbox(&self, spec: &SandboxSpec, name: &str) -> Result<(), ProviderError> {
        let sb = self
            .create(Kind::Sandbox, objects::sandbox(&self.config, spec, name))
            .await?;
        let owner = self.owner_of(Kind::Sandbox, &sb);
        let r = ProviderRef(name.to_string());
        let made = async {
            self.create_secret_and_policy(spec, name, &owner).await?;
            self.set_mode(name, "Running", &r).await
        }
        .await;
        if let Err(e) = made {
            if let Err(d) = self.delete(Kind::Sandbox, name, Some(0)).await {
                warn!(sandbox = %name, error = %d, "could not remove a half-made kubernetes sandbox");
            }
            return Err(e);
        }
        Ok(())
    }

    async fn set_mode(&self, name: &str, mode: &str, r: &ProviderRef) -> Result<(), ProviderError> {
        let patch = TokenPatch(json!({ "spec": { "operatingMode": mode } }));
        self.merge(Kind::Sandbox, name, patch, r).await
    }

    /// Deletes a finished pod (or one being deleted) and waits until it is gone.
    async fn clear_pod(&self, name: &str) -> Result<(), ProviderError> {
        self.watch.deleting(name);
        self.delete(Kind::Pod, name, Some(0)).await?;
        self.wait_pod_gone(name, self.config.call_timeout).await
    }

    async fn prepare_pod(
        &self,
        name: &str,
        r: &ProviderRef,
        spec: &SandboxSpec,
    ) -> Result<(), ProviderError> {
        if let Some(pod) = self.get(Kind::Pod, name).await? {
            if pod_alive(&pod) {
                return Ok(());
            }
            self.clear_pod(name).await?;
        }
        let claim = objects::home_claim(&self.config, name);
        let Some(pvc) = self.get(Kind::Claim, &claim).await? else {
            return Err(ProviderError::NotFound(r.clone()));
        };
        let owner = self.owner_of(Kind::Claim, &pvc);
        self.refresh(name, spec, &owner, r).await?;
        self.watch.fresh(name);
        self.create(Kind::Pod, objects::pod(&self.config, spec, name, &owner))
            .await?;
        Ok(())
    }

    async fn prepare_sandbox(
        &self,
        name: &str,
        r: &ProviderRef,
        spec: &SandboxSpec,
    ) -> Result<(), ProviderError> {
        let Some(sb) = self.get(Kind::Sandbox, name).await? else {
            return Err(ProviderError::NotFound(r.clone()));
        };
        let running = sb.data["spec"]["operatingMode"] != "Suspended";
        let pod = self.get(Kind::Pod, name).await?;
        if running && pod.as_ref().is_some_and(pod_alive) {
            return Ok(());
        }
        let owner = self.owner_of(Kind::Sandbox, &sb);
        self.refresh(name, spec, &owner, r).await?;
        if running {
            // Its pod finished: the controller makes a new one only through a suspension.
            self.watch.deleting(name);
            self.set_mode(name, "Suspended", r).await?;
        }
        if pod.is_some() {
            self.wait_pod_gone(name, self.config.stop_grace + STOP_MARGIN)
                .await?;
        }
        self.watch.fresh(name);
        self.set_mode(name, "Running", r).await
    }

    /// What the API says of the instance: its pod (if any) and whether its home is there.
    async fn machine(&self, name: &str) -> Result<Machine, ProviderError> {
        if let Some(why) = self.watch.lost(name) {
            return Ok(Machine::Lost(why));
        }
        let pod = self.get(Kind::Pod, name).await?;
        match self.config.mode {
            KubeMode::Pod => match pod {
                Some(p) => Ok(Machine::Pod(Box::new(p))),
                None => {
                    let claim = objects::home_claim(&self.config, name);
                    Ok(match self.get(Kind::Claim, &claim).await? {
                        Some(_) => Machine::Stopped,
                        None => Machine::Lost("its pod and home claim are gone".into()),
                    })
                }
            },
            KubeMode::Sandbox => match self.get(Kind::Sandbox, name).await? {
                None => Ok(Machine::Lost("its Sandbox is gone".into())),
                Some(sb) if sb.data["spec"]["operatingMode"] == "Suspended" => Ok(Machine::Stopped),
                Some(_) => Ok(match pod {
                    Some(p) => Machine::Pod(Box::new(p)),
                    // The controller is making it.
                    None => Machine::Starting,
                }),
            },
        }
    }
}

/// What an instance is, as far as the API says.
enum Machine {
    Lost(String),
    Stopped,
    Starting,
    Pod(Box<DynamicObject>),
}

/// A pod that runs or is about to (not finished, not being deleted, not lost by its node).
fn pod_alive(pod: &DynamicObject) -> bool {
    let phase = pod.data["status"]["phase"].as_str().unwrap_or("Pending");
    pod.metadata.deletion_timestamp.is_none()
        && matches!(phase, "Pending" | "Running")
        && pod.data["status"]["reason"] != "NodeLost"
}

/// What a finished pod says of its end: the guest container's exit code, OOM, the reason.
fn pod_exit(pod: &DynamicObject) -> MachineExit {
    let status = &pod.data["status"];
    if status["reason"] == "NodeLost" {
        return MachineExit::Gone;
    }
    if pod_alive(pod) {
        return MachineExit::Running;
    }
    let terminated = status["containerStatuses"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == "guest"))
        .map(|c| &c["state"]["terminated"]);
    let exit_code = terminated.and_then(|t| t["exitCode"].as_i64());
    let reason = terminated.and_then(|t| t["reason"].as_str());
    let detail = [
        status["reason"].as_str(),
        status["message"].as_str(),
        reason,
    ]
    .into_iter()
    .flatten()
    .filter(|s| !s.is_empty())
    .collect::<Vec<_>>()
    .join(": ");
    MachineExit::Stopped {
        exit_code,
        oom_killed: reason == Some("OOMKilled"),
        detail: (!detail.is_empty()).then(|| detail.chars().take(200).collect()),
    }
}

fn valid_dns_label(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

impl SandboxProvider for KubernetesProvider {
    fn kind(&self) -> &'static str {
        "kubernetes"
    }

    /// The cluster is the operator's own: a running pod costs nothing extra.
    fn bills_while_running(&self) -> bool {
        false
    }

    async fn provision(&self, spec: &SandboxSpec) -> Result<ProviderRef, ProviderError> {
        crate::check_spec_placement(self, spec)?;
        if !valid_computer_id(&spec.computer_id) {
            return Err(ProviderError::BadSpec(format!(
                "computer id {:?} is not usable in a Kubernetes name",
                spec.computer_id
            )));
        }
        spec.limits.validate().map_err(ProviderError::BadSpec)?;
        let began = Instant::now();
        let name = format!(
            "rakazo-{}-{}",
            spec.computer_id,
            hex::encode(rand::random::<[u8; 3]>())
        );
        match self.config.mode {
            KubeMode::Pod => self.provision_pod(spec, &name).await?,
            KubeMode::Sandbox => self.provision_sandbox(spec, &name).await?,
        }
        self.watch.fresh(&name);
        info!(computer_id = %spec.computer_id, instance = %name,
              elapsed_ms = began.elapsed().as_millis() as u64, "kubernetes computer provisioned");
        // What an instance lost before this one left goes, off the caller's path.
        let (cluster, computer, keep) =
            (self.cluster.clone(), spec.computer_id.clone(), name.clone());
        tokio::spawn(async move {
            if let Err(e) = cluster.sweep(&computer, Some(&keep)).await {
                warn!(computer_id = %computer, error = %e, "what a lost kubernetes instance left was not removed");
            }
        });
        Ok(ProviderRef(name))
    }

    async fn prepare(
        &self,
        r: &ProviderRef,
        spec: &SandboxSpec,
    ) -> Result<ProviderRef, ProviderError> {
        let (name, computer) = instance_of(r)?;
        if computer != spec.computer_id {
            return Err(ProviderError::BadSpec(format!(
                "instance {name} belongs to computer {computer}, not {}",
                spec.computer_id
            )));
        }
        if self.watch.lost(name).is_some() {
            return Err(ProviderError::NotFound(r.clone()));
        }
        match self.config.mode {
            KubeMode::Pod => self.prepare_pod(name, r, spec).await?,
            KubeMode::Sandbox => self.prepare_sandbox(name, r, spec).await?,
        }
        Ok(r.clone())
    }

    async fn state(&self, r: &ProviderRef) -> Result<MachineState, ProviderError> {
        let (name, _) = instance_of(r)?;
        Ok(match self.machine(name).await? {
            Machine::Lost(_) => MachineState::Gone,
            Machine::Stopped => MachineState::Stopped,
            Machine::Starting => MachineState::Running,
            Machine::Pod(p) => match pod_exit(&p) {
                MachineExit::Running => MachineState::Running,
                MachineExit::Stopped { .. } => MachineState::Stopped,
                MachineExit::Gone => MachineState::Gone,
            },
        })
    }

    async fn exit(&self, r: &ProviderRef) -> Result<MachineExit, ProviderError> {
        let (name, _) = instance_of(r)?;
        Ok(match self.machine(name).await? {
            Machine::Lost(why) => {
                info!(instance = %name, why = %why, "kubernetes computer gone");
                MachineExit::Gone
            }
            Machine::Stopped => MachineExit::from_state(MachineState::Stopped),
            Machine::Starting => MachineExit::Running,
            Machine::Pod(p) => pod_exit(&p),
        })
    }

    async fn stop(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        let (name, _) = instance_of(r)?;
        let grace = u32::try_from(self.config.stop_grace.as_secs()).unwrap_or(u32::MAX);
        self.watch.deleting(name);
        match self.config.mode {
            KubeMode::Pod => self.delete(Kind::Pod, name, Some(grace)).await?,
            KubeMode::Sandbox => match self.set_mode(name, "Suspended", r).await {
                Ok(()) | Err(ProviderError::NotFound(_)) => {}
                Err(e) => return Err(e),
            },
        }
        self.wait_pod_gone(name, self.config.stop_grace + STOP_MARGIN)
            .await?;
        info!(instance = %name, "kubernetes computer stopped");
        Ok(())
    }

    async fn destroy(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        let (name, computer) = instance_of(r)?;
        self.watch.deleting(name);
        if self.config.mode == KubeMode::Sandbox {
            self.delete(Kind::Sandbox, name, Some(0)).await?;
        }
        self.delete(Kind::Pod, name, Some(0)).await?;
        self.delete(Kind::Policy, name, None).await?;
        self.delete(Kind::Secret, &objects::token_secret(name), None)
            .await?;
        self.delete(Kind::Claim, &objects::home_claim(&self.config, name), None)
            .await?;
        self.cluster.sweep(computer, None).await?;
        self.watch.forget(name);
        info!(instance = %name, "kubernetes computer destroyed");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::cluster::api_error;
    use super::*;

    #[test]
    fn references_are_instance_names() {
        let r = ProviderRef("rakazo-c-0123456789abcdef-0a1b2c".into());
        assert_eq!(
            instance_of(&r).unwrap(),
            ("rakazo-c-0123456789abcdef-0a1b2c", "c-0123456789abcdef")
        );
        for bad in [
            "",
            "rakazo-",
            "c-1-0a1b2c",
            "rakazo-c-1-0A1B2C",
            "rakazo-c-1-0a1b2",
            "rakazo-C-1-0a1b2c",
            "rakazo--0a1b2c",
            "rakazo-../x-0a1b2c",
        ] {
            assert!(
                matches!(
                    instance_of(&ProviderRef(bad.into())),
                    Err(ProviderError::BadRef(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn tolerations_parse() {
        assert_eq!(
            parse_toleration("gpu=yes:NoSchedule").unwrap(),
            json!({ "key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule" })
        );
        assert_eq!(
            parse_toleration("dedicated").unwrap(),
            json!({ "key": "dedicated", "operator": "Exists" })
        );
        assert!(parse_toleration("x:Never").is_err());
        assert!(parse_toleration("=v").is_err());
    }

    #[test]
    fn api_failures_are_classified() {
        let status = |code: u16, message: &str| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                message: message.into(),
                ..Default::default()
            }))
        };
        let r = ProviderRef("rakazo-c-1-000000".into());
        assert!(matches!(
            api_error("x", Some(&r), status(404, "")),
            ProviderError::NotFound(_)
        ));
        assert!(matches!(
            api_error("x", None, status(422, "")),
            ProviderError::BadSpec(_)
        ));
        assert!(matches!(
            api_error("x", None, status(403, "exceeded quota: pods")),
            ProviderError::Capacity(_)
        ));
        assert!(matches!(
            api_error("x", None, status(503, "")),
            ProviderError::Unavailable { .. }
        ));
    }
}
