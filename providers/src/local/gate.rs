//! The egress gateway of fully contained computers, local and Docker: one [`egress::Gateway`]
//! for all of them ([`SharedGate`], handed to both providers), embedded in the control plane,
//! listening on this host's loopback only.
//!
//! Each computer's nftables table (`net`) DNATs its DNS (UDP and TCP port 53, whatever the
//! address asked) to [`Gate::dns_udp`]/[`Gate::dns_tcp`], its HTTP proxy port
//! (`net::HTTP_PROXY_PORT` on the gateway address) to [`Gate::http_proxy`], and every other TCP
//! connection to the transparent proxy [`Gate::proxy`]; nothing else leaves (UDP other than DNS
//! included: QUIC clients fall back to TCP). The gateway finds the computer by the source
//! address (its registry), answers DNS only for names the computer's policy allows, and lets a
//! connection through only to what the policy allows: by TLS SNI or HTTP Host *and* an address
//! the name resolved to for that computer, or an address the policy names, never an internal
//! range (see the `egress` crate).
//!
//! The listeners' ports change with every start of the control plane; each provider calls
//! [`Gate::adopt`] with the computers that are its own, which rewrites the gate chains of those
//! that were already running and registers them again (their veth's alias names the computer),
//! so a restart leaves their network working.

use crate::ProviderError;
use egress::{
    ComputerCa, ComputerId, Config, Event, Events, Gateway, Limits, Policy, Registry, Secret,
    SecretSet, StaticResolver, SystemResolver,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::net::{TcpListener, UdpSocket};
use tracing::{info, warn};

/// How many aggregated decision events wait for the control plane before new ones are counted
/// as dropped.
const EVENTS_QUEUE: usize = 4096;

/// What the gateway is started with (`rakazo serve` flags).
#[derive(Debug, Clone)]
pub struct GateConfig {
    /// The policy of a computer nobody set one for.
    pub default_policy: Policy,
    /// Names the gateway's resolver answers itself (`--egress-hosts`), before asking upstream.
    pub hosts: Vec<(String, IpAddr)>,
    /// Per-computer limits (connections, bandwidth, DNS queries per second).
    pub limits: Limits,
    /// More CAs (PEM files) the real servers of secrets' domains may chain to, besides this
    /// host's trust store (`--egress-ca-file`: an internal PKI, test hosts).
    pub upstream_ca_files: Vec<PathBuf>,
}

impl Default for GateConfig {
    fn default() -> Self {
        Self {
            default_policy: Policy::open(),
            hosts: Vec::new(),
            limits: Limits::default(),
            upstream_ca_files: Vec::new(),
        }
    }
}

/// The gateway of every contained computer of a control plane, started on first use; cloning
/// shares it.
#[derive(Clone)]
pub struct SharedGate(Arc<SharedInner>);

struct SharedInner {
    config: GateConfig,
    cell: tokio::sync::OnceCell<Gate>,
}

impl std::fmt::Debug for SharedGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedGate")
            .field("config", &self.0.config)
            .field("started", &self.0.cell.initialized())
            .finish()
    }
}

impl SharedGate {
    /// A gateway with these settings, not started yet.
    pub fn new(config: GateConfig) -> Self {
        Self(Arc::new(SharedInner {
            config,
            cell: tokio::sync::OnceCell::new(),
        }))
    }

    /// The gateway, started now unless it runs already.
    pub async fn get(&self) -> Result<&Gate, ProviderError> {
        self.0
            .cell
            .get_or_try_init(|| Gate::start(self.0.config.clone()))
            .await
    }

    /// The gateway, if it has been started.
    pub fn started(&self) -> Option<&Gate> {
        self.0.cell.get()
    }

    /// Its settings.
    pub fn config(&self) -> &GateConfig {
        &self.0.config
    }
}

impl Default for SharedGate {
    fn default() -> Self {
        Self::new(GateConfig::default())
    }
}

/// The running gateway.
pub struct Gate {
    registry: Arc<Registry>,
    config: GateConfig,
    pub dns_udp: SocketAddr,
    pub dns_tcp: SocketAddr,
    pub proxy: SocketAddr,
    pub http_proxy: SocketAddr,
    events: Events,
    feed: Mutex<Option<tokio::sync::mpsc::Receiver<Event>>>,
    tasks: Vec<tokio::task::AbortHandle>,
    /// What the real servers of secrets' domains are verified against.
    roots: RootCertStore,
    /// Each computer's CA (made when first needed, kept in memory only: its key never leaves
    /// this process) and secrets.
    cas: Mutex<HashMap<String, Arc<ComputerCa>>>,
    secrets: Mutex<HashMap<String, Vec<Secret>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// This host's trust store plus `extra` PEM files.
fn upstream_roots(extra: &[PathBuf]) -> Result<RootCertStore, ProviderError> {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    let (added, _) = roots.add_parsable_certificates(native.certs);
    if added == 0 {
        warn!("no system CA certificates: secrets' real servers cannot be verified");
    }
    for path in extra {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<_, _>>())
            .map_err(|e| {
                ProviderError::BadSpec(format!("--egress-ca-file {}: {e}", path.display()))
            })?;
        if certs.is_empty() {
            return Err(ProviderError::BadSpec(format!(
                "--egress-ca-file {}: no certificate",
                path.display()
            )));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| {
                ProviderError::BadSpec(format!("--egress-ca-file {}: {e}", path.display()))
            })?;
        }
    }
    Ok(roots)
}

impl Drop for Gate {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> ProviderError + '_ {
    move |e| ProviderError::io(what.to_string(), e)
}

impl Gate {
    /// Binds the listeners on 127.0.0.1 and starts serving.
    pub async fn start(config: GateConfig) -> Result<Gate, ProviderError> {
        let loopback = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0);
        let dns_udp_sock = UdpSocket::bind(loopback)
            .await
            .map_err(io("bind the egress DNS (udp)"))?;
        let dns_udp = dns_udp_sock.local_addr().map_err(io("egress DNS"))?;
        let dns_tcp_sock = match TcpListener::bind(dns_udp).await {
            Ok(l) => l,
            Err(_) => TcpListener::bind(loopback)
                .await
                .map_err(io("bind the egress DNS (tcp)"))?,
        };
        let dns_tcp = dns_tcp_sock.local_addr().map_err(io("egress DNS"))?;
        let proxy_sock = TcpListener::bind(loopback)
            .await
            .map_err(io("bind the egress proxy"))?;
        let proxy = proxy_sock.local_addr().map_err(io("egress proxy"))?;
        let http_sock = TcpListener::bind(loopback)
            .await
            .map_err(io("bind the egress HTTP proxy"))?;
        let http_proxy = http_sock.local_addr().map_err(io("egress HTTP proxy"))?;

        let roots = upstream_roots(&config.upstream_ca_files)?;
        let mut resolver = StaticResolver::new();
        for (name, ip) in &config.hosts {
            resolver = resolver.with(name, *ip);
        }
        match SystemResolver::from_system_conf() {
            Ok(system) => resolver = resolver.with_fallback(Arc::new(system)),
            Err(e) => warn!(
                error = %e,
                "the egress gateway has no upstream resolver: only --egress-hosts names resolve"
            ),
        }
        let registry = Arc::new(Registry::new());
        let (events, feed) = Events::channel(EVENTS_QUEUE);
        let gateway = Gateway::new(
            registry.clone(),
            Arc::new(resolver),
            events.clone(),
            Config::default(),
        );
        let mut tasks = vec![tokio::spawn(events.clone().run()).abort_handle()];
        let g = gateway.clone();
        tasks.push(tokio::spawn(async move { g.serve_dns_udp(dns_udp_sock).await }).abort_handle());
        let g = gateway.clone();
        tasks.push(tokio::spawn(async move { g.serve_dns_tcp(dns_tcp_sock).await }).abort_handle());
        let g = gateway.clone();
        tasks.push(
            tokio::spawn(async move { g.serve_transparent(proxy_sock).await }).abort_handle(),
        );
        let g = gateway;
        tasks.push(tokio::spawn(async move { g.serve_http_proxy(http_sock).await }).abort_handle());
        info!(%dns_udp, %proxy, %http_proxy, "egress gateway listening");
        Ok(Gate {
            roots,
            cas: Mutex::new(HashMap::new()),
            secrets: Mutex::new(HashMap::new()),
            registry,
            config,
            dns_udp,
            dns_tcp,
            proxy,
            http_proxy,
            events,
            feed: Mutex::new(Some(feed)),
            tasks,
        })
    }

    /// Where it listens, for a computer's nftables table.
    pub(crate) fn ports(&self) -> super::net::GatePorts {
        super::net::GatePorts {
            dns_udp: self.dns_udp,
            dns_tcp: self.dns_tcp,
            proxy: self.proxy,
            http_proxy: self.http_proxy,
        }
    }

    /// Registers a computer reached from `addr` under `policy` (`None`: the one it had, else
    /// the default).
    pub fn attach(&self, computer: &str, addr: Ipv4Addr, policy: Option<Policy>) {
        let policy = policy.unwrap_or_else(|| self.policy(computer));
        self.registry.add(
            ComputerId::new(computer),
            vec![IpAddr::V4(addr)],
            policy,
            self.config.limits,
        );
        self.apply_secrets(computer);
    }

    /// Forgets a computer.
    pub fn detach(&self, computer: &str) {
        self.registry.remove(&ComputerId::new(computer));
    }

    /// Forgets a destroyed computer's CA and secrets too.
    pub fn forget(&self, computer: &str) {
        self.detach(computer);
        lock(&self.cas).remove(computer);
        lock(&self.secrets).remove(computer);
    }

    /// The computer's CA, made on first use.
    pub fn ca(&self, computer: &str) -> Result<Arc<ComputerCa>, ProviderError> {
        let mut cas = lock(&self.cas);
        if let Some(ca) = cas.get(computer) {
            return Ok(ca.clone());
        }
        let ca = ComputerCa::generate(&ComputerId::new(computer))
            .map_err(|e| ProviderError::BadSpec(format!("the computer's CA: {e}")))?;
        let ca = Arc::new(ca);
        cas.insert(computer.to_string(), ca.clone());
        Ok(ca)
    }

    /// Replaces a computer's secrets; a running computer's next connections see them.
    pub fn set_secrets(&self, computer: &str, secrets: Vec<Secret>) {
        if secrets.is_empty() {
            lock(&self.secrets).remove(computer);
        } else {
            lock(&self.secrets).insert(computer.to_string(), secrets);
        }
        self.apply_secrets(computer);
    }

    /// The computer's secrets, as set.
    pub fn secrets(&self, computer: &str) -> Vec<Secret> {
        lock(&self.secrets)
            .get(computer)
            .cloned()
            .unwrap_or_default()
    }

    /// Hands the computer's secrets to its registration, if it has one.
    fn apply_secrets(&self, computer: &str) {
        let Some(c) = self.registry.get(&ComputerId::new(computer)) else {
            return;
        };
        let secrets = self.secrets(computer);
        if secrets.is_empty() {
            c.set_secrets(None);
            return;
        }
        let set = self.ca(computer).and_then(|ca| {
            SecretSet::new(ca, secrets, self.roots.clone())
                .map_err(|e| ProviderError::BadSpec(e.to_string()))
        });
        match set {
            Ok(set) => c.set_secrets(Some(set)),
            Err(e) => {
                warn!(computer_id = %computer, error = %e, "the computer's secrets cannot be applied: none is");
                c.set_secrets(None);
            }
        }
    }

    /// A computer's policy (the default when it has none of its own yet).
    pub fn policy(&self, computer: &str) -> Policy {
        self.registry
            .get(&ComputerId::new(computer))
            .map(|c| (*c.policy()).clone())
            .unwrap_or_else(|| self.config.default_policy.clone())
    }

    /// The computers registered here, by id.
    pub fn computers(&self) -> Vec<String> {
        self.registry
            .computers()
            .iter()
            .map(|c| c.id().to_string())
            .collect()
    }

    /// Each registered computer's counters.
    pub fn counters(&self) -> Vec<(String, egress::CounterSnapshot)> {
        self.registry
            .computers()
            .iter()
            .map(|c| (c.id().to_string(), c.counter_snapshot()))
            .collect()
    }

    /// Sets a running computer's policy: the next query and connection see it. `false` when
    /// the computer is not running here.
    pub fn set_policy(&self, computer: &str, policy: Policy) -> bool {
        self.registry.set_policy(&ComputerId::new(computer), policy)
    }

    /// The aggregated decisions, for the control plane's activity feed (once).
    pub fn take_events(&self) -> Option<tokio::sync::mpsc::Receiver<Event>> {
        self.feed.lock().ok()?.take()
    }

    /// Decision events lost to a full queue.
    pub fn dropped_events(&self) -> u64 {
        self.events.dropped()
    }

    /// Computers whose network outlived the previous control plane and that `ours` says belong
    /// to the caller (another control plane on this host keeps its own): registered again, their
    /// gate chains pointed at this gateway's listeners. Their policy is `none` until the control
    /// plane, which holds the policies, sets each one (it does at start): a restart never opens
    /// a computer's way out wider than its policy. Returns the adopted computers (their trust
    /// files need this process's new CA).
    pub(crate) async fn adopt(&self, ours: impl Fn(&str) -> bool) -> Vec<String> {
        let mut adopted = Vec::new();
        for (computer, net) in super::net::running().await {
            if !ours(&computer) {
                continue;
            }
            adopted.push(computer.clone());
            self.attach(&computer, net.addr, Some(Policy::none()));
            if let Err(e) = super::net::write_gate(&net, Some(&self.ports())).await {
                warn!(computer_id = %computer, error = %e, "could not point a running computer at the egress gateway");
            } else {
                info!(computer_id = %computer, "running computer's network adopted");
            }
        }
        adopted
    }
}
