//! Live screens and terminals (docs/screens.md#live-views, #terminal): the messages the control
//! plane sends to open a capability's stream on the guest and to revoke a bot's capabilities.
//!
//! After [`crate::Request::Connect`] is answered with [`crate::Reply::Opened`], the stream
//! carries raw bytes both ways until either side finishes it: RFB for `View` and `Control`
//! (client bytes first go through the guest's view-only filter for `View`), and for `Terminal`
//! the terminal's client frames one way and raw PTY bytes the other.

use crate::home::StartDir;
use crate::lease::BotId;
use serde::{Deserialize, Serialize};

/// Longest control-lease id accepted on the wire.
pub const MAX_CONTROL_LEASE_ID_LEN: usize = 64;
/// Longest terminal session key accepted on the wire.
pub const MAX_TERMINAL_KEY_LEN: usize = 64;

/// What a capability allows (the policy sealed into its URL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CapabilityKind {
    /// Watch the bot's desktop; every input message from the client is dropped by the guest.
    View,
    /// Watch and drive the bot's desktop (only under the user's control lease).
    Control,
    /// A shell under the user's control lease: a fresh one, or the one a dropped connection
    /// left (see [`TerminalResume`]).
    Terminal,
}

impl CapabilityKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::View => "view",
            Self::Control => "control",
            Self::Terminal => "terminal",
        }
    }
}

/// Open one connection to a bot's view, control or terminal capability.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectRequest {
    pub bot: BotId,
    pub kind: CapabilityKind,
    /// The user's control lease (required for `Control` and `Terminal`): terminals are grouped
    /// by it, and revoking it stops them. At most [`MAX_CONTROL_LEASE_ID_LEN`] bytes of
    /// `[A-Za-z0-9_-]`.
    pub control_lease: Option<String>,
    /// Where a terminal's shell starts (ignored for `View` and `Control`).
    pub start: StartDir,
    /// How a terminal's shell is found again after a dropped connection (`Terminal` only;
    /// `None`: a fresh shell that ends with its connection).
    pub terminal: Option<TerminalResume>,
}

/// The key a terminal's shell is kept under while its connection is away
/// (docs/screens.md#reconnecting), and whether this connection asks for it back.
///
/// The control plane derives the key from the capability URL and the page's own session id, so
/// only the page that opened a shell, through the same URL, finds it again; the guest looks it up
/// only among the terminals of the same bot and control lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalResume {
    /// 1 to [`MAX_TERMINAL_KEY_LEN`] characters of `[A-Za-z0-9_-]`.
    pub key: String,
    /// The page lost its connection and asks for its shell again: when it is gone (the grace
    /// period passed, the guest restarted) the fresh shell says so.
    pub resume: bool,
}

/// Which of a bot's capabilities to revoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RevokeScope {
    /// Control and terminal (the control lease ended): views stay.
    Control,
    /// Everything: view, control and terminal.
    All,
}

/// Revoke a bot's capabilities on the guest: remove the mappings, disconnect clients, stop the
/// transports, in that order (docs/screens.md#teardown), and remove terminal session files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokeRequest {
    pub bot: BotId,
    pub scope: RevokeScope,
}

/// Checks a control-lease id as the guest and control plane both require it.
pub fn valid_control_lease_id(id: &str) -> bool {
    valid_id(id, MAX_CONTROL_LEASE_ID_LEN)
}

/// Checks a terminal session key ([`TerminalResume::key`]).
pub fn valid_terminal_key(key: &str) -> bool {
    valid_id(key, MAX_TERMINAL_KEY_LEN)
}

fn valid_id(id: &str, max: usize) -> bool {
    !id.is_empty()
        && id.len() <= max
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Open a TCP connection to a port on the computer's own loopback, for a preview URL
/// (docs/previews.md). After [`crate::Reply::Opened`] the stream carries the connection's bytes
/// both ways, each side finishing its direction when its peer does; a refusal (`NotFound`:
/// nothing listens there; `BadRequest`: port 0; `Busy`: too many open) comes instead.
///
/// The guest connects from inside the computer, so "loopback" is the computer's own: the control
/// plane only asks where the computer has a network of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortConnect {
    /// 1 to 65535.
    pub port: u16,
}
