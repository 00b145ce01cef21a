//! `POST /v1/computers/{id}/mcp-tokens/{bot}`: minting an MCP session token.

use serde::{Deserialize, Serialize};

/// The request: how long the token works (default and ceiling: the server's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct McpTokenRequest {
    /// Seconds, at most a day (`MAX_TOKEN_TTL`); an hour when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 86400)]
    pub ttl_secs: Option<u64>,
}

/// A minted token: a bearer token for `path` (and `url`, when the request named a host) only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct McpToken {
    pub token: String,
    /// The MCP endpoint it opens, `/v1/mcp/{computer}/{bot}`.
    pub path: String,
    /// The endpoint as an absolute URL when the request's Host allowed one, else `path`.
    pub url: String,
    pub computer: String,
    pub bot: String,
    pub expires_at_ms: i64,
}
