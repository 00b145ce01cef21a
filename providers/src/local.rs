//! The `local` provider: the computer is this host, its guest a child process.
//!
//! Each computer gets `<root>/<computer id>/` holding `home/` (the computer's home), `token`
//! (the enrollment token, 0600, read by the guest through `RAKAZO_ENROLL_TOKEN_FILE`) and
//! `guest.log`; a fully contained one also `ca-certificates.crt`, `egress-ca.pem` and
//! `secrets.env` (its CA and its secrets' placeholders, root's 0644: `trust`). The guest runs in its own process group, so it outlives a control-plane restart
//! and simply dials back. A reference is `<computer id>:<pid>:<start time>`; the start time (from
//! `/proc/<pid>/stat`) tells a live guest from a recycled pid.
//!
//! Isolation, when the control plane runs as root: each computer has its own unprivileged
//! system user (`users`), and its guest is started as root with `RAKAZO_RUN_AS=<that user>`, so
//! it reads its token and then drops for good; its commands, terminals and desktops run as that
//! user. The root is 0711 root's (users pass through, nobody lists it), and must be reachable
//! by them: every ancestor searchable by others, so never inside the data dir (0700). The
//! computer's directory and home are 0700 the user's (the guest restores a home into a staging
//! directory beside it); `token` and `guest.log` stay root's 0600, opened without following
//! links. The guest's runtime dir is `<tmp>/rakazo-guest-<id>`, the user's. Stop and destroy
//! also kill every process left with the user's uid; destroy removes the directory, the runtime
//! dir and the user.
//!
//! Containment ([`Containment`], a root control plane only): by default (`full`) each guest
//! runs jailed (`jail`: its own root of read-only system directories, its own `/tmp`,
//! `/dev/shm` and process list) inside a network namespace of its own (`net`: a veth to this
//! host, nftables letting through the tunnel and sending everything else to the egress gateway
//! (`gate`), which applies the computer's network policy; never this host's services, internal
//! ranges or another computer). `host-network` keeps the jail but shares this
//! host's network (pages served on this host's loopback stay reachable; for trusted setups and
//! tests); `off` is the unjailed behaviour of a user per computer alone.
//!
//! A control plane that is not root runs computers as itself, with no isolation: they can read
//! its files (data dir, API token). [`LocalProvider::new`] warns once.

pub(crate) mod gate;
mod jail;
pub(crate) mod net;
mod trust;
mod users;

pub use gate::{GateConfig, SharedGate};
pub use net::HTTP_PROXY_PORT;
pub use trust::{env_name as secret_env_name, SECRETS_FILE_VAR};

/// The network namespace and nftables table (`inet`) of a fully contained computer, for
/// operators and tests that clean up after a control plane that is gone.
pub fn network_names(computer: &str) -> (String, String) {
    let tag = net::tag(computer);
    (format!("rkz-{tag}"), format!("rakazo-{tag}"))
}

use crate::process::{self, start_time};
use crate::{MachineState, ProviderError, ProviderRef, SandboxProvider, SandboxSpec};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tracing::{info, warn};

/// Where a root control plane keeps local computers unless told otherwise.
pub const DEFAULT_ROOT_AS_ROOT: &str = "/var/lib/rakazo-computers";

/// How long a stopping guest gets after SIGTERM before SIGKILL: it closes every browser first.
const STOP_GRACE: Duration = Duration::from_secs(20);

/// Runs computers as child processes of this host.
pub struct LocalProvider {
    root: PathBuf,
    guest_bin: PathBuf,
    /// Extra environment for guests (log filter and the like); never secrets.
    guest_env: Vec<(String, String)>,
    /// Each computer runs as its own user (the control plane is root).
    isolated: bool,
    /// How far an isolated computer is jailed (ignored when not isolated).
    containment: Containment,
    /// More host paths a jailed computer sees, read-only.
    jail_ro: Vec<PathBuf>,
    /// The egress gateway, started when the first contained computer starts (or
    /// [`LocalProvider::start_gate`] is called); shared with the Docker provider.
    gate: SharedGate,
    adopted: tokio::sync::OnceCell<()>,
}

/// How a local computer of a root control plane is contained (`--local-containment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Containment {
    /// Its own root, processes and network, whose way out is the egress gateway.
    Full,
    /// Its own root and processes; this host's network.
    HostNetwork,
    /// A user of its own, nothing more.
    Off,
}

impl Containment {
    /// Parses `full`, `host-network` or `off`.
    pub fn parse(mode: &str) -> Result<Self, String> {
        match mode {
            "full" => Ok(Self::Full),
            "host-network" => Ok(Self::HostNetwork),
            "off" => Ok(Self::Off),
            other => Err(format!(
                "local containment {other:?}: expected full, host-network or off"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::HostNetwork => "host-network",
            Self::Off => "off",
        }
    }
}

struct LocalRef {
    computer: String,
    pid: i32,
    start: u64,
}

impl LocalRef {
    fn parse(r: &ProviderRef) -> Result<Self, ProviderError> {
        let bad = || ProviderError::BadRef(r.0.clone());
        let mut parts = r.0.rsplitn(3, ':');
        let start = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        let pid = parts
            .next()
            .and_then(|s| s.parse().ok())
            .filter(|p| *p > 0)
            .ok_or_else(bad)?;
        let computer = parts
            .next()
            .filter(|c| valid_id(c))
            .ok_or_else(bad)?
            .to_string();
        Ok(Self {
            computer,
            pid,
            start,
        })
    }

    fn to_ref(&self) -> ProviderRef {
        ProviderRef(format!("{}:{}:{}", self.computer, self.pid, self.start))
    }
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && id != "."
        && id != ".."
}

impl LocalProvider {
    /// Computers live under `root`; guests are started from `guest_bin`. Isolated (a user per
    /// computer) when this process is root; otherwise logs one warning that computers run as
    /// this process's user.
    pub fn new(root: impl Into<PathBuf>, guest_bin: impl Into<PathBuf>) -> Self {
        let isolated = nix::unistd::geteuid().is_root();
        if !isolated {
            warn!(
                "the control plane is not root, so local computers run as its own user, without \
                 isolation: their commands can read its files (data dir, API token)"
            );
        }
        Self {
            root: root.into(),
            guest_bin: guest_bin.into(),
            guest_env: Vec::new(),
            isolated,
            containment: Containment::Full,
            jail_ro: Vec::new(),
            gate: SharedGate::default(),
            adopted: tokio::sync::OnceCell::new(),
        }
    }

    /// Host paths jailed computers see read-only besides the system directories (absolute;
    /// never `/`).
    pub fn with_jail_ro_binds(mut self, paths: Vec<PathBuf>) -> Result<Self, ProviderError> {
        for p in &paths {
            if !p.is_absolute() || p.parent().is_none() {
                return Err(ProviderError::BadSpec(format!(
                    "jail read-only bind {}: an absolute path other than /",
                    p.display()
                )));
            }
        }
        self.jail_ro = paths;
        Ok(self)
    }

    /// Sets how isolated computers are contained (default: full, egress open). Logs what a
    /// computer can reach.
    pub fn with_containment(mut self, containment: Containment) -> Self {
        self.containment = containment;
        if self.isolated {
            match containment {
                Containment::Full => info!(
                    "local computers are contained: own root, processes and network, \
                     leaving through the egress gateway"
                ),
                Containment::HostNetwork => warn!(
                    "local computers share this host's network (--local-containment \
                     host-network): their commands reach its loopback services"
                ),
                Containment::Off => warn!(
                    "local computers are not contained (--local-containment off): their \
                     commands see this host's files, processes and network"
                ),
            }
        }
        self
    }

    /// The egress gateway's settings (default policy, hosts, limits).
    pub fn with_gate_config(mut self, config: GateConfig) -> Self {
        self.gate = SharedGate::new(config);
        self
    }

    /// Uses `gate` (shared with other providers) as the egress gateway.
    pub fn with_gate(mut self, gate: SharedGate) -> Self {
        self.gate = gate;
        self
    }

    /// Starts the egress gateway now when computers are fully contained (else nothing), so
    /// computers that outlived a restart get their network back before anyone asks.
    pub async fn start_gate(&self) -> Result<(), ProviderError> {
        if self.containment() == Containment::Full {
            self.gate().await?;
        }
        Ok(())
    }

    /// The gateway; the first call also adopts this provider's computers that outlived a
    /// restart.
    async fn gate(&self) -> Result<&gate::Gate, ProviderError> {
        let gate = self.gate.get().await?;
        self.adopted
            .get_or_init(|| async {
                let adopted = gate.adopt(|id| self.dir(id).is_dir()).await;
                // The CA lives in this process only: adopted computers trust the new one.
                for computer in &adopted {
                    let written = gate
                        .ca(computer)
                        .and_then(|ca| trust::write_bundle(&self.dir(computer), &ca.cert_pem()));
                    if let Err(e) = written {
                        warn!(computer_id = %computer, error = %e, "could not give an adopted computer its new egress CA");
                    }
                }
            })
            .await;
        Ok(gate)
    }

    /// Sets a computer's secrets (docs/security.md#secrets): its egress gateway substitutes
    /// their values, its processes see their placeholders. Applies at once to a running
    /// computer and is kept for its next start. `false` when computers here are not fully
    /// contained: no gateway is on their way out, so they get no secret (not even a
    /// placeholder).
    pub fn set_secrets(&self, computer: &str, secrets: Vec<egress::Secret>) -> bool {
        let Some(gate) = self.gate.started() else {
            return false;
        };
        if self.containment() != Containment::Full || !valid_id(computer) {
            return false;
        }
        let placeholders_of = |secrets: &[egress::Secret]| -> Vec<(String, String)> {
            secrets
                .iter()
                .map(|s| (s.name().to_string(), s.placeholder().to_string()))
                .collect()
        };
        let placeholders = placeholders_of(&secrets);
        let unchanged = placeholders_of(&gate.secrets(computer)) == placeholders;
        gate.set_secrets(computer, secrets);
        let dir = self.dir(computer);
        // The file changes only with the placeholders (a rotation keeps them).
        if dir.is_dir() && !(unchanged && dir.join(trust::ENV_FILE).is_file()) {
            if let Err(e) = trust::write_env(&dir, &placeholders) {
                warn!(computer_id = %computer, error = %e, "could not write the computer's secret placeholders");
            }
        }
        true
    }

    /// A computer's network policy (`None`: computers are not fully contained here).
    pub fn network_policy(&self, computer: &str) -> Option<egress::Policy> {
        // The gateway may run for Docker computers while local ones are not contained.
        if self.containment() != Containment::Full {
            return None;
        }
        Some(self.gate.started()?.policy(computer))
    }

    /// Sets a running computer's network policy; new connections and queries see it at once.
    /// `false` when it is not running here or not fully contained.
    pub fn set_network_policy(&self, computer: &str, policy: egress::Policy) -> bool {
        self.containment() == Containment::Full
            && self
                .gate
                .started()
                .is_some_and(|g| g.set_policy(computer, policy))
    }

    /// The egress gateway its computers leave through, when they are fully contained.
    pub fn contained_by(&self) -> Option<&SharedGate> {
        (self.containment() == Containment::Full).then_some(&self.gate)
    }

    /// The policy of a computer nobody set one for (`--local-egress`).
    pub fn default_network_policy(&self) -> &egress::Policy {
        &self.gate.config().default_policy
    }

    /// How computers are contained, as configured (`off` when not isolated).
    pub fn containment(&self) -> Containment {
        if self.isolated {
            self.containment
        } else {
            Containment::Off
        }
    }

    /// The default root for a control plane with this data dir: [`DEFAULT_ROOT_AS_ROOT`] when
    /// this process is root (computers' users must reach their homes, and the data dir is
    /// private), else `<data dir>/computers`.
    pub fn default_root(data_dir: &Path) -> PathBuf {
        if nix::unistd::geteuid().is_root() {
            PathBuf::from(DEFAULT_ROOT_AS_ROOT)
        } else {
            data_dir.join("computers")
        }
    }

    /// Whether each computer runs as its own user.
    pub fn is_isolated(&self) -> bool {
        self.isolated
    }

    /// The system user a computer runs as when isolated (`rkz-…`, see `users`).
    pub fn user_name(computer: &str) -> String {
        users::user_name(computer)
    }

    /// Adds a variable to every guest's environment.
    pub fn with_guest_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.guest_env.push((key.into(), value.into()));
        self
    }

    fn dir(&self, computer: &str) -> PathBuf {
        self.root.join(computer)
    }

    /// The home directory of a local computer.
    pub fn home_dir(&self, computer: &str) -> PathBuf {
        self.dir(computer).join("home")
    }

    async fn spawn(&self, spec: &SandboxSpec) -> Result<LocalRef, ProviderError> {
        let id = &spec.computer_id;
        let dir = self.dir(id);
        let home = self.home_dir(id);
        let mut env = self.guest_env.clone();
        let mut spec = spec.clone();
        let mut argv = None;
        let user = if self.isolated {
            self.prepare_root()?;
            let user = users::ensure(id, &home).await?;
            private_dir(&dir, Some(&user))?;
            private_dir(&home, Some(&user))?;
            env.push(("RAKAZO_RUN_AS".into(), user.name.clone()));
            argv = self.jail(&mut spec, &dir, &home).await?;
            if self.containment == Containment::Full {
                let file = dir.join(trust::ENV_FILE);
                env.push((SECRETS_FILE_VAR.into(), file.to_string_lossy().into_owned()));
            }
            Some(user)
        } else {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&home)
                .map_err(|e| ProviderError::io(format!("create {}", home.display()), e))?;
            None
        };
        let (pid, start) = process::spawn_guest(&process::GuestLaunch {
            bin: &self.guest_bin,
            argv,
            spec: &spec,
            dir: &dir,
            home: &home,
            extra_env: &env,
        })?;
        info!(computer_id = %id, pid, user = user.as_ref().map(|u| u.name.as_str()), "local guest started");
        Ok(LocalRef {
            computer: spec.computer_id.clone(),
            pid,
            start,
        })
    }

    /// The jail's command line (`None`: not jailed), with the computer's network made first and
    /// the enrollment's addresses rewritten to where the guest reaches them from inside.
    async fn jail(
        &self,
        spec: &mut SandboxSpec,
        dir: &Path,
        home: &Path,
    ) -> Result<Option<Vec<std::ffi::OsString>>, ProviderError> {
        let (netns, resolv, bundle) = match self.containment {
            Containment::Off => return Ok(None),
            Containment::HostNetwork => (None, None, None),
            Containment::Full => {
                let gate = self.gate().await?;
                let id = &spec.computer_id;
                // Its trust store holds its CA; its environment file its placeholders.
                let bundle = trust::write_bundle(dir, &gate.ca(id)?.cert_pem())?;
                let placeholders: Vec<(String, String)> = gate
                    .secrets(id)
                    .iter()
                    .map(|s| (s.name().to_string(), s.placeholder().to_string()))
                    .collect();
                trust::write_env(dir, &placeholders)?;
                let bundle = Path::new(trust::SYSTEM_BUNDLE).is_file().then_some(bundle);
                let g = &mut spec.guest;
                let mut endpoints = vec![g.control_addr, g.tcp_addr()];
                endpoints.extend(g.other_replicas.iter().copied());
                let net = net::ensure(
                    &spec.computer_id,
                    net::Place::Own,
                    &endpoints,
                    Some(&gate.ports()),
                )
                .await?;
                gate.attach(&spec.computer_id, net.addr, spec.network.clone());
                let inside = |a| net::inside_addr(net.gateway, a);
                g.control_tcp_addr = Some(inside(g.tcp_addr()));
                g.control_addr = inside(g.control_addr);
                g.other_replicas = g.other_replicas.iter().map(|a| inside(*a)).collect();
                // The HTTP API is not reachable from inside; UDP and TCP to this host are.
                g.control_ws = None;
                (Some(net.netns()), Some(net.resolv_conf()), bundle)
            }
        };
        Ok(Some(jail::command(
            netns.as_deref(),
            resolv.as_deref(),
            bundle.as_deref(),
            dir,
            home,
            &self.guest_bin,
            &self.jail_ro,
        )))
    }

    /// Creates the root 0711 root's, and checks that computers' users can pass through every
    /// directory above it.
    fn prepare_root(&self) -> Result<(), ProviderError> {
        let root = &self.root;
        let err = |e| ProviderError::io(format!("prepare local root {}", root.display()), e);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(root)
            .map_err(err)?;
        let meta = std::fs::symlink_metadata(root).map_err(err)?;
        if !meta.is_dir() || meta.uid() != 0 {
            return Err(ProviderError::BadSpec(format!(
                "local root {} must be a directory owned by root",
                root.display()
            )));
        }
        if meta.mode() & 0o7777 != 0o711 {
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711)).map_err(err)?;
        }
        let canonical = std::fs::canonicalize(root).map_err(err)?;
        for dir in canonical.ancestors().skip(1) {
            let mode = std::fs::metadata(dir).map_err(err)?.mode();
            if mode & 0o001 == 0 {
                return Err(ProviderError::BadSpec(format!(
                    "local root {}: its parent {} (mode {:o}) cannot be passed through by other \
                     users, so computers' users could not reach their homes; choose a root \
                     outside private directories (--local-root)",
                    root.display(),
                    dir.display(),
                    mode & 0o7777
                )));
            }
        }
        Ok(())
    }

    fn is_running(r: &LocalRef) -> bool {
        start_time(r.pid) == Some(r.start)
    }

    /// Stops the guest's tree and, when isolated, every other process of the computer's user.
    async fn kill_all(&self, r: &LocalRef) -> Result<(), ProviderError> {
        // A jailed guest is a grandchild of the process started (bwrap); it gets the SIGTERM.
        process::kill_tree(
            r.pid,
            r.start,
            STOP_GRACE,
            process::guest_comm(&self.guest_bin),
        )
        .await;
        if self.isolated {
            if let Some(user) = users::lookup(&r.computer, &self.home_dir(&r.computer))? {
                users::kill_all(user.uid);
            }
        }
        Ok(())
    }
}

/// Makes `dir` a 0700 directory of `owner` (this process when `None`). Never follows a link.
fn private_dir(dir: &Path, owner: Option<&users::ComputerUser>) -> Result<(), ProviderError> {
    let err = |e| ProviderError::io(format!("prepare {}", dir.display()), e);
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(err(e)),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(err)?;
    if !meta.is_dir() {
        return Err(err(std::io::Error::other("not a directory")));
    }
    if let Some(u) = owner {
        if (meta.uid(), meta.gid()) != (u.uid, u.gid) {
            std::os::unix::fs::lchown(dir, Some(u.uid), Some(u.gid)).map_err(err)?;
        }
    }
    if meta.mode() & 0o7777 != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(err)?;
    }
    Ok(())
}

impl SandboxProvider for LocalProvider {
    fn kind(&self) -> &'static str {
        "local"
    }

    /// A child process of the control plane's host costs nothing extra while it runs.
    fn bills_while_running(&self) -> bool {
        false
    }

    async fn provision(&self, spec: &SandboxSpec) -> Result<ProviderRef, ProviderError> {
        crate::check_spec_placement(self, spec)?;
        if !valid_id(&spec.computer_id) {
            return Err(ProviderError::BadSpec(format!(
                "computer id {:?}",
                spec.computer_id
            )));
        }
        Ok(self.spawn(spec).await?.to_ref())
    }

    async fn prepare(
        &self,
        r: &ProviderRef,
        spec: &SandboxSpec,
    ) -> Result<ProviderRef, ProviderError> {
        let local = LocalRef::parse(r)?;
        if !self.dir(&local.computer).is_dir() {
            return Err(ProviderError::NotFound(r.clone()));
        }
        if Self::is_running(&local) {
            return Ok(r.clone());
        }
        Ok(self.spawn(spec).await?.to_ref())
    }

    async fn state(&self, r: &ProviderRef) -> Result<MachineState, ProviderError> {
        let local = LocalRef::parse(r)?;
        Ok(if !self.dir(&local.computer).is_dir() {
            MachineState::Gone
        } else if Self::is_running(&local) {
            MachineState::Running
        } else {
            MachineState::Stopped
        })
    }

    async fn stop(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        let local = LocalRef::parse(r)?;
        self.kill_all(&local).await?;
        if self.isolated {
            net::teardown(&local.computer).await;
            if let Some(g) = self.gate.started() {
                g.detach(&local.computer);
            }
        }
        // Nothing in it outlives the guest: its X cookies and sockets are the next boot's anew.
        process::remove_dir(&process::runtime_dir(&local.computer))
    }

    async fn destroy(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        let local = LocalRef::parse(r)?;
        self.kill_all(&local).await?;
        if self.isolated {
            net::teardown(&local.computer).await;
            if let Some(g) = self.gate.started() {
                g.detach(&local.computer);
            }
        }
        if let Some(g) = self.gate.started() {
            g.forget(&local.computer);
        }
        process::remove_dir(&self.dir(&local.computer))?;
        process::remove_dir(&process::runtime_dir(&local.computer))?;
        if self.isolated {
            users::remove(&local.computer, &self.home_dir(&local.computer)).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_round_trip_and_reject_garbage() {
        let r = LocalRef::parse(&ProviderRef("c-1:42:7".into())).unwrap();
        assert_eq!((r.computer.as_str(), r.pid, r.start), ("c-1", 42, 7));
        assert_eq!(r.to_ref().0, "c-1:42:7");
        for bad in ["", "c:1", "c:x:1", "../x:1:2", "c:0:1", ":1:2"] {
            assert!(
                LocalRef::parse(&ProviderRef(bad.into())).is_err(),
                "{bad:?}"
            );
        }
    }
}
