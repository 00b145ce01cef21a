//! [`Secret`]: a token on the wire whose `Debug` never shows it. A leaf module, so the messages
//! (which carry it) and the handshake (which sends them) both import it without a circle.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A secret string (enrollment or API token) whose `Debug` never shows it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    /// The secret itself; call only where it is compared or sent.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}
