//! The wire protocol between `rakazo-guest` and the control plane.
//!
//! This crate owns the message types, their encoding, the frame codec and the handshake; it does
//! no I/O, holds no clock and spawns nothing. The drivers (the guest's tunnel client and the
//! control plane's tunnel server) own sockets and time and feed bytes in and out of the types
//! here.
//!
//! # Transport shape
//!
//! The guest dials out over QUIC. On each connection:
//!
//! 1. The guest opens the first bidirectional stream, the *control stream*, and sends
//!    [`Hello`]. The control plane answers [`Welcome`] or [`Refused`] and closes on refusal.
//!    Afterwards the control stream carries [`ControlMsg`] in both directions.
//! 2. Every operation is its own bidirectional stream opened by the control plane, so a slow
//!    screenshot or a large file never holds up a keystroke. The first frame is a [`Request`].
//!    What follows depends on the request and is documented on each variant: typed frames
//!    ([`ExecInput`], [`ExecEvent`], [`Reply`]) or raw bulk bytes after a typed header.
//!
//! Every frame is `[len u32 big-endian][postcard payload]` with `len <= MAX_FRAME_LEN`; see
//! [`frame`]. Decoding never panics, whatever the input.

#![forbid(unsafe_code)]

pub mod desktop;
pub mod error;
pub mod frame;
pub mod handshake;
pub mod home;
pub mod lease;
pub mod live;
pub mod msg;
pub mod op;
pub mod page;
pub mod process;
pub mod recording;
pub mod secret;
pub mod termframe;
pub mod wire;

pub use frame::{decode, encode, encode_into, FrameDecoder, FrameError, MAX_CHUNK, MAX_FRAME_LEN};
pub use handshake::{
    negotiate, AgentHandshake, AgentOutcome, ControlHandshake, HandshakeEvent, Secret,
};
pub use lease::{BotId, LeaseParseError, LeaseToken};
pub use msg::*;
pub use op::{Op, Reply, Request, UnaryOp, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION};
