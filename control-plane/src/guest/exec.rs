//! A command on the guest: its first event, then stdin one way and events the other.

use super::Guest;
use crate::tunnel::{OpReceiver, OpSender, TunnelError};
use gateway_proto::{ExecEvent, ExecInput, ExecRequest, MAX_CHUNK};

/// A command the guest took: `first` is `Started`, or `Exit` for one refused with an exit code
/// (a bad working directory); a refusal before anything ran is the call's error instead.
pub struct Exec {
    pub first: ExecEvent,
    pub stdin: ExecStdin,
    pub events: ExecEvents,
}

/// The command's input side.
pub struct ExecStdin {
    tx: OpSender,
}

/// The command's events after the first, ending with `Exit` or `Failed`.
pub struct ExecEvents {
    rx: OpReceiver,
}

impl Guest {
    /// Runs a command: sends the request and reads its first event.
    pub async fn exec(&self, req: ExecRequest) -> Result<Exec, TunnelError> {
        let mut op = self.open(req).await?;
        let first = self.answer::<ExecRequest>(&mut op.rx).await?;
        Ok(Exec {
            first,
            stdin: ExecStdin { tx: op.tx },
            events: ExecEvents { rx: op.rx },
        })
    }
}

impl ExecStdin {
    /// Sends bytes for the command's stdin, in frames of at most [`MAX_CHUNK`].
    pub async fn write(&mut self, bytes: &[u8]) -> Result<(), TunnelError> {
        write_stdin(&mut self.tx, bytes).await
    }

    /// Ends the command's stdin.
    pub async fn close(&mut self) -> Result<(), TunnelError> {
        self.tx.send(&ExecInput::CloseStdin).await
    }

    /// Whoever asked for the command went away: the guest aborts it (exit 130) and sees our
    /// side reset at once.
    pub async fn abort(&mut self) {
        let _ = self.tx.send(&ExecInput::Abort).await;
        self.tx.abort();
    }

    /// The command ended: ends our side of the stream.
    pub fn finish(&mut self) {
        let _ = self.tx.finish();
    }
}

impl ExecEvents {
    /// The next event; `None` when the guest finished its side without one.
    pub async fn next(&mut self) -> Result<Option<ExecEvent>, TunnelError> {
        self.rx.recv::<ExecEvent>().await
    }
}

/// Sends `bytes` as stdin frames of at most [`MAX_CHUNK`] (an exec's, an attached process's).
pub(super) async fn write_stdin(tx: &mut OpSender, bytes: &[u8]) -> Result<(), TunnelError> {
    for chunk in bytes.chunks(MAX_CHUNK) {
        tx.send(&ExecInput::Stdin(chunk.to_vec().into())).await?;
    }
    Ok(())
}
