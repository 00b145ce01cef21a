//! `/v1/computers/{id}/previews`: preview URLs (docs/previews.md). A preview's URL is answered
//! once, by the create; listings never carry it.

use serde::{Deserialize, Serialize};

/// `POST /v1/computers/{id}/previews`: make a preview URL for a port inside the computer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePreview {
    /// The TCP port on the computer's loopback (1 to 65535).
    pub port: u16,
    /// `link` (the default: the URL is the capability), `session` (also a console session
    /// that sees the computer) or `public` (anyone with the URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<String>,
    /// Seconds until it stops working (default 3600, at most 30 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_secs: Option<u64>,
}

/// A preview as listed: never its URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Preview {
    /// Its id (the `{preview}` of its routes): not a secret, opens nothing.
    pub id: String,
    pub computer: String,
    pub port: u16,
    /// `link`, `session` or `public`.
    pub access: String,
    /// The token name that made it.
    pub created_by: String,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at_ms: Option<i64>,
    /// `live`, `expired` or `revoked`.
    pub state: String,
}

/// `POST /v1/computers/{id}/previews`: the preview, with its URL (shown this once).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CreatedPreview {
    #[serde(flatten)]
    pub preview: Preview,
    /// What to open: the preview's own origin (`http://<label>.<preview domain>:<port>/`),
    /// with a `link` or `session` preview's one-time way in. Only its digest is stored.
    pub url: String,
    /// The preview's origin alone (for a `public` preview, the same as `url`).
    pub origin: String,
}

/// `Debug` never shows the URL.
impl std::fmt::Debug for CreatedPreview {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedPreview")
            .field("preview", &self.preview)
            .field("url", &"<redacted>")
            .finish()
    }
}

/// `GET /v1/computers/{id}/previews`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PreviewList {
    pub previews: Vec<Preview>,
}
