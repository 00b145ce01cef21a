//! Upstream name resolution, behind the [`Resolve`] trait the DNS server and HTTP proxy use.
//!
//! This module owns the two implementations: [`SystemResolver`] (hickory-resolver with the
//! host's `/etc/resolv.conf`) and [`StaticResolver`] (a fixed map, for tests and `hosts`-style
//! overrides, optionally falling back to another resolver). Nothing here knows about policy:
//! callers only ask for names the policy allows.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use hickory_proto::rr::{RData, RecordType};
use hickory_resolver::config::{NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::TokioResolver;

use crate::policy::normalize_name;

/// Which address family a query asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

/// One address a name resolved to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub ip: IpAddr,
    /// Seconds the answer may be cached.
    pub ttl: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("no such name")]
    NxDomain,
    #[error("resolution failed: {0}")]
    Failed(String),
}

/// A boxed future, so that [`Resolve`] can be used as a trait object.
pub type ResolveFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<Resolved>, ResolveError>> + Send + 'a>>;

/// Resolves a name (lowercase, no trailing dot) to addresses of one family. `Ok(vec![])` means
/// the name exists without addresses of that family.
pub trait Resolve: Send + Sync + 'static {
    fn resolve<'a>(&'a self, name: &'a str, family: Family) -> ResolveFuture<'a>;
}

/// A fixed map of names to addresses: `allowed.test → 203.0.113.10`. Names it does not hold go
/// to the fallback if there is one, and are NXDOMAIN otherwise.
#[derive(Clone, Default)]
pub struct StaticResolver {
    map: HashMap<String, Vec<IpAddr>>,
    fallback: Option<Arc<dyn Resolve>>,
    ttl: u32,
}

impl StaticResolver {
    pub fn new() -> StaticResolver {
        StaticResolver {
            map: HashMap::new(),
            fallback: None,
            ttl: 60,
        }
    }

    /// Adds (or extends) a name's addresses. Invalid names are ignored.
    pub fn with(mut self, name: &str, ip: IpAddr) -> StaticResolver {
        if let Some(name) = normalize_name(name) {
            self.map.entry(name).or_default().push(ip);
        }
        self
    }

    /// Names not in the map go to `fallback`.
    pub fn with_fallback(mut self, fallback: Arc<dyn Resolve>) -> StaticResolver {
        self.fallback = Some(fallback);
        self
    }

    /// The TTL of the map's answers (60 s unless set).
    pub fn with_ttl(mut self, ttl: u32) -> StaticResolver {
        self.ttl = ttl;
        self
    }
}

impl Resolve for StaticResolver {
    fn resolve<'a>(&'a self, name: &'a str, family: Family) -> ResolveFuture<'a> {
        Box::pin(async move {
            match (self.map.get(name), &self.fallback) {
                (Some(ips), _) => Ok(ips
                    .iter()
                    .filter(|ip| ip.is_ipv4() == (family == Family::V4))
                    .map(|&ip| Resolved { ip, ttl: self.ttl })
                    .collect()),
                (None, Some(fallback)) => fallback.resolve(name, family).await,
                (None, None) => Err(ResolveError::NxDomain),
            }
        })
    }
}

/// hickory-resolver over the host's resolver configuration.
#[derive(Clone)]
pub struct SystemResolver {
    resolver: TokioResolver,
}

impl SystemResolver {
    /// Reads `/etc/resolv.conf`. Names are queried as fully qualified (no search domains).
    pub fn from_system_conf() -> Result<SystemResolver, ResolveError> {
        let mut builder =
            TokioResolver::builder_tokio().map_err(|e| ResolveError::Failed(e.to_string()))?;
        builder.options_mut().ndots = 0;
        Ok(SystemResolver {
            resolver: builder
                .build()
                .map_err(|e| ResolveError::Failed(e.to_string()))?,
        })
    }
}

impl SystemResolver {
    /// Queries exactly these name servers (UDP, then TCP for truncated answers), not the host's
    /// configuration.
    pub fn with_name_servers(servers: &[SocketAddr]) -> Result<SystemResolver, ResolveError> {
        let mut config = ResolverConfig::from_name_servers(Vec::new());
        for server in servers {
            let mut ns = NameServerConfig::udp_and_tcp(server.ip());
            for connection in &mut ns.connections {
                connection.port = server.port();
            }
            config.add_name_server(ns);
        }
        let mut builder =
            TokioResolver::builder_with_config(config, TokioRuntimeProvider::default());
        builder.options_mut().ndots = 0;
        let resolver = builder
            .build()
            .map_err(|e| ResolveError::Failed(e.to_string()))?;
        Ok(SystemResolver { resolver })
    }
}

impl Resolve for SystemResolver {
    fn resolve<'a>(&'a self, name: &'a str, family: Family) -> ResolveFuture<'a> {
        Box::pin(async move {
            let record_type = match family {
                Family::V4 => RecordType::A,
                Family::V6 => RecordType::AAAA,
            };
            let fqdn = format!("{name}.");
            match self.resolver.lookup(fqdn.as_str(), record_type).await {
                Ok(lookup) => Ok(lookup
                    .answers()
                    .iter()
                    .filter_map(|r| {
                        let ip = match &r.data {
                            RData::A(a) => IpAddr::V4(a.0),
                            RData::AAAA(aaaa) => IpAddr::V6(aaaa.0),
                            _ => return None,
                        };
                        Some(Resolved { ip, ttl: r.ttl })
                    })
                    .collect()),
                Err(e) if e.is_nx_domain() => Err(ResolveError::NxDomain),
                Err(e) if e.is_no_records_found() => Ok(Vec::new()),
                Err(e) => Err(ResolveError::Failed(e.to_string())),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn static_map_answers_its_names_per_family_and_falls_back() {
        let inner =
            Arc::new(StaticResolver::new().with("other.test", "198.51.100.7".parse().unwrap()));
        let r = StaticResolver::new()
            .with("Allowed.Test.", "203.0.113.10".parse().unwrap())
            .with("allowed.test", "2001:db8::10".parse().unwrap())
            .with_fallback(inner);
        let v4 = r.resolve("allowed.test", Family::V4).await.unwrap();
        assert_eq!(
            v4,
            vec![Resolved {
                ip: "203.0.113.10".parse().unwrap(),
                ttl: 60
            }]
        );
        let v6 = r.resolve("allowed.test", Family::V6).await.unwrap();
        assert_eq!(v6.len(), 1);
        assert_eq!(r.resolve("other.test", Family::V4).await.unwrap().len(), 1);
        let alone = StaticResolver::new();
        assert_eq!(
            alone.resolve("x.test", Family::V4).await,
            Err(ResolveError::NxDomain)
        );
    }
}
