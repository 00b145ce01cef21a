//! `/v1/tokens…` and `/console/session` (docs/security.md#api-tokens): scoped API tokens and the
//! console's sessions. A token's value is answered once, by `POST /v1/tokens`; nothing else
//! carries it.

use serde::{Deserialize, Serialize};

/// `POST /v1/tokens`: make a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// `admin`, `operator` or `viewer`.
    pub role: String,
    /// The workspaces it is limited to (1 to 64); absent: every computer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspaces: Option<Vec<String>>,
    /// Seconds until it expires (at most ten years); absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_secs: Option<u64>,
    /// A name to know it by (1 to 64 letters, digits, spaces or `-_.@`).
    pub name: String,
}

/// A token as listed: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenInfo {
    pub id: String,
    pub name: String,
    pub role: String,
    /// The workspaces it is limited to; `null`: every computer.
    pub workspaces: Option<Vec<String>>,
    pub created_at_ms: i64,
    pub expires_at_ms: Option<i64>,
    pub revoked_at_ms: Option<i64>,
}

/// `POST /v1/tokens`: the new token, with its value (shown this once).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CreatedToken {
    #[serde(flatten)]
    pub info: TokenInfo,
    /// The token: `Authorization: Bearer <token>`. Stored only as a digest: keep it now.
    pub token: String,
}

/// `Debug` never shows the value.
impl std::fmt::Debug for CreatedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedToken")
            .field("info", &self.info)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// `GET /v1/tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenList {
    pub tokens: Vec<TokenInfo>,
}

/// `POST /console/session`: sign in with an API token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenSession {
    pub token: String,
}

impl std::fmt::Debug for OpenSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OpenSession { token: <redacted> }")
    }
}

/// A console session: who it is and the CSRF token its state-changing requests carry in
/// `X-CSRF-Token`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SessionInfo {
    pub csrf: String,
    pub role: String,
    /// The workspaces it sees; `null`: every computer.
    pub workspaces: Option<Vec<String>>,
    /// The token's name (`server` for the server's own).
    pub name: String,
    pub expires_at: i64,
}
