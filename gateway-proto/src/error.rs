//! The failure every operation may answer with: [`OpError`] and its [`ErrorCode`].
//!
//! A leaf module: the message modules import it, it imports none of them.

use serde::{Deserialize, Serialize};

/// A failed operation: a code callers branch on and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct OpError {
    pub code: ErrorCode,
    pub message: String,
}

impl OpError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// What kind of failure an [`OpError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorCode {
    /// The request is malformed or out of bounds.
    BadRequest,
    /// A path is absolute, has `..`, or would leave the home through a symlink.
    PathRejected,
    NotFound,
    /// A file is larger than the requested cap.
    TooLarge,
    /// The lease presented is older than one the guest has seen, or was released.
    StaleLease,
    /// The guest could not do it (I/O, spawn); the message says what.
    Failed,
    /// The guest does not implement this request.
    Unsupported,
    /// `COMPUTER_SCREEN_UNAVAILABLE`: no screen can be allocated (limit reached).
    ScreenUnavailable,
    /// The bot's slot is still being released.
    ScreenReleasing,
    /// The repeated-action refusal (docs/screens.md#repeated-action-refusal): the batch was not
    /// run.
    ActionRefused,
    /// The name is taken and the request said not to replace it.
    Exists,
    /// The computer runs the most detached processes it may.
    TooManyProcesses,
}

impl ErrorCode {
    /// Stable name used in the HTTP API: snake_case, except the contract's own
    /// `COMPUTER_SCREEN_UNAVAILABLE` (docs/api.md#error-codes).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BadRequest => "bad_request",
            Self::PathRejected => "path_rejected",
            Self::NotFound => "not_found",
            Self::TooLarge => "too_large",
            Self::StaleLease => "stale_lease",
            Self::Failed => "failed",
            Self::Unsupported => "unsupported",
            Self::ScreenUnavailable => "COMPUTER_SCREEN_UNAVAILABLE",
            Self::ScreenReleasing => "screen_releasing",
            Self::ActionRefused => "action_refused",
            Self::Exists => "exists",
            Self::TooManyProcesses => "too_many_processes",
        }
    }
}
