//! A detached process's output stream on the guest (`ProcLogs`, `ProcAttach`): its `Opened`
//! answer, then output frames until it exits (or, without follow, until the output kept so
//! far is sent); an attach also carries stdin the other way.

use super::Guest;
use crate::tunnel::{OpReceiver, OpSender, TunnelError};
use gateway_proto::process::{ProcAttach, ProcEvent, ProcLogs};

/// An open output stream: where it starts, and its events.
pub struct ProcOutput {
    /// The offset of the first byte that follows.
    pub offset: u64,
    /// Bytes asked for that are no longer kept.
    pub dropped: u64,
    pub events: ProcEvents,
    /// An attach's stdin.
    pub stdin: Option<ProcStdin>,
}

/// The events after `Opened`: output, then `Exit` (or the end of the stream for a logs read
/// without follow).
pub struct ProcEvents {
    rx: OpReceiver,
}

/// An attached process's stdin.
pub struct ProcStdin {
    tx: OpSender,
}

impl Guest {
    /// Reads a process's output. A follow waits for output as long as the process lives (the
    /// tunnel's keepalive ends it with the connection); the `Opened` answer is bounded.
    pub async fn process_logs(&self, req: ProcLogs) -> Result<ProcOutput, TunnelError> {
        let follow = req.follow;
        let mut op = self.open(req).await?;
        let (offset, dropped) = self.answer::<ProcLogs>(&mut op.rx).await?;
        if follow {
            op.rx.set_deadlines(None, None);
        }
        Ok(ProcOutput {
            offset,
            dropped,
            events: ProcEvents { rx: op.rx },
            stdin: None,
        })
    }

    /// Attaches to a process: its output from now (or the request's offset) and its stdin.
    pub async fn process_attach(&self, req: ProcAttach) -> Result<ProcOutput, TunnelError> {
        let mut op = self.open(req).await?;
        let (offset, dropped) = self.answer::<ProcAttach>(&mut op.rx).await?;
        op.rx.set_deadlines(None, None);
        Ok(ProcOutput {
            offset,
            dropped,
            events: ProcEvents { rx: op.rx },
            stdin: Some(ProcStdin { tx: op.tx }),
        })
    }
}

impl ProcEvents {
    /// The next event; `None` when the guest finished its side.
    pub async fn next(&mut self) -> Result<Option<ProcEvent>, TunnelError> {
        self.rx.recv::<ProcEvent>().await
    }
}

impl ProcStdin {
    /// Bytes for the process's stdin.
    pub async fn write(&mut self, bytes: &[u8]) -> Result<(), TunnelError> {
        super::exec::write_stdin(&mut self.tx, bytes).await
    }

    /// Detaches: the process keeps running.
    pub fn detach(&mut self) {
        let _ = self.tx.finish();
    }
}
