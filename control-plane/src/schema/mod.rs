//! The bodies of the `/v1` HTTP API as plain types, shared by the API (which serializes its
//! answers and parses requests with them) and the CLI (which builds requests and reads answers
//! with them), so the two cannot drift apart.
//!
//! One module per area of the API, as the CLI is split: [`activity`] (the feed), [`computer`],
//! [`exec`] (the request and its NDJSON event lines), [`files`], [`screen`] (desktops, observe
//! and act, live and terminal URLs, takeover), [`browser`], [`lease`], [`mcp`] (session
//! tokens), [`home`], [`job`] (maintenance jobs), [`error`] (the one error body) and [`code`]
//! (its codes, each with its status: not a body, spelled by `ApiCode::as_str`). Every type
//! derives both `Serialize` and `Deserialize`; request bodies deny unknown fields, answers do
//! not (a newer server may add one). An optional field the API leaves out when unset says so
//! with `skip_serializing_if`; one it sends as `null` has no such attribute.
//!
//! Only shapes live here: checks and defaults that need the domain (bounds, lease parsing,
//! policies) stay with the handlers, whose error texts are part of the contract. Nothing here
//! imports another module of this crate.

pub mod activity;
pub mod browser;
pub mod code;
pub mod computer;
pub mod error;
pub mod exec;
pub mod files;
pub mod home;
pub mod job;
pub mod lease;
pub mod mcp;
pub mod network;
pub mod pool;
pub mod preview;
pub mod process;
pub mod recording;
pub mod screen;
pub mod secret;
pub mod service;
pub mod token;

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

/// The body of a request that takes no fields: `{}` (takeover, release-control).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

/// `GET /v1/health` (no token needed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Health {
    pub ok: bool,
}

/// The JSON string `value` serializes to, to print it as the API spells it (a field-less enum's
/// name: `ComputerState::Running` is `running`); empty when it is not a string.
pub fn wire_name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => String::new(),
    }
}
