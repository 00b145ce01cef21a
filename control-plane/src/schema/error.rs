//! The one error shape of the API: `{"error": {code, message, uncertain}}` with the HTTP
//! status, and the same fields in the `error` line of an NDJSON stream (exec, home flows).

use serde::{Deserialize, Serialize};

/// The body of every non-2xx answer under `/v1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorInfo,
}

/// What failed: a stable snake_case code, a message for people, and whether the operation may
/// have had an effect anyway (the tunnel was lost mid-operation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorInfo {
    pub code: String,
    pub message: String,
    /// Absent reads as `false`.
    #[serde(default)]
    pub uncertain: bool,
}
