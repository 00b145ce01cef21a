//! The real guest tunnel against a fake control plane: real QUIC on loopback, the real protocol.
//!
//! Each test runs `guest_agent::tunnel::run` in a task, pointed at a quinn server endpoint on
//! 127.0.0.1:0 with a fresh self-signed certificate whose SHA-256 the guest pins. The fake control
//! plane accepts the guest's connection, answers the hello with `ControlHandshake`, and then acts
//! as the control plane does: lease pushes on the control stream, one stream per operation.
//!
//! Nothing sleeps to wait for readiness. Lease pushes race operation streams (they travel on
//! different streams), so every push is followed by a control-stream ping: the guest handles
//! control messages in order, so its pong proves the push was applied. Every network wait is
//! bounded by a timeout.

#[path = "../common/mod.rs"]
mod common;

use anyhow::{anyhow, bail, ensure, Context, Result};
use common::{identity, server, tcp_server, ws_server};
use gateway_proto::{
    encode, BotId, BotLease, ControlHandshake, ControlMsg, ErrorCode, ExecEvent, ExecRequest,
    FrameDecoder, HandshakeEvent, LeaseToken, OpError, ReadFile, Reply, Request,
};
use guest_agent::config::Config;
use guest_agent::home::Home;
use guest_agent::ops::Ops;
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

mod connect;
mod harness;
mod leases;
use harness::{frames, read_to_end, Harness, Over};

const COMPUTER_ID: &str = "c-tunnel-test";
/// Bound on every single network wait; generous for a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(15);

/// Awaits `fut`, failing with `what` after [`WAIT`].
async fn within<T>(what: &str, fut: impl IntoFuture<Output = T>) -> Result<T> {
    tokio::time::timeout(WAIT, fut)
        .await
        .map_err(|_| anyhow!("timed out after {WAIT:?} waiting for {what}"))
}

fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("guest_agent=debug"))
        .with_test_writer()
        .try_init();
}

fn bot_lease(lease: Option<(&str, &str)>) -> Result<Option<BotLease>> {
    lease
        .map(|(bot, token)| {
            Ok(BotLease {
                bot: BotId::new(bot)?,
                token: LeaseToken::parse(token)?,
            })
        })
        .transpose()
}

/// Asserts the command ran: `Started`, then (output), then `Exit { code: 0 }`.
fn assert_ran(events: &[ExecEvent]) {
    assert!(
        matches!(events.first(), Some(ExecEvent::Started { .. })),
        "{events:?}"
    );
    assert!(
        matches!(events.last(), Some(ExecEvent::Exit { code: 0, .. })),
        "{events:?}"
    );
}

/// Asserts the command was refused for a stale lease and nothing started.
fn assert_stale(events: &[ExecEvent]) {
    assert!(
        matches!(
            events,
            [ExecEvent::Failed(OpError {
                code: ErrorCode::StaleLease,
                ..
            })]
        ),
        "expected only Failed(StaleLease), got {events:?}"
    );
}
