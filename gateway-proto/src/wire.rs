//! QUIC stream reset codes of operation streams: the application error code a peer gives
//! `reset` (ending its sending side early) or `stop` (refusing to read more of the other side).
//!
//! A stream that ends normally is finished, not reset; code 0 means "no error" (a closed relay,
//! a client that went away). The codes here are wire values: both ends must agree on them and
//! `tests/golden.rs` pins each number. A receiver never trusts the bytes of a stream that ended
//! with one of them as a complete answer.

/// The stream broke the protocol or cannot keep its promise. Sent by either end: the control
/// plane stops a guest stream that sent a malformed frame; the guest stops a malformed request,
/// resets a file read whose file shrank under it (the announced size cannot be met) and resets a
/// live stream whose client broke RFB. The receiver concludes the stream is void: whatever it
/// got so far is incomplete and the operation failed.
pub const RESET_PROTOCOL: u32 = 3;

/// The operation was abandoned. The control plane sends it when it gives up on an operation (its
/// client went away, or the guest missed a deadline): the guest stops the work (an exec is
/// killed) and drops the stream. The guest sends it when a home export fails midway: the
/// control plane concludes the archive is incomplete and discards it.
pub const RESET_ABORTED: u32 = 4;

/// The capability was revoked. Sent by the guest on a live view, control or terminal stream when
/// a `Revoke` (or the end of the control lease) removed the capability: the control plane
/// concludes the stream ended by policy, not by failure, and closes its client's connection.
/// Sent by the control plane on a live stream whose capability no longer holds (revoked,
/// expired, control released or lapsed): the guest ends what serves it at once (a terminal's
/// shell does not wait for its page to reconnect).
pub const RESET_REVOKED: u32 = 5;
