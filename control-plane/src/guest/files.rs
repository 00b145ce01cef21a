//! File reads and writes: a typed header, then the file's bytes.

use super::raw::{ByteStream, SendError};
use super::Guest;
use crate::tunnel::TunnelError;
use bytes::Bytes;
use futures_util::Stream;
use gateway_proto::{ReadFile, Reply, WriteFile};

impl Guest {
    /// Reads a file: its size, then exactly that many bytes. A size over the request's
    /// `max_bytes` is a protocol error (the guest is untrusted).
    pub async fn read_file(&self, req: ReadFile) -> Result<(u64, ByteStream), TunnelError> {
        let max_bytes = req.max_bytes;
        let mut op = self.open(req).await?;
        let size = self.answer::<ReadFile>(&mut op.rx).await?;
        if size > max_bytes {
            return Err(self.protocol(Reply::ReadStart { size }));
        }
        Ok((size, ByteStream::new(self.computer(), op, size)))
    }

    /// Writes a file of the request's `size` from `body`; the guest commits it only once every
    /// byte arrived. Answers the size written.
    pub async fn write_file<E>(
        &self,
        req: WriteFile,
        body: impl Stream<Item = Result<Bytes, E>>,
    ) -> Result<u64, SendError<E>> {
        let size = req.size;
        self.send_body(req, size, body).await
    }
}
