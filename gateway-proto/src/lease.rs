//! Bot identities and fenced lease tokens (`<owner>:<fence>`, docs/lifecycle.md#leases).
//!
//! This module owns the *shape* of these values and their validation. Who holds a lease is
//! decided by the control plane's lease store; whether a token is stale is decided by the guest's
//! fence table. Both rely on the parsing here.

use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;

/// Longest bot id accepted anywhere.
pub const MAX_BOT_ID_LEN: usize = 128;
/// Longest lease owner (run id) accepted anywhere.
pub const MAX_OWNER_LEN: usize = 128;

/// Why a bot id or lease token was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LeaseParseError {
    #[error("bot id must be 1..={MAX_BOT_ID_LEN} characters of [A-Za-z0-9._-]")]
    BadBotId,
    #[error("lease owner must be 1..={MAX_OWNER_LEN} characters of [A-Za-z0-9._:-]")]
    BadOwner,
    #[error("lease must be written <owner>:<fence> with a decimal fence")]
    BadToken,
}

fn is_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// A bot identity. Validated: it becomes part of file names (profile keys) and database keys.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct BotId(String);

impl BotId {
    /// Validates and wraps a bot id.
    pub fn new(s: impl Into<String>) -> Result<Self, LeaseParseError> {
        let s = s.into();
        let ok = !s.is_empty()
            && s.len() <= MAX_BOT_ID_LEN
            && s.chars().all(is_id_char)
            && s != "."
            && s != "..";
        if ok {
            Ok(Self(s))
        } else {
            Err(LeaseParseError::BadBotId)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for BotId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        BotId::new(String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for BotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for BotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BotId({})", self.0)
    }
}

/// A fenced lease: the owner (a run id) and the fence number it was granted.
///
/// Written `<owner>:<fence>`. The fence only goes up: every acquire increments it.
#[derive(Clone, PartialEq, Eq, Hash, Serialize)]
pub struct LeaseToken {
    owner: String,
    fence: u64,
}

#[derive(Deserialize)]
struct RawLeaseToken {
    owner: String,
    fence: u64,
}

impl<'de> Deserialize<'de> for LeaseToken {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawLeaseToken::deserialize(d)?;
        LeaseToken::new(raw.owner, raw.fence).map_err(serde::de::Error::custom)
    }
}

impl LeaseToken {
    /// Validates an owner and wraps it with its fence.
    pub fn new(owner: impl Into<String>, fence: u64) -> Result<Self, LeaseParseError> {
        let owner = owner.into();
        let ok = !owner.is_empty()
            && owner.len() <= MAX_OWNER_LEN
            && owner.chars().all(|c| is_id_char(c) || c == ':');
        if ok {
            Ok(Self { owner, fence })
        } else {
            Err(LeaseParseError::BadOwner)
        }
    }

    /// Parses `<owner>:<fence>`; the owner may itself contain colons.
    pub fn parse(s: &str) -> Result<Self, LeaseParseError> {
        let (owner, fence) = s.rsplit_once(':').ok_or(LeaseParseError::BadToken)?;
        if fence.is_empty() || !fence.bytes().all(|b| b.is_ascii_digit()) {
            return Err(LeaseParseError::BadToken);
        }
        let fence = fence.parse().map_err(|_| LeaseParseError::BadToken)?;
        Self::new(owner, fence)
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    pub fn fence(&self) -> u64 {
        self.fence
    }
}

impl fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.owner, self.fence)
    }
}

impl fmt::Debug for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LeaseToken({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_owner_with_colons() {
        let t = LeaseToken::parse("run:42:7").unwrap();
        assert_eq!((t.owner(), t.fence()), ("run:42", 7));
        assert_eq!(t.to_string(), "run:42:7");
    }

    #[test]
    fn rejects_bad_tokens() {
        for bad in [
            "",
            "run",
            "run:",
            ":3",
            "run:-1",
            "run:1x",
            "r un:1",
            "run:99999999999999999999",
        ] {
            assert!(LeaseToken::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn bot_ids_are_path_safe() {
        assert!(BotId::new("bot-1.a_b").is_ok());
        for bad in ["", ".", "..", "a/b", "a b", &"x".repeat(129)] {
            assert!(BotId::new(bad).is_err(), "{bad:?} accepted");
        }
    }
}
