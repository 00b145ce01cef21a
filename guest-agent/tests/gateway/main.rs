//! The screen gateway against real desktops (Xvnc + Chromium), real shells on real PTYs, driven
//! as the control plane drives it: `Connect`/`Revoke` requests on QUIC streams (real QUIC on
//! loopback, served by the real `Ops` dispatch), then raw RFB or terminal frames.
//!
//! One Xvnc serves a desktop's view and control capabilities alike, with no view-only setting of
//! its own, so the gateway's RFB filter is the only thing that can stop a viewer's input. Nothing
//! sleeps to wait for readiness: every wait polls up to a generous deadline, and absence is
//! checked after a round trip through the same stream.

use anyhow::{anyhow, bail, Context, Result};
use gateway_proto::desktop::{ScreenInfo, ScreenRelease, ScreenRequest};
use gateway_proto::live::{
    CapabilityKind, ConnectRequest, RevokeRequest, RevokeScope, TerminalResume,
};
use gateway_proto::termframe::{encode_input, encode_resize};
use gateway_proto::wire::{RESET_PROTOCOL, RESET_REVOKED};
use gateway_proto::{BotId, ErrorCode, LeaseToken, Reply, Request, StartDir};
use guest_agent::gateway::capstream::{self, CapStream};
use guest_agent::gateway::rfb::client::RfbClient;
use guest_agent::gateway::GatewayConfig;
use guest_agent::home::Home;
use guest_agent::ops::Ops;
use guest_agent::screens::{Screens, ScreensConfig};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use x11rb::protocol::xproto::ConnectionExt as _;
use x11rb::wrapper::ConnectionExt as _;

mod clipboard;
mod guest;
mod rfb;
mod terminal;
use guest::Guest;

/// Bound on every single wait; generous for a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(25);

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> Result<T> {
    tokio::time::timeout(WAIT, fut)
        .await
        .map_err(|_| anyhow!("timed out after {WAIT:?} waiting for {what}"))
}

/// Polls `check` until it holds.
async fn eventually(what: &str, mut check: impl FnMut() -> Result<bool>) -> Result<()> {
    within(what, async {
        loop {
            if check()? {
                return Ok(());
            }
            tokio::time::sleep(POLL).await;
        }
    })
    .await?
}

type Stream = CapStream;

/// Reads `term` until `pattern` holds for what was read (kept in `seen`).
async fn read_until(
    term: &mut Stream,
    seen: &mut Vec<u8>,
    pattern: impl Fn(&str) -> bool,
) -> Result<String> {
    let mut buf = vec![0u8; 64 * 1024];
    within("terminal output", async {
        loop {
            let text = String::from_utf8_lossy(seen).into_owned();
            if pattern(&text) {
                return Ok(text);
            }
            let n = term.read(&mut buf).await?;
            if n == 0 {
                bail!("the terminal ended; output so far: {text:?}");
            }
            seen.extend_from_slice(&buf[..n]);
        }
    })
    .await?
}

/// Reads a stream to its end; returns the reset code (`None` for a clean finish).
async fn stream_end(stream: &mut Stream) -> Result<Option<u64>> {
    Ok(within("the stream's end", stream.read_to_end()).await??.1)
}
