//! A computer's network policy and the two pure decisions every other module asks of it.
//!
//! This module owns: the policy's shape (`open`, `none`, or an allow-list of domains and CIDRs,
//! each optionally restricted to ports, plus a deny list that wins), its parsing and validation
//! (JSON through serde, and a word form for the CLI through [`FromStr`]), the list of internal
//! address ranges that no policy can open ([`is_internal`]), and [`Policy::decide_name`] /
//! [`Policy::decide_addr`]. It does no I/O: whether an address was resolved from an allowed name
//! is the DNS record table's business ([`crate::registry`]), combined by the proxy.
//!
//! # Word form (CLI)
//!
//! ```text
//! open                                   any public address, any name
//! none                                   nothing
//! allow github.com *.pythonhosted.org:443 203.0.113.0/24:22,80
//! open deny evil.example.com 198.51.100.0/24
//! allow github.com deny gist.github.com
//! ```
//!
//! A rule is `NAME[:PORTS]` or `CIDR[:PORTS]` (an IPv6 CIDR with ports is bracketed:
//! `[2001:db8::/32]:443`); `PORTS` is a comma-separated list of ports and ranges
//! (`80,443,8000-8100`). A bare IP address is a /32 (/128). `*.example.com` matches every name
//! strictly under `example.com`, never `example.com` itself. The JSON form is
//! `{"mode":"allow","allow":["github.com:443"],"deny":["gist.github.com"]}` with the same rule
//! strings.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};

use crate::Reason;

/// At most this many rules, allow and deny together.
pub const MAX_RULES: usize = 256;
/// The longest name (RFC 1035, without the trailing dot).
pub const MAX_NAME_LEN: usize = 253;
/// At most this many port ranges in one rule.
pub const MAX_PORT_RANGES: usize = 32;

/// What a policy says about one destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny(Reason),
}

impl Decision {
    pub fn is_allowed(self) -> bool {
        self == Decision::Allow
    }
}

/// The base of a policy: what is reachable before the deny list is applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every public address and every name (internal ranges stay closed).
    Open,
    /// Nothing at all.
    None,
    /// Only what one of these rules matches.
    Allow(Vec<Rule>),
}

/// A computer's network policy. Build it with [`FromStr`], serde, or [`Policy::new`] (which
/// validates).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "PolicyJson", into = "PolicyJson")]
pub struct Policy {
    mode: Mode,
    deny: Vec<Rule>,
}

/// One allow or deny entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    Domain {
        pattern: DomainPattern,
        ports: Ports,
    },
    Net {
        net: IpNet,
        ports: Ports,
    },
}

/// `example.com` (that name only) or `*.example.com` (strict subdomains only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainPattern {
    /// Lowercase, no trailing dot, without the `*.` of a wildcard.
    base: String,
    wildcard: bool,
}

/// Ports a rule applies to: all of them, or a list of inclusive ranges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ports {
    Any,
    Ranges(Vec<(u16, u16)>),
}

/// Why a policy was refused, in words a user can act on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("a policy starts with `open`, `none` or `allow`, not {0:?}")]
    Mode(String),
    #[error("too many rules: {0} (at most {MAX_RULES})")]
    TooMany(usize),
    #[error("`{mode}` takes no allow rules (found {rule:?}); use `allow` to list them")]
    RulesWithoutAllow { mode: &'static str, rule: String },
    #[error("invalid rule {rule:?}: {why}")]
    Rule { rule: String, why: String },
}

fn rule_error(rule: &str, why: impl Into<String>) -> PolicyError {
    PolicyError::Rule {
        rule: rule.chars().take(300).collect(),
        why: why.into(),
    }
}

impl Policy {
    /// A validated policy.
    pub fn new(mode: Mode, deny: Vec<Rule>) -> Result<Policy, PolicyError> {
        let allow = match &mode {
            Mode::Allow(rules) => rules.len(),
            _ => 0,
        };
        if allow + deny.len() > MAX_RULES {
            return Err(PolicyError::TooMany(allow + deny.len()));
        }
        Ok(Policy { mode, deny })
    }

    pub fn open() -> Policy {
        Policy {
            mode: Mode::Open,
            deny: Vec::new(),
        }
    }

    pub fn none() -> Policy {
        Policy {
            mode: Mode::None,
            deny: Vec::new(),
        }
    }

    pub fn mode(&self) -> &Mode {
        &self.mode
    }

    pub fn deny_rules(&self) -> &[Rule] {
        &self.deny
    }

    /// May a connection to `name` on `port` go out, as far as names go?
    ///
    /// In order: a name that is an IP literal is decided by [`Policy::decide_addr`]; a name that
    /// is not a valid DNS name (empty, over 253 characters, a label over 63, characters other
    /// than letters, digits, `-` and `_`) is denied ([`Reason::InvalidName`]); a deny rule
    /// matching the name and port denies ([`Reason::DenyListed`]); then `none` denies
    /// ([`Reason::PolicyNone`]), `open` allows, and an allow list allows only if one of its
    /// domain rules matches the name and port ([`Reason::NotAllowed`] otherwise). Names are
    /// compared case-insensitively, a trailing dot ignored. CIDR rules never match a name: an
    /// address reached by name must still be one that name resolved to (the proxy checks).
    pub fn decide_name(&self, name: &str, port: u16) -> Decision {
        self.decide_name_ports(name, Some(port))
    }

    /// What DNS asks: may `name` be resolved at all, that is, does [`Policy::decide_name`] allow
    /// it on at least one port? A name allowed only on port 443 resolves; a connection to it on
    /// port 22 is then refused by the proxy.
    pub fn decide_name_any_port(&self, name: &str) -> Decision {
        self.decide_name_ports(name, None)
    }

    fn decide_name_ports(&self, name: &str, port: Option<u16>) -> Decision {
        if let Ok(ip) = strip_brackets(name).parse::<IpAddr>() {
            return match port {
                Some(port) => self.decide_addr(ip, port),
                // DNS never answers for an address literal.
                None => Decision::Deny(Reason::InvalidName),
            };
        }
        let Some(name) = normalize_name(name) else {
            return Decision::Deny(Reason::InvalidName);
        };
        let hit = |rule: &Rule| match rule {
            Rule::Domain { pattern, ports } => pattern.matches(&name) && ports.matches(port),
            Rule::Net { .. } => false,
        };
        // A deny rule restricted to some ports still lets the name resolve for the others.
        let denied = self.deny.iter().any(|rule| match (rule, port) {
            (Rule::Domain { pattern, ports }, None) => {
                pattern.matches(&name) && *ports == Ports::Any
            }
            _ => hit(rule),
        });
        if denied {
            return Decision::Deny(Reason::DenyListed);
        }
        match &self.mode {
            Mode::None => Decision::Deny(Reason::PolicyNone),
            Mode::Open => Decision::Allow,
            Mode::Allow(rules) if rules.iter().any(hit) => Decision::Allow,
            Mode::Allow(_) => Decision::Deny(Reason::NotAllowed),
        }
    }

    /// May a connection to `ip` on `port` go out, as far as addresses go?
    ///
    /// In order: an IPv4-mapped IPv6 address is decided as its IPv4 address; an internal address
    /// ([`is_internal`]) is denied whatever the policy ([`Reason::Internal`]); a deny CIDR
    /// matching address and port denies ([`Reason::DenyListed`]); then `none` denies, `open`
    /// allows, and an allow list allows only if one of its CIDR rules matches address and port.
    /// Domain rules never match here: whether `ip` is an address an allowed name resolved to is
    /// known only to the DNS record table.
    pub fn decide_addr(&self, ip: IpAddr, port: u16) -> Decision {
        let ip = canonical(ip);
        if is_internal(ip) {
            return Decision::Deny(Reason::Internal);
        }
        let hit = |rule: &Rule| match rule {
            Rule::Net { net, ports } => net_contains(net, ip) && ports.matches(Some(port)),
            Rule::Domain { .. } => false,
        };
        if self.deny.iter().any(hit) {
            return Decision::Deny(Reason::DenyListed);
        }
        match &self.mode {
            Mode::None => Decision::Deny(Reason::PolicyNone),
            Mode::Open => Decision::Allow,
            Mode::Allow(rules) if rules.iter().any(hit) => Decision::Allow,
            Mode::Allow(_) => Decision::Deny(Reason::NotAllowed),
        }
    }
}

fn net_contains(net: &IpNet, ip: IpAddr) -> bool {
    match (net, ip) {
        (IpNet::V4(n), IpAddr::V4(a)) => n.contains(&a),
        (IpNet::V6(n), IpAddr::V6(a)) => n.contains(&a),
        _ => false,
    }
}

/// The IPv4 address inside an IPv4-mapped IPv6 address, any other address as it is.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

const INTERNAL_V4: [(Ipv4Addr, u8); 12] = [
    (Ipv4Addr::new(0, 0, 0, 0), 8),      // "this network"
    (Ipv4Addr::new(10, 0, 0, 0), 8),     // private
    (Ipv4Addr::new(100, 64, 0, 0), 10),  // shared (carrier-grade NAT)
    (Ipv4Addr::new(127, 0, 0, 0), 8),    // loopback
    (Ipv4Addr::new(169, 254, 0, 0), 16), // link-local, cloud metadata 169.254.169.254
    (Ipv4Addr::new(172, 16, 0, 0), 12),  // private
    (Ipv4Addr::new(192, 0, 0, 0), 24),   // IETF protocol assignments
    (Ipv4Addr::new(192, 88, 99, 0), 24), // 6to4 relay anycast
    (Ipv4Addr::new(192, 168, 0, 0), 16), // private
    (Ipv4Addr::new(198, 18, 0, 0), 15),  // benchmarking
    (Ipv4Addr::new(224, 0, 0, 0), 4),    // multicast
    (Ipv4Addr::new(240, 0, 0, 0), 4),    // reserved, broadcast
];

const INTERNAL_V6: [(Ipv6Addr, u8); 6] = [
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0), 96), // ::, ::1, deprecated IPv4-compatible
    (Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64), // discard-only
    (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7), // unique local
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10), // link-local
    (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10), // site-local (deprecated)
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8), // multicast
];

/// Is `ip` in a range no policy opens? IPv4: 0/8, 10/8, 100.64/10, 127/8, 169.254/16, 172.16/12,
/// 192.0.0/24, 192.88.99/24, 192.168/16, 198.18/15, 224/4, 240/4. IPv6: ::/96 (:: and ::1
/// included), 100::/64, fc00::/7, fe80::/10, fec0::/10, ff00::/8; an IPv4-mapped
/// (::ffff:a.b.c.d), NAT64 (64:ff9b::/96) or 6to4 (2002::/16) address is internal when the IPv4
/// address it carries is. The documentation ranges (192.0.2/24, 198.51.100/24, 203.0.113/24,
/// 2001:db8::/32) are not internal: test hosts live there.
pub fn is_internal(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => INTERNAL_V4
            .iter()
            .any(|&(net, len)| Ipv4Net::new(net, len).is_ok_and(|n| n.contains(&v4))),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let embedded = if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
                Some(Ipv4Addr::new(
                    (s[6] >> 8) as u8,
                    s[6] as u8,
                    (s[7] >> 8) as u8,
                    s[7] as u8,
                ))
            } else if s[0] == 0x2002 {
                Some(Ipv4Addr::new(
                    (s[1] >> 8) as u8,
                    s[1] as u8,
                    (s[2] >> 8) as u8,
                    s[2] as u8,
                ))
            } else {
                None
            };
            if let Some(v4) = embedded {
                return is_internal(IpAddr::V4(v4));
            }
            INTERNAL_V6
                .iter()
                .any(|&(net, len)| Ipv6Net::new(net, len).is_ok_and(|n| n.contains(&v6)))
        }
    }
}

/// `name` lowercased without its trailing dot, if it is a valid DNS name.
pub fn normalize_name(name: &str) -> Option<String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return None;
    }
    let ok = name.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    ok.then(|| name.to_ascii_lowercase())
}

fn strip_brackets(s: &str) -> &str {
    s.strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(s)
}

impl DomainPattern {
    /// Does this pattern match `name` (already normalized)?
    pub fn matches(&self, name: &str) -> bool {
        if self.wildcard {
            name.len() > self.base.len()
                && name.ends_with(self.base.as_str())
                && name.as_bytes()[name.len() - self.base.len() - 1] == b'.'
        } else {
            name == self.base
        }
    }
}

impl FromStr for DomainPattern {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (wildcard, rest) = match s.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        if rest.contains('*') {
            return Err("a wildcard is only allowed as a leading `*.`".into());
        }
        let base = normalize_name(rest).ok_or_else(|| {
            format!(
                "not a domain name (at most {MAX_NAME_LEN} characters, labels of 1 to 63 \
                 letters, digits, `-` or `_`)"
            )
        })?;
        if wildcard && !base.contains('.') {
            return Err("a wildcard must be under a domain with at least two labels".into());
        }
        // A hostname's labels neither start nor end with `-` (so a stray `--flag` is never
        // taken for a name).
        if base
            .split('.')
            .any(|label| label.starts_with('-') || label.ends_with('-'))
        {
            return Err("not a domain name (a label starts or ends with `-`)".into());
        }
        Ok(DomainPattern { base, wildcard })
    }
}

impl fmt::Display for DomainPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.wildcard {
            f.write_str("*.")?;
        }
        f.write_str(&self.base)
    }
}

impl Ports {
    /// `None` asks "any port at all?", which every rule answers yes.
    fn matches(&self, port: Option<u16>) -> bool {
        match (self, port) {
            (Ports::Any, _) | (_, None) => true,
            (Ports::Ranges(ranges), Some(p)) => ranges.iter().any(|&(lo, hi)| lo <= p && p <= hi),
        }
    }
}

impl FromStr for Ports {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut ranges = Vec::new();
        for part in s.split(',') {
            if ranges.len() == MAX_PORT_RANGES {
                return Err(format!(
                    "at most {MAX_PORT_RANGES} ports or ranges in one rule"
                ));
            }
            let port = |p: &str| match p.parse::<u16>() {
                Ok(0) | Err(_) => Err(format!("{p:?} is not a port (1 to 65535)")),
                Ok(p) => Ok(p),
            };
            let (lo, hi) = match part.split_once('-') {
                Some((lo, hi)) => (port(lo)?, port(hi)?),
                None => (port(part)?, port(part)?),
            };
            if lo > hi {
                return Err(format!("the range {part:?} is empty"));
            }
            ranges.push((lo, hi));
        }
        Ok(Ports::Ranges(ranges))
    }
}

impl fmt::Display for Ports {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Ports::Ranges(ranges) = self else {
            return Ok(());
        };
        for (i, &(lo, hi)) in ranges.iter().enumerate() {
            let sep = if i == 0 { ":" } else { "," };
            if lo == hi {
                write!(f, "{sep}{lo}")?;
            } else {
                write!(f, "{sep}{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

impl FromStr for Rule {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Self, PolicyError> {
        if s.len() > MAX_NAME_LEN + 200 {
            return Err(rule_error(s, "too long"));
        }
        // `[v6 or v6/len]:ports`
        if let Some(rest) = s.strip_prefix('[') {
            let (inner, after) = rest
                .split_once(']')
                .ok_or_else(|| rule_error(s, "an unclosed `[`"))?;
            let ports = match after {
                "" => Ports::Any,
                p => p
                    .strip_prefix(':')
                    .ok_or_else(|| rule_error(s, "expected `:PORTS` after `]`"))?
                    .parse()
                    .map_err(|e| rule_error(s, e))?,
            };
            return Ok(Rule::Net {
                net: parse_net(inner).map_err(|e| rule_error(s, e))?,
                ports,
            });
        }
        // A bare IPv6 address or CIDR has several colons and no ports.
        if s.matches(':').count() > 1 {
            let net = parse_net(s).map_err(|e| rule_error(s, e))?;
            return Ok(Rule::Net {
                net,
                ports: Ports::Any,
            });
        }
        let (host, ports) = match s.split_once(':') {
            Some((host, ports)) => (host, ports.parse().map_err(|e| rule_error(s, e))?),
            None => (s, Ports::Any),
        };
        if host.starts_with(|c: char| c.is_ascii_digit())
            && (host.contains('/') || host.parse::<IpAddr>().is_ok())
        {
            return Ok(Rule::Net {
                net: parse_net(host).map_err(|e| rule_error(s, e))?,
                ports,
            });
        }
        let pattern = host.parse().map_err(|e| rule_error(s, e))?;
        Ok(Rule::Domain { pattern, ports })
    }
}

fn parse_net(s: &str) -> Result<IpNet, String> {
    let net = match s.parse::<IpNet>() {
        Ok(net) => net,
        Err(_) => match s.parse::<IpAddr>() {
            Ok(ip) => IpNet::from(ip),
            Err(_) => return Err("not an IP address or CIDR".into()),
        },
    };
    // A mapped IPv6 CIDR is stored as the IPv4 CIDR it means, since addresses are compared in
    // their canonical form.
    if let IpNet::V6(v6) = net {
        if let (Some(v4), true) = (v6.network().to_ipv4_mapped(), v6.prefix_len() >= 96) {
            return Ipv4Net::new(v4, v6.prefix_len() - 96)
                .map(IpNet::V4)
                .map_err(|e| e.to_string());
        }
    }
    Ok(net.trunc())
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Domain { pattern, ports } => write!(f, "{pattern}{ports}"),
            Rule::Net {
                net: IpNet::V6(net),
                ports,
            } if *ports != Ports::Any => {
                write!(f, "[{net}]{ports}")
            }
            Rule::Net { net, ports } => write!(f, "{net}{ports}"),
        }
    }
}

impl FromStr for Policy {
    type Err = PolicyError;
    /// The word form (see the module docs), or JSON when it starts with `{`.
    fn from_str(s: &str) -> Result<Self, PolicyError> {
        let s = s.trim();
        if s.starts_with('{') {
            return serde_json::from_str(s).map_err(|e| PolicyError::Rule {
                rule: "JSON".into(),
                why: e.to_string(),
            });
        }
        let mut words = s.split_whitespace();
        let first = words.next().unwrap_or("");
        let mut allow = Vec::new();
        let mut deny = Vec::new();
        let mut in_deny = false;
        for word in words {
            if allow.len() + deny.len() >= MAX_RULES {
                return Err(PolicyError::TooMany(allow.len() + deny.len() + 1));
            }
            if word == "deny" && !in_deny {
                in_deny = true;
                continue;
            }
            if in_deny {
                deny.push(word.parse()?);
            } else {
                allow.push(word.to_string());
            }
        }
        PolicyJson {
            mode: first.to_string(),
            allow,
            deny: Vec::new(),
        }
        .try_into()
        .and_then(|p: Policy| Policy::new(p.mode, deny))
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.mode {
            Mode::Open => f.write_str("open")?,
            Mode::None => f.write_str("none")?,
            Mode::Allow(rules) => {
                f.write_str("allow")?;
                for rule in rules {
                    write!(f, " {rule}")?;
                }
            }
        }
        if !self.deny.is_empty() {
            f.write_str(" deny")?;
            for rule in &self.deny {
                write!(f, " {rule}")?;
            }
        }
        Ok(())
    }
}

/// The JSON shape: `{"mode": "open"|"none"|"allow", "allow": [rule...], "deny": [rule...]}`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyJson {
    mode: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    deny: Vec<String>,
}

impl TryFrom<PolicyJson> for Policy {
    type Error = PolicyError;
    fn try_from(json: PolicyJson) -> Result<Self, PolicyError> {
        let total = json.allow.len() + json.deny.len();
        if total > MAX_RULES {
            return Err(PolicyError::TooMany(total));
        }
        let parse = |rules: &[String]| rules.iter().map(|r| r.parse()).collect::<Result<_, _>>();
        let mode = match json.mode.as_str() {
            "open" | "none" if !json.allow.is_empty() => {
                return Err(PolicyError::RulesWithoutAllow {
                    mode: if json.mode == "open" { "open" } else { "none" },
                    rule: json.allow[0].chars().take(300).collect(),
                })
            }
            "open" => Mode::Open,
            "none" => Mode::None,
            "allow" => Mode::Allow(parse(&json.allow)?),
            other => return Err(PolicyError::Mode(other.chars().take(40).collect())),
        };
        Policy::new(mode, parse(&json.deny)?)
    }
}

impl From<Policy> for PolicyJson {
    fn from(policy: Policy) -> Self {
        let strings = |rules: &[Rule]| rules.iter().map(Rule::to_string).collect();
        let (mode, allow) = match &policy.mode {
            Mode::Open => ("open", Vec::new()),
            Mode::None => ("none", Vec::new()),
            Mode::Allow(rules) => ("allow", strings(rules)),
        };
        PolicyJson {
            mode: mode.into(),
            allow,
            deny: strings(&policy.deny),
        }
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
