//! System tests: real `rakazo serve`, real `rakazo-guest`, real QUIC on loopback, real databases.
//!
//! One test binary; each module is one capability. Every test starts its own [`tests::World`].

mod abuse;
mod activity;
mod browser_isolation;
mod cli;
mod console;
mod containment;
mod desktops;
mod docker;
mod eviction;
mod faults;
mod foundation;
mod grounding;
mod guest_idle;
mod hardening;
mod homes;
mod hostile_guest;
mod http_hardening;
mod idle;
mod image;
mod jobs;
mod kubernetes;
mod live;
mod lost;
mod mcp;
mod metrics;
mod openapi;
mod page_browser;
mod page_tools;
mod placement;
mod pools;
mod previews;
mod processes;
mod providers;
mod recordings;
mod replicas;
mod rfb_client;
mod sandbox_services;
mod secrets;
mod start_checks;
mod static_guest;
mod tokens;
mod tunnel_abuse;
mod tunnel_quic;
mod tunnel_tcp;
