//! `rakazo`: the control plane and its CLI.
//!
//! Thin by design: authentication, fenced leases, the computer registry, the HTTP API and the
//! QUIC tunnel to the guests. Everything that happens inside a computer is done by its guest.

pub mod activity;
pub mod api;
pub mod claims;
pub mod cli;
pub mod client;
pub mod clock;
pub mod cluster;
pub mod computers;
pub mod core;
pub mod db;
pub mod guest;
pub mod heap;
pub mod homes;
pub mod idle;
pub mod image;
pub mod jobs;
pub mod lease;
pub mod live;
pub mod mcp;
pub mod metrics;
pub mod network;
pub mod pool_refill;
pub mod pools;
pub mod preview;
pub mod provider_set;
pub mod recordings;
pub mod route;
pub mod schema;
pub mod secrets;
pub mod serve;
pub mod services;
pub mod tls;
pub mod tokens;
pub mod tunnel;
