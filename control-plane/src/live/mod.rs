//! Live screens and terminals, the control plane's side (docs/screens.md#live-views,
//! docs/lifecycle.md#takeover).
//!
//! A person opens a sealed capability URL ([`seal`]); the control plane checks it against the
//! database ([`authority`]), opens a `Connect` operation stream to the guest and relays the
//! browser's websocket to it ([`relay`]), re-checking once a second. Takeover, its release and
//! `waiting_takeover` are decided in [`authority`] and stored in [`store`]. The pages (noVNC
//! viewer, xterm.js terminal) and their assets are [`pages`]. The guest owns the sockets, the
//! view-only filter and the shells; this module never sees a display or a PTY.

pub mod authority;
pub mod config;
pub mod pages;
pub mod relay;
pub mod revoke;
pub mod seal;
pub mod store;
pub mod streams;

use crate::db::Db;
use std::sync::Arc;

/// The live state the core keeps: the database table and the open streams.
pub struct LiveState {
    pub store: store::LiveStore,
    pub streams: Arc<streams::Streams>,
}

impl LiveState {
    pub fn new(db: Db) -> Self {
        Self {
            store: store::LiveStore::new(db),
            streams: streams::Streams::new(),
        }
    }
}

pub use config::{LiveArgs, LiveConfig};

/// What the HTTP side of live screens needs: the sealing key, where the page assets are, and
/// the settings (the control lease's TTL).
#[derive(Debug, Clone)]
pub struct LiveHttp {
    pub sealer: seal::Sealer,
    pub pages: pages::PagesConfig,
    pub config: LiveConfig,
}

impl LiveHttp {
    pub fn new(key: &[u8; 32], pages: pages::PagesConfig, config: LiveConfig) -> Self {
        Self {
            sealer: seal::Sealer::new(key),
            pages,
            config,
        }
    }
}
