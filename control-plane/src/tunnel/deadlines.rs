//! The deadlines of one operation stream, derived from its request.

use super::TunnelError;
use gateway_proto::desktop::Action;
use gateway_proto::Request;
use std::future::Future;
use std::time::Duration;

/// The guest's own bound on one browser_act step (`pagebrowser::STEP_TIMEOUT`).
const PAGE_STEP_ALLOWANCE: Duration = Duration::from_secs(10);

/// The deadlines of one operation stream; `None` waits as long as the peer keeps the
/// connection up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// For each typed frame (`recv`, `expect`).
    pub reply: Option<Duration>,
    /// For each next piece of raw bytes (`read_raw`).
    pub raw_in: Option<Duration>,
    /// For each write the guest must take (`send`, `write_raw`).
    pub out: Option<Duration>,
}

impl Deadlines {
    /// Every wait bounded by `d`.
    pub fn all(d: Duration) -> Self {
        Self {
            reply: Some(d),
            raw_in: Some(d),
            out: Some(d),
        }
    }

    /// An exec with `timeout_ms`: a command may be quiet for as long as it may run (the guest
    /// ends it at its timeout, then answers within `base`); stdin is taken only as fast as the
    /// command reads it.
    pub fn for_exec(timeout_ms: Option<u64>, base: Duration) -> Self {
        let bound = timeout_ms.map(|ms| Duration::from_millis(ms) + base);
        Self {
            reply: bound,
            raw_in: bound,
            out: None,
        }
    }

    /// What `req` may legitimately take, given the base timeout.
    pub fn for_request(req: &Request, base: Duration) -> Self {
        match req {
            Request::Exec(r) => Self::for_exec(r.timeout_ms, base),
            // Until `Opened`; then a live stream is quiet while the screen is (the relay clears
            // nothing: raw bytes have no deadline here, revocation closes the stream).
            // A preview's connection, likewise: an open websocket or a server-sent event stream
            // is quiet as long as its app is (the preview's own bounds close it).
            Request::Connect(_) | Request::PortConnect(_) => Self {
                reply: Some(base),
                raw_in: None,
                out: None,
            },
            Request::Act(r) => {
                let waits: u64 = r
                    .actions
                    .iter()
                    .map(|a| match a {
                        Action::Wait { ms } => u64::from(*ms),
                        _ => 0,
                    })
                    .sum();
                let settle = u64::from(r.settle_ms.unwrap_or(0));
                Self::all(base + Duration::from_millis(waits.saturating_add(settle)))
            }
            Request::PageAct(r) => {
                let steps = u32::try_from(r.steps.len()).unwrap_or(u32::MAX);
                Self::all(base + PAGE_STEP_ALLOWANCE.saturating_mul(steps))
            }
            _ => Self::all(base),
        }
    }
}

/// Awaits `fut` for at most `d` (forever with `None`).
pub(super) async fn within<T>(
    d: Option<Duration>,
    computer: &str,
    fut: impl Future<Output = T>,
) -> Result<T, TunnelError> {
    match d {
        None => Ok(fut.await),
        Some(d) => tokio::time::timeout(d, fut)
            .await
            .map_err(|_| TunnelError::Timeout {
                computer: computer.to_owned(),
                waited: d,
            }),
    }
}
