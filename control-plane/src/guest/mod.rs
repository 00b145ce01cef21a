//! The typed guest client: besides `tunnel`, the only code that opens operation streams.
//!
//! A [`Guest`] is the connected guest of one computer. Every operation is a request type of
//! `gateway_proto::op` and goes through one method here, which owns every step of its stream:
//! sending the request, reading the answer through [`Op::read_frame`] (so which reply answers
//! which request is decided in gateway-proto alone), and what follows the answer. Unary
//! operations go through [`Guest::call`]; each streaming shape has its own method: [`Guest::exec`]
//! (events both ways), [`Guest::read_file`] and [`Guest::observe`]/[`Guest::act`] (exactly the
//! bytes announced, more is a protocol error that resets the stream), [`Guest::write_file`] and
//! [`Guest::import_home`] (exactly the bytes announced, to the guest), [`Guest::export_home`]
//! (bytes until the guest finishes) and [`Guest::connect`] (raw bytes both ways, for the live
//! relay).
//!
//! Failures are [`TunnelError`]s: the guest's refusal is `TunnelError::Guest`, an answer of the
//! wrong kind `TunnelError::Protocol`, and the transport's own failures say whether the outcome
//! is uncertain. Every wait is bounded by the tunnel's deadlines for the request
//! (`tunnel::Deadlines::for_request`). Whether the computer runs and whether the lease a request
//! acts under is live are the core's to check before it hands out a `Guest`
//! (`Core::guest_for`); this module knows nothing of computers, leases or HTTP.

mod exec;
mod files;
mod home;
mod live;
mod port;
mod process;
mod raw;
mod screen;

pub use exec::{Exec, ExecEvents, ExecStdin};
pub use home::ExportBytes;
pub use live::{ConnectError, LiveStream};
pub use port::PortStream;
pub use process::{ProcEvents, ProcOutput, ProcStdin};
pub use raw::{ByteError, ByteStream, SendError};
pub use screen::Observation;

use crate::cluster::peer::{PeerError, RESOLVE_POLL};
use crate::cluster::Cluster;
use crate::tunnel::{GuestConn, OpReceiver, OpStream, TunnelError};
use gateway_proto::op::Answered;
use gateway_proto::page::{NavigateRequest, PageActRequest, SnapshotRequest};
use gateway_proto::{Op, Reply, Request, UnaryOp};
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, warn};

/// The connected guest of one computer. Cheap to clone.
#[derive(Clone)]
pub struct Guest {
    link: Link,
}

/// How a guest's streams are opened.
#[derive(Clone)]
enum Link {
    /// Its connection to this control plane.
    Local(Arc<GuestConn>),
    /// Wherever in the cluster it is connected when a stream opens (`crate::cluster`).
    Cluster(Arc<Followed>),
}

/// A guest found through the cluster at every open: connected here, or through the replica it
/// is connected to, waiting up to `wait` for it to be connected anywhere reachable.
struct Followed {
    cluster: Arc<Cluster>,
    computer: String,
    refusable: bool,
    wait: Duration,
}

impl From<Arc<GuestConn>> for Guest {
    fn from(conn: Arc<GuestConn>) -> Self {
        Self {
            link: Link::Local(conn),
        }
    }
}

impl Guest {
    /// `computer`'s guest wherever in the cluster it is connected when an operation opens its
    /// stream: here, or through its replica (nothing is sent before that replica has the
    /// guest, so looking again is no retry). Waits up to `wait` for it to be connected at a
    /// reachable replica. `refusable`: refused while idle suspension claims the computer where
    /// its guest is connected (an API operation; not the end of a run, not a revocation).
    pub fn followed(
        cluster: Arc<Cluster>,
        computer: &str,
        refusable: bool,
        wait: Duration,
    ) -> Self {
        Self {
            link: Link::Cluster(Arc::new(Followed {
                cluster,
                computer: computer.to_owned(),
                refusable,
                wait,
            })),
        }
    }

    /// The computer this guest belongs to.
    pub fn computer(&self) -> &str {
        match &self.link {
            Link::Local(conn) => conn.computer(),
            Link::Cluster(f) => &f.computer,
        }
    }

    /// Runs a unary operation: its request, then its one answer.
    pub async fn call<O: UnaryOp>(&self, op: O) -> Result<O::Reply, TunnelError> {
        let mut stream = self.open(op).await?;
        self.answer::<O>(&mut stream.rx).await
    }

    /// Opens the operation's stream and sends its request.
    async fn open<O: Op>(&self, op: O) -> Result<OpStream, TunnelError> {
        let req = op.into();
        match &self.link {
            Link::Local(conn) => conn.open(&req).await,
            Link::Cluster(f) => f.open(&req).await,
        }
    }

    /// Reads the operation's answer frame: its typed reply, or why it is none.
    async fn answer<O: Op>(&self, rx: &mut OpReceiver) -> Result<O::Reply, TunnelError> {
        let frame = rx.expect::<O::Frame>().await?;
        O::read_frame(frame).map_err(|a| answered::<O>(self.computer(), a))
    }

    /// The protocol error for an answer of `detail` (a `Debug` rendering) where it had no
    /// business to be.
    fn protocol(&self, detail: impl std::fmt::Debug) -> TunnelError {
        TunnelError::Protocol {
            computer: self.computer().to_owned(),
            detail: format!("unexpected reply {detail:?}"),
        }
    }
}

impl Followed {
    async fn open(&self, req: &Request) -> Result<OpStream, TunnelError> {
        let until = tokio::time::Instant::now() + self.wait;
        loop {
            if let Some(conn) = self.cluster.registry.get(&self.computer) {
                return conn.open(req).await;
            }
            match self.cluster.where_is_recent(&self.computer).await {
                Ok(Some(r)) if r.id != self.cluster.me().id => {
                    match self
                        .cluster
                        .peers
                        .open(&r, &self.computer, self.refusable, req)
                        .await
                    {
                        Ok(opened) => {
                            if opened.is_err() {
                                self.cluster.forget_link(&self.computer);
                            }
                            return opened;
                        }
                        Err(PeerError::Suspending) => {
                            self.cluster.forget_link(&self.computer);
                            return Err(TunnelError::Suspending(self.computer.clone()));
                        }
                        // Nothing was sent: look again (in the database) until the wait
                        // is over.
                        Err(e) => {
                            self.cluster.forget_link(&self.computer);
                            debug!(computer_id = %self.computer, error = %e, "guest not reachable through its replica yet")
                        }
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    warn!(computer_id = %self.computer, error = %e, "could not look up the guest's replica")
                }
            }
            if tokio::time::Instant::now() >= until {
                return Err(TunnelError::NotConnected(self.computer.clone()));
            }
            self.cluster.registry.changed_or(RESOLVE_POLL).await;
        }
    }
}

/// The page tools: their answers may carry page text (a fill may carry a saved login's secret).
const PAGE_OPS: [&str; 3] = [
    NavigateRequest::NAME,
    SnapshotRequest::NAME,
    PageActRequest::NAME,
];

/// The error for a first frame of `O` that is not its answer: the guest's refusal as it is, any
/// other frame a protocol error naming it. A page tool's error names only the reply's kind, so
/// no page text reaches the logs at error level.
fn answered<O: Op>(computer: &str, a: Answered) -> TunnelError {
    match a {
        Answered::Refused(e) => TunnelError::Guest(e),
        Answered::Unexpected(reply) => TunnelError::Protocol {
            computer: computer.to_owned(),
            detail: if PAGE_OPS.contains(&O::NAME) {
                format!("unexpected {} reply", page_reply_kind(&reply))
            } else {
                format!("unexpected reply {reply:?}")
            },
        },
    }
}

/// The kind of a page tool's unexpected reply: never its text.
fn page_reply_kind(reply: &Reply) -> &'static str {
    match reply {
        Reply::Snapshot(_) => "snapshot",
        Reply::PageActFailed(_) => "page act failure",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_proto::page::{PageActFailure, Snapshot};
    use gateway_proto::{ErrorCode, ListFiles, OpError};

    /// The error `O` gets for `reply`, which must not be its answer.
    fn unexpected<O: Op<Frame = Reply>>(reply: Reply) -> String {
        match O::read_frame(reply) {
            Ok(_) => panic!("{} took the reply as its answer", O::NAME),
            Err(a) => answered::<O>("c-1", a).to_string(),
        }
    }

    #[test]
    fn a_refusal_is_the_guests_error_and_another_reply_a_protocol_error() {
        let refusal = OpError::new(ErrorCode::NotFound, "no such file");
        let e = answered::<ListFiles>("c-1", Answered::Refused(refusal.clone()));
        assert!(matches!(e, TunnelError::Guest(ref r) if *r == refusal));
        assert!(!e.is_uncertain());
        assert_eq!(
            unexpected::<ListFiles>(Reply::Pong),
            "computer c-1 broke the protocol: unexpected reply Pong"
        );
    }

    #[test]
    fn a_page_tools_wrong_reply_names_only_its_kind() {
        let failure = PageActFailure {
            completed: 0,
            uncertain: false,
            error: "secret page text".into(),
        };
        let msg = unexpected::<NavigateRequest>(Reply::PageActFailed(failure));
        assert_eq!(
            msg,
            "computer c-1 broke the protocol: unexpected page act failure reply"
        );
        let snapshot = Snapshot {
            url: "https://a.test/".into(),
            title: "secret title".into(),
            elements: vec![],
            tree: "secret tree".into(),
        };
        assert_eq!(page_reply_kind(&Reply::Snapshot(snapshot)), "snapshot");
        assert!(unexpected::<SnapshotRequest>(Reply::Pong).ends_with("unexpected other reply"));
    }
}
