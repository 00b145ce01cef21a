//! MCP: the computer tools for any MCP client, over streamable HTTP at `/v1/mcp/{computer}/{bot}`.
//!
//! The official SDK (rmcp) speaks the protocol; it is mounted on the API's hyper server as a tower
//! service (`api::mcp`, with the tools in `api::mcp::tools`, beside the handlers whose
//! operations they call). This module holds the configuration and the sessions. A session is bound to the computer and bot of its path and holds that
//! bot's execution lease ([`session`]): acquired at `initialize` (or given by the client in the
//! `Rakazo-Lease` header, then checked live), renewed every minute while the session lives, and
//! released when it ends: `DELETE` (outcome `success`, or `?outcome=failed|cancelled`), or no
//! request for the session idle time (outcome `cancelled`).
//!
//! The tools call the same operations the HTTP handlers call
//! (`api::{screens,browser,exec,files}`, `live::authority`), so their limits, error texts and
//! activity-feed lines are the API's. Authentication: the API token, or a session token minted
//! by `POST /v1/computers/{id}/mcp-tokens/{bot}` (sealed like capability URLs, `live::seal`),
//! which opens that one computer and bot's endpoint and nothing else.

pub mod session;

use clap::Args;
use std::time::Duration;

/// The header a client gives an execution lease it already holds in.
pub const LEASE_HEADER: &str = "rakazo-lease";
/// Default lifetime of a minted session token.
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(60 * 60);
/// Longest lifetime a session token may be minted for.
pub const MAX_TOKEN_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// Default idle time after which a session ends (and its lease is released).
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(10 * 60);

/// `rakazo serve` flags of the MCP endpoint.
#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    /// Host names (or `host:port`) MCP requests may name in their `Host` header, comma-separated:
    /// the names clients reach this server by (its DNS name behind a proxy, for instance).
    /// Loopback names are always allowed, and so is the `--http-addr` IP when it is not a
    /// wildcard. `*` allows any host (turns off DNS-rebinding protection; not recommended).
    #[arg(long, env = "RAKAZO_MCP_ALLOWED_HOSTS", value_delimiter = ',')]
    pub mcp_allowed_hosts: Vec<String>,
    /// An MCP session with no request for this long ends, and its lease is released.
    #[arg(long, env = "RAKAZO_MCP_SESSION_IDLE_SECS",
          default_value_t = DEFAULT_SESSION_IDLE.as_secs())]
    pub mcp_session_idle_secs: u64,
}

impl McpArgs {
    /// Range-checks the flags; `http_addr` is the API's bound address.
    pub fn resolve(&self, http_addr: std::net::SocketAddr) -> anyhow::Result<McpConfig> {
        let idle = Duration::from_secs(self.mcp_session_idle_secs);
        if !(1..=24 * 3600).contains(&self.mcp_session_idle_secs) {
            anyhow::bail!(
                "the MCP session idle time must be 1..=86400 seconds, got {}",
                self.mcp_session_idle_secs
            );
        }
        let mut hosts: Vec<String> = Vec::new();
        for h in &self.mcp_allowed_hosts {
            let h = h.trim();
            if h.is_empty() {
                continue;
            }
            if h == "*" {
                return Ok(McpConfig {
                    allowed_hosts: None,
                    session_idle: idle,
                });
            }
            if h.len() > 255
                || !h.bytes().all(|b| {
                    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']')
                })
            {
                anyhow::bail!("--mcp-allowed-hosts: {h:?} is not a host name or host:port");
            }
            hosts.push(h.to_string());
        }
        let mut config = McpConfig::local(idle);
        if let Some(all) = config.allowed_hosts.as_mut() {
            if !http_addr.ip().is_unspecified() {
                all.push(http_addr.ip().to_string());
            }
            all.extend(hosts);
        }
        Ok(config)
    }
}

/// The MCP endpoint's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpConfig {
    /// `Host` values accepted (`None`: any).
    pub allowed_hosts: Option<Vec<String>>,
    pub session_idle: Duration,
}

impl McpConfig {
    /// Loopback hosts only.
    pub fn local(session_idle: Duration) -> Self {
        Self {
            allowed_hosts: Some(vec![
                "localhost".to_string(),
                "127.0.0.1".to_string(),
                "::1".to_string(),
            ]),
            session_idle,
        }
    }
}

impl Default for McpConfig {
    fn default() -> Self {
        Self::local(DEFAULT_SESSION_IDLE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(hosts: &[&str]) -> McpArgs {
        McpArgs {
            mcp_allowed_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            mcp_session_idle_secs: 60,
        }
    }

    #[test]
    fn allowed_hosts_add_to_loopback_and_star_allows_any() {
        let bound = "10.0.0.7:7090".parse().unwrap();
        let c = args(&["mcp.example.com", "proxy:8443"])
            .resolve(bound)
            .unwrap();
        let hosts = c.allowed_hosts.unwrap();
        for h in [
            "localhost",
            "127.0.0.1",
            "10.0.0.7",
            "mcp.example.com",
            "proxy:8443",
        ] {
            assert!(hosts.iter().any(|x| x == h), "{h} in {hosts:?}");
        }
        let wildcard = args(&[]).resolve("0.0.0.0:7090".parse().unwrap()).unwrap();
        assert!(!wildcard
            .allowed_hosts
            .unwrap()
            .iter()
            .any(|h| h == "0.0.0.0"));
        assert_eq!(args(&["*"]).resolve(bound).unwrap().allowed_hosts, None);
        assert!(args(&["a b"]).resolve(bound).is_err());
        let mut zero = args(&[]);
        zero.mcp_session_idle_secs = 0;
        assert!(zero.resolve(bound).is_err());
    }
}
