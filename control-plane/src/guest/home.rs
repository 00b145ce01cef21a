//! Home export and import: the archive's bytes after a typed header, or before a typed answer.

use super::raw::SendError;
use super::Guest;
use crate::tunnel::{OpReceiver, OpSender, TunnelError};
use bytes::Bytes;
use futures_util::Stream;
use gateway_proto::home::{ExportStart, HomeExportRequest, HomeImportRequest, Imported};

/// An export's archive bytes, until the guest finishes its side.
pub struct ExportBytes {
    // Kept open until the reader is done with the archive.
    tx: OpSender,
    rx: OpReceiver,
}

impl Guest {
    /// Exports the home: the guest's estimate, then the archive.
    pub async fn export_home(
        &self,
        req: HomeExportRequest,
    ) -> Result<(ExportStart, ExportBytes), TunnelError> {
        let mut op = self.open(req).await?;
        let start = self.answer::<HomeExportRequest>(&mut op.rx).await?;
        op.rx.start_raw();
        Ok((
            start,
            ExportBytes {
                tx: op.tx,
                rx: op.rx,
            },
        ))
    }

    /// Imports an archive of the request's `size` from `archive`; the guest swaps it in only
    /// once all of it checked out.
    pub async fn import_home<E>(
        &self,
        req: HomeImportRequest,
        archive: impl Stream<Item = Result<Bytes, E>>,
    ) -> Result<Imported, SendError<E>> {
        let size = req.size;
        self.send_body(req, size, archive).await
    }
}

impl ExportBytes {
    /// Up to `max` archive bytes; `None` at its end. Fails with `TunnelError::Timeout` when
    /// nothing arrives within the deadline (an export that stopped making progress).
    pub async fn read(&mut self, max: usize) -> Result<Option<Bytes>, TunnelError> {
        self.rx.read_raw(max).await
    }

    /// Stops the export: the guest stops packing at once.
    pub fn abort(&mut self) {
        self.tx.abort();
        self.rx.abort();
    }
}
