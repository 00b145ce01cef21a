//! `rakazo-guest`: the agent inside every computer.
//!
//! One static binary per computer. It dials out to the control plane over QUIC ([`tunnel`]) and
//! serves typed operations ([`ops`]): commands ([`exec`]) and files ([`home`]) inside the home,
//! and per-bot desktops ([`screens`]: an X display from [`display`] and a Chrome from
//! [`browser`] per bot), each checked against the bot's lease fence ([`fence`]) before anything
//! runs. `main.rs` only reads the configuration ([`config`]) and starts the tunnel.

pub mod activity;
pub mod browser;
pub mod clock;
pub mod config;
pub mod display;
pub mod exec;
pub mod fence;
pub mod gateway;
pub mod home;
pub mod homeio;
pub mod machine;
pub mod ops;
pub mod opstream;
pub mod orphans;
pub mod pagebrowser;
pub mod ports;
pub mod privilege;
pub mod procs;
pub mod screens;
pub mod secret_env;
pub mod tunnel;
