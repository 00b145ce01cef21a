//! The egress gateway: the only way out of a contained computer's network.
//!
//! The network plumbing (a network namespace per computer, its veth, nftables) sends the
//! computer's DNS to this gateway's resolver ([`dns`]) and DNAT-redirects its outbound TCP to the
//! transparent proxy ([`proxy`]); everything else is dropped there. An explicit HTTP proxy
//! ([`http_proxy`]) serves clients configured to use one. Every path asks the computer's
//! [`Policy`] ([`policy`]) and reports each decision as an [`Event`] ([`events`]), aggregated
//! per second.
//!
//! The crate stores no policy: the control plane that embeds it registers computers, their
//! addresses, policies and limits in a [`Registry`] (or answers [`Directory`] lookups itself),
//! and changes them at any time; a change applies to the next query or connection.
//!
//! Embedding it (the control plane's side):
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use egress::{ComputerId, Config, Events, Gateway, Limits, Policy, Registry, SystemResolver};
//!
//! let registry = Arc::new(Registry::new());
//! let (events, mut feed) = Events::channel(4096);
//! tokio::spawn(events.clone().run()); // flushes the aggregated events once a second
//! let resolver = Arc::new(SystemResolver::from_system_conf()?);
//! let gateway = Gateway::new(registry.clone(), resolver, events, Config::default());
//! let dns = tokio::net::UdpSocket::bind("10.200.0.1:53").await?;
//! let transparent = tokio::net::TcpListener::bind("10.200.0.1:15001").await?;
//! let (g1, g2) = (gateway.clone(), gateway.clone());
//! tokio::spawn(async move { g1.serve_dns_udp(dns).await });
//! tokio::spawn(async move { g2.serve_transparent(transparent).await });
//!
//! let id = ComputerId::new("c-0123456789abcdef");
//! let policy: Policy = "allow github.com *.pythonhosted.org:443".parse()?;
//! registry.add(id.clone(), vec!["10.200.1.2".parse()?], policy, Limits::default());
//! registry.set_policy(&id, Policy::none()); // the next query and connection see it
//! while let Some(event) = feed.recv().await {
//!     println!("{} {:?} {:?}:{} x{}", event.feed_kind(), event.reason, event.target, event.port, event.count);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! ```text
//! computer --DNS--> dns::serve_udp/tcp --(allowed names only)--> Resolve (upstream)
//!     |                    \--records (computer, ip) -> (name, expiry)--\
//!     +--TCP (DNAT)--> proxy::serve --peek SNI/Host--> decide --dial--> destination
//!     +--HTTP proxy--> http_proxy::serve --CONNECT / absolute-form--> decide --dial--> ...
//! ```

pub mod clock;
pub mod dns;
pub mod events;
pub mod gateway;
pub mod http_proxy;
pub mod limits;
pub mod meter;
pub mod policy;
pub mod proxy;
pub mod registry;
pub mod resolve;
pub mod secrets;
pub mod sniff;

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use events::{Event, EventKind, Events, Target};
pub use gateway::{Config, Dial, DirectDial, Gateway, OriginalDst, SoOriginalDst};
pub use limits::Limits;
pub use policy::{Decision, Policy, PolicyError};
pub use registry::{Computer, CounterSnapshot, Directory, Registry};
pub use resolve::{Family, Resolve, ResolveError, Resolved, StaticResolver, SystemResolver};
pub use secrets::{ComputerCa, Secret, SecretError, SecretSet};

/// The control plane's name for a computer (`c-…`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ComputerId(pub Arc<str>);

impl Serialize for ComputerId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl ComputerId {
    pub fn new(id: &str) -> ComputerId {
        ComputerId(Arc::from(id))
    }
}

impl fmt::Display for ComputerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a query or connection was allowed or denied (the `reason` of an [`Event`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Allowed: the name is allowed and the address is one it resolved to (or the policy allows
    /// the address itself).
    Allowed,
    /// The destination is in an internal range, which no policy opens.
    Internal,
    /// A deny rule matched.
    DenyListed,
    /// The policy is `none`.
    PolicyNone,
    /// No allow rule matched.
    NotAllowed,
    /// The name is not a valid DNS name.
    InvalidName,
    /// The name is allowed but the address was not one it resolved to for this computer (or no
    /// name was seen and the address is allowed by no rule and no resolution).
    NotResolved,
    /// The computer's DNS query rate limit.
    RateLimited,
    /// The computer's concurrent connection limit.
    TooManyConnections,
    /// The peer address belongs to no registered computer.
    UnknownComputer,
    /// The destination could not be reached (refused, unreachable, or no answer in time).
    ConnectFailed,
    /// The upstream resolver failed or the name does not exist.
    ResolveFailed,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Allowed => "allowed",
            Reason::Internal => "internal address",
            Reason::DenyListed => "deny-listed",
            Reason::PolicyNone => "network policy is none",
            Reason::NotAllowed => "not in the allow list",
            Reason::InvalidName => "invalid name",
            Reason::NotResolved => "address not resolved from an allowed name",
            Reason::RateLimited => "DNS query rate limit",
            Reason::TooManyConnections => "too many connections",
            Reason::UnknownComputer => "unknown computer",
            Reason::ConnectFailed => "destination unreachable",
            Reason::ResolveFailed => "name did not resolve",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
