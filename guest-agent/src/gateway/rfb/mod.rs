//! RFB (VNC) for the view and control capabilities: the server behind each socket
//! ([`x11vnc`], replaceable by a native server with the same small API), the client→server
//! filter that enforces a capability's policy ([`filter`]), and a small client for tests and
//! benchmarks ([`client`]).

pub mod client;
pub mod filter;
pub mod x11vnc;

pub use filter::{ClientFilter, FilterError, Policy};
pub use x11vnc::{RfbInput, RfbServer, RfbServerError, RfbServerSpec};
