//! RFB (VNC) for the view and control capabilities: the server behind each capability socket
//! ([`server`]: the desktop's Xvnc, reached through a socket of the capability's own), the
//! client→server filter that enforces a capability's policy ([`filter`]), and a small client for
//! tests and benchmarks ([`client`]).

pub mod client;
pub mod filter;
pub mod server;

pub use filter::{ClientFilter, FilterError, Input, Policy};
pub use server::{RfbServer, RfbServerError, RfbServerSpec};
