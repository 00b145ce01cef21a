//! `/v1/workspaces/{workspace}/secrets…` (docs/api.md#secrets): a workspace's secrets, which its
//! contained computers use through placeholders. No answer ever carries a value.

use serde::{Deserialize, Serialize};

/// `PUT /v1/workspaces/{workspace}/secrets/{name}`: set (or rotate) a secret. Setting it again
/// replaces its value, domains and header; its placeholder stays.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutSecret {
    /// The secret's value (at most 4096 bytes of visible ASCII and spaces). Stored sealed,
    /// never answered.
    pub value: String,
    /// The domains it is sent to (names, or `*.` wildcards): 1 to 16.
    pub domains: Vec<String>,
    /// A header set with the value on every request to the domains, `{}` where the value goes
    /// (`Authorization: Bearer {}`). Without one, placeholders found in request headers are
    /// replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
}

/// `Debug` never shows the value.
impl std::fmt::Debug for PutSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PutSecret")
            .field("value", &"<redacted>")
            .field("domains", &self.domains)
            .field("header", &self.header)
            .finish()
    }
}

/// A secret as answered: everything but its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SecretInfo {
    pub workspace: String,
    pub name: String,
    pub domains: Vec<String>,
    /// The header template, if it has one.
    pub header: Option<String>,
    /// What the computers hold instead of the value, in `env_var`.
    pub placeholder: String,
    /// The environment variable of its computers' commands and terminals holding the
    /// placeholder.
    pub env_var: String,
    pub created_at_ms: i64,
    /// When its value was last set.
    pub rotated_at_ms: i64,
}

/// `GET /v1/workspaces/{workspace}/secrets`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SecretList {
    pub secrets: Vec<SecretInfo>,
}

/// `DELETE /v1/workspaces/{workspace}/secrets/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SecretDeleted {
    pub deleted: String,
}
